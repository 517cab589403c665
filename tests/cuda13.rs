//! The CUDA 13 runtime (`libcudart.so.13`, docs/cuda13.md): the NVIDIA-style samples of
//! `tests/programs/samples/` are built as a CUDA 13 user builds them, against NVIDIA's CUDA 13
//! headers and linked to NVIDIA's own `libcudart.so.13` (from the `nvidia-cuda-runtime` 13 wheel
//! that `tools/abi-check --nvidia-dirs 13` caches), so every runtime function they call is
//! recorded as `name@libcudart.so.13` with CUDA 13's prototype (`cudaGetDeviceProperties` with
//! CUDA 13's `struct cudaDeviceProp`, the 88-byte `struct cudaPointerAttributes`). On the shim's
//! library path they load the shim's `libcudart.so.13` and `libcuda.so.1` instead and must print
//! PASS with `LD_BIND_NOW=1` on two devices, with the shim's driver reporting CUDA 13.5 (its
//! default), alone, preloaded by `tools/with-shim --cuda 13` and under itermem; with a CUDA 12
//! driver (`CUDA_SHIM_DRIVER_VERSION=12090`) the runtime refuses to start, as NVIDIA's does
//! (`cudaErrorInsufficientDriver`).
//!
//! Without the wheel (offline, no pip) the test says it is SKIPPED and passes, unless
//! `REQUIRE_NVIDIA_WHEELS=1`, which makes that a failure.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use support::{
    NvidiaDirs, nvidia_dirs, passed, root, run_on_shim, run_under_itermem_unpreloaded, scratch,
    shim_lib_dir,
};

/// The samples that use the runtime (device_query_drv uses the driver only).
const SAMPLES: [&str; 4] = [
    "device_query",
    "topology_query",
    "bandwidth_test",
    "p2p_bandwidth",
];

const ENV: [(&str, &str); 2] = [("CUDA_SHIM_DEVICES", "2"), ("LD_BIND_NOW", "1")];

/// A CUDA 12.9 driver, too old for a CUDA 13 runtime.
const CUDA12_DRIVER: (&str, &str) = ("CUDA_SHIM_DRIVER_VERSION", "12090");

/// Builds `source` against NVIDIA's CUDA 13 headers into `dir`, linked to NVIDIA's
/// `libcudart.so.13`.
fn build(nvidia: &NvidiaDirs, dir: &Path, source: &str, name: &str) -> PathBuf {
    let binary = dir.join(name);
    let lib = format!("-L{}", nvidia.lib);
    nvidia.build(
        &root().join(source),
        &binary,
        &[&lib, "-l:libcudart.so.13", "-ldl"],
    );
    binary
}

/// The binary needs `libcudart.so.13` and imports every runtime function at version
/// `libcudart.so.13`; on the shim's library path both CUDA libraries are the shim's, and no
/// CUDA 12 runtime is loaded.
fn check_libraries(binary: &Path, nvidia: &NvidiaDirs) {
    let loaded = ["libcudart.so.13", "libcuda.so.1"];
    let ldd = nvidia.assert_loads_the_shims(binary, "libcudart.so.13", &loaded);
    assert!(!ldd.contains("libcudart.so.12"), "{ldd}");
    let symbols = Command::new("readelf")
        .args(["-W", "--dyn-syms"])
        .arg(binary)
        .output()
        .unwrap();
    let symbols = String::from_utf8_lossy(&symbols.stdout);
    let imports: Vec<&str> = symbols
        .split_whitespace()
        .filter(|word| word.starts_with("cuda"))
        .collect();
    assert!(
        imports.contains(&"cudaGetDeviceProperties@libcudart.so.13")
            || !binary.ends_with("device_query"),
        "{imports:?}"
    );
    for import in &imports {
        assert!(
            import.ends_with("@libcudart.so.13"),
            "{} imports {import}",
            binary.display()
        );
    }
}

