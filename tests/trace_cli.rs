//! `itermem trace info|export` end to end: traces written with `TraceWriter`, read by the
//! binary; corrupt traces must fail with exit code 2, the byte offset, and no panic.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

use itermem::event::{CopyKind, Event, EventKind, MemKind};
use itermem::trace::{Clock, TraceFile, TraceHeader, TraceWriter};
use serde_json::Value;

const ITERS: u64 = 20; // enough for the detector's 128-event minimum window (10-event period)
/// Access events per iteration of [`training`].
const PERIOD: u64 = 10;
const WEIGHT: u64 = 1 << 20;
const A: u64 = 4096;
const B: u64 = 8192;
const STREAM: u64 = 0x7f00_1234;

fn header() -> TraceHeader {
    TraceHeader {
        word_size: 8,
        clock: Clock::MonotonicSinceStart,
        start_unix_ns: 1_700_000_000_000_000_000,
        pid: 777,
        device_name: "Test GPU".into(),
        device_total_memory: 8 << 30,
        command_line: vec!["python".into(), "train.py".into()],
    }
}

fn tmp(name: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("trace_cli-{}-{n}-{name}", std::process::id()))
}

/// Three kernel names, a 1 MiB weight and a pinned host buffer, `ITERS` iterations of
/// `PERIOD` access events, then the weight and the host buffer are freed.
///
/// Iteration (offsets): 0 malloc A (device), 1 malloc B (async, STREAM), 2 memcpy H2D → A,
/// 3 launch k0 (A), 4 launch k1 (A, B), 5 free A, 6 memset B, 7 launch k2 (B, stream 0),
/// 8 memcpy D2H ← B, 9 free B.
fn training() -> Vec<Event> {
    let mut t = 0;
    let mut events = Vec::new();
    let mut push = |kind: EventKind| {
        t += 100;
        events.push(Event::new(t, kind));
    };
    for (kernel, name) in ["fwd<float, 4>", "bwd", "sgd_step"].iter().enumerate() {
        push(EventKind::KernelName {
            kernel: kernel as u32,
            name: name.to_string(),
        });
    }
    push(EventKind::Malloc {
        id: 1,
        addr: 0x7000_0000,
        size: WEIGHT,
        kind: MemKind::Device,
        stream: 0,
    });
    push(EventKind::Malloc {
        id: 2,
        addr: 0x5000_0000,
        size: 1 << 16,
        kind: MemKind::PinnedHost,
        stream: 0,
    });
    let mut id = 3;
    for _ in 0..ITERS {
        let (a, b) = (id, id + 1);
        id += 2;
        push(EventKind::Malloc {
            id: a,
            addr: 0x7100_0000,
            size: A,
            kind: MemKind::Device,
            stream: 0,
        });
        push(EventKind::Malloc {
            id: b,
            addr: 0x7200_0000,
            size: B,
            kind: MemKind::Async,
            stream: STREAM,
        });
        push(EventKind::Memcpy {
            dst: Some(a),
            src: Some(2),
            bytes: A,
            kind: CopyKind::HostToDevice,
            stream: STREAM,
            asynchronous: true,
        });
        push(EventKind::Launch {
            kernel: 0,
            stream: STREAM,
            layout_known: true,
            touched: smallvec::smallvec![a, 1],
        });
        push(EventKind::Launch {
            kernel: 1,
            stream: STREAM,
            layout_known: true,
            touched: smallvec::smallvec![a, b],
        });
        push(EventKind::Free { id: a, stream: 0 });
        push(EventKind::Memset {
            dst: Some(b),
            bytes: B,
            stream: STREAM,
            asynchronous: true,
        });
        push(EventKind::Launch {
            kernel: 2,
            stream: 0,
            layout_known: false,
            touched: smallvec::smallvec![],
        });
        push(EventKind::Memcpy {
            dst: None,
            src: Some(b),
            bytes: 4,
            kind: CopyKind::DeviceToHost,
            stream: 0,
            asynchronous: false,
        });
        push(EventKind::Free {
            id: b,
            stream: STREAM,
        });
    }
    push(EventKind::Free { id: 1, stream: 0 });
    push(EventKind::Free { id: 2, stream: 0 });
    events
}

