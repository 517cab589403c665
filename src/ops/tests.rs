//! The op-level importers on hand-made inputs (every DTR instruction, every generated record,
//! itermem events), their errors, the helpers and the cost model; then the real files of
//! `../shared/real-traces` (skipped with a message when the folder is absent), with the cost
//! model's calibration figures printed.

use std::io::Write;
use std::path::{Path, PathBuf};

use super::*;
use crate::event::{Event, EventKind, MemKind};

fn path() -> PathBuf {
    PathBuf::from("snippet.log")
}

fn dtr(lines: &[&str]) -> Result<Loaded, OpsError> {
    parse(
        &path(),
        lines.join("\n").into_bytes(),
        &LoadOptions::default(),
    )
}

fn gen_trace(lines: &[&str]) -> Result<Loaded, OpsError> {
    parse(
        &path(),
        lines.join("\n").into_bytes(),
        &LoadOptions::default(),
    )
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(bytes).unwrap();
    enc.finish().unwrap()
}

/// A tensor, resident when it has no birth op.
pub(crate) fn tensor(
    id: TensorId,
    bytes: u64,
    born_at: Option<usize>,
    dies_after: Option<usize>,
) -> Tensor {
    Tensor {
        id,
        bytes,
        resident: born_at.is_none(),
        dies_after,
        born_at,
    }
}

/// The message of an error, checked to name the file and the line.
fn error_at(result: Result<Loaded, OpsError>, line: u64) -> String {
    let err = result.expect_err("must be rejected");
    let msg = err.to_string();
    assert_eq!(err.location, Location::Line(line), "{msg}");
    assert!(msg.starts_with("snippet.log, line "), "{msg}");
    msg
}

// ---------------------------------------------------------------------------------------------
// DTR logs

const CONSTANTS: [&str; 5] = [
    r#"{"ANNOTATION":"START","INSTRUCTION":"ANNOTATE"}"#,
    r#"{"INSTRUCTION":"CONSTANT","NAME":"w"}"#,
    r#"{"INSTRUCTION":"MEMORY","MEMORY":"100","NAME":"w"}"#,
    r#"{"INSTRUCTION":"CONSTANT","NAME":"x"}"#,
    r#"{"INSTRUCTION":"MEMORY","MEMORY":10,"NAME":"x"}"#,
];

#[test]
fn dtr_constants_calls_and_releases() {
    let mut lines = CONSTANTS.to_vec();
    lines.extend([
        r#"{"ARGS":["x","w"],"INSTRUCTION":"CALL","NAME":"conv","RESULT":["y"],"TIME":"1000"}"#,
        r#"{"INSTRUCTION":"MEMORY","MEMORY":"50","NAME":"y"}"#,
        r#"{"ALIAS":"-1","INSTRUCTION":"ALIAS","NAME":"y"}"#,
        r#"{"INSTRUCTION":"RELEASE","NAME":"x"}"#,
        r#"{"ARGS":["y"],"INSTRUCTION":"CALL","NAME":"relu","RESULT":["z"],"TIME":250}"#,
        r#"{"INSTRUCTION":"MEMORY","MEMORY":"50","NAME":"z"}"#,
        r#"{"ALIAS":-1,"INSTRUCTION":"ALIAS","NAME":"z"}"#,
        r#"{"INSTRUCTION":"RELEASE","NAME":"y"}"#,
        r#"{"INSTRUCTION":"RELEASE","NAME":"never-defined"}"#,
    ]);
    let loaded = dtr(&lines).unwrap();
    assert_eq!(loaded.format, OpFormat::DtrLog);
    let t = &loaded.trace;
    // w: resident, never released; x: resident, last reference dropped after op 0.
    assert_eq!(
        t.tensors,
        vec![
            tensor(0, 100, None, None),
            tensor(1, 10, None, Some(0)),
            tensor(2, 50, Some(0), Some(1)),
            tensor(3, 50, Some(1), None),
        ]
    );
    assert_eq!(t.ops.len(), 2);
    assert_eq!((t.ops[0].name.as_str(), t.ops[0].time_ns), ("conv", 1000.0));
    assert!(t.ops[0].measured);
    assert_eq!((&t.ops[0].reads, &t.ops[0].writes), (&vec![1, 0], &vec![2]));
    assert_eq!((&t.ops[1].reads, &t.ops[1].writes), (&vec![2], &vec![3]));
    assert_eq!(loaded.stats.ignored_releases, 1);
    // During op 0: w, x, y; during op 1: w, y, z.
    assert_eq!(t.live_bytes(), vec![160, 200]);
    assert_eq!(t.peak(), Some(Peak { op: 1, bytes: 200 }));
    assert_eq!(t.resident_bytes(), 110);
    assert_eq!(t.accesses(2), vec![0, 1]);
    assert_eq!(
        t.access_lists(),
        vec![vec![0], vec![0], vec![0, 1], vec![1]]
    );
    assert_eq!(t.total_time_ns(), 1250.0);
}

