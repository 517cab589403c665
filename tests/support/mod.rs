//! Shared by the integration tests: builds the simulated CUDA platform and the C programs of
//! `tests/programs/` (through the same scripts a user runs), and runs programs on the shim.

#![allow(dead_code)] // each test crate uses its own subset

pub mod browser;
pub mod nvcc;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

mod real_traces;
#[allow(unused_imports)] // each test crate uses its own subset
pub use real_traces::{real_trace, real_traces, say_skipped};

pub fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `tools/build-shim` and `tools/build-programs` once per test process.
fn build() -> &'static Result<(), String> {
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    BUILT.get_or_init(|| {
        for script in ["tools/build-shim", "tools/build-programs"] {
            let output = Command::new(root().join(script))
                .current_dir(root())
                .output()
                .map_err(|e| format!("cannot run {script}: {e}"))?;
            if !output.status.success() {
                return Err(format!(
                    "{script} failed:\n{}{}",
                    String::from_utf8_lossy(&output.stdout),
                    String::from_utf8_lossy(&output.stderr)
                ));
            }
        }
        Ok(())
    })
}

/// Path of a built program of `tests/programs/`.
pub fn program(name: &str) -> PathBuf {
    if let Err(message) = build() {
        panic!("{message}");
    }
    root().join("target/programs").join(name)
}

pub fn shim_lib_dir() -> PathBuf {
    root().join("target/shim/lib")
}

/// Runs `program args…` on the simulated GPU with the given extra environment.
pub fn run_on_shim(program_path: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(program_path);
    command.args(args).env("LD_LIBRARY_PATH", shim_lib_dir());
    for var in [
        "CUDA_SHIM_DEVICES",
        "CUDA_SHIM_DEVICE_MEMORY",
        "CUDA_SHIM_H2D_GBPS",
        "CUDA_SHIM_D2H_GBPS",
        "CUDA_SHIM_JITTER_US",
        "CUDA_SHIM_SEED",
        "CUDA_SHIM_STATS",
        "CUDA_SHIM_DRIVER_VERSION",
    ] {
        command.env_remove(var);
    }
    command.envs(env.iter().copied());
    command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", program_path.display()))
}

/// Like `run_on_shim`, asserting success; returns stdout.
pub fn run_ok(program_path: &Path, args: &[&str], env: &[(&str, &str)]) -> String {
    let output = run_on_shim(program_path, args, env);
    assert!(
        output.status.success(),
        "{} {args:?} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        program_path.display(),
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("program output is UTF-8")
}

/// The value of a `key=value` or `key value` line of a program's output.
pub fn value_of<'a>(output: &'a str, key: &str) -> Option<&'a str> {
    output.lines().find_map(|line| {
        let rest = line.strip_prefix(key)?;
        rest.strip_prefix('=').or_else(|| rest.strip_prefix(' '))
    })
}

/// The number on a `key=value` or `key value` line of a program's output.
pub fn number(output: &str, key: &str) -> u64 {
    value_of(output, key)
        .unwrap_or_else(|| panic!("no {key} in:\n{output}"))
        .parse()
        .unwrap()
}

