//! The simulated devices, each with its one (primary) context: what every exported driver call
//! acts on.
//!
//! The [`Driver`] is created by `cuInit` with `CUDA_SHIM_DEVICES` devices and lives until the
//! process exits. Each device has its own memory (a disjoint address range: unified addressing
//! across devices), counters, sticky fault and primary [`Context`], whose streams and legacy
//! default stream are its own. What is process-wide lives in the driver: page-locked memory
//! (portable), virtual address reservations, kernels, events (each remembers its context) and the
//! peer-access table. Each thread has a stack of current contexts (`cuCtxSetCurrent`,
//! `cuCtxPushCurrent`); calls that need a context use its top, as the real driver does, and once
//! a kernel raised a device fault every call on that device's context returns that error
//! (sticky errors). Work is validated when it is submitted, so errors are reported by the call
//! that caused them; the stream workers then only carry it out.
//!
//! Invariant: a device block is freed only after every operation submitted before the free has
//! completed on the calling context and on the block's own device (`cuMemFree` synchronises both
//! first, `cuMemFreeAsync` runs in stream order), so a worker never touches memory that has been
//! returned to the heap by an earlier call. Work of a third device that reads the block through
//! peer access is not waited for, as on CUDA (a use after free of the program).

use crate::config::{Config, MAX_DEVICES};
use crate::graph::GraphFree;
use crate::kernel::{Body, Functions, Layout, PtxKernel};
use crate::memory::{DeviceKind, DeviceMemory, PinnedMemory};
use crate::ptx;
use crate::result::*;
use crate::stats::{Stats, StatsSnapshot, write_json};
use crate::stream::{Executor, Marker, Streams};
use crate::vmm::{self, Capacity, VirtualMemory};
use parking_lot::Mutex;
use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::ffi::c_void;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
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
#[derive(Clone)]
pub enum Source {
    Address(usize),
    Staged(Vec<u8>),
}

/// One operation of a stream (or, cloned, of each launch of a graph node).
#[derive(Clone)]
pub enum Work {
    /// Nothing to run: carries an event record or an event wait.
    Marker,
    Launch {
        layout: Layout,
        buffer: Vec<u128>,
        /// Grid, block and dynamic shared memory, and the module's variables (PTX kernels).
        shape: Shape,
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
    /// Returns a block of `device` (any device: a stream may free another device's memory).
    Free {
        device: &'static Device,
        addr: usize,
    },
    /// A host function run on the stream's thread in stream order (`cuLaunchHostFunc`,
    /// `cuStreamAddCallback`).
    Host(HostCall),
}

/// The shape of a launch: grid and block dimensions, dynamic shared memory bytes, and the
/// device addresses of the module's variables (PTX kernels read them; host kernels do not).
#[derive(Clone, Debug, Default)]
pub struct Shape {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared: u32,
    pub globals: Vec<u64>,
}

/// A host function queued on a stream.
#[derive(Clone, Copy)]
pub enum HostCall {
    /// `cuLaunchHostFunc`: `fn(userData)`, not run once the context has faulted.
    Function {
        func: unsafe extern "C" fn(*mut c_void),
        data: usize,
    },
    /// `cuStreamAddCallback`: `fn(stream, status, userData)`, run with the context's error
    /// status even after a fault, as CUDA does.
    Callback {
        func: unsafe extern "C" fn(usize, u32, *mut c_void),
        stream: usize,
        data: usize,
    },
}

impl HostCall {
    fn run(self, status: u32) {
        match self {
            // SAFETY: the program queued `func` with `data` as CUDA documents: it is called
            // once, on the stream's thread, with the user data it gave.
            HostCall::Function { func, data } => unsafe { func(data as *mut c_void) },
            // SAFETY: as above, with the stream handle and the status CUDA passes.
            HostCall::Callback { func, stream, data } => unsafe {
                func(stream, status, data as *mut c_void)
            },
        }
    }
}

/// The state of a device's default memory pool (`CUmemPool_attribute`): blocks it served that
/// are live, what they use, and the settable attributes. The shim returns freed memory to the
/// device at once, so the pool reserves exactly what is in use.
#[derive(Default)]
pub struct Pool {
    blocks: HashMap<usize, usize>,
    used: u64,
    used_high: u64,
    reserved_high: u64,
    /// ReuseFollowEventDependencies, ReuseAllowOpportunistic, ReuseAllowInternalDependencies.
    reuse: [i32; 3],
    release_threshold: u64,
    /// Bit `j`: device `j` (another device) has read-write access to the pool's memory.
    peers: u32,
}

/// One device's memory, counters and fault state: what its stream workers need to run work.
pub struct Device {
    pub ordinal: usize,
    pub config: Config,
    pub memory: DeviceMemory,
    pub stats: Stats,
    /// Blocks with a `cuMemFreeAsync` queued, so a second free of the same block is refused.
    pending_frees: Mutex<HashSet<usize>>,
    /// First fault raised by a kernel (0 = none). Written once with compare-exchange; read with
    /// Acquire by every call so the fault is seen after the work that caused it.
    sticky: AtomicU32,
    /// Running digest of the delays drawn by each stream (ordinal → digest).
    jitter: Mutex<HashMap<u64, u64>>,
    /// The default memory pool's state.
    pub pool: Mutex<Pool>,
    /// Live device blocks and page-locked ranges made in a context created with `cuCtxCreate`:
    /// start → that context's handle (what its destruction frees, and a primary context's reset
    /// leaves alone). Everything else of the device belongs to its primary context.
    owners: Mutex<HashMap<usize, usize>>,
}

thread_local! {
    /// Set while a kernel body runs on this (worker) thread.
    static IN_KERNEL: Cell<bool> = const { Cell::new(false) };
    /// Fault raised by the running kernel body.
    static RAISED: Cell<u32> = const { Cell::new(0) };
    /// This thread's stack of current contexts, the current one last. A context destroyed
    /// while current to another thread stays on that thread's stack (and is reported as
    /// destroyed there), so the stack holds the contexts themselves, which are never freed.
    static CURRENT: RefCell<Vec<&'static Context>> = const { RefCell::new(Vec::new()) };
}

impl Executor for Device {
    type Work = Work;

