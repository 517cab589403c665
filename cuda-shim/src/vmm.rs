//! Virtual memory management: `cuMemAddressReserve`, `cuMemCreate`, `cuMemMap`,
//! `cuMemSetAccess`, `cuMemUnmap`, `cuMemRelease`, `cuMemAddressFree`.
//!
//! A reservation is a range of host address space mapped `PROT_NONE` (outside the device heap
//! of `memory.rs`). A physical allocation is a `memfd` of its size, charged to the device's
//! capacity (and counted in `peak_device_bytes`) from `cuMemCreate` until it is released and
//! no longer mapped. `cuMemMap` maps the memfd `MAP_SHARED | MAP_FIXED` into a reservation,
//! still `PROT_NONE`: as on CUDA, the range is usable only after `cuMemSetAccess`, which
//! `mprotect`s it. Copies and memsets check that every byte they touch is mapped with the access
//! they need (`check_range`); a kernel touching a range without access faults (SIGSEGV on the
//! shim, an illegal address on a GPU).
//!
//! Reservations are address space of the process, shared by every device (unified addressing);
//! a physical allocation belongs to the device of its `CUmemAllocationProp` location and is
//! charged to that device's capacity; a mapping reports that device as its owner. Access is set
//! per device (`cuMemSetAccess` descriptors), and the host protection of a mapping is the most
//! permissive access any device has: copies check that union, not the access of the device
//! running them (a simplification).
//!
//! Invariant: a mapping is removed only after all submitted work has completed (the driver
//! synchronises every context before `cuMemUnmap`), so a stream worker never touches an unmapped
//! range.

use crate::config::{GRANULARITY, MAX_DEVICES};
use crate::result::{CuResult, INVALID_VALUE, OUT_OF_MEMORY};
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// The location of physical memory on the host (`CU_MEM_LOCATION_TYPE_HOST`, CUDA 12.2+): not
/// charged to any device; devices reach it over the host link, like mapped page-locked memory.
pub const HOST: usize = usize::MAX;

/// `CU_MEM_ACCESS_FLAGS_PROT_*`.
pub const PROT_NONE: u32 = 0;
pub const PROT_READ: u32 = 1;
pub const PROT_READWRITE: u32 = 3;

struct Physical {
    fd: OwnedFd,
    size: usize,
    device: usize,
    mappings: usize,
    /// Handles the program holds (`cuMemCreate` and each `cuMemRetainAllocationHandle`, less
    /// each `cuMemRelease`): the memory goes when none is left and nothing maps it.
    handles: usize,
}

/// One `cuMemMap`: what `cuPointerGetAttribute` reports as an allocation range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mapping {
    pub start: usize,
    pub size: usize,
    /// The device the physical memory belongs to ([`HOST`] for host memory).
    pub device: usize,
    handle: u64,
    /// The most permissive access of any device (what the host protection is).
    access: u32,
    /// Access of each device, by ordinal.
    per_device: [u32; MAX_DEVICES],
}

#[derive(Default)]
struct State {
    /// start → size.
    reservations: BTreeMap<usize, usize>,
    /// start → mapping.
    mappings: BTreeMap<usize, Mapping>,
    physical: HashMap<u64, Physical>,
    next_handle: u64,
}

impl State {
    fn reservation(&self, addr: usize) -> Option<(usize, usize)> {
        let (&start, &size) = self.reservations.range(..=addr).next_back()?;
        (addr < start + size).then_some((start, size))
    }

    fn mapping(&self, addr: usize) -> Option<Mapping> {
        let (_, &mapping) = self.mappings.range(..=addr).next_back()?;
        (addr < mapping.start + mapping.size).then_some(mapping)
    }

    /// The mappings that exactly tile `[ptr, ptr + size)`, or `CUDA_ERROR_INVALID_VALUE`.
    fn tiling(&self, ptr: usize, size: usize) -> CuResult<Vec<Mapping>> {
        let end = ptr.checked_add(size).ok_or(INVALID_VALUE)?;
        let mut found = Vec::new();
        let mut at = ptr;
        while at < end {
            let mapping = self.mappings.get(&at).copied().ok_or(INVALID_VALUE)?;
            at += mapping.size;
            found.push(mapping);
        }
        if at != end || size == 0 {
            return Err(INVALID_VALUE);
        }
        Ok(found)
    }
}

