//! An upper bound on what any zero-stall plan can remove from the peak.
//!
//! Let `k*` be the first op of maximal no-swap load `L* = L_{k*}` and `S* = S_{k*}`. A plan
//! that never stalls keeps the no-swap timeline, and its load right after op `k*` allocates
//! is `L* − Σ_{t away at S*} b_t`, so its simulated peak is at least that. Tensor `t` can be
//! away at `S*` only if it is live at `k*`, not accessed by `k*`, and has an idle gap around
//! `k*`: a previous access `o` (release `r_t = E_w`, the end of its last write `w ≤ o`, or
//! `E_o` when nothing writes it up to `o`: an early copy-out may start there and overlap the
//! reads up to `o`, `super::autoswap`; for a tensor alive across iterations
//! whose last access precedes `k*`… its previous access may be last iteration's: `E_o − T0`)
//! and a next access `i` (deadline `d_t = S_i`, or `S_i + T0` in the next iteration; none for
//! a tensor freed without another access: a final swap, no swap-in). Its
//! swap-out runs in `[r_t, S*]` on the serial out stream and its swap-in in `[S*, d_t]` on
//! the serial in stream, so for the chosen set X:
//!
//! ```text
//! out: for every release value ρ:   Σ_{t∈X, r_t ≥ ρ} c_out(b_t) ≤ S* − ρ
//! in:  for every deadline value δ:  Σ_{t∈X, d_t ≤ δ} c_in(b_t)  ≤ δ − S*
//! ```
//!
//! (every job released at or after ρ must run within `[ρ, S*]`; every job due by δ within
//! `[S*, δ]`). Maximising `Σ_{t∈X} b_t` under all of these is a knapsack with nested
//! constraints; we relax it: for each single constraint `C`, items outside `C` are free and
//! items inside are a fractional knapsack (densities `b / c(b)` grow with `b` for both copy
//! directions, so the order is by size). The removal bound is the minimum over all
//! constraints, and over `Σ eligible b` — a valid upper bound on the removal of *every*
//! zero-stall plan (AutoSwap's included, any tensor size), computed in O(tensors + E log E)
//! with Fenwick trees. A fractional knapsack may count part of a tensor, which with a few
//! large candidates is most of its looseness (ResNet-32: 6.67 tensors of 180 MB at the
//! binding constraint), so the constraints within one tensor of the least, at the ops within
//! one tensor of the least bound, are computed again with whole tensors (`whole_knapsack`):
//! ResNet-32 11.91 → 11.64 % of the peak.
//!
//! Every op must fit, not only `k*`: op `j` needs `L_j − removal_j ≤ limit`, where
//! `removal_j` is the same bound at `S_j`. So the reduction of the peak is bounded by
//! `min_j (L* − L_j + removal_j)`, computed for the ops in decreasing load until `L* − L_j`
//! reaches the bound so far (no later op can lower it; K such ops cost K times the above,
//! about 0.5 s for the Tree-LSTM log or LSTM's, release build, and at most about a second:
//! beyond that, ops are left out and the bound is looser). This matters where an op near
//! the peak writes what nothing else can replace, or where the copy streams are saturated
//! (PCIe 3, peak op alone → every op): VGG16 (generated) 28.8 → 23.8 %, LSTM 66.9 → 66.5 %,
//! the generated Tree-LSTM log 42.4 → 41.6 %; the other shared logs do not move.
//! `floor = L* − removal` is then a lower bound on the simulated peak of every zero-stall plan
//! in this simulator.
//!
//! **With overhead.** A plan may stall the compute stream instead: op `k` then starts at
//! `S_k + D_k`, with `D_k` non-decreasing in `k` and at most the plan's overhead times `T0`.
//! A copy-out released by op `w` runs in `[E_w + D_w, S* + D*]` and a copy-in in
//! `[S* + D*, d_t + D_i]`, so each window is at most `slack = overhead · T0` longer than
//! above (wrapping ones too: in steady state each iteration adds the same `D`, and a
//! wrapping gap's `o` follows `k*` and its `i` precedes it, so the delays between them add
//! up to at most `D` of one iteration). [`overhead_bound`] is the same bound with every
//! window `slack` longer — an upper bound on the reduction of every plan of at most that
//! overhead that keeps its limit.
//!
//! Swap units (`super::autoswap`) copy each member by itself: every member is a job here with
//! its own latency, and a unit's members leave no earlier than their own last access and are
//! back no later than their own next access, so plans with units are bounded too.

