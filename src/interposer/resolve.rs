//! Dynamic resolution: a program that finds CUDA's functions at run time (`cuGetProcAddress`,
//! `cudaGetDriverEntryPoint`, `dlopen` + `dlsym`, as NVIDIA's own runtime, the static runtime,
//! TensorFlow, JAX and cudarc do) gets itermem's hooks as a program that links them does.
//!
//! **One rule, by address.** Each resolver calls the real one, then `substitute` replaces
//! the answer only if it is *exactly* the real function one of itermem's hooks forwards to
//! (found by `dladdr`'s exact symbol, then compared with the hook's own resolved pointer).
//! Whatever variant the driver chose for the requested version and flags (a `_v2`, a
//! per-thread-stream `_ptsz`, the 32-bit `cuMemAlloc` of CUDA 3.1) is handed out unchanged
//! unless itermem hooks that very function with that very prototype: a caller can never get a
//! hook whose prototype differs from the one it asked for, which is how interposers that map
//! names to hooks crash programs that ask for an older version. An answer that is itermem's own
//! hook (a lookup in the global scope, where the preloaded library comes first) is kept only if
//! the real function exists, so probing for a function CUDA lacks still finds nothing.
//!
//! **`dlsym` without recursion.** glibc's `dlsym` is found with `dlvsym`, which itermem does not
//! export (`real::real_dlsym`); everything in this library looks names up through it. glibc
//! resolves `RTLD_NEXT` relative to its caller's return address, which an ordinary wrapper
//! would make itermem's: the exported `dlsym` is a few instructions that jump (never call) to
//! glibc's for `RTLD_NEXT`, leaving the program's return address in place, and call
//! `lookup` for every other handle. Those instructions exist for x86-64 and aarch64; on other
//! targets `dlsym` is not interposed.

