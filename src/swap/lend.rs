//! When a swapped tensor's device range may be lent to other tensors (design §2.1).
//!
//! A swapped tensor keeps one address for its whole life; while it is away its range is a hole
//! that the pool planner may fill. On the simulated timeline of the plan, the hole opens at
//! the first op that starts after the swap-out has *completed* (before that, the copy still
//! reads the range) and closes after the last op that ends before the swap-in *starts* (from
//! then on, the copy writes it). Op windows that ignored the copies would let a tensor born
//! while the swap-out runs overwrite data not yet on the host. The executor keeps the
//! simulated order with events (design §2.2): a borrower's first use waits for the swap-out,
//! the swap-in for the borrowers' last use.

use super::profile::Profile;
use super::sim::{SimOptions, What, simulate_profile};
use super::{CopyModel, SwapPlan};
use crate::ops::{OpTrace, TensorId};

/// Ops `[from, to)` during which `tensor`'s range may hold other tensors, while it is away by
/// swap `swap` (an index into [`SwapPlan::swaps`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lent {
    pub swap: usize,
    pub tensor: TensorId,
    pub from: usize,
    pub to: usize,
}

/// The lending windows of every swap of `plan` that moves its tensor out, in plan order (a
/// wrapping swap gives up to two: the end of this iteration and the start of the next). Empty
/// windows are left out; a swap whose swap-out never runs lends nothing.
pub fn lent_windows(trace: &OpTrace, plan: &SwapPlan, limit: u64, copy: CopyModel) -> Vec<Lent> {
    let p = Profile::new(trace);
    let n = p.n;
    let r = simulate_profile(&p, plan, limit, copy, SimOptions { record: true });
    let mut op_start = vec![f64::INFINITY; n];
    let mut op_end = vec![f64::INFINITY; n];
    let mut out_end = vec![None; plan.swaps.len()];
    let mut in_start = vec![None; plan.swaps.len()];
    for e in &r.events {
        match e.what {
            What::Op(k) if k < n => (op_start[k], op_end[k]) = (e.start_ns, e.end_ns),
            What::Out { swap, .. } if swap < out_end.len() => out_end[swap] = Some(e.end_ns),
            What::In { swap, .. } if swap < in_start.len() => in_start[swap] = Some(e.start_ns),
            _ => {}
        }
    }
    // Op starts and ends are non-decreasing: the first op starting at or after `t`, and the
    // number of ops ending by `t`.
    let first_from = |t: f64| op_start.partition_point(|&s| s < t);
    let ended_by = |t: f64| op_end.partition_point(|&e| e <= t);
    let mut lent = Vec::new();
    for (index, s) in plan.swaps.iter().enumerate() {
        let Some(done) = out_end[index] else {
            continue;
        };
        let Some(&death) = p.death.get(s.tensor as usize) else {
            continue;
        };
        let mut push = |from: usize, to: usize| {
            if from < to {
                lent.push(Lent {
                    swap: index,
                    tensor: s.tensor,
                    from,
                    to,
                });
            }
        };
        // After the copy and the last access before the gap (an early copy-out precedes it).
        let from = first_from(done).max(s.out_at.max(s.out_after) + 1);
        // Until the swap-in starts (never before it is issued, nor after the next access).
        let to = |need: usize| {
            in_start[index]
                .map_or(s.in_issue, ended_by)
                .clamp(s.in_issue, need)
        };
        match s.in_before {
            // Final: lent until the tensor is freed.
            None => push(from, (death + 1).min(n)),
            Some(need) if s.wraps() => {
                push(from, n);
                // In the next iteration, from its start (or where a spilled copy ends).
                let next_from = if done <= r.time_ns {
                    0
                } else {
                    first_from(done - r.time_ns)
                };
                push(next_from, to(need));
            }
            Some(need) => push(from, to(need)),
        }
    }
    lent
}
