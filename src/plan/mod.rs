//! Offline memory planning (SmartPool): where each buffer of an allocation problem lives in one
//! pool.
//!
//! The problem (dynamic storage allocation, DSA): buffers with a size and a lifetime; place
//! each at an offset so that two buffers whose lifetimes overlap never overlap in memory, and
//! the footprint max(offset + size) is as small as possible. Lifetimes are half-open event
//! intervals `[lower, upper)`: a buffer is not live at `upper`, so a buffer born at `upper` may
//! take its place (the convention of the DSA CSV format `id,lower,upper,size`; every importer
//! converts to it).
//!
//! A buffer swapped out by AutoSwap has *absence windows* ([`Instance::with_absences`]):
//! half-open `[from, to)` with `lower < from < to < upper`, during which it is on the host and
//! its range may hold other buffers (design §2.1: a rectangle with a hole). Its *resident time*
//! `T_i` is `[lower_i, upper_i)` minus its windows ([`Instance::resident`]); without windows,
//! `T_i = [lower_i, upper_i)`. It keeps one offset for its whole life, so it swaps back in to
//! the same address.
//!
//! # Invariants of a [`Plan`] (checked by [`validate`], independently of every planner)
//!
//! With `s_i = ⌈size_i / a⌉ · a` the aligned size of buffer `i` ([`Alignment`], 512 B by
//! default) and `o_i` its one offset:
//!
//! * `o_i mod a = 0` and `footprint = max_i (o_i + s_i)`;
//! * `T_i ∩ T_j ≠ ∅ ⇒ [o_i, o_i + s_i) ∩ [o_j, o_j + s_j) = ∅` (overlapping resident times ⇒
//!   disjoint ranges), hence at every instant `t` `Σ_{i resident at t} s_i ≤ footprint`;
//! * so `footprint ≥ LB = max_t Σ_{i resident at t} s_i` (the aligned peak of resident bytes,
//!   the lower bound every [`PlanReport::ratio`] is measured against).
//!
//! # Planners ([`Policy`])
//!
//! * [`Policy::BestFit`]: SmartPool. Size descending (ties: longer lifetime, then id), each
//!   buffer at the smallest gap that fits among the placed buffers whose resident times
//!   overlap its own.
//! * [`Policy::FirstFit`]: same order, lowest gap that fits.
//! * [`Policy::BestOf`]: both fits over every [`Order`]; keeps the smallest footprint (best-fit
//!   by size is the incumbent; another run replaces it only if strictly smaller).
//! * [`Policy::Search`] (beyond the paper): the floor (best-fit in birth order with a free
//!   list, `floor.rs`: a tenth of best-fit's time) is the first incumbent, and best-fit replaces
//!   it unless larger; one dive of a canonical depth-first search (MiniMalloc-style) tries to
//!   meet `LB` at once (above 4096 buffers, when every part of time left once the buffers
//!   live throughout are stacked has at most 4096, the exact search on each part follows:
//!   `decompose.rs`); the peak-first greedy orders, each only while it may meet `LB`
//!   ([`Order::PeakBirth`]); where a part has more than 4096 buffers, the large buffers placed
//!   first by short DFS runs and the small ones around them (`layers.rs`; on a wall clock
//!   with a second core, on a thread of their own beside everything after them), then windows
//!   of time around the buffers at the top placed again with the rest fixed (`window.rs`); then
//!   the placements of the other policies `itermem compare` reports are offered: cnmem (tuned
//!   and grown) and PyTorch's caching allocator as their simulators place them, and
//!   first-fit (see `online.rs`: so that SmartPool never needs more than any of them); the
//!   rest of best-of runs, then, while `footprint > LB` and [`PlanOptions::budget`] (or
//!   [`PlanOptions::steps`]) lasts, the depth-first search at `LB` and at capacities between
//!   `LB` and the incumbent, alternating with a seeded randomised iterated greedy, or with
//!   those windows where they apply (see
//!   `search.rs`). Up to 4096 buffers that search is exact
//!   (`exact.rs`: MiniMalloc's canonical solutions, section inference, dominance and dynamic
//!   temporal decomposition, with remembered refutations, a stronger section bound and
//!   resumable restarts): it gets 5/8 of the remaining budget at `LB`, then closes in from
//!   above on capacities between what ran out of time and the incumbent; it fits all seven of
//!   MiniMalloc's challenging instances into 2^20 bytes, all but D at `LB`, within
//!   `--budget-ms 10000` (docs/BENCHMARKS.md). A plan replaces the incumbent only if
//!   strictly smaller, and the search stops as soon as `footprint = LB` (then the plan is optimal).
//!   A wall-clock budget is a wall for everything after the floor (best-fit and the candidates
//!   before the budgeted search included); a budget of steps lets those candidates complete
//!   (see [`PlanOptions`]).
//!
//! Every planner supports absence windows: a greedy run records each buffer once per resident
//! interval and asks for the bytes taken during any of them; the DFS builds its conflict pairs
//! and per-segment sums from resident intervals (see `greedy.rs`, `search.rs`). Without
//! windows the work is what it was.
//!
//! Every greedy run costs O(n log n) plus the gap lists it reads (see `greedy.rs`): 100k
//! buffers plan in about 0.2 s ([`bench_scaling`]), the search's floor in about 20 ms
//! (`floor.rs`). Planning time is measured and reported ([`PlanReport::elapsed`]). Nothing
//! here prints, panics on a valid instance, or uses `unsafe`; randomness comes only from
//! [`PlanOptions::seed`]. In debug builds every plan is checked by [`validate`] before it is
//! returned (`debug_assert`, O(n log n)).

