//! The allocations alive right now, by start address: how launch arguments and copy addresses
//! are turned into allocation ids.
//!
//! A word that is the start of a live block resolves with one hash lookup (the common case: a
//! tensor's base pointer). A word inside the span of all blocks ever seen but not a start may be
//! an interior pointer (a view at an offset); the caller resolves it through the driver, which
//! knows every allocation's base (`CU_POINTER_ATTRIBUTE_RANGE_START_ADDR`), and looks that base
//! up here. No ordered index is kept: measured, a B-tree beside the hash map made every malloc
//! and free cost about twice as much, for a lookup that real programs rarely need.

use crate::event::{AllocId, MemKind};
use rustc_hash::FxHashMap;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    pub id: AllocId,
    pub size: u64,
    pub kind: MemKind,
    /// The device whose memory it is (its frees are that device's events).
    pub device: u32,
    /// Index of the Malloc event (lifetimes are measured in events); 0 for pinned host memory,
    /// whose events take no index (`analysis::Numbering`).
    pub event_index: u64,
}

/// Live blocks by start address.
#[derive(Default)]
pub struct LiveIndex {
    by_start: FxHashMap<u64, Block>,
    /// Smallest start and largest end ever inserted: a word outside `[low, high)` is no pointer
    /// into any block.
    low: u64,
    high: u64,
}

impl LiveIndex {
    pub fn insert(&mut self, start: u64, block: Block) {
        let end = start.saturating_add(block.size.max(1));
        if self.high == 0 {
            self.low = start;
        }
        self.low = self.low.min(start);
        self.high = self.high.max(end);
        self.by_start.insert(start, block);
    }

    /// The start of every live block.
    pub fn starts(&self) -> impl Iterator<Item = u64> + '_ {
        self.by_start.keys().copied()
    }

    pub fn remove(&mut self, start: u64) -> Option<Block> {
        self.by_start.remove(&start)
    }

    /// The block containing `addr`: directly when `addr` is a block's start, otherwise through
    /// `base_of`, which maps an interior address to its allocation's start (the driver's
    /// answer); `base_of` is only asked about addresses inside the span of known blocks.
    /// Inlined: every pointer word of every launch asks, and most are a block's start or no
    /// pointer at all.
    #[inline]
    pub fn find(&self, addr: u64, base_of: impl FnOnce(u64) -> Option<u64>) -> Option<&Block> {
        // `low <= addr < high` in one comparison (an empty index has `low == high == 0`).
        if addr.wrapping_sub(self.low) >= self.high.wrapping_sub(self.low) {
            return None;
        }
        if let Some(block) = self.by_start.get(&addr) {
            return Some(block);
        }
        self.find_interior(addr, base_of)
    }

    /// [`LiveIndex::find`] of an address inside the span that is no block's start.
    #[cold]
    fn find_interior(&self, addr: u64, base_of: impl FnOnce(u64) -> Option<u64>) -> Option<&Block> {
        let start = base_of(addr)?;
        let block = self.by_start.get(&start)?;
        (addr >= start && addr - start < block.size.max(1)).then_some(block)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(id: AllocId, size: u64) -> Block {
        Block {
            id,
            size,
            kind: MemKind::Device,
            device: 0,
            event_index: 0,
        }
    }

    /// What a driver would answer for blocks at 0x1000 (0x100 bytes) and 0x2000 (0x10 bytes).
    fn driver(addr: u64) -> Option<u64> {
        match addr {
            0x1000..0x1100 => Some(0x1000),
            0x2000..0x2010 => Some(0x2000),
            _ => None,
        }
    }

    #[test]
    fn finds_starts_and_interior_pointers_only_inside_live_blocks() {
        let mut live = LiveIndex::default();
        live.insert(0x1000, block(1, 0x100));
        live.insert(0x2000, block(2, 0x10));
        assert_eq!(live.find(0x1000, driver).map(|b| b.id), Some(1));
        assert_eq!(live.find(0x10ff, driver).map(|b| b.id), Some(1));
        assert_eq!(live.find(0x1100, driver), None);
        assert_eq!(live.find(0x2008, driver).map(|b| b.id), Some(2));
        assert_eq!(live.find(0x10, |_| panic!("asked outside the span")), None);
        assert_eq!(
            live.find(u64::MAX, |_| panic!("asked outside the span")),
            None
        );
        assert_eq!(live.remove(0x1000).map(|b| b.id), Some(1));
        assert_eq!(live.find(0x1000, driver), None, "freed");
        assert_eq!(
            live.find(0x1010, driver),
            None,
            "interior pointer into a freed block"
        );
        assert_eq!(live.remove(0x1000), None, "double removal");
        assert_eq!(live.find(0x2000, driver).map(|b| b.id), Some(2));
    }

    #[test]
    fn a_wrong_driver_answer_cannot_name_a_block_that_does_not_contain_the_address() {
        let mut live = LiveIndex::default();
        live.insert(0x1000, block(1, 0x100));
        live.insert(0x3000, block(2, 0x100));
        assert_eq!(live.find(0x2000, |_| Some(0x1000)), None);
    }
}
