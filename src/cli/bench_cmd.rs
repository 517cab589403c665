//! `itermem bench`: how fast things are. Timings are measured and reported here, never
//! asserted by tests (a loaded machine would fail them); the tests assert results.
//!
//! `itermem bench hooks`: what the interposer's hooks add to each CUDA call. Runs
//! `tests/programs/hook_bench` (allocate+free pairs, and launches of an 8-parameter kernel whose
//! pointers point into some of the 10,000 allocations it keeps live, through the runtime API
//! and through the driver API, onto a stream kept busy as a GPU's queue is, so that a launch
//! is timed without the simulated platform waking its stream's thread; on `--threads` host
//! threads at once) alternately
//! on the simulated platform alone, under `LD_PRELOAD=libforward.so` (an interposer that only
//! forwards: the floor any interposer pays, `tests/programs/libforward.c`) and under
//! `LD_PRELOAD=libitermem.so` in each mode asked for
//! (record with the trace on by default; swap with a limit of the whole device, so nothing is
//! swapped), and reports the medians of each and, as the added cost, the median of each
//! hooked run's difference to the shim-alone run of the same round. Alternating runs and
//! pairing them keeps a noisy machine from favouring either side. `--callgrind` adds one run
//! of each under callgrind: instructions per operation on the calling threads, which noise
//! does not move on one thread (on several, time spent waiting on a lock shows as spinning).
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
    /// Host threads allocating and launching at once, each on a stream of its own (the
    /// operation counts are per thread).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1024))]
    threads: u64,
    /// Also run each configuration once under `valgrind --tool=callgrind` and report the
    /// instructions per operation on the calling thread (smaller counts suffice, e.g.
    /// `--pairs 30000 --launches 30000`).
    #[arg(long)]
    callgrind: bool,
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

/// What runs under `hook_bench` besides the simulated platform: the forwarding-only floor, or
/// itermem in one mode.
#[derive(Clone, Copy, Debug)]
enum Interposer {
    Forward,
    Itermem(Mode),
}

impl std::fmt::Display for Interposer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Interposer::Forward => f.write_str("forward"),
            Interposer::Itermem(mode) => write!(f, "{mode}"),
        }
    }
}

/// Which figure of a [`Sample`] a row shows.
type Pick = fn(&Sample) -> f64;

/// One run's figures: ns per operation as a thread saw it, and operations of all threads per
/// second.
#[derive(Clone, Copy, Debug, Default)]
struct Sample {
    pair_ns: f64,
    launch_ns: f64,
    driver_pair_ns: f64,
    driver_launch_ns: f64,
    pairs_per_s: f64,
    launches_per_s: f64,
    driver_pairs_per_s: f64,
    driver_launches_per_s: f64,
    /// Launch batches whose stream `hook_bench` could not keep busy to the end (see there).
    gate_timeouts: f64,
}