mod align;
mod bench;
mod check;
mod decompose;
mod exact;
mod floor;
mod greedy;
mod instance;
mod layers;
mod online;
mod search;
mod timeline;
mod window;

#[cfg(test)]
mod tests;

use std::fmt;
use std::time::{Duration, Instant};

pub use align::{Alignment, Bounds};
pub use bench::{
    Family, ScalingReport, bench_scaling, family_instance, iopddl_instance, random_instance,
    somas_instance,
};
pub use check::{Conflict, validate};
pub use greedy::{Fit, Order};
pub use instance::{Absence, Buffer, Instance, InstanceError, Resident};
pub use search::SearchStats;

/// A placement: one offset per buffer (same order as the instance), in a pool of `footprint`
/// bytes whose granularity is `alignment`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub offsets: Vec<u64>,
    pub footprint: u64,
    pub alignment: Alignment,
}

/// Why no plan could be made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlanError {
    /// The aligned sizes add up to more than `u64::MAX` bytes: no offset can express a plan.
    TooLarge,
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlanError::TooLarge => write!(f, "the aligned buffer sizes add up to more than 2^64"),
        }
    }
}

impl std::error::Error for PlanError {}

/// Which planner to run (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Policy {
    BestFit,
    FirstFit,
    BestOf,
    Search,
}

impl Policy {
    pub const ALL: [Policy; 4] = [
        Policy::BestFit,
        Policy::FirstFit,
        Policy::BestOf,
        Policy::Search,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Policy::BestFit => "best-fit",
            Policy::FirstFit => "first-fit",
            Policy::BestOf => "best-of",
            Policy::Search => "search",
        }
    }
}

impl std::str::FromStr for Policy {
    type Err = String;

