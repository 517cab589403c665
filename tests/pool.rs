//! Pool mode (SmartPool) on programs running on the simulated GPU: the program's results do not
//! change, from the first planned iteration on every iteration is served from the pool, the
//! device's peak is the persistent memory plus the planned peak, and a range changes streams
//! only after its earlier tenant's kernels finished.

mod support;

use support::{
    program, read_json, results, run_ok, run_under_itermem, scratch, stdout_ok, value_of,
};

#[test]
fn pool_mode_serves_every_planned_iteration_with_the_planned_footprint() {
    let mlp = program("mlp_train");
    let args = ["--iters", "8"];
    let jitter = [("CUDA_SHIM_JITTER_US", "100"), ("CUDA_SHIM_SEED", "4")];
    let plain = run_ok(&mlp, &args, &jitter);

    let stats = scratch("pool-stats.json");
    let shim_stats = scratch("pool-shim.json");
    let mut env = jitter.to_vec();
    env.push(("CUDA_SHIM_STATS", shim_stats.to_str().unwrap()));
    let output = run_under_itermem(
        &["--mode", "pool", "--stats", stats.to_str().unwrap()],
        &[mlp.to_str().unwrap(), args[0], args[1]],
        &env,
    );
    let pooled = stdout_ok(&output);
    assert_eq!(
        results(&pooled),
        results(&plain),
        "results changed in pool mode"
    );

    let summary = read_json(&stats);
    let pool = &summary["pool"];
    assert_eq!(pool["fallback_after_plan"], 0, "{summary:#}");
    assert!(pool["served"].as_u64().unwrap() > 0, "{summary:#}");
    let per_iteration = value_of(&plain, "mallocs_per_iteration")
        .unwrap()
        .parse::<u64>()
        .unwrap();
    assert!(
        pool["served"].as_u64().unwrap() >= 2 * per_iteration,
        "{summary:#}"
    );

    let persistent: u64 = value_of(&plain, "persistent_bytes")
        .unwrap()
        .parse()
        .unwrap();
    let planned = pool["planned_peak_live_bytes"].as_u64().unwrap();
    let peak = read_json(&shim_stats)["peak_device_bytes"]
        .as_u64()
        .unwrap();
    assert!(
        peak as f64 <= 1.02 * (persistent + planned) as f64,
        "shim peak {peak} above 1.02 x ({persistent} + {planned})"
    );
    for path in [stats, shim_stats] {
        std::fs::remove_file(path).unwrap();
    }
}

/// The shim's peak device bytes of `mlp_train args…` under `mode`, with the program's output
/// and itermem's statistics.
fn peak_under(mode: &str, args: &[&str]) -> (u64, String, serde_json::Value) {
    let mlp = program("mlp_train");
    let shim_stats = scratch(&format!("peak-{mode}.json"));
    let stats = scratch(&format!("stats-{mode}.json"));
    let mut program_args = vec![mlp.to_str().unwrap()];
    program_args.extend_from_slice(args);
    let output = run_under_itermem(
        &["--mode", mode, "--stats", stats.to_str().unwrap()],
        &program_args,
        &[("CUDA_SHIM_STATS", shim_stats.to_str().unwrap())],
    );
    let out = stdout_ok(&output);
    let peak = read_json(&shim_stats)["peak_device_bytes"]
        .as_u64()
        .unwrap();
    let summary = read_json(&stats);
    for path in [shim_stats, stats] {
        std::fs::remove_file(path).unwrap();
    }
    (peak, out, summary)
}

