//! `itermem plan`: which tensors AutoSwap moves to host memory so an iteration fits under a
//! memory limit, what it costs in time (simulated), and the pool footprint of the combined
//! SmartPool + AutoSwap plan; `--sweep` prints overhead against the limit for every planner
//! (the paper's Fig. 9) and the largest load reduction each reaches with zero overhead
//! (its Table II).
//!
//! Planners: `bo` (AutoSwap's four scores weighted by Bayesian optimisation against the
//! simulator), `aoa`, `doa`, `wdoa`, `swdoa` (each score alone), `lru` (on-demand LRU with
//! prefetch, SwapAdvisor's baseline) and `belady` (furthest next use). Every plan is validated
//! (`swap::check`: each swapped tensor back before its next access, claims of zero overhead
//! kept) before it is reported.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use itermem::bo::{self, BoConfig, Objective};
use itermem::export::human_bytes;
use itermem::ops::{self, OpTrace, cost::CostModel};
use itermem::plan::{self as dsa, Absence, Buffer, Instance, PlanOptions, Policy as Dsa};
use itermem::swap::{self, CopyModel, SimOptions, SimResult, SwapPlan, Weights, baselines};
use serde::Serialize;

use super::BadInput;

#[derive(Debug, clap::Args)]
pub struct PlanArgs {
    /// A DTR op log, a generated dispatch trace or an itermem trace (detected by content).
    #[arg(value_name = "TRACE")]
    trace: PathBuf,
    /// Device memory limit: bytes with an optional K, M, G suffix, or a percentage of the
    /// trace's peak load (e.g. 80%).
    #[arg(long, value_name = "BYTES|PERCENT", required_unless_present = "sweep")]
    limit: Option<String>,
    /// Who chooses the tensors.
    #[arg(long, value_enum, default_value_t = Planner::Bo)]
    planner: Planner,
    /// Host link: pcie3 (the SmartPool authors' measured model), pcie4, pcie5, nvlink, or a
    /// bandwidth in GB/s (both directions, PCIe 3 latencies).
    #[arg(long, default_value = "pcie3")]
    bandwidth: String,
    /// Cost model for ops without measured times: v100, titan-v or h100.
    #[arg(long, default_value = "v100")]
    device: String,
    /// Objective evaluations of Bayesian optimisation.
    #[arg(long, default_value_t = 36)]
    evaluations: usize,
    /// Overhead against limit for every planner (and the largest zero-overhead reduction).
    #[arg(long)]
    sweep: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    /// Write the plan (or the sweep) as JSON to this file.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Draw the load curves before and after, and the three streams' timelines, as SVG.
    #[arg(long, value_name = "DIR")]
    svg: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Planner {
    Bo,
    Aoa,
    Doa,
    Wdoa,
    Swdoa,
    Lru,
    Belady,
}

impl Planner {
    const ALL: [Planner; 7] = [
        Planner::Bo,
        Planner::Aoa,
        Planner::Doa,
        Planner::Wdoa,
        Planner::Swdoa,
        Planner::Lru,
        Planner::Belady,
    ];

    fn name(self) -> &'static str {
        match self {
            Planner::Bo => "bo",
            Planner::Aoa => "aoa",
            Planner::Doa => "doa",
            Planner::Wdoa => "wdoa",
            Planner::Swdoa => "swdoa",
            Planner::Lru => "lru",
            Planner::Belady => "belady",
        }
    }
}

/// What one planner produced under one limit.
struct Outcome {
    plan: SwapPlan,
    result: SimResult,
    weights: Option<[f64; 4]>,
    evaluations: usize,
    elapsed: Duration,
}

/// Simulated time of a plan as the objective: overhead first, swapped bytes second; a plan
/// that cannot keep the limit at all ranks after every plan that can.
fn objective(result: &SimResult) -> Objective {
    let penalty = if result.over_limit { 1e6 } else { 0.0 };
    Objective::new(result.overhead + penalty, result.swapped_bytes as f64)
}