    /// Accepts the names of [`Policy::name`].
    fn from_str(s: &str) -> Result<Policy, String> {
        Policy::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| {
                format!("unknown planner '{s}': expected best-fit, first-fit, best-of or search")
            })
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Settings shared by every planner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlanOptions {
    /// Pool granularity; sizes are rounded up to it (default 512 B).
    pub alignment: Alignment,
    /// Wall-clock budget of [`Policy::Search`], from the start of planning: a wall. The search
    /// returns within it unless the instance's preparation and the floor alone take longer (they
    /// always complete: about 30 ms on the 100k-buffer scaling instance, where best-fit takes
    /// 200 ms): everything after them, best-fit included, reads the clock and stops at the
    /// budget, and when best-fit is cut the plan is the floor's. A greedy run, an online
    /// allocator's replay or a list of DFS pairs cut short is dropped; the validation of a replayed
    /// placement (which cannot be cut) starts only if the replay's time remains. Measured overrun
    /// (`itermem bench plan --budget-ms`, up to 100k buffers): under 5 ms, mostly under 0.5 ms,
    /// whenever the floor fits. So the property `search ≤ best-fit, cnmem, cnmem grown,
    /// caching, first-fit` (and `≤ best-of`) holds only when the budget let those candidates run
    /// (the dive before the online ones leaves them two greedy runs' time: `online.rs`; on a
    /// part of time too large for the exact search, the windows before them leave them an
    /// eighth of the time left at most: `window.rs`, `search.rs`); with
    /// [`PlanOptions::steps`] it always holds (see there).
    pub budget: Duration,
    /// A budget of work instead of time: when set, [`Policy::Search`] stops after this many
    /// steps (one depth-first search node; a greedy run on `n` buffers counts `n`, a move of
    /// the search over windows of time the buffers it frees) and
    /// `budget` is not used. The same instance, seed and steps then give the same plan on any
    /// machine under any load (what tests use); the time it takes still varies, and is not
    /// bounded: the floor, best-fit, best-of, the online allocators' placements and the DFS's
    /// pair lists are not counted in steps and always complete, so even zero steps gives a plan
    /// no worse than any of them.
    pub steps: Option<u64>,
    /// Seed of every randomised choice of [`Policy::Search`].
    pub seed: u64,
}

impl Default for PlanOptions {
    fn default() -> PlanOptions {
        PlanOptions {
            alignment: Alignment::DEFAULT,
            budget: Duration::from_secs(1),
            steps: None,
            seed: 0x5EED,
        }
    }
}

/// What produced a plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// One greedy run.
    Greedy { order: Order, fit: Fit },
    /// The canonical depth-first search, at the capacity it was asked to meet.
    Dfs { capacity: u64 },
    /// A greedy run on a randomly perturbed order (iteration `round` of the seeded search).
    Perturbed { fit: Fit, round: u64 },
    /// The placement an online allocator makes, its regions laid end to end (`online.rs`).
    Online { policy: crate::policy::Policy },
    /// Best-fit in birth order with a free list (`floor.rs`): the placement of `Greedy {
    /// Birth, Best }` when no buffer has absence windows.
    Floor,
    /// The globals stacked and each of `parts` independent parts of time placed on its own,
    /// by the exact search where it can (`decompose.rs`).
    Decomposed { parts: usize },
    /// The incumbent with windows of time placed again around the buffers at its top, `kept`
    /// re-placements kept (`window.rs`).
    Windows { kept: u64 },
    /// The buffers of at least `threshold` aligned bytes placed first by the DFS, the others
    /// around them by best-fit (`layers.rs`).
    Layers { threshold: u64 },
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Method::Greedy { order, fit } => write!(f, "{}/{}", fit.name(), order.name()),
            Method::Dfs { capacity } => write!(f, "dfs@{capacity}"),
            Method::Perturbed { fit, round } => write!(f, "perturbed-{}#{round}", fit.name()),
            Method::Online { policy } => write!(f, "online-{}", policy.name()),
            Method::Floor => f.write_str("floor"),
            Method::Decomposed { parts } => write!(f, "decomposed/{parts}"),
            Method::Windows { kept } => write!(f, "windows/{kept}"),
            Method::Layers { threshold } => write!(f, "layers@{threshold}"),
        }
    }
}

/// A plan with its measurements.
#[derive(Clone, Debug)]
pub struct PlanReport {
    pub policy: Policy,
    pub plan: Plan,
    /// `plan.footprint`, in aligned bytes.
    pub footprint: u64,
    /// Peak live bytes of the aligned sizes: no plan can do better.
    pub lower_bound: u64,
    /// Peak live bytes of the sizes as given (for comparison with tools that do not align).
    pub unaligned_peak: u64,
    /// `footprint / lower_bound` (1.0 for an empty instance).
    pub ratio: f64,
    /// Wall-clock planning time, from the instance to the plan.
    pub elapsed: Duration,
    /// What produced the plan that was kept.
    pub method: Method,
    /// Work done by [`Policy::Search`] (zero for the other policies).
    pub stats: SearchStats,
}

impl PlanReport {
    /// Whether the footprint meets the lower bound (then the plan is optimal).
    pub fn is_optimal(&self) -> bool {
        self.footprint == self.lower_bound
    }
}

/// Runs `policy` on `instance`. Fails only when the aligned sizes overflow a `u64`.
pub fn plan(
    instance: &Instance,
    policy: Policy,
    options: &PlanOptions,
) -> Result<PlanReport, PlanError> {
    let start = Instant::now();
    let prep = greedy::Prepared::new(instance, options.alignment)?;
    let mut stats = SearchStats::default();
    let outcome = match policy {
        Policy::BestFit => greedy::run(instance, &prep, Order::SizeDesc, Fit::Best),
        Policy::FirstFit => greedy::run(instance, &prep, Order::SizeDesc, Fit::First),
        Policy::BestOf => best_of(instance, &prep),
        Policy::Search => search::search(
            instance,
            &prep,
            search::Clock::with_deadline(start, options.budget, options.steps, prep.len()),
            options.seed,
            &mut stats,
        ),
    };
    Ok(report(instance, &prep, (policy, outcome, stats), start))
}

/// Every greedy run of [`Policy::BestOf`], the smallest kept.
fn best_of(instance: &Instance, prep: &greedy::Prepared) -> Outcome {
    let incumbent = greedy::run(instance, prep, Order::SizeDesc, Fit::Best);
    let others = greedy::every_run().filter(|&run| run != (Order::SizeDesc, Fit::Best));
    greedy::best_of(
        instance,
        prep,
        incumbent,
        others,
        (Cutoff::NEVER, Duration::ZERO),
    )
}

