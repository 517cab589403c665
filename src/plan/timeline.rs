//! [`Timeline`]: which byte ranges are taken by already-placed buffers during a time window,
//! without looking at every placed buffer (the structure behind the greedy planners).
//!
//! Time is compressed to the `m` elementary segments between consecutive distinct lifetime
//! endpoints; a lifetime `[lower, upper)` is a contiguous range of segments. A segment tree over
//! the segments keeps, per node `v` (time span `T(v)`), two *merged* interval sets of byte
//! ranges (sorted, pairwise disjoint, touching ranges joined). With "`B` stored at `v`" meaning
//! that `v` is one of the O(log m) canonical nodes of `B`'s segment range:
//!
//! * `cover(v) = ∪ {range(B) : B stored at v}`;
//! * `sub(v) ⊇ ∪ {range(B) : B stored at v or below}`, `sub(v) ⊆ ∪ {range(B) : B's lifetime
//!   meets T(v)}`, and `sub(parent) ⊇ sub(child)`.
//!
//! For a window `W` with canonical nodes `c_1..c_k`, the bytes taken during `W` are exactly
//! `∪_j sub(c_j) ∪ ∪_{v on the paths from the leaves of W's ends to the root} cover(v)`:
//! a buffer `B` meeting `W` is stored at some node `x` meeting `W`; either `x` lies below some
//! `c_j` (then `range(B) ⊆ sub(c_j)`) or `x` is an ancestor of some `c_j`, and every such
//! ancestor is on one of the two boundary paths. Conversely everything listed belongs to a
//! buffer meeting `W`. Insertion and query visit O(log m) nodes.
//!
//! Why merged sets: what a greedy planner needs is the *gaps* between taken ranges, and merging
//! keeps the sets short exactly where they would otherwise be long (a long window over a dense
//! pool is one or a few intervals, not the thousands of buffers that lived in it). Placements
//! are never removed, so merging is never undone.

use smallvec::SmallVec;

/// A sorted list of pairwise disjoint, non-touching half-open byte ranges `[start, end)`.
///
/// One range is stored inline (a `SmallVec` of one is as small as a `Vec`): most nodes of a
/// [`Timeline`] hold a single range, and reading it then costs no pointer chase.
#[derive(Clone, Debug, Default)]
pub(crate) struct IntervalSet {
    ranges: SmallVec<[(u64, u64); 1]>,
}

impl IntervalSet {
    /// Adds `[start, end)`, joining every range it overlaps or touches; returns whether the set
    /// changed (false when one range already held `[start, end)`).
    pub(crate) fn insert(&mut self, start: u64, end: u64) -> bool {
        let (first, last) = span(&self.ranges, start, end);
        if first == last {
            self.ranges.insert(first, (start, end));
            return true;
        }
        let merged = (
            start.min(self.ranges[first].0),
            end.max(self.ranges[last - 1].1),
        );
        if last == first + 1 && merged == self.ranges[first] {
            return false;
        }
        self.ranges[first] = merged;
        self.ranges.drain(first + 1..last);
        true
    }

    fn clear(&mut self) {
        self.ranges.clear();
    }

    pub(crate) fn ranges(&self) -> &[(u64, u64)] {
        &self.ranges
    }
}

/// The ranges of a sorted, disjoint list that `[start, end)` overlaps or touches:
/// `list[first..last]` (empty when it touches none, and then `first` is where it goes).
pub(crate) fn span(list: &[(u64, u64)], start: u64, end: u64) -> (usize, usize) {
    let first = list.partition_point(|&(_, e)| e < start);
    let last = first + list[first..].partition_point(|&(s, _)| s <= end);
    (first, last)
}

/// The segment tree described in the module doc, in the bottom-up layout: `p` = the smallest
/// power of two ≥ m, node 1 is the root, node `v` has children `2v` and `2v + 1`, and segment
/// `t` is leaf `p + t`.
pub(crate) struct Timeline {
    segments: usize,
    leaves: usize,
    cover: Vec<IntervalSet>,
    sub: Vec<IntervalSet>,
}

