//! CUDA graphs on the simulated CUDA platform alone, checked through the runtime's C ABI by
//! `tests/programs/graphs.c` (each case asserts its own expectations; see that file).

mod support;

use support::{program, run_ok};

fn check(case: &str, args: &[&str], env: &[(&str, &str)]) {
    let mut all = vec![case];
    all.extend_from_slice(args);
    let out = run_ok(&program("graphs"), &all, env);
    assert_eq!(out.trim(), "ok", "{case}: {out}");
}

#[test]
fn a_captured_iteration_launched_many_times_gives_the_direct_results() {
    check("replay", &["10"], &[]);
    for seed in ["1", "2", "3", "4", "5"] {
        let env = [("CUDA_SHIM_JITTER_US", "1000"), ("CUDA_SHIM_SEED", seed)];
        check("replay", &["6"], &env);
    }
}

#[test]
fn cuda_11s_cu_graph_instantiate_makes_the_same_exec_graph() {
    check("replay_v2", &["6"], &[]);
}

#[test]
fn a_graph_launch_is_one_unit_of_stream_order_and_launches_of_one_exec_never_overlap() {
    for seed in ["1", "2", "3"] {
        let env = [("CUDA_SHIM_JITTER_US", "1000"), ("CUDA_SHIM_SEED", seed)];
        check("launch_order", &["8"], &env);
    }
}

#[test]
fn a_graph_built_node_by_node_with_a_child_graph_and_updated_arguments_gives_the_direct_results() {
    check("explicit", &["8"], &[]);
    for seed in ["1", "2", "3"] {
        let env = [("CUDA_SHIM_JITTER_US", "1000"), ("CUDA_SHIM_SEED", seed)];
        check("explicit", &["4"], &env);
    }
}

#[test]
fn an_exec_graph_takes_the_work_of_a_graph_of_the_same_shape_and_refuses_any_other() {
    check("update", &[], &[]);
}

#[test]
fn an_allocation_during_a_global_capture_is_refused_and_invalidates_it() {
    check("malloc", &[], &[]);
}

#[test]
fn synchronising_a_capturing_stream_or_the_device_is_refused_and_invalidates_the_capture() {
    check("sync", &[], &[]);
}

#[test]
fn a_synchronous_copy_during_a_global_capture_is_refused_and_invalidates_it() {
    check("memcpy", &[], &[]);
}

#[test]
fn the_legacy_stream_is_refused_while_a_blocking_stream_captures() {
    check("legacy", &[], &[]);
}

#[test]
fn captured_events_and_waits_on_uncaptured_events_follow_cuda_rules() {
    check("event", &[], &[]);
}

#[test]
fn a_forked_stream_must_join_and_only_the_origin_ends_the_capture() {
    check("fork", &[], &[]);
}

#[test]
fn capture_modes_prohibit_unsafe_calls_on_the_threads_cuda_names() {
    check("modes", &[], &[]);
}

#[test]
fn graph_memory_nodes_follow_cuda_rules_on_their_allocations() {
    check("memnodes", &["4"], &[]);
    for seed in ["1", "2", "3"] {
        let env = [("CUDA_SHIM_JITTER_US", "1000"), ("CUDA_SHIM_SEED", seed)];
        check("memnodes", &["3"], &env);
    }
}

/// `graph_train malloc`: each step's gradient buffer is a graph allocation (cudaMallocAsync and
/// cudaFreeAsync captured), allocated and freed by every launch; the results are the direct
/// program's.
#[test]
fn a_captured_iteration_with_stream_ordered_allocations_gives_the_direct_results() {
    let train = support::program("graph_train");
    let direct = support::results(&run_ok(&train, &["direct", "8"], &[]));
    for seed in ["1", "2", "3", "4", "5"] {
        let env = [("CUDA_SHIM_JITTER_US", "200"), ("CUDA_SHIM_SEED", seed)];
        let out = run_ok(&train, &["malloc", "8"], &env);
        assert_eq!(support::results(&out), direct, "seed {seed}");
    }
}
