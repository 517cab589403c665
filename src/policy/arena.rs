//! [`Arena`]: the address-ordered free list that cnmem and the caching allocator share.
//!
//! An arena owns a set of regions and tiles each of them with blocks, free or used. What the
//! two policies have in common lives here: best fit by (size, address), allocation at the low
//! end of the chosen block with the remainder kept as a free block at the high end, and
//! coalescing of a freed block with its free neighbours **inside its region only**. What
//! differs (the rounding, how big a new region is, when a remainder is worth keeping) is decided
//! by the callers.
//!
//! Invariants (checked by [`Arena::check`]):
//! - the free and used blocks of a region tile it exactly: Σ block sizes = region size;
//! - a block is a *head* ⇔ it starts at the base of its region; heads are never merged into
//!   their left neighbour (the mechanism by which real cnmem refuses to merge across
//!   `cudaMalloc` boundaries, `Block::mIsHead`);
//! - no two free blocks of one region are adjacent (frees coalesce eagerly);
//! - `free_by_size` = {(size, addr)} of `free_by_addr`; `reserved` = Σ region sizes;
//!   `in_use` = Σ used block sizes.
//!
//! Why two indexes: cnmem scans its whole address-ordered list for the smallest fitting block
//! and keeps the first (lowest-address) one among equal sizes. The ordered set of (size,
//! address) gives the same block in O(log n), and the address map gives the neighbours for
//! coalescing.

use super::{PolicyError, Region};
use rustc_hash::FxHashMap;
use std::collections::{BTreeMap, BTreeSet};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Block {
    size: u64,
    /// Starts at the base of its region.
    head: bool,
}

#[derive(Clone, Debug, Default)]
pub(crate) struct Arena {
    free_by_addr: BTreeMap<u64, Block>,
    free_by_size: BTreeSet<(u64, u64)>,
    used: FxHashMap<u64, Block>,
    regions: Vec<Region>,
    /// Region base → index in `regions`.
    region_index: BTreeMap<u64, usize>,
    reserved: u64,
    in_use: u64,
}

impl Arena {
    pub fn new() -> Arena {
        Arena::default()
    }

    /// Adds a region as one free head block. Rejects an empty, overflowing or overlapping
    /// region (a broken [`super::RegionSource`]) instead of corrupting the lists.
    pub fn add_region(&mut self, region: Region) -> Result<usize, PolicyError> {
        let bad = PolicyError::BadRegion {
            base: region.base,
            size: region.size,
        };
        if region.size == 0 || region.base.checked_add(region.size).is_none() {
            return Err(bad);
        }
        let below = self.region_index.range(..=region.base).next_back();
        if below.is_some_and(|(_, &i)| self.regions[i].end() > region.base) {
            return Err(bad);
        }
        let above = self.region_index.range(region.base..).next();
        if above.is_some_and(|(&next_base, _)| next_base < region.end()) {
            return Err(bad);
        }
        let index = self.regions.len();
        self.regions.push(region);
        self.region_index.insert(region.base, index);
        self.reserved += region.size;
        self.insert_free(
            region.base,
            Block {
                size: region.size,
                head: true,
            },
        );
        Ok(index)
    }

    /// The smallest free block of at least `size` bytes, the lowest-addressed among equals, as
    /// (address, block size).
    pub fn best_fit(&self, size: u64) -> Option<(u64, u64)> {
        self.free_by_size
            .range((size, 0)..)
            .next()
            .map(|&(block, addr)| (addr, block))
    }

    /// Hands out the free block at `addr` for a request of `size` bytes, at its low end. With
    /// `split`, a non-empty remainder stays free at `addr + size`; without, the whole block is
    /// handed out. Returns the size of the used block.
    ///
    /// Precondition: `addr` is a free block (from [`Arena::best_fit`] or a fresh region) of at
    /// least `size` bytes.
    pub fn take(&mut self, addr: u64, size: u64, split: bool) -> u64 {
        let block = self.remove_free(addr);
        debug_assert!(block.size >= size, "take: block too small");
        let given = if split && block.size > size {
            self.insert_free(
                addr + size,
                Block {
                    size: block.size - size,
                    head: false,
                },
            );
            size
        } else {
            block.size
        };
        self.used.insert(
            addr,
            Block {
                size: given,
                head: block.head,
            },
        );
        self.in_use += given;
        given
    }

