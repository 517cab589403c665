//! The runtime functions of `libcudart.so.13` that torch 2.15 imports beyond what the CUDA 12
//! runtime of the shim exports (docs/cuda13.md), with CUDA 13.5's prototypes (declared by our
//! CUDA 13 headers, `cuda-shim/include13`). Only the CUDA 13 build has them: the CUDA 12 runtime
//! needs none of them, and our CUDA 12 headers do not declare them.
//!
//! - nvcc 13's launch path: a `<<<…>>>` stub asks `__cudaGetKernel` once for its kernel handle
//!   and launches it with `__cudaLaunchKernel`. A `cudaKernel_t` of the shim is the driver
//!   function its host stub registered (`cudaShimRegisterKernel`); a stub without one gets
//!   `cudaErrorInvalidDeviceFunction` from both, as `cudaLaunchKernel` gives it on the CUDA 12
//!   path (torch's kernels fail the same way on both runtimes).
//! - Cooperative launches and occupancy: the driver's (all blocks resident, else
//!   `cudaErrorCooperativeLaunchTooLarge`).
//! - Libraries (`cudaLibrary*`): the shim runs no device code, so no image loads: data is
//!   `cudaErrorNoKernelImageForDevice` (what a GPU answers for code without an image for it), a
//!   missing file `cudaErrorFileNotFound`; no library handle exists, so every call taking one is
//!   `cudaErrorInvalidResourceHandle`.
//! - Graphs: capture and graphs are the driver's (cuda-shim's `graph` module); the generic
//!   `cudaGraphAddNode`, conditional handles, user objects retained by a graph and capturing
//!   into an existing graph are not supported (the first three `cudaErrorInvalidValue`, the
//!   last `cudaErrorNotSupported` once its arguments are valid); graph memory attributes are
//!   the driver's (`cuDeviceGetGraphMemAttribute`), as in the CUDA 12 runtime.
//! - User objects: real reference counting; the destructor runs once, on a thread of its own
//!   (`cudaUserObjectNoDestructorSync`: nothing waits for it), when the count reaches zero.

use super::*;
use std::collections::HashMap;

const FILE_NOT_FOUND: u32 = 301;
const NO_KERNEL_IMAGE_FOR_DEVICE: u32 = 209;

/// `cudaUserObjectNoDestructorSync`, the only flag `cudaUserObjectCreate` takes (and requires).
const USER_OBJECT_NO_DESTRUCTOR_SYNC: u32 = 1;

/// A user object: the wrapped pointer, its destructor and its reference count.
struct UserObject {
    ptr: usize,
    destroy: unsafe extern "C" fn(*mut c_void),
    count: u32,
}

/// Live user objects by handle (never 0; handles are not reused).
static USER_OBJECTS: Mutex<Option<(usize, HashMap<usize, UserObject>)>> = Mutex::new(None);

/// Whether `ptr`/`count` describe a readable array (a NULL array only of length 0).
fn array_ok<T>(ptr: *const T, count: usize) -> bool {
    count == 0 || !ptr.is_null()
}

/// Checks the JIT and library option arrays of `cudaLibraryLoad*`.
fn options_ok(
    jit: *mut u32,
    jit_values: *mut *mut c_void,
    jit_count: u32,
    library: *mut u32,
    library_values: *mut *mut c_void,
    library_count: u32,
) -> bool {
    let (jit_count, library_count) = (jit_count as usize, library_count as usize);
    array_ok(jit, jit_count)
        && array_ok(jit_values, jit_count)
        && array_ok(library, library_count)
        && array_ok(library_values, library_count)
}