    fn execute(&self, work: Work) {
        let sticky = self.sticky.load(Ordering::Acquire);
        if sticky != 0 {
            // A faulted context runs nothing more; queued frees still return their memory, and
            // stream callbacks are called with the error.
            match work {
                Work::Free { device, addr } => device.finish_free(addr),
                Work::Host(call @ HostCall::Callback { .. }) => call.run(sticky),
                _ => {}
            }
            return;
        }
        match work {
            Work::Marker => {}
            Work::Launch {
                layout,
                buffer,
                shape,
            } => self.run_kernel(layout, buffer, shape),
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
                let started = Instant::now();
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
                let in_host = DRIVER.get().is_some_and(|d| d.host_range(dst).is_some());
                if in_host {
                    self.sleep_for_zero_copy((width * element * height) as u64, started.elapsed());
                }
            }
            Work::Free { device, addr } => device.finish_free(addr),
            Work::Host(call) => call.run(0),
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

/// What a PTX kernel may access: device blocks of any device (peer access is not checked),
/// mapped page-locked host memory and mapped ranges of the virtual memory API.
impl ptx::Memory for Driver {
    fn range(&self, addr: u64) -> Option<ptx::Region> {
        let at = addr as usize;
        let (start, size, host) = self
            .contexts
            .iter()
            .find_map(|c| c.device.memory.find(at).map(|b| (b.start, b.size, false)))
            .or_else(|| {
                self.pinned
                    .find(at)
                    .map(|(start, size)| (start, size, true))
            })
            .or_else(|| (self.vmm.mapping(at)).map(|m| (m.start, m.size, m.device == vmm::HOST)))?;
        Some(ptx::Region {
            start: start as u64,
            end: (start + size) as u64,
            host,
        })
    }
}

/// Physical memory of `cuMemCreate` counts against the capacity of its device.
impl Capacity for Driver {
    fn charge(&self, device: usize, bytes: usize) -> CuResult<()> {
        let device = self.device(device as i32)?;
        device.memory.charge(bytes, &device.stats)
    }

    fn refund(&self, device: usize, bytes: usize) {
        if let Ok(device) = self.device(device as i32) {
            device.memory.refund(bytes, &device.stats)
        }
    }
}

impl Device {
    fn run_kernel(&self, layout: Layout, mut buffer: Vec<u128>, shape: Shape) {
        let raised = match &layout.body {
            Some(Body::Host(body)) => {
                let body = *body;
                let base = buffer.as_mut_ptr() as *mut u8;
                let mut args: Vec<*mut c_void> = layout
                    .params
                    .iter()
                    // SAFETY: the buffer holds `layout.buffer_size()` bytes, so every offset is
                    // in bounds.
                    .map(|p| unsafe { base.add(p.offset) } as *mut c_void)
                    .collect();
                let host_bytes = self.host_bytes_reached(&layout, &buffer);
                IN_KERNEL.with(|k| k.set(true));
                let started = Instant::now();
                // SAFETY: `body` was registered as a kernel taking these parameters; `args`
                // points to one value of the registered size per parameter, alive for the call.
                unsafe { body(args.as_mut_ptr()) };
                self.sleep_for_zero_copy(host_bytes, started.elapsed());
                IN_KERNEL.with(|k| k.set(false));
                RAISED.with(|r| r.replace(0))
            }
            Some(Body::Ptx(kernel)) => {
                let size = layout.buffer_size();
                // SAFETY: the buffer holds at least `size` initialised bytes.
                let params =
                    unsafe { std::slice::from_raw_parts(buffer.as_ptr() as *const u8, size) };
                self.run_ptx(kernel, params, &shape)
            }
            Some(Body::NoImage) | None => return,
        };
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

    /// Interprets a PTX kernel; returns the `CUresult` of its fault (0 = none).
    fn run_ptx(&self, kernel: &PtxKernel, params: &[u8], shape: &Shape) -> u32 {
        let launch = ptx::Launch {
            grid: shape.grid,
            block: shape.block,
            dynamic_shared: shape.shared as usize,
            params,
            globals: &shape.globals,
            memory: match DRIVER.get() {
                Some(driver) => driver,
                None => return LAUNCH_FAILED.0,
            },
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            printf: &write_stdout,
        };
        let started = Instant::now();
        let result = ptx::run(&kernel.kernel, &launch);
        let spent = started.elapsed();
        Stats::add(&self.stats.ptx_kernel_ns, spent.as_nanos() as u64);
        match result {
            Ok(counts) => {
                Stats::add(
                    &self.stats.ptx_thread_instructions,
                    counts.thread_instructions,
                );
                self.sleep_for_zero_copy(counts.host_bytes, spent);
                0
            }
            Err(ptx::Fault::IllegalAddress { .. }) => ILLEGAL_ADDRESS.0,
            Err(ptx::Fault::Misaligned { .. }) => MISALIGNED_ADDRESS.0,
            Err(ptx::Fault::Assert { message }) => {
                let _ = std::io::stderr().write_all(message.as_bytes());
                ASSERT.0
            }
            Err(fault) => {
                crate::module::report(&format!("kernel {} failed: {fault:?}", kernel.kernel.name));
                LAUNCH_FAILED.0
            }
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

    /// Makes work that reached `bytes` of mapped page-locked host memory last at least
    /// `bytes / rate` of the host link (`CUDA_SHIM_H2D_GBPS`), as a GPU pays for zero-copy
    /// accesses over PCIe; `spent` is what it took already. Instant without a rate.
    fn sleep_for_zero_copy(&self, bytes: u64, spent: Duration) {
        if bytes == 0 {
            return;
        }
        Stats::add(&self.stats.zero_copy_bytes, bytes);
        if let Some(gbps) = self.config.h2d_gbps {
            let total = Duration::from_secs_f64(bytes as f64 / (gbps * 1e9));
            std::thread::sleep(total.saturating_sub(spent));
        }
    }

    /// Bytes of mapped host memory a host kernel can reach: for each pointer-sized argument
    /// inside a page-locked allocation, the allocation from there to its end, once per
    /// allocation (a host function's accesses cannot be seen; a kernel reads what it is given).
    fn host_bytes_reached(&self, layout: &Layout, buffer: &[u128]) -> u64 {
        let Some(driver) = DRIVER.get() else { return 0 };
        // SAFETY: the buffer holds `layout.buffer_size()` initialised bytes.
        let bytes = unsafe {
            std::slice::from_raw_parts(buffer.as_ptr() as *const u8, layout.buffer_size())
        };
        let mut seen: Vec<usize> = Vec::new();
        let mut reached = 0u64;
        for param in layout.params.iter().filter(|p| p.size == 8) {
            let word = &bytes[param.offset..param.offset + 8];
            let value = u64::from_le_bytes(word.try_into().unwrap_or([0; 8])) as usize;
            if let Some((start, size)) = driver.host_range(value)
                && !seen.contains(&start)
            {
                seen.push(start);
                reached += (start + size - value) as u64;
            }
        }
        reached
    }

    pub(crate) fn finish_free(&self, addr: usize) {
        self.pending_frees.lock().remove(&addr);
        self.owners.lock().remove(&addr);
        self.pool_release(addr);
        // Validated at submission and guarded by `pending_frees`, so this cannot fail.
        let _ = self.memory.free(addr, &self.stats);
    }

    /// Records a block the default pool served.
    fn pool_serve(&self, addr: usize, size: usize) {
        let reserved = size.next_multiple_of(crate::memory::GRANULE);
        let mut pool = self.pool.lock();
        pool.blocks.insert(addr, reserved);
        pool.used += reserved as u64;
        pool.used_high = pool.used_high.max(pool.used);
        pool.reserved_high = pool.reserved_high.max(pool.used);
    }

    /// Forgets a freed block if the pool served it.
    fn pool_release(&self, addr: usize) {
        let mut pool = self.pool.lock();
        if let Some(reserved) = pool.blocks.remove(&addr) {
            pool.used -= reserved as u64;
        }
    }

    /// Whether the default pool served the live block at `addr`.
    pub fn pool_owns(&self, addr: usize) -> bool {
        self.pool.lock().blocks.contains_key(&addr)
    }

    /// `cuMemPoolGetAttribute`: (value, whether it is a 64-bit one).
    pub fn pool_attribute(&self, attr: u32) -> CuResult<(u64, bool)> {
        let pool = self.pool.lock();
        Ok(match attr {
            1..=3 => (pool.reuse[attr as usize - 1] as u64, false),
            4 => (pool.release_threshold, true),
            5 | 7 => (pool.used, true),
            6 => (pool.reserved_high, true),
            8 => (pool.used_high, true),
            _ => return Err(INVALID_VALUE),
        })
    }

    /// `cuMemPoolSetAttribute`: the reuse flags (0 or 1 as given: any int), the release
    /// threshold, and the high watermarks, which can only be reset to 0 (to the current value).
    pub fn set_pool_attribute(&self, attr: u32, value: u64) -> CuResult<()> {
        let mut pool = self.pool.lock();
        match attr {
            1..=3 => pool.reuse[attr as usize - 1] = value as i32,
            4 => pool.release_threshold = value,
            6 | 8 if value != 0 => return Err(INVALID_VALUE),
            6 | 8 => {
                let used = pool.used;
                if attr == 6 {
                    pool.reserved_high = used;
                } else {
                    pool.used_high = used;
                }
            }
            _ => return Err(INVALID_VALUE),
        }
        Ok(())
    }

    /// `cuMemPoolSetAccess` for one descriptor: the pool's own device always has read-write
    /// access (anything else is `CUDA_ERROR_INVALID_VALUE`); another device gets none or
    /// read-write (read-only is not supported for pools).
    pub fn set_pool_access(&self, device: usize, flags: u32) -> CuResult<()> {
        const NONE: u32 = 0;
        const READ_WRITE: u32 = 3;
        if device == self.ordinal {
            return if flags == READ_WRITE {
                Ok(())
            } else {
                Err(INVALID_VALUE)
            };
        }
        let mut pool = self.pool.lock();
        match flags {
            NONE => pool.peers &= !(1 << device),
            READ_WRITE => pool.peers |= 1 << device,
            _ => return Err(INVALID_VALUE),
        }
        Ok(())
    }

    pub fn sticky(&self) -> CuResult<()> {
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

/// An event: the context it was created in, and the marker of the operation it was last
/// recorded after, if any.
pub struct Event {
    flags: u32,
    context: usize,
    /// The handle of the context that made it: its reset or destruction destroys the event.
    owner: usize,
    /// Shared by an event and the events opened from its IPC handle.
    pub(crate) recorded: Arc<Mutex<Option<Arc<Marker>>>>,
}

pub const EVENT_DISABLE_TIMING: u32 = 0x2;
const EVENT_FLAGS: u32 = 0x7;
const EVENT_INTERPROCESS: u32 = 0x4;

/// A context of one device, with its streams: the device's primary context, or one made with
/// `cuCtxCreate`, which shares the device's memory, fault state and peer access (see
/// [`Driver::create_context`]).
pub struct Context {
    pub ordinal: usize,
    pub device: &'static Device,
    pub streams: Streams<Device>,
    /// Whether this is the device's primary context.
    pub primary: bool,
    /// `CU_CTX_*` flags (`cuCtxGetFlags`; for a primary context, `cuDevicePrimaryCtxSetFlags`).
    flags: AtomicU32,
    /// Set by `cuCtxDestroy`: a thread where it is still current gets
    /// `CUDA_ERROR_CONTEXT_IS_DESTROYED`.
    destroyed: AtomicBool,
}

/// Every device, with what is shared between them.
pub struct Driver {
    pub config: Config,
    /// Primary contexts, by device ordinal. Never resized: a context's address is its handle.
    pub contexts: Vec<Context>,
    /// Live contexts made with `cuCtxCreate` (leaked boxes: a context is never freed, so a
    /// handle stays a valid address after `cuCtxDestroy`).
    created: Mutex<Vec<&'static Context>>,
    pub pinned: PinnedMemory,
    pub vmm: VirtualMemory,
    pub functions: Functions,
    events: Mutex<HashMap<usize, Arc<Event>>>,
    /// Bit `j` of `peers[i]`: context `i` has peer access to device `j`'s memory.
    peers: Mutex<[u32; MAX_DEVICES]>,
    /// Retain counts of the primary contexts (`cuDevicePrimaryCtxRetain`/`Release`): a primary
    /// context is active while retained.
    retains: Mutex<[u32; MAX_DEVICES]>,
    /// `cuFuncSetAttribute` values by function handle: max dynamic shared memory, carveout.
    function_attributes: Mutex<HashMap<usize, [i32; 2]>>,
    /// Context-local storage (NVIDIA's runtime keeps its per-context state there, through an
    /// export table: `export_table`): value and destructor by (context handle, key).
    storage: Mutex<HashMap<(usize, usize), Stored>>,
    /// Graphs, executable graphs and stream captures.
    pub graphs: crate::graph::Graphs,
}

/// A context-local value and its destructor.
type Stored = (usize, Option<StorageDestructor>);

/// Called with (context, key, value) when a context-local value's context is reset or
/// destroyed.
pub type StorageDestructor = unsafe extern "C" fn(usize, usize, usize);

static DRIVER: OnceLock<Driver> = OnceLock::new();
static INIT: Mutex<()> = Mutex::new(());

/// Addresses whose values are the `CUmemoryPool` handles of each device's default pool.
pub static DEFAULT_POOLS: [u8; MAX_DEVICES] = [0xD0; MAX_DEVICES];

pub fn default_pool_handle(device: usize) -> usize {
    &DEFAULT_POOLS[device] as *const u8 as usize
}

/// The device whose default pool `handle` is.
pub fn pool_device(handle: usize) -> Option<usize> {
    let base = DEFAULT_POOLS.as_ptr() as usize;
    let device = handle.checked_sub(base)?;
    let count = DRIVER.get().map_or(0, |d| d.contexts.len());
    (device < count).then_some(device)
}

/// `cuInit`: creates the devices on first use.
pub fn init() -> CuResult<&'static Driver> {
    if let Some(driver) = DRIVER.get() {
        return Ok(driver);
    }
    let _guard = INIT.lock();
    if let Some(driver) = DRIVER.get() {
        return Ok(driver);
    }
    let driver = Driver::new(Config::from_env())?;
    let driver = DRIVER.get_or_init(|| driver);
    if driver.config.stats_path.is_some() {
        // SAFETY: registering a plain `extern "C" fn()` with atexit has no preconditions.
        unsafe { libc::atexit(write_stats_at_exit) };
    }
    Ok(driver)
}

extern "C" fn write_stats_at_exit() {
    let _ = std::panic::catch_unwind(|| {
        if let Some(driver) = DRIVER.get() {
            if let Some(path) = &driver.config.stats_path {
                driver.write_stats(path);
            }
        }
    });
}

/// The driver, for calls that only need `cuInit` (device queries). A sticky fault of the
/// calling thread's current device (device 0 without one) is returned, as before any call.
pub fn initialized() -> CuResult<&'static Driver> {
    let driver = DRIVER.get().ok_or(NOT_INITIALIZED)?;
    driver.current_or_first().device.sticky()?;
    Ok(driver)
}

/// The driver once `cuInit` ran, without the sticky check.
pub fn driver() -> CuResult<&'static Driver> {
    DRIVER.get().ok_or(NOT_INITIALIZED)
}

/// Runs `f` on the calling thread's context stack; `CUDA_ERROR_DEINITIALIZED` once the thread's
/// locals are gone: glibc runs thread-local destructors before C++ static destructors, and a
/// program's static destructor may still call CUDA (torch's IPC cleanup does).
fn with_stack<T>(f: impl FnOnce(&mut Vec<&'static Context>) -> T) -> CuResult<T> {
    CURRENT
        .try_with(|stack| f(&mut stack.borrow_mut()))
        .map_err(|_| DEINITIALIZED)
}

/// The calling thread's current context, if any (possibly destroyed).
fn current_context() -> CuResult<Option<&'static Context>> {
    with_stack(|stack| stack.last().copied())
}

/// The ordinal of the device of the calling thread's current context, if any.
fn current_ordinal() -> Option<usize> {
    current_context().ok().flatten().map(|c| c.ordinal)
}

/// The calling thread's current context, for calls that need one.
pub fn current() -> CuResult<&'static Context> {
    DRIVER.get().ok_or(NOT_INITIALIZED)?;
    let context = current_context()?.ok_or(INVALID_CONTEXT)?;
    if context.destroyed.load(Ordering::Acquire) {
        return Err(CONTEXT_IS_DESTROYED);
    }
    context.device.sticky()?;
    Ok(context)
}

/// `cuCtxSetCurrent`: replaces the top of the thread's stack (pushes onto an empty one); NULL
/// pops it.
pub fn set_current(handle: usize) -> CuResult<()> {
    let driver = driver()?;
    if handle == 0 {
        return with_stack(|stack| {
            stack.pop();
        });
    }
    let context = driver.context_of_handle(handle)?;
    with_stack(|stack| {
        stack.pop();
        stack.push(context);
    })
}

/// `cuCtxPushCurrent`.
pub fn push_current(handle: usize) -> CuResult<()> {
    let context = driver()?.context_of_handle(handle)?;
    with_stack(|stack| stack.push(context))
}

/// `cuCtxPopCurrent`: the handle of the context popped (`CUDA_ERROR_INVALID_CONTEXT` if none).
pub fn pop_current() -> CuResult<usize> {
    driver()?;
    let context = with_stack(|stack| stack.pop())?.ok_or(INVALID_CONTEXT)?;
    Ok(context.handle())
}

/// `cuCtxGetCurrent`: the handle of the current context, or 0.
pub fn current_handle() -> CuResult<usize> {
    driver()?;
    Ok(current_context()?.map_or(0, Context::handle))
}

/// Valid `CU_CTX_*` flags: within `CU_CTX_FLAGS_MASK`, with at most one scheduling policy.
pub fn check_context_flags(flags: u32) -> CuResult<()> {
    const FLAGS_MASK: u32 = 0xFF;
    if flags & !FLAGS_MASK != 0 || !matches!(flags & 0x7, 0 | 1 | 2 | 4) {
        return Err(INVALID_VALUE);
    }
    Ok(())
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

/// What an address is, for pointer attributes and copies; `device` is the ordinal of the device
/// the memory belongs to (for page-locked memory, the device whose context allocated it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    Device {
        start: usize,
        size: usize,
        managed: bool,
        device: usize,
    },
    Pinned {
        start: usize,
        size: usize,
        device: usize,
    },
    Pageable,
}

impl Driver {
    pub fn new(config: Config) -> CuResult<Driver> {
        let mut contexts = Vec::with_capacity(config.devices);
        for ordinal in 0..config.devices {
            let capacity = config.capacities[ordinal];
            let memory = DeviceMemory::new(capacity)?;
            let stats = Stats::default();
            Stats::add(&stats.capacity_bytes, capacity);
            // Device 0 keeps the seed as it is, so one-device runs draw the delays they always did.
            let seed = config
                .seed
                .wrapping_add((ordinal as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
            let jitter = config.jitter;
            let device: &'static Device = Box::leak(Box::new(Device {
                ordinal,
                config: config.clone(),
                memory,
                stats,
                pending_frees: Mutex::new(HashSet::new()),
                sticky: AtomicU32::new(0),
                jitter: Mutex::new(HashMap::new()),
                pool: Mutex::new(Pool {
                    reuse: [1; 3],
                    ..Pool::default()
                }),
                owners: Mutex::new(HashMap::new()),
            }));
            contexts.push(Context {
                ordinal,
                device,
                streams: Streams::new(device, jitter, seed),
                primary: true,
                flags: AtomicU32::new(0),
                destroyed: AtomicBool::new(false),
            });
        }
        let vmm = VirtualMemory::new(config.vmm_granularity);
        Ok(Driver {
            config,
            contexts,
            created: Mutex::new(Vec::new()),
            pinned: PinnedMemory::default(),
            vmm,
            functions: Functions::default(),
            events: Mutex::new(HashMap::new()),
            peers: Mutex::new([0; MAX_DEVICES]),
            retains: Mutex::new([0; MAX_DEVICES]),
            function_attributes: Mutex::new(HashMap::new()),
            storage: Mutex::new(HashMap::new()),
            graphs: Default::default(),
        })
    }

    pub fn count(&self) -> usize {
        self.contexts.len()
    }

    /// The device of ordinal `ordinal` (`CUDA_ERROR_INVALID_DEVICE` if there is none).
    pub fn device(&self, ordinal: i32) -> CuResult<&'static Device> {
        Ok(self.context(ordinal)?.device)
    }

