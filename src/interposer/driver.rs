//! The CUDA calls itermem makes itself (pool and swap modes). They go to the driver API, never
//! the runtime's, so they cannot change the program's view of the runtime (its per-thread last
//! error); the runtime's handles (streams, events, device pointers) are the driver's. Each call
//! returns None/false when the driver lacks the function or fails: the caller falls back.

use super::real::driver_function;
use parking_lot::Mutex;
use std::ffi::c_void;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

type MemAlloc = unsafe extern "C" fn(*mut u64, usize) -> u32;
type MemFree = unsafe extern "C" fn(u64) -> u32;
type HostAlloc = unsafe extern "C" fn(*mut *mut c_void, usize, u32) -> u32;
type HostFree = unsafe extern "C" fn(*mut c_void) -> u32;
type HostDevicePointer = unsafe extern "C" fn(*mut u64, *mut c_void, u32) -> u32;
type EventCreate = unsafe extern "C" fn(*mut usize, u32) -> u32;
type EventRecord = unsafe extern "C" fn(usize, usize) -> u32;
type EventQuery = unsafe extern "C" fn(usize) -> u32;
type EventSynchronize = unsafe extern "C" fn(usize) -> u32;
type EventElapsed = unsafe extern "C" fn(*mut f32, usize, usize) -> u32;
type EventDestroy = unsafe extern "C" fn(usize) -> u32;
type StreamCreate = unsafe extern "C" fn(*mut usize, u32) -> u32;
type StreamDestroy = unsafe extern "C" fn(usize) -> u32;
type StreamWaitEvent = unsafe extern "C" fn(usize, usize, u32) -> u32;
type CopyAsync = unsafe extern "C" fn(u64, u64, usize, usize) -> u32;
type MemsetD8Async = unsafe extern "C" fn(u64, u8, usize, usize) -> u32;
type CtxSynchronize = unsafe extern "C" fn() -> u32;
type MemGetInfo = unsafe extern "C" fn(*mut usize, *mut usize) -> u32;
type Init = unsafe extern "C" fn(u32) -> u32;
type CtxGetCurrent = unsafe extern "C" fn(*mut usize) -> u32;
type PrimaryCtxRetain = unsafe extern "C" fn(*mut usize, i32) -> u32;
type CtxSetCurrent = unsafe extern "C" fn(usize) -> u32;
type CtxGetDevice = unsafe extern "C" fn(*mut i32) -> u32;
type DeviceGetCount = unsafe extern "C" fn(*mut i32) -> u32;
type MemAddressReserve = unsafe extern "C" fn(*mut u64, usize, usize, u64, u64) -> u32;
type MemAddressFree = unsafe extern "C" fn(u64, usize) -> u32;
type MemCreate = unsafe extern "C" fn(*mut u64, usize, *const AllocationProp, u64) -> u32;
type MemRelease = unsafe extern "C" fn(u64) -> u32;
type MemMap = unsafe extern "C" fn(u64, usize, usize, u64, u64) -> u32;
type MemUnmap = unsafe extern "C" fn(u64, usize) -> u32;
type MemSetAccess = unsafe extern "C" fn(u64, usize, *const AccessDesc, usize) -> u32;
type MemGetGranularity = unsafe extern "C" fn(*mut usize, *const AllocationProp, u32) -> u32;
type StreamGetCaptureInfo = unsafe extern "C" fn(
    usize,
    *mut u32,
    *mut u64,
    *mut usize,
    *mut *const usize,
    *mut usize,
) -> u32;

/// `CUmemAllocationProp` (CUDA 12 and 13: 32 bytes).
#[repr(C)]
struct AllocationProp {
    kind: u32,
    requested_handle_types: u32,
    location_type: u32,
    location_id: i32,
    win32_handle_meta_data: *mut c_void,
    alloc_flags: [u8; 8],
}

/// `CUmemAccessDesc` (12 bytes).
#[repr(C)]
struct AccessDesc {
    location_type: u32,
    location_id: i32,
    flags: u32,
}