/// What the capacity of each device is charged through.
pub trait Capacity {
    fn charge(&self, device: usize, bytes: usize) -> CuResult<()>;
    fn refund(&self, device: usize, bytes: usize);
}

pub struct VirtualMemory {
    state: Mutex<State>,
    granularity: usize,
}

impl Default for VirtualMemory {
    fn default() -> VirtualMemory {
        VirtualMemory::new(GRANULARITY)
    }
}

/// Maps `[start, start + size)` back to inaccessible anonymous memory (a reservation's state).
///
/// # Safety
/// The range lies inside a reservation of this module, and nothing uses it any more.
unsafe fn reset(start: usize, size: usize) -> CuResult<()> {
    // SAFETY: MAP_FIXED over a range this module owns (the caller's contract).
    let got = unsafe {
        libc::mmap(
            start as *mut libc::c_void,
            size,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED,
            -1,
            0,
        )
    };
    if got == libc::MAP_FAILED {
        return Err(OUT_OF_MEMORY);
    }
    Ok(())
}

impl VirtualMemory {
    /// `granularity`: a power of two, at least the host's page size.
    pub fn new(granularity: usize) -> VirtualMemory {
        VirtualMemory {
            state: Mutex::default(),
            granularity,
        }
    }

    /// What `cuMemGetAllocationGranularity` reports, minimum and recommended alike.
    pub fn granularity(&self) -> usize {
        self.granularity
    }

    fn aligned(&self, value: usize) -> bool {
        value % self.granularity == 0
    }

    /// `cuMemAddressReserve`: `size` and a non-zero `alignment` are multiples of the
    /// granularity (the alignment a power of two); `hint` is honoured when that range is free.
    pub fn reserve(&self, size: usize, alignment: usize, hint: usize) -> CuResult<usize> {
        let alignment = if alignment == 0 {
            self.granularity
        } else {
            alignment
        };
        if size == 0
            || !self.aligned(size)
            || !alignment.is_power_of_two()
            || !self.aligned(alignment)
        {
            return Err(INVALID_VALUE);
        }
        let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;
        if hint != 0 && hint % alignment == 0 {
            // SAFETY: MAP_FIXED_NOREPLACE never replaces an existing mapping.
            let got = unsafe {
                libc::mmap(
                    hint as *mut libc::c_void,
                    size,
                    libc::PROT_NONE,
                    flags | libc::MAP_FIXED_NOREPLACE,
                    -1,
                    0,
                )
            };
            if got as usize == hint {
                self.state.lock().reservations.insert(hint, size);
                return Ok(hint);
            }
            if got != libc::MAP_FAILED {
                // An old kernel ignored the flag and placed it elsewhere: give it back.
                // SAFETY: `got` is the mapping just made, of `size` bytes.
                unsafe { libc::munmap(got, size) };
            }
        }
        let total = size.checked_add(alignment).ok_or(OUT_OF_MEMORY)?;
        // SAFETY: a new anonymous mapping at an address of the kernel's choosing.
        let base =
            unsafe { libc::mmap(std::ptr::null_mut(), total, libc::PROT_NONE, flags, -1, 0) };
        if base == libc::MAP_FAILED {
            return Err(OUT_OF_MEMORY);
        }
        let base = base as usize;
        let start = base.next_multiple_of(alignment);
        // SAFETY: both trimmed pieces belong to the mapping just made and are used by nobody.
        unsafe {
            if start > base {
                libc::munmap(base as *mut libc::c_void, start - base);
            }
            let tail = base + total - (start + size);
            if tail > 0 {
                libc::munmap((start + size) as *mut libc::c_void, tail);
            }
        }
        self.state.lock().reservations.insert(start, size);
        Ok(start)
    }

    /// `cuMemAddressFree`: the exact range of one reservation, with nothing mapped in it.
    pub fn free_reservation(&self, ptr: usize, size: usize) -> CuResult<()> {
        let mut state = self.state.lock();
        if state.reservations.get(&ptr) != Some(&size) {
            return Err(INVALID_VALUE);
        }
        if state.mappings.range(ptr..ptr + size).next().is_some() {
            return Err(INVALID_VALUE);
        }
        state.reservations.remove(&ptr);
        // SAFETY: the reservation was made by `reserve` and nothing is mapped in it any more.
        unsafe { libc::munmap(ptr as *mut libc::c_void, size) };
        Ok(())
    }

