//! Device and pinned host memory of the simulated GPU.
//!
//! Device memory is one virtual range reserved with `mmap` at start-up, so device addresses can
//! never coincide with host heap addresses; pages are committed lazily by the kernel when first
//! touched. Blocks are placed address-ordered first-fit at 256-byte granularity (the alignment
//! `cudaMalloc` guarantees) inside that range, and the capacity is enforced on the sum of the
//! granule-rounded sizes, which is what `peak_device_bytes` reports:
//!
//!   used = Σ round_up(size, 256) over live blocks ≤ capacity
//!
//! The range is twice the capacity (at least capacity + 1 GiB) so that fragmentation alone rarely
//! fails an allocation the capacity allows. Freed blocks are filled with 0xFF bytes (a NaN for
//! every float format) so that a use after free shows in results. Backing the range with a
//! `memfd` later gives the page-remapping calls (cuMemCreate/cuMemMap) something to map.

use crate::result::{
    CuResult, HOST_MEMORY_ALREADY_REGISTERED, HOST_MEMORY_NOT_REGISTERED, INVALID_VALUE,
    OUT_OF_MEMORY,
};
use crate::stats::Stats;
use parking_lot::Mutex;
use std::collections::BTreeMap;

/// Alignment and granularity of device allocations.
pub const GRANULE: usize = 256;
/// What freed device memory is overwritten with.
pub const POISON: u8 = 0xFF;

/// How a device block was allocated (what `cuPointerGetAttribute` reports).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceKind {
    Device,
    Managed,
}

#[derive(Clone, Copy, Debug)]
pub struct Block {
    pub start: usize,
    pub size: usize,
    reserved: usize,
    pub kind: DeviceKind,
}

struct Heap {
    /// Free ranges of the reserved span: start address → length. Adjacent ranges are merged.
    free: BTreeMap<usize, usize>,
    /// Live blocks by start address.
    live: BTreeMap<usize, Block>,
    used: usize,
}

pub struct DeviceMemory {
    base: usize,
    span: usize,
    capacity: usize,
    heap: Mutex<Heap>,
}

impl DeviceMemory {
    /// Reserves the address range for a device of `capacity` bytes.
    pub fn new(capacity: u64) -> CuResult<DeviceMemory> {
        let capacity = usize::try_from(capacity).map_err(|_| INVALID_VALUE)?;
        let span = round_up(
            capacity.saturating_mul(2).max(capacity + (1 << 30)),
            2 << 20,
        );
        // SAFETY: an anonymous private mapping at an address of the kernel's choosing touches no
        // existing memory; MAP_NORESERVE commits pages only when they are first written.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                span,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(OUT_OF_MEMORY);
        }
        let base = base as usize;
        Ok(DeviceMemory {
            base,
            span,
            capacity,
            heap: Mutex::new(Heap {
                free: BTreeMap::from([(base, span)]),
                live: BTreeMap::new(),
                used: 0,
            }),
        })
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes still allocatable under the capacity.
    pub fn free_bytes(&self) -> usize {
        self.capacity - self.heap.lock().used
    }

    /// Allocates `size` (> 0) bytes, 256-byte aligned.
    pub fn alloc(&self, size: usize, kind: DeviceKind, stats: &Stats) -> CuResult<usize> {
        if size == 0 {
            return Err(INVALID_VALUE);
        }
        let reserved = size.checked_add(GRANULE - 1).ok_or(OUT_OF_MEMORY)? & !(GRANULE - 1);
        let mut heap = self.heap.lock();
        if heap.used + reserved > self.capacity {
            return Err(OUT_OF_MEMORY);
        }
        let (&start, &len) = heap
            .free
            .iter()
            .find(|&(_, &len)| len >= reserved)
            .ok_or(OUT_OF_MEMORY)?;
        heap.free.remove(&start);
        if len > reserved {
            heap.free.insert(start + reserved, len - reserved);
        }
        let block = Block {
            start,
            size,
            reserved,
            kind,
        };
        heap.live.insert(start, block);
        heap.used += reserved;
        stats.device_allocated(reserved as u64);
        Ok(start)
    }

    /// Charges `bytes` of physical memory made outside the heap (`cuMemCreate`) to the capacity.
    pub fn charge(&self, bytes: usize, stats: &Stats) -> CuResult<()> {
        let mut heap = self.heap.lock();
        if heap
            .used
            .checked_add(bytes)
            .is_none_or(|used| used > self.capacity)
        {
            return Err(OUT_OF_MEMORY);
        }
        heap.used += bytes;
        stats.device_allocated(bytes as u64);
        Ok(())
    }

    /// Returns what `charge` took.
    pub fn refund(&self, bytes: usize, stats: &Stats) {
        self.heap.lock().used -= bytes;
        stats.device_freed(bytes as u64);
    }

