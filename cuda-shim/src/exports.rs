//! The exported driver API (`cu*`) and the shim's private entry points (`cuShim*`).
//!
//! Every export is declared once in the `driver_api!` table below, which generates the
//! `#[no_mangle] extern "C"` function, wraps its body in [`guard`] (a panic becomes
//! `CUDA_ERROR_UNKNOWN`, never an unwind into C) and lists it for `cuGetProcAddress`.
//! Bodies only decode C arguments and call the [`Context`]; the semantics live in `device`.

use crate::device::{self, Context, Place, current, init, initialized, primary_context_handle};
use crate::kernel::{Layout, pack_offsets};
use crate::memory::DeviceKind;
use crate::result::*;
use crate::stats::StatsSnapshot;
use std::ffi::{CStr, c_char, c_void};
use std::io::Write;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// CUDA version this driver reports (12.9).
pub const DRIVER_VERSION: i32 = 12090;
const DEVICE_NAME: &str = "cuda-shim simulated GPU";

/// Runs an export's body; a panic is reported once and becomes `CUDA_ERROR_UNKNOWN`.
fn guard(name: &str, body: impl FnOnce() -> CuResult<()>) -> u32 {
    static REPORTED: AtomicBool = AtomicBool::new(false);
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(result) => code(result),
        Err(_) => {
            if !REPORTED.swap(true, Ordering::Relaxed) {
                // Not eprintln!: it panics when stderr fails, outside the guard.
                let _ = writeln!(
                    std::io::stderr(),
                    "cuda-shim: internal error in {name}; returning CUDA_ERROR_UNKNOWN"
                );
            }
            UNKNOWN.0
        }
    }
}

/// Writes `value` through an out-parameter.
///
/// # Safety
/// `out` is null (reported as `CUDA_ERROR_INVALID_VALUE`) or valid for a write of `T`.
unsafe fn put<T>(out: *mut T, value: T) -> CuResult<()> {
    if out.is_null() {
        return Err(INVALID_VALUE);
    }
    // SAFETY: non-null, and valid for writes by the caller's contract.
    unsafe { out.write(value) };
    Ok(())
}

fn only_device_zero(device: i32) -> CuResult<()> {
    if device == 0 {
        Ok(())
    } else {
        Err(INVALID_DEVICE)
    }
}

/// `CU_DEVICE_ATTRIBUTE_*` values of the simulated device (an A100-class part); attributes
/// CUDA 12.9 defines but the shim does not model are 0.
fn attribute(attr: i32) -> CuResult<i32> {
    Ok(match attr {
        1..=3 => 1024,
        4 => 64,
        5 => i32::MAX,
        6 | 7 => 65535,
        8 => 48 << 10,
        9 => 64 << 10,
        10 => 32,
        11 => i32::MAX,
        12 | 82 => 65536,
        13 => 1_410_000,
        14 | 30 => 512,
        15 | 19 | 31 | 41 | 78 | 79 | 80 | 83 | 89 | 90 | 95 | 96 | 99 | 115 => 1,
        16 => 108,
        33 => 1,
        36 => 1_215_000,
        37 => 5120,
        38 => 40 << 20,
        39 => 2048,
        40 => 2,
        75 => 8,
        87 => 2,
        81 => 164 << 10,
        97 => 163 << 10,
        106 => 32,
        111 => 1024,
        17..=143 => 0,
        _ => return Err(INVALID_VALUE),
    })
}