    /// Size of the used block at `addr`, if there is one.
    pub fn used_size(&self, addr: u64) -> Option<u64> {
        self.used.get(&addr).map(|b| b.size)
    }

    /// Frees the used block at `addr` and merges it with the free block ending exactly where it
    /// starts (unless it is a head) and with the free block starting exactly where it ends
    /// (unless that one is a head). Returns the freed size, or `None` for an unknown address.
    pub fn release(&mut self, addr: u64) -> Option<u64> {
        let freed = self.used.remove(&addr)?;
        self.in_use -= freed.size;
        let (mut start, mut block) = (addr, freed);
        let left = match self.free_by_addr.range(..addr).next_back() {
            Some((&prev_addr, &prev)) if !block.head && prev_addr + prev.size == addr => {
                Some((prev_addr, prev))
            }
            _ => None,
        };
        if let Some((prev_addr, prev)) = left {
            self.remove_free(prev_addr);
            start = prev_addr;
            block = Block {
                size: prev.size + block.size,
                head: prev.head,
            };
        }
        let end = start + block.size;
        let right = self
            .free_by_addr
            .get(&end)
            .copied()
            .filter(|next| !next.head);
        if let Some(next) = right {
            self.remove_free(end);
            block.size += next.size;
        }
        self.insert_free(start, block);
        Some(freed.size)
    }

    pub fn regions(&self) -> &[Region] {
        &self.regions
    }

    /// Takes out every region that holds no used block (one free head block as large as the
    /// region) and returns them, in the order they were added; the others keep their order.
    pub fn remove_free_regions(&mut self) -> Vec<Region> {
        let (free, kept): (Vec<Region>, Vec<Region>) = self.regions.iter().partition(|region| {
            self.free_by_addr
                .get(&region.base)
                .is_some_and(|block| block.size == region.size)
        });
        for region in &free {
            self.remove_free(region.base);
            self.reserved -= region.size;
        }
        self.region_index = kept
            .iter()
            .enumerate()
            .map(|(index, region)| (region.base, index))
            .collect();
        self.regions = kept;
        free
    }

    /// The region holding `addr` and its index.
    pub fn region_of(&self, addr: u64) -> Option<(usize, Region)> {
        let (_, &i) = self.region_index.range(..=addr).next_back()?;
        let region = self.regions[i];
        region.contains(addr).then_some((i, region))
    }

    pub fn reserved(&self) -> u64 {
        self.reserved
    }

    pub fn in_use(&self) -> u64 {
        self.in_use
    }

    /// The highest-addressed free block: (address, size).
    pub fn last_free(&self) -> Option<(u64, u64)> {
        self.free_by_addr
            .last_key_value()
            .map(|(&a, b)| (a, b.size))
    }

    /// Free blocks in address order: (address, size).
    pub fn free_blocks(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.free_by_addr.iter().map(|(&a, b)| (a, b.size))
    }

    fn insert_free(&mut self, addr: u64, block: Block) {
        self.free_by_addr.insert(addr, block);
        self.free_by_size.insert((block.size, addr));
    }

    fn remove_free(&mut self, addr: u64) -> Block {
        let block = self
            .free_by_addr
            .remove(&addr)
            .expect("arena: a free block was expected at this address");
        self.free_by_size.remove(&(block.size, addr));
        block
    }

