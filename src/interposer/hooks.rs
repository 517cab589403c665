//! The exported hooks: one table, one line per CUDA runtime function itermem intercepts.
//!
//! `hooks!` expands each line into an `extern "C"` function with the runtime's exact name and
//! prototype that resolves the real function once (`dlsym(RTLD_NEXT)`), and runs it through
//! [`intercept`] with the line's observer. Observers only decode arguments and report to the
//! [`Recorder`]; all policy lives there. Handles (`cudaStream_t`) are pointer-sized and passed
//! as `usize`; `cudaError_t` and `enum cudaMemcpyKind` are 32-bit. Exported only outside unit
//! tests, so a test binary never interposes on anything.

use super::device::current_device;
use super::driver;
use super::graphs::{Node, NodeWork};
use super::real::RealFn;
use super::recorder::{KernelRef, LaunchArgs};
use super::{
    CUDA_ERROR_SYMBOL_NOT_FOUND, Recorder, active, intercept, kept_by_itermem, recorder_after_error,
};
use crate::event::{AllocId, CopyKind, MemKind};
use std::ffi::{CStr, c_char, c_void};

/// `dim3`, passed by value as in C.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Dim3 {
    pub x: u32,
    pub y: u32,
    pub z: u32,
}

/// `cudaLaunchConfig_t` (CUDA 12): the launch configuration of `cudaLaunchKernelExC`.
#[repr(C)]
pub struct LaunchConfig {
    pub grid_dim: Dim3,
    pub block_dim: Dim3,
    pub dynamic_smem_bytes: usize,
    pub stream: usize,
    pub attrs: *mut c_void,
    pub num_attrs: u32,
}

/// Stream handle of the per-thread default stream (`cudaStreamPerThread`).
const PER_THREAD_STREAM: usize = 0x2;

/// The stream a `_ptsz`/`_ptds` call means by `stream`: 0 is the per-thread default stream.
fn per_thread(stream: usize) -> u64 {
    if stream == 0 {
        PER_THREAD_STREAM as u64
    } else {
        stream as u64
    }
}

type Run<'a> = &'a mut dyn FnMut() -> u32;

/// The API a hooked call belongs to: the runtime keeps a per-thread last error, the driver
/// does not.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Layer {
    Runtime,
    Driver,
}

const SUCCESS: u32 = 0;
/// `cudaErrorInvalidValue` / `CUDA_ERROR_INVALID_VALUE`: what a free answers for a pointer that
/// is no allocation.
const INVALID_VALUE: u32 = 1;
/// `cudaErrorMemoryAllocation` / `CUDA_ERROR_OUT_OF_MEMORY`: the real allocator found no room.
const MEMORY_ALLOCATION: u32 = 2;

/// Whether itermem's own allocator may serve an allocation of this kind: device memory, also
/// stream-ordered (a reused range is fenced by events, which covers stream order).
fn servable(kind: MemKind) -> bool {
    matches!(kind, MemKind::Device | MemKind::Async)
}

/// An allocation call: `ptr` is the caller's out-parameter (a `void **` or `CUdeviceptr *`,
/// both one 64-bit word).
fn on_alloc(
    rec: &Recorder,
    run: Run,
    layer: Layer,
    ptr: *mut *mut c_void,
    size: usize,
    kind: MemKind,
    stream: u64,
) -> u32 {
    if kind == MemKind::Async
        && let Some(graph) = driver::capture(stream)
    {
        return on_captured_alloc(rec, run, ptr.cast(), size, stream, graph);
    }
    let device = current_device();
    let served = |served: Option<(u64, AllocId)>| {
        let (addr, id) = served?;
        // SAFETY: `ptr` is the caller's non-null out-parameter (checked by the callers below).
        unsafe { *ptr = addr as *mut c_void };
        rec.on_served_malloc(device, id, addr, (size as u64, kind, stream));
        Some(SUCCESS)
    };
    let servable = servable(kind) && size > 0 && !ptr.is_null();
    if servable && let Some(answer) = served(rec.served_malloc(device, size as u64)) {
        return answer;
    }
    let result = run_retrying(rec, run, layer, device, kind);
    if result == MEMORY_ALLOCATION
        && servable
        && let Some(answer) = served(rec.host_backed_malloc(device, size as u64))
    {
        if layer == Layer::Runtime {
            clear_last_error();
        }
        return answer;
    }
    let allocation = (size as u64, kind, stream);
    record_alloc(rec, result, ptr, device, allocation, servable)
}

/// Runs a real allocation on `device`; if the device is out of memory, once more after
/// itermem gave back the pool memory nothing uses (when it had any).
fn run_retrying(rec: &Recorder, run: Run, layer: Layer, device: u32, kind: MemKind) -> u32 {
    let result = run();
    if result != MEMORY_ALLOCATION
        || !kind.is_device()
        || rec.release_unused_device_memory(device) == 0
    {
        return result;
    }
    let retried = run();
    if retried == SUCCESS && layer == Layer::Runtime {
        // The first attempt's error must not reach the program's cudaGetLastError.
        clear_last_error();
    }
    retried
}

/// Records the allocation (size, kind, stream) a real call made on `device` (`result`);
/// `plannable`: whether pool mode may serve its later copies.
fn record_alloc(
    rec: &Recorder,
    result: u32,
    ptr: *mut *mut c_void,
    device: u32,
    (size, kind, stream): (u64, MemKind, u64),
    plannable: bool,
) -> u32 {
    if result == SUCCESS && !ptr.is_null() {
        // SAFETY: the call succeeded, so the API wrote the new address through `ptr`.
        let addr = unsafe { *ptr } as u64;
        if addr != 0 {
            rec.on_malloc(device, addr, size, kind, stream, plannable);
        }
    }
    result
}

/// An allocation recorded, never served (from a pool of the program's, whose attributes are
/// its choice).
fn on_unserved_alloc(rec: &Recorder, run: Run, ptr: *mut u64, size: usize, stream: u64) -> u32 {
    if let Some(graph) = driver::capture(stream) {
        return on_captured_alloc(rec, run, ptr, size, stream, graph);
    }
    let device = current_device();
    let result = run_retrying(rec, run, Layer::Driver, device, MemKind::Async);
    let allocation = (size as u64, MemKind::Async, stream);
    record_alloc(rec, result, ptr.cast(), device, allocation, false)
}

/// `cuMemAllocPitch_v2`: the driver chooses the pitch, so the block is known only after it.
fn on_alloc_pitch(
    rec: &Recorder,
    run: Run,
    ptr: *mut u64,
    pitch: *mut usize,
    height: usize,
) -> u32 {
    let device = current_device();
    let result = run_retrying(rec, run, Layer::Driver, device, MemKind::Device);
    if result == SUCCESS && !ptr.is_null() && !pitch.is_null() {
        // SAFETY: the call succeeded, so the driver wrote both out-parameters.
        let (addr, pitch) = unsafe { (*ptr, *pitch) };
        if addr != 0 {
            let size = (pitch as u64).saturating_mul(height as u64);
            rec.on_malloc(device, addr, size, MemKind::Device, 0, false);
        }
    }
    result
}

/// Consumes this thread's last runtime error: the failed malloc's, which itermem answered
/// (the program must not find it in `cudaGetLastError`).
fn clear_last_error() {
    type GetLastError = unsafe extern "C" fn() -> u32;
    static GET_LAST_ERROR: RealFn = RealFn::new(c"cudaGetLastError");
    // SAFETY: cudaGetLastError's prototype.
    if let Some(get_last_error) = unsafe { GET_LAST_ERROR.get::<GetLastError>() } {
        // SAFETY: as above; it takes no argument and only resets the thread's last error.
        unsafe { get_last_error() };
    }
}

/// A device reset or a context destroyed: what it held is gone with it (after a success).
fn on_context_gone(rec: &Recorder, run: Run) -> u32 {
    let result = run();
    if result == SUCCESS {
        rec.after_context_gone();
    }
    result
}

/// `device`: whether the freed pointer may come from itermem's own allocator (`cudaFree`,
/// `cudaFreeAsync`, `cuMemFree_v2`, `cuMemFreeAsync`; not the page-locked host frees).
fn on_free(rec: &Recorder, run: Run, ptr: u64, stream: u64, device: bool) -> u32 {
    let taken = rec.begin_free(ptr);
    if device && rec.serves(ptr) {
        // A block of itermem's allocator never reaches the real one; anything else in its
        // range is no allocation of the program's, as real CUDA would say.
        return if rec.served_free(ptr, taken, stream) {
            SUCCESS
        } else {
            INVALID_VALUE
        };
    }
    let result = run();
    rec.end_free(taken, result == SUCCESS, stream);
    result
}

