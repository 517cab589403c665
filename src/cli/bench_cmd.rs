//! `itermem bench`: how fast things are. Timings are measured and reported here, never
//! asserted by tests (a loaded machine would fail them); the tests assert results.
//!
//! `itermem bench hooks`: what the interposer's hooks add to each CUDA call. Runs
//! `tests/programs/hook_bench` (allocate+free pairs, and launches of an 8-parameter kernel whose
//! pointers point into some of the 10,000 allocations it keeps live, through the runtime API
//! and through the driver API) alternately
//! on the simulated platform alone and under `LD_PRELOAD=libitermem.so` in each mode asked for
//! (record with the trace on by default; swap with a limit of the whole device, so nothing is
//! swapped), and reports the medians of each and, as the added cost, the median of each
//! hooked run's difference to the shim-alone run of the same round. Alternating runs and
//! pairing them keeps a noisy machine from favouring either side.
//!
//! `itermem bench plan`, `swap` and `bo`: planning times (SmartPool best-fit, AutoSwap's plan
//! and evaluation, Bayesian optimisation's own cost), medians over runs. `bench plan
//! --budget-ms` times the search instead, per size and budget, to show that the budget is a
//! wall (`plan::PlanOptions::budget`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use itermem::config::Mode;
use itermem::ops::random::random_iteration;
use itermem::rng::SplitMix64;
use itermem::swap::{self, CopyModel, Weights};

#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    what: BenchWhat,
}

#[derive(Debug, clap::Subcommand)]
enum BenchWhat {
    /// Added cost per call of the hooks, over calling the simulated runtime directly.
    Hooks(HooksArgs),
    /// SmartPool best-fit planning time on a seeded random instance (default 100k buffers);
    /// with `--budget-ms`, the wall time of the budgeted search instead.
    Plan(PlanArgs),
    /// AutoSwap's planning and evaluation time on a seeded random iteration (default 5,000
    /// ops, 10,000 tensors, limit half the peak).
    Swap(SwapArgs),
    /// What Bayesian optimisation costs by itself: 36 evaluations of a 4-D objective that
    /// costs nothing.
    Bo(BoArgs),
}

#[derive(Debug, clap::Args)]
struct SwapArgs {
    /// Ops of the random iteration.
    #[arg(long, default_value_t = 5_000)]
    ops: usize,
    /// Tensors of the random iteration.
    #[arg(long, default_value_t = 10_000)]
    tensors: usize,
    /// Seed of the iteration.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Runs (the median time is reported).
    #[arg(long, default_value_t = 5)]
    runs: usize,
}

#[derive(Debug, clap::Args)]
struct BoArgs {
    /// Runs (the median time is reported).
    #[arg(long, default_value_t = 9)]
    runs: usize,
}

#[derive(Debug, clap::Args)]
struct PlanArgs {
    /// Buffers of the random instance (repeat or comma-separate for several sizes).
    #[arg(long, value_delimiter = ',', default_value = "100000")]
    buffers: Vec<usize>,
    /// Seed of the instance.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Instances planned (the median time is reported), with seeds seed, seed+1, …
    #[arg(long, default_value_t = 5)]
    runs: u64,
    /// Time the search (`plan --policy search`) under these wall-clock budgets instead of
    /// best-fit (repeat or comma-separate), to check that planning returns within its budget.
    #[arg(long = "budget-ms", value_delimiter = ',')]
    budgets_ms: Vec<u64>,
    /// The instances timed under `--budget-ms`: training (iterations of a 400-layer model),
    /// somas (ResNet-like training steps, weights live throughout) or iopddl (one operator
    /// graph); see `itermem::plan::Family`.
    #[arg(long, value_enum, default_value_t = FamilyArg::Training)]
    family: FamilyArg,
}

/// `--family` of `bench plan`.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum FamilyArg {
    Training,
    Somas,
    Iopddl,
}

impl From<FamilyArg> for itermem::plan::Family {
    fn from(family: FamilyArg) -> Self {
        match family {
            FamilyArg::Training => itermem::plan::Family::Training,
            FamilyArg::Somas => itermem::plan::Family::Somas,
            FamilyArg::Iopddl => itermem::plan::Family::Iopddl,
        }
    }
}

