//! The placements of the policies `itermem compare` sets beside SmartPool, as candidates of
//! [`super::Policy::Search`], so that its plan never needs more than any of them (issue 13).
//!
//! Why: the planner knows the whole future while cnmem and PyTorch's caching allocator do not,
//! yet no search guarantees by itself that it beats them: on some instances an online policy's
//! address-ordered packing beats every greedy order tried within the budget. So the placements
//! the policies produce are offered as they are, replayed by the policies' own simulators
//! ([`crate::policy::sim::simulate`]), never re-implemented here, and so is the other greedy
//! column, first-fit by size ([`GREEDY_COLUMNS`]; `bestfit` the search runs first). Plain
//! `cudaMalloc` is not matched: its column is the peak of the live 512-byte-rounded sizes, the
//! lower bound itself at the default alignment. (The online best-fit and first-fit in
//! allocation order need no simulator either: placed by birth ([`super::Order::Birth`]), a
//! buffer meets exactly the buffers live at its birth, as an online allocator does; best-fit
//! so is the search's floor (`floor.rs`), first-fit best-of's run in that order.)
//!
//! The search offers these after its floor, best-fit and one dive, which leaves them two
//! greedy runs' time, about what they cost (`search.rs`), so its plan needs at most each of their
//! footprints whenever they ran: always under a budget of steps; on a wall clock whenever the
//! budget leaves them their time after best-fit (not when best-fit alone takes most of it, nor
//! when the windows of `window.rs` have taken 7/8 of it and a greedy run costs more than the
//! eighth left: one operator graph of tens of thousands of buffers).
//!
//! **In the plan's terms.** A simulation places each buffer in one of its regions (cnmem's
//! reservation or one region per miss, the caching allocator's segments). The regions are laid
//! end to end in the order they were made, so buffer `i` in region `r` at offset `o` gets pool
//! offset `Σ_{q < r} size_q + o`, and the footprint is `max_i (offset_i + s_i) ≤ Σ size_q`,
//! the figure `itermem compare` reports for the policy (equal for cnmem grown, whose last
//! region is made for one request and taken whole; the tuned cnmem's figure is its
//! reservation, which may exceed the highest end it reached). With a single region (the tuned
//! cnmem) this is the policy's own address map, shifted to 0.
//!
//! **Alignment.** The policies round to 512 bytes, and their regions and blocks start at
//! multiples of it, so for a pool alignment `a` dividing 512 every offset is a multiple of `a`
//! and every block holds the buffer's aligned size `s_i`. For any other `a` (4 KiB, or 3 in
//! the tests) the placement is generally not a plan of that pool; whatever the alignment, a
//! candidate is kept only if [`super::check`]'s validator proves it (aligned offsets, no two
//! resident buffers overlapping), so an invalid placement is never returned. The guarantee
//! against cnmem and the caching allocator is therefore one for alignments dividing 512 (at a
//! coarser one their 512-byte columns may lie below the pool's lower bound).
//!
//! **Cost.** cnmem grown and the caching allocator are one replay each, the tuned cnmem at most
//! [`crate::policy::CNMEM_TUNING_STEPS`] + 2 (`tune_cnmem`): O(n log n) each. On the largest shared
//! trace (13,385 buffers) all three with their validations take about 30 ms, the time of one greedy
//! run (`plan::tests::bench_online_candidates`); first-fit costs one greedy run. None of them is
//! counted in [`super::PlanOptions::steps`]: counted in steps they always run. Under a wall-clock
//! budget they read the clock as they go and are dropped when cut short, like every greedy run of
//! the search (a replay asks every 1,024 calls: [`crate::policy::sim::simulate_until`]); only a
//! replay's sort of its calls and a validation cannot be cut, and each starts only if its time
//! remains ([`best_of_online`]).

use std::time::{Duration, Instant};

use super::check::validate_parts;
use super::greedy::Prepared;
use super::{Cutoff, Fit, Instance, Method, Order, Outcome};
use crate::policy::sim::{self, Policy as Baseline, Simulation};

/// The greedy runs offered beside the simulated policies (module doc).
pub(crate) const GREEDY_COLUMNS: [(Order, Fit); 1] = [(Order::SizeDesc, Fit::First)];

/// The policies whose placements are offered. Plain `cudaMalloc` is not: its buffers never
/// share a region, so end to end they need Σ of all sizes, more than any of these.
const CANDIDATES: [Baseline; 3] = [Baseline::Cnmem, Baseline::CnmemGrow, Baseline::Caching];

/// The placement of each [`CANDIDATES`] policy replaces `incumbent` if the validator accepts it
/// and its footprint is strictly smaller; stops as soon as the lower bound is met or `cutoff`
/// leaves less than an eighth of `greedy_run` (the time one greedy run took on this instance).
///
/// Why: a simulation reads the clock as it goes and is dropped when cut short, but first sorts
/// its calls, which cannot be cut (4 ms of a 97 ms greedy run on 50k buffers); its validation,
/// which cannot be cut either, starts only if the time the simulation took (at least one
/// replay, about a validation's cost) remains.
pub(crate) fn best_of_online(
    instance: &Instance,
    prep: &Prepared,
    incumbent: Outcome,
    (cutoff, greedy_run): (Cutoff, Duration),
) -> Outcome {
    let mut best = incumbent;
    for policy in CANDIDATES {
        if best.footprint == prep.lower_bound || !cutoff.allows(greedy_run / 8) {
            break;
        }
        let start = Instant::now();
        let simulation = match sim::simulate_until(instance, policy, &|| cutoff.passed()) {
            Ok(Some(simulation)) => simulation,
            Ok(None) => break,
            // A policy fails only on sizes that overflow when rounded to 512: nothing to offer.
            Err(_) => continue,
        };
        let offsets = end_to_end(&simulation);
        let footprint = offsets
            .iter()
            .zip(&prep.sizes)
            .map(|(&o, &s)| o.saturating_add(s))
            .max()
            .unwrap_or(0);
        if footprint < best.footprint
            && cutoff.allows(start.elapsed())
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
