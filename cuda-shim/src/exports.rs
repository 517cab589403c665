//! The exported driver API (`cu*`) and the shim's private entry points (`cuShim*`).
//!
//! Every export is declared once in the `driver_api!` table below, which generates the
//! `#[no_mangle] extern "C"` function, wraps its body in [`guard`] (a panic becomes
//! `CUDA_ERROR_UNKNOWN`, never an unwind into C) and lists it for `cuGetProcAddress`.
//! Bodies only decode C arguments and call the [`Context`]; the semantics live in `device`.

use crate::device::{
    self, Context, Driver, MemoryType, Place, Rect, Shape, current, init, initialized,
};
use crate::export_table;
use crate::green::{self, DevResource};
use crate::kernel::{Body, Layout, pack_offsets};
use crate::memory::DeviceKind;
use crate::module::{Library, Module};
use crate::result::*;
use crate::stats::StatsSnapshot;
use crate::stream::PER_THREAD;
use crate::vmm;
use std::ffi::{CStr, c_char, c_void};
use std::io::Write;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// CUDA version this driver reports: 13.5 unless `CUDA_SHIM_DRIVER_VERSION` says otherwise
/// (`config::driver_version`), read once.
pub fn driver_version() -> i32 {
    static VERSION: std::sync::OnceLock<i32> = std::sync::OnceLock::new();
    *VERSION.get_or_init(|| crate::config::driver_version(|name| std::env::var(name).ok()))
}
const DEVICE_NAME: &str = "cuda-shim simulated GPU";

/// The UUID of device `ordinal`: the bytes of `cuda-shim` then the ordinal, the same in every
/// run (a GPU's UUID is fixed too).
pub fn device_uuid(ordinal: i32) -> [u8; 16] {
    let mut uuid = *b"cuda-shim\0\0\0\0\0\0\0";
    uuid[12..].copy_from_slice(&ordinal.to_be_bytes());
    uuid
}

/// The name of device `ordinal`: with several devices each name ends with its ordinal, so
/// programs that tell devices apart by name can.
fn device_name(driver: &Driver, ordinal: i32) -> String {
    if driver.count() == 1 {
        DEVICE_NAME.to_string()
    } else {
        format!("{DEVICE_NAME} {ordinal}")
    }
}

