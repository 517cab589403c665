//! Going beyond greedy: a budgeted search for a placement below the incumbent, down to the
//! lower bound `LB` (the aligned peak of resident bytes).
//!
//! Why: greedy best-fit loses 0.3–1.3 % on real traces (SOMAS ResNet-50, the V100 DDP trace)
//! and 25–40 % on MiniMalloc's challenging instances, always by *fragmentation over time*: the
//! buffer that sets the footprint is a small one, placed last, whose long lifetime meets no gap
//! although the live bytes during it stay below `LB`. No order fixes every trace; a search
//! over orders that respects the geometry does.
//!
//! Two methods share the budget; every random choice comes from the seed:
//!
//! 1. **Canonical depth-first search** (after MiniMalloc, Moffitt, ASPLOS'23), a decision
//!    procedure "is there a placement with footprint ≤ C?". Every placement can be pushed down
//!    ("gravity") until each buffer rests at 0 or on the top of a buffer it overlaps in time;
//!    sorted by (offset, rank) such a placement is built by repeatedly putting an unplaced
//!    buffer `i` at `min_off(i) = max{o_j + s_j : j placed, j overlaps i}`, in non-decreasing
//!    (offset, rank) order. So the search only ever branches on *which* buffer comes next,
//!    never on where it goes. Prunings, each sound (none removes every gravity placement
//!    within `C`):
//!    * canonical order: the next key `(min_off(i), rank(i))` must exceed the last one placed;
//!    * dominance: no candidate at an offset `≥ min_j (min_off(j) + s_j)` over unplaced `j`
//!      (`j` would fit entirely below it, so the branch repeats a gravity placement);
//!    * section inference: in every elementary time segment `t`, the unplaced buffers live at
//!      `t` all overlap and all go above the current offset `o` and above the floor of `t`:
//!      `max(o, floor(t)) + Σ_{j unplaced, live at t} s_j ≤ C`;
//!    * section floors (MiniMalloc's "unallocated floor", in the full searches only): `floor(t)`
//!      may be raised to `min_j min_off(j)` over the unplaced `j` live at `t`.
//!
//!    The state (minimum offsets in a tournament tree over ranks, per-segment sums in a max
//!    segment tree) is undone exactly on backtrack from change logs, and the search is
//!    iterative, so deep instances cannot overflow the stack. A first *dive* (one ranking, a
//!    node limit of `2n`) runs early (below): on every real trace measured it meets `LB` at
//!    once. The full search doubles its node limit per round over three static rankings
//!    (MiniMalloc's "TWA", "TAW", "WAT": contention, lifetime, area), so one bad ranking cannot
//!    eat the budget. It needs the list of time-overlapping pairs; on instances with more than
//!    [`MAX_OVERLAP_PAIRS`] pairs it is skipped (greedy orders still run).
//!
//! 2. **Randomised iterated greedy** (idealloc's randomised restarts, with our greedy placers):
//!    a base order with seeded noise on the ranks, best or first fit.
//!
//! The order: the floor (best-fit in birth order with a free list, `floor.rs`), then best-fit
//! by size, which replaces it unless larger; the dive, which on a wall clock stops early
//! enough to leave two greedy runs' time before the deadline (where the windows apply, after
//! `n + n/8` nodes, not `2n`); on instances too large for the
//! exact search whose parts of time are not (once the buffers live throughout are stacked),
//! the exact search part by part (`decompose.rs`), until the dive's deadline; the peak-first
//! greedy orders (`greedy.rs`), each abandoned once it exceeds `LB`, until the deadline itself
//! (a plan at `LB` needs no other candidate); where a part is too large for it too (one
//! operator graph), the large buffers placed first by short DFS runs and the small ones
//! around them (`layers.rs`), with at most half of what is left (on a wall clock with a
//! second core, on a thread of their own until the deadline instead: [`Beside`]), then
//! windows of time placed again around the top (`window.rs`), with 7/8 of what is left or
//! until the dive's deadline if later; the placements of the other policies that
//! `itermem compare` reports (`online.rs`: cnmem tuned and grown, the caching allocator,
//! first-fit), which cost about those two runs and make the plan never worse than any of
//! them; the rest of best-of (except the floor's run); then half of the remaining budget goes to the
//! DFS at `LB`, and the rest alternates slices of randomised greedy (of those windows where
//! they apply) and of DFS halfway between the largest capacity proved infeasible and the
//! incumbent. After best-fit the incumbent is
//! replaced only by a strictly smaller footprint, and the search stops as soon as
//! `footprint = LB`. Why the dive first: on real traces it meets `LB` at once, and nothing is
//! smaller; why it leaves time: offered after the DFS's pair lists and a dive that may use the
//! whole budget, the other policies' placements were cut on large crowded instances
//! (docs/BENCHMARKS.md).
//!
//! **The budget** is measured by a [`Clock`]: wall-clock time since planning started (the CLI,
//! the interposer), or steps of work ([`super::PlanOptions::steps`]: one DFS node, or `n` per
//! greedy run on `n` buffers). Counted in steps, the search does the same work and returns the
//! same plan on any machine under any load, which is what tests need; the work before
//! [`improve`] (best-fit, the DFS's pair lists, best-of, the online placements) is then not
//! counted and always completes. On a wall clock the budget is a wall for everything after the
//! floor, which always completes: that work reads the clock ([`Clock::cutoff`]) between
//! candidates and inside every greedy run (best-fit's first) and pair sweep, and a candidate
//! cut short is dropped, so the search returns within the budget whenever the floor does. Why
//! a floor before best-fit: best-fit costs about 2 µs a buffer (0.2 s on 100k buffers), the
//! floor a tenth of that, so only the floor's cost (and the instance's preparation) is beyond
//! the budget's control; when the budget cuts best-fit the plan is the floor's (0.1–0.2 %
//! larger on the scaling instances).
//!
//! **Absences** (swapped buffers, see [`super::Instance::with_absences`]): "overlaps" means
//! "resident at a common instant" and "live at `t`" means "resident at `t`" throughout; every
//! argument above holds for any such conflict relation as long as the buffers resident at one
//! instant pairwise conflict, which they do. So the DFS supports absences as is: the pairs come
//! from a sweep over resident intervals (deduplicated, since two buffers may meet in several
//! intervals) and the per-segment sums count each buffer over its resident intervals only.
//!
//! **The exact search** (`exact.rs`) replaces this DFS in [`improve`] on instances of at most
//! [`super::exact::MAX_BUFFERS`] buffers whose section lists exist: MiniMalloc's dynamic
//! temporal decomposition and more, which the flat DFS below lacks (on MiniMalloc's
//! challenging set G did not improve in 10 s; the exact search meets `LB` in about 20 ms). The
//! dive stays this DFS (a node here costs `O(log n)`, there `O(n)`). With it, [`improve`]
//! gives 5/8 of its budget (not half) to `LB`, its greedy slices are a quarter of the
//! search's (not equal), and after a capacity runs out of time the next aims between that
//! capacity and the incumbent, where placements come fast, until that gap is 1/64 of the one
//! to the proved bound; then it bisects from the bound again.

use std::cell::OnceCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::decompose;
use super::exact::Exact;
use super::greedy::{self, Fit, Order, Prepared};
use super::{Cutoff, Instance, Method, Outcome, floor, layers, online, window};
use crate::rng::SplitMix64;

