//! The simulated device and its one (primary) context: what every exported driver call acts on.
//!
//! The device is created by `cuInit` and lives until the process exits. Calls that need a
//! context check that the calling thread made the primary context current, as the real driver
//! does, and once a kernel raised a device fault every such call returns that error (sticky
//! errors). Work is validated when it is submitted, so errors are reported by the call that
//! caused them; the stream workers then only carry it out.
//!
//! Invariant: a device block is freed only after every operation submitted before the free has
//! completed (`cuMemFree` synchronises the device first, `cuMemFreeAsync` runs in stream order),
//! so a worker never touches memory that has been returned to the heap by an earlier call.

use crate::config::Config;
use crate::kernel::{Functions, Layout};
use crate::memory::{DeviceKind, DeviceMemory, PinnedMemory};
use crate::result::*;
use crate::stats::{Stats, StatsSnapshot, write_json};
use crate::stream::{Executor, Marker, Streams};
use crate::vmm::{Capacity, VirtualMemory};
use parking_lot::Mutex;
use std::cell::Cell;
use std::collections::{HashMap, HashSet};
use std::ffi::c_void;
use std::io::Write;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// Direction of a copy, as `cudaMemcpyKind` numbers it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    HostToHost = 0,
    HostToDevice = 1,
    DeviceToHost = 2,
    DeviceToDevice = 3,
}

/// The bytes a copy reads: an address read when the copy runs, or a snapshot taken at submission
/// (pageable host memory in an asynchronous copy, which the caller may reuse at once).
pub enum Source {
    Address(usize),
    Staged(Vec<u8>),
}

/// One operation of a stream.
pub enum Work {
    /// Nothing to run: carries an event record or an event wait.
    Marker,
    Launch {
        layout: Layout,
        buffer: Vec<u128>,
    },
    /// `height` rows of `width` bytes, `src_pitch`/`dst_pitch` apart (one row for a 1D copy).
    Copy {
        dst: usize,
        dst_pitch: usize,
        src: Source,
        src_pitch: usize,
        width: usize,
        height: usize,
        direction: Direction,
    },
    /// `height` rows of `width` elements of `element` bytes (1, 2 or 4), `pitch` apart, set to
    /// the low `element` bytes of `value`.
    Memset {
        dst: usize,
        pitch: usize,
        value: u32,
        element: usize,
        width: usize,
        height: usize,
    },
    Free(usize),
}

/// Memory, kernels, counters and the fault state: what stream workers need to run work.
pub struct Device {
    pub config: Config,
    pub memory: DeviceMemory,
    pub pinned: PinnedMemory,
    pub vmm: VirtualMemory,
    pub stats: Stats,
    pub functions: Functions,
    /// Blocks with a `cuMemFreeAsync` queued, so a second free of the same block is refused.
    pending_frees: Mutex<HashSet<usize>>,
    /// First fault raised by a kernel (0 = none). Written once with compare-exchange; read with
    /// Acquire by every call so the fault is seen after the work that caused it.
    sticky: AtomicU32,
    /// Running digest of the delays drawn by each stream (ordinal → digest).
    jitter: Mutex<HashMap<u64, u64>>,
}

thread_local! {
    /// Set while a kernel body runs on this (worker) thread.
    static IN_KERNEL: Cell<bool> = const { Cell::new(false) };
    /// Fault raised by the running kernel body.
    static RAISED: Cell<u32> = const { Cell::new(0) };
    /// Whether this thread made the primary context current.
    static CURRENT: Cell<bool> = const { Cell::new(false) };
}

impl Executor for Device {
    type Work = Work;