use super::CopyModel;
use super::profile::Profile;
use crate::ops::{OpTrace, TensorId};

#[derive(Clone, Debug, PartialEq)]
pub struct Bound {
    /// First op of maximal no-swap load (None without ops).
    pub peak_op: Option<usize>,
    /// `L*`, the no-swap peak.
    pub peak_bytes: u64,
    /// Tensors that could be away at the peak.
    pub eligible: usize,
    pub eligible_bytes: u64,
    /// Upper bound on the bytes a zero-stall plan can remove at the peak.
    pub max_removal: u64,
    /// `peak_bytes − max_removal`: no zero-stall plan simulates to a lower peak.
    pub floor_bytes: u64,
}

struct Job {
    bytes: u64,
    release: f64,
    deadline: f64,
    c_out: f64,
    c_in: f64,
}

/// Fenwick tree of (cost, bytes, count) over size ranks.
struct Fenwick {
    cost: Vec<f64>,
    bytes: Vec<f64>,
    cnt: Vec<usize>,
}

impl Fenwick {
    fn new(n: usize) -> Fenwick {
        Fenwick {
            cost: vec![0.0; n + 1],
            bytes: vec![0.0; n + 1],
            cnt: vec![0; n + 1],
        }
    }
    fn add(&mut self, i: usize, c: f64, b: f64) {
        let mut x = i + 1;
        while x < self.cost.len() {
            self.cost[x] += c;
            self.bytes[x] += b;
            self.cnt[x] += 1;
            x += x & x.wrapping_neg();
        }
    }
    /// Fractional knapsack over the inserted items in rank order with capacity `cap`.
    fn knapsack(&self, cap: f64, rank_cost: &[f64], rank_bytes: &[f64]) -> f64 {
        let n = self.cost.len() - 1;
        let mut step = n.next_power_of_two();
        let (mut pos, mut c, mut b, mut k) = (0usize, 0.0, 0.0, 0usize);
        while step > 0 {
            let nx = pos + step;
            if nx <= n && c + self.cost[nx] <= cap {
                pos = nx;
                c += self.cost[nx];
                b += self.bytes[nx];
                k += self.cnt[nx];
            }
            step >>= 1;
        }
        // The next inserted item after `pos` (rank ≥ pos): the (k+1)-th inserted.
        let mut step = n.next_power_of_two();
        let (mut q, mut seen) = (0usize, 0usize);
        while step > 0 {
            let nx = q + step;
            if nx <= n && seen + self.cnt[nx] <= k {
                q = nx;
                seen += self.cnt[nx];
            }
            step >>= 1;
        }
        // q = number of ranks holding the first k items; item k+1 is at rank q (0-based).
        if q < n && rank_cost[q] > 0.0 {
            b += rank_bytes[q] * ((cap - c) / rank_cost[q]).clamp(0.0, 1.0);
        }
        b
    }
}

