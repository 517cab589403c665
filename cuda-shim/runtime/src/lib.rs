//! cuda-shim's CUDA runtime (`libcudart.so.12`), built on the simulated driver's exports exactly
//! as NVIDIA's runtime is built on `libcuda.so.1`.
//!
//! What the runtime adds to the driver: implicit initialisation (the first call initialises the
//! driver; on a thread with no current context, a call makes the primary context of the thread's
//! device current: device 0 until the thread calls `cudaSetDevice`), the per-thread "last
//! error" (`cudaGetLastError` returns and clears it; a sticky device fault is returned and never
//! cleared), runtime-level argument rules (`cudaMalloc` of 0 bytes, `cudaFree(NULL)`, launch
//! configuration checks, copy directions) and the registration entry points of nvcc-generated
//! code. Every export is listed once in `runtime_api!`, which wraps its body in one guard: a
//! panic becomes `cudaErrorUnknown` and is never unwound into C.

mod driver;
mod errors;
mod props;

use driver::*;
use props::{DeviceProp, Dim3, FuncAttributes, KernelNode, LaunchConfig, PointerAttributes};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::ffi::{c_char, c_void};
use std::io::Write;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

/// CUDA runtime version implemented: 12.9 (`libcudart.so.12`), or 13.5 when built with the
/// `cuda13` feature (`libcudart.so.13`, see docs/cuda13.md).
#[cfg(not(feature = "cuda13"))]
const RUNTIME_VERSION: i32 = 12090;
#[cfg(feature = "cuda13")]
const RUNTIME_VERSION: i32 = 13050;

const SUCCESS: u32 = 0;
const INVALID_VALUE: u32 = 1;
const INITIALIZATION_ERROR: u32 = 3;
const INVALID_CONFIGURATION: u32 = 9;
const INVALID_PITCH_VALUE: u32 = 12;
const INVALID_SYMBOL: u32 = 13;
const INVALID_MEMCPY_DIRECTION: u32 = 21;
/// `cudaErrorInsufficientDriver`: the driver is older than the runtime's major version.
#[cfg(feature = "cuda13")]
const INSUFFICIENT_DRIVER: u32 = 35;
const MISSING_CONFIGURATION: u32 = 52;
const INVALID_DEVICE_FUNCTION: u32 = 98;
const INVALID_DEVICE: u32 = 101;
const INVALID_RESOURCE_HANDLE: u32 = 400;
const SYMBOL_NOT_FOUND: u32 = 500;
#[cfg(feature = "cuda13")]
const NOT_SUPPORTED: u32 = 801;
#[cfg(feature = "cuda13")]
const STREAM_CAPTURE_UNSUPPORTED: u32 = 900;
const UNKNOWN: u32 = 999;

/// A failed call: the `cudaError_t` to return. Driver codes share the runtime's numbering for
/// every error the shim's driver produces, so they pass through unchanged.
type RtResult = Result<(), u32>;

fn check(code: u32) -> RtResult {
    if code == SUCCESS { Ok(()) } else { Err(code) }
}

thread_local! {
    static LAST_ERROR: Cell<u32> = const { Cell::new(SUCCESS) };
    /// The device `cudaSetDevice` chose on this thread (0 until then, as on CUDA).
    static DEVICE: Cell<i32> = const { Cell::new(0) };
    /// Launch configurations pushed by nvcc-generated stubs (`<<<…>>>`), innermost last.
    static CALL_CONFIGURATIONS: RefCell<Vec<(Dim3, Dim3, usize, usize)>> = const { RefCell::new(Vec::new()) };
}

/// Runs an export's body: records a failure as the thread's last error, turns a panic into
/// `cudaErrorUnknown` (reported once on stderr).
fn call(name: &str, body: impl FnOnce() -> RtResult) -> u32 {
    static REPORTED: AtomicBool = AtomicBool::new(false);
    let code = match catch_unwind(AssertUnwindSafe(body)) {
        Ok(result) => result.err().unwrap_or(SUCCESS),
        Err(_) => {
            if !REPORTED.swap(true, Ordering::Relaxed) {
                // Not eprintln!: it panics when stderr fails, outside the guard.
                let _ = writeln!(
                    std::io::stderr(),
                    "cuda-shim: internal error in {name}; returning cudaErrorUnknown"
                );
            }
            UNKNOWN
        }
    };
    if code != SUCCESS {
        // Ignored when the thread is being torn down: the code is still returned.
        let _ = LAST_ERROR.try_with(|last| last.set(code));
    }
    code
}

/// Initialises the driver once per process: the primary context of every device, by ordinal.
/// The handles are looked up without keeping the contexts retained: a device's primary context
/// becomes active only when the runtime first makes it current ([`activate`]), as with NVIDIA's
/// runtime (what `cuDevicePrimaryCtxGetState` reports).
fn primaries() -> Result<&'static [usize], u32> {
    static PRIMARIES: OnceLock<Result<Vec<usize>, u32>> = OnceLock::new();
    let primaries = PRIMARIES.get_or_init(|| {
        // SAFETY: plain driver calls; `count` and `handle` are valid out-parameters.
        unsafe {
            // As NVIDIA's runtime 13: a CUDA 12 driver cannot run it.
            #[cfg(feature = "cuda13")]
            {
                let mut version = 0;
                check(cuDriverGetVersion(&mut version))?;
                if version < 13000 {
                    return Err(INSUFFICIENT_DRIVER);
                }
            }
            check(cuInit(0))?;
            let mut count = 0;
            check(cuDeviceGetCount(&mut count))?;
            (0..count)
                .map(|device| {
                    let mut handle = 0usize;
                    check(cuDevicePrimaryCtxRetain(&mut handle, device))?;
                    check(cuDevicePrimaryCtxRelease_v2(device))?;
                    Ok(handle)
                })
                .collect()
        }
    });
    primaries.as_ref().map(Vec::as_slice).map_err(|&code| {
        #[cfg(feature = "cuda13")]
        if code == INSUFFICIENT_DRIVER {
            return code;
        }
        let _ = code;
        INITIALIZATION_ERROR
    })
}

/// Whether the runtime holds a retain of each device's primary context.
static ACTIVE: [AtomicBool; 64] = [const { AtomicBool::new(false) }; 64];

/// Retains the primary context of `device` the first time the runtime makes it current; it
/// stays retained until the process exits or `cudaDeviceReset` destroys it.
fn activate(device: i32) -> RtResult {
    let slot = usize::try_from(device)
        .ok()
        .and_then(|d| ACTIVE.get(d))
        .ok_or(INVALID_DEVICE)?;
    if !slot.load(Ordering::Acquire) && !slot.swap(true, Ordering::AcqRel) {
        let mut handle = 0usize;
        // SAFETY: `handle` is a valid out-parameter.
        check(unsafe { cuDevicePrimaryCtxRetain(&mut handle, device) })?;
    }
    Ok(())
}

/// The primary context of `device` (`cudaErrorInvalidDevice` if there is no such device).
fn primary(device: i32) -> Result<usize, u32> {
    let primaries = primaries()?;
    usize::try_from(device)
        .ok()
        .and_then(|d| primaries.get(d).copied())
        .ok_or(INVALID_DEVICE)
}

/// Initialises the driver once per process and, on a thread with no current context, makes the
/// primary context of the thread's device current (as NVIDIA's runtime does: a context made
/// current through the driver API is used as it is). A primary context found current is
/// retained if the runtime holds no retain of it (after `cudaDeviceReset`, which leaves it
/// current, as NVIDIA's runtime retains it again at the next call).
fn context() -> RtResult {
    let primaries = primaries()?;
    let mut current = 0usize;
    // SAFETY: `current` is a valid out-parameter.
    check(unsafe { cuCtxGetCurrent(&mut current) })?;
    if current == 0 {
        let device = DEVICE.try_with(Cell::get).unwrap_or(0);
        let handle = primary(device)?;
        activate(device)?;
        // SAFETY: the handle is one the driver returned.
        check(unsafe { cuCtxSetCurrent(handle) })?;
    } else if let Some(device) = primaries.iter().position(|&h| h == current) {
        activate(device as i32)?;
    }
    Ok(())
}

/// The device of the current context (after `context()`).
fn current_device() -> Result<i32, u32> {
    let mut device = 0;
    // SAFETY: `device` is a valid out-parameter.
    check(unsafe { cuCtxGetDevice(&mut device) })?;
    Ok(device)
}

/// Writes `value` through an out-parameter.
///
/// # Safety
/// `out` is null (rejected with `cudaErrorInvalidValue`) or valid for a write of `T`.
unsafe fn put<T>(out: *mut T, value: T) -> RtResult {
    if out.is_null() {
        return Err(INVALID_VALUE);
    }
    // SAFETY: non-null and valid by the caller's contract.
    unsafe { out.write(value) };
    Ok(())
}

/// Handle of the calling thread's default stream (`cudaStreamPerThread`).
const PER_THREAD_STREAM: usize = 0x2;

/// What stream 0 means in a `_ptsz`/`_ptds` call: the calling thread's default stream.
fn per_thread(stream: usize) -> usize {
    if stream == 0 {
        PER_THREAD_STREAM
    } else {
        stream
    }
}

fn launch_configuration_valid(grid: Dim3, block: Dim3) -> bool {
    let threads = u64::from(block.x) * u64::from(block.y) * u64::from(block.z);
    grid.x > 0 && grid.y > 0 && grid.z > 0 && threads > 0 && threads <= 1024
}

/// Every kernel launch entry point of a host stub ends here.
fn launch(
    func: *const c_void,
    grid: Dim3,
    block: Dim3,
    args: *mut *mut c_void,
    shared_mem: usize,
    stream: usize,
) -> RtResult {
    launch_function(
        || function_of(func),
        false,
        grid,
        block,
        args,
        shared_mem,
        stream,
    )
}

