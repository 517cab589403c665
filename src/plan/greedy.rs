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
//! **Peak-first orders** ([`Order::PeakBirth`] and the three after it) place the buffers
//! resident at each part's peak of resident bytes first, as one stack, so that peak meets `LB`
//! by construction, and then the rest; the stacking order decides where ranges free up around
//! the peak (see `peak_first`). On real operator graphs they meet `LB` where every other order
//! fragments around the long-lived buffers; the search runs them early, each only while it may
//! meet `LB` ([`meeting_lb`]).
//!
//! **Cost**: `P_i` is never enumerated (on real traces it holds hundreds to thousands of
//! buffers). The [`Timeline`] (a segment tree over time whose nodes keep *merged* byte ranges)
//! returns, in O(log m) node visits, `k_i ≤ 2 log m` sorted lists whose union is exactly the
//! bytes taken during `T_i` (per resident interval); merging them gives the gaps. A run costs
//! O(n log n + Σ_i (k_i · R_i + K_i)), where `K_i` is the total length of the lists and `R_i`
//! the number of maximal taken runs (on the traces measured, `R_i` ≈ 10–35 and `K_i` ≈ 140 on
//! average, against `|P_i|` in the thousands); merging those lists is most of the time.
//!
//! **Parts**: time splits into parts at every instant no lifetime crosses (between training
//! iterations, typically). Buffers of different parts never meet, so each part is placed on a
//! timeline of its own, in the same relative order: the same placement (a test checks it
//! against a pairwise reference), but each timeline is small enough to stay in cache, which
//! halves the time on multi-iteration instances. 100k buffers (15 iterations) plan in about
//! 0.2 s ([`super::bench_scaling`]; 0.45 s on one timeline); a pathological pool, fragmented
//! into thousands of runs at every instant, costs more (the report of the scaling benchmark
//! says how much).

use std::cmp::Reverse;
use std::time::Duration;

use super::timeline::{ListRef, Timeline, span};
use super::{Alignment, Cutoff, Instance, Method, Outcome, PlanError, align};

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
    /// Peak first: the buffers resident at their part's peak of resident bytes placed first,
    /// stacked by birth (the earliest born lowest), then the others by contention descending.
    /// Every peak-first order meets `LB` at that peak by construction (see `peak_first`).
    PeakBirth,
    /// Peak first, stacked by death descending (the last to die lowest), then the others by
    /// contention descending.
    PeakDeath,
    /// Peak first, stacked by the shorter side of their lifetime around the peak, descending
    /// (the longest-lived on both sides lowest), then the others by size descending.
    PeakMiddle,
    /// Peak first, stacked by size descending, then the others by their distance in time from
    /// the peak, ascending (outward from it).
    PeakSize,
}

impl Order {
    pub const ALL: [Order; 10] = [
        Order::SizeDesc,
        Order::LengthDesc,
        Order::AreaDesc,
        Order::ContentionDesc,
        Order::Birth,
        Order::DeathDesc,
        Order::PeakBirth,
        Order::PeakDeath,
        Order::PeakMiddle,
        Order::PeakSize,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Order::SizeDesc => "size",
            Order::LengthDesc => "length",
            Order::AreaDesc => "area",
            Order::ContentionDesc => "contention",
            Order::Birth => "birth",
            Order::DeathDesc => "death",
            Order::PeakBirth => "peak-birth",
            Order::PeakDeath => "peak-death",
            Order::PeakMiddle => "peak-middle",
            Order::PeakSize => "peak-size",
        }
    }
}

