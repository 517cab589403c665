//! The allocations alive right now, by address: how launch arguments and copy addresses are
//! turned into allocation ids.
//!
//! Two views of the same set, kept equal under one lock:
//!   by_start: start address → block   (hash map: the common case, a pointer to a block's start,
//!                                       costs one lookup)
//!   ordered:  start address → end       (B-tree: interior pointers, `start ≤ p < end`)
//! Invariant: the key sets are equal and blocks are disjoint (they come from one allocator).

use crate::event::{AllocId, MemKind};
use rustc_hash::FxHashMap;
use std::collections::BTreeMap;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    pub id: AllocId,
    pub size: u64,
    pub kind: MemKind,
    /// Index of the Malloc event (lifetimes are measured in events).
    pub event_index: u64,
}

#[derive(Default)]
pub struct LiveIndex {
    by_start: FxHashMap<u64, Block>,
    ordered: BTreeMap<u64, u64>,
    /// Smallest start and largest end ever inserted: a word outside is no pointer of ours.
    low: u64,
    high: u64,
}

impl LiveIndex {
    pub fn insert(&mut self, start: u64, block: Block) {
        let end = start.saturating_add(block.size.max(1));
        if self.by_start.is_empty() && self.ordered.is_empty() && self.high == 0 {
            self.low = start;
        }
        self.low = self.low.min(start);
        self.high = self.high.max(end);
        self.by_start.insert(start, block);
        self.ordered.insert(start, end);
    }

    pub fn remove(&mut self, start: u64) -> Option<Block> {
        let block = self.by_start.remove(&start)?;
        self.ordered.remove(&start);
        Some(block)
    }

    /// The block containing `addr` (interior pointers included).
    pub fn find(&self, addr: u64) -> Option<&Block> {
        if addr < self.low || addr >= self.high {
            return None;
        }
        if let Some(block) = self.by_start.get(&addr) {
            return Some(block);
        }
        let (start, end) = self.ordered.range(..=addr).next_back()?;
        if addr < *end {
            self.by_start.get(start)
        } else {
            None
        }
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
            event_index: 0,
        }
    }

    #[test]
    fn finds_starts_and_interior_pointers_only_inside_blocks() {
        let mut live = LiveIndex::default();
        live.insert(0x1000, block(1, 0x100));
        live.insert(0x2000, block(2, 0x10));
        assert_eq!(live.find(0x1000).map(|b| b.id), Some(1));
        assert_eq!(live.find(0x10ff).map(|b| b.id), Some(1));
        assert_eq!(live.find(0x1100), None);
        assert_eq!(live.find(0x2008).map(|b| b.id), Some(2));
        assert_eq!(live.find(0x10), None);
        assert_eq!(live.find(u64::MAX), None);
        assert_eq!(live.remove(0x1000).map(|b| b.id), Some(1));
        assert_eq!(live.find(0x1000), None);
        assert_eq!(live.remove(0x1000), None, "double removal");
        assert_eq!(live.find(0x2000).map(|b| b.id), Some(2));
    }
}