/// Runs an export's body; a panic is reported once and becomes `CUDA_ERROR_UNKNOWN`.
pub(crate) fn guard(name: &str, body: impl FnOnce() -> CuResult<()>) -> u32 {
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

/// Writes `value` through an optional out-parameter: nothing when it is null.
///
/// # Safety
/// `out` is null or valid for a write of `T`.
unsafe fn put_optional<T>(out: *mut T, value: T) {
    if !out.is_null() {
        // SAFETY: non-null, and valid for writes by the caller's contract.
        unsafe { out.write(value) };
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

/// Writes a `CUdevResource` (unaligned: CUDA 12's is 4-aligned).
///
/// # Safety
/// `out` is null (reported as `CUDA_ERROR_INVALID_VALUE`) or valid for a write of 144 bytes.
unsafe fn put_resource(out: *mut DevResource, value: DevResource) -> CuResult<()> {
    if out.is_null() {
        return Err(INVALID_VALUE);
    }
    // SAFETY: non-null, and valid for writes by the caller's contract.
    unsafe { out.write_unaligned(value) };
    Ok(())
}

/// As [`put_resource`], nothing for a null `out`.
///
/// # Safety
/// `out` is null or valid for a write of 144 bytes.
unsafe fn put_optional_resource(out: *mut DevResource, value: DevResource) {
    if !out.is_null() {
        // SAFETY: non-null, and valid for writes by the caller's contract.
        unsafe { out.write_unaligned(value) };
    }
}

/// `CU_DEVICE_ATTRIBUTE_*` values of simulated device `ordinal` (an A100-class part, every
/// device alike but for its PCI bus id); attributes CUDA 12.9 defines but the shim does not
/// model are 0.
pub(crate) fn attribute(attr: i32, ordinal: i32) -> CuResult<i32> {
    Ok(match attr {
        33 => 1 + ordinal,
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
        15 | 19 | 31 | 41 | 78 | 79 | 80 | 83 | 89 | 90 | 91 | 95 | 96 | 99 | 115 => 1,
        16 => 108,
        36 => 1_215_000,
        37 => 5120,
        38 => 40 << 20,
        39 => 2048,
        40 => 2,
        75 => (device::driver()?.config.compute_capability / 10) as i32,
        76 => (device::driver()?.config.compute_capability % 10) as i32,
        87 => 2,
        81 => 164 << 10,
        97 => 163 << 10,
        106 => 32,
        111 => 1024,
        51 => 32,
        102 => 1,
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

        /// Names of every function of the table, in order.
        pub const EXPORTS: &[&str] = &[$( stringify!($name), )*];
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
        unsafe { put(version, driver_version()) }
    }

    fn cuDeviceGet(device: *mut i32, ordinal: i32) {
        initialized()?.device(ordinal)?;
        // SAFETY: out-parameter contract of `put`.
        unsafe { put(device, ordinal) }
    }

    fn cuDeviceGetCount(count: *mut i32) {
        let driver = initialized()?;
        // SAFETY: out-parameter contract of `put`.
        unsafe { put(count, driver.count() as i32) }
    }

    fn cuDeviceGetName(name: *mut c_char, len: i32, device: i32) {
        let driver = initialized()?;
        driver.device(device)?;
        if name.is_null() || len <= 0 {
            return Err(INVALID_VALUE);
        }
        let text = device_name(driver, device);
        let n = text.len().min(len as usize - 1);
        // SAFETY: the caller provides `len` writable bytes at `name`; n + 1 <= len.
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr() as *const c_char, name, n);
            name.add(n).write(0);
        }
        Ok(())
    }

    fn cuDeviceTotalMem_v2(bytes: *mut usize, device: i32) {
        let device = initialized()?.device(device)?;
        // SAFETY: out-parameter contract of `put`.
        unsafe { put(bytes, device.memory.capacity()) }
    }

    fn cuDeviceGetAttribute(value: *mut i32, attr: i32, device: i32) {
        initialized()?.device(device)?;
        let v = attribute(attr, device)?;
        // SAFETY: out-parameter contract of `put`.
        unsafe { put(value, v) }
    }

    /// Every device's primary context exists from `cuInit` on; retaining hands out its handle
    /// and makes it active (`cuDevicePrimaryCtxGetState`) until released as often.
    fn cuDevicePrimaryCtxRetain(context: *mut usize, device: i32) {
        // Not `initialized()`: a fault of the current context does not concern another one.
        let driver = device::driver()?;
        let handle = driver.context(device)?.handle();
        // SAFETY: out-parameter contract of `put`.
        unsafe { put(context, handle) }?;
        driver.retain_primary(device as usize);
        Ok(())
    }

    /// Primary contexts are never destroyed on the shim: the last release makes the context
    /// inactive; a release without a retain is `CUDA_ERROR_INVALID_CONTEXT`.
    fn cuDevicePrimaryCtxRelease_v2(device: i32) {
        let driver = device::driver()?;
        driver.device(device)?;
        driver.release_primary(device as usize)
    }

    /// The CUDA 7 name of `cuDevicePrimaryCtxRelease_v2`, which NVIDIA's runtime still asks
    /// `cuGetProcAddress` for (at version 7000): the same function here.
    fn cuDevicePrimaryCtxRelease(device: i32) {
        // SAFETY: forwarded arguments of the same contract.
        code_result(unsafe { cuDevicePrimaryCtxRelease_v2(device) })
    }

    /// The flags of `cuDevicePrimaryCtxSetFlags` (`CU_CTX_SCHED_AUTO` until set) with the
    /// implicit `CU_CTX_MAP_HOST` (see `Context::flags`); active
    /// while retained (the runtime retains the primary context of a device when it first makes
    /// it current).
    fn cuDevicePrimaryCtxGetState(device: i32, flags: *mut u32, active: *mut i32) {
        let driver = device::driver()?;
        let context = driver.context(device)?;
        if flags.is_null() || active.is_null() {
            return Err(INVALID_VALUE);
        }
        // SAFETY: checked non-null; out-parameters of the caller.
        unsafe {
            put(flags, context.flags())?;
            put(active, i32::from(driver.primary_active(device as usize)))
        }
    }

    /// Any time, active or not (CUDA 11 dropped `CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE`): the
    /// scheduling policy and `CU_CTX_*` flags are recorded, a reset clears them.
    fn cuDevicePrimaryCtxSetFlags_v2(device: i32, flags: u32) {
        device::driver()?.context(device)?.set_flags(flags)
    }

    /// Destroys everything the primary context holds and makes it inactive (see
    /// `Driver::reset_primary`): what `cudaDeviceReset` does.
    fn cuDevicePrimaryCtxReset_v2(device: i32) {
        let driver = device::driver()?;
        driver.device(device)?;
        driver.reset_primary(device as usize);
        Ok(())
    }

    /// The CUDA 7 name of `cuDevicePrimaryCtxReset_v2` (`cudaDeviceReset` of NVIDIA's runtime
    /// asks for it at version 7000): the same function here.
    fn cuDevicePrimaryCtxReset(device: i32) {
        // SAFETY: forwarded arguments of the same contract.
        code_result(unsafe { cuDevicePrimaryCtxReset_v2(device) })
    }

    /// A context of its own on `device`, pushed on the calling thread's stack (see
    /// `Driver::create_context`).
    fn cuCtxCreate_v2(context: *mut usize, flags: u32, device: i32) {
        create_context(context, flags, device)
    }

    /// With execution affinity parameters: the shim supports none
    /// (`CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY`); without any, as `cuCtxCreate_v2`.
    fn cuCtxCreate_v3(context: *mut usize, params: *mut c_void, count: i32, flags: u32, device: i32) {
        if count < 0 || (count > 0 && params.is_null()) {
            return Err(INVALID_VALUE);
        }
        if count > 0 {
            return Err(UNSUPPORTED_EXEC_AFFINITY);
        }
        create_context(context, flags, device)
    }

    /// `CUctxCreateParams` may be NULL; execution affinity is unsupported
    /// (`CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY`) and so is a CIG context (`CUDA_ERROR_NOT_SUPPORTED`:
    /// there is no graphics API to share with).
    fn cuCtxCreate_v4(context: *mut usize, params: *const CtxCreateParams, flags: u32, device: i32) {
        // SAFETY: `params` is null or points to a CUctxCreateParams.
        if let Some(params) = unsafe { params.as_ref() } {
            if params.exec_affinity_count < 0
                || (params.exec_affinity_count > 0 && params.exec_affinity.is_null())
            {
                return Err(INVALID_VALUE);
            }
            if params.exec_affinity_count > 0 {
                return Err(UNSUPPORTED_EXEC_AFFINITY);
            }
            if !params.cig.is_null() {
                return Err(NOT_SUPPORTED);
            }
        }
        create_context(context, flags, device)
    }

    /// A context made with `cuCtxCreate` (see `Driver::destroy_context`).
    fn cuCtxDestroy_v2(context: usize) {
        if context == 0 {
            return Err(INVALID_VALUE);
        }
        device::driver()?.destroy_context(context)
    }

    fn cuCtxGetFlags(flags: *mut u32) {
        let context = current()?;
        // SAFETY: out-parameter contract of `put`.
        unsafe { put(flags, context.flags()) }
    }

    /// 3020 for every context, as NVIDIA's driver answers today; NULL is the current context.
    fn cuCtxGetApiVersion(context: usize, version: *mut u32) {
        let driver = device::driver()?;
        if context == 0 {
            current()?;
        } else {
            driver.context_of_handle(context)?;
        }
        // SAFETY: out-parameter contract of `put`.
        unsafe { put(version, 3020) }
    }

    /// The device's UUID: `cuda-shim` and the ordinal (see [`device_uuid`]).
    fn cuDeviceGetUuid(uuid: *mut [u8; 16], device: i32) {
        initialized()?.device(device)?;
        // SAFETY: out-parameter contract of `put`.
        unsafe { put(uuid, device_uuid(device)) }
    }

    /// As `cuDeviceGetUuid`: the shim has no MIG instances, whose UUIDs would differ.
    fn cuDeviceGetUuid_v2(uuid: *mut [u8; 16], device: i32) {
        // SAFETY: forwarded arguments of the same contract.
        code_result(unsafe { cuDeviceGetUuid(uuid, device) })
    }

    /// `domain:bus:device.function` in hexadecimal, from the PCI attributes (13 characters).
    fn cuDeviceGetPCIBusId(bus_id: *mut c_char, len: i32, device: i32) {
        initialized()?.device(device)?;
        if bus_id.is_null() || len <= 0 {
            return Err(INVALID_VALUE);
        }
        let text = format!(
            "{:04x}:{:02x}:{:02x}.0",
            attribute(50, device)?,
            attribute(33, device)?,
            attribute(34, device)?
        );
        let n = text.len().min(len as usize - 1);
        // SAFETY: the caller provides `len` writable bytes; n + 1 <= len.
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr() as *const c_char, bus_id, n);
            bus_id.add(n).write(0);
        }
        Ok(())
    }

    /// [least, greatest] = [0, -5], as on recent GPUs; either pointer may be NULL.
    fn cuCtxGetStreamPriorityRange(least: *mut i32, greatest: *mut i32) {
        current()?;
        // SAFETY: each is NULL (skipped) or the caller's out-parameter.
        unsafe {
            if let Some(least) = least.as_mut() {
                *least = LEAST_PRIORITY;
            }
            if let Some(greatest) = greatest.as_mut() {
                *greatest = GREATEST_PRIORITY;
            }
        }
        Ok(())
    }

    /// 1 between two distinct devices of the shim, 0 for a device and itself (as CUDA answers).
    fn cuDeviceCanAccessPeer(can_access: *mut i32, device: i32, peer: i32) {
        let driver = initialized()?;
        driver.device(device)?;
        driver.device(peer)?;
        // SAFETY: out-parameter contract of `put`.
        unsafe { put(can_access, i32::from(device != peer)) }
    }

    /// Performance rank 0, access and native atomics supported, no arrays (the shim has none).
    fn cuDeviceGetP2PAttribute(value: *mut i32, attr: u32, src: i32, dst: i32) {
        let driver = initialized()?;
        driver.device(src)?;
        driver.device(dst)?;
        if src == dst {
            return Err(INVALID_DEVICE);
        }
        let v = match attr {
            1 => 0,
            2 | 3 => 1,
            4 => 0,
            _ => return Err(INVALID_VALUE),
        };
        // SAFETY: out-parameter contract of `put`.
        unsafe { put(value, v) }
    }

    /// Access from the current context to the memory of `peer`'s device, one way.
    fn cuCtxEnablePeerAccess(peer: usize, flags: u32) {
        let context = current()?;
        let driver = initialized()?;
        let peer = driver.context_of_handle(peer)?;
        if peer.ordinal == context.ordinal {
            return Err(INVALID_CONTEXT);
        }
        if flags != 0 {
            return Err(INVALID_VALUE);
        }
        driver.enable_peer(context.ordinal, peer.ordinal)
    }

    fn cuCtxDisablePeerAccess(peer: usize) {
        let context = current()?;
        let driver = initialized()?;
        let peer = driver.context_of_handle(peer)?;
        if peer.ordinal == context.ordinal {
            return Err(PEER_ACCESS_NOT_ENABLED);
        }
        driver.disable_peer(context.ordinal, peer.ordinal)
    }

    fn cuCtxGetCurrent(context: *mut usize) {
        let handle = device::current_handle()?;
        // SAFETY: out-parameter contract of `put`.
        unsafe { put(context, handle) }
    }

    fn cuCtxSetCurrent(context: usize) {
        device::set_current(context)
    }

    fn cuCtxPushCurrent_v2(context: usize) {
        device::push_current(context)
    }

    /// `pctx` may be NULL: the context is popped all the same.
    fn cuCtxPopCurrent_v2(context: *mut usize) {
        let popped = device::pop_current()?;
        if !context.is_null() {
            // SAFETY: non-null out-parameter of the caller.
            unsafe { context.write(popped) };
        }
        Ok(())
    }

    fn cuCtxGetDevice(device: *mut i32) {
        let context = current()?;
        // SAFETY: out-parameter contract of `put`.
        unsafe { put(device, context.ordinal as i32) }
    }

    /// While a stream of the context captures: `STREAM_CAPTURE_UNSUPPORTED`, and the capture is
    /// invalidated.
    fn cuCtxSynchronize() {
        let context = current()?;
        context.check_synchronize()?;
        context.synchronize()
    }

    /// CUDA 13's `cuCtxGetDevice` (`cuGetProcAddress` at 13000 and later): the device of
    /// `context`, current on this thread or not; NULL is the current context.
    fn cuCtxGetDevice_v2(device: *mut i32, context: usize) {
        let context = context_argument(context)?;
        // SAFETY: out-parameter contract of `put`.
        unsafe { put(device, context.ordinal as i32) }
    }

    /// CUDA 13's `cuCtxSynchronize` (`cuGetProcAddress` at 13000 and later): waits for the
    /// work of `context`, current on this thread or not; NULL is the current context.
    fn cuCtxSynchronize_v2(context: usize) {
        let context = context_argument(context)?;
        context.check_synchronize()?;
        context.synchronize()
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

    /// Looks an entry point up by its base name (`cuMemAlloc`), as the real driver does: the
    /// newest variant introduced at or before `version` (see [`PROCS`]); with
    /// `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM` (alone) its `_ptsz`/`_ptds` variant where
    /// NVIDIA's driver has one (see [`PER_THREAD_PROCS`]), otherwise the legacy function.
    fn cuGetProcAddress_v2(
        symbol: *const c_char,
        pfn: *mut *mut c_void,
        version: i32,
        flags: u64,
        status: *mut i32,
    ) {
        // SAFETY: the caller's arguments, as cuGetProcAddress_v2 documents them.
        unsafe { get_proc_address(symbol, pfn, version, flags, status) }
    }

    /// The private tables of NVIDIA's runtime, by UUID (see `export_table`).
    fn cuGetExportTable(table: *mut *const c_void, id: *const [u8; 16]) {
        // SAFETY: the caller's arguments, as cuGetExportTable documents them.
        unsafe { export_table::get(table, id) }
    }

    /// Unsafe during a capture that prohibits it (`graph::Graphs::unsafe_call`).
    fn cuMemAlloc_v2(dptr: *mut u64, size: usize) {
        let context = current()?;
        initialized()?.graphs.unsafe_call()?;
        if dptr.is_null() {
            return Err(INVALID_VALUE);
        }
        let addr = context.alloc(size, DeviceKind::Device)?;
        // SAFETY: checked non-null; out-parameter of the caller.
        unsafe { put(dptr, addr as u64) }
    }

    /// Unsafe during a capture that prohibits it (`graph::Graphs::unsafe_call`).
    fn cuMemFree_v2(dptr: u64) {
        let context = current()?;
        if dptr == 0 {
            return Ok(());
        }
        initialized()?.graphs.unsafe_call()?;
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

    /// The allocation containing `dptr`: device memory of any device, or a mapping of the
    /// virtual memory API (each `cuMemMap` is an allocation range of its own, as on CUDA);
    /// `CUDA_ERROR_NOT_FOUND` for any other address. Either out-parameter may be null.
    fn cuMemGetAddressRange_v2(base: *mut u64, size: *mut usize, dptr: u64) {
        let driver = initialized()?;
        let Place::Device { start, size: bytes, .. } = driver.place(dptr as usize) else {
            return Err(NOT_FOUND);
        };
        // SAFETY: each out-parameter is null (skipped) or valid for a write (the caller's
        // contract).
        unsafe {
            put_optional(base, start as u64);
            put_optional(size, bytes);
        }
        Ok(())
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
        current()?;
        if pdptr.is_null() || flags != 0 {
            return Err(INVALID_VALUE);
        }
        // Unified addressing: page-locked memory (of any device: it is portable) is mapped at
        // its host address.
        initialized()?.pinned.find(p as usize).ok_or(INVALID_VALUE)?;
        // SAFETY: checked non-null; the caller's out-parameter.
        unsafe { put(pdptr, p as u64) }
    }

    fn cuMemFreeHost(p: *mut c_void) {
        current()?;
        initialized()?.free_host(p as usize)
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

    /// From the default pool of the stream's device.
    fn cuMemAllocAsync(dptr: *mut u64, size: usize, stream: usize) {
        let context = current()?;
        context.check_stream(stream)?;
        if dptr.is_null() {
            return Err(INVALID_VALUE);
        }
        let addr = context.alloc_async(size, stream)?;
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

    /// Rows padded to the texture alignment (512 bytes); ElementSizeBytes must be 4, 8 or 16.
    fn cuMemAllocPitch_v2(
        dptr: *mut u64,
        pitch: *mut usize,
        width: usize,
        height: usize,
        element_size: u32,
    ) {
        let context = current()?;
        if dptr.is_null() || pitch.is_null() {
            return Err(INVALID_VALUE);
        }
        let (addr, row) = context.alloc_pitch(width, height, element_size)?;
        // SAFETY: checked non-null; out-parameters of the caller.
        unsafe {
            put(dptr, addr as u64)?;
            put(pitch, row)
        }
    }

    /// The only pool of each device: the one its stream-ordered allocations come from.
    fn cuDeviceGetDefaultMemPool(pool: *mut usize, device: i32) {
        initialized()?.device(device)?;
        // SAFETY: out-parameter contract of `put`.
        unsafe { put(pool, device::default_pool_handle(device as usize)) }
    }

    /// From the pool's device, on a stream of any device.
    fn cuMemAllocFromPoolAsync(dptr: *mut u64, size: usize, pool: usize, stream: usize) {
        let context = current()?;
        context.check_stream(stream)?;
        let device = device::pool_device(pool);
        let (false, Some(device)) = (dptr.is_null(), device) else {
            return Err(INVALID_VALUE);
        };
        let addr = context.alloc_from_pool(size, device, stream)?;
        // SAFETY: checked non-null; out-parameter of the caller.
        unsafe { put(dptr, addr as u64) }
    }

    /// Attributes of a device's default pool (see `device::Pool`): 32-bit `int` values for the
    /// reuse flags, 64-bit ones otherwise.
    fn cuMemPoolGetAttribute(pool: usize, attr: u32, value: *mut c_void) {
        let device = pool_of(pool)?;
        let (v, wide) = device.pool_attribute(attr)?;
        // SAFETY: `value` points to the attribute's documented type (the caller's contract).
        unsafe {
            if wide {
                put(value as *mut u64, v)
            } else {
                put(value as *mut i32, v as i32)
            }
        }
    }

    fn cuMemPoolSetAttribute(pool: usize, attr: u32, value: *mut c_void) {
        let device = pool_of(pool)?;
        if value.is_null() {
            return Err(INVALID_VALUE);
        }
        // SAFETY: non-null, pointing to the attribute's documented type.
        let v = unsafe {
            match attr {
                1..=3 => *(value as *const i32) as u64,
                _ => *(value as *const u64),
            }
        };
        device.set_pool_attribute(attr, v)
    }

    fn cuMemPoolSetAccess(pool: usize, map: *const AccessDesc, count: usize) {
        let device = pool_of(pool)?;
        let driver = initialized()?;
        if map.is_null() && count > 0 {
            return Err(INVALID_VALUE);
        }
        if count == 0 {
            return Ok(());
        }
        // SAFETY: `map` holds `count` descriptors (the caller's contract).
        let descs = unsafe { std::slice::from_raw_parts(map, count) };
        for d in descs {
            let other = check_location(driver, d.location_type, d.location_id)?;
            device.set_pool_access(other, d.flags)?;
        }
        Ok(())
    }

    /// The shim returns freed pool memory to the device at once: nothing is left to trim.
    fn cuMemPoolTrimTo(pool: usize, min_bytes_to_keep: usize) {
        pool_of(pool)?;
        let _ = min_bytes_to_keep;
        Ok(())
    }

    /// Shim-only: device memory for a module global (`__cudaRegisterVar`) on the current
    /// device, outside the program's allocations (`cuMemAlloc` is not called, as on CUDA). It
    /// belongs to the device's primary context, whose reset frees it.
    fn cuShimAllocModuleMemory(dptr: *mut u64, size: usize) {
        let context = current()?;
        if dptr.is_null() {
            return Err(INVALID_VALUE);
        }
        let primary = &device::driver()?.contexts[context.ordinal];
        let addr = primary.alloc(size.max(1), DeviceKind::Device)?;
        // SAFETY: checked non-null; out-parameter of the caller.
        unsafe { put(dptr, addr as u64) }
    }

    fn cuMemcpyHtoDAsync_v2(dst: u64, src: *const c_void, count: usize, stream: usize) {
        current()?.copy(dst as usize, src as usize, count, 1, stream, false)
    }

    fn cuMemcpyDtoHAsync_v2(dst: *mut c_void, src: u64, count: usize, stream: usize) {
        current()?.copy(dst as usize, src as usize, count, 2, stream, false)
    }

    fn cuMemcpyDtoDAsync_v2(dst: u64, src: u64, count: usize, stream: usize) {
        current()?.copy(dst as usize, src as usize, count, 3, stream, false)
    }

    /// Between any two contexts (peer access need not be enabled). CUDA serialises the copy
    /// with all pending and future work of the current context and of both peers; the shim does
    /// so by running it between synchronisations of all three (so the host also waits, which
    /// CUDA does not promise). Without a current context the copy runs on the destination's.
    fn cuMemcpyPeer(dst: u64, dst_context: usize, src: u64, src_context: usize, count: usize) {
        let (context, peers) = peer(dst_context, src_context)?;
        context.copy_peer(dst as usize, src as usize, count, peers)
    }

    fn cuMemcpyPeerAsync(
        dst: u64,
        dst_context: usize,
        src: u64,
        src_context: usize,
        count: usize,
        stream: usize,
    ) {
        let (context, _) = peer(dst_context, src_context)?;
        context.copy(dst as usize, src as usize, count, 3, stream, false)
    }

    fn cuMemcpy2D_v2(copy: *const Memcpy2d) {
        // SAFETY: `copy` is null (rejected) or points to a CUDA_MEMCPY2D.
        unsafe { memcpy_2d(copy, 0, true) }
    }

    /// The same as cuMemcpy2D on the shim (no pitch is too unusual for it).
    fn cuMemcpy2DUnaligned_v2(copy: *const Memcpy2d) {
        // SAFETY: `copy` is null (rejected) or points to a CUDA_MEMCPY2D.
        unsafe { memcpy_2d(copy, 0, true) }
    }

    fn cuMemcpy2DAsync_v2(copy: *const Memcpy2d, stream: usize) {
        // SAFETY: `copy` is null (rejected) or points to a CUDA_MEMCPY2D.
        unsafe { memcpy_2d(copy, stream, false) }
    }

    fn cuMemsetD16_v2(dst: u64, value: u16, count: usize) {
        current()?.memset_2d(dst as usize, 0, value.into(), 2, count, 1, 0)
    }

    fn cuMemsetD32_v2(dst: u64, value: u32, count: usize) {
        current()?.memset_2d(dst as usize, 0, value, 4, count, 1, 0)
    }

    fn cuMemsetD16Async(dst: u64, value: u16, count: usize, stream: usize) {
        current()?.memset_2d(dst as usize, 0, value.into(), 2, count, 1, stream)
    }

    fn cuMemsetD32Async(dst: u64, value: u32, count: usize, stream: usize) {
        current()?.memset_2d(dst as usize, 0, value, 4, count, 1, stream)
    }

    /// The shim's driver writes no log, so a callback is accepted and never called; the handle
    /// names it for `cuLogsUnregisterCallback`.
    fn cuLogsRegisterCallback(callback: *mut c_void, user_data: *mut c_void, handle: *mut *mut c_void) {
        initialized()?;
        if callback.is_null() {
            return Err(INVALID_VALUE);
        }
        let _ = user_data;
        // SAFETY: out-parameter contract of `put_optional` (null is allowed by CUDA).
        unsafe { put_optional(handle, callback) };
        Ok(())
    }

    fn cuLogsUnregisterCallback(handle: *mut c_void) {
        initialized()?;
        if handle.is_null() {
            return Err(INVALID_VALUE);
        }
        Ok(())
    }

    /// The device's SM resource (see `green`); `CUDA_ERROR_INVALID_RESOURCE_TYPE` for the
    /// workqueue types, which the shim does not model.
    fn cuDeviceGetDevResource(device: i32, resource: *mut DevResource, kind: u32) {
        let found = green::device_resource(device, kind)?;
        // SAFETY: out-parameter contract of `put_resource`.
        unsafe { put_resource(resource, found) }
    }

    /// A context's SM resource: its device's (a green context's `CUcontext` is the primary
    /// context on the shim, see `green`).
    fn cuCtxGetDevResource(context: usize, resource: *mut DevResource, kind: u32) {
        let driver = initialized()?;
        let ordinal = driver.context_of_handle(context)?.ordinal as i32;
        let found = green::device_resource(ordinal, kind)?;
        // SAFETY: out-parameter contract of `put_resource`.
        unsafe { put_resource(resource, found) }
    }

    /// The SM resource the green context was made with.
    fn cuGreenCtxGetDevResource(context: usize, resource: *mut DevResource, kind: u32) {
        let found = green::green(context)?;
        let value = green::resource(found.ordinal, found.sm, kind)?;
        // SAFETY: out-parameter contract of `put_resource`.
        unsafe { put_resource(resource, value) }
    }

    /// With `result` NULL, how many groups `*groups` would hold; otherwise at most `*groups`
    /// groups are written and `*groups` becomes how many were (see `green::split`).
    fn cuDevSmResourceSplitByCount(
        result: *mut DevResource,
        groups: *mut u32,
        input: *const DevResource,
        remainder: *mut DevResource,
        flags: u32,
        min_count: u32,
    ) {
        if groups.is_null() || input.is_null() {
            return Err(INVALID_VALUE);
        }
        // SAFETY: both checked non-null; the caller's pointers. CUDA 12's CUdevResource is
        // 4-aligned, so reads and writes are unaligned ones.
        unsafe {
            let input = input.read_unaligned();
            let wanted = (!result.is_null()).then(|| groups.read_unaligned());
            let made = green::split(&input, wanted, flags, min_count)?;
            if !result.is_null() {
                for (i, group) in made.groups.iter().enumerate() {
                    result.add(i).write_unaligned(*group);
                }
                put_optional_resource(remainder, made.remainder);
            }
            groups.write_unaligned(made.groups.len() as u32);
        }
        Ok(())
    }

    /// A descriptor of `count` SM resources of one device (see `green::generate_descriptor`).
    fn cuDevResourceGenerateDesc(descriptor: *mut usize, resources: *const DevResource, count: u32) {
        if descriptor.is_null() || resources.is_null() || count == 0 {
            return Err(INVALID_VALUE);
        }
        let resources: Vec<_> = (0..count as usize)
            // SAFETY: `resources` holds `count` resources (the caller's contract), read
            // unaligned as CUDA 12's are 4-aligned.
            .map(|i| unsafe { resources.add(i).read_unaligned() })
            .collect();
        let handle = green::generate_descriptor(&resources)?;
        // SAFETY: out-parameter contract of `put`.
        unsafe { put(descriptor, handle) }
    }

    /// A green context on `device` with the descriptor's SMs; it retains the device's primary
    /// context until `cuGreenCtxDestroy`.
    fn cuGreenCtxCreate(context: *mut usize, descriptor: usize, device: i32, flags: u32) {
        if context.is_null() {
            return Err(INVALID_VALUE);
        }
        let handle = green::create(descriptor, device, flags)?;
        // SAFETY: out-parameter contract of `put`.
        unsafe { put(context, handle) }
    }

    /// Releases the primary context the green context retained; its streams stay usable on
    /// the shim (see `green`).
    fn cuGreenCtxDestroy(context: usize) {
        green::destroy(context)
    }

    /// The `CUcontext` of a green context: the primary context of its device (see `green`).
    fn cuCtxFromGreenCtx(context: *mut usize, green_context: usize) {
        if context.is_null() {
            return Err(INVALID_VALUE);
        }
        let handle = green::context(green_context)?;
        // SAFETY: out-parameter contract of `put`.
        unsafe { put(context, handle) }
    }

    /// The id `cuGreenCtxCreate` gave, unique in the process. A NULL green context would
    /// mean the current one, which the shim cannot tell from the primary context it is
    /// (`CUDA_ERROR_INVALID_CONTEXT`).
    fn cuGreenCtxGetId(context: usize, id: *mut u64) {
        let found = green::green(context)?;
        // SAFETY: out-parameter contract of `put`.
        unsafe { put(id, found.id) }
    }

    /// A stream of the green context's device, used as any stream of its context; `flags`
    /// must be `CU_STREAM_NON_BLOCKING`, the priority is clamped as `cuStreamCreateWithPriority`
    /// does.
    fn cuGreenCtxStreamCreate(stream: *mut usize, green_context: usize, flags: u32, priority: i32) {
        let found = green::green(green_context)?;
        if stream.is_null() || flags != 0x1 {
            return Err(INVALID_VALUE);
        }
        let priority = priority.clamp(GREATEST_PRIORITY, LEAST_PRIORITY);
        let handle = initialized()?
            .context(found.ordinal)?
            .streams
            .create_with_priority(true, priority);
        // SAFETY: checked non-null; out-parameter of the caller.
        unsafe { put(stream, handle) }
    }

    /// The shim's devices have no multicast (`CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED` is 0),
    /// so every multicast call is `CUDA_ERROR_NOT_SUPPORTED`, as on such a GPU.
    fn cuMulticastCreate(handle: *mut u64, prop: *const c_void) {
        initialized()?;
        if handle.is_null() || prop.is_null() {
            return Err(INVALID_VALUE);
        }
        Err(NOT_SUPPORTED)
    }

    fn cuMulticastAddDevice(handle: u64, device: i32) {
        initialized()?.device(device)?;
        let _ = handle;
        Err(NOT_SUPPORTED)
    }

    fn cuMulticastBindMem(
        handle: u64,
        offset: usize,
        memory: u64,
        memory_offset: usize,
        size: usize,
        flags: u64,
    ) {
        initialized()?;
        let _ = (handle, offset, memory, memory_offset, size, flags);
        Err(NOT_SUPPORTED)
    }

    fn cuMulticastUnbind(handle: u64, device: i32, offset: usize, size: usize) {
        initialized()?.device(device)?;
        let _ = (handle, offset, size);
        Err(NOT_SUPPORTED)
    }

    fn cuMulticastGetGranularity(granularity: *mut usize, prop: *const c_void, option: u32) {
        initialized()?;
        if granularity.is_null() || prop.is_null() || option > 1 {
            return Err(INVALID_VALUE);
        }
        Err(NOT_SUPPORTED)
    }

    /// Writes `value` at `addr` once the stream's earlier work is done (a 4-byte memset in
    /// stream order); flags `CU_STREAM_WRITE_VALUE_DEFAULT` or `..._NO_MEMORY_BARRIER` (every
    /// write of the shim is ordered anyway).
    fn cuStreamWriteValue32_v2(stream: usize, addr: u64, value: u32, flags: u32) {
        if flags > 1 {
            return Err(INVALID_VALUE);
        }
        current()?.memset_2d(addr as usize, 0, value, 4, 1, 1, stream)
    }

    fn cuMemsetD2D8_v2(dst: u64, pitch: usize, value: u8, width: usize, height: usize) {
        current()?.memset_2d(dst as usize, pitch, value.into(), 1, width, height, 0)
    }

    fn cuMemsetD2D16_v2(dst: u64, pitch: usize, value: u16, width: usize, height: usize) {
        current()?.memset_2d(dst as usize, pitch, value.into(), 2, width, height, 0)
    }

    fn cuMemsetD2D32_v2(dst: u64, pitch: usize, value: u32, width: usize, height: usize) {
        current()?.memset_2d(dst as usize, pitch, value, 4, width, height, 0)
    }

    fn cuMemsetD2D8Async(dst: u64, pitch: usize, value: u8, width: usize, height: usize, stream: usize) {
        current()?.memset_2d(dst as usize, pitch, value.into(), 1, width, height, stream)
    }

    fn cuMemsetD2D16Async(dst: u64, pitch: usize, value: u16, width: usize, height: usize, stream: usize) {
        current()?.memset_2d(dst as usize, pitch, value.into(), 2, width, height, stream)
    }

    fn cuMemsetD2D32Async(dst: u64, pitch: usize, value: u32, width: usize, height: usize, stream: usize) {
        current()?.memset_2d(dst as usize, pitch, value, 4, width, height, stream)
    }

    /// 2 MiB (`CUDA_SHIM_VMM_GRANULARITY`), minimum and recommended.
    fn cuMemGetAllocationGranularity(granularity: *mut usize, prop: *const AllocationProp, option: u32) {
        let driver = initialized()?;
        // SAFETY: `prop` is null (rejected) or points to a CUmemAllocationProp.
        unsafe { check_prop(driver, prop) }?;
        if option > 1 {
            return Err(INVALID_VALUE);
        }
        // SAFETY: out-parameter contract of `put`.
        unsafe { put(granularity, driver.vmm.granularity()) }
    }

    fn cuMemAddressReserve(ptr: *mut u64, size: usize, alignment: usize, addr: u64, flags: u64) {
        let driver = initialized()?;
        if ptr.is_null() || flags != 0 {
            return Err(INVALID_VALUE);
        }
        let start = driver.vmm.reserve(size, alignment, addr as usize)?;
        // SAFETY: checked non-null; out-parameter of the caller.
        unsafe { put(ptr, start as u64) }
    }

    fn cuMemAddressFree(ptr: u64, size: usize) {
        initialized()?.vmm.free_reservation(ptr as usize, size)
    }

    /// Physical memory (a memfd) on the device of the location, charged to its capacity. Only
    /// `CU_MEM_HANDLE_TYPE_NONE` is supported (no export of handles).
    fn cuMemCreate(handle: *mut u64, size: usize, prop: *const AllocationProp, flags: u64) {
        let driver = initialized()?;
        // SAFETY: `prop` is null (rejected) or points to a CUmemAllocationProp.
        let device = unsafe { check_prop(driver, prop) }?;
        if handle.is_null() || flags != 0 {
            return Err(INVALID_VALUE);
        }
        let created = driver.vmm.create(size, device, driver)?;
        // SAFETY: checked non-null; out-parameter of the caller.
        unsafe { put(handle, created) }
    }

    fn cuMemRelease(handle: u64) {
        let driver = initialized()?;
        driver.vmm.release(handle, driver)
    }

    /// No allocation of the shim's is exportable (`cuMemCreate` takes handle type none only),
    /// and an allocation not created exportable to a type is `CUDA_ERROR_INVALID_VALUE` on
    /// CUDA too. The function exists because frameworks (PyTorch's driver table) look it up.
    fn cuMemExportToShareableHandle(shareable: *mut c_void, handle: u64, kind: u32, flags: u64) {
        initialized()?;
        let _ = (shareable, handle, kind, flags);
        Err(INVALID_VALUE)
    }

    /// The handle of the memory mapped at `addr`, which the caller releases
    /// (`cuMemRelease`); `CUDA_ERROR_INVALID_VALUE` for an address no `cuMemMap` mapped.
    fn cuMemRetainAllocationHandle(handle: *mut u64, addr: *mut c_void) {
        let driver = initialized()?;
        if handle.is_null() {
            return Err(INVALID_VALUE);
        }
        let retained = driver.vmm.retain(addr as usize)?;
        // SAFETY: checked non-null; out-parameter of the caller.
        unsafe { put(handle, retained) }
    }

    /// The properties `handle` was created with (pinned memory on its device or the host, no
    /// shareable handle type).
    fn cuMemGetAllocationPropertiesFromHandle(prop: *mut AllocationProp, handle: u64) {
        let driver = initialized()?;
        if prop.is_null() {
            return Err(INVALID_VALUE);
        }
        const LOCATION_DEVICE: u32 = 1;
        const LOCATION_HOST: u32 = 2;
        let (location_type, location_id) = match driver.vmm.location(handle)? {
            vmm::HOST => (LOCATION_HOST, 0),
            device => (LOCATION_DEVICE, device as i32),
        };
        let properties = AllocationProp {
            kind: 1,
            requested_handle_types: 0,
            location_type,
            location_id,
            win32_handle_meta_data: std::ptr::null_mut(),
            alloc_flags: [0; 8],
        };
        // SAFETY: checked non-null; the caller's CUmemAllocationProp to fill.
        unsafe { put(prop, properties) }
    }

    /// No shareable handle comes from the shim's allocations (see
    /// `cuMemExportToShareableHandle`): `CUDA_ERROR_NOT_SUPPORTED`.
    fn cuMemImportFromShareableHandle(handle: *mut u64, shareable: *mut c_void, kind: u32) {
        initialized()?;
        let _ = (handle, shareable, kind);
        Err(NOT_SUPPORTED)
    }

    fn cuMemMap(ptr: u64, size: usize, offset: usize, handle: u64, flags: u64) {
        let driver = initialized()?;
        if flags != 0 {
            return Err(INVALID_VALUE);
        }
        driver.vmm.map(ptr as usize, size, offset, handle)
    }

    /// Waits for all work submitted to every device first, as the memory may still be in use.
    fn cuMemUnmap(ptr: u64, size: usize) {
        initialized()?.unmap(ptr as usize, size)
    }

    /// Access of devices only (no host access to device mappings); the range is a run of whole
    /// mappings. Copies check the most permissive access any device was given.
    fn cuMemSetAccess(ptr: u64, size: usize, desc: *const AccessDesc, count: usize) {
        let driver = initialized()?;
        if desc.is_null() || count == 0 {
            return Err(INVALID_VALUE);
        }
        // SAFETY: `desc` holds `count` descriptors (the caller's contract).
        let descs = unsafe { std::slice::from_raw_parts(desc, count) };
        for d in descs {
            let device = check_location(driver, d.location_type, d.location_id)?;
            driver.vmm.set_access(ptr as usize, size, device, d.flags)?;
        }
        Ok(())
    }

    fn cuPointerGetAttribute(data: *mut c_void, attr: i32, ptr: u64) {
        let context = current()?;
        // SAFETY: `data` points to storage of the type the attribute documents.
        unsafe { pointer_attribute(context, data, attr, ptr as usize) }
    }

    /// Each attribute as `cuPointerGetAttribute` answers it, except that memory CUDA does not
    /// know, and an attribute that does not apply (the host address of device memory, another
    /// device's memory without peer access), get the attribute's null value instead of an
    /// error, as the driver API documents; an attribute the shim does not know is
    /// `CUDA_ERROR_INVALID_VALUE`. NVIDIA's runtime builds `cudaPointerGetAttributes` on it.
    fn cuPointerGetAttributes(count: u32, attributes: *const i32, data: *const *mut c_void, ptr: u64) {
        let context = current()?;
        if count == 0 {
            return Ok(());
        }
        if attributes.is_null() || data.is_null() {
            return Err(INVALID_VALUE);
        }
        // SAFETY: checked non-null; the caller passes `count` attributes and as many pointers.
        let (attributes, data) = unsafe {
            (
                std::slice::from_raw_parts(attributes, count as usize),
                std::slice::from_raw_parts(data, count as usize),
            )
        };
        for (&attr, &out) in attributes.iter().zip(data) {
            if out.is_null() {
                return Err(INVALID_VALUE);
            }
            // SAFETY (both): `out` points to storage of the type `attr` documents (the
            // caller's contract).
            if unsafe { pointer_attribute(context, out, attr, ptr as usize) }.is_err() {
                unsafe { null_pointer_attribute(out, attr) }?;
            }
        }
        Ok(())
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

    /// The priority is clamped to [greatest, least] = [-5, 0], as CUDA does; the stream keeps
    /// it, though the shim schedules every stream alike (each has a thread of its own).
    fn cuStreamCreateWithPriority(stream: *mut usize, flags: u32, priority: i32) {
        let context = current()?;
        if stream.is_null() || flags & !0x1 != 0 {
            return Err(INVALID_VALUE);
        }
        let priority = priority.clamp(GREATEST_PRIORITY, LEAST_PRIORITY);
        let handle = context.streams.create_with_priority(flags & 0x1 != 0, priority);
        // SAFETY: checked non-null; out-parameter of the caller.
        unsafe { put(stream, handle) }
    }

    /// 0 for the default streams.
    fn cuStreamGetPriority(stream: usize, priority: *mut i32) {
        let (_, value) = stream_properties(stream)?;
        // SAFETY: out-parameter contract of `put`.
        unsafe { put(priority, value) }
    }

    /// `CU_STREAM_NON_BLOCKING` or 0 (the default streams are blocking).
    fn cuStreamGetFlags(stream: usize, flags: *mut u32) {
        let (non_blocking, _) = stream_properties(stream)?;
        // SAFETY: out-parameter contract of `put`.
        unsafe { put(flags, u32::from(non_blocking)) }
    }

    /// `CU_STREAM_CAPTURE_STATUS_NONE`, `_ACTIVE` or `_INVALIDATED` (NVIDIA's runtime answers
    /// `cudaStreamIsCapturing` with it, which PyTorch's allocator asks before each `cudaMalloc`).
    fn cuStreamIsCapturing(stream: usize, status: *mut u32) {
        let info = stream_context(stream)?.capture_info(stream)?;
        // SAFETY: out-parameter contract of `put`.
        unsafe { put(status, info.status) }
    }

    /// Begins capturing `stream` into a new graph (`graph` module: what is captured, what is
    /// illegal meanwhile). The legacy stream cannot capture (`STREAM_CAPTURE_UNSUPPORTED`), a
    /// capturing stream cannot begin again (`ILLEGAL_STATE`).
    fn cuStreamBeginCapture_v2(stream: usize, mode: u32) {
        stream_context(stream)?.begin_capture(stream, mode)
    }

    /// Ends the capture `stream` began and returns its graph; NULL with the error when the
    /// capture was invalidated or left a forked stream unjoined (the capture ends either way).
    fn cuStreamEndCapture(stream: usize, graph: *mut usize) {
        if graph.is_null() {
            return Err(INVALID_VALUE);
        }
        let result = stream_context(stream)?.end_capture(stream);
        if matches!(result, Ok(_) | Err(STREAM_CAPTURE_INVALIDATED | STREAM_CAPTURE_UNJOINED)) {
            // SAFETY: checked non-null; out-parameter of the caller.
            unsafe { put(graph, result.unwrap_or(0)) }?;
        }
        result.map(drop)
    }

    /// The capture status and, while capturing, the capture's id, graph and the nodes the
    /// stream's next captured work will depend on (each output may be NULL).
    fn cuStreamGetCaptureInfo_v2(
        stream: usize,
        status: *mut u32,
        id: *mut u64,
        graph: *mut usize,
        dependencies: *mut *const usize,
        count: *mut usize,
    ) {
        let info = stream_context(stream)?.capture_info(stream)?;
        // SAFETY: out-parameter contract of `put`.
        unsafe { put(status, info.status) }?;
        if info.status != 0 {
            // SAFETY: each output is NULL (skipped) or the caller's out-parameter.
            unsafe {
                put_optional(id, info.id);
                put_optional(graph, info.graph);
                put_optional(dependencies, info.frontier.0);
                put_optional(count, info.frontier.1);
            }
        }
        Ok(())
    }

    /// As `_v2`; no edge carries data on the shim, so `edgeData_out` is NULL.
    fn cuStreamGetCaptureInfo_v3(
        stream: usize,
        status: *mut u32,
        id: *mut u64,
        graph: *mut usize,
        dependencies: *mut *const usize,
        edge_data: *mut *const c_void,
        count: *mut usize,
    ) {
        // SAFETY: the caller's arguments, forwarded.
        code_result(unsafe { cuStreamGetCaptureInfo_v2(stream, status, id, graph, dependencies, count) })?;
        // SAFETY: NULL (skipped) or the caller's out-parameter.
        unsafe { put_optional(edge_data, std::ptr::null()) };
        Ok(())
    }

    /// The capturing stream's next work follows `dependencies` too (flags 0,
    /// `CU_STREAM_ADD_CAPTURE_DEPENDENCIES`) or instead of its current ones (1,
    /// `CU_STREAM_SET_CAPTURE_DEPENDENCIES`).
    fn cuStreamUpdateCaptureDependencies(stream: usize, dependencies: *mut usize, count: usize, flags: u32) {
        if flags > 1 {
            return Err(INVALID_VALUE);
        }
        // SAFETY: null (rejected unless empty) or `count` handles.
        let deps = unsafe { node_list(dependencies, count) }?;
        stream_context(stream)?.update_capture_dependencies(stream, deps, flags == 1)
    }

    /// CUDA 12.3's, with edge data: only default edges (NULL or all zero) are supported.
    fn cuStreamUpdateCaptureDependencies_v2(
        stream: usize,
        dependencies: *mut usize,
        edge_data: *const [u8; 8],
        count: usize,
        flags: u32,
    ) {
        // SAFETY: null or `count` entries, by the caller's contract.
        unsafe { default_edges(edge_data, count) }?;
        // SAFETY: the caller's arguments, forwarded.
        code_result(unsafe { cuStreamUpdateCaptureDependencies(stream, dependencies, count, flags) })
    }

    /// Swaps the calling thread's capture interaction mode (global, thread-local, relaxed).
    fn cuThreadExchangeStreamCaptureMode(mode: *mut u32) {
        // SAFETY: null (rejected) or the caller's in/out parameter.
        let requested = unsafe { mode.as_ref() }.copied().ok_or(INVALID_VALUE)?;
        let previous = crate::graph::exchange_mode(requested)?;
        // SAFETY: checked non-null above.
        unsafe { put(mode, previous) }
    }

    /// An empty graph; `flags` must be 0.
    fn cuGraphCreate(graph: *mut usize, flags: u32) {
        let driver = initialized()?;
        if graph.is_null() || flags != 0 {
            return Err(INVALID_VALUE);
        }
        // SAFETY: checked non-null; out-parameter of the caller.
        unsafe { put(graph, driver.graphs.create()) }
    }

    fn cuGraphDestroy(graph: usize) {
        initialized()?.graphs.destroy(graph)
    }

    /// The graph's nodes: with `nodes` NULL their number, otherwise up to `*count` of them
    /// and the number written.
    fn cuGraphGetNodes(graph: usize, nodes: *mut usize, count: *mut usize) {
        let all = initialized()?.graphs.nodes(graph)?;
        if count.is_null() {
            return Err(INVALID_VALUE);
        }
        if !nodes.is_null() {
            // SAFETY: `count` is non-null and the caller's in/out parameter.
            let room = unsafe { *count };
            for (i, node) in all.iter().take(room).enumerate() {
                // SAFETY: `nodes` holds `room` handles, as the caller promises.
                unsafe { nodes.add(i).write(*node) };
            }
            // SAFETY: as above.
            return unsafe { put(count, all.len().min(room)) };
        }
        // SAFETY: checked non-null; out-parameter of the caller.
        unsafe { put(count, all.len()) }
    }

    /// An executable graph of `graph`'s nodes. Auto-free on launch (1) frees what a launch
    /// allocated and left unfreed before the next one (with device launch, 4, it is
    /// `INVALID_VALUE`, as on CUDA); the other flags (upload, device launch, priority) change
    /// nothing on the shim; unknown bits are `INVALID_VALUE`.
    fn cuGraphInstantiateWithFlags(exec: *mut usize, graph: usize, flags: u64) {
        // SAFETY: the caller's out-parameter, forwarded.
        unsafe { instantiate_graph(exec, graph, flags) }
    }

    /// As `cuGraphInstantiateWithFlags`, with the result in `params` (`result_out`: success, or
    /// `CUDA_GRAPH_INSTANTIATE_ERROR` and the error; `hErrNode_out` is always NULL); with
    /// `CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD` the upload stream is checked (there is nothing to
    /// upload on the shim).
    fn cuGraphInstantiateWithParams(exec: *mut usize, graph: usize, params: *mut InstantiateParams) {
        const FLAG_UPLOAD: u64 = 0x2;
        // SAFETY: null (rejected) or the caller's parameters.
        let p = unsafe { params.as_mut() }.ok_or(INVALID_VALUE)?;
        if p.flags & FLAG_UPLOAD != 0 {
            stream_context(p.upload_stream)?.check_stream(p.upload_stream)?;
        }
        // SAFETY: the caller's out-parameter, forwarded.
        let result = code_result(unsafe { cuGraphInstantiateWithFlags(exec, graph, p.flags) });
        p.error_node = 0;
        p.result = u32::from(result.is_err());
        result
    }

    /// CUDA 11's instantiation (what `cuGetProcAddress` gives for "cuGraphInstantiate" from
    /// 11000 to 11999; since CUDA 12 declared only for `__CUDA_API_VERSION_INTERNAL`): as
    /// `cuGraphInstantiateWithFlags` with no flags. CUDA "may" name a node contributing to an
    /// error in `phErrorNode`: the shim names none (NULL on an error, as
    /// `cuGraphInstantiateWithParams`'s `hErrNode_out`), and its diagnostic message is empty
    /// (`logBuffer[0]` is NUL whenever `bufferSize` > 0).
    fn cuGraphInstantiate_v2(
        exec: *mut usize,
        graph: usize,
        error_node: *mut usize,
        log: *mut c_char,
        log_size: usize,
    ) {
        // Not through the export, so that an interposer sees this call as itself alone, as on
        // NVIDIA's driver.
        // SAFETY: the caller's out-parameter, forwarded.
        let result = unsafe { instantiate_graph(exec, graph, 0) };
        if result.is_err() && !error_node.is_null() {
            // SAFETY: checked non-null; out-parameter of the caller.
            unsafe { error_node.write(0) };
        }
        if !log.is_null() && log_size > 0 {
            // SAFETY: checked non-null; the caller's buffer of `log_size` > 0 bytes.
            unsafe { log.write(0) };
        }
        result
    }

    /// Runs the exec graph's nodes on `stream`, after the stream's earlier work and the exec's
    /// previous launch; later work of the stream follows all of them.
    fn cuGraphLaunch(exec: usize, stream: usize) {
        stream_context(stream)?.launch_graph(exec, stream)
    }

    /// Replaces `exec`'s operations with `graph`'s, which must have the same topology, node
    /// kinds and kernel functions (see `graph::Graphs::update`); otherwise
    /// `CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE`, `exec` unchanged, and `info` says why.
    fn cuGraphExecUpdate_v2(exec: usize, graph: usize, info: *mut ExecUpdateResultInfo) {
        if info.is_null() {
            return Err(INVALID_VALUE);
        }
        let outcome = initialized()?.graphs.update(exec, graph)?;
        let (result, node) = outcome.err().unwrap_or((0, 0));
        let answer = ExecUpdateResultInfo { result, error_node: node, error_from_node: 0 };
        // SAFETY: checked non-null; out-parameter of the caller.
        unsafe { put(info, answer) }?;
        match result {
            0 => Ok(()),
            _ => Err(GRAPH_EXEC_UPDATE_FAILURE),
        }
    }

    /// Nothing to upload on the shim (device memory is host memory): checks the handles.
    fn cuGraphUpload(exec: usize, stream: usize) {
        stream_context(stream)?.check_stream(stream)?;
        initialized()?.graphs.check_exec(exec)
    }

    fn cuGraphExecDestroy(exec: usize) {
        initialized()?.graphs.exec_destroy(exec)
    }

    /// A kernel node: the launch `params` describe, its arguments copied now (as a launch
    /// copies them).
    fn cuGraphAddKernelNode_v2(
        node: *mut usize,
        graph: usize,
        dependencies: *const usize,
        count: usize,
        params: *const KernelNodeParams,
    ) {
        // SAFETY: the caller's parameters, as cuGraphAddKernelNode documents them.
        let work = unsafe { kernel_node(params) }?;
        let tally = Some((&current()?.device.stats.kernel_launches, 1));
        // SAFETY: the caller's node and dependencies.
        unsafe { add_node(node, graph, dependencies, count, crate::graph::Op::Work(work, tally)) }
    }

    /// A memset node on `context` (NULL: the current one), checked as `cuMemsetD2D*Async`.
    fn cuGraphAddMemsetNode(
        node: *mut usize,
        graph: usize,
        dependencies: *const usize,
        count: usize,
        params: *const MemsetNodeParams,
        context: usize,
    ) {
        let context = context_argument(context)?;
        // SAFETY: null (rejected) or the caller's parameters.
        let p = unsafe { params.as_ref() }.ok_or(INVALID_VALUE)?;
        if !matches!(p.element_size, 1 | 2 | 4) {
            return Err(INVALID_VALUE);
        }
        let (element, width, height) = (p.element_size as usize, p.width, p.height);
        let work = context.memset_work(p.dst as usize, p.pitch, p.value, element, width, height)?;
        let op = match work {
            Some((work, tally)) => crate::graph::Op::Work(work, tally),
            None => return Err(INVALID_VALUE),
        };
        // SAFETY: the caller's node and dependencies.
        unsafe { add_node(node, graph, dependencies, count, op) }
    }

    /// A host node: `fn(userData)` on the launch stream's thread.
    fn cuGraphAddHostNode(
        node: *mut usize,
        graph: usize,
        dependencies: *const usize,
        count: usize,
        params: *const HostNodeParams,
    ) {
        // SAFETY: null (rejected) or the caller's parameters.
        let p = unsafe { params.as_ref() }.ok_or(INVALID_VALUE)?;
        let func = p.function.ok_or(INVALID_VALUE)?;
        let call = device::HostCall::Function { func, data: p.data as usize };
        let op = crate::graph::Op::Work(device::Work::Host(call), None);
        // SAFETY: the caller's node and dependencies.
        unsafe { add_node(node, graph, dependencies, count, op) }
    }

    /// A node that does nothing (it orders its dependencies before its followers).
    fn cuGraphAddEmptyNode(node: *mut usize, graph: usize, dependencies: *const usize, count: usize) {
        let op = crate::graph::Op::Work(device::Work::Marker, None);
        // SAFETY: the caller's node and dependencies.
        unsafe { add_node(node, graph, dependencies, count, op) }
    }

    /// A memcpy node on `context` (NULL: the current one), checked as `cuMemcpy2DAsync`; it
    /// reads its source when it runs. One slice only (see `Memcpy3d::as_2d`); an empty copy is
    /// `INVALID_VALUE`.
    fn cuGraphAddMemcpyNode(
        node: *mut usize,
        graph: usize,
        dependencies: *const usize,
        count: usize,
        copy: *const Memcpy3d,
        context: usize,
    ) {
        let context = context_argument(context)?;
        // SAFETY: null (rejected) or the caller's CUDA_MEMCPY3D.
        let copy = unsafe { copy.as_ref() }.ok_or(INVALID_VALUE)?.as_2d()?;
        let (rect, declared) = copy_rect(&copy)?;
        let (work, tally) = context.copy_work(rect, 4, declared, false)?.ok_or(INVALID_VALUE)?;
        let op = crate::graph::Op::Work(work, tally);
        // SAFETY: the caller's node and dependencies.
        unsafe { add_node(node, graph, dependencies, count, op) }
    }

    /// Records `event` when the node runs (as `cuEventRecord` on the launch stream).
    fn cuGraphAddEventRecordNode(
        node: *mut usize,
        graph: usize,
        dependencies: *const usize,
        count: usize,
        event: usize,
    ) {
        initialized()?.event(event)?;
        // SAFETY: the caller's node and dependencies.
        unsafe { add_node(node, graph, dependencies, count, crate::graph::Op::EventRecord(event)) }
    }

    /// Waits for `event`'s last record when the graph is launched.
    fn cuGraphAddEventWaitNode(
        node: *mut usize,
        graph: usize,
        dependencies: *const usize,
        count: usize,
        event: usize,
    ) {
        initialized()?.event(event)?;
        // SAFETY: the caller's node and dependencies.
        unsafe { add_node(node, graph, dependencies, count, crate::graph::Op::EventWait(event)) }
    }

    /// A node running a copy of `child` (later changes to `child` do not affect it).
    fn cuGraphAddChildGraphNode(
        node: *mut usize,
        graph: usize,
        dependencies: *const usize,
        count: usize,
        child: usize,
    ) {
        let copy = initialized()?.graphs.copy(child)?;
        // SAFETY: the caller's node and dependencies.
        unsafe { add_node(node, graph, dependencies, count, crate::graph::Op::Child(copy)) }
    }

    /// An alloc node of `bytesize` bytes of the device `poolProps.location` names: pinned (the
    /// only type CUDA allows), exported by no handle type, other devices' access as
    /// `accessDescs` say (not checked on the shim: peers reach every device's memory). The
    /// allocation's address, fixed from now on, is written to `dptr`.
    fn cuGraphAddMemAllocNode(
        node: *mut usize,
        graph: usize,
        dependencies: *const usize,
        count: usize,
        params: *mut MemAllocNodeParams,
    ) {
        const ALLOCATION_PINNED: u32 = 1;
        let driver = initialized()?;
        // SAFETY: null (rejected) or the caller's parameters.
        let p = unsafe { params.as_mut() }.ok_or(INVALID_VALUE)?;
        let props = &p.pool_props;
        if node.is_null() || props.alloc_type != ALLOCATION_PINNED || props.handle_types != 0 {
            return Err(INVALID_VALUE);
        }
        let ordinal = check_location(driver, props.location_type, props.location_id)?;
        if p.access_count > driver.contexts.len() || (p.access.is_null() && p.access_count > 0) {
            return Err(INVALID_VALUE);
        }
        if p.access_count > 0 {
            // SAFETY: non-null, `access_count` descriptors by the caller's contract.
            let descs = unsafe { std::slice::from_raw_parts(p.access, p.access_count) };
            for d in descs {
                check_location(driver, d.location_type, d.location_id)?;
                if d.flags > 3 {
                    return Err(INVALID_VALUE);
                }
            }
        }
        // SAFETY: null (rejected unless empty) or `count` handles.
        let deps = unsafe { node_list(dependencies, count) }?;
        let device = driver.device(ordinal as i32)?;
        let (handle, addr) = driver.graphs.add_alloc(graph, deps, device, p.bytesize)?;
        p.dptr = addr as u64;
        // SAFETY: checked non-null; out-parameter of the caller.
        unsafe { put(node, handle) }
    }

    /// The alloc node's parameters: its device, size and address (no access descriptors: the
    /// shim keeps none).
    fn cuGraphMemAllocNodeGetParams(node: usize, params: *mut MemAllocNodeParams) {
        const ALLOCATION_PINNED: u32 = 1;
        const LOCATION_DEVICE: u32 = 1;
        let (addr, size, ordinal) = initialized()?.graphs.alloc_params(node)?;
        let mut pool_props = PoolProps::zeroed();
        pool_props.alloc_type = ALLOCATION_PINNED;
        pool_props.location_type = LOCATION_DEVICE;
        pool_props.location_id = ordinal as i32;
        let answer = MemAllocNodeParams {
            pool_props,
            access: std::ptr::null(),
            access_count: 0,
            bytesize: size,
            dptr: addr as u64,
        };
        // SAFETY: null (rejected) or the caller's out-parameter.
        unsafe { put(params, answer) }
    }

    /// A free node of the graph allocation starting at `dptr`: `INVALID_VALUE` for an address
    /// no alloc node returned, or one a graph frees already.
    fn cuGraphAddMemFreeNode(
        node: *mut usize,
        graph: usize,
        dependencies: *const usize,
        count: usize,
        dptr: u64,
    ) {
        let driver = initialized()?;
        if node.is_null() {
            return Err(INVALID_VALUE);
        }
        // SAFETY: null (rejected unless empty) or `count` handles.
        let deps = unsafe { node_list(dependencies, count) }?;
        let handle = driver.graphs.add_free(graph, deps, dptr as usize)?;
        // SAFETY: checked non-null; out-parameter of the caller.
        unsafe { put(node, handle) }
    }

    /// The address the free node frees.
    fn cuGraphMemFreeNodeGetParams(node: usize, dptr: *mut u64) {
        let addr = initialized()?.graphs.free_params(node)?;
        // SAFETY: null (rejected) or the caller's out-parameter.
        unsafe { put(dptr, addr as u64) }
    }

    /// The shim keeps a graph allocation's memory only while a graph or executable graph that
    /// can allocate it exists (or it is live), so nothing unused is left to trim.
    fn cuDeviceGraphMemTrim(device: i32) {
        initialized()?.device(device)?;
        Ok(())
    }

    /// Graph memory of the device (`CUgraphMem_attribute`, each a `cuuint64_t`): bytes of live
    /// graph allocations and of all of them (the shim's "reserved"), current and high-water.
    fn cuDeviceGetGraphMemAttribute(device: i32, attr: u32, value: *mut c_void) {
        let driver = initialized()?;
        let ordinal = driver.device(device)?.ordinal;
        let answer = driver.graphs.memory_attribute(ordinal, attr)?;
        // SAFETY: null (rejected) or the caller's `cuuint64_t`.
        unsafe { put(value.cast::<u64>(), answer) }
    }

    /// Resets a high-water mark (`…_USED_MEM_HIGH`, `…_RESERVED_MEM_HIGH`) to zero, the only
    /// value allowed.
    fn cuDeviceSetGraphMemAttribute(device: i32, attr: u32, value: *mut c_void) {
        let driver = initialized()?;
        let ordinal = driver.device(device)?.ordinal;
        if value.is_null() {
            return Err(INVALID_VALUE);
        }
        // SAFETY: non-null, a `cuuint64_t` by the attribute's contract.
        let value = unsafe { value.cast::<u64>().read_unaligned() };
        driver.graphs.reset_high(ordinal, attr, value)
    }

    /// `to[i]` follows `from[i]`, for each of the `count` pairs.
    fn cuGraphAddDependencies(graph: usize, from: *const usize, to: *const usize, count: usize) {
        // SAFETY: each array is null (rejected unless empty) or holds `count` handles.
        let (from, to) = unsafe { (node_list(from, count)?, node_list(to, count)?) };
        initialized()?.graphs.add_dependencies(graph, from, to)
    }

    /// CUDA 12.3's, with edge data: only default edges (NULL or all zero) are supported.
    fn cuGraphAddDependencies_v2(
        graph: usize,
        from: *const usize,
        to: *const usize,
        edge_data: *const [u8; 8],
        count: usize,
    ) {
        // SAFETY: null or `count` entries, by the caller's contract.
        unsafe { default_edges(edge_data, count) }?;
        // SAFETY: the caller's arguments, forwarded.
        code_result(unsafe { cuGraphAddDependencies(graph, from, to, count) })
    }

    /// The kernel node `node` of `exec` launches what `params` describe from the next launch
    /// of `exec` on (its arguments copied now).
    fn cuGraphExecKernelNodeSetParams_v2(exec: usize, node: usize, params: *const KernelNodeParams) {
        // SAFETY: the caller's parameters, as the function documents them.
        let work = unsafe { kernel_node(params) }?;
        initialized()?.graphs.set_kernel(exec, node, work)
    }

    /// Writes the graph in Graphviz's language to `path`; `flags` select details NVIDIA's
    /// driver prints, the shim prints each node's kind and its dependencies whatever they are.
    fn cuGraphDebugDotPrint(graph: usize, path: *const c_char, _flags: u32) {
        let driver = initialized()?;
        if path.is_null() {
            return Err(INVALID_VALUE);
        }
        // SAFETY: non-null; the caller passes a NUL-terminated path.
        let path = unsafe { CStr::from_ptr(path) }.to_str().map_err(|_| INVALID_VALUE)?;
        crate::graph::write_file(path, &driver.graphs.dot(graph)?)
    }

    /// `fn(userData)` runs on the stream's thread once the work before it has completed; work
    /// after it waits for it to return.
    fn cuLaunchHostFunc(stream: usize, func: Option<unsafe extern "C" fn(*mut c_void)>, data: *mut c_void) {
        let context = current()?;
        let func = func.ok_or(INVALID_VALUE)?;
        context.launch_host(stream, device::HostCall::Function { func, data: data as usize })
    }

    /// CUDA 13.1's `cuLaunchHostFunc` (`cuGetProcAddress` at 13010 and later): the same call,
    /// with how the stream's thread waits for it (`CUhostTaskSyncMode`). A simulated stream's
    /// thread blocks either way, which only changes how busy the CPU is while it waits.
    fn cuLaunchHostFunc_v2(
        stream: usize,
        func: Option<unsafe extern "C" fn(*mut c_void)>,
        data: *mut c_void,
        sync_mode: u32,
    ) {
        if sync_mode != HOST_TASK_BLOCKING && sync_mode != HOST_TASK_SPINWAIT {
            return Err(INVALID_VALUE);
        }
        // SAFETY: the caller's arguments, forwarded.
        code_result(unsafe { cuLaunchHostFunc(stream, func, data) })
    }

    /// Like `cuLaunchHostFunc`, with the stream and its status; flags must be 0.
    fn cuStreamAddCallback(
        stream: usize,
        callback: Option<unsafe extern "C" fn(usize, u32, *mut c_void)>,
        data: *mut c_void,
        flags: u32,
    ) {
        let context = current()?;
        let func = callback.ok_or(INVALID_VALUE)?;
        if flags != 0 {
            return Err(INVALID_VALUE);
        }
        let call = device::HostCall::Callback { func, stream, data: data as usize };
        context.launch_host(stream, call)
    }

    fn cuStreamDestroy_v2(stream: usize) {
        current()?.stream_destroy(stream)
    }

    fn cuStreamSynchronize(stream: usize) {
        current()?.stream_synchronize(stream)
    }

    fn cuStreamQuery(stream: usize) {
        current()?.stream_query(stream)
    }

    /// `CU_EVENT_WAIT_EXTERNAL` (1) makes an event wait node during capture; outside capture
    /// both flags wait alike.
    fn cuStreamWaitEvent(stream: usize, event: usize, flags: u32) {
        if flags > 1 {
            return Err(INVALID_VALUE);
        }
        current()?.stream_wait_event(stream, event, flags == 1)
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
        current()?.event_record(event, stream, false)
    }

    /// `CU_EVENT_RECORD_EXTERNAL` makes an event record node during capture; outside capture
    /// both flags record as `cuEventRecord`.
    fn cuEventRecordWithFlags(event: usize, stream: usize, flags: u32) {
        let context = current()?;
        if flags > 1 {
            return Err(INVALID_VALUE);
        }
        context.event_record(event, stream, flags == 1)
    }

    /// Page-locks ordinary host memory for the current device: afterwards copies treat it as
    /// page-locked and it is mapped at its host address (unified addressing). `IOMEMORY` and
    /// `READ_ONLY` are not supported (the device's attributes say so).
    fn cuMemHostRegister_v2(p: *mut c_void, size: usize, flags: u32) {
        const IOMEMORY: u32 = 0x4;
        const READ_ONLY: u32 = 0x8;
        let context = current()?;
        if p.is_null() || size == 0 || flags & !0xF != 0 {
            return Err(INVALID_VALUE);
        }
        if flags & (IOMEMORY | READ_ONLY) != 0 {
            return Err(NOT_SUPPORTED);
        }
        initialized()?.register_host(p as usize, size, context.ordinal)
    }

    fn cuMemHostUnregister(p: *mut c_void) {
        current()?;
        if p.is_null() {
            return Err(INVALID_VALUE);
        }
        initialized()?.unregister_host(p as usize)
    }

    /// A handle naming the `cuMemAlloc` block containing `dptr` (see [`IpcHandle`]).
    fn cuIpcGetMemHandle(handle: *mut IpcHandle, dptr: u64) {
        current()?;
        let (start, size, device) = initialized()?.ipc_block(dptr as usize)?;
        // SAFETY: out-parameter contract of `put`.
        unsafe { put(handle, IpcHandle::new(IPC_MEMORY, start, size, device)) }
    }

    /// Opening a handle of this process is `CUDA_ERROR_INVALID_CONTEXT`, as on CUDA; device
    /// memory is private to its process on the shim, so another process's handle is
    /// `CUDA_ERROR_NOT_SUPPORTED`.
    fn cuIpcOpenMemHandle_v2(dptr: *mut u64, handle: IpcHandle, flags: u32) {
        current()?;
        if dptr.is_null() || flags != IPC_MEM_LAZY_ENABLE_PEER_ACCESS {
            return Err(INVALID_VALUE);
        }
        handle.decode(IPC_MEMORY)?;
        Err(INVALID_CONTEXT)
    }

    /// No handle can be opened on the shim, so no pointer can be closed.
    fn cuIpcCloseMemHandle(dptr: u64) {
        current()?;
        let _ = dptr;
        Err(INVALID_VALUE)
    }

    /// The event must have been created with `CU_EVENT_INTERPROCESS`.
    fn cuIpcGetEventHandle(handle: *mut IpcHandle, event: usize) {
        current()?;
        initialized()?.ipc_event(event)?;
        // SAFETY: out-parameter contract of `put`.
        unsafe { put(handle, IpcHandle::new(IPC_EVENT, event, 0, 0)) }
    }

    /// Within the process: a new event of the current context sharing the original's records
    /// (a wait on either waits for the last record of both). Another process's handle is
    /// `CUDA_ERROR_NOT_SUPPORTED`.
    fn cuIpcOpenEventHandle(event: *mut usize, handle: IpcHandle) {
        let context = current()?;
        if event.is_null() {
            return Err(INVALID_VALUE);
        }
        let (original, _, _) = handle.decode(IPC_EVENT)?;
        let opened = initialized()?.open_event(original, context.ordinal)?;
        // SAFETY: checked non-null; out-parameter of the caller.
        unsafe { put(event, opened) }
    }

    /// An event of any device.
    fn cuEventSynchronize(event: usize) {
        current()?;
        initialized()?.event_synchronize(event)
    }

    /// An event of any device.
    fn cuEventQuery(event: usize) {
        current()?;
        initialized()?.event_query(event)
    }

    /// Both events of one device (`CUDA_ERROR_INVALID_HANDLE` otherwise).
    fn cuEventElapsedTime(ms: *mut f32, start: usize, end: usize) {
        current()?;
        if ms.is_null() {
            return Err(INVALID_VALUE);
        }
        let elapsed = initialized()?.event_elapsed(start, end)?;
        // SAFETY: checked non-null; out-parameter of the caller.
        unsafe { put(ms, elapsed) }
    }

    /// CUDA 12.8's variant (what `cuGetProcAddress` gives from 12080 on): the same on the shim.
    fn cuEventElapsedTime_v2(ms: *mut f32, start: usize, end: usize) {
        // SAFETY: the caller's arguments, forwarded unchanged.
        code_result(unsafe { cuEventElapsedTime(ms, start, end) })
    }

    fn cuEventDestroy_v2(event: usize) {
        current()?;
        initialized()?.event_destroy(event)
    }

    fn cuLaunchKernel(
        function: usize,
        grid_x: u32,
        grid_y: u32,
        grid_z: u32,
        block_x: u32,
        block_y: u32,
        block_z: u32,
        shared_mem: u32,
        stream: usize,
        params: *mut *mut c_void,
        extra: *mut *mut c_void,
    ) {
        let launch = Launch {
            grid: [grid_x, grid_y, grid_z],
            block: [block_x, block_y, block_z],
            shared: shared_mem,
            stream,
            cooperative: false,
        };
        // SAFETY: the caller's kernelParams/extra, as cuLaunchKernel documents them.
        unsafe { launch_kernel(function, launch, params, extra) }
    }

    /// Launch attributes are accepted and ignored (as by the runtime's cudaLaunchKernelExC).
    fn cuLaunchKernelEx(
        config: *const LaunchConfig,
        function: usize,
        params: *mut *mut c_void,
        extra: *mut *mut c_void,
    ) {
        current()?;
        // SAFETY: `config` is null (rejected) or points to a CUlaunchConfig.
        let config = unsafe { config.as_ref() }.ok_or(INVALID_VALUE)?;
        if config.num_attrs > 0 && config.attrs.is_null() {
            return Err(INVALID_VALUE);
        }
        let launch = Launch {
            grid: config.grid,
            block: config.block,
            shared: config.shared_mem,
            stream: config.stream,
            cooperative: false,
        };
        // SAFETY: the caller's kernelParams/extra, as cuLaunchKernelEx documents them.
        unsafe { launch_kernel(function, launch, params, extra) }
    }

    /// All blocks must be able to be resident at once: at most
    /// min(max blocks per SM, max threads per SM / warp-rounded block size) × SMs blocks, else
    /// `CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE` (the shim has no registers or shared memory to
    /// limit occupancy further).
    fn cuLaunchCooperativeKernel(
        function: usize,
        grid_x: u32,
        grid_y: u32,
        grid_z: u32,
        block_x: u32,
        block_y: u32,
        block_z: u32,
        shared_mem: u32,
        stream: usize,
        params: *mut *mut c_void,
    ) {
        let launch = Launch {
            grid: [grid_x, grid_y, grid_z],
            block: [block_x, block_y, block_z],
            shared: shared_mem,
            stream,
            cooperative: true,
        };
        // SAFETY: the caller's kernelParams, as cuLaunchCooperativeKernel documents them.
        unsafe { launch_kernel(function, launch, params, std::ptr::null_mut()) }
    }

    fn cuFuncGetParamInfo(function: usize, index: usize, offset: *mut usize, size: *mut usize) {
        let driver = initialized()?;
        let layout = driver.functions.by_handle(function)?.layout();
        let param = layout.params.get(index).ok_or(INVALID_VALUE)?;
        // SAFETY: out-parameter contract of `put`, for both.
        unsafe {
            put(offset, param.offset)?;
            put(size, param.size)
        }
    }

    /// `CUfunction_attribute` 0-9 (a host function has no registers, shared or local memory of
    /// its own: the values of `cudaFuncGetAttributes`, which reads them here).
    fn cuFuncGetAttribute(value: *mut i32, attr: u32, function: usize) {
        let driver = initialized()?;
        driver.functions.by_handle(function)?;
        let device = current().map_or(0, |c| c.ordinal as i32);
        let [max_dynamic, carveout] = driver.function_attributes(function);
        let v = match attr {
            0 => attribute(1, device)?,
            1..=3 => 0,
            4 => 32,
            5 | 6 => 80,
            7 => 0,
            8 => max_dynamic,
            9 => carveout,
            10..=15 => 0,
            _ => return Err(INVALID_VALUE),
        };
        // SAFETY: out-parameter contract of `put`.
        unsafe { put(value, v) }
    }

    /// Max dynamic shared memory up to the opt-in limit (163 KiB), carveout -1..=100; cluster
    /// attributes do not exist on this compute capability 8.0 device (`NOT_SUPPORTED`).
    fn cuFuncSetAttribute(function: usize, attr: u32, value: i32) {
        let driver = initialized()?;
        driver.functions.by_handle(function)?;
        let device = current().map_or(0, |c| c.ordinal as i32);
        match attr {
            8 if (0..=attribute(97, device)?).contains(&value) => {
                driver.set_function_attribute(function, 0, value)
            }
            9 if (-1..=100).contains(&value) => driver.set_function_attribute(function, 1, value),
            8 | 9 => return Err(INVALID_VALUE),
            10..=15 => return Err(NOT_SUPPORTED),
            _ => return Err(INVALID_VALUE),
        }
        Ok(())
    }

    /// `cuFuncGetAttribute` of the kernel's function (a `CUkernel` is one: see
    /// `cuLibraryGetKernel`) on a valid device: attributes are the same on every device here.
    fn cuKernelGetAttribute(value: *mut i32, attr: u32, kernel: usize, device: i32) {
        initialized()?.device(device)?;
        // SAFETY: forwarded arguments of the same contract.
        code_result(unsafe { cuFuncGetAttribute(value, attr, kernel) })
    }

    /// `cuFuncSetAttribute` of the kernel's function, for every device (CUDA sets it for
    /// `device` only; the shim keeps one value per function).
    fn cuKernelSetAttribute(attr: u32, value: i32, kernel: usize, device: i32) {
        initialized()?.device(device)?;
        // SAFETY: forwarded arguments of the same contract.
        code_result(unsafe { cuFuncSetAttribute(kernel, attr, value) })
    }

    /// Blocks of `block_size` threads resident on one SM: limited by blocks, threads and
    /// registers (32 per thread) per SM and by shared memory (dynamic plus 1 KiB reserved per
    /// block); a block larger than the function allows has 0. Flags: 0 or
    /// `CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE` (1).
    fn cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
        blocks: *mut i32,
        function: usize,
        block_size: i32,
        dynamic_smem: usize,
        flags: u32,
    ) {
        let driver = initialized()?;
        driver.functions.by_handle(function)?;
        if blocks.is_null() || flags > 1 || block_size <= 0 {
            return Err(INVALID_VALUE);
        }
        let device = current().map_or(0, |c| c.ordinal as i32);
        let n = occupancy(device, block_size as u64, dynamic_smem as u64)?;
        // SAFETY: checked non-null; out-parameter of the caller.
        unsafe { put(blocks, n as i32) }
    }

    fn cuFuncGetName(name: *mut *const c_char, function: usize) {
        let driver = initialized()?;
        let function = driver.functions.by_handle(function)?;
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
        let driver = init()?;
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
            body: Some(Body::Host(unsafe {
                std::mem::transmute::<*const c_void, crate::kernel::KernelFn>(host)
            })),
            params: pack_offsets(sizes)?,
            simulated: Duration::from_nanos(simulated_ns),
        };
        driver.functions.register(host as usize, layout);
        Ok(())
    }

    /// Shim-only: records the device name of a host stub (`__cudaRegisterFunction`).
    fn cuShimRegisterFunctionName(host: *const c_void, name: *const c_char) {
        let driver = init()?;
        if host.is_null() || name.is_null() {
            return Err(INVALID_VALUE);
        }
        // SAFETY: `name` is NUL-terminated.
        let name = unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned();
        driver.functions.name(host as usize, name);
        Ok(())
    }

    /// Shim-only: loads a fatbinary registered by nvcc's startup code (`__cudaRegisterFatBinary`)
    /// for the devices' compute capability. No context is needed: registration runs before
    /// `main`, and NVIDIA's runtime loads such modules into every context it makes.
    fn cuShimLoadFatBinary(module: *mut usize, image: *const c_void) {
        let driver = init()?;
        if image.is_null() {
            return Err(INVALID_VALUE);
        }
        // SAFETY: `image` is what nvcc's registration code handed the runtime.
        let loaded = unsafe { Module::load(image as *const u8, driver.config.compute_capability) }?;
        // SAFETY: out-parameter contract of `put`.
        unsafe { put(module, loaded.handle()) }
    }

    /// Shim-only: binds host stub `host` (`__cudaRegisterFunction`) to kernel `name` of a module
    /// of `cuShimLoadFatBinary`. A kernel the module does not have keeps only its name, as before
    /// a body is registered with `cudaShimRegisterKernel`, which replaces the PTX either way.
    fn cuShimBindFunction(host: *const c_void, module: usize, name: *const c_char) {
        let driver = init()?;
        if host.is_null() || name.is_null() {
            return Err(INVALID_VALUE);
        }
        let module = Module::from_handle(module)?;
        // SAFETY: `name` is NUL-terminated.
        let name = unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned();
        match module.function(&name) {
            Some(layout) => {
                driver.functions.register(host as usize, layout);
            }
            None => driver.functions.name(host as usize, name),
        }
        Ok(())
    }

    /// Loads PTX text, a fatbinary or a cubin into the current context (see `module`: only PTX
    /// runs; a module without PTX for the device loads and its launches fail).
    fn cuModuleLoadData(module: *mut usize, image: *const c_void) {
        current()?;
        if image.is_null() || module.is_null() {
            return Err(INVALID_VALUE);
        }
        let capability = device::driver()?.config.compute_capability;
        // SAFETY: `image` is one of the formats cuModuleLoadData documents.
        let loaded = unsafe { Module::load(image as *const u8, capability) }?;
        // SAFETY: checked non-null; the caller's out-parameter.
        unsafe { put(module, loaded.handle()) }
    }

    /// `cuModuleLoadData` of a fatbinary.
    fn cuModuleLoadFatBinary(module: *mut usize, fat_cubin: *const c_void) {
        // SAFETY: forwarded arguments of the same contract.
        code_result(unsafe { cuModuleLoadData(module, fat_cubin) })
    }

    /// Modules live for the process (their kernels' handles never dangle): unloading checks the
    /// handle and frees nothing.
    fn cuModuleUnload(module: usize) {
        current()?;
        Module::from_handle(module).map(drop)
    }

    fn cuModuleGetFunction(function: *mut usize, module: usize, name: *const c_char) {
        let driver = initialized()?;
        current()?;
        if name.is_null() {
            return Err(INVALID_VALUE);
        }
        let module = Module::from_handle(module)?;
        // SAFETY: `name` is NUL-terminated.
        let name = unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned();
        let handle = module.function_handle(&name, |key, layout| {
            driver.functions.register(key, layout) as *const crate::kernel::Function as usize
        })?;
        // SAFETY: out-parameter contract of `put`.
        unsafe { put(function, handle) }
    }

    /// The device address and size of a module's `.global`/`.const` variable on the current
    /// device; either out-parameter may be NULL.
    fn cuModuleGetGlobal_v2(dptr: *mut u64, bytes: *mut usize, module: usize, name: *const c_char) {
        let context = current()?;
        if name.is_null() {
            return Err(INVALID_VALUE);
        }
        let module = Module::from_handle(module)?;
        // SAFETY: `name` is NUL-terminated.
        let name = unsafe { CStr::from_ptr(name) }.to_string_lossy();
        let (index, size) = module.global(&name).ok_or(NOT_FOUND)?;
        let addr = context.module_globals(module)?[index];
        if !dptr.is_null() {
            // SAFETY: non-null out-parameter of the caller.
            unsafe { put(dptr, addr) }?;
        }
        if !bytes.is_null() {
            // SAFETY: non-null out-parameter of the caller.
            unsafe { put(bytes, size) }?;
        }
        Ok(())
    }

    /// `CU_MODULE_LAZY_LOADING` (2), CUDA's default since 12.2, unless `CUDA_MODULE_LOADING`
    /// is `EAGER` (1), as NVIDIA's driver reads it. Either way the shim parses a module's PTX
    /// when it is loaded (NVIDIA's 13.0 runtime loads its kernels with `cuLibraryLoadData` in
    /// both modes).
    fn cuModuleGetLoadingMode(mode: *mut u32) {
        initialized()?;
        // SAFETY: out-parameter contract of `put`.
        unsafe { put(mode, module_loading_mode()) }
    }

    /// A library: a module not bound to any context (see `module::Library`). JIT and library
    /// options are accepted and ignored (the shim has no JIT cache to configure).
    fn cuLibraryLoadData(
        library: *mut usize,
        code: *const c_void,
        jit_options: *mut u32,
        jit_values: *mut *mut c_void,
        num_jit_options: u32,
        library_options: *mut u32,
        library_values: *mut *mut c_void,
        num_library_options: u32,
    ) {
        let driver = initialized()?;
        if library.is_null()
            || code.is_null()
            || (num_jit_options > 0 && (jit_options.is_null() || jit_values.is_null()))
            || (num_library_options > 0 && (library_options.is_null() || library_values.is_null()))
        {
            return Err(INVALID_VALUE);
        }
        // SAFETY: `code` is one of the formats cuLibraryLoadData documents.
        let loaded = unsafe { Module::load(code as *const u8, driver.config.compute_capability) }?;
        // SAFETY: checked non-null; the caller's out-parameter.
        unsafe { put(library, Library::new(loaded).handle()) }
    }

    /// Libraries live for the process, like modules: unloading checks the handle.
    fn cuLibraryUnload(library: usize) {
        initialized()?;
        Library::from_handle(library).map(drop)
    }

    /// The library's module: the same in every context (modules are context-free here).
    fn cuLibraryGetModule(module: *mut usize, library: usize) {
        current()?;
        let library = Library::from_handle(library)?;
        // SAFETY: out-parameter contract of `put`.
        unsafe { put(module, library.module.handle()) }
    }

    /// A `CUkernel` is the `CUfunction` `cuModuleGetFunction` gives for the same name in the
    /// library's module: one handle serves every context, so `cuKernelGetFunction` returns it.
    fn cuLibraryGetKernel(kernel: *mut usize, library: usize, name: *const c_char) {
        let driver = initialized()?;
        if name.is_null() {
            return Err(INVALID_VALUE);
        }
        let library = Library::from_handle(library)?;
        // SAFETY: `name` is NUL-terminated.
        let name = unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned();
        let handle = library.module.function_handle(&name, |key, layout| {
            driver.functions.register(key, layout) as *const crate::kernel::Function as usize
        })?;
        // SAFETY: out-parameter contract of `put`.
        unsafe { put(kernel, handle) }
    }

    /// A library variable's address on the current context's device, as
    /// `cuModuleGetGlobal_v2` of the library's module.
    fn cuLibraryGetGlobal(dptr: *mut u64, bytes: *mut usize, library: usize, name: *const c_char) {
        let library = Library::from_handle(library)?;
        // SAFETY: forwarded arguments of the same contract.
        code_result(unsafe { cuModuleGetGlobal_v2(dptr, bytes, library.module.handle(), name) })
    }

    /// The kernel's function in the current context: the kernel's own handle (see
    /// `cuLibraryGetKernel`).
    fn cuKernelGetFunction(function: *mut usize, kernel: usize) {
        let driver = initialized()?;
        current()?;
        driver.functions.by_handle(kernel)?;
        // SAFETY: out-parameter contract of `put`.
        unsafe { put(function, kernel) }
    }

    /// Shim-only: the `CUfunction` of a registered host function (`CUDA_ERROR_NOT_FOUND` if none).
    fn cuShimFunctionFromHost(host: *const c_void, function: *mut usize) {
        let driver = initialized()?;
        let found = driver.functions.by_host(host as usize).ok_or(NOT_FOUND)?;
        // SAFETY: out-parameter contract of `put`.
        unsafe { put(function, found as *const crate::kernel::Function as usize) }
    }

    /// Shim-only: the counters of the calling thread's current device (device 0 without a
    /// current context).
    fn cuShimGetStats(stats: *mut StatsSnapshot) {
        let driver = init()?;
        // SAFETY: out-parameter contract of `put`; the struct matches `struct cudaShimStats`.
        unsafe { put(stats, driver.stats()) }
    }

    /// Shim-only: makes the running kernel fault with `error` (a sticky error code).
    fn cuShimRaiseDeviceError(error: u32) {
        device::raise_device_error(error)
    }

    /// Shim-only: the sticky error of the calling thread's current device (device 0 without a
    /// current context), or success.
    fn cuShimGetStickyError() {
        initialized().map(drop).or_else(|e| if e == NOT_INITIALIZED { Ok(()) } else { Err(e) })
    }

    // ---- per-thread default stream variants ----
    // What a program compiled with `--default-stream per-thread` (CUDA_API_PER_THREAD_DEFAULT_STREAM)
    // calls: NVIDIA's cuda.h maps the plain names to these. In a `_ptsz` function the stream
    // handle 0 is the calling thread's per-thread default stream (`CU_STREAM_PER_THREAD`); a
    // `_ptds` function, which takes no stream, runs on that stream instead of the legacy one.
    // `CU_STREAM_LEGACY` stays the legacy stream and created streams are unaffected.

    fn cuMemcpyHtoD_v2_ptds(dst: u64, src: *const c_void, count: usize) {
        current()?.copy(dst as usize, src as usize, count, 1, PER_THREAD, true)
    }

    fn cuMemcpyDtoH_v2_ptds(dst: *mut c_void, src: u64, count: usize) {
        current()?.copy(dst as usize, src as usize, count, 2, PER_THREAD, true)
    }

    fn cuMemcpyDtoD_v2_ptds(dst: u64, src: u64, count: usize) {
        current()?.copy(dst as usize, src as usize, count, 3, PER_THREAD, false)
    }

    fn cuMemcpy_ptds(dst: u64, src: u64, count: usize) {
        current()?.copy(dst as usize, src as usize, count, 4, PER_THREAD, true)
    }

    /// As `cuMemcpyPeer`: the shim runs a peer copy between synchronisations of every context
    /// involved, which orders it after the per-thread stream's work too.
    fn cuMemcpyPeer_ptds(dst: u64, dst_context: usize, src: u64, src_context: usize, count: usize) {
        // SAFETY: the caller's arguments, forwarded unchanged.
        code_result(unsafe { cuMemcpyPeer(dst, dst_context, src, src_context, count) })
    }

    fn cuMemcpy2D_v2_ptds(copy: *const Memcpy2d) {
        // SAFETY: `copy` is null (rejected) or points to a CUDA_MEMCPY2D.
        unsafe { memcpy_2d(copy, PER_THREAD, true) }
    }

    fn cuMemcpy2DUnaligned_v2_ptds(copy: *const Memcpy2d) {
        // SAFETY: `copy` is null (rejected) or points to a CUDA_MEMCPY2D.
        unsafe { memcpy_2d(copy, PER_THREAD, true) }
    }

    fn cuMemsetD8_v2_ptds(dst: u64, value: u8, count: usize) {
        current()?.memset(dst as usize, value, count, PER_THREAD)
    }

    fn cuMemsetD16_v2_ptds(dst: u64, value: u16, count: usize) {
        current()?.memset_2d(dst as usize, 0, value.into(), 2, count, 1, PER_THREAD)
    }

    fn cuMemsetD32_v2_ptds(dst: u64, value: u32, count: usize) {
        current()?.memset_2d(dst as usize, 0, value, 4, count, 1, PER_THREAD)
    }

    fn cuMemsetD2D8_v2_ptds(dst: u64, pitch: usize, value: u8, width: usize, height: usize) {
        current()?.memset_2d(dst as usize, pitch, value.into(), 1, width, height, PER_THREAD)
    }

    fn cuMemsetD2D16_v2_ptds(dst: u64, pitch: usize, value: u16, width: usize, height: usize) {
        current()?.memset_2d(dst as usize, pitch, value.into(), 2, width, height, PER_THREAD)
    }

    fn cuMemsetD2D32_v2_ptds(dst: u64, pitch: usize, value: u32, width: usize, height: usize) {
        current()?.memset_2d(dst as usize, pitch, value, 4, width, height, PER_THREAD)
    }

    fn cuMemcpyAsync_ptsz(dst: u64, src: u64, count: usize, stream: usize) {
        // SAFETY: the caller's arguments, forwarded with the stream resolved.
        code_result(unsafe { cuMemcpyAsync(dst, src, count, per_thread(stream)) })
    }

    fn cuMemcpyHtoDAsync_v2_ptsz(dst: u64, src: *const c_void, count: usize, stream: usize) {
        // SAFETY: the caller's arguments, forwarded with the stream resolved.
        code_result(unsafe { cuMemcpyHtoDAsync_v2(dst, src, count, per_thread(stream)) })
    }

    fn cuMemcpyDtoHAsync_v2_ptsz(dst: *mut c_void, src: u64, count: usize, stream: usize) {
        // SAFETY: the caller's arguments, forwarded with the stream resolved.
        code_result(unsafe { cuMemcpyDtoHAsync_v2(dst, src, count, per_thread(stream)) })
    }

    fn cuMemcpyDtoDAsync_v2_ptsz(dst: u64, src: u64, count: usize, stream: usize) {
        // SAFETY: the caller's arguments, forwarded with the stream resolved.
        code_result(unsafe { cuMemcpyDtoDAsync_v2(dst, src, count, per_thread(stream)) })
    }

    fn cuMemcpyPeerAsync_ptsz(
        dst: u64,
        dst_context: usize,
        src: u64,
        src_context: usize,
        count: usize,
        stream: usize,
    ) {
        let stream = per_thread(stream);
        // SAFETY: the caller's arguments, forwarded with the stream resolved.
        code_result(unsafe { cuMemcpyPeerAsync(dst, dst_context, src, src_context, count, stream) })
    }

    fn cuMemcpy2DAsync_v2_ptsz(copy: *const Memcpy2d, stream: usize) {
        // SAFETY: `copy` is null (rejected) or points to a CUDA_MEMCPY2D.
        unsafe { memcpy_2d(copy, per_thread(stream), false) }
    }

    fn cuMemsetD8Async_ptsz(dst: u64, value: u8, count: usize, stream: usize) {
        current()?.memset(dst as usize, value, count, per_thread(stream))
    }

    fn cuMemsetD16Async_ptsz(dst: u64, value: u16, count: usize, stream: usize) {
        current()?.memset_2d(dst as usize, 0, value.into(), 2, count, 1, per_thread(stream))
    }

    fn cuMemsetD32Async_ptsz(dst: u64, value: u32, count: usize, stream: usize) {
        current()?.memset_2d(dst as usize, 0, value, 4, count, 1, per_thread(stream))
    }

    fn cuMemsetD2D8Async_ptsz(dst: u64, pitch: usize, value: u8, width: usize, height: usize, stream: usize) {
        let stream = per_thread(stream);
        current()?.memset_2d(dst as usize, pitch, value.into(), 1, width, height, stream)
    }

    fn cuMemsetD2D16Async_ptsz(dst: u64, pitch: usize, value: u16, width: usize, height: usize, stream: usize) {
        let stream = per_thread(stream);
        current()?.memset_2d(dst as usize, pitch, value.into(), 2, width, height, stream)
    }

    fn cuMemsetD2D32Async_ptsz(dst: u64, pitch: usize, value: u32, width: usize, height: usize, stream: usize) {
        let stream = per_thread(stream);
        current()?.memset_2d(dst as usize, pitch, value, 4, width, height, stream)
    }

    fn cuMemAllocAsync_ptsz(dptr: *mut u64, size: usize, stream: usize) {
        // SAFETY: the caller's arguments, forwarded with the stream resolved.
        code_result(unsafe { cuMemAllocAsync(dptr, size, per_thread(stream)) })
    }

    fn cuMemAllocFromPoolAsync_ptsz(dptr: *mut u64, size: usize, pool: usize, stream: usize) {
        // SAFETY: the caller's arguments, forwarded with the stream resolved.
        code_result(unsafe { cuMemAllocFromPoolAsync(dptr, size, pool, per_thread(stream)) })
    }

    fn cuMemFreeAsync_ptsz(dptr: u64, stream: usize) {
        current()?.free_async(dptr as usize, per_thread(stream))
    }

    fn cuStreamGetPriority_ptsz(stream: usize, priority: *mut i32) {
        // SAFETY: the caller's arguments, forwarded with the stream resolved.
        code_result(unsafe { cuStreamGetPriority(per_thread(stream), priority) })
    }

    fn cuStreamGetFlags_ptsz(stream: usize, flags: *mut u32) {
        // SAFETY: the caller's arguments, forwarded with the stream resolved.
        code_result(unsafe { cuStreamGetFlags(per_thread(stream), flags) })
    }

    fn cuStreamIsCapturing_ptsz(stream: usize, status: *mut u32) {
        // SAFETY: the caller's arguments, forwarded with the stream resolved.
        code_result(unsafe { cuStreamIsCapturing(per_thread(stream), status) })
    }

    fn cuStreamWaitEvent_ptsz(stream: usize, event: usize, flags: u32) {
        // SAFETY: the caller's arguments, forwarded with the stream resolved.
        code_result(unsafe { cuStreamWaitEvent(per_thread(stream), event, flags) })
    }

    /// The callback runs on the per-thread stream and receives the handle the caller gave.
    fn cuStreamAddCallback_ptsz(
        stream: usize,
        callback: Option<unsafe extern "C" fn(usize, u32, *mut c_void)>,
        data: *mut c_void,
        flags: u32,
    ) {
        let context = current()?;
        let func = callback.ok_or(INVALID_VALUE)?;
        if flags != 0 {
            return Err(INVALID_VALUE);
        }
        let call = device::HostCall::Callback { func, stream, data: data as usize };
        context.launch_host(per_thread(stream), call)
    }

    fn cuStreamQuery_ptsz(stream: usize) {
        current()?.stream_query(per_thread(stream))
    }

    fn cuStreamSynchronize_ptsz(stream: usize) {
        current()?.stream_synchronize(per_thread(stream))
    }

    fn cuEventRecord_ptsz(event: usize, stream: usize) {
        current()?.event_record(event, per_thread(stream), false)
    }

    fn cuStreamBeginCapture_v2_ptsz(stream: usize, mode: u32) {
        // SAFETY: the caller's arguments, forwarded with the stream resolved.
        code_result(unsafe { cuStreamBeginCapture_v2(per_thread(stream), mode) })
    }

    fn cuStreamEndCapture_ptsz(stream: usize, graph: *mut usize) {
        // SAFETY: the caller's arguments, forwarded with the stream resolved.
        code_result(unsafe { cuStreamEndCapture(per_thread(stream), graph) })
    }

    fn cuStreamGetCaptureInfo_v2_ptsz(
        stream: usize,
        status: *mut u32,
        id: *mut u64,
        graph: *mut usize,
        dependencies: *mut *const usize,
        count: *mut usize,
    ) {
        let stream = per_thread(stream);
        // SAFETY: the caller's arguments, forwarded with the stream resolved.
        code_result(unsafe { cuStreamGetCaptureInfo_v2(stream, status, id, graph, dependencies, count) })
    }

    fn cuStreamGetCaptureInfo_v3_ptsz(
        stream: usize,
        status: *mut u32,
        id: *mut u64,
        graph: *mut usize,
        dependencies: *mut *const usize,
        edge_data: *mut *const c_void,
        count: *mut usize,
    ) {
        let stream = per_thread(stream);
        // SAFETY: the caller's arguments, forwarded with the stream resolved.
        code_result(unsafe {
            cuStreamGetCaptureInfo_v3(stream, status, id, graph, dependencies, edge_data, count)
        })
    }

    fn cuStreamUpdateCaptureDependencies_ptsz(stream: usize, dependencies: *mut usize, count: usize, flags: u32) {
        let stream = per_thread(stream);
        // SAFETY: the caller's arguments, forwarded with the stream resolved.
        code_result(unsafe { cuStreamUpdateCaptureDependencies(stream, dependencies, count, flags) })
    }

    fn cuStreamUpdateCaptureDependencies_v2_ptsz(
        stream: usize,
        dependencies: *mut usize,
        edge_data: *const [u8; 8],
        count: usize,
        flags: u32,
    ) {
        let stream = per_thread(stream);
        // SAFETY: the caller's arguments, forwarded with the stream resolved.
        code_result(unsafe {
            cuStreamUpdateCaptureDependencies_v2(stream, dependencies, edge_data, count, flags)
        })
    }

    fn cuGraphLaunch_ptsz(exec: usize, stream: usize) {
        // SAFETY: the caller's arguments, forwarded with the stream resolved.
        code_result(unsafe { cuGraphLaunch(exec, per_thread(stream)) })
    }

    fn cuGraphInstantiateWithParams_ptsz(exec: *mut usize, graph: usize, params: *mut InstantiateParams) {
        // SAFETY: null (rejected) or the caller's parameters. The upload stream is resolved
        // for the call and given back as the caller wrote it: the driver writes only the
        // error node and the result.
        let Some(p) = (unsafe { params.as_mut() }) else {
            // SAFETY: the caller's arguments; the null parameters are refused there.
            return code_result(unsafe { cuGraphInstantiateWithParams(exec, graph, params) });
        };
        let upload_stream = p.upload_stream;
        p.upload_stream = per_thread(upload_stream);
        // SAFETY: the caller's arguments, forwarded with the stream resolved.
        let result = unsafe { cuGraphInstantiateWithParams(exec, graph, p) };
        p.upload_stream = upload_stream;
        code_result(result)
    }

    fn cuGraphUpload_ptsz(exec: usize, stream: usize) {
        // SAFETY: the caller's arguments, forwarded with the stream resolved.
        code_result(unsafe { cuGraphUpload(exec, per_thread(stream)) })
    }

    fn cuEventRecordWithFlags_ptsz(event: usize, stream: usize, flags: u32) {
        // SAFETY: the caller's arguments, forwarded with the stream resolved.
        code_result(unsafe { cuEventRecordWithFlags(event, per_thread(stream), flags) })
    }

    fn cuLaunchHostFunc_ptsz(stream: usize, func: Option<unsafe extern "C" fn(*mut c_void)>, data: *mut c_void) {
        // SAFETY: the caller's arguments, forwarded with the stream resolved.
        code_result(unsafe { cuLaunchHostFunc(per_thread(stream), func, data) })
    }

    fn cuLaunchHostFunc_v2_ptsz(
        stream: usize,
        func: Option<unsafe extern "C" fn(*mut c_void)>,
        data: *mut c_void,
        sync_mode: u32,
    ) {
        // SAFETY: the caller's arguments, forwarded with the stream resolved.
        code_result(unsafe { cuLaunchHostFunc_v2(per_thread(stream), func, data, sync_mode) })
    }

    fn cuLaunchKernel_ptsz(
        function: usize,
        grid_x: u32,
        grid_y: u32,
        grid_z: u32,
        block_x: u32,
        block_y: u32,
        block_z: u32,
        shared_mem: u32,
        stream: usize,
        params: *mut *mut c_void,
        extra: *mut *mut c_void,
    ) {
        let launch = Launch {
            grid: [grid_x, grid_y, grid_z],
            block: [block_x, block_y, block_z],
            shared: shared_mem,
            stream: per_thread(stream),
            cooperative: false,
        };
        // SAFETY: the caller's kernelParams/extra, as cuLaunchKernel documents them.
        unsafe { launch_kernel(function, launch, params, extra) }
    }

    fn cuLaunchKernelEx_ptsz(
        config: *const LaunchConfig,
        function: usize,
        params: *mut *mut c_void,
        extra: *mut *mut c_void,
    ) {
        // SAFETY: `config` is null (rejected) or points to a CUlaunchConfig.
        let config = unsafe { config.as_ref() }.ok_or(INVALID_VALUE)?;
        let resolved = LaunchConfig { stream: per_thread(config.stream), ..*config };
        // SAFETY: a copy of the caller's CUlaunchConfig (its attribute array is the caller's)
        // and the caller's kernelParams/extra.
        code_result(unsafe { cuLaunchKernelEx(&resolved, function, params, extra) })
    }

    fn cuLaunchCooperativeKernel_ptsz(
        function: usize,
        grid_x: u32,
        grid_y: u32,
        grid_z: u32,
        block_x: u32,
        block_y: u32,
        block_z: u32,
        shared_mem: u32,
        stream: usize,
        params: *mut *mut c_void,
    ) {
        let launch = Launch {
            grid: [grid_x, grid_y, grid_z],
            block: [block_x, block_y, block_z],
            shared: shared_mem,
            stream: per_thread(stream),
            cooperative: true,
        };
        // SAFETY: the caller's kernelParams, as cuLaunchCooperativeKernel documents them.
        unsafe { launch_kernel(function, launch, params, std::ptr::null_mut()) }
    }
}

/// What the stream handle 0 means in a `_ptsz` entry point: the calling thread's per-thread
/// default stream (`CU_STREAM_PER_THREAD`); every other handle, `CU_STREAM_LEGACY` included,
/// keeps its meaning.
fn per_thread(stream: usize) -> usize {
    if stream == 0 { PER_THREAD } else { stream }
}

/// The context a CUDA 13 `_v2` entry point's context argument names: NULL is the calling
/// thread's current context (with `current`'s errors), any other handle a live context of any
/// thread (`CUDA_ERROR_INVALID_CONTEXT` for one destroyed or never made).
fn context_argument(handle: usize) -> CuResult<&'static Context> {
    if handle == 0 {
        return current();
    }
    initialized()?.context_of_handle(handle)
}

/// `CUhostTaskSyncMode` (CUDA 13.1): how a stream's thread waits for a host function.
const HOST_TASK_BLOCKING: u32 = 0;
const HOST_TASK_SPINWAIT: u32 = 1;

/// Stream priorities: [greatest, least] = [-5, 0], as recent GPUs report.
pub const GREATEST_PRIORITY: i32 = -5;
pub const LEAST_PRIORITY: i32 = 0;

/// The context owning `stream` (the current one for the special handles).
fn stream_context(stream: usize) -> CuResult<&'static Context> {
    let context = current()?;
    initialized()?.stream_owner(Some(context), stream)
}

/// Non-blocking flag and priority of a stream of any device.
fn stream_properties(stream: usize) -> CuResult<(bool, i32)> {
    stream_context(stream)?.streams.properties(stream)
}

/// The device whose default pool `pool` is (`CUDA_ERROR_INVALID_VALUE` for any other value).
fn pool_of(pool: usize) -> CuResult<&'static device::Device> {
    let driver = initialized()?;
    let ordinal = device::pool_device(pool).ok_or(INVALID_VALUE)?;
    driver.device(ordinal as i32)
}

