//! The simulated CUDA platform's semantics, checked through its C ABI by
//! `tests/programs/shim_checks.c` (each case asserts its own expectations; see that file).

mod support;

use support::{program, run_ok, run_on_shim, value_of};

fn check(case: &str, env: &[(&str, &str)]) -> String {
    run_ok(&program("shim_checks"), &[case], env)
}

#[test]
fn work_on_one_stream_runs_in_order_even_with_jitter() {
    check("stream_order", &[]);
    check(
        "stream_order",
        &[("CUDA_SHIM_JITTER_US", "300"), ("CUDA_SHIM_SEED", "5")],
    );
}

#[test]
fn a_stream_waiting_on_an_event_sees_the_work_before_the_record() {
    for seed in ["1", "2", "3"] {
        check(
            "event_wait",
            &[("CUDA_SHIM_JITTER_US", "2000"), ("CUDA_SHIM_SEED", seed)],
        );
    }
}

#[test]
fn legacy_default_stream_synchronises_with_blocking_streams_only() {
    check("default_stream", &[]);
}

#[test]
fn allocation_beyond_capacity_fails_with_memory_allocation_error() {
    check("capacity", &[("CUDA_SHIM_DEVICE_MEMORY", "1M")]);
}

#[test]
fn invalid_frees_and_handles_get_cuda_error_codes() {
    check("invalid_free", &[]);
}

#[test]
fn use_after_free_reads_poison() {
    check("use_after_free", &[]);
}

