//! NVIDIA's own CUDA runtime on the shim's driver: the programs of `tests/programs/cu/`, built
//! by nvcc (`tools/build-cuda-programs`), run with NVIDIA's static runtime (nvcc's default,
//! `NAME-static`) and with NVIDIA's `libcudart.so.13` (the `-cudart shared` builds, with the
//! wheel's library first on the path), on `libcuda.so.1` of the shim alone. Each prints what it
//! prints on the shim's own runtime, alone and under itermem, which sees each allocation and
//! launch exactly once (the same event counts as with the shim's runtime), in every mode.
//! `tests/programs/cu/runtime_api.cu` adds what NVIDIA's runtime turns into calls of its own:
//! `__device__` variables, kernel attributes, a `cudaDeviceReset` between two rounds.
//! C programs built by gcc against NVIDIA's CUDA 12.9 and 13.5 headers (the runtime-API samples
//! of `tests/programs/samples/`) run with NVIDIA's `libcudart_static.a` linked in, and with
//! NVIDIA's `libcudart.so.12`/`.so.13` first on the path, on the shim's driver as well.
//!
//! Without PyPI the toolchain cannot be installed: each test then says it is SKIPPED and passes.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use support::{
    number, nvidia_dirs, passed, read_json, root, run_under_itermem, run_under_itermem_unpreloaded,
    scratch, shim_lib_dir, stdout_ok, trace_info,
};

/// The programs and their arguments.
const PROGRAMS: [(&str, &[&str]); 7] = [
    ("vector_add", &[]),
    ("kernels_check", &[]),
    ("mlp_train", &[]),
    ("mlp_train", &["--adam"]),
    ("runtime_api", &[]),
    ("driver_calls", &[]),
    ("idle_tensor", &[]),
];

/// The folder of the built programs, with the shim built too (NVIDIA's runtime is run on its
/// driver directly, not through `tools/with-shim`); `None` (after one SKIPPED line) when the
/// toolchain cannot be installed here.
fn built() -> Option<PathBuf> {
    static SHIM: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    SHIM.get_or_init(|| {
        let shim = Command::new(root().join("tools/build-shim"))
            .output()
            .expect("cannot run tools/build-shim");
        assert!(
            shim.status.success(),
            "tools/build-shim failed:\n{}",
            String::from_utf8_lossy(&shim.stderr)
        );
    });
    support::nvcc::built("")
}

/// Where `tools/build-cuda-programs` installed NVIDIA's `libcudart.so.13`.
fn nvidia_lib_dir() -> PathBuf {
    root().join("target/cuda-toolchain/pip/nvidia/cu13/lib")
}

/// How a program finds its runtime.
#[derive(Clone, Copy, Debug)]
enum Runtime {
    /// The shim's `libcudart.so.13` (preloaded by `tools/with-shim --cuda 13`): the reference.
    Shim,
    /// NVIDIA's static runtime, linked into `NAME-static`.
    NvidiaStatic,
    /// NVIDIA's `libcudart.so.13`, first on the library path.
    NvidiaShared,
}

impl Runtime {
    fn binary(self, dir: &Path, name: &str) -> PathBuf {
        match self {
            Runtime::NvidiaStatic => dir.join(format!("{name}-static")),
            Runtime::Shim | Runtime::NvidiaShared => dir.join(name),
        }
    }

    /// `LD_LIBRARY_PATH` for a run with this runtime on the shim's driver.
    fn library_path(self) -> String {
        match self {
            Runtime::Shim | Runtime::NvidiaStatic => shim_lib_dir().display().to_string(),
            Runtime::NvidiaShared => format!(
                "{}:{}",
                nvidia_lib_dir().display(),
                shim_lib_dir().display()
            ),
        }
    }
}

/// `program args…` with `runtime`, every symbol bound at load time, the driver logging the
/// export tables it is asked for, `env` added.
fn run(runtime: Runtime, program: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = match runtime {
        Runtime::Shim => {
            let mut command = Command::new(root().join("tools/with-shim"));
            command.args(["--cuda", "13"]).arg(program);
            command
        }
        Runtime::NvidiaStatic | Runtime::NvidiaShared => {
            let mut command = Command::new(program);
            command.env("LD_LIBRARY_PATH", runtime.library_path());
            command
        }
    };
    command
        .args(args)
        .env("LD_BIND_NOW", "1")
        .env("CUDA_SHIM_LOG_EXPORT_TABLES", "1");
    for var in [
        "CUDA_SHIM_DEVICE_MEMORY",
        "CUDA_SHIM_JITTER_US",
        "CUDA_SHIM_SEED",
        "LD_PRELOAD",
    ] {
        command.env_remove(var);
    }
    command.envs(env.iter().copied());
    command.output().expect("cannot run the program")
}

