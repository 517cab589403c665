//! Kernels: host functions registered with their parameter layout, or PTX kernels of a loaded
//! module (see `module`), whose layout comes from their `.param` declarations.
//!
//! A `CUfunction` handle is the address of a [`Function`], which lives for the whole process:
//! handles obtained through `cudaGetFuncBySymbol` never dangle, and registering a host function
//! again updates its layout in place.
//!
//! Parameter offsets follow the rule of a packed C argument buffer: each parameter is aligned to
//! the largest power of two dividing its size, at most 16 (pointers and `size_t` to 8, `float`
//! to 4, `float4` to 16). `cuFuncGetParamInfo` reports exactly these offsets, and launches pack
//! the arguments by them.

use crate::result::{CuResult, INVALID_HANDLE, INVALID_VALUE};
use parking_lot::{Mutex, RwLock};
use std::collections::{HashMap, HashSet};
use std::ffi::c_void;
use std::sync::Arc;
use std::time::Duration;

/// A kernel body as the shim runs it: `args[i]` points to parameter i.
pub type KernelFn = unsafe extern "C" fn(args: *mut *mut c_void);

/// What a launch of a function runs.
#[derive(Clone)]
pub enum Body {
    /// A host function registered with `cudaShimRegisterKernel`.
    Host(KernelFn),
    /// A PTX kernel, interpreted.
    Ptx(Arc<PtxKernel>),
    /// A kernel whose module has no image this device can run (only machine code, or PTX of a
    /// newer architecture): launches fail with `CUDA_ERROR_NO_BINARY_FOR_GPU`.
    NoImage,
}

impl std::fmt::Debug for Body {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            Body::Host(body) => write!(f, "Host({:p})", *body as *const c_void),
            Body::Ptx(k) => write!(f, "Ptx({})", k.kernel.name),
            Body::NoImage => write!(f, "NoImage"),
        }
    }
}

/// A PTX kernel and the module whose variables it addresses.
pub struct PtxKernel {
    pub kernel: crate::ptx::Kernel,
    pub module: &'static crate::module::Module,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Param {
    pub offset: usize,
    pub size: usize,
}

#[derive(Clone, Debug, Default)]
pub struct Layout {
    pub name: String,
    pub body: Option<Body>,
    pub params: Vec<Param>,
    pub simulated: Duration,
}

impl Layout {
    /// Size of the packed argument buffer.
    pub fn buffer_size(&self) -> usize {
        self.params.last().map_or(0, |p| p.offset + p.size)
    }
}

pub struct Function {
    layout: RwLock<Layout>,
    /// NUL-terminated names this function has carried, newest last (`cuFuncGetName` hands out
    /// pointers into them, so an old name is never freed).
    names: Mutex<Vec<std::ffi::CString>>,
}

impl Function {
    pub fn layout(&self) -> Layout {
        self.layout.read().clone()
    }

    /// The current name, NUL-terminated, valid for the life of the process.
    pub fn name(&self) -> &std::ffi::CStr {
        let mut names = self.names.lock();
        let current =
            std::ffi::CString::new(self.layout.read().name.replace('\0', "")).unwrap_or_default();
        if names.last() != Some(&current) {
            names.push(current);
        }
        let name: *const std::ffi::CStr = names.last().map_or(c"", |n| n.as_c_str());
        // SAFETY: the CString's heap buffer never moves or drops while `names` only grows, and
        // `self` lives for the whole process (functions are leaked).
        unsafe { &*name }
    }
}

/// Offsets of parameters of the given sizes in a packed argument buffer.
pub fn pack_offsets(sizes: &[usize]) -> CuResult<Vec<Param>> {
    let mut end = 0usize;
    sizes
        .iter()
        .map(|&size| {
            if size == 0 {
                return Err(INVALID_VALUE);
            }
            let align = (1usize << size.trailing_zeros()).min(16);
            let offset = end.div_ceil(align) * align;
            end = offset + size;
            Ok(Param { offset, size })
        })
        .collect()
}

/// Every function known to the context, by host address and by handle.
#[derive(Default)]
pub struct Functions {
    known: Mutex<Known>,
}

#[derive(Default)]
struct Known {
    by_host: HashMap<usize, &'static Function>,
    handles: HashSet<usize>,
}

impl Functions {
    /// Registers (or updates) the kernel whose host address is `host`.
    pub fn register(&self, host: usize, layout: Layout) -> &'static Function {
        let mut known = self.known.lock();
        if let Some(function) = known.by_host.get(&host) {
            *function.layout.write() = layout;
            return function;
        }
        let function: &'static Function = Box::leak(Box::new(Function {
            layout: RwLock::new(layout),
            names: Mutex::new(Vec::new()),
        }));
        known.by_host.insert(host, function);
        known.handles.insert(function as *const Function as usize);
        function
    }

    /// Records the device name of a host stub (`__cudaRegisterFunction`) without replacing a
    /// layout registered before.
    pub fn name(&self, host: usize, name: String) {
        let known = self.known.lock().by_host.contains_key(&host);
        if !known {
            self.register(
                host,
                Layout {
                    name,
                    ..Layout::default()
                },
            );
        }
    }

    pub fn by_host(&self, host: usize) -> Option<&'static Function> {
        self.known.lock().by_host.get(&host).copied()
    }

    /// Resolves a `CUfunction` handle; unknown handles are `CUDA_ERROR_INVALID_HANDLE`.
    pub fn by_handle(&self, handle: usize) -> CuResult<&'static Function> {
        if !self.known.lock().handles.contains(&handle) {
            return Err(INVALID_HANDLE);
        }
        // SAFETY: `handles` holds only addresses of `Function`s leaked in `register`, which are
        // never freed.
        Ok(unsafe { &*(handle as *const Function) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_follow_natural_alignment() {
        let params = pack_offsets(&[8, 4, 8, 4, 12, 16]).unwrap();
        let offsets: Vec<usize> = params.iter().map(|p| p.offset).collect();
        assert_eq!(offsets, vec![0, 8, 16, 24, 28, 48]);
        assert_eq!(pack_offsets(&[4, 0]), Err(INVALID_VALUE));
    }

    #[test]
    fn reregistration_keeps_the_handle() {
        let functions = Functions::default();
        let first = functions.register(0x1000, Layout::default()) as *const Function;
        functions.name(0x1000, "ignored".into());
        let layout = Layout {
            name: "k".into(),
            params: pack_offsets(&[8]).unwrap(),
            ..Layout::default()
        };
        let second = functions.register(0x1000, layout) as *const Function;
        assert_eq!(first, second);
        let f = functions.by_handle(first as usize).unwrap();
        assert_eq!(f.layout().name, "k");
        assert_eq!(functions.by_handle(0x42).err(), Some(INVALID_HANDLE));
    }
}