/// Fractional knapsack bound with nested constraints; `key` orders constraints (suffixes by
/// release for the out side, prefixes by deadline for the in side). With `whole`, the
/// constraints whose fractional value is within one tensor of the least are computed again
/// with whole tensors ([`whole_knapsack`]), at most [`WHOLE_CONSTRAINTS`] of them.
fn side_bound(
    jobs: &[Job],
    ranks: &[usize],
    out_side: bool,
    s_star: f64,
    total: f64,
    whole: bool,
) -> f64 {
    let m = jobs.len();
    let mut idx: Vec<usize> = (0..m).collect();
    if out_side {
        idx.sort_by(|&a, &b| jobs[b].release.total_cmp(&jobs[a].release));
    } else {
        idx.sort_by(|&a, &b| jobs[a].deadline.total_cmp(&jobs[b].deadline));
    }
    // A job's copy time on this side.
    let cost = |job: &Job| if out_side { job.c_out } else { job.c_in };
    let mut rank_cost = vec![0.0; m];
    let mut rank_bytes = vec![0.0; m];
    for (j, job) in jobs.iter().enumerate() {
        rank_cost[ranks[j]] = cost(job);
        rank_bytes[ranks[j]] = job.bytes as f64;
    }
    let mut fw = Fenwick::new(m);
    let mut inside = 0.0;
    let mut best = total;
    // Each constraint: its fractional bound, how many jobs of `idx` it holds and their bytes,
    // its capacity.
    let mut constraints: Vec<(f64, usize, f64, f64)> = Vec::new();
    let mut x = 0;
    while x < m {
        let key = if out_side {
            jobs[idx[x]].release
        } else {
            jobs[idx[x]].deadline
        };
        while x < m {
            let j = &jobs[idx[x]];
            let kj = if out_side { j.release } else { j.deadline };
            if kj != key {
                break;
            }
            fw.add(ranks[idx[x]], cost(j), j.bytes as f64);
            inside += j.bytes as f64;
            x += 1;
        }
        let cap = if out_side { s_star - key } else { key - s_star };
        let bound = (total - inside) + fw.knapsack(cap.max(0.0), &rank_cost, &rank_bytes);
        best = best.min(bound);
        if whole {
            constraints.push((bound, x, inside, cap.max(0.0)));
        }
    }
    if constraints.is_empty() {
        return best;
    }
    // Whole tensors lower a constraint's value by less than its largest tensor.
    let largest = jobs.iter().map(|j| j.bytes as f64).fold(0.0, f64::max);
    constraints.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut tightened = f64::INFINITY;
    let mut items = Vec::new();
    for (k, &(fractional, len, inside, cap)) in constraints.iter().enumerate() {
        if k == WHOLE_CONSTRAINTS || fractional - largest >= tightened {
            // Every constraint left keeps its fractional value, which `best` already counts.
            break;
        }
        items.clear();
        items.extend(
            idx[..len]
                .iter()
                .map(|&j| (jobs[j].bytes as f64, cost(&jobs[j]))),
        );
        let bound = (total - inside) + whole_knapsack(&items, cap);
        tightened = tightened.min(bound.min(fractional));
    }
    best.min(tightened)
}

/// Constraints of one side and op computed again with whole tensors, at most.
const WHOLE_CONSTRAINTS: usize = 8;

/// A tensor in [`whole_knapsack`]: its bytes and its copy time.
type Item = (f64, f64);

/// Units of a constraint's capacity in [`whole_knapsack`]'s table.
const WHOLE_UNITS: usize = 4096;

/// An upper bound on the bytes of any subset of `items` (bytes, copy time) whose copy times
/// sum to at most `cap`, counting no fraction of a tensor of at least `cap / 256`.
///
/// Why: the fractional knapsack may count part of the next tensor, and where the candidates
/// are few and large that part is most of the bound's looseness (ResNet-32: 6.67 tensors of
/// 180 MB at its binding constraint, 0.28 points of the peak; docs/BENCHMARKS.md). The large
/// tensors go to a 0/1 table over `WHOLE_UNITS` units of `cap`, their times rounded down (a
/// relaxation, so still an upper bound); the small ones fill what each entry leaves,
/// fractionally, densest first. Too large a table keeps the fractional value (`f64::MAX`).
fn whole_knapsack(items: &[Item], cap: f64) -> f64 {
    if !cap.is_finite() {
        // Swap-ins never due (final swaps): the constraint holds everything.
        return items.iter().map(|&(b, _)| b).sum();
    }
    let unit = cap / WHOLE_UNITS as f64;
    if unit <= 0.0 {
        return items
            .iter()
            .filter(|&&(_, c)| c <= 0.0)
            .map(|&(b, _)| b)
            .sum();
    }
    let (mut small, large): (Vec<Item>, Vec<Item>) = (items.iter())
        .filter(|&&(_, c)| c <= cap)
        .partition(|&&(_, c)| c < 16.0 * unit);
    if large.len().saturating_mul(WHOLE_UNITS) > 1 << 24 {
        return f64::MAX;
    }
    let mut table = vec![0.0f64; WHOLE_UNITS + 1];
    for &(bytes, c) in &large {
        let w = (c / unit) as usize;
        for u in (w..=WHOLE_UNITS).rev() {
            table[u] = table[u].max(table[u - w] + bytes);
        }
    }
    // The small tensors densest first, with running sums of their times and bytes.
    small.sort_by(|a, b| (b.0 * a.1).total_cmp(&(a.0 * b.1)));
    let (mut times, mut bytes) = (vec![0.0], vec![0.0]);
    for &(b, c) in &small {
        times.push(times.last().unwrap_or(&0.0) + c);
        bytes.push(bytes.last().unwrap_or(&0.0) + b);
    }
    let fill = |room: f64| {
        let room = room.max(0.0);
        let whole = times.partition_point(|&t| t <= room) - 1;
        let part = small.get(whole).map_or(0.0, |&(b, c)| {
            if c > 0.0 {
                b * ((room - times[whole]) / c).clamp(0.0, 1.0)
            } else {
                b
            }
        });
        bytes[whole] + part
    };
    (0..=WHOLE_UNITS)
        .map(|u| table[u] + fill(cap - u as f64 * unit))
        .fold(0.0, f64::max)
}

