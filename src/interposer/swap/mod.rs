//! Swap mode (AutoSwap executed): the pool of pool mode, planned with swaps so the iteration
//! fits a device memory limit, and the executor that carries the swaps out on two side streams.
//!
//! Life cycle (see `docs/ARCHITECTURE.md`): while recording, a device malloc that would take the
//! device over the limit is served from mapped page-locked host memory (zero-copy, the same
//! pointer for its whole life), so even the warm-up fits. When the detector finds the
//! iteration, the next iteration is the **timing iteration**: every launch, copy and memset is
//! bracketed with timing events on its own stream, and the sequencer captures its events. A
//! planning thread turns them into the op trace `itermem plan` reads from a trace file
//! ([`crate::ops::from_events_with_births`], the window given), sets the measured op times and
//! plans with [`crate::swap::combined::ExecutorInputs::plan`]: the very code path of
//! `itermem plan --timings`. The plan is installed at the next iteration boundary.
//!
//! The timing iteration's op times are not those the plan runs with: what did not fit the
//! device was in mapped host memory then, and every kernel touching it paid the host link. So
//! the first plan's iterations from its second on are timed op by op too, and a **second
//! plan** is made from them on a thread of its own, with `itermem plan`'s full search
//! ([`second_plan`]); if it is faster than the first with the same op times, it replaces the
//! first at an iteration boundary where the first's swaps are settled
//! ([`PoolState::switch_plan`](super::pool::PoolState::switch_plan): the device never holds
//! both pools).
//!
//! Execution (each ordering is an event, never a host wait):
//! - swap-out after op `out_at`: the device-to-host stream waits for every stream that used the
//!   tensor, copies it to its slot of the pinned host pool, (with `ITERMEM_SWAP_VERIFY`) fills
//!   the range with `0xFF`, and records a fence on the range: the next tenant of the range (a
//!   borrower placed there by the plan) waits for it before its first use;
//! - an *early* copy-out (`out_at < out_after`: after the tensor's last write, while its last
//!   reads before the gap run) is copied the same way after op `out_at`, its range fenced on
//!   the copy, but the tensor stays on the device until op `out_after` ends: there its range is
//!   fenced on every stream that used it (the reads), and only then is it away and its range
//!   lendable, so a borrower and the swap-in wait for both the copy and the last read (with
//!   `ITERMEM_SWAP_VERIFY` the out stream waits for the reads before it poisons the range). A
//!   call that may write the tensor in between (any kernel argument, a copy's destination, a
//!   memset: only a copy's source is known to be read) makes the early copy stale: the tensor
//!   is copied again after op `out_after`, as a swap-out after its last access
//!   (`early_outs_copied_again`);
//! - swap-in before op `in_issue`: only once no live block overlaps the range (the borrowers
//!   were freed; otherwise it is retried at every later call); the host-to-device stream waits
//!   for the fences on the range (the borrowers' last uses, the swap-out), copies the tensor
//!   back to the **same address**, and every stream that uses the tensor next waits for it;
//! - an access to a tensor that is away (a deviation from the plan) swaps it in first
//!   (`on_demand_swap_ins`); if a borrower holds its range, the borrowers are moved aside to
//!   host memory for that one call and the tensor back out after it (an exchange: the host
//!   waits, results stay exact);
//! - when the detector loses the period, planned swaps stop (`plans_abandoned`), tensors away
//!   come back as their ranges free, and the next period is timed and planned again.

pub(super) mod executor;
pub(super) mod planning;
mod second_plan;

use crate::swap::CopyModel;
use serde::Serialize;
use std::path::PathBuf;

/// What swap mode was configured with.
#[derive(Clone, Debug)]
pub struct SwapConfig {
    /// Device bytes the process may hold (None: no limit, nothing is swapped).
    pub limit: Option<crate::config::Limit>,
    /// `ITERMEM_BANDWIDTH`; None: measured before the first plan ([`super::bandwidth`]).
    pub copy: Option<CopyModel>,
    /// `ITERMEM_SWAP_MIN_BYTES`: the smallest tensor swapped on its own (smaller ones move in
    /// swap units of at least that many bytes).
    pub min_bytes: u64,
    /// `ITERMEM_SWAP_VERIFY`: poison a range once its bytes are on the host.
    pub verify: bool,
    /// `ITERMEM_PLAN_OUT`: where the plan in use is written.
    pub plan_out: Option<PathBuf>,
    /// The trace being written (named in the plan file).
    pub trace: Option<PathBuf>,
    /// `ITERMEM_SWAP_SECOND_PLAN`: make a second plan from op times measured under the first.
    pub second_plan: crate::config::SecondPlan,
}

/// Counters of one iteration under a plan.
#[derive(Clone, Debug, Default, Serialize)]
pub struct IterationStats {
    /// First event of the iteration.
    pub start_event: u64,
    pub swapped_out: u64,
    pub swapped_out_bytes: u64,
    pub swapped_in: u64,
    pub swapped_in_bytes: u64,
    pub on_demand_swap_ins: u64,
    pub stall_ns: f64,
    /// Host time from this iteration's first event to the next's.
    pub time_ns: f64,
    /// The plan it ran under: its index in `plans_made`.
    pub plan: usize,
}

