//! `itermem compare`: how much device memory each allocation policy needs for the same
//! allocations — plain cudaMalloc, NVIDIA cnmem (tuned reservation, and grown region by region),
//! PyTorch's caching allocator, and SmartPool's planners — like Table I of the SmartPool paper.
//!
//! Every ratio is footprint / peak live bytes, with sizes rounded to `--align` (512 B, the
//! granularity of cnmem, PyTorch and the pool; `--align 1` compares raw bytes). For a recording
//! (itermem trace, PyTorch snapshot or profiler trace) the whole recording is compared, and when
//! an iteration is found, the pool plan of one iteration is reported too: that is what pool mode
//! would allocate.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use itermem::detect::DetectorConfig;
use itermem::import::{self, Loaded};
use itermem::plan::{self, Alignment, Instance, PlanOptions, Policy as Planner};
use itermem::policy::sim::{self, Policy as Baseline};
use itermem::svg;
use serde::Serialize;

use super::progress::Progress;
use super::{BadInput, InputArgs, naming_file};

#[derive(Debug, clap::Args)]
pub struct CompareArgs {
    /// Allocation recordings or DSA CSV files (any supported format, detected by content).
    #[arg(required = true, value_name = "TRACE")]
    traces: Vec<PathBuf>,
    /// Print JSON (an array, one object per trace) instead of a table.
    #[arg(long)]
    json: bool,
    /// Pool granularity in bytes: sizes are rounded up to it (1 = none).
    #[arg(long, default_value_t = 512, value_name = "N")]
    align: u64,
    /// Time SmartPool's search may spend per instance beyond best-of, in milliseconds.
    #[arg(long, default_value_t = 500, value_name = "MS")]
    budget_ms: u64,
    /// Also draw, per trace, the memory load and the cnmem and SmartPool placements as SVG.
    #[arg(long, value_name = "DIR")]
    svg: Option<PathBuf>,
    #[command(flatten)]
    input: InputArgs,
}

/// One policy's result.
#[derive(Clone, Debug, Serialize)]
struct PolicyResult {
    footprint_bytes: u64,
    ratio: f64,
    plan_ms: f64,
}

/// The comparison on one instance.
#[derive(Clone, Debug, Serialize)]
struct Comparison {
    buffers: usize,
    peak_live_bytes: u64,
    /// Keys: cudamalloc, cnmem, cnmem_grow, caching, bestfit, firstfit, best.
    policies: std::collections::BTreeMap<&'static str, PolicyResult>,
}

/// One iteration of a recording and its pool plan.
#[derive(Clone, Debug, Serialize)]
struct IterationReport {
    period_events: u64,
    iterations: u64,
    boundary_event: u64,
    #[serde(flatten)]
    comparison: Comparison,
}

#[derive(Clone, Debug, Serialize)]
struct TraceReport {
    trace: String,
    #[serde(flatten)]
    comparison: Comparison,
    /// Present for recordings in which an iteration was found.
    #[serde(skip_serializing_if = "Option::is_none")]
    iteration: Option<IterationReport>,
}

/// (JSON key, column label, policy); the table's columns are these, in this order.
const BASELINES: [(&str, &str, Baseline); 4] = [
    ("cudamalloc", "cudaMalloc", Baseline::CudaMalloc),
    ("cnmem", "cnmem", Baseline::Cnmem),
    ("cnmem_grow", "cnmem_grow", Baseline::CnmemGrow),
    ("caching", "caching", Baseline::Caching),
];

const PLANNERS: [(&str, &str, Planner); 3] = [
    ("bestfit", "bestfit", Planner::BestFit),
    ("firstfit", "firstfit", Planner::FirstFit),
    ("best", "best", Planner::Search),
];

/// Every policy's (JSON key, column label).
fn policy_columns() -> impl Iterator<Item = (&'static str, &'static str)> {
    let baselines = BASELINES.iter().map(|b| (b.0, b.1));
    baselines.chain(PLANNERS.iter().map(|p| (p.0, p.1)))
}

