//! `struct cudaDeviceProp` (CUDA 12 layout, 1032 bytes; CUDA 13's below), filled from the
//! driver's attributes so the runtime and driver views of the device agree.
//!
//! Runs of `int` fields the shim does not model are grouped into arrays; the offsets asserted
//! below are those of NVIDIA's header (tools/abi-check compares our header with it).

use std::mem::offset_of;

#[repr(C)]
pub struct DeviceProp {
    pub name: [u8; 256],
    pub uuid: [u8; 16],
    pub luid: [u8; 8],
    pub luid_device_node_mask: u32,
    pub total_global_mem: usize,
    pub shared_mem_per_block: usize,
    pub regs_per_block: i32,
    pub warp_size: i32,
    pub mem_pitch: usize,
    pub max_threads_per_block: i32,
    pub max_threads_dim: [i32; 3],
    pub max_grid_size: [i32; 3],
    pub clock_rate: i32,
    pub total_const_mem: usize,
    pub major: i32,
    pub minor: i32,
    pub texture_alignment: usize,
    pub texture_pitch_alignment: usize,
    pub device_overlap: i32,
    pub multi_processor_count: i32,
    pub kernel_exec_timeout_enabled: i32,
    pub integrated: i32,
    pub can_map_host_memory: i32,
    pub compute_mode: i32,
    /// maxTexture1D … maxSurfaceCubemapLayered[2].
    pub texture_and_surface_limits: [i32; 40],
    pub surface_alignment: usize,
    pub concurrent_kernels: i32,
    /// ECCEnabled, pciBusID, pciDeviceID, pciDomainID, tccDriver.
    pub ecc_and_pci: [i32; 5],
    pub async_engine_count: i32,
    pub unified_addressing: i32,
    pub memory_clock_rate: i32,
    pub memory_bus_width: i32,
    pub l2_cache_size: i32,
    pub persisting_l2_cache_max_size: i32,
    pub max_threads_per_multi_processor: i32,
    /// streamPrioritiesSupported, globalL1CacheSupported, localL1CacheSupported.
    pub cache_support: [i32; 3],
    pub shared_mem_per_multiprocessor: usize,
    pub regs_per_multiprocessor: i32,
    pub managed_memory: i32,
    /// isMultiGpuBoard … cooperativeMultiDeviceLaunch.
    pub board_and_launch: [i32; 10],
    pub shared_mem_per_block_optin: usize,
    /// pageableMemoryAccessUsesHostPageTables … accessPolicyMaxWindowSize.
    pub access: [i32; 4],
    pub reserved_shared_mem_per_block: usize,
    /// hostRegisterSupported … unifiedFunctionPointers (memoryPoolsSupported is index 4).
    pub features: [i32; 13],
    pub reserved: [i32; 63],
}

const _: () = {
    assert!(size_of::<DeviceProp>() == 1032);
    assert!(offset_of!(DeviceProp, total_global_mem) == 288);
    assert!(offset_of!(DeviceProp, compute_mode) == 404);
    assert!(offset_of!(DeviceProp, surface_alignment) == 568);
    assert!(offset_of!(DeviceProp, shared_mem_per_multiprocessor) == 640);
    assert!(offset_of!(DeviceProp, shared_mem_per_block_optin) == 696);
    assert!(offset_of!(DeviceProp, reserved_shared_mem_per_block) == 720);
    assert!(offset_of!(DeviceProp, features) == 728);
    assert!(offset_of!(DeviceProp, reserved) == 780);
};