/// Blocks of `threads` threads one SM of `device` holds at once (see
/// `cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags`).
fn occupancy(device: i32, threads: u64, dynamic_smem: u64) -> CuResult<u64> {
    const REGISTERS_PER_THREAD: u64 = 32;
    const RESERVED_SMEM_PER_BLOCK: u64 = 1024;
    if threads > attribute(1, device)? as u64 || dynamic_smem > attribute(97, device)? as u64 {
        return Ok(0);
    }
    let warp = attribute(10, device)? as u64;
    let threads = threads.next_multiple_of(warp);
    let by_blocks = attribute(106, device)? as u64;
    let by_threads = attribute(39, device)? as u64 / threads;
    let by_registers = attribute(82, device)? as u64 / (threads * REGISTERS_PER_THREAD);
    let by_smem = attribute(81, device)? as u64 / (dynamic_smem + RESERVED_SMEM_PER_BLOCK);
    Ok(by_blocks.min(by_threads).min(by_registers).min(by_smem))
}

/// `CUipcMemHandle` / `CUipcEventHandle` (64 bytes, passed by value): a magic, the kind, the
/// exporting process's id, then the address (or event handle), size and device.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct IpcHandle {
    reserved: [u8; 64],
}

const _: () = assert!(size_of::<IpcHandle>() == 64);