#[derive(Debug, clap::Args)]
struct HooksArgs {
    /// Runs of each configuration (the medians are reported).
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Allocations kept live during the measurement.
    #[arg(long, default_value_t = 10_000)]
    live: u64,
    /// cudaMalloc+cudaFree pairs per run.
    #[arg(long, default_value_t = 200_000)]
    pairs: u64,
    /// Kernel launches per run.
    #[arg(long, default_value_t = 200_000)]
    launches: u64,
    /// Modes to measure (repeat or comma-separate: record, pool, swap, cnmem).
    #[arg(long = "mode", value_delimiter = ',', default_value = "record", value_parser = parse_mode)]
    modes: Vec<Mode>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

fn parse_mode(text: &str) -> Result<Mode, String> {
    Mode::parse(text)
        .filter(|&mode| mode != Mode::Off)
        .ok_or_else(|| {
            format!("'{text}' is not a mode to measure: use record, pool, swap or cnmem")
        })
}

/// Which figure of a [`Sample`] a row shows.
type Pick = fn(&Sample) -> f64;

/// One run's figures, in ns per operation.
#[derive(Clone, Copy, Debug, Default)]
struct Sample {
    pair_ns: f64,
    launch_ns: f64,
    driver_pair_ns: f64,
    driver_launch_ns: f64,
}

pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    match args.what {
        BenchWhat::Hooks(args) => hooks(args),
        BenchWhat::Plan(args) => plan(args),
        BenchWhat::Swap(args) => swap_bench(args),
        BenchWhat::Bo(args) => bo_bench(args),
    }
}

