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
//!
//! Ops alone cannot order two copies in the same wait of the compute stream: where op `k`
//! waits for memory, swap-outs end and swap-ins start one after another before it, and a
//! swap-in that starts there before a swap-out of the same range has ended would, in ops, seem
//! to follow it (both "before op `k`"). Placed so, the executor's swap-in waits for that
//! swap-out (it must: the range still holds the departing tensor), and the plan stalls where
//! the simulation said it would not (`mlp_train --adam` at 3× the device: a swap-in of each
//! Adam step behind the swap-out of the step before, 1.3 ms a step). So each window also has
//! its ends in [`Tick`]s, which order those copies as the simulation did, and the pool is
//! placed on ticks.

use super::profile::Profile;
use super::sim::{SimOptions, What, simulate_profile};
use super::{CopyModel, SwapPlan};
use crate::ops::{OpTrace, TensorId};

/// Ops `[from, to)` during which `tensor`'s range may hold other tensors, while it is away by
/// swap `swap` (an index into [`SwapPlan::swaps`]); the same window in ticks, `[from_tick,
/// to_tick)`, where the copies that open and close it fall in a wait of the compute stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lent {
    pub swap: usize,
    pub tensor: TensorId,
    pub from: usize,
    pub to: usize,
    pub from_tick: u64,
    pub to_tick: u64,
}

/// Ticks of one op: op `k` spans `[k · TICKS_PER_OP, (k + 1) · TICKS_PER_OP)`. Its first tick
/// is the instant op `k − 1` has ended, the next ones the copies that end or start while the
/// compute stream waits before op `k` (in their simulated order), the last one op `k` itself.
pub const TICKS_PER_OP: u64 = 1 << 16;

/// The tick of op `k` itself: a tensor born at `k` holds its range from here.
pub fn op_tick(k: usize) -> u64 {
    k as u64 * TICKS_PER_OP + TICKS_PER_OP - 1
}

/// The tick at which op `k − 1` has ended: a tensor last used by op `k − 1` has left by here.
pub fn after_op_tick(k: usize) -> u64 {
    k as u64 * TICKS_PER_OP
}

/// `lent` to the precision of ops: each window from the instant the op before `from` has
/// ended to the instant the op before `to` has, so that copies in one wait are not ordered.
/// A window inside one wait is dropped.
pub fn in_ops(lent: &[Lent]) -> Vec<Lent> {
    (lent.iter())
        .filter(|l| l.from < l.to)
        .map(|l| Lent {
            from_tick: after_op_tick(l.from),
            to_tick: after_op_tick(l.to),
            ..*l
        })
        .collect()
}

/// Where copy ends and starts fall among the ops of a simulated timeline.
struct Ticks {
    op_start: Vec<f64>,
    op_end: Vec<f64>,
    /// Per op `k`, the copy instants in the wait before it: (time, whether a swap-in starts
    /// there), sorted with swap-out ends before swap-in starts at the same time.
    waits: Vec<Vec<(f64, bool)>>,
}

impl Ticks {
    fn new(op_start: Vec<f64>, op_end: Vec<f64>, instants: &[(f64, bool)]) -> Ticks {
        let mut ticks = Ticks {
            waits: vec![Vec::new(); op_start.len() + 1],
            op_start,
            op_end,
        };
        for &(t, arriving) in instants {
            if let Some(k) = ticks.wait_before(t) {
                ticks.waits[k].push((t, arriving));
            }
        }
        for wait in &mut ticks.waits {
            wait.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        }
        ticks
    }

    /// The first op starting at or after `t`.
    fn first_from(&self, t: f64) -> usize {
        self.op_start.partition_point(|&s| s < t)
    }

    /// The number of ops that have ended by `t`.
    fn ended_by(&self, t: f64) -> usize {
        self.op_end.partition_point(|&e| e <= t)
    }

