//! itermem's own traces ([`crate::trace`]) as a [`Recording`]: the device `Malloc` and `Free`
//! events, with the trace's allocation ids (already stable per allocation: the interposer
//! never reuses one).
//!
//! Device, managed and stream-ordered allocations are device memory; pinned host allocations
//! (`cudaMallocHost`/`cudaHostAlloc`) are not, and neither they nor their frees are events of the
//! recording. A free of an id the trace never allocated is dropped and counted, like a free of a
//! block allocated before a recording started. Launches, copies and kernel names are counted as
//! ignored records. A trace is one process; each event names its device (version 2), and the
//! recording is one device's, the requested one or the one with the most allocs and frees
//! (each device runs its own iteration).

use std::collections::{BTreeMap, HashMap, HashSet};

use super::error::{ImportError, Location, Problem};
use super::recording::{AllocEvent, DeviceSummary, ImportStats};
use super::{Content, ImportOptions, Input, Recording, Source, choose_device};
use crate::event::EventKind;
use crate::trace::TraceFile;

pub(crate) fn import(
    input: Input,
    source: Source,
    options: &ImportOptions,
) -> Result<Recording, ImportError> {
    let path = input.path.clone();
    let trace = match input.content {
        Content::Trace(trace) => trace,
        Content::Bytes(bytes) => TraceFile::from_bytes(&path, bytes)
            .map_err(|err| ImportError::new(&path, Location::File, Problem::Trace(err)))?,
    };
    let mut by_device: BTreeMap<u32, Vec<AllocEvent>> = BTreeMap::new();
    let mut stats = ImportStats::default();
    // Live device allocations: id → size; pinned host allocations; every id allocated.
    let mut live: HashMap<u64, u64> = HashMap::new();
    let mut host: HashSet<u64> = HashSet::new();
    let mut seen: HashSet<u64> = HashSet::new();
    for (index, event) in trace.events().enumerate() {
        let event = match event {
            Ok(event) => event,
            // A trace its process did not close: the events before the cut.
            Err(err) if err.is_cut() => break,
            Err(err) => return Err(ImportError::new(&path, Location::File, Problem::Trace(err))),
        };
        let time_us = Some(event.time_ns / 1000);
        let events = by_device.entry(event.device).or_default();
        match event.kind {
            EventKind::Malloc {
                id,
                addr,
                size,
                kind,
                ..
            } => {
                if !seen.insert(id) {
                    return Err(ImportError::new(
                        &path,
                        Location::Event(index as u64),
                        Problem::DuplicateId { id },
                    ));
                }
                if kind.is_device() {
                    live.insert(id, size);
                    events.push(AllocEvent::Alloc {
                        id,
                        size,
                        addr: Some(addr),
                        time_us,
                    });
                } else {
                    host.insert(id);
                    stats.ignored_records += 1;
                }
            }
            EventKind::Free { id, .. } => {
                if live.remove(&id).is_some() {
                    events.push(AllocEvent::Free { id, time_us });
                } else if host.remove(&id) {
                    stats.ignored_records += 1;
                } else {
                    stats.dropped_frees += 1;
                }
            }
            _ => stats.ignored_records += 1,
        }
    }
    let devices: Vec<DeviceSummary> = by_device
        .iter()
        .map(|(&device, events)| {
            let allocs = events.iter().filter(|e| e.is_alloc()).count() as u64;
            DeviceSummary {
                device,
                allocs,
                frees: events.len() as u64 - allocs,
            }
        })
        .collect();
    let device = choose_device(&path, &devices, options)?.unwrap_or(0);
    let events = by_device.remove(&device).unwrap_or_default();
    let recording = Recording::new(source, events).map_err(|err| {
        ImportError::new(&path, Location::File, Problem::Structure(err.to_string()))
    })?;
    Ok(recording.with_devices(device, devices).with_stats(stats))
}