#[test]
fn dtr_aliases_share_one_storage_and_views_are_no_ops() {
    let mut lines = CONSTANTS.to_vec();
    lines.extend([
        r#"{"ARGS":["x"],"INSTRUCTION":"CALL","NAME":"view","RESULT":["v"],"TIME":"3"}"#,
        r#"{"INSTRUCTION":"MEMORY","MEMORY":"10","NAME":"v"}"#,
        r#"{"ALIAS":"0","INSTRUCTION":"ALIAS","NAME":"v"}"#,
        // x's own name is dropped: the view keeps the storage alive.
        r#"{"INSTRUCTION":"RELEASE","NAME":"x"}"#,
        r#"{"ARGS":["v","w"],"INSTRUCTION":"CALL","NAME":"mm","RESULT":["y"],"TIME":"10"}"#,
        r#"{"INSTRUCTION":"MEMORY","MEMORY":"40","NAME":"y"}"#,
        r#"{"ALIAS":"-1","INSTRUCTION":"ALIAS","NAME":"y"}"#,
        r#"{"INSTRUCTION":"RELEASE","NAME":"v"}"#,
    ]);
    let loaded = dtr(&lines).unwrap();
    let t = &loaded.trace;
    assert_eq!(t.ops.len(), 1, "the view is not an op");
    assert_eq!(loaded.stats.dropped_ops, 1);
    assert_eq!(loaded.stats.dropped_time_ns, 3.0);
    // The read of v is a read of x's storage (10 bytes, once), which dies after op 0.
    assert_eq!(t.ops[0].reads, vec![1, 0]);
    assert_eq!(t.tensors[1], tensor(1, 10, None, Some(0)));
    assert_eq!(t.live_bytes(), vec![150]);
}

#[test]
fn dtr_copies_count_references_and_copy_from_rebinds() {
    let mut lines = CONSTANTS.to_vec();
    lines.extend([
        r#"{"DST":"x2","INSTRUCTION":"COPY","SRC":"x"}"#,
        r#"{"INSTRUCTION":"RELEASE","NAME":"x"}"#,
        r#"{"ARGS":["x2"],"INSTRUCTION":"CALL","NAME":"neg","RESULT":["y"],"TIME":"5"}"#,
        r#"{"INSTRUCTION":"MEMORY","MEMORY":"10","NAME":"y"}"#,
        r#"{"ALIAS":"-1","INSTRUCTION":"ALIAS","NAME":"y"}"#,
        // x2 now names y's storage: x's count drops to 0 here (after op 0).
        r#"{"DST":"x2","INSTRUCTION":"COPY_FROM","SRC":"y"}"#,
        r#"{"ARGS":["x2"],"INSTRUCTION":"CALL","NAME":"neg","RESULT":["z"],"TIME":"5"}"#,
        r#"{"INSTRUCTION":"MEMORY","MEMORY":"10","NAME":"z"}"#,
        r#"{"ALIAS":"-1","INSTRUCTION":"ALIAS","NAME":"z"}"#,
        r#"{"INSTRUCTION":"RELEASE","NAME":"y"}"#,
        r#"{"INSTRUCTION":"RELEASE","NAME":"x2"}"#,
    ]);
    let t = dtr(&lines).unwrap().trace;
    assert_eq!(t.tensors[1], tensor(1, 10, None, Some(0)));
    assert_eq!(t.tensors[2], tensor(2, 10, Some(0), Some(1)));
    assert_eq!(t.ops[1].reads, vec![2]);
}

#[test]
fn dtr_mutate_writes_in_place_and_keeps_the_count() {
    let mut lines = CONSTANTS.to_vec();
    lines.extend([
        r#"{"ARGS":["x","w"],"INSTRUCTION":"MUTATE","MUTATE":[0],"NAME":"add_","TIME":"7"}"#,
        r#"{"ARGS":["x"],"INSTRUCTION":"MUTATE","MUTATE":["0"],"NAME":"relu_","TIME":"7"}"#,
        r#"{"INSTRUCTION":"RELEASE","NAME":"x"}"#,
        r#"{"INSTRUCTION":"RELEASE","NAME":"w"}"#,
    ]);
    let t = dtr(&lines).unwrap().trace;
    assert_eq!(t.tensors.len(), 2, "in place: no new storage");
    assert_eq!((&t.ops[0].reads, &t.ops[0].writes), (&vec![1, 0], &vec![1]));
    assert_eq!((&t.ops[1].reads, &t.ops[1].writes), (&vec![1], &vec![1]));
    // One RELEASE ends x: the mutation moved the reference, it did not add one.
    assert_eq!(t.tensors[1].dies_after, Some(1));
    assert_eq!(t.tensors[0].dies_after, Some(1));
}

