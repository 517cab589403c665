//! Every path a program can take to CUDA is seen, once: the driver API linked or found through
//! `cuGetProcAddress` (CUDA 12 and 11.3 forms, and the per-thread default stream variants),
//! `cudaGetDriverEntryPoint`, `dlopen` + `dlsym` of either library, `dlsym(RTLD_DEFAULT)`, and
//! stream-ordered allocations. Run with
//! `LD_BIND_NOW=1`, so a symbol missing from itermem or the shim fails at once.

mod support;

use support::{
    number, program, read_json, run_ok, run_under_itermem, scratch, stdout_ok, trace_info,
};

const BIND_NOW: (&str, &str) = ("LD_BIND_NOW", "1");

/// Allocations per iteration of `access_paths`: 2^k on each of its 9 paths.
const PER_ITERATION: u64 = (1 << 9) - 1;

#[test]
fn every_call_is_recorded_once_whatever_path_reached_it() {
    let paths = program("access_paths");
    let paths = paths.to_str().unwrap();
    let plain = run_ok(paths.as_ref(), &["--iters", "2"], &[BIND_NOW]);
    let trace = scratch("paths.itrace");
    let recorded = stdout_ok(&run_under_itermem(
        &["--trace", trace.to_str().unwrap()],
        &[paths, "--iters", "2"],
        &[BIND_NOW],
    ));
    assert_eq!(
        recorded, plain,
        "the program's output changed under itermem"
    );
    // 2 iterations of 2^0 + … + 2^8 allocations, one per path and block.
    assert_eq!(number(&plain, "mallocs"), 2 * PER_ITERATION);
    let info = trace_info(&trace);
    for (event, key) in [
        ("malloc", "mallocs"),
        ("free", "frees"),
        ("memcpy", "memcpys"),
        ("memset", "memsets"),
        ("launch", "launches"),
    ] {
        assert_eq!(
            info["events"][event],
            number(&plain, key),
            "{event}: {info:#}"
        );
    }
    // The runtime's and the driver's launches of one kernel are one kernel.
    assert_eq!(info["kernel_names"], 1, "{info:#}");
    assert_eq!(info["period_events"], 6 * PER_ITERATION, "{info:#}");
    std::fs::remove_file(&trace).unwrap();
}

#[test]
fn pool_mode_serves_allocations_of_every_path_from_the_plan() {
    let paths = program("access_paths");
    let paths = paths.to_str().unwrap();
    let args = [paths, "--iters", "6"];
    let plain = run_ok(paths.as_ref(), &args[1..], &[BIND_NOW]);
    let stats = scratch("paths-pool.json");
    let pooled = stdout_ok(&run_under_itermem(
        &["--mode", "pool", "--stats", stats.to_str().unwrap()],
        &args,
        &[BIND_NOW],
    ));
    assert_eq!(pooled, plain, "the program's output changed in pool mode");
    let summary = read_json(&stats);
    let pool = &summary["pool"];
    assert_eq!(pool["fallback_after_plan"], 0, "{summary:#}");
    // Every allocation after the plan, of every path, came from the pool.
    let iterations_after_plan = pool["served"].as_u64().unwrap() / PER_ITERATION;
    assert!(iterations_after_plan >= 2, "{summary:#}");
    assert_eq!(
        pool["served"].as_u64().unwrap() % PER_ITERATION,
        0,
        "{summary:#}"
    );
    std::fs::remove_file(&stats).unwrap();
}