    fn execute(&self, work: Work) {
        if self.sticky.load(Ordering::Acquire) != 0 {
            // A faulted context runs nothing more; queued frees still return their memory.
            if let Work::Free(addr) = work {
                self.finish_free(addr);
            }
            return;
        }
        match work {
            Work::Marker => {}
            Work::Launch { layout, buffer } => self.run_kernel(layout, buffer),
            Work::Copy {
                dst,
                dst_pitch,
                src,
                src_pitch,
                width,
                height,
                direction,
            } => {
                let from = match &src {
                    Source::Address(addr) => *addr as *const u8,
                    Source::Staged(bytes) => bytes.as_ptr(),
                };
                let started = Instant::now();
                for row in 0..height {
                    // SAFETY: every row of both sides was validated at submission: device rows
                    // lie in live blocks or mappings (kept alive by the free invariant of this
                    // module), host rows are the caller's, who must keep them valid until the
                    // copy completes, as with CUDA; a staged source holds `height` packed rows.
                    unsafe {
                        std::ptr::copy(
                            from.add(row * src_pitch),
                            (dst + row * dst_pitch) as *mut u8,
                            width,
                        )
                    };
                }
                self.sleep_for_copy(direction, width * height, started.elapsed());
            }
            Work::Memset {
                dst,
                pitch,
                value,
                element,
                width,
                height,
            } => {
                for row in 0..height {
                    let at = dst + row * pitch;
                    // SAFETY: every row [at, at + width * element) was checked to lie in live
                    // device memory at submission, and `at` to be aligned to `element`.
                    unsafe {
                        match element {
                            1 => std::ptr::write_bytes(at as *mut u8, value as u8, width),
                            2 => std::slice::from_raw_parts_mut(at as *mut u16, width)
                                .fill(value as u16),
                            _ => std::slice::from_raw_parts_mut(at as *mut u32, width).fill(value),
                        }
                    }
                }
            }
            Work::Free(addr) => self.finish_free(addr),
        }
    }

    fn jittered(&self, stream: u64, delay: Duration) {
        let mut digests = self.jitter.lock();
        let old = digests.get(&stream).copied().unwrap_or(0);
        let new = (old.rotate_left(7) ^ delay.as_nanos() as u64).wrapping_mul(0x100_0000_01b3);
        digests.insert(stream, new);
        self.stats
            .jitter_digest
            .fetch_xor(old ^ new, Ordering::Relaxed);
    }

    /// A bug of the simulation on a stream thread: the context faults as after a kernel's
    /// unspecified launch failure, so the program sees an error instead of wrong results.
    fn failed(&self) {
        if self
            .sticky
            .compare_exchange(0, LAUNCH_FAILED.0, Ordering::Release, Ordering::Relaxed)
            .is_ok()
        {
            let _ = writeln!(
                std::io::stderr(),
                "cuda-shim: internal error on a stream; the context now reports \
                 CUDA_ERROR_LAUNCH_FAILED"
            );
        }
    }
}

/// Physical memory of `cuMemCreate` counts against the device's capacity.
impl Capacity for Device {
    fn charge(&self, bytes: usize) -> CuResult<()> {
        self.memory.charge(bytes, &self.stats)
    }

    fn refund(&self, bytes: usize) {
        self.memory.refund(bytes, &self.stats)
    }
}

impl Device {
    fn run_kernel(&self, layout: Layout, mut buffer: Vec<u128>) {
        let Some(body) = layout.body else { return };
        let base = buffer.as_mut_ptr() as *mut u8;
        let mut args: Vec<*mut c_void> = layout
            .params
            .iter()
            // SAFETY: the buffer holds `layout.buffer_size()` bytes, so every offset is in bounds.
            .map(|p| unsafe { base.add(p.offset) } as *mut c_void)
            .collect();
        IN_KERNEL.with(|k| k.set(true));
        // SAFETY: `body` was registered as a kernel taking these parameters; `args` points to
        // one value of the registered size per parameter, alive for the whole call.
        unsafe { body(args.as_mut_ptr()) };
        IN_KERNEL.with(|k| k.set(false));
        let raised = RAISED.with(|r| r.replace(0));
        if raised != 0 {
            // First fault wins; Release publishes everything the kernel wrote before it.
            let _ = self
                .sticky
                .compare_exchange(0, raised, Ordering::Release, Ordering::Relaxed);
        }
        if !layout.simulated.is_zero() {
            std::thread::sleep(layout.simulated);
        }
    }

    /// Makes a copy of `len` bytes that took `spent` so far last `len / rate` in all, as a DMA
    /// engine's transfer does: the `memcpy` is part of that time, not added to it (added, it
    /// made copies 4-5 % slower than the rate a planner is told).
    fn sleep_for_copy(&self, direction: Direction, len: usize, spent: Duration) {
        let rate = match direction {
            Direction::HostToDevice => self.config.h2d_gbps,
            Direction::DeviceToHost => self.config.d2h_gbps,
            _ => None,
        };
        if let Some(gbps) = rate {
            let total = Duration::from_secs_f64(len as f64 / (gbps * 1e9));
            std::thread::sleep(total.saturating_sub(spent));
        }
    }

