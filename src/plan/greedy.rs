//! The greedy planners: place buffers one by one, in a fixed order, into a gap left by the
//! buffers already placed that are resident at the same time.
//!
//! For buffer `i` (aligned size `s_i`, resident time `T_i` = its lifetime `[lower_i, upper_i)`
//! minus its absence windows) let `P_i` be the placed buffers `j` with `T_j ∩ T_i ≠ ∅`. The
//! *gaps* of `i` are the maximal byte ranges free of every `[offset_j, offset_j + s_j)`,
//! `j ∈ P_i`; the last one, above the highest `offset_j + s_j`, is unbounded. [`Fit::Best`]
//! puts `i` at the start of the smallest bounded gap of length `≥ s_i` (lowest offset on
//! ties), else at the start of the unbounded one; [`Fit::First`] at the start of the lowest gap
//! of length `≥ s_i`. Either way `i` overlaps no buffer of `P_i`, so the result satisfies
//! `overlapping resident times ⇒ disjoint ranges` by construction (and [`super::validate`]
//! checks it independently).
//!
//! **Absences**: a buffer is recorded in the [`Timeline`] once per resident interval (its one
//! offset, its range taken only while resident), and its query is the union of the queries of
//! its resident intervals. So a buffer placed later can take the range of an absent one, and a
//! buffer with a window can be placed over buffers that live only inside that window. Without
//! windows a buffer is one interval: the same work as before.
//!
//! SmartPool (Zhang et al.) is [`Order::SizeDesc`] + [`Fit::Best`]: size descending, ties by
//! longer lifetime, then id.
//!
//! **Cost**: `P_i` is never enumerated (on real traces it holds hundreds to thousands of
//! buffers). The [`Timeline`] (a segment tree over time whose nodes keep *merged* byte ranges)
//! returns, in O(log m) node visits, `k_i ≤ 2 log m` sorted lists whose union is exactly the
//! bytes taken during `T_i` (per resident interval); merging them gives the gaps. A run costs
//! O(n log n + Σ_i (k_i · R_i + K_i)), where `K_i` is the total length of the lists and `R_i`
//! the number of maximal taken runs (on the traces measured, `R_i` ≈ 10–35 and `K_i` ≈ 140 on
//! average, against `|P_i|` in the thousands). 100k buffers plan in about 0.4 s
//! ([`super::bench_scaling`]); a pathological pool, fragmented into thousands of runs at every
//! instant, costs more (the report of the scaling benchmark says how much).

use std::cmp::Reverse;

use super::timeline::{ListRef, Timeline, span};
use super::{Alignment, Instance, Method, Outcome, PlanError, align};

/// How a greedy planner chooses among the gaps that fit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fit {
    /// The smallest gap that fits (lowest offset on ties); the top if none does.
    Best,
    /// The lowest gap that fits.
    First,
}

impl Fit {
    pub fn name(self) -> &'static str {
        match self {
            Fit::Best => "best-fit",
            Fit::First => "first-fit",
        }
    }
}

/// The order in which a greedy planner places buffers. Every order breaks its remaining ties
/// by buffer id, so a plan is a pure function of the instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Order {
    /// Size descending, then longer lifetime first (SmartPool's order).
    SizeDesc,
    /// Lifetime length (`upper - lower`) descending, then size descending.
    LengthDesc,
    /// Area `size × length` descending, then size descending.
    AreaDesc,
    /// The most contended first: descending peak of the live bytes during the buffer's
    /// lifetime (MiniMalloc's "total"), then size descending.
    ContentionDesc,
    /// Birth (`lower`) ascending, then size descending: what an online allocator sees.
    Birth,
    /// Death (`upper`) descending, then size descending.
    DeathDesc,
}

impl Order {
    pub const ALL: [Order; 6] = [
        Order::SizeDesc,
        Order::LengthDesc,
        Order::AreaDesc,
        Order::ContentionDesc,
        Order::Birth,
        Order::DeathDesc,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Order::SizeDesc => "size",
            Order::LengthDesc => "length",
            Order::AreaDesc => "area",
            Order::ContentionDesc => "contention",
            Order::Birth => "birth",
            Order::DeathDesc => "death",
        }
    }
}

