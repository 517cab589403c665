//! Large-neighbourhood search over windows of time: the incumbent is kept, and the buffers of
//! one window of time around a buffer at its top are freed and placed again, every other buffer
//! staying where it is (those that cross the window's edges are obstacles).
//!
//! Why: an instance too large for the exact search that does not split into small parts of
//! time either (one operator graph: the `iopddl` family of `bench.rs`, 20k–60k buffers in one
//! part, ~155 live) was left to the flat DFS and to greedy runs on the whole instance, which
//! there cost 0.1–0.7 s each (one timeline over the whole graph, its lists long): a few per
//! second, and the medians stayed at 1.0116–1.0125 of `LB` at a 1 s budget. Yet the footprint
//! is set by a few buffers at the top, and lowering one only needs the buffers near it in time
//! to move; a greedy run on a window's own timeline places over a million buffers a second,
//! about ten times a whole run's rate, so a second tries hundreds of windows (medians
//! 1.0043–1.0060 at 1 s: docs/BENCHMARKS.md). `search.rs` runs it only where the
//! decomposition into parts of time (`decompose.rs`) does not apply.
//!
//! **A move.** Target a capacity `C` below the footprint `F` of the incumbent. Pick a buffer
//! `v` whose top `o_v + s_v` exceeds `C` (at random), a window of segments `W ⊇ T_v`: its
//! lifetime widened on each side by a random margin up to [`REACH`] times its length (at least
//! the mean lifetime), narrowed by halves while it would free more than [`MAX_FREED`] buffers.
//! Free the buffers whose lifetimes lie inside `W` and place them again by one greedy run
//! (best-fit, or first-fit one time in four; size, contention or area descending, with seeded
//! noise on the ranks) on a [`Timeline`] of `W` alone, on which every buffer that meets `W`
//! without lying inside it is taken from the start at its fixed offset (clipped to `W`). Valid
//! by construction: a buffer that meets a freed one meets `W`, so it is either freed (and the
//! run places it before or after, seeing it) or an obstacle (taken from the start).
//!
//! **Acceptance.** The *excess* of a plan is `Σ_i max(0, o_i + s_i − C)`. A re-placement is
//! kept if it does not raise the excess (equal moves let the search drift across plateaus)
//! and puts no buffer above `F` (so the current plan is never worse than the incumbent). When
//! the excess reaches 0 the plan fits `C`: it becomes the incumbent (strictly smaller), and
//! the next target lies twice as far below it; when [`PATIENCE`] moves in a row lower
//! nothing, the next target lies half as far (down to `F − 1`: only the buffers at the top),
//! and after [`GIVE_UP`] such rounds at `F − 1` the search returns what it has.
//!
//! **Giving up.** The moves also return at a first deadline the caller gives if they have found
//! no plan by then and one move in four or more was skipped because its buffer alone lives
//! across more than [`MAX_FREED`] others: no window frees such a buffer, and on real operator
//! graphs (saved activations live from the forward pass to the backward pass) most buffers
//! at the top are such, while the rest of the search may use the time. On the `iopddl`
//! family no move is skipped so, and the first plan can come late (0.53 of the time given,
//! 40k buffers, seed 2).
//!
//! Instances with absence windows are left to the rest of the search (a swapped buffer's
//! resident intervals would each need their own obstacles). A move counts one step per buffer
//! it frees ([`SearchStats::window_buffers`]), as a greedy run counts one per buffer, and a
//! move around a buffer too wide for any window [`MAX_FREED`] (what its last gather took).

use std::cmp::Reverse;

use super::exact::MAX_BUFFERS;
use super::greedy::{self, Fit, Prepared};
use super::search::{Clock, SearchStats};
use super::timeline::Timeline;
use super::{Method, Outcome};
use crate::rng::SplitMix64;

/// Moves in a row that lower nothing before the target comes closer to the footprint.
const PATIENCE: u64 = 64;