/// The zero-stall copy bound of `trace` under `copy`.
pub fn zero_stall_bound(trace: &OpTrace, copy: CopyModel) -> Bound {
    overhead_bound(trace, copy, 0.0)
}

/// The copy bound of `trace` under `copy` for plans whose simulated overhead is at most
/// `overhead` (a fraction: 0.15 for 15 %) and that keep their limit: the same knapsack with
/// every copy window `slack = overhead · T0` longer (see the module documentation). NaN or
/// negative `overhead` reads as 0.
pub fn overhead_bound(trace: &OpTrace, copy: CopyModel, overhead: f64) -> Bound {
    bound_of(&Profile::new(trace), copy, overhead)
}

/// [`overhead_bound`] of a profiled trace.
fn bound_of(p: &Profile, copy: CopyModel, overhead: f64) -> Bound {
    let window_ns = if overhead > 0.0 {
        overhead * p.t0()
    } else {
        0.0
    };
    let (peak_bytes, peak_op) = p.peak();
    let Some(k) = peak_op else {
        return Bound {
            peak_op,
            peak_bytes,
            eligible: 0,
            eligible_bytes: 0,
            max_removal: 0,
            floor_bytes: peak_bytes,
        };
    };
    let at_peak = removal_at(p, copy, k, window_ns, false);
    // Every other op must fit too: a reduction R needs `L_j − removal_j ≤ L* − R`. Ops in
    // decreasing load; once `L* − L_j` reaches the bound, no later op can lower it.
    let mut max_removal = at_peak.removal;
    // Each op's bound on the reduction, `L* − L_j + removal_j`, with the op.
    let mut by_op = vec![(at_peak.removal, k)];
    let mut ops: Vec<usize> = (0..p.n).filter(|&j| j != k).collect();
    ops.sort_by_key(|&j| (std::cmp::Reverse(p.load[j]), j));
    let mut visits = MAX_TENSOR_VISITS;
    for j in ops {
        let slack = peak_bytes.saturating_sub(p.load[j]);
        if slack >= max_removal || visits < p.bytes.len() {
            break;
        }
        visits -= p.bytes.len();
        let at = removal_at(p, copy, j, window_ns, false);
        let reduction = slack.saturating_add(at.removal);
        max_removal = max_removal.min(reduction);
        by_op.push((reduction, j));
    }
    // Whole tensors, at the ops within one tensor of the least bound (at most `WHOLE_OPS`):
    // each op's value falls by less than the largest tensor.
    let largest = p.bytes.iter().copied().max().unwrap_or(0);
    by_op.sort_unstable();
    let mut tightened = u64::MAX;
    for (n, &(fractional, j)) in by_op.iter().enumerate() {
        if n == WHOLE_OPS || fractional.saturating_sub(largest) >= tightened {
            // Every op left keeps its fractional value, which `max_removal` already counts.
            break;
        }
        let slack = peak_bytes.saturating_sub(p.load[j]);
        let at = removal_at(p, copy, j, window_ns, true);
        tightened = tightened.min(slack.saturating_add(at.removal));
    }
    max_removal = max_removal.min(tightened);
    Bound {
        peak_op,
        peak_bytes,
        eligible: at_peak.eligible,
        eligible_bytes: at_peak.eligible_bytes,
        max_removal,
        floor_bytes: peak_bytes.saturating_sub(max_removal),
    }
}

