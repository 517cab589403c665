//! The access log: turns observed CUDA calls into [`Event`]s, keeps the live-allocation index
//! that names what each launch and copy touches, feeds the online iteration detector and the
//! trace writer, and counts everything for the statistics.
//!
//! Ordering: every event passes through one short critical section (its device's
//! [`Sequencer`]) that assigns its index and time, updates the live bytes, pushes its token to
//! the detector and hands it to the trace writer, so the trace, the indices and the detector
//! see one total order per device even when many host threads call CUDA at once (in record and
//! cnmem modes with a trace, the tokens go with the trace batches and the writer's thread
//! pushes them: `device::Detection`). Each device
//! has its own sequence, detector and allocator (`device.rs`); the live index, the kernels and
//! the counters are the process's. Frees leave the live index *before* the real free runs,
//! so an address the runtime reuses at once for another thread's malloc is never confused with
//! the block being freed.

use super::clock::Clock;
use super::cnmem::CnmemStats;
use super::device::{DeviceState, Devices, Sequencer};
use super::graphs::{Graphs, Node, NodeWork};
use super::late::Addresses;
use super::live::{Block, LiveIndex};
use super::pool::{PoolState, PoolStats};
use super::real::{KernelLayout, allocation_gone, function_layout, kernel_layout, range_start};
use super::staging::{Entry, Staging};
use super::swap::SwapStats;
use super::swap::executor::Prepared;
use super::swap::planning::Capture;
use crate::analysis::{self, EventCounts, HostCounts};
use crate::config::{Config, Mode};
use crate::detect::Change;
use crate::event::AllocId;
use crate::event::{CopyKind, Event, EventKind, KernelId, MemKind, StreamHandle, Touched};
use crate::trace::{AfterBatch, BeforeBatch, TraceHeader, TraceWriter};
use parking_lot::{Mutex, RwLock};
use rustc_hash::FxHashMap;
use serde::Serialize;
use std::ffi::c_void;
use std::sync::atomic::{
    AtomicPtr, AtomicU64, Ordering::Acquire, Ordering::Relaxed, Ordering::Release,
};
use std::sync::{Arc, OnceLock};

/// Events handed to the trace writer at once: one channel hand-over per batch keeps the
/// hooks' cost low (a hand-over costs about as much as the rest of a hook).
const TRACE_BATCH: usize = 256;
/// A batch older than this is handed over however small (the writer writes what it holds
/// after 50 ms more): a process that crashes or is killed loses only its last moments.
const TRACE_BATCH_AGE_NS: u64 = 50_000_000;
/// Batches the writer's channel holds before `record` waits (bounds the memory: 64 × 256
/// events, a few MB).
const TRACE_BATCHES_IN_FLIGHT: usize = 64;
/// How long the end of the process waits for the sequencing thread to take what is staged
/// (a backlog of millions of events takes seconds).
const STAGED_SYNC_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// What one launch touches: its kernel and the allocations its arguments point into.
pub struct LaunchAccesses {
    kernel: &'static Kernel,
    /// Resolved at the launch, unless events are staged: then left empty here and filled in
    /// from `late` on the sequencing thread (`late.rs`).
    pub touched: Touched,
    /// The pointer words to resolve late, still in the launch's arguments (None when resolved
    /// now, or when no trace is kept).
    late: Option<ArgWords>,
    /// Pointer words read from the arguments (for the statistics).
    words_scanned: u64,
}

/// A launch's pointer words left in its arguments, to be resolved late: they are read once,
/// under the lock that keeps them (the device's sequencer, or the thread's staging buffer),
/// straight into the vector that takes them to the thread that resolves them. Copied first
/// into a small vector of their own, as they were, they cost a launch about 100 instructions
/// more (the vector's construction and its moves with the launch's accesses).
///
/// Only made by [`Recorder::launch_accesses`], and read by [`Recorder::on_launch`] within the
/// same launch call (its contract): the arguments are the caller's, unchanged while it is
/// blocked in the call (the driver copies them at the launch and never writes them).
#[derive(Clone, Copy)]
pub struct ArgWords {
    words: &'static [PointerWord],
    args: LaunchArgs,
}

impl ArgWords {
    /// Appends the words to `out` (of a packed buffer, those that lie inside it).
    ///
    /// # Safety
    /// The launch call that made these words is still in progress (see the type's doc).
    #[inline]
    unsafe fn append_to(&self, out: &mut Vec<u64>) {
        match self.args {
            // SAFETY: the caller's `args` hold one valid pointer per parameter, still readable
            // (this function's contract).
            LaunchArgs::Pointers(args) => {
                out.extend((self.words.iter()).map(|word| unsafe { pointer_arg(args, word) }))
            }
            // SAFETY: the caller's buffer holds `len` readable bytes, still (as above).
            LaunchArgs::Packed { buffer, len } => out.extend(
                (self.words.iter()).filter_map(|word| unsafe { packed_arg(buffer, len, word) }),
            ),
            LaunchArgs::Absent => {}
        }
    }
}

/// What the recorder knows about one kernel.
#[derive(Debug)]
pub struct Kernel {
    id: KernelId,
    /// 8-byte words of the argument buffer to test as pointers. None when the layout is unknown.
    pointer_words: Option<Vec<PointerWord>>,
}

/// The events of one graph launch (see [`Recorder::graph_events`]).
pub struct GraphEvents {
    /// Each node's event and the pointer words its scan read.
    events: Vec<(EventKind, u64)>,
    /// Every allocation the launch touches: all are made resident before it is enqueued.
    pub touched: Touched,
}

impl GraphEvents {
    /// The access events the launch makes.
    pub fn len(&self) -> usize {
        self.events.len()
    }
}

/// What recording a graph launch did: the index of its first event (None for a graph without
/// device work, or a launch that failed) and the detector's answer to each event.
#[derive(Default)]
pub struct GraphRecorded {
    first: Option<u64>,
    changes: Vec<Answer>,
}

/// The detector's answer to one event as the sequencer hands it on: None for
/// [`Change::Unchanged`] (nearly every event), any other answer boxed. A `Change` is 88 bytes:
/// returned by value from the sequencer to the hook, it was copied twice at every event
/// (about 23 instructions); the box is made only where a period is found, lost or changed.
type Answer = Option<Box<Change>>;

/// The value of pointer word `word` of arguments passed one pointer per parameter.
///
/// # Safety
/// `args` holds one valid pointer per parameter of the kernel `word` belongs to.
unsafe fn pointer_arg(args: *const *const c_void, word: &PointerWord) -> u64 {
    // SAFETY: `param` < the kernel's parameter count, so args[param] exists and points to that
    // parameter's value, at least `within` + 8 bytes long.
    unsafe {
        ((*args.add(word.param)) as *const u8)
            .add(word.within)
            .cast::<u64>()
            .read_unaligned()
    }
}

/// The value of pointer word `word` of arguments packed in one buffer, if it lies inside.
///
/// # Safety
/// `buffer` holds `len` readable bytes.
unsafe fn packed_arg(buffer: *const u8, len: usize, word: &PointerWord) -> Option<u64> {
    // SAFETY: the word lies inside the caller's buffer of `len` bytes.
    (word.packed + 8 <= len)
        .then(|| unsafe { buffer.add(word.packed).cast::<u64>().read_unaligned() })
}

/// One 8-byte word of a kernel's arguments that may hold a pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct PointerWord {
    /// The parameter it belongs to.
    param: usize,
    /// Its byte offset inside that parameter's value (arguments passed one pointer each).
    within: usize,
    /// Its byte offset in the packed argument buffer (arguments passed in one buffer).
    packed: usize,
}

/// The kernel a launch names: the host function of a runtime launch, or the driver's
/// `CUfunction`. The same kernel launched both ways is one kernel.
#[derive(Clone, Copy, Debug)]
pub enum KernelRef {
    Host(*const c_void),
    Function(usize),
}

/// How a launch passes its arguments.
#[derive(Clone, Copy, Debug)]
pub enum LaunchArgs {
    /// One pointer per parameter (`cudaLaunchKernel`'s `args`, `cuLaunchKernel`'s
    /// `kernelParams`).
    Pointers(*const *const c_void),
    /// All parameters packed in one buffer of `len` bytes (`cuLaunchKernel`'s `extra`).
    Packed { buffer: *const u8, len: usize },
    /// None given (a kernel without parameters, or a launch the driver will refuse).
    Absent,
}

/// Kernels the recorder remembers outside its map's lock (see [`Recorder::kernel`]).
const KERNEL_CACHE: usize = 16;

