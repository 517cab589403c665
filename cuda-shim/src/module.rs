//! Modules: the device code a program hands the driver (a fatbinary registered by nvcc's
//! startup code, or an image given to `cuModuleLoadData`), loaded as NVIDIA's driver loads it.
//!
//! Machine code (SASS) never runs here. As a driver does for a GPU that no machine code fits, the
//! PTX of the highest virtual architecture at or below the device's compute capability is taken
//! and "JIT-compiled": parsed once for the interpreter (`ptx`). A module with no such PTX loads,
//! and its kernels fail to launch with `CUDA_ERROR_NO_BINARY_FOR_GPU`, as on a GPU of that
//! capability. A module's `.global`/`.const` variables get device memory on each device at first
//! use, initialised from the PTX.

use crate::fatbin::{self, Image};
use crate::kernel::{Body, Layout, Param, PtxKernel};
use crate::ptx;
use crate::result::{CuResult, INVALID_HANDLE, INVALID_IMAGE, INVALID_PTX, NOT_FOUND};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::io::Write;
use std::sync::Arc;

/// Handles of every loaded module, so a handle from a caller is checked before use.
static LOADED: Mutex<Vec<usize>> = Mutex::new(Vec::new());

pub struct Module {
    /// The parsed PTX; `None` when the image has none this device can run.
    ptx: Option<ptx::Module>,
    /// `CUfunction` handles given out by `cuModuleGetFunction`, by kernel name.
    handles: Mutex<HashMap<String, usize>>,
    /// Device addresses of the module's variables, per device ordinal (allocated at first use).
    globals: Mutex<HashMap<usize, Vec<u64>>>,
}

