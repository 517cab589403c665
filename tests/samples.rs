//! NVIDIA-style samples on the shim: programs written like NVIDIA's kernel-free cuda-samples
//! (`tests/programs/samples/`: deviceQuery, deviceQueryDrv, topologyQuery, bandwidthTest and
//! p2pBandwidthLatencyTest with copies for its kernels) are built here as a user builds them:
//! against NVIDIA's own headers and linked to NVIDIA's own `libcudart.so.12` (from the
//! `nvidia-cuda-runtime-cu12` wheel `tools/abi-check` caches; the driver-API sample links with
//! `-lcuda`, as against the toolkit's stub, so it needs `libcuda.so.1`). Run with the shim's
//! directory on the library path, each loads the shim's runtime and driver in place of NVIDIA's
//! and must print PASS, with `LD_BIND_NOW=1` (every symbol it imports exists) on two devices:
//! alone, and under itermem in record and pool mode.
//!
//! Without the wheel (offline, no pip) the test says it is SKIPPED and passes, unless
//! `REQUIRE_NVIDIA_WHEELS=1`, which makes that a failure.

mod support;

use std::path::{Path, PathBuf};
use support::{
    NvidiaDirs, nvidia_dirs, passed, root, run_on_shim, run_under_itermem, scratch, shim_lib_dir,
};

/// The samples: name, whether it uses the driver API alone (linked with `-lcuda`), and whether
/// it calls a function itermem hooks (so that itermem starts and writes its statistics).
const SAMPLES: [(&str, bool, bool); 5] = [
    ("device_query", false, true),
    ("device_query_drv", true, true),
    ("topology_query", false, false),
    ("bandwidth_test", false, true),
    ("p2p_bandwidth", false, true),
];

const ENV: [(&str, &str); 2] = [("CUDA_SHIM_DEVICES", "2"), ("LD_BIND_NOW", "1")];

/// Builds sample `name` into `dir` against NVIDIA's headers, linked to NVIDIA's runtime (or, for
/// the driver-API sample, to a `libcuda.so` with the soname `libcuda.so.1`: the shim's, standing
/// in for the toolkit's stub).
fn build(nvidia: &NvidiaDirs, dir: &Path, name: &str, driver_only: bool) -> PathBuf {
    let binary = dir.join(name);
    let (search, lib) = if driver_only {
        (shim_lib_dir().display().to_string(), "-lcuda")
    } else {
        (nvidia.lib.clone(), "-l:libcudart.so.12")
    };
    let source = root().join(format!("tests/programs/samples/{name}.c"));
    nvidia.build(&source, &binary, &[&format!("-L{search}"), lib]);
    binary
}

#[test]
fn nvidia_style_samples_built_against_nvidias_runtime_pass_on_the_shim() {
    support::program("shim_checks"); // builds the shim
    let Some(nvidia) = nvidia_dirs(12) else {
        return;
    };
    let dir = scratch("samples");
    std::fs::create_dir_all(&dir).unwrap();
    for (name, driver_only, hooked) in SAMPLES {
        let binary = build(&nvidia, &dir, name, driver_only);
        if driver_only {
            nvidia.assert_loads_the_shims(&binary, "libcuda.so.1", &["libcuda.so.1"]);
        } else {
            let loaded = ["libcudart.so.12", "libcuda.so.1"];
            nvidia.assert_loads_the_shims(&binary, "libcudart.so.12", &loaded);
        }
        passed(name, "alone", &run_on_shim(&binary, &[], &ENV));
        let program = binary.to_str().unwrap();
        for mode in ["record", "pool"] {
            let stats = dir.join(format!("{name}-{mode}.json"));
            let output = run_under_itermem(
                &["--mode", mode, "--stats", stats.to_str().unwrap()],
                &[program],
                &ENV,
            );
            passed(name, &format!("under itermem --mode {mode}"), &output);
            if hooked {
                let stats = support::read_json(&stats);
                assert_eq!(stats["mode"], mode, "{name}: {stats:#}");
                assert_eq!(stats["internal_error"], false, "{name}: {stats:#}");
            }
        }
    }
}