impl Timeline {
    pub(crate) fn new(segments: usize) -> Timeline {
        let mut timeline = Timeline {
            segments: 0,
            leaves: 0,
            cover: Vec::new(),
            sub: Vec::new(),
        };
        timeline.reset(segments);
        timeline
    }

    /// Empties the timeline and makes it one of `segments` segments, keeping its memory: the
    /// windows of `window.rs` each need a fresh timeline, hundreds a second, and allocating
    /// and freeing each one's sets cost a seventh of their moves' time (2M buffers freed on
    /// 20k `iopddl` buffers: 1.47 s, 1.26 s reusing one timeline).
    pub(crate) fn reset(&mut self, segments: usize) {
        self.segments = segments.max(1);
        self.leaves = self.segments.next_power_of_two();
        for sets in [&mut self.cover, &mut self.sub] {
            sets.truncate(2 * self.leaves);
            sets.iter_mut().for_each(IntervalSet::clear);
            sets.resize_with(2 * self.leaves, IntervalSet::default);
        }
    }

    /// Records that bytes `[start, end)` are taken during segments `[from, to)`.
    ///
    /// The canonical nodes get the range in `cover` and `sub`. Their ancestors all lie on the
    /// two paths from the leaves of `from` and `to − 1` to the root, and get it in `sub`;
    /// nodes of those paths inside the window may get it too, which is harmless (the buffer
    /// covers their time). Since `sub(parent) ⊇ sub(child)` holds throughout, a path walked
    /// upwards stops at the first node whose `sub` already contains the range (in a dense
    /// pool, usually after a level or two).
    pub(crate) fn insert(&mut self, from: usize, to: usize, start: u64, end: u64) {
        debug_assert!(from < to && to <= self.segments);
        // The paths first: a path may run through a canonical node, and must not stop there
        // before the node's ancestors have the range.
        for leaf in [from + self.leaves, to - 1 + self.leaves] {
            let mut v = leaf >> 1;
            while v >= 1 && self.sub[v].insert(start, end) {
                v >>= 1;
            }
        }
        let (mut l, mut r) = (from + self.leaves, to + self.leaves);
        while l < r {
            if l & 1 == 1 {
                self.cover[l].insert(start, end);
                self.sub[l].insert(start, end);
                l += 1;
            }
            if r & 1 == 1 {
                r -= 1;
                self.cover[r].insert(start, end);
                self.sub[r].insert(start, end);
            }
            l >>= 1;
            r >>= 1;
        }
    }

    /// Appends to `out` references to sorted lists of ranges ([`Timeline::list`]) whose union
    /// is every byte taken at some instant of segments `[from, to)` (lists may overlap): the
    /// `sub` of each canonical node and the `cover` of each node on the two boundary paths
    /// (each once).
    pub(crate) fn taken(&self, from: usize, to: usize, out: &mut Vec<ListRef>) {
        debug_assert!(from < to && to <= self.segments);
        let (mut l, mut r) = (from + self.leaves, to + self.leaves);
        while l < r {
            if l & 1 == 1 {
                self.push(ListRef::Sub(l), out);
                l += 1;
            }
            if r & 1 == 1 {
                r -= 1;
                self.push(ListRef::Sub(r), out);
            }
            l >>= 1;
            r >>= 1;
        }
        let (mut a, mut b) = ((from + self.leaves) >> 1, (to - 1 + self.leaves) >> 1);
        while a >= 1 {
            self.push(ListRef::Cover(a), out);
            if b != a {
                self.push(ListRef::Cover(b), out);
            }
            a >>= 1;
            b >>= 1;
        }
    }

    fn push(&self, r: ListRef, out: &mut Vec<ListRef>) {
        if !self.list(r).is_empty() {
            out.push(r);
        }
    }