#[test]
fn samples_built_against_nvidias_cuda_13_runtime_pass_on_the_shims_libcudart_so_13() {
    support::program("shim_checks"); // builds the shim
    let Some(nvidia) = nvidia_dirs(13) else {
        return;
    };
    let dir = scratch("cuda13");
    std::fs::create_dir_all(&dir).unwrap();
    for name in SAMPLES {
        let source = format!("tests/programs/samples/{name}.c");
        let binary = build(&nvidia, &dir, &source, name);
        check_libraries(&binary, &nvidia);
        let stdout = passed(name, "alone", &run_on_shim(&binary, &[], &ENV));
        if name == "device_query" {
            assert!(
                stdout.contains("CUDA driver version 13.5, runtime version 13.5"),
                "{stdout}"
            );
        }

        // tools/with-shim --cuda 13 preloads libcudart.so.13.
        let output = Command::new(root().join("tools/with-shim"))
            .args(["--cuda", "13"])
            .arg(&binary)
            .env_remove("CUDA_SHIM_DRIVER_VERSION")
            .envs(ENV)
            .output()
            .unwrap();
        passed(name, "with tools/with-shim --cuda 13", &output);

        // A CUDA 12 driver is too old for the CUDA 13 runtime.
        let old_driver = run_on_shim(&binary, &[], &[ENV[0], ENV[1], CUDA12_DRIVER]);
        let stderr = String::from_utf8_lossy(&old_driver.stderr);
        assert!(
            !old_driver.status.success() && stderr.contains("cudaErrorInsufficientDriver"),
            "{name} on a CUDA 12 driver: {}\n{stderr}",
            old_driver.status
        );

        // itermem's hooks forward to the runtime the program loaded (the only one loaded).
        for mode in ["record", "pool"] {
            let stats = dir.join(format!("{name}-{mode}.json"));
            let output = run_under_itermem_unpreloaded(
                &["--mode", mode, "--stats", stats.to_str().unwrap()],
                &[binary.to_str().unwrap()],
                &ENV,
            );
            passed(name, &format!("under itermem --mode {mode}"), &output);
            if name != "topology_query" {
                let stats = support::read_json(&stats);
                assert_eq!(stats["mode"], mode, "{name}: {stats:#}");
                assert_eq!(stats["internal_error"], false, "{name}: {stats:#}");
                assert!(
                    stats["hooked_calls"].as_u64() > Some(0),
                    "{name}: {stats:#}"
                );
            }
        }
    }
}

