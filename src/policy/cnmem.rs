//! [`Cnmem`]: NVIDIA's cnmem (the pool allocator of Theano and Caffe), re-created rule for rule.
//!
//! # The rules, as read in the real source
//!
//! Source read: cnmem 1.0.0 (`CNMEM_VERSION 100`) as shipped in the `Theano==0.9.0` sdist,
//! `theano/sandbox/cuda/cnmem.cpp` and `cnmem.h` (fetched by `tools/build-cnmem`, never copied
//! here). A manager (`class cnmem::Manager`) keeps two singly linked lists of
//! `Block { mData, mSize, mNext, mIsHead }`: `mUsedBlocks` (unordered, newest pushed in front)
//! and `mFreeBlocks` (sorted by address). `mIsHead` marks a block that starts at the base of a
//! region obtained from `cudaMalloc`.
//!
//! 1. **512-byte rounding.** `cnmemMalloc` rounds every request with
//!    `ceilInt(size, CNMEM_GRANULARITY)`, `#define CNMEM_GRANULARITY 512`. A request of 0 bytes
//!    returns NULL with `CNMEM_STATUS_SUCCESS` and allocates nothing.
//! 2. **Initial reservation.** `cnmemInit` rounds each device's `size` up to 512 and calls
//!    `Manager::reserve` → `allocateBlockUnsafe`, i.e. one `cudaMalloc` of that size, which
//!    becomes one free head block. *Surprise:* a `size` of 0 does not mean "no reservation"
//!    but `cudaDeviceProp::totalGlobalMem / 2`; real cnmem therefore cannot start empty (this
//!    re-creation can: `reservation: 0`).
//! 3. **Best fit, lowest address on ties.** `Manager::findBestBlockUnsafe` walks the *whole*
//!    address-ordered free list and replaces its candidate when
//!    `temp->getSize() >= size && (!best || temp->getSize() < best->getSize())`: the smallest
//!    block that fits, and thanks to the strict `<` the first such block met, i.e. the
//!    lowest-addressed one among equal sizes. It is a linear scan per allocation; here an
//!    ordered (size, address) index returns the same block.
//! 4. **Low end, remainder kept.** `Manager::extractBlockUnsafe(curr, prev, size, false)`: a
//!    block of exactly the size is unlinked; otherwise the block keeps its address (the
//!    allocation takes the LOW end) *and its head flag*, and a new block
//!    `[data + size, data + old size)` with `isHead = false` takes its place in the free list.
//!    Every non-empty remainder is kept (it is a multiple of 512); there is no minimum.
//! 5. **Growth: one exactly-sized `cudaMalloc` per miss.** When no free block fits and the
//!    manager may grow (`CNMEM_FLAGS_CANNOT_GROW` not set), `Manager::allocate` calls
//!    `allocateBlockUnsafe(best, prev, size)`: `cudaMalloc(&data, size)` of exactly the rounded
//!    request (no minimum chunk, no doubling), inserted at its address in the free list as a
//!    head block and then handed out whole. If `cudaMalloc` fails (or growth is forbidden), a
//!    root manager without per-stream children has nothing to steal from and
//!    `cnmemMalloc` returns `CNMEM_STATUS_OUT_OF_MEMORY`.
//! 6. **Free: merge with neighbours, never across `cudaMalloc` boundaries.** `Manager::release`
//!    finds the block by a linear search of the used list (an unknown pointer is
//!    `CNMEM_STATUS_INVALID_ARGUMENT`, NULL is a no-op); `releaseBlockUnsafe` finds its place in
//!    the free list, merges it into the preceding free block if that one ends exactly where it
//!    starts *and the freed block is not a head*, then absorbs the following free block if it
//!    starts exactly at its end *and is not a head* (the source's comment: "We can't merge over
//!    "cudaMalloc" boundaries"). Two regions that happen to be adjacent in memory are thus never
//!    merged.
//! 7. **Never shrinks.** Regions are returned with `cudaFree` only by `releaseAllUnsafe`
//!    (`cnmemFinalize`, or the last `cnmemRelease`), and only for free blocks that are heads.
//!
//! Not modelled, because itermem's cnmem mode has a single manager (the NULL stream's root):
//! per-stream child managers (`cnmemRegisterStream`, `numStreams`), which get their memory from
//! the root with `mParent->allocate` instead of `cudaMalloc`, and the root's "stealing" of free
//! blocks back from those children (`stealUnsafe`, with a `cudaStreamSynchronize`) when
//! `cudaMalloc` fails. Stolen blocks are the only other place where head flags are set.
//!
//! # Equivalence
//!
//! Same decisions, other data structures: the arena's size index picks the block the linear scan
//! picks, the used blocks are found by hash instead of a list walk. `tests/cnmem.rs` replays the
//! same sequences through the real library (built on cuda-shim by `tools/build-cnmem`) and this
//! type, and compares every address and every region.