/// NVIDIA's runtime checked its driver (the integrity table is what only it asks for), and no
/// entry the shim lacks was called.
fn assert_nvidia_runtime_ran(output: &Output, what: &str) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr
            .contains("cuGetExportTable({D4082055-BDE6-704B-8D34-BA123C66E1F2}): INTEGRITY_CHECK"),
        "{what}: NVIDIA's runtime did not run:\n{stderr}"
    );
    assert!(
        !stderr.contains("which the shim does not implement"),
        "{what}:\n{stderr}"
    );
}

#[test]
fn nvidia_runtimes_run_nvcc_programs_on_the_shims_driver() {
    let Some(dir) = built() else { return };
    for (name, args) in PROGRAMS {
        let expected = stdout_ok(&run(
            Runtime::Shim,
            &Runtime::Shim.binary(&dir, name),
            args,
            &[],
        ));
        assert!(
            expected.lines().any(|l| l == "PASSED"),
            "{name}:\n{expected}"
        );
        for runtime in [Runtime::NvidiaStatic, Runtime::NvidiaShared] {
            let output = run(runtime, &runtime.binary(&dir, name), args, &[]);
            let what = format!("{name} {args:?} with {runtime:?}");
            assert_eq!(stdout_ok(&output), expected, "{what}");
            assert_nvidia_runtime_ran(&output, &what);
        }
    }
}

/// The newest CUDA 13 runtime (13.5, the wheel `tools/abi-check` uses) asks for one more table,
/// and calls another entry, than nvcc's 13.0: the shared builds run on it as well.
#[test]
fn the_cuda_13_5_runtime_runs_them_too() {
    let Some(dir) = built() else { return };
    let Some(nvidia) = support::nvidia_dirs(13) else {
        return;
    };
    for (name, args) in PROGRAMS {
        let expected = stdout_ok(&run(
            Runtime::Shim,
            &Runtime::Shim.binary(&dir, name),
            args,
            &[],
        ));
        let output = Command::new(dir.join(name))
            .args(args)
            .env(
                "LD_LIBRARY_PATH",
                format!("{}:{}", nvidia.lib, shim_lib_dir().display()),
            )
            .env("LD_BIND_NOW", "1")
            .env("CUDA_SHIM_LOG_EXPORT_TABLES", "1")
            .env_remove("LD_PRELOAD")
            .output()
            .unwrap();
        let what = format!("{name} {args:?} on NVIDIA's CUDA 13.5 runtime");
        assert_eq!(stdout_ok(&output), expected, "{what}");
        assert_nvidia_runtime_ran(&output, &what);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains("{21318C60-9714-3248-8CA6-41FF7324C8F2}): UNNAMED_13_5"),
            "{what}: not the 13.5 runtime:\n{stderr}"
        );
    }
}

/// The static runtime loads its kernels with `cuLibraryLoadData` in eager loading too.
#[test]
fn eager_module_loading_runs_the_same_kernels() {
    let Some(dir) = built() else { return };
    let program = Runtime::NvidiaStatic.binary(&dir, "kernels_check");
    let lazy = stdout_ok(&run(Runtime::NvidiaStatic, &program, &[], &[]));
    let output = Command::new(&program)
        .env("LD_LIBRARY_PATH", shim_lib_dir())
        .env("CUDA_MODULE_LOADING", "EAGER")
        .output()
        .unwrap();
    assert_eq!(stdout_ok(&output), lazy);
}

