//! `itermem bench hooks`: what the interposer's hooks add to each CUDA call.
//!
//! Runs `tests/programs/hook_bench` (cudaMalloc+cudaFree pairs, and launches of an 8-parameter
//! kernel whose pointers point into some of the 10,000 allocations it keeps live) alternately
//! on the simulated platform alone and under `LD_PRELOAD=libitermem.so` in record mode with the
//! trace on, and reports the medians of each and their differences. Alternating runs and taking
//! medians keeps a noisy machine from favouring either side.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    what: BenchWhat,
}

#[derive(Debug, clap::Subcommand)]
enum BenchWhat {
    /// Added cost per call of the hooks, over calling the simulated runtime directly.
    Hooks(HooksArgs),
    /// SmartPool best-fit planning time on a seeded random instance (default 100k buffers).
    Plan(PlanArgs),
}

#[derive(Debug, clap::Args)]
struct PlanArgs {
    /// Buffers of the random instance.
    #[arg(long, default_value_t = 100_000)]
    buffers: usize,
    /// Seed of the instance.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Instances planned (the median time is reported), with seeds seed, seed+1, …
    #[arg(long, default_value_t = 5)]
    runs: u64,
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
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// One run's figures, in ns per operation.
#[derive(Clone, Copy, Debug, Default)]
struct Sample {
    pair_ns: f64,
    launch_ns: f64,
}

pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    match args.what {
        BenchWhat::Hooks(args) => hooks(args),
        BenchWhat::Plan(args) => plan(args),
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
    let lib = super::run_cmd::default_library()?;
    if !lib.is_file() {
        bail!(
            "{} does not exist (build it with `cargo build --release`)",
            lib.display()
        );
    }
    let trace = std::env::temp_dir().join(format!("itermem-bench-{}.itrace", std::process::id()));
    let (mut plain, mut hooked) = (Vec::new(), Vec::new());
    for _ in 0..args.runs {
        plain.push(measure(&program, &args, root, None)?);
        hooked.push(measure(&program, &args, root, Some((&lib, &trace)))?);
    }
    let _ = std::fs::remove_file(&trace);
    let median = |samples: &[Sample], pick: fn(&Sample) -> f64| {
        let mut values: Vec<f64> = samples.iter().map(pick).collect();
        values.sort_by(f64::total_cmp);
        values[values.len() / 2]
    };
    let rows = [
        (
            "malloc+free pair",
            median(&plain, |s| s.pair_ns),
            median(&hooked, |s| s.pair_ns),
        ),
        (
            "launch (8 params)",
            median(&plain, |s| s.launch_ns),
            median(&hooked, |s| s.launch_ns),
        ),
    ];
    if args.json {
        let json: Vec<serde_json::Value> = rows
            .iter()
            .map(|(name, base, with)| {
                serde_json::json!({"operation": name, "shim_ns": base, "itermem_ns": with, "added_ns": with - base})
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&json)?);
    } else {
        println!(
            "hook overhead, record mode with trace, {} live allocations, median of {} runs:",
            args.live, args.runs
        );
        println!(
            "{:<20} {:>12} {:>14} {:>10}",
            "operation", "shim (ns)", "itermem (ns)", "added"
        );
        for (name, base, with) in rows {
            println!("{name:<20} {base:>12.1} {with:>14.1} {:>10.1}", with - base);
        }
    }
    Ok(())
}

fn plan(args: PlanArgs) -> anyhow::Result<()> {
    if args.runs == 0 {
        bail!(super::BadInput("--runs must be at least 1".into()));
    }
    let mut reports = Vec::new();
    for seed in args.seed..args.seed + args.runs {
        let report = itermem::plan::bench_scaling(args.buffers, seed)?;
        if !report.valid {
            bail!("internal error: the best-fit plan of seed {seed} does not validate");
        }
        reports.push(report);
    }
    let mut times: Vec<f64> = reports
        .iter()
        .map(|r| r.plan_elapsed.as_secs_f64() * 1e3)
        .collect();
    times.sort_by(f64::total_cmp);
    let mut ratios: Vec<f64> = reports.iter().map(|r| r.ratio).collect();
    ratios.sort_by(f64::total_cmp);
    println!(
        "best-fit on {} random buffers, median of {} seeds: {:.1} ms (min {:.1}, max {:.1}), \
         footprint / peak live {:.4} (median)",
        args.buffers,
        args.runs,
        times[times.len() / 2],
        times[0],
        times[times.len() - 1],
        ratios[ratios.len() / 2]
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
    hooks: Option<(&PathBuf, &PathBuf)>,
) -> anyhow::Result<Sample> {
    let mut command = Command::new(program);
    command
        .args(["--live", &args.live.to_string()])
        .args(["--pairs", &args.pairs.to_string()])
        .args(["--launches", &args.launches.to_string()])
        .env("LD_LIBRARY_PATH", root.join("target/shim/lib"));
    if let Some((lib, trace)) = hooks {
        command
            .env("LD_PRELOAD", lib)
            .env("ITERMEM_MODE", "record")
            .env("ITERMEM_TRACE", trace);
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
    })
}
