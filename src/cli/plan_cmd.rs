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
use itermem::bo;
use itermem::export::human_bytes;
use itermem::ops::{self, OpTrace, cost::CostModel};
use itermem::plan as dsa;
use itermem::swap::combined::{self, ExecutorInputs, PlanJson, SwapJson};
use itermem::swap::{self, AutoSwapOptions, CopyModel, SimOptions, SimResult, SwapPlan, baselines};
use serde::Serialize;

use super::progress::Progress;
use super::{BadInput, InputArgs, naming_file};

#[derive(Debug, clap::Args)]
pub struct PlanArgs {
    /// A DTR op log, a generated dispatch trace or an itermem trace (detected by content).
    #[arg(value_name = "TRACE")]
    trace: PathBuf,
    /// Device memory limit: bytes with an optional K, M, G suffix, or a percentage of the
    /// trace's peak load (e.g. 80%).
    #[arg(long, value_name = "BYTES|PERCENT", required_unless_present_any = ["sweep", "timings"])]
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
    /// Plan again what swap mode planned: the iteration window, op times, copy model and pool
    /// budget come from this plan file (`ITERMEM_PLAN_OUT`) of the process that wrote TRACE;
    /// `--limit BYTES` then is the process's device limit (default: the one it ran with).
    #[arg(long, value_name = "PLAN.json", conflicts_with_all = ["sweep"])]
    timings: Option<PathBuf>,
    /// Draw the load curves before and after, and the three streams' timelines, as SVG.
    #[arg(long, value_name = "DIR")]
    svg: Option<PathBuf>,
    #[command(flatten)]
    input: InputArgs,
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
            let bar =
                progress.then(|| Progress::new("Bayesian optimisation", evaluations.max(4) as u64));
            let report = |done: usize, _budget: usize, _best: &bo::Objective| {
                if let Some(bar) = &bar {
                    bar.set(done as u64);
                }
            };
            let found = combined::bo_plan(
                trace,
                limit,
                copy,
                evaluations,
                &AutoSwapOptions::default(),
                Some(&report),
            )?;
            drop(bar);
            (found.plan, found.weights, found.evaluations)
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

fn copy_model(text: &str) -> anyhow::Result<CopyModel> {
    CopyModel::parse(text).ok_or_else(|| {
        BadInput(format!(
            "--bandwidth {text:?}: expected pcie3, pcie4, pcie5, nvlink or a number of GB/s"
        ))
        .into()
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

pub fn run(args: PlanArgs) -> anyhow::Result<()> {
    let copy = copy_model(&args.bandwidth)?;
    let cost = CostModel::preset(&args.device).ok_or_else(|| {
        BadInput(format!(
            "--device {:?}: expected v100, titan-v or h100",
            args.device
        ))
    })?;
    let mut timings = args.timings.as_deref().map(read_timings).transpose()?;
    if let (Some(inputs), Some(limit)) = (&mut timings, &args.limit) {
        match itermem::config::parse_limit(limit) {
            Some(itermem::config::Limit::Bytes(bytes)) => {
                inputs.budget_bytes = inputs.budget_for(bytes)
            }
            _ => bail!(BadInput(format!(
                "--limit {limit:?} with --timings: expected the process's device limit in bytes \
                 (e.g. 6000000 or 6G)"
            ))),
        }
    }
    let options = ops::LoadOptions {
        cost,
        window: timings.as_ref().map(|t| (t.window[0], t.window[1])),
        max_decompressed: args.input.max_decompressed,
        device: args.input.device,
    };
    let trace = ops::load_with(&args.trace, &options)?.trace;
    if let Some(inputs) = timings {
        return naming_file(&args.trace, replan(&args, &trace, inputs));
    }
    let peak = trace.peak().map_or(0, |p| p.bytes);
    if peak == 0 {
        bail!(BadInput(format!(
            "{}: no tensor of the iteration has any bytes (peak load 0): there is nothing to swap",
            args.trace.display()
        )));
    }
    if args.sweep {
        return naming_file(&args.trace, sweep(&args, &trace, peak, copy));
    }
    let limit = limit_bytes(args.limit.as_deref().unwrap_or("100%"), peak)?;
    let outcome = naming_file(
        &args.trace,
        run_planner(
            &trace,
            limit,
            copy,
            args.planner,
            args.evaluations,
            !args.json,
        ),
    )?;
    let lent = swap::lent_windows(&trace, &outcome.plan, limit, copy);
    let pool = naming_file(
        &args.trace,
        combined::combined_pool(&trace, &lent, &Default::default(), dsa::Alignment::NONE),
    )?;
    let json = PlanJson {
        trace: args.trace.display().to_string(),
        planner: args.planner.name().into(),
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
        pool_footprint_bytes: pool.footprint,
        pool_lower_bound_bytes: pool.lower_bound,
        swaps: SwapJson::list(&trace, &outcome.plan, &pool),
        executor: None,
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

/// The executor inputs of a plan file written by swap mode (`ITERMEM_PLAN_OUT`).
fn read_timings(path: &Path) -> anyhow::Result<ExecutorInputs> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let json: PlanJson = serde_json::from_str(&text).map_err(|err| {
        BadInput(format!(
            "--timings {}: not a plan written by swap mode ({err})",
            path.display()
        ))
    })?;
    json.executor.ok_or_else(|| {
        BadInput(format!(
            "--timings {}: the plan has no executor inputs (write it with ITERMEM_PLAN_OUT in \
             swap mode)",
            path.display()
        ))
        .into()
    })
}

/// `--timings`: the plan the swap executor made from this trace, made again.
fn replan(args: &PlanArgs, trace: &OpTrace, inputs: ExecutorInputs) -> anyhow::Result<()> {
    let start = Instant::now();
    let (reduced, _, planned) = inputs.plan(trace)?;
    let json = PlanJson::executed(
        args.trace.display().to_string(),
        &reduced,
        &planned,
        start.elapsed(),
        inputs,
    );
    if let Some(path) = &args.output {
        write_json(path, &json)?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&json)?);
    } else {
        print!("{}", describe(&json, &reduced));
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
        p.planner,
        p.evaluations,
        p.plan_ms,
        match p.weights {
            Some(w) => format!(
                ", weights AOA {:.3} DOA {:.3} WDOA {:.3} SWDOA {:.3}",
                w[0], w[1], w[2], w[3]
            ),
            None if p.planner == "bo" && !p.swaps.is_empty() => {
                ", no weights kept the limit: every gap swapped, stalls relaxed".into()
            }
            None => String::new(),
        }
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
    if let Some(busiest) = swap::busiest_op(trace).filter(|b| b.bytes > p.limit_bytes) {
        let _ = writeln!(
            out,
            "floor       op {} ({}) alone uses {} of {} tensors: no plan keeps the limit",
            busiest.op,
            trace.ops[busiest.op].name,
            human_bytes(busiest.bytes),
            busiest.tensors.len()
        );
    }
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
    /// Fraction of the peak that any plan of at most 15 % simulated overhead keeping its limit
    /// can remove at most (`swap::overhead_bound`).
    copy_bound_at_15_percent: f64,
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
    let bound_15 = swap::overhead_bound(trace, copy, 0.15);
    let mut points = Vec::new();
    let mut zero = std::collections::BTreeMap::new();
    let mut at_15 = std::collections::BTreeMap::new();
    // Steps: every planner at every grid point (at most 100 / step of them), then the five
    // bisections of each planner's two reductions.
    let grid = (100 / SWEEP_STEP_PERCENT + 1) * Planner::ALL.len() as u64;
    let bar = Progress::new("sweep", grid + 2 * 5 * Planner::ALL.len() as u64);
    let done = std::cell::Cell::new(0u64);
    let overhead_of = |planner: Planner, limit: u64| -> anyhow::Result<f64> {
        let outcome = run_planner(trace, limit, copy, planner, args.evaluations, false)?;
        done.set(done.get() + 1);
        bar.set(done.get());
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
    // The grid ends where no planner keeps the limit: its remaining steps are skipped.
    done.set(grid);
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
    drop(bar);
    let json = SweepJson {
        trace: args.trace.display().to_string(),
        peak_bytes: peak,
        copy_bound: bound.max_removal as f64 / peak.max(1) as f64,
        copy_bound_at_15_percent: bound_15.max_removal as f64 / peak.max(1) as f64,
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
        "{}: peak {}, zero-stall copy bound {:.1} %, at ≤ 15 % overhead {:.1} %",
        j.trace,
        human_bytes(j.peak_bytes),
        100.0 * j.copy_bound,
        100.0 * j.copy_bound_at_15_percent
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