#[test]
fn dtr_tuple_results_mixed_aliases_any_order_and_annotations() {
    let lines = [
        // Before START: skipped, like simrd.
        r#"{"INSTRUCTION":"CONSTANT","NAME":"junk"}"#,
        r#"{"INSTRUCTION":"MEMORY","MEMORY":"1","NAME":"junk"}"#,
        r#"{"ANNOTATION":"START","INSTRUCTION":"ANNOTATE"}"#,
        r#"{"INSTRUCTION":"CONSTANT","NAME":"a"}"#,
        r#"{"INSTRUCTION":"MEMORY","MEMORY":"8","NAME":"a"}"#,
        // A constant released before any op is never live during one.
        r#"{"INSTRUCTION":"CONSTANT","NAME":"gone"}"#,
        r#"{"INSTRUCTION":"MEMORY","MEMORY":"1000","NAME":"gone"}"#,
        r#"{"INSTRUCTION":"RELEASE","NAME":"gone"}"#,
        r#"{"ARGS":["a"],"INSTRUCTION":"CALL","NAME":"split3","RESULT":["p","q","r"],"TIME":"9"}"#,
        r#"{"ALIAS":"-1","INSTRUCTION":"ALIAS","NAME":"p"}"#,
        r#"{"INSTRUCTION":"MEMORY","MEMORY":"4","NAME":"p"}"#,
        r#"{"INSTRUCTION":"MEMORY","MEMORY":"0","NAME":"q"}"#,
        r#"{"ALIAS":"0","INSTRUCTION":"ALIAS","NAME":"q"}"#,
        r#"{"INSTRUCTION":"MEMORY","MEMORY":"6","NAME":"r"}"#,
        r#"{"ALIAS":"-1","INSTRUCTION":"ALIAS","NAME":"r"}"#,
        r#"{"ANNOTATION":"BACKWARD","INSTRUCTION":"ANNOTATE"}"#,
        r#"{"ARGS":["q","p"],"INSTRUCTION":"CALL","NAME":"sum_backward","RESULT":[],"TIME":"2"}"#,
    ];
    let loaded = dtr(&lines).unwrap();
    let t = &loaded.trace;
    assert_eq!(
        t.tensors,
        vec![
            tensor(0, 8, None, None),
            tensor(1, 4, Some(0), None),
            tensor(2, 6, Some(0), None),
        ]
    );
    assert_eq!(t.ops[0].writes, vec![1, 2]);
    // q is a view of a: reading q reads a's storage.
    assert_eq!((&t.ops[1].reads, &t.ops[1].writes), (&vec![0, 1], &vec![]));
    assert_eq!(loaded.stats.backward_starts_at, Some(1));
    assert_eq!(loaded.stats.dropped_tensors, 1);
}

