//! The one seam between itermem and the real CUDA libraries.
//!
//! Runtime functions are found with `dlsym(RTLD_NEXT, name)` — the definition the application
//! would have reached without us — on first use and cached, one slot per symbol. A runtime that
//! is not in the global scope (the dependency of a library the program `dlopen`ed with
//! `RTLD_LOCAL`, as frameworks load their CUDA plugins) is invisible to `RTLD_NEXT`; its caller
//! reached our hook only because the preloaded library comes first, so the definition is then
//! looked up in the loaded objects themselves ([`definition_in_loaded_objects`]). A symbol that
//! cannot be found either way is remembered as missing and reported once. Driver functions
//! itermem needs for itself (kernel parameter layout and names) are looked up in
//! `libcuda.so.1`, which every CUDA runtime has loaded by the time a kernel is launched. Nothing here can panic: a loader
//! that panics inside a hook would take the host program down.
//!
//! itermem exports `dlsym` itself (`resolve.rs`), and a call from this library to `dlsym` would
//! reach that export; every lookup here goes to glibc's own through [`real_dlsym`].

use std::ffi::{CStr, c_char, c_void};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicPtr, Ordering};

/// Value of a slot whose symbol was looked up and not found.
const MISSING: *mut c_void = std::ptr::dangling_mut();

/// A lazily resolved pointer to the next definition of one symbol.
///
/// State table of `ptr`:
///
/// | value   | meaning                         |
/// |---------|---------------------------------|
/// | null    | not looked up yet               |
/// | MISSING | looked up, not found (reported) |
/// | other   | address of the real function    |
///
/// Every transition is from null to a final value, and two threads racing store the same value,
/// so `Relaxed` suffices: the only thing published is the address itself, and code at that
/// address is immutable.
pub struct RealFn {
    name: &'static CStr,
    ptr: AtomicPtr<c_void>,
}

impl RealFn {
    pub const fn new(name: &'static CStr) -> RealFn {
        RealFn {
            name,
            ptr: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// The real function as type `F` (a function pointer type), or None if it does not exist.
    ///
    /// # Safety
    /// `F` must be the function pointer type of the symbol's true prototype.
    #[inline]
    pub unsafe fn get<F: Copy>(&self) -> Option<F> {
        debug_assert_eq!(size_of::<F>(), size_of::<*mut c_void>());
        let mut ptr = self.ptr.load(Ordering::Relaxed);
        if ptr.is_null() {
            ptr = self.resolve();
        }
        // SAFETY: a non-MISSING pointer is the address of the symbol, whose type the caller
        // vouches for; function pointers and data pointers have the same size here.
        (ptr != MISSING).then(|| unsafe { std::mem::transmute_copy::<*mut c_void, F>(&ptr) })
    }

    /// Looks the symbol up (the first call only), reporting a miss once.
    #[cold]
    fn resolve(&self) -> *mut c_void {
        let found = next_definition(self.name);
        let ptr = if found.is_null() {
            super::report(format_args!(
                "{} not found in the CUDA libraries; the call fails",
                self.name.to_string_lossy()
            ));
            MISSING
        } else {
            found
        };
        self.ptr.store(ptr, Ordering::Relaxed);
        ptr
    }
}

/// The definition of `name` the application would have reached without itermem: the next one
/// in the global scope, else one in the loaded objects (module doc); null if none.
fn next_definition(name: &CStr) -> *mut c_void {
    // SAFETY: `name` is NUL-terminated; RTLD_NEXT searches the objects after ours.
    let found = unsafe { real_dlsym(libc::RTLD_NEXT, name.as_ptr()) };
    if found.is_null() {
        definition_in_loaded_objects(name)
    } else {
        found
    }
}

type Dlsym = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;

/// glibc's `dlsym`, found by version with `dlvsym` (which itermem does not export), so neither
/// this library nor a lookup made for it ever reaches itermem's own `dlsym`. Null if glibc has
/// none under the versions it has used on x86-64 (2.2.5, and 2.34 where it moved into libc)
/// and aarch64 (2.17).
pub fn real_dlsym_address() -> *mut c_void {
    static REAL: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
    let mut real = REAL.load(Ordering::Relaxed);
    if real.is_null() {
        for version in [c"GLIBC_2.34", c"GLIBC_2.2.5", c"GLIBC_2.17"] {
            // SAFETY: NUL-terminated name and version; RTLD_NEXT searches after this library.
            real = unsafe { libc::dlvsym(libc::RTLD_NEXT, c"dlsym".as_ptr(), version.as_ptr()) };
            if !real.is_null() {
                break;
            }
        }
        REAL.store(real, Ordering::Relaxed);
    }
    real
}

/// `dlsym` as glibc answers it, bypassing itermem's export (null when glibc's cannot be found).
///
/// # Safety
/// As `dlsym`: a valid handle (or pseudo-handle) and a NUL-terminated name.
pub unsafe fn real_dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    let real = real_dlsym_address();
    if real.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: `real` is glibc's dlsym, whose prototype `Dlsym` is; arguments per the caller.
    unsafe { std::mem::transmute::<*mut c_void, Dlsym>(real)(handle, name) }
}

impl RealFn {
    /// Whether the real function exists now. Unlike [`RealFn::get`] a miss is neither reported
    /// nor remembered: a program probing for a function may load its library later.
    pub fn exists(&self) -> bool {
        let ptr = self.ptr.load(Ordering::Relaxed);
        if !ptr.is_null() {
            return ptr != MISSING;
        }
        !next_definition(self.name).is_null()
    }

