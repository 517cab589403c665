//! The driver entry points the runtime is built on, imported from `libcuda.so.1`.
//!
//! Handles (`CUstream`, `CUevent`, `CUfunction`, `CUcontext`) are pointer-sized, passed as
//! `usize`; `CUresult` is `u32`. The private `cuShim*` calls are exported by cuda-shim's driver
//! only. Resolved by the dynamic linker when tools/build-shim links libcudart.so.12 with -lcuda.

use std::ffi::{c_char, c_void};

/// `cudaHostFn_t` / `CUhostFn`.
pub type HostFn = Option<unsafe extern "C" fn(*mut c_void)>;
/// `cudaStreamCallback_t` / `CUstreamCallback`: (stream, status, userData).
pub type StreamCallback = Option<unsafe extern "C" fn(usize, u32, *mut c_void)>;

/// `cudaIpcMemHandle_t`, `cudaIpcEventHandle_t` and their driver twins: 64 bytes by value.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct IpcHandle(pub [u8; 64]);

/// `CUDA_MEMCPY2D` (128 bytes), as the driver takes it.
#[repr(C)]
pub struct Memcpy2d {
    pub src_x: usize,
    pub src_y: usize,
    pub src_memory_type: u32,
    pub src_host: *const c_void,
    pub src_device: u64,
    pub src_array: usize,
    pub src_pitch: usize,
    pub dst_x: usize,
    pub dst_y: usize,
    pub dst_memory_type: u32,
    pub dst_host: *mut c_void,
    pub dst_device: u64,
    pub dst_array: usize,
    pub dst_pitch: usize,
    pub width: usize,
    pub height: usize,
}

const _: () = assert!(size_of::<Memcpy2d>() == 128);

/// `CUDA_KERNEL_NODE_PARAMS` (`_v2`, 72 bytes), as the driver takes it.
#[repr(C)]
pub struct KernelNodeParams {
    pub function: usize,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_mem: u32,
    pub params: *mut *mut c_void,
    pub extra: *mut *mut c_void,
    pub kernel: usize,
    pub context: usize,
}

const _: () = assert!(size_of::<KernelNodeParams>() == 72);

/// `CUDA_MEMSET_NODE_PARAMS` and `struct cudaMemsetParams` (the same layout).
#[repr(C)]
pub struct MemsetParams {
    pub dst: u64,
    pub pitch: usize,
    pub value: u32,
    pub element_size: u32,
    pub width: usize,
    pub height: usize,
}

/// `CUDA_HOST_NODE_PARAMS` and `struct cudaHostNodeParams` (the same layout).
#[repr(C)]
pub struct HostNodeParams {
    pub function: HostFn,
    pub data: *mut c_void,
}

/// `CUDA_MEMCPY3D` (200 bytes), as the driver takes it.
#[repr(C)]
pub struct Memcpy3d {
    pub src_x: usize,
    pub src_y: usize,
    pub src_z: usize,
    pub src_lod: usize,
    pub src_memory_type: u32,
    pub src_host: *const c_void,
    pub src_device: u64,
    pub src_array: usize,
    pub reserved0: *mut c_void,
    pub src_pitch: usize,
    pub src_height: usize,
    pub dst_x: usize,
    pub dst_y: usize,
    pub dst_z: usize,
    pub dst_lod: usize,
    pub dst_memory_type: u32,
    pub dst_host: *mut c_void,
    pub dst_device: u64,
    pub dst_array: usize,
    pub reserved1: *mut c_void,
    pub dst_pitch: usize,
    pub dst_height: usize,
    pub width: usize,
    pub height: usize,
    pub depth: usize,
}

const _: () = assert!(
    size_of::<Memcpy3d>() == 200
        && size_of::<MemsetParams>() == 40
        && size_of::<HostNodeParams>() == 16
);

/// `struct cudaShimStats` / the driver's `StatsSnapshot`: 14 counters.
#[repr(C)]
pub struct Stats(pub [u64; 14]);