use super::arena::Arena;
use super::{BlockAllocator, PolicyError, Region, RegionSource, round_up};

/// `CNMEM_GRANULARITY`: every request and the initial reservation are rounded up to it.
pub const CNMEM_GRANULARITY: u64 = 512;

/// How a [`Cnmem`] starts and whether it may grow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CnmemConfig {
    /// Bytes reserved up front with one `cudaMalloc` (rounded up to 512); 0 = none (real cnmem
    /// would take half the device instead, see rule 2).
    pub reservation: u64,
    /// Whether a miss may `cudaMalloc` a new region (`!CNMEM_FLAGS_CANNOT_GROW`).
    pub can_grow: bool,
}

impl Default for CnmemConfig {
    /// No reservation, growth allowed.
    fn default() -> Self {
        CnmemConfig {
            reservation: 0,
            can_grow: true,
        }
    }
}

/// cnmem's policy over any [`RegionSource`] (module doc). Not thread-safe by itself: cnmem
/// serialises every call on one mutex, and so must the owner of this value.
#[derive(Debug)]
pub struct Cnmem<S> {
    arena: Arena,
    source: S,
    can_grow: bool,
}

impl<S: RegionSource> Cnmem<S> {
    /// Creates the manager and makes the initial reservation (rule 2). Fails with
    /// [`PolicyError::OutOfMemory`] if the source cannot supply it.
    pub fn new(mut source: S, config: CnmemConfig) -> Result<Cnmem<S>, PolicyError> {
        let mut arena = Arena::new();
        if config.reservation > 0 {
            let size = round_up(config.reservation, CNMEM_GRANULARITY)?;
            let base = source
                .grow(size)
                .ok_or(PolicyError::OutOfMemory { size, reserved: 0 })?;
            arena.add_region(Region { base, size })?;
        }
        Ok(Cnmem {
            arena,
            source,
            can_grow: config.can_grow,
        })
    }

    /// `cnmemMalloc` on the NULL stream: rounds (rule 1), takes the best fit (rule 3) at its
    /// low end (rule 4), or grows by exactly the rounded size (rule 5). Returns the address.
    pub fn alloc(&mut self, size: u64) -> Result<u64, PolicyError> {
        if size == 0 {
            return Err(PolicyError::ZeroSize);
        }
        let size = round_up(size, CNMEM_GRANULARITY)?;
        let addr = match self.arena.best_fit(size) {
            Some((addr, _)) => addr,
            None => self.grow(size)?,
        };
        self.arena.take(addr, size, true);
        Ok(addr)
    }

    /// The free block `alloc(size)` would take, as (address, block size), without taking it;
    /// `None` when the request would grow (or fail).
    pub fn best_fit(&self, size: u64) -> Option<(u64, u64)> {
        let size = round_up(size.max(1), CNMEM_GRANULARITY).ok()?;
        self.arena.best_fit(size)
    }

    #[cold]
    fn grow(&mut self, size: u64) -> Result<u64, PolicyError> {
        let out_of_memory = PolicyError::OutOfMemory {
            size,
            reserved: self.arena.reserved(),
        };
        if !self.can_grow {
            return Err(out_of_memory);
        }
        let base = self.source.grow(size).ok_or(out_of_memory)?;
        self.arena.add_region(Region { base, size })?;
        Ok(base)
    }

    /// `cnmemFree`: returns the block to the free list, merged with its free neighbours inside
    /// its region (rule 6). Returns the size of the freed block.
    pub fn free(&mut self, addr: u64) -> Result<u64, PolicyError> {
        self.arena
            .release(addr)
            .ok_or(PolicyError::UnknownAddress { addr })
    }

    /// Size of the block at `addr` if it is allocated (the rounded request).
    pub fn block_size(&self, addr: u64) -> Option<u64> {
        self.arena.used_size(addr)
    }

    /// Σ region sizes: what cnmem holds from the device (`cnmemMemGetInfo`'s total).
    pub fn reserved(&self) -> u64 {
        self.arena.reserved()
    }

    /// Σ allocated block sizes.
    pub fn in_use(&self) -> u64 {
        self.arena.in_use()
    }

    /// The regions in the order they were obtained (the reservation first, if any).
    pub fn regions(&self) -> &[Region] {
        self.arena.regions()
    }