const IPC_MAGIC: &[u8; 8] = b"cushimip";
const IPC_MEMORY: u8 = 1;
const IPC_EVENT: u8 = 2;
const IPC_MEM_LAZY_ENABLE_PEER_ACCESS: u32 = 0x1;

impl IpcHandle {
    fn new(kind: u8, value: usize, size: usize, device: usize) -> IpcHandle {
        let mut reserved = [0u8; 64];
        reserved[..8].copy_from_slice(IPC_MAGIC);
        reserved[8] = kind;
        reserved[12..16].copy_from_slice(&std::process::id().to_le_bytes());
        reserved[16..24].copy_from_slice(&(value as u64).to_le_bytes());
        reserved[24..32].copy_from_slice(&(size as u64).to_le_bytes());
        reserved[32..36].copy_from_slice(&(device as u32).to_le_bytes());
        IpcHandle { reserved }
    }

    /// (value, size, device) of a handle of this process: `CUDA_ERROR_INVALID_VALUE` for a
    /// handle the shim did not make, `CUDA_ERROR_NOT_SUPPORTED` for another process's.
    fn decode(&self, kind: u8) -> CuResult<(usize, usize, usize)> {
        let r = &self.reserved;
        if &r[..8] != IPC_MAGIC || r[8] != kind {
            return Err(INVALID_VALUE);
        }
        let word = |range: std::ops::Range<usize>| {
            let mut bytes = [0u8; 8];
            bytes[..range.len()].copy_from_slice(&r[range]);
            u64::from_le_bytes(bytes) as usize
        };
        if word(12..16) != std::process::id() as usize {
            return Err(NOT_SUPPORTED);
        }
        Ok((word(16..24), word(24..32), word(32..36)))
    }
}

