//! The cheap floor of [`super::Policy::Search`]: best-fit in birth order, placed as an online
//! allocator places it, with a free list.
//!
//! Why: SmartPool's best-fit (size order, on a timeline) costs about 2 µs a buffer, 0.2 s on
//! 100k buffers, so a search that had to wait for it could not return within a tighter budget
//! (issue 13). This placement costs a tenth of that; it is made first and never cut, best-fit
//! then runs against the clock, and when the budget cuts it the search returns this one.
//!
//! Placed by birth ([`Order::Birth`]), a buffer meets exactly the buffers still live at its
//! birth, so a free list of the gaps between the blocks in use makes the same choice as the
//! greedy run `(Order::Birth, Fit::Best)` ([`RUN`]): the smallest gap between live blocks that
//! fits (the lowest on ties), else the top. A sweep in birth order, each death freed before the
//! births of its instant (lifetimes are half-open), with the blocks in use in a list in
//! address order and the gaps in an ordered set: O(n log n), no timeline, no merging of byte
//! ranges.
//!
//! **Absences**: a buffer takes its range for its whole lifetime here, absence windows
//! included. The plan is valid (it only forbids more sharing than the instance allows) but is
//! then not the placement of [`RUN`], which lends an absent buffer's range to others.

use std::collections::BTreeSet;

use super::greedy::{self, Prepared};
use super::{Fit, Instance, Method, Order, Outcome};

/// The greedy run whose placement [`place`] makes when no buffer has absence windows.
pub(crate) const RUN: (Order, Fit) = (Order::Birth, Fit::Best);

/// Best-fit in birth order over whole lifetimes (module doc).
pub(crate) fn place(instance: &Instance, prep: &Prepared) -> Outcome {
    let n = prep.len();
    let births = greedy::order_indices(instance, prep, Order::Birth);
    // Buffers by the segment their lifetime ends at: a counting sort, O(n + m).
    let mut ends = vec![0usize; prep.segments + 2];
    for &(_, to) in &prep.segs {
        ends[to + 1] += 1;
    }
    for t in 1..ends.len() {
        ends[t] += ends[t - 1];
    }
    let mut deaths = vec![0usize; n];
    for (i, &(_, to)) in prep.segs.iter().enumerate() {
        deaths[ends[to]] = i;
        ends[to] += 1;
    }
    let mut pool = Pool::new(prep);
    let mut dead = 0;
    for &i in &births {
        // Every buffer dead by this birth was born before it, so it is in the pool.
        while let Some(&j) = deaths
            .get(dead)
            .filter(|&&j| prep.segs[j].1 <= prep.segs[i].0)
        {
            pool.free(j);
            dead += 1;
        }
        pool.take(i);
    }
    Outcome {
        footprint: pool.footprint,
        offsets: pool.offsets,
        method: Method::Floor,
    }
}

/// No block: the end of the list of blocks in use.
const NONE: usize = usize::MAX;

/// A pool that grows at its top: the blocks in use as a list in address order (block `i` is
/// buffer `i`; block `n`, of size 0 at offset 0, heads the list), and the free gaps between
/// them, ordered so that the first that fits is the smallest, the lowest on ties.
struct Pool<'p> {
    sizes: &'p [u64],
    offsets: Vec<u64>,
    footprint: u64,
    /// The blocks below and above each block in use (`NONE` above the top block).
    below: Vec<usize>,
    above: Vec<usize>,
    /// The highest block in use (the head when none is).
    top: usize,
    /// `(length, start, block below)` of each non-empty gap between two blocks in use.
    gaps: BTreeSet<(u64, u64, usize)>,
}

impl<'p> Pool<'p> {
    fn new(prep: &'p Prepared) -> Pool<'p> {
        let n = prep.len();
        Pool {
            sizes: &prep.sizes,
            offsets: vec![0; n],
            footprint: 0,
            below: vec![NONE; n + 1],
            above: vec![NONE; n + 1],
            top: n,
            gaps: BTreeSet::new(),
        }
    }

    /// Where block `b` ends (the head ends at 0).
    fn end(&self, b: usize) -> u64 {
        self.sizes.get(b).map_or(0, |&size| self.offsets[b] + size)
    }

    /// Places buffer `i` at the start of the smallest gap that fits, else at the top.
    fn take(&mut self, i: usize) {
        let size = self.sizes[i];
        let below = match self.gaps.range((size, 0, 0)..).next().copied() {
            Some(gap @ (length, start, below)) => {
                self.gaps.remove(&gap);
                if length > size {
                    self.gaps.insert((length - size, start + size, i));
                }
                below
            }
            None => self.top,
        };
        self.offsets[i] = self.end(below);
        let above = self.above[below];
        (self.below[i], self.above[i], self.above[below]) = (below, above, i);
        match above {
            NONE => self.top = i,
            _ => self.below[above] = i,
        }
        self.footprint = self.footprint.max(self.end(i));
    }

    /// Frees buffer `i`'s block: the gaps on either side and the block become one gap, or part
    /// of the free top.
    fn free(&mut self, i: usize) {
        let (below, above) = (self.below[i], self.above[i]);
        let low = self.end(below);
        if self.offsets[i] > low {
            self.gaps.remove(&(self.offsets[i] - low, low, below));
        }
        self.above[below] = above;
        if above == NONE {
            self.top = below;
            return;
        }
        self.below[above] = below;
        let high = self.end(i);
        if self.offsets[above] > high {
            self.gaps.remove(&(self.offsets[above] - high, high, i));
        }
        self.gaps.insert((self.offsets[above] - low, low, below));
    }
}