    /// `cuMemCreate`: `size` bytes of physical memory on `device`, charged to its capacity (or
    /// on the host: [`HOST`]).
    pub fn create(&self, size: usize, device: usize, capacity: &impl Capacity) -> CuResult<u64> {
        if size == 0 || !self.aligned(size) {
            return Err(INVALID_VALUE);
        }
        // SAFETY: memfd_create with a NUL-terminated name and valid flags.
        let fd = unsafe { libc::memfd_create(c"cuda-shim-physical".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(OUT_OF_MEMORY);
        }
        // SAFETY: `fd` is a new descriptor owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: plain ftruncate of our own descriptor.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), size as libc::off_t) } != 0 {
            return Err(OUT_OF_MEMORY);
        }
        if device != HOST {
            capacity.charge(device, size)?;
        }
        let mut state = self.state.lock();
        state.next_handle += 1;
        let handle = 0x5000_0000 + state.next_handle;
        let physical = Physical {
            fd,
            size,
            device,
            mappings: 0,
            handles: 1,
        };
        state.physical.insert(handle, physical);
        Ok(handle)
    }

    /// `cuMemRelease`: the memory returns to the device when its last mapping is unmapped.
    pub fn release(&self, handle: u64, capacity: &impl Capacity) -> CuResult<()> {
        let mut state = self.state.lock();
        let physical = state
            .physical
            .get_mut(&handle)
            .filter(|p| p.handles > 0)
            .ok_or(INVALID_VALUE)?;
        physical.handles -= 1;
        if physical.handles == 0 && physical.mappings == 0 {
            let (size, device) = (physical.size, physical.device);
            state.physical.remove(&handle);
            if device != HOST {
                capacity.refund(device, size);
            }
        }
        Ok(())
    }

    /// `cuMemMap`: the first `size` bytes of `handle` at `ptr`, inaccessible until
    /// `set_access`. The range lies in one reservation and overlaps no mapping.
    pub fn map(&self, ptr: usize, size: usize, offset: usize, handle: u64) -> CuResult<()> {
        if size == 0 || !self.aligned(ptr) || !self.aligned(size) || offset != 0 {
            return Err(INVALID_VALUE);
        }
        let mut state = self.state.lock();
        let (start, len) = state.reservation(ptr).ok_or(INVALID_VALUE)?;
        let end = ptr.checked_add(size).ok_or(INVALID_VALUE)?;
        if end > start + len
            || state.mapping(ptr).is_some()
            || state.mappings.range(ptr..end).next().is_some()
        {
            return Err(INVALID_VALUE);
        }
        let physical = state
            .physical
            .get_mut(&handle)
            .filter(|p| p.handles > 0 && size <= p.size)
            .ok_or(INVALID_VALUE)?;
        // SAFETY: [ptr, end) lies inside a reservation of this module with nothing mapped in it.
        let got = unsafe {
            libc::mmap(
                ptr as *mut libc::c_void,
                size,
                libc::PROT_NONE,
                libc::MAP_SHARED | libc::MAP_FIXED,
                physical.fd.as_raw_fd(),
                0,
            )
        };
        if got == libc::MAP_FAILED {
            return Err(OUT_OF_MEMORY);
        }
        physical.mappings += 1;
        let mapping = Mapping {
            start: ptr,
            size,
            device: physical.device,
            handle,
            access: PROT_NONE,
            per_device: [PROT_NONE; MAX_DEVICES],
        };
        state.mappings.insert(ptr, mapping);
        Ok(())
    }

    /// `cuMemUnmap`: `[ptr, ptr + size)` is exactly a run of whole mappings. The caller has made
    /// sure no submitted work still uses it.
    pub fn unmap(&self, ptr: usize, size: usize, capacity: &impl Capacity) -> CuResult<()> {
        let mut state = self.state.lock();
        let tiles = state.tiling(ptr, size)?;
        // SAFETY: the range is a run of this module's mappings inside a reservation; the caller
        // synchronised the device, so nothing uses it.
        unsafe { reset(ptr, size) }?;
        for tile in tiles {
            state.mappings.remove(&tile.start);
            if let Some(physical) = state.physical.get_mut(&tile.handle) {
                physical.mappings -= 1;
                if physical.handles == 0 && physical.mappings == 0 {
                    let (size, device) = (physical.size, physical.device);
                    state.physical.remove(&tile.handle);
                    if device != HOST {
                        capacity.refund(device, size);
                    }
                }
            }
        }
        Ok(())
    }

