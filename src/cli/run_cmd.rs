//! `itermem run`: runs a program under the interposer, with the environment set up for it.
//!
//! It only prepares the environment (`LD_PRELOAD`, `ITERMEM_*`, and with `--shim` the simulated
//! CUDA libraries) and waits: the program's output is its own, and its exit code is
//! `itermem run`'s (128 + N when killed by signal N).
//!
//! `--shim` preloads the shim's `libcudart.so.12` and `libcuda.so.1` as well as putting them
//! first on the library path: a library whose RPATH names NVIDIA's runtime by directory (torch's
//! do) ignores `LD_LIBRARY_PATH`, but the loader satisfies a `DT_NEEDED` whose soname is already
//! loaded without searching, so a preloaded runtime wins. They come last in `LD_PRELOAD`, after
//! `libitermem.so` and the user's own preloads, so every interposer precedes the runtime in
//! symbol lookup and `dlsym(RTLD_NEXT)` from the hooks finds the shim. `--cuda 13` (for programs
//! built against CUDA 13, `docs/cuda13.md`) preloads `libcudart.so.13` instead of
//! `libcudart.so.12` (never both: a process has one runtime, and the hooks find it by name), as
//! `tools/with-shim --cuda 13` does; the driver is one for both runtimes and reports CUDA 13.5
//! unless the environment sets `CUDA_SHIM_DRIVER_VERSION`.

use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{Context, bail};
use itermem::config::Mode;

use super::BadInput;

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub env: InterposerArgs,
    /// When the program has exited, write the HTML report of the run here (as `itermem
    /// report`), from its trace, statistics and swap plan: those given with --trace, --stats
    /// and --plan-out, else written to a temporary directory that is removed afterwards.
    #[arg(long, value_name = "FILE")]
    report: Option<PathBuf>,
    /// The program to run and its arguments.
    #[arg(required = true, last = true, value_name = "CMD")]
    command: Vec<OsString>,
}

/// How a program is run under itermem: the flags `itermem run` and `itermem replay` share.
#[derive(Clone, Debug, clap::Args)]
pub struct InterposerArgs {
    /// What itermem does: off, record, pool, swap or cnmem (default: record).
    #[arg(long, value_parser = parse_mode)]
    pub mode: Option<Mode>,
    /// Write the access trace to this file.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// Write a JSON summary to this file when the program exits.
    #[arg(long, value_name = "FILE")]
    pub stats: Option<PathBuf>,
    /// Swap mode: the device memory the program may hold (bytes with an optional K, M, G
    /// suffix, or a percentage of the device's memory, e.g. 60%).
    #[arg(long, value_name = "BYTES|PERCENT", value_parser = parse_limit)]
    pub limit: Option<String>,
    /// Swap mode: write the plan in use to this file (JSON, as `itermem plan --json`).
    #[arg(long, value_name = "FILE")]
    pub plan_out: Option<PathBuf>,
    /// Run on the simulated CUDA platform (cuda-shim), building it first if needed.
    #[arg(long)]
    pub shim: bool,
    /// With --shim: the CUDA major the program was built for (default 12). 13 preloads the
    /// shim's libcudart.so.13 instead of libcudart.so.12.
    #[arg(long, value_name = "12|13", requires = "shim", value_parser = parse_cuda)]
    pub cuda: Option<u32>,
    /// The interposer library to preload (default: libitermem.so beside this executable, else
    /// the copy this executable carries; see `itermem library-path`).
    #[arg(long, value_name = "PATH")]
    pub lib: Option<PathBuf>,
}

fn parse_limit(text: &str) -> Result<String, String> {
    itermem::config::parse_limit(text)
        .map(|_| text.to_string())
        .ok_or_else(|| {
            format!("'{text}' is not a limit: use bytes (6000000, 512M, 6G) or a percentage (60%)")
        })
}

fn parse_cuda(text: &str) -> Result<u32, String> {
    match text {
        "12" => Ok(12),
        "13" => Ok(13),
        _ => Err(format!(
            "'{text}' is not a CUDA major the shim has: use 12 or 13"
        )),
    }
}

fn parse_mode(text: &str) -> Result<Mode, String> {
    Mode::parse(text)
        .ok_or_else(|| format!("'{text}' is not a mode: use off, record, pool, swap or cnmem"))
}

pub fn run(mut args: RunArgs) -> anyhow::Result<ExitCode> {
    let scratch = match &args.report {
        Some(_) => Some(ReportFiles::fill_in(&mut args.env)?),
        None => None,
    };
    let mut command = Command::new(&args.command[0]);
    command.args(&args.command[1..]);
    args.env.apply(&mut command, Mode::Record)?;
    let mut child = command
        .spawn()
        .with_context(|| format!("cannot run {}", args.command[0].to_string_lossy()))?;
    let pid = child.id();
    let status = child
        .wait()
        .with_context(|| format!("cannot wait for {}", args.command[0].to_string_lossy()))?;
    if let Some(report) = &args.report {
        let written = write_report(&args.env, pid, report);
        drop(scratch);
        if let Err(err) = written {
            // A program that failed keeps its own exit code (what scripts test), the missing
            // report said once; one that succeeded fails the command with the report's error.
            if !status.success() {
                let _ = writeln!(std::io::stderr(), "itermem: no report: {err:#}");
                return Ok(exit_code_of(status));
            }
            return Err(err.context("the run's report"));
        }
    }
    Ok(exit_code_of(status))
}

