//! The driver entry points the runtime is built on, imported from `libcuda.so.1`.
//!
//! Handles (`CUstream`, `CUevent`, `CUfunction`, `CUcontext`) are pointer-sized, passed as
//! `usize`; `CUresult` is `u32`. The private `cuShim*` calls are exported by cuda-shim's driver
//! only. Resolved by the dynamic linker when tools/build-shim links libcudart.so.12 with -lcuda.

use std::ffi::{c_char, c_void};

/// `struct cudaShimStats` / the driver's `StatsSnapshot`: 14 counters.
#[repr(C)]
pub struct Stats(pub [u64; 14]);

unsafe extern "C" {
    pub fn cuInit(flags: u32) -> u32;
    pub fn cuDriverGetVersion(version: *mut i32) -> u32;
    pub fn cuDeviceGetName(name: *mut c_char, len: i32, device: i32) -> u32;
    pub fn cuDeviceTotalMem_v2(bytes: *mut usize, device: i32) -> u32;
    pub fn cuDeviceGetAttribute(value: *mut i32, attr: i32, device: i32) -> u32;
    pub fn cuDevicePrimaryCtxRetain(context: *mut usize, device: i32) -> u32;
    pub fn cuCtxSetCurrent(context: usize) -> u32;
    pub fn cuCtxGetCurrent(context: *mut usize) -> u32;
    pub fn cuCtxGetDevice(device: *mut i32) -> u32;
    pub fn cuDeviceGetCount(count: *mut i32) -> u32;
    pub fn cuDeviceCanAccessPeer(can_access: *mut i32, device: i32, peer: i32) -> u32;
    pub fn cuDeviceGetP2PAttribute(value: *mut i32, attr: u32, src: i32, dst: i32) -> u32;
    pub fn cuCtxEnablePeerAccess(peer: usize, flags: u32) -> u32;
    pub fn cuCtxDisablePeerAccess(peer: usize) -> u32;
    pub fn cuMemcpyPeer(
        dst: u64,
        dst_context: usize,
        src: u64,
        src_context: usize,
        count: usize,
    ) -> u32;
    pub fn cuMemcpyPeerAsync(
        dst: u64,
        dst_context: usize,
        src: u64,
        src_context: usize,
        count: usize,
        stream: usize,
    ) -> u32;
    pub fn cuCtxSynchronize() -> u32;
    pub fn cuGetProcAddress_v2(
        symbol: *const c_char,
        pfn: *mut *mut c_void,
        version: i32,
        flags: u64,
        status: *mut i32,
    ) -> u32;
    pub fn cuMemAlloc_v2(dptr: *mut u64, size: usize) -> u32;
    pub fn cuMemFree_v2(dptr: u64) -> u32;
    pub fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> u32;
    pub fn cuMemAllocHost_v2(pp: *mut *mut c_void, size: usize) -> u32;
    pub fn cuMemHostAlloc(pp: *mut *mut c_void, size: usize, flags: u32) -> u32;
    pub fn cuMemFreeHost(p: *mut c_void) -> u32;
    pub fn cuMemHostGetDevicePointer_v2(pdptr: *mut u64, p: *mut c_void, flags: u32) -> u32;
    pub fn cuMemAllocManaged(dptr: *mut u64, size: usize, flags: u32) -> u32;
    pub fn cuMemAllocAsync(dptr: *mut u64, size: usize, stream: usize) -> u32;
    pub fn cuMemFreeAsync(dptr: u64, stream: usize) -> u32;
    pub fn cuMemsetD8Async(dst: u64, value: u8, count: usize, stream: usize) -> u32;
    pub fn cuPointerGetAttribute(data: *mut c_void, attr: i32, ptr: u64) -> u32;
    pub fn cuStreamCreate(stream: *mut usize, flags: u32) -> u32;
    pub fn cuStreamDestroy_v2(stream: usize) -> u32;
    pub fn cuStreamSynchronize(stream: usize) -> u32;
    pub fn cuStreamQuery(stream: usize) -> u32;
    pub fn cuStreamWaitEvent(stream: usize, event: usize, flags: u32) -> u32;
    pub fn cuEventCreate(event: *mut usize, flags: u32) -> u32;
    pub fn cuEventRecord(event: usize, stream: usize) -> u32;
    pub fn cuEventSynchronize(event: usize) -> u32;
    pub fn cuEventQuery(event: usize) -> u32;
    pub fn cuEventElapsedTime(ms: *mut f32, start: usize, end: usize) -> u32;
    pub fn cuEventDestroy_v2(event: usize) -> u32;
    pub fn cuLaunchKernel(
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
    ) -> u32;

    pub fn cuShimMemcpy(
        dst: u64,
        src: u64,
        count: usize,
        kind: u32,
        stream: usize,
        synchronous: u32,
    ) -> u32;
    pub fn cuShimRegisterKernel(
        host: *const c_void,
        name: *const c_char,
        nparams: i32,
        sizes: *const usize,
        simulated_ns: u64,
    ) -> u32;
    pub fn cuShimRegisterFunctionName(host: *const c_void, name: *const c_char) -> u32;
    pub fn cuShimFunctionFromHost(host: *const c_void, function: *mut usize) -> u32;
    pub fn cuShimGetStats(stats: *mut Stats) -> u32;
    pub fn cuShimRaiseDeviceError(error: u32) -> u32;
    pub fn cuShimGetStickyError() -> u32;
}
