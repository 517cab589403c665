//! SINGA's memory logs (the SmartPool/AutoSwap authors' format, `src/import/singa.rs`), written
//! by the tests: the allocation log through `trace info` and `compare`, the access log through
//! `plan` and `replay`, and hostile lines refused with the file and the line.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use itermem::ops::{self, LoadOptions, OpFormat};
use support::{itermem, scratch};

const ITERS: u64 = 40; // 6 allocation events an iteration: past the detector's 128-event window
const WEIGHT: u64 = 4 << 20;
/// The activations of one iteration: address and size.
const ACTIVATIONS: [(u64, u64); 3] = [
    (0x7062c0000, 2 << 20),
    (0x706600000, 8 << 20),
    (0x70d060000, 1 << 20),
];

/// A SINGA log of `ITERS` iterations over one weight allocated before the first; with
/// `accesses`, each layer reads the weight and writes its activation (`Read` then `Mutable`),
/// the last one reads the first two, and the update reads and writes the weight.
fn singa_log(accesses: bool) -> String {
    let mut t = 1_512_107_272_964u64;
    let mut log = format!("Malloc 0x705fc0c00 {WEIGHT} {t}\n");
    for _ in 0..ITERS {
        for (addr, size) in ACTIVATIONS {
            t += 1;
            log += &format!("Malloc {addr:#x} {size} {t}\n");
            if accesses {
                log += &format!("Read 0x705fc0c00 {t}\nMutable {addr:#x} {t}\n");
            }
        }
        if accesses {
            log += "Read 0x7062c0000\nRead 0x706600000\nMutable 0x70d060000\n";
        }
        for (addr, _) in ACTIVATIONS {
            t += 1;
            log += &format!("Free {addr:#x} {t}\n");
        }
        if accesses {
            log += "Read 0x705fc0c00\nMutable 0x705fc0c00\n";
        }
    }
    log
}

fn write(name: &str, content: &str) -> PathBuf {
    let path = scratch(name);
    std::fs::write(&path, content).unwrap();
    path
}

fn run(args: &[&str], file: &Path) -> Output {
    Command::new(itermem())
        .args(args)
        .arg(file)
        .output()
        .unwrap()
}

fn stdout(output: &Output) -> String {
    support::stdout_ok(output)
}

#[test]
fn an_allocation_log_is_recognised_and_its_iteration_found() {
    let log = write("singa-alloc.log", &singa_log(false));
    let info: serde_json::Value =
        serde_json::from_str(&stdout(&run(&["trace", "info", "--json"], &log))).unwrap();
    assert_eq!(info["period_events"], 6, "{info}");
    assert_eq!(info["iterations"], ITERS, "{info}");
    let text = stdout(&run(&["trace", "info"], &log));
    assert!(text.contains("SINGA memory log"), "{text}");
    let peak = WEIGHT + ACTIVATIONS.iter().map(|(_, s)| s).sum::<u64>();
    assert!(
        text.contains(&format!("({peak} B) live device memory")),
        "{text}"
    );

    let compare = stdout(&run(&["compare"], &log));
    assert!(
        compare.contains(&format!("one iteration (6 events, {ITERS} seen)")),
        "{compare}"
    );

    // No accesses: nothing to plan on, said so; the replay replays the allocations.
    let plan = run(&["plan", "--limit", "80%"], &log);
    assert_eq!(plan.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&plan.stderr);
    assert!(
        stderr.contains("a SINGA allocation log (Malloc and Free lines only) records no accesses"),
        "{stderr}"
    );
}

