//! `itermem plan`: AutoSwap on op-level traces. A hand-made DTR log (a forward pass whose
//! activations are needed again only in the backward pass) and, when ../shared/real-traces is
//! present, the real DTR logs: every plan is validated by the command itself, the JSON is
//! stable, and Bayesian optimisation is never worse than the best single score.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use support::{itermem, real_trace, scratch, stdout_ok};

const MIB: u64 = 1 << 20;

/// Four layers: forward f1..f4 make 64 MiB activations, backward b4..b1 read them in reverse
/// order; each op takes 10 ms (a 64 MiB copy takes about 5 ms each way over PCIe 3). The
/// activations of the first layers idle longest.
/// The toy DTR log, written to a file of the calling test's own (`name`): tests run in parallel
/// in one process, and each removes its file at the end.
fn toy_log(name: &str) -> PathBuf {
    let mut lines = vec![
        r#"{"ANNOTATION":"START","INSTRUCTION":"ANNOTATE"}"#.to_string(),
        r#"{"INSTRUCTION":"CONSTANT","NAME":"w"}"#.to_string(),
        format!(
            r#"{{"INSTRUCTION":"MEMORY","MEMORY":"{}","NAME":"w"}}"#,
            4 * MIB
        ),
    ];
    let call = |name: &str, args: &[&str], result: &str, bytes: u64| {
        let args: Vec<String> = args.iter().map(|a| format!("\"{a}\"")).collect();
        vec![
            format!(
                r#"{{"ARGS":[{}],"INSTRUCTION":"CALL","NAME":"{name}","RESULT":["{result}"],"TIME":"10000000"}}"#,
                args.join(",")
            ),
            format!(r#"{{"INSTRUCTION":"MEMORY","MEMORY":"{bytes}","NAME":"{result}"}}"#),
            format!(r#"{{"ALIAS":"-1","INSTRUCTION":"ALIAS","NAME":"{result}"}}"#),
        ]
    };
    lines.extend(call("f1", &["w"], "a1", 64 * MIB));
    lines.extend(call("f2", &["a1", "w"], "a2", 64 * MIB));
    lines.extend(call("f3", &["a2", "w"], "a3", 64 * MIB));
    lines.extend(call("f4", &["a3", "w"], "a4", 64 * MIB));
    lines.extend(call("b4", &["a4", "w"], "g4", 64 * MIB));
    lines.push(r#"{"INSTRUCTION":"RELEASE","NAME":"a4"}"#.into());
    lines.extend(call("b3", &["a3", "g4"], "g3", 64 * MIB));
    lines.push(r#"{"INSTRUCTION":"RELEASE","NAME":"a3"}"#.into());
    lines.push(r#"{"INSTRUCTION":"RELEASE","NAME":"g4"}"#.into());
    lines.extend(call("b2", &["a2", "g3"], "g2", 64 * MIB));
    lines.push(r#"{"INSTRUCTION":"RELEASE","NAME":"a2"}"#.into());
    lines.push(r#"{"INSTRUCTION":"RELEASE","NAME":"g3"}"#.into());
    lines.extend(call("b1", &["a1", "g2"], "g1", 64 * MIB));
    lines.push(r#"{"INSTRUCTION":"RELEASE","NAME":"a1"}"#.into());
    lines.push(r#"{"INSTRUCTION":"RELEASE","NAME":"g2"}"#.into());
    lines.push(r#"{"INSTRUCTION":"RELEASE","NAME":"g1"}"#.into());
    let path = scratch(&format!("toy-dtr-{name}.log"));
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path
}

fn plan(args: &[&str], trace: &Path) -> Output {
    Command::new(itermem())
        .arg("plan")
        .args(args)
        .arg(trace)
        .output()
        .unwrap()
}

fn json(args: &[&str], trace: &Path) -> serde_json::Value {
    serde_json::from_str(&stdout_ok(&plan(args, trace))).unwrap()
}

#[test]
fn swaps_bring_an_iteration_under_the_limit_and_the_pool_keeps_one_address_per_tensor() {
    let log = toy_log("swaps");
    let full = json(&["--json", "--limit", "100%"], &log);
    let peak = full["peak_bytes"].as_u64().unwrap();
    assert_eq!(
        full["swaps"].as_array().unwrap().len(),
        0,
        "nothing to do at the peak"
    );
    assert_eq!(full["overhead"], 0.0);

    let limited = json(&["--json", "--limit", "75%"], &log);
    let limit = limited["limit_bytes"].as_u64().unwrap();
    assert_eq!(limit, peak * 3 / 4);
    assert!(
        !limited["swaps"].as_array().unwrap().is_empty(),
        "{limited:#}"
    );
    assert!(
        limited["peak_after_bytes"].as_u64().unwrap() <= limit,
        "{limited:#}"
    );
    let footprint = limited["pool_footprint_bytes"].as_u64().unwrap();
    assert!(
        footprint < peak,
        "holes of swapped tensors are lent: {limited:#}"
    );
    assert!(footprint >= limited["pool_lower_bound_bytes"].as_u64().unwrap());
    // What the executor follows: each swap's queueing ops, and the ops during which its range
    // holds other tensors — only after its swap-out is queued and before its next access.
    let mut lent = 0;
    for s in limited["swaps"].as_array().unwrap() {
        let op = |key: &str| s[key].as_u64();
        let (out_at, need) = (op("out_at_op").unwrap(), op("in_before_op"));
        assert!(out_at >= op("out_after_op").unwrap(), "{s}");
        assert_eq!(need.is_some(), op("in_issue_op").is_some(), "{s}");
        for window in s["lent_ops"].as_array().unwrap() {
            let (from, to) = (window[0].as_u64().unwrap(), window[1].as_u64().unwrap());
            assert!(from < to, "{s}");
            if !s["wraps"].as_bool().unwrap() {
                assert!(out_at < from && need.is_none_or(|need| to <= need), "{s}");
            }
            lent += 1;
        }
    }
    assert!(lent > 0, "{limited:#}");
    for key in [
        "trace",
        "planner",
        "overhead",
        "weights",
        "evaluations",
        "plan_ms",
        "swapped_bytes",
    ] {
        assert!(limited.get(key).is_some(), "missing {key}");
    }
    std::fs::remove_file(log).unwrap();
}

#[test]
fn sweep_json_is_stable_and_bo_is_never_worse_than_a_single_score() {
    let log = toy_log("sweep");
    let sweep = json(&["--sweep", "--json"], &log);
    for key in [
        "trace",
        "peak_bytes",
        "copy_bound",
        "zero_overhead_reduction",
        "sweep",
    ] {
        assert!(sweep.get(key).is_some(), "missing {key}");
    }
    check_bo_never_worse(&sweep);
    std::fs::remove_file(log).unwrap();
}

/// At every limit of a sweep, BO's overhead ≤ the best single score's (null = limit not met).
fn check_bo_never_worse(sweep: &serde_json::Value) {
    let value = |v: &serde_json::Value| v.as_f64().unwrap_or(f64::INFINITY);
    for point in sweep["sweep"].as_array().unwrap() {
        let o = &point["overhead"];
        let best_single = ["aoa", "doa", "wdoa", "swdoa"]
            .iter()
            .map(|k| value(&o[k]))
            .fold(f64::INFINITY, f64::min);
        assert!(value(&o["bo"]) <= best_single + 1e-12, "{point}");
    }
}

#[test]
fn real_dtr_logs_sweep_with_bo_never_worse() {
    let Some(dir) = real_trace("dtr-op-logs") else {
        return;
    };
    let resnet = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("resnet32")
        })
        .unwrap();
    let sweep = json(&["--sweep", "--json", "--evaluations", "16"], &resnet);
    check_bo_never_worse(&sweep);
    let zero = sweep["zero_overhead_reduction"]["bo"].as_f64().unwrap();
    let bound = sweep["copy_bound"].as_f64().unwrap();
    assert!(
        zero > 0.05 && zero <= bound + 1e-9,
        "zero-overhead {zero}, bound {bound}"
    );
}

#[test]
fn bad_arguments_are_reported() {
    let log = toy_log("bad-arguments");
    let output = plan(&["--limit", "12Q"], &log);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("--limit \"12Q\""));
    let output = plan(&["--limit", "80%", "--bandwidth", "fast"], &log);
    assert_eq!(output.status.code(), Some(2));
    std::fs::remove_file(log).unwrap();
}

/// A trace whose tensors have no bytes (an empty op log: annotations, calls on nothing) has
/// nothing to swap: an error, not a 99.9 % reduction (issue 14, item 12), and at once, not
/// after a sweep of every limit.
#[test]
fn a_trace_without_tensor_bytes_is_an_error() {
    let log = support::scratch("empty-ops.log");
    let mut text = String::from("{\"INSTRUCTION\":\"ANNOTATE\",\"ANNOTATION\":\"START\"}\n");
    for i in 0..20_000 {
        text.push_str(&format!(
            "{{\"INSTRUCTION\":\"CALL\",\"NAME\":\"op{i}\",\"ARGS\":[],\"RESULT\":[],\"TIME\":10}}\n"
        ));
    }
    std::fs::write(&log, text).unwrap();
    for args in [&["--sweep"][..], &["--limit", "50%"][..]] {
        let output = plan(args, &log);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains("nothing to swap"), "{stderr}");
    }
    std::fs::remove_file(log).unwrap();
}

/// The planning benchmarks run and report (their timings are reported, never asserted).
#[test]
fn planning_benchmarks_report_their_timings() {
    let bench = |args: &[&str]| {
        let output = Command::new(itermem())
            .arg("bench")
            .args(args)
            .output()
            .unwrap();
        stdout_ok(&output)
    };
    let swap = bench(&["swap", "--ops", "300", "--tensors", "600", "--runs", "2"]);
    assert!(
        swap.contains("300 ops and 600 tensors") && swap.contains("evaluate"),
        "{swap}"
    );
    let bo = bench(&["bo", "--runs", "1"]);
    assert!(bo.contains("36 evaluations"), "{bo}");
    let output = Command::new(itermem())
        .args(["bench", "swap", "--runs", "0"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
}

/// `bench hooks` runs the shim alone, the forwarding-only floor and every mode, on one thread
/// and on several, and prints a row of each operation with a column of each (timings are
/// reported, never asserted).
#[test]
fn hook_benchmark_reports_every_mode_and_the_forwarding_floor() {
    let output = Command::new(itermem())
        .args([
            "bench",
            "hooks",
            "--runs",
            "1",
            "--pairs",
            "1000",
            "--launches",
            "1000",
        ])
        .args([
            "--live",
            "100",
            "--threads",
            "2",
            "--mode",
            "record,pool,swap,cnmem",
        ])
        .output()
        .unwrap();
    let text = stdout_ok(&output);
    let columns = ["shim", "forward", "record", "pool", "swap", "cnmem"];
    let headers: Vec<&str> = text
        .lines()
        .filter(|l| l.split_whitespace().next() == Some("operation"))
        .collect();
    assert_eq!(
        headers.len(),
        2,
        "a table of times and one of throughput:\n{text}"
    );
    for header in headers {
        assert_eq!(
            header.split_whitespace().skip(1).collect::<Vec<_>>(),
            columns,
            "{text}"
        );
    }
    assert!(text.contains("2 thread(s)"), "{text}");
    for operation in [
        "malloc+free pair",
        "launch (8 params)",
        "cuMemAlloc+cuMemFree",
        "cuLaunchKernel (8)",
    ] {
        let rows: Vec<&str> = text.lines().filter(|l| l.starts_with(operation)).collect();
        assert_eq!(rows.len(), 2, "{operation}:\n{text}");
        for row in rows {
            // The shim alone, then each column's figure with its added cost or ratio.
            let figures = row[operation.len()..].split_whitespace().count();
            assert_eq!(figures, 1 + 2 * (columns.len() - 1), "{row}");
        }
    }
    // How many launch batches ran without the busy stream they were meant to have, per column.
    let gates: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("gates timed out"))
        .collect();
    assert_eq!(gates.len(), 1, "{text}");
    let counts = gates[0]["gates timed out".len()..].split_whitespace();
    assert_eq!(counts.count(), columns.len(), "{text}");
}

/// With `--callgrind`, `bench hooks` reports instructions per operation of each configuration
/// (when valgrind is installed; the counts themselves are reported, never asserted).
#[test]
fn hook_benchmark_counts_instructions_under_callgrind() {
    if Command::new("valgrind").arg("--version").output().is_err() {
        eprintln!("skipped: valgrind is not installed");
        return;
    }
    let output = Command::new(itermem())
        .args([
            "bench",
            "hooks",
            "--runs",
            "1",
            "--pairs",
            "200",
            "--launches",
            "200",
        ])
        .args(["--live", "100", "--mode", "pool", "--callgrind", "--json"])
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_str(&stdout_ok(&output)).unwrap();
    let entries = json.as_array().unwrap();
    // Four operations, each under the forwarding floor and pool mode.
    assert_eq!(entries.len(), 8, "{json}");
    for entry in entries {
        for key in ["shim_instructions", "interposed_instructions"] {
            assert!(entry[key].as_f64().is_some_and(|n| n > 0.0), "{entry}");
        }
    }
}