/// Whether [`zero_stall_bound`] lets a zero-stall plan keep `limit` (`limit ≥ floor`), so a
/// planner can skip a search for a zero-overhead plan that cannot exist. The peak op's
/// knapsack alone is looked at first: one op, O(tensors + E log E), where the whole bound
/// visits up to [`MAX_TENSOR_VISITS`] tensors (about a second on the largest shared logs).
pub(crate) fn zero_stall_may_keep(trace: &OpTrace, copy: CopyModel, limit: u64) -> bool {
    let p = Profile::new(trace);
    let (peak_bytes, peak_op) = p.peak();
    let Some(k) = peak_op else {
        return true;
    };
    limit >= peak_bytes.saturating_sub(removal_at(&p, copy, k, 0.0, false).removal)
        && limit >= bound_of(&p, copy, 0.0).floor_bytes
}

/// The op whose own accesses hold the most bytes, with those tensors (largest first): every
/// tensor an op reads or writes is on the device while it runs, so no plan, at any overhead,
/// keeps the iteration's load below `bytes`. It names why a limit cannot be kept when the
/// copy bounds above do not apply (a plan that stalls as long as it must).
#[derive(Clone, Debug, PartialEq)]
pub struct BusiestOp {
    pub op: usize,
    pub bytes: u64,
    pub tensors: Vec<(TensorId, u64)>,
}

/// The [`BusiestOp`] of `trace` (the first of the most bytes), None without ops.
pub fn busiest_op(trace: &OpTrace) -> Option<BusiestOp> {
    let p = Profile::new(trace);
    let uses = |k: usize| p.op_acc[p.op_acc_off[k]..p.op_acc_off[k + 1]].iter();
    let bytes_of = |k: usize| uses(k).map(|&t| p.bytes[t as usize]).sum::<u64>();
    let op = (0..p.n).rev().max_by_key(|&k| bytes_of(k))?;
    let mut tensors: Vec<(TensorId, u64)> = uses(op)
        .map(|&t| (t as TensorId, p.bytes[t as usize]))
        .collect();
    tensors.sort_by_key(|&(t, b)| (std::cmp::Reverse(b), t));
    Some(BusiestOp {
        op,
        bytes: bytes_of(op),
        tensors,
    })
}

/// Ops whose bound is computed again with whole tensors, at most.
const WHOLE_OPS: usize = 16;

/// Tensors the ops after the peak op may visit in all (each visits every tensor): about a
/// second, release build. Stopping early leaves out constraints, so the bound only loosens.
const MAX_TENSOR_VISITS: usize = 100_000_000;

/// What a zero-stall plan can have away while op `k` allocates.
struct Removal {
    eligible: usize,
    eligible_bytes: u64,
    /// Upper bound on the bytes away at `S_k`.
    removal: u64,
}

