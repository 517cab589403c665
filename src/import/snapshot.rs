//! PyTorch memory snapshots: the pickle `torch.cuda.memory._snapshot()` returns (saved with
//! `pickle.dump`), whose `device_traces` hold, per device, the caching allocator's event log
//! (`c10/cuda/CUDACachingAllocator.h`, `TraceEntry`):
//! `{action, addr, size, stream, time_us?, frames, …}`.
//!
//! Only `alloc` and `free_requested` (named `free` by early versions) are events of the
//! recording; the other actions (`free_completed`, `segment_alloc`, `segment_free`,
//! `segment_map`, `segment_unmap`, `snapshot`, `oom`, and any newer one) are counted in
//! [`ImportStats::ignored_records`](super::ImportStats) — see the parent module for why.
//!
//! The pickle is decoded by the restricted unpickler of [`super::pickle`], which refuses any
//! reference to a Python global with its byte offset; an entry that lacks a field is reported
//! with its key path (`device_traces[0][17].size`).

use std::path::Path;

use super::error::{ImportError, Location, Problem};
use super::pickle::{Kind, PValue, unpickle};
use super::recording::DeviceSummary;
use super::{AddressPairing, ImportOptions, Recording, Source, choose_device};

/// Imports the snapshot in `bytes` (already decompressed).
pub(crate) fn import(
    bytes: &[u8],
    source: Source,
    options: &ImportOptions,
) -> Result<Recording, ImportError> {
    let path = source.path.clone();
    let path = path.as_path();
    let value = unpickle(bytes)
        .map_err(|(offset, problem)| ImportError::new(path, Location::Byte(offset), problem))?;
    let traces = device_traces(path, &value)?;

    // Count every device's records, then read the chosen one.
    let mut devices = Vec::with_capacity(traces.len());
    for (device, trace) in traces.iter().enumerate() {
        let device = u32::try_from(device).unwrap_or(u32::MAX);
        let mut summary = DeviceSummary {
            device,
            allocs: 0,
            frees: 0,
        };
        for (index, entry) in trace.iter().enumerate() {
            let entry = Entry::of(path, device, index, entry)?;
            match entry.action {
                Action::Alloc => summary.allocs += 1,
                Action::Free => summary.frees += 1,
                Action::Other => {}
            }
        }
        devices.push(summary);
    }
    let Some(device) = choose_device(path, &devices, options)? else {
        return Err(ImportError::new(
            path,
            Location::Path("device_traces".to_string()),
            Problem::NoEvents(
                "no allocation history: device_traces has no alloc or free event on any \
                 device (call torch.cuda.memory._record_memory_history() before the code to \
                 record, then take torch.cuda.memory._snapshot())"
                    .to_string(),
            ),
        ));
    };

    let mut pairing = AddressPairing::default();
    let trace = &traces[device as usize];
    for (index, entry) in trace.iter().enumerate() {
        let entry = Entry::of(path, device, index, entry)?;
        let at = || format!("device_traces[{device}][{index}]");
        match entry.action {
            Action::Alloc => {
                let addr = require(path, "addr", entry.addr, at)?;
                let size = require(path, "size", entry.size, at)?;
                pairing.alloc(addr, size, entry.time_us);
            }
            Action::Free => {
                let addr = require(path, "addr", entry.addr, at)?;
                pairing.free(addr, entry.size, entry.time_us);
            }
            Action::Other => pairing.ignore(),
        }
    }
    let recording = pairing.finish(source).map_err(|err| {
        ImportError::new(
            path,
            Location::Path(format!("device_traces[{device}]")),
            Problem::Structure(err.to_string()),
        )
    })?;
    Ok(recording.with_devices(device, devices))
}

