//! The smallest valid example of each importer's input, shared by the importers' unit tests
//! (`src/import/tests.rs`, `src/ops/tests.rs`) and the fuzz targets (`tests/fuzz.rs`), which
//! include this file by path: one copy of each.

#![allow(dead_code)] // each includer uses its own subset

use serde_pickle::{HashableValue, Value};
use std::collections::BTreeMap;

// ---------------------------------------------------------------------------------------------
// PyTorch snapshots

/// A pickle string.
pub fn s(text: &str) -> Value {
    Value::String(text.to_string())
}

/// A pickle dict with string keys.
pub fn dict(pairs: Vec<(&str, Value)>) -> Value {
    Value::Dict(
        pairs
            .into_iter()
            .map(|(k, v)| (HashableValue::String(k.to_string()), v))
            .collect::<BTreeMap<_, _>>(),
    )
}

/// One trace entry; `time_us` None leaves the key out (PyTorch ≤ 2.1).
pub fn entry(action: &str, addr: i64, size: i64, time_us: Option<i64>) -> Value {
    let mut pairs = vec![
        ("action", s(action)),
        ("addr", Value::I64(addr)),
        ("size", Value::I64(size)),
        ("stream", Value::I64(0)),
        (
            "frames",
            Value::List(vec![dict(vec![
                ("filename", s("train.py")),
                ("line", Value::I64(12)),
                ("name", s("forward")),
            ])]),
        ),
    ];
    if let Some(t) = time_us {
        pairs.push(("time_us", Value::I64(t)));
    }
    dict(pairs)
}

// ---------------------------------------------------------------------------------------------
// Generated dispatch traces

/// A generated dispatch trace of six ops: pre-existing tensors, a zero-byte allocation, views.
pub const GEN: [&str; 14] = [
    r#"{"ev":"meta","model":"toy"}"#,
    r#"{"ev":"op","i":0,"name":"profiler._record_function_enter_new.default","r":[],"w":[],"flops":0,"out_shapes":[]}"#,
    r#"{"ev":"pre","id":10,"bytes":1000,"op":1,"dtype":"float32"}"#,
    r#"{"ev":"pre","id":11,"bytes":4000,"op":1,"dtype":"float32"}"#,
    r#"{"ev":"alloc","id":12,"bytes":9000000,"op":1,"dtype":"float32"}"#,
    r#"{"ev":"op","i":1,"name":"aten.convolution.default","r":[10,11],"w":[12],"flops":157000000000,"out_shapes":[[1]]}"#,
    r#"{"ev":"op","i":2,"name":"prim.device.default","r":[12],"w":[],"flops":0,"out_shapes":[]}"#,
    r#"{"ev":"op","i":3,"name":"aten.detach.default","r":[12],"w":[12],"flops":0,"out_shapes":[[1]]}"#,
    r#"{"ev":"alloc","id":13,"bytes":0,"op":4,"dtype":"uint8"}"#,
    r#"{"ev":"op","i":4,"name":"aten.empty.memory_format","r":[],"w":[13],"flops":0,"out_shapes":[[0]]}"#,
    r#"{"ev":"free","id":10,"op":5}"#,
    r#"{"ev":"op","i":5,"name":"aten.relu_.default","r":[12],"w":[12],"flops":0,"out_shapes":[[1]]}"#,
    r#"{"ev":"free","id":13,"op":6}"#,
    r#"{"ev":"end","op":6}"#,
];

/// A snapshot of one allocation of `size` bytes, freed: `size` may exceed `i64::MAX`, which the
/// pickle writer cannot encode, so a placeholder is written and its `LONG1` patched.
pub fn snapshot_of_size(size: u64) -> Vec<u8> {
    use serde_pickle::Value;
    const PLACEHOLDER: i64 = 0x1234_5678_9abc_def0;
    let events = vec![
        entry("alloc", 0x1000, PLACEHOLDER, None),
        entry("free_requested", 0x1000, PLACEHOLDER, None),
    ];
    let snapshot = dict(vec![
        ("segments", Value::List(vec![])),
        ("device_traces", Value::List(vec![Value::List(events)])),
    ]);
    let bytes = serde_pickle::value_to_vec(&snapshot, serde_pickle::SerOptions::new()).unwrap();
    let mut placeholder = vec![0x8a, 8];
    placeholder.extend_from_slice(&PLACEHOLDER.to_le_bytes());
    let mut long = vec![0x8a, 9];
    long.extend_from_slice(&size.to_le_bytes());
    long.push(0);
    let text = bytes
        .windows(placeholder.len())
        .position(|w| w == placeholder)
        .expect("the placeholder is written as LONG1");
    let mut patched = bytes[..text].to_vec();
    let mut rest = &bytes[text..];
    while let Some(at) = rest
        .windows(placeholder.len())
        .position(|w| w == placeholder)
    {
        patched.extend_from_slice(&rest[..at]);
        patched.extend_from_slice(&long);
        rest = &rest[at + placeholder.len()..];
    }
    patched.extend_from_slice(rest);
    patched
}

// ---------------------------------------------------------------------------------------------
// Gzip bombs

/// Writes to `member` one gzip member of 64 MiB of text made of `piece(0)`, `piece(1)`, …
/// (each call appends one piece to the string it is given). Gzip bombs are a recognised head
/// followed by copies of such a member ([`write_bomb`]): compressed once, never held whole.
pub fn bomb_member(member: &std::path::Path, mut piece: impl FnMut(u64, &mut String)) {
    use std::io::Write;
    let file = std::fs::File::create(member).unwrap();
    let mut encoder = flate2::write::GzEncoder::new(file, flate2::Compression::default());
    let (mut n, mut written, mut text) = (0, 0, String::new());
    while written < 64 << 20 {
        text.clear();
        while text.len() < 1 << 20 {
            piece(n, &mut text);
            n += 1;
        }
        encoder.write_all(text.as_bytes()).unwrap();
        written += text.len();
    }
    encoder.finish().unwrap();
}

/// A piece of [`bomb_member`] that no short pattern fills but that compresses about 500:1: its
/// number, then 5,000 spaces. Only the cap on the expansion ratio stops it.
pub fn counted_piece(n: u64, text: &mut String) {
    use std::fmt::Write;
    writeln!(text, "{n}{:5000}", "").unwrap();
}

/// Writes a gzip bomb to `path`: `head` gzipped, then `copies` copies of `member`.
pub fn write_bomb(path: &std::path::Path, head: &[u8], member: &std::path::Path, copies: usize) {
    use std::io::Write;
    let mut out = std::fs::File::create(path).unwrap();
    let mut encoder = flate2::write::GzEncoder::new(&mut out, flate2::Compression::fast());
    encoder.write_all(head).unwrap();
    encoder.finish().unwrap();
    for _ in 0..copies {
        std::io::copy(&mut std::fs::File::open(member).unwrap(), &mut out).unwrap();
    }
}
