//! [`CachingAllocator`]: the policy of PyTorch's CUDA caching allocator
//! (`c10/cuda/CUDACachingAllocator.cpp`, `DeviceCachingAllocator`), default configuration.
//!
//! # Rules implemented
//!
//! Constants of the source: `kMinBlockSize` = 512, `kSmallSize` = 1 MiB, `kSmallBuffer` = 2 MiB,
//! `kMinLargeAlloc` = 10 MiB, `kRoundLarge` = 2 MiB, `kLargeBuffer` = 20 MiB.
//!
//! 1. **Rounding** (`round_size`): requests below 512 B become 512 B, others are rounded up to a
//!    multiple of 512 (`roundup_power2_divisions` unset).
//! 2. **Two pools** (`get_pool`): a rounded size ≤ 1 MiB is served from the small pool, a larger
//!    one from the large pool. A block never moves between pools.
//! 3. **Best fit** (`get_free_block`): `pool.blocks.lower_bound(search_key)` over a set ordered by
//!    `BlockComparatorSize` = (stream, size, address): the smallest free block of the pool that
//!    fits, the lowest address among equal sizes. One stream here, so the stream key is moot.
//!    With `max_split_size` unset (the default, `SIZE_MAX`) the two oversize-block exclusions
//!    never fire.
//! 4. **New segment on a miss** (`alloc_block`, `get_allocation_size`): one `cudaMalloc` of
//!    2 MiB for a small request; of 20 MiB for a large request below 10 MiB; otherwise of the
//!    request rounded up to a multiple of 2 MiB. The new segment's block is then treated like a
//!    found block.
//! 5. **Splitting** (`should_split`, `alloc_found_block`): with remainder = block − request,
//!    a small-pool block is split when remainder ≥ 512 B, a large-pool block when
//!    remainder > 1 MiB (and request < `max_split_size`, always true by default). The request
//!    takes the LOW end (`block = new Block(..., size, ..., block->ptr)`; the remaining block's
//!    `ptr += size`). An unsplit block is handed out whole, so a large request may occupy up to
//!    1 MiB more than it asked for.
//! 6. **Freeing** (`free_block`, `try_merge_blocks`): the block merges with its `prev` and
//!    `next` blocks when they are free; `prev`/`next` only link blocks split from one segment,
//!    so merging never crosses segments.
//! 7. **Never releasing segments.** Segments go back to the driver only on `emptyCache`, on the
//!    garbage-collection threshold (unset by default), or when `cudaMalloc` fails
//!    (`release_available_cached_blocks`, then `release_cached_blocks` and a retry). None of
//!    that is modelled: the simulation has unlimited device memory and never calls
//!    `empty_cache`, so the footprint is Σ segment sizes.
//!
//! Not modelled: streams and `recordStream` (events delay the reuse of a freed block), CUDA-graph
//! private pools, expandable segments, `PYTORCH_CUDA_ALLOC_CONF` options.
//!
//! Structure: one `Arena` per pool over a shared [`RegionSource`]; each segment is a region of
//! the arena of its pool, which gives the "within a segment" merging for free.

use super::arena::Arena;
use super::{BlockAllocator, PolicyError, Region, RegionSource, round_up};
use std::collections::BTreeMap;

/// `kMinBlockSize`: sizes are rounded up to a multiple of it (and to at least it).
pub const MIN_BLOCK_SIZE: u64 = 512;
/// `kSmallSize`: the largest request of the small pool.
pub const SMALL_SIZE: u64 = 1 << 20;
/// `kSmallBuffer`: the segment size of the small pool.
pub const SMALL_BUFFER: u64 = 2 << 20;
/// `kMinLargeAlloc`: large requests below it get a [`LARGE_BUFFER`] segment.
pub const MIN_LARGE_ALLOC: u64 = 10 << 20;
/// `kRoundLarge`: larger segments are rounded up to a multiple of it.
pub const ROUND_LARGE: u64 = 2 << 20;
/// `kLargeBuffer`: the segment size for large requests below [`MIN_LARGE_ALLOC`].
pub const LARGE_BUFFER: u64 = 20 << 20;

/// Which pool a block belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Pool {
    /// Rounded requests ≤ 1 MiB, in 2 MiB segments.
    Small,
    /// Everything else.
    Large,
}

/// `round_size`: the size the allocator actually looks for (rule 1).
pub fn round_size(size: u64) -> Result<u64, PolicyError> {
    round_up(size.max(MIN_BLOCK_SIZE), MIN_BLOCK_SIZE)
}

/// `get_pool` on a rounded size (rule 2).
pub fn pool_for(rounded: u64) -> Pool {
    if rounded <= SMALL_SIZE {
        Pool::Small
    } else {
        Pool::Large
    }
}

/// `get_allocation_size`: the size of the segment a miss of `rounded` bytes allocates (rule 4).
pub fn segment_size(rounded: u64) -> Result<u64, PolicyError> {
    if rounded <= SMALL_SIZE {
        Ok(SMALL_BUFFER)
    } else if rounded < MIN_LARGE_ALLOC {
        Ok(LARGE_BUFFER)
    } else {
        round_up(rounded, ROUND_LARGE)
    }
}