use super::CUDA_ERROR_SYMBOL_NOT_FOUND;
use super::hooks::hook_named;
use super::real::{RealFn, object_base, real_dlsym, real_dlsym_address};
use std::ffi::{CStr, c_char, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::OnceLock;

type GetProcAddress = unsafe extern "C" fn(*const c_char, *mut *mut c_void, i32, u64) -> u32;
type GetProcAddressV2 =
    unsafe extern "C" fn(*const c_char, *mut *mut c_void, i32, u64, *mut i32) -> u32;
type DriverEntryPoint = unsafe extern "C" fn(*const c_char, *mut *mut c_void, u64, *mut i32) -> u32;
type DriverEntryPointByVersion =
    unsafe extern "C" fn(*const c_char, *mut *mut c_void, u32, u64, *mut i32) -> u32;

static GET_PROC_ADDRESS: RealFn = RealFn::new(c"cuGetProcAddress");
static GET_PROC_ADDRESS_V2: RealFn = RealFn::new(c"cuGetProcAddress_v2");
static DRIVER_ENTRY_POINT: RealFn = RealFn::new(c"cudaGetDriverEntryPoint");
static DRIVER_ENTRY_POINT_BY_VERSION: RealFn = RealFn::new(c"cudaGetDriverEntryPointByVersion");

/// The resolvers themselves are handed out like hooks: the static runtime finds
/// `cuGetProcAddress_v2` with `dlsym` and everything else through it.
fn resolver_named(name: &[u8]) -> Option<(*mut c_void, &'static RealFn)> {
    Some(match name {
        b"cuGetProcAddress" => (cuGetProcAddress as *mut c_void, &GET_PROC_ADDRESS),
        b"cuGetProcAddress_v2" => (cuGetProcAddress_v2 as *mut c_void, &GET_PROC_ADDRESS_V2),
        b"cudaGetDriverEntryPoint" => (cudaGetDriverEntryPoint as *mut c_void, &DRIVER_ENTRY_POINT),
        b"cudaGetDriverEntryPointByVersion" => (
            cudaGetDriverEntryPointByVersion as *mut c_void,
            &DRIVER_ENTRY_POINT_BY_VERSION,
        ),
        _ => return None,
    })
}

/// Whether this copy of itermem is the interposer: its hooks are the ones the global scope
/// finds. The `itermem` executable links the same code (the replayer runs in it), and its own
/// calls to `dlsym` reach its own copy of the export; that copy must hand out nothing, or the
/// replayer would call hooks of a second, private recorder. A library only `dlopen`ed for
/// PyTorch's pluggable allocator interface is not the interposer either: the program's other
/// CUDA calls never reach it.
pub(super) fn is_interposer() -> bool {
    static INTERPOSER: OnceLock<bool> = OnceLock::new();
    *INTERPOSER.get_or_init(|| {
        // SAFETY: NUL-terminated name; the global scope is searched, itermem's export excluded
        // by nothing (that is the point).
        let global = unsafe { real_dlsym(libc::RTLD_DEFAULT, c"cudaGetDriverEntryPoint".as_ptr()) };
        // By object, not by address: inside a `dlopen`ed library the address of its own export
        // is looked up in the global scope too (ELF interposition), so it would always match.
        !global.is_null() && object_base(global) == object_base(is_interposer as *const c_void)
    })
}

/// What to hand out for `found`, a function a lookup answered (see the module doc).
fn substitute(found: *mut c_void) -> *mut c_void {
    if found.is_null() || !is_interposer() {
        return found;
    }
    // SAFETY: all-zero is a valid Dl_info; dladdr only reads `found` as an address.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: valid out-parameter.
    if unsafe { libc::dladdr(found, &mut info) } == 0
        || info.dli_sname.is_null()
        || info.dli_saddr != found
    {
        return found;
    }
    // SAFETY: dladdr's NUL-terminated symbol name, owned by the loader.
    let name = unsafe { CStr::from_ptr(info.dli_sname) }.to_bytes();
    let Some((hook, real)) = hook_named(name).or_else(|| resolver_named(name)) else {
        return found;
    };
    if info.dli_fbase == object_base(substitute as *const c_void) {
        // Our own export, found in the global scope: only if CUDA has the function.
        return if real.exists() {
            found
        } else {
            std::ptr::null_mut()
        };
    }
    if real.address() == Some(found) {
        hook
    } else {
        found
    }
}

/// After a resolver's real call: the hook in place of the real function, if `result` is
/// success. A panic here leaves the real answer (the program is unaffected).
fn substitute_out(result: u32, pfn: *mut *mut c_void) -> u32 {
    if result == 0 && !pfn.is_null() {
        let _ = catch_unwind(AssertUnwindSafe(|| {
            // SAFETY: the call succeeded, so the resolver wrote a function pointer there.
            unsafe { *pfn = substitute(*pfn) };
        }));
    }
    result
}

/// `cuGetProcAddress`, the 4-argument form of CUDA < 12.0.
///
/// # Safety
/// Called by the application with the arguments of the CUDA prototype.
#[cfg_attr(not(test), unsafe(no_mangle))]
#[allow(non_snake_case)] // CUDA's names
pub unsafe extern "C" fn cuGetProcAddress(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cuda_version: i32,
    flags: u64,
) -> u32 {
    // SAFETY: the prototype of cuGetProcAddress (CUDA 11).
    let Some(real) = (unsafe { GET_PROC_ADDRESS.get::<GetProcAddress>() }) else {
        return CUDA_ERROR_SYMBOL_NOT_FOUND;
    };
    // SAFETY: forwards the application's arguments unchanged.
    substitute_out(unsafe { real(symbol, pfn, cuda_version, flags) }, pfn)
}

/// `cuGetProcAddress_v2` (CUDA ≥ 12.0), with the status of the lookup.
///
/// # Safety
/// Called by the application with the arguments of the CUDA prototype.
#[cfg_attr(not(test), unsafe(no_mangle))]
#[allow(non_snake_case)] // CUDA's names
pub unsafe extern "C" fn cuGetProcAddress_v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cuda_version: i32,
    flags: u64,
    status: *mut i32,
) -> u32 {
    // SAFETY: the prototype of cuGetProcAddress_v2.
    let Some(real) = (unsafe { GET_PROC_ADDRESS_V2.get::<GetProcAddressV2>() }) else {
        return CUDA_ERROR_SYMBOL_NOT_FOUND;
    };
    // SAFETY: forwards the application's arguments unchanged.
    substitute_out(
        unsafe { real(symbol, pfn, cuda_version, flags, status) },
        pfn,
    )
}

/// `cudaGetDriverEntryPoint` (CUDA 12 prototype, with the status of the lookup).
///
/// # Safety
/// Called by the application with the arguments of the CUDA prototype.
#[cfg_attr(not(test), unsafe(no_mangle))]
#[allow(non_snake_case)] // CUDA's names
pub unsafe extern "C" fn cudaGetDriverEntryPoint(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    flags: u64,
    status: *mut i32,
) -> u32 {
    // SAFETY: the prototype of cudaGetDriverEntryPoint.
    let Some(real) = (unsafe { DRIVER_ENTRY_POINT.get::<DriverEntryPoint>() }) else {
        return CUDA_ERROR_SYMBOL_NOT_FOUND;
    };
    // SAFETY: forwards the application's arguments unchanged.
    substitute_out(unsafe { real(symbol, pfn, flags, status) }, pfn)
}