/// `cuModuleGetLoadingMode`'s answer: `CU_MODULE_EAGER_LOADING` (1) when `CUDA_MODULE_LOADING`
/// is `EAGER`, `CU_MODULE_LAZY_LOADING` (2) otherwise, read once.
fn module_loading_mode() -> u32 {
    static MODE: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *MODE.get_or_init(|| match std::env::var("CUDA_MODULE_LOADING").as_deref() {
        Ok("EAGER") => 1,
        _ => 2,
    })
}

/// An exported function's raw code as a result again.
/// `cuGraphInstantiateWithFlags` (see there), for the exports that instantiate.
///
/// # Safety
/// `exec` is null (rejected) or valid for a write.
unsafe fn instantiate_graph(exec: *mut usize, graph: usize, flags: u64) -> CuResult<()> {
    const AUTO_FREE_ON_LAUNCH: u64 = 0x1;
    const DEVICE_LAUNCH: u64 = 0x4;
    let driver = initialized()?;
    let auto_free = flags & AUTO_FREE_ON_LAUNCH != 0;
    if exec.is_null() || flags & !0xF != 0 || (auto_free && flags & DEVICE_LAUNCH != 0) {
        return Err(INVALID_VALUE);
    }
    let handle = driver.graphs.instantiate(graph, auto_free)?;
    // SAFETY: checked non-null; out-parameter of the caller.
    unsafe { put(exec, handle) }
}