fn run_planner(
    trace: &OpTrace,
    limit: u64,
    copy: CopyModel,
    planner: Planner,
    evaluations: usize,
    progress: bool,
) -> anyhow::Result<Outcome> {
    let start = Instant::now();
    let (plan, weights, evaluations) = match planner {
        Planner::Bo => {
            let evaluate = |w: &[f64]| {
                let weights = Weights::from_array([w[0], w[1], w[2], w[3]]);
                objective(&swap::evaluate(
                    trace,
                    &swap::plan(trace, limit, weights, copy),
                    limit,
                    copy,
                ))
            };
            let config = BoConfig {
                evaluations: evaluations.max(4),
                // The whole budget: overhead is flat over most weights with small pockets of
                // zero (ResNet-32, PCIe 4, 77.5 %: first found in evaluations 27–30), which an
                // early stop after four rounds without improvement misses.
                patience: 0,
                ..BoConfig::default()
            };
            let bar = ProgressBar::new(progress, config.evaluations);
            let report = |done: usize, _budget: usize, _best: &Objective| bar.tick(done);
            let found = bo::minimize_with_progress(evaluate, 4, (-1.0, 1.0), &config, &report)?;
            bar.finish();
            let w = [
                found.best_x[0],
                found.best_x[1],
                found.best_x[2],
                found.best_x[3],
            ];
            (
                swap::plan(trace, limit, Weights::from_array(w), copy),
                Some(w),
                found.evaluations,
            )
        }
        Planner::Aoa => (
            baselines::single_score(trace, limit, baselines::Score::Aoa, copy),
            None,
            1,
        ),
        Planner::Doa => (
            baselines::single_score(trace, limit, baselines::Score::Doa, copy),
            None,
            1,
        ),
        Planner::Wdoa => (
            baselines::single_score(trace, limit, baselines::Score::Wdoa, copy),
            None,
            1,
        ),
        Planner::Swdoa => (
            baselines::single_score(trace, limit, baselines::Score::Swdoa, copy),
            None,
            1,
        ),
        Planner::Lru => (baselines::lru(trace, limit, copy), None, 1),
        Planner::Belady => (baselines::belady(trace, limit, copy), None, 1),
    };
    let result = swap::check(trace, &plan, limit, copy).map_err(|err| {
        anyhow::anyhow!(
            "internal error: the {} plan is invalid: {err}",
            planner.name()
        )
    })?;
    Ok(Outcome {
        plan,
        result,
        weights,
        evaluations,
        elapsed: start.elapsed(),
    })
}

/// A progress bar on stderr for runs longer than a second (and only on a terminal).
struct ProgressBar {
    start: Instant,
    total: usize,
    enabled: bool,
    shown: std::sync::Mutex<Option<indicatif::ProgressBar>>,
}

impl ProgressBar {
    fn new(enabled: bool, total: usize) -> ProgressBar {
        ProgressBar {
            start: Instant::now(),
            total,
            enabled,
            shown: std::sync::Mutex::new(None),
        }
    }

    fn tick(&self, done: usize) {
        if !self.enabled || self.start.elapsed() < Duration::from_secs(1) {
            return;
        }
        let Ok(mut shown) = self.shown.lock() else {
            return;
        };
        let bar = shown.get_or_insert_with(|| {
            let bar = indicatif::ProgressBar::new(self.total as u64);
            bar.set_message("Bayesian optimisation");
            bar
        });
        bar.set_position(done as u64);
    }

    fn finish(&self) {
        if let Ok(mut shown) = self.shown.lock() {
            if let Some(bar) = shown.take() {
                bar.finish_and_clear();
            }
        }
    }
}

fn copy_model(text: &str) -> anyhow::Result<CopyModel> {
    Ok(match text {
        "pcie3" => CopyModel::pcie3(),
        "pcie4" => CopyModel::pcie4(),
        "pcie5" => CopyModel::pcie5(),
        "nvlink" => CopyModel::nvlink(),
        other => match other.parse::<f64>() {
            Ok(gb_s) if gb_s.is_finite() && gb_s > 0.0 => CopyModel::with_bandwidth(gb_s, gb_s),
            _ => bail!(BadInput(format!(
                "--bandwidth {other:?}: expected pcie3, pcie4, pcie5, nvlink or a number of GB/s"
            ))),
        },
    })
}