/// A key of the kernel map and its kernel: what a slot of [`Recorder::recent_kernels`] points
/// to. Leaked, one per key, as the kernels are.
struct KnownKernel {
    key: (bool, usize),
    kernel: &'static Kernel,
}

/// Counters for the statistics (`Relaxed`: independent tallies, nothing is published).
#[derive(Default)]
/// (Events are counted per device, under its sequencer: see `device::Sequencer::count`.)
pub struct Counters {
    /// Hooked calls observed (each ran itermem's observer), counted per thread.
    pub calls: PerThread,
    pub launches_without_layout: AtomicU64,
}

/// A count kept by each thread in a counter of its own, summed when read.
#[derive(Default)]
pub struct PerThread {
    threads: Mutex<Vec<Arc<AtomicU64>>>,
    /// The counts of threads that have ended.
    ended: AtomicU64,
}

impl PerThread {
    /// A new thread's counter; the counters of threads that have ended are summed up here.
    pub fn register(&self) -> Arc<AtomicU64> {
        let counter = Arc::new(AtomicU64::new(0));
        let mut threads = self.threads.lock();
        threads.retain(|counter| {
            // Only this list holds it: its thread has ended and will not count again.
            let alive = Arc::strong_count(counter) > 1;
            if !alive {
                self.ended.fetch_add(counter.load(Relaxed), Relaxed);
            }
            alive
        });
        threads.push(Arc::clone(&counter));
        counter
    }

    pub fn total(&self) -> u64 {
        let threads = self.threads.lock();
        self.ended.load(Relaxed) + threads.iter().map(|c| c.load(Relaxed)).sum::<u64>()
    }
}

pub struct Recorder {
    pub config: Config,
    /// The process that started recording (a forked child inherits this value).
    pub pid: u32,
    clock: Clock,
    next_id: AtomicU64,
    live: RwLock<LiveIndex>,
    /// Kernels by host function address (key `(false, address)`) and by driver handle
    /// (`(true, handle)`). Records are leaked: there are few kernels, they live
    /// as long as the process, and a `&'static` spares every launch a reference count.
    kernels: RwLock<FxHashMap<(bool, usize), &'static KnownKernel>>,
    /// The entries of `kernels` launched last, by a hash of their key: a launch reads one
    /// slot with one atomic load, so threads launching at once share no lock and write no
    /// shared cache line but at a miss (a thread-local cache cost a thread-local lookup, a
    /// call in a shared library, at every launch). Null, or an entry of `kernels`.
    recent_kernels: [AtomicPtr<KnownKernel>; KERNEL_CACHE],
    /// Kernels known (ids are given under the `kernels` lock, in order).
    kernel_count: AtomicU64,
    /// The work of CUDA graphs' nodes, for recording their launches.
    pub graphs: Graphs,
    devices: Devices,
    /// Record and cnmem modes: events are sequenced off the program's threads (`staging.rs`),
    /// and launches resolved there (`late.rs`); otherwise at the call.
    staging: Option<Staging>,
    /// Record, cnmem and pool modes with a trace, sequenced on the program's threads: the
    /// blocks live as of the events handed to the trace writer, whose thread resolves a
    /// launch's pointer words against them (`late.rs`) instead of the program's thread (in
    /// pool mode, only while no pool block is in use: otherwise the launch needs them at once,
    /// see `take_words`). Only that thread locks it (one batch after another).
    writer_resolves: Option<Arc<WriterIndex>>,
    /// Created with the first event, when the runtime has initialised the device and can name it.
    trace: OnceLock<Option<TraceWriter>>,
    pub counters: Counters,
}

impl Recorder {
    /// `staged`: whether events are sequenced by a thread of their own (one runs
    /// [`Recorder::sequence_staged`]); only in modes where nothing waits for the sequence.
    pub fn new(config: Config, staged: bool) -> Recorder {
        Recorder {
            pid: std::process::id(),
            clock: Clock::start(),
            next_id: AtomicU64::new(1),
            live: RwLock::new(LiveIndex::default()),
            kernels: RwLock::new(FxHashMap::default()),
            recent_kernels: std::array::from_fn(|_| AtomicPtr::new(std::ptr::null_mut())),
            kernel_count: AtomicU64::new(0),
            graphs: Graphs::default(),
            devices: Devices::new(),
            staging: (staged && config.mode.only_reports()).then(Staging::default),
            writer_resolves: (!staged
                && matches!(config.mode, Mode::Record | Mode::Cnmem | Mode::Pool)
                && config.trace.is_some())
            .then(Arc::default),
            trace: OnceLock::new(),
            counters: Counters::default(),
            config,
        }
    }

    /// The state of device `ordinal` (see `device::current_device`).
    fn device(&self, ordinal: u32) -> &DeviceState {
        self.devices.get(ordinal, &self.config, TRACE_BATCH)
    }

    // ---- observations (called after the real call succeeded, unless noted) ----
    // `device` is the ordinal of the device the call acted on (`device::current_device`).

    pub fn on_malloc(
        &self,
        device: u32,
        addr: u64,
        size: u64,
        kind: MemKind,
        stream: StreamHandle,
        plannable: bool,
    ) {
        let dev = self.device(device);
        let id = self.next_id.fetch_add(1, Relaxed);
        if let (Some(pool), true) = (&dev.pool, kind.is_device() && self.swapping()) {
            pool.lock().real_malloc(addr, size);
        }
        self.record_malloc(dev, id, addr, size, kind, stream, plannable);
    }

    /// Pool and cnmem modes: the address for a `cudaMalloc` of `size` from itermem's own
    /// allocator, with the id its allocation gets, or None (the real allocator serves it).
    /// Inlined: record mode answers at once, at every malloc.
    #[inline]
    pub fn served_malloc(&self, device: u32, size: u64) -> Option<(u64, AllocId)> {
        if !self.allocating() {
            return None;
        }
        self.serve_malloc(device, size)
    }

    /// [`Recorder::served_malloc`] in a mode with an allocator of itermem's.
    fn serve_malloc(&self, device: u32, size: u64) -> Option<(u64, AllocId)> {
        let dev = self.device(device);
        if let Some(cnmem) = &dev.cnmem {
            let addr = cnmem.lock().malloc(size)?;
            return Some((addr, self.next_id.fetch_add(1, Relaxed)));
        }
        let pool = dev.pool.as_ref()?;
        let index = dev.next_index.load(Relaxed);
        let id = self.next_id.fetch_add(1, Relaxed);
        let addr = pool.lock().malloc(index, size, id)?;
        Some((addr, id))
    }

    /// Swap mode, after the real allocator answered out of memory: the block from mapped host
    /// memory instead, as beyond the limit (the program's malloc must not fail where the limit
    /// says it fits), or None.
    pub fn host_backed_malloc(&self, device: u32, size: u64) -> Option<(u64, AllocId)> {
        let addr = self
            .device(device)
            .pool
            .as_ref()?
            .lock()
            .host_backed_malloc(size)?;
        Some((addr, self.next_id.fetch_add(1, Relaxed)))
    }

    /// Records an allocation served by [`Recorder::served_malloc`].
    pub fn on_served_malloc(
        &self,
        device: u32,
        id: AllocId,
        addr: u64,
        (size, kind, stream): (u64, MemKind, StreamHandle),
    ) {
        let dev = self.device(device);
        if let Some(pool) = &dev.pool {
            pool.lock().track(id);
        }
        self.record_malloc(dev, id, addr, size, kind, stream, true);
    }

    /// Whether itermem allocates for the program in this mode (pool, swap, cnmem): only then
    /// can an address be itermem's or a use need a fence.
    fn allocating(&self) -> bool {
        matches!(self.config.mode, Mode::Pool | Mode::Swap | Mode::Cnmem)
    }

    /// Whether this is swap mode (the device's bytes are counted against a limit).
    fn swapping(&self) -> bool {
        self.config.mode == Mode::Swap
    }

    /// Pool and swap modes, when the device is out of memory for an allocation itermem passed
    /// through: gives back the pool memory nothing uses; the bytes given back (0: retrying is
    /// pointless).
    pub fn release_unused_device_memory(&self, device: u32) -> u64 {
        self.device(device)
            .pool
            .as_ref()
            .map_or(0, |pool| pool.lock().release_unused())
    }