/// Everything a program prints about its work, without the simulated platform's counters
/// (`shim_…` lines).
pub fn results(output: &str) -> String {
    output
        .lines()
        .filter(|line| !line.starts_with("shim_"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The `itermem` executable of this test run.
pub fn itermem() -> &'static str {
    env!("CARGO_BIN_EXE_itermem")
}

/// `itermem run --shim [extra…] -- program args…`, with `env` added (and the shim's and
/// itermem's own variables cleared first, so the caller's environment cannot leak in).
pub fn run_under_itermem(extra: &[&str], program_args: &[&str], env: &[(&str, &str)]) -> Output {
    itermem_run(true, extra, program_args, env)
}

/// As [`run_under_itermem`], but with the shim only first on the library path, as NVIDIA's
/// libraries are found on a real machine, not preloaded: the program (or a library it
/// `dlopen`s) loads the runtime itself.
pub fn run_under_itermem_unpreloaded(
    extra: &[&str],
    program_args: &[&str],
    env: &[(&str, &str)],
) -> Output {
    itermem_run(false, extra, program_args, env)
}

fn itermem_run(shim: bool, extra: &[&str], program_args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(itermem());
    command.arg("run");
    if shim {
        command.arg("--shim");
    } else {
        command.env("LD_LIBRARY_PATH", shim_lib_dir());
    }
    command.args(extra).arg("--").args(program_args);
    for var in [
        "CUDA_SHIM_DEVICES",
        "CUDA_SHIM_DEVICE_MEMORY",
        "CUDA_SHIM_H2D_GBPS",
        "CUDA_SHIM_D2H_GBPS",
        "CUDA_SHIM_JITTER_US",
        "CUDA_SHIM_SEED",
        "CUDA_SHIM_STATS",
        "CUDA_SHIM_DRIVER_VERSION",
        "ITERMEM_MODE",
        "ITERMEM_TRACE",
        "ITERMEM_LIMIT",
        "ITERMEM_PLAN_OUT",
        "ITERMEM_SWAP_VERIFY",
        "ITERMEM_BANDWIDTH",
    ] {
        command.env_remove(var);
    }
    command.envs(env.iter().copied());
    command.output().expect("cannot run itermem")
}

/// The stdout of a run that must have succeeded.
pub fn stdout_ok(output: &Output) -> String {
    assert!(
        output.status.success(),
        "failed ({}):\n{}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).unwrap()
}

/// A scratch path under target/tmp for this test process.
pub fn scratch(name: &str) -> PathBuf {
    let dir = root().join("target/tmp/itermem-tests");
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(format!("{name}-{}", std::process::id()))
}

/// `itermem trace info --json` of a trace (or of any recording it reads), which must succeed.
pub fn trace_info(trace: &Path) -> serde_json::Value {
    let output = Command::new(itermem())
        .args(["trace", "info", "--json"])
        .arg(trace)
        .output()
        .unwrap();
    serde_json::from_str(&stdout_ok(&output)).unwrap()
}

/// A JSON file written by the run under test.
pub fn read_json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

/// Whether two JSON values are equal, numbers that are not integers up to a relative 1e-9: a
/// plan made live and the same plan made again from its trace sum their times in their own
/// orders, so the last bits of a float may differ while every decision is the same.
pub fn same_json(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    use serde_json::Value;
    match (a, b) {
        (Value::Number(x), Value::Number(y)) if x.is_f64() || y.is_f64() => {
            let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            (x - y).abs() <= 1e-9 * x.abs().max(y.abs()).max(1.0)
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same_json(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| same_json(v, w)))
        }
        _ => a == b,
    }
}

/// Asserts that the plan made live and the one `itermem plan` makes again from its trace agree
/// in each of `keys` ([`same_json`]).
pub fn assert_same_plan(offline: &serde_json::Value, live: &serde_json::Value, keys: &[&str]) {
    for key in keys {
        assert!(
            same_json(&offline[key], &live[key]),
            "{key} differs: offline {} live {}",
            offline[key],
            live[key]
        );
    }
}

/// Where NVIDIA's wheels of one CUDA major version are unpacked: its C headers, its C++ headers
/// (nvcc's `crt/`), and the directory of its `libcudart.so.<major>`.
pub struct NvidiaDirs {
    pub include: String,
    pub crt_include: String,
    pub lib: String,
}

/// NVIDIA's directories for CUDA `major` (12 or 13), fetching the wheels through
/// `tools/abi-check --nvidia-dirs <major>`; `None` when they cannot be downloaded (after saying
/// that the calling test is skipped), a failure instead with `REQUIRE_NVIDIA_WHEELS=1`.
pub fn nvidia_dirs(major: u32) -> Option<NvidiaDirs> {
    let output = Command::new(root().join("tools/abi-check"))
        .args(["--nvidia-dirs", &major.to_string()])
        .current_dir(root())
        .output()
        .expect("cannot run tools/abi-check");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        assert!(
            stderr.contains("could not download"),
            "tools/abi-check --nvidia-dirs {major} failed:\n{stdout}{stderr}"
        );
        assert!(
            std::env::var("REQUIRE_NVIDIA_WHEELS").as_deref() != Ok("1"),
            "NVIDIA's wheels are required (REQUIRE_NVIDIA_WHEELS=1):\n{stderr}"
        );
        say_skipped(format_args!(
            "NVIDIA's CUDA {major} runtime wheel could not be downloaded (offline?); \
             set REQUIRE_NVIDIA_WHEELS=1 to make this a failure"
        ));
        return None;
    }
    let value = |key: &str| {
        value_of(&stdout, key)
            .unwrap_or_else(|| panic!("no {key}= in:\n{stdout}"))
            .to_string()
    };
    Some(NvidiaDirs {
        include: value("NV_INC"),
        crt_include: value("CRT_INC"),
        lib: value("NV_LIB"),
    })
}

impl NvidiaDirs {
    /// Compiles `source` (C11, warnings as errors) against NVIDIA's headers into `binary`,
    /// linked with `libs`. No rpath: the library path decides what is loaded, as for a program
    /// built with the toolkit.
    pub fn build(&self, source: &Path, binary: &Path, libs: &[&str]) {
        let output = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
            .args(["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror"])
            .arg(format!("-I{}", self.include))
            .arg(format!("-I{}", self.crt_include))
            .arg("-o")
            .arg(binary)
            .arg(source)
            .args(libs)
            .arg("-pthread")
            .output()
            .expect("cannot run cc");
        assert!(
            output.status.success(),
            "building {}:\n{}",
            source.display(),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// `binary` needs `needed` and has no rpath, and on the shim's library path each of
    /// `loaded` comes from the shim and nothing from NVIDIA's directory; `ldd`'s output.
    pub fn assert_loads_the_shims(&self, binary: &Path, needed: &str, loaded: &[&str]) -> String {
        let readelf = Command::new("readelf")
            .arg("-d")
            .arg(binary)
            .output()
            .unwrap();
        let dynamic = String::from_utf8_lossy(&readelf.stdout);
        assert!(dynamic.contains(&format!("[{needed}]")), "{dynamic}");
        assert!(
            !dynamic.contains("RPATH") && !dynamic.contains("RUNPATH"),
            "{dynamic}"
        );
        let ldd = Command::new("ldd")
            .arg(binary)
            .env("LD_LIBRARY_PATH", shim_lib_dir())
            .output()
            .unwrap();
        let ldd = String::from_utf8_lossy(&ldd.stdout).into_owned();
        let shim = shim_lib_dir();
        for library in loaded {
            let line = ldd
                .lines()
                .find(|l| l.trim_start().starts_with(library))
                .unwrap_or_else(|| panic!("{library} not loaded:\n{ldd}"));
            assert!(
                line.contains(&*shim.to_string_lossy()),
                "{library} is not the shim's:\n{ldd}"
            );
        }
        assert!(
            !ldd.contains(&self.lib),
            "NVIDIA's runtime is loaded:\n{ldd}"
        );
        ldd
    }
}

/// The stdout of a sample's run (`name`, run `how`), which must have exited 0 with PASS as its
/// last line.
pub fn passed(name: &str, how: &str, output: &Output) -> String {
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stdout.lines().last() == Some("PASS"),
        "{name} {how}: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        output.status
    );
    stdout
}