macro_rules! driver_api {
    ($( $(#[$doc:meta])* fn $name:ident ( $($arg:ident : $ty:ty),* $(,)? ) $body:block )*) => {
        $(
            $(#[$doc])*
            ///
            /// # Safety
            /// Called from C with the arguments NVIDIA's prototype describes: every pointer is
            /// null (rejected) or valid for what the CUDA documentation says it points to.
            #[unsafe(no_mangle)]
            pub unsafe extern "C" fn $name($($arg: $ty),*) -> u32 {
                guard(stringify!($name), || $body)
            }
        )*

        /// The exported entry point called `name`, for `cuGetProcAddress`.
        pub fn entry_point(name: &str) -> Option<*mut c_void> {
            match name {
                $( stringify!($name) => Some($name as *mut c_void), )*
                _ => None,
            }
        }
    };
}

driver_api! {
    fn cuInit(flags: u32) {
        if flags != 0 {
            return Err(INVALID_VALUE);
        }
        init().map(drop)
    }

    fn cuDriverGetVersion(version: *mut i32) {
        // SAFETY: out-parameter contract of `put`, given by the C caller.
        unsafe { put(version, DRIVER_VERSION) }
    }

    fn cuDeviceGet(device: *mut i32, ordinal: i32) {
        initialized()?;
        only_device_zero(ordinal)?;
        // SAFETY: out-parameter contract of `put`.
        unsafe { put(device, 0) }
    }

    fn cuDeviceGetCount(count: *mut i32) {
        initialized()?;
        // SAFETY: out-parameter contract of `put`.
        unsafe { put(count, 1) }
    }

    fn cuDeviceGetName(name: *mut c_char, len: i32, device: i32) {
        initialized()?;
        only_device_zero(device)?;
        if name.is_null() || len <= 0 {
            return Err(INVALID_VALUE);
        }
        let n = DEVICE_NAME.len().min(len as usize - 1);
        // SAFETY: the caller provides `len` writable bytes at `name`; n + 1 <= len.
        unsafe {
            std::ptr::copy_nonoverlapping(DEVICE_NAME.as_ptr() as *const c_char, name, n);
            name.add(n).write(0);
        }
        Ok(())
    }

    fn cuDeviceTotalMem_v2(bytes: *mut usize, device: i32) {
        let context = initialized()?;
        only_device_zero(device)?;
        // SAFETY: out-parameter contract of `put`.
        unsafe { put(bytes, context.device.memory.capacity()) }
    }

    fn cuDeviceGetAttribute(value: *mut i32, attr: i32, device: i32) {
        initialized()?;
        only_device_zero(device)?;
        let v = attribute(attr)?;
        // SAFETY: out-parameter contract of `put`.
        unsafe { put(value, v) }
    }

    fn cuDevicePrimaryCtxRetain(context: *mut usize, device: i32) {
        initialized()?;
        only_device_zero(device)?;
        // SAFETY: out-parameter contract of `put`.
        unsafe { put(context, primary_context_handle()) }
    }

    fn cuDevicePrimaryCtxRelease_v2(device: i32) {
        initialized()?;
        only_device_zero(device)
    }

    fn cuCtxGetCurrent(context: *mut usize) {
        let handle = device::current_handle()?;
        // SAFETY: out-parameter contract of `put`.
        unsafe { put(context, handle) }
    }

    fn cuCtxSetCurrent(context: usize) {
        device::set_current(context)
    }

    fn cuCtxSynchronize() {
        current()?.synchronize()
    }

    fn cuGetErrorName(error: u32, text: *mut *const c_char) {
        let found = describe(error);
        // SAFETY: out-parameter contract of `put`.
        unsafe { put(text, found.map_or(std::ptr::null(), |(name, _)| name.as_ptr().cast())) }?;
        found.map(drop).ok_or(INVALID_VALUE)
    }

    fn cuGetErrorString(error: u32, text: *mut *const c_char) {
        let found = describe(error);
        // SAFETY: out-parameter contract of `put`.
        unsafe { put(text, found.map_or(std::ptr::null(), |(_, text)| text.as_ptr().cast())) }?;
        found.map(drop).ok_or(INVALID_VALUE)
    }

    /// Looks an entry point up by its base name (`cuMemAlloc` gives `cuMemAlloc_v2`) or by its
    /// exported name. Per-thread-default-stream variants do not exist on the shim: the legacy
    /// ones are returned for every flag value.
    fn cuGetProcAddress_v2(
        symbol: *const c_char,
        pfn: *mut *mut c_void,
        version: i32,
        flags: u64,
        status: *mut i32,
    ) {
        if symbol.is_null() || pfn.is_null() || version <= 0 || flags > 3 {
            return Err(INVALID_VALUE);
        }
        // SAFETY: the caller passes a NUL-terminated symbol name.
        let name = unsafe { CStr::from_ptr(symbol) }.to_str().map_err(|_| INVALID_VALUE)?;
        let found = entry_point(&format!("{name}_v2")).or_else(|| entry_point(name));
        if !status.is_null() {
            // SAFETY: non-null out-parameter of the caller.
            unsafe { status.write(if found.is_some() { 0 } else { 1 }) };
        }
        // SAFETY: out-parameter contract of `put`.
        unsafe { put(pfn, found.unwrap_or(std::ptr::null_mut())) }?;
        found.map(drop).ok_or(NOT_FOUND)
    }

    fn cuMemAlloc_v2(dptr: *mut u64, size: usize) {
        let context = current()?;
        if dptr.is_null() {
            return Err(INVALID_VALUE);
        }
        let addr = context.alloc(size, DeviceKind::Device)?;
        // SAFETY: checked non-null; out-parameter of the caller.
        unsafe { put(dptr, addr as u64) }
    }

    fn cuMemFree_v2(dptr: u64) {
        let context = current()?;
        if dptr == 0 {
            return Ok(());
        }
        context.free(dptr as usize)
    }

    fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) {
        let context = current()?;
        let memory = &context.device.memory;
        // SAFETY: out-parameter contract of `put`, for both.
        unsafe {
            put(free, memory.free_bytes())?;
            put(total, memory.capacity())
        }
    }

    fn cuMemAllocHost_v2(pp: *mut *mut c_void, size: usize) {
        // SAFETY: forwards the caller's out-parameter.
        unsafe { host_alloc(pp, size) }
    }

    fn cuMemHostAlloc(pp: *mut *mut c_void, size: usize, flags: u32) {
        if flags & !0x7 != 0 {
            return Err(INVALID_VALUE);
        }
        // SAFETY: forwards the caller's out-parameter.
        unsafe { host_alloc(pp, size) }
    }

    fn cuMemHostGetDevicePointer_v2(pdptr: *mut u64, p: *mut c_void, flags: u32) {
        let context = current()?;
        if pdptr.is_null() || flags != 0 {
            return Err(INVALID_VALUE);
        }
        // Unified addressing: page-locked memory is mapped at its host address.
        context
            .device
            .pinned
            .find(p as usize)
            .ok_or(INVALID_VALUE)?;
        // SAFETY: checked non-null; the caller's out-parameter.
        unsafe { put(pdptr, p as u64) }
    }

    fn cuMemFreeHost(p: *mut c_void) {
        let context = current()?;
        context.device.pinned.free(p as usize, &context.device.stats)
    }

    fn cuMemAllocManaged(dptr: *mut u64, size: usize, flags: u32) {
        let context = current()?;
        if dptr.is_null() || (flags != 0x1 && flags != 0x2) {
            return Err(INVALID_VALUE);
        }
        let addr = context.alloc(size, DeviceKind::Managed)?;
        // SAFETY: checked non-null; out-parameter of the caller.
        unsafe { put(dptr, addr as u64) }
    }

    fn cuMemAllocAsync(dptr: *mut u64, size: usize, stream: usize) {
        let context = current()?;
        context.streams.check(stream)?;
        if dptr.is_null() {
            return Err(INVALID_VALUE);
        }
        let addr = context.alloc(size, DeviceKind::Device)?;
        // SAFETY: checked non-null; out-parameter of the caller.
        unsafe { put(dptr, addr as u64) }
    }

    fn cuMemFreeAsync(dptr: u64, stream: usize) {
        current()?.free_async(dptr as usize, stream)
    }

    fn cuMemcpyHtoD_v2(dst: u64, src: *const c_void, count: usize) {
        current()?.copy(dst as usize, src as usize, count, 1, 0, true)
    }

    fn cuMemcpyDtoH_v2(dst: *mut c_void, src: u64, count: usize) {
        current()?.copy(dst as usize, src as usize, count, 2, 0, true)
    }

    fn cuMemcpyDtoD_v2(dst: u64, src: u64, count: usize) {
        current()?.copy(dst as usize, src as usize, count, 3, 0, false)
    }

    fn cuMemcpy(dst: u64, src: u64, count: usize) {
        current()?.copy(dst as usize, src as usize, count, 4, 0, true)
    }

    fn cuMemcpyAsync(dst: u64, src: u64, count: usize, stream: usize) {
        current()?.copy(dst as usize, src as usize, count, 4, stream, false)
    }

    /// Shim-only: a copy with an explicit `cudaMemcpyKind`, for the runtime's cudaMemcpy*.
    fn cuShimMemcpy(dst: u64, src: u64, count: usize, kind: u32, stream: usize, synchronous: u32) {
        if kind > 4 {
            return Err(INVALID_VALUE);
        }
        current()?.copy(dst as usize, src as usize, count, kind, stream, synchronous != 0)
    }

    fn cuMemsetD8_v2(dst: u64, value: u8, count: usize) {
        current()?.memset(dst as usize, value, count, 0)
    }

    fn cuMemsetD8Async(dst: u64, value: u8, count: usize, stream: usize) {
        current()?.memset(dst as usize, value, count, stream)
    }

    fn cuPointerGetAttribute(data: *mut c_void, attr: i32, ptr: u64) {
        let context = current()?;
        // SAFETY: `data` points to storage of the type the attribute documents.
        unsafe { pointer_attribute(context, data, attr, ptr as usize) }
    }

    fn cuStreamCreate(stream: *mut usize, flags: u32) {
        let context = current()?;
        if stream.is_null() || flags & !0x1 != 0 {
            return Err(INVALID_VALUE);
        }
        let handle = context.streams.create(flags & 0x1 != 0);
        // SAFETY: checked non-null; out-parameter of the caller.
        unsafe { put(stream, handle) }
    }

    fn cuStreamDestroy_v2(stream: usize) {
        current()?.streams.destroy(stream)
    }

    fn cuStreamSynchronize(stream: usize) {
        current()?.stream_synchronize(stream)
    }

    fn cuStreamQuery(stream: usize) {
        current()?.stream_query(stream)
    }

    fn cuStreamWaitEvent(stream: usize, event: usize, flags: u32) {
        if flags != 0 {
            return Err(INVALID_VALUE);
        }
        current()?.stream_wait_event(stream, event)
    }

    fn cuEventCreate(event: *mut usize, flags: u32) {
        let context = current()?;
        if event.is_null() {
            return Err(INVALID_VALUE);
        }
        let handle = context.event_create(flags)?;
        // SAFETY: checked non-null; out-parameter of the caller.
        unsafe { put(event, handle) }
    }

    fn cuEventRecord(event: usize, stream: usize) {
        current()?.event_record(event, stream)
    }

    fn cuEventSynchronize(event: usize) {
        current()?.event_synchronize(event)
    }

    fn cuEventQuery(event: usize) {
        current()?.event_query(event)
    }

    fn cuEventElapsedTime(ms: *mut f32, start: usize, end: usize) {
        let context = current()?;
        if ms.is_null() {
            return Err(INVALID_VALUE);
        }
        let elapsed = context.event_elapsed(start, end)?;
        // SAFETY: checked non-null; out-parameter of the caller.
        unsafe { put(ms, elapsed) }
    }

    fn cuEventDestroy_v2(event: usize) {
        current()?.event_destroy(event)
    }

    fn cuLaunchKernel(
        function: usize,
        grid_x: u32,
        grid_y: u32,
        grid_z: u32,
        block_x: u32,
        block_y: u32,
        block_z: u32,
        _shared_mem: u32,
        stream: usize,
        params: *mut *mut c_void,
        extra: *mut *mut c_void,
    ) {
        let context = current()?;
        let threads = u64::from(block_x) * u64::from(block_y) * u64::from(block_z);
        if grid_x == 0 || grid_y == 0 || grid_z == 0 || threads == 0 || threads > 1024 {
            return Err(INVALID_VALUE);
        }
        let nparams = context.device.functions.by_handle(function)?.layout().params.len();
        match (params.is_null(), extra.is_null()) {
            (false, true) => {
                // SAFETY: kernelParams holds one pointer per kernel parameter.
                let values = unsafe { std::slice::from_raw_parts(params as *const *const u8, nparams) };
                context.launch(function, Some(values), None, stream)
            }
            (true, false) => {
                // SAFETY: `extra` is a CU_LAUNCH_PARAM_END-terminated list of pairs.
                let packed = unsafe { packed_arguments(extra) }?;
                context.launch(function, None, Some(packed), stream)
            }
            (true, true) => context.launch(function, None, None, stream),
            (false, false) => Err(INVALID_VALUE),
        }
    }

    fn cuFuncGetParamInfo(function: usize, index: usize, offset: *mut usize, size: *mut usize) {
        let context = initialized()?;
        let layout = context.device.functions.by_handle(function)?.layout();
        let param = layout.params.get(index).ok_or(INVALID_VALUE)?;
        // SAFETY: out-parameter contract of `put`, for both.
        unsafe {
            put(offset, param.offset)?;
            put(size, param.size)
        }
    }

    fn cuFuncGetName(name: *mut *const c_char, function: usize) {
        let context = initialized()?;
        let function = context.device.functions.by_handle(function)?;
        // SAFETY: out-parameter contract of `put`; the name lives as long as the function,
        // which is never freed.
        unsafe { put(name, function.name().as_ptr()) }
    }

    /// Shim-only: registers a host function as a kernel (see `cudaShimRegisterKernel`).
    fn cuShimRegisterKernel(
        host: *const c_void,
        name: *const c_char,
        nparams: i32,
        sizes: *const usize,
        simulated_ns: u64,
    ) {
        let context = init()?;
        if host.is_null() || name.is_null() || nparams < 0 || (nparams > 0 && sizes.is_null()) {
            return Err(INVALID_VALUE);
        }
        let sizes: &[usize] = if nparams == 0 {
            // `sizes` may be NULL then, which `from_raw_parts` does not allow even for 0 entries.
            &[]
        } else {
            // SAFETY: `sizes` is non-null and holds `nparams` entries (the contract).
            unsafe { std::slice::from_raw_parts(sizes, nparams as usize) }
        };
        // SAFETY: `name` is non-null and NUL-terminated (the contract).
        let name = unsafe { CStr::from_ptr(name) }
            .to_string_lossy()
            .into_owned();
        let layout = Layout {
            name,
            // SAFETY: the caller registers a function of the kernel-body signature.
            body: Some(unsafe { std::mem::transmute::<*const c_void, crate::kernel::KernelFn>(host) }),
            params: pack_offsets(sizes)?,
            simulated: Duration::from_nanos(simulated_ns),
        };
        context.device.functions.register(host as usize, layout);
        Ok(())
    }

    /// Shim-only: records the device name of a host stub (`__cudaRegisterFunction`).
    fn cuShimRegisterFunctionName(host: *const c_void, name: *const c_char) {
        let context = init()?;
        if host.is_null() || name.is_null() {
            return Err(INVALID_VALUE);
        }
        // SAFETY: `name` is NUL-terminated.
        let name = unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned();
        context.device.functions.name(host as usize, name);
        Ok(())
    }

    /// Shim-only: the `CUfunction` of a registered host function (`CUDA_ERROR_NOT_FOUND` if none).
    fn cuShimFunctionFromHost(host: *const c_void, function: *mut usize) {
        let context = initialized()?;
        let found = context.device.functions.by_host(host as usize).ok_or(NOT_FOUND)?;
        // SAFETY: out-parameter contract of `put`.
        unsafe { put(function, found as *const crate::kernel::Function as usize) }
    }

    /// Shim-only: the device counters.
    fn cuShimGetStats(stats: *mut StatsSnapshot) {
        let context = init()?;
        // SAFETY: out-parameter contract of `put`; the struct matches `struct cudaShimStats`.
        unsafe { put(stats, context.stats()) }
    }

    /// Shim-only: makes the running kernel fault with `error` (a sticky error code).
    fn cuShimRaiseDeviceError(error: u32) {
        device::raise_device_error(error)
    }

    /// Shim-only: the sticky error of the context, or success.
    fn cuShimGetStickyError() {
        initialized().map(drop).or_else(|e| if e == NOT_INITIALIZED { Ok(()) } else { Err(e) })
    }
}

/// # Safety
/// `pp` is null or valid for a pointer write.
unsafe fn host_alloc(pp: *mut *mut c_void, size: usize) -> CuResult<()> {
    let context = current()?;
    if pp.is_null() {
        return Err(INVALID_VALUE);
    }
    let addr = context.device.pinned.alloc(size, &context.device.stats)?;
    // SAFETY: checked non-null by the line above; the caller's out-parameter.
    unsafe { put(pp, addr as *mut c_void) }
}

/// Reads `extra` = { CU_LAUNCH_PARAM_BUFFER_POINTER, ptr, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
/// CU_LAUNCH_PARAM_END }, in any order of the two pairs.
///
/// # Safety
/// `extra` is a CU_LAUNCH_PARAM_END-terminated array of key/value pointer pairs, with the
/// buffer and the size valid as the keys describe.
unsafe fn packed_arguments<'a>(extra: *mut *mut c_void) -> CuResult<&'a [u8]> {
    const END: usize = 0x00;
    const BUFFER_POINTER: usize = 0x01;
    const BUFFER_SIZE: usize = 0x02;
    let (mut buffer, mut size) = (std::ptr::null::<u8>(), None);
    let mut i = 0;
    loop {
        // SAFETY: the array is terminated by END, and pairs are read only before it.
        let key = unsafe { *extra.add(i) } as usize;
        match key {
            END => break,
            // SAFETY: a key other than END is followed by its value.
            BUFFER_POINTER => buffer = unsafe { *extra.add(i + 1) } as *const u8,
            // SAFETY: the value of BUFFER_SIZE points to a size_t.
            BUFFER_SIZE => size = Some(unsafe { *(*extra.add(i + 1) as *const usize) }),
            _ => return Err(INVALID_VALUE),
        }
        i += 2;
    }
    match size {
        Some(size) if !buffer.is_null() => {
            // SAFETY: BUFFER_POINTER holds BUFFER_SIZE readable bytes.
            Ok(unsafe { std::slice::from_raw_parts(buffer, size) })
        }
        _ => Err(INVALID_VALUE),
    }
}

/// # Safety
/// `data` is valid for a write of the attribute's documented type.
unsafe fn pointer_attribute(
    context: &Context,
    data: *mut c_void,
    attr: i32,
    ptr: usize,
) -> CuResult<()> {
    const CONTEXT: i32 = 1;
    const MEMORY_TYPE: i32 = 2;
    const DEVICE_POINTER: i32 = 3;
    const HOST_POINTER: i32 = 4;
    const IS_MANAGED: i32 = 8;
    const DEVICE_ORDINAL: i32 = 9;
    const RANGE_START: i32 = 11;
    const RANGE_SIZE: i32 = 12;
    const MAPPED: i32 = 13;
    const MEMORYTYPE_HOST: u32 = 1;
    const MEMORYTYPE_DEVICE: u32 = 2;
    let (start, size, memory_type, managed, host_visible) = match context.place(ptr) {
        Place::Device {
            start,
            size,
            managed,
        } => (start, size, MEMORYTYPE_DEVICE, managed, managed),
        Place::Pinned { start, size } => (start, size, MEMORYTYPE_HOST, false, true),
        Place::Pageable => return Err(INVALID_VALUE),
    };
    // SAFETY (all arms): `data` is valid for the type the attribute documents (caller contract).
    unsafe {
        match attr {
            CONTEXT => put(data as *mut usize, primary_context_handle()),
            MEMORY_TYPE => put(data as *mut u32, memory_type),
            DEVICE_POINTER => put(data as *mut u64, ptr as u64),
            HOST_POINTER if host_visible => put(data as *mut *mut c_void, ptr as *mut c_void),
            IS_MANAGED => put(data as *mut u32, managed as u32),
            DEVICE_ORDINAL => put(data as *mut i32, 0),
            RANGE_START => put(data as *mut u64, start as u64),
            RANGE_SIZE => put(data as *mut usize, size),
            MAPPED => put(data as *mut u32, 1),
            _ => Err(INVALID_VALUE),
        }
    }
}
