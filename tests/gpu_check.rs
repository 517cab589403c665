//! `tools/gpu-check --shim`: the acceptance run prepared for a real GPU, on the simulated one, so
//! that it works the day a GPU is lent. Its nvcc-built parts must pass and its report must be
//! written; PyTorch and JAX are skipped on the shim, and say so.

mod support;

use std::path::Path;
use std::process::Command;
use support::{read_json, root, scratch};

#[test]
fn gpu_check_passes_on_the_shim_and_writes_its_report() {
    let out = scratch("gpu-check");
    let itermem_dir = Path::new(support::itermem()).parent().unwrap();
    let output = Command::new(root().join("tools/gpu-check"))
        .args(["--shim", "--budget-s", "240", "--itermem"])
        .arg(itermem_dir)
        .arg("--out")
        .arg(&out)
        .output()
        .expect("cannot run tools/gpu-check");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report = read_json(&out.join("gpu-check.json"));
    let training = &report["parts"]["training (nvcc-built mlp_train)"];
    if training.get("skipped").is_some() {
        eprintln!("SKIPPED gpu_check: {}", training["skipped"]);
        return;
    }
    let rows = training["rows"].as_array().unwrap();
    let modes: Vec<&str> = rows.iter().map(|r| r["mode"].as_str().unwrap()).collect();
    assert_eq!(modes, ["plain", "record", "pool", "cnmem", "swap"]);
    assert!(rows.iter().all(|r| r["ok"] == true), "{training:#}");
    let swap = &rows[4];
    assert!(
        swap["peak_bytes"].as_u64() <= swap["limit"].as_u64(),
        "{swap:#}"
    );
    let hooks = report["parts"]["hooks (nvcc-built hook_bench)"]["rows"]
        .as_array()
        .unwrap();
    assert!(hooks.iter().all(|r| r["launch_ns"].as_f64() > Some(0.0)));
    assert!(
        std::fs::read_to_string(out.join("gpu-check.md"))
            .unwrap()
            .contains("SKIPPED: the shim runs no torch device code")
    );
}