impl Module {
    /// Loads `image` (a fatbinary wrapper or header, PTX text, or an ELF cubin) for a device of
    /// compute capability `capability` (10 × major + minor). Modules live for the process, so a
    /// kernel handle never dangles.
    ///
    /// # Safety
    /// `image` points to one of the formats above, valid for reads of its whole size.
    pub unsafe fn load(image: *const u8, capability: u32) -> CuResult<&'static Module> {
        // SAFETY: forwarded contract.
        let image = unsafe { fatbin::read_image(image) }.map_err(|e| {
            report(&format!("cannot read the module image: {e}"));
            INVALID_IMAGE
        })?;
        let text = match image {
            Image::Ptx(text) => Some(text),
            Image::Cubin => None,
            Image::Fatbin { ptx, .. } => fatbin::module_ptx(&ptx, capability),
        };
        let ptx = match text {
            Some(text) => Some(ptx::parse(&text).map_err(|e| {
                report(&format!("cannot parse the module's PTX: {e}"));
                INVALID_PTX
            })?),
            None => None,
        };
        let module: &'static Module = Box::leak(Box::new(Module {
            ptx,
            handles: Mutex::new(HashMap::new()),
            globals: Mutex::new(HashMap::new()),
        }));
        LOADED.lock().push(module.handle());
        Ok(module)
    }

    /// The `CUmodule` handle: the module's address.
    pub fn handle(&'static self) -> usize {
        self as *const Module as usize
    }

    /// The module of a handle (`CUDA_ERROR_INVALID_HANDLE` for any other value).
    pub fn from_handle(handle: usize) -> CuResult<&'static Module> {
        if !LOADED.lock().contains(&handle) {
            return Err(INVALID_HANDLE);
        }
        // SAFETY: `LOADED` holds only addresses of modules leaked in `load`, never freed.
        Ok(unsafe { &*(handle as *const Module) })
    }

    /// The `CUfunction` of kernel `name`, made once with `register(key, layout)` (`key` is a
    /// unique address standing for the kernel, as a host stub's address does for the runtime).
    pub fn function_handle(
        &'static self,
        name: &str,
        register: impl FnOnce(usize, Layout) -> usize,
    ) -> CuResult<usize> {
        let mut handles = self.handles.lock();
        if let Some(&handle) = handles.get(name) {
            return Ok(handle);
        }
        let layout = self.function(name).ok_or(NOT_FOUND)?;
        let key: &'static u8 = Box::leak(Box::new(0u8));
        let handle = register(key as *const u8 as usize, layout);
        handles.insert(name.to_string(), handle);
        Ok(handle)
    }

    /// The layout of kernel `name`: its PTX and parameters, or a body that fails with
    /// `CUDA_ERROR_NO_BINARY_FOR_GPU` when the module has no PTX for this device. `None` if the
    /// module's PTX has no such entry.
    pub fn function(&'static self, name: &str) -> Option<Layout> {
        let Some(ptx) = &self.ptx else {
            return Some(Layout {
                name: name.to_string(),
                body: Some(Body::NoImage),
                ..Layout::default()
            });
        };
        let kernel = ptx.kernels.iter().find(|k| k.name == name)?;
        Some(Layout {
            name: name.to_string(),
            params: kernel
                .params
                .iter()
                .map(|p| Param {
                    offset: p.offset,
                    size: p.size,
                })
                .collect(),
            body: Some(Body::Ptx(Arc::new(PtxKernel {
                kernel: kernel.clone(),
                module: self,
            }))),
            simulated: std::time::Duration::ZERO,
        })
    }

    /// The device addresses of the module's variables on device `ordinal`, allocating and
    /// initialising them with `alloc(size)` and `write(addr, bytes)` the first time.
    pub fn globals(
        &self,
        ordinal: usize,
        alloc: impl Fn(usize) -> CuResult<u64>,
        write: impl Fn(u64, &[u8]) -> CuResult<()>,
    ) -> CuResult<Vec<u64>> {
        let Some(ptx) = &self.ptx else {
            return Ok(Vec::new());
        };
        let mut globals = self.globals.lock();
        if let Some(addresses) = globals.get(&ordinal) {
            return Ok(addresses.clone());
        }
        let mut addresses = Vec::with_capacity(ptx.globals.len());
        for global in &ptx.globals {
            let addr = alloc(global.size.max(1))?;
            write(addr, &global.init)?;
            addresses.push(addr);
        }
        globals.insert(ordinal, addresses.clone());
        Ok(addresses)
    }

    /// Forgets the variables of every module on device `ordinal`, whose memory a reset of its
    /// primary context freed: the next use makes them afresh from the PTX, as the modules of a
    /// new context are on CUDA.
    pub fn forget_globals(ordinal: usize) {
        for &handle in LOADED.lock().iter() {
            // SAFETY: `LOADED` holds only addresses of modules leaked in `load`, never freed.
            let module = unsafe { &*(handle as *const Module) };
            module.globals.lock().remove(&ordinal);
        }
    }

    /// The index and size of variable `name`.
    pub fn global(&self, name: &str) -> Option<(usize, usize)> {
        let ptx = self.ptx.as_ref()?;
        let index = ptx.globals.iter().position(|g| g.name == name)?;
        Some((index, ptx.globals[index].size))
    }
}

/// Handles of every loaded library.
static LIBRARIES: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// A library (`cuLibraryLoadData`): a module that belongs to no context. Modules here are not
/// bound to a context anyway (their variables are allocated per device), so a library is its
/// module under another handle, which `cuLibraryGetModule` answers in every context.
pub struct Library {
    pub module: &'static Module,
}

impl Library {
    /// A library of `module`, alive for the process (as modules are).
    pub fn new(module: &'static Module) -> &'static Library {
        let library: &'static Library = Box::leak(Box::new(Library { module }));
        LIBRARIES.lock().push(library.handle());
        library
    }

    /// The `CUlibrary` handle: the library's address.
    pub fn handle(&'static self) -> usize {
        self as *const Library as usize
    }

    /// The library of a handle (`CUDA_ERROR_INVALID_HANDLE` for any other value).
    pub fn from_handle(handle: usize) -> CuResult<&'static Library> {
        if !LIBRARIES.lock().contains(&handle) {
            return Err(INVALID_HANDLE);
        }
        // SAFETY: `LIBRARIES` holds only addresses of libraries leaked in `new`, never freed.
        Ok(unsafe { &*(handle as *const Library) })
    }
}

/// One line on stderr: the program gets an error code, the user the reason.
pub fn report(message: &str) {
    let _ = writeln!(std::io::stderr(), "cuda-shim: {message}");
}
