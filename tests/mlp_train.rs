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

#[test]
fn simulated_kernel_durations_change_no_result() {
    let mlp = program("mlp_train");
    let args = ["--iters", "3", "--width", "64", "--batch", "256"];
    let plain = results(&run_ok(&mlp, &args, &[]));
    let mut timed = args.to_vec();
    timed.extend(["--gflops", "50"]);
    assert_eq!(results(&run_ok(&mlp, &timed, &[])), plain);
}

#[test]
fn an_extra_read_and_a_batch_change_are_deterministic_and_change_only_what_they_say() {
    let mlp = program("mlp_train");
    let plain = run_ok(&mlp, &["--iters", "6"], &[]);
    let args = [
        "--iters",
        "6",
        "--extra-read",
        "2",
        "--batch-change",
        "4:1000",
    ];
    let deviated = run_ok(&mlp, &args, &[]);
    let jittered = run_ok(
        &mlp,
        &args,
        &[("CUDA_SHIM_JITTER_US", "200"), ("CUDA_SHIM_SEED", "9")],
    );
    assert_eq!(results(&deviated), results(&jittered));
    let sum: f64 = value_of(&deviated, "extra_read 2")
        .unwrap()
        .parse()
        .unwrap();
    assert!(sum > 0.0, "h_1 of a ReLU network sums to {sum}");
    // The extra read changes nothing; the other batch changes iteration 4 and what follows.
    let (before, after) = (losses(&plain), losses(&deviated));
    assert_eq!(before[..4], after[..4]);
    assert_ne!(before[4], after[4]);

    for bad in ["4", "4:0", "4:4096", "x:10", "-1:10"] {
        let output = support::run_on_shim(&mlp, &["--batch-change", bad], &[]);
        assert_eq!(output.status.code(), Some(2), "--batch-change {bad}");
    }
}

/// With `--adam` the moments are persistent device tensors, three times the parameters in all,
/// counted in the program's arithmetic as the shim counts them; Adam trains (the loss falls)
/// and differs from SGD.
#[test]
fn adam_keeps_its_moments_on_the_device_and_trains() {
    let mlp = program("mlp_train");
    let sgd = run_ok(&mlp, &["--iters", "4", "--layers", "3"], &[]);
    let args = ["--iters", "4", "--layers", "3", "--adam", "--lr", "0.001"];
    let stats_path = support::scratch("adam-stats.json");
    let adam = run_ok(
        &mlp,
        &args,
        &[("CUDA_SHIM_STATS", stats_path.to_str().unwrap())],
    );
    assert_eq!(
        number(&adam, "persistent_bytes"),
        3 * number(&sgd, "persistent_bytes")
    );
    assert_eq!(number(&adam, "persistent_allocations"), 18);
    let stats = support::read_json(&stats_path);
    assert_eq!(
        stats["peak_device_bytes"],
        number(&adam, "expected_peak_device_bytes")
    );
    let loss = |out: &str, it: u32| -> f64 {
        support::value_of(out, &format!("iter {it} loss"))
            .unwrap()
            .parse()
            .unwrap()
    };
    assert!(loss(&adam, 3) < loss(&adam, 0), "{adam}");
    assert_ne!(
        support::value_of(&adam, "checksum"),
        support::value_of(&sgd, "checksum")
    );
}
