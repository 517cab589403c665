//! Large buffers first: the buffers that hold all but a few percent of the peak are placed
//! alone by a short depth-first search, and the small ones around them by one greedy run.
//!
//! Why: on one operator graph too large for the exact search (the `iopddl` family of
//! `bench.rs`: sizes over eight orders of magnitude, one part of time), the search over the
//! whole instance and the windows stalled at 1.0060–1.0346 of `LB` on 6 of its 15 instances
//! of seeds 1–5 at 1 s. Yet the DFS placed the few thousand buffers of 16 MiB or more, alone,
//! within their own peak in tens of milliseconds (20k buffers, seed 2: 3,361 of them in 34
//! ms); among all the buffers it does not. The small buffers, placed after them, then take
//! about their share of the peak on top of them (that instance: 0.9771 of `LB` for the large
//! ones, 1.0018 with the small), and the plan ends near `LB` (docs/BENCHMARKS.md, "Large
//! buffers first").
//!
//! **An attempt.** A threshold `τ` (an aligned size of the instance) splits it: the buffers of
//! at least `τ` bytes form an instance of their own, whose peak `LB_τ` leaves the small
//! buffers a share `(LB − LB_τ) / LB` of `LB`. Only thresholds whose share lies in
//! [`SHARES`] are tried, from the largest (fewest large buffers: the cheapest search) down.
//! For each, one DFS run (`search.rs`, section floors on) per ranking, in the order of
//! [`RANKINGS`], at the capacity `LB_τ + (LB − LB_τ) /` [`SLACK`], each abandoned once it
//! has backtracked over a few nodes ([`backtracks`]): a run that succeeds places nearly every
//! buffer at its first try. A placement found is completed: its large buffers stay where they
//! are and the small ones follow by best-fit in descending size, as SmartPool's best-fit would
//! place them after the large ones (`greedy::place_around`). Then the next threshold is tried,
//! below the best completion so far: a smaller threshold leaves the small buffers less of the
//! peak, and when its run succeeds its completion usually ends nearer `LB` (40k buffers, seed
//! 6: shares of 2.9, 1.0 and 0.7 % completed at 1.0153, 1.0018 and 1.0005 of `LB`).
//!
//! The attempts stop at a deadline the caller gives, at `LB`, and early enough to leave a
//! completion its time; a completion is abandoned at the search's deadline or once it reaches
//! the best footprint so far. `search.rs` tries this only where the windows apply
//! (`window.rs`: one part of time above the exact search's size, no absence windows).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::greedy::{self, Fit, Prepared};
use super::search::{Clock, Dfs, SearchStats};
use super::{Instance, Method, Outcome};

/// The shares of `LB` left to the small buffers at which a threshold is tried. Measured on
/// the `iopddl` family (one DFS run per threshold and ranking, 0.3 % of `LB` above `LB_τ`):
/// above 3 % runs succeed more often, but the small buffers no longer fit around the large
/// ones as well (40k, seed 1: 1.0088 of `LB` from a threshold at 3.2 %, 1.0135 at 6.8 %);
/// below 1.5 % they fail more often (on 20k buffers, seeds 1 and 2, 6 of 15 runs succeeded at
/// 1.5–3 %, 2 of 30 below) but complete nearer `LB` when they succeed. Down to 0.5 %, with
/// every success completed and the best kept, 11–12 of the 45 instances of seeds 1–15 ended
/// above 1.005 of `LB` at 1 s in three rounds, against 13–14 from 1.5 % (beside the search,
/// `search.rs`); from 0.3 % one round gave 11, with a larger mean excess.
const SHARES: (f64, f64) = (0.005, 0.03);

/// The capacity of an attempt exceeds `LB_τ` by this fraction of the small buffers' share
/// `LB − LB_τ`: a little room makes a run that places the large buffers without
/// backtracking more likely (the `iopddl` 40k instance of seed 3, nine thresholds and three
/// rankings: 11 of 27 runs succeed at 0.3 % of `LB` above `LB_τ`, 8 at `LB_τ`), and the
/// completion still ends near `LB`. Chosen with [`SHARES`] on the 15 instances of seeds 1–5
/// at 1 s (with an eighth, 20k seed 1 ended at 1.0054 of `LB` instead of 1.0038).
const SLACK: u64 = 16;

/// The DFS's rankings (`Dfs::rankings`: "TWA", "TAW", "WAT") in the order tried: "TAW"
/// succeeded most often (17 of the 27 successes in 96 runs on four `iopddl` instances).
const RANKINGS: [usize; 3] = [1, 0, 2];