    /// The primary context of device `ordinal`.
    pub fn context(&self, ordinal: i32) -> CuResult<&Context> {
        usize::try_from(ordinal)
            .ok()
            .and_then(|i| self.contexts.get(i))
            .ok_or(INVALID_DEVICE)
    }

    /// The ordinal of the context whose handle is `handle`.
    pub fn ordinal_of_handle(&self, handle: usize) -> Option<usize> {
        let base = self.contexts.as_ptr() as usize;
        let offset = handle.checked_sub(base)?;
        let index = offset / size_of::<Context>();
        (offset % size_of::<Context>() == 0 && index < self.contexts.len()).then_some(index)
    }

    /// The live context whose handle is `handle`: a primary context, or one made with
    /// `cuCtxCreate` and not destroyed (`CUDA_ERROR_INVALID_CONTEXT` otherwise).
    pub fn context_of_handle(&self, handle: usize) -> CuResult<&Context> {
        if let Some(i) = self.ordinal_of_handle(handle) {
            return Ok(&self.contexts[i]);
        }
        self.created
            .lock()
            .iter()
            .find(|c| c.handle() == handle)
            .copied()
            .ok_or(INVALID_CONTEXT)
    }

    /// The calling thread's current context, or device 0's.
    pub fn current_or_first(&self) -> &Context {
        &self.contexts[current_ordinal().unwrap_or(0)]
    }