    /// The real function's address if it exists (resolved as [`RealFn::get`] does).
    pub fn address(&self) -> Option<*mut c_void> {
        // SAFETY: a data pointer is a valid `F` for any symbol.
        unsafe { self.get::<*mut c_void>() }
    }
}

/// The first definition of `name`, in load order, among the loaded objects and their
/// dependencies, other than ours; null if none. Finds a runtime loaded as the dependency of an
/// `RTLD_LOCAL` library, which is outside the global scope `RTLD_NEXT` searches.
fn definition_in_loaded_objects(name: &CStr) -> *mut c_void {
    let ours = object_base(definition_in_loaded_objects as *const c_void);
    for object in loaded_objects() {
        // SAFETY: NUL-terminated path of an object that is loaded; RTLD_NOLOAD never loads one,
        // it only takes a reference, released below.
        let handle = unsafe { libc::dlopen(object.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
        if handle.is_null() {
            continue;
        }
        // SAFETY: valid handle and NUL-terminated name; a handle's lookup covers the object
        // and its dependencies, never the preloaded libraries (ours).
        let found = unsafe { real_dlsym(handle, name.as_ptr()) };
        // SAFETY: the reference taken by dlopen above; the object stays loaded by its owner.
        unsafe { libc::dlclose(handle) };
        if !found.is_null() && object_base(found) != ours {
            return found;
        }
    }
    std::ptr::null_mut()
}

/// The paths of the loaded objects, in load order (the main program, which has no path, left
/// out: its handle is the global scope, where our hooks are).
fn loaded_objects() -> Vec<std::ffi::CString> {
    unsafe extern "C" fn collect(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        objects: *mut c_void,
    ) -> libc::c_int {
        // SAFETY: the loader passes a valid entry and our `objects` pointer back unchanged.
        let (info, objects) = unsafe { (&*info, &mut *(objects as *mut Vec<std::ffi::CString>)) };
        if !info.dlpi_name.is_null() {
            // SAFETY: the loader's NUL-terminated path of the object.
            let path = unsafe { CStr::from_ptr(info.dlpi_name) };
            if !path.is_empty() {
                objects.push(path.to_owned());
            }
        }
        0
    }
    let mut objects = Vec::new();
    // SAFETY: `collect` only reads the entries and appends to `objects`, which outlives the
    // call; dlopen is not called inside it (the loader's lock is held there).
    unsafe { libc::dl_iterate_phdr(Some(collect), &mut objects as *mut _ as *mut c_void) };
    objects
}

/// The load address of the object that contains `addr` (null if none).
pub fn object_base(addr: *const c_void) -> *mut c_void {
    // SAFETY: all-zero is a valid Dl_info; dladdr only reads `addr` as an address.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: valid out-parameter.
    if unsafe { libc::dladdr(addr, &mut info) } == 0 {
        return std::ptr::null_mut();
    }
    info.dli_fbase
}

type GetFuncBySymbol = unsafe extern "C" fn(*mut usize, *const c_void) -> u32;
type FuncGetParamInfo = unsafe extern "C" fn(usize, usize, *mut usize, *mut usize) -> u32;
type FuncGetName = unsafe extern "C" fn(*mut *const c_char, usize) -> u32;
type PointerGetAttribute = unsafe extern "C" fn(*mut c_void, i32, u64) -> u32;

/// Driver entry points itermem asks about kernels and pointers.
struct Introspection {
    param_info: Option<FuncGetParamInfo>,
    func_name: Option<FuncGetName>,
    pointer_attribute: Option<PointerGetAttribute>,
}

fn introspection() -> &'static Introspection {
    static FUNCTIONS: OnceLock<Introspection> = OnceLock::new();
    FUNCTIONS.get_or_init(|| {
        // SAFETY: each symbol is requested with the pointer type of its CUDA 12 prototype.
        unsafe {
            Introspection {
                param_info: driver_function(c"cuFuncGetParamInfo"),
                func_name: driver_function(c"cuFuncGetName"),
                pointer_attribute: driver_function(c"cuPointerGetAttribute"),
            }
        }
    })
}

/// What itermem learns about a kernel at its first launch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelLayout {
    pub name: String,
    /// The driver's handle of the kernel (`CUfunction`), when known.
    pub function: Option<usize>,
    /// (offset, size) of each parameter in the argument buffer; None when the driver cannot
    /// tell (CUDA < 12.4, or a function the runtime does not know).
    pub params: Option<Vec<(usize, usize)>>,
}

/// Asks the runtime and driver about the kernel whose host function is `func` (a runtime
/// launch). Must be called on a thread with a current context (any thread launching a kernel
/// has one).
pub fn kernel_layout(func: *const c_void) -> KernelLayout {
    static GET_FUNC_BY_SYMBOL: RealFn = RealFn::new(c"cudaGetFuncBySymbol");
    // SAFETY: cudaGetFuncBySymbol's CUDA 12 prototype. A runtime launch means a runtime is
    // loaded; asked first whether it exists, so a runtime without the function (CUDA < 11) is
    // not reported as an error.
    let get_func_by_symbol = GET_FUNC_BY_SYMBOL
        .exists()
        .then(|| unsafe { GET_FUNC_BY_SYMBOL.get::<GetFuncBySymbol>() })
        .flatten();
    let mut handle = 0usize;
    let found = get_func_by_symbol.is_some_and(|get| {
        // SAFETY: valid out-parameter; `func` is the launch's function pointer.
        unsafe { get(&mut handle, func) == 0 }
    });
    if found {
        let mut layout = function_layout(handle);
        if layout.name.is_empty() {
            layout.name = symbol_name(func).unwrap_or_else(|| format!("kernel@{func:p}"));
        }
        return layout;
    }
    KernelLayout {
        name: symbol_name(func).unwrap_or_else(|| format!("kernel@{func:p}")),
        function: None,
        params: None,
    }
}

/// Asks the driver about the kernel `function` (a `CUfunction`, as a driver launch names it);
/// the name is empty when the driver cannot tell it.
pub fn function_layout(function: usize) -> KernelLayout {
    let functions = introspection();
    let params = functions.param_info.and_then(|info| {
        let mut params = Vec::new();
        loop {
            let (mut offset, mut size) = (0usize, 0usize);
            // SAFETY: a function handle of the driver's and valid out-parameters; the driver
            // answers CUDA_ERROR_INVALID_VALUE past the last parameter.
            match unsafe { info(function, params.len(), &mut offset, &mut size) } {
                0 => params.push((offset, size)),
                _ => break Some(params),
            }
            if params.len() > 4096 {
                break None;
            }
        }
    });
    KernelLayout {
        name: kernel_name(functions, function).unwrap_or_default(),
        function: Some(function),
        params,
    }
}

fn kernel_name(functions: &Introspection, handle: usize) -> Option<String> {
    let get = functions.func_name?;
    let mut name: *const c_char = std::ptr::null();
    // SAFETY: valid out-parameter and function handle.
    if unsafe { get(&mut name, handle) } != 0 || name.is_null() {
        return None;
    }
    // SAFETY: the driver returns a NUL-terminated string that lives as long as the function.
    Some(
        unsafe { CStr::from_ptr(name) }
            .to_string_lossy()
            .into_owned(),
    )
}

/// The dynamic symbol at `func` (for nvcc programs, the host stub carries the kernel's name).
fn symbol_name(func: *const c_void) -> Option<String> {
    // SAFETY: all-zero is a valid Dl_info; dladdr only reads `func` as an address.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: valid out-parameter.
    if unsafe { libc::dladdr(func, &mut info) } == 0 || info.dli_sname.is_null() {
        return None;
    }
    // SAFETY: dladdr returns a NUL-terminated name owned by the loader.
    Some(
        unsafe { CStr::from_ptr(info.dli_sname) }
            .to_string_lossy()
            .into_owned(),
    )
}

/// The driver library (`libcuda.so.1`), loaded by every CUDA runtime before it does anything;
/// null if it cannot be opened.
fn driver_library() -> *mut c_void {
    static HANDLE: OnceLock<usize> = OnceLock::new();
    *HANDLE.get_or_init(|| {
        // SAFETY: dlopen of the driver by its soname; it is already loaded by the runtime, so
        // this only takes a reference, kept for the life of the process.
        unsafe { libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW) as usize }
    }) as *mut c_void
}