    /// After a device reset or a context destroyed (`cudaDeviceReset`,
    /// `cuDevicePrimaryCtxReset`, `cuCtxDestroy`): every live block the driver no longer knows
    /// is freed in the record, and an allocator of itermem's whose memory went too starts
    /// afresh (said once per device). A block the driver cannot be asked about (no context
    /// current after a destroy) stays live.
    pub fn after_context_gone(&self) {
        // The driver is asked without the live index's lock: other threads' hooks need it.
        let mut starts: Vec<u64> = self.live.read().starts().collect();
        // Freed in address order: the record does not depend on the index's layout.
        starts.sort_unstable();
        let gone: Vec<u64> = starts
            .into_iter()
            .filter(|&addr| allocation_gone(addr))
            .collect();
        log::info!("a context went: {} allocations with it", gone.len());
        for addr in gone {
            let taken = self.begin_free(addr);
            self.end_free(taken, true, 0);
        }
        for dev in self.devices.seen() {
            if dev.renew_lost_allocator(&self.config) {
                super::report(format_args!(
                    "device {}: a reset took itermem's memory with the program's; its {} \
                     starts afresh",
                    dev.ordinal, self.config.mode
                ));
            }
        }
    }

    /// At an internal error, before every call passes through: pools stop serving, every
    /// tensor that is away comes back, the pools nothing uses are released
    /// ([`PoolState::after_internal_error`]); returns how many tensors could not come back yet
    /// (a live block holds their range; each comes back at that block's free), Err if the
    /// program may use one of them before (it did not follow its plan so far).
    pub fn after_internal_error(&self) -> Result<usize, usize> {
        let (mut later, mut unsafe_later) = (0, 0);
        for dev in self.devices.seen() {
            if let Some(pool) = &dev.pool {
                // The event the program is at: the call that failed was recorded.
                let index = dev.next_index.load(Relaxed).saturating_sub(1);
                match pool.lock().after_internal_error(index) {
                    Ok(n) => later += n,
                    Err(n) => unsafe_later += n,
                }
            }
        }
        match unsafe_later {
            0 => Ok(later),
            n => Err(later + n),
        }
    }

    /// After an internal error, when the device refused a device allocation the program
    /// made: gives back the pool and cnmem memory nothing uses (on every device: the program's
    /// allocations go to the real allocator now); the bytes given back.
    pub fn release_after_error(&self) -> u64 {
        self.devices
            .seen()
            .map(|dev| {
                let pool = dev
                    .pool
                    .as_ref()
                    .map_or(0, |pool| pool.lock().release_unused());
                let cnmem = (dev.cnmem.as_ref()).map_or(0, |cnmem| cnmem.lock().release_unused());
                pool + cnmem
            })
            .sum()
    }

    /// After an internal error, a device allocation of `size` bytes the real allocator
    /// refused even then: mapped host memory from swap mode's executor on `device`, as
    /// before the error (its free is itermem's: [`Recorder::free_served_after_error`]), or
    /// None outside swap mode.
    pub fn host_backed_after_error(&self, device: u32, size: u64) -> Option<u64> {
        let dev = self.device(device);
        let addr = dev.pool.as_ref()?.lock().host_backed_after_error(size)?;
        let block = Block {
            id: self.next_id.fetch_add(1, Relaxed),
            size,
            kind: MemKind::Device,
            device,
            event_index: 0,
        };
        self.live.write().insert(addr, block);
        Some(addr)
    }

    /// Whether `addr` belongs to itermem's own allocator (its frees never reach the real one).
    /// Inlined: record mode answers at once, at every free.
    #[inline]
    pub fn serves(&self, addr: u64) -> bool {
        self.allocating() && self.owns(addr)
    }

    /// [`Recorder::serves`] in a mode with an allocator of itermem's.
    fn owns(&self, addr: u64) -> bool {
        self.devices.seen().any(|dev| {
            dev.pool.as_ref().is_some_and(|pool| pool.lock().owns(addr))
                || dev
                    .cnmem
                    .as_ref()
                    .is_some_and(|cnmem| cnmem.lock().owns(addr))
        })
    }

    /// Frees a block of itermem's own allocator, taken out of the live index by
    /// [`Recorder::begin_free`]; false (and the block put back) if `addr` is not the start of a
    /// live block.
    pub fn served_free(
        &self,
        addr: u64,
        taken: Option<(u64, Block)>,
        stream: StreamHandle,
    ) -> bool {
        let freed = self.release_served(addr, taken.as_ref(), false);
        self.end_free(taken, freed, stream);
        freed
    }

    /// After an internal error (nothing is recorded any more): frees a block of itermem's own
    /// allocator as [`Recorder::served_free`] would, without an event; false if no live block
    /// starts at `addr` (an interior pointer, a double free), as real CUDA would say.
    pub fn free_served_after_error(&self, addr: u64) -> bool {
        let taken = self.begin_free(addr);
        self.release_served(addr, taken.as_ref(), true)
    }

    /// Gives a block `taken` out of the live index back to itermem's allocator (`after_error`:
    /// the pool's way after an internal error).
    fn release_served(&self, addr: u64, taken: Option<&(u64, Block)>, after_error: bool) -> bool {
        let Some((_, block)) = taken else {
            return false;
        };
        let dev = self.device(block.device);
        match (&dev.pool, &dev.cnmem) {
            (Some(pool), _) if after_error => pool.lock().free_after_error(addr, block.id),
            (Some(pool), _) => pool.lock().free(addr, block.id),
            (_, Some(cnmem)) => cnmem.lock().free(addr),
            _ => false,
        }
    }

    /// Pool and swap modes: before work on `stream` of `device` that uses allocations `ids`, of
    /// which `read` (a copy's source) is only read (fences of earlier tenants of their ranges,
    /// on any device's pool: a kernel may read a peer's memory; in swap mode also timing,
    /// swap-ins, tensors that are away and writes after early copy-outs). What it prepared is
    /// finished by [`Recorder::after_use`].
    /// Inlined: at every call, and in record mode there is nothing to do.
    #[inline]
    pub fn before_use(
        &self,
        device: u32,
        ids: &[AllocId],
        read: Option<AllocId>,
        stream: StreamHandle,
    ) -> Prepared {
        if !self.allocating() || self.pools_idle() {
            return Prepared::default();
        }
        self.prepare_pools(device, ids, stream, |pool, next| {
            pool.prepare(ids, read, stream, next)
        })
    }

    /// Whether no device's pool has a block in use or waited for (and none swaps): a use then
    /// has nothing to note or wait for (cnmem mode has no pool). Inlined: at every launch.
    #[inline]
    fn pools_idle(&self) -> bool {
        !self.swapping() && (self.devices.seen()).all(|dev| dev.pool.is_none() || dev.pool_idle())
    }

    /// Pool, swap and cnmem modes: waits for the fences of `ids`'s ranges on every device's
    /// pool, after `prepare` ran on `device`'s pool if it swaps (given the index of the next
    /// event): what it returned, or nothing to finish.
    fn prepare_pools<T: Default>(
        &self,
        device: u32,
        ids: &[AllocId],
        stream: StreamHandle,
        prepare: impl FnOnce(&mut PoolState, u64) -> T,
    ) -> T {
        let mut prepared = T::default();
        let mut prepare = Some(prepare);
        let swapping = self.swapping();
        for dev in self.devices.seen() {
            let Some(pool) = &dev.pool else { continue };
            // Pool mode with no pool block in use: nothing to note or wait for, no lock.
            if !swapping && dev.pool_idle() {
                continue;
            }
            let mut pool = pool.lock();
            if dev.ordinal == device
                && pool.executor.is_some()
                && let Some(prepare) = prepare.take()
            {
                prepared = prepare(&mut pool, dev.next_index.load(Relaxed));
            }
            pool.before_use(ids.iter().copied(), stream);
        }
        prepared
    }

    /// After the call prepared by [`Recorder::before_use`]; `index` is its event when it
    /// succeeded. Inlined: most calls have nothing to finish.
    #[inline(always)]
    pub fn after_use(
        &self,
        device: u32,
        prepared: Prepared,
        stream: StreamHandle,
        index: Option<u64>,
    ) {
        if !prepared.is_empty() {
            self.finish_use(device, prepared, stream, index);
        }
    }

    /// [`Recorder::after_use`] of a call that prepared something.
    fn finish_use(
        &self,
        device: u32,
        prepared: Prepared,
        stream: StreamHandle,
        index: Option<u64>,
    ) {
        if let Some(pool) = &self.device(device).pool {
            let mut pool = pool.lock();
            if pool.executor.is_some() {
                pool.finish(prepared, stream, index);
            }
        }
    }