    fn finish_free(&self, addr: usize) {
        self.pending_frees.lock().remove(&addr);
        // Validated at submission and guarded by `pending_frees`, so this cannot fail.
        let _ = self.memory.free(addr, &self.stats);
    }

    fn sticky(&self) -> CuResult<()> {
        match self.sticky.load(Ordering::Acquire) {
            0 => Ok(()),
            code => Err(CuError(code)),
        }
    }
}

/// Called from a kernel body: the device faults with `code` when the body returns.
pub fn raise_device_error(code: u32) -> CuResult<()> {
    if !is_sticky(code) {
        return Err(INVALID_VALUE);
    }
    if !IN_KERNEL.with(|k| k.get()) {
        eprintln!("cuda-shim: cudaShimRaiseDeviceError({code}) called outside a kernel; ignored");
        return Err(INVALID_VALUE);
    }
    RAISED.with(|r| r.set(code));
    Ok(())
}

/// An event: the marker of the operation it was last recorded after, if any.
pub struct Event {
    flags: u32,
    recorded: Mutex<Option<Arc<Marker>>>,
}

pub const EVENT_DISABLE_TIMING: u32 = 0x2;
const EVENT_FLAGS: u32 = 0x7;
const EVENT_INTERPROCESS: u32 = 0x4;

/// The primary context of device 0, with its streams and events.
pub struct Context {
    pub device: &'static Device,
    pub streams: Streams<Device>,
    events: Mutex<HashMap<usize, Arc<Event>>>,
}

static CONTEXT: OnceLock<Context> = OnceLock::new();
static INIT: Mutex<()> = Mutex::new(());

/// Address whose value is the `CUcontext` handle of the primary context.
pub static PRIMARY_CONTEXT: u8 = 0;

pub fn primary_context_handle() -> usize {
    &PRIMARY_CONTEXT as *const u8 as usize
}

/// Address whose value is the `CUmemoryPool` handle of the device's default pool.
pub static DEFAULT_POOL: u8 = 0xD0; // a value of its own: never merged with PRIMARY_CONTEXT

pub fn default_pool_handle() -> usize {
    &DEFAULT_POOL as *const u8 as usize
}

/// `cuInit`: creates the device on first use.
pub fn init() -> CuResult<&'static Context> {
    if let Some(context) = CONTEXT.get() {
        return Ok(context);
    }
    let _guard = INIT.lock();
    if let Some(context) = CONTEXT.get() {
        return Ok(context);
    }
    let context = Context::new(Config::from_env())?;
    let context = CONTEXT.get_or_init(|| context);
    if context.device.config.stats_path.is_some() {
        // SAFETY: registering a plain `extern "C" fn()` with atexit has no preconditions.
        unsafe { libc::atexit(write_stats_at_exit) };
    }
    Ok(context)
}

extern "C" fn write_stats_at_exit() {
    let _ = std::panic::catch_unwind(|| {
        if let Some(context) = CONTEXT.get() {
            if let Some(path) = &context.device.config.stats_path {
                write_json(path, &context.device.stats.snapshot());
            }
        }
    });
}

/// The context for calls that only need `cuInit` (device queries).
pub fn initialized() -> CuResult<&'static Context> {
    let context = CONTEXT.get().ok_or(NOT_INITIALIZED)?;
    context.device.sticky()?;
    Ok(context)
}

/// The context for calls that need a current context.
pub fn current() -> CuResult<&'static Context> {
    let context = CONTEXT.get().ok_or(NOT_INITIALIZED)?;
    if !CURRENT.with(|c| c.get()) {
        return Err(INVALID_CONTEXT);
    }
    context.device.sticky()?;
    Ok(context)
}

pub fn set_current(handle: usize) -> CuResult<()> {
    CONTEXT.get().ok_or(NOT_INITIALIZED)?;
    match handle {
        0 => CURRENT.with(|c| c.set(false)),
        h if h == primary_context_handle() => CURRENT.with(|c| c.set(true)),
        _ => return Err(INVALID_CONTEXT),
    }
    Ok(())
}

pub fn current_handle() -> CuResult<usize> {
    CONTEXT.get().ok_or(NOT_INITIALIZED)?;
    Ok(if CURRENT.with(|c| c.get()) {
        primary_context_handle()
    } else {
        0
    })
}

