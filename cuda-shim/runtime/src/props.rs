//! `struct cudaDeviceProp` (CUDA 12 layout, 1032 bytes), filled from the driver's attributes so
//! the runtime and driver views of the device agree.
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

/// `struct cudaPointerAttributes`.
#[repr(C)]
pub struct PointerAttributes {
    pub memory_type: u32,
    pub device: i32,
    pub device_pointer: *mut std::ffi::c_void,
    pub host_pointer: *mut std::ffi::c_void,
}

/// `dim3` / `uint3`, passed by value as in C.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Dim3 {
    pub x: u32,
    pub y: u32,
    pub z: u32,
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