#[test]
fn pool_mode_needs_strictly_less_device_memory_than_cnmem() {
    // Mixed tensor sizes (activations, weight gradients, biases) fragment cnmem's regions.
    let args = [
        "--iters", "6", "--layers", "7", "--width", "384", "--batch", "300",
    ];
    let (pool, pooled, pool_stats) = peak_under("pool", &args);
    let (cnmem, cnmemed, cnmem_stats) = peak_under("cnmem", &args);
    assert_eq!(results(&pooled), results(&cnmemed));
    assert!(
        pool_stats["pool"]["served"].as_u64().unwrap() > 0,
        "{pool_stats:#}"
    );
    assert_eq!(
        pool_stats["pool"]["fallback_after_plan"], 0,
        "{pool_stats:#}"
    );
    assert!(
        cnmem_stats["cnmem"]["served"].as_u64().unwrap() > 0,
        "{cnmem_stats:#}"
    );
    assert!(pool < cnmem, "pool {pool} B is not below cnmem {cnmem} B");
    let persistent: u64 = value_of(&pooled, "persistent_bytes")
        .unwrap()
        .parse()
        .unwrap();
    let planned = pool_stats["pool"]["planned_peak_live_bytes"]
        .as_u64()
        .unwrap();
    assert!(
        pool as f64 <= 1.02 * (persistent + planned) as f64,
        "{pool} vs {persistent} + {planned}"
    );
}

#[test]
fn a_range_changes_streams_only_after_its_last_kernels_finished() {
    let two = program("two_streams");
    let stats = scratch("two-streams.json");
    let output = run_under_itermem(
        &["--mode", "pool", "--stats", stats.to_str().unwrap()],
        &[two.to_str().unwrap(), "--iters", "24"],
        &[],
    );
    assert!(stdout_ok(&output).contains("ok"));
    let summary = read_json(&stats);
    let pool = &summary["pool"];
    assert!(
        pool["served"].as_u64().unwrap() > 0,
        "the pool never served: {summary:#}"
    );
    assert!(pool["stream_waits"].as_u64().unwrap() > 0, "{summary:#}");
    std::fs::remove_file(stats).unwrap();
}

#[test]
fn pool_mode_under_many_threads_keeps_results_right() {
    let stress = program("stress_threads");
    let output = run_under_itermem(
        &["--mode", "pool"],
        &[
            stress.to_str().unwrap(),
            "--threads",
            "8",
            "--rounds",
            "200",
        ],
        &[("CUDA_SHIM_JITTER_US", "20")],
    );
    assert!(stdout_ok(&output).contains("ok"));
}

#[test]
fn an_input_loaded_before_the_last_one_is_released_is_served_from_the_pool() {
    // Each input outlives its successor's malloc, so it cannot take one range every
    // iteration: the plan covers two iterations, and the inputs alternate between two ranges.
    let prefetch = program("prefetch_loop");
    let args = ["--iters", "200"];
    let plain = run_ok(&prefetch, &args, &[]);
    let stats = scratch("prefetch-stats.json");
    let shim_stats = scratch("prefetch-shim.json");
    let output = run_under_itermem(
        &["--mode", "pool", "--stats", stats.to_str().unwrap()],
        &[prefetch.to_str().unwrap(), args[0], args[1]],
        &[("CUDA_SHIM_STATS", shim_stats.to_str().unwrap())],
    );
    let pooled = stdout_ok(&output);
    assert_eq!(results(&pooled), results(&plain));
    let pool = &read_json(&stats)["pool"];
    // Before the plan covered two iterations, each input went to the real allocator.
    assert_every_planned_prefetch_iteration_served(pool, &args);
    // Two inputs, a temporary and an output of 1 MiB alive at once at most: the pool. The
    // device held it and, until its free, the input allocated before the pool existed (an
    // input is live at every instant, so no iteration boundary is free of one).
    let peak = read_json(&shim_stats)["peak_device_bytes"]
        .as_u64()
        .unwrap();
    assert_eq!(pool["planned_peak_live_bytes"], 4 << 20, "{pool:#}");
    assert_eq!(pool["pool_bytes"], 4 << 20, "{pool:#}");
    assert!(
        peak <= 5 << 20,
        "device peak {peak} above the pool and one input"
    );
    for path in [stats, shim_stats] {
        std::fs::remove_file(path).unwrap();
    }
}

