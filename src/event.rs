//! What the interposer observes: one [`Event`] per CUDA call that matters for memory planning.
//!
//! Allocations are named by [`AllocId`], a stable handle assigned in allocation order (1, 2, …)
//! for the life of the process, never by raw address: addresses are reused after a free, ids are
//! not. Raw addresses are kept too, for debugging and for importers that only have addresses.
//! Times are nanoseconds since the start of the recording (the trace header holds the wall-clock
//! start). Only successful calls become events; failed calls are counted in the statistics.

use serde::Serialize;

/// Stable handle of one allocation: unique per process, never reused.
pub type AllocId = u64;

/// Index of a kernel in the trace's kernel table (its name is recorded once, at first launch).
pub type KernelId = u32;

/// Which allocation call produced a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MemKind {
    /// `cudaMalloc`.
    Device = 0,
    /// `cudaMallocManaged`.
    Managed = 1,
    /// `cudaMallocAsync` (stream-ordered).
    Async = 2,
    /// `cudaMallocHost` / `cudaHostAlloc`: page-locked host memory.
    PinnedHost = 3,
}

impl MemKind {
    /// Whether the block occupies device memory (what SmartPool plans and what peaks count).
    pub fn is_device(self) -> bool {
        !matches!(self, MemKind::PinnedHost)
    }

    pub fn from_u8(value: u8) -> Option<MemKind> {
        Some(match value {
            0 => MemKind::Device,
            1 => MemKind::Managed,
            2 => MemKind::Async,
            3 => MemKind::PinnedHost,
            _ => return None,
        })
    }
}

/// Direction of a copy, numbered as `cudaMemcpyKind` (4 = inferred from the addresses).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CopyKind {
    HostToHost = 0,
    HostToDevice = 1,
    DeviceToHost = 2,
    DeviceToDevice = 3,
    Default = 4,
}

impl CopyKind {
    pub fn from_u8(value: u8) -> Option<CopyKind> {
        Some(match value {
            0 => CopyKind::HostToHost,
            1 => CopyKind::HostToDevice,
            2 => CopyKind::DeviceToHost,
            3 => CopyKind::DeviceToDevice,
            4 => CopyKind::Default,
            _ => return None,
        })
    }
}

/// The allocations one launch touches: inline up to 8 (no heap allocation per launch event,
/// which matters at millions of launches), spilled to the heap beyond.
pub type Touched = smallvec::SmallVec<[AllocId; 8]>;

/// A stream handle as the application passed it (0 = legacy default stream).
pub type StreamHandle = u64;

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum EventKind {
    Malloc {
        id: AllocId,
        addr: u64,
        size: u64,
        kind: MemKind,
        /// Stream of a stream-ordered allocation (0 otherwise).
        stream: StreamHandle,
    },
    Free {
        id: AllocId,
        /// Stream of a stream-ordered free (0 otherwise).
        stream: StreamHandle,
    },
    /// A copy; `src`/`dst` name the allocations read and written (None = memory itermem does
    /// not track, e.g. pageable host memory).
    Memcpy {
        dst: Option<AllocId>,
        src: Option<AllocId>,
        bytes: u64,
        kind: CopyKind,
        stream: StreamHandle,
        asynchronous: bool,
    },
    Memset {
        dst: Option<AllocId>,
        bytes: u64,
        stream: StreamHandle,
        asynchronous: bool,
    },
    /// A kernel launch and the allocations its arguments point into (empty when the kernel's
    /// parameter layout is unknown: see `layout_known`).
    Launch {
        kernel: KernelId,
        stream: StreamHandle,
        layout_known: bool,
        touched: Touched,
    },
    /// Names kernel `kernel`; recorded once, before its first launch.
    KernelName { kernel: KernelId, name: String },
    /// A CUDA graph launch (`cuGraphLaunch` of instantiated graph `exec` on `stream`): the
    /// next `nodes` access events of its device are the kernels, copies and memsets of the
    /// graph's nodes, recorded as if launched one by one (so iteration detection sees the same
    /// tokens as without the graph), but enqueued at once, as one unit of stream order. Not an
    /// access event itself (no index, no token).
    GraphLaunch {
        exec: u64,
        stream: StreamHandle,
        nodes: u64,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Event {
    /// Nanoseconds since the recording started.
    pub time_ns: u64,
    /// The CUDA device (ordinal) the event happened on: the current context's at the call.
    /// Kernel names belong to no device (0).
    #[serde(skip_serializing_if = "is_device_zero")]
    pub device: u32,
    #[serde(flatten)]
    pub kind: EventKind,
}

impl Event {
    /// An event of device 0 (what every single-device program and every importer makes).
    pub fn new(time_ns: u64, kind: EventKind) -> Event {
        Event {
            time_ns,
            device: 0,
            kind,
        }
    }
}

fn is_device_zero(device: &u32) -> bool {
    *device == 0
}