fn limit_bytes(text: &str, peak: u64) -> anyhow::Result<u64> {
    match itermem::config::parse_limit(text) {
        Some(itermem::config::Limit::Bytes(bytes)) => Ok(bytes),
        Some(itermem::config::Limit::Fraction(f)) => Ok((peak as f64 * f) as u64),
        None => bail!(BadInput(format!(
            "--limit {text:?}: expected bytes with an optional K, M, G or T suffix, or a percentage (e.g. 80%)"
        ))),
    }
}

/// The combined SmartPool + AutoSwap problem: every tensor a buffer over the ops it is live
/// (resident ones over the whole iteration), with its range lent while it is away
/// ([`swap::lent_windows`], on the plan's simulated timeline); one offset per tensor. Returns
/// the pool footprint, the peak of resident bytes and the windows used.
fn combined_footprint(trace: &OpTrace, lent: &[swap::Lent]) -> anyhow::Result<Combined> {
    let n = trace.ops.len() as u64;
    let mut buffers = Vec::new();
    for (index, tensor) in trace.tensors.iter().enumerate() {
        let lower = if tensor.resident {
            0
        } else {
            tensor.born_at.unwrap_or(0) as u64
        };
        let upper = tensor.dies_after.map_or(n, |d| d as u64 + 1).max(lower + 1);
        if tensor.bytes == 0 || n == 0 {
            continue;
        }
        buffers.push(Buffer {
            id: index as u64,
            lower,
            upper,
            size: tensor.bytes,
        });
    }
    let live: std::collections::HashMap<u64, (u64, u64)> =
        buffers.iter().map(|b| (b.id, (b.lower, b.upper))).collect();
    let mut absences = Vec::new();
    let mut used = Vec::new();
    for lent in lent {
        let id = u64::from(lent.tensor);
        let Some(&(lower, upper)) = live.get(&id) else {
            continue;
        };
        // Strictly inside the lifetime: the tensor is needed at both ends.
        let from = (lent.from as u64).max(lower + 1);
        let to = (lent.to as u64).min(upper.saturating_sub(1));
        if from < to {
            absences.push(Absence { id, from, to });
            used.push((lent.swap, [from as usize, to as usize]));
        }
    }
    let instance = Instance::with_absences(buffers, absences).map_err(|err| {
        anyhow::anyhow!("internal error: the combined plan's instance is invalid: {err}")
    })?;
    let report = dsa::plan(&instance, Dsa::BestOf, &PlanOptions::default())?;
    dsa::validate(&instance, &report.plan).map_err(|conflict| {
        anyhow::anyhow!("internal error: the combined plan is invalid: {conflict}")
    })?;
    Ok(Combined {
        footprint: report.footprint,
        lower_bound: report.lower_bound,
        lent: used,
    })
}

/// The combined plan's figures, and the lending windows it used as (swap index, `[from, to)`
/// ops): the absences strictly inside each tensor's lifetime.
struct Combined {
    footprint: u64,
    lower_bound: u64,
    lent: Vec<(usize, [usize; 2])>,
}

#[derive(Serialize)]
struct SwapJson {
    tensor: u32,
    bytes: u64,
    /// The tensor's last access before it leaves the device.
    out_after_op: usize,
    /// The swap-out is queued when this op ends.
    out_at_op: usize,
    /// None (null) for a final swap: not accessed again before it is freed, never copied back.
    in_before_op: Option<usize>,
    /// The swap-in is queued when this op is launched, plus `in_delay_ns` (null for a final
    /// swap).
    in_issue_op: Option<usize>,
    in_delay_ns: Option<f64>,
    wraps: bool,
    /// Half-open op ranges during which the tensor's range holds other tensors of the pool.
    lent_ops: Vec<[usize; 2]>,
}