fn hooks(args: HooksArgs) -> anyhow::Result<()> {
    if args.runs == 0 {
        bail!(super::BadInput("--runs must be at least 1".into()));
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    run_script(&root.join("tools/build-shim"))?;
    run_script(&root.join("tools/build-programs"))?;
    let program = root.join("target/programs/hook_bench");
    let lib = super::library::default_library()?;
    if !lib.is_file() {
        bail!(
            "{} does not exist (build it with `cargo build --release`)",
            lib.display()
        );
    }
    let trace = std::env::temp_dir().join(format!("itermem-bench-{}.itrace", std::process::id()));
    let mut plain = Vec::new();
    let mut hooked = vec![Vec::new(); args.modes.len()];
    for _ in 0..args.runs {
        plain.push(measure(&program, &args, root, None)?);
        for (mode, samples) in args.modes.iter().zip(&mut hooked) {
            samples.push(measure(&program, &args, root, Some((&lib, &trace, *mode)))?);
        }
    }
    let _ = std::fs::remove_file(&trace);
    let median = |mut values: Vec<f64>| {
        values.sort_by(f64::total_cmp);
        values[values.len() / 2]
    };
    let typical = |samples: &[Sample], pick: Pick| median(samples.iter().map(pick).collect());
    // The added cost is the median of each round's difference to the shim alone in the same
    // round, not the difference of two medians: the shim's own launch time swings (its stream
    // thread sleeps or not) between rounds far more than the hooks cost.
    let added = |samples: &[Sample], pick: Pick| {
        median(
            samples
                .iter()
                .zip(&plain)
                .map(|(with, alone)| pick(with) - pick(alone))
                .collect(),
        )
    };
    let operations: [(&str, Pick); 4] = [
        ("malloc+free pair", |s| s.pair_ns),
        ("launch (8 params)", |s| s.launch_ns),
        ("cuMemAlloc+cuMemFree", |s| s.driver_pair_ns),
        ("cuLaunchKernel (8)", |s| s.driver_launch_ns),
    ];
    if args.json {
        let mut json = Vec::new();
        for (name, pick) in operations {
            let base = typical(&plain, pick);
            for (mode, samples) in args.modes.iter().zip(&hooked) {
                let with = typical(samples, pick);
                let added = added(samples, pick);
                json.push(serde_json::json!({"operation": name, "mode": mode, "shim_ns": base, "itermem_ns": with, "added_ns": added}));
            }
        }
        println!("{}", serde_json::to_string_pretty(&json)?);
        return Ok(());
    }
    println!(
        "hook overhead, {} live allocations, median of {} runs (ns per operation; in brackets \
         the added cost: the median of each run's difference to the shim alone run beside it):",
        args.live, args.runs
    );
    print!("{:<20} {:>10}", "operation", "shim");
    for mode in &args.modes {
        print!(" {:>18}", mode.to_string());
    }
    println!();
    for (name, pick) in operations {
        let base = typical(&plain, pick);
        print!("{name:<20} {base:>10.1}");
        for samples in &hooked {
            let with = typical(samples, pick);
            print!(
                " {:>18}",
                format!("{with:.1} ({:+.1})", added(samples, pick))
            );
        }
        println!();
    }
    Ok(())
}

fn plan(args: PlanArgs) -> anyhow::Result<()> {
    if args.runs == 0 {
        bail!(super::BadInput("--runs must be at least 1".into()));
    }
    if !args.budgets_ms.is_empty() {
        return plan_wall(&args);
    }
    for &buffers in &args.buffers {
        let mut reports = Vec::new();
        for seed in args.seed..args.seed + args.runs {
            let report = itermem::plan::bench_scaling(buffers, seed)?;
            if !report.valid {
                bail!("internal error: the best-fit plan of seed {seed} does not validate");
            }
            reports.push(report);
        }
        let mut times: Vec<Duration> = reports.iter().map(|r| r.plan_elapsed).collect();
        let (ms, min, max) = spread(&mut times);
        let mut ratios: Vec<f64> = reports.iter().map(|r| r.ratio).collect();
        ratios.sort_by(f64::total_cmp);
        println!(
            "best-fit on {buffers} random buffers, median of {} seeds: {ms:.1} ms (min {min:.1}, \
             max {max:.1}), footprint / peak live {:.4} (median)",
            args.runs,
            ratios[ratios.len() / 2]
        );
    }
    Ok(())
}

/// `bench plan --budget-ms`: the search's wall time per size and budget, against the budget
/// plus the 5 % it may overrun (`plan::PlanOptions::budget`), with the footprint ratios of the
/// search and of best-fit alone (what the budget bought). Each instance is generated once and
/// planned under every budget.
fn plan_wall(args: &PlanArgs) -> anyhow::Result<()> {
    use itermem::plan::{self, PlanOptions, Policy};
    println!(
        "search on {} instances, median of {} seeds (min, max); ratio = footprint / peak live",
        plan::Family::from(args.family).name(),
        args.runs
    );
    println!(
        "{:>8} {:>7} {:>24} {:>7} {:>9} {:>9}",
        "buffers", "budget", "wall ms median (min, max)", "≤ +5 %", "ratio", "best-fit"
    );
    for &buffers in &args.buffers {
        let mut rows: Vec<(Vec<Duration>, Vec<f64>)> =
            vec![Default::default(); args.budgets_ms.len()];
        let mut best_fit = Vec::new();
        for seed in args.seed..args.seed + args.runs {
            let instance = plan::family_instance(args.family.into(), buffers, seed);
            let floor = plan::plan(&instance, Policy::BestFit, &PlanOptions::default())?;
            best_fit.push(floor.ratio);
            for (&budget_ms, (times, ratios)) in args.budgets_ms.iter().zip(&mut rows) {
                let options = PlanOptions {
                    budget: Duration::from_millis(budget_ms),
                    ..PlanOptions::default()
                };
                let report = plan::plan(&instance, Policy::Search, &options)?;
                if plan::validate(&instance, &report.plan).is_err() {
                    bail!("internal error: the search plan of seed {seed} does not validate");
                }
                times.push(report.elapsed);
                ratios.push(report.ratio);
            }
        }
        best_fit.sort_by(f64::total_cmp);
        for (&budget_ms, (times, ratios)) in args.budgets_ms.iter().zip(&mut rows) {
            let (ms, min, max) = spread(times);
            ratios.sort_by(f64::total_cmp);
            let within = max <= budget_ms as f64 * 1.05;
            println!(
                "{buffers:>8} {budget_ms:>7} {:>24} {:>7} {:>9.4} {:>9.4}",
                format!("{ms:.1} ({min:.1}, {max:.1})"),
                if within { "yes" } else { "NO" },
                ratios[ratios.len() / 2],
                best_fit[best_fit.len() / 2]
            );
        }
    }
    Ok(())
}

/// Median, minimum and maximum of `times`, in milliseconds.
fn spread(times: &mut [Duration]) -> (f64, f64, f64) {
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    (
        ms(times[times.len() / 2]),
        ms(times[0]),
        ms(times[times.len() - 1]),
    )
}

fn swap_bench(args: SwapArgs) -> anyhow::Result<()> {
    if args.runs == 0 {
        bail!(super::BadInput("--runs must be at least 1".into()));
    }
    let mut rng = SplitMix64::new(args.seed);
    let trace = random_iteration(&mut rng, args.ops, args.tensors, 1 << 20);
    let peak = trace.peak().map_or(0, |p| p.bytes);
    let limit = peak / 2;
    let copy = CopyModel::pcie3();
    let run = || {
        let start = Instant::now();
        let plan = swap::plan(&trace, limit, Weights::default(), copy);
        let planned = start.elapsed();
        let start = Instant::now();
        let result = swap::evaluate(&trace, &plan, limit, copy);
        (plan, result, planned, start.elapsed())
    };
    let (plan, result, planned, evaluated) = run();
    let (mut plan_times, mut evaluate_times) = (vec![planned], vec![evaluated]);
    for _ in 1..args.runs {
        let (_, _, planned, evaluated) = run();
        plan_times.push(planned);
        evaluate_times.push(evaluated);
    }
    if let Err(e) = swap::check(&trace, &plan, limit, copy) {
        bail!(
            "internal error: the AutoSwap plan of seed {} is invalid: {e}",
            args.seed
        );
    }
    let (plan_ms, plan_min, plan_max) = spread(&mut plan_times);
    let (eval_ms, eval_min, eval_max) = spread(&mut evaluate_times);
    println!(
        "AutoSwap on a random iteration of {} ops and {} tensors (seed {}), limit half the \
         peak, PCIe 3, median of {} runs: plan {plan_ms:.1} ms (min {plan_min:.1}, max \
         {plan_max:.1}), evaluate {eval_ms:.1} ms (min {eval_min:.1}, max {eval_max:.1}); {} \
         swaps, overhead {:.3}",
        args.ops,
        args.tensors,
        args.seed,
        args.runs,
        plan.swaps.len(),
        result.overhead
    );
    Ok(())
}

fn bo_bench(args: BoArgs) -> anyhow::Result<()> {
    if args.runs == 0 {
        bail!(super::BadInput("--runs must be at least 1".into()));
    }
    // AutoSwap's four weights in [-1, 1], as `itermem plan` searches them, every evaluation
    // run (no early stop on convergence).
    let config = itermem::bo::BoConfig {
        patience: 0,
        ..itermem::bo::BoConfig::default()
    };
    let bowl = |x: &[f64]| {
        let centre = [0.3, -0.5, 0.1, 0.7];
        let value = x.iter().zip(centre).map(|(x, c)| (x - c) * (x - c)).sum();
        itermem::bo::Objective::scalar(value)
    };
    let mut times = Vec::new();
    let mut evaluations = 0;
    for _ in 0..args.runs {
        let start = Instant::now();
        let result = itermem::bo::minimize(bowl, 4, (-1.0, 1.0), &config)?;
        times.push(start.elapsed());
        evaluations = result.evaluations;
    }
    let (ms, min, max) = spread(&mut times);
    println!(
        "Bayesian optimisation, {evaluations} evaluations of a free 4-D objective, median of {} \
         runs: {ms:.1} ms (min {min:.1}, max {max:.1})",
        args.runs
    );
    Ok(())
}

fn run_script(script: &Path) -> anyhow::Result<()> {
    let status = Command::new(script)
        .stdout(std::process::Stdio::null())
        .status()
        .with_context(|| format!("cannot run {}", script.display()))?;
    if !status.success() {
        bail!("{} failed ({status})", script.display());
    }
    Ok(())
}

fn measure(
    program: &Path,
    args: &HooksArgs,
    root: &Path,
    hooks: Option<(&PathBuf, &PathBuf, Mode)>,
) -> anyhow::Result<Sample> {
    let mut command = Command::new(program);
    command
        .args(["--live", &args.live.to_string()])
        .args(["--pairs", &args.pairs.to_string()])
        .args(["--launches", &args.launches.to_string()])
        .env("LD_LIBRARY_PATH", root.join("target/shim/lib"));
    if let Some((lib, trace, mode)) = hooks {
        command
            .env("LD_PRELOAD", lib)
            .env("ITERMEM_MODE", mode.to_string());
        match mode {
            Mode::Record => {
                command.env("ITERMEM_TRACE", trace);
            }
            Mode::Swap => {
                command.env("ITERMEM_LIMIT", "100%");
            }
            _ => {}
        }
    }
    let output = command
        .output()
        .with_context(|| format!("cannot run {}", program.display()))?;
    if !output.status.success() {
        bail!(
            "{} failed ({}): {}",
            program.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let text = String::from_utf8_lossy(&output.stdout);
    let value = |key: &str| -> anyhow::Result<f64> {
        text.lines()
            .find_map(|line| line.strip_prefix(key)?.trim().parse().ok())
            .with_context(|| format!("no {key} in the output of {}", program.display()))
    };
    Ok(Sample {
        pair_ns: value("malloc_free_pair_ns")?,
        launch_ns: value("launch_ns")?,
        driver_pair_ns: value("driver_malloc_free_pair_ns")?,
        driver_launch_ns: value("driver_launch_ns")?,
    })
}