/// PyTorch's pinned-memory cache calls `cudaHostAlloc` whenever its blocks are still in flight,
/// at moments that depend on timing. Those calls must not disturb the device's iteration: one
/// plan, made once, serving every device malloc from its first iteration on.
#[test]
fn host_allocations_at_irregular_points_leave_one_plan_serving_everything() {
    let prefetch = program("prefetch_loop");
    let args = ["--iters", "200", "--pinned-cache"];
    let plain = run_ok(&prefetch, &args, &[]);
    let host_allocs: u64 = value_of(&plain, "host_allocs").unwrap().parse().unwrap();
    assert!(host_allocs >= 10, "{plain}");
    let stats = scratch("pinned-cache-stats.json");
    let output = run_under_itermem(
        &["--mode", "pool", "--stats", stats.to_str().unwrap()],
        &[prefetch.to_str().unwrap(), args[0], args[1], args[2]],
        &[],
    );
    let pooled = stdout_ok(&output);
    assert_eq!(results(&pooled), results(&plain));
    let summary = read_json(&stats);
    let pool = &summary["pool"];
    assert_eq!(pool["plans"], 1, "{summary:#}");
    // The device's iteration is 10 access events, with or without the host's calls.
    assert_every_planned_prefetch_iteration_served(pool, &args);
    std::fs::remove_file(stats).unwrap();
}

/// `prefetch_loop --iters ITERS` (`args`: 200, so that a plan made late on a loaded machine still
/// serves ten iterations) in pool mode: every malloc from the first planned
/// iteration on (3 in each iteration of 10 access events; 3 events before the first) was
/// served from the pool, and at least 10 iterations were planned.
fn assert_every_planned_prefetch_iteration_served(pool: &serde_json::Value, args: &[&str]) {
    assert_eq!(pool["fallback_after_plan"], 0, "{pool:#}");
    let iters: u64 = args[1].parse().unwrap();
    let first = pool["first_planned_event"].as_u64().unwrap();
    let planned_iterations = (10 * iters + 3 - first) / 10;
    assert!(planned_iterations >= 10, "{pool:#}");
    assert!(
        pool["served"].as_u64().unwrap() >= 3 * planned_iterations,
        "{pool:#}"
    );
}

#[test]
fn an_allocation_the_idle_pool_would_block_gets_the_pool_memory_back() {
    // A loop planned into a 3 MiB pool, then one 6 MiB block on an 8 MiB device: it fits only
    // if the idle pool goes back to the device, as it would without itermem.
    let program = program("after_the_loop");
    let args = [program.to_str().unwrap(), "40", "6291456"];
    let device = [("CUDA_SHIM_DEVICE_MEMORY", "8388608")];
    let plain = run_ok(&program, &args[1..], &device);
    let stats = scratch("after-the-loop.json");
    let output = run_under_itermem(
        &["--mode", "pool", "--stats", stats.to_str().unwrap()],
        &args,
        &device,
    );
    assert_eq!(stdout_ok(&output), plain);
    let summary = read_json(&stats);
    let pool = &summary["pool"];
    assert_eq!(pool["plans"], 1, "{summary:#}");
    assert_eq!(pool["released_out_of_memory_bytes"], 3 << 20, "{summary:#}");
    assert_eq!(pool["plans_dropped_out_of_memory"], 1, "{summary:#}");
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("is given back"),
        "the user is told why pool mode stopped serving"
    );
    std::fs::remove_file(&stats).unwrap();
}

/// A device reset between two phases of training (NVIDIA's samples reset before they exit):
/// the blocks it took (each phase's weights) are freed in the record, and pool and cnmem mode,
/// whose memory went too, start afresh instead of serving from memory the driver took back.
#[test]
fn a_device_reset_frees_what_it_took_and_itermem_allocators_start_afresh() {
    let program = program("reset_midway");
    let args = [program.to_str().unwrap(), "30"];
    let plain = run_ok(&program, &args[1..], &[]);
    for mode in ["record", "pool", "cnmem"] {
        let stats = scratch(&format!("reset-midway-{mode}.json"));
        let output = run_under_itermem(
            &["--mode", mode, "--stats", stats.to_str().unwrap()],
            &args,
            &[],
        );
        assert_eq!(stdout_ok(&output), plain, "{mode}");
        let summary = read_json(&stats);
        assert_eq!(summary["live_bytes_at_exit"], 0, "{mode}: {summary:#}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(
            stderr.contains("starts afresh"),
            mode != "record",
            "{mode}: {stderr}"
        );
        if mode == "pool" {
            assert!(
                summary["pool"]["served"].as_u64().unwrap() > 0,
                "{summary:#}"
            );
        }
        std::fs::remove_file(&stats).unwrap();
    }
}
