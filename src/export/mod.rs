//! Trace exports for other tools: one CSV row per event, Chrome/Perfetto trace JSON, the
//! `id,lower,upper,size` CSV of DSA solvers (MiniMalloc, idealloc) for one iteration, and
//! PyTorch's memory snapshot pickle (`torch_snapshot`).
//!
//! Every writer streams: events go out as they come, so a multi-gigabyte trace is exported in
//! constant memory (Chrome needs the live allocations, DSA the buffers of one iteration). Event
//! indices are those of [`crate::analysis::Numbering`]: access events only; kernel names, pinned
//! host allocations and their frees are unindexed.

mod torch_snapshot;

pub use torch_snapshot::write_torch_snapshot;

use std::collections::HashMap;
use std::io::{self, Write};

use serde_json::json;

use crate::analysis::Numbering;
use crate::event::{AllocId, CopyKind, Event, EventKind, KernelId, MemKind, StreamHandle};
use crate::plan::Buffer;
use crate::trace::TraceHeader;

pub fn mem_kind_name(kind: MemKind) -> &'static str {
    match kind {
        MemKind::Device => "device",
        MemKind::Managed => "managed",
        MemKind::Async => "async",
        MemKind::PinnedHost => "pinned_host",
    }
}

pub fn copy_kind_name(kind: CopyKind) -> &'static str {
    match kind {
        CopyKind::HostToHost => "host_to_host",
        CopyKind::HostToDevice => "host_to_device",
        CopyKind::DeviceToHost => "device_to_host",
        CopyKind::DeviceToDevice => "device_to_device",
        CopyKind::Default => "default",
    }
}

/// The columns of [`write_csv`].
pub const CSV_HEADER: &str = "index,time_ns,event,id,addr,size,mem_kind,stream,dst,src,bytes,\
                              copy_kind,async,kernel,kernel_name,layout_known,touched";

/// Quotes a CSV field when it needs it (RFC 4180: commas, quotes, line breaks).
fn csv_field(value: &str) -> std::borrow::Cow<'_, str> {
    if value.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", value.replace('"', "\"\"")).into()
    } else {
        value.into()
    }
}

fn opt(value: Option<u64>) -> String {
    value.map(|v| v.to_string()).unwrap_or_default()
}

/// One row per event under [`CSV_HEADER`]. Cells that do not apply to an event are empty;
/// `index` is empty for `kernel_name` rows and pinned host mallocs and frees; `addr` is hexadecimal; `touched` lists allocation
/// ids separated by `;`; launches repeat their kernel's name. A `graph_launch` row (no index)
/// gives the instantiated graph's handle as `id` and its recorded node count as `size`.
pub fn write_csv(events: impl IntoIterator<Item = Event>, mut out: impl Write) -> io::Result<()> {
    writeln!(out, "{CSV_HEADER}")?;
    let mut names: HashMap<KernelId, String> = HashMap::new();
    let mut numbering = Numbering::default();
    for event in events {
        let t = event.time_ns;
        let index = opt(numbering.number(&event.kind));
        match event.kind {
            EventKind::KernelName { kernel, name } => {
                writeln!(
                    out,
                    "{index},{t},kernel_name,,,,,,,,,,,{kernel},{},,",
                    csv_field(&name)
                )?;
                names.insert(kernel, name);
            }
            EventKind::GraphLaunch {
                exec,
                stream,
                nodes,
            } => writeln!(
                out,
                "{index},{t},graph_launch,{exec},,{nodes},,{stream},,,,,,,,,"
            )?,
            EventKind::Malloc {
                id,
                addr,
                size,
                kind,
                stream,
            } => writeln!(
                out,
                "{index},{t},malloc,{id},{addr:#x},{size},{},{stream},,,,,,,,,",
                mem_kind_name(kind)
            )?,
            EventKind::Free { id, stream } => {
                writeln!(out, "{index},{t},free,{id},,,,{stream},,,,,,,,,")?
            }
            EventKind::Memcpy {
                dst,
                src,
                bytes,
                kind,
                stream,
                asynchronous,
            } => writeln!(
                out,
                "{index},{t},memcpy,,,,,{stream},{},{},{bytes},{},{asynchronous},,,,",
                opt(dst),
                opt(src),
                copy_kind_name(kind)
            )?,
            EventKind::Memset {
                dst,
                bytes,
                stream,
                asynchronous,
            } => writeln!(
                out,
                "{index},{t},memset,,,,,{stream},{},,{bytes},,{asynchronous},,,,",
                opt(dst)
            )?,
            EventKind::Launch {
                kernel,
                stream,
                layout_known,
                touched,
            } => {
                let name = names.get(&kernel).map(|n| csv_field(n)).unwrap_or_default();
                let touched: Vec<String> = touched.iter().map(u64::to_string).collect();
                writeln!(
                    out,
                    "{index},{t},launch,,,,,{stream},,,,,,{kernel},{name},{layout_known},{}",
                    touched.join(";")
                )?
            }
        }
    }
    out.flush()
}