unsafe extern "C" {
    pub fn cuInit(flags: u32) -> u32;
    pub fn cuStreamBeginCapture_v2(stream: usize, mode: u32) -> u32;
    pub fn cuStreamEndCapture(stream: usize, graph: *mut usize) -> u32;
    pub fn cuStreamIsCapturing(stream: usize, status: *mut u32) -> u32;
    #[cfg(not(feature = "cuda13"))]
    pub fn cuStreamGetCaptureInfo_v2(
        stream: usize,
        status: *mut u32,
        id: *mut u64,
        graph: *mut usize,
        dependencies: *mut *const usize,
        count: *mut usize,
    ) -> u32;
    pub fn cuStreamGetCaptureInfo_v3(
        stream: usize,
        status: *mut u32,
        id: *mut u64,
        graph: *mut usize,
        dependencies: *mut *const usize,
        edge_data: *mut *const c_void,
        count: *mut usize,
    ) -> u32;
    pub fn cuThreadExchangeStreamCaptureMode(mode: *mut u32) -> u32;
    pub fn cuStreamUpdateCaptureDependencies_v2(
        stream: usize,
        dependencies: *mut usize,
        edge_data: *const c_void,
        count: usize,
        flags: u32,
    ) -> u32;
    pub fn cuGraphInstantiateWithFlags(exec: *mut usize, graph: usize, flags: u64) -> u32;
    pub fn cuGraphLaunch(exec: usize, stream: usize) -> u32;
    pub fn cuGraphExecDestroy(exec: usize) -> u32;
    pub fn cuGraphDestroy(graph: usize) -> u32;
    pub fn cuGraphGetNodes(graph: usize, nodes: *mut usize, count: *mut usize) -> u32;
    pub fn cuGraphDebugDotPrint(graph: usize, path: *const c_char, flags: u32) -> u32;
    pub fn cuGraphCreate(graph: *mut usize, flags: u32) -> u32;
    pub fn cuGraphAddKernelNode_v2(
        node: *mut usize,
        graph: usize,
        dependencies: *const usize,
        count: usize,
        params: *const KernelNodeParams,
    ) -> u32;
    pub fn cuGraphAddMemsetNode(
        node: *mut usize,
        graph: usize,
        dependencies: *const usize,
        count: usize,
        params: *const MemsetParams,
        context: usize,
    ) -> u32;
    pub fn cuGraphAddMemcpyNode(
        node: *mut usize,
        graph: usize,
        dependencies: *const usize,
        count: usize,
        copy: *const Memcpy3d,
        context: usize,
    ) -> u32;
    pub fn cuGraphAddHostNode(
        node: *mut usize,
        graph: usize,
        dependencies: *const usize,
        count: usize,
        params: *const HostNodeParams,
    ) -> u32;
    pub fn cuGraphAddEmptyNode(
        node: *mut usize,
        graph: usize,
        dependencies: *const usize,
        count: usize,
    ) -> u32;
    pub fn cuGraphAddEventRecordNode(
        node: *mut usize,
        graph: usize,
        dependencies: *const usize,
        count: usize,
        event: usize,
    ) -> u32;
    pub fn cuGraphAddEventWaitNode(
        node: *mut usize,
        graph: usize,
        dependencies: *const usize,
        count: usize,
        event: usize,
    ) -> u32;
    pub fn cuGraphAddChildGraphNode(
        node: *mut usize,
        graph: usize,
        dependencies: *const usize,
        count: usize,
        child: usize,
    ) -> u32;
    pub fn cuGraphAddMemAllocNode(
        node: *mut usize,
        graph: usize,
        dependencies: *const usize,
        count: usize,
        params: *mut c_void,
    ) -> u32;
    pub fn cuGraphMemAllocNodeGetParams(node: usize, params: *mut c_void) -> u32;
    pub fn cuGraphAddMemFreeNode(
        node: *mut usize,
        graph: usize,
        dependencies: *const usize,
        count: usize,
        dptr: u64,
    ) -> u32;
    pub fn cuGraphMemFreeNodeGetParams(node: usize, dptr: *mut u64) -> u32;
    pub fn cuDeviceGraphMemTrim(device: i32) -> u32;
    pub fn cuDeviceGetGraphMemAttribute(device: i32, attr: u32, value: *mut c_void) -> u32;
    pub fn cuDeviceSetGraphMemAttribute(device: i32, attr: u32, value: *mut c_void) -> u32;
    pub fn cuGraphAddDependencies_v2(
        graph: usize,
        from: *const usize,
        to: *const usize,
        edge_data: *const c_void,
        count: usize,
    ) -> u32;
    pub fn cuGraphInstantiateWithParams(exec: *mut usize, graph: usize, params: *mut c_void)
    -> u32;
    pub fn cuGraphExecUpdate_v2(exec: usize, graph: usize, info: *mut c_void) -> u32;
    pub fn cuGraphUpload(exec: usize, stream: usize) -> u32;
    pub fn cuGraphExecKernelNodeSetParams_v2(
        exec: usize,
        node: usize,
        params: *const KernelNodeParams,
    ) -> u32;
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

    pub fn cuLaunchCooperativeKernel(
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
    ) -> u32;

    pub fn cuDevicePrimaryCtxRelease_v2(device: i32) -> u32;
    pub fn cuDevicePrimaryCtxReset_v2(device: i32) -> u32;
    pub fn cuDevicePrimaryCtxSetFlags_v2(device: i32, flags: u32) -> u32;
    pub fn cuDevicePrimaryCtxGetState(device: i32, flags: *mut u32, active: *mut i32) -> u32;
    pub fn cuCtxGetFlags(flags: *mut u32) -> u32;
    pub fn cuDeviceGetDefaultMemPool(pool: *mut usize, device: i32) -> u32;
    pub fn cuMemAllocFromPoolAsync(dptr: *mut u64, size: usize, pool: usize, stream: usize) -> u32;
    pub fn cuMemAllocPitch_v2(
        dptr: *mut u64,
        pitch: *mut usize,
        width: usize,
        height: usize,
        element_size: u32,
    ) -> u32;
    pub fn cuMemcpy2D_v2(copy: *const Memcpy2d) -> u32;
    pub fn cuMemcpy2DAsync_v2(copy: *const Memcpy2d, stream: usize) -> u32;
    pub fn cuMemsetD2D8Async(
        dst: u64,
        pitch: usize,
        value: u8,
        width: usize,
        height: usize,
        stream: usize,
    ) -> u32;
    pub fn cuDeviceGetPCIBusId(bus_id: *mut c_char, len: i32, device: i32) -> u32;
    pub fn cuCtxGetStreamPriorityRange(least: *mut i32, greatest: *mut i32) -> u32;
    pub fn cuStreamCreateWithPriority(stream: *mut usize, flags: u32, priority: i32) -> u32;
    pub fn cuStreamGetPriority(stream: usize, priority: *mut i32) -> u32;
    pub fn cuStreamGetFlags(stream: usize, flags: *mut u32) -> u32;
    pub fn cuLaunchHostFunc(stream: usize, func: HostFn, data: *mut c_void) -> u32;
    pub fn cuStreamAddCallback(
        stream: usize,
        callback: StreamCallback,
        data: *mut c_void,
        flags: u32,
    ) -> u32;
    pub fn cuEventRecordWithFlags(event: usize, stream: usize, flags: u32) -> u32;
    pub fn cuMemHostRegister_v2(p: *mut c_void, size: usize, flags: u32) -> u32;
    pub fn cuMemHostUnregister(p: *mut c_void) -> u32;
    pub fn cuIpcGetMemHandle(handle: *mut IpcHandle, dptr: u64) -> u32;
    pub fn cuIpcOpenMemHandle_v2(dptr: *mut u64, handle: IpcHandle, flags: u32) -> u32;
    pub fn cuIpcCloseMemHandle(dptr: u64) -> u32;
    pub fn cuIpcGetEventHandle(handle: *mut IpcHandle, event: usize) -> u32;
    pub fn cuIpcOpenEventHandle(event: *mut usize, handle: IpcHandle) -> u32;
    pub fn cuMemPoolGetAttribute(pool: usize, attr: u32, value: *mut c_void) -> u32;
    pub fn cuMemPoolSetAttribute(pool: usize, attr: u32, value: *mut c_void) -> u32;
    pub fn cuMemPoolSetAccess(pool: usize, map: *const c_void, count: usize) -> u32;
    pub fn cuMemPoolTrimTo(pool: usize, min_bytes_to_keep: usize) -> u32;
    pub fn cuFuncGetAttribute(value: *mut i32, attr: u32, function: usize) -> u32;
    pub fn cuFuncSetAttribute(function: usize, attr: u32, value: i32) -> u32;
    pub fn cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
        blocks: *mut i32,
        function: usize,
        block_size: i32,
        dynamic_smem: usize,
        flags: u32,
    ) -> u32;
    pub fn cuShimAllocModuleMemory(dptr: *mut u64, size: usize) -> u32;
    pub fn cuShimLoadFatBinary(module: *mut usize, image: *const c_void) -> u32;
    pub fn cuShimBindFunction(host: *const c_void, module: usize, name: *const c_char) -> u32;
    pub fn cuModuleGetGlobal_v2(
        dptr: *mut u64,
        bytes: *mut usize,
        module: usize,
        name: *const c_char,
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