/// Our own CUDA 13 headers (`cuda-shim/include13`, which include the shared ones of
/// `cuda-shim/include` with CUDA 13's version) serve the samples as NVIDIA's do: built against
/// them and linked to the shim's `libcudart.so.13` (no NVIDIA wheel needed), they PASS on the
/// shim's default driver. `tools/abi-check --cuda 13` proves the headers themselves.
#[test]
fn samples_built_against_our_cuda_13_headers_pass_on_libcudart_so_13() {
    support::program("shim_checks"); // builds the shim
    let dir = scratch("cuda13-ours");
    std::fs::create_dir_all(&dir).unwrap();
    let include = |name: &str| format!("-I{}", root().join(name).display());
    for name in SAMPLES {
        let binary = dir.join(name);
        let output = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
            .args(["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror"])
            .args([include("cuda-shim/include13"), include("cuda-shim/include")])
            .arg("-o")
            .arg(&binary)
            .arg(root().join(format!("tests/programs/samples/{name}.c")))
            .arg(format!("-L{}", shim_lib_dir().display()))
            .arg(format!("-Wl,-rpath-link,{}", shim_lib_dir().display()))
            .args(["-l:libcudart.so.13", "-ldl", "-pthread"])
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "building {name} against cuda-shim/include13:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let stdout = passed(
            name,
            "built with include13",
            &run_on_shim(&binary, &[], &ENV),
        );
        if name == "device_query" {
            assert!(
                stdout.contains("CUDA driver version 13.5, runtime version 13.5"),
                "{stdout}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// `itermem run --shim` with `--cuda 13` preloads the shim's `libcudart.so.13`, not `.12`, and
/// leaves `CUDA_SHIM_DRIVER_VERSION` as the caller set it (the driver reports CUDA 13.5 to both
/// runtimes unless told otherwise); `--cuda` needs `--shim`.
#[test]
fn itermem_run_shim_cuda_13_preloads_libcudart_so_13() {
    support::program("shim_checks"); // builds the shim
    let run = |extra: &[&str], command: &[&str], env: &[(&str, &str)]| {
        let mut args = vec!["--mode", "off"];
        args.extend_from_slice(extra);
        support::stdout_ok(&support::run_under_itermem(&args, command, env))
    };
    let maps = run(&["--cuda", "13"], &["cat", "/proc/self/maps"], &[]);
    let shim = shim_lib_dir().join("libcudart.so.13");
    assert!(maps.contains(&*shim.to_string_lossy()), "{maps}");
    assert!(!maps.contains("libcudart.so.12"), "{maps}");
    assert!(maps.contains("libcuda.so.1"), "{maps}");
    let maps = run(&[], &["cat", "/proc/self/maps"], &[]);
    assert!(maps.contains("libcudart.so.12"), "{maps}");
    assert!(!maps.contains("libcudart.so.13"), "{maps}");

    let version = |extra: &[&str], env: &[(&str, &str)]| {
        run(
            extra,
            &["sh", "-c", "echo \"v=$CUDA_SHIM_DRIVER_VERSION\""],
            env,
        )
    };
    assert_eq!(version(&["--cuda", "13"], &[]), "v=\n");
    assert_eq!(version(&["--cuda", "12"], &[]), "v=\n");
    assert_eq!(version(&[], &[]), "v=\n");
    assert_eq!(
        version(&["--cuda", "13"], &[("CUDA_SHIM_DRIVER_VERSION", "13010")]),
        "v=13010\n"
    );

    for (args, message) in [
        (&["run", "--cuda", "13", "--", "true"][..], "--shim"),
        (
            &["run", "--shim", "--cuda", "11", "--", "true"][..],
            "12 or 13",
        ),
    ] {
        let output = Command::new(support::itermem())
            .args(args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            !output.status.success() && stderr.contains(message),
            "{args:?}: {stderr}"
        );
    }
}

/// `itermem replay --shim --cuda 13` replays on the shim's CUDA 13 runtime (the replayer uses the
/// preloaded runtime rather than loading `libcudart.so.12` beside it): it verifies every tensor
/// with the default CUDA 13.5 driver, and fails as NVIDIA's CUDA 13 runtime does on a CUDA 12
/// driver, which only `libcudart.so.13` refuses.
#[test]
fn itermem_replay_shim_cuda_13_replays_on_libcudart_so_13() {
    let program = support::program("mlp_train");
    let dir = scratch("cuda13-replay");
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("mlp.itrace");
    support::stdout_ok(&support::run_under_itermem(
        &["--mode", "record", "--trace", trace.to_str().unwrap()],
        &[program.to_str().unwrap(), "--iters", "4"],
        &[],
    ));
    let replay = |driver: Option<&str>| {
        let mut command = Command::new(support::itermem());
        command
            .args([
                "replay", "--shim", "--cuda", "13", "--mode", "record", "--iters", "2",
            ])
            .arg(&trace)
            .env_remove("CUDA_SHIM_DRIVER_VERSION")
            .env_remove("LD_PRELOAD");
        if let Some(version) = driver {
            command.env("CUDA_SHIM_DRIVER_VERSION", version);
        }
        command.output().unwrap()
    };
    let out = support::stdout_ok(&replay(None));
    assert!(out.contains("every tensor held what was written"), "{out}");
    let old = replay(Some("12090"));
    let stderr = String::from_utf8_lossy(&old.stderr);
    assert!(
        !old.status.success() && stderr.contains("insufficient") && stderr.contains("(error 35)"),
        "{}\n{stderr}",
        old.status
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// The runtime functions torch 2.15 imports beyond the CUDA 12 set (nvcc 13's
/// `__cudaGetKernel`/`__cudaLaunchKernel`, cooperative launches, occupancy, graph memory, graph
/// and capture calls, user objects, `cudaLibrary*`), called by `tests/programs/cuda13/
/// torch215_api.c` built against NVIDIA's CUDA 13 headers and linked to NVIDIA's
/// `libcudart.so.13`: PASS on the shim's, alone and under itermem.
#[test]
fn the_functions_torch_2_15_adds_work_on_the_shims_libcudart_so_13() {
    support::program("shim_checks"); // builds the shim
    let Some(nvidia) = nvidia_dirs(13) else {
        return;
    };
    let dir = scratch("cuda13-api");
    std::fs::create_dir_all(&dir).unwrap();
    let source = "tests/programs/cuda13/torch215_api.c";
    let binary = build(&nvidia, &dir, source, "torch215_api");
    check_libraries(&binary, &nvidia);
    passed("torch215_api", "alone", &run_on_shim(&binary, &[], &ENV));
    for mode in ["record", "pool"] {
        let output =
            run_under_itermem_unpreloaded(&["--mode", mode], &[binary.to_str().unwrap()], &ENV);
        passed(
            "torch215_api",
            &format!("under itermem --mode {mode}"),
            &output,
        );
    }
    let output = support::run_under_itermem(
        &["--cuda", "13", "--mode", "record"],
        &[binary.to_str().unwrap()],
        &ENV,
    );
    passed(
        "torch215_api",
        "under itermem run --shim --cuda 13",
        &output,
    );
    let _ = std::fs::remove_dir_all(dir);
}