    /// Frees the block starting at `addr` and poisons its bytes. The caller has made sure no
    /// queued work still uses it. An address that is not the start of a live block is
    /// `CUDA_ERROR_INVALID_VALUE`, as on real CUDA.
    pub fn free(&self, addr: usize, stats: &Stats) -> CuResult<Block> {
        let mut heap = self.heap.lock();
        let block = heap.live.remove(&addr).ok_or(INVALID_VALUE)?;
        // SAFETY: [start, start + reserved) lies inside the span mapped read-write in `new`, and
        // it was just removed from `live`, so no other allocation owns it.
        unsafe { std::ptr::write_bytes(block.start as *mut u8, POISON, block.reserved) };
        let mut start = block.start;
        let mut len = block.reserved;
        if let Some((&prev, &prev_len)) = heap.free.range(..start).next_back() {
            if prev + prev_len == start {
                heap.free.remove(&prev);
                start = prev;
                len += prev_len;
            }
        }
        if let Some(next_len) = heap.free.remove(&(start + len)) {
            len += next_len;
        }
        heap.free.insert(start, len);
        heap.used -= block.reserved;
        stats.device_freed(block.reserved as u64);
        Ok(block)
    }

    /// The live block containing `addr` (interior pointers included).
    pub fn find(&self, addr: usize) -> Option<Block> {
        if addr < self.base || addr >= self.base + self.span {
            return None;
        }
        let heap = self.heap.lock();
        let (_, block) = heap.live.range(..=addr).next_back()?;
        (addr < block.start + block.size).then_some(*block)
    }

    /// Starts of every live block, in address order.
    pub fn live_starts(&self) -> Vec<usize> {
        self.heap.lock().live.keys().copied().collect()
    }

    /// Whether `addr` lies in the device address range at all (live or not).
    pub fn in_span(&self, addr: usize) -> bool {
        addr >= self.base && addr < self.base + self.span
    }

    /// Checks that `[addr, addr + len)` lies inside one live block.
    pub fn check_range(&self, addr: usize, len: usize) -> CuResult<Block> {
        let block = self.find(addr).ok_or(INVALID_VALUE)?;
        let end = addr.checked_add(len).ok_or(INVALID_VALUE)?;
        if end > block.start + block.size {
            return Err(INVALID_VALUE);
        }
        Ok(block)
    }
}

impl Drop for DeviceMemory {
    fn drop(&mut self) {
        // SAFETY: [base, base + span) is the mapping made in `new`; no block outlives `self`.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.span) };
    }
}

/// Page-locked host allocations (`cuMemAllocHost`, `cuMemHostAlloc`): ordinary host memory on the
/// shim, tracked so copies can tell pinned from pageable memory and frees can be checked. One
/// registry serves every device (page-locked memory is portable); each allocation remembers the
/// device whose context made it (what pointer attributes report, and whose counters it is in).
#[derive(Default)]
pub struct PinnedMemory {
    /// start → (size, device ordinal).
    live: Mutex<BTreeMap<usize, (usize, usize)>>,
    /// Starts of the ranges of `live` that are the program's memory page-locked with
    /// `cuMemHostRegister` (not allocated here, so never freed here).
    registered: Mutex<std::collections::BTreeSet<usize>>,
}

impl PinnedMemory {
    pub fn alloc(&self, size: usize, device: usize, stats: &Stats) -> CuResult<usize> {
        if size == 0 {
            return Err(INVALID_VALUE);
        }
        let mut ptr: *mut libc::c_void = std::ptr::null_mut();
        // SAFETY: `ptr` is a valid out-pointer; 4096 is a power of two multiple of the pointer size.
        if unsafe { libc::posix_memalign(&mut ptr, 4096, size) } != 0 {
            return Err(OUT_OF_MEMORY);
        }
        self.live.lock().insert(ptr as usize, (size, device));
        stats.pinned_allocated(size as u64);
        Ok(ptr as usize)
    }

    /// Frees the allocation starting at `addr`; returns its size and device, whose counters the
    /// caller updates.
    pub fn free(&self, addr: usize) -> CuResult<(usize, usize)> {
        if self.registered.lock().contains(&addr) {
            return Err(INVALID_VALUE);
        }
        let (size, device) = self.live.lock().remove(&addr).ok_or(INVALID_VALUE)?;
        // SAFETY: `addr` came from posix_memalign in `alloc` and was just removed from `live`, so
        // it is freed exactly once.
        unsafe { libc::free(addr as *mut libc::c_void) };
        Ok((size, device))
    }

    /// Page-locks the program's `[addr, addr + size)` (`cuMemHostRegister`): a range touching
    /// page-locked memory already is `CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED`.
    pub fn register(&self, addr: usize, size: usize, device: usize, stats: &Stats) -> CuResult<()> {
        let end = addr.checked_add(size).ok_or(INVALID_VALUE)?;
        if addr == 0 || size == 0 {
            return Err(INVALID_VALUE);
        }
        let mut live = self.live.lock();
        let overlaps = live
            .range(..end)
            .next_back()
            .is_some_and(|(&start, &(len, _))| start + len > addr);
        if overlaps {
            return Err(HOST_MEMORY_ALREADY_REGISTERED);
        }
        live.insert(addr, (size, device));
        self.registered.lock().insert(addr);
        stats.pinned_allocated(size as u64);
        Ok(())
    }