#[test]
fn an_access_log_groups_reads_then_writes_into_ops_and_plans_and_replays() {
    let loaded = ops::parse(
        Path::new("access.log"),
        singa_log(true).into_bytes(),
        &LoadOptions::default(),
    )
    .unwrap();
    assert_eq!(loaded.format, OpFormat::SingaLog);
    assert!(loaded.stats.window_detected);
    // One iteration, starting where the least is live: five ops, read-then-write runs.
    let mut names: Vec<&str> = loaded.trace.ops.iter().map(|op| op.name.as_str()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "singa op (1 reads, 1 writes)",
            "singa op (1 reads, 1 writes)",
            "singa op (1 reads, 1 writes)",
            "singa op (1 reads, 1 writes)",
            "singa op (2 reads, 1 writes)",
        ]
    );
    assert_eq!(loaded.trace.ops.len(), 5, "{names:?}");
    let peak = WEIGHT + ACTIVATIONS.iter().map(|(_, s)| s).sum::<u64>();
    assert_eq!(loaded.trace.peak().unwrap().bytes, peak);

    let log = write("singa-access.log", &singa_log(true));
    let plan: serde_json::Value =
        serde_json::from_str(&stdout(&run(&["plan", "--json", "--limit", "80%"], &log))).unwrap();
    assert_eq!(plan["peak_bytes"], peak, "{plan}");

    let replay = stdout(&run(
        &["replay", "--shim", "--mode", "pool", "--iters", "3"],
        &log,
    ));
    assert!(replay.contains("one kernel per op"), "{replay}");
    assert!(
        replay.contains("every tensor held what was written"),
        "{replay}"
    );
}

#[test]
fn layer_lines_delimit_ops_and_name_them() {
    let log = "Malloc 0x10 1048576 1\nMalloc 0x20 1048576 1\n\
               Layer conv1 2\nRead 0x10 2\nMutable 0x20 2\nRead 0x20\n\
               Layer relu1 3\nRead 0x20\nMutable 0x20\nFree 0x10 4\n";
    let loaded = ops::parse(
        Path::new("layers.log"),
        log.as_bytes().to_vec(),
        &LoadOptions::default(),
    )
    .unwrap();
    let ops: Vec<(&str, usize, usize)> = loaded
        .trace
        .ops
        .iter()
        .map(|op| (op.name.as_str(), op.reads.len(), op.writes.len()))
        .collect();
    // A layer's Read after its Mutable stays in the layer; each op reads and writes what it
    // touches (the safe side, as for itermem's own traces).
    assert_eq!(ops, [("conv1", 2, 2), ("relu1", 1, 1)]);
}

#[test]
fn hostile_lines_are_refused_with_the_file_and_the_line() {
    for (content, line, message) in [
        (
            "Malloc 0x10 100 5\nFree 0x10 zz\n",
            2,
            "'zz' is not a time in milliseconds",
        ),
        (
            "Malloc 0x10 100 5\nMalloc 0x20 0 6\n",
            2,
            "Malloc size '0' is not a positive byte count",
        ),
        (
            "Malloc 0x10 100 5\nFree 10 6\n",
            2,
            "'10' is not a hexadecimal address",
        ),
        (
            "Malloc 0x10 100 5\nRead 0x10\nWrite 0x10\n",
            3,
            "is no SINGA memory-log record",
        ),
        (
            "Malloc 0x10 100 5\nFree 0x10 6 7\n",
            2,
            "a SINGA memory-log line is `Free <ptr> <ms>`",
        ),
        (
            "Malloc 0x10 100 5\nMalloc 0x20 100 1e400\n",
            2,
            "not a time in milliseconds",
        ),
        (
            "Malloc 0x10 100 5\nMalloc 0x20 100 99999999999999999999999\n",
            2,
            "not a time in milliseconds",
        ),
    ] {
        let file = write("singa-bad.log", content);
        for args in [
            &["trace", "info"][..],
            &["compare"],
            &["plan", "--limit", "50%"],
        ] {
            let output = run(args, &file);
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert_eq!(
                output.status.code(),
                Some(2),
                "{args:?} {content:?}: {stderr}"
            );
            assert!(stderr.contains(&file.display().to_string()), "{stderr}");
            assert!(
                stderr.contains(&format!("line {line}")),
                "{args:?} {content:?}: {stderr}"
            );
            assert!(stderr.contains(message), "{args:?} {content:?}: {stderr}");
            assert!(!stderr.contains("panicked"), "{stderr}");
        }
    }
}
