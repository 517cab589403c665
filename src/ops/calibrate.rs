//! How far the cost model ([`super::cost`]) is from measured times: per op on traces that carry
//! measured durations (the DTR logs), and per training step against a PyTorch profiler trace
//! (kernel durations, `cat: kernel`, `dur` in µs).
//!
//! Why both: the DTR logs time every op but carry no FLOPs (the model then sees only bytes, so
//! it can only be memory-bound: convolutions come out far too short), and the generated traces
//! carry FLOPs but no times. A profiler trace of the same network and batch on a V100 gives the
//! missing check for the generated traces: the total kernel time of a step against the model's
//! total for the generated step. The figures are printed by the module tests and reported in
//! `ops::tests`; nothing here fits parameters (see the `cost` module doc for why).
//!
//! Statistics: the ratio is modelled / measured per op (its median is robust to the few huge
//! ops); Pearson correlation on the raw times (are the long ops the long ones?) and on their
//! logarithms (is the ordering right over five decades?).

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;

use serde::Deserialize;

use super::error::{OpsError, Problem};
use super::{CostModel, OpTrace};

/// Modelled against measured op times of one trace.
#[derive(Clone, Debug, PartialEq)]
pub struct Comparison {
    /// Ops with a measured time > 0 (the others are not compared).
    pub ops: usize,
    pub measured_total_ns: f64,
    pub modelled_total_ns: f64,
    /// Median over ops of modelled / measured.
    pub median_ratio: f64,
    /// Pearson correlation of the raw times (NaN with fewer than 2 ops or no variance).
    pub correlation: f64,
    /// Pearson correlation of the logarithms of the times.
    pub log_correlation: f64,
}

impl OpTrace {
    /// Bytes op `op` moves by the importers' rule: Σ bytes of the tensors it reads + Σ bytes of
    /// the tensors it writes (0 for an op index out of range).
    pub fn bytes_accessed(&self, op: usize) -> u64 {
        let Some(op) = self.ops.get(op) else {
            return 0;
        };
        op.reads
            .iter()
            .chain(&op.writes)
            .filter_map(|&t| self.tensors.get(t as usize))
            .fold(0u64, |sum, t| sum.saturating_add(t.bytes))
    }

    /// What `model` says op `op` takes, ns (its FLOPs and [`OpTrace::bytes_accessed`]).
    pub fn modelled_time_ns(&self, op: usize, model: &CostModel) -> f64 {
        let flops = self.ops.get(op).map_or(0.0, |o| o.flops);
        model.op_time_ns(flops, self.bytes_accessed(op))
    }
}

/// Compares `model` with the measured durations of `trace` (ops with `measured` and a time
/// > 0); `None` when no op is measured.
pub fn compare(trace: &OpTrace, model: &CostModel) -> Option<Comparison> {
    let mut measured = Vec::new();
    let mut modelled = Vec::new();
    for (i, op) in trace.ops.iter().enumerate() {
        if op.measured && op.time_ns > 0.0 {
            measured.push(op.time_ns);
            modelled.push(trace.modelled_time_ns(i, model));
        }
    }
    if measured.is_empty() {
        return None;
    }
    let mut ratios: Vec<f64> = modelled.iter().zip(&measured).map(|(m, t)| m / t).collect();
    ratios.sort_by(f64::total_cmp);
    let log = |v: &[f64]| v.iter().map(|x| x.max(1e-3).ln()).collect::<Vec<_>>();
    Some(Comparison {
        ops: measured.len(),
        measured_total_ns: measured.iter().sum(),
        modelled_total_ns: modelled.iter().sum(),
        median_ratio: median_sorted(&ratios),
        correlation: pearson(&modelled, &measured),
        log_correlation: pearson(&log(&modelled), &log(&measured)),
    })
}

fn median_sorted(sorted: &[f64]) -> f64 {
    match sorted.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

/// Pearson correlation of two equally long series (NaN when undefined).
pub fn pearson(a: &[f64], b: &[f64]) -> f64 {
    let n = a.len().min(b.len());
    if n < 2 {
        return f64::NAN;
    }
    let mean = |v: &[f64]| v[..n].iter().sum::<f64>() / n as f64;
    let (ma, mb) = (mean(a), mean(b));
    let (mut sab, mut saa, mut sbb) = (0.0, 0.0, 0.0);
    for i in 0..n {
        let (da, db) = (a[i] - ma, b[i] - mb);
        sab += da * db;
        saa += da * da;
        sbb += db * db;
    }
    sab / (saa * sbb).sqrt()
}

/// Kernel time of the training steps of a profiler trace.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KernelSteps {
    /// One entry per `ProfilerStep#N` range, in time order (a single unnamed step covering
    /// every kernel when the trace has none).
    pub steps: Vec<StepKernels>,
    /// Every kernel of the trace, in or out of a step.
    pub kernels: u64,
    pub kernel_time_ns: f64,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct StepKernels {
    pub name: String,
    pub kernels: u64,
    /// Σ kernel durations, ns (kernels on several streams may overlap: this is GPU work, not
    /// the step's wall time).
    pub kernel_time_ns: f64,
}

impl KernelSteps {
    /// Median step kernel time, ns (NaN without steps).
    pub fn median_step_ns(&self) -> f64 {
        let mut times: Vec<f64> = self.steps.iter().map(|s| s.kernel_time_ns).collect();
        times.sort_by(f64::total_cmp);
        median_sorted(&times)
    }
}

#[derive(Deserialize)]
struct ChromeTrace<'a> {
    #[serde(rename = "traceEvents", borrow)]
    events: Vec<ChromeEvent<'a>>,
}