/// A stream-ordered allocation on a capturing stream: the driver makes it an alloc node of the
/// capture's graph (never served by itermem: the graph's memory is the driver's, at the address
/// the node fixes), allocated at each launch of the graph.
fn on_captured_alloc(
    rec: &Recorder,
    run: Run,
    ptr: *mut u64,
    size: usize,
    stream: u64,
    graph: Option<usize>,
) -> u32 {
    on_captured(rec, run, stream, graph, || NodeWork::Alloc {
        // SAFETY: the call succeeded (`on_captured` asks for the work only then), so the driver
        // wrote the address through the caller's non-null out-parameter.
        addr: if ptr.is_null() { 0 } else { unsafe { *ptr } },
        size: size as u64,
    })
}

/// A stream-ordered free (`cudaFreeAsync`, `cuMemFreeAsync`): on a capturing stream, a free
/// node of the capture's graph (nothing is freed now); otherwise as [`on_free`].
fn on_free_async(rec: &Recorder, run: Run, ptr: u64, stream: u64) -> u32 {
    if let Some(graph) = driver::capture(stream) {
        return on_captured(rec, run, stream, graph, || NodeWork::Free { addr: ptr });
    }
    on_free(rec, run, ptr, stream, true)
}

/// `cuMemMap`: a mapped range of the virtual-memory API is an allocation of the program's
/// (never served by itermem: the program chose its address).
fn on_map(rec: &Recorder, run: Run, ptr: u64, size: usize) -> u32 {
    let result = run();
    if result == SUCCESS {
        rec.on_malloc(
            current_device(),
            ptr,
            size as u64,
            MemKind::Device,
            0,
            false,
        );
    }
    result
}

/// `cuMemUnmap`: frees every mapped range in `[ptr, ptr + size)`.
fn on_unmap(rec: &Recorder, run: Run, ptr: u64, size: usize) -> u32 {
    let end = ptr.saturating_add(size as u64);
    let mut taken = Vec::new();
    let mut at = ptr;
    while at < end {
        let Some((start, block)) = rec.begin_free(at) else {
            break;
        };
        at = start.saturating_add(block.size.max(1));
        taken.push((start, block));
    }
    let result = run();
    for block in taken {
        rec.end_free(Some(block), result == SUCCESS, 0);
    }
    result
}

/// One copy as a hook sees it: addresses (device or host), bytes and direction.
struct CopyCall {
    dst: u64,
    src: u64,
    bytes: u64,
    kind: CopyKind,
    stream: u64,
    asynchronous: bool,
}

fn on_copy(rec: &Recorder, run: Run, layer: Layer, copy: CopyCall) -> u32 {
    if layer == Layer::Runtime && (rec.host_backed(copy.dst) || rec.host_backed(copy.src)) {
        // Device memory itermem serves from mapped host memory: the runtime must infer the
        // direction (with unified addressing), not take the program's word for it. (The
        // driver's copies take addresses, which mapped host memory is.)
        INFER_COPY_KIND.with(|infer| infer.set(true));
    }
    if let Some(graph) = driver::capture(copy.stream) {
        let work = NodeWork::Copy {
            dst: copy.dst,
            src: copy.src,
            bytes: copy.bytes,
            kind: copy.kind,
        };
        return on_captured(rec, run, copy.stream, graph, || work);
    }
    let device = current_device();
    let (dst, src) = (rec.resolve(copy.dst), rec.resolve(copy.src));
    let ids: smallvec::SmallVec<[u64; 2]> = [dst, src].into_iter().flatten().collect();
    // The source is read, unless it is the destination too.
    let read = src.filter(|&src| dst != Some(src));
    let prepared = rec.before_use(device, &ids, read, copy.stream);
    let result = run();
    let index = (result == SUCCESS).then(|| {
        rec.on_memcpy(
            device,
            dst,
            src,
            copy.bytes,
            copy.kind,
            copy.stream,
            copy.asynchronous,
        )
    });
    rec.after_use(device, prepared, copy.stream, index);
    result
}

thread_local! {
    /// Set by a copy hook for the real call it is about to make: pass `cudaMemcpyDefault`.
    static INFER_COPY_KIND: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// `cudaMemcpyDefault`: the direction inferred from the pointers (unified addressing).
const COPY_DEFAULT: u32 = 4;

/// The kind the real copy from `src` to `dst` is called with: the program's, or
/// [`COPY_DEFAULT`] when the copy hook asked for it (once: the request is taken) or, after an
/// internal error (no hook asks any more), when a side is device memory itermem served from
/// host memory.
fn copy_kind(kind: u32, dst: u64, src: u64) -> u32 {
    if INFER_COPY_KIND
        .try_with(|infer| infer.replace(false))
        .unwrap_or(false)
        || (!active() && host_backed_after_error(dst, src))
    {
        COPY_DEFAULT
    } else {
        kind
    }
}

/// After an internal error: whether `dst` or `src` lies in device memory itermem served from
/// host memory (false if even that fails).
#[cold]
fn host_backed_after_error(dst: u64, src: u64) -> bool {
    let Some(rec) = recorder_after_error() else {
        return false;
    };
    let asked = || rec.host_backed(dst) || rec.host_backed(src);
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(asked)).unwrap_or(false)
}

/// After an internal error, a device allocation of `size` bytes into `ptr` that the real
/// allocator refused (`result`, out of memory): the program goes on as before the error,
/// where itermem promised that its allocations fit. The pools nothing uses are given back
/// and the allocation is retried (`forward`); if the device still refuses it, swap mode
/// serves it from mapped host memory, as it did past the limit (copies to and from it then
/// let the driver infer their direction: [`copy_kind`]). Otherwise, or if that fails too,
/// `result`.
#[cold]
fn refused_after_error(
    result: u32,
    layer: Layer,
    ptr: *mut u64,
    size: usize,
    mut forward: impl FnMut() -> u32,
) -> u32 {
    let Some(rec) = recorder_after_error() else {
        return result;
    };
    if ptr.is_null() || size == 0 {
        return result;
    }
    let retried = if rec.release_after_error() > 0 {
        forward()
    } else {
        result
    };
    if retried != MEMORY_ALLOCATION {
        if retried == SUCCESS && layer == Layer::Runtime {
            // The first attempt's error must not reach the program's cudaGetLastError.
            clear_last_error();
        }
        return retried;
    }
    let served = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        rec.host_backed_after_error(current_device(), size as u64)
    }));
    let Ok(Some(addr)) = served else {
        return retried;
    };
    // SAFETY: `ptr` is the caller's non-null out-parameter of the allocation (one 64-bit word).
    unsafe { *ptr = addr };
    if layer == Layer::Runtime {
        clear_last_error();
    }
    SUCCESS
}

/// A runtime copy: `kind` is the program's `cudaMemcpyKind`.
#[allow(clippy::too_many_arguments)]
fn on_runtime_copy(
    rec: &Recorder,
    run: Run,
    dst: *mut c_void,
    src: *const c_void,
    count: usize,
    kind: u32,
    stream: u64,
    asynchronous: bool,
) -> u32 {
    let copy = CopyCall {
        dst: dst as u64,
        src: src as u64,
        bytes: count as u64,
        kind: CopyKind::from_u8(kind as u8).unwrap_or(CopyKind::Default),
        stream,
        asynchronous,
    };
    on_copy(rec, run, Layer::Runtime, copy)
}

/// A driver copy between two addresses.
fn on_driver_copy(
    rec: &Recorder,
    run: Run,
    (dst, src, count): (u64, u64, usize),
    kind: CopyKind,
    stream: u64,
    asynchronous: bool,
) -> u32 {
    let copy = CopyCall {
        dst,
        src,
        bytes: count as u64,
        kind,
        stream,
        asynchronous,
    };
    on_copy(rec, run, Layer::Driver, copy)
}

/// A peer copy (`cuMemcpyPeer*`; `stream`: the program's, for an asynchronous one). A peer
/// copy takes two devices' memory, and a side itermem serves from mapped host memory is no
/// device's: that copy is made by `unified` instead (`cuMemcpy` or `cuMemcpyAsync`, of the
/// same default-stream flavour), which takes any two unified addresses, as the program meant.
fn on_peer_copy(
    rec: &Recorder,
    run: Run,
    unified: &RealFn,
    (dst, src, count): (u64, u64, usize),
    stream: Option<usize>,
    recorded_stream: u64,
) -> u32 {
    let addresses = (dst, src, count);
    let asynchronous = stream.is_some();
    if !(rec.host_backed(dst) || rec.host_backed(src)) {
        return on_driver_copy(rec, run, addresses, D2D, recorded_stream, asynchronous);
    }
    let mut through_unified = || match stream {
        Some(stream) => {
            type CopyAsync = unsafe extern "C" fn(u64, u64, usize, usize) -> u32;
            // SAFETY: `unified` is cuMemcpyAsync(_ptsz), of this prototype.
            match unsafe { unified.get::<CopyAsync>() } {
                // SAFETY: the program's addresses, count and stream.
                Some(copy) => unsafe { copy(dst, src, count, stream) },
                None => CUDA_ERROR_SYMBOL_NOT_FOUND,
            }
        }
        None => {
            type Copy = unsafe extern "C" fn(u64, u64, usize) -> u32;
            // SAFETY: `unified` is cuMemcpy(_ptds), of this prototype.
            match unsafe { unified.get::<Copy>() } {
                // SAFETY: the program's addresses and count.
                Some(copy) => unsafe { copy(dst, src, count) },
                None => CUDA_ERROR_SYMBOL_NOT_FOUND,
            }
        }
    };
    on_driver_copy(
        rec,
        &mut through_unified,
        addresses,
        D2D,
        recorded_stream,
        asynchronous,
    )
}