/// An instance reduced to what the placers need: aligned sizes and resident intervals as
/// ranges of elementary time segments.
#[derive(Clone)]
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
    /// The *parts* of time: maximal segment ranges `[from, to)` whose boundaries no lifetime
    /// crosses (in order), and the part of each buffer's lifetime. Buffers of different parts
    /// never meet, so each part is placed on a timeline of its own (see [`place`]).
    parts: Vec<(usize, usize)>,
    part_of: Vec<usize>,
    /// Peak of the aligned live bytes: the lower bound.
    pub(crate) lower_bound: u64,
    /// Peak of the live bytes as given (unaligned).
    pub(crate) unaligned_peak: u64,
    /// The pool granularity `sizes` were rounded to, which every offset must respect too.
    pub(crate) alignment: Alignment,
    /// A coarser grid some buffers' offsets must lie on ([`Prepared::on_grid`]; the greedy runs
    /// and the exact searches' gravity respect it): 1 for every buffer, or empty when none has
    /// one.
    grid: Vec<u64>,
    /// The coarsest of those grids (1 without one): a placement moved by a multiple of it keeps
    /// every buffer on its grid. Kept, not derived: the exact search asks at every part it opens.
    grid_period: u64,
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
        let parts = parts(&segs, segments);
        let part_of = segs
            .iter()
            .map(|&(from, _)| parts.partition_point(|&(start, _)| start <= from) - 1)
            .collect();
        let mut prep = Prepared {
            sizes,
            segs,
            piece_start,
            pieces,
            segments,
            parts,
            part_of,
            lower_bound: 0,
            unaligned_peak: 0,
            alignment,
            grid: Vec::new(),
            grid_period: 1,
        };
        // Peaks over the segments: O(n + m), where a sweep over sorted events would sort.
        prep.lower_bound = prep.live_per_segment().into_iter().max().unwrap_or(0);
        let buffers = instance.buffers();
        prep.unaligned_peak = prep
            .resident_per_segment(|i| buffers[i].size)
            .into_iter()
            .max()
            .unwrap_or(0);
        Ok(prep)
    }

    pub(crate) fn len(&self) -> usize {
        self.sizes.len()
    }

    /// The buffers `on_grid` (instance order) placed at multiples of `grid` too by the greedy
    /// runs (`grid` a multiple of the alignment: the offsets stay aligned).
    pub(crate) fn on_grid(mut self, on_grid: &[usize], grid: u64) -> Prepared {
        self.grid = vec![1; self.len()];
        for &i in on_grid {
            self.grid[i] = grid;
        }
        if !on_grid.is_empty() {
            self.grid_period = grid;
        }
        self
    }

    /// The grid buffer `i`'s offset lies on (1: the alignment alone).
    #[inline]
    fn grid_of(&self, i: usize) -> u64 {
        self.grid.get(i).copied().unwrap_or(1)
    }

    /// The lowest offset at or above `offset` where buffer `i` may lie (`offset` is aligned).
    #[inline]
    pub(crate) fn on_grid_from(&self, i: usize, offset: u64) -> u64 {
        match self.grid_of(i) {
            1 => offset,
            grid => offset.next_multiple_of(grid),
        }
    }

    /// The coarsest grid of any buffer (1 without [`Prepared::on_grid`]): a placement moved by
    /// a multiple of it keeps every buffer on its grid.
    pub(crate) fn grid_period(&self) -> u64 {
        self.grid_period
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

    /// Aligned bytes resident during each elementary segment.
    pub(crate) fn live_per_segment(&self) -> Vec<u64> {
        self.resident_per_segment(|i| self.sizes[i])
    }

    /// Bytes resident during each elementary segment, buffer `i` counting `size(i)`.
    fn resident_per_segment(&self, size: impl Fn(usize) -> u64) -> Vec<u64> {
        let mut diff = vec![0i128; self.segments + 1];
        for i in 0..self.len() {
            for &(from, to) in self.resident(i) {
                diff[from] += i128::from(size(i));
                diff[to] -= i128::from(size(i));
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

    /// Peak of the aligned bytes resident at once of the buffers of at least `min_size`
    /// aligned bytes: the lower bound of the instance they form alone.
    pub(crate) fn peak_from(&self, min_size: u64) -> u64 {
        let sizes = &self.sizes;
        let size = |i: usize| if sizes[i] >= min_size { sizes[i] } else { 0 };
        self.resident_per_segment(size)
            .into_iter()
            .max()
            .unwrap_or(0)
    }

    /// For each part of time, the first segment where its resident bytes peak.
    pub(crate) fn peak_segments(&self) -> Vec<usize> {
        let live = self.live_per_segment();
        (self.parts.iter())
            .map(|&(from, to)| (from..to).rev().max_by_key(|&t| live[t]).unwrap_or(from))
            .collect()
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

/// The parts of time (see [`Prepared`]) of lifetimes `segs` over `segments` segments: a new
/// part starts at every segment that no lifetime begun earlier reaches past. O(n + m).
pub(crate) fn parts(segs: &[(usize, usize)], segments: usize) -> Vec<(usize, usize)> {
    // far[t] = the furthest end of the lifetimes that begin at segment t.
    let mut far = vec![0usize; segments];
    for &(from, to) in segs {
        far[from] = far[from].max(to);
    }
    let mut parts: Vec<(usize, usize)> = Vec::new();
    let mut reach = 0;
    for (t, &end) in far.iter().enumerate() {
        if t >= reach {
            if let Some(last) = parts.last_mut() {
                last.1 = t;
            }
            parts.push((t, t));
        }
        reach = reach.max(end);
    }
    if let Some(last) = parts.last_mut() {
        last.1 = segments;
    }
    parts
}

/// The placement order of `order` on `instance` (indices into the instance).
pub(crate) fn order_indices(instance: &Instance, prep: &Prepared, order: Order) -> Vec<usize> {
    let bufs = instance.buffers();
    let len = |i: usize| instance.resident_length(i);
    let size = |i: usize| prep.sizes[i];
    let n = bufs.len();
    match order {
        Order::SizeDesc => sorted_by(n, |i| (Reverse(size(i)), Reverse(len(i)), bufs[i].id)),
        Order::LengthDesc => sorted_by(n, |i| (Reverse(len(i)), Reverse(size(i)), bufs[i].id)),
        Order::AreaDesc => sorted_by(n, |i| {
            let area = u128::from(size(i)) * u128::from(len(i));
            (Reverse(area), Reverse(size(i)), bufs[i].id)
        }),
        Order::ContentionDesc => {
            let c = prep.contention();
            sorted_by(n, |i| (Reverse(c[i]), Reverse(size(i)), bufs[i].id))
        }
        Order::Birth => sorted_by(n, |i| (bufs[i].lower, Reverse(size(i)), bufs[i].id)),
        Order::DeathDesc => sorted_by(n, |i| {
            (Reverse(bufs[i].upper), Reverse(size(i)), bufs[i].id)
        }),
        Order::PeakBirth | Order::PeakDeath | Order::PeakMiddle | Order::PeakSize => {
            peak_first(instance, prep, order)
        }
    }
}

/// `0..n` sorted by `key`, each key computed once (not at every comparison) and sorted beside
/// its index, where the cache holds it. Every key ends with the unique buffer id, so the order
/// is a function of the keys alone.
fn sorted_by<K: Ord>(n: usize, key: impl Fn(usize) -> K) -> Vec<usize> {
    let mut keyed: Vec<(K, usize)> = (0..n).map(|i| (key(i), i)).collect();
    keyed.sort_unstable();
    keyed.into_iter().map(|(_, i)| i).collect()
}

/// A peak-first order (see [`Order::PeakBirth`]): the buffers resident at their part's peak
/// segment by the order's stacking key, then the others by its key for the rest.
///
/// Why: at the peak every byte below `LB` is taken, so the buffers resident there must form
/// one stack without a hole, and a fit placing them first makes exactly that stack (each meets
/// all placed before it, which fill `[0, Σ)`). Which of them sit low decides where their
/// ranges free up before and after the peak: by birth, the not yet born are the top of the
/// stack at every instant before it; by death, the dead are at every instant after it. The
/// other buffers then fill those ranges. On real operator graphs, where the other orders
/// leave the buffers near the peak fragmented around the long-lived ones, this meets `LB`:
/// idealloc's IOPDDL `S_1` (peak by birth) and SOMAS `pangu_2.6B` (by size, the rest outward
/// from the peak), which every other order left at 1.0249 and 1.0076, and IOPDDL `Y_1` (by
/// birth) within 1 s (docs/BENCHMARKS.md).
fn peak_first(instance: &Instance, prep: &Prepared, order: Order) -> Vec<usize> {
    let bufs = instance.buffers();
    let peaks = prep.peak_segments();
    // The peak segment of `i`'s part, and whether `i` is resident then.
    let peak = |i: usize| {
        let t = peaks[prep.part_of[i]];
        let resident = (prep.resident(i).iter()).any(|&(from, to)| from <= t && t < to);
        (t, resident)
    };
    let contention =
        matches!(order, Order::PeakBirth | Order::PeakDeath).then(|| prep.contention());
    let size = |i: usize| prep.sizes[i];
    sorted_by(prep.len(), |i| {
        let (from, to) = (prep.segs[i].0 as u64, prep.segs[i].1 as u64);
        let (t, at_peak) = peak(i);
        let t = t as u64;
        // Ascending, like the whole key.
        let key = match (order, at_peak) {
            (Order::PeakBirth, true) => from,
            (Order::PeakDeath, true) => u64::MAX - to,
            // The shorter side of its lifetime around the peak, longest first.
            (Order::PeakMiddle, true) => u64::MAX - (t - from).min(to - t),
            (Order::PeakSize, true) | (Order::PeakMiddle, false) => u64::MAX - size(i),
            // Outward from the peak (0 for a buffer absent at the peak it lives across).
            (Order::PeakSize, false) if to <= t => t - to,
            (Order::PeakSize, false) => from.saturating_sub(t),
            (_, _) => u64::MAX - contention.as_ref().map_or(0, |c| c[i]),
        };
        (!at_peak, key, Reverse(size(i)), bufs[i].id)
    })
}

/// One greedy run: `order` with `fit`, to completion.
pub(crate) fn run(instance: &Instance, prep: &Prepared, order: Order, fit: Fit) -> Outcome {
    let idx = order_indices(instance, prep, order);
    let (offsets, footprint) = place(prep, &idx, fit);
    Outcome {
        offsets,
        footprint,
        method: Method::Greedy { order, fit },
    }
}

/// The peak-first runs, in the order the search tries them.
pub(crate) const PEAK_RUNS: [(Order, Fit); 4] = [
    (Order::PeakBirth, Fit::Best),
    (Order::PeakDeath, Fit::Best),
    (Order::PeakMiddle, Fit::First),
    (Order::PeakSize, Fit::Best),
];

/// Every order of [`Order::ALL`] with each fit, in that order: the runs of best-of.
pub(crate) fn every_run() -> impl Iterator<Item = (Order, Fit)> {
    Order::ALL
        .into_iter()
        .flat_map(|order| [(order, Fit::Best), (order, Fit::First)])
}

/// The greedy `runs`, each replacing the incumbent only if strictly smaller; stops as soon as
/// the lower bound is met or `cutoff` leaves less than an eighth of `greedy_run` (the time one
/// greedy run took on this instance; a run cut short is not a candidate). Consecutive runs of
/// one order share its indices.
///
/// Why the eighth: a run's order is computed before it reads the clock (13 ms for the
/// contention order of 125,920 buffers, which made a 1 s search end at 1.013–1.029 s).
pub(crate) fn best_of(
    instance: &Instance,
    prep: &Prepared,
    incumbent: Outcome,
    runs: impl IntoIterator<Item = (Order, Fit)>,
    (cutoff, greedy_run): (Cutoff, Duration),
) -> Outcome {
    let mut best = incumbent;
    let mut indices: Option<(Order, Vec<usize>)> = None;
    for (order, fit) in runs {
        if best.footprint == prep.lower_bound || !cutoff.allows(greedy_run / 8) {
            break;
        }
        let idx = match indices.take() {
            Some((same, idx)) if same == order => idx,
            _ => order_indices(instance, prep, order),
        };
        let Some((offsets, footprint)) = place_below(prep, &idx, fit, (cutoff, best.footprint))
        else {
            if cutoff.passed() {
                break;
            }
            indices = Some((order, idx));
            continue;
        };
        if footprint < best.footprint {
            best = Outcome {
                offsets,
                footprint,
                method: Method::Greedy { order, fit },
            };
        }
        indices = Some((order, idx));
    }
    best
}

/// The first of `runs` that meets the lower bound, each abandoned as soon as its footprint
/// exceeds it (most that fail do so early: see `search.rs`); `None` if none does before
/// `cutoff` leaves less than an eighth of `greedy_run`, as in [`best_of`].
pub(crate) fn meeting_lb(
    instance: &Instance,
    prep: &Prepared,
    runs: impl IntoIterator<Item = (Order, Fit)>,
    cut: (Cutoff, Duration),
) -> Option<Outcome> {
    // Best-of from an incumbent just above `LB`: every run is abandoned there, so only one at
    // `LB` replaces it, and best-of stops at the first.
    let above = Outcome {
        offsets: Vec::new(),
        footprint: prep.lower_bound.checked_add(1)?,
        method: Method::Floor,
    };
    let met = best_of(instance, prep, above, runs, cut);
    (met.footprint == prep.lower_bound).then_some(met)
}

/// Places the buffers in `order` with `fit`; returns the offsets (instance order) and the
/// footprint. `order` must be a permutation of `0..n`.
pub(crate) fn place(prep: &Prepared, order: &[usize], fit: Fit) -> (Vec<u64>, u64) {
    let mut placer = Placer::new(prep, fit);
    for i in by_part(prep, order) {
        placer.put(i);
    }
    (placer.offsets, placer.footprint)
}

/// [`place`], abandoned (`None`) once `cutoff` passes; the clock is read every
/// [`CHECK_EVERY`] buffers.
pub(crate) fn place_until(
    prep: &Prepared,
    order: &[usize],
    fit: Fit,
    cutoff: Cutoff,
) -> Option<(Vec<u64>, u64)> {
    place_below(prep, order, fit, (cutoff, u64::MAX))
}

/// [`place_until`], also abandoned once the footprint reaches `ceiling`.
pub(crate) fn place_below(
    prep: &Prepared,
    order: &[usize],
    fit: Fit,
    cut: (Cutoff, u64),
) -> Option<(Vec<u64>, u64)> {
    place_around(prep, &[], order, fit, cut)
}

/// [`place_below`] around `fixed` buffers: each `(i, offset)` of `fixed` is taken at its
/// offset first, then the buffers of `order` (the others) are placed in that order with `fit`.
/// Together they must be a permutation of `0..n`, and the fixed offsets a valid placement of
/// the fixed buffers (as those of a plan of them are).
pub(crate) fn place_around(
    prep: &Prepared,
    fixed: &[(usize, u64)],
    order: &[usize],
    fit: Fit,
    (cutoff, ceiling): (Cutoff, u64),
) -> Option<(Vec<u64>, u64)> {
    let mut placer = Placer::new(prep, fit);
    let mut at = vec![None; prep.len()];
    for &(i, offset) in fixed {
        at[i] = Some(offset);
    }
    // Part by part, each part's fixed buffers before its others (`by_part` keeps the order).
    let all: Vec<usize> = fixed
        .iter()
        .map(|&(i, _)| i)
        .chain(order.iter().copied())
        .collect();
    for (k, i) in by_part(prep, &all).into_iter().enumerate() {
        if k % CHECK_EVERY == 0 && cutoff.passed() {
            free_off_the_clock(placer.timeline);
            return None;
        }
        match at[i] {
            Some(offset) => placer.take(i, offset),
            None => placer.put(i),
        }
        if placer.footprint >= ceiling {
            free_off_the_clock(placer.timeline);
            return None;
        }
    }
    Some((placer.offsets, placer.footprint))
}

/// Frees a cut run's timeline on a thread of its own (inline if none can start), so that the
/// caller returns by its deadline: on one operator graph of 60k–100k buffers it holds millions
/// of small sets, and freeing them took 7–20 ms after the deadline (`bench plan --family iopddl`
/// at 100 and 250 ms: 107 and 265 ms, over the budget's 5 %).
fn free_off_the_clock(timeline: Timeline) {
    // A failed spawn drops the closure, and the timeline with it, here.
    let _ = std::thread::Builder::new()
        .name("itermem-free".into())
        .spawn(move || drop(timeline));
}

/// Buffers placed between two readings of the clock by [`place_until`]: about 0.1 ms of work
/// on the scaling instance (2 µs a buffer), so a cut run stops that close to its cutoff.
const CHECK_EVERY: usize = 64;

/// `order` regrouped part by part (parts in time order), keeping the relative order within each
/// part: a counting sort, O(n + parts). Since buffers of different parts never meet, every
/// buffer sees the same placed buffers as in `order` itself, so the placement is the same; and
/// each part needs only a timeline over its own segments, small enough to stay in cache.
fn by_part(prep: &Prepared, order: &[usize]) -> Vec<usize> {
    let mut start = vec![0usize; prep.parts.len() + 1];
    for &i in order {
        start[prep.part_of[i] + 1] += 1;
    }
    for p in 0..prep.parts.len() {
        start[p + 1] += start[p];
    }
    let mut grouped = vec![0usize; order.len()];
    for &i in order {
        let slot = &mut start[prep.part_of[i]];
        grouped[*slot] = i;
        *slot += 1;
    }
    grouped
}

/// The state of one greedy run: the placements so far and the timeline of the part being
/// placed. Buffers must come part by part ([`by_part`]).
struct Placer<'p> {
    prep: &'p Prepared,
    fit: Fit,
    offsets: Vec<u64>,
    footprint: u64,
    /// The part whose timeline `timeline` is (`usize::MAX` before the first buffer).
    part: usize,
    timeline: Timeline,
    refs: Vec<ListRef>,
    scratch: Scratch,
}

impl<'p> Placer<'p> {
    fn new(prep: &'p Prepared, fit: Fit) -> Placer<'p> {
        Placer {
            prep,
            fit,
            offsets: vec![0u64; prep.len()],
            footprint: 0,
            part: usize::MAX,
            timeline: Timeline::new(1),
            refs: Vec::new(),
            scratch: (Vec::new(), Vec::new()),
        }
    }

    /// Places buffer `i` at the gap `fit` picks among the bytes taken while it is resident.
    fn put(&mut self, i: usize) {
        let prep = self.prep;
        let base = self.enter_part(i);
        self.refs.clear();
        // The bytes taken during any resident interval (the lists of several intervals may
        // repeat a node: harmless, the union absorbs it).
        for &(from, to) in prep.resident(i) {
            self.timeline.taken(from - base, to - base, &mut self.refs);
        }
        let (size, fit) = (prep.sizes[i], self.fit);
        let offset = match prep.grid_of(i) {
            1 => choose_gap(&self.timeline, &self.refs, &mut self.scratch, size, fit),
            grid => choose_gap_on(
                &self.timeline,
                &self.refs,
                &mut self.scratch,
                (size, grid),
                fit,
            ),
        };
        self.insert(i, offset, base);
    }

    /// Places buffer `i` at `offset`, which the caller has checked is free while it is
    /// resident.
    fn take(&mut self, i: usize, offset: u64) {
        let base = self.enter_part(i);
        self.insert(i, offset, base);
    }

    /// Records buffer `i` at `offset` on the timeline of its part, which begins at segment
    /// `base`.
    fn insert(&mut self, i: usize, offset: u64, base: usize) {
        let prep = self.prep;
        let size = prep.sizes[i];
        self.offsets[i] = offset;
        // Taken only while resident: an absence window leaves the range free for others.
        for &(from, to) in prep.resident(i) {
            self.timeline
                .insert(from - base, to - base, offset, offset + size);
        }
        self.footprint = self.footprint.max(offset + size);
    }

    /// Makes the timeline that of `i`'s part (a new one when the part changes: buffers come
    /// part by part); returns the part's first segment.
    fn enter_part(&mut self, i: usize) -> usize {
        let part = self.prep.part_of[i];
        let (base, end) = self.prep.parts[part];
        if part != self.part {
            self.part = part;
            self.timeline = Timeline::new(end - base);
        }
        base
    }
}

/// Two buffers of byte ranges that [`choose_gap`] merges into, in turn.
pub(super) type Scratch = (Vec<(u64, u64)>, Vec<(u64, u64)>);

/// The offset `fit` picks for `size` bytes among the gaps of the union of the lists `refs`
/// (each sorted by start and internally disjoint).
///
/// The union is built by merging one list at a time into a sorted, disjoint accumulator (two
/// scratch buffers used in turn): O(k · R + K) for k lists of K ranges in all whose union has
/// R ranges. The lists of one query mostly cover the same bytes (the pool is reused over
/// time), so R is much smaller than K and linear merges beat a sort or a heap of heads.
pub(super) fn choose_gap(
    timeline: &Timeline,
    refs: &[ListRef],
    scratch: &mut Scratch,
    size: u64,
    fit: Fit,
) -> u64 {
    union_of(timeline, refs, scratch);
    gap_in(&scratch.0, size, fit, |cursor| cursor)
}

/// [`choose_gap`] for a buffer of `size` bytes whose offset must be a multiple of `grid`.
fn choose_gap_on(
    timeline: &Timeline,
    refs: &[ListRef],
    scratch: &mut Scratch,
    (size, grid): (u64, u64),
    fit: Fit,
) -> u64 {
    union_of(timeline, refs, scratch);
    gap_in(&scratch.0, size, fit, |cursor| {
        cursor.next_multiple_of(grid)
    })
}

/// The union of the lists `refs` into `scratch.0`.
fn union_of(timeline: &Timeline, refs: &[ListRef], scratch: &mut Scratch) {
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
}

/// The offset `fit` picks for `size` bytes among the gaps of `taken` (sorted, disjoint), each
/// gap starting at `place(its start)` (the start itself, or the next point of a grid).
#[inline(always)]
fn gap_in(taken: &[(u64, u64)], size: u64, fit: Fit, place: impl Fn(u64) -> u64) -> u64 {
    let mut cursor = 0u64; // everything below `cursor` is taken or examined
    let mut best: Option<(u64, u64)> = None; // (gap length, offset)
    for &(start, end) in taken {
        let at = place(cursor);
        if start > at {
            let gap = start - at;
            if gap >= size {
                match fit {
                    Fit::First => return at,
                    Fit::Best => {
                        if best.is_none_or(|(g, _)| gap < g) {
                            best = Some((gap, at));
                            if gap == size {
                                return at; // an exact fit: nothing can be better
                            }
                        }
                    }
                }
            }
        }
        cursor = cursor.max(end);
    }
    best.map_or(place(cursor), |(_, offset)| offset)
}

/// `out = a ∪ b` for sorted lists of disjoint, non-touching ranges (as every list of a
/// [`Timeline`] and every union built here is); `out` is sorted, disjoint and non-touching
/// (overlapping or touching ranges joined).
///
/// The range being grown is kept apart from `out` (so the hot loop reads no memory it writes),
/// and once one list is exhausted the rest of the other is copied whole after its first ranges
/// are joined: this merge is most of the greedy planners' time.
fn union_into(a: &[(u64, u64)], b: &[(u64, u64)], out: &mut Vec<(u64, u64)>) {
    out.reserve(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    let mut current = match (a.first(), b.first()) {
        (Some(&x), Some(&y)) if x.0 <= y.0 => {
            i = 1;
            x
        }
        (_, Some(&y)) => {
            j = 1;
            y
        }
        (Some(&x), None) => {
            i = 1;
            x
        }
        (None, None) => return,
    };
    while i < a.len() && j < b.len() {
        let next = if a[i].0 <= b[j].0 {
            i += 1;
            a[i - 1]
        } else {
            j += 1;
            b[j - 1]
        };
        if next.0 <= current.1 {
            current.1 = current.1.max(next.1);
        } else {
            out.push(current);
            current = next;
        }
    }
    let rest = if i < a.len() { &a[i..] } else { &b[j..] };
    let joined = rest.partition_point(|&(start, _)| start <= current.1);
    if let Some(&(_, end)) = rest[..joined].last() {
        current.1 = current.1.max(end);
    }
    out.push(current);
    out.extend_from_slice(&rest[joined..]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Absence, Buffer};
    use crate::test_support::buffer;

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

    /// The gap rule of the module doc, from scratch: every placed buffer that is resident at a
    /// common instant (pairwise), its ranges sorted, then the same choice as [`choose_gap`].
    fn reference_place(
        instance: &Instance,
        prep: &Prepared,
        order: &[usize],
        fit: Fit,
    ) -> Vec<u64> {
        let mut offsets = vec![0u64; prep.len()];
        let mut placed: Vec<usize> = Vec::new();
        for &i in order {
            let mut taken: Vec<(u64, u64)> = placed
                .iter()
                .filter(|&&j| instance.resident_overlap(i, j).is_some())
                .map(|&j| (offsets[j], offsets[j] + prep.sizes[j]))
                .collect();
            taken.sort_unstable();
            let size = prep.sizes[i];
            let (mut cursor, mut best, mut first) = (0u64, None::<(u64, u64)>, None);
            for (start, end) in taken {
                if start > cursor && start - cursor >= size {
                    let gap = start - cursor;
                    first = first.or(Some(cursor));
                    if best.is_none_or(|(g, _)| gap < g) {
                        best = Some((gap, cursor));
                    }
                }
                cursor = cursor.max(end);
            }
            offsets[i] = match fit {
                Fit::Best => best.map_or(cursor, |(_, offset)| offset),
                Fit::First => first.unwrap_or(cursor),
            };
            placed.push(i);
        }
        offsets
    }

    /// Up to 60 buffers with short lifetimes over a long horizon, which cut time into many
    /// parts, a third of them with an absence window (a buffer's resident time is then a
    /// union of intervals), and a random alignment.
    fn random_in_parts(rng: &mut crate::rng::SplitMix64) -> (Instance, Prepared) {
        let n = 1 + rng.below(60);
        let (horizon, longest) = (10 + rng.below(300), 1 + rng.below(40));
        let mut buffers = Vec::new();
        let mut absences = Vec::new();
        for id in 0..n {
            let lower = rng.below(horizon);
            let upper = lower + 1 + rng.below(longest);
            buffers.push(Buffer {
                id,
                lower,
                upper,
                size: 1 + rng.below(100),
            });
            if upper - lower >= 3 && rng.below(3) == 0 {
                let from = rng.range(lower + 1, upper - 1);
                let to = rng.range(from + 1, upper);
                absences.push(Absence { id, from, to });
            }
        }
        let instance = Instance::with_absences(buffers, absences).unwrap();
        let alignment = Alignment::new(1 + rng.below(8)).unwrap();
        let prep = Prepared::new(&instance, alignment).unwrap();
        (instance, prep)
    }

    #[test]
    fn placements_match_the_pairwise_reference_part_by_part() {
        let mut rng = crate::rng::SplitMix64::new(13);
        let mut several_parts = 0;
        for round in 0..300 {
            let (instance, prep) = random_in_parts(&mut rng);
            several_parts += usize::from(prep.parts.len() > 1);
            for order in Order::ALL {
                let idx = order_indices(&instance, &prep, order);
                for fit in [Fit::Best, Fit::First] {
                    let want = reference_place(&instance, &prep, &idx, fit);
                    let (offsets, footprint) = place(&prep, &idx, fit);
                    assert_eq!(offsets, want, "round {round}, {order:?}, {fit:?}");
                    let top = want.iter().zip(&prep.sizes).map(|(o, s)| o + s).max();
                    assert_eq!(footprint, top.unwrap_or(0));
                    let peak_first = matches!(
                        order,
                        Order::PeakBirth | Order::PeakDeath | Order::PeakMiddle | Order::PeakSize
                    );
                    if peak_first {
                        assert_each_parts_peak_is_one_stack(&prep, &offsets);
                    }
                    let cut = place_until(&prep, &idx, fit, Cutoff::NEVER);
                    assert_eq!(cut, Some((offsets, footprint)));
                }
            }
        }
        assert!(
            several_parts > 100,
            "{several_parts} instances with several parts"
        );
    }

    /// Buffers fixed where a run put them leave the others where that run put them, part by
    /// part; fixed anywhere valid, they stay there and the plan around them is valid.
    #[test]
    fn runs_around_fixed_buffers_keep_them_and_stay_valid() {
        let mut rng = crate::rng::SplitMix64::new(17);
        for round in 0..300 {
            let (instance, prep) = random_in_parts(&mut rng);
            let idx = order_indices(&instance, &prep, Order::SizeDesc);
            let k = rng.below(idx.len() as u64 + 1) as usize;
            let (head, rest) = idx.split_at(k);
            let (offsets, footprint) = place(&prep, &idx, Fit::Best);
            let fixed: Vec<(usize, u64)> = head.iter().map(|&i| (i, offsets[i])).collect();
            let around = place_around(&prep, &fixed, rest, Fit::Best, (Cutoff::NEVER, u64::MAX));
            assert_eq!(around, Some((offsets, footprint)), "round {round}");

            // The head fixed where another order put it, the rest by first-fit.
            let (elsewhere, _) = place(
                &prep,
                &order_indices(&instance, &prep, Order::Birth),
                Fit::Best,
            );
            let fixed: Vec<(usize, u64)> = head.iter().map(|&i| (i, elsewhere[i])).collect();
            let around = place_around(&prep, &fixed, rest, Fit::First, (Cutoff::NEVER, u64::MAX));
            let (offsets, footprint) = around.unwrap();
            for &(i, offset) in &fixed {
                assert_eq!(offsets[i], offset, "round {round}");
            }
            let valid =
                crate::plan::check::validate_parts(&instance, &offsets, footprint, prep.alignment);
            assert_eq!(valid, Ok(()), "round {round}");
            let ceiling = (Cutoff::NEVER, footprint);
            assert_eq!(place_around(&prep, &fixed, rest, Fit::First, ceiling), None);
        }
    }

    /// At the peak segment of each part, the buffers resident there fill `[0, live)`.
    fn assert_each_parts_peak_is_one_stack(prep: &Prepared, offsets: &[u64]) {
        let live = prep.live_per_segment();
        for (part, t) in prep.peak_segments().into_iter().enumerate() {
            let top = (0..prep.len())
                .filter(|&i| prep.part_of[i] == part)
                .filter(|&i| (prep.resident(i).iter()).any(|&(from, to)| from <= t && t < to))
                .map(|i| offsets[i] + prep.sizes[i])
                .max();
            assert_eq!(top.unwrap_or(0), live[t], "part {part}, peak segment {t}");
        }
    }

    /// Lifetimes `[lower, upper)` and sizes with a peak of 14 at instants 1 and 2, which all
    /// but the first buffer span. Stacked by birth there, the first buffer fits below the top
    /// at instant 0; every other order, with either fit, needs more.
    fn peak_instance() -> Instance {
        let spans = [(0, 1, 4), (0, 5, 1), (0, 4, 2), (1, 3, 2)];
        let spans = spans
            .into_iter()
            .chain([(0, 4, 2), (0, 4, 3), (1, 4, 3), (0, 3, 1)]);
        let buffers = (spans.enumerate())
            .map(|(id, (lower, upper, size))| buffer(id as u64, lower, upper, size))
            .collect();
        Instance::new(buffers).unwrap()
    }

    #[test]
    fn stacking_the_peak_by_birth_meets_the_bound_where_the_other_orders_do_not() {
        let instance = peak_instance();
        let prep = Prepared::new(&instance, Alignment::NONE).unwrap();
        assert_eq!(prep.lower_bound, 14);
        for order in [Order::PeakBirth, Order::PeakMiddle] {
            for fit in [Fit::Best, Fit::First] {
                assert_eq!(run(&instance, &prep, order, fit).footprint, 14, "{order:?}");
            }
        }
        let peak_first = |order: &Order| PEAK_RUNS.iter().any(|(peak, _)| peak == order);
        for order in Order::ALL.into_iter().filter(|order| !peak_first(order)) {
            for fit in [Fit::Best, Fit::First] {
                assert!(
                    run(&instance, &prep, order, fit).footprint > 14,
                    "{order:?}"
                );
            }
        }
    }

    #[test]
    fn runs_stop_at_their_ceiling() {
        let instance = peak_instance();
        let prep = Prepared::new(&instance, Alignment::NONE).unwrap();
        let idx = order_indices(&instance, &prep, Order::SizeDesc);
        let (offsets, footprint) = place(&prep, &idx, Fit::Best);
        assert_eq!(footprint, 15);
        assert_eq!(
            place_below(&prep, &idx, Fit::Best, (Cutoff::NEVER, 15)),
            None
        );
        let below_16 = place_below(&prep, &idx, Fit::Best, (Cutoff::NEVER, 16));
        assert_eq!(below_16, Some((offsets, 15)));
        // Only runs that meet the bound count; the first that does is returned.
        let never = (Cutoff::NEVER, Duration::ZERO);
        let size_only = [(Order::SizeDesc, Fit::Best), (Order::SizeDesc, Fit::First)];
        assert!(meeting_lb(&instance, &prep, size_only, never).is_none());
        let met = meeting_lb(&instance, &prep, PEAK_RUNS, never).unwrap();
        assert_eq!(met.footprint, 14);
        let birth = Method::Greedy {
            order: Order::PeakBirth,
            fit: Fit::Best,
        };
        assert_eq!(met.method, birth);
    }

    #[test]
    fn parts_end_where_no_lifetime_crosses() {
        // [0,2) and [1,3) overlap; [3,4) starts where they end; segment [4,5) is empty;
        // [5,7) and [6,7) overlap.
        let segs = [(0, 2), (1, 3), (3, 4), (5, 7), (6, 7)];
        assert_eq!(parts(&segs, 7), vec![(0, 3), (3, 4), (4, 5), (5, 7)]);
        assert_eq!(parts(&[], 1), vec![(0, 1)]);
    }

    #[test]
    fn a_passed_cutoff_abandons_a_run() {
        let instance = Instance::new(vec![Buffer {
            id: 0,
            lower: 0,
            upper: 1,
            size: 8,
        }])
        .unwrap();
        let prep = Prepared::new(&instance, Alignment::NONE).unwrap();
        let passed = Cutoff::at(std::time::Instant::now());
        assert_eq!(place_until(&prep, &[0], Fit::Best, passed), None);
        assert_eq!(place(&prep, &[0], Fit::Best), (vec![0], 8));
    }
}
