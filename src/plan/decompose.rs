//! Temporal decomposition: the exact search (`exact.rs`) on instances too large for it, one
//! independent part of time at a time.
//!
//! Why: above [`exact::MAX_BUFFERS`] buffers the search has only its flat DFS and randomised
//! greedy, which on multi-step training traces rarely improve on best-fit within a second
//! (40k–60k buffers of the `somas` family of `bench.rs`: 1.0018–1.0022 of `LB`). Yet such
//! traces are many small problems side by side: between two steps only the buffers that live
//! throughout (weights, optimizer state) are resident, and the exact search places one step
//! at its bound in milliseconds.
//!
//! The reduction, exact: a buffer resident over the whole timeline (*global*) meets every
//! other buffer, so in any placement the others lie wholly below or above it; moving it to the
//! bottom and the buffers below it up by its size keeps every pair that met disjoint and the
//! footprint. So the globals are stacked from offset 0 (their total `G`), and the rest splits
//! into parts of time that no lifetime crosses ([`greedy::parts`]), each placed on its own
//! within `C - G` for a footprint `C`: the footprint is `G + max_p F_p` over the parts'
//! footprints `F_p`, and `LB = G + max_p LB_p`.
//!
//! The search, on instances whose parts all have at most [`exact::MAX_BUFFERS`] buffers (a
//! larger part would only get best-fit, which the incumbent already is): first every part, in
//! decreasing order of its own lower bound `LB_p`, is asked for a placement within the target
//! (at first `LB - G`) by the exact search, with half of an equal share of the time left; one
//! it does not place in time takes best-fit's placement, and the target rises to that
//! footprint, since no later part need be lower. Then the part that sets the footprint is
//! asked again, halfway between its footprint and the lowest capacity not given up (the exact
//! search resumes where it stopped and remembers its refutations), with half of the time left,
//! until that time is out or nothing is left to try. The result replaces the incumbent only if
//! strictly smaller. Instances with absence windows are left to the rest of the search (a
//! swapped buffer is never global, and its windows would have to follow it).

use super::exact::{self, Exact};
use super::greedy::{self, Fit, Order, Prepared};
use super::search::{Clock, Dfs, SearchStats, Verdict};
use super::{Cutoff, Instance, Method, Outcome};