/// `should_split` (rule 5): whether a free block of `block` bytes of `pool`, chosen for a
/// request of `rounded` bytes, is split.
pub fn should_split(pool: Pool, block: u64, rounded: u64) -> bool {
    let remaining = block - rounded;
    match pool {
        Pool::Small => remaining >= MIN_BLOCK_SIZE,
        Pool::Large => remaining > SMALL_SIZE,
    }
}

/// PyTorch's caching allocator policy over any [`RegionSource`] (module doc).
#[derive(Debug)]
pub struct CachingAllocator<S> {
    small: Arena,
    large: Arena,
    /// Segments of both pools in allocation order (stable indices for placements).
    segments: Vec<Region>,
    /// Segment base → index in `segments`.
    segment_index: BTreeMap<u64, usize>,
    source: S,
}

impl<S: RegionSource> CachingAllocator<S> {
    pub fn new(source: S) -> CachingAllocator<S> {
        CachingAllocator {
            small: Arena::new(),
            large: Arena::new(),
            segments: Vec::new(),
            segment_index: BTreeMap::new(),
            source,
        }
    }

    fn arena(&self, pool: Pool) -> &Arena {
        match pool {
            Pool::Small => &self.small,
            Pool::Large => &self.large,
        }
    }

    fn arena_mut(&mut self, pool: Pool) -> &mut Arena {
        match pool {
            Pool::Small => &mut self.small,
            Pool::Large => &mut self.large,
        }
    }

    /// Allocates `size` bytes (rules 1–5); returns the address.
    pub fn alloc(&mut self, size: u64) -> Result<u64, PolicyError> {
        if size == 0 {
            return Err(PolicyError::ZeroSize);
        }
        let rounded = round_size(size)?;
        let pool = pool_for(rounded);
        let (addr, block) = match self.arena(pool).best_fit(rounded) {
            Some(found) => found,
            None => self.new_segment(pool, rounded)?,
        };
        let split = should_split(pool, block, rounded);
        self.arena_mut(pool).take(addr, rounded, split);
        Ok(addr)
    }

    #[cold]
    fn new_segment(&mut self, pool: Pool, rounded: u64) -> Result<(u64, u64), PolicyError> {
        let size = segment_size(rounded)?;
        let reserved = self.reserved();
        let base = self
            .source
            .grow(size)
            .ok_or(PolicyError::OutOfMemory { size, reserved })?;
        let region = Region { base, size };
        self.arena_mut(pool).add_region(region)?;
        self.segment_index.insert(base, self.segments.len());
        self.segments.push(region);
        Ok((base, size))
    }

    /// Frees the block at `addr` (rule 6); returns its size.
    pub fn free(&mut self, addr: u64) -> Result<u64, PolicyError> {
        self.small
            .release(addr)
            .or_else(|| self.large.release(addr))
            .ok_or(PolicyError::UnknownAddress { addr })
    }

    /// The pool and size of the allocated block at `addr`.
    pub fn block(&self, addr: u64) -> Option<(Pool, u64)> {
        [Pool::Small, Pool::Large]
            .into_iter()
            .find_map(|pool| self.arena(pool).used_size(addr).map(|size| (pool, size)))
    }

    /// Σ segment sizes of both pools (`torch.cuda.memory_reserved`).
    pub fn reserved(&self) -> u64 {
        self.small.reserved() + self.large.reserved()
    }

    /// Σ allocated block sizes (`torch.cuda.memory_allocated`, counted in block sizes).
    pub fn in_use(&self) -> u64 {
        self.small.in_use() + self.large.in_use()
    }

    /// The segments of one pool, in the order they were allocated.
    pub fn segments(&self, pool: Pool) -> &[Region] {
        self.arena(pool).regions()
    }

    pub fn source(&self) -> &S {
        &self.source
    }

    /// O(n log n) consistency check of both pools.
    pub fn check(&self) -> Result<(), String> {
        self.small.check().map_err(|e| format!("small pool: {e}"))?;
        self.large.check().map_err(|e| format!("large pool: {e}"))
    }
}