/// `value["device_traces"]` as one list of entries per device.
fn device_traces(path: &Path, value: &PValue) -> Result<Vec<Vec<PValue>>, ImportError> {
    let structure = |location: Location, message: String| {
        ImportError::new(path, location, Problem::Structure(message))
    };
    let Some(pairs) = value.dict_items() else {
        let hint = if value.list_items().is_some() {
            "the pickle holds a list, not a snapshot dict: this looks like \
             torch.cuda.memory_snapshot() (segments only, no allocation history); take \
             torch.cuda.memory._snapshot() after torch.cuda.memory._record_memory_history()"
                .to_string()
        } else {
            format!(
                "the pickle holds {}, not a snapshot dict with device_traces",
                value.describe()
            )
        };
        return Err(structure(Location::File, hint));
    };
    let Some(traces) = value.get("device_traces") else {
        let keys: Vec<String> = pairs
            .iter()
            .take(8)
            .map(|(k, _)| {
                k.as_str()
                    .map_or_else(|| k.describe(), |s| format!("{s:?}"))
            })
            .collect();
        return Err(structure(
            Location::File,
            format!(
                "not a PyTorch memory snapshot: the dict has no `device_traces` key (keys: {})",
                keys.join(", ")
            ),
        ));
    };
    let Some(traces) = traces.list_items() else {
        return Err(structure(
            Location::Path("device_traces".to_string()),
            format!(
                "device_traces is {}, expected a list (one per device)",
                traces.describe()
            ),
        ));
    };
    traces
        .iter()
        .enumerate()
        .map(|(device, trace)| {
            trace.list_items().ok_or_else(|| {
                structure(
                    Location::Path(format!("device_traces[{device}]")),
                    format!("{}, expected a list of trace entries", trace.describe()),
                )
            })
        })
        .collect()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Action {
    Alloc,
    Free,
    Other,
}

/// The fields of one trace entry the importer uses.
struct Entry {
    action: Action,
    addr: Option<u64>,
    size: Option<u64>,
    time_us: Option<u64>,
}

impl Entry {
    fn of(path: &Path, device: u32, index: usize, value: &PValue) -> Result<Entry, ImportError> {
        let at = |key: &str| {
            let mut p = format!("device_traces[{device}][{index}]");
            if !key.is_empty() {
                p.push('.');
                p.push_str(key);
            }
            Location::Path(p)
        };
        let structure = |key: &str, message: String| {
            ImportError::new(path, at(key), Problem::Structure(message))
        };
        let dict = match value {
            PValue::Container(c) if c.kind == Kind::Dict => c,
            other => {
                return Err(structure(
                    "",
                    format!("{}, expected a dict (a trace entry)", other.describe()),
                ));
            }
        };
        let mut entry = Entry {
            action: Action::Other,
            addr: None,
            size: None,
            time_us: None,
        };
        let mut has_action = false;
        for pair in dict.items.borrow().chunks_exact(2) {
            let (PValue::Str(key), value) = (&pair[0], &pair[1]) else {
                continue;
            };
            let key = &**key;
            let integer = || {
                value.as_u64().ok_or_else(|| {
                    structure(
                        key,
                        format!("{}, expected a non-negative integer", value.describe()),
                    )
                })
            };
            match key {
                "action" => {
                    has_action = true;
                    entry.action = match value.as_str() {
                        Some("alloc") => Action::Alloc,
                        Some("free_requested" | "free") => Action::Free,
                        Some(_) => Action::Other,
                        None => {
                            return Err(structure(
                                key,
                                format!("{}, expected a string", value.describe()),
                            ));
                        }
                    }
                }
                "addr" => entry.addr = Some(integer()?),
                "size" => entry.size = Some(integer()?),
                "time_us" => {
                    entry.time_us = match value {
                        PValue::None => None,
                        _ => Some(integer()?),
                    }
                }
                _ => {}
            }
        }
        if !has_action {
            return Err(structure("", "the entry has no `action`".to_string()));
        }
        Ok(entry)
    }
}

/// A field an action needs.
fn require(
    path: &Path,
    key: &str,
    value: Option<u64>,
    at: impl Fn() -> String,
) -> Result<u64, ImportError> {
    value.ok_or_else(|| {
        ImportError::new(
            path,
            Location::Path(at()),
            Problem::Structure(format!("the entry has no `{key}`")),
        )
    })
}