    /// [`Recorder::before_use`] for a graph launch on `stream` whose `nodes` events use
    /// allocations `ids`: every one of them is made resident, and stays until the graph's
    /// work on the stream is done (its finishes come after the launch), as for one call that
    /// uses them all; swap mode's plan is followed at each of the nodes' event indices, which
    /// come after the `allocations` events the launch records first (its alloc nodes').
    pub fn before_graph(
        &self,
        device: u32,
        ids: &[AllocId],
        stream: StreamHandle,
        allocations: u64,
        nodes: usize,
    ) -> Vec<Prepared> {
        if !self.allocating() {
            return Vec::new();
        }
        self.prepare_pools(device, ids, stream, |pool, next| {
            // The swap-ins planned before each node start before the launch; then the tensors
            // the graph uses are checked at once (as the last node's), so none is away when it
            // is enqueued.
            let first = next + allocations;
            let last = (nodes as u64).saturating_sub(1);
            (0..nodes as u64)
                .map(|k| pool.prepare(if k == last { ids } else { &[] }, None, stream, first + k))
                .collect()
        })
    }

    /// After a graph launch prepared by [`Recorder::before_graph`] (`recorded`: its events,
    /// when it succeeded): finishes each node's preparation, then follows the changes of
    /// period its events made.
    pub fn after_graph(
        &self,
        device: u32,
        prepared: Vec<Prepared>,
        stream: StreamHandle,
        recorded: GraphRecorded,
    ) {
        for (k, prepared) in prepared.into_iter().enumerate() {
            let index = recorded.first.map(|first| first + k as u64);
            self.after_use(device, prepared, stream, index);
        }
        let dev = self.device(device);
        for change in recorded.changes {
            self.period_changed(dev, change);
        }
    }

    /// Whether `addr` lies in device memory itermem serves from mapped host memory.
    pub fn host_backed(&self, addr: u64) -> bool {
        self.swapping()
            && self.devices.seen().any(|dev| {
                dev.pool
                    .as_ref()
                    .is_some_and(|pool| pool.lock().host_backed(addr))
            })
    }

    #[allow(clippy::too_many_arguments)]
    fn record_malloc(
        &self,
        dev: &DeviceState,
        id: AllocId,
        addr: u64,
        size: u64,
        kind: MemKind,
        stream: StreamHandle,
        plannable: bool,
    ) {
        let event = move || EventKind::Malloc {
            id,
            addr,
            size,
            kind,
            stream,
        };
        let mut block = Block {
            id,
            size,
            kind,
            device: dev.ordinal,
            event_index: 0,
        };
        if !kind.is_device() {
            self.emit_host(dev, event());
            self.live.write().insert(addr, block);
            return;
        }
        let (index, change) = self.emit(dev, event, None, size as i64, (0, None));
        block.event_index = index;
        self.live.write().insert(addr, block);
        if let (Some(pool), true) = (&dev.pool, plannable) {
            pool.lock().history.malloc(id, index, size);
        }
        self.period_changed(dev, change);
    }

    /// Whether a block starts at `addr`.
    pub fn is_live(&self, addr: u64) -> bool {
        self.live.read().find(addr, |_| None).is_some()
    }

    /// Before the real free: takes the block out of the live index (see the module doc).
    pub fn begin_free(&self, addr: u64) -> Option<(u64, Block)> {
        self.live.write().remove(addr).map(|block| (addr, block))
    }

    /// After the real free: records it, or puts the block back if the free failed.
    pub fn end_free(&self, taken: Option<(u64, Block)>, succeeded: bool, stream: StreamHandle) {
        let Some((addr, block)) = taken else { return };
        if !succeeded {
            self.live.write().insert(addr, block);
            return;
        }
        // The free belongs to the block's device, whichever thread frees it.
        let dev = self.device(block.device);
        let event = move || EventKind::Free {
            id: block.id,
            stream,
        };
        if !block.kind.is_device() {
            self.emit_host(dev, event());
            return;
        }
        if let (Some(pool), true) = (&dev.pool, self.swapping()) {
            pool.lock().real_free(addr);
        }
        let (index, change) = self.emit(
            dev,
            event,
            Some(block.event_index),
            -(block.size as i64),
            (0, None),
        );
        if let Some(pool) = &dev.pool {
            pool.lock().history.free(block.id, index);
        }
        self.period_changed(dev, change);
    }

    /// The allocation containing `addr` (None for memory itermem does not track).
    pub fn resolve(&self, addr: u64) -> Option<AllocId> {
        self.live
            .read()
            .find(addr, |a| self.base_of(a))
            .map(|b| b.id)
    }

    /// The start of the allocation containing interior address `addr`: a pool block's, or the
    /// driver's answer.
    fn base_of(&self, addr: u64) -> Option<u64> {
        let in_pool = self.devices.seen().find_map(|dev| {
            dev.pool
                .as_ref()
                .and_then(|pool| pool.lock().block_start(addr))
        });
        in_pool.or_else(|| range_start(addr))
    }

    #[allow(clippy::too_many_arguments)]
    pub fn on_memcpy(
        &self,
        device: u32,
        dst: Option<AllocId>,
        src: Option<AllocId>,
        bytes: u64,
        kind: CopyKind,
        stream: StreamHandle,
        asynchronous: bool,
    ) -> u64 {
        let event = EventKind::Memcpy {
            dst,
            src,
            bytes,
            kind,
            stream,
            asynchronous,
        };
        let dev = self.device(device);
        let (index, change) = self.emit(dev, move || event, None, 0, (0, None));
        self.period_changed(dev, change);
        index
    }

    pub fn on_memset(
        &self,
        device: u32,
        dst: Option<AllocId>,
        bytes: u64,
        stream: StreamHandle,
        asynchronous: bool,
    ) -> u64 {
        let event = EventKind::Memset {
            dst,
            bytes,
            stream,
            asynchronous,
        };
        let dev = self.device(device);
        let (index, change) = self.emit(dev, move || event, None, 0, (0, None));
        self.period_changed(dev, change);
        index
    }

    /// What a launch of `kernel` with arguments `args` touches (scanned before the launch, so
    /// pool mode can order it after the earlier tenants of those blocks).
    ///
    /// # Safety
    /// `args` holds the kernel's arguments as the launch call requires: one valid pointer per
    /// parameter, or a packed buffer of `len` readable bytes.
    pub unsafe fn launch_accesses(&self, kernel: KernelRef, args: LaunchArgs) -> LaunchAccesses {
        let kernel = self.kernel(kernel);
        let mut accesses = LaunchAccesses {
            kernel,
            touched: Touched::new(),
            late: None,
            words_scanned: 0,
        };
        let Some(words) = &kernel.pointer_words else {
            self.counters.launches_without_layout.fetch_add(1, Relaxed);
            return accesses;
        };
        let late = ArgWords { words, args };
        match args {
            LaunchArgs::Pointers(args) if !args.is_null() => {
                // SAFETY: the caller's `args` hold one valid pointer per parameter.
                let values = words.iter().map(|word| unsafe { pointer_arg(args, word) });
                self.take_words(&mut accesses, values, late);
            }
            LaunchArgs::Packed { buffer, len } if !buffer.is_null() => {
                // SAFETY: the caller's buffer holds `len` readable bytes.
                let values = words
                    .iter()
                    .filter_map(|word| unsafe { packed_arg(buffer, len, word) });
                self.take_words(&mut accesses, values, late);
            }
            _ => {}
        }
        accesses
    }

    /// Resolves a launch's pointer `words` now, or keeps them (`late`: the same words, left in
    /// the arguments) to be resolved late; neither where nobody asks (record and cnmem modes
    /// without a trace).
    fn take_words(
        &self,
        accesses: &mut LaunchAccesses,
        words: impl Iterator<Item = u64>,
        late: ArgWords,
    ) {
        accesses.words_scanned = accesses.kernel.pointer_words.as_ref().map_or(0, Vec::len) as u64;
        // What the call itself needs: swap mode swaps in what a launch touches, pool mode
        // notes and fences the pool blocks it uses (none while no pool block is in use).
        let needed_now = match self.config.mode {
            Mode::Swap => true,
            Mode::Pool => !self.pools_idle(),
            _ => false,
        };
        if needed_now {
            accesses.touched = self.scan(words);
        } else if self.config.trace.is_none() {
            // Nobody asks.
        } else if self.staging.is_some()
            // The writer's thread sees each device's batches in order, but not the devices'
            // events in one order: with blocks of several devices, resolved here.
            || (self.writer_resolves.is_some() && self.devices.at_most_one_seen())
        {
            accesses.late = Some(late);
        } else {
            accesses.touched = self.scan(words);
        }
    }

