//! The one seam between itermem and the real CUDA libraries.
//!
//! Runtime functions are found with `dlsym(RTLD_NEXT, name)` — the definition the application
//! would have reached without us — on first use and cached, one slot per symbol. A symbol that
//! cannot be found is remembered as missing and reported once. Driver functions itermem needs
//! for itself (kernel parameter layout and names) are looked up in `libcuda.so.1`, which every
//! CUDA runtime has loaded by the time a kernel is launched. Nothing here can panic: a loader
//! that panics inside a hook would take the host program down.

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
    pub unsafe fn get<F: Copy>(&self) -> Option<F> {
        debug_assert_eq!(size_of::<F>(), size_of::<*mut c_void>());
        let mut ptr = self.ptr.load(Ordering::Relaxed);
        if ptr.is_null() {
            // SAFETY: `name` is NUL-terminated; RTLD_NEXT searches the objects after ours.
            let found = unsafe { libc::dlsym(libc::RTLD_NEXT, self.name.as_ptr()) };
            ptr = if found.is_null() {
                super::report(format_args!(
                    "{} not found in the CUDA libraries; the call fails",
                    self.name.to_string_lossy()
                ));
                MISSING
            } else {
                found
            };
            self.ptr.store(ptr, Ordering::Relaxed);
        }
        // SAFETY: a non-MISSING pointer is the address of the symbol, whose type the caller
        // vouches for; function pointers and data pointers have the same size here.
        (ptr != MISSING).then(|| unsafe { std::mem::transmute_copy::<*mut c_void, F>(&ptr) })
    }
}

type GetFuncBySymbol = unsafe extern "C" fn(*mut usize, *const c_void) -> u32;
type FuncGetParamInfo = unsafe extern "C" fn(usize, usize, *mut usize, *mut usize) -> u32;
type FuncGetName = unsafe extern "C" fn(*mut *const c_char, usize) -> u32;
type PointerGetAttribute = unsafe extern "C" fn(*mut c_void, i32, u64) -> u32;

/// Driver and runtime entry points itermem asks about kernels and pointers.
struct Introspection {
    get_func_by_symbol: Option<GetFuncBySymbol>,
    param_info: Option<FuncGetParamInfo>,
    func_name: Option<FuncGetName>,
    pointer_attribute: Option<PointerGetAttribute>,
}

fn introspection() -> &'static Introspection {
    static FUNCTIONS: OnceLock<Introspection> = OnceLock::new();
    FUNCTIONS.get_or_init(|| {
        static GET_FUNC_BY_SYMBOL: RealFn = RealFn::new(c"cudaGetFuncBySymbol");
        // SAFETY: dlopen of the driver by its soname; it is already loaded by the runtime, so
        // this only takes a reference. The handle is kept for the life of the process.
        let driver = unsafe { libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW) };
        let driver_fn = |name: &CStr| -> *mut c_void {
            if driver.is_null() {
                return std::ptr::null_mut();
            }
            // SAFETY: valid handle and NUL-terminated name.
            unsafe { libc::dlsym(driver, name.as_ptr()) }
        };
        let param_info = driver_fn(c"cuFuncGetParamInfo");
        let func_name = driver_fn(c"cuFuncGetName");
        let pointer_attribute = driver_fn(c"cuPointerGetAttribute");
        Introspection {
            // SAFETY: the prototype of cudaGetFuncBySymbol (cudaFunction_t*, const void*).
            get_func_by_symbol: unsafe { GET_FUNC_BY_SYMBOL.get::<GetFuncBySymbol>() },
            // SAFETY: non-null results of dlsym for these names have these prototypes.
            param_info: (!param_info.is_null()).then(|| unsafe {
                std::mem::transmute::<*mut c_void, FuncGetParamInfo>(param_info)
            }),
            // SAFETY: as above.
            func_name: (!func_name.is_null())
                .then(|| unsafe { std::mem::transmute::<*mut c_void, FuncGetName>(func_name) }),
            // SAFETY: as above.
            pointer_attribute: (!pointer_attribute.is_null()).then(|| unsafe {
                std::mem::transmute::<*mut c_void, PointerGetAttribute>(pointer_attribute)
            }),
        }
    })
}