    /// Checks every invariant of the module doc in O(n log n); names the first violation.
    pub fn check(&self) -> Result<(), String> {
        if self.free_by_size.len() != self.free_by_addr.len()
            || self
                .free_by_addr
                .iter()
                .any(|(&a, b)| !self.free_by_size.contains(&(b.size, a)))
        {
            return Err("the size index does not match the free list".into());
        }
        let reserved: u64 = self.regions.iter().map(|r| r.size).sum();
        if reserved != self.reserved {
            return Err(format!(
                "reserved is {} but the regions sum to {reserved}",
                self.reserved
            ));
        }
        let in_use: u64 = self.used.values().map(|b| b.size).sum();
        if in_use != self.in_use {
            return Err(format!(
                "in_use is {} but the used blocks sum to {in_use}",
                self.in_use
            ));
        }
        // (address, block, free?) over both lists, in address order.
        let mut blocks: Vec<(u64, Block, bool)> = self
            .free_by_addr
            .iter()
            .map(|(&a, &b)| (a, b, true))
            .chain(self.used.iter().map(|(&a, &b)| (a, b, false)))
            .collect();
        blocks.sort_unstable_by_key(|&(a, _, _)| a);
        let mut blocks = blocks.into_iter().peekable();
        for (&base, &i) in &self.region_index {
            let region = self.regions[i];
            let mut cursor = base;
            let mut previous_free = false;
            while cursor < region.end() {
                let Some((addr, block, free)) = blocks.next() else {
                    return Err(format!("region {i} is not covered from {cursor:#x} on"));
                };
                if addr != cursor || block.size == 0 {
                    return Err(format!(
                        "region {i}: expected a block at {cursor:#x}, found {addr:#x} ({} bytes)",
                        block.size
                    ));
                }
                if block.head != (addr == base) {
                    return Err(format!("block {addr:#x}: wrong head flag {}", block.head));
                }
                if free && previous_free {
                    return Err(format!("free block {addr:#x} was not merged with its left"));
                }
                previous_free = free;
                cursor = addr + block.size;
            }
            if cursor != region.end() {
                return Err(format!("a block crosses the end of region {i}"));
            }
        }
        if let Some((addr, _, _)) = blocks.next() {
            return Err(format!("block {addr:#x} lies outside every region"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region(base: u64, size: u64) -> Region {
        Region { base, size }
    }

    #[test]
    fn rejects_overlapping_regions() {
        let mut arena = Arena::new();
        arena.add_region(region(1000, 100)).unwrap();
        assert!(arena.add_region(region(1099, 10)).is_err());
        assert!(arena.add_region(region(990, 11)).is_err());
        assert!(arena.add_region(region(2000, 0)).is_err());
        assert!(arena.add_region(region(u64::MAX - 1, 2)).is_err());
        assert_eq!(
            arena.add_region(region(1100, 10)),
            Ok(1),
            "adjacent is fine"
        );
        assert_eq!(arena.add_region(region(990, 10)), Ok(2));
        arena.check().unwrap();
    }

    #[test]
    fn best_fit_prefers_smaller_then_lower() {
        let mut arena = Arena::new();
        arena.add_region(region(0x3000, 300)).unwrap();
        arena.add_region(region(0x2000, 200)).unwrap();
        arena.add_region(region(0x1000, 200)).unwrap();
        assert_eq!(arena.best_fit(150), Some((0x1000, 200)));
        assert_eq!(arena.best_fit(250), Some((0x3000, 300)));
        assert_eq!(arena.best_fit(301), None);
    }

    #[test]
    fn take_and_release_coalesce_within_a_region() {
        let mut arena = Arena::new();
        arena.add_region(region(0, 100)).unwrap();
        arena.add_region(region(100, 100)).unwrap();
        assert_eq!(arena.take(0, 60, true), 60);
        assert_eq!(arena.take(60, 40, true), 40);
        assert_eq!(arena.take(100, 10, false), 100, "no split: whole block");
        arena.check().unwrap();
        assert_eq!(arena.release(0), Some(60));
        assert_eq!(arena.release(100), Some(100));
        // [0,60) free, [60,100) used, [100,200) free: nothing to merge yet.
        assert_eq!(arena.free_blocks().count(), 2);
        assert_eq!(arena.release(60), Some(40));
        // [0,100) merged; [100,200) is a head and stays apart.
        assert_eq!(
            arena.free_blocks().collect::<Vec<_>>(),
            vec![(0, 100), (100, 100)]
        );
        assert_eq!(arena.release(60), None);
        arena.check().unwrap();
    }
}