    /// The live allocations the pointer values `words` point into (read from the arguments by
    /// one reader per way of passing them, so the loop has no branch on it).
    fn scan(&self, words: impl Iterator<Item = u64>) -> Touched {
        let mut touched = Touched::new();
        let live = self.live.read();
        for word in words {
            if let Some(block) = live.find(word, |a| self.base_of(a))
                && !touched.contains(&block.id)
            {
                touched.push(block.id);
            }
        }
        touched
    }

    /// A kernel node's work: the values of its kernel's pointer words, read now, as the driver
    /// copies a node's arguments when the node is made (see `graphs.rs`).
    ///
    /// # Safety
    /// As [`Recorder::launch_accesses`].
    pub unsafe fn kernel_node(&self, kernel: KernelRef, args: LaunchArgs) -> NodeWork {
        let kernel = self.kernel(kernel);
        let words = match (&kernel.pointer_words, args) {
            (Some(words), LaunchArgs::Pointers(args)) if !args.is_null() => words
                .iter()
                // SAFETY: the caller's `args` hold one valid pointer per parameter.
                .map(|word| unsafe { pointer_arg(args, word) })
                .collect(),
            (Some(words), LaunchArgs::Packed { buffer, len }) if !buffer.is_null() => words
                .iter()
                // SAFETY: the caller's buffer holds `len` readable bytes.
                .filter_map(|word| unsafe { packed_arg(buffer, len, word) })
                .collect(),
            _ => Vec::new(),
        };
        NodeWork::Kernel { kernel, words }
    }

    /// The events a launch of a graph with `nodes` on `stream` makes, resolved against the
    /// allocations live now, each with the pointer words its scan read; and every allocation
    /// they touch.
    pub fn graph_events(&self, nodes: &[Node], stream: StreamHandle) -> GraphEvents {
        let mut events = Vec::with_capacity(nodes.len());
        let mut touched = Touched::new();
        let mut touch = |id: Option<AllocId>| {
            if let Some(id) = id
                && !touched.contains(&id)
            {
                touched.push(id);
            }
        };
        for node in nodes.iter().filter(|n| !n.work.is_memory()) {
            let (kind, words) = match &node.work {
                NodeWork::Kernel { kernel, words } => {
                    let ids = self.scan(words.iter().copied());
                    ids.iter().for_each(|&id| touch(Some(id)));
                    let kind = EventKind::Launch {
                        kernel: kernel.id,
                        stream,
                        layout_known: kernel.pointer_words.is_some(),
                        touched: ids,
                    };
                    (kind, words.len() as u64)
                }
                &NodeWork::Copy {
                    dst,
                    src,
                    bytes,
                    kind,
                } => {
                    let (dst, src) = (self.resolve(dst), self.resolve(src));
                    touch(dst);
                    touch(src);
                    let kind = EventKind::Memcpy {
                        dst,
                        src,
                        bytes,
                        kind,
                        stream,
                        asynchronous: true,
                    };
                    (kind, 0)
                }
                &NodeWork::Set { dst, bytes } => {
                    let dst = self.resolve(dst);
                    touch(dst);
                    let kind = EventKind::Memset {
                        dst,
                        bytes,
                        stream,
                        asynchronous: true,
                    };
                    (kind, 0)
                }
                NodeWork::Alloc { .. } | NodeWork::Free { .. } => continue,
            };
            events.push((kind, words));
        }
        GraphEvents { events, touched }
    }

    /// Records a graph launch that succeeded: its marker, then its nodes' events as if
    /// launched one by one. Another thread's events may fall between them: the marker counts
    /// the graph's. What the events change is followed by [`Recorder::after_graph`], once the
    /// launch is finished: a timing iteration that ends inside the launch must not be handed
    /// to the planner before the timing of its last nodes is recorded.
    pub fn on_graph_launch(
        &self,
        device: u32,
        exec: usize,
        stream: StreamHandle,
        launch: GraphEvents,
    ) -> GraphRecorded {
        let dev = self.device(device);
        let marker = EventKind::GraphLaunch {
            exec: exec as u64,
            stream,
            nodes: launch.events.len() as u64,
        };
        let nodes = launch.events.len() as u64;
        self.emit_unindexed(dev, marker, |seq| {
            let next = seq.next_index;
            if let Some(capture) = &mut seq.capture {
                // Its events follow unless another thread's come between (then the planner
                // keeps a little more resident than needed).
                capture.graphs.push((next, nodes));
            }
        });
        let mut recorded = GraphRecorded::default();
        for (kind, words) in launch.events {
            let (index, change) = self.emit(dev, move || kind, None, 0, (words, None));
            recorded.first.get_or_insert(index);
            recorded.changes.push(change);
        }
        recorded
    }

    /// Records a launch that succeeded; returns its event index. The blocks it touched are
    /// taken out of `accesses` into the event.
    ///
    /// # Safety
    /// `accesses` were found by [`Recorder::launch_accesses`] in the launch call still in
    /// progress: the pointer words left in its arguments are read here (see [`ArgWords`]).
    pub unsafe fn on_launch(
        &self,
        device: u32,
        accesses: &mut LaunchAccesses,
        stream: StreamHandle,
    ) -> u64 {
        let kernel = accesses.kernel;
        let words = (accesses.words_scanned, accesses.late.as_ref());
        // Taken where the event is made: the closure holds references only, so handing it on
        // copies no list (`Recorder::sequence`).
        let touched = &mut accesses.touched;
        let event = || EventKind::Launch {
            kernel: kernel.id,
            stream,
            layout_known: kernel.pointer_words.is_some(),
            touched: std::mem::take(touched),
        };
        let dev = self.device(device);
        let (index, change) = self.emit(dev, event, None, 0, words);
        self.period_changed(dev, change);
        index
    }