/// An instance reduced to what the placers need: aligned sizes and resident intervals as
/// ranges of elementary time segments.
pub(crate) struct Prepared {
    /// Aligned sizes, instance order; their sum fits in a `u64`.
    pub(crate) sizes: Vec<u64>,
    /// `[from, to)` segment range of each buffer's lifetime.
    pub(crate) segs: Vec<(usize, usize)>,
    /// When some buffer has absence windows: the resident segment ranges of buffer `i` are
    /// `pieces[piece_start[i]..piece_start[i + 1]]` (sorted, disjoint). Both empty otherwise,
    /// and then [`Prepared::resident`] is `segs[i]` alone.
    piece_start: Vec<usize>,
    pieces: Vec<(usize, usize)>,
    /// Number of elementary segments (at least 1).
    pub(crate) segments: usize,
    /// Peak of the aligned live bytes: the lower bound.
    pub(crate) lower_bound: u64,
    /// The pool granularity `sizes` were rounded to, which every offset must respect too.
    pub(crate) alignment: Alignment,
}

impl Prepared {
    pub(crate) fn new(instance: &Instance, alignment: Alignment) -> Result<Prepared, PlanError> {
        let sizes = align::aligned_sizes(instance, alignment).ok_or(PlanError::TooLarge)?;
        let mut points: Vec<u64> = Vec::with_capacity(2 * instance.len());
        for b in instance.buffers() {
            points.push(b.lower);
            points.push(b.upper);
        }
        for i in 0..instance.len() {
            for &(from, to) in instance.absences(i) {
                points.push(from);
                points.push(to);
            }
        }
        points.sort_unstable();
        points.dedup();
        let index = |t: u64| points.partition_point(|&p| p < t);
        let segs: Vec<(usize, usize)> = instance
            .buffers()
            .iter()
            .map(|b| (index(b.lower), index(b.upper)))
            .collect();
        let (mut piece_start, mut pieces) = (Vec::new(), Vec::new());
        if instance.has_absences() {
            piece_start.reserve(instance.len() + 1);
            for i in 0..instance.len() {
                piece_start.push(pieces.len());
                pieces.extend(instance.resident(i).map(|(l, u)| (index(l), index(u))));
            }
            piece_start.push(pieces.len());
        }
        let segments = points.len().saturating_sub(1).max(1);
        let lower_bound = align::peak_of(instance, &sizes);
        Ok(Prepared {
            sizes,
            segs,
            piece_start,
            pieces,
            segments,
            lower_bound,
            alignment,
        })
    }

    pub(crate) fn len(&self) -> usize {
        self.sizes.len()
    }

    /// Whether some buffer has absence windows (more than one resident range).
    pub(crate) fn has_absences(&self) -> bool {
        !self.piece_start.is_empty()
    }

    /// The resident segment ranges of buffer `i`: sorted, disjoint, non-empty; its lifetime
    /// alone unless it has absence windows.
    #[inline]
    pub(crate) fn resident(&self, i: usize) -> &[(usize, usize)] {
        if self.piece_start.is_empty() {
            std::slice::from_ref(&self.segs[i])
        } else {
            &self.pieces[self.piece_start[i]..self.piece_start[i + 1]]
        }
    }

    /// Bytes resident during each elementary segment.
    pub(crate) fn live_per_segment(&self) -> Vec<u64> {
        let mut diff = vec![0i128; self.segments + 1];
        for i in 0..self.len() {
            for &(from, to) in self.resident(i) {
                diff[from] += i128::from(self.sizes[i]);
                diff[to] -= i128::from(self.sizes[i]);
            }
        }
        let mut live = Vec::with_capacity(self.segments);
        let mut acc = 0i128;
        for d in &diff[..self.segments] {
            acc += d;
            live.push(acc as u64);
        }
        live
    }

    /// For each buffer, the peak of the resident bytes over its resident intervals (a sparse
    /// table of maxima over the segments: O(m log m) build, O(1) per interval).
    pub(crate) fn contention(&self) -> Vec<u64> {
        let live = self.live_per_segment();
        let mut table = vec![live];
        let mut width = 1;
        while 2 * width <= self.segments {
            let prev = &table[table.len() - 1];
            let next: Vec<u64> = (0..=self.segments - 2 * width)
                .map(|i| prev[i].max(prev[i + width]))
                .collect();
            table.push(next);
            width *= 2;
        }
        let peak = |(from, to): (usize, usize)| {
            let len = to - from;
            let level = (usize::BITS - 1 - len.leading_zeros()) as usize;
            let w = 1usize << level;
            table[level][from].max(table[level][to - w])
        };
        (0..self.len())
            .map(|i| self.resident(i).iter().map(|&r| peak(r)).max().unwrap_or(0))
            .collect()
    }
}