/// Launches the driver function `function()` gives (looked up after the context and the
/// configuration are checked, the order of CUDA's errors); `cooperative`: all blocks resident
/// at once (`cuLaunchCooperativeKernel`).
fn launch_function(
    function: impl FnOnce() -> Result<usize, u32>,
    cooperative: bool,
    grid: Dim3,
    block: Dim3,
    args: *mut *mut c_void,
    shared_mem: usize,
    stream: usize,
) -> RtResult {
    context()?;
    if !launch_configuration_valid(grid, block) {
        return Err(INVALID_CONFIGURATION);
    }
    let function = function()?;
    let shared_mem = u32::try_from(shared_mem).map_err(|_| INVALID_VALUE)?;
    let [gx, gy, gz, bx, by, bz] = [grid.x, grid.y, grid.z, block.x, block.y, block.z];
    // SAFETY: `args` holds one pointer per parameter (the cudaLaunchKernel contract).
    let code = unsafe {
        if cooperative {
            cuLaunchCooperativeKernel(function, gx, gy, gz, bx, by, bz, shared_mem, stream, args)
        } else {
            let extra = std::ptr::null_mut();
            cuLaunchKernel(
                function, gx, gy, gz, bx, by, bz, shared_mem, stream, args, extra,
            )
        }
    };
    match code {
        SYMBOL_NOT_FOUND => Err(INVALID_DEVICE_FUNCTION),
        code => check(code),
    }
}

/// Every copy entry point ends here (`synchronous`: cudaMemcpy's host-side wait).
fn memcpy(
    dst: *mut c_void,
    src: *const c_void,
    count: usize,
    kind: u32,
    stream: usize,
    synchronous: bool,
) -> RtResult {
    context()?;
    if kind > 4 {
        return Err(INVALID_MEMCPY_DIRECTION);
    }
    // SAFETY: the driver validates device ranges; host ranges are the caller's contract.
    check(unsafe {
        cuShimMemcpy(
            dst as u64,
            src as u64,
            count,
            kind,
            stream,
            synchronous as u32,
        )
    })
}

/// Every memset entry point ends here; asynchronous with respect to the host.
fn memset(dev_ptr: *mut c_void, value: i32, count: usize, stream: usize) -> RtResult {
    context()?;
    // SAFETY: the driver validates the device range and the stream.
    check(unsafe { cuMemsetD8Async(dev_ptr as u64, value as u8, count, stream) })
}

fn malloc_async(dev_ptr: *mut *mut c_void, size: usize, stream: usize) -> RtResult {
    context()?;
    if dev_ptr.is_null() {
        return Err(INVALID_VALUE);
    }
    let mut addr = 0u64;
    // SAFETY: valid out-parameters; the driver checks the stream.
    unsafe {
        check(cuMemAllocAsync(&mut addr, size, stream))?;
        put(dev_ptr, addr as *mut c_void)
    }
}

/// `cudaGetDriverEntryPoint*`: a symbol the driver does not resolve is no error for the runtime
/// (NVIDIA documents `cudaSuccess` with a NULL `*func`); `status` says why.
fn driver_entry_point(
    symbol: *const c_char,
    func: *mut *mut c_void,
    version: u32,
    flags: u64,
    status: *mut i32,
) -> RtResult {
    context()?;
    let version = i32::try_from(version).map_err(|_| INVALID_VALUE)?;
    // SAFETY: the caller's arguments; the driver checks symbol and func for null.
    match unsafe { cuGetProcAddress_v2(symbol, func, version, flags, status) } {
        SYMBOL_NOT_FOUND => Ok(()),
        code => check(code),
    }
}

/// The driver function registered for host function `func`.
fn function_of(func: *const c_void) -> Result<usize, u32> {
    let mut function = 0usize;
    // SAFETY: `function` is a valid out-parameter; `func` is only used as a lookup key.
    match unsafe { cuShimFunctionFromHost(func, &mut function) } {
        SUCCESS => Ok(function),
        SYMBOL_NOT_FOUND | INVALID_RESOURCE_HANDLE => Err(INVALID_DEVICE_FUNCTION),
        code => Err(code),
    }
}

fn attribute(attr: i32, device: i32) -> Result<i32, u32> {
    let mut value = 0;
    // SAFETY: `value` is a valid out-parameter.
    check(unsafe { cuDeviceGetAttribute(&mut value, attr, device) })?;
    Ok(value)
}

/// The device's properties in CUDA 12's layout, from the driver's attributes (the same values
/// `cudaDeviceGetAttribute` gives); `cudaErrorInvalidDevice` for no such device.
fn device_properties(device: i32) -> Result<DeviceProp, u32> {
    primary(device)?;
    let attribute = |attr| attribute(attr, device);
    // SAFETY: all-zero bytes are a valid DeviceProp (integers and arrays of them).
    let mut p: DeviceProp = unsafe { std::mem::zeroed() };
    // SAFETY: the name buffer holds 256 bytes; the memory size is a valid out-parameter.
    unsafe {
        check(cuDeviceGetName(
            p.name.as_mut_ptr() as *mut c_char,
            256,
            device,
        ))?;
        check(cuDeviceTotalMem_v2(&mut p.total_global_mem, device))?;
    }
    p.shared_mem_per_block = attribute(8)? as usize;
    p.regs_per_block = attribute(12)?;
    p.warp_size = attribute(10)?;
    p.mem_pitch = attribute(11)? as usize;
    p.max_threads_per_block = attribute(1)?;
    p.max_threads_dim = [attribute(2)?, attribute(3)?, attribute(4)?];
    p.max_grid_size = [attribute(5)?, attribute(6)?, attribute(7)?];
    p.clock_rate = attribute(13)?;
    p.total_const_mem = attribute(9)? as usize;
    p.major = attribute(75)?;
    p.minor = attribute(76)?;
    p.texture_alignment = attribute(14)? as usize;
    p.texture_pitch_alignment = attribute(51)? as usize;
    p.device_overlap = attribute(15)?;
    p.multi_processor_count = attribute(16)?;
    p.can_map_host_memory = attribute(19)?;
    p.surface_alignment = attribute(30)? as usize;
    p.concurrent_kernels = attribute(31)?;
    // ECCEnabled, pciBusID, pciDeviceID, pciDomainID, tccDriver.
    for (field, attr) in p.ecc_and_pci.iter_mut().zip([32, 33, 34, 50, 35]) {
        *field = attribute(attr)?;
    }
    p.kernel_exec_timeout_enabled = attribute(17)?;
    p.integrated = attribute(18)?;
    p.compute_mode = attribute(20)?;
    p.async_engine_count = attribute(40)?;
    p.unified_addressing = attribute(41)?;
    p.memory_clock_rate = attribute(36)?;
    p.memory_bus_width = attribute(37)?;
    p.l2_cache_size = attribute(38)?;
    p.max_threads_per_multi_processor = attribute(39)?;
    p.shared_mem_per_multiprocessor = attribute(81)? as usize;
    p.regs_per_multiprocessor = attribute(82)?;
    p.managed_memory = attribute(83)?;
    // isMultiGpuBoard, multiGpuBoardGroupID, hostNativeAtomicSupported,
    // singleToDoublePrecisionPerfRatio, pageableMemoryAccess, concurrentManagedAccess,
    // computePreemptionSupported, canUseHostPointerForRegisteredMem (84..=91),
    // cooperativeLaunch, cooperativeMultiDeviceLaunch.
    let launch = [84, 85, 86, 87, 88, 89, 90, 91, 95, 96];
    for (field, attr) in p.board_and_launch.iter_mut().zip(launch) {
        *field = attribute(attr)?;
    }
    p.shared_mem_per_block_optin = attribute(97)? as usize;
    p.reserved_shared_mem_per_block = attribute(111)? as usize;
    p.features[4] = attribute(115)?;
    Ok(p)
}