fn code_result(code: u32) -> CuResult<()> {
    if code == CUDA_SUCCESS {
        Ok(())
    } else {
        Err(CuError(code))
    }
}

/// `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM`: `cuGetProcAddress` flag asking for the
/// per-thread-default-stream variants (alone: with `CU_GET_PROC_ADDRESS_LEGACY_STREAM` too, the
/// legacy functions are returned, as for that flag or `CU_GET_PROC_ADDRESS_DEFAULT`).
const PER_THREAD_DEFAULT_STREAM: u64 = 0x2;

/// `CUdriverProcAddressQueryResult` values.
const PROC_SUCCESS: i32 = 0;
const PROC_SYMBOL_NOT_FOUND: i32 = 1;
const PROC_VERSION_NOT_SUFFICIENT: i32 = 2;

/// What `cuGetProcAddress` knows: (base name, CUDA version that introduced the variant, the
/// function that implements it), one row per variant the shim has. The versions are those of
/// NVIDIA's `cudaTypedefs.h` (`PFN_cuMemAlloc_v3020` is `cuMemAlloc_v2`, introduced in 3.2).
/// Variants the shim does not implement have no row, so asking for a version older than every
/// variant the shim has is answered as for a symbol that did not exist yet (`cuMemAlloc` at
/// 2000 would be the 32-bit `cuMemAlloc` on NVIDIA's driver; the shim has only `_v2`).
/// `cuGetProcAddress` at 11030 is the legacy four-argument function, exported under that name
/// (see [`cuGetProcAddress`]).
pub const PROCS: &[(&str, i32, &str)] = &[
    ("cuInit", 2000, "cuInit"),
    ("cuDriverGetVersion", 2020, "cuDriverGetVersion"),
    ("cuDeviceGet", 2000, "cuDeviceGet"),
    ("cuDeviceGetCount", 2000, "cuDeviceGetCount"),
    ("cuDeviceGetName", 2000, "cuDeviceGetName"),
    ("cuDeviceTotalMem", 3020, "cuDeviceTotalMem_v2"),
    ("cuDeviceGetAttribute", 2000, "cuDeviceGetAttribute"),
    ("cuDevicePrimaryCtxRetain", 7000, "cuDevicePrimaryCtxRetain"),
    (
        "cuDevicePrimaryCtxRelease",
        7000,
        "cuDevicePrimaryCtxRelease",
    ),
    (
        "cuDevicePrimaryCtxRelease",
        11000,
        "cuDevicePrimaryCtxRelease_v2",
    ),
    (
        "cuDevicePrimaryCtxSetFlags",
        11000,
        "cuDevicePrimaryCtxSetFlags_v2",
    ),
    ("cuDevicePrimaryCtxReset", 7000, "cuDevicePrimaryCtxReset"),
    (
        "cuDevicePrimaryCtxReset",
        11000,
        "cuDevicePrimaryCtxReset_v2",
    ),
    ("cuCtxCreate", 3020, "cuCtxCreate_v2"),
    ("cuCtxCreate", 11040, "cuCtxCreate_v3"),
    ("cuCtxCreate", 12050, "cuCtxCreate_v4"),
    ("cuCtxDestroy", 4000, "cuCtxDestroy_v2"),
    ("cuCtxGetFlags", 7000, "cuCtxGetFlags"),
    ("cuCtxGetApiVersion", 3020, "cuCtxGetApiVersion"),
    ("cuCtxGetCurrent", 4000, "cuCtxGetCurrent"),
    ("cuCtxSetCurrent", 4000, "cuCtxSetCurrent"),
    ("cuCtxSynchronize", 2000, "cuCtxSynchronize"),
    ("cuCtxSynchronize", 13000, "cuCtxSynchronize_v2"),
    ("cuCtxGetDevice", 2000, "cuCtxGetDevice"),
    ("cuCtxGetDevice", 13000, "cuCtxGetDevice_v2"),
    ("cuCtxPushCurrent", 4000, "cuCtxPushCurrent_v2"),
    ("cuCtxPopCurrent", 4000, "cuCtxPopCurrent_v2"),
    ("cuDeviceCanAccessPeer", 4000, "cuDeviceCanAccessPeer"),
    ("cuCtxEnablePeerAccess", 4000, "cuCtxEnablePeerAccess"),
    ("cuCtxDisablePeerAccess", 4000, "cuCtxDisablePeerAccess"),
    ("cuDeviceGetP2PAttribute", 8000, "cuDeviceGetP2PAttribute"),
    ("cuGetErrorName", 6000, "cuGetErrorName"),
    ("cuGetErrorString", 6000, "cuGetErrorString"),
    ("cuGetExportTable", 3000, "cuGetExportTable"),
    ("cuGetProcAddress", 11030, "cuGetProcAddress"),
    ("cuGetProcAddress", 12000, "cuGetProcAddress_v2"),
    ("cuMemAlloc", 3020, "cuMemAlloc_v2"),
    ("cuMemFree", 3020, "cuMemFree_v2"),
    ("cuMemGetInfo", 3020, "cuMemGetInfo_v2"),
    ("cuMemGetAddressRange", 3020, "cuMemGetAddressRange_v2"),
    ("cuMemAllocHost", 3020, "cuMemAllocHost_v2"),
    ("cuMemHostAlloc", 2020, "cuMemHostAlloc"),
    (
        "cuMemHostGetDevicePointer",
        3020,
        "cuMemHostGetDevicePointer_v2",
    ),
    ("cuMemFreeHost", 2000, "cuMemFreeHost"),
    ("cuMemAllocManaged", 6000, "cuMemAllocManaged"),
    ("cuMemAllocAsync", 11020, "cuMemAllocAsync"),
    ("cuMemFreeAsync", 11020, "cuMemFreeAsync"),
    ("cuMemcpyHtoD", 3020, "cuMemcpyHtoD_v2"),
    ("cuMemcpyDtoH", 3020, "cuMemcpyDtoH_v2"),
    ("cuMemcpyDtoD", 3020, "cuMemcpyDtoD_v2"),
    ("cuMemcpy", 4000, "cuMemcpy"),
    ("cuMemcpyAsync", 4000, "cuMemcpyAsync"),
    ("cuMemsetD8", 3020, "cuMemsetD8_v2"),
    ("cuMemsetD8Async", 3020, "cuMemsetD8Async"),
    ("cuPointerGetAttribute", 4000, "cuPointerGetAttribute"),
    ("cuPointerGetAttributes", 7000, "cuPointerGetAttributes"),
    ("cuStreamCreate", 2000, "cuStreamCreate"),
    ("cuStreamDestroy", 4000, "cuStreamDestroy_v2"),
    ("cuStreamSynchronize", 2000, "cuStreamSynchronize"),
    ("cuStreamQuery", 2000, "cuStreamQuery"),
    ("cuStreamWaitEvent", 3020, "cuStreamWaitEvent"),
    ("cuEventCreate", 2000, "cuEventCreate"),
    ("cuEventRecord", 2000, "cuEventRecord"),
    ("cuEventSynchronize", 2000, "cuEventSynchronize"),
    ("cuEventQuery", 2000, "cuEventQuery"),
    ("cuEventElapsedTime", 2000, "cuEventElapsedTime"),
    ("cuEventElapsedTime", 12080, "cuEventElapsedTime_v2"),
    ("cuEventDestroy", 4000, "cuEventDestroy_v2"),
    ("cuLaunchKernel", 4000, "cuLaunchKernel"),
    ("cuFuncGetName", 12030, "cuFuncGetName"),
    ("cuModuleLoadData", 2000, "cuModuleLoadData"),
    ("cuModuleLoadFatBinary", 2000, "cuModuleLoadFatBinary"),
    ("cuModuleUnload", 2000, "cuModuleUnload"),
    ("cuModuleGetFunction", 2000, "cuModuleGetFunction"),
    ("cuModuleGetGlobal", 3020, "cuModuleGetGlobal_v2"),
    ("cuFuncGetParamInfo", 12040, "cuFuncGetParamInfo"),
    ("cuModuleGetLoadingMode", 11070, "cuModuleGetLoadingMode"),
    ("cuLibraryLoadData", 12000, "cuLibraryLoadData"),
    ("cuLibraryUnload", 12000, "cuLibraryUnload"),
    ("cuLibraryGetModule", 12000, "cuLibraryGetModule"),
    ("cuLibraryGetKernel", 12000, "cuLibraryGetKernel"),
    ("cuLibraryGetGlobal", 12000, "cuLibraryGetGlobal"),
    ("cuKernelGetFunction", 12000, "cuKernelGetFunction"),
    ("cuKernelGetAttribute", 12000, "cuKernelGetAttribute"),
    ("cuKernelSetAttribute", 12000, "cuKernelSetAttribute"),
    ("cuMemAllocPitch", 3020, "cuMemAllocPitch_v2"),
    (
        "cuDeviceGetDefaultMemPool",
        11020,
        "cuDeviceGetDefaultMemPool",
    ),
    ("cuMemAllocFromPoolAsync", 11020, "cuMemAllocFromPoolAsync"),
    ("cuMemcpyHtoDAsync", 3020, "cuMemcpyHtoDAsync_v2"),
    ("cuMemcpyDtoHAsync", 3020, "cuMemcpyDtoHAsync_v2"),
    ("cuMemcpyDtoDAsync", 3020, "cuMemcpyDtoDAsync_v2"),
    ("cuMemcpyPeer", 4000, "cuMemcpyPeer"),
    ("cuMemcpyPeerAsync", 4000, "cuMemcpyPeerAsync"),
    ("cuMemcpy2D", 3020, "cuMemcpy2D_v2"),
    ("cuMemcpy2DUnaligned", 3020, "cuMemcpy2DUnaligned_v2"),
    ("cuMemcpy2DAsync", 3020, "cuMemcpy2DAsync_v2"),
    ("cuMemsetD16", 3020, "cuMemsetD16_v2"),
    ("cuMemsetD32", 3020, "cuMemsetD32_v2"),
    ("cuMemsetD16Async", 3020, "cuMemsetD16Async"),
    ("cuMemsetD32Async", 3020, "cuMemsetD32Async"),
    ("cuStreamWriteValue32", 11070, "cuStreamWriteValue32_v2"),
    ("cuDeviceGetDevResource", 12040, "cuDeviceGetDevResource"),
    ("cuCtxGetDevResource", 12040, "cuCtxGetDevResource"),
    (
        "cuGreenCtxGetDevResource",
        12040,
        "cuGreenCtxGetDevResource",
    ),
    (
        "cuDevSmResourceSplitByCount",
        12040,
        "cuDevSmResourceSplitByCount",
    ),
    (
        "cuDevResourceGenerateDesc",
        12040,
        "cuDevResourceGenerateDesc",
    ),
    ("cuGreenCtxCreate", 12040, "cuGreenCtxCreate"),
    ("cuGreenCtxDestroy", 12040, "cuGreenCtxDestroy"),
    ("cuCtxFromGreenCtx", 12040, "cuCtxFromGreenCtx"),
    ("cuGreenCtxGetId", 12090, "cuGreenCtxGetId"),
    ("cuGreenCtxStreamCreate", 12050, "cuGreenCtxStreamCreate"),
    ("cuMulticastCreate", 12010, "cuMulticastCreate"),
    ("cuMulticastAddDevice", 12010, "cuMulticastAddDevice"),
    ("cuMulticastBindMem", 12010, "cuMulticastBindMem"),
    ("cuMulticastUnbind", 12010, "cuMulticastUnbind"),
    (
        "cuMulticastGetGranularity",
        12010,
        "cuMulticastGetGranularity",
    ),
    ("cuLogsRegisterCallback", 12090, "cuLogsRegisterCallback"),
    (
        "cuLogsUnregisterCallback",
        12090,
        "cuLogsUnregisterCallback",
    ),
    ("cuMemsetD2D8", 3020, "cuMemsetD2D8_v2"),
    ("cuMemsetD2D16", 3020, "cuMemsetD2D16_v2"),
    ("cuMemsetD2D32", 3020, "cuMemsetD2D32_v2"),
    ("cuMemsetD2D8Async", 3020, "cuMemsetD2D8Async"),
    ("cuMemsetD2D16Async", 3020, "cuMemsetD2D16Async"),
    ("cuMemsetD2D32Async", 3020, "cuMemsetD2D32Async"),
    ("cuLaunchKernelEx", 11060, "cuLaunchKernelEx"),
    (
        "cuLaunchCooperativeKernel",
        9000,
        "cuLaunchCooperativeKernel",
    ),
    (
        "cuMemGetAllocationGranularity",
        10020,
        "cuMemGetAllocationGranularity",
    ),
    ("cuMemAddressReserve", 10020, "cuMemAddressReserve"),
    ("cuMemAddressFree", 10020, "cuMemAddressFree"),
    ("cuMemCreate", 10020, "cuMemCreate"),
    ("cuMemRelease", 10020, "cuMemRelease"),
    (
        "cuMemExportToShareableHandle",
        10020,
        "cuMemExportToShareableHandle",
    ),
    (
        "cuMemImportFromShareableHandle",
        10020,
        "cuMemImportFromShareableHandle",
    ),
    (
        "cuMemRetainAllocationHandle",
        11000,
        "cuMemRetainAllocationHandle",
    ),
    (
        "cuMemGetAllocationPropertiesFromHandle",
        10020,
        "cuMemGetAllocationPropertiesFromHandle",
    ),
    ("cuMemMap", 10020, "cuMemMap"),
    ("cuMemUnmap", 10020, "cuMemUnmap"),
    ("cuMemSetAccess", 10020, "cuMemSetAccess"),
    (
        "cuDevicePrimaryCtxGetState",
        7000,
        "cuDevicePrimaryCtxGetState",
    ),
    ("cuDeviceGetPCIBusId", 4010, "cuDeviceGetPCIBusId"),
    ("cuDeviceGetUuid", 9020, "cuDeviceGetUuid"),
    ("cuDeviceGetUuid", 11040, "cuDeviceGetUuid_v2"),
    (
        "cuCtxGetStreamPriorityRange",
        5050,
        "cuCtxGetStreamPriorityRange",
    ),
    (
        "cuStreamCreateWithPriority",
        5050,
        "cuStreamCreateWithPriority",
    ),
    ("cuStreamGetPriority", 5050, "cuStreamGetPriority"),
    ("cuStreamGetFlags", 5050, "cuStreamGetFlags"),
    ("cuStreamIsCapturing", 10000, "cuStreamIsCapturing"),
    ("cuStreamBeginCapture", 10010, "cuStreamBeginCapture_v2"),
    ("cuStreamEndCapture", 10000, "cuStreamEndCapture"),
    (
        "cuStreamUpdateCaptureDependencies",
        11030,
        "cuStreamUpdateCaptureDependencies",
    ),
    (
        "cuStreamUpdateCaptureDependencies",
        12030,
        "cuStreamUpdateCaptureDependencies_v2",
    ),
    ("cuStreamGetCaptureInfo", 11030, "cuStreamGetCaptureInfo_v2"),
    ("cuStreamGetCaptureInfo", 12030, "cuStreamGetCaptureInfo_v3"),
    (
        "cuThreadExchangeStreamCaptureMode",
        10010,
        "cuThreadExchangeStreamCaptureMode",
    ),
    ("cuGraphCreate", 10000, "cuGraphCreate"),
    ("cuGraphDestroy", 10000, "cuGraphDestroy"),
    ("cuGraphGetNodes", 10000, "cuGraphGetNodes"),
    ("cuGraphInstantiate", 11000, "cuGraphInstantiate_v2"),
    ("cuGraphInstantiate", 12000, "cuGraphInstantiateWithFlags"),
    (
        "cuGraphInstantiateWithFlags",
        11040,
        "cuGraphInstantiateWithFlags",
    ),
    ("cuGraphLaunch", 10000, "cuGraphLaunch"),
    (
        "cuGraphInstantiateWithParams",
        12000,
        "cuGraphInstantiateWithParams",
    ),
    ("cuGraphExecUpdate", 12000, "cuGraphExecUpdate_v2"),
    ("cuGraphUpload", 11010, "cuGraphUpload"),
    ("cuGraphExecDestroy", 10000, "cuGraphExecDestroy"),
    ("cuGraphDebugDotPrint", 11030, "cuGraphDebugDotPrint"),
    ("cuGraphAddMemAllocNode", 11040, "cuGraphAddMemAllocNode"),
    (
        "cuGraphMemAllocNodeGetParams",
        11040,
        "cuGraphMemAllocNodeGetParams",
    ),
    ("cuGraphAddMemFreeNode", 11040, "cuGraphAddMemFreeNode"),
    (
        "cuGraphMemFreeNodeGetParams",
        11040,
        "cuGraphMemFreeNodeGetParams",
    ),
    ("cuDeviceGraphMemTrim", 11040, "cuDeviceGraphMemTrim"),
    (
        "cuDeviceGetGraphMemAttribute",
        11040,
        "cuDeviceGetGraphMemAttribute",
    ),
    (
        "cuDeviceSetGraphMemAttribute",
        11040,
        "cuDeviceSetGraphMemAttribute",
    ),
    ("cuGraphAddKernelNode", 12000, "cuGraphAddKernelNode_v2"),
    ("cuGraphAddMemsetNode", 10000, "cuGraphAddMemsetNode"),
    ("cuGraphAddMemcpyNode", 10000, "cuGraphAddMemcpyNode"),
    ("cuGraphAddHostNode", 10000, "cuGraphAddHostNode"),
    ("cuGraphAddEmptyNode", 10000, "cuGraphAddEmptyNode"),
    (
        "cuGraphAddEventRecordNode",
        11010,
        "cuGraphAddEventRecordNode",
    ),
    ("cuGraphAddEventWaitNode", 11010, "cuGraphAddEventWaitNode"),
    (
        "cuGraphAddChildGraphNode",
        10000,
        "cuGraphAddChildGraphNode",
    ),
    ("cuGraphAddDependencies", 10000, "cuGraphAddDependencies"),
    ("cuGraphAddDependencies", 12030, "cuGraphAddDependencies_v2"),
    (
        "cuGraphExecKernelNodeSetParams",
        12000,
        "cuGraphExecKernelNodeSetParams_v2",
    ),
    ("cuLaunchHostFunc", 10000, "cuLaunchHostFunc"),
    ("cuLaunchHostFunc", 13010, "cuLaunchHostFunc_v2"),
    ("cuStreamAddCallback", 5000, "cuStreamAddCallback"),
    ("cuEventRecordWithFlags", 11010, "cuEventRecordWithFlags"),
    ("cuMemHostRegister", 6050, "cuMemHostRegister_v2"),
    ("cuMemHostUnregister", 4000, "cuMemHostUnregister"),
    ("cuIpcGetMemHandle", 4010, "cuIpcGetMemHandle"),
    ("cuIpcOpenMemHandle", 11000, "cuIpcOpenMemHandle_v2"),
    ("cuIpcCloseMemHandle", 4010, "cuIpcCloseMemHandle"),
    ("cuIpcGetEventHandle", 4010, "cuIpcGetEventHandle"),
    ("cuIpcOpenEventHandle", 4010, "cuIpcOpenEventHandle"),
    ("cuMemPoolGetAttribute", 11020, "cuMemPoolGetAttribute"),
    ("cuMemPoolSetAttribute", 11020, "cuMemPoolSetAttribute"),
    ("cuMemPoolSetAccess", 11020, "cuMemPoolSetAccess"),
    ("cuMemPoolTrimTo", 11020, "cuMemPoolTrimTo"),
    ("cuFuncGetAttribute", 2020, "cuFuncGetAttribute"),
    ("cuFuncSetAttribute", 9000, "cuFuncSetAttribute"),
    (
        "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags",
        7000,
        "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags",
    ),
];

