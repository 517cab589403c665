//! The exported hooks: one table, one line per CUDA runtime function itermem intercepts.
//!
//! `hooks!` expands each line into an `extern "C"` function with the runtime's exact name and
//! prototype that resolves the real function once (`dlsym(RTLD_NEXT)`), and runs it through
//! [`intercept`] with the line's observer. Observers only decode arguments and report to the
//! [`Recorder`]; all policy lives there. Handles (`cudaStream_t`) are pointer-sized and passed
//! as `usize`; `cudaError_t` and `enum cudaMemcpyKind` are 32-bit. Exported only outside unit
//! tests, so a test binary never interposes on anything.

use super::real::RealFn;
use super::{CUDA_ERROR_SYMBOL_NOT_FOUND, Recorder, intercept, kept_by_itermem};
use crate::event::{CopyKind, MemKind};
use std::ffi::{CStr, c_void};

/// `dim3`, passed by value as in C.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Dim3 {
    pub x: u32,
    pub y: u32,
    pub z: u32,
}

/// `cudaLaunchConfig_t` (CUDA 12): the launch configuration of `cudaLaunchKernelExC`.
#[repr(C)]
pub struct LaunchConfig {
    pub grid_dim: Dim3,
    pub block_dim: Dim3,
    pub dynamic_smem_bytes: usize,
    pub stream: usize,
    pub attrs: *mut c_void,
    pub num_attrs: u32,
}

/// Stream handle of the per-thread default stream (`cudaStreamPerThread`).
const PER_THREAD_STREAM: usize = 0x2;

/// The stream a `_ptsz`/`_ptds` call means by `stream`: 0 is the per-thread default stream.
fn per_thread(stream: usize) -> u64 {
    if stream == 0 {
        PER_THREAD_STREAM as u64
    } else {
        stream as u64
    }
}

type Run<'a> = &'a mut dyn FnMut() -> u32;

const SUCCESS: u32 = 0;
/// `cudaErrorInvalidValue`: what `cudaFree` answers for a pointer that is no allocation.
const INVALID_VALUE: u32 = 1;
/// `cudaErrorMemoryAllocation`: the real allocator found no room.
const MEMORY_ALLOCATION: u32 = 2;

fn on_alloc(
    rec: &Recorder,
    run: Run,
    ptr: *mut *mut c_void,
    size: usize,
    kind: MemKind,
    stream: u64,
) -> u32 {
    if kind == MemKind::Device && size > 0 && !ptr.is_null() {
        if let Some((addr, id)) = rec.served_malloc(size as u64) {
            // SAFETY: `ptr` is the caller's non-null out-parameter.
            unsafe { *ptr = addr as *mut c_void };
            rec.on_served_malloc(id, addr, size as u64);
            return SUCCESS;
        }
    }
    let result = run();
    if result == MEMORY_ALLOCATION && kind == MemKind::Device && size > 0 && !ptr.is_null() {
        if let Some((addr, id)) = rec.host_backed_malloc(size as u64) {
            // SAFETY: `ptr` is the caller's non-null out-parameter.
            unsafe { *ptr = addr as *mut c_void };
            rec.on_served_malloc(id, addr, size as u64);
            clear_last_error();
            return SUCCESS;
        }
    }
    if result == SUCCESS && !ptr.is_null() {
        // SAFETY: the call succeeded, so the runtime wrote the new address through `ptr`.
        let addr = unsafe { *ptr } as u64;
        if addr != 0 {
            rec.on_malloc(addr, size as u64, kind, stream);
        }
    }
    result
}

/// Consumes this thread's last runtime error: the failed malloc's, which itermem answered
/// (the program must not find it in `cudaGetLastError`).
fn clear_last_error() {
    type GetLastError = unsafe extern "C" fn() -> u32;
    static GET_LAST_ERROR: RealFn = RealFn::new(c"cudaGetLastError");
    // SAFETY: cudaGetLastError's prototype.
    if let Some(get_last_error) = unsafe { GET_LAST_ERROR.get::<GetLastError>() } {
        // SAFETY: as above; it takes no argument and only resets the thread's last error.
        unsafe { get_last_error() };
    }
}