/// Rounds of [`PATIENCE`] fruitless moves aimed just below the footprint after which the
/// search gives its time back: the plan sits in a local minimum of the moves, where the rest
/// of the search (the other orders, the DFS between the bounds) may still improve it. Measured
/// on `iopddl` (20k buffers, seed 2, 10 s): the moves stop improving at 1.0278 of `LB` within
/// a second or two; giving up, the search ends at 1.0133 (the DFS between the bounds).
const GIVE_UP: u64 = 16;

/// A window frees at most this many buffers (a wider one is narrowed by halves, and the move
/// skipped if the buffer's own lifetime is still too wide): a move costs a few milliseconds
/// at most.
const MAX_FREED: usize = 4096;

/// The margins of a window, on each side, are uniform up to one of these multiples of its
/// buffer's lifetime (at least the mean lifetime), chosen at random. Measured on the `iopddl`
/// family (20k buffers, moves freeing one million buffers in all, 4 seeds): margins up to 0.25–2
/// lifetimes ended at 1.0043–1.0414 of `LB`, up to 0–16 at 1.0000–1.0346; the narrow windows
/// are cheap and many, the wide ones move what the narrow ones cannot.
const REACH: [f64; 4] = [0.0, 1.0, 4.0, 16.0];

/// Whether the search moves windows on `prep` (module doc): more buffers than the exact search
/// takes, no split into parts it takes (`decomposes`: `decompose.rs`), no absence windows.
pub(super) fn applies(prep: &Prepared, decomposes: bool) -> bool {
    prep.len() > MAX_BUFFERS && !decomposes && !prep.has_absences()
}

/// The incumbent, or a strictly smaller plan found by moves until `deadline` on `clock`, or
/// until `first` if none is found by then and the buffers at the top are too wide for windows
/// (see the module doc). Only where [`applies`]: a move does not respect absence windows.
pub(super) fn improve(
    prep: &Prepared,
    incumbent: Outcome,
    (clock, first, deadline): (Clock, u64, u64),
    seed: u64,
    stats: &mut SearchStats,
) -> Outcome {
    let lb = prep.lower_bound;
    if incumbent.footprint <= lb || clock.now(stats) >= deadline {
        return incumbent;
    }
    let mut search = Windows::new(prep, &incumbent.offsets, seed);
    let mut best = incumbent;
    let mut step = ((best.footprint - lb) / 4).max(1);
    let mut capacity = best.footprint - step;
    let mut excess = search.excess(capacity);
    let mut stalled = 0u64;
    // Rounds of `PATIENCE` fruitless moves at `F − 1` since the last improvement.
    let mut stuck = 0u64;
    let mut kept = 0u64;
    let mut improved = false;
    loop {
        if excess == 0 {
            // The current plan fits `capacity < best.footprint`.
            let footprint = search.footprint();
            best = Outcome {
                offsets: search.offsets.clone(),
                footprint,
                method: Method::Windows { kept },
            };
            stats.improvements += 1;
            improved = true;
            stuck = 0;
            if footprint <= lb {
                break;
            }
            step = step.saturating_mul(2).min(footprint - lb);
        } else if stalled >= PATIENCE {
            if step == 1 {
                stuck += 1;
                if stuck == GIVE_UP {
                    break;
                }
            }
            step = (step / 2).max(1);
        } else if clock.now(stats) >= deadline
            || (!improved && search.cannot_reach_the_top() && clock.now(stats) >= first)
        {
            break;
        } else {
            let Some(v) = search.pick_above(capacity) else {
                break;
            };
            match search.try_move(v, capacity, best.footprint, stats) {
                Some(lowered) => {
                    excess -= lowered;
                    kept += 1;
                    stalled = if lowered > 0 { 0 } else { stalled + 1 };
                }
                None => stalled += 1,
            }
            continue;
        }
        stalled = 0;
        capacity = best.footprint - step;
        excess = search.excess(capacity);
    }
    best
}