const _: () = assert!(size_of::<AllocationProp>() == 32 && size_of::<AccessDesc>() == 12);

/// The virtual memory API (CUDA 10.2+), all or nothing.
#[derive(Clone, Copy)]
struct Vmm {
    reserve: MemAddressReserve,
    free_reservation: MemAddressFree,
    create: MemCreate,
    release: MemRelease,
    map: MemMap,
    unmap: MemUnmap,
    set_access: MemSetAccess,
    granularity: MemGetGranularity,
}

struct Driver {
    mem_alloc: Option<MemAlloc>,
    mem_free: Option<MemFree>,
    host_alloc: Option<HostAlloc>,
    host_free: Option<HostFree>,
    host_device_pointer: Option<HostDevicePointer>,
    event_create: Option<EventCreate>,
    event_record: Option<EventRecord>,
    event_query: Option<EventQuery>,
    event_synchronize: Option<EventSynchronize>,
    event_elapsed: Option<EventElapsed>,
    event_destroy: Option<EventDestroy>,
    stream_create: Option<StreamCreate>,
    stream_destroy: Option<StreamDestroy>,
    stream_wait_event: Option<StreamWaitEvent>,
    copy_async: Option<CopyAsync>,
    memset_async: Option<MemsetD8Async>,
    ctx_synchronize: Option<CtxSynchronize>,
    mem_get_info: Option<MemGetInfo>,
    init: Option<Init>,
    ctx_get_current: Option<CtxGetCurrent>,
    primary_ctx_retain: Option<PrimaryCtxRetain>,
    ctx_set_current: Option<CtxSetCurrent>,
    ctx_get_device: Option<CtxGetDevice>,
    device_get_count: Option<DeviceGetCount>,
    capture_info: Option<StreamGetCaptureInfo>,
    vmm: Option<Vmm>,
}

fn driver() -> &'static Driver {
    static DRIVER: OnceLock<Driver> = OnceLock::new();
    // SAFETY: each name is looked up with the function pointer type of its CUDA 12 prototype
    // (cuMemAlloc_v2, cuMemFree_v2, cuMemHostAlloc, cuMemFreeHost, cuMemHostGetDevicePointer_v2,
    // cuEventCreate, cuEventRecord, cuEventQuery, cuEventSynchronize, cuEventElapsedTime,
    // cuEventDestroy_v2, cuStreamCreate, cuStreamDestroy_v2, cuStreamWaitEvent, cuMemcpyAsync,
    // cuMemsetD8Async, cuCtxSynchronize, cuMemGetInfo_v2, cuInit, cuCtxGetCurrent,
    // cuDevicePrimaryCtxRetain, cuCtxSetCurrent, cuCtxGetDevice, cuDeviceGetCount,
    // cuStreamGetCaptureInfo_v2, cuMemAddressReserve, cuMemAddressFree, cuMemCreate, cuMemRelease, cuMemMap, cuMemUnmap,
    // cuMemSetAccess, cuMemGetAllocationGranularity).
    DRIVER.get_or_init(|| unsafe {
        Driver {
            mem_alloc: driver_function(c"cuMemAlloc_v2"),
            mem_free: driver_function(c"cuMemFree_v2"),
            host_alloc: driver_function(c"cuMemHostAlloc"),
            host_free: driver_function(c"cuMemFreeHost"),
            host_device_pointer: driver_function(c"cuMemHostGetDevicePointer_v2"),
            event_create: driver_function(c"cuEventCreate"),
            event_record: driver_function(c"cuEventRecord"),
            event_query: driver_function(c"cuEventQuery"),
            event_synchronize: driver_function(c"cuEventSynchronize"),
            event_elapsed: driver_function(c"cuEventElapsedTime"),
            event_destroy: driver_function(c"cuEventDestroy_v2"),
            stream_create: driver_function(c"cuStreamCreate"),
            stream_destroy: driver_function(c"cuStreamDestroy_v2"),
            stream_wait_event: driver_function(c"cuStreamWaitEvent"),
            copy_async: driver_function(c"cuMemcpyAsync"),
            memset_async: driver_function(c"cuMemsetD8Async"),
            ctx_synchronize: driver_function(c"cuCtxSynchronize"),
            mem_get_info: driver_function(c"cuMemGetInfo_v2"),
            init: driver_function(c"cuInit"),
            ctx_get_current: driver_function(c"cuCtxGetCurrent"),
            primary_ctx_retain: driver_function(c"cuDevicePrimaryCtxRetain"),
            ctx_set_current: driver_function(c"cuCtxSetCurrent"),
            ctx_get_device: driver_function(c"cuCtxGetDevice"),
            device_get_count: driver_function(c"cuDeviceGetCount"),
            capture_info: driver_function(c"cuStreamGetCaptureInfo_v2"),
            vmm: (|| {
                Some(Vmm {
                    reserve: driver_function(c"cuMemAddressReserve")?,
                    free_reservation: driver_function(c"cuMemAddressFree")?,
                    create: driver_function(c"cuMemCreate")?,
                    release: driver_function(c"cuMemRelease")?,
                    map: driver_function(c"cuMemMap")?,
                    unmap: driver_function(c"cuMemUnmap")?,
                    set_access: driver_function(c"cuMemSetAccess")?,
                    granularity: driver_function(c"cuMemGetAllocationGranularity")?,
                })
            })(),
        }
    })
}