/// The report of `policy`'s `outcome` on `instance`, planned since `start`.
fn report(
    instance: &Instance,
    prep: &greedy::Prepared,
    (policy, outcome, stats): (Policy, Outcome, SearchStats),
    start: Instant,
) -> PlanReport {
    let plan = Plan {
        offsets: outcome.offsets,
        footprint: outcome.footprint,
        alignment: prep.alignment,
    };
    // O(n log n), like planning itself: affordable in every debug build.
    debug_assert_eq!(validate(instance, &plan), Ok(()));
    PlanReport {
        policy,
        footprint: plan.footprint,
        lower_bound: prep.lower_bound,
        unaligned_peak: prep.unaligned_peak,
        ratio: ratio(plan.footprint, prep.lower_bound),
        elapsed: start.elapsed(),
        method: outcome.method,
        stats,
        plan,
    }
}

/// Best-of's placement of `instance` with the buffers `on_grid` (instance order) at multiples
/// of `grid`, a multiple of `alignment`, then the search's improvement until the footprint is
/// at most `enough` or `steps` are spent (counted in steps: the same plan under any load): the
/// exact search, first at `enough`, and greedy runs on noisy orders, which both keep such a
/// grid (gravity stops an on-grid buffer at the next point of its grid), not the search's
/// other moves. For swap mode's blocks, mapped granule by granule among tensors of any size
/// (`swap::combined`).
pub fn plan_on_grid(
    instance: &Instance,
    alignment: Alignment,
    (on_grid, grid): (&[usize], u64),
    (steps, enough): (u64, u64),
) -> Result<PlanReport, PlanError> {
    let start = Instant::now();
    let prep = greedy::Prepared::new(instance, alignment)?.on_grid(on_grid, grid);
    let best = best_of(instance, &prep);
    let mut stats = SearchStats::default();
    let improving = steps > 0 && best.footprint > enough.max(prep.lower_bound);
    let dfs = improving
        .then(|| search::Dfs::new(instance, &prep, Cutoff::NEVER))
        .flatten();
    let clock = search::Clock::Steps {
        per_greedy_run: prep.len() as u64,
    };
    let seed = PlanOptions::default().seed;
    // Not improving, `improve` returns the incumbent at once (no steps, or it is enough).
    let until = (clock, steps);
    let dfs = (dfs.as_ref(), false);
    let best = search::improve(
        instance,
        &prep,
        dfs,
        (best, enough),
        until,
        seed,
        &mut stats,
    );
    let policy = if improving {
        Policy::Search
    } else {
        Policy::BestOf
    };
    Ok(report(instance, &prep, (policy, best, stats), start))
}

/// `footprint / lower_bound`, 1.0 when both are 0.
pub fn ratio(footprint: u64, lower_bound: u64) -> f64 {
    if lower_bound == 0 {
        1.0
    } else {
        footprint as f64 / lower_bound as f64
    }
}

/// One greedy placement of `instance` with `order` and `fit` (no report, no timing).
pub fn place(
    instance: &Instance,
    order: Order,
    fit: Fit,
    alignment: Alignment,
) -> Result<Plan, PlanError> {
    let prep = greedy::Prepared::new(instance, alignment)?;
    let outcome = greedy::run(instance, &prep, order, fit);
    Ok(Plan {
        offsets: outcome.offsets,
        footprint: outcome.footprint,
        alignment,
    })
}

/// The instant at which work bounded by a wall-clock budget is abandoned (see
/// [`PlanOptions::budget`]); [`Cutoff::NEVER`] lets it complete, as every planner but a search
/// with a wall-clock budget does (so results counted in steps stay deterministic).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Cutoff(Option<Instant>);

impl Cutoff {
    pub(crate) const NEVER: Cutoff = Cutoff(None);

    pub(crate) fn at(instant: Instant) -> Cutoff {
        Cutoff(Some(instant))
    }

    /// Whether the work must stop now.
    pub(crate) fn passed(&self) -> bool {
        self.0.is_some_and(|at| Instant::now() >= at)
    }

    /// Whether work that cannot be cut and takes about `cost` ends before the cutoff.
    pub(crate) fn allows(&self, cost: Duration) -> bool {
        self.0.is_none_or(|at| Instant::now() + cost <= at)
    }
}

/// A placement found by some planner, before it becomes a [`Plan`].
#[derive(Clone, Debug)]
pub(crate) struct Outcome {
    pub(crate) offsets: Vec<u64>,
    pub(crate) footprint: u64,
    pub(crate) method: Method,
}
