//! The CUDA runtime functions the replayer calls, found at run time.
//!
//! The `itermem` executable must run where no CUDA library exists (every other subcommand is
//! offline), so it does not link `libcudart`: the replayer `dlopen`s `libcudart.so.12` with
//! `RTLD_GLOBAL` and looks each name up with `dlsym(RTLD_DEFAULT)`, i.e. in the global scope in
//! the order a program linked with `-lcudart` would resolve it. So a preloaded `libitermem.so`
//! comes first and sees every call, exactly as for a program linked against the runtime (a
//! lookup through the runtime's own handle would bypass it). A runtime already loaded (the
//! shim's `libcudart.so.13` preloaded by `itermem replay --shim --cuda 13`) is used instead, so a
//! process never holds two runtimes; every function called here has the same prototype in CUDA
//! 12 and 13.

use std::ffi::{CStr, c_char, c_int, c_uint, c_void};

use anyhow::bail;

/// `cudaError_t`.
pub type CudaError = c_int;
/// `cudaStream_t`.
pub type Stream = *mut c_void;

pub const SUCCESS: CudaError = 0;
/// `cudaMemcpyHostToDevice`.
pub const MEMCPY_HOST_TO_DEVICE: c_int = 1;
/// `cudaMemcpyDeviceToHost`.
pub const MEMCPY_DEVICE_TO_HOST: c_int = 2;
/// `cudaHostAllocMapped`: page-locked memory a kernel can address (the mismatch report).
pub const HOST_ALLOC_MAPPED: c_uint = 0x02;

/// `dim3`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Dim3 {
    pub x: c_uint,
    pub y: c_uint,
    pub z: c_uint,
}

/// A kernel body as cuda-shim runs it: `args[i]` points to parameter `i`.
pub type ShimKernel = extern "C" fn(args: *mut *mut c_void);

/// The runtime's functions, with their exact prototypes from `cuda_runtime_api.h`.
pub struct Runtime {
    pub malloc: unsafe extern "C" fn(*mut *mut c_void, usize) -> CudaError,
    pub free: unsafe extern "C" fn(*mut c_void) -> CudaError,
    pub host_alloc: unsafe extern "C" fn(*mut *mut c_void, usize, c_uint) -> CudaError,
    pub free_host: unsafe extern "C" fn(*mut c_void) -> CudaError,
    pub stream_create: unsafe extern "C" fn(*mut Stream) -> CudaError,
    pub stream_destroy: unsafe extern "C" fn(Stream) -> CudaError,
    pub stream_synchronize: unsafe extern "C" fn(Stream) -> CudaError,
    pub memcpy_async:
        unsafe extern "C" fn(*mut c_void, *const c_void, usize, c_int, Stream) -> CudaError,
    pub launch_kernel: unsafe extern "C" fn(
        *const c_void,
        Dim3,
        Dim3,
        *mut *mut c_void,
        usize,
        Stream,
    ) -> CudaError,
    pub get_error_string: unsafe extern "C" fn(CudaError) -> *const c_char,
    /// cuda-shim's stand-in for a fatbinary's kernel metadata; absent on NVIDIA's runtime.
    pub shim_register_kernel: Option<
        unsafe extern "C" fn(ShimKernel, *const c_char, c_int, *const usize, u64) -> CudaError,
    >,
}

impl Runtime {
    /// Loads `libcudart.so.12` into the global scope (unless a CUDA 13 or 12 runtime is loaded
    /// already, e.g. preloaded) and resolves every function.
    pub fn load() -> anyhow::Result<Runtime> {
        let loaded = [c"libcudart.so.13", c"libcudart.so.12"]
            .into_iter()
            .any(|soname| {
                // SAFETY: RTLD_NOLOAD only looks for a loaded library of that NUL-terminated soname
                // (taking a reference that is never dropped: the runtime stays for the process).
                !unsafe { libc::dlopen(soname.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) }
                    .is_null()
            });
        if !loaded {
            let soname = c"libcudart.so.12";
            // SAFETY: dlopen of a NUL-terminated soname; the handle is kept for the process's
            // life (never dlclosed), so every pointer resolved below stays valid.
            let handle =
                unsafe { libc::dlopen(soname.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
            if handle.is_null() {
                bail!(
                    "cannot load the CUDA runtime: {} (on cuda-shim, pass --shim)",
                    last_dl_error()
                );
            }
        }
        Ok(Runtime {
            // SAFETY (every `resolve` below): each type is the prototype of the named function
            // in NVIDIA's cuda_runtime_api.h (cuda_shim.h for cudaShimRegisterKernel).
            malloc: unsafe { resolve(c"cudaMalloc")? },
            free: unsafe { resolve(c"cudaFree")? },
            host_alloc: unsafe { resolve(c"cudaHostAlloc")? },
            free_host: unsafe { resolve(c"cudaFreeHost")? },
            stream_create: unsafe { resolve(c"cudaStreamCreate")? },
            stream_destroy: unsafe { resolve(c"cudaStreamDestroy")? },
            stream_synchronize: unsafe { resolve(c"cudaStreamSynchronize")? },
            memcpy_async: unsafe { resolve(c"cudaMemcpyAsync")? },
            launch_kernel: unsafe { resolve(c"cudaLaunchKernel")? },
            get_error_string: unsafe { resolve(c"cudaGetErrorString")? },
            shim_register_kernel: unsafe { resolve(c"cudaShimRegisterKernel").ok() },
        })
    }

    /// `result` as an error naming the call and CUDA's message.
    pub fn check(&self, result: CudaError, call: impl FnOnce() -> String) -> anyhow::Result<()> {
        if result == SUCCESS {
            return Ok(());
        }
        // SAFETY: cudaGetErrorString returns a static NUL-terminated string for any code.
        let text = unsafe { (self.get_error_string)(result) };
        let message = if text.is_null() {
            String::from("unknown error")
        } else {
            // SAFETY: non-null, NUL-terminated, static (see above).
            unsafe { CStr::from_ptr(text) }
                .to_string_lossy()
                .into_owned()
        };
        Err(anyhow::anyhow!(
            "{} failed: {message} (error {result})",
            call()
        ))
    }
}

/// The global scope's definition of `name` as `F`.
///
/// # Safety
/// `F` must be the function pointer type of the symbol's true prototype.
unsafe fn resolve<F: Copy>(name: &CStr) -> anyhow::Result<F> {
    // SAFETY: RTLD_DEFAULT searches the global scope; `name` is NUL-terminated.
    let ptr = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    if ptr.is_null() {
        bail!(
            "the CUDA runtime has no {} ({})",
            name.to_string_lossy(),
            last_dl_error()
        );
    }
    // SAFETY: a non-null symbol address of the type the caller vouches for; function and data
    // pointers have the same size on every platform CUDA supports.
    Ok(unsafe { std::mem::transmute_copy::<*mut c_void, F>(&ptr) })
}

fn last_dl_error() -> String {
    // SAFETY: dlerror returns null or a NUL-terminated message owned by the loader, read at once.
    let text = unsafe { libc::dlerror() };
    if text.is_null() {
        "no loader message".into()
    } else {
        // SAFETY: see above.
        unsafe { CStr::from_ptr(text) }
            .to_string_lossy()
            .into_owned()
    }
}