/// The placement order of `order` on `instance` (indices into the instance).
pub(crate) fn order_indices(instance: &Instance, prep: &Prepared, order: Order) -> Vec<usize> {
    let bufs = instance.buffers();
    let mut idx: Vec<usize> = (0..bufs.len()).collect();
    let len = |i: usize| instance.resident_length(i);
    let size = |i: usize| prep.sizes[i];
    match order {
        Order::SizeDesc => {
            idx.sort_unstable_by_key(|&i| (Reverse(size(i)), Reverse(len(i)), bufs[i].id))
        }
        Order::LengthDesc => {
            idx.sort_unstable_by_key(|&i| (Reverse(len(i)), Reverse(size(i)), bufs[i].id))
        }
        Order::AreaDesc => idx.sort_unstable_by_key(|&i| {
            let area = u128::from(size(i)) * u128::from(len(i));
            (Reverse(area), Reverse(size(i)), bufs[i].id)
        }),
        Order::ContentionDesc => {
            let c = prep.contention();
            idx.sort_unstable_by_key(|&i| (Reverse(c[i]), Reverse(size(i)), bufs[i].id))
        }
        Order::Birth => {
            idx.sort_unstable_by_key(|&i| (bufs[i].lower, Reverse(size(i)), bufs[i].id))
        }
        Order::DeathDesc => {
            idx.sort_unstable_by_key(|&i| (Reverse(bufs[i].upper), Reverse(size(i)), bufs[i].id))
        }
    }
    idx
}

/// One greedy run: `order` with `fit`.
pub(crate) fn run(instance: &Instance, prep: &Prepared, order: Order, fit: Fit) -> Outcome {
    let idx = order_indices(instance, prep, order);
    let (offsets, footprint) = place(prep, &idx, fit);
    Outcome {
        offsets,
        footprint,
        method: Method::Greedy { order, fit },
    }
}

/// Every (order, fit) but `incumbent`'s own, each replacing the incumbent only if strictly
/// smaller; stops as soon as the lower bound is met.
pub(crate) fn best_of(instance: &Instance, prep: &Prepared, incumbent: Outcome) -> Outcome {
    let skip = incumbent.method;
    let mut best = incumbent;
    for order in Order::ALL {
        for fit in [Fit::Best, Fit::First] {
            if best.footprint == prep.lower_bound {
                return best;
            }
            if skip == (Method::Greedy { order, fit }) {
                continue;
            }
            let candidate = run(instance, prep, order, fit);
            if candidate.footprint < best.footprint {
                best = candidate;
            }
        }
    }
    best
}

/// Places the buffers in `order` with `fit`; returns the offsets (instance order) and the
/// footprint. `order` must be a permutation of `0..n`.
pub(crate) fn place(prep: &Prepared, order: &[usize], fit: Fit) -> (Vec<u64>, u64) {
    let mut offsets = vec![0u64; prep.len()];
    let mut timeline = Timeline::new(prep.segments);
    let mut refs: Vec<ListRef> = Vec::new();
    let mut scratch = (Vec::new(), Vec::new());
    let mut footprint = 0u64;
    for &i in order {
        let size = prep.sizes[i];
        refs.clear();
        // The bytes taken during any resident interval (the lists of several intervals may
        // repeat a node: harmless, the union absorbs it).
        for &(from, to) in prep.resident(i) {
            timeline.taken(from, to, &mut refs);
        }
        let offset = choose_gap(&timeline, &refs, &mut scratch, size, fit);
        offsets[i] = offset;
        // Taken only while resident: an absence window leaves the range free for others.
        for &(from, to) in prep.resident(i) {
            timeline.insert(from, to, offset, offset + size);
        }
        footprint = footprint.max(offset + size);
    }
    (offsets, footprint)
}

/// Two buffers of byte ranges that [`choose_gap`] merges into, in turn.
type Scratch = (Vec<(u64, u64)>, Vec<(u64, u64)>);