/// The per-thread-default-stream variants `cuGetProcAddress` gives with
/// `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM`: (legacy function, CUDA version that
/// introduced its per-thread variant, that variant), the versions being those of NVIDIA's
/// `cudaTypedefs.h` (`PFN_cuMemcpyHtoD_v7000_ptds`). A legacy function without a row (or asked
/// for below the row's version) has no per-thread variant: its legacy function is returned.
pub const PER_THREAD_PROCS: &[(&str, i32, &str)] = &[
    ("cuMemcpyHtoD_v2", 7000, "cuMemcpyHtoD_v2_ptds"),
    ("cuMemcpyDtoH_v2", 7000, "cuMemcpyDtoH_v2_ptds"),
    ("cuMemcpyDtoD_v2", 7000, "cuMemcpyDtoD_v2_ptds"),
    ("cuMemcpy", 7000, "cuMemcpy_ptds"),
    ("cuMemcpyPeer", 7000, "cuMemcpyPeer_ptds"),
    ("cuMemcpy2D_v2", 7000, "cuMemcpy2D_v2_ptds"),
    (
        "cuMemcpy2DUnaligned_v2",
        7000,
        "cuMemcpy2DUnaligned_v2_ptds",
    ),
    ("cuMemsetD8_v2", 7000, "cuMemsetD8_v2_ptds"),
    ("cuMemsetD16_v2", 7000, "cuMemsetD16_v2_ptds"),
    ("cuMemsetD32_v2", 7000, "cuMemsetD32_v2_ptds"),
    ("cuMemsetD2D8_v2", 7000, "cuMemsetD2D8_v2_ptds"),
    ("cuMemsetD2D16_v2", 7000, "cuMemsetD2D16_v2_ptds"),
    ("cuMemsetD2D32_v2", 7000, "cuMemsetD2D32_v2_ptds"),
    ("cuMemcpyAsync", 7000, "cuMemcpyAsync_ptsz"),
    ("cuMemcpyHtoDAsync_v2", 7000, "cuMemcpyHtoDAsync_v2_ptsz"),
    ("cuMemcpyDtoHAsync_v2", 7000, "cuMemcpyDtoHAsync_v2_ptsz"),
    ("cuMemcpyDtoDAsync_v2", 7000, "cuMemcpyDtoDAsync_v2_ptsz"),
    ("cuMemcpyPeerAsync", 7000, "cuMemcpyPeerAsync_ptsz"),
    ("cuMemcpy2DAsync_v2", 7000, "cuMemcpy2DAsync_v2_ptsz"),
    ("cuMemsetD8Async", 7000, "cuMemsetD8Async_ptsz"),
    ("cuMemsetD16Async", 7000, "cuMemsetD16Async_ptsz"),
    ("cuMemsetD32Async", 7000, "cuMemsetD32Async_ptsz"),
    ("cuMemsetD2D8Async", 7000, "cuMemsetD2D8Async_ptsz"),
    ("cuMemsetD2D16Async", 7000, "cuMemsetD2D16Async_ptsz"),
    ("cuMemsetD2D32Async", 7000, "cuMemsetD2D32Async_ptsz"),
    ("cuMemAllocAsync", 11020, "cuMemAllocAsync_ptsz"),
    (
        "cuMemAllocFromPoolAsync",
        11020,
        "cuMemAllocFromPoolAsync_ptsz",
    ),
    ("cuMemFreeAsync", 11020, "cuMemFreeAsync_ptsz"),
    ("cuStreamGetPriority", 7000, "cuStreamGetPriority_ptsz"),
    ("cuStreamGetFlags", 7000, "cuStreamGetFlags_ptsz"),
    ("cuStreamIsCapturing", 10000, "cuStreamIsCapturing_ptsz"),
    (
        "cuStreamBeginCapture_v2",
        10010,
        "cuStreamBeginCapture_v2_ptsz",
    ),
    ("cuStreamEndCapture", 10000, "cuStreamEndCapture_ptsz"),
    (
        "cuStreamUpdateCaptureDependencies",
        11030,
        "cuStreamUpdateCaptureDependencies_ptsz",
    ),
    (
        "cuStreamUpdateCaptureDependencies_v2",
        12030,
        "cuStreamUpdateCaptureDependencies_v2_ptsz",
    ),
    (
        "cuStreamGetCaptureInfo_v2",
        11030,
        "cuStreamGetCaptureInfo_v2_ptsz",
    ),
    (
        "cuStreamGetCaptureInfo_v3",
        12030,
        "cuStreamGetCaptureInfo_v3_ptsz",
    ),
    ("cuGraphLaunch", 10000, "cuGraphLaunch_ptsz"),
    (
        "cuGraphInstantiateWithParams",
        12000,
        "cuGraphInstantiateWithParams_ptsz",
    ),
    ("cuGraphUpload", 11010, "cuGraphUpload_ptsz"),
    ("cuStreamWaitEvent", 7000, "cuStreamWaitEvent_ptsz"),
    ("cuStreamAddCallback", 7000, "cuStreamAddCallback_ptsz"),
    ("cuStreamQuery", 7000, "cuStreamQuery_ptsz"),
    ("cuStreamSynchronize", 7000, "cuStreamSynchronize_ptsz"),
    ("cuEventRecord", 7000, "cuEventRecord_ptsz"),
    (
        "cuEventRecordWithFlags",
        11010,
        "cuEventRecordWithFlags_ptsz",
    ),
    ("cuLaunchHostFunc", 10000, "cuLaunchHostFunc_ptsz"),
    ("cuLaunchHostFunc_v2", 13010, "cuLaunchHostFunc_v2_ptsz"),
    ("cuLaunchKernel", 7000, "cuLaunchKernel_ptsz"),
    ("cuLaunchKernelEx", 11060, "cuLaunchKernelEx_ptsz"),
    (
        "cuLaunchCooperativeKernel",
        9000,
        "cuLaunchCooperativeKernel_ptsz",
    ),
];

/// The function a row of [`PROCS`] names.
fn resolve(exported: &str) -> Option<*mut c_void> {
    match exported {
        "cuGetProcAddress" => Some(cuGetProcAddress as *mut c_void),
        _ => entry_point(exported),
    }
}

/// The variant of `name` for `version`, or the `CUdriverProcAddressQueryResult` saying why none:
/// with `per_thread`, the per-thread-default-stream variant of that function where one exists
/// at `version` (see [`PER_THREAD_PROCS`]).
pub fn lookup(name: &str, version: i32, per_thread: bool) -> Result<*mut c_void, i32> {
    let mut known = false;
    let mut best: Option<(i32, &str)> = None;
    for &(base, since, exported) in PROCS {
        if base != name {
            continue;
        }
        known = true;
        if since <= version && best.is_none_or(|(b, _)| since > b) {
            best = Some((since, exported));
        }
    }
    match best {
        Some((_, exported)) => {
            let variant = PER_THREAD_PROCS
                .iter()
                .find(|&&(legacy, since, _)| per_thread && legacy == exported && since <= version)
                .map_or(exported, |&(_, _, variant)| variant);
            resolve(variant).ok_or(PROC_SYMBOL_NOT_FOUND)
        }
        None if known => Err(PROC_VERSION_NOT_SUFFICIENT),
        None => Err(PROC_SYMBOL_NOT_FOUND),
    }
}

/// Both `cuGetProcAddress` forms: `*pfn` is the function or NULL, `status` (optional) says why;
/// a symbol that does not resolve is `CUDA_ERROR_NOT_FOUND`. Needs no `cuInit` (NVIDIA's runtime
/// looks `cuInit` itself up this way).
///
/// # Safety
/// `symbol` is null or NUL-terminated; `pfn` is null or valid for a pointer write; `status` is
/// null or valid for an int write.
unsafe fn get_proc_address(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: i32,
    flags: u64,
    status: *mut i32,
) -> CuResult<()> {
    if symbol.is_null() || pfn.is_null() || version <= 0 || flags > 3 {
        return Err(INVALID_VALUE);
    }
    // SAFETY: the caller passes a NUL-terminated symbol name.
    let name = unsafe { CStr::from_ptr(symbol) }.to_bytes();
    let found = std::str::from_utf8(name)
        .map_err(|_| PROC_SYMBOL_NOT_FOUND)
        // A driver serves no variant newer than itself: asked for a later version, its newest.
        .and_then(|name| {
            let version = version.min(driver_version());
            lookup(name, version, flags & 0x3 == PER_THREAD_DEFAULT_STREAM)
        });
    if let Err(why) = found {
        if export_table::logging() {
            let why = match why {
                PROC_VERSION_NOT_SUFFICIENT => "known, but not at this version",
                _ => "not found",
            };
            export_table::log(format_args!(
                "cuGetProcAddress({:?}, {version}, flags {flags}): {why}",
                String::from_utf8_lossy(name)
            ));
        }
    }
    if !status.is_null() {
        // SAFETY: non-null out-parameter of the caller.
        unsafe { status.write(found.err().unwrap_or(PROC_SUCCESS)) };
    }
    // SAFETY: checked non-null; out-parameter of the caller.
    unsafe { pfn.write(found.unwrap_or(std::ptr::null_mut())) };
    found.map(drop).map_err(|_| NOT_FOUND)
}

/// `cuGetProcAddress` as CUDA 11.3-11.8 declared it (no status argument): what
/// `cuGetProcAddress_v2` returns for "cuGetProcAddress" below version 12000, and exported under
/// that name as NVIDIA's driver exports it, for binaries built against CUDA 11 headers (CUDA 12's
/// `cuda.h` maps the name to `cuGetProcAddress_v2` by a macro and declares this prototype only
/// with `__CUDA_API_VERSION_INTERNAL`, as ours does).
///
/// # Safety
/// As for `cuGetProcAddress_v2`, without the status pointer.
#[unsafe(no_mangle)]
#[allow(non_snake_case)] // CUDA's name
pub unsafe extern "C" fn cuGetProcAddress(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: i32,
    flags: u64,
) -> u32 {
    guard("cuGetProcAddress", || {
        // SAFETY: the caller's arguments; no status is written.
        unsafe { get_proc_address(symbol, pfn, version, flags, std::ptr::null_mut()) }
    })
}

/// `CUlaunchConfig`.
#[repr(C)]
pub struct LaunchConfig {
    grid: [u32; 3],
    block: [u32; 3],
    shared_mem: u32,
    stream: usize,
    attrs: *mut c_void,
    num_attrs: u32,
}

const _: () = assert!(size_of::<LaunchConfig>() == 56);

/// A launch's configuration, as every launch entry point gives it.
struct Launch {
    grid: [u32; 3],
    block: [u32; 3],
    shared: u32,
    stream: usize,
    cooperative: bool,
}