/// A driver entry point as function pointer type `F`, or None.
///
/// # Safety
/// `F` must be the function pointer type of the symbol's true prototype.
pub unsafe fn driver_function<F: Copy>(name: &CStr) -> Option<F> {
    debug_assert_eq!(size_of::<F>(), size_of::<*mut c_void>());
    let driver = driver_library();
    if driver.is_null() {
        return None;
    }
    // SAFETY: valid handle and NUL-terminated name.
    let symbol = unsafe { real_dlsym(driver, name.as_ptr()) };
    // SAFETY: a non-null symbol has the caller's prototype; pointers of both kinds are one word.
    (!symbol.is_null()).then(|| unsafe { std::mem::transmute_copy::<*mut c_void, F>(&symbol) })
}

/// The start of the allocation containing `addr`, as the driver knows it
/// (`CU_POINTER_ATTRIBUTE_RANGE_START_ADDR`); None for memory the driver did not allocate.
pub fn range_start(addr: u64) -> Option<u64> {
    query_range_start(addr).ok()
}

/// Whether the driver says `addr` lies in no allocation (`CUDA_ERROR_INVALID_VALUE`); false
/// when it cannot tell (no context current, no driver): a block is never dropped on a guess.
pub fn allocation_gone(addr: u64) -> bool {
    const INVALID_VALUE: u32 = 1;
    query_range_start(addr) == Err(INVALID_VALUE)
}