#[derive(Serialize)]
struct PlanJson {
    trace: String,
    planner: Planner,
    limit_bytes: u64,
    peak_bytes: u64,
    peak_after_bytes: u64,
    overhead: f64,
    time_ns: f64,
    base_time_ns: f64,
    stall_ns: f64,
    swapped_bytes: u64,
    weights: Option<[f64; 4]>,
    evaluations: usize,
    plan_ms: f64,
    pool_footprint_bytes: u64,
    pool_lower_bound_bytes: u64,
    swaps: Vec<SwapJson>,
}

pub fn run(args: PlanArgs) -> anyhow::Result<()> {
    let copy = copy_model(&args.bandwidth)?;
    let cost = CostModel::preset(&args.device).ok_or_else(|| {
        BadInput(format!(
            "--device {:?}: expected v100, titan-v or h100",
            args.device
        ))
    })?;
    let loaded = ops::load_with(&args.trace, &ops::LoadOptions { cost })?;
    let trace = loaded.trace;
    let peak = trace.peak().map_or(0, |p| p.bytes);
    if args.sweep {
        return sweep(&args, &trace, peak, copy);
    }
    let limit = limit_bytes(args.limit.as_deref().unwrap_or("100%"), peak)?;
    let outcome = run_planner(
        &trace,
        limit,
        copy,
        args.planner,
        args.evaluations,
        !args.json,
    )?;
    let lent = swap::lent_windows(&trace, &outcome.plan, limit, copy);
    let combined = combined_footprint(&trace, &lent)?;
    let json = PlanJson {
        trace: args.trace.display().to_string(),
        planner: args.planner,
        limit_bytes: limit,
        peak_bytes: peak,
        peak_after_bytes: outcome.result.peak_bytes,
        overhead: outcome.result.overhead,
        time_ns: outcome.result.time_ns,
        base_time_ns: outcome.result.base_time_ns,
        stall_ns: outcome.result.stall_ns,
        swapped_bytes: outcome.result.swapped_bytes,
        weights: outcome.weights,
        evaluations: outcome.evaluations,
        plan_ms: outcome.elapsed.as_secs_f64() * 1e3,
        pool_footprint_bytes: combined.footprint,
        pool_lower_bound_bytes: combined.lower_bound,
        swaps: outcome
            .plan
            .swaps
            .iter()
            .enumerate()
            .map(|(index, s)| SwapJson {
                tensor: s.tensor,
                bytes: trace.tensors.get(s.tensor as usize).map_or(0, |t| t.bytes),
                out_after_op: s.out_after,
                out_at_op: s.out_at,
                in_before_op: s.in_before,
                in_issue_op: s.in_before.map(|_| s.in_issue),
                in_delay_ns: s.in_before.map(|_| s.in_delay_ns),
                wraps: s.wraps(),
                lent_ops: combined
                    .lent
                    .iter()
                    .filter(|(swap, _)| *swap == index)
                    .map(|&(_, ops)| ops)
                    .collect(),
            })
            .collect(),
    };
    if let Some(path) = &args.output {
        write_json(path, &json)?;
    }
    if let Some(dir) = &args.svg {
        draw(dir, &args.trace, &trace, &outcome.plan, limit, copy)?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&json)?);
    } else {
        print!("{}", describe(&json, &trace));
    }
    Ok(())
}

fn write_json(path: &Path, value: &impl Serialize) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(value)? + "\n";
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}