/// `CUDA_MEMCPY2D` (`CUDA_MEMCPY2D_v2` of CUDA 12's `cuda.h`).
#[repr(C)]
pub struct Memcpy2D {
    src_x_in_bytes: usize,
    src_y: usize,
    src_memory_type: u32,
    src_host: *const c_void,
    src_device: u64,
    src_array: usize,
    src_pitch: usize,
    dst_x_in_bytes: usize,
    dst_y: usize,
    dst_memory_type: u32,
    dst_host: *mut c_void,
    dst_device: u64,
    dst_array: usize,
    dst_pitch: usize,
    width_in_bytes: usize,
    height: usize,
}

/// `CUmemorytype` values.
const MEMORY_HOST: u32 = 1;
const MEMORY_DEVICE: u32 = 2;
const MEMORY_UNIFIED: u32 = 4;

/// The direction of a copy from whether each side is device memory (None: unified, or an
/// array, which the memory type alone does not place).
fn copy_kind_between(src_device: Option<bool>, dst_device: Option<bool>) -> CopyKind {
    match (src_device, dst_device) {
        (Some(false), Some(true)) => CopyKind::HostToDevice,
        (Some(true), Some(false)) => CopyKind::DeviceToHost,
        (Some(true), Some(true)) => CopyKind::DeviceToDevice,
        (Some(false), Some(false)) => CopyKind::HostToHost,
        _ => CopyKind::Default,
    }
}

/// A 2D copy as the first byte of each side, the bytes copied and the direction.
fn on_copy_2d(
    rec: &Recorder,
    run: Run,
    copy: *const Memcpy2D,
    stream: u64,
    asynchronous: bool,
) -> u32 {
    if copy.is_null() {
        return run();
    }
    // SAFETY: a non-null CUDA_MEMCPY2D of the caller's, read before the driver reads it.
    let c = unsafe { &*copy };
    // (address of the first byte, whether it is device memory); arrays have no address.
    let side = |memory_type, host: u64, device: u64, x: usize, y: usize, pitch: usize| {
        let offset = (y as u64)
            .saturating_mul(pitch as u64)
            .saturating_add(x as u64);
        match memory_type {
            MEMORY_HOST => Some((host.saturating_add(offset), Some(false))),
            MEMORY_DEVICE => Some((device.saturating_add(offset), Some(true))),
            MEMORY_UNIFIED => Some((device.saturating_add(offset), None)),
            _ => None,
        }
    };
    let src = side(
        c.src_memory_type,
        c.src_host as u64,
        c.src_device,
        c.src_x_in_bytes,
        c.src_y,
        c.src_pitch,
    );
    let dst = side(
        c.dst_memory_type,
        c.dst_host as u64,
        c.dst_device,
        c.dst_x_in_bytes,
        c.dst_y,
        c.dst_pitch,
    );
    let kind = copy_kind_between(src.and_then(|s| s.1), dst.and_then(|d| d.1));
    let bytes = c.width_in_bytes.saturating_mul(c.height);
    let addresses = (dst.map_or(0, |d| d.0), src.map_or(0, |s| s.0), bytes);
    on_driver_copy(rec, run, addresses, kind, stream, asynchronous)
}

fn on_set(
    rec: &Recorder,
    run: Run,
    dst: u64,
    bytes: usize,
    stream: u64,
    asynchronous: bool,
) -> u32 {
    if let Some(graph) = driver::capture(stream) {
        let work = NodeWork::Set {
            dst,
            bytes: bytes as u64,
        };
        return on_captured(rec, run, stream, graph, || work);
    }
    let device = current_device();
    let dst = rec.resolve(dst);
    let prepared = rec.before_use(device, dst.as_slice(), None, stream);
    let result = run();
    let index =
        (result == SUCCESS).then(|| rec.on_memset(device, dst, bytes as u64, stream, asynchronous));
    rec.after_use(device, prepared, stream, index);
    result
}

fn on_launch(rec: &Recorder, run: Run, kernel: KernelRef, args: LaunchArgs, stream: u64) -> u32 {
    if let Some(graph) = driver::capture(stream) {
        // SAFETY: as below; read while the caller is blocked in this call.
        let work = unsafe { rec.kernel_node(kernel, args) };
        return on_captured(rec, run, stream, graph, || work);
    }
    // SAFETY: the caller's arguments hold the kernel's parameters as the launch call requires
    // (the launch's contract); they are read before the launch, while the caller is blocked in
    // this call.
    let mut accesses = unsafe { rec.launch_accesses(kernel, args) };
    let device = current_device();
    let prepared = rec.before_use(device, &accesses.touched, None, stream);
    let result = run();
    // SAFETY: `accesses` were found above, in this launch call, which is still in progress.
    let index =
        (result == SUCCESS).then(|| unsafe { rec.on_launch(device, &mut accesses, stream) });
    rec.after_use(device, prepared, stream, index);
    result
}

/// Work submitted to a capturing stream (`graph`: the capture's graph, None when the driver
/// names none): it does not run now, so nothing is recorded and nothing prepared, which
/// would enqueue itermem's own work into the capture; once the driver took it, it is kept as a
/// node of the graph, recorded at each launch of the graph instead (`graphs.rs`).
fn on_captured(
    rec: &Recorder,
    run: Run,
    stream: u64,
    graph: Option<usize>,
    work: impl FnOnce() -> NodeWork,
) -> u32 {
    let result = run();
    if result == SUCCESS
        && let Some(graph) = graph
    {
        let handle = driver::captured_node(stream).unwrap_or(0);
        let work = work();
        rec.graphs.add(graph, Node { handle, work });
    }
    result
}

/// `CUDA_KERNEL_NODE_PARAMS` (`_v2`, CUDA 12 and 13).
#[repr(C)]
pub struct KernelNodeParams {
    function: usize,
    grid_dim: [u32; 3],
    block_dim: [u32; 3],
    shared_mem_bytes: u32,
    kernel_params: *mut *mut c_void,
    extra: *mut *mut c_void,
    kernel: usize,
    context: usize,
}

/// `CUDA_MEMSET_NODE_PARAMS`.
#[repr(C)]
pub struct MemsetNodeParams {
    dst: u64,
    pitch: usize,
    value: u32,
    element_size: u32,
    width: usize,
    height: usize,
}

/// `CUDA_MEMCPY3D` (`_v2`).
#[repr(C)]
pub struct Memcpy3D {
    src_x_in_bytes: usize,
    src_y: usize,
    src_z: usize,
    src_lod: usize,
    src_memory_type: u32,
    src_host: *const c_void,
    src_device: u64,
    src_array: usize,
    reserved0: *mut c_void,
    src_pitch: usize,
    src_height: usize,
    dst_x_in_bytes: usize,
    dst_y: usize,
    dst_z: usize,
    dst_lod: usize,
    dst_memory_type: u32,
    dst_host: *mut c_void,
    dst_device: u64,
    dst_array: usize,
    reserved1: *mut c_void,
    dst_pitch: usize,
    dst_height: usize,
    width_in_bytes: usize,
    height: usize,
    depth: usize,
}

/// `CUDA_MEM_ALLOC_NODE_PARAMS` (`_v1`): the pool properties (88 bytes), the access
/// descriptors, then the size and the address the driver returns.
#[repr(C)]
pub struct MemAllocNodeParams {
    pool_props: [u64; 11],
    access_descs: *const c_void,
    access_desc_count: usize,
    bytesize: usize,
    dptr: u64,
}

const _: () = assert!(
    size_of::<MemAllocNodeParams>() == 120
        && size_of::<KernelNodeParams>() == 72
        && size_of::<MemsetNodeParams>() == 40
        && size_of::<Memcpy3D>() == 200
);

/// A kernel node's work (None for parameters the driver will refuse).
fn kernel_node_work(rec: &Recorder, params: *const KernelNodeParams) -> Option<NodeWork> {
    if params.is_null() {
        return None;
    }
    // SAFETY: the caller's non-null parameter block, valid for the call.
    let p = unsafe { &*params };
    let args = driver_args(p.kernel_params, p.extra);
    // SAFETY: the node's arguments, as the driver requires them of the call (and copies).
    Some(unsafe { rec.kernel_node(KernelRef::Function(p.function), args) })
}

/// `cuGraphAddKernelNode_v2`, `cuGraphAddMemsetNode`, `cuGraphAddMemcpyNode`: once the driver
/// made the node (its handle in `node`), its work is kept for `graph`'s launches.
fn on_add_node(
    rec: &Recorder,
    run: Run,
    node: *mut usize,
    graph: usize,
    work: Option<NodeWork>,
) -> u32 {
    let result = run();
    if result == SUCCESS
        && !node.is_null()
        && let Some(work) = work
    {
        // SAFETY: the call succeeded, so the driver wrote the node's handle.
        let handle = unsafe { *node };
        rec.graphs.add(graph, Node { handle, work });
    }
    result
}