/// Row alignment of `cuMemAllocPitch` (`CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT`).
pub const PITCH_ALIGNMENT: usize = 512;
/// Largest pitch of a 2D copy or pitched allocation (`CU_DEVICE_ATTRIBUTE_MAX_PITCH`).
pub const MAX_PITCH: usize = i32::MAX as usize;

/// A 2D copy's addresses, pitches and extent in bytes.
#[derive(Clone, Copy, Debug)]
pub struct Rect {
    pub dst: usize,
    pub dst_pitch: usize,
    pub src: usize,
    pub src_pitch: usize,
    pub width: usize,
    pub height: usize,
}

/// The memory type a copy's caller declared for one side (`CUmemorytype`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryType {
    /// Unified (or the runtime's inferred direction): whatever the address is.
    Any,
    Host,
    Device,
}

/// What a copy or memset does to a device range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
}

/// Bytes from the first byte of `height` rows of `width` bytes, `pitch` apart, to past the last.
fn span(pitch: usize, width: usize, height: usize) -> CuResult<usize> {
    pitch
        .checked_mul(height - 1)
        .and_then(|rows| rows.checked_add(width))
        .ok_or(INVALID_VALUE)
}

/// What an address is, for pointer attributes and copies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    Device {
        start: usize,
        size: usize,
        managed: bool,
    },
    Pinned {
        start: usize,
        size: usize,
    },
    Pageable,
}