/// The operations `hook_bench` times: the row's name, its ns per operation, its operations per
/// second, and the phase function of `hook_bench` that callgrind attributes its instructions to.
const OPERATIONS: [(&str, Pick, Pick, &str); 4] = [
    (
        "malloc+free pair",
        |s| s.pair_ns,
        |s| s.pairs_per_s,
        "phase_pairs",
    ),
    (
        "launch (8 params)",
        |s| s.launch_ns,
        |s| s.launches_per_s,
        "phase_launches",
    ),
    (
        "cuMemAlloc+cuMemFree",
        |s| s.driver_pair_ns,
        |s| s.driver_pairs_per_s,
        "phase_driver_pairs",
    ),
    (
        "cuLaunchKernel (8)",
        |s| s.driver_launch_ns,
        |s| s.driver_launches_per_s,
        "phase_driver_launches",
    ),
];

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
    let lib = super::library::default_library()?;
    if !lib.is_file() {
        bail!(
            "{} does not exist (build it with `cargo build --release`)",
            lib.display()
        );
    }
    let bench = HookBench {
        args: &args,
        root,
        program: root.join("target/programs/hook_bench"),
        forward: root.join("target/programs/libforward.so"),
        lib,
        trace: std::env::temp_dir().join(format!("itermem-bench-{}.itrace", std::process::id())),
    };
    let columns: Vec<Interposer> = std::iter::once(Interposer::Forward)
        .chain(args.modes.iter().map(|&mode| Interposer::Itermem(mode)))
        .collect();
    let mut plain = Vec::new();
    let mut hooked = vec![Vec::new(); columns.len()];
    for _ in 0..args.runs {
        plain.push(bench.measure(None)?);
        for (&column, samples) in columns.iter().zip(&mut hooked) {
            samples.push(bench.measure(Some(column))?);
        }
    }
    // Instructions per operation of each configuration, in the order of `OPERATIONS`: the shim
    // alone, then each column.
    let instructions = if args.callgrind {
        let mut counts = vec![bench.instructions(None)?];
        for &column in &columns {
            counts.push(bench.instructions(Some(column))?);
        }
        Some(counts)
    } else {
        None
    };
    let _ = std::fs::remove_file(&bench.trace);
    let median = |mut values: Vec<f64>| {
        values.sort_by(f64::total_cmp);
        values[values.len() / 2]
    };
    let typical = |samples: &[Sample], pick: Pick| median(samples.iter().map(pick).collect());
    // The added cost is the median of each round's difference to the shim alone in the same
    // round, not the difference of two medians: the machine's speed swings between rounds
    // more than the hooks cost. Throughput is compared the same way, as each round's ratio.
    let paired = |samples: &[Sample], pick: Pick, compare: fn(f64, f64) -> f64| {
        median(
            samples
                .iter()
                .zip(&plain)
                .map(|(with, alone)| compare(pick(with), pick(alone)))
                .collect(),
        )
    };
    let added = |with: f64, alone: f64| with - alone;
    let gate_timeouts: Pick = |s| s.gate_timeouts;
    let ratio = |with: f64, alone: f64| with / alone;
    if args.json {
        let mut json = Vec::new();
        for (row, (name, ns, per_s, _)) in OPERATIONS.into_iter().enumerate() {
            for (index, (column, samples)) in columns.iter().zip(&hooked).enumerate() {
                let mut entry = serde_json::json!({
                    "operation": name,
                    "mode": column.to_string(),
                    "threads": args.threads,
                    "shim_ns": typical(&plain, ns),
                    "interposed_ns": typical(samples, ns),
                    "added_ns": paired(samples, ns, added),
                    "shim_per_s": typical(&plain, per_s),
                    "interposed_per_s": typical(samples, per_s),
                    "per_s_ratio": paired(samples, per_s, ratio),
                    "shim_gate_timeouts": typical(&plain, gate_timeouts),
                    "interposed_gate_timeouts": typical(samples, gate_timeouts),
                });
                if let Some(counts) = &instructions {
                    entry["shim_instructions"] = counts[0][row].into();
                    entry["interposed_instructions"] = counts[index + 1][row].into();
                }
                json.push(entry);
            }
        }
        println!("{}", serde_json::to_string_pretty(&json)?);
        return Ok(());
    }
    let header = |what: &str| {
        println!("{what}");
        print!("{:<20} {:>12}", "operation", "shim");
        for column in &columns {
            print!(" {:>20}", column.to_string());
        }
        println!();
    };
    header(&format!(
        "hook overhead, {} live allocations, {} thread(s), median of {} runs (ns per operation \
         as each thread saw it; in brackets the added cost: the median of each run's difference \
         to the shim alone run beside it):",
        args.live, args.threads, args.runs
    ));
    for (name, ns, _, _) in OPERATIONS {
        print!("{name:<20} {:>12.1}", typical(&plain, ns));
        for samples in &hooked {
            let cell = format!(
                "{:.1} ({:+.1})",
                typical(samples, ns),
                paired(samples, ns, added)
            );
            print!(" {cell:>20}");
        }
        println!();
    }
    // A gate that timed out left its stream's thread to run dry within a batch of launches:
    // a call waited for the device while launches were queued (and waited out the gate, as
    // it would wait for the queued work on a GPU), or a batch took the thread longer.
    print!(
        "{:<20} {:>12.0}",
        "gates timed out",
        typical(&plain, gate_timeouts)
    );
    for samples in &hooked {
        print!(" {:>20.0}", typical(samples, gate_timeouts));
    }
    println!();
    header(
        "operations per second, all threads together (in brackets: the median of each run's \
         ratio to the shim alone run beside it):",
    );
    for (name, _, per_s, _) in OPERATIONS {
        print!("{name:<20} {:>12.0}", typical(&plain, per_s));
        for samples in &hooked {
            let cell = format!(
                "{:.0} ({:.3})",
                typical(samples, per_s),
                paired(samples, per_s, ratio)
            );
            print!(" {cell:>20}");
        }
        println!();
    }
    if let Some(counts) = &instructions {
        header(
            "instructions per operation on the calling thread (callgrind, one run each; in \
             brackets the added instructions):",
        );
        for (row, (name, _, _, _)) in OPERATIONS.into_iter().enumerate() {
            let alone = counts[0][row];
            print!("{name:<20} {alone:>12.0}");
            for count in &counts[1..] {
                let cell = format!("{:.0} ({:+.0})", count[row], count[row] - alone);
                print!(" {cell:>20}");
            }
            println!();
        }
    }
    Ok(())
}

/// One `itermem bench hooks` invocation: the workload and what can be preloaded under it.
struct HookBench<'a> {
    args: &'a HooksArgs,
    root: &'a Path,
    program: PathBuf,
    forward: PathBuf,
    lib: PathBuf,
    trace: PathBuf,
}

