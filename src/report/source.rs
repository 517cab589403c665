//! The recording a report is drawn from, as one list of [`Item`]s whatever its format.
//!
//! An itermem trace is read event by event (not through [`crate::import`], which keeps only
//! allocations and frees): the report also draws the kernel launches, and the swap schedule is
//! placed at the program's ops, which are launches, copies and memsets. Item `i` is access event
//! `i` of one device ([`crate::analysis::Numbering`]; the device chosen as every reader chooses
//! it, [`crate::import::choose_device`]), the numbering of the statistics'
//! `start_event`, `boundary_event` and `first_planned_event`, so those indices find their items
//! here. Other formats (PyTorch snapshots and profiler traces, SINGA logs) come through
//! [`crate::import`] as allocations and frees only; where they record no time, an item's time
//! is its index and the report says its axis counts events.

use std::path::{Path, PathBuf};

use crate::analysis::{Analyzer, Iteration};
use crate::detect::{DetectError, DetectorConfig};
use crate::event::{EventKind, StreamHandle};
use crate::import::{self, AllocEvent, Format, ImportError, ImportOptions};
use crate::trace::{TraceError, TraceFile};

/// What one access event did, as far as the report draws it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Item {
    /// Device memory allocated; `addr` where the format records one.
    Alloc {
        id: u64,
        addr: Option<u64>,
        size: u64,
    },
    Free {
        id: u64,
    },
    /// A kernel launch, on its stream.
    Launch {
        stream: StreamHandle,
    },
    /// A copy or memset: an op of the program that is not a kernel.
    Transfer,
}

/// One recording of one device.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub format: Format,
    /// Access events in recorded order, each with its time.
    pub items: Vec<(u64, Item)>,
    /// Whether item times are nanoseconds (else they are the items' indices).
    pub timed: bool,
    pub iteration: Option<Iteration>,
    /// Events the trace lost or that lie after a cut (an unfinished trace), said in the report.
    pub note: Option<String>,
}

/// Why a recording cannot be read.
#[derive(Debug)]
pub enum SourceError {
    Trace(TraceError),
    Import(ImportError),
    Detect(PathBuf, DetectError),
}

impl std::fmt::Display for SourceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SourceError::Trace(err) => err.fmt(f),
            SourceError::Import(err) => err.fmt(f),
            SourceError::Detect(path, err) => {
                write!(f, "{}: iteration detection failed: {err}", path.display())
            }
        }
    }
}

/// Transparent: the readers' errors name the file and the place in it, so this displays them
/// as they are and passes on their causes, not themselves (they would be printed twice).
impl std::error::Error for SourceError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SourceError::Trace(err) => err.source(),
            SourceError::Import(err) => err.source(),
            SourceError::Detect(_, err) => err.source(),
        }
    }
}

/// Reads `path` (any format [`crate::import`] recognises; an itermem trace in full).
pub fn read(path: &Path, options: &ImportOptions) -> Result<Recorded, SourceError> {
    if crate::trace::format::starts_with_magic(path).is_ok_and(|yes| yes) {
        read_trace(path, options)
    } else {
        read_recording(path, options)
    }
}

fn read_trace(path: &Path, options: &ImportOptions) -> Result<Recorded, SourceError> {
    let trace = TraceFile::open(path).map_err(SourceError::Trace)?;
    let mut note = None;
    let mut all = Vec::new();
    let mut events = trace.events();
    for event in events.by_ref() {
        match event {
            Ok(event) => all.push(event),
            Err(err) if err.is_cut() => {
                note = Some(format!("the trace is unfinished: {err}"));
                break;
            }
            Err(err) => return Err(SourceError::Trace(err)),
        }
    }
    // One device's events, chosen as every reader chooses (kernel names are every device's).
    let device = import::choose_device(path, &import::device_summaries(&all), options)
        .map_err(SourceError::Import)?;
    let mut analyzer = Analyzer::new();
    let mut items = Vec::new();
    for event in all {
        if Some(event.device) != device && !matches!(event.kind, EventKind::KernelName { .. }) {
            continue;
        }
        let before = analyzer.events();
        analyzer.push(&event);
        if analyzer.events() == before {
            continue; // pinned host memory, a kernel name or a graph launch: no access event
        }
        let item = match event.kind {
            EventKind::Malloc { id, addr, size, .. } => Item::Alloc {
                id,
                addr: Some(addr),
                size,
            },
            EventKind::Free { id, .. } => Item::Free { id },
            EventKind::Launch { stream, .. } => Item::Launch { stream },
            EventKind::Memcpy { .. } | EventKind::Memset { .. } => Item::Transfer,
            EventKind::KernelName { .. } | EventKind::GraphLaunch { .. } => continue,
        };
        items.push((event.time_ns, item));
    }
    if let Some(end) = events.end_record()
        && end.events_lost > 0
    {
        note = Some(format!("the trace lost {} events", end.events_lost));
    }
    let analysis = analyzer
        .finish(&DetectorConfig::for_cuda_events())
        .map_err(|err| SourceError::Detect(path.to_path_buf(), err))?;
    Ok(Recorded {
        format: Format::ItermemTrace,
        items,
        timed: true,
        iteration: analysis.iteration,
        note,
    })
}

fn read_recording(path: &Path, options: &ImportOptions) -> Result<Recorded, SourceError> {
    let recording = import::load_recording(path, options).map_err(SourceError::Import)?;
    let timed = recording.events().iter().all(|e| e.time_us().is_some());
    let items = recording
        .events()
        .iter()
        .enumerate()
        .map(|(index, event)| {
            let time = if timed {
                event.time_us().unwrap_or(0).saturating_mul(1000)
            } else {
                index as u64
            };
            let item = match *event {
                AllocEvent::Alloc { id, size, addr, .. } => Item::Alloc { id, addr, size },
                AllocEvent::Free { id, .. } => Item::Free { id },
            };
            (time, item)
        })
        .collect();
    let iteration = recording
        .iteration(&DetectorConfig::for_cuda_events())
        .map_err(|err| SourceError::Detect(path.to_path_buf(), err))?;
    Ok(Recorded {
        format: recording.source().format,
        items,
        timed,
        iteration,
        note: None,
    })
}