#[test]
fn statistics_match_the_program_arithmetic_and_reach_the_json_file() {
    let dir = std::env::temp_dir().join(format!("itermem-shim-stats-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("stats.json");
    check("stats", &[("CUDA_SHIM_STATS", path.to_str().unwrap())]);
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(json["peak_device_bytes"], (1 << 20) + 1024);
    assert_eq!(json["h2d_bytes"], 6000);
    assert_eq!(json["d2h_bytes"], 4000);
    assert_eq!(json["kernel_launches"], 2);
    assert_eq!(json["peak_pinned_bytes"], 3000);
    assert!(
        json.get("devices").is_none(),
        "one device: the file is unchanged"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Two devices of 64 MiB and 32 MiB: device queries, the current device of each host thread,
/// allocations within each capacity, pointer attributes, peer access rules and peer copies both
/// ways, streams and events across devices, virtual memory on device 1 (see the `multi_device*`
/// cases of shim_checks.c). The statistics file keeps device 0's counters at the top level and
/// lists every device's.
#[test]
fn several_devices_have_their_own_memory_contexts_streams_and_peer_copies() {
    let dir = std::env::temp_dir().join(format!("itermem-shim-devices-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("stats.json");
    let two = [
        ("CUDA_SHIM_DEVICES", "2"),
        ("CUDA_SHIM_DEVICE_MEMORY", "64M,32M"),
    ];
    let mut env = two.to_vec();
    env.push(("CUDA_SHIM_STATS", path.to_str().unwrap()));
    env.push(("CUDA_SHIM_JITTER_US", "100"));
    check("multi_device", &env);
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let devices = json["devices"].as_array().expect("a devices array");
    assert_eq!(devices.len(), 2);
    assert_eq!(devices[0]["capacity_bytes"], 64 << 20);
    assert_eq!(devices[1]["capacity_bytes"], 32 << 20);
    assert_eq!(devices[1]["peak_device_bytes"], 32 << 20);
    assert_eq!(devices[1]["peak_pinned_bytes"], 3000);
    for key in [
        "capacity_bytes",
        "peak_device_bytes",
        "d2d_bytes",
        "kernel_launches",
    ] {
        assert_eq!(json[key], devices[0][key], "{key}: top level is device 0");
    }
    std::fs::remove_dir_all(&dir).unwrap();
    check("multi_device_sticky", &two);
}

#[test]
fn bad_device_counts_and_capacity_lists_are_reported_and_the_default_kept() {
    for (var, value) in [
        ("CUDA_SHIM_DEVICES", "17"),
        ("CUDA_SHIM_DEVICES", "zero"),
        ("CUDA_SHIM_DEVICE_MEMORY", "1G,2G"), // two capacities for one device
    ] {
        let output = run_on_shim(
            &program("shim_checks"),
            &["device_queries"],
            &[(var, value)],
        );
        assert!(output.status.success(), "{var}={value}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains(&format!("{var}=\"{value}\"")),
            "no clear message: {stderr}"
        );
    }
}

#[test]
fn driver_and_runtime_views_of_one_allocation_agree() {
    check("driver_runtime_views", &[]);
    check("device_queries", &[]);
    check("memory_kinds", &[]);
}

#[test]
fn mapped_host_memory_is_used_through_its_device_pointer() {
    check("mapped_host", &[]);
}

#[test]
fn device_faults_are_sticky_and_launch_errors_are_not() {
    check("sticky_error", &[]);
    check("launch_errors", &[]);
}

#[test]
fn launch_ex_and_per_thread_default_stream_variants_work() {
    check("per_thread_stream", &[("CUDA_SHIM_JITTER_US", "100")]);
}

#[test]
fn driver_per_thread_default_stream_variants_run_on_the_calling_threads_stream() {
    check("driver_per_thread_stream", &[]);
    check(
        "driver_per_thread_stream",
        &[("CUDA_SHIM_JITTER_US", "100")],
    );
}

#[test]
fn get_proc_address_answers_by_version_like_the_real_driver() {
    check("proc_address", &[]);
}

/// CUDA 13's variants of `cuCtxSynchronize`, `cuCtxGetDevice` (13000) and `cuLaunchHostFunc`
/// (13010), and their semantics on a context that is not current; a CUDA 12 driver has none.
#[test]
fn get_proc_address_gives_cuda_13_variants_from_their_versions() {
    check("proc_address_13", &[("CUDA_SHIM_DEVICES", "2")]);
    let on_12 = check("proc_address_13", &[("CUDA_SHIM_DRIVER_VERSION", "12090")]);
    assert!(
        on_12.contains("proc_address_13 ok (driver 12090)"),
        "{on_12}"
    );
}

#[test]
fn pitched_memory_2d_copies_memsets_and_peer_copies_work() {
    check("copies_2d", &[("CUDA_SHIM_JITTER_US", "100")]);
}

#[test]
fn launch_ex_and_cooperative_launches_work() {
    check("launch_variants", &[]);
}

#[test]
fn virtual_memory_maps_physical_memory_usable_after_set_access() {
    check("virtual_memory", &[("CUDA_SHIM_DEVICE_MEMORY", "64M")]);
}

#[test]
fn events_time_simulated_kernel_durations() {
    check("event_timing", &[]);
}

#[test]
fn stream_ordered_allocation_returns_memory_in_stream_order() {
    check("async_alloc", &[]);
}

#[test]
fn copy_bandwidth_model_slows_copies() {
    check("async_copies", &[]);
    let ms = |gbps: &str| {
        let out = check("async_copies", &[("CUDA_SHIM_H2D_GBPS", gbps)]);
        value_of(&out, "h2d_ms").unwrap().parse::<f64>().unwrap()
    };
    // 8 MiB take 8.39 ms at least at 1 GB/s, 33.6 ms at 0.25 GB/s. Only lower bounds: what a
    // copy takes beyond the model depends on the machine's load.
    for (gbps, at_least) in [("1", 8.38), ("0.25", 33.5)] {
        let took = ms(gbps);
        assert!(took >= at_least, "{gbps} GB/s: {took} ms");
    }
}

#[test]
fn jitter_is_reproducible_by_seed() {
    let digest = |seed: &str| {
        let out = check(
            "jitter",
            &[("CUDA_SHIM_JITTER_US", "100"), ("CUDA_SHIM_SEED", seed)],
        );
        value_of(&out, "jitter_digest").unwrap().to_string()
    };
    assert_eq!(digest("7"), digest("7"));
    assert_ne!(digest("7"), digest("8"));
    let none = check("jitter", &[]);
    assert_eq!(value_of(&none, "jitter_digest"), Some("0"));
}

/// The race is real, so this one depends on timing: each stream sleeps up to 20 ms before its
/// operation, and over ten seeds stream B draws the shorter sleep by a margin of milliseconds
/// several times, far beyond the scheduling delays of a loaded machine.
#[test]
fn jitter_exposes_a_missing_event_wait() {
    let values: Vec<String> = (1..=10)
        .map(|seed| {
            let seed = seed.to_string();
            let env = [
                ("CUDA_SHIM_JITTER_US", "20000"),
                ("CUDA_SHIM_SEED", seed.as_str()),
            ];
            value_of(&check("event_wait_missing", &env), "value")
                .unwrap()
                .to_string()
        })
        .collect();
    assert!(
        values.iter().any(|v| v == "0"),
        "race never exposed: {values:?}"
    );
}

#[test]
fn bad_configuration_is_reported_and_the_default_kept() {
    let output = run_on_shim(
        &program("shim_checks"),
        &["device_queries"],
        &[("CUDA_SHIM_DEVICE_MEMORY", "12Q")],
    );
    assert!(output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("CUDA_SHIM_DEVICE_MEMORY=\"12Q\""),
        "no clear message: {stderr}"
    );
}

/// What PyTorch binds at `import torch` and uses before its first allocation: stream
/// priorities, capture queries and an empty capture (exact error codes), host functions in stream
/// order, event record flags, PCI bus ids, function attributes and occupancy, the default
/// pool's attributes, module variables, page-locked registration, interprocess handles, 2D
/// copies; primary context state with two devices (see the `pytorch_*` cases).
#[test]
fn functions_pytorch_binds_at_import_answer_as_cuda_does() {
    check("pytorch_streams", &[("CUDA_SHIM_JITTER_US", "100")]);
    check("pytorch_memory", &[("CUDA_SHIM_JITTER_US", "100")]);
    check("pytorch_primary_state", &[("CUDA_SHIM_DEVICES", "2")]);
}

/// A program's exit handler (a C++ static destructor) calling CUDA after glibc destroyed the
/// thread's locals gets an error code, and the shim prints nothing: torch's IPC cleanup did
/// this and printed a Rust panic with its backtrace.
#[test]
fn a_cuda_call_from_an_exit_handler_gets_an_error_code_not_a_panic() {
    let output = run_on_shim(&program("shim_checks"), &["calls_at_exit"], &[]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}{stderr}");
    assert!(
        stdout.contains("at exit: cudaErrorCudartUnloading"),
        "{stdout}"
    );
    assert!(stderr.is_empty(), "{stderr}");
}