const SUCCESS: u32 = 0;
const EVENT_DISABLE_TIMING: u32 = 0x2;
const STREAM_NON_BLOCKING: u32 = 0x1;
/// `CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP`: usable from every context, mapped
/// into the device's address space.
const HOST_ALLOC_MAPPED: u32 = 0x1 | 0x2;

/// Makes sure the calling thread has a current context for the driver calls itermem makes:
/// the program's own when one is current (on a hook's thread), else the primary context of
/// device 0, the one the runtime uses (on a thread of itermem's, or before the program's first
/// call). Through the driver only: a program that never loads the runtime (cudarc, JAX) has
/// no `cudaFree` to initialise it with. Once per thread.
pub fn ensure_context() {
    thread_local!(static DONE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) });
    if DONE.with(|done| done.replace(true)) {
        return;
    }
    if current_context() != 0 {
        return;
    }
    let d = driver();
    let (Some(init), Some(retain), Some(set_current)) =
        (d.init, d.primary_ctx_retain, d.ctx_set_current)
    else {
        return;
    };
    let mut context = 0usize;
    // SAFETY: a valid out-parameter and the prototypes of cuInit, cuDevicePrimaryCtxRetain and
    // cuCtxSetCurrent; device 0 exists wherever CUDA works. The retained reference is kept for
    // the life of the process, as the runtime keeps its own.
    unsafe {
        if init(0) == SUCCESS && retain(&mut context, 0) == SUCCESS {
            set_current(context);
        }
    }
}

/// The calling thread's current context (0: none, or the driver cannot tell).
pub fn current_context() -> usize {
    let mut context = 0usize;
    if let Some(get_current) = driver().ctx_get_current {
        // SAFETY: valid out-parameter.
        if unsafe { get_current(&mut context) } != SUCCESS {
            context = 0;
        }
    }
    context
}

/// How many devices the driver has (None before it is initialised).
pub fn device_count() -> Option<u32> {
    let count = driver().device_get_count?;
    let mut devices = 0i32;
    // SAFETY: valid out-parameter; before cuInit the driver answers an error, not a count.
    (unsafe { count(&mut devices) } == SUCCESS)
        .then_some(devices)
        .and_then(|d| u32::try_from(d).ok())
}

/// The device of the calling thread's current context.
pub fn current_device() -> Option<u32> {
    let get_device = driver().ctx_get_device?;
    let mut device = 0i32;
    // SAFETY: valid out-parameter.
    (unsafe { get_device(&mut device) } == SUCCESS)
        .then_some(device)
        .and_then(|d| u32::try_from(d).ok())
}

