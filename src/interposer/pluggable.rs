//! PyTorch's pluggable allocator interface: a program that cannot be started under `LD_PRELOAD`
//! routes its allocations through itermem with
//! `torch.cuda.memory.CUDAPluggableAllocator("libitermem.so", "itermem_malloc", "itermem_free")`.
//!
//! Each call is the stream-ordered allocation or free the caching allocator would have made
//! (`cudaMallocAsync`/`cudaFreeAsync` on the stream it names), observed by the same hook
//! (called by its internal name: the exported one is the runtime's in a `dlopen`ed library), so
//! recording, iteration detection, pool mode and swap mode work as under `LD_PRELOAD`. Loaded
//! with `dlopen`, the library interposes nothing else: the program's other CUDA calls are not
//! seen (with no launches or copies in the log, swap mode has no use of a tensor to plan swaps
//! around and serves the pool alone, and it does not keep its limit with mapped host memory:
//! see `PoolState::host_backed_malloc`).

use super::hooks::direct::{cudaFreeAsync, cudaMallocAsync};
use super::real::RealFn;
use std::ffi::c_void;

type GetDevice = unsafe extern "C" fn(*mut i32) -> u32;
type SetDevice = unsafe extern "C" fn(i32) -> u32;

/// Runs `call` with `device` as the thread's current device, as the caching allocator's caller
/// expects its memory on `device`; None if the device cannot be made current.
fn on_device<T>(device: i32, call: impl FnOnce() -> T) -> Option<T> {
    static GET_DEVICE: RealFn = RealFn::new(c"cudaGetDevice");
    static SET_DEVICE: RealFn = RealFn::new(c"cudaSetDevice");
    // SAFETY: the CUDA 12 prototypes of cudaGetDevice and cudaSetDevice.
    let (get, set) = unsafe {
        (
            GET_DEVICE.get::<GetDevice>()?,
            SET_DEVICE.get::<SetDevice>()?,
        )
    };
    let mut current = 0i32;
    // SAFETY: valid out-parameter.
    if unsafe { get(&mut current) } != 0 {
        return None;
    }
    // SAFETY: a device ordinal; the runtime refuses an invalid one.
    if current != device && unsafe { set(device) } != 0 {
        return None;
    }
    let result = call();
    if current != device {
        // SAFETY: the ordinal that was current before.
        unsafe { set(current) };
    }
    Some(result)
}

/// `alloc_fn` of `CUDAPluggableAllocator`: `size` bytes on `device`, usable in the order of
/// `stream`; NULL when they cannot be had (PyTorch then reports out of memory).
///
/// # Safety
/// Called by PyTorch with a device ordinal and a stream of that device.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn itermem_malloc(size: isize, device: i32, stream: usize) -> *mut c_void {
    let Ok(size) = usize::try_from(size) else {
        return std::ptr::null_mut();
    };
    let mut ptr: *mut c_void = std::ptr::null_mut();
    // SAFETY: a valid out-parameter and the caller's size and stream.
    let result = on_device(device, || unsafe {
        cudaMallocAsync(&mut ptr, size, stream)
    });
    if result == Some(0) {
        ptr
    } else {
        std::ptr::null_mut()
    }
}

/// `free_fn` of `CUDAPluggableAllocator`: `ptr`, allocated by [`itermem_malloc`], is free once
/// `stream` reaches this point.
///
/// # Safety
/// Called by PyTorch with a pointer `itermem_malloc` returned and not yet freed.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn itermem_free(ptr: *mut c_void, _size: isize, device: i32, stream: usize) {
    // SAFETY: the caller's pointer and stream; itermem answers a pointer that is not a live
    // allocation as the runtime would (an error, which this interface cannot return).
    on_device(device, || unsafe { cudaFreeAsync(ptr, stream) });
}