fn write_trace(name: &str, events: &[Event]) -> PathBuf {
    let path = tmp(name);
    let writer = TraceWriter::create(&path, header()).unwrap();
    for e in events {
        writer.record(e.clone());
    }
    let summary = writer.finish().unwrap();
    assert_eq!(summary.events_written, events.len() as u64);
    path
}

fn itermem(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_itermem"))
        .args(args)
        .output()
        .expect("cannot run itermem")
}

fn ok(args: &[&str]) -> String {
    let out = itermem(args);
    assert!(
        out.status.success(),
        "itermem {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Runs a command that must fail with exit code 2; returns its stderr.
fn fails(args: &[&str]) -> String {
    let out = itermem(args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "itermem {args:?}: {stderr}");
    assert!(out.stdout.is_empty(), "output despite the error");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(stderr.starts_with("itermem: "), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    stderr
}

fn s(path: &Path) -> &str {
    path.to_str().unwrap()
}

#[test]
fn info_json_reports_counts_peak_and_the_period() {
    let path = write_trace("info.itrace", &training());
    let json: Value = serde_json::from_str(&ok(&["trace", "info", s(&path), "--json"])).unwrap();
    assert_eq!(
        json["events"],
        serde_json::json!({
            "malloc": 1 + 2 * ITERS, "free": 1 + 2 * ITERS, "launch": 3 * ITERS,
            "memcpy": 2 * ITERS, "memset": ITERS,
        })
    );
    assert_eq!(
        json["host_events"],
        serde_json::json!({"malloc": 1, "free": 1})
    );
    // The weight's malloc and free, and the iterations: the pinned host buffer's malloc and
    // free take no index.
    assert_eq!(json["access_events"], 2 + PERIOD * ITERS);
    assert_eq!(json["kernel_names"], 3);
    assert_eq!(json["period_events"], PERIOD);
    // The least live memory of an iteration is after its `free B`: the boundary is the first
    // event of an iteration (event 1 + 10j).
    let boundary = json["boundary_event"].as_u64().unwrap();
    assert_eq!(boundary % PERIOD, 1, "{json}");
    assert_eq!(json["iterations"], ITERS, "{json}");
    assert_eq!(json["peak_live_bytes"], WEIGHT + A + B);
    assert_eq!(json["peak_event"], 2); // weight 0, A 1, B 2 (the host malloc has no index)
    assert_eq!(json["live_bytes_at_end"], 0);
    assert_eq!(json["streams"], serde_json::json!([0, STREAM]));
    assert_eq!(json["complete"], true);
    assert_eq!(json["events_lost"], 0);
    assert_eq!(json["device"]["name"], "Test GPU");
    assert_eq!(json["device"]["total_memory"], 8u64 << 30);
    assert_eq!(json["pid"], 777);
    let top = json["top_kernels"].as_array().unwrap();
    assert_eq!(top.len(), 3);
    assert_eq!(top[0]["name"], "fwd<float, 4>");
    assert_eq!(top[0]["launches"], ITERS);
}

#[test]
fn info_text_is_readable() {
    let path = write_trace("info-text.itrace", &training());
    let text = ok(&["trace", "info", s(&path)]);
    for needle in [
        "Test GPU",
        "malloc 41  free 41  launch 60  memcpy 40  memset 20",
        "pinned host malloc 1  free 1",
        "iteration   10 events",
        "20 iterations seen",
        "at event 2",
        "fwd<float, 4>",
        "python train.py",
    ] {
        assert!(text.contains(needle), "{needle:?} missing in:\n{text}");
    }
}

#[test]
fn csv_export_has_one_row_per_event() {
    let events = training();
    let path = write_trace("csv.itrace", &events);
    let out_path = tmp("out.csv");
    assert_eq!(
        ok(&[
            "trace",
            "export",
            s(&path),
            "--format",
            "csv",
            "-o",
            s(&out_path)
        ]),
        ""
    );
    let csv = std::fs::read_to_string(&out_path).unwrap();
    let stdout = ok(&["trace", "export", s(&path), "--format", "csv"]);
    assert_eq!(csv, stdout);
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 1 + events.len());
    assert!(lines[0].starts_with("index,time_ns,event,"));
    // The kernel name with a comma is quoted; the first malloc is access event 0.
    assert_eq!(lines[1], ",100,kernel_name,,,,,,,,,,,0,\"fwd<float, 4>\",,");
    assert_eq!(
        lines[4],
        "0,400,malloc,1,0x70000000,1048576,device,0,,,,,,,,,"
    );
    let launches = lines.iter().filter(|l| l.contains(",launch,")).count();
    assert_eq!(launches as u64, 3 * ITERS);
}

#[test]
fn chrome_export_is_valid_trace_event_json() {
    let path = write_trace("chrome.itrace", &training());
    let json: Value =
        serde_json::from_str(&ok(&["trace", "export", s(&path), "--format", "chrome"])).unwrap();
    let events = json["traceEvents"].as_array().unwrap();
    let count = |ph: &str, cat: Option<&str>| {
        events
            .iter()
            .filter(|e| e["ph"] == ph && cat.is_none_or(|c| e["cat"] == c))
            .count() as u64
    };
    assert_eq!(count("b", Some("device allocation")), 1 + 2 * ITERS);
    assert_eq!(count("e", Some("device allocation")), 1 + 2 * ITERS);
    assert_eq!(count("b", Some("pinned host allocation")), 1);
    assert_eq!(count("i", Some("launch")), 3 * ITERS);
    assert_eq!(count("i", Some("memcpy")), 2 * ITERS);
    assert_eq!(count("i", Some("memset")), ITERS);
    let peak = events
        .iter()
        .filter(|e| e["ph"] == "C")
        .map(|e| e["args"]["bytes"].as_u64().unwrap())
        .max();
    assert_eq!(peak, Some(WEIGHT + A + B));
    // One named track per stream, and launches on their stream's track.
    let names: Vec<&str> = events
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "thread_name")
        .map(|e| e["args"]["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"stream 0 (default)"), "{names:?}");
    assert!(names.contains(&"stream 0x7f001234"), "{names:?}");
    let fwd = events
        .iter()
        .find(|e| e["name"] == "fwd<float, 4>")
        .unwrap();
    let fwd_track = events
        .iter()
        .find(|e| e["args"]["name"] == "stream 0x7f001234")
        .unwrap();
    assert_eq!(fwd["tid"], fwd_track["tid"]);
    // Timestamps are microseconds.
    assert_eq!(fwd["ts"].as_f64(), Some(0.9));
}

#[test]
fn dsa_csv_export_lists_the_buffers_of_one_iteration() {
    let path = write_trace("dsa.itrace", &training());
    let csv = ok(&["trace", "export", s(&path), "--format", "dsa-csv"]);
    let mut lines = csv.lines();
    assert_eq!(lines.next(), Some("id,lower,upper,size"));
    let rows: Vec<Vec<u64>> = lines
        .map(|l| l.split(',').map(|c| c.parse().unwrap()).collect())
        .collect();
    let shape: Vec<(u64, u64, u64)> = rows.iter().map(|r| (r[1], r[2], r[3])).collect();
    // The weight lives through the iteration; A is [0, 5), B [1, 9); the pinned host buffer is
    // not device memory.
    assert_eq!(shape, vec![(0, PERIOD, WEIGHT), (0, 5, A), (1, 9, B)]);
    assert_eq!(rows[0][0], 1);
    assert_eq!(rows[2][0], rows[1][0] + 1);

    // Another complete iteration has the same shape with other ids.
    let other = ok(&[
        "trace",
        "export",
        s(&path),
        "--format",
        "dsa-csv",
        "--iteration",
        "0",
    ]);
    assert_eq!(other.lines().count(), 4);
    let err = fails(&[
        "trace",
        "export",
        s(&path),
        "--format",
        "dsa-csv",
        "--iteration",
        "99",
    ]);
    assert!(err.contains("--iteration 99 does not exist"), "{err}");
}

/// The torch-snapshot export is PyTorch's memory snapshot pickle: read back (by the snapshot
/// importer, as `compare` and `trace info` read any snapshot) it has the trace's device
/// allocations and frees and its peak, and its frames name the kernels.
#[test]
fn torch_snapshot_export_reads_back_with_the_same_peak() {
    let trace = write_trace("snap.itrace", &training());
    let pickle = tmp("snap.pickle");
    ok(&[
        "trace",
        "export",
        s(&trace),
        "--format",
        "torch-snapshot",
        "-o",
        s(&pickle),
    ]);
    let original: Value =
        serde_json::from_str(&ok(&["trace", "info", s(&trace), "--json"])).unwrap();
    let back: Value = serde_json::from_str(&ok(&["trace", "info", s(&pickle), "--json"])).unwrap();
    assert_eq!(back["converted_from"], "PyTorch memory snapshot", "{back}");
    assert_eq!(back["peak_live_bytes"], original["peak_live_bytes"]);
    assert_eq!(back["events"]["malloc"], original["events"]["malloc"]);
    assert_eq!(back["events"]["free"], original["events"]["free"]);
    let bytes = std::fs::read(&pickle).unwrap();
    let text = String::from_utf8_lossy(&bytes);
    // Each iteration frees A after `bwd` and allocates the next one's after `sgd_step`.
    assert!(
        text.contains("cudaFree after bwd"),
        "the frames name the kernels"
    );
    assert!(
        text.contains("cudaMalloc after sgd_step"),
        "the frames name the kernels"
    );
}

#[test]
fn dsa_csv_without_an_iteration_is_bad_input() {
    let mut events = training();
    events.truncate(8); // kernel names and the first few events: nothing repeats
    let path = write_trace("noiter.itrace", &events);
    let json: Value = serde_json::from_str(&ok(&["trace", "info", s(&path), "--json"])).unwrap();
    assert_eq!(json["period_events"], Value::Null);
    assert_eq!(json["boundary_event"], Value::Null);
    assert_eq!(json["iterations"], 0);
    let err = fails(&["trace", "export", s(&path), "--format", "dsa-csv"]);
    assert!(err.contains("no repeating iteration detected"), "{err}");
}

/// Offsets of the records of a trace (from the library's reader).
fn record_offsets(path: &Path) -> Vec<u64> {
    let file = TraceFile::open(path).unwrap();
    let mut events = file.events();
    let mut offsets = vec![events.offset()];
    while events.next().is_some() {
        offsets.push(events.offset());
    }
    offsets.pop(); // the end of the file
    offsets
}

#[test]
fn corrupt_traces_fail_with_the_offset_and_exit_code_2() {
    let good = write_trace("good.itrace", &training());
    let bytes = std::fs::read(&good).unwrap();
    let offsets = record_offsets(&good);

    // Truncated in the middle of the 10th record (a process that died while writing): not
    // corrupt but incomplete, its first 10 records read (issue 14, item 8).
    let cut = tmp("cut.itrace");
    let record = offsets[10];
    std::fs::write(&cut, &bytes[..record as usize + 2]).unwrap();
    let info = ok(&["trace", "info", s(&cut)]);
    assert!(
        info.contains(&format!("INCOMPLETE: cut at byte {record}")),
        "{info}"
    );
    let csv = ok(&["trace", "export", s(&cut), "--format", "csv"]);
    assert_eq!(
        csv.lines().count(),
        1 + 10,
        "a header and the 10 events: {csv}"
    );

    // An absurd length.
    let long = tmp("long.itrace");
    let mut patched = bytes.clone();
    let at = offsets[5] as usize;
    patched.splice(at + 1..at + 2, [0xff, 0xff, 0xff, 0x7f]);
    std::fs::write(&long, &patched).unwrap();
    let err = fails(&["trace", "info", s(&long)]);
    assert!(
        err.contains(&format!(
            "corrupt record at byte {at}: length 268435455 runs past the end of the file ({} bytes)",
            patched.len()
        )),
        "{err}"
    );

    // An invalid memory kind in the first malloc (kind byte after Δt, id, addr, size).
    let bad_kind = tmp("kind.itrace");
    let mut patched = bytes.clone();
    let malloc = offsets[3] as usize; // after the three kernel names
    let body = malloc + 2;
    // Δt +100 (2 bytes), id 1 (1), addr 0x70000000 (5), size 2^20 (3), then the memory kind.
    patched[body + 2 + 1 + 5 + 3] = 9;
    std::fs::write(&bad_kind, &patched).unwrap();
    let err = fails(&["trace", "info", s(&bad_kind)]);
    assert!(
        err.contains(&format!(
            "corrupt record at byte {malloc}: invalid value 9 for field `memory kind`"
        )),
        "{err}"
    );

    // Not a trace at all, an empty file, a future version, a missing file.
    let text = tmp("text.itrace");
    std::fs::write(&text, "index,time_ns\n1,2\n").unwrap();
    let err = fails(&["trace", "info", s(&text)]);
    assert!(
        err.contains("unrecognised content") && err.contains("an itermem trace"),
        "{err}"
    );
    let empty = tmp("empty.itrace");
    std::fs::write(&empty, "").unwrap();
    let err = fails(&["trace", "info", s(&empty)]);
    assert!(err.contains("empty"), "{err}");
    let future = tmp("future.itrace");
    let mut patched = bytes.clone();
    patched[8] = 9;
    std::fs::write(&future, &patched).unwrap();
    let err = fails(&["trace", "export", s(&future), "--format", "chrome"]);
    assert!(
        err.contains("corrupt header at byte 8: unsupported format version 9"),
        "{err}"
    );
    let err = fails(&["trace", "info", "/nonexistent/t.itrace"]);
    assert!(err.contains("/nonexistent/t.itrace"), "{err}");
}

#[test]
fn every_truncation_of_a_small_trace_is_handled_without_a_panic() {
    let mut events = training();
    events.truncate(14);
    let good = write_trace("small.itrace", &events);
    let bytes = std::fs::read(&good).unwrap();
    let path = tmp("trunc.itrace");
    for cut in (0..bytes.len()).step_by(3) {
        std::fs::write(&path, &bytes[..cut]).unwrap();
        let out = itermem(&["trace", "info", s(&path), "--json"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "cut {cut}: {stderr}");
        assert!(
            matches!(out.status.code(), Some(0) | Some(2)),
            "cut {cut}: {stderr}"
        );
    }
}

#[test]
fn usage_errors_exit_with_2() {
    let out = itermem(&["trace", "export", "x.itrace", "--format", "svg"]);
    assert_eq!(out.status.code(), Some(2));
    let out = itermem(&["trace", "frobnicate"]);
    assert_eq!(out.status.code(), Some(2));
    let help = itermem(&["--help"]);
    assert!(help.status.success());
    assert!(String::from_utf8_lossy(&help.stdout).contains("Exit codes"));
    let path = write_trace("usage.itrace", &training());
    let err = fails(&["trace", "info", s(&path), "--repeats", "1"]);
    assert!(err.contains("repeats"), "{err}");
}

/// Every trace command reads the other recordings too (by content): a PyTorch snapshot's
/// mallocs and frees, and its training step rather than its layer loop.
#[test]
fn trace_info_reads_a_pytorch_snapshot() {
    let Some(snapshot) = support::real_trace("pytorch-snapshots/vit_l16_b1_adam_3steps.pickle")
    else {
        return;
    };
    let json: serde_json::Value =
        serde_json::from_str(&ok(&["trace", "info", "--json", s(&snapshot)])).unwrap();
    assert_eq!(json["events"]["malloc"], 1497);
    assert_eq!(json["events"]["free"], 1493);
    assert_eq!(json["period_events"], 1495);
}

/// A process that dies while its trace is being written leaves a file that ends inside a
/// record (and has no end record): `trace info` reads every event before the cut and says
/// where the file was cut, instead of refusing the file (issue 14, item 8).
#[test]
fn a_trace_cut_inside_a_record_is_read_up_to_the_cut() {
    let path = write_trace("cut.itrace", &training());
    let whole: Value = serde_json::from_str(&ok(&["trace", "info", "--json", s(&path)])).unwrap();
    let total = whole["access_events"].as_u64().unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let cut = bytes.len() as u64 - 3; // inside the end record (a few bytes) or the last event
    std::fs::write(&path, &bytes[..cut as usize]).unwrap();

    let json: Value = serde_json::from_str(&ok(&["trace", "info", "--json", s(&path)])).unwrap();
    assert_eq!(json["complete"], false);
    let at = json["cut_at_byte"].as_u64().expect("the cut is reported");
    assert!(at < cut, "{json:#}");
    let read = json["access_events"].as_u64().unwrap();
    assert!(
        read + 1 >= total && read <= total,
        "{read} of {total} events read"
    );
    let text = ok(&["trace", "info", s(&path)]);
    assert!(
        text.contains(&format!("INCOMPLETE: cut at byte {at}")),
        "{text}"
    );
    std::fs::remove_file(path).unwrap();
}