pub fn malloc(bytes: u64) -> Option<u64> {
    ensure_context();
    let alloc = driver().mem_alloc?;
    let mut ptr = 0u64;
    // SAFETY: valid out-parameter; the calling thread has the runtime's context current.
    (unsafe { alloc(&mut ptr, bytes as usize) } == SUCCESS).then_some(ptr)
}

/// The device memory still free, as the driver says.
pub fn free_device_bytes() -> Option<u64> {
    ensure_context();
    let get_info = driver().mem_get_info?;
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: valid out-parameters; the calling thread has the runtime's context current.
    (unsafe { get_info(&mut free, &mut total) } == SUCCESS).then_some(free as u64)
}

pub fn free(addr: u64) {
    if let Some(free) = driver().mem_free {
        // SAFETY: `addr` came from `malloc` above.
        unsafe { free(addr) };
    }
}

/// Page-locked host memory mapped into the device's address space: (host address, device
/// address). With unified addressing the two are equal; both are kept as the driver says.
pub fn mapped_host(bytes: u64) -> Option<(u64, u64)> {
    ensure_context();
    let d = driver();
    let (alloc, device_pointer) = (d.host_alloc?, d.host_device_pointer?);
    let mut host: *mut c_void = std::ptr::null_mut();
    // SAFETY: valid out-parameter and flags of cuMemHostAlloc.
    if unsafe { alloc(&mut host, bytes as usize, HOST_ALLOC_MAPPED) } != SUCCESS {
        return None;
    }
    let mut device = 0u64;
    // SAFETY: `host` is the mapped allocation just made; flags must be 0.
    if unsafe { device_pointer(&mut device, host, 0) } != SUCCESS {
        free_host(host as u64);
        return None;
    }
    Some((host as u64, device))
}

/// Page-locked host memory for copies (not mapped).
pub fn pinned_host(bytes: u64) -> Option<u64> {
    ensure_context();
    let alloc = driver().host_alloc?;
    let mut host: *mut c_void = std::ptr::null_mut();
    // SAFETY: valid out-parameter; flags 0.
    (unsafe { alloc(&mut host, bytes as usize, 0) } == SUCCESS).then_some(host as u64)
}

pub fn free_host(host: u64) {
    if let Some(free) = driver().host_free {
        // SAFETY: `host` came from `mapped_host` or `pinned_host`.
        unsafe { free(host as *mut c_void) };
    }
}

/// A new event without timing (the cheapest kind), or None.
pub fn event() -> Option<usize> {
    new_event(EVENT_DISABLE_TIMING)
}

/// A new event that can be timed with [`elapsed_ns`].
pub fn timing_event() -> Option<usize> {
    new_event(0)
}

fn new_event(flags: u32) -> Option<usize> {
    let create = driver().event_create?;
    let mut event = 0usize;
    // SAFETY: valid out-parameter.
    (unsafe { create(&mut event, flags) } == SUCCESS).then_some(event)
}

pub fn destroy_event(event: usize) {
    if let Some(destroy) = driver().event_destroy {
        // SAFETY: an event of ours, not used afterwards.
        unsafe { destroy(event) };
    }
}

/// Records `event` on `stream`; refused (false) while `stream` captures, since the record
/// would become a node of the program's graph (see [`capture`]).
pub fn record(event: usize, stream: u64) -> bool {
    if capture(stream).is_some() {
        return false;
    }
    // SAFETY: an event of ours and a stream handle of the program's or ours.
    driver()
        .event_record
        .is_some_and(|record| unsafe { record(event, stream as usize) } == SUCCESS)
}

pub fn completed(event: usize) -> bool {
    // SAFETY: an event of ours.
    driver()
        .event_query
        .is_some_and(|query| unsafe { query(event) } == SUCCESS)
}

/// Waits on the host for the event's last record.
pub fn synchronize_event(event: usize) -> bool {
    // SAFETY: an event of ours.
    driver()
        .event_synchronize
        .is_some_and(|sync| unsafe { sync(event) } == SUCCESS)
}