    /// Where the physical memory of a live `handle` is: its device's ordinal, or [`HOST`].
    pub fn location(&self, handle: u64) -> CuResult<usize> {
        let state = self.state.lock();
        let physical = state.physical.get(&handle).filter(|p| p.handles > 0);
        physical.map(|p| p.device).ok_or(INVALID_VALUE)
    }

    /// `cuMemRetainAllocationHandle`: the handle of the physical memory mapped at `addr` (the
    /// start of a mapping or inside it), one more reference to release.
    pub fn retain(&self, addr: usize) -> CuResult<u64> {
        let mut state = self.state.lock();
        let handle = state.mapping(addr).ok_or(INVALID_VALUE)?.handle;
        let physical = state.physical.get_mut(&handle).ok_or(INVALID_VALUE)?;
        physical.handles += 1;
        Ok(handle)
    }

    /// `cuMemSetAccess` for `device`: `[ptr, ptr + size)` is exactly a run of whole mappings.
    /// The host protection of each mapping becomes the most permissive access of any device.
    pub fn set_access(&self, ptr: usize, size: usize, device: usize, access: u32) -> CuResult<()> {
        if !matches!(access, PROT_NONE | PROT_READ | PROT_READWRITE) || device >= MAX_DEVICES {
            return Err(INVALID_VALUE);
        }
        let mut state = self.state.lock();
        let tiles = state.tiling(ptr, size)?;
        for tile in tiles {
            let mut per_device = tile.per_device;
            per_device[device] = access;
            let union = per_device.iter().fold(PROT_NONE, |a, &b| a | b);
            let prot = match union {
                PROT_NONE => libc::PROT_NONE,
                PROT_READ => libc::PROT_READ,
                _ => libc::PROT_READ | libc::PROT_WRITE,
            };
            // SAFETY: the tile is one of this module's mappings; only its protection changes.
            if unsafe { libc::mprotect(tile.start as *mut libc::c_void, tile.size, prot) } != 0 {
                return Err(INVALID_VALUE);
            }
            if let Some(mapping) = state.mappings.get_mut(&tile.start) {
                mapping.per_device = per_device;
                mapping.access = union;
            }
        }
        Ok(())
    }

    /// Whether `addr` lies in a reservation (mapped or not).
    pub fn reserved(&self, addr: usize) -> bool {
        self.state.lock().reservation(addr).is_some()
    }

    /// The mapping containing `addr`.
    pub fn mapping(&self, addr: usize) -> Option<Mapping> {
        self.state.lock().mapping(addr)
    }

