//! `itermem replay`: runs a recorded iteration as a CUDA program ([`itermem::replay`]).
//!
//! `itermem replay` prepares the environment (the interposer as `itermem run` would, the
//! simulated device's capacity and copy bandwidth) and runs `itermem replay-program`, the
//! replay itself, in a child process: the replay is an ordinary CUDA program, so it also runs
//! under `itermem run` (then `--mode` is left out and the environment's setting holds).

use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, ExitCode};

use anyhow::{Context, bail};
use itermem::config::{Limit, Mode};
use itermem::export::human_bytes;
use itermem::replay::runner::{self, RunOptions};
use itermem::replay::{self, Cost, LoadSettings, Origin, Program, Scaling};
use itermem::swap::{AutoSwapOptions, CopyModel};

use super::run_cmd::{InterposerArgs, exit_code_of};
use super::{BadInput, InputArgs, naming_file};

/// Exit code of a replay that found a tensor holding the wrong bytes.
pub const MISMATCH_EXIT: u8 = 3;

/// What the replay process itself is given.
#[derive(Clone, Debug, clap::Args)]
pub struct ProgramArgs {
    /// The recording to replay: any format `itermem plan` or `itermem compare` reads.
    #[arg(value_name = "TRACE")]
    recording: PathBuf,
    /// Iterations to run.
    #[arg(long, default_value_t = 10, value_name = "N")]
    iters: u32,
    /// Multiply every size by F (e.g. 0.02 to run an 11 GB log in 220 MB); the copy bandwidth
    /// and the smallest tensor swap mode swaps on its own (ITERMEM_SWAP_MIN_BYTES, 1 MiB) scale
    /// with it.
    #[arg(long, default_value_t = 1.0, value_name = "F", value_parser = positive)]
    scale: f64,
    /// Multiply every kernel's duration by F.
    #[arg(long, default_value_t = 1.0, value_name = "F", value_parser = non_negative)]
    time_scale: f64,
    /// After op N of the first iteration, overwrite a word of the first tensor it writes: shows
    /// that the verification catches a corruption (the replay then fails).
    #[arg(long, value_name = "N")]
    corrupt: Option<u64>,
    /// The most host memory the replay may take (K, M, G, T suffix; default: the memory the
    /// machine has available, MemAvailable). Its cost is worked out before it runs: cuda-shim's
    /// device memory is host memory, so a replay needing more is refused, naming what it needs.
    #[arg(long, value_name = "BYTES", value_parser = parse_host_memory)]
    max_host_memory: Option<u64>,
    /// Print the outcome as JSON.
    #[arg(long)]
    json: bool,
    /// Write when every kernel was launched and when it started and ended on the device to FILE
    /// (CSV `iteration,op,issued_ns,start_ns,end_ns`, nanoseconds since the first launch): where
    /// the device waited, and whether for the host or for other work.
    #[arg(long, value_name = "FILE")]
    kernel_timeline: Option<PathBuf>,
    #[command(flatten)]
    input: InputArgs,
}

#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    #[command(flatten)]
    program: ProgramArgs,
    /// cuda-shim's device memory: auto (the limit in swap mode, else twice the replay's peak
    /// plus 64 MiB; an explicit CUDA_SHIM_DEVICE_MEMORY wins) or bytes (K, M, G suffix).
    #[arg(long, default_value = "auto", value_name = "auto|BYTES")]
    device_memory: String,
    /// The host link of cuda-shim's copy model: pcie3, pcie4, pcie5, nvlink or GB/s,
    /// multiplied by --scale and divided by --time-scale so copies overlap kernels as on the
    /// recording's GPU (CUDA_SHIM_*_GBPS, when set, win). Swap mode's planner measures the
    /// link, as on a GPU (ITERMEM_BANDWIDTH, when set, wins).
    #[arg(long, default_value = "pcie3", value_name = "LINK")]
    bandwidth: String,
    /// How itermem runs the replay; `--limit P%` is P % of the replay's peak live bytes.
    #[command(flatten)]
    env: InterposerArgs,
}

fn positive(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("'{text}' is not a positive number")),
    }
}

fn parse_host_memory(text: &str) -> Result<u64, String> {
    itermem::config::parse_bytes(text)
        .filter(|&bytes| bytes > 0)
        .ok_or_else(|| format!("'{text}' is not a byte count (e.g. 16G)"))
}

/// The memory the machine has available (`MemAvailable` of /proc/meminfo), if known.
fn available_memory() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

fn non_negative(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!("'{text}' is not a number ≥ 0")),
    }
}