/// The incumbent, or the decomposed placement if strictly smaller, searching until `deadline`
/// on `clock` (see the module doc); `split` is [`split`]'s answer for `prep`. Unchanged when
/// that is `None`: the instance is small enough for the exact search as a whole, has absence
/// windows, or has a part too large for it.
pub(super) fn improve(
    instance: &Instance,
    prep: &Prepared,
    split: Option<Split>,
    incumbent: Outcome,
    (clock, deadline): (Clock, u64),
    seed: u64,
    stats: &mut SearchStats,
) -> Outcome {
    let n = prep.len();
    if incumbent.footprint <= prep.lower_bound || clock.now(stats) >= deadline {
        return incumbent;
    }
    let Some(Split { globals, members }) = split else {
        return incumbent;
    };
    let base: u64 = globals.iter().map(|&i| prep.sizes[i]).sum();
    let cutoff = clock.cutoff(deadline);
    let mut parts: Vec<Part> = Vec::with_capacity(members.len());
    for members in members {
        if cutoff.passed() {
            return incumbent;
        }
        let buffers = members.iter().map(|&i| instance.buffers()[i]).collect();
        // Ids stay unique and lifetimes non-empty: `new` cannot fail.
        let Ok(sub) = Instance::new(buffers) else {
            return incumbent;
        };
        let Ok(prep) = Prepared::new(&sub, prep.alignment) else {
            return incumbent;
        };
        parts.push(Part {
            members,
            instance: sub,
            prep,
        });
    }
    parts.sort_by_key(|p| std::cmp::Reverse(p.prep.lower_bound));
    // Pass 1: every part within the target, most constrained first, each with half of an
    // equal share of what is left (the easy ones take milliseconds). Each part's DFS data is
    // built when it is searched and dropped after: all of them at once would take hundreds
    // of MiB on 100k buffers.
    let goal = prep.lower_bound - base;
    let mut target = goal;
    let mut placed: Vec<(u64, Vec<u64>)> = Vec::with_capacity(parts.len());
    // Per part: capacities below this are not tried again (refuted, or out of time).
    let mut low: Vec<u64> = parts.iter().map(|p| p.prep.lower_bound.max(goal)).collect();
    for (k, part) in parts.iter().enumerate() {
        let now = clock.now(stats);
        if now >= deadline {
            return incumbent;
        }
        let share = (deadline - now) / (2 * (parts.len() - k)) as u64;
        // `target ≥ goal ≥` the part's own bound: the exact search may be asked.
        let until = (clock, now + share.max(1));
        let dfs = Dfs::new(&part.instance, &part.prep, cutoff);
        let verdict = (dfs.as_ref())
            .and_then(|dfs| Exact::new(dfs, seed))
            .map(|mut exact| exact.solve(target, until, stats));
        let found = match verdict {
            Some(Verdict::Found(offsets)) => Some(offsets),
            _ => {
                low[k] = target + 1;
                None
            }
        };
        let Some(offsets) = found.or_else(|| part.best_fit(cutoff)) else {
            return incumbent;
        };
        let footprint = part.footprint(&offsets);
        target = target.max(footprint);
        placed.push((footprint, offsets));
    }
    // Pass 2: the part that sets the footprint, halfway between its lowest capacity not given
    // up and its footprint, with half of what is left, while it sets the footprint and
    // something is left to try (its exact search resumes where it stopped).
    let top = |placed: &[(u64, Vec<u64>)], low: &[u64]| {
        let k = (0..placed.len()).max_by_key(|&k| (placed[k].0, k));
        k.filter(|&k| low[k] < placed[k].0)
    };
    while let Some(k) = top(&placed, &low) {
        let dfs = Dfs::new(&parts[k].instance, &parts[k].prep, cutoff);
        let Some(mut exact) = dfs.as_ref().and_then(|dfs| Exact::new(dfs, seed)) else {
            break;
        };
        while top(&placed, &low) == Some(k) && clock.now(stats) < deadline {
            let now = clock.now(stats);
            let footprint = placed[k].0;
            let capacity = low[k] + (footprint - low[k]) / 2;
            let until = (clock, now + ((deadline - now) / 2).max(1));
            match exact.solve(capacity, until, stats) {
                Verdict::Found(offsets) => placed[k] = (parts[k].footprint(&offsets), offsets),
                Verdict::Refuted | Verdict::Unknown => low[k] = capacity + 1,
            }
        }
        if clock.now(stats) >= deadline {
            break;
        }
    }
    let top = placed.iter().map(|p| p.0).max().unwrap_or(0);
    let footprint = base + top;
    if footprint >= incumbent.footprint {
        return incumbent;
    }
    let mut offsets = vec![0u64; n];
    let mut at = 0;
    for &i in &globals {
        offsets[i] = at;
        at += prep.sizes[i];
    }
    for (part, (_, placed)) in parts.iter().zip(placed) {
        for (&i, o) in part.members.iter().zip(placed) {
            offsets[i] = base + o;
        }
    }
    stats.improvements += 1;
    Outcome {
        offsets,
        footprint,
        method: Method::Decomposed { parts: parts.len() },
    }
}

/// The globals (stacked from 0) and the buffers of each non-empty part of time, in time order.
pub(super) struct Split {
    globals: Vec<usize>,
    members: Vec<Vec<usize>>,
}

/// How the decomposition splits `prep` (module doc), or `None` where it does not apply: an
/// instance small enough for the exact search as a whole, with absence windows, or with a part
/// too large for it (such a part would take best-fit's placement, which the incumbent already
/// has: the budget is better left to the search of the whole).
pub(super) fn split(prep: &Prepared) -> Option<Split> {
    let n = prep.len();
    if n <= exact::MAX_BUFFERS || prep.has_absences() {
        return None;
    }
    let whole = (0, prep.segments);
    let (globals, rest): (Vec<usize>, Vec<usize>) = (0..n).partition(|&i| prep.segs[i] == whole);
    let segs: Vec<(usize, usize)> = rest.iter().map(|&i| prep.segs[i]).collect();
    let spans = greedy::parts(&segs, prep.segments);
    let mut members: Vec<Vec<usize>> = vec![Vec::new(); spans.len()];
    for &i in &rest {
        let part = spans.partition_point(|&(start, _)| start <= prep.segs[i].0) - 1;
        members[part].push(i);
    }
    members.retain(|m| !m.is_empty());
    if members.iter().any(|m| m.len() > exact::MAX_BUFFERS) {
        return None;
    }
    Some(Split { globals, members })
}