/// `cudaGetDriverEntryPointByVersion` (CUDA ≥ 12.5).
///
/// # Safety
/// Called by the application with the arguments of the CUDA prototype.
#[cfg_attr(not(test), unsafe(no_mangle))]
#[allow(non_snake_case)] // CUDA's names
pub unsafe extern "C" fn cudaGetDriverEntryPointByVersion(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cuda_version: u32,
    flags: u64,
    status: *mut i32,
) -> u32 {
    // SAFETY: the prototype of cudaGetDriverEntryPointByVersion.
    let Some(real) = (unsafe { DRIVER_ENTRY_POINT_BY_VERSION.get::<DriverEntryPointByVersion>() })
    else {
        return CUDA_ERROR_SYMBOL_NOT_FOUND;
    };
    // SAFETY: forwards the application's arguments unchanged.
    substitute_out(
        unsafe { real(symbol, pfn, cuda_version, flags, status) },
        pfn,
    )
}

/// `dlsym` for every handle but `RTLD_NEXT`: glibc's answer, substituted.
extern "C" fn lookup(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    // SAFETY: the program's arguments to dlsym, forwarded unchanged.
    let found = unsafe { real_dlsym(handle, name) };
    catch_unwind(AssertUnwindSafe(|| substitute(found))).unwrap_or(found)
}

/// glibc's `dlsym`, for the jump of `RTLD_NEXT` lookups (null if it cannot be found).
extern "C" fn next_dlsym() -> *mut c_void {
    real_dlsym_address()
}

/// `dlsym`: see the module doc. `RTLD_NEXT` is `(void *)-1` in glibc.
///
/// # Safety
/// Called by the application with the arguments of `dlsym`.
#[cfg(target_arch = "x86_64")]
#[cfg_attr(not(test), unsafe(no_mangle))]
#[unsafe(naked)]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    // SAFETY: a stub of the C ABI: it either jumps to `lookup` (an `extern "C"` function of
    // dlsym's prototype, which cannot unwind) with the caller's arguments and return address
    // untouched, or saves both argument registers around a call of `next_dlsym` (no arguments,
    // cannot unwind) with the stack 16-byte aligned, restores them and jumps to glibc's dlsym
    // (or returns null) with the program's return address on top of the stack.
    core::arch::naked_asm!(
        "cmp rdi, -1",
        "jne {lookup}",
        // RTLD_NEXT: the arguments saved around the call (rsp stays 16-byte aligned for it),
        // then a jump with the program's return address still on top of the stack.
        "push rdi",
        "push rsi",
        "sub rsp, 8",
        "call {next_dlsym}",
        "add rsp, 8",
        "pop rsi",
        "pop rdi",
        "test rax, rax",
        "jz 2f",
        "jmp rax",
        "2:",
        "ret",
        lookup = sym lookup,
        next_dlsym = sym next_dlsym,
    )
}

/// `dlsym`: see the module doc. `RTLD_NEXT` is `(void *)-1` in glibc.
///
/// # Safety
/// Called by the application with the arguments of `dlsym`.
#[cfg(target_arch = "aarch64")]
#[cfg_attr(not(test), unsafe(no_mangle))]
#[unsafe(naked)]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    // SAFETY: as the x86_64 stub: x0, x1 and x30 are saved around the call of `next_dlsym` on a
    // 16-byte aligned stack and restored before the branch, so glibc's dlsym sees the
    // program's arguments and return address.
    core::arch::naked_asm!(
        "cmn x0, #1",
        "b.eq 1f",
        "b {lookup}",
        // RTLD_NEXT: arguments and the program's return address (x30) saved around the call,
        // then a branch that leaves x30 as the program's.
        "1:",
        "stp x0, x1, [sp, #-32]!",
        "str x30, [sp, #16]",
        "bl {next_dlsym}",
        "mov x16, x0",
        "ldr x30, [sp, #16]",
        "ldp x0, x1, [sp], #32",
        "cbz x16, 2f",
        "br x16",
        "2:",
        "mov x0, #0",
        "ret",
        lookup = sym lookup,
        next_dlsym = sym next_dlsym,
    )
}