/// `cuPointerGetAttribute(RANGE_START_ADDR)` of `addr`, or the driver's error.
fn query_range_start(addr: u64) -> Result<u64, u32> {
    const RANGE_START_ADDR: i32 = 11;
    let get = introspection()
        .pointer_attribute
        .ok_or(super::CUDA_ERROR_SYMBOL_NOT_FOUND)?;
    let mut start = 0u64;
    // SAFETY: RANGE_START_ADDR writes a CUdeviceptr (u64) into `start`.
    let result = unsafe {
        get(
            &mut start as *mut u64 as *mut c_void,
            RANGE_START_ADDR,
            addr,
        )
    };
    if result == 0 { Ok(start) } else { Err(result) }
}

/// Name and total memory of device 0, from the driver (empty and 0 when it cannot tell).
pub fn device_identity() -> (String, u64) {
    type GetName = unsafe extern "C" fn(*mut c_char, i32, i32) -> u32;
    type TotalMem = unsafe extern "C" fn(*mut usize, i32) -> u32;
    let mut name = [0 as c_char; 256];
    let mut total = 0usize;
    // SAFETY: each symbol is requested with the pointer type of its CUDA 12 prototype; the name
    // buffer holds 256 bytes and `total` is a valid out-parameter.
    unsafe {
        if let Some(get_name) = driver_function::<GetName>(c"cuDeviceGetName")
            && get_name(name.as_mut_ptr(), name.len() as i32, 0) != 0
        {
            name[0] = 0;
        }
        if let Some(total_mem) = driver_function::<TotalMem>(c"cuDeviceTotalMem_v2")
            && total_mem(&mut total, 0) != 0
        {
            total = 0;
        }
    }
    // SAFETY: the buffer is NUL-terminated (zeroed, and the driver terminates what it writes).
    let name = unsafe { CStr::from_ptr(name.as_ptr()) }
        .to_string_lossy()
        .into_owned();
    (name, total as u64)
}