pub fn run(args: CompareArgs) -> anyhow::Result<()> {
    let alignment =
        Alignment::new(args.align).ok_or_else(|| BadInput("--align must be at least 1".into()))?;
    let options = PlanOptions {
        alignment,
        budget: Duration::from_millis(args.budget_ms),
        ..PlanOptions::default()
    };
    if let Some(dir) = &args.svg {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let import_options = args.input.import_options();
    let mut reports = Vec::new();
    // Steps: each file's policies, and the planner on its iteration.
    let steps = (policy_columns().count() + 1) as u64;
    let bar = Progress::new("compare", args.traces.len() as u64 * steps);
    for (file, path) in args.traces.iter().enumerate() {
        let done = std::cell::Cell::new(file as u64 * steps);
        let step = || {
            done.set(done.get() + 1);
            bar.set(done.get());
        };
        let report = naming_file(path, compare_file(path, &options, &import_options, &step))?;
        bar.set((file as u64 + 1) * steps);
        if let Some(dir) = &args.svg {
            draw(dir, path, &options, &import_options)?;
        }
        reports.push(report);
    }
    drop(bar);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&reports)?);
    } else {
        print!("{}", table(&reports));
    }
    Ok(())
}

fn compare_file(
    path: &Path,
    options: &PlanOptions,
    import_options: &import::ImportOptions,
    step: &dyn Fn(),
) -> anyhow::Result<TraceReport> {
    let loaded = import::load_with(path, import_options)?;
    let (instance, iteration) = match loaded {
        Loaded::Instance(instance) => (instance, None),
        Loaded::Recording(recording) => {
            let whole = recording.to_instance(None).with_context(|| {
                format!("{}: cannot form the allocation problem", path.display())
            })?;
            let found = recording.iteration(&DetectorConfig::for_cuda_events())?;
            let iteration = found
                .map(|it| -> anyhow::Result<IterationReport> {
                    let instance = recording.iteration_instance(&it);
                    Ok(IterationReport {
                        period_events: it.period_events,
                        iterations: it.iterations_seen,
                        boundary_event: it.boundary_event,
                        comparison: compare(&instance, options, &["best"], step)?,
                    })
                })
                .transpose()?;
            (whole, iteration)
        }
    };
    let all: Vec<&str> = policy_columns().map(|(key, _)| key).collect();
    Ok(TraceReport {
        trace: path.display().to_string(),
        comparison: compare(&instance, options, &all, step)?,
        iteration,
    })
}

/// Runs the named policies on `instance`; every plan is validated before it is reported.
fn compare(
    instance: &Instance,
    options: &PlanOptions,
    names: &[&str],
    step: &dyn Fn(),
) -> anyhow::Result<Comparison> {
    let lower_bound = plan::plan(instance, Planner::BestFit, options)?.lower_bound;
    let result = |footprint: u64, elapsed: Duration| PolicyResult {
        footprint_bytes: footprint,
        ratio: plan::ratio(footprint, lower_bound),
        plan_ms: elapsed.as_secs_f64() * 1e3,
    };
    let mut policies = std::collections::BTreeMap::new();
    for &(name, _, baseline) in BASELINES.iter().filter(|b| names.contains(&b.0)) {
        let start = Instant::now();
        let simulation = sim::simulate(instance, baseline)
            .with_context(|| format!("the {name} simulation failed"))?;
        policies.insert(name, result(simulation.footprint, start.elapsed()));
        step();
    }
    for &(name, _, planner) in PLANNERS.iter().filter(|p| names.contains(&p.0)) {
        let report = plan::plan(instance, planner, options)?;
        plan::validate(instance, &report.plan).map_err(|conflict| {
            anyhow::anyhow!("internal error: the {name} plan is invalid: {conflict:?}")
        })?;
        policies.insert(name, result(report.footprint, report.elapsed));
        step();
    }
    Ok(Comparison {
        buffers: instance.len(),
        peak_live_bytes: lower_bound,
        policies,
    })
}

