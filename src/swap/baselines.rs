//! Baselines priced by the same simulator as AutoSwap.
//!
//! * [`single_score`]: AutoSwap ranked by one score alone (one-hot weights).
//! * [`lru`]: on-demand swapping as in ODSwap (SwapAdvisor's baseline). Walking the ops in
//!   order with the op-level load `L_k − Σ away`, when op `k` would exceed the limit the least
//!   recently used tensor is evicted (swap-out issued after op `k − 1`, i.e. when memory is
//!   needed, not right after its last use), and its next access `i` is prefetched: the
//!   swap-in is issued when op `i − 1` is launched, and the tensor counts as back from op
//!   `i − 1`. Eligible victims: live at `k`, not accessed by `k`, already accessed in this
//!   iteration, next accessed at `i ≥ k + 2` within the iteration, bytes > 0. (Cross-iteration
//!   gaps are not used: an on-demand policy only reacts within the iteration.)
//! * [`belady`]: the same, evicting the tensor whose next use is furthest (Belady's MIN).
//!
//! Cost: O((ops + accesses) log tensors) plus the eligible-victim scans.

use super::autoswap::{AutoSwapOptions, Weights, plan_with};
use super::profile::Profile;
use super::{CopyModel, Swap, SwapPlan};
use crate::ops::OpTrace;
use std::collections::BTreeSet;

/// The four scores of AutoSwap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Score {
    Aoa,
    Doa,
    Wdoa,
    Swdoa,
}

/// AutoSwap ranked by `score` alone.
pub fn single_score(trace: &OpTrace, limit: u64, score: Score, copy: CopyModel) -> SwapPlan {
    let w = match score {
        Score::Aoa => Weights::AOA,
        Score::Doa => Weights::DOA,
        Score::Wdoa => Weights::WDOA,
        Score::Swdoa => Weights::SWDOA,
    };
    plan_with(trace, limit, w, copy, &AutoSwapOptions::default())
}

/// On-demand LRU eviction with prefetch of the next access.
pub fn lru(trace: &OpTrace, limit: u64, _copy: CopyModel) -> SwapPlan {
    on_demand(&Profile::new(trace), limit, false)
}

/// On-demand furthest-next-use (Belady) eviction with prefetch of the next access.
pub fn belady(trace: &OpTrace, limit: u64, _copy: CopyModel) -> SwapPlan {
    on_demand(&Profile::new(trace), limit, true)
}

fn on_demand(p: &Profile, limit: u64, furthest: bool) -> SwapPlan {
    let n = p.n;
    let nt = p.bytes.len();
    // Position of the current access of each tensor in its access list.
    let mut pos = vec![usize::MAX; nt];
    let mut key = vec![None::<(u32, u32)>; nt];
    let mut set: BTreeSet<(u32, u32)> = BTreeSet::new();
    let mut back_at: Vec<Vec<u32>> = vec![Vec::new(); n];
    let mut away: u64 = 0;
    let mut swaps = Vec::new();
    let next_of = |t: usize, pos: usize| p.t_acc(t).get(pos.wrapping_add(1)).map(|&k| k as usize);
    for k in 0..n {
        for &t in &back_at[k] {
            away = away.saturating_sub(p.bytes[t as usize]);
        }
        for &t in p.op_acc(k) {
            if let Some(kk) = key[t as usize].take() {
                set.remove(&kk);
            }
        }
        let mut eff = p.load[k].saturating_sub(away);
        if eff > limit {
            let mut skipped = Vec::new();
            while eff > limit {
                let pick = if furthest {
                    set.pop_last()
                } else {
                    set.pop_first()
                };
                let Some(kk) = pick else { break };
                let t = kk.1 as usize;
                key[t] = None;
                let live = p.birth[t].is_some_and(|b| b <= k) && p.death[t] >= k;
                let next = next_of(t, pos[t]);
                let ok = live
                    && p.bytes[t] > 0
                    && pos[t] != usize::MAX
                    && next.is_some_and(|i| i >= k + 2);
                if !ok {
                    skipped.push(kk);
                    continue;
                }
                let i = next.unwrap_or(k + 2);
                let o = p.t_acc(t)[pos[t]] as usize;
                let back = i - 1;
                swaps.push(Swap {
                    tensor: t as u32,
                    out_after: o,
                    out_at: k.saturating_sub(1).max(o),
                    in_before: Some(i),
                    in_issue: back,
                    in_delay_ns: 0.0,
                });
                away = away.saturating_add(p.bytes[t]);
                back_at[back].push(t as u32);
                eff = eff.saturating_sub(p.bytes[t]);
            }
            for kk in skipped {
                key[kk.1 as usize] = Some(kk);
                set.insert(kk);
            }
        }
        for &t in p.op_acc(k) {
            let t = t as usize;
            let acc = p.t_acc(t);
            pos[t] = acc.partition_point(|&a| (a as usize) < k);
            if let Some(i) = next_of(t, pos[t])
                && p.death[t] >= i
            {
                let kk = if furthest {
                    (i as u32, t as u32)
                } else {
                    (k as u32, t as u32)
                };
                key[t] = Some(kk);
                set.insert(kk);
            }
        }
        for &t in p.dies(k) {
            if let Some(kk) = key[t as usize].take() {
                set.remove(&kk);
            }
        }
    }
    SwapPlan {
        swaps,
        claims_zero_overhead: false,
    }
}