/// `device`: whether the freed pointer may come from itermem's own allocator (`cudaFree`,
/// `cudaFreeAsync`; not `cudaFreeHost`).
fn on_free(rec: &Recorder, run: Run, ptr: *mut c_void, stream: u64, device: bool) -> u32 {
    let taken = rec.begin_free(ptr as u64);
    if device && rec.serves(ptr as u64) {
        // A block of itermem's allocator never reaches the real one; anything else in its
        // range is no allocation of the program's, as real CUDA would say.
        return if rec.served_free(ptr as u64, taken, stream) {
            SUCCESS
        } else {
            INVALID_VALUE
        };
    }
    let result = run();
    rec.end_free(taken, result == SUCCESS, stream);
    result
}

#[allow(clippy::too_many_arguments)]
fn on_copy(
    rec: &Recorder,
    run: Run,
    dst: *mut c_void,
    src: *const c_void,
    count: usize,
    kind: u32,
    stream: u64,
    asynchronous: bool,
) -> u32 {
    if rec.host_backed(dst as u64) || rec.host_backed(src as u64) {
        // Device memory itermem serves from mapped host memory: the driver must infer the
        // direction (with unified addressing), not take the program's word for it.
        INFER_COPY_KIND.with(|infer| infer.set(true));
    }
    let (dst, src) = (rec.resolve(dst as u64), rec.resolve(src as u64));
    let ids: smallvec::SmallVec<[u64; 2]> = [dst, src].into_iter().flatten().collect();
    let prepared = rec.before_use(&ids, stream);
    let result = run();
    let index = (result == SUCCESS).then(|| {
        let kind = CopyKind::from_u8(kind as u8).unwrap_or(CopyKind::Default);
        rec.on_memcpy(dst, src, count as u64, kind, stream, asynchronous)
    });
    rec.after_use(prepared, stream, index);
    result
}

