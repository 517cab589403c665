//! A real third-party client: `examples/cudarc_loop.rs`, built on the `cudarc` crate, which
//! `dlopen`s the driver and finds every function with `dlsym`. itermem records it, detects its
//! iteration and serves it in pool mode, with results identical under jitter.

mod support;

use std::path::PathBuf;
use support::{read_json, run_ok, run_under_itermem, scratch, stdout_ok};

/// The example as `cargo test` builds it (examples are built with the tests, beside `deps/`).
fn cudarc_loop() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let path = exe
        .parent()
        .and_then(|deps| deps.parent())
        .unwrap()
        .join("examples/cudarc_loop");
    assert!(
        path.exists(),
        "{} is missing: `cargo test` builds it (or `cargo build --example cudarc_loop`)",
        path.display()
    );
    path
}

const JITTER: [(&str, &str); 3] = [
    ("CUDA_SHIM_JITTER_US", "100"),
    ("CUDA_SHIM_SEED", "11"),
    ("LD_BIND_NOW", "1"),
];

#[test]
fn a_cudarc_program_is_recorded_detected_and_pooled() {
    let program = cudarc_loop();
    let args = [program.to_str().unwrap(), "--iters", "12"];
    let plain = run_ok(&program, &args[1..], &JITTER);

    let trace = scratch("cudarc.itrace");
    let recorded = stdout_ok(&run_under_itermem(
        &["--trace", trace.to_str().unwrap()],
        &args,
        &JITTER,
    ));
    assert_eq!(
        recorded, plain,
        "the program's output changed under itermem"
    );
    let info = support::trace_info(&trace);
    // 3 weights, then 8 activations per iteration, every one freed.
    assert_eq!(info["events"]["malloc"], 3 + 12 * 8, "{info:#}");
    assert_eq!(info["events"]["free"], 3 + 12 * 8, "{info:#}");
    assert_eq!(info["events"]["memset"], 12, "{info:#}");
    assert!(info["period_events"].as_u64().is_some(), "{info:#}");
    std::fs::remove_file(&trace).unwrap();

    let stats = scratch("cudarc-pool.json");
    let pooled = stdout_ok(&run_under_itermem(
        &["--mode", "pool", "--stats", stats.to_str().unwrap()],
        &args,
        &JITTER,
    ));
    assert_eq!(pooled, plain, "the program's output changed in pool mode");
    let summary = read_json(&stats);
    let pool = &summary["pool"];
    assert_eq!(pool["fallback_after_plan"], 0, "{summary:#}");
    assert!(pool["served"].as_u64().unwrap() >= 2 * 8, "{summary:#}");
    std::fs::remove_file(&stats).unwrap();
}