#[test]
fn dtr_malformed_input_names_file_and_line() {
    let start = CONSTANTS[0];
    let cases: Vec<(Vec<&str>, u64, &str)> = vec![
        (vec![start, "{not json"], 2, "not a JSON object"),
        (vec![start, r#"{"NAME":"x"}"#], 2, "field `INSTRUCTION`"),
        (
            vec![start, r#"{"INSTRUCTION":"FROB"}"#],
            2,
            "unknown record kind",
        ),
        (
            vec![
                start,
                r#"{"INSTRUCTION":"CONSTANT","NAME":"x"}"#,
                r#"{"INSTRUCTION":"RELEASE","NAME":"x"}"#,
            ],
            3,
            "MEMORY of constant x",
        ),
        (
            vec![start, r#"{"INSTRUCTION":"MEMORY","MEMORY":"1","NAME":"x"}"#],
            2,
            "a CONSTANT or CALL before it",
        ),
        (
            vec![
                start,
                r#"{"ARGS":["nope"],"INSTRUCTION":"CALL","NAME":"f","RESULT":[],"TIME":"1"}"#,
            ],
            2,
            "never defined",
        ),
        (
            vec![
                start,
                r#"{"INSTRUCTION":"CONSTANT","NAME":"x"}"#,
                r#"{"INSTRUCTION":"MEMORY","MEMORY":"1","NAME":"x"}"#,
                r#"{"INSTRUCTION":"RELEASE","NAME":"x"}"#,
                r#"{"ARGS":["x"],"INSTRUCTION":"MUTATE","MUTATE":[0],"NAME":"f_","TIME":"1"}"#,
            ],
            5,
            "used after the last reference",
        ),
        (
            vec![
                start,
                r#"{"INSTRUCTION":"CONSTANT","NAME":"x"}"#,
                r#"{"INSTRUCTION":"MEMORY","MEMORY":"-5","NAME":"x"}"#,
            ],
            3,
            "field `MEMORY`",
        ),
        (
            vec![
                start,
                r#"{"INSTRUCTION":"CONSTANT","NAME":"x"}"#,
                r#"{"INSTRUCTION":"MEMORY","MEMORY":"1","NAME":"x"}"#,
                r#"{"ARGS":["x"],"INSTRUCTION":"CALL","NAME":"v","RESULT":["y"],"TIME":"1"}"#,
                r#"{"INSTRUCTION":"MEMORY","MEMORY":"1","NAME":"y"}"#,
                r#"{"ALIAS":"3","INSTRUCTION":"ALIAS","NAME":"y"}"#,
            ],
            6,
            "field `ALIAS`",
        ),
        (
            vec![
                start,
                r#"{"INSTRUCTION":"CONSTANT","NAME":"x"}"#,
                r#"{"INSTRUCTION":"MEMORY","MEMORY":"1","NAME":"x"}"#,
                r#"{"ARGS":["x"],"INSTRUCTION":"CALL","NAME":"f","RESULT":["y"],"TIME":"soon"}"#,
            ],
            4,
            "field `TIME`",
        ),
        (
            vec![
                start,
                r#"{"INSTRUCTION":"CONSTANT","NAME":"x"}"#,
                r#"{"INSTRUCTION":"MEMORY","MEMORY":"1","NAME":"x"}"#,
                r#"{"ARGS":["x"],"INSTRUCTION":"CALL","NAME":"f","RESULT":["y"],"TIME":"1"}"#,
                r#"{"INSTRUCTION":"MEMORY","MEMORY":"1","NAME":"y"}"#,
            ],
            4,
            "end of the file",
        ),
        (
            vec![
                start,
                r#"{"INSTRUCTION":"CONSTANT","NAME":"x"}"#,
                r#"{"INSTRUCTION":"MEMORY","MEMORY":"1","NAME":"x"}"#,
                r#"{"INSTRUCTION":"CONSTANT","NAME":"x"}"#,
                r#"{"INSTRUCTION":"MEMORY","MEMORY":"1","NAME":"x"}"#,
            ],
            5,
            "defined twice",
        ),
    ];
    for (lines, line, needle) in cases {
        let msg = error_at(dtr(&lines), line);
        assert!(msg.contains(needle), "{msg:?} should contain {needle:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// Generated dispatch traces

#[test]
fn generated_trace_drops_dataless_ops_and_moves_lifetimes() {
    let loaded = gen_trace(&GEN).unwrap();
    assert_eq!(loaded.format, OpFormat::Generated);
    let t = &loaded.trace;
    let names: Vec<&str> = t.ops.iter().map(|o| o.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "aten.convolution.default",
            "aten.empty.memory_format",
            "aten.relu_.default"
        ]
    );
    assert_eq!(loaded.stats.dropped_ops, 3);
    assert_eq!(
        t.tensors,
        vec![
            // Freed before file op 5 (kept op 2): dies after kept op 1.
            tensor(0, 1000, None, Some(1)),
            tensor(1, 4000, None, None),
            tensor(2, 9_000_000, Some(0), None),
            tensor(3, 0, Some(1), Some(2)),
        ]
    );
    assert_eq!((&t.ops[2].reads, &t.ops[2].writes), (&vec![2], &vec![2]));
    let v100 = CostModel::v100();
    // Convolution: 157 GFLOP at 15.7 TFLOP/s = 10 ms, compute-bound.
    assert!(
        (t.ops[0].time_ns - (10e6 + 5000.0)).abs() < 1.0,
        "{}",
        t.ops[0].time_ns
    );
    assert!(!t.ops[0].measured);
    assert_eq!(t.ops[0].flops, 157e9);
    // empty: no kernel.
    assert_eq!(t.ops[1].time_ns, 0.0);
    // relu_: 9 MB read and written at 900 GB/s = 20 µs.
    assert_eq!(t.ops[2].time_ns, v100.op_time_ns(0.0, 18_000_000));
    assert!((t.ops[2].time_ns - 25_000.0).abs() < 1e-6);
}

#[test]
fn generated_trace_errors_name_the_line() {
    let mut lines = GEN.to_vec();
    lines[5] =
        r#"{"ev":"op","i":7,"name":"aten.convolution.default","r":[10,11],"w":[12],"flops":1}"#;
    assert!(error_at(gen_trace(&lines), 6).contains("field `i`"));
    let mut lines = GEN.to_vec();
    lines[5] = r#"{"ev":"op","i":1,"name":"aten.convolution.default","r":[99],"w":[12],"flops":1}"#;
    assert!(error_at(gen_trace(&lines), 6).contains("id 99 was never defined"));
    let mut lines = GEN.to_vec();
    lines[3] = r#"{"ev":"pre","id":10,"bytes":5}"#;
    assert!(error_at(gen_trace(&lines), 4).contains("defined twice"));
    let mut lines = GEN.to_vec();
    lines[6] = r#"{"ev":"teleport","id":1}"#;
    assert!(error_at(gen_trace(&lines), 7).contains("unknown record kind \"teleport\""));
    let mut lines = GEN.to_vec();
    lines[2] = r#"{"ev":"pre","id":10}"#;
    assert!(error_at(gen_trace(&lines), 3).contains("bytes"));
    let mut lines = GEN.to_vec();
    lines[13] = r#"{"ev":"end","op":5}"#;
    assert!(error_at(gen_trace(&lines), 14).contains("field `op`"));
    // A tensor used after its free breaks the lifetime convention.
    let mut lines = GEN.to_vec();
    lines[10] = r#"{"ev":"free","id":12,"op":5}"#;
    let err = gen_trace(&lines).unwrap_err();
    assert!(matches!(err.problem, Problem::Invariant(_)), "{err}");
}

#[test]
fn gzip_is_transparent_and_bad_files_are_errors() {
    let plain = GEN.join("\n").into_bytes();
    let a = parse(&path(), plain.clone(), &LoadOptions::default()).unwrap();
    let b = parse(&path(), gzip(&plain), &LoadOptions::default()).unwrap();
    assert_eq!(a, b);
    // A damaged gzip stream, then line numbers of the decompressed text.
    let mut damaged = gzip(&plain);
    damaged.truncate(damaged.len() / 2);
    let err = parse(&path(), damaged, &LoadOptions::default()).unwrap_err();
    assert!(matches!(err.problem, Problem::Gzip(_)), "{err}");
    let err = parse(
        &path(),
        gzip(b"{\"ev\":\"meta\"}\n{oops"),
        &LoadOptions::default(),
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("line 2 (of the decompressed text)"),
        "{err}"
    );
    for content in [&b""[..], b"  \n\n", b"id,lower,upper,size\n", b"{\"x\":1}"] {
        let err = parse(&path(), content.to_vec(), &LoadOptions::default()).unwrap_err();
        assert!(
            matches!(err.problem, Problem::Empty | Problem::UnknownFormat { .. }),
            "{err}"
        );
    }
    let err = load("/nonexistent/itermem/ops.log").unwrap_err();
    assert!(matches!(err.problem, Problem::Io(_)));
    assert!(
        err.to_string()
            .starts_with("/nonexistent/itermem/ops.log: ")
    );
}

// ---------------------------------------------------------------------------------------------
// itermem traces

fn ev(kind: EventKind) -> Event {
    Event::new(0, kind)
}

fn malloc(id: u64, size: u64) -> Event {
    ev(EventKind::Malloc {
        id,
        addr: 0x1000 * id,
        size,
        kind: MemKind::Device,
        stream: 0,
    })
}

fn launch(kernel: u32, touched: &[u64]) -> Event {
    ev(EventKind::Launch {
        kernel,
        stream: 0,
        layout_known: true,
        touched: touched.iter().copied().collect(),
    })
}

/// A weight (id 1), then `iters` iterations of 40 layers: malloc A, launch fwd(W, A), malloc B,
/// launch bwd(A, B), free A, free B. Ids are fresh in every iteration.
fn training(iters: u64) -> Vec<Event> {
    let mut out = vec![
        ev(EventKind::KernelName {
            kernel: 0,
            name: "fwd".into(),
        }),
        ev(EventKind::KernelName {
            kernel: 1,
            name: "bwd".into(),
        }),
        malloc(1, 4096),
    ];
    let mut id = 2;
    for _ in 0..iters {
        // A step: an input, layers with distinct sizes (so the step is the only period), and
        // the input's free.
        out.push(malloc(id, 64));
        let input = id;
        id += 1;
        for layer in 0..40u64 {
            let (a, b) = (id, id + 1);
            id += 2;
            out.push(malloc(a, 1024 + 512 * layer));
            out.push(launch(0, &[1, a, input]));
            out.push(malloc(b, 2048));
            out.push(launch(1, &[a, b]));
            out.push(ev(EventKind::Free { id: a, stream: 0 }));
            out.push(ev(EventKind::Free { id: b, stream: 0 }));
        }
        out.push(ev(EventKind::Free {
            id: input,
            stream: 0,
        }));
    }
    out
}

/// Issue 33: a graph launch is enqueued at once, so what any of its nodes uses is used by all
/// of them (and stays resident for the whole launch); the op after it keeps its own accesses.
#[test]
fn the_nodes_of_a_graph_launch_use_everything_the_launch_uses() {
    let graph = ev(EventKind::GraphLaunch {
        exec: 0x10,
        stream: 0,
        nodes: 2,
    });
    let events = |marker: Option<Event>| {
        let mut out = vec![malloc(1, 64), malloc(2, 64)];
        out.extend(marker);
        out.extend([launch(0, &[1]), launch(1, &[2]), launch(2, &[2])]);
        out
    };
    let options = LoadOptions {
        window: Some((0, 5)),
        ..Default::default()
    };
    let reads = |events: &[Event]| -> Vec<Vec<TensorId>> {
        let loaded = from_events(Path::new("graph.trace"), events, &options).unwrap();
        (loaded.trace.ops.iter())
            .map(|op| {
                let mut reads = op.reads.clone();
                reads.sort_unstable();
                reads
            })
            .collect()
    };
    assert_eq!(reads(&events(None)), [vec![0], vec![1], vec![1]]);
    assert_eq!(
        reads(&events(Some(graph))),
        [vec![0, 1], vec![0, 1], vec![1]]
    );
}

#[test]
fn itermem_events_become_one_iteration_of_launches() {
    let loaded = from_events(
        Path::new("run.trace"),
        &training(6),
        &LoadOptions::default(),
    )
    .unwrap();
    assert_eq!(loaded.format, OpFormat::ItermemTrace);
    assert!(loaded.stats.window_detected, "{:?}", loaded.stats);
    let (_, length) = loaded.stats.window.unwrap();
    assert_eq!(length, 2 + 40 * 6);
    let t = &loaded.trace;
    assert_eq!(t.ops.len(), 80);
    // The weight is resident and alive throughout.
    let weight = t.tensors.iter().find(|x| x.bytes == 4096).unwrap();
    assert_eq!((weight.resident, weight.dies_after), (true, None));
    assert_eq!(t.accesses(weight.id).len(), 40);
    // Every launch reads and writes what it touches; B is born at the bwd launch after its
    // malloc and dies after it.
    for op in &t.ops {
        assert_eq!(op.reads, op.writes);
        assert!(op.name == "fwd" || op.name == "bwd");
        assert!(op.time_ns >= CostModel::v100().launch_latency_ns());
    }
    let b = t.tensors.iter().find(|x| x.bytes == 2048).unwrap();
    assert_eq!(b.dies_after, b.born_at);
    assert_eq!(t.ops[b.born_at.unwrap()].name, "bwd");
    // Peak: weight + input + the biggest A + B.
    assert_eq!(t.peak().unwrap().bytes, 4096 + 64 + 1024 + 512 * 39 + 2048);
}

use crate::test_support::TempPath;
use crate::test_support::real_traces;
use crate::test_support::samples::GEN;

#[test]
fn gzip_is_limited_and_recognised_from_its_first_bytes() {
    // A generated trace padded with 2 MiB of blank lines: over a 1 MiB limit, under the default.
    let mut text = GEN.join("\n").into_bytes();
    text.extend(std::iter::repeat_n(b'\n', 2 << 20));
    let packed = TempPath::with("padded.jsonl.gz", &gzip(&text));
    let small = LoadOptions {
        max_decompressed: 1 << 20,
        ..LoadOptions::default()
    };
    let err = load_with(&packed.0, &small).unwrap_err();
    assert!(
        matches!(
            err.problem,
            Problem::DecompressedTooLarge { limit: 1048576 }
        ),
        "{err}"
    );
    let message = err.to_string();
    assert!(
        message.starts_with(&format!(
            "{}: the gzip data decompresses to more than 1048576 bytes",
            packed.0.display()
        )),
        "{message}"
    );
    assert!(message.contains("`--max-decompressed 4M`"), "{message}");
    assert!(parse(&path(), gzip(&text), &small).is_err());
    let read = load_with(&packed.0, &LoadOptions::default()).unwrap().trace;
    let expected = gen_trace(&GEN).unwrap().trace;
    assert_eq!(
        (&read.tensors, &read.ops),
        (&expected.tensors, &expected.ops)
    );
    // Plain, it is read whatever the limit.
    assert_eq!(parse(&path(), text, &small).unwrap().trace, expected);

    // Content of no format: refused from its first 64 KiB, whatever follows (were it
    // decompressed, the 2 MiB of zeros would hit the limit first).
    let mut noise = b"ANNOTATE START\n".to_vec();
    noise.resize(2 << 20, 0);
    let err = parse(&path(), gzip(&noise), &small).unwrap_err();
    assert!(
        matches!(&err.problem, Problem::UnknownFormat { first_bytes } if first_bytes[..] == noise[..16]),
        "{err}"
    );
    assert!(err.gzip);
    assert!(
        err.to_string()
            .contains("unrecognised content (starts with 41 4e 4e"),
        "{err}"
    );

    // A first line longer than the 64 KiB head is decided on the whole content.
    let long = format!(r#"{{"ev":"meta","model":"{}"}}"#, "m".repeat(100 << 10));
    let mut lines = GEN.to_vec();
    lines[0] = &long;
    let loaded = parse(&path(), gzip(lines.join("\n").as_bytes()), &small).unwrap();
    assert_eq!(loaded.trace, expected);
    // ... and one that is no JSON object is not.
    let mut junk = vec![b'{'; 100 << 10];
    junk.push(b'\n');
    let err = parse(&path(), gzip(&junk), &small).unwrap_err();
    assert!(
        matches!(err.problem, Problem::UnknownFormat { .. }),
        "{err}"
    );
}

#[test]
fn itermem_trace_files_load_plain_and_gzipped() {
    let file = TempPath::new("run.trace");
    crate::test_support::write_trace(&file.0, training(4));
    let plain = load_with(&file.0, &LoadOptions::default()).unwrap();
    assert_eq!(plain.trace.ops.len(), 80);
    let zipped = TempPath::new("run.trace.gz");
    std::fs::write(&zipped.0, gzip(&std::fs::read(&file.0).unwrap())).unwrap();
    let unzipped = load(&zipped.0).unwrap();
    assert_eq!(unzipped.ops, plain.trace.ops);
    // A trace its process did not close (cut inside the end record) gives the same iteration;
    // a corrupt one (a record length far beyond any record) is a trace error, not a panic.
    let bytes = std::fs::read(&file.0).unwrap();
    let cut = parse(
        &file.0,
        bytes[..bytes.len() - 3].to_vec(),
        &LoadOptions::default(),
    );
    assert_eq!(cut.unwrap().trace.ops, plain.trace.ops);
    let mut corrupt = bytes[..bytes.len() - 3].to_vec();
    corrupt.extend_from_slice(&[0x03, 0xff, 0xff, 0xff, 0x7f]);
    let err = parse(&file.0, corrupt, &LoadOptions::default());
    assert!(matches!(err.unwrap_err().problem, Problem::Trace(_)));
}

// ---------------------------------------------------------------------------------------------
// Helpers and the cost model

#[test]
fn validate_names_the_broken_rule() {
    let good = OpTrace {
        source: "hand".into(),
        tensors: vec![tensor(0, 8, None, Some(0)), tensor(1, 8, Some(0), None)],
        ops: vec![Op {
            name: "f".into(),
            reads: vec![0],
            writes: vec![1],
            time_ns: 1.0,
            measured: true,
            flops: 0.0,
        }],
    };
    good.validate().unwrap();
    let broken = |f: &dyn Fn(&mut OpTrace)| {
        let mut t = good.clone();
        f(&mut t);
        t.validate().unwrap_err().to_string()
    };
    assert!(broken(&|t| t.tensors[1].id = 5).contains("stored at index 1"));
    assert!(broken(&|t| t.tensors[0].resident = false).contains("resident"));
    assert!(broken(&|t| t.tensors[1].born_at = Some(3)).contains("born at op 3"));
    assert!(broken(&|t| t.ops[0].reads.push(0)).contains("listed twice in reads"));
    assert!(broken(&|t| t.ops[0].writes.push(9)).contains("does not exist"));
    assert!(broken(&|t| t.ops[0].time_ns = f64::NAN).contains("duration"));
    let mut two = good.clone();
    two.ops.push(two.ops[0].clone());
    assert!(
        two.validate()
            .unwrap_err()
            .to_string()
            .contains("outside its lifetime")
    );
    // An in-place op has its tensor in both lists.
    let mut in_place = good.clone();
    in_place.ops[0].writes = vec![1, 0];
    in_place.validate().unwrap();
    assert_eq!(OpTrace::default().peak(), None);
}

#[test]
fn cost_model_is_a_roofline_with_checked_rates() {
    let v100 = CostModel::v100();
    assert_eq!(v100.op_time_ns(0.0, 0), 5000.0);
    // 900 MB at 900 GB/s = 1 ms; 15.7 GFLOP at 15.7 TFLOP/s = 1 ms: the larger wins.
    assert!((v100.op_time_ns(0.0, 900_000_000) - 1_005_000.0).abs() < 1e-6);
    assert!((v100.op_time_ns(31.4e9, 900_000_000) - 2_005_000.0).abs() < 1e-3);
    assert_eq!(v100.op_time_ns(-1.0, 0), 5000.0);
    assert!((v100.host_copy_time_ns(12_000_000) - 1_005_000.0).abs() < 1e-6);
    for name in CostModel::PRESETS {
        assert_eq!(CostModel::preset(name).unwrap().name(), name);
    }
    assert_eq!(CostModel::preset("H100"), Some(CostModel::h100()));
    assert_eq!(CostModel::preset("tpu"), None);
    assert_eq!(CostModel::default(), v100);
    let custom = CostModel::new("tf32", 495e12, 3.35e12, 4000.0, 50e9).unwrap();
    assert!(custom.op_time_ns(1e12, 0) < CostModel::h100().op_time_ns(1e12, 0));
    for (flops, bw, lat) in [(0.0, 1.0, 1.0), (1.0, f64::INFINITY, 1.0), (1.0, 1.0, -1.0)] {
        let err = CostModel::new("bad", flops, bw, lat, 1.0).unwrap_err();
        assert!(err.to_string().contains("expected"), "{err}");
    }
}

// ---------------------------------------------------------------------------------------------
// The real traces

fn files(dir: &Path, prefix: &str, suffix: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
                        n.starts_with(prefix) && n.ends_with(suffix) && !n.starts_with("manifest")
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 20) as f64
}

#[test]
fn real_dtr_logs_load_and_calibrate_the_cost_model() {
    let Some(dir) = real_traces() else { return };
    let logs = files(&dir.join("dtr-op-logs"), "", ".log.gz");
    assert_eq!(logs.len(), 5, "{logs:?}");
    // The logs were recorded on a Titan V: compare with that preset (FLOPs unknown: the model
    // sees bytes only).
    let titan = CostModel::titan_v();
    println!(
        "{:<16} {:>6} {:>8} {:>10} {:>9} {:>12} {:>12} {:>7} {:>6} {:>6} {:>7} {:>9}",
        "model",
        "ops",
        "tensors",
        "peak MiB",
        "@op",
        "measured ms",
        "modelled ms",
        "median",
        "r",
        "r log",
        "views",
        "view ms"
    );
    for log in &logs {
        let loaded = load_with(log, &LoadOptions::default()).unwrap();
        let t = &loaded.trace;
        assert!(t.ops.iter().all(|o| o.measured));
        let peak = t.peak().unwrap();
        let cmp = calibrate::compare(t, &titan).unwrap();
        let model = log.file_name().unwrap().to_string_lossy();
        let model = model.split('-').next().unwrap_or("?");
        println!(
            "{:<16} {:>6} {:>8} {:>10.1} {:>9} {:>12.1} {:>12.1} {:>7.3} {:>6.2} {:>6.2} {:>7} {:>9.2}",
            model,
            t.ops.len(),
            t.tensors.len(),
            mib(peak.bytes),
            peak.op,
            cmp.measured_total_ns / 1e6,
            cmp.modelled_total_ns / 1e6,
            cmp.median_ratio,
            cmp.correlation,
            cmp.log_correlation,
            loaded.stats.dropped_ops,
            loaded.stats.dropped_time_ns / 1e6,
        );
        assert!(t.ops.len() > 100 && peak.bytes > 0);
        assert!(cmp.median_ratio.is_finite() && cmp.median_ratio > 0.0);
        // The memory-bound model must at least rank the ops the right way round.
        assert!(cmp.log_correlation > 0.2, "{model}: {cmp:?}");
    }
}

#[test]
fn real_generated_traces_load_and_match_the_v100_profile() {
    let Some(dir) = real_traces() else { return };
    let gens = files(&dir.join("generated-cpu"), "gen_", ".jsonl.gz");
    assert_eq!(gens.len(), 2, "{gens:?}");
    println!(
        "{:<22} {:>6} {:>8} {:>10} {:>6} {:>12} {:>10} {:>9} {:>9}",
        "model", "ops", "tensors", "peak MiB", "@op", "resident MiB", "GFLOP", "V100 ms", "H100 ms"
    );
    let mut resnet_v100_ns = None;
    for path in &gens {
        let v100 = load_with(path, &LoadOptions::default()).unwrap();
        let h100 = load_with(
            path,
            &LoadOptions {
                cost: CostModel::h100(),
                ..Default::default()
            },
        )
        .unwrap();
        let t = &v100.trace;
        let peak = t.peak().unwrap();
        let name = path
            .file_name()
            .unwrap()
            .to_string_lossy()
            .replace(".jsonl.gz", "");
        println!(
            "{:<22} {:>6} {:>8} {:>10.1} {:>6} {:>12.1} {:>10.1} {:>9.1} {:>9.1}",
            name,
            t.ops.len(),
            t.tensors.len(),
            mib(peak.bytes),
            peak.op,
            mib(t.resident_bytes()),
            t.ops.iter().map(|o| o.flops).sum::<f64>() / 1e9,
            t.total_time_ns() / 1e6,
            h100.trace.total_time_ns() / 1e6,
        );
        assert!(t.ops.iter().all(|o| !o.measured));
        assert!(h100.trace.total_time_ns() < t.total_time_ns());
        if name.contains("resnet50_b32") {
            resnet_v100_ns = Some(t.total_time_ns());
        }
    }
    // The natural pair: ResNet-50 b32 on a V100, profiled (kernel time per step).
    let profile = dir.join("kineto/kineto_tbplugin_resnet50_b32_v100_workers0.pt.trace.json.gz");
    let steps = calibrate::profiler_kernel_steps(&profile).unwrap();
    let measured = steps.median_step_ns();
    let modelled = resnet_v100_ns.expect("the ResNet-50 b32 generated trace");
    for s in &steps.steps {
        println!(
            "  {}: {} kernels, {:.1} ms",
            s.name,
            s.kernels,
            s.kernel_time_ns / 1e6
        );
    }
    println!(
        "ResNet-50 b32 V100: measured kernel time per step (median of {}) {:.1} ms, \
         modelled {:.1} ms, modelled/measured {:.2}",
        steps.steps.len(),
        measured / 1e6,
        modelled / 1e6,
        modelled / measured
    );
    assert!(steps.steps.len() >= 5 && steps.kernels > 5000);
    // The other V100 profile (a DLRM-like model under DDP): no generated counterpart, printed
    // for reference.
    let hta = dir.join("kineto/hta_v100_ddp_rank1_profile_memory.json.gz");
    let hta = calibrate::profiler_kernel_steps(&hta).unwrap();
    println!(
        "HTA V100 DDP rank 1: {} steps, {} kernels, median kernel time per step {:.1} ms",
        hta.steps.len(),
        hta.kernels,
        hta.median_step_ns() / 1e6
    );
    let ratio = modelled / measured;
    assert!((1.0 / 3.0..3.0).contains(&ratio), "ratio {ratio}");
}

/// The generated Tree-LSTM iteration is what its module promises: thousands of tensors, none
/// of 1 MiB, every convention kept, the same for the same seed and another for another seed.
#[test]
fn tree_lstm_iteration_is_many_small_tensors() {
    let shape = tree::TreeLstm::default();
    let t = tree::tree_lstm_iteration(1, &shape);
    t.validate().unwrap();
    assert!(t.tensors.len() > 5_000 && t.ops.len() > 5_000);
    assert!(t.tensors.iter().all(|x| x.bytes > 0 && x.bytes < 1 << 20));
    // Resident first, then in order of birth (the order a DTR log defines them in).
    let births: Vec<usize> = t.tensors.iter().filter_map(|x| x.born_at).collect();
    assert!(births.is_sorted());
    assert!(t.tensors.iter().take_while(|x| x.resident).count() > 0);
    assert!(
        t.tensors
            .iter()
            .skip_while(|x| x.resident)
            .all(|x| !x.resident)
    );
    assert_eq!(tree::tree_lstm_iteration(1, &shape), t);
    assert_ne!(tree::tree_lstm_iteration(2, &shape), t);
}

/// `to_dtr_log` writes what the DTR reader reads back: the same tensors and ops.
#[test]
fn dtr_log_written_reads_back_the_same() {
    let shape = tree::TreeLstm {
        leaves: 5,
        ..tree::TreeLstm::default()
    };
    let t = tree::tree_lstm_iteration(3, &shape);
    let log = to_dtr_log(&t).unwrap();
    let loaded = parse(&path(), log.into_bytes(), &LoadOptions::default()).unwrap();
    assert_eq!(loaded.format, OpFormat::DtrLog);
    assert_eq!(loaded.trace.tensors, t.tensors);
    assert_eq!(loaded.trace.ops, t.ops);
    // An op that creates a tensor and writes another in place has no DTR instruction.
    let mixed = OpTrace {
        source: String::new(),
        tensors: vec![tensor(0, 8, None, None), tensor(1, 8, Some(0), None)],
        ops: vec![Op {
            name: "f".into(),
            reads: vec![0],
            writes: vec![0, 1],
            time_ns: 1.0,
            measured: true,
            flops: 0.0,
        }],
    };
    assert_eq!(to_dtr_log(&mixed).unwrap_err().op, Some(0));
}