impl Context {
    pub fn new(config: Config) -> CuResult<Context> {
        let memory = DeviceMemory::new(config.capacity)?;
        let stats = Stats::default();
        Stats::add(&stats.capacity_bytes, config.capacity);
        let (jitter, seed) = (config.jitter, config.seed);
        let device: &'static Device = Box::leak(Box::new(Device {
            config,
            memory,
            pinned: PinnedMemory::default(),
            vmm: VirtualMemory::default(),
            stats,
            functions: Functions::default(),
            pending_frees: Mutex::new(HashSet::new()),
            sticky: AtomicU32::new(0),
            jitter: Mutex::new(HashMap::new()),
        }));
        Ok(Context {
            device,
            streams: Streams::new(device, jitter, seed),
            events: Mutex::new(HashMap::new()),
        })
    }

    pub fn stats(&self) -> StatsSnapshot {
        self.device.stats.snapshot()
    }

    // ---- memory ----

    pub fn alloc(&self, size: usize, kind: DeviceKind) -> CuResult<usize> {
        self.device.memory.alloc(size, kind, &self.device.stats)
    }

    /// `cuMemFree`: waits for all submitted work (as the real call does), then frees.
    pub fn free(&self, addr: usize) -> CuResult<()> {
        if self.device.pending_frees.lock().contains(&addr) {
            return Err(INVALID_VALUE);
        }
        self.device
            .memory
            .find(addr)
            .filter(|b| b.start == addr)
            .ok_or(INVALID_VALUE)?;
        self.synchronize()?;
        self.device.memory.free(addr, &self.device.stats).map(drop)
    }

    /// `cuMemFreeAsync`: the block returns to the heap when the stream reaches the free.
    pub fn free_async(&self, addr: usize, stream: usize) -> CuResult<()> {
        self.streams.check(stream)?;
        let block = self.device.memory.find(addr).ok_or(INVALID_VALUE)?;
        if block.start != addr || !self.device.pending_frees.lock().insert(addr) {
            return Err(INVALID_VALUE);
        }
        self.streams
            .submit(stream, Work::Free(addr), None)
            .map(drop)
    }

    pub fn place(&self, addr: usize) -> Place {
        if let Some(block) = self.device.memory.find(addr) {
            return Place::Device {
                start: block.start,
                size: block.size,
                managed: block.kind == DeviceKind::Managed,
            };
        }
        if let Some(mapping) = self.device.vmm.mapping(addr) {
            // Each cuMemMap is an allocation range of its own, as on CUDA.
            return Place::Device {
                start: mapping.start,
                size: mapping.size,
                managed: false,
            };
        }
        match self.device.pinned.find(addr) {
            Some((start, size)) => Place::Pinned { start, size },
            None => Place::Pageable,
        }
    }

    /// Whether `[addr, addr + len)` is device memory (`Ok(true)`), host memory (`Ok(false)`), or
    /// an invalid device range (outside every live block, or running past its end).
    fn locate(&self, addr: usize, len: usize, access: Access) -> CuResult<bool> {
        if addr == 0 {
            return Err(INVALID_VALUE);
        }
        if self.device.memory.in_span(addr) {
            self.device.memory.check_range(addr, len)?;
            return Ok(true);
        }
        if self.device.vmm.reserved(addr) {
            // Mapped with the access the operation needs (cuMemSetAccess), possibly across
            // several adjacent mappings.
            self.device
                .vmm
                .check_range(addr, len, access == Access::Write)?;
            return Ok(true);
        }
        Ok(false)
    }

    // ---- virtual memory management ----

    /// `cuMemUnmap`: waits for all submitted work (which may use the range), then unmaps.
    pub fn unmap(&self, ptr: usize, size: usize) -> CuResult<()> {
        self.synchronize()?;
        self.device.vmm.unmap(ptr, size, self.device)
    }

    /// Submits a copy of `len` bytes on `stream`; `kind` is a `cudaMemcpyKind` (4 = infer from
    /// the addresses). With `synchronous`, waits for it to complete, except device-to-device
    /// copies, which CUDA never makes the host wait for.
    pub fn copy(
        &self,
        dst: usize,
        src: usize,
        len: usize,
        kind: u32,
        stream: usize,
        synchronous: bool,
    ) -> CuResult<()> {
        let rect = Rect {
            dst,
            dst_pitch: len,
            src,
            src_pitch: len,
            width: len,
            height: 1,
        };
        self.copy_2d(rect, kind, [MemoryType::Any; 2], stream, synchronous)
    }

    /// Submits a 2D copy (`cuMemcpy2D`): `declared` are the memory types the caller gave for
    /// the source and the destination, checked against what the addresses are.
    pub fn copy_2d(
        &self,
        rect: Rect,
        kind: u32,
        declared: [MemoryType; 2],
        stream: usize,
        synchronous: bool,
    ) -> CuResult<()> {
        let Rect {
            dst,
            dst_pitch,
            src,
            src_pitch,
            width,
            height,
        } = rect;
        if width == 0 || height == 0 {
            return self.streams.check(stream);
        }
        if height > 1
            && (src_pitch < width || dst_pitch < width || src_pitch.max(dst_pitch) > MAX_PITCH)
        {
            return Err(INVALID_VALUE);
        }
        let src_span = span(src_pitch, width, height)?;
        let dst_span = span(dst_pitch, width, height)?;
        let src_device = self.locate(src, src_span, Access::Read)?;
        let dst_device = self.locate(dst, dst_span, Access::Write)?;
        for (declared, address, device) in [
            (declared[0], src, src_device),
            (declared[1], dst, dst_device),
        ] {
            let fits = match declared {
                MemoryType::Any => true,
                MemoryType::Host => !device,
                MemoryType::Device => device || self.place(address) != Place::Pageable,
            };
            if !fits {
                return Err(INVALID_VALUE);
            }
        }
        let direction = match (src_device, dst_device) {
            (false, false) => Direction::HostToHost,
            (false, true) => Direction::HostToDevice,
            (true, false) => Direction::DeviceToHost,
            (true, true) => Direction::DeviceToDevice,
        };
        if kind != 4 && kind != direction as u32 {
            return Err(INVALID_VALUE);
        }
        let pageable_source = !matches!(
            direction,
            Direction::DeviceToHost | Direction::DeviceToDevice
        ) && self.place(src) == Place::Pageable;
        let (source, src_pitch) = if pageable_source && !synchronous {
            // Read now, as the real call stages pageable memory; packed rows.
            let mut staged = Vec::with_capacity(width * height);
            for row in 0..height {
                // SAFETY: the caller guarantees every source row is readable host memory, as
                // for cudaMemcpyAsync.
                staged.extend_from_slice(unsafe {
                    std::slice::from_raw_parts((src + row * src_pitch) as *const u8, width)
                });
            }
            (Source::Staged(staged), width)
        } else {
            (Source::Address(src), src_pitch)
        };
        let len = (width * height) as u64;
        let stats = &self.device.stats;
        match direction {
            Direction::HostToDevice => Stats::add(&stats.h2d_bytes, len),
            Direction::DeviceToHost => Stats::add(&stats.d2h_bytes, len),
            Direction::DeviceToDevice => Stats::add(&stats.d2d_bytes, len),
            Direction::HostToHost => {}
        }
        let work = Work::Copy {
            dst,
            dst_pitch,
            src: source,
            src_pitch,
            width,
            height,
            direction,
        };
        // An asynchronous copy into pageable memory returns once it is done, as on CUDA (the
        // caller may read the destination at once; cudarc relies on it).
        let pageable_destination =
            direction == Direction::DeviceToHost && self.place(dst) == Place::Pageable;
        let done = self.streams.submit(stream, work, None)?;
        if (synchronous && direction != Direction::DeviceToDevice) || pageable_destination {
            done.wait();
            self.device.sticky()?;
        }
        Ok(())
    }

    pub fn memset(&self, dst: usize, value: u8, len: usize, stream: usize) -> CuResult<()> {
        self.memset_2d(dst, len, u32::from(value), 1, len, 1, stream)
    }

    /// `cuMemsetD2D{8,16,32}`: `height` rows of `width` elements of `element` bytes, `pitch`
    /// bytes apart (the pitch is unused for one row). The address must be aligned to the
    /// element size, and every row must lie in device memory or in one mapped page-locked
    /// allocation.
    #[allow(clippy::too_many_arguments)]
    pub fn memset_2d(
        &self,
        dst: usize,
        pitch: usize,
        value: u32,
        element: usize,
        width: usize,
        height: usize,
        stream: usize,
    ) -> CuResult<()> {
        if width == 0 || height == 0 {
            return self.streams.check(stream);
        }
        let row = width.checked_mul(element).ok_or(INVALID_VALUE)?;
        let pitch = if height == 1 { row } else { pitch };
        if dst % element != 0 || pitch < row || pitch % element != 0 {
            return Err(INVALID_VALUE);
        }
        let len = span(pitch, row, height)?;
        if !self.locate(dst, len, Access::Write)? {
            // Mapped page-locked memory, written through its device address (unified
            // addressing): the range must lie in one allocation.
            let (start, size) = self.device.pinned.find(dst).ok_or(INVALID_VALUE)?;
            if dst.checked_add(len).is_none_or(|end| end > start + size) {
                return Err(INVALID_VALUE);
            }
        }
        Stats::add(&self.device.stats.memset_bytes, (row * height) as u64);
        let work = Work::Memset {
            dst,
            pitch,
            value,
            element,
            width,
            height,
        };
        self.streams.submit(stream, work, None).map(drop)
    }

    /// `cuMemAllocPitch`: rows of `width` bytes padded to the device's texture alignment (as
    /// NVIDIA's driver pads them: 512 bytes on this device class).
    pub fn alloc_pitch(
        &self,
        width: usize,
        height: usize,
        element: u32,
    ) -> CuResult<(usize, usize)> {
        if width == 0 || height == 0 || !matches!(element, 4 | 8 | 16) {
            return Err(INVALID_VALUE);
        }
        let pitch = width
            .checked_next_multiple_of(PITCH_ALIGNMENT)
            .ok_or(INVALID_VALUE)?;
        if pitch > MAX_PITCH {
            return Err(INVALID_VALUE);
        }
        let size = pitch.checked_mul(height).ok_or(OUT_OF_MEMORY)?;
        Ok((self.alloc(size, DeviceKind::Device)?, pitch))
    }

    // ---- kernels ----

    /// Packs the arguments of `function` and queues the launch. `params[i]` points to the value
    /// of parameter i (`kernelParams`), or `packed` is an already packed buffer (`extra`).
    pub fn launch(
        &self,
        function: usize,
        params: Option<&[*const u8]>,
        packed: Option<&[u8]>,
        stream: usize,
    ) -> CuResult<()> {
        let layout = self.device.functions.by_handle(function)?.layout();
        if layout.body.is_none() {
            return Err(NOT_FOUND);
        }
        let size = layout.buffer_size();
        let mut buffer = vec![0u128; size.div_ceil(16)];
        let bytes = buffer.as_mut_ptr() as *mut u8;
        match (params, packed) {
            (Some(values), None) if values.len() >= layout.params.len() => {
                for (param, &value) in layout.params.iter().zip(values) {
                    if value.is_null() {
                        return Err(INVALID_VALUE);
                    }
                    // SAFETY: `value` points to the caller's parameter of the registered size
                    // (the kernelParams contract); the destination lies inside `buffer`.
                    unsafe {
                        std::ptr::copy_nonoverlapping(value, bytes.add(param.offset), param.size)
                    };
                }
            }
            (None, Some(raw)) if raw.len() >= size => {
                // SAFETY: `raw` holds at least `size` bytes, `buffer` at least `size` bytes.
                unsafe { std::ptr::copy_nonoverlapping(raw.as_ptr(), bytes, size) };
            }
            (None, None) if layout.params.is_empty() => {}
            _ => return Err(INVALID_VALUE),
        }
        self.streams
            .submit(stream, Work::Launch { layout, buffer }, None)?;
        Stats::add(&self.device.stats.kernel_launches, 1);
        Ok(())
    }

    // ---- synchronisation ----

    pub fn synchronize(&self) -> CuResult<()> {
        for marker in self.streams.all_tails() {
            marker.wait();
        }
        self.device.sticky()
    }

    pub fn stream_synchronize(&self, stream: usize) -> CuResult<()> {
        self.streams.tail(stream)?.wait();
        self.device.sticky()
    }

    pub fn stream_query(&self, stream: usize) -> CuResult<()> {
        match self.streams.tail(stream)?.completed_at() {
            Some(_) => self.device.sticky(),
            None => Err(NOT_READY),
        }
    }

    // ---- events ----

    pub fn event_create(&self, flags: u32) -> CuResult<usize> {
        if flags & !EVENT_FLAGS != 0
            || (flags & EVENT_INTERPROCESS != 0 && flags & EVENT_DISABLE_TIMING == 0)
        {
            return Err(INVALID_VALUE);
        }
        let event = Arc::new(Event {
            flags,
            recorded: Mutex::new(None),
        });
        let handle = Arc::as_ptr(&event) as usize;
        self.events.lock().insert(handle, event);
        Ok(handle)
    }

    fn event(&self, handle: usize) -> CuResult<Arc<Event>> {
        self.events
            .lock()
            .get(&handle)
            .cloned()
            .ok_or(INVALID_HANDLE)
    }

    pub fn event_destroy(&self, handle: usize) -> CuResult<()> {
        self.events
            .lock()
            .remove(&handle)
            .map(drop)
            .ok_or(INVALID_HANDLE)
    }

    pub fn event_record(&self, handle: usize, stream: usize) -> CuResult<()> {
        let event = self.event(handle)?;
        let marker = self.streams.submit(stream, Work::Marker, None)?;
        *event.recorded.lock() = Some(marker);
        Ok(())
    }

    /// `cuStreamWaitEvent`: later work of `stream` waits for the event's last record; an event
    /// never recorded is no dependency at all.
    pub fn stream_wait_event(&self, stream: usize, handle: usize) -> CuResult<()> {
        let marker = self.event(handle)?.recorded.lock().clone();
        match marker {
            Some(marker) => self
                .streams
                .submit(stream, Work::Marker, Some(marker))
                .map(drop),
            None => self.streams.check(stream),
        }
    }

    pub fn event_query(&self, handle: usize) -> CuResult<()> {
        let marker = self.event(handle)?.recorded.lock().clone();
        match marker.map(|m| m.completed_at()) {
            Some(None) => Err(NOT_READY),
            _ => self.device.sticky(),
        }
    }

    pub fn event_synchronize(&self, handle: usize) -> CuResult<()> {
        let marker = self.event(handle)?.recorded.lock().clone();
        if let Some(marker) = marker {
            marker.wait();
        }
        self.device.sticky()
    }

    /// Milliseconds between two completed records of timing-enabled events.
    pub fn event_elapsed(&self, start: usize, end: usize) -> CuResult<f32> {
        let (start, end) = (self.event(start)?, self.event(end)?);
        if (start.flags | end.flags) & EVENT_DISABLE_TIMING != 0 {
            return Err(INVALID_HANDLE);
        }
        let (Some(a), Some(b)) = (start.recorded.lock().clone(), end.recorded.lock().clone())
        else {
            return Err(INVALID_HANDLE);
        };
        let (Some(a), Some(b)) = (a.completed_at(), b.completed_at()) else {
            return Err(NOT_READY);
        };
        let ms = if b >= a {
            (b - a).as_secs_f64() * 1e3
        } else {
            -((a - b).as_secs_f64() * 1e3)
        };
        Ok(ms as f32)
    }
}