    /// Ends a registration (`cuMemHostUnregister`); `addr` must be the start of a registered
    /// range (`CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED` otherwise). Returns its size and device.
    pub fn unregister(&self, addr: usize) -> CuResult<(usize, usize)> {
        if !self.registered.lock().remove(&addr) {
            return Err(HOST_MEMORY_NOT_REGISTERED);
        }
        self.live
            .lock()
            .remove(&addr)
            .ok_or(HOST_MEMORY_NOT_REGISTERED)
    }

    /// Starts of the page-locked ranges (allocated or registered) of device `device`.
    pub fn starts_of(&self, device: usize) -> Vec<usize> {
        let live = self.live.lock();
        live.iter()
            .filter(|&(_, &(_, d))| d == device)
            .map(|(&start, _)| start)
            .collect()
    }

    /// Whether `addr` starts a range registered with `cuMemHostRegister` (not allocated here).
    pub fn is_registered(&self, addr: usize) -> bool {
        self.registered.lock().contains(&addr)
    }

    /// The pinned allocation containing `addr`: (start, size).
    pub fn find(&self, addr: usize) -> Option<(usize, usize)> {
        self.find_with_device(addr)
            .map(|(start, size, _)| (start, size))
    }

    /// The pinned allocation containing `addr`: (start, size, device ordinal).
    pub fn find_with_device(&self, addr: usize) -> Option<(usize, usize, usize)> {
        let live = self.live.lock();
        let (&start, &(size, device)) = live.range(..=addr).next_back()?;
        (addr < start + size).then_some((start, size, device))
    }
}

fn round_up(value: usize, to: usize) -> usize {
    value.div_ceil(to) * to
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device(capacity: u64) -> (DeviceMemory, Stats) {
        (DeviceMemory::new(capacity).unwrap(), Stats::default())
    }

    #[test]
    fn blocks_are_aligned_disjoint_and_counted_in_granules() {
        let (mem, stats) = device(1 << 20);
        let a = mem.alloc(100, DeviceKind::Device, &stats).unwrap();
        let b = mem.alloc(300, DeviceKind::Device, &stats).unwrap();
        assert_eq!(a % GRANULE, 0);
        assert_eq!(b % GRANULE, 0);
        assert!(b >= a + 256, "blocks overlap");
        assert_eq!(stats.snapshot().current_device_bytes, 256 + 512);
        assert_eq!(mem.find(a + 99).unwrap().start, a, "interior pointer");
        assert!(mem.find(a + 100).is_none(), "past the requested size");
    }

    #[test]
    fn capacity_is_enforced_and_freed_space_is_reused() {
        let (mem, stats) = device(4096);
        let a = mem.alloc(4096, DeviceKind::Device, &stats).unwrap();
        assert_eq!(mem.alloc(1, DeviceKind::Device, &stats), Err(OUT_OF_MEMORY));
        mem.free(a, &stats).unwrap();
        assert_eq!(mem.alloc(2048, DeviceKind::Device, &stats), Ok(a));
        assert_eq!(stats.snapshot().peak_device_bytes, 4096);
    }

    #[test]
    fn free_poisons_and_rejects_unknown_or_interior_pointers() {
        let (mem, stats) = device(1 << 20);
        let a = mem.alloc(64, DeviceKind::Device, &stats).unwrap();
        // SAFETY: `a` is a live 64-byte block of the mapped span.
        unsafe { std::ptr::write_bytes(a as *mut u8, 0, 64) };
        assert_eq!(mem.free(a + 8, &stats).unwrap_err(), INVALID_VALUE);
        mem.free(a, &stats).unwrap();
        // SAFETY: the span stays mapped; reading freed device memory is what the poison is for.
        let byte = unsafe { *(a as *const u8) };
        assert_eq!(byte, POISON);
        assert_eq!(
            mem.free(a, &stats).unwrap_err(),
            INVALID_VALUE,
            "double free"
        );
    }

    #[test]
    fn free_ranges_coalesce() {
        let (mem, stats) = device(3 * 256);
        let blocks: Vec<usize> = (0..3)
            .map(|_| mem.alloc(256, DeviceKind::Device, &stats).unwrap())
            .collect();
        mem.free(blocks[0], &stats).unwrap();
        mem.free(blocks[2], &stats).unwrap();
        mem.free(blocks[1], &stats).unwrap();
        assert_eq!(
            mem.alloc(3 * 256, DeviceKind::Device, &stats),
            Ok(blocks[0])
        );
    }

    #[test]
    fn pinned_memory_is_tracked() {
        let stats = Stats::default();
        let pinned = PinnedMemory::default();
        let p = pinned.alloc(10_000, 1, &stats).unwrap();
        assert_eq!(pinned.find(p + 9_999), Some((p, 10_000)));
        assert_eq!(pinned.find_with_device(p), Some((p, 10_000, 1)));
        assert_eq!(stats.snapshot().current_pinned_bytes, 10_000);
        assert_eq!(pinned.free(p), Ok((10_000, 1)));
        stats.pinned_freed(10_000);
        assert_eq!(pinned.free(p), Err(INVALID_VALUE));
        assert_eq!(stats.snapshot().peak_pinned_bytes, 10_000);
    }
}
