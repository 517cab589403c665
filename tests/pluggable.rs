//! PyTorch's pluggable allocator interface without LD_PRELOAD: a program `dlopen`s
//! libitermem.so and allocates only through `itermem_malloc`/`itermem_free`, as
//! `CUDAPluggableAllocator(path, "itermem_malloc", "itermem_free")` does. Its allocations are
//! recorded, its iteration detected and served from the pool, with the same results.

mod support;

use std::path::Path;
use support::{itermem, number, program, read_json, run_on_shim, scratch, stdout_ok, trace_info};

fn library() -> String {
    itermem::interposer::library_beside(Path::new(itermem()))
        .display()
        .to_string()
}

#[test]
fn allocations_through_the_pluggable_interface_are_recorded_and_pooled() {
    let program = program("pluggable");
    let library = library();
    let plain = stdout_ok(&run_on_shim(
        &program,
        &[&library, "--iters", "40"],
        &[("ITERMEM_MODE", "off")],
    ));
    assert!(plain.contains("ok"), "{plain}");
    let allocations = number(&plain, "allocations");

    let trace = scratch("pluggable.itrace");
    let recorded = stdout_ok(&run_on_shim(
        &program,
        &[&library, "--iters", "40"],
        &[
            ("ITERMEM_MODE", "record"),
            ("ITERMEM_TRACE", trace.to_str().unwrap()),
        ],
    ));
    assert_eq!(recorded, plain);
    let info = trace_info(&trace);
    assert_eq!(info["events"]["malloc"], allocations, "{info:#}");
    assert_eq!(info["events"]["free"], allocations, "{info:#}");
    // Five allocations and five frees per iteration.
    assert_eq!(info["period_events"], 10, "{info:#}");
    std::fs::remove_file(&trace).unwrap();

    let stats = scratch("pluggable-pool.json");
    let pooled = stdout_ok(&run_on_shim(
        &program,
        &[&library, "--iters", "40"],
        &[
            ("ITERMEM_MODE", "pool"),
            ("ITERMEM_STATS", stats.to_str().unwrap()),
        ],
    ));
    assert_eq!(pooled, plain, "results changed in pool mode");
    let summary = read_json(&stats);
    let pool = &summary["pool"];
    assert_eq!(pool["plans"], 1, "{summary:#}");
    assert_eq!(pool["fallback_after_plan"], 0, "{summary:#}");
    assert!(pool["served"].as_u64().unwrap() >= 2 * 5, "{summary:#}");
    std::fs::remove_file(&stats).unwrap();
}

/// Memory past swap mode's limit comes from mapped host memory only where itermem sees the
/// program's copies (their direction must be inferred). Through the pluggable interface alone
/// it does not: the program runs unchanged on device memory, and itermem says so once.
#[test]
fn swap_mode_through_the_pluggable_interface_alone_uses_device_memory_and_says_so() {
    let program = program("pluggable");
    let library = library();
    let args = [library.as_str(), "--iters", "20"];
    let plain = stdout_ok(&run_on_shim(&program, &args, &[("ITERMEM_MODE", "off")]));
    let stats = scratch("pluggable-swap.json");
    // One iteration holds about 3.5 MB at once.
    let output = run_on_shim(
        &program,
        &args,
        &[
            ("ITERMEM_MODE", "swap"),
            ("ITERMEM_LIMIT", "3000000"),
            ("ITERMEM_STATS", stats.to_str().unwrap()),
        ],
    );
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(stdout_ok(&output), plain, "{stderr}");
    let said = stderr
        .matches("keeps ITERMEM_LIMIT only under LD_PRELOAD")
        .count();
    assert_eq!(said, 1, "{stderr}");
    let swap = &read_json(&stats)["swap"];
    assert_eq!(swap["warmup_host_allocations"], 0, "{swap:#}");
    assert_eq!(swap["swapped_out"], 0, "{swap:#}");
    std::fs::remove_file(&stats).unwrap();
}