    /// The kernel record of `func`, learning its layout (and logging its name) the first time.
    fn kernel(&self, kernel: KernelRef) -> &'static Kernel {
        let key = match kernel {
            KernelRef::Host(func) => (false, func as usize),
            KernelRef::Function(function) => (true, function),
        };
        // Threads launching at once do not all take the map's lock (a shared cache line).
        let slot = &self.recent_kernels[(key.1 >> 4 ^ key.1 >> 12) % KERNEL_CACHE];
        // SAFETY: null or an entry of `kernels`, leaked (never freed nor changed), published
        // by the `Release` store below after it was made.
        if let Some(known) = unsafe { slot.load(Acquire).as_ref() }
            && known.key == key
        {
            return known.kernel;
        }
        let known = self.kernel_record(key, kernel);
        slot.store((known as *const KnownKernel).cast_mut(), Release);
        known.kernel
    }

    /// [`Recorder::kernel`] from the process's map: the entry of `key`.
    fn kernel_record(&self, key: (bool, usize), kernel: KernelRef) -> &'static KnownKernel {
        if let Some(known) = self.kernels.read().get(&key) {
            return known;
        }
        let KernelLayout {
            name,
            function,
            params,
        } = match kernel {
            KernelRef::Host(func) => kernel_layout(func),
            KernelRef::Function(function) => function_layout(function),
        };
        let mut kernels = self.kernels.write();
        if let Some(known) = kernels.get(&key) {
            return known; // entered by another thread meanwhile
        }
        let entry = |key, kernel| -> &'static KnownKernel {
            Box::leak(Box::new(KnownKernel { key, kernel }))
        };
        if let Some(known) = function.and_then(|f| kernels.get(&(true, f))) {
            let known = entry(key, known.kernel);
            kernels.insert(key, known);
            return known;
        }
        let kernel: &'static Kernel = Box::leak(Box::new(Kernel {
            id: self.kernel_count.fetch_add(1, Relaxed) as KernelId,
            pointer_words: params.map(|params| pointer_words(&params)),
        }));
        let known = entry(key, kernel);
        kernels.insert(key, known);
        if let Some(function) = function
            && (true, function) != key
        {
            kernels.insert((true, function), entry((true, function), kernel));
        }
        let name = if name.is_empty() {
            format!("kernel@{key:x?}")
        } else {
            name
        };
        // Named under the kernels lock, so the name precedes every launch of the kernel.
        self.emit_metadata(EventKind::KernelName {
            kernel: kernel.id,
            name,
        });
        known
    }

    // ---- sequencing ----

    /// Assigns an access event (device memory's: see `analysis::Numbering`) its index and
    /// time, updates live bytes, feeds the detector (with the same tokens `itermem trace info`
    /// computes offline) and the trace; returns the index. `malloc_index` is the index of the
    /// Malloc event of a Free's block; `words`: how many pointer words a launch's arguments
    /// were scanned for, and those to resolve late (`late.rs`), read from the arguments of the
    /// launch call in progress (see [`ArgWords`]: only [`Recorder::on_launch`] passes any).
    ///
    /// With staging, the event is only handed to the sequencing thread: the key returned
    /// orders it, and the detector's answer is not known yet (nothing waits for it then).
    ///
    /// `kind` makes the event, under the sequencer and after the clock is read: an event made
    /// by the hook before them lived across those calls and was copied on its way to the
    /// trace batch several times (about 30 instructions per event on the calling thread).
    #[inline(always)]
    fn emit(
        &self,
        dev: &DeviceState,
        kind: impl FnOnce() -> EventKind,
        malloc_index: Option<u64>,
        live_delta: i64,
        (words, late): (u64, Option<&ArgWords>),
    ) -> (u64, Answer) {
        if let Some(staging) = &self.staging {
            let entry = Entry::new(dev.ordinal, true, kind(), live_delta, words);
            return (self.stage(staging, dev, entry, late), None);
        }
        let mut seq = dev.sequencer.lock();
        let time_ns = self.clock.elapsed_ns();
        let sequenced = Sequenced {
            malloc_index,
            live_delta,
            words,
            time_ns,
        };
        self.sequence(dev, &mut seq, kind, sequenced, late)
    }

    /// Hands `entry` of `dev` to the sequencing thread; its key. The trace is opened here, on
    /// the program's thread, where the device can be asked its name.
    #[inline(always)]
    fn stage(
        &self,
        staging: &Staging,
        dev: &DeviceState,
        entry: Entry,
        late: Option<&ArgWords>,
    ) -> u64 {
        self.trace();
        let late = |words: &mut Vec<u64>| {
            if let Some(late) = late {
                // SAFETY: the launch call that made them is in progress (`emit`'s contract).
                unsafe { late.append_to(words) };
            }
        };
        staging.stage(&dev.next_key, || self.clock.elapsed_ns(), entry, late)
    }

    /// [`Recorder::emit`] under the device's sequencer, on the calling thread or the
    /// sequencing thread. Inlined: at every event.
    ///
    /// `kind` makes the event where it is kept, in the trace's batch (or here without a
    /// trace), and everything else reads it there: handed on by value from `emit` to the batch,
    /// it was copied six times on the stack (`docs/BENCHMARKS.md`, hot path).
    #[inline(always)]
    fn sequence(
        &self,
        dev: &DeviceState,
        seq: &mut Sequencer,
        kind: impl FnOnce() -> EventKind,
        sequenced: Sequenced,
        late: Option<&ArgWords>,
    ) -> (u64, Answer) {
        let trace = self.trace();
        let placed = self.place(trace, dev.ordinal, seq, kind, sequenced.time_ns, late);
        let Sequencer {
            pending,
            tally,
            next_index,
            live_bytes,
            peak_live_bytes,
            detection,
            swap_live,
            capture: captured,
            ..
        } = &mut *seq;
        let kind = match &placed {
            Placed::InBatch(at) => &pending[*at].kind,
            Placed::Here(kind) => kind,
        };
        tally.count(kind, false, sequenced.words);
        let index = *next_index;
        let token = analysis::token(kind, index, sequenced.malloc_index).unwrap_or_default();
        *next_index += 1;
        dev.next_index.store(*next_index, Relaxed);
        *live_bytes = live_bytes.saturating_add_signed(sequenced.live_delta);
        *peak_live_bytes = (*peak_live_bytes).max(*live_bytes);
        if swap_live.is_some() {
            capture(dev, captured, swap_live, index, kind);
        }
        let change = match detection.push(dev.ordinal, token, *live_bytes) {
            Change::Unchanged => None,
            change => Some(Box::new(change)),
        };
        self.hand_over_if_due(trace, dev.ordinal, seq);
        (index, change)
    }

    /// The sequencing thread's loop (record and cnmem modes, `staging.rs`): takes each
    /// device's events in order, resolves launches and frees against the blocks live at
    /// them, and sequences them as [`Recorder::emit`] does on the program's thread otherwise.
    /// Returns at once without staging.
    pub fn sequence_staged(&self) {
        let Some(staging) = &self.staging else {
            return;
        };
        let mut addresses = Addresses::default();
        staging.run(|entry, late| {
            let mut kind = entry.kind;
            if let EventKind::Launch { touched, .. } = &mut kind
                && !late.is_empty()
            {
                *touched = addresses.touched(late);
            }
            // (`record` keeps the device's times in order: `Sequencer::last_time_ns`.)
            let time_ns = entry.time_ns;
            let dev = self.device(entry.device);
            let mut seq = dev.sequencer.lock();
            // (A free's token is its block's lifetime: the index of its malloc is asked first.)
            let freed = match kind {
                EventKind::Free { id, .. } => addresses.malloc_index(id),
                _ => None,
            };
            addresses.follow(&kind, seq.next_index);
            if !entry.indexed {
                seq.tally.count(&kind, true, 0);
                self.record(dev.ordinal, &mut seq, kind, time_ns);
                return;
            }
            let sequenced = Sequenced {
                malloc_index: freed,
                live_delta: entry.live_delta,
                words: entry.words,
                time_ns,
            };
            self.sequence(dev, &mut seq, move || kind, sequenced, None);
        });
    }

    /// Pool mode follows the detector: a new period is planned, a lost one stops serving. Swap
    /// mode times the next iteration first, and plans once it is captured. Inlined: at every
    /// event, and in record mode there is nothing to do.
    #[inline(always)]
    fn period_changed(&self, dev: &DeviceState, change: Answer) {
        if let Some(pool) = &dev.pool
            && (change.is_some() || dev.capture_done.load(Relaxed))
        {
            Self::pool_follows(
                dev,
                pool,
                change.map_or(Change::Unchanged, |change| *change),
            );
        }
    }

    /// [`Recorder::period_changed`] with a pool.
    ///
    /// Locks, here and everywhere: the pool before the sequencer (a period found in swap mode
    /// starts the capture under both), the sequencer before the capture's slot (`capture`),
    /// and never the slot while waiting for the pool: held in the condition of an `if let`,
    /// its guard would live through the block, and three threads (sequencer → slot, slot →
    /// pool, pool → sequencer) could wait for each other for ever.
    fn pool_follows(dev: &DeviceState, pool: &Mutex<PoolState>, change: Change) {
        if dev.capture_done.swap(false, Relaxed) {
            let captured = dev.captured.lock().take();
            if let Some(capture) = captured {
                pool.lock().plan_swaps(capture);
            }
        }
        match change {
            Change::Unchanged => {}
            Change::Lost(_) => pool.lock().retire(dev.next_index.load(Relaxed)),
            Change::Detected(period)
            | Change::Changed {
                detected: period, ..
            } => {
                let mut pool = pool.lock();
                let Some(start) = period.boundary.checked_sub(period.length) else {
                    return;
                };
                // Swap mode plans a period of launches alone too: its blocks (a caching
                // allocator's segments) swap between their uses.
                let launches_alone =
                    pool.executor.is_some() && pool.history.allocation_free(start, period.length);
                if !pool.history.balanced(start, period.length) && !launches_alone {
                    log::info!(
                        "period of {} events left alone: a loop within the iteration (it does \
                         not free the blocks it allocates)",
                        period.length
                    );
                    return;
                }
                if pool.executor.is_some() {
                    let next = dev.next_index.load(Relaxed);
                    if let Some((start, length)) =
                        pool.begin_timing(period.boundary, period.length, next)
                    {
                        dev.sequencer.lock().capture = Some(Capture {
                            start,
                            length,
                            events: Vec::new(),
                            synthetic: 0,
                            graphs: Vec::new(),
                        });
                    }
                    return;
                }
                // The complete iteration (or two) just before the boundary; its structure is
                // the one every later iteration repeats.
                pool.plan_iteration(period.boundary, period.length);
            }
        }
    }

    /// A pinned host malloc or free of `dev`'s sequence: counted and traced, but no access
    /// event (no index, no token: see `analysis::Numbering`), so the device's events do not
    /// move with the moments a framework's pinned-memory cache allocates.
    fn emit_host(&self, dev: &DeviceState, kind: EventKind) {
        self.emit_unindexed(dev, kind, |_| {});
    }

    /// An event of `dev`'s sequence that takes no index (a pinned host malloc or free, a graph
    /// launch's marker): staged, or counted and traced under the device's sequencer, where
    /// `note` sees it first.
    fn emit_unindexed(
        &self,
        dev: &DeviceState,
        kind: EventKind,
        note: impl FnOnce(&mut Sequencer),
    ) {
        if let Some(staging) = &self.staging {
            let entry = Entry::new(dev.ordinal, false, kind, 0, 0);
            self.stage(staging, dev, entry, None);
            return;
        }
        let mut seq = dev.sequencer.lock();
        note(&mut seq);
        seq.tally.count(&kind, true, 0);
        let time_ns = self.clock.elapsed_ns();
        self.record(dev.ordinal, &mut seq, kind, time_ns);
    }

    /// An event that is not part of the access stream (no index, no token), handed to the
    /// writer at once: before any event of any device that could refer to it.
    fn emit_metadata(&self, kind: EventKind) {
        if let Some(trace) = self.trace() {
            let time_ns = self.clock.elapsed_ns();
            trace.record_batch(vec![Event::new(time_ns, kind)]);
        }
    }

    /// Queues an event that takes no index for the trace (see [`Recorder::place`]) and hands
    /// a batch that is due to the writer.
    fn record(&self, device: u32, seq: &mut Sequencer, kind: EventKind, time_ns: u64) {
        let trace = self.trace();
        self.place(trace, device, seq, move || kind, time_ns, None);
        self.hand_over_if_due(trace, device, seq);
    }

    /// Makes the event of `device` that `kind` makes in the batch of `trace` (the caller's
    /// [`Recorder::trace`], looked up once an event), in sequence order (the caller holds the
    /// device's sequencer), or here when no trace is written; `late`: a launch's pointer
    /// words, for the writer's thread to resolve (see `Recorder::writer_resolves`), read here
    /// from the arguments of the launch call in progress (`emit`'s contract).
    #[inline(always)]
    fn place(
        &self,
        trace: Option<&TraceWriter>,
        device: u32,
        seq: &mut Sequencer,
        kind: impl FnOnce() -> EventKind,
        time_ns: u64,
        late: Option<&ArgWords>,
    ) -> Placed {
        if trace.is_none() {
            return Placed::Here(kind());
        }
        let time_ns = time_ns.max(seq.last_time_ns);
        seq.last_time_ns = time_ns;
        if seq.pending.is_empty() {
            seq.pending_since_ns = time_ns;
        }
        if let Some(late) = late {
            let start = seq.pending_words.len();
            // SAFETY: the launch call that made them is in progress (`emit`'s contract).
            unsafe { late.append_to(&mut seq.pending_words) };
            let end = seq.pending_words.len();
            if end > start {
                seq.pending_late
                    .push((seq.pending.len() as u32, end as u32));
            }
        }
        let at = seq.pending.len();
        seq.pending.push(Event {
            time_ns,
            device,
            kind: kind(),
        });
        Placed::InBatch(at)
    }

    /// Hands `device`'s batch to the writer when it is full, or old enough that a crash now
    /// would lose more than a moment; without a trace, runs the detector's tokens kept.
    ///
    /// Inlined into each event's hook, the hand-over itself kept out of line: called, it
    /// cost every event about 35 instructions of passing the event and saving registers.
    #[inline(always)]
    fn hand_over_if_due(&self, trace: Option<&TraceWriter>, device: u32, seq: &mut Sequencer) {
        let Some(trace) = trace else {
            seq.detection.push_kept_here(device);
            return;
        };
        if seq.pending.len() >= TRACE_BATCH
            || seq.last_time_ns.saturating_sub(seq.pending_since_ns) >= TRACE_BATCH_AGE_NS
        {
            self.hand_over_pending(trace, seq, device);
        }
    }

    /// [`Recorder::hand_over_if_due`]'s hand-over of a batch that is due: once per batch.
    #[cold]
    #[inline(never)]
    fn hand_over_pending(&self, trace: &TraceWriter, seq: &mut Sequencer, device: u32) {
        // A batch the writer has written and handed back, or a new one.
        let empty = trace
            .spare_batch()
            .unwrap_or_else(|| Vec::with_capacity(TRACE_BATCH));
        let batch = std::mem::replace(&mut seq.pending, empty);
        let resolves = self.writer_resolves.as_ref();
        hand_over(trace, batch, seq, device, resolves);
    }

    fn trace(&self) -> Option<&TraceWriter> {
        self.trace
            .get_or_init(|| {
                let path = self.config.trace.as_ref()?;
                let (name, memory) = super::real::device_identity();
                let mut header = TraceHeader::for_this_process(name, memory);
                let since_start = self.clock.elapsed_ns();
                header.start_unix_ns = header.start_unix_ns.saturating_sub(since_start);
                match TraceWriter::with_capacity(path, header, TRACE_BATCHES_IN_FLIGHT) {
                    Ok(writer) => Some(writer),
                    Err(err) => {
                        super::report(format_args!(
                            "cannot write the trace to {}: {err}",
                            path.display()
                        ));
                        None
                    }
                }
            })
            .as_ref()
    }

    /// Writes everything recorded so far to the trace file; with `close`, also the end record,
    /// after which later events are counted as lost (the process is ending). With staging,
    /// first waits for the sequencing thread to take every event staged so far.
    pub fn flush(&self, close: bool) {
        if let Some(staging) = &self.staging {
            let mut ends = Vec::new();
            for dev in self.devices.seen() {
                let ordinal = dev.ordinal as usize;
                ends.resize(ends.len().max(ordinal + 1), 0);
                ends[ordinal] = dev.next_key.load(Relaxed);
            }
            staging.sync(ends, STAGED_SYNC_TIMEOUT);
        }
        if let Some(Some(trace)) = self.trace.get() {
            for dev in self.devices.seen() {
                let mut seq = dev.sequencer.lock();
                let pending = std::mem::take(&mut seq.pending);
                let resolves = self.writer_resolves.as_ref();
                hand_over(trace, pending, &mut seq, dev.ordinal, resolves);
            }
            if close {
                trace.close();
            } else {
                trace.flush();
            }
        }
    }

    /// The numbers of the statistics file.
    pub fn summary(&self) -> Summary {
        let c = &self.counters;
        let (mut events, mut host_events, mut words) =
            (EventCounts::default(), HostCounts::default(), 0);
        for dev in self.devices.seen() {
            let seq = dev.sequencer.lock();
            let (n, h) = (seq.tally.counts, seq.tally.host);
            events.malloc += n.malloc;
            events.free += n.free;
            events.launch += n.launch;
            events.memcpy += n.memcpy;
            events.memset += n.memset;
            host_events.malloc += h.malloc;
            host_events.free += h.free;
            words += seq.tally.pointer_words_scanned;
        }
        let devices: Vec<DeviceSummary> = self.devices.seen().map(device_summary).collect();
        Summary {
            events,
            host_events,
            first_device: devices.first().cloned().unwrap_or_default(),
            kernels: self.kernel_count.load(Relaxed),
            hooked_calls: c.calls.total(),
            launches_without_layout: c.launches_without_layout.load(Relaxed),
            pointer_words_scanned: words,
            devices,
        }
    }
}