/// The best placement of `instance` with its large buffers placed first (module doc) that the
/// attempts started before `latest` on `clock` find, completed below `ceiling` before
/// `deadline`. An attempt starts only if it may end in time for its completion, which costs
/// about `greedy_run` (one greedy run on the whole instance) times the share of the buffers it
/// places. Once `stop` is set no run or completion starts (`search.rs` runs this on a thread
/// of its own).
pub(super) fn place(
    instance: &Instance,
    prep: &Prepared,
    ceiling: u64,
    (clock, latest, deadline): (Clock, u64, u64),
    greedy_run: Duration,
    stop: &AtomicBool,
    stats: &mut SearchStats,
) -> Option<Outcome> {
    let stopped = || stop.load(Ordering::Relaxed);
    if clock.now(stats) >= latest || stopped() {
        return None;
    }
    let lb = prep.lower_bound;
    let mut best: Option<Outcome> = None;
    for threshold in thresholds(prep) {
        let large: Vec<usize> = (0..prep.len())
            .filter(|&i| prep.sizes[i] >= threshold)
            .collect();
        let small_share = 1.0 - large.len() as f64 / prep.len() as f64;
        let completion = greedy_run.mul_f64(small_share);
        let attempts_until = latest.min(clock.leave(deadline, completion));
        if clock.now(stats) >= attempts_until {
            break;
        }
        let buffers = instance.buffers();
        // Some buffers of a valid instance: never an error.
        let Ok(sub) = Instance::new(large.iter().map(|&i| buffers[i]).collect()) else {
            break;
        };
        let Ok(sub_prep) = Prepared::new(&sub, prep.alignment) else {
            break;
        };
        let capacity = sub_prep.lower_bound + (lb - sub_prep.lower_bound) / SLACK;
        let Some(dfs) = Dfs::new(&sub, &sub_prep, clock.cutoff(attempts_until)) else {
            continue;
        };
        for rank in RANKINGS {
            if clock.now(stats) >= attempts_until || stopped() {
                return best;
            }
            stats.dfs_runs += 1;
            let until = (clock, attempts_until);
            let limits = (u64::MAX, backtracks(sub.len()));
            let Ok(offsets) = dfs.run(&dfs.rankings[rank], capacity, limits, until, true, stats)
            else {
                continue;
            };
            if stopped() {
                return best;
            }
            let fixed: Vec<(usize, u64)> = large.iter().copied().zip(offsets).collect();
            let below = best.as_ref().map_or(ceiling, |found| found.footprint);
            let cut = (clock, deadline, below);
            if let Some(found) = complete(prep, &fixed, threshold, cut, stats) {
                if found.footprint == lb {
                    return Some(found);
                }
                best = Some(found);
            }
            break;
        }
    }
    best
}

/// The nodes a run may backtrack over before it is abandoned. A run that succeeds places
/// about one node per buffer (on the `iopddl` 40k instance of seed 3, 18 of 19 successes
/// backtracked over fewer than `n / 64`), so a run that has backtracked over more is
/// abandoned, and a failed attempt costs the nodes up to where it went astray: on 40k seeds
/// 7 and 9 and 20k seed 10, 13 failed runs stopped at 25–77 % of their buffers, where a limit
/// of `n + n / 64` nodes in all had let each run on to about `n` (20k seed 10 at 1 s: 1.0264
/// → 1.0185 of `LB`).
fn backtracks(buffers: usize) -> u64 {
    buffers as u64 / 64 + 64
}

/// The thresholds tried, largest first: the aligned sizes whose share of `LB` left to the
/// smaller buffers lies in [`SHARES`]. The share grows with the threshold, so the range is
/// found by bisection, one sweep over the segments per probe.
fn thresholds(prep: &Prepared) -> Vec<u64> {
    let lb = prep.lower_bound as f64;
    let share = |threshold: u64| 1.0 - prep.peak_from(threshold) as f64 / lb;
    let mut sizes = prep.sizes.clone();
    sizes.sort_unstable();
    sizes.dedup();
    let (low, high) = SHARES;
    let first = sizes.partition_point(|&t| share(t) < low);
    let last = sizes.partition_point(|&t| share(t) <= high);
    sizes[first..last].iter().rev().copied().collect()
}