impl HookBench<'_> {
    /// `hook_bench` with the arguments asked for, on the shim, under `interposer` if any,
    /// behind `wrapper` (a program and its arguments) if any.
    fn command(&self, wrapper: &[&str], interposer: Option<Interposer>) -> Command {
        let mut command = match wrapper.split_first() {
            Some((first, rest)) => {
                let mut command = Command::new(first);
                command.args(rest).arg(&self.program);
                command
            }
            None => Command::new(&self.program),
        };
        command
            .args(["--live", &self.args.live.to_string()])
            .args(["--pairs", &self.args.pairs.to_string()])
            .args(["--launches", &self.args.launches.to_string()])
            .args(["--threads", &self.args.threads.to_string()])
            .env("LD_LIBRARY_PATH", self.root.join("target/shim/lib"));
        match interposer {
            None => {}
            Some(Interposer::Forward) => {
                command.env("LD_PRELOAD", &self.forward);
            }
            Some(Interposer::Itermem(mode)) => {
                command
                    .env("LD_PRELOAD", &self.lib)
                    .env("ITERMEM_MODE", mode.to_string());
                match mode {
                    Mode::Record => {
                        command.env("ITERMEM_TRACE", &self.trace);
                    }
                    Mode::Swap => {
                        command.env("ITERMEM_LIMIT", "100%");
                    }
                    _ => {}
                }
            }
        }
        command
    }

    /// Runs `command` to success and returns its stdout.
    fn output(&self, mut command: Command) -> anyhow::Result<String> {
        let output = command
            .output()
            .with_context(|| format!("cannot run {}", self.program.display()))?;
        if !output.status.success() {
            bail!(
                "{} failed ({}): {}",
                self.program.display(),
                output.status,
                String::from_utf8_lossy(&output.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// One timed run.
    fn measure(&self, interposer: Option<Interposer>) -> anyhow::Result<Sample> {
        let text = self.output(self.command(&[], interposer))?;
        let value = |key: &str| -> anyhow::Result<f64> {
            text.lines()
                .find_map(|line| line.strip_prefix(key)?.strip_prefix(' ')?.parse().ok())
                .with_context(|| format!("no {key} in the output of {}", self.program.display()))
        };
        Ok(Sample {
            pair_ns: value("malloc_free_pair_ns")?,
            launch_ns: value("launch_ns")?,
            driver_pair_ns: value("driver_malloc_free_pair_ns")?,
            driver_launch_ns: value("driver_launch_ns")?,
            pairs_per_s: value("malloc_free_pairs_per_s")?,
            launches_per_s: value("launches_per_s")?,
            driver_pairs_per_s: value("driver_malloc_free_pairs_per_s")?,
            driver_launches_per_s: value("driver_launches_per_s")?,
            gate_timeouts: value("gate_timeouts")?,
        })
    }

    /// One run under callgrind: the instructions per operation of each of [`OPERATIONS`], from
    /// the inclusive cost of its phase function in `hook_bench` (only the calling threads'
    /// work; a thread of itermem's own, like the trace writer, is not in it).
    fn instructions(&self, interposer: Option<Interposer>) -> anyhow::Result<Vec<f64>> {
        let out =
            std::env::temp_dir().join(format!("itermem-bench-{}.callgrind", std::process::id()));
        let out_arg = format!("--callgrind-out-file={}", out.display());
        let wrapper = ["valgrind", "--tool=callgrind", out_arg.as_str()];
        self.output(self.command(&wrapper, interposer))?;
        let annotated = Command::new("callgrind_annotate")
            .args(["--inclusive=yes", "--threshold=100"])
            .arg(&out)
            .output()
            .context("cannot run callgrind_annotate (is valgrind installed?)");
        let _ = std::fs::remove_file(&out);
        let annotated = annotated?;
        if !annotated.status.success() {
            bail!(
                "callgrind_annotate failed: {}",
                String::from_utf8_lossy(&annotated.stderr)
            );
        }
        let text = String::from_utf8_lossy(&annotated.stdout);
        let threads = self.args.threads as f64;
        // Operations per thread of each of `OPERATIONS`, in its order.
        let counts = [
            self.args.pairs,
            self.args.launches,
            self.args.pairs,
            self.args.launches,
        ];
        OPERATIONS
            .iter()
            .zip(counts)
            .map(|(&(_, _, _, phase), count)| {
                // A line reads `24,877,049 (15.35%)  ???:phase_pairs [/path/hook_bench]`.
                let needle = format!(":{phase} [");
                let total: f64 = text
                    .lines()
                    .find(|line| line.contains(&needle))
                    .and_then(|line| line.split_whitespace().next())
                    .and_then(|number| number.replace(',', "").parse().ok())
                    .with_context(|| format!("callgrind reports no {phase}"))?;
                Ok(total / (threads * count as f64))
            })
            .collect()
    }
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