/// The trace writer's thread's index of the live blocks (see `Recorder::writer_resolves`), and
/// the vectors of launch words it has resolved, emptied, for the sequencers to fill again (a
/// buffer allocated on one thread and freed on another costs the C allocator more than the
/// words in it).
#[derive(Default)]
struct WriterIndex {
    addresses: Mutex<Addresses>,
    spares: Mutex<Vec<LateWords>>,
}

/// A batch's launches to resolve (place in the batch, end of its words) and their words.
type LateWords = (Vec<(u32, u32)>, Vec<u64>);

/// What [`Recorder::sequence`] needs of an event besides its kind.
struct Sequenced {
    /// The index of a Free's block's Malloc.
    malloc_index: Option<u64>,
    live_delta: i64,
    /// Pointer words a launch's arguments were scanned for.
    words: u64,
    time_ns: u64,
}

/// Where [`Recorder::place`] made an event: at this place of the device's trace batch, or here
/// (no trace is written).
enum Placed {
    InBatch(usize),
    Here(EventKind),
}

/// Hands `batch` of `device`'s events to the trace writer, with the detector's work on the
/// tokens kept since the last batch (record and cnmem modes: `device::Detection`) and, where
/// the writer's thread resolves launches (`resolves`), their pointer words.
fn hand_over(
    trace: &TraceWriter,
    batch: Vec<Event>,
    seq: &mut Sequencer,
    device: u32,
    resolves: Option<&Arc<WriterIndex>>,
) {
    let after = seq
        .detection
        .take_kept(device)
        .map(|push| -> AfterBatch { Box::new(push) });
    if batch.is_empty() && after.is_none() {
        return;
    }
    let before = resolves.map(|index| resolving(index, seq));
    trace.record_batch_with(batch, before, after);
}

