//! Several devices: a data-parallel program (one host thread per device, gradients gathered
//! by peer copies) on a two-device shim is recorded per device, each device's iteration is
//! detected on its own and served from its own pool, with bit-identical results under jitter.

mod support;

use std::process::Command;
use support::{
    itermem, program, read_json, run_ok, run_under_itermem, scratch, stdout_ok, trace_info,
};

const ENV: [(&str, &str); 4] = [
    ("CUDA_SHIM_DEVICES", "2"),
    ("CUDA_SHIM_JITTER_US", "50"),
    ("CUDA_SHIM_SEED", "5"),
    ("LD_BIND_NOW", "1"),
];

/// Events of one iteration on one device: 4 mallocs, 4 frees, 4 launches (forward, backward,
/// accumulate, sgd) and 2 gathering copies (one per device).
const PERIOD: u64 = 14;

#[test]
fn a_data_parallel_program_is_recorded_and_detected_per_device() {
    let program = program("data_parallel");
    let args = [program.to_str().unwrap(), "--iters", "30"];
    let plain = run_ok(&program, &args[1..], &ENV);
    assert!(plain.contains("weights agree"), "{plain}");
    let trace = scratch("data-parallel.itrace");
    let recorded = stdout_ok(&run_under_itermem(
        &["--trace", trace.to_str().unwrap()],
        &args,
        &ENV,
    ));
    assert_eq!(
        recorded, plain,
        "the program's output changed under itermem"
    );
    let info = trace_info(&trace);
    assert_eq!(info["format_version"], 2);
    let devices = info["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 2, "{info:#}");
    for (ordinal, device) in devices.iter().enumerate() {
        assert_eq!(device["device"], ordinal as u64);
        // The weights, then 30 iterations; one upload and one download of the weights.
        assert_eq!(device["events"]["malloc"], 1 + 30 * 4, "{device:#}");
        assert_eq!(device["period_events"], PERIOD, "{device:#}");
        assert!(device["iterations"].as_u64().unwrap() >= 25, "{device:#}");
    }
    // One device's events alone, as every reader takes them with --from-device.
    let output = Command::new(itermem())
        .args(["trace", "info", "--json", "--from-device", "1"])
        .arg(&trace)
        .output()
        .unwrap();
    let one: serde_json::Value = serde_json::from_str(&stdout_ok(&output)).unwrap();
    assert_eq!(one["events"]["malloc"], 1 + 30 * 4, "{one:#}");
    assert_eq!(one["period_events"], PERIOD, "{one:#}");
    let output = Command::new(itermem())
        .args([
            "trace",
            "export",
            "--format",
            "dsa-csv",
            "--from-device",
            "1",
        ])
        .arg(&trace)
        .output()
        .unwrap();
    // The header, the device's weights (live throughout) and one iteration's four temporaries.
    assert_eq!(stdout_ok(&output).lines().count(), 1 + 1 + 4);
    let output = Command::new(itermem())
        .args(["trace", "info", "--from-device", "7"])
        .arg(&trace)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("no event of that device"));
    // The op-level reader takes one device's iteration too: 6 ops (the 2 gathering copies
    // and 4 launches) over 5 tensors.
    let output = Command::new(itermem())
        .args(["plan", "--from-device", "1", "--limit", "90%"])
        .arg(&trace)
        .output()
        .unwrap();
    assert!(stdout_ok(&output).contains("(6 ops, 5 tensors)"));
    std::fs::remove_file(&trace).unwrap();
}

#[test]
fn each_device_is_served_from_its_own_pool() {
    let program = program("data_parallel");
    let args = [program.to_str().unwrap(), "--iters", "30"];
    let plain = run_ok(&program, &args[1..], &ENV);
    let stats = scratch("data-parallel-pool.json");
    let shim_stats = scratch("data-parallel-shim.json");
    let mut env = ENV.to_vec();
    env.push(("CUDA_SHIM_STATS", shim_stats.to_str().unwrap()));
    let pooled = stdout_ok(&run_under_itermem(
        &["--mode", "pool", "--stats", stats.to_str().unwrap()],
        &args,
        &env,
    ));
    assert_eq!(pooled, plain, "the program's output changed in pool mode");
    let summary = read_json(&stats);
    let devices = summary["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 2, "{summary:#}");
    let shim = read_json(&shim_stats);
    for (ordinal, device) in devices.iter().enumerate() {
        let pool = &device["pool"];
        assert_eq!(pool["plans"], 1, "{summary:#}");
        assert_eq!(pool["fallback_after_plan"], 0, "{summary:#}");
        assert!(pool["served"].as_u64().unwrap() >= 2 * 4, "{summary:#}");
        // The pool is on its own device: its peak is the weights plus its pool.
        let weights = 4 << 16;
        let peak = shim["devices"][ordinal]["peak_device_bytes"]
            .as_u64()
            .unwrap();
        assert_eq!(
            peak,
            weights + pool["pool_bytes"].as_u64().unwrap(),
            "device {ordinal}: {shim:#}"
        );
    }
    std::fs::remove_file(&stats).unwrap();
    std::fs::remove_file(&shim_stats).unwrap();
}

/// Swap mode on a data-parallel program: every device keeps the limit, and what itermem serves
/// a device from mapped host memory (past the limit) still reaches the other device through the
/// program's peer copies, so the weights agree as they do without itermem.
#[test]
fn swap_mode_keeps_every_device_under_the_limit_through_peer_copies() {
    let program = program("data_parallel");
    let args = [program.to_str().unwrap(), "--iters", "30"];
    let plain = run_ok(&program, &args[1..], &ENV);
    let stats = scratch("data-parallel-swap.json");
    let shim_stats = scratch("data-parallel-swap-shim.json");
    let mut env = ENV.to_vec();
    env.push(("CUDA_SHIM_STATS", shim_stats.to_str().unwrap()));
    // Each device holds 1 MiB at its peak: its weights and four temporaries of 256 KiB.
    let limit = 800_000u64;
    let swapped = stdout_ok(&run_under_itermem(
        &[
            "--mode",
            "swap",
            "--limit",
            &limit.to_string(),
            "--stats",
            stats.to_str().unwrap(),
        ],
        &args,
        &env,
    ));
    assert_eq!(swapped, plain, "the program's output changed in swap mode");
    let (summary, shim) = (read_json(&stats), read_json(&shim_stats));
    for ordinal in 0..2 {
        let peak = shim["devices"][ordinal]["peak_device_bytes"]
            .as_u64()
            .unwrap();
        assert!(peak <= limit, "device {ordinal}: peak {peak}: {shim:#}");
        let swap = &summary["devices"][ordinal]["swap"];
        assert!(
            swap["warmup_host_allocations"].as_u64().unwrap() > 0,
            "device {ordinal} never went past the limit: {summary:#}"
        );
    }
    std::fs::remove_file(&stats).unwrap();
    std::fs::remove_file(&shim_stats).unwrap();
}