/// `struct cudaDeviceProp` of CUDA 13 (1008 bytes): CUDA 12's without `clockRate`,
/// `deviceOverlap`, `kernelExecTimeoutEnabled`, `computeMode`, `maxTexture1DLinear`,
/// `memoryClockRate`, `singleToDoublePrecisionPerfRatio` and `cooperativeMultiDeviceLaunch`
/// (queried with `cudaDeviceGetAttribute` in CUDA 13), with seven NUMA/MPS/PCI fields added.
#[cfg(feature = "cuda13")]
#[repr(C)]
pub struct DeviceProp13 {
    pub name: [u8; 256],
    pub uuid: [u8; 16],
    pub luid: [u8; 8],
    pub luid_device_node_mask: u32,
    pub total_global_mem: usize,
    pub shared_mem_per_block: usize,
    pub regs_per_block: i32,
    pub warp_size: i32,
    pub mem_pitch: usize,
    pub max_threads_per_block: i32,
    pub max_threads_dim: [i32; 3],
    pub max_grid_size: [i32; 3],
    pub total_const_mem: usize,
    pub major: i32,
    pub minor: i32,
    pub texture_alignment: usize,
    pub texture_pitch_alignment: usize,
    pub multi_processor_count: i32,
    pub integrated: i32,
    pub can_map_host_memory: i32,
    /// maxTexture1D … maxSurfaceCubemapLayered[2] (CUDA 12's without maxTexture1DLinear).
    pub texture_and_surface_limits: [i32; 39],
    pub surface_alignment: usize,
    pub concurrent_kernels: i32,
    /// ECCEnabled, pciBusID, pciDeviceID, pciDomainID, tccDriver.
    pub ecc_and_pci: [i32; 5],
    pub async_engine_count: i32,
    pub unified_addressing: i32,
    pub memory_bus_width: i32,
    pub l2_cache_size: i32,
    pub persisting_l2_cache_max_size: i32,
    pub max_threads_per_multi_processor: i32,
    /// streamPrioritiesSupported, globalL1CacheSupported, localL1CacheSupported.
    pub cache_support: [i32; 3],
    pub shared_mem_per_multiprocessor: usize,
    pub regs_per_multiprocessor: i32,
    pub managed_memory: i32,
    /// isMultiGpuBoard … cooperativeLaunch (CUDA 12's without the two removed fields).
    pub board_and_launch: [i32; 8],
    pub shared_mem_per_block_optin: usize,
    /// pageableMemoryAccessUsesHostPageTables … accessPolicyMaxWindowSize.
    pub access: [i32; 4],
    pub reserved_shared_mem_per_block: usize,
    /// hostRegisterSupported … unifiedFunctionPointers, as in CUDA 12.
    pub features: [i32; 13],
    /// deviceNumaConfig, deviceNumaId, mpsEnabled, hostNumaId, gpuPciDeviceID,
    /// gpuPciSubsystemID, hostNumaMultinodeIpcSupported.
    pub numa_and_pci: [i32; 7],
    pub reserved: [i32; 56],
}

#[cfg(feature = "cuda13")]
const _: () = {
    assert!(size_of::<DeviceProp13>() == 1008);
    assert!(offset_of!(DeviceProp13, total_const_mem) == 352);
    assert!(offset_of!(DeviceProp13, multi_processor_count) == 384);
    assert!(offset_of!(DeviceProp13, texture_and_surface_limits) == 396);
    assert!(offset_of!(DeviceProp13, surface_alignment) == 552);
    assert!(offset_of!(DeviceProp13, memory_bus_width) == 592);
    assert!(offset_of!(DeviceProp13, shared_mem_per_multiprocessor) == 624);
    assert!(offset_of!(DeviceProp13, shared_mem_per_block_optin) == 672);
    assert!(offset_of!(DeviceProp13, reserved_shared_mem_per_block) == 696);
    assert!(offset_of!(DeviceProp13, features) == 704);
    assert!(offset_of!(DeviceProp13, reserved) == 784);
};

