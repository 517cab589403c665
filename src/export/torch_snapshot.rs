//! The pickle `torch.cuda.memory._snapshot()` returns (saved as `_dump_snapshot` saves it), from
//! an itermem trace, so PyTorch's memory viewer (pytorch.org/memory_viz,
//! `python -m torch.cuda._memory_viz trace_plot`) opens itermem's recordings.
//!
//! Without PyTorch's caching allocator every `cudaMalloc` is its own segment holding one block,
//! so each device allocation becomes `segment_alloc` + `alloc` and each free `free_requested` +
//! `free_completed` + `segment_free` in `device_traces[device]` (times in µs, the allocation's
//! stream, and one frame naming the call and the kernel launched last before it: the trace has
//! no Python stack). `segments` lists what is still allocated at the end, as a snapshot taken
//! then would. Page-locked host memory is not device memory and is left out. The pickle is
//! written as the events come (constant memory but for the live allocations).

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::io::{self, Write};

use serde::ser::{Error as _, SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};

use crate::event::{AllocId, Event, EventKind, KernelId, MemKind};

/// One live allocation: address, size, stream.
type Live = BTreeMap<u64, (u64, u64)>;

/// Writes the snapshot of `device`'s events (other devices get empty traces).
pub fn write_torch_snapshot(
    events: impl Iterator<Item = Event>,
    device: u32,
    out: impl Write,
) -> io::Result<()> {
    let state = RefCell::new(State {
        events: Box::new(events),
        live: Live::new(),
        ids: HashMap::new(),
        names: HashMap::new(),
        last_kernel: None,
    });
    let snapshot = Snapshot {
        state: &state,
        device,
    };
    serde_pickle::to_writer(&mut { out }, &snapshot, serde_pickle::SerOptions::new())
        .map_err(io::Error::other)
}

struct State<'a> {
    events: Box<dyn Iterator<Item = Event> + 'a>,
    /// Address → (size, stream) of the device allocations live so far.
    live: Live,
    /// Allocation id → address, for frees.
    ids: HashMap<AllocId, u64>,
    names: HashMap<KernelId, String>,
    last_kernel: Option<KernelId>,
}

impl State<'_> {
    /// A frame describing where an event happened, as far as the trace knows.
    fn frame(&self, call: &str) -> Frame {
        let name = match self.last_kernel.and_then(|k| self.names.get(&k)) {
            Some(kernel) => format!("{call} after {kernel}"),
            None => call.to_string(),
        };
        Frame {
            filename: "itermem trace",
            line: 0,
            name,
        }
    }
}

struct Snapshot<'s, 'a> {
    state: &'s RefCell<State<'a>>,
    device: u32,
}

impl Serialize for Snapshot<'_, '_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(4))?;
        // The traces first: writing them consumes the events, after which `segments` holds
        // what is still allocated.
        map.serialize_entry(
            "device_traces",
            &DeviceTraces {
                state: self.state,
                device: self.device,
            },
        )?;
        map.serialize_entry(
            "segments",
            &Segments {
                state: self.state,
                device: self.device,
            },
        )?;
        map.serialize_entry("allocator_settings", &BTreeMap::<String, String>::new())?;
        map.serialize_entry("external_annotations", &Vec::<u8>::new())?;
        map.end()
    }
}

struct DeviceTraces<'s, 'a> {
    state: &'s RefCell<State<'a>>,
    device: u32,
}

impl Serialize for DeviceTraces<'_, '_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.device as usize + 1))?;
        for _ in 0..self.device {
            seq.serialize_element(&Vec::<u8>::new())?;
        }
        seq.serialize_element(&Trace(self.state))?;
        seq.end()
    }
}

struct Trace<'s, 'a>(&'s RefCell<State<'a>>);

#[derive(Serialize)]
struct Entry {
    action: &'static str,
    addr: u64,
    size: u64,
    stream: u64,
    time_us: u64,
    frames: Vec<Frame>,
}

/// A stack frame as PyTorch records it (`filename:line:name` in the viewer).
#[derive(Serialize)]
struct Frame {
    filename: &'static str,
    line: u64,
    name: String,
}

impl Serialize for Trace<'_, '_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(None)?;
        loop {
            let event = {
                let mut state = self.0.try_borrow_mut().map_err(S::Error::custom)?;
                state.events.next()
            };
            let Some(event) = event else { break };
            let mut state = self.0.try_borrow_mut().map_err(S::Error::custom)?;
            let time_us = event.time_ns / 1000;
            let entries: Vec<Entry> = match event.kind {
                EventKind::KernelName { kernel, name } => {
                    state.names.insert(kernel, name);
                    continue;
                }
                EventKind::Launch { kernel, .. } => {
                    state.last_kernel = Some(kernel);
                    continue;
                }
                EventKind::Malloc {
                    id,
                    addr,
                    size,
                    kind,
                    stream,
                } if kind != MemKind::PinnedHost => {
                    state.live.insert(addr, (size, stream));
                    state.ids.insert(id, addr);
                    ["segment_alloc", "alloc"]
                        .map(|action| Entry {
                            action,
                            addr,
                            size,
                            stream,
                            time_us,
                            frames: vec![state.frame("cudaMalloc")],
                        })
                        .into()
                }
                EventKind::Free { id, .. } => {
                    let Some(addr) = state.ids.remove(&id) else {
                        continue;
                    };
                    let Some((size, stream)) = state.live.remove(&addr) else {
                        continue;
                    };
                    ["free_requested", "free_completed", "segment_free"]
                        .map(|action| Entry {
                            action,
                            addr,
                            size,
                            stream,
                            time_us,
                            frames: vec![state.frame("cudaFree")],
                        })
                        .into()
                }
                _ => continue,
            };
            drop(state);
            for entry in &entries {
                seq.serialize_element(entry)?;
            }
        }
        seq.end()
    }
}

struct Segments<'s, 'a> {
    state: &'s RefCell<State<'a>>,
    device: u32,
}

#[derive(Serialize)]
struct Segment {
    device: u32,
    address: u64,
    total_size: u64,
    allocated_size: u64,
    active_size: u64,
    requested_size: u64,
    stream: u64,
    segment_type: &'static str,
    is_expandable: bool,
    frames: Vec<Frame>,
    blocks: [Block; 1],
}

#[derive(Serialize)]
struct Block {
    address: u64,
    size: u64,
    requested_size: u64,
    state: &'static str,
    frames: Vec<Frame>,
}

impl Serialize for Segments<'_, '_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let state = self.state.try_borrow().map_err(S::Error::custom)?;
        let mut seq = s.serialize_seq(Some(state.live.len()))?;
        for (&address, &(size, stream)) in &state.live {
            seq.serialize_element(&Segment {
                device: self.device,
                address,
                total_size: size,
                allocated_size: size,
                active_size: size,
                requested_size: size,
                stream,
                // PyTorch's pools: blocks up to 1 MiB come from "small" segments.
                segment_type: if size <= 1 << 20 { "small" } else { "large" },
                is_expandable: false,
                frames: Vec::new(),
                blocks: [Block {
                    address,
                    size,
                    requested_size: size,
                    state: "active_allocated",
                    frames: Vec::new(),
                }],
            })?;
        }
        seq.end()
    }
}