/// The small buffers (below `threshold`) placed by best-fit in descending size around the
/// large ones at their `fixed` offsets; `None` if cut at `deadline` or at `ceiling`.
fn complete(
    prep: &Prepared,
    fixed: &[(usize, u64)],
    threshold: u64,
    (clock, deadline, ceiling): (Clock, u64, u64),
    stats: &mut SearchStats,
) -> Option<Outcome> {
    let mut small: Vec<usize> = (0..prep.len())
        .filter(|&i| prep.sizes[i] < threshold)
        .collect();
    small.sort_by_key(|&i| (std::cmp::Reverse(prep.sizes[i]), i));
    stats.greedy_runs += 1;
    let cut = (clock.cutoff(deadline), ceiling);
    let (offsets, footprint) = greedy::place_around(prep, fixed, &small, Fit::Best, cut)?;
    stats.improvements += 1;
    Some(Outcome {
        offsets,
        footprint,
        method: Method::Layers { threshold },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::check::validate_parts;
    use crate::plan::{Alignment, Order, iopddl_instance};

    /// An operator graph where best-fit fragments (1.0348 of `LB`).
    fn fragmenting() -> (Instance, Prepared) {
        let instance = iopddl_instance(5000, 2);
        let prep = Prepared::new(&instance, Alignment::default()).unwrap();
        (instance, prep)
    }

    /// [`place`] below `ceiling` on a clock of steps that never runs out.
    fn untimed(
        (instance, prep): &(Instance, Prepared),
        ceiling: u64,
        stats: &mut SearchStats,
    ) -> Option<Outcome> {
        let clock = Clock::Steps {
            per_greedy_run: instance.len() as u64,
        };
        let until = (clock, u64::MAX, u64::MAX);
        place(
            instance,
            prep,
            ceiling,
            until,
            Duration::ZERO,
            &AtomicBool::new(false),
            stats,
        )
    }

    /// The small buffers' share of `LB` when the buffers of at least `threshold` go first.
    fn share(prep: &Prepared, threshold: u64) -> f64 {
        1.0 - prep.peak_from(threshold) as f64 / prep.lower_bound as f64
    }

    /// The buffers of 16 MiB and more, placed first, leave the small ones room, and the plan
    /// ends within 0.2 % of `LB`.
    #[test]
    fn large_buffers_first_end_near_the_bound_where_best_fit_fragments() {
        let graph = fragmenting();
        let (instance, prep) = &graph;
        let lb = prep.lower_bound;
        let best_fit = greedy::run(instance, prep, Order::SizeDesc, Fit::Best);
        assert!(best_fit.footprint > lb + lb / 40, "{}", best_fit.footprint);

        let mut stats = SearchStats::default();
        let out = untimed(&graph, u64::MAX, &mut stats).unwrap();
        let valid = validate_parts(instance, &out.offsets, out.footprint, prep.alignment);
        assert_eq!(valid, Ok(()));
        assert!(out.footprint <= lb + lb / 500, "{} vs {lb}", out.footprint);
        let Method::Layers { threshold } = out.method else {
            panic!("{}", out.method)
        };
        assert!(thresholds(prep).contains(&threshold));
        // The attempts went on after the first success; each completion is one greedy run, at
        // most one per threshold, and nothing else but DFS nodes was counted.
        assert!((2..=thresholds(prep).len() as u64).contains(&stats.greedy_runs));
        assert!(stats.dfs_nodes > 0);
    }

    /// The thresholds are exactly the sizes whose share lies within `SHARES`, largest first.
    #[test]
    fn thresholds_leave_the_small_buffers_a_share_within_the_range() {
        let (low, high) = SHARES;
        for (n, seed) in [(5000, 1), (5000, 3), (6000, 6), (8000, 1)] {
            let instance = iopddl_instance(n, seed);
            let prep = Prepared::new(&instance, Alignment::default()).unwrap();
            let mut sizes = prep.sizes.clone();
            sizes.sort_unstable();
            sizes.dedup();
            sizes.reverse();
            let expected: Vec<u64> = (sizes.iter().copied())
                .filter(|&t| (low..=high).contains(&share(&prep, t)))
                .collect();
            assert!(!expected.is_empty(), "n {n} seed {seed}");
            assert_eq!(thresholds(&prep), expected, "n {n} seed {seed}");
        }
    }

    /// Attempts start only while they leave the completion its time, none once the attempts'
    /// deadline has passed, and none once told to stop.
    #[test]
    fn no_attempt_starts_too_late_for_its_completion() {
        let (instance, prep) = fragmenting();
        let mut stats = SearchStats::default();
        let steps = Clock::Steps {
            per_greedy_run: instance.len() as u64,
        };
        let wall = Clock::Wall(std::time::Instant::now());
        let second = 1_000_000_000;
        let an_hour = Duration::from_secs(3600);
        let untimed = (steps, u64::MAX, u64::MAX);
        for (until, greedy_run, stopped) in [
            ((steps, 0, u64::MAX), Duration::ZERO, false),
            ((wall, u64::MAX, second), an_hour, false),
            (untimed, Duration::ZERO, true),
        ] {
            let stop = AtomicBool::new(stopped);
            let out = place(
                &instance,
                &prep,
                u64::MAX,
                until,
                greedy_run,
                &stop,
                &mut stats,
            );
            assert!(out.is_none());
            assert_eq!(stats, SearchStats::default());
        }
    }

    /// A completion that reaches the ceiling (the incumbent's footprint) is dropped, and the
    /// plan returned is the best completion: below it, no attempt finds one.
    #[test]
    fn a_completion_at_the_ceiling_is_dropped() {
        let graph = fragmenting();
        let mut stats = SearchStats::default();
        let found = untimed(&graph, u64::MAX, &mut stats).unwrap();
        assert!(untimed(&graph, found.footprint, &mut stats).is_none());
    }
}
