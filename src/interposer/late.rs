//! Late resolution: which allocations a launch's pointer arguments point into, worked out off
//! the program's thread, for the trace of modes that need no answer at the launch (record and
//! cnmem, and pool mode while no pool block is in use; otherwise pool and swap modes resolve
//! at once: they fence and swap what a launch touches).
//!
//! The hook copies the launch's candidate pointer words with its event: to the sequencing
//! thread (`staging.rs`) or, where events are sequenced on the program's threads, with the
//! device's trace batch to the trace writer's thread (`recorder::hand_over`). That thread,
//! which sees each device's events in order, follows every malloc and free with the index here
//! and fills in each launch's `touched` before the event is traced. A word
//! that is a block's start is found with one hash lookup, an interior pointer (a view at an
//! offset) in the address-ordered index, without asking the driver as the hooks' index must.
//!
//! Within a device the events keep their order, so a launch is resolved against exactly the
//! blocks live at its event. Across devices the sequencing thread hands on each device's events
//! as they are collected: a launch on one device through a pointer into a block that another
//! device allocated within the same few milliseconds may be resolved before that block is seen
//! (a peer kernel reading memory allocated moments before), and is then not resolved.

use crate::event::{AllocId, EventKind, Touched};
use rustc_hash::FxHashMap;
use std::collections::BTreeMap;

/// The blocks live at the point of the event stream reached, by start address.
///
/// The ordered index exists from the first interior pointer looked up (many programs pass
/// only base pointers), and is brought up to date only at such a lookup: a training loop
/// allocates and frees thousands of blocks between two of them, mostly at the same addresses,
/// and their changes cancel out in `changed` instead of each costing a B-tree insertion and
/// removal.
#[derive(Default)]
pub struct Addresses {
    /// Block starts, for the common word: a tensor's base pointer.
    at: FxHashMap<u64, (AllocId, u64)>,
    /// Each live block's start and the index of its malloc event.
    start_of: FxHashMap<AllocId, (u64, u64)>,
    /// Every live block by start, as of the last interior lookup, and what changed since
    /// (the block now at a start, or None).
    by_start: Option<BTreeMap<u64, (AllocId, u64)>>,
    changed: FxHashMap<u64, Option<(AllocId, u64)>>,
    /// Smallest start and largest end ever seen: a word outside is no pointer into a block.
    low: u64,
    high: u64,
}

impl Addresses {
    /// Follows `event`, whose index (if a malloc) is `index` (mallocs and frees; everything
    /// else leaves the blocks as they are).
    pub fn follow(&mut self, event: &EventKind, index: u64) {
        match *event {
            EventKind::Malloc { id, addr, size, .. } => {
                // An id reused (a pinned block's, see `analysis::Numbering`) ends the old block.
                if let Some((old, _)) = self.start_of.insert(id, (addr, index)) {
                    self.forget(old);
                }
                self.at.insert(addr, (id, size));
                if self.by_start.is_some() {
                    self.changed.insert(addr, Some((id, size)));
                }
                if self.high == 0 {
                    self.low = addr;
                }
                self.low = self.low.min(addr);
                self.high = self.high.max(addr.saturating_add(size.max(1)));
            }
            EventKind::Free { id, .. } => {
                if let Some((start, _)) = self.start_of.remove(&id) {
                    self.forget(start);
                }
            }
            _ => {}
        }
    }

    /// The index of live block `id`'s malloc event.
    pub fn malloc_index(&self, id: AllocId) -> Option<u64> {
        self.start_of.get(&id).map(|&(_, index)| index)
    }

    fn forget(&mut self, start: u64) {
        self.at.remove(&start);
        if self.by_start.is_some() {
            self.changed.insert(start, None);
        }
    }

    /// The block containing `addr`, as the hooks' live index answers (a block of size 0 holds
    /// its start).
    /// Inlined: every pointer word of every launch asks, and most are a block's start or no
    /// pointer at all.
    #[inline]
    fn find(&mut self, addr: u64) -> Option<AllocId> {
        if addr < self.low || addr >= self.high {
            return None;
        }
        if let Some(&(id, _)) = self.at.get(&addr) {
            return Some(id);
        }
        self.find_interior(addr)
    }

    /// [`Addresses::find`] of an address inside the span that is no block's start.
    #[cold]
    fn find_interior(&mut self, addr: u64) -> Option<AllocId> {
        let by_start = self.by_start.get_or_insert_with(|| {
            self.at
                .iter()
                .map(|(&start, &block)| (start, block))
                .collect()
        });
        for (start, block) in self.changed.drain() {
            match block {
                Some(block) => by_start.insert(start, block),
                None => by_start.remove(&start),
            };
        }
        let (&start, &(id, size)) = by_start.range(..=addr).next_back()?;
        (addr - start < size.max(1)).then_some(id)
    }

    /// The allocations `words` point into, each once, in the order first pointed to.
    pub fn touched(&mut self, words: &[u64]) -> Touched {
        let mut touched = Touched::new();
        for &word in words {
            if let Some(id) = self.find(word)
                && !touched.contains(&id)
            {
                touched.push(id);
            }
        }
        touched
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::MemKind;

    fn malloc(id: AllocId, addr: u64, size: u64) -> EventKind {
        EventKind::Malloc {
            id,
            addr,
            size,
            kind: MemKind::Device,
            stream: 0,
        }
    }

    fn free(id: AllocId) -> EventKind {
        EventKind::Free { id, stream: 0 }
    }

    #[test]
    fn a_launch_touches_the_blocks_live_at_its_event_starts_and_interior_pointers_alike() {
        let mut addresses = Addresses::default();
        addresses.follow(&malloc(1, 0x1000, 0x100), 0);
        addresses.follow(&malloc(2, 0x2000, 0), 0);
        // The start of 1, inside 1 again, the zero-size block 2, just past 1, nowhere.
        let words = [0x1000, 0x10ff, 0x2000, 0x1100, 0x10];
        assert_eq!(addresses.touched(&words).to_vec(), [1, 2]);
        addresses.follow(&free(1), 0);
        assert_eq!(
            addresses.touched(&[0x1000, 0x2000]).to_vec(),
            [2],
            "1 was freed"
        );
        // An address reused by a new, smaller block.
        addresses.follow(&malloc(3, 0x1000, 0x80), 0);
        let words = [0x1040, 0x10ff, 0x1000];
        assert_eq!(addresses.touched(&words).to_vec(), [3], "0x10ff is past it");
    }

    #[test]
    fn an_id_given_again_ends_its_old_block() {
        let mut addresses = Addresses::default();
        addresses.follow(&malloc(1, 0x1000, 0x100), 0);
        addresses.follow(&malloc(1, 0x3000, 0x100), 0);
        assert!(addresses.touched(&[0x1000, 0x1010]).is_empty());
        assert_eq!(addresses.touched(&[0x3010]).to_vec(), [1]);
    }

    #[test]
    fn a_free_finds_the_index_of_its_blocks_malloc() {
        let mut addresses = Addresses::default();
        addresses.follow(&malloc(1, 0x1000, 0x100), 7);
        assert_eq!(addresses.malloc_index(1), Some(7));
        addresses.follow(&free(1), 9);
        assert_eq!(addresses.malloc_index(1), None);
    }
}
