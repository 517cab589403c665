//! The allocations alive right now, by start address: how launch arguments and copy addresses
//! are turned into allocation ids.
//!
//! A word that is the start of a live block resolves with one hash lookup (the common case: a
//! tensor's base pointer). A word inside the span of all blocks ever seen but not a start may be
//! an interior pointer (a view at an offset); the caller resolves it through the driver, which
//! knows every allocation's base (`CU_POINTER_ATTRIBUTE_RANGE_START_ADDR`), and looks that base
//! up here. No ordered index is kept: measured, a B-tree beside the hash map made every malloc
//! and free cost about twice as much, for a lookup that real programs rarely need.
//!
//! The hash table is this module's own, made for the one thing it does: every malloc inserts
//! and every free removes a block, on the program's thread. Its keys are addresses (never 0 in
//! a slot: 0 marks an empty one, and a block at address 0 is kept beside the table), its slots
//! open-addressed with linear probing from a Fibonacci hash of the address, at most half full,
//! and a removal shifts the entries after it back instead of leaving a tombstone, so a lookup
//! stops at the first empty slot. Measured with callgrind (`hook_bench`, record mode), a
//! malloc and free pair costs the program's thread about 60 instructions fewer than with
//! `FxHashMap` (whose insert and remove took about 140 together).

use crate::event::{AllocId, MemKind};

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

/// What a slot holds before its first block.
const VACANT: Block = Block {
    id: 0,
    size: 0,
    kind: MemKind::Device,
    device: 0,
    event_index: 0,
};

/// Slots of a new index (a power of two).
const INITIAL_SLOTS: usize = 64;

/// Live blocks by start address.
pub struct LiveIndex {
    /// The start of the block in each slot; 0: the slot is empty. A power of two of them.
    keys: Vec<u64>,
    /// The block in each slot (in an empty one, `VACANT` or a block removed: never read).
    blocks: Vec<Block>,
    /// Occupied slots.
    len: usize,
    /// `64 − log2(slots)`: a hash's top bits pick the home slot.
    shift: u32,
    /// The block starting at address 0, which no slot can hold.
    at_zero: Option<Block>,
    /// Smallest start and largest end ever inserted: a word outside `[low, high)` is no pointer
    /// into any block.
    low: u64,
    high: u64,
}

impl Default for LiveIndex {
    fn default() -> LiveIndex {
        LiveIndex::with_slots(INITIAL_SLOTS)
    }
}

impl LiveIndex {
    fn with_slots(slots: usize) -> LiveIndex {
        LiveIndex {
            keys: vec![0; slots],
            blocks: vec![VACANT; slots],
            len: 0,
            shift: 64 - slots.trailing_zeros(),
            at_zero: None,
            low: 0,
            high: 0,
        }
    }

    /// The slot a probe for `start` begins at: the top bits of its Fibonacci hash (the
    /// multiplication carries every bit of the address into them, the alignment's zeros too).
    #[inline(always)]
    fn home(&self, start: u64) -> usize {
        (start.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> self.shift) as usize
    }

    #[inline(always)]
    fn mask(&self) -> usize {
        self.keys.len() - 1
    }

    /// The probe for `start` (not 0): `Ok` with the slot holding it, or `Err` with the empty
    /// slot where the probe ended (where it would go).
    #[inline(always)]
    fn probe(&self, start: u64) -> Result<usize, usize> {
        let mask = self.mask();
        let mut slot = self.home(start);
        loop {
            match self.keys[slot] {
                key if key == start => return Ok(slot),
                0 => return Err(slot),
                _ => slot = (slot + 1) & mask,
            }
        }
    }

    /// The slot holding `start` (not 0), if any.
    #[inline(always)]
    fn slot(&self, start: u64) -> Option<usize> {
        self.probe(start).ok()
    }

    /// The block starting at `start`.
    #[inline(always)]
    fn get(&self, start: u64) -> Option<&Block> {
        if start == 0 {
            return self.at_zero.as_ref();
        }
        self.slot(start).map(|slot| &self.blocks[slot])
    }

    /// Adds the block starting at `start`, replacing any block said to start there. Inlined,
    /// as [`LiveIndex::remove`]: at every malloc, under the index's lock.
    #[inline]
    pub fn insert(&mut self, start: u64, block: Block) {
        let end = start.saturating_add(block.size.max(1));
        if self.high == 0 {
            self.low = start;
        }
        self.low = self.low.min(start);
        self.high = self.high.max(end);
        if start == 0 {
            self.at_zero = Some(block);
            return;
        }
        if 2 * (self.len + 1) > self.keys.len() {
            self.grow();
        }
        self.place(start, block);
    }

