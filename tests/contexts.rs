//! The shim's context life cycle (`tests/programs/contexts.c`): `cudaDeviceReset` and
//! `cuDevicePrimaryCtxReset` destroy what the primary context holds (not stream-ordered
//! allocations, not a created context's memory) and clear a sticky fault, leaving the context
//! current and inactive until the next runtime call; `cuCtxCreate` contexts own their streams,
//! events and memory until `cuCtxDestroy`; `cuGetProcAddress` hands out each variant.

mod support;

use support::{program, run_ok};

const ENV: [(&str, &str); 2] = [("CUDA_SHIM_DEVICES", "2"), ("LD_BIND_NOW", "1")];

fn check(case: &str) {
    let output = run_ok(&program("contexts"), &[case], &ENV);
    assert!(output.contains(&format!("{case} ok")), "{output}");
}

#[test]
fn a_device_reset_destroys_the_primary_contexts_state_and_clears_a_fault() {
    check("reset");
}

#[test]
fn a_created_context_owns_its_memory_streams_and_events_until_destroyed() {
    check("created");
}

#[test]
fn every_cu_ctx_create_variant_is_handed_out_for_its_version() {
    check("entry_points");
}
