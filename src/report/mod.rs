//! `itermem report`: one self-contained HTML page about a run, from its recording and, where
//! given, its statistics (`--stats`) and its swap plan (`--plan-out`).
//!
//! The page must open from disk, offline, years later: it loads nothing (no CDN, no fonts),
//! its script and style are inlined, and the data is a JSON block the script draws as SVG.
//! Everything is aggregated here, in Rust, before it is embedded ([`timeline`]'s bounds), so
//! the page's size and drawing time do not grow with the recording: the 51 MB profiler
//! recording of `../shared/real-traces` makes a page of the same order as a toy run's.
//!
//! Parts, one job each: [`source`] reads the recording into one list of access events,
//! [`timeline`] aggregates it, [`schedule`] places the plan's copies on it, [`html`] writes the
//! page. Where the run records nothing for a part (no statistics given, no swap plan, a format
//! without addresses or kernels), the page says so in that part's place rather than leaving it
//! out, so a reader knows the difference between "nothing happened" and "not recorded".

mod html;
pub mod schedule;
pub mod source;
#[cfg(test)]
mod tests;
pub mod timeline;

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use crate::analysis::Iteration;
use crate::import::ImportOptions;

pub use source::SourceError;

/// What a report is made from.
#[derive(Clone, Debug)]
pub struct Inputs<'a> {
    pub recording: &'a Path,
    /// The statistics file (`itermem run --stats`, `ITERMEM_STATS`).
    pub stats: Option<&'a Path>,
    /// The swap plan (`itermem run --plan-out`, `itermem plan --json`).
    pub plan: Option<&'a Path>,
    pub import: ImportOptions,
}

/// Why a report cannot be made.
#[derive(Debug)]
pub enum ReportError {
    Source(SourceError),
    /// A statistics or plan file that cannot be read or is not what `what` names.
    Json {
        path: PathBuf,
        what: &'static str,
        problem: String,
    },
}

impl fmt::Display for ReportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReportError::Source(err) => err.fmt(f),
            ReportError::Json {
                path,
                what,
                problem,
            } => write!(f, "{}: not {what}: {problem}", path.display()),
        }
    }
}

impl std::error::Error for ReportError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            // Transparent, as `SourceError` is.
            ReportError::Source(err) => err.source(),
            ReportError::Json { .. } => None,
        }
    }
}

/// Everything the page shows. The statistics and the plan are kept whole for the tables; the
/// rest is what the script draws, embedded as JSON.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub title: String,
    pub format: String,
    /// Whether times are nanoseconds (else event indices).
    pub timed: bool,
    pub note: Option<String>,
    pub timeline: timeline::Timeline,
    pub iteration: Option<Iteration>,
    /// Swap mode's limit (statistics `swap.limit_bytes`).
    pub limit_bytes: Option<u64>,
    /// The pool's footprint (statistics `pool.pool_bytes`) and the time it serves from.
    pub pool: Option<PoolLine>,
    pub schedule: Option<schedule::Schedule>,
    #[serde(skip)]
    pub stats: Option<Value>,
    #[serde(skip)]
    pub plan: Option<Value>,
    /// The recording's size on disk.
    pub recording_bytes: u64,
}

#[derive(Clone, Copy, Debug, Serialize)]
pub struct PoolLine {
    pub bytes: u64,
    pub from: u64,
}

/// Reads the inputs and aggregates them.
pub fn build(inputs: &Inputs) -> Result<Report, ReportError> {
    let recorded = source::read(inputs.recording, &inputs.import).map_err(ReportError::Source)?;
    let stats = inputs
        .stats
        .map(|path| read_json(path, "an itermem statistics file", &["mode", "events"]))
        .transpose()?;
    let plan = inputs
        .plan
        .map(|path| read_json(path, "an itermem swap plan", &["swaps", "executor"]))
        .transpose()?;
    let timeline = timeline::build(&recorded);
    let limit_bytes = stats
        .as_ref()
        .and_then(|s| s["swap"]["limit_bytes"].as_u64());
    let pool = stats.as_ref().and_then(|s| {
        let pool = &s["pool"];
        Some(PoolLine {
            bytes: pool["pool_bytes"].as_u64().filter(|&b| b > 0)?,
            from: timeline::time_of(&recorded, pool["first_planned_event"].as_u64()?)?,
        })
    });
    let schedule = match (&plan, &stats) {
        (Some(plan), Some(stats)) => {
            // The plan file is the last plan's (a second plan replaces the first): the
            // iterations run under it.
            let last = (stats["swap"]["plans_made"].as_array()).map_or(0, |p| p.len().max(1) - 1);
            let starts: Vec<u64> = stats["swap"]["iterations"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|i| i["plan"].as_u64().is_none_or(|p| p == last as u64))
                .filter_map(|i| i["start_event"].as_u64())
                .collect();
            Some(schedule::build(&recorded, plan, &starts))
        }
        _ => None,
    };
    Ok(Report {
        title: inputs
            .recording
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
        format: recorded.format.to_string(),
        timed: recorded.timed,
        note: recorded.note.clone(),
        iteration: recorded.iteration,
        timeline,
        limit_bytes,
        pool,
        schedule,
        stats,
        plan,
        recording_bytes: std::fs::metadata(inputs.recording).map_or(0, |m| m.len()),
    })
}

/// The report as one HTML page.
pub fn render(report: &Report) -> String {
    html::page(report)
}

/// A JSON object from `path` with every key of `keys`.
fn read_json(path: &Path, what: &'static str, keys: &[&str]) -> Result<Value, ReportError> {
    let problem = |problem: String| ReportError::Json {
        path: path.to_path_buf(),
        what,
        problem,
    };
    let text = std::fs::read_to_string(path).map_err(|err| problem(err.to_string()))?;
    let value: Value = serde_json::from_str(&text).map_err(|err| problem(err.to_string()))?;
    if let Some(missing) = keys.iter().find(|key| value.get(**key).is_none()) {
        return Err(problem(format!("it has no \"{missing}\"")));
    }
    Ok(value)
}