/// Every driver launch ends here.
///
/// # Safety
/// `params` is null or holds one pointer per kernel parameter; `extra` is null or a
/// CU_LAUNCH_PARAM_END-terminated list of pairs.
unsafe fn launch_kernel(
    function: usize,
    launch: Launch,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CuResult<()> {
    let context = current()?;
    let (blocks, threads) = launch_size(launch.grid, launch.block)?;
    let nparams = parameter_count(function)?;
    if launch.cooperative {
        let device = context.ordinal as i32;
        let per_sm = occupancy(device, threads, 0)?;
        if blocks > per_sm * attribute(16, device)? as u64 {
            return Err(COOPERATIVE_LAUNCH_TOO_LARGE);
        }
    }
    let shape = Shape {
        grid: launch.grid,
        block: launch.block,
        shared: launch.shared,
        globals: Vec::new(),
    };
    context.launch(launch.stream, |context| {
        // SAFETY: the caller's kernelParams/extra, as cuLaunchKernel documents them.
        unsafe { kernel_work(context, function, nparams, shape, params, extra) }
    })
}

/// The blocks and the threads per block of a launch (`INVALID_VALUE` for none, or for more
/// than 1024 threads per block).
fn launch_size(grid: [u32; 3], block: [u32; 3]) -> CuResult<(u64, u64)> {
    let threads = block.iter().map(|&b| u64::from(b)).product::<u64>();
    let blocks = grid.iter().map(|&g| u64::from(g)).product::<u64>();
    if blocks == 0 || threads == 0 || threads > 1024 {
        return Err(INVALID_VALUE);
    }
    Ok((blocks, threads))
}

/// How many parameters `function` takes (`INVALID_HANDLE`-like errors for an unknown one).
fn parameter_count(function: usize) -> CuResult<usize> {
    let layout = initialized()?.functions.by_handle(function)?.layout();
    Ok(layout.params.len())
}

/// Edge data that asks for nothing but default edges (NULL, or every entry zero): what the shim
/// supports; anything else is `INVALID_VALUE`.
///
/// # Safety
/// `edge_data` is null or valid for `count` entries.
unsafe fn default_edges(edge_data: *const [u8; 8], count: usize) -> CuResult<()> {
    if edge_data.is_null() || count == 0 {
        return Ok(());
    }
    // SAFETY: non-null edge data holds `count` entries, by the caller's contract.
    let edges = unsafe { std::slice::from_raw_parts(edge_data, count) };
    match edges.iter().all(|e| e.iter().all(|&b| b == 0)) {
        true => Ok(()),
        false => Err(INVALID_VALUE),
    }
}

/// The nodes `dependencies` names (`numDependencies` of them; NULL only for none).
///
/// # Safety
/// `dependencies` is null or valid for `count` handles.
unsafe fn node_list<'a>(dependencies: *const usize, count: usize) -> CuResult<&'a [usize]> {
    match (dependencies.is_null(), count) {
        (_, 0) => Ok(&[]),
        (true, _) => Err(INVALID_VALUE),
        // SAFETY: non-null and valid for `count` handles by the caller's contract.
        (false, _) => Ok(unsafe { std::slice::from_raw_parts(dependencies, count) }),
    }
}

/// Adds a node running `op` to `graph` after `count` `dependencies` and writes its handle.
///
/// # Safety
/// `node` is null (rejected) or valid for a write; `dependencies` as for [`node_list`].
unsafe fn add_node(
    node: *mut usize,
    graph: usize,
    dependencies: *const usize,
    count: usize,
    op: crate::graph::Op,
) -> CuResult<()> {
    if node.is_null() {
        return Err(INVALID_VALUE);
    }
    // SAFETY: the caller's contract.
    let deps = unsafe { node_list(dependencies, count) }?;
    let handle = initialized()?.graphs.add(graph, op, deps)?;
    // SAFETY: checked non-null; out-parameter of the caller.
    unsafe { put(node, handle) }
}

/// `CUDA_GRAPH_INSTANTIATE_PARAMS`.
#[repr(C)]
pub struct InstantiateParams {
    flags: u64,
    upload_stream: usize,
    error_node: usize,
    result: u32,
}

/// `CUgraphExecUpdateResultInfo`.
#[repr(C)]
pub struct ExecUpdateResultInfo {
    result: u32,
    error_node: usize,
    error_from_node: usize,
}

/// `CUDA_KERNEL_NODE_PARAMS` (`_v2`, the same in CUDA 12 and 13).
#[repr(C)]
pub struct KernelNodeParams {
    function: usize,
    grid: [u32; 3],
    block: [u32; 3],
    shared_mem: u32,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
    kernel: usize,
    context: usize,
}

const _: () = assert!(
    size_of::<KernelNodeParams>() == 72
        && size_of::<InstantiateParams>() == 32
        && size_of::<ExecUpdateResultInfo>() == 24
        && size_of::<MemsetNodeParams>() == 40
        && size_of::<HostNodeParams>() == 16
);

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

/// `CUDA_HOST_NODE_PARAMS`.
#[repr(C)]
pub struct HostNodeParams {
    function: Option<unsafe extern "C" fn(*mut c_void)>,
    data: *mut c_void,
}

/// The launch a kernel node's parameters describe, on the current context (a node naming a
/// `CUkernel` instead of a function is not supported: `INVALID_VALUE`).
///
/// # Safety
/// `params` is null (rejected) or points to a `CUDA_KERNEL_NODE_PARAMS` whose argument
/// pointers are valid as for `cuLaunchKernel`.
unsafe fn kernel_node(params: *const KernelNodeParams) -> CuResult<device::Work> {
    let context = current()?;
    // SAFETY: null or the caller's parameters.
    let p = unsafe { params.as_ref() }.ok_or(INVALID_VALUE)?;
    if p.function == 0 {
        return Err(INVALID_VALUE);
    }
    launch_size(p.grid, p.block)?;
    let nparams = parameter_count(p.function)?;
    let shape = Shape {
        grid: p.grid,
        block: p.block,
        shared: p.shared_mem,
        globals: Vec::new(),
    };
    // SAFETY: the node's kernelParams/extra, as cuLaunchKernel documents them.
    unsafe { kernel_work(context, p.function, nparams, shape, p.params, p.extra) }
}

/// The launch of `function` (`nparams` parameters) with `shape` on `context`, its arguments
/// copied from `kernelParams` or `extra` (one of them, or neither for a kernel without
/// parameters).
///
/// # Safety
/// `params` is null or holds one pointer per kernel parameter; `extra` is null or a
/// CU_LAUNCH_PARAM_END-terminated list of pairs.
unsafe fn kernel_work(
    context: &Context,
    function: usize,
    nparams: usize,
    shape: Shape,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CuResult<device::Work> {
    match (params.is_null(), extra.is_null()) {
        (false, true) => {
            // SAFETY: kernelParams holds one pointer per kernel parameter.
            let values = unsafe { std::slice::from_raw_parts(params as *const *const u8, nparams) };
            context.kernel(function, Some(values), None, shape)
        }
        (true, false) => {
            // SAFETY: `extra` is a CU_LAUNCH_PARAM_END-terminated list of pairs.
            let packed = unsafe { packed_arguments(extra) }?;
            context.kernel(function, None, Some(packed), shape)
        }
        (true, true) => context.kernel(function, None, None, shape),
        (false, false) => Err(INVALID_VALUE),
    }
}

/// `CUctxCreateParams` (CUDA 12.5).
#[repr(C)]
pub struct CtxCreateParams {
    exec_affinity: *mut c_void,
    exec_affinity_count: i32,
    cig: *mut c_void,
}

/// Every `cuCtxCreate` variant: a new context of `device`, current to the calling thread.
fn create_context(out: *mut usize, flags: u32, device: i32) -> CuResult<()> {
    if out.is_null() {
        return Err(INVALID_VALUE);
    }
    let driver = device::driver()?;
    driver.device(device)?;
    let context = driver.create_context(device as usize, flags)?;
    // SAFETY: checked non-null; the caller's out-parameter.
    unsafe { put(out, context.handle()) }
}

/// The context a peer copy runs on (the current one, else the destination's) and the two
/// peers' contexts.
fn peer(
    dst_context: usize,
    src_context: usize,
) -> CuResult<(&'static Context, [&'static Context; 2])> {
    let driver = initialized()?;
    let dst = driver.context_of_handle(dst_context)?;
    let src = driver.context_of_handle(src_context)?;
    let context = match current() {
        Ok(context) => context,
        Err(INVALID_CONTEXT) => {
            dst.device.sticky()?;
            dst
        }
        Err(err) => return Err(err),
    };
    Ok((context, [dst, src]))
}

/// `CUDA_MEMCPY2D` (128 bytes).
#[repr(C)]
pub struct Memcpy2d {
    src_x: usize,
    src_y: usize,
    src_memory_type: u32,
    src_host: *const c_void,
    src_device: u64,
    src_array: usize,
    src_pitch: usize,
    dst_x: usize,
    dst_y: usize,
    dst_memory_type: u32,
    dst_host: *mut c_void,
    dst_device: u64,
    dst_array: usize,
    dst_pitch: usize,
    width: usize,
    height: usize,
}

const _: () = assert!(size_of::<Memcpy2d>() == 128);

/// The address of the first byte one side of a 2D copy touches, and the type the caller
/// declared. Arrays do not exist on the shim, so an array side is `CUDA_ERROR_INVALID_VALUE`.
fn copy_side(
    memory_type: u32,
    host: usize,
    device: u64,
    x: usize,
    y: usize,
    pitch: usize,
) -> CuResult<(usize, MemoryType)> {
    const HOST: u32 = 1;
    const DEVICE: u32 = 2;
    const UNIFIED: u32 = 4;
    let (base, declared) = match memory_type {
        HOST => (host, MemoryType::Host),
        DEVICE => (device as usize, MemoryType::Device),
        UNIFIED => (device as usize, MemoryType::Any),
        _ => return Err(INVALID_VALUE),
    };
    if base == 0 {
        return Err(INVALID_VALUE);
    }
    let addr = y
        .checked_mul(pitch)
        .and_then(|rows| rows.checked_add(x))
        .and_then(|offset| base.checked_add(offset))
        .ok_or(INVALID_VALUE)?;
    Ok((addr, declared))
}

/// Every 2D copy ends here.
///
/// # Safety
/// `copy` is null or points to a `CUDA_MEMCPY2D` whose host rows are valid.
unsafe fn memcpy_2d(copy: *const Memcpy2d, stream: usize, synchronous: bool) -> CuResult<()> {
    let context = current()?;
    // SAFETY: null (rejected) or a CUDA_MEMCPY2D (the caller's contract).
    let c = unsafe { copy.as_ref() }.ok_or(INVALID_VALUE)?;
    let (rect, declared) = copy_rect(c)?;
    context.copy_2d(rect, 4, declared, stream, synchronous)
}

/// The rows a `CUDA_MEMCPY2D` copies and the memory types it declares for its source and its
/// destination.
fn copy_rect(c: &Memcpy2d) -> CuResult<(Rect, [MemoryType; 2])> {
    let (src, src_type) = copy_side(
        c.src_memory_type,
        c.src_host as usize,
        c.src_device,
        c.src_x,
        c.src_y,
        c.src_pitch,
    )?;
    let (dst, dst_type) = copy_side(
        c.dst_memory_type,
        c.dst_host as usize,
        c.dst_device,
        c.dst_x,
        c.dst_y,
        c.dst_pitch,
    )?;
    let rect = Rect {
        dst,
        dst_pitch: c.dst_pitch,
        src,
        src_pitch: c.src_pitch,
        width: c.width,
        height: c.height,
    };
    Ok((rect, [src_type, dst_type]))
}

/// `CUDA_MEMCPY3D` (200 bytes).
#[repr(C)]
pub struct Memcpy3d {
    src_x: usize,
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
    dst_x: usize,
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
    width: usize,
    height: usize,
    depth: usize,
}

const _: () = assert!(size_of::<Memcpy3d>() == 200);

impl Memcpy3d {
    /// The same copy as a `CUDA_MEMCPY2D`: the shim supports one slice (depth 1, z and LOD 0),
    /// anything else is `CUDA_ERROR_INVALID_VALUE`.
    fn as_2d(&self) -> CuResult<Memcpy2d> {
        if self.depth != 1
            || self.src_z != 0
            || self.dst_z != 0
            || self.src_lod != 0
            || self.dst_lod != 0
        {
            return Err(INVALID_VALUE);
        }
        Ok(Memcpy2d {
            src_x: self.src_x,
            src_y: self.src_y,
            src_memory_type: self.src_memory_type,
            src_host: self.src_host,
            src_device: self.src_device,
            src_array: self.src_array,
            src_pitch: self.src_pitch,
            dst_x: self.dst_x,
            dst_y: self.dst_y,
            dst_memory_type: self.dst_memory_type,
            dst_host: self.dst_host,
            dst_device: self.dst_device,
            dst_array: self.dst_array,
            dst_pitch: self.dst_pitch,
            width: self.width,
            height: self.height,
        })
    }
}

/// `CUmemAllocationProp` (32 bytes); `allocFlags` is not interpreted.
#[repr(C)]
pub struct AllocationProp {
    kind: u32,
    requested_handle_types: u32,
    location_type: u32,
    location_id: i32,
    win32_handle_meta_data: *mut c_void,
    alloc_flags: [u8; 8],
}

const _: () = assert!(size_of::<AllocationProp>() == 32);

/// `CUmemAccessDesc` (12 bytes).
#[repr(C)]
pub struct AccessDesc {
    location_type: u32,
    location_id: i32,
    flags: u32,
}

const _: () = assert!(size_of::<AccessDesc>() == 12);

/// `CUmemPoolProps` (88 bytes).
#[repr(C)]
pub struct PoolProps {
    alloc_type: u32,
    handle_types: u32,
    location_type: u32,
    location_id: i32,
    win32_security_attributes: *mut c_void,
    max_size: usize,
    usage: u16,
    reserved: [u8; 54],
}

impl PoolProps {
    fn zeroed() -> PoolProps {
        PoolProps {
            alloc_type: 0,
            handle_types: 0,
            location_type: 0,
            location_id: 0,
            win32_security_attributes: std::ptr::null_mut(),
            max_size: 0,
            usage: 0,
            reserved: [0; 54],
        }
    }
}

/// `CUDA_MEM_ALLOC_NODE_PARAMS` (`_v1`, 120 bytes; the runtime's `cudaMemAllocNodeParams`).
#[repr(C)]
pub struct MemAllocNodeParams {
    pool_props: PoolProps,
    access: *const AccessDesc,
    access_count: usize,
    bytesize: usize,
    dptr: u64,
}

const _: () = assert!(size_of::<PoolProps>() == 88 && size_of::<MemAllocNodeParams>() == 120);

/// A `CUmemLocation` must be a device of the shim: its ordinal.
fn check_location(driver: &Driver, location_type: u32, id: i32) -> CuResult<usize> {
    const LOCATION_DEVICE: u32 = 1;
    if location_type != LOCATION_DEVICE {
        return Err(INVALID_VALUE);
    }
    driver.device(id).map(|d| d.ordinal)
}

/// Pinned memory on a device of the shim or on the host (`CU_MEM_LOCATION_TYPE_HOST`, its id
/// ignored; `HOST_NUMA` node 0 and `HOST_NUMA_CURRENT`: the shim's host is one node),
/// exportable by no handle type: the device's ordinal, or [`vmm::HOST`].
///
/// # Safety
/// `prop` is null or points to a `CUmemAllocationProp`.
unsafe fn check_prop(driver: &Driver, prop: *const AllocationProp) -> CuResult<usize> {
    const ALLOCATION_PINNED: u32 = 1;
    const LOCATION_HOST: u32 = 2;
    const LOCATION_HOST_NUMA: u32 = 3;
    const LOCATION_HOST_NUMA_CURRENT: u32 = 4;
    // SAFETY: null (rejected) or a CUmemAllocationProp (the caller's contract).
    let prop = unsafe { prop.as_ref() }.ok_or(INVALID_VALUE)?;
    if prop.kind != ALLOCATION_PINNED {
        return Err(INVALID_VALUE);
    }
    let location = match (prop.location_type, prop.location_id) {
        (LOCATION_HOST, _) | (LOCATION_HOST_NUMA, 0) | (LOCATION_HOST_NUMA_CURRENT, _) => {
            // Host allocations are not IPC capable: any handle type is an invalid value.
            if prop.requested_handle_types != 0 {
                return Err(INVALID_VALUE);
            }
            return Ok(vmm::HOST);
        }
        (kind, id) => check_location(driver, kind, id)?,
    };
    if prop.requested_handle_types != 0 {
        return Err(NOT_SUPPORTED);
    }
    Ok(location)
}

/// # Safety
/// `pp` is null or valid for a pointer write.
unsafe fn host_alloc(pp: *mut *mut c_void, size: usize) -> CuResult<()> {
    let context = current()?;
    if pp.is_null() {
        return Err(INVALID_VALUE);
    }
    let addr = context.alloc_host(size)?;
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

/// The `CUpointer_attribute`s the shim answers.
mod pointer_attributes {
    pub const CONTEXT: i32 = 1;
    pub const MEMORY_TYPE: i32 = 2;
    pub const DEVICE_POINTER: i32 = 3;
    pub const HOST_POINTER: i32 = 4;
    pub const IS_MANAGED: i32 = 8;
    pub const DEVICE_ORDINAL: i32 = 9;
    pub const RANGE_START: i32 = 11;
    pub const RANGE_SIZE: i32 = 12;
    pub const MAPPED: i32 = 13;
}

/// The value `cuPointerGetAttributes` gives an attribute of memory CUDA does not know: null,
/// zero, and for the device ordinal `cudaInvalidDeviceId` (-2), what `cudaPointerGetAttributes`
/// reports for such memory.
///
/// # Safety
/// `data` is valid for a write of the attribute's documented type.
unsafe fn null_pointer_attribute(data: *mut c_void, attr: i32) -> CuResult<()> {
    use pointer_attributes::*;
    // SAFETY (all arms): `data` is valid for the type the attribute documents (caller contract).
    unsafe {
        match attr {
            CONTEXT | HOST_POINTER => put(data as *mut usize, 0),
            MEMORY_TYPE | IS_MANAGED | MAPPED => put(data as *mut u32, 0),
            DEVICE_POINTER | RANGE_START => put(data as *mut u64, 0),
            RANGE_SIZE => put(data as *mut usize, 0),
            DEVICE_ORDINAL => put(data as *mut i32, -2),
            _ => Err(INVALID_VALUE),
        }
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
    use pointer_attributes::*;
    const MEMORYTYPE_HOST: u32 = 1;
    const MEMORYTYPE_DEVICE: u32 = 2;
    let driver = initialized()?;
    let (start, size, memory_type, managed, host_visible, device) = match context.place(ptr) {
        Place::Device {
            start,
            size,
            managed,
            device,
        } => (start, size, MEMORYTYPE_DEVICE, managed, managed, device),
        Place::Pinned {
            start,
            size,
            device,
        } => (start, size, MEMORYTYPE_HOST, false, true, device),
        Place::Pageable => return Err(INVALID_VALUE),
    };
    // Kernels of the current context reach another device's memory only through peer access
    // (managed and page-locked memory are reachable from every device).
    let reachable =
        memory_type == MEMORYTYPE_HOST || managed || driver.peer_enabled(context.ordinal, device);
    // SAFETY (all arms): `data` is valid for the type the attribute documents (caller contract).
    unsafe {
        match attr {
            CONTEXT => put(data as *mut usize, driver.contexts[device].handle()),
            MEMORY_TYPE => put(data as *mut u32, memory_type),
            DEVICE_POINTER if reachable => put(data as *mut u64, ptr as u64),
            HOST_POINTER if host_visible => put(data as *mut *mut c_void, ptr as *mut c_void),
            IS_MANAGED => put(data as *mut u32, managed as u32),
            DEVICE_ORDINAL => put(data as *mut i32, device as i32),
            RANGE_START => put(data as *mut u64, start as u64),
            RANGE_SIZE => put(data as *mut usize, size),
            MAPPED => put(data as *mut u32, 1),
            _ => Err(INVALID_VALUE),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_public_export_is_in_the_proc_table_and_every_row_resolves() {
        for name in EXPORTS.iter().filter(|n| !n.starts_with("cuShim")) {
            assert!(
                PROCS.iter().any(|&(_, _, exported)| exported == *name)
                    || PER_THREAD_PROCS
                        .iter()
                        .any(|&(_, _, variant)| variant == *name),
                "{name} is not in PROCS or PER_THREAD_PROCS"
            );
        }
        for &(legacy, since, variant) in PER_THREAD_PROCS {
            let row = PROCS.iter().find(|&&(_, _, exported)| exported == legacy);
            let (_, legacy_since, _) = row.unwrap_or_else(|| panic!("{legacy} is not in PROCS"));
            assert!(since >= *legacy_since && since >= 7000, "{variant} {since}");
            assert!(resolve(variant).is_some(), "{variant} does not resolve");
            assert!(
                variant == format!("{legacy}_ptsz") || variant == format!("{legacy}_ptds"),
                "{variant} is not a variant of {legacy}"
            );
        }
        for &(base, since, exported) in PROCS {
            assert!(resolve(exported).is_some(), "{exported} does not resolve");
            assert!(
                exported.starts_with(base) && since >= 2000,
                "{base} {since}"
            );
        }
    }

    #[test]
    fn the_version_picks_the_variant() {
        let legacy = cuGetProcAddress as *mut c_void;
        assert_eq!(lookup("cuGetProcAddress", 11030, false), Ok(legacy));
        assert_eq!(lookup("cuGetProcAddress", 11080, false), Ok(legacy));
        assert_eq!(
            lookup("cuGetProcAddress", 12000, false),
            Ok(cuGetProcAddress_v2 as *mut c_void)
        );
        assert_eq!(
            lookup("cuGetProcAddress", 11020, false),
            Err(PROC_VERSION_NOT_SUFFICIENT)
        );
        assert_eq!(
            lookup("cuMemAlloc", 3020, false),
            Ok(cuMemAlloc_v2 as *mut c_void)
        );
        assert_eq!(
            lookup("cuMemAlloc", 3010, false),
            Err(PROC_VERSION_NOT_SUFFICIENT)
        );
        assert_eq!(
            lookup("cuEventElapsedTime", 12070, false),
            Ok(cuEventElapsedTime as *mut c_void)
        );
        assert_eq!(
            lookup("cuEventElapsedTime", 12090, false),
            Ok(cuEventElapsedTime_v2 as *mut c_void)
        );
        // CUDA 13's variants (cudaTypedefs.h: PFN_cuCtxSynchronize_v13000, ...)
        for (name, since, old, new) in [
            (
                "cuCtxSynchronize",
                13000,
                cuCtxSynchronize as *mut c_void,
                cuCtxSynchronize_v2 as *mut c_void,
            ),
            (
                "cuCtxGetDevice",
                13000,
                cuCtxGetDevice as *mut c_void,
                cuCtxGetDevice_v2 as *mut c_void,
            ),
            (
                "cuLaunchHostFunc",
                13010,
                cuLaunchHostFunc as *mut c_void,
                cuLaunchHostFunc_v2 as *mut c_void,
            ),
        ] {
            assert_eq!(lookup(name, 12090, false), Ok(old), "{name}");
            assert_eq!(lookup(name, since - 10, false), Ok(old), "{name}");
            assert_eq!(lookup(name, since, false), Ok(new), "{name}");
            assert_eq!(lookup(name, 13050, false), Ok(new), "{name}");
        }
        assert_eq!(
            lookup("cuMemAlloc_v2", 12090, false),
            Err(PROC_SYMBOL_NOT_FOUND)
        );
        assert_eq!(
            lookup("cuShimGetStats", 12090, false),
            Err(PROC_SYMBOL_NOT_FOUND)
        );
        assert_eq!(
            lookup("cuNoSuchThing", 12090, false),
            Err(PROC_SYMBOL_NOT_FOUND)
        );
    }

    #[test]
    fn the_per_thread_flag_picks_the_per_thread_variant() {
        assert_eq!(
            lookup("cuMemcpyHtoD", 12090, true),
            Ok(cuMemcpyHtoD_v2_ptds as *mut c_void)
        );
        assert_eq!(
            lookup("cuMemcpyHtoD", 12090, false),
            Ok(cuMemcpyHtoD_v2 as *mut c_void)
        );
        assert_eq!(
            lookup("cuMemcpyAsync", 12090, true),
            Ok(cuMemcpyAsync_ptsz as *mut c_void)
        );
        assert_eq!(
            lookup("cuLaunchKernel", 12090, true),
            Ok(cuLaunchKernel_ptsz as *mut c_void)
        );
        assert_eq!(
            lookup("cuMemAllocAsync", 11020, true),
            Ok(cuMemAllocAsync_ptsz as *mut c_void)
        );
        assert_eq!(
            lookup("cuLaunchHostFunc", 13000, true),
            Ok(cuLaunchHostFunc_ptsz as *mut c_void)
        );
        assert_eq!(
            lookup("cuLaunchHostFunc", 13010, true),
            Ok(cuLaunchHostFunc_v2_ptsz as *mut c_void)
        );
        // before CUDA 7.0 no per-thread variant existed: the legacy function
        assert_eq!(
            lookup("cuMemcpyHtoD", 6050, true),
            Ok(cuMemcpyHtoD_v2 as *mut c_void)
        );
        // functions without a per-thread variant answer alike for every flag
        assert_eq!(
            lookup("cuMemAlloc", 12090, true),
            Ok(cuMemAlloc_v2 as *mut c_void)
        );
        assert_eq!(
            lookup("cuEventElapsedTime", 12090, true),
            Ok(cuEventElapsedTime_v2 as *mut c_void)
        );
        // the variants' own names are not base names
        assert_eq!(
            lookup("cuMemcpyAsync_ptsz", 12090, true),
            Err(PROC_SYMBOL_NOT_FOUND)
        );
    }

    #[test]
    fn get_proc_address_flags_choose_legacy_or_per_thread() {
        let name = c"cuLaunchKernel";
        for (flags, expected) in [
            (0u64, cuLaunchKernel as *mut c_void),
            (1, cuLaunchKernel as *mut c_void),
            (2, cuLaunchKernel_ptsz as *mut c_void),
            (3, cuLaunchKernel as *mut c_void),
        ] {
            let mut pfn = std::ptr::null_mut();
            let mut status = -1;
            // SAFETY: a NUL-terminated name and valid out-parameters.
            let result =
                unsafe { get_proc_address(name.as_ptr(), &mut pfn, 12090, flags, &mut status) };
            assert_eq!(result, Ok(()), "flags {flags}");
            assert_eq!((pfn, status), (expected, PROC_SUCCESS), "flags {flags}");
        }
    }
}