/// The offset `fit` picks for `size` bytes among the gaps of the union of the lists `refs`
/// (each sorted by start and internally disjoint).
///
/// The union is built by merging one list at a time into a sorted, disjoint accumulator (two
/// scratch buffers used in turn): O(k · R + K) for k lists of K ranges in all whose union has
/// R ranges. The lists of one query mostly cover the same bytes (the pool is reused over
/// time), so R is much smaller than K and linear merges beat a sort or a heap of heads.
fn choose_gap(
    timeline: &Timeline,
    refs: &[ListRef],
    scratch: &mut Scratch,
    size: u64,
    fit: Fit,
) -> u64 {
    let (acc, tmp) = scratch;
    acc.clear();
    for &r in refs {
        let list = timeline.list(r);
        if acc.is_empty() {
            acc.extend_from_slice(list);
            continue;
        }
        if list.len() * 4 <= acc.len() {
            // A short list into a long union: splice each range in place (binary search and a
            // short move), as `IntervalSet::insert` does, instead of copying the union.
            for &(start, end) in list {
                let (first, last) = span(acc, start, end);
                if first == last {
                    acc.insert(first, (start, end));
                } else {
                    let merged = (start.min(acc[first].0), end.max(acc[last - 1].1));
                    acc[first] = merged;
                    acc.drain(first + 1..last);
                }
            }
            continue;
        }
        tmp.clear();
        union_into(acc, list, tmp);
        std::mem::swap(acc, tmp);
    }
    let mut cursor = 0u64; // everything below `cursor` is taken or examined
    let mut best: Option<(u64, u64)> = None; // (gap length, offset)
    for &(start, end) in acc.iter() {
        if start > cursor {
            let gap = start - cursor;
            if gap >= size {
                match fit {
                    Fit::First => return cursor,
                    Fit::Best => {
                        if best.is_none_or(|(g, _)| gap < g) {
                            best = Some((gap, cursor));
                            if gap == size {
                                return cursor; // an exact fit: nothing can be better
                            }
                        }
                    }
                }
            }
        }
        cursor = cursor.max(end);
    }
    best.map_or(cursor, |(_, offset)| offset)
}

/// `out = a ∪ b` for sorted, internally disjoint lists of ranges; `out` is sorted and disjoint
/// (overlapping or touching ranges joined).
fn union_into(a: &[(u64, u64)], b: &[(u64, u64)], out: &mut Vec<(u64, u64)>) {
    let (mut i, mut j) = (0, 0);
    loop {
        let next = match (a.get(i), b.get(j)) {
            (Some(&x), Some(&y)) => {
                if x.0 <= y.0 {
                    i += 1;
                    x
                } else {
                    j += 1;
                    y
                }
            }
            (Some(&x), None) => {
                i += 1;
                x
            }
            (None, Some(&y)) => {
                j += 1;
                y
            }
            (None, None) => return,
        };
        match out.last_mut() {
            Some(last) if next.0 <= last.1 => last.1 = last.1.max(next.1),
            _ => out.push(next),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gap_choice() {
        // Taken [10,20) [25,30) [38,40) during segment 0, split over two overlapping lists.
        // Gaps: [0,10) len 10, [20,25) len 5, [30,38) len 8, top from 40.
        let mut t = Timeline::new(2);
        t.insert(0, 1, 10, 20);
        t.insert(0, 2, 25, 30);
        t.insert(0, 1, 38, 40);
        t.insert(1, 2, 12, 18);
        let mut refs = Vec::new();
        t.taken(0, 2, &mut refs);
        assert!(refs.len() >= 2);
        let mut scratch = (Vec::new(), Vec::new());
        let mut pick = |size, fit| choose_gap(&t, &refs, &mut scratch, size, fit);
        assert_eq!(pick(5, Fit::Best), 20);
        assert_eq!(pick(6, Fit::Best), 30);
        assert_eq!(pick(9, Fit::Best), 0);
        assert_eq!(pick(11, Fit::Best), 40);
        assert_eq!(pick(5, Fit::First), 0);
        assert_eq!(pick(11, Fit::First), 40);
        assert_eq!(choose_gap(&t, &[], &mut scratch, 7, Fit::Best), 0);
    }
}