/// `cuGraphAddMemAllocNode`: once the driver made the node, its allocation (the address it
/// wrote to the parameters) is kept for `graph`'s launches.
fn on_add_alloc_node(
    rec: &Recorder,
    run: Run,
    node: *mut usize,
    graph: usize,
    params: *mut MemAllocNodeParams,
) -> u32 {
    let result = run();
    if result == SUCCESS && !node.is_null() && !params.is_null() {
        // SAFETY: the call succeeded, so the driver wrote the node's handle and the address
        // into the caller's parameters, valid for the call.
        let (handle, size, addr) = unsafe { (*node, (*params).bytesize, (*params).dptr) };
        let work = NodeWork::Alloc {
            addr,
            size: size as u64,
        };
        rec.graphs.add(graph, Node { handle, work });
    }
    result
}

fn memset_node_work(params: *const MemsetNodeParams) -> Option<NodeWork> {
    if params.is_null() {
        return None;
    }
    // SAFETY: the caller's non-null parameter block, valid for the call.
    let p = unsafe { &*params };
    let row = (p.element_size as usize).saturating_mul(p.width);
    Some(NodeWork::Set {
        dst: p.dst,
        bytes: row.saturating_mul(p.height) as u64,
    })
}

/// A memcpy node's work: the first byte of each side, the bytes and the direction (arrays,
/// which the shim refuses in memcpy nodes, have no address).
fn memcpy_node_work(copy: *const Memcpy3D) -> Option<NodeWork> {
    if copy.is_null() {
        return None;
    }
    // SAFETY: the caller's non-null CUDA_MEMCPY3D, valid for the call.
    let c = unsafe { &*copy };
    let side = |memory_type,
                host: u64,
                device: u64,
                (x, y, z): (usize, usize, usize),
                pitch: usize,
                height: usize| {
        let offset = (z as u64)
            .saturating_mul(height as u64)
            .saturating_add(y as u64)
            .saturating_mul(pitch as u64)
            .saturating_add(x as u64);
        match memory_type {
            MEMORY_HOST => (host.saturating_add(offset), Some(false)),
            MEMORY_DEVICE => (device.saturating_add(offset), Some(true)),
            _ => (device.saturating_add(offset), None),
        }
    };
    let (src, src_device) = side(
        c.src_memory_type,
        c.src_host as u64,
        c.src_device,
        (c.src_x_in_bytes, c.src_y, c.src_z),
        c.src_pitch,
        c.src_height,
    );
    let (dst, dst_device) = side(
        c.dst_memory_type,
        c.dst_host as u64,
        c.dst_device,
        (c.dst_x_in_bytes, c.dst_y, c.dst_z),
        c.dst_pitch,
        c.dst_height,
    );
    let kind = copy_kind_between(src_device, dst_device);
    let bytes = c
        .width_in_bytes
        .saturating_mul(c.height)
        .saturating_mul(c.depth);
    Some(NodeWork::Copy {
        dst,
        src,
        bytes: bytes as u64,
        kind,
    })
}

/// `cuStreamBeginCapture_v2`: from now on the hooks ask whether a stream captures.
fn on_begin_capture(run: Run, stream: u64) -> u32 {
    let result = run();
    if result == SUCCESS {
        driver::capture_began(stream);
    }
    result
}

/// `cuStreamEndCapture`: the capture is over unless the driver says it goes on.
fn on_end_capture(run: Run, stream: u64) -> u32 {
    let result = run();
    driver::capture_ended(stream);
    result
}

/// A graph call that changes what graphs hold, applied by `then` once the driver succeeded.
fn on_graph_call(run: Run, then: impl FnOnce()) -> u32 {
    let result = run();
    if result == SUCCESS {
        then();
    }
    result
}

/// `cuGraphInstantiateWithFlags`/`WithParams`: the new exec graph runs `graph`'s nodes.
fn on_instantiate(rec: &Recorder, run: Run, exec: *mut usize, graph: usize) -> u32 {
    on_graph_call(run, || {
        if !exec.is_null() {
            // SAFETY: the call succeeded, so the driver wrote the exec graph's handle.
            rec.graphs.instantiate(unsafe { *exec }, graph);
        }
    })
}

/// `cuGraphLaunch`: the graph's nodes are recorded as the work they run, and every allocation
/// they touch is made resident before the launch is enqueued, as for one call using them all.
fn on_graph_launch(rec: &Recorder, run: Run, exec: usize, stream: u64) -> u32 {
    // A launch into a capture (which the driver may refuse) runs nothing now.
    if driver::capture(stream).is_some() {
        return run();
    }
    let Some(nodes) = rec.graphs.launched(exec) else {
        return run();
    };
    let device = current_device();
    let mut launch = rec.graph_events(&nodes, stream);
    // The nodes' events come after those of the graph's allocations, so the plan is followed
    // from that many events on.
    let allocations = graph_allocation_events(rec, &nodes);
    let prepared = rec.before_graph(device, &launch.touched, stream, allocations, launch.len());
    let result = run();
    let memory = nodes.iter().any(|n| n.work.is_memory());
    let recorded = if result == SUCCESS {
        if memory {
            on_graph_allocations(rec, device, &nodes, stream);
            // The nodes' addresses again, now that the graph's allocations are live.
            launch = rec.graph_events(&nodes, stream);
        }
        let recorded = rec.on_graph_launch(device, exec, stream, launch);
        if memory {
            on_graph_frees(rec, &nodes, stream);
        }
        recorded
    } else {
        Default::default()
    };
    rec.after_graph(device, prepared, stream, recorded);
    result
}

/// How many events [`on_graph_allocations`] will record for a launch of `nodes`: a malloc for
/// each alloc node, after a free for one whose memory the previous launch left live (an alloc
/// node's address is fixed for its exec graph).
fn graph_allocation_events(rec: &Recorder, nodes: &[Node]) -> u64 {
    nodes
        .iter()
        .map(|node| match node.work {
            NodeWork::Alloc { addr, .. } => 1 + rec.is_live(addr) as u64,
            _ => 0,
        })
        .sum()
}

/// A graph launch that succeeded allocated its alloc nodes' memory: each becomes a live
/// allocation of the program's (recorded before the launch's work, never served nor planned
/// by itermem: the driver placed it), as a `cudaMallocAsync` before the same work would. One
/// still live from the previous launch was freed first (an exec graph instantiated with
/// auto-free on launch; the driver refuses the launch otherwise).
fn on_graph_allocations(rec: &Recorder, device: u32, nodes: &[Node], stream: u64) {
    for node in nodes {
        if let NodeWork::Alloc { addr, size } = node.work {
            if let Some(taken) = rec.begin_free(addr) {
                rec.end_free(Some(taken), true, stream);
            }
            rec.on_malloc(device, addr, size, MemKind::Async, stream, false);
        }
    }
}

/// A graph launch that succeeded freed its free nodes' allocations, after its work.
fn on_graph_frees(rec: &Recorder, nodes: &[Node], stream: u64) {
    for node in nodes {
        if let NodeWork::Free { addr } = node.work {
            let taken = rec.begin_free(addr);
            rec.end_free(taken, true, stream);
        }
    }
}

/// `CU_LAUNCH_PARAM_END`, `CU_LAUNCH_PARAM_BUFFER_POINTER`, `CU_LAUNCH_PARAM_BUFFER_SIZE`.
const PARAM_END: usize = 0;
const PARAM_BUFFER_POINTER: usize = 1;
const PARAM_BUFFER_SIZE: usize = 2;

/// A driver launch's arguments: `kernelParams`, or the packed buffer `extra` names.
fn driver_args(params: *mut *mut c_void, extra: *mut *mut c_void) -> LaunchArgs {
    if !params.is_null() {
        return LaunchArgs::Pointers(params as *const *const c_void);
    }
    if extra.is_null() {
        return LaunchArgs::Absent;
    }
    let (mut buffer, mut len) = (std::ptr::null::<u8>(), None);
    // A well-formed list is a few pairs; a longer one is malformed and left to the driver.
    for pair in 0..16 {
        // SAFETY: `extra` is a CU_LAUNCH_PARAM_END-terminated list of (key, value) pointers,
        // read only up to its end.
        let key = unsafe { *extra.add(2 * pair) } as usize;
        if key == PARAM_END {
            break;
        }
        // SAFETY: every key other than the end is followed by its value.
        let value = unsafe { *extra.add(2 * pair + 1) };
        match key {
            PARAM_BUFFER_POINTER => buffer = value as *const u8,
            // SAFETY: the value of BUFFER_SIZE points to a size_t.
            PARAM_BUFFER_SIZE if !value.is_null() => {
                len = Some(unsafe { *(value as *const usize) })
            }
            _ => {}
        }
    }
    match len {
        Some(len) if !buffer.is_null() => LaunchArgs::Packed { buffer, len },
        _ => LaunchArgs::Absent,
    }
}

