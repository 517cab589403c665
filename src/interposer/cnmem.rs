//! cnmem mode (`ITERMEM_MODE=cnmem`): the program's `cudaMalloc`s are served by NVIDIA cnmem's
//! policy ([`crate::policy::Cnmem`]), as Theano and Caffe used it, so its footprint can be
//! compared with SmartPool's on the same run. Regions come from the driver (`cuMemAlloc`),
//! exactly sized on every miss after the initial reservation (`ITERMEM_CNMEM_RESERVATION`,
//! default none), and are kept until exit — except when the device is full: real cnmem would
//! then fail the request while a program without it would have had the memory, so the regions
//! no block is allocated from are given back and the request retried; a request that still
//! does not fit gets one `itermem:` line saying what cnmem holds, and goes to `cudaMalloc`.
//!
//! Like real cnmem with one manager, a freed block is reused at once: the policy assumes the
//! program uses its blocks on one stream (or synchronises its streams), as cnmem's users did.
//!
//! With `ITERMEM_CNMEM_LIB=path/libcnmem.so` the allocations go through a real cnmem build
//! instead (`tools/build-cnmem` makes one from the Theano 0.9.0 sources), so the re-creation
//! can be checked against the original on a whole program. Real cnmem reserves half the device
//! when asked for 0 bytes, so a reservation of 0 is passed as 512 bytes (its smallest), which
//! then grows region by region like the re-creation.

use super::driver as cuda;
use super::real::allocation_gone;
use crate::policy::{Cnmem, CnmemConfig, RegionSource};
use rustc_hash::FxHashSet;
use std::ffi::{CString, c_void};
use std::path::Path;

/// Regions from the real driver.
pub struct DriverRegions;

impl RegionSource for DriverRegions {
    fn grow(&mut self, bytes: u64) -> Option<u64> {
        cuda::malloc(bytes)
    }
}

/// Gives the regions no block is allocated from back to the device; the bytes given back.
fn give_back_free_regions(cnmem: &mut Cnmem<DriverRegions>, stats: &mut CnmemStats) -> u64 {
    let released = cnmem.take_free_regions();
    let bytes: u64 = released.iter().map(|region| region.size).sum();
    for region in &released {
        cuda::free(region.base);
    }
    stats.released_bytes += bytes;
    stats.regions_released += released.len() as u64;
    bytes
}

/// A request the policy could not serve: the regions without blocks go back to the device and
/// the request is retried; if it still fails, the first such request says why.
#[cold]
fn retry_when_full(
    cnmem: &mut Cnmem<DriverRegions>,
    size: u64,
    stats: &mut CnmemStats,
) -> Option<u64> {
    give_back_free_regions(cnmem, stats);
    let addr = cnmem.alloc(size).ok();
    if addr.is_none() && stats.fallback == 0 {
        let largest_free = cnmem.free_blocks().map(|(_, bytes)| bytes).max();
        let device_free = cuda::free_device_bytes()
            .map_or_else(|| "an unknown number of".to_string(), |b| b.to_string());
        super::report(format_args!(
            "cnmem mode: a cudaMalloc of {size} bytes does not fit: cnmem holds {} bytes in {} \
             regions, {} of them allocated (each request rounded up to 512 bytes), its largest \
             free block is {} bytes (blocks never merge across regions), the device has \
             {device_free} bytes free; {} bytes of regions without blocks were given back \
             first; the request goes to cudaMalloc",
            cnmem.reserved(),
            cnmem.regions().len(),
            cnmem.in_use(),
            largest_free.unwrap_or(0),
            stats.released_bytes,
        ));
    }
    addr
}

/// Counters of cnmem mode, for the statistics.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct CnmemStats {
    /// Bytes of all regions (cnmem's footprint: it never shrinks).
    pub reserved_bytes: u64,
    pub regions: u64,
    /// Mallocs served by the policy.
    pub served: u64,
    /// Mallocs the policy could not serve (the device is full), left to the real allocator.
    pub fallback: u64,
    /// Regions without blocks given back to the device when it was full, and their bytes.
    pub regions_released: u64,
    pub released_bytes: u64,
}

