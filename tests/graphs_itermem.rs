//! itermem on a program whose training steps are CUDA graphs (`tests/programs/graph_train.c`):
//! captured in global and in relaxed mode (with an allocation during the capture), or built
//! node by node, or captured with its gradient buffer allocated and freed inside the capture
//! (graph memory nodes), launched every iteration with a kernel node's arguments updated in
//! between.
//! Under itermem, in every mode and whatever the stream timing, the program computes what it
//! computes alone; the trace records each graph launch and the work of its nodes, once, so
//! `itermem trace info` finds the iteration the same program finds launching its work one by
//! one. The shim's own capture checks (`tests/programs/graphs.c`) pass under itermem too.

mod support;

use support::{
    assert_same_plan, program, read_json, results, run_ok, run_under_itermem, scratch, stdout_ok,
    trace_info,
};

/// Iterations of each run: enough for the detector to find the period.
const ITERS: &str = "16";
/// The graph variants of the program (`direct` launches the same work one call at a time).
const VARIANTS: [&str; 4] = ["global", "relaxed", "explicit", "malloc"];
/// The variant whose graphs allocate and free memory (graph memory nodes): its trace has a
/// malloc and a free per launch more than the direct program's.
const GRAPH_MEMORY: &str = "malloc";
const SEEDS: [&str; 5] = ["1", "2", "3", "4", "5"];
/// Layers, each one graph launched per iteration.
const LAYERS: u64 = 4;