runtime_api! {
    /// The kernel handle of host stub `func`: the driver function it registered.
    fn __cudaGetKernel(kernel: *mut usize, func: *const c_void) {
        context()?;
        if kernel.is_null() {
            return Err(INVALID_VALUE);
        }
        let function = function_of(func)?;
        // SAFETY: checked non-null.
        unsafe { put(kernel, function) }
    }

    /// Launches a handle `__cudaGetKernel` gave; NULL (its failure) is
    /// `cudaErrorInvalidDeviceFunction`.
    fn __cudaLaunchKernel(
        kernel: usize,
        grid: Dim3,
        block: Dim3,
        args: *mut *mut c_void,
        shared_mem: usize,
        stream: usize,
    ) {
        let function = || if kernel == 0 { Err(INVALID_DEVICE_FUNCTION) } else { Ok(kernel) };
        launch_function(function, false, grid, block, args, shared_mem, stream)
    }

    fn __cudaLaunchKernel_ptsz(
        kernel: usize,
        grid: Dim3,
        block: Dim3,
        args: *mut *mut c_void,
        shared_mem: usize,
        stream: usize,
    ) {
        let function = || if kernel == 0 { Err(INVALID_DEVICE_FUNCTION) } else { Ok(kernel) };
        launch_function(function, false, grid, block, args, shared_mem, per_thread(stream))
    }

    fn cudaLaunchCooperativeKernel(
        func: *const c_void,
        grid: Dim3,
        block: Dim3,
        args: *mut *mut c_void,
        shared_mem: usize,
        stream: usize,
    ) {
        launch_function(|| function_of(func), true, grid, block, args, shared_mem, stream)
    }

    fn cudaLaunchCooperativeKernel_ptsz(
        func: *const c_void,
        grid: Dim3,
        block: Dim3,
        args: *mut *mut c_void,
        shared_mem: usize,
        stream: usize,
    ) {
        let stream = per_thread(stream);
        launch_function(|| function_of(func), true, grid, block, args, shared_mem, stream)
    }

    fn cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        blocks: *mut i32,
        func: *const c_void,
        block_size: i32,
        dynamic_smem: usize,
    ) {
        context()?;
        let function = function_of(func)?;
        // SAFETY: the driver checks the out-parameter and the block size.
        check(unsafe {
            cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(blocks, function, block_size, dynamic_smem, 0)
        })
    }

    /// As `cudaFuncSetAttribute` on the kernel's function, for a device that exists.
    fn cudaKernelSetAttributeForDevice(kernel: usize, attr: u32, value: i32, device: i32) {
        context()?;
        primary(device)?;
        if !(8..=16).contains(&attr) {
            return Err(INVALID_VALUE);
        }
        if kernel == 0 {
            return Err(INVALID_DEVICE_FUNCTION);
        }
        if attr == 16 {
            // cudaFuncAttributeSharedMemoryMode (new in 13), which the driver does not model:
            // its five modes (cudaSharedMemoryModeDefault..PreferOversizedSharedMemory) are
            // accepted.
            return if (0..=4).contains(&value) { Ok(()) } else { Err(INVALID_VALUE) };
        }
        // SAFETY: the driver validates the handle, the attribute and the value.
        match unsafe { cuFuncSetAttribute(kernel, attr, value) } {
            SYMBOL_NOT_FOUND => Err(INVALID_DEVICE_FUNCTION),
            code => check(code),
        }
    }

    fn cudaGraphAddNode(
        _node: *mut usize,
        graph: usize,
        _dependencies: *const usize,
        _edge_data: *const c_void,
        _count: usize,
        _params: *mut c_void,
    ) {
        no_graph(graph)
    }

    fn cudaGraphConditionalHandleCreate(_handle: *mut u64, graph: usize, _default_launch_value: u32, _flags: u32) {
        no_graph(graph)
    }

    fn cudaGraphRetainUserObject(graph: usize, _object: usize, _count: u32, _flags: u32) {
        no_graph(graph)
    }

    /// As `cudaStreamBeginCapture`'s checks, then the graph's (`cudaErrorInvalidValue` for one
    /// that does not exist); capturing into an existing graph is not supported
    /// (`cudaErrorNotSupported`).
    fn cudaStreamBeginCaptureToGraph(
        stream: usize,
        graph: usize,
        dependencies: *const usize,
        edge_data: *const c_void,
        count: usize,
        mode: u32,
    ) {
        context()?;
        stream_flags(stream)?;
        if mode > 2 || !array_ok(dependencies, count) {
            return Err(INVALID_VALUE);
        }
        let _ = edge_data;
        if stream == 0 || stream == 1 {
            return Err(STREAM_CAPTURE_UNSUPPORTED);
        }
        let mut nodes = 0;
        // SAFETY: the driver validates the graph; `nodes` is a valid out-parameter.
        check(unsafe { cuGraphGetNodes(graph, std::ptr::null_mut(), &mut nodes) })?;
        Err(NOT_SUPPORTED)
    }

    /// The capturing stream's next work follows `dependencies` too (flags 0) or instead of its
    /// current ones (1); `cudaErrorIllegalState` on a stream not capturing. Only default edges.
    fn cudaStreamUpdateCaptureDependencies(
        stream: usize,
        dependencies: *mut usize,
        edge_data: *const c_void,
        count: usize,
        flags: u32,
    ) {
        context()?;
        // SAFETY: the driver validates the handle, the arrays and the flags.
        check(unsafe { cuStreamUpdateCaptureDependencies_v2(stream, dependencies, edge_data, count, flags) })
    }

    fn cudaUserObjectCreate(object: *mut usize, ptr: *mut c_void, destroy: HostFn, initial_count: u32, flags: u32) {
        context()?;
        let destroy = destroy.ok_or(INVALID_VALUE)?;
        if object.is_null() || initial_count == 0 || flags != USER_OBJECT_NO_DESTRUCTOR_SYNC {
            return Err(INVALID_VALUE);
        }
        let mut objects = USER_OBJECTS.lock().map_err(|_| UNKNOWN)?;
        let (last, objects) = objects.get_or_insert_with(Default::default);
        *last += 1;
        objects.insert(*last, UserObject { ptr: ptr as usize, destroy, count: initial_count });
        // SAFETY: checked non-null.
        unsafe { put(object, *last) }
    }

    fn cudaUserObjectRetain(object: usize, count: u32) {
        context()?;
        let mut objects = USER_OBJECTS.lock().map_err(|_| UNKNOWN)?;
        let (_, objects) = objects.get_or_insert_with(Default::default);
        let entry = objects.get_mut(&object).ok_or(INVALID_VALUE)?;
        if count == 0 {
            return Err(INVALID_VALUE);
        }
        entry.count = entry.count.checked_add(count).ok_or(INVALID_VALUE)?;
        Ok(())
    }

    /// Releasing more references than are held is `cudaErrorInvalidValue` (undefined on CUDA).
    fn cudaUserObjectRelease(object: usize, count: u32) {
        context()?;
        let released = {
            let mut objects = USER_OBJECTS.lock().map_err(|_| UNKNOWN)?;
            let (_, objects) = objects.get_or_insert_with(Default::default);
            let entry = objects.get_mut(&object).ok_or(INVALID_VALUE)?;
            if count == 0 || count > entry.count {
                return Err(INVALID_VALUE);
            }
            entry.count -= count;
            if entry.count == 0 { objects.remove(&object) } else { None }
        };
        if let Some(UserObject { ptr, destroy, .. }) = released {
            // Like CUDA's, the destructor runs on another thread, after the call returns or not.
            std::thread::Builder::new()
                .name("cudart-user-object".into())
                .spawn(move || {
                    // SAFETY: the destructor and pointer the caller gave cudaUserObjectCreate,
                    // called once, after the last reference went.
                    unsafe { destroy(ptr as *mut c_void) }
                })
                .map_err(|_| UNKNOWN)?;
        }
        Ok(())
    }

    /// No image can load on a device that runs no device code.
    fn cudaLibraryLoadData(
        library: *mut usize,
        code: *const c_void,
        jit_options: *mut u32,
        jit_values: *mut *mut c_void,
        jit_count: u32,
        library_options: *mut u32,
        library_values: *mut *mut c_void,
        library_count: u32,
    ) {
        context()?;
        let options = options_ok(jit_options, jit_values, jit_count, library_options, library_values, library_count);
        if library.is_null() || code.is_null() || !options {
            return Err(INVALID_VALUE);
        }
        Err(NO_KERNEL_IMAGE_FOR_DEVICE)
    }

    /// A file that cannot be read is `cudaErrorFileNotFound`, any other has no image for the
    /// device.
    fn cudaLibraryLoadFromFile(
        library: *mut usize,
        file: *const c_char,
        jit_options: *mut u32,
        jit_values: *mut *mut c_void,
        jit_count: u32,
        library_options: *mut u32,
        library_values: *mut *mut c_void,
        library_count: u32,
    ) {
        context()?;
        let options = options_ok(jit_options, jit_values, jit_count, library_options, library_values, library_count);
        if library.is_null() || file.is_null() || !options {
            return Err(INVALID_VALUE);
        }
        // SAFETY: non-null and NUL-terminated by the caller's contract.
        let path = unsafe { std::ffi::CStr::from_ptr(file) };
        let path = <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(path.to_bytes());
        if std::fs::File::open(path).is_err() {
            return Err(FILE_NOT_FOUND);
        }
        Err(NO_KERNEL_IMAGE_FOR_DEVICE)
    }

    fn cudaLibraryUnload(library: usize) {
        no_library(library)
    }

    fn cudaLibraryGetKernel(kernel: *mut usize, library: usize, name: *const c_char) {
        context()?;
        if kernel.is_null() || name.is_null() {
            return Err(INVALID_VALUE);
        }
        no_library(library)
    }

    fn cudaLibraryGetKernelCount(count: *mut u32, library: usize) {
        context()?;
        if count.is_null() {
            return Err(INVALID_VALUE);
        }
        no_library(library)
    }

    fn cudaLibraryGetGlobal(dev_ptr: *mut *mut c_void, _bytes: *mut usize, library: usize, name: *const c_char) {
        context()?;
        if dev_ptr.is_null() || name.is_null() {
            return Err(INVALID_VALUE);
        }
        no_library(library)
    }

    fn cudaLibraryGetManaged(dev_ptr: *mut *mut c_void, _bytes: *mut usize, library: usize, name: *const c_char) {
        context()?;
        if dev_ptr.is_null() || name.is_null() {
            return Err(INVALID_VALUE);
        }
        no_library(library)
    }

    fn cudaLibraryGetUnifiedFunction(function: *mut *mut c_void, library: usize, symbol: *const c_char) {
        context()?;
        if function.is_null() || symbol.is_null() {
            return Err(INVALID_VALUE);
        }
        no_library(library)
    }
}

/// What every call on a library handle answers: none can be loaded on the shim.
fn no_library(_library: usize) -> RtResult {
    context()?;
    Err(INVALID_RESOURCE_HANDLE)
}