fn table(reports: &[TraceReport]) -> String {
    // Each policy's column is as wide as its label, and at least 7 (a ratio like 1.0000).
    let width = |label: &str| label.len().max(7);
    let mut out = String::new();
    let _ = write!(
        out,
        "{:<44} {:>8} {:>11}",
        "footprint / peak live", "buffers", "peak live"
    );
    for (_, label) in policy_columns() {
        let _ = write!(out, " {label:>width$}", width = width(label));
    }
    let _ = writeln!(out, " {:>9}", "best (ms)");
    let mut row = |name: String, c: &Comparison| {
        let _ = write!(
            out,
            "{name:<44} {:>8} {:>11}",
            c.buffers,
            itermem::export::human_bytes(c.peak_live_bytes)
        );
        for (key, label) in policy_columns() {
            let width = width(label);
            let _ = match c.policies.get(key) {
                Some(p) => write!(out, " {:>width$.4}", p.ratio),
                None => write!(out, " {:>width$}", "-"),
            };
        }
        let best_ms = c.policies.get("best").map_or(0.0, |p| p.plan_ms);
        let _ = writeln!(out, " {best_ms:>9.1}");
    };
    for report in reports {
        let name = Path::new(&report.trace).file_name().map_or_else(
            || report.trace.clone(),
            |n| n.to_string_lossy().into_owned(),
        );
        row(name.clone(), &report.comparison);
        if let Some(it) = &report.iteration {
            row(
                format!(
                    "  one iteration ({} events, {} seen)",
                    it.period_events, it.iterations
                ),
                &it.comparison,
            );
        }
    }
    out
}

/// Writes `<name>.load.svg`, `<name>.cnmem.svg` and `<name>.smartpool.svg` into `dir`.
fn draw(
    dir: &Path,
    path: &Path,
    options: &PlanOptions,
    import_options: &import::ImportOptions,
) -> anyhow::Result<()> {
    let instance = match import::load_with(path, import_options)? {
        Loaded::Instance(instance) => instance,
        Loaded::Recording(recording) => recording.to_instance(None)?,
    };
    let name = path
        .file_name()
        .map_or_else(|| "trace".to_string(), |n| n.to_string_lossy().into_owned());
    let write = |suffix: &str, svg: String| {
        let file = dir.join(format!("{name}.{suffix}.svg"));
        std::fs::write(&file, svg).with_context(|| format!("cannot write {}", file.display()))
    };
    write(
        "load",
        svg::load_curve(&instance, &format!("{name}: live bytes")),
    )?;
    let cnmem = sim::simulate(&instance, Baseline::Cnmem)?;
    let offsets: Vec<u64> = cnmem
        .placements
        .iter()
        .map(|p| p.address - sim_base(&cnmem))
        .collect();
    write(
        "cnmem",
        svg::placement(
            &instance,
            &offsets,
            cnmem.footprint,
            &format!(
                "{name}: cnmem, {}",
                itermem::export::human_bytes(cnmem.footprint)
            ),
        ),
    )?;
    let smartpool = plan::plan(&instance, Planner::Search, options)?;
    write(
        "smartpool",
        svg::placement(
            &instance,
            &smartpool.plan.offsets,
            smartpool.footprint,
            &format!(
                "{name}: SmartPool, {} (ratio {:.4})",
                itermem::export::human_bytes(smartpool.footprint),
                smartpool.ratio
            ),
        ),
    )?;
    Ok(())
}

/// The lowest address of a simulation's regions (its placements are drawn relative to it).
fn sim_base(simulation: &sim::Simulation) -> u64 {
    simulation.regions.iter().map(|r| r.base).min().unwrap_or(0)
}
