//! Address-stable device memory for swap mode, from the virtual memory API
//! (`cuMemAddressReserve`, `cuMemCreate`, `cuMemMap`, `cuMemSetAccess`; CUDA 10.2+).
//!
//! A program keeps its pointers for the whole run, so a block allocated before a plan (a
//! weight, an optimizer moment) can only leave the device if the memory behind its addresses
//! can change while the addresses stay. A [`Block`] is a reservation of the program's own,
//! first mapped to physical memory of its own; when a plan takes it into the pool, that memory
//! is released and the pool's granules for the block's range are mapped at the block's
//! addresses instead ([`Block::alias`]): from then on the block *is* its range of the pool,
//! reached through two addresses, and swaps and borrowers treat it like any other pool tensor.
//! CUDA maps whole physical allocations only (`cuMemMap`'s offset must be 0), so a
//! [`ChunkedPool`] is one physical allocation per granule, mapped side by side.
//!
//! A block that comes while the device is at the limit gets page-locked host memory at its
//! addresses instead (`CU_MEM_LOCATION_TYPE_HOST`, CUDA 12.2+): the device reaches it over the
//! host link like mapped host memory, and a plan can still take it into the pool.

use super::driver as cuda;

/// The virtual memory API of the current device, where the driver has it.
#[derive(Clone, Copy, Debug)]
pub struct Backing {
    pub granularity: u64,
}

/// A block of the program's at an address of its own.
#[derive(Debug)]
pub struct Block {
    pub va: u64,
    /// The reservation's size: the block's size rounded up to the granularity.
    pub rounded: u64,
    /// Its own physical memory, until it is aliased to a pool.
    own: Option<u64>,
    /// Whether its own memory is page-locked host memory (it came when the device was full).
    pub on_host: bool,
    /// The mappings in the reservation: (address, bytes).
    mappings: Vec<(u64, u64)>,
}

/// A pool whose memory is one physical allocation per granule.
#[derive(Debug)]
pub struct ChunkedPool {
    pub va: u64,
    pub bytes: u64,
    chunks: Vec<u64>,
    granularity: u64,
}

impl Backing {
    pub fn detect() -> Option<Backing> {
        let granularity = cuda::vmm_granularity()?;
        granularity
            .is_power_of_two()
            .then_some(Backing { granularity })
    }

    pub fn rounded(&self, bytes: u64) -> u64 {
        bytes.max(1).div_ceil(self.granularity) * self.granularity
    }

    /// Whether a block of `bytes` is worth its rounding: at most an eighth more.
    pub fn worth(&self, bytes: u64) -> bool {
        (self.rounded(bytes) - bytes).saturating_mul(8) <= bytes
    }

    /// A block of `bytes` with physical memory of its own, on the device or (`on_host`) in
    /// page-locked host memory the device reaches over its link; None if the memory or a
    /// driver call failed (nothing is left allocated).
    pub fn allocate(&self, bytes: u64, on_host: bool) -> Option<Block> {
        let rounded = self.rounded(bytes);
        let va = cuda::reserve(rounded)?;
        let Some(handle) = cuda::create(rounded, on_host) else {
            cuda::free_reservation(va, rounded);
            return None;
        };
        if !cuda::map(va, rounded, handle) {
            cuda::release(handle);
            cuda::free_reservation(va, rounded);
            return None;
        }
        Some(Block {
            va,
            rounded,
            own: Some(handle),
            on_host,
            mappings: vec![(va, rounded)],
        })
    }

    /// A pool of `bytes` (rounded up to the granularity), or None with nothing left allocated.
    pub fn allocate_pool(&self, bytes: u64) -> Option<ChunkedPool> {
        let rounded = self.rounded(bytes);
        let va = cuda::reserve(rounded)?;
        let mut pool = ChunkedPool {
            va,
            bytes: rounded,
            chunks: Vec::new(),
            granularity: self.granularity,
        };
        while (pool.chunks.len() as u64) * self.granularity < rounded {
            let at = va + pool.chunks.len() as u64 * self.granularity;
            let Some(handle) = cuda::create(self.granularity, false) else {
                pool.release();
                return None;
            };
            if !cuda::map(at, self.granularity, handle) {
                cuda::release(handle);
                pool.release();
                return None;
            }
            pool.chunks.push(handle);
        }
        Some(pool)
    }
}

impl Block {
    /// Whether the block still has its own physical memory (it is not a range of a pool).
    pub fn has_own_memory(&self) -> bool {
        self.own.is_some()
    }

    /// Releases the block's own memory (its content must be elsewhere; no work may use it):
    /// nothing is mapped at its addresses until [`Block::alias`] or [`Block::remap_own`].
    pub fn release_own(&mut self) {
        self.unmap_all();
        if let Some(own) = self.own.take() {
            cuda::release(own);
        }
    }

    /// Maps the pool's granules `[offset, offset + rounded)` at the block's addresses (after
    /// [`Block::release_own`]). False if the pool has no such granule-aligned range or a driver
    /// call failed: nothing is mapped at the block's addresses then.
    pub fn alias(&mut self, pool: &ChunkedPool, offset: u64) -> bool {
        let g = pool.granularity;
        if self.own.is_some() || !offset.is_multiple_of(g) || offset + self.rounded > pool.bytes {
            return false;
        }
        let first = (offset / g) as usize;
        for k in 0..(self.rounded / g) as usize {
            let at = self.va + k as u64 * g;
            if !cuda::map(at, g, pool.chunks[first + k]) {
                self.unmap_all();
                return false;
            }
            self.mappings.push((at, g));
        }
        true
    }

    /// Gives the block physical memory of its own again at its addresses, on the device or
    /// (`on_host`) on the host, in place of whatever was mapped there (content undefined).
    pub fn remap_own(&mut self, on_host: bool) -> bool {
        self.unmap_all();
        if self.own.is_some() {
            return false;
        }
        let Some(handle) = cuda::create(self.rounded, on_host) else {
            return false;
        };
        if !cuda::map(self.va, self.rounded, handle) {
            cuda::release(handle);
            return false;
        }
        self.own = Some(handle);
        self.on_host = on_host;
        self.mappings.push((self.va, self.rounded));
        true
    }

    fn unmap_all(&mut self) {
        for (at, bytes) in self.mappings.drain(..) {
            cuda::unmap(at, bytes);
        }
    }

    /// Unmaps and frees everything (no work may use the block any more).
    pub fn release(mut self) {
        self.unmap_all();
        if let Some(own) = self.own.take() {
            cuda::release(own);
        }
        cuda::free_reservation(self.va, self.rounded);
    }
}

impl ChunkedPool {
    /// Unmaps and frees everything (no work may use the pool any more; blocks aliased to it
    /// keep their granules until they are unmapped too).
    pub fn release(self) {
        for (k, handle) in self.chunks.iter().enumerate() {
            cuda::unmap(self.va + k as u64 * self.granularity, self.granularity);
            cuda::release(*handle);
        }
        cuda::free_reservation(self.va, self.bytes);
    }
}