/// `cnmemDevice_t` of cnmem 1.0.0 (cnmem.h).
#[repr(C)]
struct CnmemDevice {
    device: i32,
    size: usize,
    num_streams: i32,
    streams: *mut usize,
    stream_sizes: *mut usize,
}

type CnmemInit = unsafe extern "C" fn(i32, *const CnmemDevice, u32) -> i32;
type CnmemMalloc = unsafe extern "C" fn(*mut *mut c_void, usize, usize) -> i32;
type CnmemFree = unsafe extern "C" fn(*mut c_void, usize) -> i32;

/// A real cnmem library, driven through its C API (stream 0: one manager).
struct RealCnmem {
    malloc: CnmemMalloc,
    free: CnmemFree,
    /// Blocks it handed out (its own bookkeeping is not queryable by address).
    live: FxHashSet<u64>,
}

impl RealCnmem {
    fn load(path: &Path, reservation: u64) -> Result<RealCnmem, String> {
        let name = CString::new(path.as_os_str().as_encoded_bytes()).map_err(|e| e.to_string())?;
        // SAFETY: loading a library the user named; its constructors run as with any dlopen.
        let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            return Err("dlopen failed".into());
        }
        let symbol = |name: &std::ffi::CStr| {
            // SAFETY: valid handle and NUL-terminated name.
            let found = unsafe { super::real::real_dlsym(handle, name.as_ptr()) };
            (!found.is_null())
                .then_some(found)
                .ok_or(format!("no {} in it", name.to_string_lossy()))
        };
        let (init, malloc, free) = (
            symbol(c"cnmemInit")?,
            symbol(c"cnmemMalloc")?,
            symbol(c"cnmemFree")?,
        );
        // SAFETY: the three symbols have cnmem 1.0.0's prototypes.
        let (init, malloc, free) = unsafe {
            (
                std::mem::transmute::<*mut c_void, CnmemInit>(init),
                std::mem::transmute::<*mut c_void, CnmemMalloc>(malloc),
                std::mem::transmute::<*mut c_void, CnmemFree>(free),
            )
        };
        let device = CnmemDevice {
            device: 0,
            size: reservation.max(512) as usize,
            num_streams: 0,
            streams: std::ptr::null_mut(),
            stream_sizes: std::ptr::null_mut(),
        };
        // SAFETY: one valid device description; flags 0 (may grow, may steal).
        match unsafe { init(1, &device, 0) } {
            0 => Ok(RealCnmem {
                malloc,
                free,
                live: FxHashSet::default(),
            }),
            status => Err(format!("cnmemInit returned status {status}")),
        }
    }
}

/// The policy behind cnmem mode: the re-creation, or a real cnmem library.
enum Allocator {
    Recreated(Cnmem<DriverRegions>),
    Real(RealCnmem),
}

pub struct CnmemState {
    allocator: Option<Allocator>,
    /// Blocks the program freed while a stream captured: `cudaFree` waits for the device,
    /// which cannot be waited for then (synchronising a context while one of its streams
    /// captures invalidates the capture), so each stays allocated until the next malloc or free
    /// after the capture.
    deferred: Vec<u64>,
    pub stats: CnmemStats,
}

impl CnmemState {
    pub fn new(reservation: u64, library: Option<&Path>) -> CnmemState {
        let allocator = match library {
            Some(path) => RealCnmem::load(path, reservation)
                .map(Allocator::Real)
                .map_err(|err| format!("cannot use the cnmem library {} ({err})", path.display())),
            None => Cnmem::new(
                DriverRegions,
                CnmemConfig {
                    reservation,
                    can_grow: true,
                },
            )
            .map(Allocator::Recreated)
            .map_err(|err| format!("cnmem mode cannot reserve its region ({err})")),
        };
        let allocator = allocator
            .map_err(|message| super::report(format_args!("{message}; recording only")))
            .ok();
        CnmemState {
            allocator,
            deferred: Vec::new(),
            stats: CnmemStats::default(),
        }
    }