/// DFS nodes between two readings of the clock. A node usually costs under a microsecond, but
/// one that re-checks the section floors of a long lifetime can cost a millisecond (a `somas`
/// instance of 20k buffers: 256 nodes took 159 ms, and a 1 s search ended at 1.03–1.06 s).
const NODES_PER_CHECK: u64 = 8;

/// The DFS is skipped above this many time-overlapping pairs (its neighbour lists take 8
/// bytes per pair: 64 MiB at most). The largest real trace measured has 5.9 M.
pub(crate) const MAX_OVERLAP_PAIRS: usize = 8_000_000;

/// What [`super::Policy::Search`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SearchStats {
    /// Greedy placements run on perturbed orders, and the small buffers placed around large
    /// ones placed first (`layers.rs`).
    pub greedy_runs: u64,
    /// Buffers placed (search nodes) by the depth-first search.
    pub dfs_nodes: u64,
    /// Depth-first searches started (one per capacity and node limit and ranking).
    pub dfs_runs: u64,
    /// Capacities the depth-first search proved infeasible (exhausted without a placement).
    pub dfs_refuted: u64,
    /// Times the incumbent was replaced.
    pub improvements: u64,
    /// Buffers freed and placed again by the moves of the search over windows of time
    /// (`window.rs`).
    pub window_buffers: u64,
}

/// What a search's budget is measured in (see the module doc). Every deadline of this module
/// is a tick of its clock.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Clock {
    /// Nanoseconds since the instant given.
    Wall(Instant),
    /// Steps of work done: DFS nodes, plus `per_greedy_run` for each perturbed greedy run,
    /// plus the buffers each window move frees (`window.rs`).
    Steps { per_greedy_run: u64 },
}

impl Clock {
    /// The clock of a search planned from `start` on `buffers` buffers, and its deadline:
    /// `steps` of work when given, else `budget` of wall-clock time.
    pub(crate) fn with_deadline(
        start: Instant,
        budget: Duration,
        steps: Option<u64>,
        buffers: usize,
    ) -> (Clock, u64) {
        match steps {
            Some(steps) => {
                let per_greedy_run = buffers as u64;
                (Clock::Steps { per_greedy_run }, steps)
            }
            None => (Clock::Wall(start), nanos(budget)),
        }
    }

    /// When the work that only a wall-clock budget bounds (best-of, the online placements,
    /// building the DFS) must stop for `deadline`: at the deadline on a wall clock, never on a
    /// clock of steps (that work is not counted in steps, and always completes so that the
    /// result stays a function of the steps).
    pub(super) fn cutoff(&self, deadline: u64) -> Cutoff {
        match *self {
            Clock::Wall(start) => start
                .checked_add(Duration::from_nanos(deadline))
                .map_or(Cutoff::NEVER, Cutoff::at),
            Clock::Steps { .. } => Cutoff::NEVER,
        }
    }

    /// The deadline that leaves `time` before `deadline` on a wall clock for work that must
    /// follow; `deadline` itself on a clock of steps, where that work is not counted.
    pub(super) fn leave(&self, deadline: u64, time: Duration) -> u64 {
        match *self {
            Clock::Wall(_) => deadline.saturating_sub(nanos(time)),
            Clock::Steps { .. } => deadline,
        }
    }

    /// Ticks elapsed: nanoseconds since the start, or the steps `stats` counts.
    pub(super) fn now(&self, stats: &SearchStats) -> u64 {
        match *self {
            Clock::Wall(start) => nanos(start.elapsed()),
            Clock::Steps { per_greedy_run } => stats
                .greedy_runs
                .saturating_mul(per_greedy_run)
                .saturating_add(stats.dfs_nodes)
                .saturating_add(stats.window_buffers),
        }
    }
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

/// [`super::Policy::Search`]: the floor, best-fit, a first DFS dive at the lower bound, the
/// other policies' placements (`online.rs`), the rest of best-of, then [`improve`] until
/// `deadline` on `clock` (module doc). On a wall clock everything after the floor stops at the
/// deadline ([`Clock::cutoff`]); on a clock of steps only the dive and [`improve`] count.
pub(crate) fn search(
    instance: &Instance,
    prep: &Prepared,
    (clock, deadline): (Clock, u64),
    seed: u64,
    stats: &mut SearchStats,
) -> Outcome {
    let lb = prep.lower_bound;
    let cutoff = clock.cutoff(deadline);
    // The floor: cheap and never cut, so that there is a plan whatever the budget.
    let mut best = floor::place(instance, prep);
    if best.footprint == lb {
        return best;
    }
    // SmartPool's best-fit replaces it unless larger, if the budget lets it complete.
    let best_fit_start = Instant::now();
    let order = greedy::order_indices(instance, prep, Order::SizeDesc);
    let best_fit = greedy::place_until(prep, &order, Fit::Best, cutoff);
    // Freed now, not on return: the heap trim that freeing it may trigger (1.5 ms on 100k
    // buffers) then fell after the deadline.
    drop(order);
    let Some((offsets, footprint)) = best_fit else {
        return best;
    };
    let greedy_run = best_fit_start.elapsed();
    if footprint <= best.footprint {
        let method = Method::Greedy {
            order: Order::SizeDesc,
            fit: Fit::Best,
        };
        best = Outcome {
            offsets,
            footprint,
            method,
        };
    }
    if best.footprint == lb {
        return best;
    }
    // Computed once: what the decomposition places, and whether the windows below apply.
    let split = decompose::split(prep);
    let windows = window::applies(prep, split.is_some());
    // The dive first, leaving the other policies' placements two greedy runs' time (module doc).
    let dive_deadline = clock.leave(deadline, 2 * greedy_run);
    let dive_cutoff = clock.cutoff(dive_deadline);
    let dfs = Dfs::new(instance, prep, dive_cutoff);
    let dfs_cut = dfs.is_none() && dive_cutoff.passed();
    if let Some(dfs) = dfs.as_ref().filter(|_| !dive_cutoff.passed()) {
        // One ranking and little backtracking: about the cost of a greedy run. Less where the
        // windows apply: there it meets `LB` without backtracking (the shared traces of 6,770
        // and 13,385 buffers: `n` nodes) or not at all (the `iopddl` family, where its `2n`
        // nodes took 0.09–0.18 s at 20k–40k buffers, time the windows then lacked).
        let n = prep.len() as u64;
        let limit = if windows { n + n / 8 } else { 2 * n } + 64;
        stats.dfs_runs += 1;
        let until = (clock, dive_deadline);
        let limits = (limit, u64::MAX);
        if let Ok(offsets) = dfs.run(&dfs.rankings[0], lb, limits, until, false, stats) {
            offer(
                &mut best,
                offsets,
                prep,
                Method::Dfs { capacity: lb },
                stats,
            );
            return best;
        }
    }
    // Too large for the exact search as a whole: its parts of time (`decompose.rs`), with
    // half of what is left and at most until two greedy runs' time before the deadline (for
    // the other policies' placements). After the dive, which costs about a greedy run and
    // meets `LB` at once on most such instances; before best-of, which alone may take the
    // whole budget there. Half, not all: where the parts are crowded (the scaling instances'
    // iterations, ~800 live buffers) the flat DFS at `LB` below does better.
    let now = clock.now(stats);
    let half = now.saturating_add(deadline.saturating_sub(now) / 2);
    let until = (clock, half.min(dive_deadline));
    let best = decompose::improve(instance, prep, split, best, until, seed, stats);
    if best.footprint == lb {
        return best;
    }
    // The peak-first orders (`greedy.rs`), each only while it may meet `LB`: on real operator
    // graphs they do where the other orders and the windows do not (idealloc's IOPDDL and
    // SOMAS instances), and elsewhere most of them exceed `LB` within the first few percent of
    // their buffers. Until the deadline itself, not the dive's: a plan at `LB` needs none of
    // the other policies' placements.
    if let Some(optimal) =
        greedy::meeting_lb(instance, prep, greedy::PEAK_RUNS, (cutoff, greedy_run))
    {
        return optimal;
    }
    let later = Later {
        instance,
        prep,
        clock,
        deadline,
        dive_deadline,
        greedy_run,
        windows,
        seed,
    };
    if !windows {
        return after_layers(&later, best, (dfs, dfs_cut), stats);
    }
    // Where neither the exact search nor the decomposition reaches (a part of time too large
    // for them: one operator graph), the large buffers first (`layers.rs`), each attempt a
    // short DFS on them alone: on the `iopddl` family they end near `LB` where the whole
    // instance's DFS and the windows stall (docs/BENCHMARKS.md). On a wall clock with a
    // second core, on a thread of their own until the deadline while this one goes on with
    // the windows from the incumbent; otherwise here, with at most half of what is left, the
    // rest for the windows.
    if let Some(beside) = Beside::start(&later, best.footprint) {
        let best = after_layers(&later, best, (dfs, dfs_cut), stats);
        return beside.settle(best, lb, stats);
    }
    let now = clock.now(stats);
    let half = now.saturating_add(deadline.saturating_sub(now) / 2);
    let until = (clock, half, deadline);
    let never = AtomicBool::new(false);
    let best = layers::place(
        instance,
        prep,
        best.footprint,
        until,
        greedy_run,
        &never,
        stats,
    )
    .unwrap_or(best);
    if best.footprint == lb {
        return best;
    }
    after_layers(&later, best, (dfs, dfs_cut), stats)
}

/// What the search after the peak-first orders works with, besides the incumbent and the DFS.
struct Later<'a> {
    instance: &'a Instance,
    prep: &'a Prepared,
    clock: Clock,
    deadline: u64,
    /// Where the dive stopped, leaving the other policies' placements two greedy runs' time.
    dive_deadline: u64,
    /// How long best-fit took: what one greedy run costs here.
    greedy_run: Duration,
    /// Whether the windows of `window.rs` apply (and the large buffers first).
    windows: bool,
    seed: u64,
}