/// Nanoseconds between two completed records of timing events.
pub fn elapsed_ns(start: usize, end: usize) -> Option<f64> {
    let elapsed = driver().event_elapsed?;
    let mut ms = 0f32;
    // SAFETY: valid out-parameter and two events of ours.
    (unsafe { elapsed(&mut ms, start, end) } == SUCCESS).then_some(f64::from(ms) * 1e6)
}

/// Makes `stream` wait for `event`; refused (false) while `stream` captures: the wait would
/// join the program's capture to an event recorded outside it, which invalidates the capture.
pub fn wait(stream: u64, event: usize) -> bool {
    if capture(stream).is_some() {
        return false;
    }
    // SAFETY: the program's stream (or ours) and an event of ours.
    driver()
        .stream_wait_event
        .is_some_and(|wait| unsafe { wait(stream as usize, event, 0) } == SUCCESS)
}

/// A stream of itermem's own that does not synchronise with the legacy default stream.
pub fn stream() -> Option<u64> {
    ensure_context();
    let create = driver().stream_create?;
    let mut stream = 0usize;
    // SAFETY: valid out-parameter and flags.
    (unsafe { create(&mut stream, STREAM_NON_BLOCKING) } == SUCCESS).then_some(stream as u64)
}

/// Destroys a stream of itermem's (its queued work still completes, as CUDA specifies).
pub fn destroy_stream(stream: u64) {
    if let Some(destroy) = driver().stream_destroy {
        // SAFETY: a stream made by `stream` above, not used afterwards.
        unsafe { destroy(stream as usize) };
    }
}

/// A copy of `bytes` bytes queued on `stream` (`cuMemcpyAsync`: with unified addressing the
/// driver tells device from page-locked host memory by the addresses).
pub fn copy(dst: u64, src: u64, bytes: u64, stream: u64) -> bool {
    // SAFETY: callers pass a live device range and page-locked host memory of ours, each of at
    // least `bytes` bytes, kept (and fenced with events) until the copy completes.
    driver()
        .copy_async
        .is_some_and(|copy| unsafe { copy(dst, src, bytes as usize, stream as usize) } == SUCCESS)
}

/// Fills `bytes` bytes at `device` with `value`, queued on `stream`.
pub fn fill(device: u64, value: u8, bytes: u64, stream: u64) -> bool {
    // SAFETY: `device` is a live range of at least `bytes` bytes, fenced by the caller.
    driver().memset_async.is_some_and(
        |set| unsafe { set(device, value, bytes as usize, stream as usize) } == SUCCESS,
    )
}

/// The streams whose capture began through a hook and has not ended (a stream twice when two
/// threads' own per-thread streams capture). Guarded by a mutex: a begin or end is rare.
static CAPTURING: Mutex<Vec<u64>> = Mutex::new(Vec::new());

/// `CAPTURING`'s length, for the hooks' fast path: while it is 0 no stream captures (a stream
/// joins a capture only while its origin captures), and [`capture`] asks the driver nothing.
/// Written under `CAPTURING`'s lock. `Relaxed`: it changes on the thread that begins or ends a
/// capture, before that thread submits work to it or after the driver ended it; another thread
/// uses a capture only through the program's own calls (an event wait), which the driver
/// orders after the begin.
static CAPTURES: AtomicUsize = AtomicUsize::new(0);

/// A hook's begin of a capture on `stream` succeeded.
pub fn capture_began(stream: u64) {
    let mut capturing = CAPTURING.lock();
    capturing.push(stream);
    CAPTURES.store(capturing.len(), Ordering::Relaxed);
}

/// A hook's end of the capture on `stream` returned: unless the stream still captures (an end
/// from the wrong thread, or from a stream that joined, leaves the capture going on), the
/// capture is over.
pub fn capture_ended(stream: u64) {
    if capture(stream).is_none() {
        let mut capturing = CAPTURING.lock();
        if let Some(at) = capturing.iter().position(|&s| s == stream) {
            capturing.swap_remove(at);
        }
        CAPTURES.store(capturing.len(), Ordering::Relaxed);
    }
}