/// The work that resolves the launches of `seq`'s batch on the trace writer's thread (see
/// `Recorder::writer_resolves`), taking their pointer words along.
fn resolving(index: &Arc<WriterIndex>, seq: &mut Sequencer) -> BeforeBatch {
    // Every batch goes through the index, launches or not: it follows the mallocs and frees.
    // Each batch takes its vectors along, and the writer's thread gives them back emptied.
    let (mut late, mut words) = index.spares.lock().pop().unwrap_or_default();
    // Room for a batch of launches of up to 8 pointer words each, made here, once per batch:
    // a vector that started smaller (a spare from a batch of mallocs and frees, or a new one
    // sized after one) grew launch by launch on the program's thread, under the sequencer,
    // about 10 reallocations a batch (in `hook_bench`'s launches, 45 in the first batches,
    // 132 instructions per launch over 10,000).
    late.reserve(TRACE_BATCH);
    words.reserve(TRACE_BATCH * 8);
    let late = std::mem::replace(&mut seq.pending_late, late);
    let words = std::mem::replace(&mut seq.pending_words, words);
    let index = Arc::clone(index);
    Box::new(move |events| {
        resolve_launches(&mut index.addresses.lock(), events, &late, &words);
        let (mut late, mut words) = (late, words);
        late.clear();
        words.clear();
        let mut spares = index.spares.lock();
        if spares.len() < 4 {
            spares.push((late, words));
        }
    })
}

/// Fills in the blocks each launch of `events` named in `late` touches (its place in `events`
/// and the end of its pointer words in `words`) from the blocks live at it, following the
/// batch's mallocs and frees: what [`Recorder::launch_accesses`] finds at the launch when it
/// resolves there, as events of one device keep their order.
fn resolve_launches(
    addresses: &mut Addresses,
    events: &mut [Event],
    late: &[(u32, u32)],
    words: &[u64],
) {
    let mut late = late.iter().peekable();
    let mut start = 0;
    for (at, event) in events.iter_mut().enumerate() {
        if let Some(&&(place, end)) = late.peek()
            && place as usize == at
        {
            late.next();
            if let EventKind::Launch { touched, .. } = &mut event.kind
                && let Some(words) = words.get(start..end as usize)
            {
                *touched = addresses.touched(words);
            }
            start = end as usize;
        }
        addresses.follow(&event.kind, 0);
    }
}

fn device_summary(dev: &DeviceState) -> DeviceSummary {
    // The sequencer is let go before the pool is taken (the locks' order: `pool_follows`).
    let (events_total, peak_live_bytes, live_bytes_at_exit, (period, periods_found)) = {
        let seq = dev.sequencer.lock();
        let found = seq.detection.found();
        (seq.next_index, seq.peak_live_bytes, seq.live_bytes, found)
    };
    let pool = dev.pool.as_ref().map(|pool| pool.lock());
    DeviceSummary {
        device: dev.ordinal,
        events_total,
        period_events: period.map(|p| p.length),
        boundary_event: period.map(|p| p.boundary),
        detected_at_event: period.map(|p| p.detected_at),
        iterations: period.map_or(0, |p| p.iterations_seen),
        periods_found,
        peak_live_bytes,
        live_bytes_at_exit,
        pool: pool.as_ref().map(|pool| pool.stats.clone()),
        cnmem: dev.cnmem.as_ref().map(|cnmem| cnmem.lock().stats.clone()),
        swap: pool.and_then(|pool| pool.executor.as_ref().map(|e| e.stats.clone())),
    }
}

/// Swap mode, under the sequencer: follows the live device allocations and captures the
/// events of the timing iteration (preceded by the allocations live at its start).
fn capture(
    dev: &DeviceState,
    captured: &mut Option<Capture>,
    swap_live: &mut Option<FxHashMap<AllocId, u64>>,
    index: u64,
    kind: &EventKind,
) {
    if let Some(capture) = captured {
        let end = capture.start + capture.length;
        if index >= end {
            // Handed over at the next iteration's first event: the last op of the captured
            // one has had its timing recorded by then.
            let done = captured.take();
            if done
                .as_ref()
                .is_some_and(|c| c.events.len() as u64 == c.synthetic + c.length)
            {
                *dev.captured.lock() = done;
                dev.capture_done.store(true, Relaxed);
            }
        } else if index == capture.start {
            let mut live: Vec<(AllocId, u64)> = swap_live
                .iter()
                .flatten()
                .map(|(&id, &size)| (id, size))
                .collect();
            live.sort_unstable();
            capture.synthetic = live.len() as u64;
            capture.events = live
                .into_iter()
                .map(|(id, size)| {
                    let kind = EventKind::Malloc {
                        id,
                        addr: 0,
                        size,
                        kind: MemKind::Device,
                        stream: 0,
                    };
                    Event::new(0, kind)
                })
                .collect();
            capture.events.push(Event::new(0, kind.clone()));
        } else if index > capture.start
            && capture.events.len() as u64 == capture.synthetic + (index - capture.start)
        {
            capture.events.push(Event::new(0, kind.clone()));
        }
    }
    let Some(live) = swap_live else {
        return;
    };
    match kind {
        EventKind::Malloc { id, size, .. } => {
            live.insert(*id, *size);
        }
        EventKind::Free { id, .. } => {
            live.remove(id);
        }
        _ => {}
    }
}

/// Word positions to test as pointers: every 8-byte-aligned word of the argument buffer that
/// lies wholly inside one parameter.
fn pointer_words(params: &[(usize, usize)]) -> Vec<PointerWord> {
    let mut words = Vec::new();
    for (param, &(offset, size)) in params.iter().enumerate() {
        let mut packed = offset.div_ceil(8) * 8;
        while packed + 8 <= offset + size {
            words.push(PointerWord {
                param,
                within: packed - offset,
                packed,
            });
            packed += 8;
        }
    }
    words
}

#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    /// Device memory events by kind, of every device (pinned host allocations are in
    /// `host_events`).
    pub events: EventCounts,
    pub host_events: HostCounts,
    /// The first device that had events (the only one of most programs), at the top level;
    /// every device is in `devices`.
    #[serde(flatten)]
    pub first_device: DeviceSummary,
    pub kernels: u64,
    /// Calls that went through itermem's hooks (all hooked functions, stream calls included).
    pub hooked_calls: u64,
    pub launches_without_layout: u64,
    pub pointer_words_scanned: u64,
    /// Every device that had events, by ordinal.
    pub devices: Vec<DeviceSummary>,
}

/// What one device's events showed: each device has its own iteration, pool and peak.
#[derive(Clone, Debug, Default, Serialize)]
pub struct DeviceSummary {
    pub device: u32,
    /// Events in the device's access stream (kernel names excluded).
    pub events_total: u64,
    /// The training iteration, in events: of the periods found, the one that held over the
    /// most events (warm-up, evaluation passes and teardown excluded).
    pub period_events: Option<u64>,
    /// First event of an iteration (the least live memory within one period).
    pub boundary_event: Option<u64>,
    /// Event at which that period was first confirmed.
    pub detected_at_event: Option<u64>,
    /// Complete iterations of that period.
    pub iterations: u64,
    /// How many times a period was found (more than once: the pattern changed).
    pub periods_found: u64,
    pub peak_live_bytes: u64,
    pub live_bytes_at_exit: u64,
    /// Pool mode's counters (absent in other modes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pool: Option<PoolStats>,
    /// cnmem mode's counters (absent in other modes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cnmem: Option<CnmemStats>,
    /// Swap mode's counters (absent in other modes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub swap: Option<SwapStats>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointer_words_are_aligned_words_inside_parameters() {
        // float*, int, int, size_t, a 24-byte struct at 32, a 4-byte float at 56
        let params = [(0, 8), (8, 4), (12, 4), (16, 8), (32, 24), (56, 4)];
        let words: Vec<_> = pointer_words(&params)
            .iter()
            .map(|w| (w.param, w.within, w.packed))
            .collect();
        assert_eq!(
            words,
            vec![(0, 0, 0), (3, 0, 16), (4, 0, 32), (4, 8, 40), (4, 16, 48)]
        );
    }
}