impl ProgramArgs {
    /// The program and its cost, refused when it needs more host memory than allowed.
    fn load(&self) -> anyhow::Result<(Program, Cost)> {
        let settings = LoadSettings {
            scaling: Scaling {
                size: self.scale,
                time: self.time_scale,
            },
            max_decompressed: Some(self.input.max_decompressed),
        };
        let program = naming_file(&self.recording, replay::load(&self.recording, &settings))?;
        let cost = program.cost(self.iters);
        let (ceiling, what) = match self.max_host_memory {
            Some(bytes) => (bytes, "--max-host-memory"),
            None => match available_memory() {
                Some(bytes) => (bytes, "the memory this machine has available"),
                None => return Ok((program, cost)),
            },
        };
        if cost.host_bytes > ceiling {
            return Err(BadInput(format!(
                "{}: the replay needs {} B ({}) of host memory at --scale {}, above the {} B ({}) \
                 of {what}: pass a smaller --scale, or --max-host-memory {} to allow it",
                self.recording.display(),
                cost.host_bytes,
                human_bytes(cost.host_bytes),
                self.scale,
                ceiling,
                human_bytes(ceiling),
                cost.host_bytes,
            ))
            .into());
        }
        Ok((program, cost))
    }

    /// The arguments that give this value to `replay-program`.
    fn to_args(&self) -> Vec<String> {
        let mut args = vec![
            "replay-program".to_string(),
            self.recording.display().to_string(),
            format!("--iters={}", self.iters),
            format!("--scale={}", self.scale),
            format!("--time-scale={}", self.time_scale),
            format!("--max-decompressed={}", self.input.max_decompressed),
        ];
        if super::progress::quiet() {
            args.push("--quiet".to_string());
        }
        args.extend(
            self.max_host_memory
                .map(|bytes| format!("--max-host-memory={bytes}")),
        );
        args.extend(self.corrupt.map(|op| format!("--corrupt={op}")));
        if let Some(path) = &self.kernel_timeline {
            args.push(format!("--kernel-timeline={}", path.display()));
        }
        if self.json {
            args.push("--json".into());
        }
        args
    }
}

/// `itermem replay`: the environment, then the replay in a child process.
pub fn run(mut args: ReplayArgs) -> anyhow::Result<ExitCode> {
    let (program, cost) = args.program.load()?;
    let peak = program.peak_bytes();
    // The cost, said before anything runs (stderr: stdout is the replay's outcome).
    let _ = writeln!(
        std::io::stderr(),
        "itermem: replaying {} takes {} of device memory and {} of host memory at --scale {}, \
         {} kernel launches over {} iterations",
        program.source,
        human_bytes(cost.device_bytes),
        human_bytes(cost.host_bytes),
        args.program.scale,
        cost.kernels,
        args.program.iters,
    );
    let limit = match args.env.limit.as_deref().map(itermem::config::parse_limit) {
        Some(Some(Limit::Fraction(f))) => Some((peak as f64 * f).ceil() as u64),
        Some(Some(Limit::Bytes(b))) => Some(b),
        _ => None,
    };
    args.env.limit = limit.map(|b| b.to_string());
    let device_memory = match args.device_memory.as_str() {
        "auto" => match (args.env.mode, limit) {
            (Some(Mode::Swap), Some(limit)) => limit,
            _ => peak.saturating_mul(2).saturating_add(64 << 20),
        },
        text => itermem::config::parse_bytes(text)
            .filter(|&b| b > 0)
            .ok_or_else(|| {
                BadInput(format!(
                    "--device-memory {text}: expected auto or a byte count"
                ))
            })?,
    };
    let link = CopyModel::parse(&args.bandwidth).ok_or_else(|| {
        BadInput(format!(
            "--bandwidth {}: expected pcie3, pcie4, pcie5, nvlink or GB/s",
            args.bandwidth
        ))
    })?;
    let factor = args.program.scale / args.program.time_scale.max(1e-9);
    let h2d = factor / link.in_ns_per_byte;
    let d2h = factor / link.out_ns_per_byte;

    let min_swap_bytes = (AutoSwapOptions::default().min_bytes as f64 * args.program.scale)
        .ceil()
        .max(1.0) as u64;

    let exe = std::env::current_exe().context("cannot locate the itermem executable")?;
    let mut command = Command::new(exe);
    command.args(args.program.to_args());
    args.env.apply(&mut command, None)?;
    let explicit = args.device_memory != "auto";
    for (name, value, always) in [
        (
            "CUDA_SHIM_DEVICE_MEMORY",
            device_memory.to_string(),
            explicit,
        ),
        ("CUDA_SHIM_H2D_GBPS", format!("{h2d:.6}"), false),
        ("CUDA_SHIM_D2H_GBPS", format!("{d2h:.6}"), false),
        (
            "CUDA_SHIM_VMM_GRANULARITY",
            scaled_granularity(args.program.scale).to_string(),
            false,
        ),
        ("ITERMEM_SWAP_MIN_BYTES", min_swap_bytes.to_string(), false),
    ] {
        if always || std::env::var_os(name).is_none() {
            command.env(name, value);
        }
    }
    let status = command.status().context("cannot run the replay")?;
    Ok(exit_code_of(status))
}