/// The large buffers first (`layers.rs`) on a thread of their own: on a wall clock with two
/// cores, the attempts get the whole time left instead of half of it, and the windows theirs
/// from the incumbent, in parallel. Measured on the `iopddl` family at 1 s (seeds 1–15, three
/// rounds each, with the thresholds of `layers.rs` from 0.5 %): lower on 12 of the 45
/// instances in every round (40k seed 7 1.0331 → 1.0008 of `LB`), higher on none in every
/// round (docs/BENCHMARKS.md). The thread
/// works on its own copies of the instance, so a search that meets `LB` here returns at once:
/// it only tells the thread to stop (between two of its runs) and does not wait. The other way
/// round there is no such signal: a plan at `LB` found there is taken at the deadline.
struct Beside {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<(Option<Outcome>, SearchStats)>,
}

impl Beside {
    /// The thread started, unless the clock counts steps (a search in steps must stay a
    /// function of them), there is one core, or it cannot be spawned.
    fn start(later: &Later<'_>, ceiling: u64) -> Option<Beside> {
        let Clock::Wall(_) = later.clock else {
            return None;
        };
        if std::thread::available_parallelism().map_or(true, |cores| cores.get() < 2) {
            return None;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let (instance, prep) = (later.instance.clone(), later.prep.clone());
        let until = (later.clock, later.deadline, later.deadline);
        let (greedy_run, told) = (later.greedy_run, Arc::clone(&stop));
        let thread = std::thread::Builder::new()
            .name("itermem-layers".into())
            .spawn(move || {
                let mut stats = SearchStats::default();
                let found = layers::place(
                    &instance, &prep, ceiling, until, greedy_run, &told, &mut stats,
                );
                (found, stats)
            })
            .ok()?;
        Some(Beside { stop, thread })
    }

    /// `best`, or the thread's plan if smaller, once the thread has ended (by the deadline, its
    /// own); its work is added to `stats`. A `best` at `lb` is returned at once, the thread
    /// told to stop.
    fn settle(self, best: Outcome, lb: u64, stats: &mut SearchStats) -> Outcome {
        if best.footprint == lb {
            self.stop.store(true, Ordering::Relaxed);
            return best;
        }
        let Ok((found, side)) = self.thread.join() else {
            return best;
        };
        stats.greedy_runs += side.greedy_runs;
        stats.dfs_nodes += side.dfs_nodes;
        stats.dfs_runs += side.dfs_runs;
        match found {
            Some(found) if found.footprint < best.footprint => {
                stats.improvements += 1;
                found
            }
            _ => best,
        }
    }
}

/// The search after the large buffers first (see [`search`]): the windows, the other
/// policies' placements, the rest of best-of, then [`improve`].
fn after_layers(
    later: &Later<'_>,
    best: Outcome,
    (mut dfs, dfs_cut): (Option<Dfs<'_>>, bool),
    stats: &mut SearchStats,
) -> Outcome {
    let (instance, prep, seed) = (later.instance, later.prep, later.seed);
    let (clock, deadline, greedy_run) = (later.clock, later.deadline, later.greedy_run);
    let (dive_deadline, windows) = (later.dive_deadline, later.windows);
    let lb = prep.lower_bound;
    if best.footprint == lb {
        return best;
    }
    let cutoff = clock.cutoff(deadline);
    // Then windows of time placed again around the top
    // (`window.rs`), with 7/8 of what is left, or more, up to the dive's deadline, when the
    // other policies' two greedy runs take less than the last eighth. So much: there a
    // greedy run costs 0.1–0.7 s, so the other policies' placements and best-of would take
    // the whole budget for little, and a window move places buffers ten times as fast (the
    // `iopddl` family at 1 s, 40k buffers: 1.0103 of `LB` with half, 1.0043 with 7/8;
    // docs/BENCHMARKS.md). Not on the other instances: where the flat DFS at `LB` below meets
    // the bound (the scaling instances), the windows' share cost it that. If the moves find
    // nothing in the first half of their share while the buffers at the top live too long
    // for a window (`window.rs`), they give the rest back: on real operator graphs
    // (idealloc's IOPDDL Y_1 and SOMAS pangu_2.6B) the other policies' placements and
    // best-of's contention order then do better (pangu at 1 s: 1.0334 → 1.0076 of `LB`).
    let best = if windows {
        let now = clock.now(stats);
        let share = now.saturating_add(deadline.saturating_sub(now) / 8 * 7);
        let share = share.max(dive_deadline);
        let first = now.saturating_add(share.saturating_sub(now) / 2);
        window::improve(prep, best, (clock, first, share), seed, stats)
    } else {
        best
    };
    if best.footprint == lb {
        return best;
    }
    // The other policies of `itermem compare` (`online.rs`): what makes the plan never worse
    // than any of them. Then the DFS's lists, if the dive's share of the budget cut them short.
    let best = online::best_of_online(instance, prep, best, (cutoff, greedy_run));
    let best = greedy::best_of(
        instance,
        prep,
        best,
        online::GREEDY_COLUMNS,
        (cutoff, greedy_run),
    );
    if best.footprint == lb {
        return best;
    }
    if dfs_cut && !cutoff.passed() {
        dfs = Dfs::new(instance, prep, cutoff);
    }
    // Without absence windows the floor is the run `floor::RUN`.
    let done = |run: &(Order, Fit)| {
        *run == (Order::SizeDesc, Fit::Best)
            || online::GREEDY_COLUMNS.contains(run)
            || (*run == floor::RUN && !prep.has_absences())
    };
    // Contention first: on the real operator graphs of idealloc's benchmarks (IOPDDL's Y_1,
    // 62k buffers; SOMAS' pangu_2.6B, 19k) it is the best of these runs (1.0000 and 1.0076
    // of `LB`, against 1.0034 and 1.0612 for the next), where one run costs up to a quarter
    // of the budget and the last ones are cut; on the scaling instances it meets `LB` sooner
    // (20k buffers at 250 ms: 1.0006 → 1.0000; docs/BENCHMARKS.md).
    let mut rest: Vec<(Order, Fit)> = greedy::every_run().filter(|run| !done(run)).collect();
    rest.sort_by_key(|&(order, _)| order != Order::ContentionDesc);
    let best = greedy::best_of(instance, prep, best, rest, (cutoff, greedy_run));
    improve(
        instance,
        prep,
        (dfs.as_ref(), windows),
        (best, lb),
        (clock, deadline),
        seed,
        stats,
    )
}

/// Improves `incumbent` until `deadline` on `clock`, or until its footprint is at most
/// `enough` (at least the lower bound; see the module doc): half of the remaining budget on
/// the DFS at `enough`, then slices of randomised greedy (of moves over windows of time where
/// `windows`: `window.rs`) alternating with slices of DFS halfway between what is proved
/// infeasible and the incumbent.
pub(super) fn improve(
    instance: &Instance,
    prep: &Prepared,
    (dfs, windows): (Option<&Dfs<'_>>, bool),
    (incumbent, enough): (Outcome, u64),
    (clock, deadline): (Clock, u64),
    seed: u64,
    stats: &mut SearchStats,
) -> Outcome {
    let mut best = incumbent;
    let lb = prep.lower_bound;
    let enough = enough.max(lb);
    let start = clock.now(stats);
    if best.footprint <= enough || start >= deadline {
        return best;
    }
    let budget = deadline - start;
    let cutoff = clock.cutoff(deadline);
    let mut rng = SplitMix64::new(seed);
    // Every capacity below `feasible_from` is proved infeasible.
    let mut feasible_from = lb;

    // The exact search where the instance is small enough (`exact.rs`), else the flat DFS.
    let mut exact = dfs.and_then(|dfs| Exact::new(dfs, seed));
    let exact_search = exact.is_some();
    let mut decide =
        |capacity: u64, until: (Clock, u64), stats: &mut SearchStats| match (exact.as_mut(), dfs) {
            (Some(exact), _) => Some(exact.solve(capacity, until, stats)),
            (None, Some(dfs)) => Some(dfs.solve(capacity, until, stats)),
            (None, None) => None,
        };
    // The exact search gets more of the budget at `LB` (5/8): where `LB` can be met it does
    // so within that (B of MiniMalloc's set at 1 s); the rest is for the capacities above.
    let at_lb = if exact_search {
        budget / 8 * 5
    } else {
        budget / 2
    };
    if let Some(verdict) = decide(enough, (clock, start + at_lb), stats) {
        match verdict {
            Verdict::Found(offsets) => {
                offer(
                    &mut best,
                    offsets,
                    prep,
                    Method::Dfs { capacity: enough },
                    stats,
                );
                return best;
            }
            Verdict::Refuted => feasible_from = enough + 1,
            Verdict::Unknown => {}
        }
    }
    // At least one tick, so a slice always does some work (a clock of steps stands still
    // otherwise). The exact search finds most placements it can find in milliseconds, and
    // each of its targets below takes a greedy slice first: that slice is a quarter.
    let slice = (budget / 16).max(1);
    let greedy_slice = if exact_search {
        (slice / 4).max(1)
    } else {
        slice
    };
    // With the exact search, targets below `timed_out` ran out of time: the next target lies
    // between it and the incumbent (the search closes in from above, where placements are
    // found fast), and back to the proved bound once that gap is small.
    let mut timed_out = feasible_from;
    let mut round = 0u64;
    while clock.now(stats) < deadline && best.footprint > feasible_from.max(enough) {
        let slice_end = clock.now(stats).saturating_add(greedy_slice).min(deadline);
        if windows {
            // Moves over windows of time instead of greedy runs on the whole instance, which
            // there cost tenths of a second each; from the incumbent (the DFS may have
            // replaced it), with a seed of their own, until they give up or the slice ends.
            round += 1;
            let until = (clock, slice_end, slice_end);
            best = window::improve(prep, best, until, seed.wrapping_add(round), stats);
        }
        while !windows && clock.now(stats) < slice_end && best.footprint > feasible_from.max(enough)
        {
            round += 1;
            let Some(candidate) = perturbed(instance, prep, &mut rng, round, cutoff) else {
                return best;
            };
            stats.greedy_runs += 1;
            if candidate.footprint < best.footprint {
                best = candidate;
                stats.improvements += 1;
            }
        }
        if best.footprint <= feasible_from.max(enough) {
            break;
        }
        let gap = best.footprint - feasible_from;
        if best.footprint.saturating_sub(timed_out) <= gap / 64 {
            timed_out = feasible_from;
        }
        let low = timed_out.max(feasible_from);
        let target = low + (best.footprint - low) / 2;
        let slice_end = clock.now(stats).saturating_add(slice).min(deadline);
        let Some(verdict) = decide(target, (clock, slice_end), stats) else {
            continue;
        };
        match verdict {
            Verdict::Found(offsets) => {
                let method = Method::Dfs { capacity: target };
                offer(&mut best, offsets, prep, method, stats)
            }
            Verdict::Refuted => feasible_from = target + 1,
            Verdict::Unknown if exact_search => timed_out = target + 1,
            Verdict::Unknown => {}
        }
    }
    best
}

/// Replaces `best` by the placement `offsets` if its footprint is strictly smaller.
fn offer(
    best: &mut Outcome,
    offsets: Vec<u64>,
    prep: &Prepared,
    method: Method,
    stats: &mut SearchStats,
) {
    let footprint = offsets
        .iter()
        .zip(&prep.sizes)
        .map(|(o, s)| o + s)
        .max()
        .unwrap_or(0);
    if footprint < best.footprint {
        *best = Outcome {
            offsets,
            footprint,
            method,
        };
        stats.improvements += 1;
    }
}

/// One greedy run on a noisy order: a base order chosen by the round, each rank displaced by
/// a uniform amount up to a random fraction (1–25 %) of `n`; `None` if `cutoff` passes first.
pub(super) fn perturbed(
    instance: &Instance,
    prep: &Prepared,
    rng: &mut SplitMix64,
    round: u64,
    cutoff: Cutoff,
) -> Option<Outcome> {
    const BASES: [Order; 4] = [
        Order::SizeDesc,
        Order::ContentionDesc,
        Order::AreaDesc,
        Order::LengthDesc,
    ];
    let base = BASES[(round as usize) % BASES.len()];
    let fit = if rng.below(4) == 0 {
        Fit::First
    } else {
        Fit::Best
    };
    let order = greedy::order_indices(instance, prep, base);
    let n = order.len().max(1) as f64;
    let spread = n * [0.01, 0.03, 0.1, 0.25][rng.below(4) as usize];
    let mut keyed: Vec<(f64, usize)> = order
        .iter()
        .enumerate()
        .map(|(rank, &i)| (rank as f64 + rng.unit() * spread, i))
        .collect();
    keyed.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
    let order: Vec<usize> = keyed.into_iter().map(|(_, i)| i).collect();
    let (offsets, footprint) = greedy::place_until(prep, &order, fit, cutoff)?;
    Some(Outcome {
        offsets,
        footprint,
        method: Method::Perturbed { fit, round },
    })
}

/// The canonical depth-first search's static data.
pub(super) struct Dfs<'a> {
    pub(super) prep: &'a Prepared,
    /// Pairs resident at a common instant, CSR: neighbours of `i` are
    /// `adj[adj_start[i]..adj_start[i+1]]`.
    pub(super) adj_start: Vec<usize>,
    pub(super) adj: Vec<u32>,
    /// Static rankings to try (each a permutation: `rank[i]`).
    pub(super) rankings: Vec<Vec<u32>>,
    /// Buffers resident in each time segment, CSR (`members[member_start[t]..member_start[t+1]]`),
    /// for the section floors; built on first use, empty when that would exceed
    /// [`MAX_SECTION_MEMBERS`].
    sections: OnceCell<Sections>,
}

/// The buffers resident in each time segment (CSR).
pub(super) struct Sections {
    pub(super) member_start: Vec<usize>,
    pub(super) members: Vec<u32>,
}

/// Section floors are skipped above this many (segment, resident buffer) pairs.
pub(crate) const MAX_SECTION_MEMBERS: usize = 2_000_000;

/// How many times [`sweep_pairs`] would call `pair` on `events`: at each start, the intervals
/// then open. O(events), so that an instance with too many pairs is turned down before any
/// pair is listed.
fn pairs_found(events: &[(usize, bool, u32)]) -> usize {
    let (mut open, mut pairs) = (0usize, 0usize);
    for &(_, birth, _) in events {
        if birth {
            pairs += open;
            open += 1;
        } else {
            open -= 1;
        }
    }
    pairs
}

/// Calls `pair(i, j)` for every pair of intervals that overlap, from `events` = (segment, is
/// start, buffer) of each resident interval, sorted (ends before starts at equal segments):
/// once per pair of buffers when each has one interval, possibly more often otherwise. `None`
/// as soon as `cutoff` passes (read every [`EVENTS_PER_CHECK`] events).
fn sweep_pairs(
    events: &[(usize, bool, u32)],
    n: usize,
    cutoff: Cutoff,
    mut pair: impl FnMut(u32, u32),
) -> Option<()> {
    let mut live: Vec<u32> = Vec::new();
    let mut pos = vec![usize::MAX; n];
    for (k, &(_, birth, i)) in events.iter().enumerate() {
        if k % EVENTS_PER_CHECK == 0 && cutoff.passed() {
            return None;
        }
        if birth {
            for &j in &live {
                pair(i, j);
            }
            pos[i as usize] = live.len();
            live.push(i);
        } else {
            let p = pos[i as usize];
            live.swap_remove(p);
            if let Some(&moved) = live.get(p) {
                pos[moved as usize] = p;
            }
        }
    }
    Some(())
}

/// Events of [`sweep_pairs`] between two readings of the clock: at most this many times the
/// number of buffers resident at once pairs (about a millisecond on the largest traces).
const EVENTS_PER_CHECK: usize = 1024;

/// The neighbour lists (CSR) of the pairs [`sweep_pairs`] finds in `events` when each pair is
/// found once (one resident interval per buffer): one sweep counts the degrees, a second fills
/// the lists. `None` if `cutoff` passes.
fn adjacency(
    events: &[(usize, bool, u32)],
    n: usize,
    pairs: usize,
    cutoff: Cutoff,
) -> Option<(Vec<usize>, Vec<u32>)> {
    let mut degree = vec![0usize; n];
    sweep_pairs(events, n, cutoff, |a, b| {
        degree[a as usize] += 1;
        degree[b as usize] += 1;
    })?;
    let mut adj_start = vec![0usize; n + 1];
    for i in 0..n {
        adj_start[i + 1] = adj_start[i] + degree[i];
    }
    let mut fill = adj_start.clone();
    let mut adj = vec![0u32; 2 * pairs];
    sweep_pairs(events, n, cutoff, |a, b| {
        adj[fill[a as usize]] = b;
        fill[a as usize] += 1;
        adj[fill[b as usize]] = a;
        fill[b as usize] += 1;
    })?;
    Some((adj_start, adj))
}

/// [`adjacency`] when buffers have several resident intervals, so that a pair may be found
/// once per pair of intervals that meet: the pairs are collected, sorted and deduplicated.
/// `None` if `cutoff` passes.
fn adjacency_dedup(
    events: &[(usize, bool, u32)],
    n: usize,
    pairs_found: usize,
    cutoff: Cutoff,
) -> Option<(Vec<usize>, Vec<u32>)> {
    let mut pairs: Vec<(u32, u32)> = Vec::with_capacity(pairs_found);
    sweep_pairs(events, n, cutoff, |a, b| pairs.push((a.min(b), a.max(b))))?;
    pairs.sort_unstable();
    pairs.dedup();
    let mut adj_start = vec![0usize; n + 1];
    for &(a, b) in &pairs {
        adj_start[a as usize + 1] += 1;
        adj_start[b as usize + 1] += 1;
    }
    for i in 0..n {
        adj_start[i + 1] += adj_start[i];
    }
    let mut fill = adj_start.clone();
    let mut adj = vec![0u32; 2 * pairs.len()];
    for (a, b) in pairs {
        adj[fill[a as usize]] = b;
        fill[a as usize] += 1;
        adj[fill[b as usize]] = a;
        fill[b as usize] += 1;
    }
    Some((adj_start, adj))
}

/// The buffers resident in each segment, or nothing if there are too many pairs.
fn section_members(prep: &Prepared) -> Sections {
    let total: usize = (0..prep.len())
        .flat_map(|i| prep.resident(i))
        .map(|&(from, to)| to - from)
        .sum();
    if total > MAX_SECTION_MEMBERS {
        return Sections {
            member_start: Vec::new(),
            members: Vec::new(),
        };
    }
    let mut count = vec![0usize; prep.segments + 1];
    for i in 0..prep.len() {
        for &(from, to) in prep.resident(i) {
            for c in &mut count[from..to] {
                *c += 1;
            }
        }
    }
    let mut start = vec![0usize; prep.segments + 1];
    for t in 0..prep.segments {
        start[t + 1] = start[t] + count[t];
    }
    let mut fill = start.clone();
    let mut members = vec![0u32; total];
    for i in 0..prep.len() {
        for &(from, to) in prep.resident(i) {
            for f in &mut fill[from..to] {
                members[*f] = i as u32;
                *f += 1;
            }
        }
    }
    Sections {
        member_start: start,
        members,
    }
}

/// The answer of [`Dfs::solve`] and [`Exact::solve`] for one capacity.
pub(super) enum Verdict {
    Found(Vec<u64>),
    /// No placement fits: the search space was exhausted.
    Refuted,
    /// Out of time.
    Unknown,
}

/// Why a DFS run stopped without a placement.
pub(super) enum Stop {
    /// The whole (pruned) space was searched: no placement fits the capacity.
    Exhausted,
    /// Out of nodes or time.
    Aborted,
}

impl<'a> Dfs<'a> {
    /// The DFS's data, or `None` when the instance has more than [`MAX_OVERLAP_PAIRS`] pairs
    /// found (before deduplication) or `cutoff` passes first.
    pub(super) fn new(instance: &Instance, prep: &'a Prepared, cutoff: Cutoff) -> Option<Dfs<'a>> {
        let n = prep.len();
        if n > u32::MAX as usize || cutoff.passed() {
            return None;
        }
        // Pairs resident at a common instant, by a sweep over the resident intervals (at each
        // start, pair with everything resident).
        let mut events: Vec<(usize, bool, u32)> = Vec::with_capacity(2 * n);
        for i in 0..n {
            for &(from, to) in prep.resident(i) {
                events.push((from, true, i as u32));
                events.push((to, false, i as u32));
            }
        }
        events.sort_unstable();
        let pairs = pairs_found(&events);
        if pairs > MAX_OVERLAP_PAIRS {
            return None;
        }
        let (adj_start, adj) = if prep.has_absences() {
            adjacency_dedup(&events, n, pairs, cutoff)?
        } else {
            adjacency(&events, n, pairs, cutoff)?
        };

        // Each step below takes milliseconds on 100k buffers: the clock is read between them.
        if cutoff.passed() {
            return None;
        }
        let contention = prep.contention();
        let bufs = instance.buffers();
        let len = |i: usize| instance.resident_length(i);
        let area = |i: usize| u128::from(prep.sizes[i]) * u128::from(len(i));
        let mut rankings = Vec::new();
        for key in 0..3 {
            if cutoff.passed() {
                return None;
            }
            let mut idx: Vec<usize> = (0..n).collect();
            idx.sort_unstable_by(|&a, &b| {
                let t = contention[b].cmp(&contention[a]);
                let w = len(b).cmp(&len(a));
                let ar = area(b).cmp(&area(a));
                let chain = match key {
                    0 => t.then(w).then(ar), // "TWA"
                    1 => t.then(ar).then(w), // "TAW"
                    _ => w.then(ar).then(t), // "WAT"
                };
                chain.then(bufs[a].id.cmp(&bufs[b].id))
            });
            let mut rank = vec![0u32; n];
            for (r, i) in idx.into_iter().enumerate() {
                rank[i] = r as u32;
            }
            rankings.push(rank);
        }
        Some(Dfs {
            prep,
            adj_start,
            adj,
            rankings,
            sections: OnceCell::new(),
        })
    }

    /// The buffers resident in each segment (empty lists above [`MAX_SECTION_MEMBERS`]),
    /// built on first use.
    pub(super) fn sections(&self) -> &Sections {
        self.sections.get_or_init(|| section_members(self.prep))
    }

    /// A placement with footprint ≤ `capacity`, searching until `deadline` on `clock` with
    /// doubling node limits over the rankings.
    fn solve(
        &self,
        capacity: u64,
        (clock, deadline): (Clock, u64),
        stats: &mut SearchStats,
    ) -> Verdict {
        if capacity < self.prep.lower_bound {
            return Verdict::Refuted;
        }
        let mut limit = (self.prep.len() as u64).max(64);
        while clock.now(stats) < deadline {
            limit = limit.saturating_mul(2);
            for rank in &self.rankings {
                stats.dfs_runs += 1;
                let limits = (limit, u64::MAX);
                match self.run(rank, capacity, limits, (clock, deadline), true, stats) {
                    Ok(offsets) => return Verdict::Found(offsets),
                    Err(Stop::Exhausted) => {
                        stats.dfs_refuted += 1;
                        return Verdict::Refuted;
                    }
                    Err(Stop::Aborted) => {}
                }
                if clock.now(stats) >= deadline {
                    return Verdict::Unknown;
                }
            }
        }
        Verdict::Unknown
    }

    /// One search in the order of `rank` for a placement within `capacity`, abandoned after
    /// `node_limit` nodes, once more than `off_path` of them lie off the path it is on (the
    /// nodes it backtracked over), or at the deadline; with `floors`, the section floors
    /// prune too.
    pub(super) fn run(
        &self,
        rank: &[u32],
        capacity: u64,
        (node_limit, off_path): (u64, u64),
        (clock, deadline): (Clock, u64),
        floors: bool,
        stats: &mut SearchStats,
    ) -> Result<Vec<u64>, Stop> {
        let sections = if floors {
            Some(self.sections()).filter(|s| !s.members.is_empty())
        } else {
            None
        };
        let mut state = State::new(self, rank, sections);
        if !state.check_initial(capacity) {
            return Err(Stop::Exhausted);
        }
        // frames[d] = the key after which level d looks for its next candidate, and the
        // buffer it currently has placed (with the log marks to undo it).
        let mut frames: Vec<Frame> = vec![Frame {
            cursor: None,
            placed: None,
        }];
        let mut nodes = 0u64;
        loop {
            let Some(frame) = frames.last_mut() else {
                return Err(Stop::Exhausted);
            };
            if let Some(p) = frame.placed.take() {
                state.unplace(p);
            }
            // Next candidate at this level, after the cursor, below the dominance bound.
            let next = state.next_candidate(frame.cursor);
            let Some((key, i)) = next else {
                frames.pop();
                continue;
            };
            frame.cursor = Some(key);
            nodes += 1;
            stats.dfs_nodes += 1;
            let depth = (self.prep.len() - state.remaining) as u64;
            if nodes >= node_limit || nodes.saturating_sub(depth) > off_path {
                return Err(Stop::Aborted);
            }
            if nodes.is_multiple_of(NODES_PER_CHECK) && clock.now(stats) >= deadline {
                return Err(Stop::Aborted);
            }
            let (placed, ok) = state.place(i, key.0, capacity);
            frame.placed = Some(placed);
            if !ok {
                continue;
            }
            if state.remaining == 0 {
                return Ok(state.offsets);
            }
            frames.push(Frame {
                cursor: Some(key),
                placed: None,
            });
        }
    }
}

struct Frame {
    /// Candidates must have keys strictly above this one.
    cursor: Option<(u64, u32)>,
    placed: Option<Placed>,
}

/// What `State::place` changed, to undo it.
struct Placed {
    buffer: usize,
    key: (u64, u32),
    log_mark: usize,
}

/// The mutable state of one DFS run.
struct State<'d, 'a> {
    dfs: &'d Dfs<'a>,
    rank: &'d [u32],
    /// By rank: the buffer.
    by_rank: Vec<usize>,
    min_off: Vec<u64>,
    offsets: Vec<u64>,
    placed: Vec<bool>,
    remaining: usize,
    /// Unplaced buffers by rank: keys `(min_off, rank)` and heights `min_off + size`.
    keys: RankTree,
    /// (buffer, previous min_off) for every raised min_off, in order.
    log: Vec<(u32, u64)>,
    /// Σ unplaced sizes per time segment, with range add and range max.
    totals: MaxTree,
    /// The same sums, plain (for the section floors).
    section_total: Vec<u64>,
    /// The section members, when checking the section floors (see [`State::floors_fit`]).
    sections: Option<&'d Sections>,
    /// Segments whose floor must be re-checked after the current placement.
    affected: Vec<usize>,
    affected_mark: Vec<bool>,
}

impl<'d, 'a> State<'d, 'a> {
    fn new(dfs: &'d Dfs<'a>, rank: &'d [u32], sections: Option<&'d Sections>) -> State<'d, 'a> {
        let prep = dfs.prep;
        let n = prep.len();
        let mut by_rank = vec![0usize; n];
        for (i, &r) in rank.iter().enumerate() {
            by_rank[r as usize] = i;
        }
        let heights: Vec<u64> = by_rank.iter().map(|&i| prep.sizes[i]).collect();
        State {
            dfs,
            rank,
            by_rank,
            min_off: vec![0; n],
            offsets: vec![0; n],
            placed: vec![false; n],
            remaining: n,
            keys: RankTree::new(&heights),
            log: Vec::new(),
            totals: MaxTree::new(&prep.live_per_segment()),
            section_total: prep.live_per_segment(),
            sections,
            affected: Vec::new(),
            affected_mark: vec![false; prep.segments],
        }
    }

    fn check_initial(&self, capacity: u64) -> bool {
        self.totals.max_all() <= u128::from(capacity)
    }

    /// The first unplaced key strictly above `cursor` whose offset is below the dominance
    /// bound `min_j (min_off(j) + s_j)` over unplaced `j`.
    fn next_candidate(&self, cursor: Option<(u64, u32)>) -> Option<((u64, u32), usize)> {
        let bound = self.keys.min_height();
        let key = match cursor {
            None => self.keys.min_key(),
            Some(c) => self.keys.first_above(c),
        }?;
        if key.0 >= bound {
            return None;
        }
        Some((key, self.by_rank[key.1 as usize]))
    }

    /// Places `i` at `offset` (its min_off); returns the undo record and whether the section
    /// inference still admits a placement within `capacity`.
    fn place(&mut self, i: usize, offset: u64, capacity: u64) -> (Placed, bool) {
        let prep = self.dfs.prep;
        let size = prep.sizes[i];
        let key = (offset, self.rank[i]);
        let log_mark = self.log.len();
        self.keys.remove(key.1);
        self.placed[i] = true;
        self.remaining -= 1;
        self.offsets[i] = offset;
        let top = offset + size;
        let dfs = self.dfs;
        let floors = self.sections.is_some();
        for &j in &dfs.adj[dfs.adj_start[i]..dfs.adj_start[i + 1]] {
            let j = j as usize;
            // Gravity stops `j` at `top`, or at the next point of its grid.
            let floor = prep.on_grid_from(j, top);
            if self.placed[j] || self.min_off[j] >= floor {
                continue;
            }
            self.log.push((j as u32, self.min_off[j]));
            self.min_off[j] = floor;
            self.keys.set(self.rank[j], floor, floor + prep.sizes[j]);
            if floors {
                for &(from, to) in prep.resident(j) {
                    self.mark_affected(from, to);
                }
            }
        }
        // The unplaced buffers resident with `i` all go above `top`; all go above `offset`.
        let cap = u128::from(capacity);
        let mut ok = true;
        for &(from, to) in prep.resident(i) {
            self.totals.add(from, to, -i128::from(size));
            ok = ok && u128::from(top) + self.totals.max_range(from, to) <= cap;
        }
        ok = ok && u128::from(offset) + self.totals.max_all() <= cap;
        if floors {
            for &(from, to) in prep.resident(i) {
                for t in from..to {
                    self.section_total[t] -= size;
                }
                self.mark_affected(from, to);
            }
            ok = ok && self.floors_fit(offset, capacity);
        }
        (
            Placed {
                buffer: i,
                key,
                log_mark,
            },
            ok,
        )
    }

    fn unplace(&mut self, p: Placed) {
        let prep = self.dfs.prep;
        let i = p.buffer;
        while self.log.len() > p.log_mark {
            let Some((j, old)) = self.log.pop() else {
                break;
            };
            let j = j as usize;
            self.min_off[j] = old;
            self.keys.set(self.rank[j], old, old + prep.sizes[j]);
        }
        for &(from, to) in prep.resident(i) {
            self.totals.add(from, to, i128::from(prep.sizes[i]));
            if self.sections.is_some() {
                for t in from..to {
                    self.section_total[t] += prep.sizes[i];
                }
            }
        }
        self.placed[i] = false;
        self.remaining += 1;
        self.keys.set(p.key.1, p.key.0, p.key.0 + prep.sizes[i]);
    }
}

impl State<'_, '_> {
    fn mark_affected(&mut self, from: usize, to: usize) {
        for t in from..to {
            if !self.affected_mark[t] {
                self.affected_mark[t] = true;
                self.affected.push(t);
            }
        }
    }

    /// Section floors (MiniMalloc's "unallocated floor"): in each affected segment `t`, every
    /// unplaced buffer live at `t` goes at or above `max(o, min_j min_off(j))` and they all
    /// overlap, so `max(o, min_j min_off(j)) + Σ_j s_j ≤ C`. Clears the affected list.
    fn floors_fit(&mut self, offset: u64, capacity: u64) -> bool {
        let Some(sections) = self.sections else {
            return true;
        };
        let mut ok = true;
        for &t in &self.affected {
            self.affected_mark[t] = false;
            if !ok {
                continue;
            }
            let total = self.section_total[t];
            if total == 0 {
                continue;
            }
            let floor = sections.members[sections.member_start[t]..sections.member_start[t + 1]]
                .iter()
                .map(|&j| j as usize)
                .filter(|&j| !self.placed[j])
                .map(|j| self.min_off[j])
                .min()
                .unwrap_or(0)
                .max(offset);
            ok = u128::from(floor) + u128::from(total) <= u128::from(capacity);
        }
        self.affected.clear();
        ok
    }
}

/// The unplaced buffers of a DFS, by rank, in a tournament tree: each node holds the least key
/// `(min_off, rank)` and the least height `min_off + size` of the unplaced leaves below it
/// (a placed leaf holds `(∞, ∞)` and `∞`). Point updates walk up while a node changes.
struct RankTree {
    leaves: usize,
    key: Vec<(u64, u32)>,
    height: Vec<u64>,
}

const NO_KEY: (u64, u32) = (u64::MAX, u32::MAX);

impl RankTree {
    /// All unplaced at `min_off = 0`, so the height of rank `r` is `heights[r]`.
    fn new(heights: &[u64]) -> RankTree {
        let leaves = heights.len().next_power_of_two().max(1);
        let mut t = RankTree {
            leaves,
            key: vec![NO_KEY; 2 * leaves],
            height: vec![u64::MAX; 2 * leaves],
        };
        for (r, &h) in heights.iter().enumerate() {
            t.key[leaves + r] = (0, r as u32);
            t.height[leaves + r] = h;
        }
        for v in (1..leaves).rev() {
            t.key[v] = t.key[2 * v].min(t.key[2 * v + 1]);
            t.height[v] = t.height[2 * v].min(t.height[2 * v + 1]);
        }
        t
    }

    fn set(&mut self, rank: u32, min_off: u64, height: u64) {
        self.write(rank, (min_off, rank), height);
    }

    fn remove(&mut self, rank: u32) {
        self.write(rank, NO_KEY, u64::MAX);
    }

    fn write(&mut self, rank: u32, key: (u64, u32), height: u64) {
        let mut v = self.leaves + rank as usize;
        self.key[v] = key;
        self.height[v] = height;
        while v > 1 {
            v >>= 1;
            let k = self.key[2 * v].min(self.key[2 * v + 1]);
            let h = self.height[2 * v].min(self.height[2 * v + 1]);
            if k == self.key[v] && h == self.height[v] {
                break;
            }
            self.key[v] = k;
            self.height[v] = h;
        }
    }

    fn min_key(&self) -> Option<(u64, u32)> {
        Some(self.key[1]).filter(|&k| k != NO_KEY)
    }

    fn min_height(&self) -> u64 {
        self.height[1]
    }

    /// The least key strictly above `cursor`: a descent that only enters subtrees holding a
    /// key ≤ `cursor` (a subtree whose least key is above `cursor` answers with that key).
    fn first_above(&self, cursor: (u64, u32)) -> Option<(u64, u32)> {
        let mut best = NO_KEY;
        let mut stack = vec![1usize];
        while let Some(v) = stack.pop() {
            let k = self.key[v];
            if k >= best || k == NO_KEY {
                continue;
            }
            if k > cursor {
                best = k;
            } else if v < self.leaves {
                stack.push(2 * v + 1);
                stack.push(2 * v);
            }
        }
        Some(best).filter(|&k| k != NO_KEY)
    }
}

/// A segment tree over time segments: range add, range max (lazy propagation, no push-down:
/// each node's `max` includes its own pending `add`).
struct MaxTree {
    n: usize,
    max: Vec<i128>,
    add: Vec<i128>,
}

impl MaxTree {
    fn new(values: &[u64]) -> MaxTree {
        let n = values.len().max(1);
        let mut t = MaxTree {
            n,
            max: vec![0; 4 * n],
            add: vec![0; 4 * n],
        };
        t.build(1, 0, n, values);
        t
    }

    fn build(&mut self, node: usize, lo: usize, hi: usize, values: &[u64]) {
        if hi - lo == 1 {
            self.max[node] = values.get(lo).map_or(0, |&v| i128::from(v));
            return;
        }
        let mid = lo + (hi - lo) / 2;
        self.build(2 * node, lo, mid, values);
        self.build(2 * node + 1, mid, hi, values);
        self.max[node] = self.max[2 * node].max(self.max[2 * node + 1]);
    }

    fn add(&mut self, from: usize, to: usize, delta: i128) {
        self.add_rec(1, 0, self.n, from, to, delta);
    }

    fn add_rec(&mut self, node: usize, lo: usize, hi: usize, from: usize, to: usize, d: i128) {
        if to <= lo || hi <= from {
            return;
        }
        if from <= lo && hi <= to {
            self.max[node] += d;
            self.add[node] += d;
            return;
        }
        let mid = lo + (hi - lo) / 2;
        self.add_rec(2 * node, lo, mid, from, to, d);
        self.add_rec(2 * node + 1, mid, hi, from, to, d);
        self.max[node] = self.max[2 * node].max(self.max[2 * node + 1]) + self.add[node];
    }

    fn max_all(&self) -> u128 {
        self.max[1].max(0) as u128
    }

    fn max_range(&self, from: usize, to: usize) -> u128 {
        self.max_rec(1, 0, self.n, from, to).max(0) as u128
    }

    fn max_rec(&self, node: usize, lo: usize, hi: usize, from: usize, to: usize) -> i128 {
        if to <= lo || hi <= from {
            return i128::MIN / 2;
        }
        if from <= lo && hi <= to {
            return self.max[node];
        }
        let mid = lo + (hi - lo) / 2;
        let l = self.max_rec(2 * node, lo, mid, from, to);
        let r = self.max_rec(2 * node + 1, mid, hi, from, to);
        l.max(r) + self.add[node]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Absence, Alignment, Buffer, Instance, check};

    /// The search after the peak-first orders on `instance`, on a wall clock with `budget`.
    fn later<'a>(instance: &'a Instance, prep: &'a Prepared, budget: Duration) -> Later<'a> {
        let deadline = nanos(budget);
        Later {
            instance,
            prep,
            clock: Clock::Wall(Instant::now()),
            deadline,
            dive_deadline: deadline,
            greedy_run: Duration::from_millis(1),
            windows: true,
            seed: 1,
        }
    }

    /// With two cores, the large buffers first run beside the search, and their plan replaces
    /// a larger incumbent (the operator graph where best-fit fragments: 1.0348 of `LB`).
    #[test]
    fn large_buffers_first_beside_the_search_replace_a_larger_incumbent() {
        let instance = crate::plan::iopddl_instance(5000, 2);
        let prep = Prepared::new(&instance, Alignment::default()).unwrap();
        let two_cores = std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2);
        let later = later(&instance, &prep, Duration::from_secs(60));
        let Some(beside) = Beside::start(&later, u64::MAX) else {
            assert!(
                !two_cores,
                "no thread beside the search on {two_cores} cores"
            );
            return;
        };
        let floor = floor::place(&instance, &prep);
        let lb = prep.lower_bound;
        let mut stats = SearchStats::default();
        let best = beside.settle(floor, lb, &mut stats);
        assert!(
            matches!(best.method, Method::Layers { .. }),
            "{}",
            best.method
        );
        assert!(
            best.footprint <= lb + lb / 500,
            "{} vs {lb}",
            best.footprint
        );
        let valid = check::validate_parts(&instance, &best.offsets, best.footprint, prep.alignment);
        assert_eq!(valid, Ok(()));
        assert_eq!(stats.improvements, 1);
        assert!(stats.greedy_runs >= 1, "{stats:?}");
        assert!(stats.dfs_runs > 0 && stats.dfs_nodes > 0, "{stats:?}");
    }

    /// No thread where the budget counts steps: the search stays a function of them.
    #[test]
    fn no_thread_beside_a_search_counted_in_steps() {
        let instance = crate::plan::iopddl_instance(500, 2);
        let prep = Prepared::new(&instance, Alignment::default()).unwrap();
        let mut later = later(&instance, &prep, Duration::from_secs(60));
        later.clock = Clock::Steps {
            per_greedy_run: 500,
        };
        assert!(Beside::start(&later, u64::MAX).is_none());
    }

    #[test]
    fn dfs_pairs_count_resident_meetings_once() {
        // 0 and 1 meet in two resident intervals ([1,3) and [7,9)): one pair. 2 lives inside
        // 0's window only: no pair with 0.
        let buffers = vec![
            Buffer {
                id: 0,
                lower: 0,
                upper: 10,
                size: 4,
            },
            Buffer {
                id: 1,
                lower: 1,
                upper: 9,
                size: 2,
            },
            Buffer {
                id: 2,
                lower: 4,
                upper: 6,
                size: 4,
            },
        ];
        let absences = vec![Absence {
            id: 0,
            from: 3,
            to: 7,
        }];
        let instance = Instance::with_absences(buffers, absences).unwrap();
        let prep = Prepared::new(&instance, Alignment::NONE).unwrap();
        let dfs = Dfs::new(&instance, &prep, Cutoff::NEVER).unwrap();
        let neighbours = |i: usize| dfs.adj[dfs.adj_start[i]..dfs.adj_start[i + 1]].to_vec();
        assert_eq!(neighbours(0), vec![1]);
        let mut n1 = neighbours(1);
        n1.sort_unstable();
        assert_eq!(n1, vec![0, 2]);
        assert_eq!(neighbours(2), vec![1]);
        // The optimum is the resident peak, 6: 0 and 2 share a range.
        assert_eq!(prep.lower_bound, 6);
        let mut stats = SearchStats::default();
        // Counted in steps: the verdicts cannot depend on the machine's load.
        let until = (Clock::Steps { per_greedy_run: 3 }, 100_000);
        let Verdict::Found(offsets) = dfs.solve(6, until, &mut stats) else {
            panic!("the DFS misses a placement at the bound");
        };
        assert_eq!(offsets[0], offsets[2]);
        assert_eq!(
            check::validate_parts(&instance, &offsets, 6, Alignment::NONE),
            Ok(())
        );
        assert!(matches!(dfs.solve(5, until, &mut stats), Verdict::Refuted));
    }
}