/// The current plan of the search and what a move needs to find the buffers of a window.
struct Windows<'p> {
    prep: &'p Prepared,
    /// The current plan: valid, and never above the incumbent's footprint.
    offsets: Vec<u64>,
    /// Every buffer by the first segment of its lifetime (then index), with that segment: the
    /// buffers meeting a window begin in it or at most `longest` segments before it.
    by_start: Vec<(usize, u32)>,
    longest: usize,
    /// The mean lifetime, in segments: the least width a window is widened by (a short
    /// buffer's own lifetime frees too few buffers to move anything).
    mean: usize,
    /// Each buffer's peak of live bytes over its lifetime (the contention order's key).
    contention: Vec<u64>,
    rng: SplitMix64,
    /// Scratch of a move: the freed buffers (before that, the buffers above the target), the
    /// obstacles, the freed buffers' new offsets.
    freed: Vec<usize>,
    obstacles: Vec<usize>,
    placed: Vec<u64>,
    /// The timeline of a move's window, its memory kept from one move to the next.
    timeline: Timeline,
    /// Moves tried, and how many of them were around a buffer whose own lifetime frees more
    /// than [`MAX_FREED`] buffers (no window can move it).
    moves: u64,
    too_wide: u64,
}

impl<'p> Windows<'p> {
    fn new(prep: &'p Prepared, offsets: &[u64], seed: u64) -> Windows<'p> {
        let mut by_start: Vec<(usize, u32)> = (0..prep.len())
            .map(|i| (prep.segs[i].0, i as u32))
            .collect();
        by_start.sort_unstable();
        let longest = prep.segs.iter().map(|&(f, t)| t - f).max().unwrap_or(0);
        Windows {
            prep,
            offsets: offsets.to_vec(),
            by_start,
            longest,
            mean: prep.segs.iter().map(|&(f, t)| t - f).sum::<usize>() / prep.len().max(1),
            contention: prep.contention(),
            rng: SplitMix64::new(seed),
            freed: Vec::new(),
            obstacles: Vec::new(),
            placed: Vec::new(),
            timeline: Timeline::new(1),
            moves: 0,
            too_wide: 0,
        }
    }

    /// Whether one move in four or more was around a buffer too wide for any window.
    fn cannot_reach_the_top(&self) -> bool {
        self.moves > 0 && 4 * self.too_wide >= self.moves
    }

    fn top(&self, i: usize) -> u64 {
        self.offsets[i] + self.prep.sizes[i]
    }

    fn footprint(&self) -> u64 {
        (0..self.prep.len()).map(|i| self.top(i)).max().unwrap_or(0)
    }

    /// `Σ_i max(0, top_i − capacity)` over the current plan.
    fn excess(&self, capacity: u64) -> u64 {
        (0..self.prep.len())
            .map(|i| self.top(i).saturating_sub(capacity))
            .sum()
    }

    /// A buffer whose top exceeds `capacity`, at random; `None` if there is none.
    fn pick_above(&mut self, capacity: u64) -> Option<usize> {
        let mut above = std::mem::take(&mut self.freed);
        above.clear();
        above.extend((0..self.prep.len()).filter(|&i| self.top(i) > capacity));
        let picked =
            (!above.is_empty()).then(|| above[self.rng.below(above.len() as u64) as usize]);
        self.freed = above;
        picked
    }

    /// One move around `v` (module doc): `None` if the window is too wide or the re-placement
    /// is rejected, else how much it lowered the excess over `capacity`, the new offsets kept.
    fn try_move(
        &mut self,
        v: usize,
        capacity: u64,
        ceiling: u64,
        stats: &mut SearchStats,
    ) -> Option<u64> {
        let prep = self.prep;
        self.moves += 1;
        let (from, to) = prep.segs[v];
        let width = (to - from).max(self.mean) as f64;
        let reach = (width * REACH[self.rng.below(REACH.len() as u64) as usize]) as u64;
        let mut before = self.rng.below(reach + 1) as usize;
        let mut after = self.rng.below(reach + 1) as usize;
        // Narrowed by halves while it frees too many buffers.
        let window = loop {
            let window = (from.saturating_sub(before), (to + after).min(prep.segments));
            if self.gather(window) {
                break window;
            }
            if before == 0 && after == 0 {
                // The work of the last gather, so that such moves also advance a clock of
                // steps.
                stats.window_buffers += MAX_FREED as u64;
                self.too_wide += 1;
                return None;
            }
            (before, after) = (before / 2, after / 2);
        };
        stats.window_buffers += self.freed.len() as u64;
        // A base order (size, contention or area descending, then index) with each rank
        // displaced by up to a random fraction of the freed count.
        let sizes = &prep.sizes;
        let length = |i: usize| (prep.segs[i].1 - prep.segs[i].0) as u64;
        let contention = &self.contention;
        match self.rng.below(3) {
            0 => (self.freed).sort_unstable_by_key(|&i| (Reverse(sizes[i]), Reverse(length(i)), i)),
            1 => (self.freed)
                .sort_unstable_by_key(|&i| (Reverse(contention[i]), Reverse(sizes[i]), i)),
            _ => (self.freed).sort_unstable_by_key(|&i| {
                (
                    Reverse(u128::from(sizes[i]) * u128::from(length(i))),
                    Reverse(sizes[i]),
                    i,
                )
            }),
        }
        let spread = self.freed.len() as f64 * [0.0, 0.02, 0.1, 0.3][self.rng.below(4) as usize];
        let mut keyed: Vec<(f64, usize)> = (self.freed.iter().enumerate())
            .map(|(rank, &i)| (rank as f64 + self.rng.unit() * spread, i))
            .collect();
        keyed.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
        let fit = if self.rng.below(4) == 0 {
            Fit::First
        } else {
            Fit::Best
        };
        let old: u64 = (self.freed.iter())
            .map(|&i| self.top(i).saturating_sub(capacity))
            .sum();
        // The window's own timeline, the obstacles taken from the start.
        let (base, end) = window;
        let timeline = &mut self.timeline;
        timeline.reset(end - base);
        for &j in &self.obstacles {
            let (f, t) = prep.segs[j];
            let o = self.offsets[j];
            timeline.insert(f.max(base) - base, t.min(end) - base, o, o + sizes[j]);
        }
        let (mut refs, mut scratch) = (Vec::new(), (Vec::new(), Vec::new()));
        let mut new = 0u64;
        self.placed.clear();
        for &(_, i) in &keyed {
            let (f, t) = (prep.segs[i].0 - base, prep.segs[i].1 - base);
            refs.clear();
            timeline.taken(f, t, &mut refs);
            let o = greedy::choose_gap(timeline, &refs, &mut scratch, sizes[i], fit);
            let top = o + sizes[i];
            new += top.saturating_sub(capacity);
            if top > ceiling || new > old {
                return None;
            }
            timeline.insert(f, t, o, top);
            self.placed.push(o);
        }
        for (&(_, i), &o) in keyed.iter().zip(&self.placed) {
            self.offsets[i] = o;
        }
        Some(old - new)
    }

    /// Fills `freed` (the buffers whose lifetimes lie inside `window`) and `obstacles` (the
    /// others that meet it); false if more than [`MAX_FREED`] would be freed.
    fn gather(&mut self, (base, end): (usize, usize)) -> bool {
        self.freed.clear();
        self.obstacles.clear();
        let first = (self.by_start).partition_point(|&(f, _)| f + self.longest < base);
        for &(f, i) in &self.by_start[first..] {
            if f >= end {
                break;
            }
            let (i, t) = (i as usize, self.prep.segs[i as usize].1);
            if t <= base {
                continue;
            }
            if base <= f && t <= end {
                if self.freed.len() == MAX_FREED {
                    return false;
                }
                self.freed.push(i);
            } else {
                self.obstacles.push(i);
            }
        }
        true
    }
}