/// What itermem learns about a kernel at its first launch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelLayout {
    pub name: String,
    /// (offset, size) of each parameter in the argument buffer; None when the driver cannot
    /// tell (CUDA < 12.4, or a function the runtime does not know).
    pub params: Option<Vec<(usize, usize)>>,
}

/// Asks the runtime and driver about the kernel whose host function is `func`.
/// Must be called on a thread with a current context (any thread launching a kernel has one).
pub fn kernel_layout(func: *const c_void) -> KernelLayout {
    let functions = introspection();
    let mut handle = 0usize;
    let found = functions.get_func_by_symbol.is_some_and(|get| {
        // SAFETY: valid out-parameter; `func` is the launch's function pointer.
        unsafe { get(&mut handle, func) == 0 }
    });
    let name = found
        .then(|| kernel_name(functions, handle))
        .flatten()
        .or_else(|| symbol_name(func))
        .unwrap_or_else(|| format!("kernel@{func:p}"));
    let params = match (found, functions.param_info) {
        (true, Some(info)) => {
            let mut params = Vec::new();
            loop {
                let (mut offset, mut size) = (0usize, 0usize);
                // SAFETY: valid handle from cudaGetFuncBySymbol and valid out-parameters; the
                // driver answers CUDA_ERROR_INVALID_VALUE past the last parameter.
                match unsafe { info(handle, params.len(), &mut offset, &mut size) } {
                    0 => params.push((offset, size)),
                    _ => break Some(params),
                }
                if params.len() > 4096 {
                    break None;
                }
            }
        }
        _ => None,
    };
    KernelLayout { name, params }
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

/// The start of the allocation containing `addr`, as the driver knows it
/// (`CU_POINTER_ATTRIBUTE_RANGE_START_ADDR`); None for memory the driver did not allocate.
pub fn range_start(addr: u64) -> Option<u64> {
    const RANGE_START_ADDR: i32 = 11;
    let get = introspection().pointer_attribute?;
    let mut start = 0u64;
    // SAFETY: RANGE_START_ADDR writes a CUdeviceptr (u64) into `start`.
    let found = unsafe {
        get(
            &mut start as *mut u64 as *mut c_void,
            RANGE_START_ADDR,
            addr,
        )
    } == 0;
    found.then_some(start)
}

/// Name and total memory of device 0, from the driver (empty and 0 when it cannot tell).
pub fn device_identity() -> (String, u64) {
    type GetName = unsafe extern "C" fn(*mut c_char, i32, i32) -> u32;
    type TotalMem = unsafe extern "C" fn(*mut usize, i32) -> u32;
    // SAFETY: the driver is loaded by the runtime that produced the event being recorded.
    let driver = unsafe { libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW) };
    if driver.is_null() {
        return (String::new(), 0);
    }
    // SAFETY: valid handle and NUL-terminated names.
    let (get_name, total_mem) = unsafe {
        (
            libc::dlsym(driver, c"cuDeviceGetName".as_ptr()),
            libc::dlsym(driver, c"cuDeviceTotalMem_v2".as_ptr()),
        )
    };
    let mut name = [0 as c_char; 256];
    let mut total = 0usize;
    if !get_name.is_null() {
        // SAFETY: the symbol has this prototype; the buffer holds 256 bytes.
        let get_name = unsafe { std::mem::transmute::<*mut c_void, GetName>(get_name) };
        // SAFETY: as above.
        if unsafe { get_name(name.as_mut_ptr(), name.len() as i32, 0) } != 0 {
            name[0] = 0;
        }
    }
    if !total_mem.is_null() {
        // SAFETY: the symbol has this prototype; `total` is a valid out-parameter.
        let total_mem = unsafe { std::mem::transmute::<*mut c_void, TotalMem>(total_mem) };
        // SAFETY: as above.
        if unsafe { total_mem(&mut total, 0) } != 0 {
            total = 0;
        }
    }
    // SAFETY: the buffer is NUL-terminated (zeroed, and the driver terminates what it writes).
    let name = unsafe { CStr::from_ptr(name.as_ptr()) }
        .to_string_lossy()
        .into_owned();
    (name, total as u64)
}