/// Chrome trace-event time: microseconds.
fn micros(time_ns: u64) -> f64 {
    time_ns as f64 / 1000.0
}

/// `1536` → `1.5 KiB` (binary units, one decimal).
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// Chrome / Perfetto trace-event JSON (open it in `ui.perfetto.dev` or `chrome://tracing`).
///
/// Tracks, all in one process named after the program: a counter `live device bytes`; one async
/// slice per allocation from its malloc to its free (category `device allocation` or `pinned
/// host allocation`, open ones closed at the last event); and one thread track per stream
/// (`stream 0x…`) with an instant per launch (named after the kernel), memcpy and memset. Launch
/// times are host submission times: the trace records no kernel durations.
pub fn write_chrome(
    header: &TraceHeader,
    events: impl IntoIterator<Item = Event>,
    out: impl Write,
) -> io::Result<()> {
    let mut w = ChromeWriter {
        out,
        first: true,
        pid: header.pid,
    };
    w.out
        .write_all(b"{\"displayTimeUnit\":\"ns\",\"otherData\":")?;
    let other = json!({
        "generator": "itermem",
        "device": header.device_name,
        "device_total_memory": header.device_total_memory,
        "command_line": header.command_line,
        "start_unix_ns": header.start_unix_ns,
    });
    serde_json::to_writer(&mut w.out, &other)?;
    w.out.write_all(b",\"traceEvents\":[\n")?;
    let program = header
        .command_line
        .first()
        .map(String::as_str)
        .unwrap_or("program");
    w.emit(json!({
        "ph": "M", "name": "process_name", "pid": w.pid, "tid": 0,
        "args": {"name": format!("{program} (pid {}) on {}", header.pid, header.device_name)},
    }))?;
    w.emit(json!({
        "ph": "M", "name": "thread_name", "pid": w.pid, "tid": 0,
        "args": {"name": "memory"},
    }))?;

    let mut names: HashMap<KernelId, String> = HashMap::new();
    let mut tids: HashMap<StreamHandle, u64> = HashMap::new();
    // id → (category, slice name) of open allocation slices.
    let mut open: HashMap<AllocId, (&'static str, String, u64)> = HashMap::new();
    let mut live = 0u64;
    let mut numbering = Numbering::default();
    let mut last_ts = 0.0f64;
    for event in events {
        let ts = micros(event.time_ns);
        let index = numbering.number(&event.kind);
        last_ts = last_ts.max(ts);
        match &event.kind {
            EventKind::KernelName { kernel, name } => {
                names.insert(*kernel, name.clone());
                continue;
            }
            // The nodes' own events follow it and are drawn one by one.
            EventKind::GraphLaunch { .. } => continue,
            EventKind::Malloc {
                id,
                addr,
                size,
                kind,
                stream,
            } => {
                let cat = if kind.is_device() {
                    "device allocation"
                } else {
                    "pinned host allocation"
                };
                let name = human_bytes(*size);
                w.emit(json!({
                    "ph": "b", "cat": cat, "name": name, "id": format!("{id:#x}"),
                    "pid": w.pid, "tid": 0, "ts": ts,
                    "args": {"id": id, "size": size, "addr": format!("{addr:#x}"),
                             "kind": mem_kind_name(*kind), "stream": format!("{stream:#x}"),
                             "malloc_event": index},
                }))?;
                if kind.is_device() {
                    live = live.saturating_add(*size);
                    w.counter(ts, live)?;
                }
                open.insert(*id, (cat, name, if kind.is_device() { *size } else { 0 }));
            }
            EventKind::Free { id, .. } => {
                if let Some((cat, name, device_bytes)) = open.remove(id) {
                    w.emit(json!({
                        "ph": "e", "cat": cat, "name": name, "id": format!("{id:#x}"),
                        "pid": w.pid, "tid": 0, "ts": ts, "args": {"free_event": index},
                    }))?;
                    if device_bytes > 0 {
                        live = live.saturating_sub(device_bytes);
                        w.counter(ts, live)?;
                    }
                }
            }
            EventKind::Memcpy {
                dst,
                src,
                bytes,
                kind,
                stream,
                asynchronous,
            } => {
                let tid = w.stream_tid(&mut tids, *stream)?;
                w.emit(json!({
                    "ph": "i", "s": "t", "cat": "memcpy",
                    "name": format!("memcpy {} {}", copy_kind_name(*kind), human_bytes(*bytes)),
                    "pid": w.pid, "tid": tid, "ts": ts,
                    "args": {"event": index, "bytes": bytes, "dst": dst, "src": src,
                             "async": asynchronous},
                }))?;
            }
            EventKind::Memset {
                dst,
                bytes,
                stream,
                asynchronous,
            } => {
                let tid = w.stream_tid(&mut tids, *stream)?;
                w.emit(json!({
                    "ph": "i", "s": "t", "cat": "memset",
                    "name": format!("memset {}", human_bytes(*bytes)),
                    "pid": w.pid, "tid": tid, "ts": ts,
                    "args": {"event": index, "bytes": bytes, "dst": dst, "async": asynchronous},
                }))?;
            }
            EventKind::Launch {
                kernel,
                stream,
                layout_known,
                touched,
            } => {
                let tid = w.stream_tid(&mut tids, *stream)?;
                let name = names
                    .get(kernel)
                    .cloned()
                    .unwrap_or_else(|| format!("kernel {kernel}"));
                w.emit(json!({
                    "ph": "i", "s": "t", "cat": "launch", "name": name,
                    "pid": w.pid, "tid": tid, "ts": ts,
                    "args": {"event": index, "kernel": kernel, "layout_known": layout_known,
                             "touched": touched},
                }))?;
            }
        }
    }
    // Allocations never freed end with the trace (in id order, for a deterministic file).
    let mut still_open: Vec<_> = open.into_iter().collect();
    still_open.sort_by_key(|(id, _)| *id);
    for (id, (cat, name, _)) in still_open {
        w.emit(json!({
            "ph": "e", "cat": cat, "name": name, "id": format!("{id:#x}"),
            "pid": w.pid, "tid": 0, "ts": last_ts, "args": {"freed": false},
        }))?;
    }
    w.out.write_all(b"\n]}\n")?;
    w.out.flush()
}

struct ChromeWriter<W> {
    out: W,
    first: bool,
    pid: u32,
}

impl<W: Write> ChromeWriter<W> {
    fn emit(&mut self, value: serde_json::Value) -> io::Result<()> {
        if !self.first {
            self.out.write_all(b",\n")?;
        }
        self.first = false;
        serde_json::to_writer(&mut self.out, &value)?;
        Ok(())
    }

    fn counter(&mut self, ts: f64, live: u64) -> io::Result<()> {
        self.emit(json!({
            "ph": "C", "name": "live device bytes", "pid": self.pid, "tid": 0, "ts": ts,
            "args": {"bytes": live},
        }))
    }

    /// The track of `stream` (tid 1, 2, … in order of first use), named when first used.
    fn stream_tid(
        &mut self,
        tids: &mut HashMap<StreamHandle, u64>,
        stream: StreamHandle,
    ) -> io::Result<u64> {
        if let Some(&tid) = tids.get(&stream) {
            return Ok(tid);
        }
        let tid = tids.len() as u64 + 1;
        tids.insert(stream, tid);
        let name = if stream == 0 {
            "stream 0 (default)".to_string()
        } else {
            format!("stream {stream:#x}")
        };
        self.emit(json!({
            "ph": "M", "name": "thread_name", "pid": self.pid, "tid": tid,
            "args": {"name": name},
        }))?;
        self.emit(json!({
            "ph": "M", "name": "thread_sort_index", "pid": self.pid, "tid": tid,
            "args": {"sort_index": tid},
        }))?;
        Ok(tid)
    }
}

/// The DSA instance of one iteration: header `id,lower,upper,size`, one row per buffer.
pub fn write_dsa_csv(buffers: &[Buffer], mut out: impl Write) -> io::Result<()> {
    writeln!(out, "id,lower,upper,size")?;
    for b in buffers {
        writeln!(out, "{},{},{},{}", b.id, b.lower, b.upper, b.size)?;
    }
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_fields_with_commas_and_quotes_are_quoted() {
        assert_eq!(csv_field("plain"), "plain");
        assert_eq!(
            csv_field("void f<int, float>(\"x\")"),
            "\"void f<int, float>(\"\"x\"\")\""
        );
    }

    #[test]
    fn every_csv_row_has_as_many_cells_as_the_header() {
        let columns = CSV_HEADER.split(',').count();
        let events = vec![
            Event::new(
                1,
                EventKind::KernelName {
                    kernel: 0,
                    name: "k".into(),
                },
            ),
            Event::new(
                2,
                EventKind::Malloc {
                    id: 1,
                    addr: 16,
                    size: 8,
                    kind: MemKind::Device,
                    stream: 0,
                },
            ),
            Event::new(
                3,
                EventKind::Memcpy {
                    dst: Some(1),
                    src: None,
                    bytes: 8,
                    kind: CopyKind::HostToDevice,
                    stream: 0,
                    asynchronous: true,
                },
            ),
            Event::new(
                4,
                EventKind::Memset {
                    dst: Some(1),
                    bytes: 8,
                    stream: 0,
                    asynchronous: false,
                },
            ),
            Event::new(
                5,
                EventKind::Launch {
                    kernel: 0,
                    stream: 0,
                    layout_known: true,
                    touched: smallvec::smallvec![1, 2],
                },
            ),
            Event::new(6, EventKind::Free { id: 1, stream: 0 }),
        ];
        let mut out = Vec::new();
        write_csv(events, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        for line in text.lines() {
            assert_eq!(line.split(',').count(), columns, "{line}");
        }
        assert_eq!(text.lines().count(), 7);
    }

    #[test]
    fn human_bytes_picks_a_unit() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(3 << 30), "3.0 GiB");
    }
}