/// One plan swap mode served, in the order they began.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PlanStats {
    /// Where its op times came from: `timing iteration` (a first plan), or `measured under
    /// the first plan` (a second plan, made with the full search).
    pub op_times: &'static str,
    pub swaps: u64,
    pub pool_bytes: u64,
    /// The host link it was planned with, GB/s each way: a second plan's is the one its
    /// first plan's copies were timed at.
    pub copy_out_gb_s: f64,
    pub copy_in_gb_s: f64,
    /// The handoff between streams it was planned with ([`crate::swap::CopyModel::handoff_ns`]):
    /// a second plan's is timed under its first (0 for a first plan).
    pub handoff_ns: f64,
    /// The simulator's iteration time for the plan, and without swapping, from its op times.
    pub predicted_iteration_ns: f64,
    pub predicted_base_iteration_ns: f64,
    /// A first plan: the same from the op times measured under it (0 where not measured).
    pub remeasured_iteration_ns: f64,
    pub remeasured_base_iteration_ns: f64,
    /// Median host time of the iterations run under it, and the median time the program's
    /// streams waited for swapping in them (its measured overhead, on the device's clock).
    pub measured_iteration_ns: f64,
    pub measured_stall_ns: f64,
    pub iterations: u64,
    pub plan_ms: f64,
    /// Whether it is the last plan to serve (it serves at the end unless the program left its
    /// period: `plans_abandoned`).
    pub serves: bool,
}

/// Swap mode's statistics (`swap` in `ITERMEM_STATS`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct SwapStats {
    pub limit_bytes: Option<u64>,
    /// Device bytes the pool of the last plan could take.
    pub budget_bytes: u64,
    /// Periods planned (a second plan replaces its period's first and is not counted again:
    /// `plans_made` lists both).
    pub plans: u64,
    /// Plans given up because the program left its period (an iteration of another shape, an
    /// unplanned call, the end of training), and the events at which that happened.
    pub plans_abandoned: u64,
    pub abandoned_at_events: Vec<u64>,
    pub swaps_planned: u64,
    /// Of those, early copy-outs: copied after the tensor's last write, while its last reads
    /// before the gap run.
    pub early_outs_planned: u64,
    pub swapped_out: u64,
    pub swapped_out_bytes: u64,
    pub swapped_in: u64,
    pub swapped_in_bytes: u64,
    /// Swap-outs whose tensor left the device with its early copy, after its last read.
    pub early_outs: u64,
    /// Early copy-outs copied again after the tensor's last access, because a call wrote the
    /// tensor after the early copy began (a deviation from the plan: the first copy was stale).
    pub early_outs_copied_again: u64,
    pub on_demand_swap_ins: u64,
    /// On-demand swap-ins whose range was held by borrowers (moved aside for that call).
    pub exchanges: u64,
    /// Time the program's streams waited for swapping: for swap-ins, and for the copies and
    /// uses their blocks' ranges wait on (GPU time, from events).
    pub stall_ns: f64,
    /// The simulator's iteration time for the plan in use, and without swapping, from the
    /// latest op times: those measured under the first plan once they are.
    pub predicted_iteration_ns: f64,
    pub predicted_base_iteration_ns: f64,
    /// Median host time of the iterations run under the plan in use, and the median time
    /// the program's streams waited for swapping in them: the measured overhead, which
    /// `predicted_iteration_ns − predicted_base_iteration_ns` predicts (on a loaded machine the
    /// ops' own times vary more than the stalls do).
    pub measured_iteration_ns: f64,
    pub measured_stall_ns: f64,
    /// Host time of the timing iteration (no swaps).
    pub timing_iteration_ns: f64,
    /// The copy model the planner uses: `measured` (timed copies before planning),
    /// `ITERMEM_BANDWIDTH`, or `pcie3 (not measured)` where the measurement failed; and its
    /// bandwidth each way, GB/s.
    pub copy_model: &'static str,
    pub copy_out_gb_s: f64,
    pub copy_in_gb_s: f64,
    /// Page-locked host memory of the swap slots.
    pub pinned_host_bytes: u64,
    /// Device mallocs served from host memory (mapped, or at an address of their own) because
    /// the device was at the limit, and the most such bytes live at once.
    pub warmup_host_allocations: u64,
    pub warmup_host_bytes: u64,
    /// The most mapped host memory of the program's live at once after the first plan
    /// serves (blocks left there from the warm-up, and mallocs past the limit since).
    pub mapped_host_bytes_after_plan: u64,
    /// Every plan that served, in order.
    pub plans_made: Vec<PlanStats>,
    /// Whether a second plan was made and installed, and why (or why not).
    pub second_plan: String,
    pub iterations: Vec<IterationStats>,
}

/// The median of `values` (the upper one of an even count) and their count; None when empty.
fn median(values: impl Iterator<Item = f64>) -> Option<(f64, usize)> {
    let mut values: Vec<f64> = values.collect();
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).map(|&m| (m, values.len()))
}