#[derive(Deserialize)]
struct ChromeEvent<'a> {
    #[serde(borrow, default)]
    cat: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(default)]
    ts: Option<f64>,
    #[serde(default)]
    dur: Option<f64>,
    #[serde(default)]
    args: Option<ChromeArgs>,
}

#[derive(Deserialize)]
struct ChromeArgs {
    #[serde(default)]
    correlation: Option<u64>,
}

/// The kernel time per training step of a PyTorch profiler (Chrome trace) JSON file, gzip or
/// not. A kernel belongs to the step during which the CPU launched it: its `correlation` id is
/// that of a runtime call (`cat` `Runtime`/`cuda_runtime`) whose `ts` lies in the step's
/// `ProfilerStep#N` range. (GPU work lags the CPU, so cutting kernels by their own timestamps
/// would credit the tail of a step to the next one.)
pub fn profiler_kernel_steps(path: impl AsRef<Path>) -> Result<KernelSteps, OpsError> {
    let path = path.as_ref();
    let file = std::fs::File::open(path).map_err(|err| OpsError::file(path, Problem::Io(err)))?;
    let size = file.metadata().map_or(0, |m| m.len());
    // A JSON document: its first non-blank byte (after a byte-order mark) opens it.
    let recognise = |head: &[u8]| {
        let text = head.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(head);
        matches!(text.trim_ascii_start().first(), Some(b'{' | b'['))
    };
    let limit = crate::content::DEFAULT_MAX_DECOMPRESSED;
    let (raw, gzip) = crate::content::read_content(file, Vec::new(), size, limit, recognise)
        .map_err(|err| super::read_error(path, err))?;
    let trace: ChromeTrace = serde_json::from_slice(&raw).map_err(|err| {
        let mut e = OpsError::line(path, err.line() as u64, Problem::Json(err.to_string()));
        e.gzip = gzip;
        e
    })?;
    let is = |e: &ChromeEvent, what: &str| {
        e.cat
            .as_deref()
            .is_some_and(|c| c.eq_ignore_ascii_case(what))
    };
    let mut steps: Vec<(f64, f64, String)> = trace
        .events
        .iter()
        .filter(|e| {
            e.name
                .as_deref()
                .is_some_and(|n| n.starts_with("ProfilerStep#"))
        })
        .filter_map(|e| Some((e.ts?, e.ts? + e.dur?, e.name.as_deref()?.to_string())))
        .collect();
    steps.sort_by(|a, b| a.0.total_cmp(&b.0));
    let step_of = |ts: f64| steps.iter().position(|&(s, e, _)| s <= ts && ts < e);
    let mut launch_step: HashMap<u64, usize> = HashMap::new();
    for e in &trace.events {
        if (is(e, "runtime") || is(e, "cuda_runtime"))
            && let (Some(c), Some(ts)) = (e.args.as_ref().and_then(|a| a.correlation), e.ts)
            && let Some(step) = step_of(ts)
        {
            launch_step.insert(c, step);
        }
    }
    let mut out = KernelSteps {
        steps: steps
            .iter()
            .map(|(_, _, name)| StepKernels {
                name: name.clone(),
                ..StepKernels::default()
            })
            .collect(),
        ..KernelSteps::default()
    };
    if out.steps.is_empty() {
        out.steps.push(StepKernels {
            name: "whole trace".into(),
            ..StepKernels::default()
        });
    }
    let single = steps.is_empty();
    for e in &trace.events {
        if !is(e, "kernel") {
            continue;
        }
        let dur_ns = e.dur.unwrap_or(0.0).max(0.0) * 1000.0;
        out.kernels += 1;
        out.kernel_time_ns += dur_ns;
        let step = if single {
            Some(0)
        } else {
            e.args
                .as_ref()
                .and_then(|a| a.correlation)
                .and_then(|c| launch_step.get(&c).copied())
        };
        if let Some(s) = step {
            out.steps[s].kernels += 1;
            out.steps[s].kernel_time_ns += dur_ns;
        }
    }
    Ok(out)
}