thread_local! {
    /// Set by a copy hook for the real call it is about to make: pass `cudaMemcpyDefault`.
    static INFER_COPY_KIND: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// `cudaMemcpyDefault`: the direction inferred from the pointers (unified addressing).
const COPY_DEFAULT: u32 = 4;

/// The kind the real copy is called with: the program's, or [`COPY_DEFAULT`] when the copy
/// hook asked for it (once: the request is taken).
fn copy_kind(kind: u32) -> u32 {
    if INFER_COPY_KIND
        .try_with(|infer| infer.replace(false))
        .unwrap_or(false)
    {
        COPY_DEFAULT
    } else {
        kind
    }
}

fn on_set(
    rec: &Recorder,
    run: Run,
    dst: *mut c_void,
    count: usize,
    stream: u64,
    asynchronous: bool,
) -> u32 {
    let dst = rec.resolve(dst as u64);
    let prepared = rec.before_use(dst.as_slice(), stream);
    let result = run();
    let index = (result == SUCCESS).then(|| rec.on_memset(dst, count as u64, stream, asynchronous));
    rec.after_use(prepared, stream, index);
    result
}

fn on_launch(
    rec: &Recorder,
    run: Run,
    func: *const c_void,
    args: *mut *mut c_void,
    stream: u64,
) -> u32 {
    // SAFETY: the caller's argument array holds one valid pointer per parameter (the launch's
    // contract); it is read before the launch, while the caller is blocked in this call.
    let accesses = unsafe { rec.launch_accesses(func, args as *const *const c_void) };
    let prepared = rec.before_use(&accesses.touched, stream);
    let result = run();
    let index = (result == SUCCESS).then(|| rec.on_launch(accesses, stream));
    rec.after_use(prepared, stream, index);
    result
}

/// `const` NUL-terminated name of a hook, for `dlsym`.
const fn symbol(name_with_nul: &'static str) -> &'static CStr {
    match CStr::from_bytes_with_nul(name_with_nul.as_bytes()) {
        Ok(name) => name,
        Err(_) => panic!("hook names contain no NUL"),
    }
}

/// `fn name(args) [keeps ptr | infers kind] => observer;` — `keeps ptr`: a free whose real
/// call must never receive a block of itermem's own allocator, even when passing through
/// ([`kept_by_itermem`]); `infers kind`: a copy whose real call gets `cudaMemcpyDefault` when
/// its observer asks ([`copy_kind`]).
macro_rules! hooks {
    ($( $(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(keeps $kept:ident)? $(infers $kind:ident)? => $observer:expr; )*) => {
        /// The CUDA functions itermem hooks (what `ITERMEM_INJECT_PANIC` may name).
        pub const HOOK_NAMES: &[&str] = &[$(stringify!($name)),*];

        $(
            $(#[$doc])*
            ///
            /// # Safety
            /// Called by the application with the arguments of the CUDA prototype.
            #[cfg_attr(not(test), unsafe(no_mangle))]
            #[allow(non_snake_case)] // CUDA's names
            pub unsafe extern "C" fn $name($($arg: $ty),*) -> u32 {
                type Real = unsafe extern "C" fn($($ty),*) -> u32;
                static REAL: RealFn = RealFn::new(symbol(concat!(stringify!($name), "\0")));
                // SAFETY: `Real` is this hook's own prototype, which the real function shares.
                let Some(real) = (unsafe { REAL.get::<Real>() }) else {
                    return CUDA_ERROR_SYMBOL_NOT_FOUND;
                };
                let call = move || {
                    $(if let Some(answer) = kept_by_itermem($kept as u64) {
                        return answer;
                    })?
                    $(let $kind = copy_kind($kind);)?
                    // SAFETY: forwards the application's arguments unchanged.
                    unsafe { real($($arg),*) }
                };
                intercept(stringify!($name), call, |rec, call| {
                    let observe: fn(&'static Recorder, Run, $($ty),*) -> u32 = $observer;
                    observe(rec, &mut || call.run(), $($arg),*)
                })
            }
        )*
    };
}

hooks! {
    fn cudaMalloc(ptr: *mut *mut c_void, size: usize) =>
        |rec, run, ptr, size| on_alloc(rec, run, ptr, size, MemKind::Device, 0);
    fn cudaMallocManaged(ptr: *mut *mut c_void, size: usize, flags: u32) =>
        |rec, run, ptr, size, _| on_alloc(rec, run, ptr, size, MemKind::Managed, 0);
    fn cudaMallocAsync(ptr: *mut *mut c_void, size: usize, stream: usize) =>
        |rec, run, ptr, size, stream| on_alloc(rec, run, ptr, size, MemKind::Async, stream as u64);
    fn cudaMallocAsync_ptsz(ptr: *mut *mut c_void, size: usize, stream: usize) =>
        |rec, run, ptr, size, stream| on_alloc(rec, run, ptr, size, MemKind::Async, per_thread(stream));
    fn cudaMallocHost(ptr: *mut *mut c_void, size: usize) =>
        |rec, run, ptr, size| on_alloc(rec, run, ptr, size, MemKind::PinnedHost, 0);
    fn cudaHostAlloc(ptr: *mut *mut c_void, size: usize, flags: u32) =>
        |rec, run, ptr, size, _| on_alloc(rec, run, ptr, size, MemKind::PinnedHost, 0);

    fn cudaFree(ptr: *mut c_void) keeps ptr => |rec, run, ptr| on_free(rec, run, ptr, 0, true);
    fn cudaFreeHost(ptr: *mut c_void) => |rec, run, ptr| on_free(rec, run, ptr, 0, false);
    fn cudaFreeAsync(ptr: *mut c_void, stream: usize) keeps ptr =>
        |rec, run, ptr, stream| on_free(rec, run, ptr, stream as u64, true);
    fn cudaFreeAsync_ptsz(ptr: *mut c_void, stream: usize) keeps ptr =>
        |rec, run, ptr, stream| on_free(rec, run, ptr, per_thread(stream), true);

    fn cudaMemcpy(dst: *mut c_void, src: *const c_void, count: usize, kind: u32) infers kind =>
        |rec, run, dst, src, count, kind| on_copy(rec, run, dst, src, count, kind, 0, false);
    fn cudaMemcpy_ptds(dst: *mut c_void, src: *const c_void, count: usize, kind: u32) infers kind =>
        |rec, run, dst, src, count, kind| on_copy(rec, run, dst, src, count, kind, per_thread(0), false);
    fn cudaMemcpyAsync(dst: *mut c_void, src: *const c_void, count: usize, kind: u32, stream: usize) infers kind =>
        |rec, run, dst, src, count, kind, stream| on_copy(rec, run, dst, src, count, kind, stream as u64, true);
    fn cudaMemcpyAsync_ptsz(dst: *mut c_void, src: *const c_void, count: usize, kind: u32, stream: usize) infers kind =>
        |rec, run, dst, src, count, kind, stream| on_copy(rec, run, dst, src, count, kind, per_thread(stream), true);

    fn cudaMemset(ptr: *mut c_void, value: i32, count: usize) =>
        |rec, run, ptr, _, count| on_set(rec, run, ptr, count, 0, false);
    fn cudaMemset_ptds(ptr: *mut c_void, value: i32, count: usize) =>
        |rec, run, ptr, _, count| on_set(rec, run, ptr, count, per_thread(0), false);
    fn cudaMemsetAsync(ptr: *mut c_void, value: i32, count: usize, stream: usize) =>
        |rec, run, ptr, _, count, stream| on_set(rec, run, ptr, count, stream as u64, true);
    fn cudaMemsetAsync_ptsz(ptr: *mut c_void, value: i32, count: usize, stream: usize) =>
        |rec, run, ptr, _, count, stream| on_set(rec, run, ptr, count, per_thread(stream), true);

    fn cudaLaunchKernel(func: *const c_void, grid: Dim3, block: Dim3, args: *mut *mut c_void, shared: usize, stream: usize) =>
        |rec, run, func, _, _, args, _, stream| on_launch(rec, run, func, args, stream as u64);
    fn cudaLaunchKernel_ptsz(func: *const c_void, grid: Dim3, block: Dim3, args: *mut *mut c_void, shared: usize, stream: usize) =>
        |rec, run, func, _, _, args, _, stream| on_launch(rec, run, func, args, per_thread(stream));
    fn cudaLaunchKernelExC(config: *const LaunchConfig, func: *const c_void, args: *mut *mut c_void) =>
        // SAFETY: the runtime rejects a NULL configuration before anything launches.
        |rec, run, config, func, args| on_launch(rec, run, func, args, if config.is_null() { 0 } else { unsafe { (*config).stream as u64 } });
    fn cudaLaunchKernelExC_ptsz(config: *const LaunchConfig, func: *const c_void, args: *mut *mut c_void) =>
        // SAFETY: as for cudaLaunchKernelExC.
        |rec, run, config, func, args| on_launch(rec, run, func, args, per_thread(if config.is_null() { 0 } else { unsafe { (*config).stream } }));

    // Stream, event and synchronisation calls pass through; the swap executor will act on them.
    fn cudaStreamCreate(stream: *mut usize) => |_, run, _| run();
    fn cudaStreamCreateWithFlags(stream: *mut usize, flags: u32) => |_, run, _, _| run();
    fn cudaStreamDestroy(stream: usize) => |_, run, _| run();
    fn cudaStreamSynchronize(stream: usize) => |_, run, _| run();
    fn cudaStreamSynchronize_ptsz(stream: usize) => |_, run, _| run();
    fn cudaStreamQuery(stream: usize) => |_, run, _| run();
    fn cudaStreamQuery_ptsz(stream: usize) => |_, run, _| run();
    fn cudaStreamWaitEvent(stream: usize, event: usize, flags: u32) => |_, run, _, _, _| run();
    fn cudaStreamWaitEvent_ptsz(stream: usize, event: usize, flags: u32) => |_, run, _, _, _| run();
    fn cudaEventCreate(event: *mut usize) => |_, run, _| run();
    fn cudaEventCreateWithFlags(event: *mut usize, flags: u32) => |_, run, _, _| run();
    fn cudaEventRecord(event: usize, stream: usize) => |_, run, _, _| run();
    fn cudaEventRecord_ptsz(event: usize, stream: usize) => |_, run, _, _| run();
    fn cudaEventSynchronize(event: usize) => |_, run, _| run();
    fn cudaEventDestroy(event: usize) => |_, run, _| run();
    fn cudaDeviceSynchronize() => |_, run| run();
}
