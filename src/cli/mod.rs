//! Command-line parsing and the one exit path of `itermem`.
//!
//! Each subcommand is one variant of [`Command`] and one module: adding a command means adding
//! both and one arm in [`run`]. Errors travel as `anyhow::Error` with context and are printed
//! once, here, as `itermem: <error>` (with its causes, `{:#}`).
//!
//! Exit codes (also in `--help`):
//! - 0: success (and a closed stdout, e.g. `| head`, which is not an error);
//! - 1: the command failed for another reason (e.g. the output cannot be written);
//! - 2: bad usage or bad input: unknown flags, an unreadable or corrupt trace, a trace with no
//!   detectable iteration where one is needed.

mod bench_cmd;
mod compare_cmd;
mod library;
mod plan_cmd;
mod progress;
mod replay_cmd;
mod report_cmd;
mod run_cmd;
mod trace_cmd;

use std::fmt;
use std::io::{self, Write};
use std::path::Path;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use itermem::detect::DetectError;
use itermem::import::{self, ImportError};
use itermem::ops::OpsError;
use itermem::plan::{self, InstanceError};
use itermem::policy::PolicyError;
use itermem::trace::TraceError;

const EXIT_CODES: &str = "\
Exit codes:
  0  success
  1  failure (e.g. the output cannot be written)
  2  bad usage or bad input (unreadable, corrupt or malformed trace or CSV, no iteration
     found where needed)
  3  replay: a tensor did not hold the bytes written into it
  itermem run and itermem replay pass on the program's own exit code";

/// Iteration-aware GPU memory management: run programs under the interposer, inspect and
/// convert recorded traces, measure the hooks.
#[derive(Debug, Parser)]
#[command(name = "itermem", version, after_help = EXIT_CODES)]
pub struct Cli {
    /// Show no progress bars (they appear only on a terminal, after a second of work).
    #[arg(long, short, global = true)]
    quiet: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a program under itermem (LD_PRELOAD), e.g. `itermem run --trace t.itrace -- ./train`.
    Run(run_cmd::RunArgs),
    /// Summarise and export trace files written with ITERMEM_TRACE.
    Trace(trace_cmd::TraceArgs),
    /// Compare the device memory of allocation policies on recordings or DSA CSV files.
    Compare(compare_cmd::CompareArgs),
    /// Choose tensors to swap to host memory under a limit (AutoSwap), and plan the pool.
    Plan(plan_cmd::PlanArgs),
    /// Measure itermem itself.
    Bench(bench_cmd::BenchArgs),
    /// Replay a recorded iteration as a CUDA program that verifies every byte, e.g.
    /// `itermem replay --shim --mode pool --scale 0.02 densenet.log.gz`.
    Replay(replay_cmd::ReplayArgs),
    /// Write one self-contained HTML page about a run: memory over time, the pool's placement,
    /// the swap schedule, the iteration, what it cost, e.g. `itermem report t.itrace --stats
    /// stats.json --plan plan.json -o report.html`.
    Report(report_cmd::ReportArgs),
    /// Print the interposer library `itermem run` preloads (written from the copy this
    /// executable carries when none is beside it), e.g. `LD_PRELOAD=$(itermem library-path)`.
    LibraryPath,
    /// The replay process `itermem replay` starts (run it directly under `itermem run`).
    #[command(hide = true)]
    ReplayProgram(replay_cmd::ProgramArgs),
}

/// How the subcommands that read recordings (`trace info`, `trace export`, `compare`, `plan`)
/// read them: flattened into each, so the flag is offered exactly where it has an effect.
#[derive(Clone, Copy, Debug, clap::Args)]
pub struct InputArgs {
    /// The most bytes a gzip-compressed input may decompress to (K, M, G or T suffix): a guard
    /// against gzip bombs, raised for a genuinely bigger recording. Plain files are not limited.
    #[arg(
        long,
        value_name = "BYTES",
        default_value_t = import::DEFAULT_MAX_DECOMPRESSED,
        value_parser = parse_max_decompressed
    )]
    pub max_decompressed: u64,
    /// The device to read from a recording of several (an itermem trace's device ordinal, a
    /// snapshot's device index, a profiler trace's Device Id); by default the one with the most
    /// allocations and frees (`trace info` and `trace export`: every device).
    #[arg(id = "from_device", long = "from-device", value_name = "N")]
    pub device: Option<u32>,
}

impl InputArgs {
    /// The importers' options with this limit and device.
    pub fn import_options(&self) -> import::ImportOptions {
        import::ImportOptions {
            max_decompressed: self.max_decompressed,
            device: self.device,
        }
    }
}

fn parse_max_decompressed(text: &str) -> Result<u64, String> {
    itermem::config::parse_bytes(text)
        .filter(|&bytes| bytes > 0)
        .ok_or_else(|| {
            "expected a positive byte count with an optional K, M, G or T suffix (e.g. 4G)".into()
        })
}

/// Bad input or usage found after parsing (exit code 2).
#[derive(Debug)]
pub struct BadInput(pub String);

impl fmt::Display for BadInput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadInput {}

/// Runs the command; `itermem run` passes on the program's own exit code.
fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Run(args) => run_cmd::run(args),
        Command::Trace(args) => trace_cmd::run(args).map(|()| ExitCode::SUCCESS),
        Command::Compare(args) => compare_cmd::run(args).map(|()| ExitCode::SUCCESS),
        Command::Plan(args) => plan_cmd::run(args).map(|()| ExitCode::SUCCESS),
        Command::Bench(args) => bench_cmd::run(args).map(|()| ExitCode::SUCCESS),
        Command::Replay(args) => replay_cmd::run(args),
        Command::ReplayProgram(args) => replay_cmd::run_program(args),
        Command::Report(args) => report_cmd::run(args).map(|()| ExitCode::SUCCESS),
        Command::LibraryPath => library::print_path().map(|()| ExitCode::SUCCESS),
    }
}

/// `result`, its error naming `path` unless its message already does (the readers' errors
/// name the file and the place in it; the planners' and simulators' do not know it).
pub fn naming_file<T>(path: &Path, result: anyhow::Result<T>) -> anyhow::Result<T> {
    result.map_err(|err| {
        let name = path.display().to_string();
        if format!("{err:#}").contains(&name) {
            err
        } else {
            err.context(name)
        }
    })
}

/// 2 for bad input or usage, 0 for a closed output pipe, 1 otherwise.
fn exit_code(err: &anyhow::Error) -> u8 {
    let mut code = 1;
    for cause in err.chain() {
        if cause.is::<TraceError>()
            || cause.is::<BadInput>()
            || cause.is::<DetectError>()
            || cause.is::<ImportError>()
            || cause.is::<InstanceError>()
            || cause.is::<OpsError>()
            || cause.is::<plan::PlanError>()
            || cause.is::<PolicyError>()
            || cause.is::<itermem::replay::ProgramError>()
            || cause.is::<itermem::report::ReportError>()
        {
            return 2;
        }
        if let Some(io) = cause.downcast_ref::<io::Error>()
            && io.kind() == io::ErrorKind::BrokenPipe
        {
            code = 0;
        }
    }
    code
}

pub fn main() -> ExitCode {
    // Usage errors exit with 2 and `--help`/`--version` with 0, printed by clap.
    let cli = Cli::parse();
    progress::set_quiet(cli.quiet);
    match run(cli) {
        Ok(code) => code,
        Err(err) => {
            let code = exit_code(&err);
            if code != 0 {
                // Not `eprintln!`, which panics when stderr is closed.
                let _ = writeln!(io::stderr(), "itermem: {err:#}");
            }
            ExitCode::from(code)
        }
    }
}
