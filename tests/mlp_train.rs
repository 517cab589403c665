//! The reference training program (tests/programs/mlp_train.c) on the simulated GPU: it trains,
//! its results do not depend on stream timing, and the shim's statistics agree with the memory
//! arithmetic the program prints.

mod support;

use support::{number, program, results, run_ok, value_of};

fn losses(output: &str) -> Vec<f64> {
    output
        .lines()
        .filter_map(|line| line.strip_prefix("iter "))
        .map(|rest| rest.split_whitespace().nth(2).unwrap().parse().unwrap())
        .collect()
}

#[test]
fn training_reduces_the_loss() {
    let out = run_ok(&program("mlp_train"), &["--iters", "6"], &[]);
    let losses = losses(&out);
    assert_eq!(losses.len(), 6);
    assert!(losses.windows(2).all(|w| w[1] < w[0]), "{losses:?}");
    assert!(value_of(&out, "checksum").is_some());
}

#[test]
fn results_are_bit_identical_whatever_the_stream_timing() {
    let mlp = program("mlp_train");
    let args = ["--iters", "4"];
    let reference = results(&run_ok(&mlp, &args, &[]));
    for seed in ["1", "2"] {
        let jittered = run_ok(
            &mlp,
            &args,
            &[("CUDA_SHIM_JITTER_US", "200"), ("CUDA_SHIM_SEED", seed)],
        );
        assert_eq!(
            results(&jittered),
            reference,
            "seed {seed} changed the results"
        );
    }
}

#[test]
fn shim_peak_matches_the_program_arithmetic() {
    let dir = std::env::temp_dir().join(format!("itermem-mlp-stats-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let stats_path = dir.join("stats.json");
    let out = run_ok(
        &program("mlp_train"),
        &["--iters", "3", "--layers", "7"],
        &[("CUDA_SHIM_STATS", stats_path.to_str().unwrap())],
    );
    let stats: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stats_path).unwrap()).unwrap();
    let expected = number(&out, "persistent_bytes") + number(&out, "peak_iteration_bytes");
    assert_eq!(number(&out, "expected_peak_device_bytes"), expected);
    assert_eq!(stats["peak_device_bytes"], expected);
    assert_eq!(stats["peak_pinned_bytes"], number(&out, "pinned_bytes"));
    let layers = 7;
    assert_eq!(number(&out, "mallocs_per_iteration"), 6 * layers + 1);
    assert_eq!(number(&out, "launches_per_iteration"), 8 * layers - 1);
    let per_iteration_allocs = 3 * number(&out, "mallocs_per_iteration");
    assert_eq!(
        stats["device_alloc_calls"],
        2 * layers + per_iteration_allocs
    );
    assert_eq!(
        stats["kernel_launches"],
        3 * number(&out, "launches_per_iteration")
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