/// Whether a capture begun through a hook may still be going on: then nothing may synchronise
/// a whole context (`cuCtxSynchronize` invalidates every capture of the context).
pub fn capturing_anywhere() -> bool {
    CAPTURES.load(Ordering::Relaxed) > 0
}

/// `CU_STREAM_CAPTURE_STATUS_NONE`.
const CAPTURE_STATUS_NONE: u32 = 0;
/// `CU_STREAM_CAPTURE_STATUS_ACTIVE`.
const CAPTURE_STATUS_ACTIVE: u32 = 1;

/// Whether `stream` is capturing, and into which graph: None when it is not (work on it runs
/// now); `Some(Some(graph))` for an active capture; `Some(None)` when the work would not run
/// now either but belongs to no graph itermem can name (an invalidated capture, or the legacy
/// stream while a blocking stream captures, which the driver answers with an error). Nothing
/// of itermem's may be enqueued on such a stream.
pub fn capture(stream: u64) -> Option<Option<usize>> {
    if !capturing_anywhere() {
        return None;
    }
    match capture_info(stream) {
        Some((CAPTURE_STATUS_NONE, ..)) => None,
        Some((CAPTURE_STATUS_ACTIVE, graph, _)) => Some(Some(graph)),
        _ => Some(None),
    }
}

/// The node that work just captured on `stream` became: the capture's only dependency after
/// it (None when the stream does not capture or follows several nodes).
pub fn captured_node(stream: u64) -> Option<usize> {
    match capture_info(stream)? {
        (CAPTURE_STATUS_ACTIVE, _, node) => node,
        _ => None,
    }
}

/// `cuStreamGetCaptureInfo_v2` of `stream`: its capture status, the capture's graph and the
/// node the next captured work will depend on when it is exactly one; None when the driver
/// lacks the function or refuses.
fn capture_info(stream: u64) -> Option<(u32, usize, Option<usize>)> {
    let info = driver().capture_info?;
    let (mut status, mut id, mut graph) = (CAPTURE_STATUS_NONE, 0u64, 0usize);
    let (mut deps, mut count) = (std::ptr::null::<usize>(), 0usize);
    // SAFETY: cuStreamGetCaptureInfo_v2's prototype, valid out-parameters, a program's stream.
    let result = unsafe {
        info(
            stream as usize,
            &mut status,
            &mut id,
            &mut graph,
            &mut deps,
            &mut count,
        )
    };
    if result != SUCCESS {
        return None;
    }
    let only = (count == 1 && !deps.is_null()).then(|| {
        // SAFETY: the driver answered one dependency at `deps`, valid until the stream's next
        // capture call; it is read here, at once.
        unsafe { *deps }
    });
    Some((status, graph, only))
}

/// Waits on the host for all work of the context; refused (false) while a capture may be
/// going on, which it would invalidate.
pub fn synchronize() -> bool {
    if capturing_anywhere() {
        log::debug!("no context synchronisation while a stream capture may be going on");
        return false;
    }
    // SAFETY: no arguments; the thread has the runtime's context current (a hook's thread).
    driver()
        .ctx_synchronize
        .is_some_and(|sync| unsafe { sync() } == SUCCESS)
}

/// `CU_MEM_ALLOCATION_TYPE_PINNED` on `CU_MEM_LOCATION_TYPE_DEVICE` `device`.
fn device_memory(device: i32) -> AllocationProp {
    AllocationProp {
        kind: 1,
        requested_handle_types: 0,
        location_type: 1,
        location_id: device,
        win32_handle_meta_data: std::ptr::null_mut(),
        alloc_flags: [0; 8],
    }
}