    pub(crate) fn list(&self, r: ListRef) -> &[(u64, u64)] {
        match r {
            ListRef::Sub(node) => self.sub[node].ranges(),
            ListRef::Cover(node) => self.cover[node].ranges(),
        }
    }
}

/// One of the interval sets of a [`Timeline`] node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ListRef {
    Sub(usize),
    Cover(usize),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interval_set_merges_overlapping_and_touching() {
        let mut s = IntervalSet::default();
        s.insert(10, 20);
        s.insert(30, 40);
        s.insert(50, 60);
        assert_eq!(s.ranges(), &[(10, 20), (30, 40), (50, 60)]);
        s.insert(20, 25); // touches the first
        assert_eq!(s.ranges(), &[(10, 25), (30, 40), (50, 60)]);
        s.insert(35, 55); // bridges two
        assert_eq!(s.ranges(), &[(10, 25), (30, 60)]);
        s.insert(0, 5);
        s.insert(70, 80);
        assert_eq!(s.ranges(), &[(0, 5), (10, 25), (30, 60), (70, 80)]);
        assert!(!s.insert(32, 60)); // already held: unchanged
        assert!(s.insert(0, 100));
        assert_eq!(s.ranges(), &[(0, 100)]);
    }

    /// A random non-empty range `[a, b)` of `0..m`.
    fn random_segments(rng: &mut crate::rng::SplitMix64, m: usize) -> (usize, usize) {
        let a = rng.below(m as u64) as usize;
        (a, a + 1 + rng.below((m - a) as u64) as usize)
    }

    #[test]
    fn a_reset_timeline_answers_as_a_new_one() {
        let mut rng = crate::rng::SplitMix64::new(11);
        let mut reused = Timeline::new(40);
        for segments in [40, 9, 70, 1, 33] {
            reused.reset(segments);
            let mut fresh = Timeline::new(segments);
            for k in 0..50u64 {
                let (a, b) = random_segments(&mut rng, segments);
                let start = 7 * k;
                let end = start + 1 + rng.below(12);
                reused.insert(a, b, start, end);
                fresh.insert(a, b, start, end);
            }
            for from in 0..segments {
                for to in from + 1..=segments {
                    let lists = |t: &Timeline| {
                        let mut refs = Vec::new();
                        t.taken(from, to, &mut refs);
                        (refs.iter().map(|&r| t.list(r).to_vec())).collect::<Vec<_>>()
                    };
                    assert_eq!(
                        lists(&reused),
                        lists(&fresh),
                        "[{from}, {to}) of {segments}"
                    );
                }
            }
        }
    }

    #[test]
    fn timeline_sees_exactly_the_overlapping_ranges() {
        // Brute force against the definition on a small grid.
        let m = 13;
        let mut t = Timeline::new(m);
        let mut placed = Vec::new();
        let mut rng = crate::rng::SplitMix64::new(7);
        for k in 0..60u64 {
            let (a, b) = random_segments(&mut rng, m);
            let start = 10 * k;
            let end = start + 1 + rng.below(15);
            t.insert(a, b, start, end);
            placed.push((a, b, start, end));
            for from in 0..m {
                for to in from + 1..=m {
                    let mut refs = Vec::new();
                    t.taken(from, to, &mut refs);
                    let got: Vec<(u64, u64)> = refs
                        .iter()
                        .flat_map(|&r| t.list(r).iter().copied())
                        .collect();
                    let mut want = IntervalSet::default();
                    for &(pa, pb, s, e) in &placed {
                        if pa < to && from < pb {
                            want.insert(s, e);
                        }
                    }
                    let mut union = IntervalSet::default();
                    for (s, e) in got {
                        union.insert(s, e);
                    }
                    assert_eq!(union.ranges(), want.ranges(), "window [{from}, {to})");
                }
            }
        }
    }
}