/// One part of time: its buffers (indices into the instance) as an instance of their own.
struct Part {
    members: Vec<usize>,
    instance: Instance,
    prep: Prepared,
}

impl Part {
    /// Best-fit's placement of the part; `None` if `cutoff` passes first.
    fn best_fit(&self, cutoff: Cutoff) -> Option<Vec<u64>> {
        let order = greedy::order_indices(&self.instance, &self.prep, Order::SizeDesc);
        greedy::place_until(&self.prep, &order, Fit::Best, cutoff).map(|(offsets, _)| offsets)
    }

    fn footprint(&self, offsets: &[u64]) -> u64 {
        offsets
            .iter()
            .zip(&self.prep.sizes)
            .map(|(o, s)| o + s)
            .max()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Alignment, check, iopddl_instance, somas_instance};

    /// Best-fit, the incumbent [`improve`] starts from in the search.
    fn best_fit(instance: &Instance, prep: &Prepared) -> Outcome {
        greedy::run(instance, prep, Order::SizeDesc, Fit::Best)
    }

    /// [`improve`] from `incumbent` with a budget of `steps` (so verdicts do not depend on the
    /// machine), and its statistics.
    fn improve_in_steps(
        instance: &Instance,
        prep: &Prepared,
        incumbent: &Outcome,
        steps: u64,
        seed: u64,
    ) -> (Outcome, SearchStats) {
        let clock = Clock::Steps {
            per_greedy_run: prep.len() as u64,
        };
        let mut stats = SearchStats::default();
        let until = (clock, steps);
        let out = improve(
            instance,
            prep,
            split(prep),
            incumbent.clone(),
            until,
            seed,
            &mut stats,
        );
        (out, stats)
    }

    /// Multi-step instances above the exact search's limit: the plan is valid and never above
    /// the incumbent whatever the budget (in steps, so the verdicts do not depend on the
    /// machine), and with enough steps every step meets its own bound, hence `LB`.
    #[test]
    fn decomposed_plans_are_valid_never_worse_and_meet_the_bound() {
        for seed in 1..=3 {
            let instance = somas_instance(exact::MAX_BUFFERS + 500, seed);
            let prep = Prepared::new(&instance, Alignment::default()).unwrap();
            let incumbent = best_fit(&instance, &prep);
            let mut last = incumbent.footprint;
            for steps in [0, 100, 10_000, 1_000_000] {
                let (out, _) = improve_in_steps(&instance, &prep, &incumbent, steps, seed);
                let valid =
                    check::validate_parts(&instance, &out.offsets, out.footprint, prep.alignment);
                assert_eq!(valid, Ok(()), "seed {seed}, {steps} steps");
                assert!(out.footprint <= incumbent.footprint, "seed {seed}");
                assert!(
                    out.footprint <= last,
                    "seed {seed}: more steps, larger plan"
                );
                last = out.footprint;
            }
            assert!(
                incumbent.footprint > prep.lower_bound,
                "seed {seed}: too easy"
            );
            assert_eq!(last, prep.lower_bound, "seed {seed}");
        }
    }

    /// One operator graph is a single part of time, too large for the exact search: the
    /// incumbent comes back as it was, and the budget stays with the search of the whole.
    #[test]
    fn one_large_part_is_left_alone() {
        let instance = iopddl_instance(exact::MAX_BUFFERS + 500, 1);
        let prep = Prepared::new(&instance, Alignment::default()).unwrap();
        let incumbent = best_fit(&instance, &prep);
        let (out, stats) = improve_in_steps(&instance, &prep, &incumbent, 1_000_000, 1);
        assert_eq!(
            (out.offsets, out.method),
            (incumbent.offsets, incumbent.method)
        );
        assert_eq!(stats, SearchStats::default());
    }
}