    /// Puts `block` in the slot of `start` or the first empty slot of its probe.
    #[inline(always)]
    fn place(&mut self, start: u64, block: Block) {
        let slot = self.probe(start).unwrap_or_else(|empty| {
            self.keys[empty] = start;
            self.len += 1;
            empty
        });
        self.blocks[slot] = block;
    }

    /// Twice the slots, every block placed again.
    #[cold]
    #[inline(never)]
    fn grow(&mut self) {
        let mut grown = LiveIndex::with_slots(2 * self.keys.len());
        for (&start, &block) in self.keys.iter().zip(&self.blocks) {
            if start != 0 {
                grown.place(start, block);
            }
        }
        self.keys = grown.keys;
        self.blocks = grown.blocks;
        self.len = grown.len;
        self.shift = grown.shift;
    }

    /// The start of every live block.
    pub fn starts(&self) -> impl Iterator<Item = u64> + '_ {
        let at_zero = self.at_zero.map(|_| 0);
        (self.keys.iter().copied().filter(|&start| start != 0)).chain(at_zero)
    }

    /// Takes the block starting at `start` out. Inlined: at every free.
    #[inline]
    pub fn remove(&mut self, start: u64) -> Option<Block> {
        if start == 0 {
            return self.at_zero.take();
        }
        let mut hole = self.slot(start)?;
        let removed = self.blocks[hole];
        // The entries after it in the same run move back into the hole wherever their probe
        // passes it (their home is not after the hole), so no probe meets an empty slot
        // before its key.
        let mask = self.mask();
        let mut next = hole;
        loop {
            next = (next + 1) & mask;
            let key = self.keys[next];
            if key == 0 {
                break;
            }
            let probed = next.wrapping_sub(self.home(key)) & mask;
            if probed >= next.wrapping_sub(hole) & mask {
                self.keys[hole] = key;
                self.blocks[hole] = self.blocks[next];
                hole = next;
            }
        }
        self.keys[hole] = 0;
        self.len -= 1;
        Some(removed)
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
        if let Some(block) = self.get(addr) {
            return Some(block);
        }
        self.find_interior(addr, base_of)
    }

    /// [`LiveIndex::find`] of an address inside the span that is no block's start.
    #[cold]
    fn find_interior(&self, addr: u64, base_of: impl FnOnce(u64) -> Option<u64>) -> Option<&Block> {
        let start = base_of(addr)?;
        let block = self.get(start)?;
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

    /// Random inserts (some of starts already live, some at address 0) and removes, many
    /// colliding in few slots, against a map: the same blocks found, the same removed, through
    /// every growth.
    #[test]
    fn follows_a_map_through_inserts_removes_and_growth() {
        let mut rng = crate::rng::SplitMix64::new(35);
        let mut live = LiveIndex::default();
        let mut model = std::collections::HashMap::new();
        for step in 0..200_000u64 {
            // Few distinct starts, 512-byte aligned: long probe runs and many shifts back.
            let start = rng.below(3_000) * 512;
            if rng.below(5) < 3 {
                let b = block(step, 1 + rng.below(512));
                live.insert(start, b);
                model.insert(start, b);
            } else {
                assert_eq!(live.remove(start), model.remove(&start), "step {step}");
            }
            if step % 1_000 == 0 {
                for probe in 0..3_000 {
                    let start = probe * 512;
                    assert_eq!(live.get(start), model.get(&start), "step {step}");
                }
                let mut starts: Vec<u64> = live.starts().collect();
                starts.sort_unstable();
                let mut expected: Vec<u64> = model.keys().copied().collect();
                expected.sort_unstable();
                assert_eq!(starts, expected, "step {step}");
                assert_eq!(live.len, model.len() - usize::from(model.contains_key(&0)));
            }
        }
    }

    #[test]
    fn a_wrong_driver_answer_cannot_name_a_block_that_does_not_contain_the_address() {
        let mut live = LiveIndex::default();
        live.insert(0x1000, block(1, 0x100));
        live.insert(0x3000, block(2, 0x100));
        assert_eq!(live.find(0x2000, |_| Some(0x1000)), None);
    }
}