    /// Checks that every byte of `[addr, addr + len)` is mapped with read access, and with
    /// read-write access when `write`.
    pub fn check_range(&self, addr: usize, len: usize, write: bool) -> CuResult<()> {
        let end = addr.checked_add(len).ok_or(INVALID_VALUE)?;
        let state = self.state.lock();
        let mut at = addr;
        while at < end {
            let mapping = state.mapping(at).ok_or(INVALID_VALUE)?;
            let allowed = if write {
                mapping.access == PROT_READWRITE
            } else {
                mapping.access & PROT_READ != 0
            };
            if !allowed {
                return Err(INVALID_VALUE);
            }
            at = mapping.start + mapping.size;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[derive(Default)]
    struct Counted(Cell<usize>);

    impl Capacity for Counted {
        fn charge(&self, _device: usize, bytes: usize) -> CuResult<()> {
            if self.0.get() + bytes > 8 * GRANULARITY {
                return Err(OUT_OF_MEMORY);
            }
            self.0.set(self.0.get() + bytes);
            Ok(())
        }
        fn refund(&self, _device: usize, bytes: usize) {
            self.0.set(self.0.get() - bytes);
        }
    }

    #[test]
    fn mapped_memory_is_shared_usable_after_access_and_released_after_unmap() {
        let (vmm, used) = (VirtualMemory::default(), Counted::default());
        let va = vmm.reserve(4 * GRANULARITY, 0, 0).unwrap();
        assert_eq!(va % GRANULARITY, 0);
        let handle = vmm.create(GRANULARITY, 0, &used).unwrap();
        assert_eq!(used.0.get(), GRANULARITY);
        vmm.map(va, GRANULARITY, 0, handle).unwrap();
        vmm.map(va + GRANULARITY, GRANULARITY, 0, handle).unwrap(); // the same memory twice
        assert_eq!(
            vmm.check_range(va, 16, false),
            Err(INVALID_VALUE),
            "no access yet"
        );
        vmm.set_access(va, 2 * GRANULARITY, 0, PROT_READWRITE)
            .unwrap();
        vmm.check_range(va, 2 * GRANULARITY, true).unwrap();
        assert_eq!(
            vmm.check_range(va, 2 * GRANULARITY + 1, false),
            Err(INVALID_VALUE)
        );
        // SAFETY: both mappings are read-write now and map the same memfd page.
        unsafe {
            *(va as *mut u32) = 42;
            assert_eq!(*((va + GRANULARITY) as *const u32), 42);
        }
        vmm.release(handle, &used).unwrap();
        assert_eq!(used.0.get(), GRANULARITY, "still mapped");
        assert_eq!(vmm.release(handle, &used), Err(INVALID_VALUE));
        assert_eq!(vmm.unmap(va, GRANULARITY + 4096, &used), Err(INVALID_VALUE));
        assert_eq!(
            vmm.free_reservation(va, 4 * GRANULARITY),
            Err(INVALID_VALUE)
        );
        vmm.unmap(va, 2 * GRANULARITY, &used).unwrap();
        assert_eq!(used.0.get(), 0);
        vmm.free_reservation(va, 4 * GRANULARITY).unwrap();
        assert!(!vmm.reserved(va));
    }

    #[test]
    fn host_memory_is_charged_to_no_device_and_maps_like_device_memory() {
        let (vmm, used) = (VirtualMemory::default(), Counted::default());
        let va = vmm.reserve(GRANULARITY, 0, 0).unwrap();
        let handle = vmm.create(GRANULARITY, HOST, &used).unwrap();
        assert_eq!(used.0.get(), 0, "host memory is no device's");
        vmm.map(va, GRANULARITY, 0, handle).unwrap();
        vmm.set_access(va, GRANULARITY, 0, PROT_READWRITE).unwrap();
        assert_eq!(vmm.mapping(va).map(|m| m.device), Some(HOST));
        vmm.check_range(va, GRANULARITY, true).unwrap();
        vmm.release(handle, &used).unwrap();
        vmm.unmap(va, GRANULARITY, &used).unwrap();
        assert_eq!(used.0.get(), 0);
        vmm.free_reservation(va, GRANULARITY).unwrap();
    }

    #[test]
    fn invalid_requests_are_refused() {
        let (vmm, used) = (VirtualMemory::default(), Counted::default());
        assert_eq!(vmm.reserve(4096, 0, 0), Err(INVALID_VALUE));
        assert_eq!(vmm.create(GRANULARITY + 1, 0, &used), Err(INVALID_VALUE));
        assert_eq!(vmm.create(16 * GRANULARITY, 0, &used), Err(OUT_OF_MEMORY));
        let va = vmm.reserve(GRANULARITY, 4 * GRANULARITY, 0).unwrap();
        assert_eq!(va % (4 * GRANULARITY), 0);
        let handle = vmm.create(GRANULARITY, 0, &used).unwrap();
        assert_eq!(vmm.map(va, 2 * GRANULARITY, 0, handle), Err(INVALID_VALUE));
        assert_eq!(
            vmm.map(va, GRANULARITY, GRANULARITY, handle),
            Err(INVALID_VALUE)
        );
        assert_eq!(vmm.map(va, GRANULARITY, 0, handle + 1), Err(INVALID_VALUE));
        vmm.map(va, GRANULARITY, 0, handle).unwrap();
        assert_eq!(
            vmm.map(va, GRANULARITY, 0, handle),
            Err(INVALID_VALUE),
            "overlap"
        );
        assert_eq!(vmm.set_access(va, GRANULARITY, 0, 2), Err(INVALID_VALUE));
        vmm.unmap(va, GRANULARITY, &used).unwrap();
        vmm.release(handle, &used).unwrap();
        vmm.free_reservation(va, GRANULARITY).unwrap();
    }
}