    /// Index and bounds of the region holding `addr`.
    pub fn region_of(&self, addr: u64) -> Option<(usize, Region)> {
        self.arena.region_of(addr)
    }

    /// The highest-addressed free block, as (address, size).
    pub fn last_free_block(&self) -> Option<(u64, u64)> {
        self.arena.last_free()
    }

    /// Free blocks in address order, as (address, size).
    pub fn free_blocks(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.arena.free_blocks()
    }

    pub fn source(&self) -> &S {
        &self.source
    }

    /// Takes out the regions no block is allocated from, for the owner to give back to the
    /// device. Real cnmem never does (rule 7); cnmem mode does when a request finds the device
    /// full, where a program without cnmem would have had the memory.
    pub fn take_free_regions(&mut self) -> Vec<Region> {
        self.arena.remove_free_regions()
    }

    /// The source and every region obtained from it, for a teardown that releases them.
    pub fn into_parts(self) -> (S, Vec<Region>) {
        (self.source, self.arena.regions().to_vec())
    }

    /// O(n log n) consistency check of the block lists (tests, debug tooling).
    pub fn check(&self) -> Result<(), String> {
        self.arena.check()
    }
}

impl<S: RegionSource> BlockAllocator for Cnmem<S> {
    fn alloc(&mut self, size: u64) -> Result<u64, PolicyError> {
        Cnmem::alloc(self, size)
    }
    fn free(&mut self, addr: u64) -> Result<u64, PolicyError> {
        Cnmem::free(self, addr)
    }
    fn block_size(&self, addr: u64) -> Option<u64> {
        Cnmem::block_size(self, addr)
    }
    fn reserved(&self) -> u64 {
        Cnmem::reserved(self)
    }
    fn in_use(&self) -> u64 {
        Cnmem::in_use(self)
    }
    fn region_of(&self, addr: u64) -> Option<(usize, Region)> {
        Cnmem::region_of(self, addr)
    }
    fn regions(&self) -> Vec<Region> {
        self.arena.regions().to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::FakeAddressSpace;

    const B: u64 = FakeAddressSpace::BASE;

    fn cnmem(reservation: u64, can_grow: bool) -> Cnmem<FakeAddressSpace> {
        Cnmem::new(
            FakeAddressSpace::new(),
            CnmemConfig {
                reservation,
                can_grow,
            },
        )
        .unwrap()
    }

    #[test]
    fn rounds_to_512_and_allocates_at_the_low_end() {
        let mut c = cnmem(4096, false);
        assert_eq!(c.reserved(), 4096);
        let a = c.alloc(1).unwrap();
        let b = c.alloc(513).unwrap();
        assert_eq!((a, b), (B, B + 512));
        assert_eq!(c.block_size(b), Some(1024));
        assert_eq!(c.in_use(), 1536);
        // The remainder stays one free block at the high end.
        assert_eq!(c.free_blocks().collect::<Vec<_>>(), vec![(B + 1536, 2560)]);
        assert_eq!(c.alloc(0), Err(PolicyError::ZeroSize));
        c.check().unwrap();
    }

    #[test]
    fn reservation_is_rounded_up() {
        let c = cnmem(1000, true);
        assert_eq!(
            c.regions(),
            &[Region {
                base: B,
                size: 1024
            }]
        );
    }

    #[test]
    fn best_fit_picks_the_smallest_block_then_the_lowest_address() {
        // Layout of one 8 KiB region, in 512-byte units:
        // [a:2][x:1][b:2][y:1][c:1][z:1] + free tail of 0
        let mut c = cnmem(8 * 512, false);
        let ids: Vec<u64> = [2, 1, 2, 1, 1, 1]
            .iter()
            .map(|&n| c.alloc(n * 512).unwrap())
            .collect();
        let (a, b, cc) = (ids[0], ids[2], ids[4]);
        c.free(a).unwrap(); // hole of 2 at B
        c.free(b).unwrap(); // hole of 2 at B + 3·512
        c.free(cc).unwrap(); // hole of 1 at B + 6·512
        // A 1-unit request takes the 1-unit hole although 2-unit holes come first.
        assert_eq!(c.alloc(512).unwrap(), B + 6 * 512);
        // Two 2-unit holes: the lower one wins.
        assert_eq!(c.alloc(1024).unwrap(), B);
        assert_eq!(c.alloc(600).unwrap(), B + 3 * 512);
        assert_eq!(
            c.alloc(1),
            Err(PolicyError::OutOfMemory {
                size: 512,
                reserved: 4096
            })
        );
        c.check().unwrap();
    }

    #[test]
    fn frees_merge_with_both_neighbours_but_never_across_regions() {
        let mut c = cnmem(0, true);
        // Three exactly-sized regions, back to back in the fake space.
        let r0 = c.alloc(1024).unwrap();
        let r1 = c.alloc(2048).unwrap();
        let r2 = c.alloc(1024).unwrap();
        assert_eq!((r0, r1, r2), (B, B + 1024, B + 3072));
        c.free(r0).unwrap();
        c.free(r2).unwrap();
        c.free(r1).unwrap();
        // Adjacent in memory, yet three separate free blocks.
        assert_eq!(
            c.free_blocks().collect::<Vec<_>>(),
            vec![(B, 1024), (B + 1024, 2048), (B + 3072, 1024)]
        );
        // Hence a 4 KiB request fits none of them: it grows.
        assert_eq!(c.alloc(4096).unwrap(), B + 4096);
        assert_eq!(c.reserved(), 8192);
        c.check().unwrap();

        // Inside one region, a freed block merges left and right.
        let mut c = cnmem(4 * 512, false);
        let blocks: Vec<u64> = (0..4).map(|_| c.alloc(512).unwrap()).collect();
        c.free(blocks[0]).unwrap();
        c.free(blocks[2]).unwrap();
        assert_eq!(c.free_blocks().count(), 2);
        c.free(blocks[1]).unwrap();
        assert_eq!(c.free_blocks().collect::<Vec<_>>(), vec![(B, 1536)]);
        c.free(blocks[3]).unwrap();
        assert_eq!(c.free_blocks().collect::<Vec<_>>(), vec![(B, 2048)]);
        assert_eq!(
            c.free(blocks[3]),
            Err(PolicyError::UnknownAddress { addr: blocks[3] })
        );
        c.check().unwrap();
    }

    #[test]
    fn growth_is_exactly_sized_and_used_whole() {
        let mut c = cnmem(1024, true);
        let a = c.alloc(1024).unwrap();
        assert_eq!(a, B);
        // Miss: one region of exactly the rounded request, handed out from its base.
        let b = c.alloc(1500).unwrap();
        assert_eq!(
            c.regions()[1],
            Region {
                base: b,
                size: 1536
            }
        );
        assert_eq!(c.reserved(), 1024 + 1536);
        assert_eq!(c.free_blocks().count(), 0);
        // A miss is not served by combining a free block with growth.
        c.free(a).unwrap();
        let d = c.alloc(2048).unwrap();
        assert_eq!(
            c.regions()[2],
            Region {
                base: d,
                size: 2048
            }
        );
        // Never shrinks.
        c.free(b).unwrap();
        c.free(d).unwrap();
        assert_eq!(c.reserved(), 1024 + 1536 + 2048);
        assert_eq!(c.in_use(), 0);
        c.check().unwrap();
    }

    #[test]
    fn only_regions_without_blocks_are_taken_out() {
        let mut c = cnmem(1024, true);
        let a = c.alloc(1024).unwrap();
        let b = c.alloc(1536).unwrap();
        let d = c.alloc(2048).unwrap();
        c.free(a).unwrap();
        c.free(d).unwrap();
        let taken = c.take_free_regions();
        assert_eq!(
            taken,
            vec![
                Region {
                    base: a,
                    size: 1024
                },
                Region {
                    base: d,
                    size: 2048
                }
            ]
        );
        assert_eq!(
            (c.regions().len(), c.reserved(), c.in_use()),
            (1, 1536, 1536)
        );
        assert_eq!(c.region_of(b).map(|(i, _)| i), Some(0));
        assert_eq!(c.region_of(a), None);
        c.check().unwrap();
        // A partly used region stays; the next miss grows again.
        let e = c.alloc(512).unwrap();
        assert_eq!(c.regions().len(), 2);
        c.free(e).unwrap();
        c.free(b).unwrap();
        assert_eq!(c.take_free_regions().len(), 2);
        assert_eq!(c.reserved(), 0);
        c.check().unwrap();
    }

    #[test]
    fn out_of_device_memory_is_reported() {
        let mut c = Cnmem::new(
            FakeAddressSpace::with_capacity(2048),
            CnmemConfig::default(),
        )
        .unwrap();
        c.alloc(2048).unwrap();
        assert_eq!(
            c.alloc(1),
            Err(PolicyError::OutOfMemory {
                size: 512,
                reserved: 2048
            })
        );
        assert!(
            Cnmem::new(
                FakeAddressSpace::with_capacity(100),
                CnmemConfig {
                    reservation: 512,
                    can_grow: true
                }
            )
            .is_err()
        );
    }
}