    /// The counters of the calling thread's current device (device 0 without a context).
    pub fn stats(&self) -> StatsSnapshot {
        self.current_or_first().device.stats.snapshot()
    }

    /// Writes `CUDA_SHIM_STATS`: device 0's counters as the top-level keys (exactly the
    /// one-device file), and with several devices also `devices`, every device's counters in
    /// ordinal order.
    fn write_stats(&self, path: &str) {
        #[derive(serde::Serialize)]
        struct Several {
            #[serde(flatten)]
            first: StatsSnapshot,
            devices: Vec<StatsSnapshot>,
        }
        let first = self.contexts[0].device.stats.snapshot();
        if self.contexts.len() == 1 {
            write_json(path, &first);
        } else {
            let devices = self
                .contexts
                .iter()
                .map(|c| c.device.stats.snapshot())
                .collect();
            write_json(path, &Several { first, devices });
        }
    }

    /// The device whose heap range contains `addr` (live or not).
    fn heap_owner(&self, addr: usize) -> Option<&'static Device> {
        self.contexts
            .iter()
            .map(|c| c.device)
            .find(|d| d.memory.in_span(addr))
    }

    /// The page-locked host allocation devices reach `addr` in: mapped page-locked memory, or
    /// host memory of the virtual memory API mapped there: (start, size).
    pub fn host_range(&self, addr: usize) -> Option<(usize, usize)> {
        self.pinned.find(addr).or_else(|| {
            let mapping = self.vmm.mapping(addr)?;
            (mapping.device == vmm::HOST).then_some((mapping.start, mapping.size))
        })
    }

    pub fn place(&self, addr: usize) -> Place {
        if let Some(device) = self.heap_owner(addr) {
            if let Some(block) = device.memory.find(addr) {
                return Place::Device {
                    start: block.start,
                    size: block.size,
                    managed: block.kind == DeviceKind::Managed,
                    device: device.ordinal,
                };
            }
        }
        if let Some(mapping) = self.vmm.mapping(addr) {
            // Each cuMemMap is an allocation range of its own, as on CUDA; host memory mapped
            // there is page-locked host memory every device reaches.
            if mapping.device == vmm::HOST {
                return Place::Pinned {
                    start: mapping.start,
                    size: mapping.size,
                    device: 0,
                };
            }
            return Place::Device {
                start: mapping.start,
                size: mapping.size,
                managed: false,
                device: mapping.device,
            };
        }
        match self.pinned.find_with_device(addr) {
            Some((start, size, device)) => Place::Pinned {
                start,
                size,
                device,
            },
            None => Place::Pageable,
        }
    }