    /// The op whose wait `t` falls in: after the op before it has ended, until it starts (or
    /// after the last op). A copy that ends just as op `k` starts is in its wait: a tensor on
    /// the device from the iteration's start must not take the range of one whose copy-out,
    /// spilled from the iteration before, op 0 waited for.
    fn wait_before(&self, t: f64) -> Option<usize> {
        let k = self.ended_by(t);
        let waiting = self.op_start.get(k).is_none_or(|&s| t <= s);
        waiting.then_some(k)
    }

    /// The tick of a copy instant in a wait (its place among that wait's instants).
    fn in_wait(&self, k: usize, t: f64, arriving: bool) -> u64 {
        let rank = self.waits[k].partition_point(|&(u, a)| (u, a) < (t, arriving)) as u64;
        after_op_tick(k) + (1 + rank).min(TICKS_PER_OP - 2)
    }

    /// From which tick a range is free after a swap-out that ends at `t`: the instant after
    /// the op it ended in, or after its own instant in a wait.
    fn freed(&self, t: f64) -> u64 {
        match self.wait_before(t) {
            Some(k) => self.in_wait(k, t, false) + 1,
            None => after_op_tick(self.first_from(t)),
        }
    }

    /// From which tick a range is held again by a swap-in that starts at `t`: its instant in
    /// a wait, or the op it starts during.
    fn taken(&self, t: f64) -> u64 {
        match self.wait_before(t) {
            Some(k) => self.in_wait(k, t, true),
            None => op_tick(self.ended_by(t)),
        }
    }
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
    // Op starts and ends are non-decreasing; copies are placed among them, a spilled swap-out
    // in the next iteration.
    let wrap = |t: f64| if t > r.time_ns { t - r.time_ns } else { t };
    let instants: Vec<(f64, bool)> = (out_end.iter().flatten().map(|&t| (wrap(t), false)))
        .chain(in_start.iter().flatten().map(|&t| (t, true)))
        .collect();
    let ticks = Ticks::new(op_start, op_end, &instants);
    let mut lent = Vec::new();
    for (index, s) in plan.swaps.iter().enumerate() {
        let Some(done) = out_end[index] else {
            continue;
        };
        let Some(&death) = p.death.get(s.tensor as usize) else {
            continue;
        };
        let mut push = |(from, from_tick): (usize, u64), (to, to_tick): (usize, u64)| {
            if from_tick < to_tick {
                lent.push(Lent {
                    swap: index,
                    tensor: s.tensor,
                    from,
                    to,
                    from_tick,
                    to_tick,
                });
            }
        };
        // After the copy and the last access before the gap (an early copy-out precedes it).
        let last = s.out_at.max(s.out_after) + 1;
        let from = |done: f64| {
            (
                ticks.first_from(done).max(last),
                ticks.freed(done).max(after_op_tick(last)),
            )
        };
        // Until the swap-in starts (never before it is issued, nor after the next access).
        let to = |need: usize| {
            let start = in_start[index];
            let op = start.map_or(s.in_issue, |t| ticks.ended_by(t));
            match start {
                Some(t) if (s.in_issue..=need).contains(&op) => (op, ticks.taken(t)),
                _ => {
                    let op = op.clamp(s.in_issue, need);
                    (op, after_op_tick(op))
                }
            }
        };
        let end = |op: usize| (op, after_op_tick(op));
        match s.in_before {
            // Final: lent until the tensor is freed.
            None => push(from(done), end((death + 1).min(n))),
            Some(need) if s.wraps() => {
                push(from(done), end(n));
                // In the next iteration, from its start (or where a spilled copy ends).
                let next_from = if done <= r.time_ns {
                    end(0)
                } else {
                    let spilled = done - r.time_ns;
                    (ticks.first_from(spilled), ticks.freed(spilled))
                };
                push(next_from, to(need));
            }
            Some(need) => push(from(done), to(need)),
        }
    }
    lent
}