/// The knapsack bound of the module documentation at op `k` (`S* = S_k`), every copy window
/// `slack` ns longer. O(tensors + E log E) for E eligible tensors.
fn removal_at(p: &Profile, copy: CopyModel, k: usize, slack: f64, whole: bool) -> Removal {
    let t0 = p.t0();
    let s_star = p.start[k];
    let mut jobs = Vec::new();
    for t in 0..p.bytes.len() {
        let b = p.bytes[t];
        let live = p.birth[t].is_some_and(|x| x <= k) && p.death[t] >= k;
        if b == 0 || !live || p.born(k).contains(&(t as u32)) {
            continue;
        }
        let acc = p.t_acc(t);
        let at = acc.partition_point(|&a| (a as usize) < k);
        if acc.get(at).is_some_and(|&a| a as usize == k) {
            continue;
        }
        let prev = if at > 0 {
            Some(p.end(p.copy_from(t, acc[at - 1] as usize)))
        } else if p.cross[t] {
            acc.last().map(|&o| p.end(o as usize) - t0)
        } else {
            None
        };
        let next = if at < acc.len() {
            Some(p.start[acc[at] as usize])
        } else if p.cross[t] {
            acc.first().map(|&i| p.start[i as usize] + t0)
        } else {
            // Not accessed again before it is freed: a final swap, never copied back.
            Some(f64::INFINITY)
        };
        let (Some(release), Some(deadline)) = (prev, next) else {
            continue;
        };
        let c_out = copy.out_ns(b);
        let c_in = if deadline.is_finite() {
            copy.in_ns(b)
        } else {
            0.0
        };
        if release + c_out > s_star + slack || s_star - slack + c_in > deadline {
            continue;
        }
        jobs.push(Job {
            bytes: b,
            release,
            deadline,
            c_out,
            c_in,
        });
    }
    // Size ranks, largest first (ties by position: deterministic).
    let mut order: Vec<usize> = (0..jobs.len()).collect();
    order.sort_by(|&a, &b| jobs[b].bytes.cmp(&jobs[a].bytes).then(a.cmp(&b)));
    let mut ranks = vec![0; jobs.len()];
    for (r, &j) in order.iter().enumerate() {
        ranks[j] = r;
    }
    let total: f64 = jobs.iter().map(|j| j.bytes as f64).sum();
    let eligible_bytes = jobs.iter().map(|j| j.bytes).fold(0u64, u64::saturating_add);
    let r = side_bound(&jobs, &ranks, true, s_star + slack, total, whole)
        .min(side_bound(
            &jobs,
            &ranks,
            false,
            s_star - slack,
            total,
            whole,
        ))
        .min(total);
    // Round up so float error can only loosen the bound.
    Removal {
        eligible: jobs.len(),
        eligible_bytes,
        removal: (r.max(0.0).ceil() as u64).min(eligible_bytes),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix64;

    /// The best subset by brute force.
    fn best_subset(items: &[(f64, f64)], cap: f64) -> f64 {
        (0u32..1 << items.len())
            .filter_map(|set| {
                let chosen = || (0..items.len()).filter(move |i| set >> i & 1 == 1);
                let time: f64 = chosen().map(|i| items[i].1).sum();
                (time <= cap).then(|| chosen().map(|i| items[i].0).sum())
            })
            .fold(0.0, f64::max)
    }

    /// Three tensors of 100 bytes whose copies take 100 ns each, 250 ns of copy time: the
    /// fractional knapsack counts two and a half, whole tensors two.
    #[test]
    fn whole_tensors_count_no_fraction_of_a_large_tensor() {
        let items = [(100.0, 100.0); 3];
        assert_eq!(whole_knapsack(&items, 250.0), 200.0);
        assert_eq!(whole_knapsack(&items, 300.0), 300.0);
        assert_eq!(whole_knapsack(&items, f64::INFINITY), 300.0);
        // A tensor whose copy does not fit the time at all counts nothing.
        assert_eq!(whole_knapsack(&[(500.0, 600.0)], 250.0), 0.0);
    }

    /// On random sets of large and small tensors the value is never below the best subset:
    /// an upper bound, which the copy bound must stay. (It may exceed the fractional
    /// knapsack's by the times rounded down; `side_bound` keeps the smaller.)
    #[test]
    fn whole_knapsack_bounds_every_subset_from_above() {
        let mut rng = SplitMix64::new(0xB0B);
        for round in 0..300 {
            let n = 1 + rng.below(12) as usize;
            let cap = 1.0 + rng.below(1_000) as f64;
            let items: Vec<(f64, f64)> = (0..n)
                .map(|_| {
                    let time = rng.unit() * cap * [0.01, 0.3, 1.2][rng.below(3) as usize];
                    (time * (1.0 + rng.unit()), time)
                })
                .collect();
            let value = whole_knapsack(&items, cap);
            let best = best_subset(&items, cap);
            assert!(
                value >= best - 1e-9,
                "round {round}: {value} < {best} {items:?}"
            );
        }
    }
}