fn jitter(seed: &str) -> [(&'static str, &str); 2] {
    [("CUDA_SHIM_JITTER_US", "200"), ("CUDA_SHIM_SEED", seed)]
}

/// `graph_train variant ITERS` under `itermem run --shim extra…` with `env`: its results.
fn under_itermem(extra: &[&str], variant: &str, env: &[(&str, &str)]) -> String {
    let train = program("graph_train");
    let args = [train.to_str().unwrap(), variant, ITERS];
    results(&stdout_ok(&run_under_itermem(extra, &args, env)))
}

#[test]
fn every_graph_variant_computes_what_the_direct_steps_compute() {
    let train = program("graph_train");
    let direct = results(&run_ok(&train, &["direct", ITERS], &[]));
    assert!(direct.contains("checksum"), "{direct}");
    for variant in VARIANTS {
        for seed in ["1", "2"] {
            let out = run_ok(&train, &[variant, ITERS], &jitter(seed));
            assert_eq!(results(&out), direct, "{variant}, seed {seed}");
        }
    }
}

#[test]
fn results_are_identical_with_and_without_itermem_in_record_pool_and_cnmem_modes() {
    let direct = results(&run_ok(&program("graph_train"), &["direct", ITERS], &[]));
    for mode in ["record", "pool", "cnmem"] {
        for variant in VARIANTS {
            for seed in SEEDS {
                let out = under_itermem(&["--mode", mode], variant, &jitter(seed));
                assert_eq!(out, direct, "{mode}, {variant}, seed {seed}");
            }
        }
    }
}

/// Under a limit below what the program holds (20 MiB of tensors, 2 MiB more each iteration),
/// on a device of that size, with swapped ranges poisoned: the plan swaps tensors the graphs
/// read (weights and activations, each used by one or two launches an iteration), and the
/// results are the direct program's, the device never above the limit.
#[test]
fn in_swap_mode_graphs_read_swapped_tensors_exactly_and_the_device_stays_under_the_limit() {
    const LIMIT: &str = "19922944";
    const SWAP_ITERS: &str = "60";
    let train = program("graph_train");
    let direct = results(&run_ok(&train, &["direct", SWAP_ITERS], &[]));
    for variant in VARIANTS {
        for seed in SEEDS {
            let name = format!("graph-swap-{variant}-{seed}");
            let (stats, shim_stats) = (
                scratch(&format!("{name}.json")),
                scratch(&format!("{name}-shim.json")),
            );
            // The graph allocations of `malloc` (one 2 MiB buffer per layer's graph) keep their
            // memory while their graphs exist, as CUDA's graph pool keeps it: the device has
            // that much more, and itermem counts each while it is live.
            let device = match variant {
                GRAPH_MEMORY => LIMIT.parse::<u64>().unwrap() + LAYERS * (2 << 20),
                _ => LIMIT.parse().unwrap(),
            };
            let device = device.to_string();
            let mut env = jitter(seed).to_vec();
            env.extend([
                ("CUDA_SHIM_DEVICE_MEMORY", device.as_str()),
                ("ITERMEM_SWAP_VERIFY", "1"),
                ("CUDA_SHIM_STATS", shim_stats.to_str().unwrap()),
            ]);
            let extra = [
                "--mode",
                "swap",
                "--limit",
                LIMIT,
                "--stats",
                stats.to_str().unwrap(),
            ];
            let args = [train.to_str().unwrap(), variant, SWAP_ITERS];
            let out = results(&stdout_ok(&run_under_itermem(&extra, &args, &env)));
            assert_eq!(out, direct, "{variant}, seed {seed}");
            let peak = read_json(&shim_stats)["peak_device_bytes"]
                .as_u64()
                .unwrap();
            assert!(
                peak <= device.parse().unwrap(),
                "{variant}: device peak {peak}"
            );
            let summary = read_json(&stats);
            let swap = &summary["swap"];
            assert_eq!(swap["plans"], 1, "{variant}: {summary:#}");
            assert!(
                swap["swapped_out"].as_u64().unwrap() > 0,
                "{variant}: {summary:#}"
            );
            for path in [stats, shim_stats] {
                std::fs::remove_file(path).unwrap();
            }
        }
    }
}

/// Issue 33: the captured work is recorded once per launch, never at its capture; each launch
/// has its record; the iteration found is the direct program's.
#[test]
fn trace_info_shows_the_graph_launches_and_the_period_of_the_direct_program() {
    let info = |variant: &str| {
        let trace = scratch(&format!("graph-{variant}.trace"));
        let extra = ["--mode", "record", "--trace", trace.to_str().unwrap()];
        under_itermem(&extra, variant, &[]);
        let info = trace_info(&trace);
        std::fs::remove_file(trace).unwrap();
        info
    };
    let direct = info("direct");
    assert_eq!(direct["graph_launches"], 0);
    let period = &direct["period_events"];
    assert!(period.as_u64().is_some(), "no period: {direct:#}");
    let iterations: u64 = ITERS.parse().unwrap();
    for variant in VARIANTS {
        let graphs = info(variant);
        assert_eq!(graphs["graph_launches"], LAYERS * iterations, "{variant}");
        for work in ["launch", "memcpy", "memset"] {
            assert_eq!(
                graphs["events"][work], direct["events"][work],
                "{variant}: {work} events"
            );
        }
        if variant == GRAPH_MEMORY {
            // Each launch allocates and frees its step's gradient buffer, as a cudaMallocAsync
            // and a cudaFreeAsync around the same work would (and the program frees the buffer
            // it allocated before its graphs).
            let launches = LAYERS * iterations;
            for (kind, extra) in [("malloc", launches), ("free", launches + 1)] {
                let (graph, direct) = (&graphs["events"][kind], &direct["events"][kind]);
                assert_eq!(
                    graph.as_u64().unwrap(),
                    direct.as_u64().unwrap() + extra,
                    "{variant}: {kind} events"
                );
            }
            let expected = period.as_u64().unwrap() + 2 * LAYERS;
            assert_eq!(graphs["period_events"], expected, "{variant}: {graphs:#}");
            continue;
        }
        assert_eq!(&graphs["period_events"], period, "{variant}: {graphs:#}");
    }
}

/// A graph instantiated with CUDA 11's `cuGraphInstantiate` (`cuGraphInstantiate_v2`, found with
/// `cudaGetDriverEntryPointByVersion` at 11000, so through itermem's resolver) is tracked as one
/// instantiated with `cuGraphInstantiateWithFlags`: the same launches, each with its nodes' work.
#[test]
fn a_graph_instantiated_with_cuda_11s_cu_graph_instantiate_is_seen_as_any_other() {
    let graphs = program("graphs");
    let info = |case: &str| {
        let trace = scratch(&format!("graphs-{case}.trace"));
        let args = [graphs.to_str().unwrap(), case, "6"];
        let extra = ["--mode", "record", "--trace", trace.to_str().unwrap()];
        let out = stdout_ok(&run_under_itermem(&extra, &args, &[]));
        assert_eq!(out.trim(), "ok", "{case}");
        let info = trace_info(&trace);
        std::fs::remove_file(trace).unwrap();
        info
    };
    let (current, legacy) = (info("replay"), info("replay_v2"));
    assert_eq!(current["graph_launches"], 6, "{current:#}");
    assert_eq!(
        legacy["graph_launches"], current["graph_launches"],
        "{legacy:#}"
    );
    assert_eq!(legacy["events"], current["events"], "{legacy:#}");
}

/// Every case of the shim's own graph checks (`tests/programs/graphs.c`: captures in each mode,
/// fork and join, updates, and each call that is illegal in a capture, with CUDA's error code
/// and the invalidation) behaves the same under itermem in every mode: itermem adds no node to
/// a program's graph, invalidates no capture and changes no answer.
#[test]
fn captures_and_their_illegal_calls_behave_under_itermem_as_without_it() {
    let graphs = program("graphs");
    let cases = [
        "replay",
        "replay_v2",
        "launch_order",
        "explicit",
        "update",
        "malloc",
        "sync",
        "memcpy",
        "legacy",
        "event",
        "fork",
        "modes",
        "memnodes",
    ];
    for mode in ["record", "pool", "swap", "cnmem"] {
        for case in cases {
            let args = [graphs.to_str().unwrap(), case, "4"];
            let out = stdout_ok(&run_under_itermem(&["--mode", mode], &args, &[]));
            assert_eq!(out.trim(), "ok", "{mode}, {case}");
        }
    }
}

/// The plan a graph program ran under is what `itermem plan --timings` makes from its trace:
/// the trace's graph-launch records give the offline planner the launches the live one saw.
#[test]
fn the_plan_a_graph_program_used_is_what_itermem_plan_makes_from_its_trace() {
    const LIMIT: &str = "19922944";
    let train = program("graph_train");
    let (trace, plan) = (scratch("graph-replan.itrace"), scratch("graph-replan.json"));
    let extra = [
        "--mode",
        "swap",
        "--limit",
        LIMIT,
        "--trace",
        trace.to_str().unwrap(),
        "--plan-out",
        plan.to_str().unwrap(),
    ];
    let env = [("CUDA_SHIM_DEVICE_MEMORY", LIMIT)];
    stdout_ok(&run_under_itermem(
        &extra,
        &[train.to_str().unwrap(), "global", "60"],
        &env,
    ));
    let replanned = std::process::Command::new(support::itermem())
        .args(["plan", "--json", "--limit", LIMIT, "--timings"])
        .arg(&plan)
        .arg(&trace)
        .output()
        .unwrap();
    let offline: serde_json::Value = serde_json::from_str(&stdout_ok(&replanned)).unwrap();
    let live = read_json(&plan);
    assert!(!live["swaps"].as_array().unwrap().is_empty(), "{live:#}");
    assert_same_plan(
        &offline,
        &live,
        &[
            "swaps",
            "weights",
            "pool_footprint_bytes",
            "peak_after_bytes",
        ],
    );
    for path in [trace, plan] {
        std::fs::remove_file(path).unwrap();
    }
}