fn describe(p: &PlanJson, trace: &OpTrace) -> String {
    let mut out = String::new();
    let pct = |x: u64| 100.0 * x as f64 / p.peak_bytes.max(1) as f64;
    let _ = writeln!(
        out,
        "trace       {} ({} ops, {} tensors)\npeak        {} without swapping; limit {} ({:.1} %)",
        p.trace,
        trace.ops.len(),
        trace.tensors.len(),
        human_bytes(p.peak_bytes),
        human_bytes(p.limit_bytes),
        pct(p.limit_bytes)
    );
    let _ = writeln!(
        out,
        "planner     {} ({} evaluations, {:.1} ms){}",
        p.planner.name(),
        p.evaluations,
        p.plan_ms,
        p.weights.map_or(String::new(), |w| format!(
            ", weights AOA {:.3} DOA {:.3} WDOA {:.3} SWDOA {:.3}",
            w[0], w[1], w[2], w[3]
        ))
    );
    let _ = writeln!(
        out,
        "result      peak {} ({:.1} %), overhead {:.2} % ({:.3} ms over {:.3} ms), {} swaps of {}",
        human_bytes(p.peak_after_bytes),
        pct(p.peak_after_bytes),
        100.0 * p.overhead,
        (p.time_ns - p.base_time_ns) / 1e6,
        p.base_time_ns / 1e6,
        p.swaps.len(),
        human_bytes(p.swapped_bytes)
    );
    let _ = writeln!(
        out,
        "pool        {} for SmartPool + AutoSwap (resident peak {}, ratio {:.4})",
        human_bytes(p.pool_footprint_bytes),
        human_bytes(p.pool_lower_bound_bytes),
        dsa::ratio(p.pool_footprint_bytes, p.pool_lower_bound_bytes)
    );
    let mut swaps: Vec<&SwapJson> = p.swaps.iter().collect();
    swaps.sort_by_key(|s| std::cmp::Reverse(s.bytes));
    for s in swaps.iter().take(20) {
        let back = match s.in_before_op {
            Some(i) => format!("back before op {i:>5}"),
            None => "not back (freed with no further access)".to_string(),
        };
        let _ = writeln!(
            out,
            "  tensor {:>6} {:>11}  out after op {:>5}, {back}{}",
            s.tensor,
            human_bytes(s.bytes),
            s.out_after_op,
            if s.wraps {
                " (across the iteration boundary)"
            } else {
                ""
            }
        );
    }
    if swaps.len() > 20 {
        let _ = writeln!(out, "  … {} more", swaps.len() - 20);
    }
    out
}

#[derive(Serialize)]
struct SweepPoint {
    limit_bytes: u64,
    overhead: std::collections::BTreeMap<&'static str, f64>,
}

#[derive(Serialize)]
struct SweepJson {
    trace: String,
    peak_bytes: u64,
    /// Fraction of the peak that any zero-stall plan copying one tensor at a time per
    /// direction can remove at most.
    copy_bound: f64,
    /// Per planner, the largest fraction of the peak removed with zero simulated overhead.
    zero_overhead_reduction: std::collections::BTreeMap<&'static str, f64>,
    /// Per planner, the largest fraction removed with at most 15 % overhead.
    reduction_at_15_percent: std::collections::BTreeMap<&'static str, f64>,
    sweep: Vec<SweepPoint>,
}

/// Reductions of the peak tried by the sweep, in percent.
const SWEEP_STEP_PERCENT: u64 = 2;