/// `CU_MEM_ALLOCATION_TYPE_PINNED` on `CU_MEM_LOCATION_TYPE_HOST` (CUDA 12.2+; the id is
/// ignored).
fn host_memory() -> AllocationProp {
    AllocationProp {
        location_type: 2,
        location_id: 0,
        ..device_memory(0)
    }
}

/// The device of the calling thread's context.
fn context_device() -> Option<i32> {
    ensure_context();
    let get = driver().ctx_get_device?;
    let mut device = 0i32;
    // SAFETY: valid out-parameter.
    (unsafe { get(&mut device) } == SUCCESS).then_some(device)
}

/// The virtual memory API's minimum granularity for the current device's memory, None where
/// the driver lacks the API.
pub fn vmm_granularity() -> Option<u64> {
    let vmm = driver().vmm?;
    let prop = device_memory(context_device()?);
    let mut granularity = 0usize;
    // SAFETY: valid out-parameter and property; option 0 is CU_MEM_ALLOC_GRANULARITY_MINIMUM.
    let ok = unsafe { (vmm.granularity)(&mut granularity, &prop, 0) } == SUCCESS;
    (ok && granularity > 0).then_some(granularity as u64)
}

/// A range of `bytes` addresses (a multiple of the granularity), nothing mapped.
pub fn reserve(bytes: u64) -> Option<u64> {
    let vmm = driver().vmm?;
    let mut va = 0u64;
    // SAFETY: valid out-parameter; alignment 0 is the granularity, no address hint, no flags.
    (unsafe { (vmm.reserve)(&mut va, bytes as usize, 0, 0, 0) } == SUCCESS).then_some(va)
}

pub fn free_reservation(va: u64, bytes: u64) {
    if let Some(vmm) = driver().vmm {
        // SAFETY: a whole reservation of `reserve`, with nothing mapped in it any more.
        unsafe { (vmm.free_reservation)(va, bytes as usize) };
    }
}

/// `bytes` (a multiple of the granularity) of the current device's memory, or of page-locked
/// host memory (`on_host`, CUDA 12.2+): the handle.
pub fn create(bytes: u64, on_host: bool) -> Option<u64> {
    let vmm = driver().vmm?;
    let prop = if on_host {
        host_memory()
    } else {
        device_memory(context_device()?)
    };
    let mut handle = 0u64;
    // SAFETY: valid out-parameter and property, no flags.
    (unsafe { (vmm.create)(&mut handle, bytes as usize, &prop, 0) } == SUCCESS).then_some(handle)
}

pub fn release(handle: u64) {
    if let Some(vmm) = driver().vmm {
        // SAFETY: a handle of `create`; its mappings keep the memory until they are unmapped.
        unsafe { (vmm.release)(handle) };
    }
}

/// Maps all of `handle` (`bytes`) at `va` and gives the current device read and write access.
pub fn map(va: u64, bytes: u64, handle: u64) -> bool {
    let Some(vmm) = driver().vmm else {
        return false;
    };
    let Some(device) = context_device() else {
        return false;
    };
    // SAFETY: `va` lies in a reservation of ours with nothing mapped there; offset 0 and no
    // flags, as CUDA requires.
    if unsafe { (vmm.map)(va, bytes as usize, 0, handle, 0) } != SUCCESS {
        return false;
    }
    let access = AccessDesc {
        location_type: 1,
        location_id: device,
        flags: 3, // CU_MEM_ACCESS_FLAGS_PROT_READWRITE
    };
    // SAFETY: the range just mapped, one descriptor.
    if unsafe { (vmm.set_access)(va, bytes as usize, &access, 1) } == SUCCESS {
        return true;
    }
    unmap(va, bytes);
    false
}

/// Unmaps `[va, va + bytes)`: whole mappings of ours whose users have finished.
pub fn unmap(va: u64, bytes: u64) -> bool {
    // SAFETY: whole mappings made by `map`, used by no pending work (the callers' contract).
    driver()
        .vmm
        .is_some_and(|vmm| unsafe { (vmm.unmap)(va, bytes as usize) } == SUCCESS)
}