    /// Whether `[addr, addr + len)` is device memory (`Ok(Some(device))`), host memory
    /// (`Ok(None)`), or an invalid device range (outside every live block, or running past its
    /// end). Any device's memory is device memory here: unified addressing.
    fn locate(&self, addr: usize, len: usize, access: Access) -> CuResult<Option<&'static Device>> {
        if addr == 0 {
            return Err(INVALID_VALUE);
        }
        if let Some(device) = self.heap_owner(addr) {
            device.memory.check_range(addr, len)?;
            return Ok(Some(device));
        }
        if self.vmm.reserved(addr) {
            // Mapped with the access the operation needs (cuMemSetAccess), possibly across
            // several adjacent mappings.
            self.vmm.check_range(addr, len, access == Access::Write)?;
            let device = self.vmm.mapping(addr).ok_or(INVALID_VALUE)?.device;
            if device == vmm::HOST {
                return Ok(None);
            }
            return Ok(Some(self.contexts[device].device));
        }
        Ok(None)
    }

    /// The context owning stream `handle`: the special handles (0, `CU_STREAM_LEGACY`,
    /// `CU_STREAM_PER_THREAD`) name streams of the current context, a created stream belongs to
    /// the context it was created in.
    pub fn stream_owner(
        &self,
        current: Option<&'static Context>,
        handle: usize,
    ) -> CuResult<&Context> {
        match handle {
            0 | crate::stream::LEGACY | crate::stream::PER_THREAD => current.ok_or(INVALID_CONTEXT),
            _ => match self.contexts.iter().find(|c| c.streams.owns(handle)) {
                Some(context) => Ok(context),
                None => self
                    .created
                    .lock()
                    .iter()
                    .find(|c| c.streams.owns(handle))
                    .copied()
                    .ok_or(INVALID_HANDLE),
            },
        }
    }

    /// Waits for all work submitted to every device.
    pub fn synchronize_all(&self) {
        for context in &self.contexts {
            context.wait_all();
        }
        let created = self.created.lock().clone();
        for context in created {
            context.wait_all();
        }
    }

    // ---- peer access ----

    pub fn peer_enabled(&self, from: usize, to: usize) -> bool {
        from == to || self.peers.lock()[from] & (1 << to) != 0
    }

    /// `cuCtxEnablePeerAccess` from context `from` to the memory of device `to` (distinct).
    pub fn enable_peer(&self, from: usize, to: usize) -> CuResult<()> {
        let mut peers = self.peers.lock();
        if peers[from] & (1 << to) != 0 {
            return Err(PEER_ACCESS_ALREADY_ENABLED);
        }
        peers[from] |= 1 << to;
        Ok(())
    }

    pub fn disable_peer(&self, from: usize, to: usize) -> CuResult<()> {
        let mut peers = self.peers.lock();
        if peers[from] & (1 << to) == 0 {
            return Err(PEER_ACCESS_NOT_ENABLED);
        }
        peers[from] &= !(1 << to);
        Ok(())
    }

    // ---- memory not tied to the current device ----

    /// `cuMemFreeHost`: page-locked memory of any device.
    pub fn free_host(&self, addr: usize) -> CuResult<()> {
        let (size, device) = self.pinned.free(addr)?;
        let device = self.contexts[device].device;
        device.owners.lock().remove(&addr);
        device.stats.pinned_freed(size as u64);
        Ok(())
    }

    /// `cuMemUnmap`: waits for all submitted work of every device (which may use the range),
    /// then unmaps.
    pub fn unmap(&self, ptr: usize, size: usize) -> CuResult<()> {
        self.synchronize_all();
        self.vmm.unmap(ptr, size, self)
    }

    // ---- primary contexts ----

    /// `cuDevicePrimaryCtxRetain`: the context becomes (or stays) active.
    pub fn retain_primary(&self, device: usize) {
        self.retains.lock()[device] += 1;
    }

    /// `cuDevicePrimaryCtxRelease`: `CUDA_ERROR_INVALID_CONTEXT` when it is not retained. The
    /// context's state (memory, streams) outlives its last release on the shim.
    pub fn release_primary(&self, device: usize) -> CuResult<()> {
        let mut retains = self.retains.lock();
        if retains[device] == 0 {
            return Err(INVALID_CONTEXT);
        }
        retains[device] -= 1;
        Ok(())
    }

    pub fn primary_active(&self, device: usize) -> bool {
        self.retains.lock()[device] > 0
    }

    /// `cuDevicePrimaryCtxReset`: destroys everything the primary context of `device` holds
    /// (after its queued work ran): its streams, its events, the device memory and page-locked
    /// memory it allocated (memory of a created context, and stream-ordered allocations of the
    /// default pool, stay, as on CUDA), host registrations, peer access to and from the device,
    /// its flags, a sticky fault, the modules' variables on the device (made afresh at their next
    /// use) and the context-local storage (its destructors run). The context object stays (its
    /// handle too: threads where it is current keep it) and becomes inactive: the retain count
    /// drops to 0, as NVIDIA's driver does, and the next retain makes it active again.
    pub fn reset_primary(&self, device: usize) {
        let context = &self.contexts[device];
        self.release_resources(context);
        crate::module::Module::forget_globals(device);
        self.drop_storage(context.handle());
        let mut peers = self.peers.lock();
        peers[device] = 0;
        for peer in peers.iter_mut() {
            *peer &= !(1 << device);
        }
        drop(peers);
        context.flags.store(0, Ordering::Release);
        context.device.sticky.store(0, Ordering::Release);
        self.retains.lock()[device] = 0;
    }

    /// `cuCtxCreate`: a new context of device `ordinal`, pushed on the calling thread's stack.
    /// It has its own streams (its own legacy default stream), events and allocations, which
    /// its destruction frees; it shares the device's memory capacity, sticky fault and peer
    /// access with the primary context (on CUDA each context has its own).
    pub fn create_context(&self, ordinal: usize, flags: u32) -> CuResult<&'static Context> {
        check_context_flags(flags)?;
        let device = self.contexts.get(ordinal).ok_or(INVALID_DEVICE)?.device;
        static CREATED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let n = CREATED.fetch_add(1, Ordering::Relaxed);
        let seed = self.config.seed.wrapping_add(
            (n * MAX_DEVICES as u64 + ordinal as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
        );
        let context: &'static Context = Box::leak(Box::new(Context {
            ordinal,
            device,
            streams: Streams::new(device, self.config.jitter, seed),
            primary: false,
            flags: AtomicU32::new(flags),
            destroyed: AtomicBool::new(false),
        }));
        self.created.lock().push(context);
        with_stack(|stack| stack.push(context))?;
        Ok(context)
    }

    /// `cuCtxDestroy`: a context made with `cuCtxCreate` (a primary context, or one destroyed
    /// already, is `CUDA_ERROR_INVALID_CONTEXT`). Its queued work finishes, then its streams,
    /// events and memory are freed; it is popped if current to the calling thread, and any
    /// other thread where it is current gets `CUDA_ERROR_CONTEXT_IS_DESTROYED`.
    pub fn destroy_context(&self, handle: usize) -> CuResult<()> {
        let context = {
            let mut created = self.created.lock();
            let index = created
                .iter()
                .position(|c| c.handle() == handle)
                .ok_or(INVALID_CONTEXT)?;
            created.swap_remove(index)
        };
        context.destroyed.store(true, Ordering::Release);
        self.release_resources(context);
        self.drop_storage(handle);
        // A thread whose locals are gone has nothing current to pop.
        let _ = with_stack(|stack| {
            if stack.last().is_some_and(|c| c.handle() == handle) {
                stack.pop();
            }
        });
        Ok(())
    }

    /// Frees what `context` owns once its queued work ran: its streams and events, and the
    /// device blocks and page-locked ranges made in it. A primary context owns what no created
    /// context of its device owns, but for the default pool's blocks.
    fn release_resources(&self, context: &Context) {
        context.wait_all();
        context.streams.clear();
        let handle = context.handle();
        self.events.lock().retain(|_, event| {
            let kept = event.owner != handle;
            if !kept {
                self.contexts[event.context].device.stats.event_destroyed();
            }
            kept
        });
        let device = context.device;
        let owned = |addr: usize| match device.owners.lock().get(&addr) {
            Some(&owner) => owner == handle,
            None => context.primary,
        };
        for addr in device.memory.live_starts() {
            let pooled = context.primary && device.pool_owns(addr);
            if owned(addr) && !pooled && !device.pending_frees.lock().contains(&addr) {
                device.owners.lock().remove(&addr);
                let _ = device.memory.free(addr, &device.stats);
            }
        }
        for addr in self.pinned.starts_of(device.ordinal) {
            if owned(addr) {
                let _ = if self.pinned.is_registered(addr) {
                    self.unregister_host(addr)
                } else {
                    self.free_host(addr)
                };
                device.owners.lock().remove(&addr);
            }
        }
    }

    // ---- context-local storage ----

    /// Stores `value` under `key` in context `handle`, replacing what was there.
    pub fn storage_put(
        &self,
        handle: usize,
        key: usize,
        value: usize,
        destructor: Option<StorageDestructor>,
    ) -> CuResult<()> {
        self.context_of_handle(handle)?;
        self.storage
            .lock()
            .insert((handle, key), (value, destructor));
        Ok(())
    }

    /// The value under `key` in context `handle` (`CUDA_ERROR_INVALID_HANDLE` if none).
    pub fn storage_get(&self, handle: usize, key: usize) -> CuResult<usize> {
        self.context_of_handle(handle)?;
        let storage = self.storage.lock();
        storage
            .get(&(handle, key))
            .map(|&(value, _)| value)
            .ok_or(INVALID_HANDLE)
    }

    /// Forgets `key` in context `handle`, without calling its destructor.
    pub fn storage_delete(&self, handle: usize, key: usize) -> CuResult<()> {
        self.context_of_handle(handle)?;
        self.storage.lock().remove(&(handle, key));
        Ok(())
    }

    /// A reset or destroyed context loses its storage: each destructor runs once, outside the
    /// lock (it may call the driver).
    fn drop_storage(&self, handle: usize) {
        let mut dropped = Vec::new();
        self.storage
            .lock()
            .retain(|&(context, key), &mut (value, destructor)| {
                if context != handle {
                    return true;
                }
                dropped.extend(destructor.map(|d| (d, key, value)));
                false
            });
        for (destructor, key, value) in dropped {
            // SAFETY: the destructor the storage's owner registered, with the arguments it was
            // registered for.
            unsafe { destructor(handle, key, value) };
        }
    }

    // ---- function attributes ----

    /// Max dynamic shared memory (default 48 KiB) and preferred carveout (default -1).
    pub fn function_attributes(&self, function: usize) -> [i32; 2] {
        self.function_attributes
            .lock()
            .get(&function)
            .copied()
            .unwrap_or([48 << 10, -1])
    }

    pub fn set_function_attribute(&self, function: usize, index: usize, value: i32) {
        let mut attributes = self.function_attributes(function);
        attributes[index] = value;
        self.function_attributes.lock().insert(function, attributes);
    }

    // ---- host memory registration ----

    /// `cuMemHostRegister`: page-locks `[addr, addr + size)` for the current device.
    pub fn register_host(&self, addr: usize, size: usize, device: usize) -> CuResult<()> {
        let stats = &self.contexts[device].device.stats;
        self.pinned.register(addr, size, device, stats)
    }

    /// `cuMemHostUnregister`.
    pub fn unregister_host(&self, addr: usize) -> CuResult<()> {
        let (size, device) = self.pinned.unregister(addr)?;
        self.contexts[device].device.stats.pinned_freed(size as u64);
        Ok(())
    }

    // ---- interprocess handles ----

    /// The device block `addr` starts (or lies in) that `cuIpcGetMemHandle` can export: memory
    /// of `cuMemAlloc`, not managed memory, virtual memory mappings or pool allocations.
    pub fn ipc_block(&self, addr: usize) -> CuResult<(usize, usize, usize)> {
        let device = self.heap_owner(addr).ok_or(INVALID_VALUE)?;
        let block = device.memory.find(addr).ok_or(INVALID_VALUE)?;
        if block.kind != DeviceKind::Device || device.pool_owns(block.start) {
            return Err(INVALID_VALUE);
        }
        Ok((block.start, block.size, device.ordinal))
    }

    /// The event an IPC handle names, for `cuIpcOpenEventHandle`: a new event of the current
    /// context sharing the original's records.
    pub fn open_event(&self, handle: usize, context: usize) -> CuResult<usize> {
        let original = self.event(handle).map_err(|_| INVALID_VALUE)?;
        let event = Arc::new(Event {
            flags: original.flags,
            context,
            owner: current_handle().unwrap_or(0),
            recorded: original.recorded.clone(),
        });
        let handle = Arc::as_ptr(&event) as usize;
        self.contexts[context].device.stats.event_created();
        self.events.lock().insert(handle, event);
        Ok(handle)
    }

    /// Whether `handle` is a live interprocess event (`CUDA_ERROR_INVALID_HANDLE` if it is no
    /// event, or one created without `CU_EVENT_INTERPROCESS`).
    pub fn ipc_event(&self, handle: usize) -> CuResult<()> {
        let event = self.event(handle)?;
        if event.flags & EVENT_INTERPROCESS == 0 {
            return Err(INVALID_HANDLE);
        }
        Ok(())
    }

    // ---- events ----

    pub(crate) fn event(&self, handle: usize) -> CuResult<Arc<Event>> {
        self.events
            .lock()
            .get(&handle)
            .cloned()
            .ok_or(INVALID_HANDLE)
    }

    pub fn event_destroy(&self, handle: usize) -> CuResult<()> {
        let event = self.events.lock().remove(&handle).ok_or(INVALID_HANDLE)?;
        self.contexts[event.context].device.stats.event_destroyed();
        Ok(())
    }

    /// `cuEventQuery` of an event of any device.
    pub fn event_query(&self, handle: usize) -> CuResult<()> {
        let event = self.event(handle)?;
        self.graphs.check_event(handle)?;
        let marker = event.recorded.lock().clone();
        match marker.map(|m| m.completed_at()) {
            Some(None) => Err(NOT_READY),
            _ => self.contexts[event.context].device.sticky(),
        }
    }

    /// `cuEventSynchronize` of an event of any device.
    pub fn event_synchronize(&self, handle: usize) -> CuResult<()> {
        let event = self.event(handle)?;
        self.graphs.check_event(handle)?;
        let marker = event.recorded.lock().clone();
        if let Some(marker) = marker {
            marker.wait();
        }
        self.contexts[event.context].device.sticky()
    }

    /// Milliseconds between two completed records of timing-enabled events of one device.
    pub fn event_elapsed(&self, start: usize, end: usize) -> CuResult<f32> {
        let (start, end) = (self.event(start)?, self.event(end)?);
        if (start.flags | end.flags) & EVENT_DISABLE_TIMING != 0 || start.context != end.context {
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

impl Context {
    /// The `CUcontext` handle of this context: its address.
    pub fn handle(&self) -> usize {
        self as *const Context as usize
    }

    pub(crate) fn driver(&self) -> &'static Driver {
        // A context exists only inside the driver.
        DRIVER
            .get()
            .expect("cuda-shim: a context outside the driver")
    }

    /// This context as the `'static` reference the driver holds (`CUDA_ERROR_INVALID_CONTEXT`
    /// once destroyed).
    fn this(&self) -> CuResult<&'static Context> {
        self.driver().context_of_handle(self.handle())
    }

    /// The context owning stream `handle`, with this one as the current context.
    pub(crate) fn owner(&self, stream: usize) -> CuResult<&'static Context> {
        self.driver().stream_owner(Some(self.this()?), stream)
    }

    /// `CU_CTX_*` flags (`cuCtxGetFlags`, `cuDevicePrimaryCtxGetState`): those set, and always
    /// `CU_CTX_MAP_HOST`, as NVIDIA's driver reports them. Every context since CUDA 3.2 maps
    /// pinned memory (cuda.h: the flag "no longer has any effect"), and NVIDIA's runtime counts
    /// on the driver to say so: `cudaGetDeviceFlags` answers whatever the driver reports (13.5:
    /// `cudaDeviceMapHost` for a device not yet initialised), and `cudaSetDeviceFlags` drops the
    /// flag before it reaches `cuDevicePrimaryCtxSetFlags` (NVIDIA's runtimes 12.9 to 13.5).
    pub fn flags(&self) -> u32 {
        const CU_CTX_MAP_HOST: u32 = 0x08;
        self.flags.load(Ordering::Acquire) | CU_CTX_MAP_HOST
    }

    /// `cuDevicePrimaryCtxSetFlags`/`cuCtxSetFlags`.
    pub fn set_flags(&self, flags: u32) -> CuResult<()> {
        check_context_flags(flags)?;
        self.flags.store(flags, Ordering::Release);
        Ok(())
    }

    /// Records that this context, if created with `cuCtxCreate`, owns the allocation at `addr`.
    fn own(&self, addr: usize) {
        if !self.primary {
            self.device.owners.lock().insert(addr, self.handle());
        }
    }

    /// Whether `stream` names a stream this context may use (its own special handles, or a
    /// live stream of any device).
    pub fn check_stream(&self, stream: usize) -> CuResult<()> {
        self.owner(stream).map(drop)
    }

    pub fn stats(&self) -> StatsSnapshot {
        self.device.stats.snapshot()
    }

    // ---- memory ----

    pub fn alloc(&self, size: usize, kind: DeviceKind) -> CuResult<usize> {
        let addr = self.device.memory.alloc(size, kind, &self.device.stats)?;
        self.own(addr);
        Ok(addr)
    }

    /// `cuMemAllocHost`/`cuMemHostAlloc`: page-locked memory, counted on this device.
    pub fn alloc_host(&self, size: usize) -> CuResult<usize> {
        let addr = self
            .driver()
            .pinned
            .alloc(size, self.ordinal, &self.device.stats)?;
        self.own(addr);
        Ok(addr)
    }

    /// `cuMemFree` of a block of any device (unified addressing): waits for all work submitted
    /// to this context and to the block's device (as the real call synchronises), then frees.
    pub fn free(&self, addr: usize) -> CuResult<()> {
        let owner = self.driver().heap_owner(addr).ok_or(INVALID_VALUE)?;
        if owner.pending_frees.lock().contains(&addr) {
            return Err(INVALID_VALUE);
        }
        if let GraphFree::Freed = self.graphs_free(addr)? {
            return self.synchronize();
        }
        owner
            .memory
            .find(addr)
            .filter(|b| b.start == addr)
            .ok_or(INVALID_VALUE)?;
        self.synchronize()?;
        if owner.ordinal != self.ordinal {
            self.driver().contexts[owner.ordinal].wait_all();
        }
        owner.pool_release(addr);
        owner.owners.lock().remove(&addr);
        owner.memory.free(addr, &owner.stats).map(drop)
    }

    /// `cuMemFreeAsync`: the block (of any device) returns to its heap when the stream reaches
    /// the free.
    ///
    /// On a capturing stream it is a free node of a graph allocation (see `graph.rs`).
    pub fn free_async(&self, addr: usize, stream: usize) -> CuResult<()> {
        let target = self.owner(stream)?;
        if target.captures(stream)? {
            return target.capture_free(stream, addr);
        }
        target.outside_capture(stream)?;
        let owner = self.driver().heap_owner(addr).ok_or(INVALID_VALUE)?;
        let block = owner.memory.find(addr).ok_or(INVALID_VALUE)?;
        if block.start != addr || owner.pending_frees.lock().contains(&addr) {
            return Err(INVALID_VALUE);
        }
        if let GraphFree::Freed = self.graphs_free(addr)? {
            return Ok(());
        }
        owner.pending_frees.lock().insert(addr);
        let work = Work::Free {
            device: owner,
            addr,
        };
        target.enqueue(stream, work, None).map(drop)
    }

    /// A free outside capture of a graph allocation (see `graph::Graphs::free_allocation`).
    fn graphs_free(&self, addr: usize) -> CuResult<GraphFree> {
        self.driver().graphs.free_allocation(addr)
    }

    pub fn place(&self, addr: usize) -> Place {
        self.driver().place(addr)
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
    /// the source and the destination, checked against what the addresses are. Either side may
    /// be any device's memory (unified addressing), and the stream may belong to another device
    /// than this context's (CUDA allows copies there). The device-side counter of the copy goes
    /// to the device owning that side: the destination's for host-to-device and device-to-device
    /// copies, the source's for device-to-host copies.
    pub fn copy_2d(
        &self,
        rect: Rect,
        kind: u32,
        declared: [MemoryType; 2],
        stream: usize,
        synchronous: bool,
    ) -> CuResult<()> {
        let target = self.owner(stream)?;
        if synchronous {
            target.outside_capture(stream)?;
            self.driver().graphs.unsafe_call()?;
        }
        // Pageable memory is staged by an asynchronous copy; a captured copy reads its source
        // when the graph runs, as a memcpy node does.
        let stage = !synchronous && !target.captures(stream)?;
        let Some((work, tally)) = self.copy_work(rect, kind, declared, stage)? else {
            return Ok(());
        };
        let Work::Copy { direction, .. } = work else {
            return Err(UNKNOWN);
        };
        // An asynchronous copy into pageable memory returns once it is done, as on CUDA (the
        // caller may read the destination at once; cudarc relies on it).
        let pageable_destination = direction == Direction::DeviceToHost
            && self.driver().place(rect.dst) == Place::Pageable;
        let Some(done) = target.enqueue(stream, work, tally)? else {
            return Ok(());
        };
        if (synchronous && direction != Direction::DeviceToDevice) || pageable_destination {
            done.wait();
            target.device.sticky()?;
        }
        Ok(())
    }

    /// The copy `copy_2d` queues (or a memcpy node runs), validated, with the counter it adds
    /// to; None when it copies nothing. With `stage`, a pageable host source is read now.
    pub fn copy_work(
        &self,
        rect: Rect,
        kind: u32,
        declared: [MemoryType; 2],
        stage: bool,
    ) -> CuResult<Option<(Work, crate::graph::Tally)>> {
        let Rect {
            dst,
            dst_pitch,
            src,
            src_pitch,
            width,
            height,
        } = rect;
        if width == 0 || height == 0 {
            return Ok(None);
        }
        if height > 1
            && (src_pitch < width || dst_pitch < width || src_pitch.max(dst_pitch) > MAX_PITCH)
        {
            return Err(INVALID_VALUE);
        }
        let driver = self.driver();
        let src_span = span(src_pitch, width, height)?;
        let dst_span = span(dst_pitch, width, height)?;
        let src_device = driver.locate(src, src_span, Access::Read)?;
        let dst_device = driver.locate(dst, dst_span, Access::Write)?;
        for (declared, address, device) in [
            (declared[0], src, src_device.is_some()),
            (declared[1], dst, dst_device.is_some()),
        ] {
            let fits = match declared {
                MemoryType::Any => true,
                MemoryType::Host => !device,
                MemoryType::Device => device || driver.place(address) != Place::Pageable,
            };
            if !fits {
                return Err(INVALID_VALUE);
            }
        }
        let direction = match (src_device, dst_device) {
            (None, None) => Direction::HostToHost,
            (None, Some(_)) => Direction::HostToDevice,
            (Some(_), None) => Direction::DeviceToHost,
            (Some(_), Some(_)) => Direction::DeviceToDevice,
        };
        if kind != 4 && kind != direction as u32 {
            return Err(INVALID_VALUE);
        }
        let pageable_source = !matches!(
            direction,
            Direction::DeviceToHost | Direction::DeviceToDevice
        ) && driver.place(src) == Place::Pageable;
        let (source, src_pitch) = if pageable_source && stage {
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
        let tally = match (direction, src_device, dst_device) {
            (Direction::HostToDevice, _, Some(d)) => Some((&d.stats.h2d_bytes, len)),
            (Direction::DeviceToHost, Some(d), _) => Some((&d.stats.d2h_bytes, len)),
            (Direction::DeviceToDevice, _, Some(d)) => Some((&d.stats.d2d_bytes, len)),
            _ => None,
        };
        let work = Work::Copy {
            dst,
            dst_pitch,
            src: source,
            src_pitch,
            width,
            height,
            direction,
        };
        Ok(Some((work, tally)))
    }

    /// A peer copy (`cuMemcpyPeer`): serialised with all pending and future work of this
    /// context and of both peers' contexts, by running it between synchronisations of all three
    /// (so the host also waits, which CUDA does not promise).
    pub fn copy_peer(
        &self,
        dst: usize,
        src: usize,
        len: usize,
        peers: [&Context; 2],
    ) -> CuResult<()> {
        self.synchronize()?;
        for peer in peers {
            peer.wait_all();
        }
        self.copy(dst, src, len, 3, 0, false)?;
        self.synchronize()?;
        for peer in peers {
            peer.wait_all();
        }
        Ok(())
    }

    pub fn memset(&self, dst: usize, value: u8, len: usize, stream: usize) -> CuResult<()> {
        self.memset_2d(dst, len, u32::from(value), 1, len, 1, stream)
    }

    /// `cuMemsetD2D{8,16,32}`: `height` rows of `width` elements of `element` bytes, `pitch`
    /// bytes apart (the pitch is unused for one row). The address must be aligned to the
    /// element size, and every row must lie in device memory (of any device) or in one mapped
    /// page-locked allocation. Counted on the device owning the memory (the stream's device for
    /// page-locked memory).
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
        let target = self.owner(stream)?;
        match target.memset_work(dst, pitch, value, element, width, height)? {
            Some((work, tally)) => target.enqueue(stream, work, tally).map(drop),
            None => Ok(()),
        }
    }

    /// The memset `memset_2d` queues (or a memset node runs), validated; None when it sets
    /// nothing. Page-locked memory counts on this context's device.
    pub fn memset_work(
        &self,
        dst: usize,
        pitch: usize,
        value: u32,
        element: usize,
        width: usize,
        height: usize,
    ) -> CuResult<Option<(Work, crate::graph::Tally)>> {
        if width == 0 || height == 0 {
            return Ok(None);
        }
        let row = width.checked_mul(element).ok_or(INVALID_VALUE)?;
        let pitch = if height == 1 { row } else { pitch };
        if dst % element != 0 || pitch < row || pitch % element != 0 {
            return Err(INVALID_VALUE);
        }
        let len = span(pitch, row, height)?;
        let driver = self.driver();
        let counted = match driver.locate(dst, len, Access::Write)? {
            Some(device) => device,
            None => {
                // Mapped page-locked memory, written through its device address (unified
                // addressing): the range must lie in one allocation.
                let (start, size) = driver.host_range(dst).ok_or(INVALID_VALUE)?;
                if dst.checked_add(len).is_none_or(|end| end > start + size) {
                    return Err(INVALID_VALUE);
                }
                self.device
            }
        };
        let work = Work::Memset {
            dst,
            pitch,
            value,
            element,
            width,
            height,
        };
        let tally = Some((&counted.stats.memset_bytes, (row * height) as u64));
        Ok(Some((work, tally)))
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

    /// `cuMemAllocAsync`: from the default pool of the stream's device, as CUDA allocates; on
    /// a capturing stream, an alloc node of the capture's graph (see `graph.rs`).
    pub fn alloc_async(&self, size: usize, stream: usize) -> CuResult<usize> {
        let target = self.owner(stream)?;
        let device = target.device;
        if target.captures(stream)? {
            return target.capture_alloc(stream, device, size);
        }
        target.outside_capture(stream)?;
        let addr = device
            .memory
            .alloc(size, DeviceKind::Device, &device.stats)?;
        device.pool_serve(addr, size);
        Ok(addr)
    }

    /// `cuMemAllocFromPoolAsync`: from the pool's device; the stream may be any device's. On
    /// a capturing stream, an alloc node (the shim's only pool is the default one, whose
    /// properties a graph allocation has anyway).
    pub fn alloc_from_pool(&self, size: usize, device: usize, stream: usize) -> CuResult<usize> {
        let target = self.owner(stream)?;
        let device = self.driver().contexts[device].device;
        if target.captures(stream)? {
            return target.capture_alloc(stream, device, size);
        }
        target.outside_capture(stream)?;
        let addr = device
            .memory
            .alloc(size, DeviceKind::Device, &device.stats)?;
        device.pool_serve(addr, size);
        Ok(addr)
    }

    // ---- kernels ----

    /// Queues the launch `work` builds (see `kernel`) on `stream`, which must belong to this
    /// context: a launch on another device's stream is `CUDA_ERROR_INVALID_HANDLE`, as on CUDA.
    pub fn launch(
        &self,
        stream: usize,
        work: impl FnOnce(&Context) -> CuResult<Work>,
    ) -> CuResult<()> {
        if self.owner(stream)?.ordinal != self.ordinal {
            return Err(INVALID_HANDLE);
        }
        let work = work(self)?;
        let tally = Some((&self.device.stats.kernel_launches, 1));
        self.enqueue(stream, work, tally).map(drop)
    }

    /// The launch of `function` on this context, its arguments packed: `params[i]` points to
    /// the value of parameter i (`kernelParams`), or `packed` is an already packed buffer
    /// (`extra`). What a launch queues, or a kernel node runs.
    pub fn kernel(
        &self,
        function: usize,
        params: Option<&[*const u8]>,
        packed: Option<&[u8]>,
        mut shape: Shape,
    ) -> CuResult<Work> {
        let layout = self.driver().functions.by_handle(function)?.layout();
        match &layout.body {
            None => return Err(NOT_FOUND),
            Some(Body::NoImage) => return Err(NO_BINARY_FOR_GPU),
            Some(Body::Host(_)) => {}
            Some(Body::Ptx(kernel)) => {
                if let Some(ptx::Fault::Unsupported { what, line }) =
                    ptx::first_unsupported(&kernel.kernel)
                {
                    crate::module::report(&format!(
                        "kernel {} uses `{what}` (PTX line {line}), outside the subset the shim \
                         interprets (docs/ARCHITECTURE.md); CUDA_ERROR_INVALID_PTX",
                        kernel.kernel.name
                    ));
                    return Err(INVALID_PTX);
                }
                shape.globals = self.module_globals(kernel.module)?;
            }
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
        Ok(Work::Launch {
            layout,
            buffer,
            shape,
        })
    }

    /// The device addresses of `module`'s variables on this context's device: device memory of
    /// the primary context, outside the program's allocations (as on CUDA), made and initialised
    /// from the PTX at first use.
    pub fn module_globals(&self, module: &crate::module::Module) -> CuResult<Vec<u64>> {
        let primary = &self.driver().contexts[self.ordinal];
        module.globals(
            self.ordinal,
            |size| primary.alloc(size, DeviceKind::Device).map(|a| a as u64),
            |addr, bytes| {
                // SAFETY: `addr` was just allocated with at least `bytes.len()` bytes of device
                // memory, which is host-addressable on the shim.
                unsafe {
                    std::ptr::copy_nonoverlapping(bytes.as_ptr(), addr as *mut u8, bytes.len())
                };
                Ok(())
            },
        )
    }

    // ---- synchronisation ----

    /// Waits for all work submitted to this context, whatever its sticky state.
    fn wait_all(&self) {
        for marker in self.streams.all_tails() {
            marker.wait();
        }
    }

    pub fn synchronize(&self) -> CuResult<()> {
        self.wait_all();
        self.device.sticky()
    }

    /// `cuStreamSynchronize` of a stream of any device.
    pub fn stream_synchronize(&self, stream: usize) -> CuResult<()> {
        let target = self.owner(stream)?;
        target.outside_capture(stream)?;
        target.streams.tail(stream)?.wait();
        target.device.sticky()
    }

    pub fn stream_query(&self, stream: usize) -> CuResult<()> {
        let target = self.owner(stream)?;
        target.outside_capture(stream)?;
        match target.streams.tail(stream)?.completed_at() {
            Some(_) => target.device.sticky(),
            None => Err(NOT_READY),
        }
    }

    pub fn stream_destroy(&self, stream: usize) -> CuResult<()> {
        self.owner(stream)?.streams.destroy(stream)
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
            context: self.ordinal,
            owner: self.handle(),
            recorded: Arc::new(Mutex::new(None)),
        });
        let handle = Arc::as_ptr(&event) as usize;
        self.device.stats.event_created();
        self.driver().events.lock().insert(handle, event);
        Ok(handle)
    }

    /// `cuLaunchHostFunc`/`cuStreamAddCallback`: `call` runs on the stream's thread after the
    /// work submitted before it.
    pub fn launch_host(&self, stream: usize, call: HostCall) -> CuResult<()> {
        self.owner(stream)?
            .enqueue(stream, Work::Host(call), None)
            .map(drop)
    }

    /// `cuEventRecord`: the stream must belong to the event's context
    /// (`CUDA_ERROR_INVALID_HANDLE` otherwise, as on CUDA). `external`
    /// (`CU_EVENT_RECORD_EXTERNAL`) matters only during capture (see `graph`).
    pub fn event_record(&self, handle: usize, stream: usize, external: bool) -> CuResult<()> {
        let event = self.driver().event(handle)?;
        let target = self.owner(stream)?;
        if target.ordinal != event.context {
            return Err(INVALID_HANDLE);
        }
        if target.capture_record(handle, stream, external)? {
            return Ok(());
        }
        let marker = target.streams.submit(stream, Work::Marker, None)?;
        *event.recorded.lock() = Some(marker);
        Ok(())
    }

    /// `cuStreamWaitEvent`: later work of `stream` waits for the event's last record; an event
    /// never recorded is no dependency at all. Stream and event may belong to different devices
    /// (how CUDA synchronises devices with each other). `external` (`CU_EVENT_WAIT_EXTERNAL`)
    /// matters only during capture (see `graph`).
    pub fn stream_wait_event(&self, stream: usize, handle: usize, external: bool) -> CuResult<()> {
        let marker = self.driver().event(handle)?.recorded.lock().clone();
        let target = self.owner(stream)?;
        if target.capture_wait(stream, handle, external)? {
            return Ok(());
        }
        match marker {
            Some(marker) => target
                .streams
                .submit(stream, Work::Marker, Some(marker))
                .map(drop),
            None => Ok(()),
        }
    }
}

unsafe extern "C" {
    /// The C library's standard output stream (glibc's `stdout`).
    static stdout: *mut libc::FILE;
}

/// Writes a kernel's `printf` output to the program's `stdout` stream, after whatever the
/// program printed there before (as CUDA's runtime does when it prints the device's buffer).
fn write_stdout(text: &[u8]) {
    // SAFETY: `stdout` is the C library's stream, initialised before any code of the program
    // runs; `text` is `text.len()` readable bytes; FILE operations lock the stream.
    unsafe {
        libc::fwrite(text.as_ptr().cast(), 1, text.len(), stdout);
        libc::fflush(stdout);
    }
}