/// The virtual memory API's 2 MiB granularity scaled like the tensors: the nearest power of two,
/// 4 KiB (a host page) at least. Swap mode backs the blocks it may move with it, so unscaled a
/// replay at `--scale 0.02` would round every weight up to a granule.
fn scaled_granularity(scale: f64) -> u64 {
    let scaled = (2u64 << 20) as f64 * scale;
    let exponent = scaled.max(4096.0).log2().round().clamp(12.0, 30.0);
    1u64 << exponent as u32
}

/// `itermem replay-program`: the replay itself, in this process.
pub fn run_program(args: ProgramArgs) -> anyhow::Result<ExitCode> {
    let (program, _) = args.load()?;
    let options = RunOptions {
        iterations: args.iters,
        corrupt_op: args.corrupt,
        kernel_timeline: args.kernel_timeline.is_some(),
    };
    let bar = super::progress::Progress::new("replay", u64::from(args.iters));
    let outcome = runner::run(&program, &options, &|done| bar.set(u64::from(done)))?;
    drop(bar);
    if let Some(path) = &args.kernel_timeline {
        write_timeline(path, &outcome.kernel_timeline)?;
    }
    if args.json {
        let json = serde_json::json!({
            "trace": program.source,
            "tensors": program.bytes.len(),
            "launches_per_iteration": program.launches(),
            "peak_bytes": program.peak_bytes(),
            "resident_bytes": program.resident_bytes(),
            "outcome": outcome,
        });
        println!("{}", serde_json::to_string_pretty(&json)?);
    } else {
        print!("{}", summary(&program, &outcome));
    }
    if let Some(mismatch) = outcome.mismatch {
        eprintln!("itermem: replay verification failed: {mismatch}");
        return Ok(ExitCode::from(MISMATCH_EXIT));
    }
    if outcome.kernels_run != outcome.launches {
        bail!(
            "the device ran {} kernels of the {} launched",
            outcome.kernels_run,
            outcome.launches
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn write_timeline(path: &std::path::Path, spans: &[runner::KernelSpan]) -> anyhow::Result<()> {
    use std::fmt::Write as _;
    let mut csv = String::from("iteration,op,issued_ns,start_ns,end_ns\n");
    for s in spans {
        let (iteration, op) = (s.iteration, s.op);
        let _ = writeln!(
            csv,
            "{iteration},{op},{},{},{}",
            s.issued_ns, s.start_ns, s.end_ns
        );
    }
    std::fs::write(path, csv).with_context(|| format!("cannot write {}", path.display()))
}

fn summary(program: &Program, outcome: &runner::Outcome) -> String {
    let origin = match program.origin {
        Origin::Ops => "one kernel per op",
        Origin::Allocations => "allocations with writing and checking kernels",
    };
    let mut times = outcome.iteration_seconds.clone();
    times.sort_by(f64::total_cmp);
    let median = times.get(times.len() / 2).copied().unwrap_or(0.0);
    format!(
        "replay      {} ({origin})\n\
         program     {} tensors, {} launches per iteration, peak {} B ({} B resident)\n\
         iterations  {} completed, median {:.3} ms, {} kernels run\n\
         verified    {} sampled and {} whole-tensor checks ({} B), {} B written, {} reads of \
         unwritten tensors\n\
         result      {}\n",
        program.source,
        program.bytes.len(),
        program.launches(),
        program.peak_bytes(),
        program.resident_bytes(),
        outcome.iteration_seconds.len(),
        median * 1e3,
        outcome.kernels_run,
        outcome.checks_sampled,
        outcome.checks_all,
        outcome.bytes_checked_all,
        outcome.bytes_written,
        outcome.unwritten_reads,
        match &outcome.mismatch {
            None => "every tensor held what was written".to_string(),
            Some(m) => format!("MISMATCH: {m}"),
        }
    )
}