/// `itermem run FLAGS -- program args…` with `runtime` on the shim's driver, every symbol bound
/// at load time, `env` added.
fn under_itermem(
    runtime: Runtime,
    flags: &[&str],
    program: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> Output {
    let mut program_args = vec![program.to_str().unwrap()];
    program_args.extend_from_slice(args);
    let mut env = env.to_vec();
    env.push(("LD_BIND_NOW", "1"));
    match runtime {
        Runtime::Shim => run_under_itermem(
            &[&["--cuda", "13"][..], flags].concat(),
            &program_args,
            &env,
        ),
        Runtime::NvidiaStatic | Runtime::NvidiaShared => {
            let library_path = runtime.library_path();
            env.push(("LD_LIBRARY_PATH", &library_path));
            run_under_itermem_unpreloaded(flags, &program_args, &env)
        }
    }
}

const RUNTIMES: [Runtime; 3] = [Runtime::Shim, Runtime::NvidiaStatic, Runtime::NvidiaShared];

/// `itermem run --mode record|pool` with each runtime: the same output as alone, and the same
/// events as with the shim's runtime: every allocation, free and launch seen once, every
/// launch's parameters known.
#[test]
fn itermem_sees_nvidias_runtime_once() {
    let Some(dir) = built() else { return };
    for (name, args) in [("mlp_train", &["--adam"][..]), ("runtime_api", &[][..])] {
        let expected = stdout_ok(&run(
            Runtime::Shim,
            &Runtime::Shim.binary(&dir, name),
            args,
            &[],
        ));
        for mode in ["record", "pool"] {
            let mut reference = None;
            let mut nvidia_events = None;
            for runtime in RUNTIMES {
                let what = format!("{name} under itermem {mode} with {runtime:?}");
                let stats = scratch(&format!("nvidia-runtime-{name}-{mode}-{runtime:?}.json"));
                let flags = ["--mode", mode, "--stats", stats.to_str().unwrap()];
                let output = under_itermem(runtime, &flags, &runtime.binary(&dir, name), args, &[]);
                assert_eq!(stdout_ok(&output), expected, "{what}");
                let stats = read_json(&stats);
                assert_eq!(stats["launches_without_layout"], 0, "{what}: {stats:#}");
                let events = &stats["events"];
                let seen = [
                    events["malloc"].clone(),
                    events["free"].clone(),
                    events["launch"].clone(),
                    events["memset"].clone(),
                    stats["host_events"].clone(),
                    stats["kernels"].clone(),
                    stats["peak_live_bytes"].clone(),
                    stats["live_bytes_at_exit"].clone(),
                    stats["iterations"].clone(),
                ];
                match &reference {
                    None => reference = Some(seen),
                    Some(reference) => assert_eq!(&seen, reference, "{what}: {stats:#}"),
                }
                // Copies are compared between NVIDIA's runtimes only: the shim's runtime copies
                // to a symbol through a private driver call itermem does not see.
                match runtime {
                    Runtime::Shim => {}
                    Runtime::NvidiaStatic => nvidia_events = Some(events.clone()),
                    Runtime::NvidiaShared => {
                        assert_eq!(Some(events), nvidia_events.as_ref(), "{what}")
                    }
                }
            }
        }
    }
}

/// cnmem mode serves every allocation with each runtime; swap mode, on a device smaller than the
/// program's peak and with the same limit, plans, swaps the idle tensor out and back every
/// iteration (its host copy poisoned on the device meanwhile) and keeps the device's peak under
/// the limit: with NVIDIA's runtimes exactly as with the shim's, and outputs unchanged.
#[test]
fn cnmem_and_swap_modes_run_on_nvidias_runtime_unchanged() {
    let Some(dir) = built() else { return };
    let args = ["--adam"];
    let expected = stdout_ok(&run(Runtime::Shim, &dir.join("mlp_train"), &args, &[]));
    for runtime in RUNTIMES {
        let what = format!("mlp_train under itermem cnmem with {runtime:?}");
        let stats = scratch(&format!("nvidia-runtime-cnmem-{runtime:?}.json"));
        let flags = ["--mode", "cnmem", "--stats", stats.to_str().unwrap()];
        let binary = runtime.binary(&dir, "mlp_train");
        let output = under_itermem(runtime, &flags, &binary, &args, &[]);
        assert_eq!(stdout_ok(&output), expected, "{what}");
        let stats = read_json(&stats);
        assert_eq!(
            stats["cnmem"]["served"], stats["events"]["malloc"],
            "{what}: {stats:#}"
        );
    }

    // idle_tensor's peak is 3 MiB; its first tensor waits idle through it.
    const LIMIT: &str = "2500K";
    let args = ["24"];
    let expected = stdout_ok(&run(Runtime::Shim, &dir.join("idle_tensor"), &args, &[]));
    let small = [("CUDA_SHIM_DEVICE_MEMORY", LIMIT)];
    let plain_small = run(
        Runtime::NvidiaStatic,
        &dir.join("idle_tensor-static"),
        &args,
        &small,
    );
    assert!(
        !plain_small.status.success(),
        "idle_tensor alone fits {LIMIT}"
    );
    let mut reference = None;
    for runtime in RUNTIMES {
        let what = format!("idle_tensor under itermem swap with {runtime:?}");
        let stats = scratch(&format!("nvidia-runtime-swap-{runtime:?}.json"));
        let shim_stats = scratch(&format!("nvidia-runtime-swap-{runtime:?}-shim.json"));
        let flags = [
            "--mode",
            "swap",
            "--limit",
            LIMIT,
            "--stats",
            stats.to_str().unwrap(),
        ];
        let mut env = small.to_vec();
        env.push(("ITERMEM_SWAP_VERIFY", "1"));
        env.push(("CUDA_SHIM_STATS", shim_stats.to_str().unwrap()));
        let binary = runtime.binary(&dir, "idle_tensor");
        let output = under_itermem(runtime, &flags, &binary, &args, &env);
        assert_eq!(stdout_ok(&output), expected, "{what}");
        let (stats, shim) = (read_json(&stats), read_json(&shim_stats));
        let peak = shim["peak_device_bytes"].as_u64().unwrap();
        assert!(
            peak <= 2500 << 10,
            "{what}: device peak {peak} above {LIMIT}"
        );
        let swap = &stats["swap"];
        assert_eq!(swap["plans"], 1, "{what}: {stats:#}");
        assert_eq!(swap["swaps_planned"], 1, "{what}: {stats:#}");
        assert_eq!(swap["on_demand_swap_ins"], 0, "{what}: {stats:#}");
        let iterations = swap["iterations"].as_array().unwrap();
        assert!(iterations.len() >= 2, "{what}: {stats:#}");
        for iteration in iterations {
            assert_eq!(iteration["swapped_out"], 1, "{what}: {stats:#}");
        }
        // The same events; not the swaps' count, which depends on when the planner's thread
        // publishes the plan.
        match &reference {
            None => reference = Some(stats["events"].clone()),
            Some(reference) => assert_eq!(&stats["events"], reference, "{what}: {stats:#}"),
        }
    }
}

/// The acceptance of issue 32: a driver call NVIDIA's runtime makes for the program (the
/// runtime path of `driver_calls`) and one the program makes itself (found by
/// `cudaGetDriverEntryPointByVersion` or by `dlsym` in `libcuda.so.1`) are each recorded once,
/// with either of NVIDIA's runtimes as with the shim's.
#[test]
fn issue_32_a_driver_call_is_recorded_once_whoever_makes_it() {
    let Some(dir) = built() else { return };
    let expected = stdout_ok(&run(Runtime::Shim, &dir.join("driver_calls"), &[], &[]));
    for runtime in RUNTIMES {
        let what = format!("driver_calls recorded with {runtime:?}");
        let trace = scratch(&format!("nvidia-runtime-driver-calls-{runtime:?}.itrace"));
        let flags = ["--trace", trace.to_str().unwrap()];
        let binary = runtime.binary(&dir, "driver_calls");
        let output = stdout_ok(&under_itermem(runtime, &flags, &binary, &[], &[]));
        assert_eq!(output, expected, "{what}");
        let info = trace_info(&trace);
        // Three iterations of one call of each kind on each of the three paths.
        for (event, key) in [
            ("malloc", "mallocs"),
            ("free", "frees"),
            ("memset", "memsets"),
            ("launch", "launches"),
            ("memcpy", "memcpys"),
        ] {
            assert_eq!(number(&output, key), 9, "{what}: {output}");
            assert_eq!(info["events"][event], 9, "{what}: {event}: {info:#}");
        }
        assert_eq!(info["kernel_names"], 1, "{what}: {info:#}");
        std::fs::remove_file(&trace).unwrap();
    }
}

/// The samples of `tests/programs/samples/` that use the runtime API only, and whether they call
/// a function itermem hooks (so that itermem starts and writes its statistics).
const SAMPLES: [(&str, bool); 4] = [
    ("device_query", true),
    ("topology_query", false),
    ("bandwidth_test", true),
    ("p2p_bandwidth", true),
];

/// A sample's output without its measurements: the numbers of every line giving a bandwidth.
fn without_timings(output: &str) -> String {
    output
        .lines()
        .map(|line| {
            if line.contains("GB/s") {
                let words = line.split_whitespace();
                let labels: Vec<_> = words.filter(|w| w.parse::<f64>().is_err()).collect();
                labels.join(" ")
            } else {
                line.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// C programs built by gcc against NVIDIA's headers of CUDA 12.9 and 13.5, linked with NVIDIA's
/// `libcudart_static.a` (`-ldl -lpthread -lrt`, as the toolkit documents) or with its shared
/// runtime (then first on the library path), run on the shim's driver alone, on two devices:
/// each passes its own checks, with NVIDIA's runtime (it asked for the integrity table), and
/// prints what it prints on the shim's runtime; under itermem in every mode (record, pool, cnmem,
/// swap), the same, with the same allocations and frees seen as on the shim's runtime.
#[test]
fn c_programs_on_nvidias_static_and_shared_runtimes_12_9_and_13_5() {
    let Some(_) = built() else { return };
    let dir = scratch("nvidia-runtime-samples");
    std::fs::create_dir_all(&dir).unwrap();
    for major in [12, 13] {
        let Some(nvidia) = nvidia_dirs(major) else {
            return;
        };
        let shared_lib = format!("-l:libcudart.so.{major}");
        let static_lib = format!("{}/libcudart_static.a", nvidia.lib);
        let nvidia_path = format!("{}:{}", nvidia.lib, shim_lib_dir().display());
        let shim_path = shim_lib_dir().display().to_string();
        for (name, hooked) in SAMPLES {
            let source = root().join(format!("tests/programs/samples/{name}.c"));
            let shared = dir.join(format!("{name}-{major}"));
            let linked_static = dir.join(format!("{name}-{major}-static"));
            nvidia.build(
                &source,
                &shared,
                &[&format!("-L{}", nvidia.lib), &shared_lib],
            );
            nvidia.build(
                &source,
                &linked_static,
                &[&static_lib, "-ldl", "-lpthread", "-lrt"],
            );
            // (binary, library path, NVIDIA's runtime or the shim's)
            let runs = [
                (&shared, &shim_path, false),
                (&linked_static, &shim_path, true),
                (&shared, &nvidia_path, true),
            ];
            let mut expected = None;
            for mode in ["off", "record", "pool", "cnmem", "swap"] {
                let mut reference = None;
                for &(binary, path, nvidias) in &runs {
                    let what = format!(
                        "{} ({}) in mode {mode}",
                        binary.file_name().unwrap().to_string_lossy(),
                        if nvidias {
                            "NVIDIA's runtime"
                        } else {
                            "the shim's runtime"
                        }
                    );
                    let env = [
                        ("CUDA_SHIM_DEVICES", "2"),
                        ("LD_BIND_NOW", "1"),
                        ("LD_LIBRARY_PATH", path.as_str()),
                        ("CUDA_SHIM_LOG_EXPORT_TABLES", "1"),
                    ];
                    let stats = scratch(&format!("nvidia-runtime-{name}-{major}-{mode}.json"));
                    let output = if mode == "off" {
                        Command::new(binary)
                            .envs(env)
                            .env_remove("LD_PRELOAD")
                            .env_remove("CUDA_SHIM_DEVICE_MEMORY")
                            .output()
                            .unwrap()
                    } else {
                        let flags = ["--mode", mode, "--stats", stats.to_str().unwrap()];
                        run_under_itermem_unpreloaded(&flags, &[binary.to_str().unwrap()], &env)
                    };
                    let stdout = without_timings(&passed(name, &what, &output));
                    if nvidias {
                        assert_nvidia_runtime_ran(&output, &what);
                    }
                    match &expected {
                        None => expected = Some(stdout),
                        Some(expected) => assert_eq!(&stdout, expected, "{what}"),
                    }
                    if mode == "off" || !hooked {
                        continue;
                    }
                    let stats = read_json(&stats);
                    assert_eq!(stats["internal_error"], false, "{what}: {stats:#}");
                    let seen = [
                        stats["events"]["malloc"].clone(),
                        stats["events"]["free"].clone(),
                    ];
                    match &reference {
                        None => reference = Some(seen),
                        Some(reference) => assert_eq!(&seen, reference, "{what}: {stats:#}"),
                    }
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(dir);
}