fn sweep(args: &PlanArgs, trace: &OpTrace, peak: u64, copy: CopyModel) -> anyhow::Result<()> {
    let bound = swap::zero_stall_bound(trace, copy);
    let mut points = Vec::new();
    let mut zero = std::collections::BTreeMap::new();
    let mut at_15 = std::collections::BTreeMap::new();
    let overhead_of = |planner: Planner, limit: u64| -> anyhow::Result<f64> {
        let outcome = run_planner(trace, limit, copy, planner, args.evaluations, false)?;
        Ok(if outcome.result.over_limit {
            f64::INFINITY
        } else {
            outcome.result.overhead
        })
    };
    let mut reduction = 0;
    while reduction < 100 {
        let limit = peak - peak * reduction / 100;
        let mut overhead = std::collections::BTreeMap::new();
        for planner in Planner::ALL {
            let o = overhead_of(planner, limit)?;
            if o <= 1e-9 {
                zero.insert(planner.name(), reduction as f64 / 100.0);
            }
            if o <= 0.15 {
                at_15.insert(planner.name(), reduction as f64 / 100.0);
            }
            overhead.insert(planner.name(), o);
        }
        let all_infinite = overhead.values().all(|o| o.is_infinite());
        points.push(SweepPoint {
            limit_bytes: limit,
            overhead,
        });
        if all_infinite {
            break;
        }
        reduction += SWEEP_STEP_PERCENT;
    }
    // Refine each planner's reductions between the grid points by bisection (to 1/32 of a
    // step): the largest reduction whose overhead stays within the threshold.
    for (reductions, threshold) in [(&mut zero, 1e-9), (&mut at_15, 0.15)] {
        for planner in Planner::ALL {
            let found = reductions.get(planner.name()).copied().unwrap_or(0.0);
            let (mut lo, mut hi) = (found, (found + SWEEP_STEP_PERCENT as f64 / 100.0).min(1.0));
            for _ in 0..5 {
                let mid = (lo + hi) / 2.0;
                let limit = peak - (peak as f64 * mid) as u64;
                if overhead_of(planner, limit)? <= threshold {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            reductions.insert(planner.name(), lo);
        }
    }
    let json = SweepJson {
        trace: args.trace.display().to_string(),
        peak_bytes: peak,
        copy_bound: bound.max_removal as f64 / peak.max(1) as f64,
        zero_overhead_reduction: zero,
        reduction_at_15_percent: at_15,
        sweep: points,
    };
    if let Some(path) = &args.output {
        write_json(path, &json)?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&json)?);
    } else {
        print!("{}", sweep_table(&json));
    }
    Ok(())
}

fn sweep_table(j: &SweepJson) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{}: peak {}, zero-stall copy bound {:.1} %",
        j.trace,
        human_bytes(j.peak_bytes),
        100.0 * j.copy_bound
    );
    let _ = write!(out, "{:>10}", "limit %");
    for p in Planner::ALL {
        let _ = write!(out, " {:>8}", p.name());
    }
    let _ = writeln!(out, "   (overhead %)");
    for point in &j.sweep {
        let _ = write!(
            out,
            "{:>10.1}",
            100.0 * point.limit_bytes as f64 / j.peak_bytes.max(1) as f64
        );
        for p in Planner::ALL {
            let o = point.overhead[p.name()];
            if o.is_finite() {
                let _ = write!(out, " {:>8.2}", 100.0 * o);
            } else {
                let _ = write!(out, " {:>8}", "-");
            }
        }
        let _ = writeln!(out);
    }
    let _ = write!(out, "{:>10}", "0-ovh red.");
    for p in Planner::ALL {
        let _ = write!(
            out,
            " {:>7.1}%",
            100.0 * j.zero_overhead_reduction[p.name()]
        );
    }
    let _ = writeln!(out);
    let _ = write!(out, "{:>10}", "≤15% red.");
    for p in Planner::ALL {
        let _ = write!(
            out,
            " {:>7.1}%",
            100.0
                * j.reduction_at_15_percent
                    .get(p.name())
                    .copied()
                    .unwrap_or(0.0)
        );
    }
    let _ = writeln!(out);
    out
}

/// Load curves without and with the plan, and the three streams' timelines.
fn draw(
    dir: &Path,
    path: &Path,
    trace: &OpTrace,
    plan: &SwapPlan,
    limit: u64,
    copy: CopyModel,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let name = path
        .file_name()
        .map_or_else(|| "trace".into(), |n| n.to_string_lossy().into_owned());
    let options = SimOptions { record: true };
    let before = swap::simulate(trace, &SwapPlan::default(), u64::MAX, copy, options);
    let after = swap::simulate(trace, plan, limit, copy, options);
    let file = dir.join(format!("{name}.swap.svg"));
    std::fs::write(
        &file,
        itermem::svg::swap_timeline(&name, &before, &after, limit),
    )
    .with_context(|| format!("cannot write {}", file.display()))
}