impl<S: RegionSource> BlockAllocator for CachingAllocator<S> {
    fn alloc(&mut self, size: u64) -> Result<u64, PolicyError> {
        CachingAllocator::alloc(self, size)
    }
    fn free(&mut self, addr: u64) -> Result<u64, PolicyError> {
        CachingAllocator::free(self, addr)
    }
    fn block_size(&self, addr: u64) -> Option<u64> {
        self.block(addr).map(|(_, size)| size)
    }
    fn reserved(&self) -> u64 {
        CachingAllocator::reserved(self)
    }
    fn in_use(&self) -> u64 {
        CachingAllocator::in_use(self)
    }
    /// Segments of both pools are numbered in allocation order.
    fn region_of(&self, addr: u64) -> Option<(usize, Region)> {
        let (_, &i) = self.segment_index.range(..=addr).next_back()?;
        let region = self.segments[i];
        region.contains(addr).then_some((i, region))
    }
    fn regions(&self) -> Vec<Region> {
        self.segments.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::FakeAddressSpace;

    const MIB: u64 = 1 << 20;

    fn caching() -> CachingAllocator<FakeAddressSpace> {
        CachingAllocator::new(FakeAddressSpace::new())
    }

    #[test]
    fn size_rules() {
        assert_eq!(round_size(1).unwrap(), 512);
        assert_eq!(round_size(512).unwrap(), 512);
        assert_eq!(round_size(513).unwrap(), 1024);
        assert_eq!(pool_for(MIB), Pool::Small);
        assert_eq!(pool_for(MIB + 512), Pool::Large);
        assert_eq!(segment_size(512).unwrap(), 2 * MIB);
        assert_eq!(segment_size(MIB).unwrap(), 2 * MIB);
        assert_eq!(segment_size(MIB + 512).unwrap(), 20 * MIB);
        assert_eq!(segment_size(10 * MIB - 512).unwrap(), 20 * MIB);
        assert_eq!(segment_size(10 * MIB).unwrap(), 10 * MIB);
        assert_eq!(segment_size(10 * MIB + 1).unwrap(), 12 * MIB);
        assert!(should_split(Pool::Small, 1024, 512));
        assert!(!should_split(Pool::Small, 512, 512));
        assert!(
            !should_split(Pool::Large, 3 * MIB, 2 * MIB),
            "1 MiB is not > 1 MiB"
        );
        assert!(should_split(Pool::Large, 3 * MIB + 512, 2 * MIB));
    }

    #[test]
    fn small_requests_share_a_2mib_segment() {
        let mut c = caching();
        let a = c.alloc(100).unwrap();
        let b = c.alloc(1000).unwrap();
        let d = c.alloc(MIB).unwrap();
        assert_eq!(b, a + 512);
        assert_eq!(d, a + 1536);
        assert_eq!(c.segments(Pool::Small).len(), 1);
        assert_eq!(c.reserved(), 2 * MIB);
        // 2 MiB − 1536 − 1 MiB left: a second 1 MiB request needs a new segment.
        let e = c.alloc(MIB).unwrap();
        assert_eq!(c.segments(Pool::Small).len(), 2);
        assert_eq!(c.block(e), Some((Pool::Small, MIB)));
        assert_eq!(c.reserved(), 4 * MIB);
        c.check().unwrap();
    }

    #[test]
    fn large_requests_get_20mib_or_rounded_segments() {
        let mut c = caching();
        let a = c.alloc(MIB + 1).unwrap();
        assert_eq!(
            c.segments(Pool::Large),
            &[Region {
                base: a,
                size: 20 * MIB
            }]
        );
        // The remainder (20 MiB − (1 MiB + 512)) was kept free: a 5 MiB request reuses it.
        let b = c.alloc(5 * MIB).unwrap();
        assert_eq!(b, a + MIB + 512);
        assert_eq!(c.segments(Pool::Large).len(), 1);
        // 15 MiB does not fit the 14 MiB − 512 left: a segment of the request rounded up to
        // 2 MiB. Its remainder of exactly 1 MiB is not split off: the block is handed out whole.
        let d = c.alloc(15 * MIB).unwrap();
        assert_eq!(
            c.segments(Pool::Large)[1],
            Region {
                base: d,
                size: 16 * MIB
            }
        );
        assert_eq!(c.block(d), Some((Pool::Large, 16 * MIB)));
        assert_eq!(c.reserved(), 36 * MIB);
        // Small and large pools never share a segment, even with room left in the large one.
        let e = c.alloc(4096).unwrap();
        assert_eq!(c.block(e), Some((Pool::Small, 4096)));
        assert_eq!(c.reserved(), 38 * MIB);
        c.check().unwrap();
    }

    #[test]
    fn large_remainder_threshold_and_best_fit() {
        let mut c = caching();
        let a = c.alloc(18 * MIB).unwrap(); // 18 MiB segment, exact
        let b = c.alloc(14 * MIB).unwrap(); // 14 MiB segment, exact
        c.free(a).unwrap();
        c.free(b).unwrap();
        // 12.5 MiB: best fit is the 14 MiB block; remainder 1.5 MiB > 1 MiB is split off.
        let d = c.alloc(12 * MIB + MIB / 2).unwrap();
        assert_eq!(d, b);
        assert_eq!(c.block(d), Some((Pool::Large, 12 * MIB + MIB / 2)));
        // 17.5 MiB in the 18 MiB block: remainder 0.5 MiB stays inside the block.
        let e = c.alloc(17 * MIB + MIB / 2).unwrap();
        assert_eq!(e, a);
        assert_eq!(c.block(e), Some((Pool::Large, 18 * MIB)));
        // Frees merge within the segment: the 14 MiB segment is whole again.
        c.free(d).unwrap();
        let f = c.alloc(14 * MIB).unwrap();
        assert_eq!(f, b);
        assert_eq!(c.reserved(), 32 * MIB);
        c.check().unwrap();
        assert_eq!(
            c.free(12345),
            Err(PolicyError::UnknownAddress { addr: 12345 })
        );
    }
}
