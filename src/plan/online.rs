//! The online allocators' own placements as candidates of [`super::Policy::Search`].
//!
//! Why: SmartPool is compared with cnmem and PyTorch's caching allocator on the same instance
//! (`itermem compare`, `src/policy/`), and the planner knows the whole future while they do
//! not, so the planner must never need more memory than they do. The searches do not
//! guarantee that by themselves: on some instances an online policy's address-ordered packing
//! beats every greedy order tried within the budget (issue 13). So the placements the policies
//! produce are offered as they are, replayed by the policies' own simulators
//! ([`crate::policy::sim::simulate`]), never re-implemented here. (The online best-fit and
//! first-fit in allocation order need no simulator: they are the greedy runs in
//! [`super::Order::Birth`], which best-of already tries; placed by birth, a buffer meets exactly
//! the buffers live at its birth, as an online allocator does.)
//!
//! **In the plan's terms.** A simulation places each buffer in one of its regions (cnmem's
//! reservation or one region per miss, the caching allocator's segments). The regions are laid
//! end to end in the order they were made, so buffer `i` in region `r` at offset `o` gets pool
//! offset `Σ_{q < r} size_q + o`, and the footprint is `max_i (offset_i + s_i) ≤ Σ size_q`,
//! the figure `itermem compare` reports for the policy (equal for cnmem grown, whose last
//! region is made for one request and taken whole; the tuned cnmem's figure is its
//! reservation, which may exceed the highest end it reached).
//!
//! **Alignment.** The policies round to 512 bytes, and their regions and blocks start at
//! multiples of it, so for a pool alignment `a` dividing 512 every offset is a multiple of `a`
//! and every block holds the buffer's aligned size `s_i`. For any other `a` (4 KiB, or 3 in
//! the tests) the placement is generally not a plan of that pool; whatever the alignment, a
//! candidate is kept only if [`super::check`]'s validator proves it (aligned offsets, no two
//! resident buffers overlapping), so an invalid placement is never returned.
//!
//! **Cost.** cnmem grown and the caching allocator are one replay each, the tuned cnmem at most
//! [`crate::policy::CNMEM_TUNING_STEPS`] + 2 (`tune_cnmem`): O(n log n) each. On the largest
//! shared trace (13,385 buffers) all three with their validations take about 30 ms, the time
//! of one greedy run (`plan::tests::bench_online_candidates`). They are not counted in
//! [`super::PlanOptions::steps`]: counted in steps they always run; under a wall-clock budget
//! each starts only if one greedy run's time remains ([`best_of_online`]).

use std::time::Duration;

use super::check::validate_parts;
use super::greedy::Prepared;
use super::{Cutoff, Instance, Method, Outcome};
use crate::policy::sim::{self, Policy as Baseline, Simulation};

/// The policies whose placements are offered. Plain `cudaMalloc` is not: its buffers never
/// share a region, so end to end they need Σ of all sizes, more than any of these.
const CANDIDATES: [Baseline; 3] = [Baseline::Cnmem, Baseline::CnmemGrow, Baseline::Caching];

/// The placement of each [`CANDIDATES`] policy replaces `incumbent` if the validator accepts it
/// and its footprint is strictly smaller; stops as soon as the lower bound is met or `cutoff`
/// does not leave `greedy_run` (the time one greedy run took on this instance) for the next
/// policy.
///
/// Why that margin: a simulation and its validation cannot be cut short, so a policy starts
/// only when it will end before the cutoff. Each costs less than one greedy run on the same
/// instance (on `random_instance(100_000, 1)`: tuned cnmem 167 ms, cnmem grown 108 ms, the
/// caching allocator 90 ms, best-fit 200 ms).
pub(crate) fn best_of_online(
    instance: &Instance,
    prep: &Prepared,
    incumbent: Outcome,
    (cutoff, greedy_run): (Cutoff, Duration),
) -> Outcome {
    let mut best = incumbent;
    for policy in CANDIDATES {
        if best.footprint == prep.lower_bound || !cutoff.allows(greedy_run) {
            break;
        }
        // A policy fails only on sizes that overflow when rounded to 512: nothing to offer.
        let Ok(simulation) = sim::simulate(instance, policy) else {
            continue;
        };
        let offsets = end_to_end(&simulation);
        let footprint = offsets
            .iter()
            .zip(&prep.sizes)
            .map(|(&o, &s)| o.saturating_add(s))
            .max()
            .unwrap_or(0);
        if footprint < best.footprint
            && validate_parts(instance, &offsets, footprint, prep.alignment).is_ok()
        {
            best = Outcome {
                offsets,
                footprint,
                method: Method::Online { policy },
            };
        }
    }
    best
}

/// Each buffer's offset in one pool holding the simulation's regions end to end, in the order
/// they were made (module doc).
pub(crate) fn end_to_end(simulation: &Simulation) -> Vec<u64> {
    let starts: Vec<u64> = simulation
        .regions
        .iter()
        .scan(0u64, |next, region| {
            let start = *next;
            *next = next.saturating_add(region.size);
            Some(start)
        })
        .collect();
    simulation
        .placements
        .iter()
        .map(|p| starts[p.region].saturating_add(p.offset))
        .collect()
}