macro_rules! runtime_api {
    ($( $(#[$doc:meta])* fn $name:ident ( $($arg:ident : $ty:ty),* $(,)? ) $body:block )*) => {
        $(
            $(#[$doc])*
            ///
            /// # Safety
            /// Called from C with the arguments NVIDIA's prototype describes: every pointer is
            /// null (rejected where CUDA rejects it) or valid for what the documentation says.
            #[unsafe(no_mangle)]
            pub unsafe extern "C" fn $name($($arg: $ty),*) -> u32 {
                call(stringify!($name), || $body)
            }
        )*
    };
}

/// The functions only the CUDA 13 runtime exports (what torch 2.15 needs beyond CUDA 12's set).
#[cfg(feature = "cuda13")]
mod cuda13;

runtime_api! {
    /// Allocating 0 bytes succeeds with a NULL pointer, as on CUDA.
    fn cudaMalloc(dev_ptr: *mut *mut c_void, size: usize) {
        context()?;
        if dev_ptr.is_null() {
            return Err(INVALID_VALUE);
        }
        if size == 0 {
            // SAFETY: checked non-null.
            return unsafe { put(dev_ptr, std::ptr::null_mut()) };
        }
        let mut addr = 0u64;
        // SAFETY: valid out-parameters.
        unsafe {
            check(cuMemAlloc_v2(&mut addr, size))?;
            put(dev_ptr, addr as *mut c_void)
        }
    }

    fn cudaFree(dev_ptr: *mut c_void) {
        context()?;
        // SAFETY: the driver validates the address.
        check(unsafe { cuMemFree_v2(dev_ptr as u64) })
    }

    fn cudaMallocHost(ptr: *mut *mut c_void, size: usize) {
        context()?;
        // SAFETY: the driver checks the out-parameter for null.
        check(unsafe { cuMemAllocHost_v2(ptr, size) })
    }

    fn cudaHostAlloc(ptr: *mut *mut c_void, size: usize, flags: u32) {
        context()?;
        // SAFETY: the driver checks the out-parameter and the flags.
        check(unsafe { cuMemHostAlloc(ptr, size, flags) })
    }

    fn cudaHostGetDevicePointer(device: *mut *mut c_void, host: *mut c_void, flags: u32) {
        context()?;
        // SAFETY: the driver checks the out-parameter, the flags and the address.
        check(unsafe { cuMemHostGetDevicePointer_v2(device as *mut u64, host, flags) })
    }

    fn cudaFreeHost(ptr: *mut c_void) {
        context()?;
        if ptr.is_null() {
            return Ok(());
        }
        // SAFETY: the driver validates the address.
        check(unsafe { cuMemFreeHost(ptr) })
    }

    fn cudaMallocManaged(dev_ptr: *mut *mut c_void, size: usize, flags: u32) {
        context()?;
        let mut addr = 0u64;
        // SAFETY: valid out-parameters; the driver checks size and flags.
        unsafe {
            check(cuMemAllocManaged(&mut addr, size, flags))?;
            put(dev_ptr, addr as *mut c_void)
        }
    }

    fn cudaMallocAsync(dev_ptr: *mut *mut c_void, size: usize, stream: usize) {
        malloc_async(dev_ptr, size, stream)
    }

    fn cudaFreeAsync(dev_ptr: *mut c_void, stream: usize) {
        context()?;
        // SAFETY: the driver validates the address and the stream.
        check(unsafe { cuMemFreeAsync(dev_ptr as u64, stream) })
    }

    fn cudaMemcpy(dst: *mut c_void, src: *const c_void, count: usize, kind: u32) {
        memcpy(dst, src, count, kind, 0, true)
    }

    fn cudaMemcpyAsync(dst: *mut c_void, src: *const c_void, count: usize, kind: u32, stream: usize) {
        memcpy(dst, src, count, kind, stream, false)
    }

    /// Asynchronous with respect to the host, as documented for device memory.
    fn cudaMemset(dev_ptr: *mut c_void, value: i32, count: usize) {
        memset(dev_ptr, value, count, 0)
    }

    fn cudaMemsetAsync(dev_ptr: *mut c_void, value: i32, count: usize, stream: usize) {
        memset(dev_ptr, value, count, stream)
    }

    fn cudaMemGetInfo(free: *mut usize, total: *mut usize) {
        context()?;
        // SAFETY: the driver checks both out-parameters.
        check(unsafe { cuMemGetInfo_v2(free, total) })
    }

    /// Memory the runtime does not know is reported as `cudaMemoryTypeUnregistered` on
    /// `cudaInvalidDeviceId` (-2). `device` is the device the memory belongs to (for page-locked
    /// memory, the device current at its allocation); `devicePointer` is NULL for another
    /// device's memory the current device has no peer access to. CUDA 13.5's
    /// `localityDomainOrdinal` is -1 (no memory is localized to a locality domain here), as
    /// NVIDIA's runtime writes it: the low half of its union with a `long`, the rest zeroed.
    fn cudaPointerGetAttributes(attributes: *mut PointerAttributes, ptr: *const c_void) {
        context()?;
        const DEVICE_POINTER: i32 = 3;
        const MEMORY_TYPE: i32 = 2;
        const IS_MANAGED: i32 = 8;
        const DEVICE_ORDINAL: i32 = 9;
        const INVALID_DEVICE_ID: i32 = -2;
        let (mut memory_type, mut managed, mut device, mut device_pointer) = (0u32, 0u32, 0i32, 0u64);
        // SAFETY: each attribute is written with the type it documents.
        let (known, reachable) = unsafe {
            let attr = |data: *mut c_void, attribute| cuPointerGetAttribute(data, attribute, ptr as u64) == SUCCESS;
            let known = attr(&mut memory_type as *mut u32 as *mut c_void, MEMORY_TYPE)
                && attr(&mut managed as *mut u32 as *mut c_void, IS_MANAGED)
                && attr(&mut device as *mut i32 as *mut c_void, DEVICE_ORDINAL);
            let reachable = known && attr(&mut device_pointer as *mut u64 as *mut c_void, DEVICE_POINTER);
            (known, reachable)
        };
        let ptr = ptr as *mut c_void;
        let on_device = if reachable { ptr } else { std::ptr::null_mut() };
        let value = match (known, managed != 0, memory_type) {
            (false, _, _) => (0, std::ptr::null_mut(), std::ptr::null_mut()),
            (true, true, _) => (3, on_device, ptr),
            (true, false, 2) => (2, on_device, std::ptr::null_mut()),
            (true, false, _) => (1, on_device, ptr),
        };
        // SAFETY: out-parameter contract of `put`.
        unsafe {
            put(
                attributes,
                PointerAttributes {
                    memory_type: value.0,
                    device: if known { device } else { INVALID_DEVICE_ID },
                    device_pointer: value.1,
                    host_pointer: value.2,
                    #[cfg(feature = "cuda13")]
                    locality_and_reserved: [i64::from(u32::MAX), 0, 0, 0, 0, 0, 0, 0],
                },
            )
        }
    }

    fn cudaStreamCreate(stream: *mut usize) {
        context()?;
        // SAFETY: the driver checks the out-parameter.
        check(unsafe { cuStreamCreate(stream, 0) })
    }

    fn cudaStreamCreateWithFlags(stream: *mut usize, flags: u32) {
        context()?;
        // SAFETY: the driver checks the out-parameter and the flags.
        check(unsafe { cuStreamCreate(stream, flags) })
    }

    fn cudaStreamDestroy(stream: usize) {
        context()?;
        // SAFETY: the driver validates the handle.
        check(unsafe { cuStreamDestroy_v2(stream) })
    }

    fn cudaStreamSynchronize(stream: usize) {
        context()?;
        // SAFETY: the driver validates the handle.
        check(unsafe { cuStreamSynchronize(stream) })
    }

    fn cudaStreamQuery(stream: usize) {
        context()?;
        // SAFETY: the driver validates the handle.
        check(unsafe { cuStreamQuery(stream) })
    }

    fn cudaStreamWaitEvent(stream: usize, event: usize, flags: u32) {
        context()?;
        // SAFETY: the driver validates both handles and the flags.
        check(unsafe { cuStreamWaitEvent(stream, event, flags) })
    }

    fn cudaEventCreate(event: *mut usize) {
        context()?;
        // SAFETY: the driver checks the out-parameter.
        check(unsafe { cuEventCreate(event, 0) })
    }

    fn cudaEventCreateWithFlags(event: *mut usize, flags: u32) {
        context()?;
        // SAFETY: the driver checks the out-parameter and the flags.
        check(unsafe { cuEventCreate(event, flags) })
    }

    fn cudaEventRecord(event: usize, stream: usize) {
        context()?;
        // SAFETY: the driver validates both handles.
        check(unsafe { cuEventRecord(event, stream) })
    }

    fn cudaEventSynchronize(event: usize) {
        context()?;
        // SAFETY: the driver validates the handle.
        check(unsafe { cuEventSynchronize(event) })
    }

    fn cudaEventQuery(event: usize) {
        context()?;
        // SAFETY: the driver validates the handle.
        check(unsafe { cuEventQuery(event) })
    }

    fn cudaEventElapsedTime(ms: *mut f32, start: usize, end: usize) {
        context()?;
        // SAFETY: the driver validates the handles and the out-parameter.
        check(unsafe { cuEventElapsedTime(ms, start, end) })
    }

    fn cudaEventDestroy(event: usize) {
        context()?;
        // SAFETY: the driver validates the handle.
        check(unsafe { cuEventDestroy_v2(event) })
    }

    fn cudaDeviceSynchronize() {
        context()?;
        // SAFETY: no arguments.
        check(unsafe { cuCtxSynchronize() })
    }

    /// The device of the calling thread's current context.
    fn cudaGetDevice(device: *mut i32) {
        context()?;
        let current = current_device()?;
        // SAFETY: out-parameter contract of `put`.
        unsafe { put(device, current) }
    }

    /// Makes `device` the calling thread's device: its primary context becomes current.
    fn cudaSetDevice(device: i32) {
        let handle = primary(device)?;
        activate(device)?;
        let _ = DEVICE.try_with(|d| d.set(device));
        // SAFETY: the handle is one the driver returned.
        check(unsafe { cuCtxSetCurrent(handle) })
    }

    /// Records `flags` for the current device (the thread's device, initialised if need be),
    /// whether its primary context is active or not (CUDA 11 and later): a scheduling policy
    /// (at most one), `cudaDeviceMapHost` (implicit anyway), `cudaDeviceLmemResizeToMax`,
    /// `cudaDeviceSyncMemops`; anything else is `cudaErrorInvalidValue`. The device keeps them
    /// until `cudaDeviceReset`.
    fn cudaSetDeviceFlags(flags: u32) {
        const DEVICE_MASK: u32 = 0xFF;
        if flags & !DEVICE_MASK != 0 || !matches!(flags & 0x7, 0 | 1 | 2 | 4) {
            return Err(INVALID_VALUE);
        }
        context()?;
        let device = current_device()?;
        // SAFETY: plain driver call on a valid device.
        check(unsafe { cuDevicePrimaryCtxSetFlags_v2(device, flags) })
    }

    /// The flags of the current device's primary context, or the thread's device's when no
    /// context is current (nothing is initialised); the flags of a context made with
    /// `cuCtxCreate` when it is current. The driver includes `cudaDeviceMapHost`, implicit in
    /// every context.
    fn cudaGetDeviceFlags(flags: *mut u32) {
        let primaries = primaries()?;
        if flags.is_null() {
            return Err(INVALID_VALUE);
        }
        let mut current = 0usize;
        // SAFETY: `current` is a valid out-parameter.
        check(unsafe { cuCtxGetCurrent(&mut current) })?;
        let device = if current == 0 {
            DEVICE.try_with(Cell::get).unwrap_or(0)
        } else if let Some(device) = primaries.iter().position(|&h| h == current) {
            device as i32
        } else {
            // SAFETY: the driver checks the out-parameter.
            return check(unsafe { cuCtxGetFlags(flags) });
        };
        let (mut value, mut active) = (0u32, 0i32);
        // SAFETY: valid out-parameters.
        check(unsafe { cuDevicePrimaryCtxGetState(device, &mut value, &mut active) })?;
        // SAFETY: checked non-null; the caller's out-parameter.
        unsafe { put(flags, value) }
    }

    /// Destroys everything the current device's primary context holds (`cuDevicePrimaryCtxReset`:
    /// allocations but for stream-ordered ones, page-locked memory, streams, events, flags, a
    /// sticky fault; module variables are made afresh at their next use), leaving it current;
    /// the next call retains it again. With a context made by `cuCtxCreate` current, only the
    /// runtime's state for that context would go, and the shim's runtime keeps none.
    fn cudaDeviceReset() {
        context()?;
        let mut current = 0usize;
        // SAFETY: `current` is a valid out-parameter.
        check(unsafe { cuCtxGetCurrent(&mut current) })?;
        // Not cuCtxGetDevice, which returns a sticky fault: clearing one is what a reset is for.
        let Some(device) = primaries()?.iter().position(|&h| h == current) else {
            return Ok(());
        };
        let device = device as i32;
        if let Ok(mut variables) = VARIABLES.lock() {
            for variable in variables.get_or_insert_with(Default::default).values_mut() {
                variable.on_device.retain(|&(d, _)| d != device);
            }
        }
        if let Some(slot) = ACTIVE.get(device as usize) {
            slot.store(false, Ordering::Release);
        }
        // SAFETY: plain driver call on a valid device.
        check(unsafe { cuDevicePrimaryCtxReset_v2(device) })
    }

    fn cudaGetDeviceCount(count: *mut i32) {
        context()?;
        let devices = primaries()?.len() as i32;
        // SAFETY: out-parameter contract of `put`.
        unsafe { put(count, devices) }
    }

    /// CUDA 12's entry point (`cudaGetDeviceProperties` is a macro naming it).
    #[cfg(not(feature = "cuda13"))]
    fn cudaGetDeviceProperties_v2(prop: *mut DeviceProp, device: i32) {
        context()?;
        if prop.is_null() {
            return Err(INVALID_VALUE);
        }
        let p = device_properties(device)?;
        // SAFETY: checked non-null; the caller's struct has this layout.
        unsafe { put(prop, p) }
    }

    /// CUDA 13's: the function is `cudaGetDeviceProperties` again, with CUDA 13's struct.
    #[cfg(feature = "cuda13")]
    fn cudaGetDeviceProperties(prop: *mut props::DeviceProp13, device: i32) {
        context()?;
        if prop.is_null() {
            return Err(INVALID_VALUE);
        }
        let mut p = props::DeviceProp13::from_cuda12(&device_properties(device)?);
        // deviceNumaConfig, deviceNumaId, mpsEnabled, hostNumaId, gpuPciDeviceID,
        // gpuPciSubsystemID, hostNumaMultinodeIpcSupported.
        for (field, attr) in p.numa_and_pci.iter_mut().zip([130, 131, 133, 134, 139, 140, 143]) {
            *field = attribute(attr, device)?;
        }
        // SAFETY: checked non-null; the caller's struct has this layout.
        unsafe { put(prop, p) }
    }

    fn cudaDeviceGetAttribute(value: *mut i32, attr: i32, device: i32) {
        context()?;
        primary(device)?;
        // SAFETY: the driver checks the out-parameter and the attribute.
        check(unsafe { cuDeviceGetAttribute(value, attr, device) })
    }

    /// 1 between two distinct devices, 0 for a device and itself.
    fn cudaDeviceCanAccessPeer(can_access: *mut i32, device: i32, peer: i32) {
        context()?;
        primary(device)?;
        primary(peer)?;
        // SAFETY: the driver checks the out-parameter.
        check(unsafe { cuDeviceCanAccessPeer(can_access, device, peer) })
    }

    /// From the current device to `peer`'s memory: `cudaErrorInvalidDevice` for the current
    /// device itself (it cannot be its own peer), `cudaErrorPeerAccessAlreadyEnabled` twice.
    fn cudaDeviceEnablePeerAccess(peer: i32, flags: u32) {
        context()?;
        let handle = primary(peer)?;
        if peer == current_device()? {
            return Err(INVALID_DEVICE);
        }
        if flags != 0 {
            return Err(INVALID_VALUE);
        }
        // SAFETY: the handle is one the driver returned.
        check(unsafe { cuCtxEnablePeerAccess(handle, 0) })
    }

    /// `cudaErrorPeerAccessNotEnabled` unless enabled from the current device to `peer`.
    fn cudaDeviceDisablePeerAccess(peer: i32) {
        context()?;
        let handle = primary(peer)?;
        // SAFETY: the handle is one the driver returned.
        check(unsafe { cuCtxDisablePeerAccess(handle) })
    }

    fn cudaDeviceGetP2PAttribute(value: *mut i32, attr: u32, src: i32, dst: i32) {
        context()?;
        // SAFETY: the driver checks the devices, the attribute and the out-parameter.
        check(unsafe { cuDeviceGetP2PAttribute(value, attr, src, dst) })
    }

    /// Serialised with the work of the current device and of both peers (see cuMemcpyPeer).
    fn cudaMemcpyPeer(dst: *mut c_void, dst_device: i32, src: *const c_void, src_device: i32, count: usize) {
        context()?;
        let (dst_context, src_context) = (primary(dst_device)?, primary(src_device)?);
        // SAFETY: the driver validates both device ranges.
        check(unsafe { cuMemcpyPeer(dst as u64, dst_context, src as u64, src_context, count) })
    }

    fn cudaMemcpyPeerAsync(
        dst: *mut c_void,
        dst_device: i32,
        src: *const c_void,
        src_device: i32,
        count: usize,
        stream: usize,
    ) {
        context()?;
        let (dst_context, src_context) = (primary(dst_device)?, primary(src_device)?);
        // SAFETY: the driver validates both device ranges and the stream.
        check(unsafe { cuMemcpyPeerAsync(dst as u64, dst_context, src as u64, src_context, count, stream) })
    }

    fn cudaRuntimeGetVersion(version: *mut i32) {
        // SAFETY: out-parameter contract of `put`.
        unsafe { put(version, RUNTIME_VERSION) }
    }

    /// Profile collection by the attached profiling tool: the shim has none, so (as on a GPU
    /// without one) there is nothing to start or stop; the runtime is initialised as by any call.
    fn cudaProfilerStart() {
        context()
    }

    fn cudaProfilerStop() {
        context()
    }

    fn cudaDriverGetVersion(version: *mut i32) {
        // SAFETY: the driver checks the out-parameter.
        check(unsafe { cuDriverGetVersion(version) })
    }

    fn cudaLaunchKernel(
        func: *const c_void,
        grid: Dim3,
        block: Dim3,
        args: *mut *mut c_void,
        shared_mem: usize,
        stream: usize,
    ) {
        launch(func, grid, block, args, shared_mem, stream)
    }

    fn cudaLaunchKernel_ptsz(
        func: *const c_void,
        grid: Dim3,
        block: Dim3,
        args: *mut *mut c_void,
        shared_mem: usize,
        stream: usize,
    ) {
        launch(func, grid, block, args, shared_mem, per_thread(stream))
    }

    /// Launch attributes are not modelled: they are accepted and ignored.
    fn cudaLaunchKernelExC(config: *const LaunchConfig, func: *const c_void, args: *mut *mut c_void) {
        // SAFETY: `config` is null (rejected) or points to a launch configuration.
        let config = unsafe { config.as_ref() }.ok_or(INVALID_VALUE)?;
        launch(func, config.grid_dim, config.block_dim, args, config.dynamic_smem_bytes, config.stream)
    }

    fn cudaLaunchKernelExC_ptsz(config: *const LaunchConfig, func: *const c_void, args: *mut *mut c_void) {
        // SAFETY: as for cudaLaunchKernelExC.
        let config = unsafe { config.as_ref() }.ok_or(INVALID_VALUE)?;
        let stream = per_thread(config.stream);
        launch(func, config.grid_dim, config.block_dim, args, config.dynamic_smem_bytes, stream)
    }

    fn cudaMemcpy_ptds(dst: *mut c_void, src: *const c_void, count: usize, kind: u32) {
        memcpy(dst, src, count, kind, PER_THREAD_STREAM, true)
    }

    fn cudaMemcpyAsync_ptsz(dst: *mut c_void, src: *const c_void, count: usize, kind: u32, stream: usize) {
        memcpy(dst, src, count, kind, per_thread(stream), false)
    }

    fn cudaMemset_ptds(dev_ptr: *mut c_void, value: i32, count: usize) {
        memset(dev_ptr, value, count, PER_THREAD_STREAM)
    }

    fn cudaMemsetAsync_ptsz(dev_ptr: *mut c_void, value: i32, count: usize, stream: usize) {
        memset(dev_ptr, value, count, per_thread(stream))
    }

    fn cudaMallocAsync_ptsz(dev_ptr: *mut *mut c_void, size: usize, stream: usize) {
        malloc_async(dev_ptr, size, per_thread(stream))
    }

    fn cudaFreeAsync_ptsz(dev_ptr: *mut c_void, stream: usize) {
        context()?;
        // SAFETY: the driver validates the address and the stream.
        check(unsafe { cuMemFreeAsync(dev_ptr as u64, per_thread(stream)) })
    }

    fn cudaStreamSynchronize_ptsz(stream: usize) {
        context()?;
        // SAFETY: the driver validates the handle.
        check(unsafe { cuStreamSynchronize(per_thread(stream)) })
    }

    fn cudaStreamQuery_ptsz(stream: usize) {
        context()?;
        // SAFETY: the driver validates the handle.
        check(unsafe { cuStreamQuery(per_thread(stream)) })
    }

    fn cudaStreamWaitEvent_ptsz(stream: usize, event: usize, flags: u32) {
        context()?;
        // SAFETY: the driver validates both handles and the flags.
        check(unsafe { cuStreamWaitEvent(per_thread(stream), event, flags) })
    }

    fn cudaEventRecord_ptsz(event: usize, stream: usize) {
        context()?;
        // SAFETY: the driver validates both handles.
        check(unsafe { cuEventRecord(event, per_thread(stream)) })
    }

    /// The driver's `cuGetProcAddress_v2` at this runtime's version (12090, or 13050 in
    /// `libcudart.so.13`, whose programs get CUDA 13's variants such as `cuCtxSynchronize_v2`).
    fn cudaGetDriverEntryPoint(symbol: *const c_char, func: *mut *mut c_void, flags: u64, status: *mut i32) {
        driver_entry_point(symbol, func, RUNTIME_VERSION as u32, flags, status)
    }

    fn cudaGetDriverEntryPointByVersion(
        symbol: *const c_char,
        func: *mut *mut c_void,
        version: u32,
        flags: u64,
        status: *mut i32,
    ) {
        driver_entry_point(symbol, func, version, flags, status)
    }

    fn cudaGetFuncBySymbol(function: *mut usize, symbol: *const c_void) {
        context()?;
        let found = function_of(symbol)?;
        // SAFETY: out-parameter contract of `put`.
        unsafe { put(function, found) }
    }

    fn cudaFuncGetAttributes(attributes: *mut FuncAttributes, func: *const c_void) {
        context()?;
        let function = function_of(func)?;
        let device = current_device()?;
        let attribute = |attr| attribute(attr, device);
        let function_attribute = |attr| {
            let mut value = 0;
            // SAFETY: `value` is a valid out-parameter.
            check(unsafe { cuFuncGetAttribute(&mut value, attr, function) }).map(|()| value)
        };
        let mut rest = [0; 23];
        rest[0] = function_attribute(9)?; // preferredShmemCarveout
        let value = FuncAttributes {
            shared_size_bytes: 0,
            const_size_bytes: 0,
            local_size_bytes: 0,
            max_threads_per_block: attribute(1)?,
            num_regs: 32,
            ptx_version: 80,
            binary_version: 80,
            cache_mode_ca: 0,
            max_dynamic_shared_size_bytes: function_attribute(8)?,
            rest,
        };
        // SAFETY: out-parameter contract of `put`.
        unsafe { put(attributes, value) }
    }

    fn __cudaPopCallConfiguration(grid: *mut Dim3, block: *mut Dim3, shared_mem: *mut usize, stream: *mut usize) {
        let (g, b, s, st) = CALL_CONFIGURATIONS
            .with(|stack| stack.borrow_mut().pop())
            .ok_or(MISSING_CONFIGURATION)?;
        // SAFETY: nvcc-generated stubs pass the addresses of their locals.
        unsafe {
            put(grid, g)?;
            put(block, b)?;
            put(shared_mem, s)?;
            put(stream, st)
        }
    }

    fn cudaFuncSetAttribute(func: *const c_void, attr: u32, value: i32) {
        context()?;
        let function = function_of(func)?;
        if !(8..=15).contains(&attr) {
            return Err(INVALID_VALUE);
        }
        // SAFETY: the driver validates the attribute and the value.
        check(unsafe { cuFuncSetAttribute(function, attr, value) })
    }

    fn cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
        blocks: *mut i32,
        func: *const c_void,
        block_size: i32,
        dynamic_smem: usize,
        flags: u32,
    ) {
        context()?;
        let function = function_of(func)?;
        // SAFETY: the driver checks the out-parameter, the block size and the flags.
        check(unsafe {
            cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(blocks, function, block_size, dynamic_smem, flags)
        })
    }

    fn cudaDeviceGetPCIBusId(bus_id: *mut c_char, len: i32, device: i32) {
        context()?;
        primary(device)?;
        // SAFETY: the driver checks the buffer and writes at most `len` bytes.
        check(unsafe { cuDeviceGetPCIBusId(bus_id, len, device) })
    }

    /// [least, greatest] = [0, -5]; either pointer may be NULL.
    fn cudaDeviceGetStreamPriorityRange(least: *mut i32, greatest: *mut i32) {
        context()?;
        // SAFETY: the driver skips NULL pointers.
        check(unsafe { cuCtxGetStreamPriorityRange(least, greatest) })
    }

    fn cudaStreamCreateWithPriority(stream: *mut usize, flags: u32, priority: i32) {
        context()?;
        // SAFETY: the driver checks the out-parameter and the flags, and clamps the priority.
        check(unsafe { cuStreamCreateWithPriority(stream, flags, priority) })
    }

    fn cudaStreamGetPriority(stream: usize, priority: *mut i32) {
        context()?;
        // SAFETY: the driver validates the handle and the out-parameter.
        check(unsafe { cuStreamGetPriority(stream, priority) })
    }

    fn cudaStreamGetFlags(stream: usize, flags: *mut u32) {
        context()?;
        // SAFETY: the driver validates the handle and the out-parameter.
        check(unsafe { cuStreamGetFlags(stream, flags) })
    }

    fn cudaEventRecordWithFlags(event: usize, stream: usize, flags: u32) {
        context()?;
        // SAFETY: the driver validates the handles and the flags.
        check(unsafe { cuEventRecordWithFlags(event, stream, flags) })
    }

    /// Runs `fn(userData)` on the stream's thread in stream order.
    fn cudaLaunchHostFunc(stream: usize, func: HostFn, data: *mut c_void) {
        context()?;
        // SAFETY: the driver validates the stream and the function pointer.
        check(unsafe { cuLaunchHostFunc(stream, func, data) })
    }

    fn cudaStreamAddCallback(stream: usize, callback: StreamCallback, data: *mut c_void, flags: u32) {
        context()?;
        // SAFETY: the driver validates the stream, the function pointer and the flags.
        check(unsafe { cuStreamAddCallback(stream, callback, data, flags) })
    }

    /// The driver's capture (cuda-shim's `graph` module): the legacy stream cannot capture
    /// (`cudaErrorStreamCaptureUnsupported`), a capturing stream cannot begin again
    /// (`cudaErrorIllegalState`).
    fn cudaStreamBeginCapture(stream: usize, mode: u32) {
        context()?;
        // SAFETY: the driver validates the handle and the mode.
        check(unsafe { cuStreamBeginCapture_v2(stream, mode) })
    }

    fn cudaStreamEndCapture(stream: usize, graph: *mut usize) {
        context()?;
        // SAFETY: the driver validates the handle and the out-parameter.
        check(unsafe { cuStreamEndCapture(stream, graph) })
    }

    fn cudaStreamIsCapturing(stream: usize, status: *mut u32) {
        context()?;
        // SAFETY: the driver validates the handle and the out-parameter.
        check(unsafe { cuStreamIsCapturing(stream, status) })
    }

    /// The status and, during a capture, its id, graph and the stream's current dependencies
    /// (outputs may be NULL).
    #[cfg(not(feature = "cuda13"))]
    fn cudaStreamGetCaptureInfo_v2(
        stream: usize,
        status: *mut u32,
        id: *mut u64,
        graph: *mut usize,
        dependencies: *mut *const usize,
        count: *mut usize,
    ) {
        context()?;
        // SAFETY: the driver validates the handle; each output is NULL or the caller's.
        check(unsafe { cuStreamGetCaptureInfo_v2(stream, status, id, graph, dependencies, count) })
    }

    /// CUDA 12.3's, with edge data (always NULL on the shim).
    #[cfg(not(feature = "cuda13"))]
    fn cudaStreamGetCaptureInfo_v3(
        stream: usize,
        status: *mut u32,
        id: *mut u64,
        graph: *mut usize,
        dependencies: *mut *const usize,
        edge_data: *mut *const c_void,
        count: *mut usize,
    ) {
        context()?;
        // SAFETY: the driver validates the handle; each output is NULL or the caller's.
        check(unsafe {
            cuStreamGetCaptureInfo_v3(stream, status, id, graph, dependencies, edge_data, count)
        })
    }

    /// CUDA 13's (CUDA 12's `_v3`, with edge data, always NULL on the shim).
    #[cfg(feature = "cuda13")]
    fn cudaStreamGetCaptureInfo(
        stream: usize,
        status: *mut u32,
        id: *mut u64,
        graph: *mut usize,
        dependencies: *mut *const usize,
        edge_data: *mut *const c_void,
        count: *mut usize,
    ) {
        context()?;
        // SAFETY: the driver validates the handle; each output is NULL or the caller's.
        check(unsafe {
            cuStreamGetCaptureInfo_v3(stream, status, id, graph, dependencies, edge_data, count)
        })
    }

    /// The capturing stream's next work follows `dependencies` too (flags 0) or instead of its
    /// current ones (1); `cudaErrorIllegalState` on a stream not capturing.
    #[cfg(not(feature = "cuda13"))]
    fn cudaStreamUpdateCaptureDependencies(stream: usize, dependencies: *mut usize, count: usize, flags: u32) {
        context()?;
        // SAFETY: the driver validates the handle, the array and the flags.
        check(unsafe {
            cuStreamUpdateCaptureDependencies_v2(stream, dependencies, std::ptr::null(), count, flags)
        })
    }

    /// Swaps the calling thread's capture mode (global, thread-local or relaxed), which the
    /// driver keeps: it decides which calls a capture prohibits.
    fn cudaThreadExchangeStreamCaptureMode(mode: *mut u32) {
        // SAFETY: the driver validates the in/out parameter.
        check(unsafe { cuThreadExchangeStreamCaptureMode(mode) })
    }

    /// CUDA 12's `cudaGraphInstantiate` takes flags, as `cudaGraphInstantiateWithFlags`.
    fn cudaGraphInstantiate(exec: *mut usize, graph: usize, flags: u64) {
        context()?;
        // SAFETY: the driver validates the handle, the flags and the out-parameter.
        check(unsafe { cuGraphInstantiateWithFlags(exec, graph, flags) })
    }

    fn cudaGraphInstantiateWithFlags(exec: *mut usize, graph: usize, flags: u64) {
        context()?;
        // SAFETY: the driver validates the handle, the flags and the out-parameter.
        check(unsafe { cuGraphInstantiateWithFlags(exec, graph, flags) })
    }

    /// `cudaGraphInstantiateParams` has the driver's layout.
    fn cudaGraphInstantiateWithParams(exec: *mut usize, graph: usize, params: *mut c_void) {
        context()?;
        // SAFETY: the driver validates the handle, the parameters and the out-parameter.
        check(unsafe { cuGraphInstantiateWithParams(exec, graph, params) })
    }

    /// `cudaGraphExecUpdateResultInfo` has the driver's layout; a failed update is
    /// `cudaErrorGraphExecUpdateFailure`.
    fn cudaGraphExecUpdate(exec: usize, graph: usize, info: *mut c_void) {
        context()?;
        // SAFETY: the driver validates the handles and the out-parameter.
        check(unsafe { cuGraphExecUpdate_v2(exec, graph, info) })
    }

    fn cudaGraphUpload(exec: usize, stream: usize) {
        context()?;
        // SAFETY: the driver validates both handles.
        check(unsafe { cuGraphUpload(exec, stream) })
    }

    fn cudaGraphLaunch(exec: usize, stream: usize) {
        context()?;
        // SAFETY: the driver validates both handles.
        check(unsafe { cuGraphLaunch(exec, stream) })
    }

    fn cudaGraphCreate(graph: *mut usize, flags: u32) {
        context()?;
        // SAFETY: the driver validates the flags and the out-parameter.
        check(unsafe { cuGraphCreate(graph, flags) })
    }

    /// A kernel node launching the kernel of host stub `func` (checked as `cudaLaunchKernel`
    /// checks its configuration); its arguments are copied now.
    fn cudaGraphAddKernelNode(
        node: *mut usize,
        graph: usize,
        dependencies: *const usize,
        count: usize,
        params: *const KernelNode,
    ) {
        let params = kernel_node_params(params)?;
        // SAFETY: the driver validates the handles; `params` is a valid parameter block.
        check(unsafe { cuGraphAddKernelNode_v2(node, graph, dependencies, count, &params) })
    }

    fn cudaGraphExecKernelNodeSetParams(exec: usize, node: usize, params: *const KernelNode) {
        let params = kernel_node_params(params)?;
        // SAFETY: the driver validates the handles; `params` is a valid parameter block.
        check(unsafe { cuGraphExecKernelNodeSetParams_v2(exec, node, &params) })
    }

    /// A memset node on the current device.
    fn cudaGraphAddMemsetNode(
        node: *mut usize,
        graph: usize,
        dependencies: *const usize,
        count: usize,
        params: *const MemsetParams,
    ) {
        context()?;
        // SAFETY: the driver validates the handles and the parameters (same layout).
        check(unsafe { cuGraphAddMemsetNode(node, graph, dependencies, count, params, 0) })
    }

    /// A memcpy node of `count` bytes on the current device, checked as `cudaMemcpyAsync`; it
    /// reads its source when it runs.
    #[allow(clippy::too_many_arguments)]
    fn cudaGraphAddMemcpyNode1D(
        node: *mut usize,
        graph: usize,
        dependencies: *const usize,
        num_dependencies: usize,
        dst: *mut c_void,
        src: *const c_void,
        count: usize,
        kind: u32,
    ) {
        context()?;
        let (src_type, dst_type) = memory_types(kind)?;
        let copy = Memcpy3d {
            src_x: 0,
            src_y: 0,
            src_z: 0,
            src_lod: 0,
            src_memory_type: src_type,
            src_host: src,
            src_device: src as u64,
            src_array: 0,
            reserved0: std::ptr::null_mut(),
            src_pitch: count,
            src_height: 1,
            dst_x: 0,
            dst_y: 0,
            dst_z: 0,
            dst_lod: 0,
            dst_memory_type: dst_type,
            dst_host: dst,
            dst_device: dst as u64,
            dst_array: 0,
            reserved1: std::ptr::null_mut(),
            dst_pitch: count,
            dst_height: 1,
            width: count,
            height: 1,
            depth: 1,
        };
        // SAFETY: `copy` is a complete CUDA_MEMCPY3D; the driver validates the rest.
        check(unsafe { cuGraphAddMemcpyNode(node, graph, dependencies, num_dependencies, &copy, 0) })
    }

    fn cudaGraphAddHostNode(
        node: *mut usize,
        graph: usize,
        dependencies: *const usize,
        count: usize,
        params: *const HostNodeParams,
    ) {
        context()?;
        // SAFETY: the driver validates the handles and the parameters (same layout).
        check(unsafe { cuGraphAddHostNode(node, graph, dependencies, count, params) })
    }

    fn cudaGraphAddEmptyNode(node: *mut usize, graph: usize, dependencies: *const usize, count: usize) {
        context()?;
        // SAFETY: the driver validates the handles.
        check(unsafe { cuGraphAddEmptyNode(node, graph, dependencies, count) })
    }

    fn cudaGraphAddEventRecordNode(
        node: *mut usize,
        graph: usize,
        dependencies: *const usize,
        count: usize,
        event: usize,
    ) {
        context()?;
        // SAFETY: the driver validates the handles.
        check(unsafe { cuGraphAddEventRecordNode(node, graph, dependencies, count, event) })
    }

    fn cudaGraphAddEventWaitNode(
        node: *mut usize,
        graph: usize,
        dependencies: *const usize,
        count: usize,
        event: usize,
    ) {
        context()?;
        // SAFETY: the driver validates the handles.
        check(unsafe { cuGraphAddEventWaitNode(node, graph, dependencies, count, event) })
    }

    fn cudaGraphAddChildGraphNode(
        node: *mut usize,
        graph: usize,
        dependencies: *const usize,
        count: usize,
        child: usize,
    ) {
        context()?;
        // SAFETY: the driver validates the handles.
        check(unsafe { cuGraphAddChildGraphNode(node, graph, dependencies, count, child) })
    }

    /// An alloc node (`cudaMemAllocNodeParams` is the driver's `CUDA_MEM_ALLOC_NODE_PARAMS`);
    /// the allocation's address, fixed from now on, in `dptr`.
    fn cudaGraphAddMemAllocNode(
        node: *mut usize,
        graph: usize,
        dependencies: *const usize,
        count: usize,
        params: *mut c_void,
    ) {
        context()?;
        // SAFETY: the driver validates the handles and the parameters.
        check(unsafe { cuGraphAddMemAllocNode(node, graph, dependencies, count, params) })
    }

    fn cudaGraphMemAllocNodeGetParams(node: usize, params: *mut c_void) {
        context()?;
        // SAFETY: the driver validates the handle and the out-parameter.
        check(unsafe { cuGraphMemAllocNodeGetParams(node, params) })
    }

    fn cudaGraphAddMemFreeNode(
        node: *mut usize,
        graph: usize,
        dependencies: *const usize,
        count: usize,
        dptr: *mut c_void,
    ) {
        context()?;
        // SAFETY: the driver validates the handles and the address.
        check(unsafe { cuGraphAddMemFreeNode(node, graph, dependencies, count, dptr as u64) })
    }

    /// `dptr_out` is a `void **` (NVIDIA declares it `void *`).
    fn cudaGraphMemFreeNodeGetParams(node: usize, dptr: *mut c_void) {
        context()?;
        // SAFETY: the driver validates the handle and the out-parameter (one 64-bit word).
        check(unsafe { cuGraphMemFreeNodeGetParams(node, dptr.cast::<u64>()) })
    }

    fn cudaDeviceGraphMemTrim(device: i32) {
        context()?;
        primary(device)?;
        // SAFETY: a valid device ordinal.
        check(unsafe { cuDeviceGraphMemTrim(device) })
    }

    /// Graph memory in use and reserved, current and high-water (the driver's answer).
    fn cudaDeviceGetGraphMemAttribute(device: i32, attr: u32, value: *mut c_void) {
        context()?;
        primary(device)?;
        // SAFETY: the driver validates the attribute and the out-parameter.
        check(unsafe { cuDeviceGetGraphMemAttribute(device, attr, value) })
    }

    /// Only the high-water marks can be reset, and only to 0.
    fn cudaDeviceSetGraphMemAttribute(device: i32, attr: u32, value: *mut c_void) {
        context()?;
        primary(device)?;
        // SAFETY: the driver validates the attribute and the value.
        check(unsafe { cuDeviceSetGraphMemAttribute(device, attr, value) })
    }

    #[cfg(not(feature = "cuda13"))]
    fn cudaGraphAddDependencies(graph: usize, from: *const usize, to: *const usize, count: usize) {
        context()?;
        // SAFETY: the driver validates the handles and the arrays.
        check(unsafe { cuGraphAddDependencies_v2(graph, from, to, std::ptr::null(), count) })
    }

    /// CUDA 13's, with edge data (only default edges are supported).
    #[cfg(feature = "cuda13")]
    fn cudaGraphAddDependencies(
        graph: usize,
        from: *const usize,
        to: *const usize,
        edge_data: *const c_void,
        count: usize,
    ) {
        context()?;
        // SAFETY: the driver validates the handles and the arrays.
        check(unsafe { cuGraphAddDependencies_v2(graph, from, to, edge_data, count) })
    }

    fn cudaGraphExecDestroy(exec: usize) {
        context()?;
        // SAFETY: the driver validates the handle.
        check(unsafe { cuGraphExecDestroy(exec) })
    }

    fn cudaGraphDestroy(graph: usize) {
        context()?;
        // SAFETY: the driver validates the handle.
        check(unsafe { cuGraphDestroy(graph) })
    }

    fn cudaGraphGetNodes(graph: usize, nodes: *mut usize, count: *mut usize) {
        context()?;
        // SAFETY: the driver validates the handle; `nodes` holds `*count` handles or is NULL.
        check(unsafe { cuGraphGetNodes(graph, nodes, count) })
    }

    #[cfg(not(feature = "cuda13"))]
    fn cudaGraphNodeGetDependencies(node: usize, _dependencies: *mut usize, _count: *mut usize) {
        no_graph(node)
    }

    /// CUDA 13's, with edge data (CUDA 12's `_v2`).
    #[cfg(feature = "cuda13")]
    fn cudaGraphNodeGetDependencies(
        node: usize,
        _dependencies: *mut usize,
        _edge_data: *mut c_void,
        _count: *mut usize,
    ) {
        no_graph(node)
    }

    fn cudaGraphDebugDotPrint(graph: usize, path: *const c_char, flags: u32) {
        context()?;
        // SAFETY: the driver validates the handle and the path.
        check(unsafe { cuGraphDebugDotPrint(graph, path, flags) })
    }

    /// Page-locks ordinary host memory: afterwards copies treat it as page-locked and it is
    /// mapped at its own address (`cudaHostGetDevicePointer`, pointer attributes).
    fn cudaHostRegister(ptr: *mut c_void, size: usize, flags: u32) {
        context()?;
        // SAFETY: the driver checks the range and the flags; it never touches the memory.
        check(unsafe { cuMemHostRegister_v2(ptr, size, flags) })
    }

    fn cudaHostUnregister(ptr: *mut c_void) {
        context()?;
        // SAFETY: the driver validates the address.
        check(unsafe { cuMemHostUnregister(ptr) })
    }

    /// Rows padded to 512 bytes (the texture alignment), as `cuMemAllocPitch`.
    fn cudaMallocPitch(dev_ptr: *mut *mut c_void, pitch: *mut usize, width: usize, height: usize) {
        context()?;
        if dev_ptr.is_null() || pitch.is_null() {
            return Err(INVALID_VALUE);
        }
        let (mut addr, mut row) = (0u64, 0usize);
        // SAFETY: valid out-parameters.
        unsafe {
            check(cuMemAllocPitch_v2(&mut addr, &mut row, width, height, 16))?;
            put(pitch, row)?;
            put(dev_ptr, addr as *mut c_void)
        }
    }

    fn cudaMemcpy2D(dst: *mut c_void, dpitch: usize, src: *const c_void, spitch: usize, width: usize, height: usize, kind: u32) {
        memcpy_2d([dst, src as *mut c_void], [dpitch, spitch], width, height, kind, None)
    }

    fn cudaMemcpy2DAsync(
        dst: *mut c_void,
        dpitch: usize,
        src: *const c_void,
        spitch: usize,
        width: usize,
        height: usize,
        kind: u32,
        stream: usize,
    ) {
        memcpy_2d([dst, src as *mut c_void], [dpitch, spitch], width, height, kind, Some(stream))
    }

    /// Asynchronous with respect to the host, as `cudaMemset`.
    fn cudaMemset2D(dev_ptr: *mut c_void, pitch: usize, value: i32, width: usize, height: usize) {
        context()?;
        // SAFETY: the driver validates every row.
        check(unsafe { cuMemsetD2D8Async(dev_ptr as u64, pitch, value as u8, width, height, 0) })
    }

    /// The device address of a `__device__` variable (`__cudaRegisterVar`) on the current
    /// device; `cudaErrorInvalidSymbol` for anything else.
    fn cudaGetSymbolAddress(dev_ptr: *mut *mut c_void, symbol: *const c_void) {
        context()?;
        if dev_ptr.is_null() {
            return Err(INVALID_VALUE);
        }
        let (addr, _) = symbol_address(symbol)?;
        // SAFETY: checked non-null.
        unsafe { put(dev_ptr, addr as *mut c_void) }
    }

    /// Host-to-device or device-to-device (or default) into a `__device__` variable; synchronous
    /// as `cudaMemcpy`.
    fn cudaMemcpyToSymbol(symbol: *const c_void, src: *const c_void, count: usize, offset: usize, kind: u32) {
        context()?;
        let (addr, size) = symbol_address(symbol)?;
        if offset.checked_add(count).is_none_or(|end| end > size) {
            return Err(INVALID_VALUE);
        }
        if !matches!(kind, 1 | 3 | 4) {
            return Err(INVALID_MEMCPY_DIRECTION);
        }
        memcpy((addr + offset as u64) as *mut c_void, src, count, kind, 0, true)
    }

    /// Device-to-host or device-to-device (or default) from a `__device__` variable; synchronous
    /// as `cudaMemcpy`.
    fn cudaMemcpyFromSymbol(dst: *mut c_void, symbol: *const c_void, count: usize, offset: usize, kind: u32) {
        context()?;
        let (addr, size) = symbol_address(symbol)?;
        if offset.checked_add(count).is_none_or(|end| end > size) {
            return Err(INVALID_VALUE);
        }
        if !matches!(kind, 2..=4) {
            return Err(INVALID_MEMCPY_DIRECTION);
        }
        memcpy(dst, (addr + offset as u64) as *const c_void, count, kind, 0, true)
    }

    fn cudaDeviceGetDefaultMemPool(pool: *mut usize, device: i32) {
        context()?;
        primary(device)?;
        // SAFETY: the driver checks the out-parameter.
        check(unsafe { cuDeviceGetDefaultMemPool(pool, device) })
    }

    fn cudaMallocFromPoolAsync(ptr: *mut *mut c_void, size: usize, pool: usize, stream: usize) {
        context()?;
        // SAFETY: the driver checks the out-parameter, the pool and the stream.
        check(unsafe { cuMemAllocFromPoolAsync(ptr as *mut u64, size, pool, stream) })
    }

    fn cudaMemPoolGetAttribute(pool: usize, attr: u32, value: *mut c_void) {
        context()?;
        // SAFETY: the driver checks the pool, the attribute and the out-parameter.
        check(unsafe { cuMemPoolGetAttribute(pool, attr, value) })
    }

    fn cudaMemPoolSetAttribute(pool: usize, attr: u32, value: *mut c_void) {
        context()?;
        // SAFETY: the driver checks the pool, the attribute and the value pointer.
        check(unsafe { cuMemPoolSetAttribute(pool, attr, value) })
    }

    /// `struct cudaMemAccessDesc` has the layout of `CUmemAccessDesc`.
    fn cudaMemPoolSetAccess(pool: usize, descs: *const c_void, count: usize) {
        context()?;
        // SAFETY: the driver reads `count` descriptors of the caller's.
        check(unsafe { cuMemPoolSetAccess(pool, descs, count) })
    }

    fn cudaMemPoolTrimTo(pool: usize, min_bytes_to_keep: usize) {
        context()?;
        // SAFETY: the driver checks the pool.
        check(unsafe { cuMemPoolTrimTo(pool, min_bytes_to_keep) })
    }

    fn cudaIpcGetMemHandle(handle: *mut IpcHandle, dev_ptr: *mut c_void) {
        context()?;
        // SAFETY: the driver checks the out-parameter and the address.
        check(unsafe { cuIpcGetMemHandle(handle, dev_ptr as u64) })
    }

    /// A handle of this process is `cudaErrorDeviceUninitialized` (CUDA's invalid context), as
    /// on CUDA; another process's is `cudaErrorNotSupported` (device memory is per process on
    /// the shim).
    fn cudaIpcOpenMemHandle(dev_ptr: *mut *mut c_void, handle: IpcHandle, flags: u32) {
        context()?;
        // SAFETY: the driver checks the out-parameter, the handle and the flags.
        check(unsafe { cuIpcOpenMemHandle_v2(dev_ptr as *mut u64, handle, flags) })
    }

    fn cudaIpcCloseMemHandle(dev_ptr: *mut c_void) {
        context()?;
        // SAFETY: the driver validates the address.
        check(unsafe { cuIpcCloseMemHandle(dev_ptr as u64) })
    }

    fn cudaIpcGetEventHandle(handle: *mut IpcHandle, event: usize) {
        context()?;
        // SAFETY: the driver checks the out-parameter and the event.
        check(unsafe { cuIpcGetEventHandle(handle, event) })
    }

    fn cudaIpcOpenEventHandle(event: *mut usize, handle: IpcHandle) {
        context()?;
        // SAFETY: the driver checks the out-parameter and the handle.
        check(unsafe { cuIpcOpenEventHandle(event, handle) })
    }

    /// Shim-only: see cuda_shim.h.
    fn cudaShimRegisterKernel(
        func: *const c_void,
        name: *const c_char,
        nparams: i32,
        sizes: *const usize,
        simulated_ns: u64,
    ) {
        // SAFETY: the driver validates every argument.
        check(unsafe { cuShimRegisterKernel(func, name, nparams, sizes, simulated_ns) })
    }

    /// Shim-only: see cuda_shim.h.
    fn cudaShimGetStats(stats: *mut Stats) {
        // SAFETY: the driver checks the out-parameter.
        check(unsafe { cuShimGetStats(stats) })
    }
}

/// Returns and clears the calling thread's last error; a sticky device fault is returned every
/// time (the context stays unusable).
#[unsafe(no_mangle)]
pub extern "C" fn cudaGetLastError() -> u32 {
    // SAFETY: no arguments.
    let sticky = unsafe { cuShimGetStickyError() };
    let last = LAST_ERROR
        .try_with(|last| last.replace(SUCCESS))
        .unwrap_or(SUCCESS);
    if sticky != SUCCESS { sticky } else { last }
}

/// Returns the calling thread's last error without clearing it.
#[unsafe(no_mangle)]
pub extern "C" fn cudaPeekAtLastError() -> u32 {
    // SAFETY: no arguments.
    let sticky = unsafe { cuShimGetStickyError() };
    let last = LAST_ERROR.try_with(|last| last.get()).unwrap_or(SUCCESS);
    if sticky != SUCCESS { sticky } else { last }
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaGetErrorName(error: u32) -> *const c_char {
    errors::name(error)
        .unwrap_or(errors::UNRECOGNIZED)
        .as_ptr()
        .cast()
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaGetErrorString(error: u32) -> *const c_char {
    errors::description(error)
        .unwrap_or(errors::UNRECOGNIZED)
        .as_ptr()
        .cast()
}

/// Shim-only: see cuda_shim.h.
#[unsafe(no_mangle)]
pub extern "C" fn cudaShimRaiseDeviceError(error: u32) {
    // SAFETY: the driver validates the code and the calling thread.
    unsafe { cuShimRaiseDeviceError(error) };
}

/// The driver's kernel node parameters for a runtime's (`struct cudaKernelNodeParams`): the
/// host stub's function, with the configuration checked as `cudaLaunchKernel` checks it.
fn kernel_node_params(params: *const KernelNode) -> Result<KernelNodeParams, u32> {
    context()?;
    // SAFETY: null (rejected) or the caller's parameters.
    let p = unsafe { params.as_ref() }.ok_or(INVALID_VALUE)?;
    if !launch_configuration_valid(p.grid, p.block) {
        return Err(INVALID_CONFIGURATION);
    }
    Ok(KernelNodeParams {
        function: function_of(p.func)?,
        grid: [p.grid.x, p.grid.y, p.grid.z],
        block: [p.block.x, p.block.y, p.block.z],
        shared_mem: p.shared_mem,
        params: p.params,
        extra: p.extra,
        kernel: 0,
        context: 0,
    })
}

/// The flags of a stream (validating its handle).
#[cfg(feature = "cuda13")]
fn stream_flags(stream: usize) -> Result<u32, u32> {
    let mut flags = 0;
    // SAFETY: `flags` is a valid out-parameter; the driver validates the handle.
    check(unsafe { cuStreamGetFlags(stream, &mut flags) })?;
    Ok(flags)
}

/// What the graph calls the shim does not implement answer (node queries, the generic node
/// API): `cudaErrorInvalidValue`, as for a handle CUDA does not know.
fn no_graph(_handle: usize) -> RtResult {
    context()?;
    Err(INVALID_VALUE)
}

/// The `CUmemorytype`s a `cudaMemcpyKind` declares for the source and the destination
/// (unified for `cudaMemcpyDefault`, whose direction the driver infers).
fn memory_types(kind: u32) -> Result<(u32, u32), u32> {
    const HOST: u32 = 1;
    const DEVICE: u32 = 2;
    const UNIFIED: u32 = 4;
    Ok(match kind {
        0 => (HOST, HOST),
        1 => (HOST, DEVICE),
        2 => (DEVICE, HOST),
        3 => (DEVICE, DEVICE),
        4 => (UNIFIED, UNIFIED),
        _ => return Err(INVALID_MEMCPY_DIRECTION),
    })
}

/// Every 2D copy ends here (`stream` None: cudaMemcpy2D's host-side wait). Sides are declared
/// to the driver as the kind says (unified for `cudaMemcpyDefault`).
fn memcpy_2d(
    [dst, src]: [*mut c_void; 2],
    [dpitch, spitch]: [usize; 2],
    width: usize,
    height: usize,
    kind: u32,
    stream: Option<usize>,
) -> RtResult {
    context()?;
    let (src_type, dst_type) = memory_types(kind)?;
    if width == 0 || height == 0 {
        return Ok(());
    }
    if dpitch < width || spitch < width || dpitch.max(spitch) > i32::MAX as usize {
        return Err(INVALID_PITCH_VALUE);
    }
    let copy = Memcpy2d {
        src_x: 0,
        src_y: 0,
        src_memory_type: src_type,
        src_host: src,
        src_device: src as u64,
        src_array: 0,
        src_pitch: spitch,
        dst_x: 0,
        dst_y: 0,
        dst_memory_type: dst_type,
        dst_host: dst,
        dst_device: dst as u64,
        dst_array: 0,
        dst_pitch: dpitch,
        width,
        height,
    };
    // SAFETY: `copy` is a complete CUDA_MEMCPY2D; the driver validates device rows, host rows
    // are the caller's contract.
    check(unsafe {
        match stream {
            None => cuMemcpy2D_v2(&copy),
            Some(stream) => cuMemcpy2DAsync_v2(&copy, stream),
        }
    })
}

/// A `__device__` variable registered by `__cudaRegisterVar`: its size and, per device, the
/// device memory holding it. A variable of a loaded module is the module's (its PTX reads it
/// there); otherwise the runtime makes one on first use, initialised from the host shadow.
struct Variable {
    size: usize,
    /// The module of its fat binary (0 if none could be loaded) and its device-side name.
    module: usize,
    name: std::ffi::CString,
    on_device: Vec<(i32, u64)>,
}

static VARIABLES: Mutex<Option<std::collections::HashMap<usize, Variable>>> = Mutex::new(None);

/// The device address and size of the variable whose host shadow is `symbol`, on the current
/// device (`cudaErrorInvalidSymbol` if no variable has that shadow).
fn symbol_address(symbol: *const c_void) -> Result<(u64, usize), u32> {
    let device = current_device()?;
    let mut variables = VARIABLES.lock().map_err(|_| UNKNOWN)?;
    let variable = variables
        .get_or_insert_with(Default::default)
        .get_mut(&(symbol as usize))
        .ok_or(INVALID_SYMBOL)?;
    if let Some(&(_, addr)) = variable.on_device.iter().find(|(d, _)| *d == device) {
        return Ok((addr, variable.size));
    }
    let mut addr = 0u64;
    let in_module = variable.module != 0
        // SAFETY: valid out-parameters (the size is not needed); `name` is NUL-terminated.
        && unsafe {
            cuModuleGetGlobal_v2(&mut addr, std::ptr::null_mut(), variable.module, variable.name.as_ptr())
        } == SUCCESS;
    if !in_module {
        // SAFETY: `addr` is a valid out-parameter; the copy reads the registered host shadow of
        // `size` bytes (the registration's contract) into the block just allocated.
        unsafe {
            check(cuShimAllocModuleMemory(&mut addr, variable.size))?;
            check(cuShimMemcpy(addr, symbol as u64, variable.size, 1, 0, 1))?;
        }
    }
    variable.on_device.push((device, addr));
    Ok((addr, variable.size))
}

/// Fat binaries registered by `__cudaRegisterFatBinary`: handle → the driver's module of it (0
/// when the driver could not load it), so unregistering checks what it frees.
static FAT_BINARIES: Mutex<Option<HashMap<usize, usize>>> = Mutex::new(None);

/// The module of a registration handle (0 if none).
fn module_of(handle: *mut *mut c_void) -> usize {
    FAT_BINARIES
        .lock()
        .ok()
        .and_then(|handles| handles.as_ref()?.get(&(handle as usize)).copied())
        .unwrap_or(0)
}

/// nvcc-generated constructors register each embedded fat binary: the driver loads its PTX (as
/// NVIDIA's runtime hands fat binaries to its driver), and the handle names the registration.
/// A fat binary the driver cannot read registers all the same; its kernels then fail to launch.
///
/// # Safety
/// `fat_cubin` is what nvcc's registration code passes: a `__fatBinC_Wrapper_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __cudaRegisterFatBinary(fat_cubin: *mut c_void) -> *mut *mut c_void {
    let mut module = 0usize;
    if !fat_cubin.is_null() {
        // SAFETY: `module` is a valid out-parameter; the image is the caller's contract.
        unsafe { cuShimLoadFatBinary(&mut module, fat_cubin) };
    }
    let handle = Box::into_raw(Box::new(fat_cubin));
    if let Ok(mut handles) = FAT_BINARIES.lock() {
        handles
            .get_or_insert_with(HashMap::new)
            .insert(handle as usize, module);
    }
    handle
}

#[unsafe(no_mangle)]
pub extern "C" fn __cudaRegisterFatBinaryEnd(_handle: *mut *mut c_void) {}

/// # Safety
/// `handle` is any value; only handles returned by `__cudaRegisterFatBinary` are freed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __cudaUnregisterFatBinary(handle: *mut *mut c_void) {
    let known = FAT_BINARIES
        .lock()
        .map(|mut handles| {
            handles
                .get_or_insert_with(HashMap::new)
                .remove(&(handle as usize))
                .is_some()
        })
        .unwrap_or(false);
    if known {
        // SAFETY: `handle` was created by Box::into_raw in __cudaRegisterFatBinary and was just
        // removed from the map, so it is freed exactly once.
        drop(unsafe { Box::from_raw(handle) });
    }
}

/// Binds a host stub to its kernel in the fat binary's module (its PTX and parameter layout);
/// without a module only the device-side name is recorded, and the body comes from
/// `cudaShimRegisterKernel` (programs written for the shim).
///
/// # Safety
/// `device_name` is null or NUL-terminated.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn __cudaRegisterFunction(
    handle: *mut *mut c_void,
    host_fun: *const c_char,
    _device_fun: *mut c_char,
    device_name: *const c_char,
    _thread_limit: i32,
    _tid: *mut Dim3,
    _bid: *mut Dim3,
    _block_dim: *mut Dim3,
    _grid_dim: *mut Dim3,
    _warp_size: *mut i32,
) {
    let module = module_of(handle);
    // SAFETY: the driver validates both pointers; the name is NUL-terminated by contract.
    unsafe {
        if module == 0 {
            cuShimRegisterFunctionName(host_fun as *const c_void, device_name);
        } else {
            cuShimBindFunction(host_fun as *const c_void, module, device_name);
        }
    }
}

/// Registers a `__device__` (or `__constant__`) variable: `host_var` is its host shadow, whose
/// address names it (`cudaGetSymbolAddress`, `cudaMemcpyToSymbol`) and whose bytes initialise
/// its device copy, made on each device at first use.
///
/// # Safety
/// `host_var` is null (ignored) or valid for reads of `size` bytes for the process's lifetime.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn __cudaRegisterVar(
    handle: *mut *mut c_void,
    host_var: *mut c_char,
    _device_address: *mut c_char,
    device_name: *const c_char,
    _ext: i32,
    size: usize,
    _constant: i32,
    _global: i32,
) {
    if host_var.is_null() || size == 0 {
        return;
    }
    let name = if device_name.is_null() {
        std::ffi::CString::default()
    } else {
        // SAFETY: non-null and NUL-terminated by contract.
        unsafe { std::ffi::CStr::from_ptr(device_name) }.to_owned()
    };
    let module = module_of(handle);
    if let Ok(mut variables) = VARIABLES.lock() {
        variables.get_or_insert_with(Default::default).insert(
            host_var as usize,
            Variable {
                size,
                module,
                name,
                on_device: Vec::new(),
            },
        );
    }
}

/// Loads the module of a registered fat binary, which the driver did at registration: 1
/// (loaded) for a handle `__cudaRegisterFatBinary` returned, 0 otherwise.
#[unsafe(no_mangle)]
pub extern "C" fn __cudaInitModule(handle: *mut *mut c_void) -> c_char {
    FAT_BINARIES
        .lock()
        .map(|handles| {
            handles
                .as_ref()
                .is_some_and(|h| h.contains_key(&(handle as usize)))
        })
        .map_or(0, c_char::from)
}

/// Saves the `<<<grid, block, shared, stream>>>` of a launch for the stub to pop.
#[unsafe(no_mangle)]
pub extern "C" fn __cudaPushCallConfiguration(
    grid: Dim3,
    block: Dim3,
    shared_mem: usize,
    stream: usize,
) -> u32 {
    // `try_with`: during thread teardown (a launch from a thread-local destructor) the stack is
    // gone, and `with` would panic across this C boundary.
    match CALL_CONFIGURATIONS.try_with(|stack| {
        stack.borrow_mut().push((grid, block, shared_mem, stream));
    }) {
        Ok(()) => SUCCESS,
        Err(_) => UNKNOWN,
    }
}