#[cfg(feature = "cuda13")]
impl DeviceProp13 {
    /// The CUDA 13 view of the properties CUDA 12's struct holds; `numa_and_pci` is the
    /// caller's to fill.
    pub fn from_cuda12(p: &DeviceProp) -> DeviceProp13 {
        let mut limits = [0; 39];
        limits[..2].copy_from_slice(&p.texture_and_surface_limits[..2]);
        limits[2..].copy_from_slice(&p.texture_and_surface_limits[3..]);
        let l = &p.board_and_launch;
        DeviceProp13 {
            name: p.name,
            uuid: p.uuid,
            luid: p.luid,
            luid_device_node_mask: p.luid_device_node_mask,
            total_global_mem: p.total_global_mem,
            shared_mem_per_block: p.shared_mem_per_block,
            regs_per_block: p.regs_per_block,
            warp_size: p.warp_size,
            mem_pitch: p.mem_pitch,
            max_threads_per_block: p.max_threads_per_block,
            max_threads_dim: p.max_threads_dim,
            max_grid_size: p.max_grid_size,
            total_const_mem: p.total_const_mem,
            major: p.major,
            minor: p.minor,
            texture_alignment: p.texture_alignment,
            texture_pitch_alignment: p.texture_pitch_alignment,
            multi_processor_count: p.multi_processor_count,
            integrated: p.integrated,
            can_map_host_memory: p.can_map_host_memory,
            texture_and_surface_limits: limits,
            surface_alignment: p.surface_alignment,
            concurrent_kernels: p.concurrent_kernels,
            ecc_and_pci: p.ecc_and_pci,
            async_engine_count: p.async_engine_count,
            unified_addressing: p.unified_addressing,
            memory_bus_width: p.memory_bus_width,
            l2_cache_size: p.l2_cache_size,
            persisting_l2_cache_max_size: p.persisting_l2_cache_max_size,
            max_threads_per_multi_processor: p.max_threads_per_multi_processor,
            cache_support: p.cache_support,
            shared_mem_per_multiprocessor: p.shared_mem_per_multiprocessor,
            regs_per_multiprocessor: p.regs_per_multiprocessor,
            managed_memory: p.managed_memory,
            // without singleToDoublePrecisionPerfRatio (3) and cooperativeMultiDeviceLaunch (9)
            board_and_launch: [l[0], l[1], l[2], l[4], l[5], l[6], l[7], l[8]],
            shared_mem_per_block_optin: p.shared_mem_per_block_optin,
            access: p.access,
            reserved_shared_mem_per_block: p.reserved_shared_mem_per_block,
            features: p.features,
            numa_and_pci: [0; 7],
            reserved: [0; 56],
        }
    }
}

/// `struct cudaFuncAttributes` (144 bytes).
#[repr(C)]
pub struct FuncAttributes {
    pub shared_size_bytes: usize,
    pub const_size_bytes: usize,
    pub local_size_bytes: usize,
    pub max_threads_per_block: i32,
    pub num_regs: i32,
    pub ptx_version: i32,
    pub binary_version: i32,
    pub cache_mode_ca: i32,
    pub max_dynamic_shared_size_bytes: i32,
    /// preferredShmemCarveout … nonPortableClusterSizeAllowed, then reserved[16].
    pub rest: [i32; 23],
}

const _: () = assert!(size_of::<FuncAttributes>() == 144);

/// `struct cudaPointerAttributes` (CUDA 12: 24 bytes; CUDA 13 adds a union of
/// `localityDomainOrdinal` and a `long`, and `long reserved[7]`: 88 bytes, written as zeros).
#[repr(C)]
pub struct PointerAttributes {
    pub memory_type: u32,
    pub device: i32,
    pub device_pointer: *mut std::ffi::c_void,
    pub host_pointer: *mut std::ffi::c_void,
    #[cfg(feature = "cuda13")]
    pub locality_and_reserved: [i64; 8],
}

#[cfg(not(feature = "cuda13"))]
const _: () = assert!(size_of::<PointerAttributes>() == 24);
#[cfg(feature = "cuda13")]
const _: () = assert!(size_of::<PointerAttributes>() == 88);

/// `dim3` / `uint3`, passed by value as in C.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Dim3 {
    pub x: u32,
    pub y: u32,
    pub z: u32,
}

/// `struct cudaKernelNodeParams`.
#[repr(C)]
pub struct KernelNode {
    pub func: *const std::ffi::c_void,
    pub grid: Dim3,
    pub block: Dim3,
    pub shared_mem: u32,
    pub params: *mut *mut std::ffi::c_void,
    pub extra: *mut *mut std::ffi::c_void,
}

/// `cudaLaunchConfig_t` (attributes are not modelled).
#[repr(C)]
pub struct LaunchConfig {
    pub grid_dim: Dim3,
    pub block_dim: Dim3,
    pub dynamic_smem_bytes: usize,
    pub stream: usize,
    pub attrs: *mut std::ffi::c_void,
    pub num_attrs: u32,
}