/// `CUlaunchConfig` (CUDA 12): the launch configuration of `cuLaunchKernelEx`.
#[repr(C)]
pub struct DriverLaunchConfig {
    pub grid_dim: [u32; 3],
    pub block_dim: [u32; 3],
    pub shared_mem_bytes: u32,
    pub stream: usize,
    pub attrs: *mut c_void,
    pub num_attrs: u32,
}

/// The stream of a launch configuration (`cudaLaunchConfig_t` or `CUlaunchConfig`); a null
/// configuration is refused by the API before anything launches.
fn config_stream<T>(config: *const T, stream: impl FnOnce(&T) -> usize) -> u64 {
    if config.is_null() {
        0
    } else {
        // SAFETY: a non-null configuration of the caller's, valid for the call.
        stream(unsafe { &*config }) as u64
    }
}

/// `const` NUL-terminated name of a hook, for `dlsym`.
const fn symbol(name_with_nul: &'static str) -> &'static CStr {
    match CStr::from_bytes_with_nul(name_with_nul.as_bytes()) {
        Ok(name) => name,
        Err(_) => panic!("hook names contain no NUL"),
    }
}

/// `fn name(args) [keeps ptr | infers kind of dst src | backs ptr size Layer] => observer;` —
/// `keeps ptr`: a free whose real call must never receive a block of itermem's own
/// allocator, even when passing through ([`kept_by_itermem`]); `infers kind of dst src`: a
/// copy whose real call gets `cudaMemcpyDefault` when its observer asks, or after an internal
/// error when a side is memory itermem served from the host ([`copy_kind`]); `backs ptr size
/// Layer`: a device allocation that, after an internal error, is still served as before when
/// the real allocator refuses it ([`refused_after_error`]).
///
/// Besides the hooks it makes [`HOOK_NAMES`] and [`hook_named`], which `resolve.rs` uses to
/// hand a hook out in place of the real function a dynamic lookup found.
macro_rules! hooks {
    ($( $(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(keeps $kept:ident)? $(infers $kind:ident of $dst:ident $src:ident)? $(backs $ptr:ident $size:ident $layer:ident)? => $observer:expr; )*) => {
        /// The CUDA functions itermem hooks (what `ITERMEM_INJECT_PANIC` may name).
        pub const HOOK_NAMES: &[&str] = &[$(stringify!($name)),*];

        /// The real function of each hook, resolved once.
        #[allow(non_upper_case_globals)] // CUDA's names
        mod real_functions {
            use super::*;
            $( pub static $name: RealFn = RealFn::new(symbol(concat!(stringify!($name), "\0"))); )*
        }

        /// The hook exported as `name` and the slot of the real function it calls.
        pub fn hook_named(name: &[u8]) -> Option<(*mut c_void, &'static RealFn)> {
            $( if name == stringify!($name).as_bytes() {
                return Some(($name as *mut c_void, &real_functions::$name));
            } )*
            None
        }

        /// The hooks' bodies, under names the loader cannot interpose: itermem's own calls of a
        /// hook (`pluggable.rs`) must reach this library's code even where the global scope's
        /// definition of the name is the runtime's (a library loaded with `dlopen`).
        pub(super) mod direct {
            use super::*;
            $(
                /// # Safety
                /// As the exported hook of the same name.
                #[inline(always)]
                #[allow(non_snake_case)] // CUDA's names
                #[allow(clippy::too_many_arguments)] // CUDA's prototypes
                pub(in super::super) unsafe fn $name($($arg: $ty),*) -> u32 {
                    type Real = unsafe extern "C" fn($($ty),*) -> u32;
                    // SAFETY: `Real` is this hook's own prototype, which the real function shares.
                    let Some(real) = (unsafe { real_functions::$name.get::<Real>() }) else {
                        return CUDA_ERROR_SYMBOL_NOT_FOUND;
                    };
                    let call = move || {
                        $(if let Some(answer) = kept_by_itermem($kept as u64) {
                            return answer;
                        })?
                        $(let $kind = copy_kind($kind, $dst as u64, $src as u64);)?
                        // SAFETY: forwards the application's arguments unchanged.
                        let forward = move || unsafe { real($($arg),*) };
                        let result = forward();
                        $(if result == MEMORY_ALLOCATION && !active() {
                            return refused_after_error(result, $layer, $ptr.cast(), $size, forward);
                        })?
                        result
                    };
                    intercept(stringify!($name), call, move |rec, call| {
                        let observe: fn(&'static Recorder, Run, $($ty),*) -> u32 = $observer;
                        observe(rec, &mut || call.run(), $($arg),*)
                    })
                }
            )*
        }

        $(
            $(#[$doc])*
            ///
            /// # Safety
            /// Called by the application with the arguments of the CUDA prototype.
            #[cfg_attr(not(test), unsafe(no_mangle))]
            #[allow(non_snake_case)] // CUDA's names
            pub unsafe extern "C" fn $name($($arg: $ty),*) -> u32 {
                // SAFETY: the application's arguments, as the hook's body requires.
                unsafe { direct::$name($($arg),*) }
            }
        )*
    };
}

use CopyKind::{DeviceToDevice as D2D, DeviceToHost as D2H, HostToDevice as H2D};
use Layer::{Driver, Runtime};

hooks! {
    // ---- the runtime API ----
    fn cudaMalloc(ptr: *mut *mut c_void, size: usize) backs ptr size Runtime =>
        |rec, run, ptr, size| on_alloc(rec, run, Runtime, ptr, size, MemKind::Device, 0);
    fn cudaMallocManaged(ptr: *mut *mut c_void, size: usize, flags: u32) =>
        |rec, run, ptr, size, _| on_alloc(rec, run, Runtime, ptr, size, MemKind::Managed, 0);
    fn cudaMallocAsync(ptr: *mut *mut c_void, size: usize, stream: usize) backs ptr size Runtime =>
        |rec, run, ptr, size, stream| on_alloc(rec, run, Runtime, ptr, size, MemKind::Async, stream as u64);
    fn cudaMallocAsync_ptsz(ptr: *mut *mut c_void, size: usize, stream: usize) backs ptr size Runtime =>
        |rec, run, ptr, size, stream| on_alloc(rec, run, Runtime, ptr, size, MemKind::Async, per_thread(stream));
    fn cudaMallocHost(ptr: *mut *mut c_void, size: usize) =>
        |rec, run, ptr, size| on_alloc(rec, run, Runtime, ptr, size, MemKind::PinnedHost, 0);
    fn cudaHostAlloc(ptr: *mut *mut c_void, size: usize, flags: u32) =>
        |rec, run, ptr, size, _| on_alloc(rec, run, Runtime, ptr, size, MemKind::PinnedHost, 0);

    fn cudaFree(ptr: *mut c_void) keeps ptr => |rec, run, ptr| on_free(rec, run, ptr as u64, 0, true);
    fn cudaFreeHost(ptr: *mut c_void) => |rec, run, ptr| on_free(rec, run, ptr as u64, 0, false);
    fn cudaFreeAsync(ptr: *mut c_void, stream: usize) keeps ptr =>
        |rec, run, ptr, stream| on_free_async(rec, run, ptr as u64, stream as u64);
    fn cudaFreeAsync_ptsz(ptr: *mut c_void, stream: usize) keeps ptr =>
        |rec, run, ptr, stream| on_free_async(rec, run, ptr as u64, per_thread(stream));

    fn cudaMemcpy(dst: *mut c_void, src: *const c_void, count: usize, kind: u32) infers kind of dst src =>
        |rec, run, dst, src, count, kind| on_runtime_copy(rec, run, dst, src, count, kind, 0, false);
    fn cudaMemcpy_ptds(dst: *mut c_void, src: *const c_void, count: usize, kind: u32) infers kind of dst src =>
        |rec, run, dst, src, count, kind| on_runtime_copy(rec, run, dst, src, count, kind, per_thread(0), false);
    fn cudaMemcpyAsync(dst: *mut c_void, src: *const c_void, count: usize, kind: u32, stream: usize) infers kind of dst src =>
        |rec, run, dst, src, count, kind, stream| on_runtime_copy(rec, run, dst, src, count, kind, stream as u64, true);
    fn cudaMemcpyAsync_ptsz(dst: *mut c_void, src: *const c_void, count: usize, kind: u32, stream: usize) infers kind of dst src =>
        |rec, run, dst, src, count, kind, stream| on_runtime_copy(rec, run, dst, src, count, kind, per_thread(stream), true);

    fn cudaMemset(ptr: *mut c_void, value: i32, count: usize) =>
        |rec, run, ptr, _, count| on_set(rec, run, ptr as u64, count, 0, false);
    fn cudaMemset_ptds(ptr: *mut c_void, value: i32, count: usize) =>
        |rec, run, ptr, _, count| on_set(rec, run, ptr as u64, count, per_thread(0), false);
    fn cudaMemsetAsync(ptr: *mut c_void, value: i32, count: usize, stream: usize) =>
        |rec, run, ptr, _, count, stream| on_set(rec, run, ptr as u64, count, stream as u64, true);
    fn cudaMemsetAsync_ptsz(ptr: *mut c_void, value: i32, count: usize, stream: usize) =>
        |rec, run, ptr, _, count, stream| on_set(rec, run, ptr as u64, count, per_thread(stream), true);

    fn cudaLaunchKernel(func: *const c_void, grid: Dim3, block: Dim3, args: *mut *mut c_void, shared: usize, stream: usize) =>
        |rec, run, func, _, _, args, _, stream| on_launch(rec, run, KernelRef::Host(func), LaunchArgs::Pointers(args as _), stream as u64);
    fn cudaLaunchKernel_ptsz(func: *const c_void, grid: Dim3, block: Dim3, args: *mut *mut c_void, shared: usize, stream: usize) =>
        |rec, run, func, _, _, args, _, stream| on_launch(rec, run, KernelRef::Host(func), LaunchArgs::Pointers(args as _), per_thread(stream));
    fn cudaLaunchKernelExC(config: *const LaunchConfig, func: *const c_void, args: *mut *mut c_void) =>
        |rec, run, config, func, args| on_launch(rec, run, KernelRef::Host(func), LaunchArgs::Pointers(args as _), config_stream(config, |c| c.stream));
    fn cudaLaunchKernelExC_ptsz(config: *const LaunchConfig, func: *const c_void, args: *mut *mut c_void) =>
        |rec, run, config, func, args| on_launch(rec, run, KernelRef::Host(func), LaunchArgs::Pointers(args as _), per_thread(config_stream(config, |c| c.stream) as usize));

    // Stream, event and synchronisation calls pass through: itermem orders its own work with
    // events of its own, so it never needs to change them.
    fn cudaStreamCreate(stream: *mut usize) => |_, run, _| run();
    fn cudaStreamCreateWithFlags(stream: *mut usize, flags: u32) => |_, run, _, _| run();
    fn cudaStreamDestroy(stream: usize) => |_, run, _| run();
    fn cudaStreamSynchronize(stream: usize) => |_, run, _| run();
    fn cudaStreamSynchronize_ptsz(stream: usize) => |_, run, _| run();
    fn cudaStreamQuery(stream: usize) => |_, run, _| run();
    fn cudaStreamQuery_ptsz(stream: usize) => |_, run, _| run();
    fn cudaStreamWaitEvent(stream: usize, event: usize, flags: u32) => |_, run, _, _, _| run();
    fn cudaStreamWaitEvent_ptsz(stream: usize, event: usize, flags: u32) => |_, run, _, _, _| run();
    fn cudaEventCreate(event: *mut usize) => |_, run, _| run();
    fn cudaEventCreateWithFlags(event: *mut usize, flags: u32) => |_, run, _, _| run();
    fn cudaEventRecord(event: usize, stream: usize) => |_, run, _, _| run();
    fn cudaEventRecord_ptsz(event: usize, stream: usize) => |_, run, _, _| run();
    fn cudaEventSynchronize(event: usize) => |_, run, _| run();
    fn cudaEventDestroy(event: usize) => |_, run, _| run();
    fn cudaDeviceSynchronize() => |_, run| run();
    fn cudaDeviceReset() => |rec, run| on_context_gone(rec, run);

    // ---- the driver API (CUdeviceptr: u64; CUstream, CUfunction, CUcontext: handles) ----
    // A runtime call that reaches the driver is observed once: the runtime's hook runs the
    // driver's inside it, and a hook inside a hook passes through (`intercept`).
    fn cuMemAlloc_v2(ptr: *mut u64, size: usize) backs ptr size Driver =>
        |rec, run, ptr, size| on_alloc(rec, run, Driver, ptr.cast(), size, MemKind::Device, 0);
    fn cuMemAllocPitch_v2(ptr: *mut u64, pitch: *mut usize, width: usize, height: usize, element_size: u32) =>
        |rec, run, ptr, pitch, _, height, _| on_alloc_pitch(rec, run, ptr, pitch, height);
    fn cuMemAllocAsync(ptr: *mut u64, size: usize, stream: usize) backs ptr size Driver =>
        |rec, run, ptr, size, stream| on_alloc(rec, run, Driver, ptr.cast(), size, MemKind::Async, stream as u64);
    fn cuMemAllocFromPoolAsync(ptr: *mut u64, size: usize, pool: usize, stream: usize) =>
        |rec, run, ptr, size, _, stream| on_unserved_alloc(rec, run, ptr, size, stream as u64);
    fn cuMemAllocManaged(ptr: *mut u64, size: usize, flags: u32) =>
        |rec, run, ptr, size, _| on_alloc(rec, run, Driver, ptr.cast(), size, MemKind::Managed, 0);
    fn cuMemAllocHost_v2(ptr: *mut *mut c_void, size: usize) =>
        |rec, run, ptr, size| on_alloc(rec, run, Driver, ptr, size, MemKind::PinnedHost, 0);
    fn cuMemHostAlloc(ptr: *mut *mut c_void, size: usize, flags: u32) =>
        |rec, run, ptr, size, _| on_alloc(rec, run, Driver, ptr, size, MemKind::PinnedHost, 0);

    fn cuMemFree_v2(ptr: u64) keeps ptr => |rec, run, ptr| on_free(rec, run, ptr, 0, true);
    fn cuMemFreeAsync(ptr: u64, stream: usize) keeps ptr =>
        |rec, run, ptr, stream| on_free_async(rec, run, ptr, stream as u64);
    fn cuMemFreeHost(ptr: *mut c_void) => |rec, run, ptr| on_free(rec, run, ptr as u64, 0, false);

    fn cuMemMap(ptr: u64, size: usize, offset: usize, handle: u64, flags: u64) =>
        |rec, run, ptr, size, _, _, _| on_map(rec, run, ptr, size);
    fn cuMemUnmap(ptr: u64, size: usize) => |rec, run, ptr, size| on_unmap(rec, run, ptr, size);
    fn cuMemCreate(handle: *mut u64, size: usize, prop: *const c_void, flags: u64) => |_, run, _, _, _, _| run();
    fn cuMemRelease(handle: u64) => |_, run, _| run();

    fn cuDevicePrimaryCtxReset_v2(device: i32) => |rec, run, _| on_context_gone(rec, run);
    // The CUDA 7 name, which NVIDIA's runtime resolves (at version 7000) for cudaDeviceReset.
    fn cuDevicePrimaryCtxReset(device: i32) => |rec, run, _| on_context_gone(rec, run);
    fn cuCtxDestroy_v2(context: usize) => |rec, run, _| on_context_gone(rec, run);

    fn cuMemcpy(dst: u64, src: u64, count: usize) =>
        |rec, run, dst, src, count| on_driver_copy(rec, run, (dst, src, count), CopyKind::Default, 0, false);
    fn cuMemcpyAsync(dst: u64, src: u64, count: usize, stream: usize) =>
        |rec, run, dst, src, count, stream| on_driver_copy(rec, run, (dst, src, count), CopyKind::Default, stream as u64, true);
    fn cuMemcpyHtoD_v2(dst: u64, src: *const c_void, count: usize) =>
        |rec, run, dst, src, count| on_driver_copy(rec, run, (dst, src as u64, count), H2D, 0, false);
    fn cuMemcpyDtoH_v2(dst: *mut c_void, src: u64, count: usize) =>
        |rec, run, dst, src, count| on_driver_copy(rec, run, (dst as u64, src, count), D2H, 0, false);
    fn cuMemcpyDtoD_v2(dst: u64, src: u64, count: usize) =>
        |rec, run, dst, src, count| on_driver_copy(rec, run, (dst, src, count), D2D, 0, false);
    fn cuMemcpyHtoDAsync_v2(dst: u64, src: *const c_void, count: usize, stream: usize) =>
        |rec, run, dst, src, count, stream| on_driver_copy(rec, run, (dst, src as u64, count), H2D, stream as u64, true);
    fn cuMemcpyDtoHAsync_v2(dst: *mut c_void, src: u64, count: usize, stream: usize) =>
        |rec, run, dst, src, count, stream| on_driver_copy(rec, run, (dst as u64, src, count), D2H, stream as u64, true);
    fn cuMemcpyDtoDAsync_v2(dst: u64, src: u64, count: usize, stream: usize) =>
        |rec, run, dst, src, count, stream| on_driver_copy(rec, run, (dst, src, count), D2D, stream as u64, true);
    fn cuMemcpyPeer(dst: u64, dst_context: usize, src: u64, src_context: usize, count: usize) =>
        |rec, run, dst, _, src, _, count| on_peer_copy(rec, run, &real_functions::cuMemcpy, (dst, src, count), None, 0);
    fn cuMemcpyPeerAsync(dst: u64, dst_context: usize, src: u64, src_context: usize, count: usize, stream: usize) =>
        |rec, run, dst, _, src, _, count, stream|
            on_peer_copy(rec, run, &real_functions::cuMemcpyAsync, (dst, src, count), Some(stream), stream as u64);
    fn cuMemcpy2D_v2(copy: *const Memcpy2D) => |rec, run, copy| on_copy_2d(rec, run, copy, 0, false);
    fn cuMemcpy2DUnaligned_v2(copy: *const Memcpy2D) => |rec, run, copy| on_copy_2d(rec, run, copy, 0, false);
    fn cuMemcpy2DAsync_v2(copy: *const Memcpy2D, stream: usize) =>
        |rec, run, copy, stream| on_copy_2d(rec, run, copy, stream as u64, true);

    fn cuMemsetD8_v2(dst: u64, value: u8, count: usize) => |rec, run, dst, _, n| on_set(rec, run, dst, n, 0, false);
    fn cuMemsetD16_v2(dst: u64, value: u16, count: usize) => |rec, run, dst, _, n| on_set(rec, run, dst, n * 2, 0, false);
    fn cuMemsetD32_v2(dst: u64, value: u32, count: usize) => |rec, run, dst, _, n| on_set(rec, run, dst, n * 4, 0, false);
    fn cuMemsetD8Async(dst: u64, value: u8, count: usize, stream: usize) =>
        |rec, run, dst, _, n, stream| on_set(rec, run, dst, n, stream as u64, true);
    fn cuMemsetD16Async(dst: u64, value: u16, count: usize, stream: usize) =>
        |rec, run, dst, _, n, stream| on_set(rec, run, dst, n * 2, stream as u64, true);
    fn cuMemsetD32Async(dst: u64, value: u32, count: usize, stream: usize) =>
        |rec, run, dst, _, n, stream| on_set(rec, run, dst, n * 4, stream as u64, true);
    fn cuMemsetD2D8_v2(dst: u64, pitch: usize, value: u8, width: usize, height: usize) =>
        |rec, run, dst, _, _, w, h| on_set(rec, run, dst, w * h, 0, false);
    fn cuMemsetD2D16_v2(dst: u64, pitch: usize, value: u16, width: usize, height: usize) =>
        |rec, run, dst, _, _, w, h| on_set(rec, run, dst, w * h * 2, 0, false);
    fn cuMemsetD2D32_v2(dst: u64, pitch: usize, value: u32, width: usize, height: usize) =>
        |rec, run, dst, _, _, w, h| on_set(rec, run, dst, w * h * 4, 0, false);
    fn cuMemsetD2D8Async(dst: u64, pitch: usize, value: u8, width: usize, height: usize, stream: usize) =>
        |rec, run, dst, _, _, w, h, stream| on_set(rec, run, dst, w * h, stream as u64, true);
    fn cuMemsetD2D16Async(dst: u64, pitch: usize, value: u16, width: usize, height: usize, stream: usize) =>
        |rec, run, dst, _, _, w, h, stream| on_set(rec, run, dst, w * h * 2, stream as u64, true);
    fn cuMemsetD2D32Async(dst: u64, pitch: usize, value: u32, width: usize, height: usize, stream: usize) =>
        |rec, run, dst, _, _, w, h, stream| on_set(rec, run, dst, w * h * 4, stream as u64, true);

    fn cuLaunchKernel(function: usize, grid_x: u32, grid_y: u32, grid_z: u32, block_x: u32, block_y: u32, block_z: u32, shared: u32, stream: usize, params: *mut *mut c_void, extra: *mut *mut c_void) =>
        |rec, run, function, _, _, _, _, _, _, _, stream, params, extra| on_launch(rec, run, KernelRef::Function(function), driver_args(params, extra), stream as u64);
    fn cuLaunchKernelEx(config: *const DriverLaunchConfig, function: usize, params: *mut *mut c_void, extra: *mut *mut c_void) =>
        |rec, run, config, function, params, extra| on_launch(rec, run, KernelRef::Function(function), driver_args(params, extra), config_stream(config, |c| c.stream));
    fn cuLaunchCooperativeKernel(function: usize, grid_x: u32, grid_y: u32, grid_z: u32, block_x: u32, block_y: u32, block_z: u32, shared: u32, stream: usize, params: *mut *mut c_void) =>
        |rec, run, function, _, _, _, _, _, _, _, stream, params| on_launch(rec, run, KernelRef::Function(function), driver_args(params, std::ptr::null_mut()), stream as u64);

    // CUDA graphs (`graphs.rs`): the runtime's graph calls reach these inside the runtime.
    fn cuStreamBeginCapture_v2(stream: usize, mode: u32) => |_, run, stream, _| on_begin_capture(run, stream as u64);
    fn cuStreamBeginCapture_v2_ptsz(stream: usize, mode: u32) => |_, run, stream, _| on_begin_capture(run, per_thread(stream));
    fn cuStreamEndCapture(stream: usize, graph: *mut usize) => |_, run, stream, _| on_end_capture(run, stream as u64);
    fn cuStreamEndCapture_ptsz(stream: usize, graph: *mut usize) => |_, run, stream, _| on_end_capture(run, per_thread(stream));
    fn cuGraphAddKernelNode_v2(node: *mut usize, graph: usize, dependencies: *const usize, count: usize, params: *const KernelNodeParams) =>
        |rec, run, node, graph, _, _, params| on_add_node(rec, run, node, graph, kernel_node_work(rec, params));
    fn cuGraphAddMemsetNode(node: *mut usize, graph: usize, dependencies: *const usize, count: usize, params: *const MemsetNodeParams, context: usize) =>
        |rec, run, node, graph, _, _, params, _| on_add_node(rec, run, node, graph, memset_node_work(params));
    fn cuGraphAddMemcpyNode(node: *mut usize, graph: usize, dependencies: *const usize, count: usize, copy: *const Memcpy3D, context: usize) =>
        |rec, run, node, graph, _, _, copy, _| on_add_node(rec, run, node, graph, memcpy_node_work(copy));
    fn cuGraphAddMemAllocNode(node: *mut usize, graph: usize, dependencies: *const usize, count: usize, params: *mut MemAllocNodeParams) =>
        |rec, run, node, graph, _, _, params| on_add_alloc_node(rec, run, node, graph, params);
    fn cuGraphAddMemFreeNode(node: *mut usize, graph: usize, dependencies: *const usize, count: usize, dptr: u64) =>
        |rec, run, node, graph, _, _, dptr| on_add_node(rec, run, node, graph, Some(NodeWork::Free { addr: dptr }));
    fn cuGraphAddChildGraphNode(node: *mut usize, graph: usize, dependencies: *const usize, count: usize, child: usize) =>
        |rec, run, _, graph, _, _, child| on_graph_call(run, || rec.graphs.add_child(graph, child));
    fn cuGraphDestroy(graph: usize) => |rec, run, graph| on_graph_call(run, || rec.graphs.destroy(graph));
    fn cuGraphInstantiateWithFlags(exec: *mut usize, graph: usize, flags: u64) =>
        |rec, run, exec, graph, _| on_instantiate(rec, run, exec, graph);
    fn cuGraphInstantiate_v2(exec: *mut usize, graph: usize, error_node: *mut usize, log: *mut c_char, log_size: usize) =>
        |rec, run, exec, graph, _, _, _| on_instantiate(rec, run, exec, graph);
    fn cuGraphInstantiateWithParams(exec: *mut usize, graph: usize, params: *mut c_void) =>
        |rec, run, exec, graph, _| on_instantiate(rec, run, exec, graph);
    fn cuGraphInstantiateWithParams_ptsz(exec: *mut usize, graph: usize, params: *mut c_void) =>
        |rec, run, exec, graph, _| on_instantiate(rec, run, exec, graph);
    fn cuGraphExecKernelNodeSetParams_v2(exec: usize, node: usize, params: *const KernelNodeParams) =>
        |rec, run, exec, node, params| {
            let work = kernel_node_work(rec, params);
            on_graph_call(run, || if let Some(work) = work { rec.graphs.set_node(exec, node, work) })
        };
    fn cuGraphExecUpdate_v2(exec: usize, graph: usize, info: *mut c_void) =>
        |rec, run, exec, graph, _| on_graph_call(run, || rec.graphs.update(exec, graph));
    fn cuGraphExecDestroy(exec: usize) => |rec, run, exec| on_graph_call(run, || rec.graphs.destroy_exec(exec));
    fn cuGraphLaunch(exec: usize, stream: usize) => |rec, run, exec, stream| on_graph_launch(rec, run, exec, stream as u64);
    fn cuGraphLaunch_ptsz(exec: usize, stream: usize) => |rec, run, exec, stream| on_graph_launch(rec, run, exec, per_thread(stream));

    fn cuStreamCreate(stream: *mut usize, flags: u32) => |_, run, _, _| run();
    fn cuStreamDestroy_v2(stream: usize) => |_, run, _| run();
    fn cuStreamSynchronize(stream: usize) => |_, run, _| run();
    fn cuStreamQuery(stream: usize) => |_, run, _| run();
    fn cuStreamWaitEvent(stream: usize, event: usize, flags: u32) => |_, run, _, _, _| run();
    fn cuEventCreate(event: *mut usize, flags: u32) => |_, run, _, _| run();
    fn cuEventRecord(event: usize, stream: usize) => |_, run, _, _| run();
    fn cuEventSynchronize(event: usize) => |_, run, _| run();
    fn cuEventQuery(event: usize) => |_, run, _| run();
    fn cuEventDestroy_v2(event: usize) => |_, run, _| run();
    fn cuCtxSynchronize() => |_, run| run();

    // The per-thread default stream variants (`--default-stream per-thread` driver code, and
    // cuGetProcAddress with CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM): stream 0 of a
    // `_ptsz` function, and the implicit stream of a `_ptds` one, is the thread's own.
    fn cuMemcpyHtoD_v2_ptds(dst: u64, src: *const c_void, count: usize) =>
        |rec, run, dst, src, count| on_driver_copy(rec, run, (dst, src as u64, count), H2D, per_thread(0), false);
    fn cuMemcpyDtoH_v2_ptds(dst: *mut c_void, src: u64, count: usize) =>
        |rec, run, dst, src, count| on_driver_copy(rec, run, (dst as u64, src, count), D2H, per_thread(0), false);
    fn cuMemcpyDtoD_v2_ptds(dst: u64, src: u64, count: usize) =>
        |rec, run, dst, src, count| on_driver_copy(rec, run, (dst, src, count), D2D, per_thread(0), false);
    fn cuMemcpy_ptds(dst: u64, src: u64, count: usize) =>
        |rec, run, dst, src, count| on_driver_copy(rec, run, (dst, src, count), CopyKind::Default, per_thread(0), false);
    fn cuMemcpyPeer_ptds(dst: u64, dst_context: usize, src: u64, src_context: usize, count: usize) =>
        |rec, run, dst, _, src, _, count|
            on_peer_copy(rec, run, &real_functions::cuMemcpy_ptds, (dst, src, count), None, per_thread(0));
    fn cuMemcpy2D_v2_ptds(copy: *const Memcpy2D) => |rec, run, copy| on_copy_2d(rec, run, copy, per_thread(0), false);
    fn cuMemcpy2DUnaligned_v2_ptds(copy: *const Memcpy2D) => |rec, run, copy| on_copy_2d(rec, run, copy, per_thread(0), false);
    fn cuMemsetD8_v2_ptds(dst: u64, value: u8, count: usize) => |rec, run, dst, _, n| on_set(rec, run, dst, n, per_thread(0), false);
    fn cuMemsetD16_v2_ptds(dst: u64, value: u16, count: usize) => |rec, run, dst, _, n| on_set(rec, run, dst, n * 2, per_thread(0), false);
    fn cuMemsetD32_v2_ptds(dst: u64, value: u32, count: usize) => |rec, run, dst, _, n| on_set(rec, run, dst, n * 4, per_thread(0), false);
    fn cuMemsetD2D8_v2_ptds(dst: u64, pitch: usize, value: u8, width: usize, height: usize) =>
        |rec, run, dst, _, _, w, h| on_set(rec, run, dst, w * h, per_thread(0), false);
    fn cuMemsetD2D16_v2_ptds(dst: u64, pitch: usize, value: u16, width: usize, height: usize) =>
        |rec, run, dst, _, _, w, h| on_set(rec, run, dst, w * h * 2, per_thread(0), false);
    fn cuMemsetD2D32_v2_ptds(dst: u64, pitch: usize, value: u32, width: usize, height: usize) =>
        |rec, run, dst, _, _, w, h| on_set(rec, run, dst, w * h * 4, per_thread(0), false);
    fn cuMemcpyAsync_ptsz(dst: u64, src: u64, count: usize, stream: usize) =>
        |rec, run, dst, src, count, stream| on_driver_copy(rec, run, (dst, src, count), CopyKind::Default, per_thread(stream), true);
    fn cuMemcpyHtoDAsync_v2_ptsz(dst: u64, src: *const c_void, count: usize, stream: usize) =>
        |rec, run, dst, src, count, stream| on_driver_copy(rec, run, (dst, src as u64, count), H2D, per_thread(stream), true);
    fn cuMemcpyDtoHAsync_v2_ptsz(dst: *mut c_void, src: u64, count: usize, stream: usize) =>
        |rec, run, dst, src, count, stream| on_driver_copy(rec, run, (dst as u64, src, count), D2H, per_thread(stream), true);
    fn cuMemcpyDtoDAsync_v2_ptsz(dst: u64, src: u64, count: usize, stream: usize) =>
        |rec, run, dst, src, count, stream| on_driver_copy(rec, run, (dst, src, count), D2D, per_thread(stream), true);
    fn cuMemcpyPeerAsync_ptsz(dst: u64, dst_context: usize, src: u64, src_context: usize, count: usize, stream: usize) =>
        |rec, run, dst, _, src, _, count, stream|
            on_peer_copy(rec, run, &real_functions::cuMemcpyAsync_ptsz, (dst, src, count), Some(stream), per_thread(stream));
    fn cuMemcpy2DAsync_v2_ptsz(copy: *const Memcpy2D, stream: usize) =>
        |rec, run, copy, stream| on_copy_2d(rec, run, copy, per_thread(stream), true);
    fn cuMemsetD8Async_ptsz(dst: u64, value: u8, count: usize, stream: usize) =>
        |rec, run, dst, _, n, stream| on_set(rec, run, dst, n, per_thread(stream), true);
    fn cuMemsetD16Async_ptsz(dst: u64, value: u16, count: usize, stream: usize) =>
        |rec, run, dst, _, n, stream| on_set(rec, run, dst, n * 2, per_thread(stream), true);
    fn cuMemsetD32Async_ptsz(dst: u64, value: u32, count: usize, stream: usize) =>
        |rec, run, dst, _, n, stream| on_set(rec, run, dst, n * 4, per_thread(stream), true);
    fn cuMemsetD2D8Async_ptsz(dst: u64, pitch: usize, value: u8, width: usize, height: usize, stream: usize) =>
        |rec, run, dst, _, _, w, h, stream| on_set(rec, run, dst, w * h, per_thread(stream), true);
    fn cuMemsetD2D16Async_ptsz(dst: u64, pitch: usize, value: u16, width: usize, height: usize, stream: usize) =>
        |rec, run, dst, _, _, w, h, stream| on_set(rec, run, dst, w * h * 2, per_thread(stream), true);
    fn cuMemsetD2D32Async_ptsz(dst: u64, pitch: usize, value: u32, width: usize, height: usize, stream: usize) =>
        |rec, run, dst, _, _, w, h, stream| on_set(rec, run, dst, w * h * 4, per_thread(stream), true);
    fn cuMemAllocAsync_ptsz(ptr: *mut u64, size: usize, stream: usize) backs ptr size Driver =>
        |rec, run, ptr, size, stream| on_alloc(rec, run, Driver, ptr.cast(), size, MemKind::Async, per_thread(stream));
    fn cuMemAllocFromPoolAsync_ptsz(ptr: *mut u64, size: usize, pool: usize, stream: usize) =>
        |rec, run, ptr, size, _, stream| on_unserved_alloc(rec, run, ptr, size, per_thread(stream));
    fn cuMemFreeAsync_ptsz(ptr: u64, stream: usize) keeps ptr =>
        |rec, run, ptr, stream| on_free_async(rec, run, ptr, per_thread(stream));
    fn cuStreamWaitEvent_ptsz(stream: usize, event: usize, flags: u32) => |_, run, _, _, _| run();
    fn cuStreamQuery_ptsz(stream: usize) => |_, run, _| run();
    fn cuStreamSynchronize_ptsz(stream: usize) => |_, run, _| run();
    fn cuEventRecord_ptsz(event: usize, stream: usize) => |_, run, _, _| run();
    fn cuLaunchKernel_ptsz(function: usize, grid_x: u32, grid_y: u32, grid_z: u32, block_x: u32, block_y: u32, block_z: u32, shared: u32, stream: usize, params: *mut *mut c_void, extra: *mut *mut c_void) =>
        |rec, run, function, _, _, _, _, _, _, _, stream, params, extra| on_launch(rec, run, KernelRef::Function(function), driver_args(params, extra), per_thread(stream));
    fn cuLaunchKernelEx_ptsz(config: *const DriverLaunchConfig, function: usize, params: *mut *mut c_void, extra: *mut *mut c_void) =>
        |rec, run, config, function, params, extra| on_launch(rec, run, KernelRef::Function(function), driver_args(params, extra), per_thread(config_stream(config, |c| c.stream) as usize));
    fn cuLaunchCooperativeKernel_ptsz(function: usize, grid_x: u32, grid_y: u32, grid_z: u32, block_x: u32, block_y: u32, block_z: u32, shared: u32, stream: usize, params: *mut *mut c_void) =>
        |rec, run, function, _, _, _, _, _, _, _, stream, params| on_launch(rec, run, KernelRef::Function(function), driver_args(params, std::ptr::null_mut()), per_thread(stream));
}