/// The report of the run of process `pid` from the files `env` named, to `report`.
fn write_report(env: &InterposerArgs, pid: u32, report: &Path) -> anyhow::Result<()> {
    // The program's own process wrote the files: `%p` is its id.
    let path = |p: &Option<PathBuf>| p.as_deref().map(|p| itermem::config::with_pid(p, pid));
    let trace = path(&env.trace).context("no trace was asked for")?;
    if !trace.is_file() {
        bail!(BadInput(
            "the program wrote no trace (did it use CUDA?), so there is nothing to report".into()
        ));
    }
    let plan = path(&env.plan_out).filter(|plan| plan.is_file());
    super::report_cmd::write(
        &trace,
        path(&env.stats).as_deref(),
        plan.as_deref(),
        report,
        &super::InputArgs {
            max_decompressed: itermem::import::DEFAULT_MAX_DECOMPRESSED,
            device: None,
        },
    )
}

/// A temporary directory for the files `--report` needs and the user did not ask for, removed
/// when dropped.
struct ReportFiles(PathBuf);

impl ReportFiles {
    /// Gives `env` a trace, a statistics file and (in swap mode) a plan file where it has none.
    fn fill_in(env: &mut InterposerArgs) -> anyhow::Result<ReportFiles> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir =
            std::env::temp_dir().join(format!("itermem-report-{}-{nanos}", std::process::id()));
        std::fs::create_dir(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
        env.trace.get_or_insert_with(|| dir.join("run.itrace"));
        env.stats.get_or_insert_with(|| dir.join("stats.json"));
        if env.mode == Some(Mode::Swap) {
            env.plan_out.get_or_insert_with(|| dir.join("plan.json"));
        }
        Ok(ReportFiles(dir))
    }
}

impl Drop for ReportFiles {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl InterposerArgs {
    /// Sets up `command`'s environment: `libitermem.so` preloaded in `--mode` (or `default`
    /// when not given; `None`: the environment's own setting, nothing preloaded here), the
    /// `ITERMEM_*` variables of the flags given, and with `--shim` the simulated CUDA libraries
    /// preloaded after every other preload and first on the library path.
    pub fn apply(
        &self,
        command: &mut Command,
        default: impl Into<Option<Mode>>,
    ) -> anyhow::Result<()> {
        let mut preload = Vec::new();
        if let Some(mode) = self.mode.or(default.into()) {
            let lib = match &self.lib {
                Some(lib) => lib.clone(),
                None => super::library::default_library()?,
            };
            if !lib.is_file() {
                bail!(BadInput(format!(
                    "{} does not exist (build it with `cargo build`)",
                    lib.display()
                )));
            }
            preload.push(lib.into_os_string());
            command.env("ITERMEM_MODE", mode.to_string());
        }
        preload.extend(std::env::var_os("LD_PRELOAD").filter(|p| !p.is_empty()));
        for (name, value) in [
            ("ITERMEM_TRACE", &self.trace),
            ("ITERMEM_STATS", &self.stats),
            ("ITERMEM_PLAN_OUT", &self.plan_out),
        ] {
            if let Some(path) = value {
                command.env(name, path);
            }
        }
        if let Some(limit) = &self.limit {
            command.env("ITERMEM_LIMIT", limit);
        }
        if self.shim {
            let libs = shim_libraries()?;
            let cuda = self.cuda.unwrap_or(12);
            let runtime = format!("libcudart.so.{cuda}");
            preload.extend(
                [runtime.as_str(), SHIM_DRIVER].map(|soname| libs.join(soname).into_os_string()),
            );
            command.env(
                "LD_LIBRARY_PATH",
                prepend(libs.as_os_str(), std::env::var_os("LD_LIBRARY_PATH"), ":"),
            );
        }
        if let Some((first, rest)) = preload.split_first() {
            let joined = rest.iter().fold(first.clone(), |mut joined, lib| {
                joined.push(" ");
                joined.push(lib);
                joined
            });
            command.env("LD_PRELOAD", joined);
        }
        Ok(())
    }
}

/// The shim's driver, preloaded after the runtime (`libcudart.so.12` or `.13`), the order in
/// which a program linked with `-lcudart` loads them.
const SHIM_DRIVER: &str = "libcuda.so.1";

/// The simulated CUDA libraries of the checkout this executable was built from, brought up to
/// date by `tools/build-shim`. An installed executable (`cargo install`, the wheel) finds them
/// the same way, so `--shim` needs that checkout where it was built.
fn shim_libraries() -> anyhow::Result<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let build = root.join("tools/build-shim");
    if !build.is_file() {
        bail!(BadInput(format!(
            "--shim builds the simulated CUDA platform from the checkout this itermem was built \
             from, {}, which is gone; run without --shim on a machine with CUDA",
            root.display()
        )));
    }
    let status = Command::new(&build)
        .stdout(std::process::Stdio::null())
        .status()
        .with_context(|| format!("cannot run {}", build.display()))?;
    if !status.success() {
        bail!("{} failed ({status})", build.display());
    }
    Ok(root.join("target/shim/lib"))
}

fn prepend(first: &OsStr, rest: Option<OsString>, separator: &str) -> OsString {
    let mut joined = first.to_os_string();
    if let Some(rest) = rest.filter(|r| !r.is_empty()) {
        joined.push(separator);
        joined.push(rest);
    }
    joined
}

pub fn exit_code_of(status: std::process::ExitStatus) -> ExitCode {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => ExitCode::from(code as u8),
        (None, Some(signal)) => ExitCode::from(128u8.wrapping_add(signal as u8)),
        (None, None) => ExitCode::FAILURE,
    }
}