    pub fn malloc(&mut self, size: u64) -> Option<u64> {
        if !self.deferred.is_empty() && !cuda::capturing_anywhere() {
            cuda::synchronize();
            for addr in std::mem::take(&mut self.deferred) {
                self.release(addr);
            }
        }
        let served = match self.allocator.as_mut()? {
            Allocator::Recreated(cnmem) => {
                let addr = cnmem
                    .alloc(size)
                    .ok()
                    .or_else(|| retry_when_full(cnmem, size, &mut self.stats));
                self.stats.reserved_bytes = cnmem.reserved();
                self.stats.regions = cnmem.regions().len() as u64;
                addr
            }
            Allocator::Real(cnmem) => {
                let mut ptr = std::ptr::null_mut();
                // SAFETY: valid out-parameter; stream 0 (cnmem's default manager).
                let status = unsafe { (cnmem.malloc)(&mut ptr, size as usize, 0) };
                if status != 0 && self.stats.fallback == 0 {
                    super::report(format_args!(
                        "cnmem mode: the cnmem library cannot serve a cudaMalloc of {size} bytes \
                         (cnmem status {status}; it never gives its regions back); the request \
                         goes to cudaMalloc"
                    ));
                }
                (status == 0 && !ptr.is_null()).then(|| {
                    cnmem.live.insert(ptr as u64);
                    ptr as u64
                })
            }
        };
        match served {
            Some(_) => self.stats.served += 1,
            None => self.stats.fallback += 1,
        }
        served
    }

    /// After an internal error, when the device refused an allocation of the program's (which
    /// cnmem no longer serves): the regions without blocks go back to the device; the bytes
    /// given back. A real cnmem library never gives its regions back: none.
    pub fn release_unused(&mut self) -> u64 {
        match &mut self.allocator {
            Some(Allocator::Recreated(cnmem)) => {
                let bytes = give_back_free_regions(cnmem, &mut self.stats);
                self.stats.reserved_bytes = cnmem.reserved();
                self.stats.regions = cnmem.regions().len() as u64;
                bytes
            }
            Some(Allocator::Real(_)) | None => 0,
        }
    }

    /// Whether `addr` belongs to the policy (a region of the re-creation, a block of real
    /// cnmem's).
    pub fn owns(&self, addr: u64) -> bool {
        match &self.allocator {
            Some(Allocator::Recreated(cnmem)) => cnmem.region_of(addr).is_some(),
            Some(Allocator::Real(cnmem)) => cnmem.live.contains(&addr),
            None => false,
        }
    }

    /// Whether a region of the re-creation is no allocation any more (a device reset took
    /// it). A real cnmem library keeps its own state, which itermem cannot renew: never.
    pub fn memory_lost(&self) -> bool {
        match &self.allocator {
            Some(Allocator::Recreated(cnmem)) => cnmem
                .regions()
                .iter()
                .any(|region| allocation_gone(region.base)),
            Some(Allocator::Real(_)) | None => false,
        }
    }

    /// Frees the block at `addr`; false if no live block starts there.
    pub fn free(&mut self, addr: u64) -> bool {
        let live = match &self.allocator {
            Some(Allocator::Recreated(cnmem)) => cnmem.block_size(addr).is_some(),
            Some(Allocator::Real(cnmem)) => cnmem.live.contains(&addr),
            None => false,
        };
        if !live || self.deferred.contains(&addr) {
            return false;
        }
        if cuda::capturing_anywhere() {
            self.deferred.push(addr);
            return true;
        }
        // `cudaFree` waits for the device, and programs rely on it (a block freed after a
        // kernel on one stream, reallocated for another stream): a block goes back to cnmem
        // only once the device is idle. (Real cnmem leaves that to its caller.)
        cuda::synchronize();
        let mut freed = true;
        for addr in std::mem::take(&mut self.deferred).into_iter().chain([addr]) {
            freed = self.release(addr);
        }
        freed
    }

    /// Gives the live block at `addr` back to the allocator (the device is done with it).
    fn release(&mut self, addr: u64) -> bool {
        match &mut self.allocator {
            Some(Allocator::Recreated(cnmem)) => cnmem.free(addr).is_ok(),
            Some(Allocator::Real(cnmem)) => {
                // SAFETY: `addr` is a live block cnmem handed out (checked by `free`).
                cnmem.live.remove(&addr) && unsafe { (cnmem.free)(addr as *mut c_void, 0) } == 0
            }
            None => false,
        }
    }
}
