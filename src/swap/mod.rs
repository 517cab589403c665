//! AutoSwap: which tensors to copy to host memory between two uses, when, and what it costs.
//!
//! This module owns the swap *plan* ([`SwapPlan`]), the timeline simulator that prices a plan
//! ([`sim`]), the AutoSwap planner ([`autoswap`]), a local search that completes its plans
//! near the copy bound (`augment`), its baselines ([`baselines`]), an upper
//! bound on what any zero-stall plan can save ([`bound`]), when a swapped tensor's range
//! may be lent to others ([`lend`]) and the combined pool + swap plan ([`combined`]).
//! Everything is a pure function of an [`OpTrace`] (`crate::ops`): deterministic, allocation-local, `Send + Sync`, no printing, no
//! `unsafe`, and no panic on any trace (empty, zero-time ops, zero-size tensors, dangling ids).
//!
//! # Model
//!
//! Ops run in trace order on one compute stream with durations `d_k` (no-swap start
//! `S_k = Σ_{j<k} d_j`, end `E_k = S_k + d_k`, iteration time `T0 = S_n`). Two copy streams,
//! each serialised (FIFO): swap-out (device → host) and swap-in (host → device), with
//!
//! ```text
//! c_out(b) = λ_out + β_out · b        c_in(b) = λ_in + β_in · b          (ns, b in bytes)
//! ```
//!
//! ([`CopyModel`]; PCIe 3 x16 pinned per the SmartPool/AutoSwap authors' measurements:
//! `β_out = 0.0756 ns/B, λ_out = 47.2 µs; β_in = 0.0823 ns/B, λ_in = 9.7 µs`).
//!
//! Memory load at time t (the paper's Fig. 7):
//!
//! ```text
//! load(t) = Σ resident + Σ born-and-not-yet-freed − Σ tensors currently out
//! ```
//!
//! where a tensor's bytes are released when its swap-out *completes* and reacquired when its
//! swap-in *starts*. A swap is one idle gap of one tensor: swap-out after op `o` (its last
//! access before the gap), swap-in needed before op `i` (its next access). A gap *wraps* the
//! iteration boundary (`i ≤ o`) for a tensor alive across iterations (resident, never freed):
//! out after its last access of the iteration, in before its first access of the next one.
//!
//! # Invariants of a valid [`SwapPlan`] (checked by [`validate`], independently of planners)
//!
//! For every swap `s` of tensor `t` with accesses `A_t` (sorted ops reading or writing `t`):
//! * `o ∈ A_t`, and `i` is the next access after `o` (`A_t ∩ (o, i) = ∅`), or, wrapping,
//!   `t` is alive across iterations, `o = max A_t` and `i = min A_t`;
//! * non-wrapping: `w ≤ out_at`, `max(o, out_at) < in_issue ≤ i`, where `w` is the last
//!   write of `t` at or before `o` (`o` when there is none): an *early* copy-out
//!   (`out_at < o`) starts after the last write and overlaps the reads that follow it, and
//!   the tensor leaves the device when both the copy and op `o` have ended; an early
//!   `out_at` is at or after the previous swap's `i` of the same tensor (it is back then);
//!   wrapping: `in_issue ≤ i ≤ o ≤ out_at`;
//! * final (`i = None`): `o = max A_t`, `t` is freed within the iteration, and
//!   `w ≤ out_at ≤` the op after which it is freed;
//! * no two swaps share a gap.
//!
//! [`check`] adds what only a simulation shows: every swapped tensor is back before its next
//! access (no on-demand swap-in was needed) and a plan that claims zero overhead really has
//! `overhead = 0` and `peak ≤ limit`.

mod augment;
pub mod autoswap;
pub mod baselines;
pub mod bound;
pub mod combined;
pub mod lend;
mod profile;
pub mod sim;
#[cfg(test)]
pub(crate) mod tests;

pub use autoswap::{AutoSwapOptions, Candidate, Weights, candidates, evaluate, plan, plan_with};
pub use bound::{Bound, BusiestOp, busiest_op, overhead_bound, zero_stall_bound};
pub use lend::{Lent, lent_windows};
pub use sim::{SimOptions, SimResult, Stream, StreamEvent, What, simulate};

use crate::ops::{OpTrace, TensorId};
use profile::Profile;
use std::fmt;

/// Copy time model: `latency + bytes × ns_per_byte`, per direction, and the handoff between
/// streams.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CopyModel {
    pub out_ns_per_byte: f64,
    pub out_latency_ns: f64,
    pub in_ns_per_byte: f64,
    pub in_latency_ns: f64,
    /// From an event on one stream to the start of the work another stream waited for it
    /// with (when that stream was idle): a GPU resolves it in microseconds, a loaded host's
    /// threads (cuda-shim's streams) in up to milliseconds. Swapping crosses streams at every
    /// copy, so the simulator charges it at each crossing that waits ([`sim`]).
    #[serde(default)]
    pub handoff_ns: f64,
}

impl CopyModel {
    /// PCIe 3 x16, pinned host memory, as measured by the SmartPool/AutoSwap authors
    /// (≈ 13.2 GB/s out, ≈ 12.2 GB/s in).
    pub const PCIE3: CopyModel = CopyModel {
        out_ns_per_byte: 0.0756,
        out_latency_ns: 47_200.0,
        in_ns_per_byte: 0.0823,
        in_latency_ns: 9_700.0,
        handoff_ns: 0.0,
    };

    pub fn pcie3() -> CopyModel {
        CopyModel::PCIE3
    }
    /// PCIe 4 x16: twice PCIe 3's bandwidth, same latencies.
    pub fn pcie4() -> CopyModel {
        CopyModel::PCIE3.scaled_bandwidth(2.0)
    }
    /// PCIe 5 x16: four times PCIe 3's bandwidth, same latencies.
    pub fn pcie5() -> CopyModel {
        CopyModel::PCIE3.scaled_bandwidth(4.0)
    }
    /// CPU–GPU NVLink 2.0 as on IBM POWER9 + V100 (3 bricks × 25 GB/s = 75 GB/s per direction,
    /// 0.01333 ns/B), with PCIe 3's latencies (a conservative choice: the latencies measured by
    /// the authors are mostly driver and launch cost).
    pub fn nvlink() -> CopyModel {
        CopyModel::with_bandwidth(75.0, 75.0)
    }
    /// Given bandwidths in GB/s (10⁹ B/s) per direction, PCIe 3's latencies.
    pub fn with_bandwidth(out_gb_s: f64, in_gb_s: f64) -> CopyModel {
        CopyModel {
            out_ns_per_byte: 1.0 / out_gb_s,
            in_ns_per_byte: 1.0 / in_gb_s,
            ..CopyModel::PCIE3
        }
    }
    /// `pcie3`, `pcie4`, `pcie5`, `nvlink`, or a bandwidth in GB/s for both directions.
    pub fn parse(text: &str) -> Option<CopyModel> {
        Some(match text.trim() {
            "pcie3" => CopyModel::pcie3(),
            "pcie4" => CopyModel::pcie4(),
            "pcie5" => CopyModel::pcie5(),
            "nvlink" => CopyModel::nvlink(),
            other => match other.parse::<f64>() {
                Ok(gb_s) if gb_s.is_finite() && gb_s > 0.0 => CopyModel::with_bandwidth(gb_s, gb_s),
                _ => return None,
            },
        })
    }
    /// The same latencies, bandwidth multiplied by `factor`.
    pub fn scaled_bandwidth(self, factor: f64) -> CopyModel {
        CopyModel {
            out_ns_per_byte: self.out_ns_per_byte / factor,
            in_ns_per_byte: self.in_ns_per_byte / factor,
            ..self
        }
    }
    /// Every copy `factor` times as long (latencies included; the handoff is not a copy's).
    pub fn scaled_time(self, factor: f64) -> CopyModel {
        CopyModel {
            out_ns_per_byte: self.out_ns_per_byte * factor,
            out_latency_ns: self.out_latency_ns * factor,
            in_ns_per_byte: self.in_ns_per_byte * factor,
            in_latency_ns: self.in_latency_ns * factor,
            ..self
        }
    }
    /// [`CopyModel::handoff_ns`] never negative or NaN.
    pub fn handoff(&self) -> f64 {
        profile::sane_ns(self.handoff_ns)
    }
    /// `c_out(b)` in ns (never negative or NaN).
    pub fn out_ns(&self, bytes: u64) -> f64 {
        profile::sane_ns(self.out_latency_ns + bytes as f64 * self.out_ns_per_byte)
    }
    /// `c_in(b)` in ns (never negative or NaN).
    pub fn in_ns(&self, bytes: u64) -> f64 {
        profile::sane_ns(self.in_latency_ns + bytes as f64 * self.in_ns_per_byte)
    }
}

impl Default for CopyModel {
    fn default() -> Self {
        CopyModel::PCIE3
    }
}

/// One swap: tensor `tensor` is copied out after op `out_at` and must be back before op
/// `in_before` (its next access). It leaves the device when that copy and op `out_after`
/// (its last access before the gap) have both ended: `out_at ≥ out_after` waits after the
/// last access; an *early* copy-out (`out_at < out_after`, after the tensor's last write, see
/// the module invariants) overlaps the reads up to `out_after`, so the tensor can leave as
/// soon as the last one ends. The
/// swap-in is issued when op `in_issue` is launched (when the op before it ends) plus
/// `in_delay_ns` (0 for an executor that issues exactly at a launch).
///
/// A *final* swap (`in_before = None`) moves out a tensor that is not accessed again before
/// the program frees it: it never comes back, its host copy is dropped when the program frees
/// the tensor, and `in_issue`/`in_delay_ns` are unused. Frameworks hold such tensors (LSTM's
/// DTR log: 24 % of its peak), and only a final swap can free their device memory.
#[derive(Clone, Debug, PartialEq)]
pub struct Swap {
    pub tensor: TensorId,
    pub out_after: usize,
    pub out_at: usize,
    pub in_before: Option<usize>,
    pub in_issue: usize,
    pub in_delay_ns: f64,
}

impl Swap {
    /// The gap wraps the iteration boundary (out at the end, in at the start of the next).
    pub fn wraps(&self) -> bool {
        self.in_before.is_some_and(|i| i <= self.out_after)
    }
}

/// A swap plan for one iteration.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SwapPlan {
    pub swaps: Vec<Swap>,
    /// The planner simulated this plan and found `overhead = 0` and `peak ≤ limit`.
    pub claims_zero_overhead: bool,
}

impl SwapPlan {
    /// Σ bytes of the swapped tensors (each swap once; each is copied out and back).
    pub fn swapped_bytes(&self, trace: &OpTrace) -> u64 {
        self.swaps
            .iter()
            .filter_map(|s| trace.tensors.get(s.tensor as usize))
            .map(|t| t.bytes)
            .fold(0u64, u64::saturating_add)
    }
}

/// Why a plan is invalid; `swap` is the index in [`SwapPlan::swaps`].
#[derive(Clone, Debug, PartialEq)]
pub enum PlanError {
    UnknownTensor {
        swap: usize,
        tensor: TensorId,
    },
    OpOutOfRange {
        swap: usize,
        op: usize,
    },
    /// `out_after` is not an access of the tensor.
    NotAnAccess {
        swap: usize,
        op: usize,
    },
    /// `in_before` is not the next access after `out_after` (`found` is).
    NotNextAccess {
        swap: usize,
        found: Option<usize>,
    },
    /// A wrapping swap of a tensor not alive across iterations.
    WrapNotAcrossIterations {
        swap: usize,
    },
    /// The issue points are out of order (see the module invariants).
    BadIssueOrder {
        swap: usize,
    },
    /// Two swaps of the same gap.
    DuplicateGap {
        a: usize,
        b: usize,
    },
    /// In simulation, some tensor was not back before its next access (on-demand swap-ins).
    NotBackInTime {
        on_demand: usize,
    },
    /// The plan claims zero overhead but the simulation disagrees.
    ClaimBroken {
        overhead: f64,
        peak: u64,
        limit: u64,
    },
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlanError::UnknownTensor { swap, tensor } => {
                write!(f, "swap {swap}: unknown tensor {tensor}")
            }
            PlanError::OpOutOfRange { swap, op } => write!(f, "swap {swap}: op {op} out of range"),
            PlanError::NotAnAccess { swap, op } => {
                write!(f, "swap {swap}: op {op} does not access the tensor")
            }
            PlanError::NotNextAccess { swap, found } => {
                write!(
                    f,
                    "swap {swap}: in_before is not the next access (next is {found:?})"
                )
            }
            PlanError::WrapNotAcrossIterations { swap } => {
                write!(
                    f,
                    "swap {swap}: wraps the iteration but the tensor does not live across it"
                )
            }
            PlanError::BadIssueOrder { swap } => {
                write!(f, "swap {swap}: issue points out of order")
            }
            PlanError::DuplicateGap { a, b } => write!(f, "swaps {a} and {b} share a gap"),
            PlanError::NotBackInTime { on_demand } => {
                write!(
                    f,
                    "{on_demand} tensor(s) were not back before their next access"
                )
            }
            PlanError::ClaimBroken {
                overhead,
                peak,
                limit,
            } => write!(
                f,
                "plan claims zero overhead but simulates to overhead {overhead} with peak {peak} \
                 (limit {limit})"
            ),
        }
    }
}

impl std::error::Error for PlanError {}

/// Structural validity of `plan` on `trace` (see the module invariants). O(swaps log swaps +
/// accesses of the swapped tensors).
pub fn validate(trace: &OpTrace, plan: &SwapPlan) -> Result<(), PlanError> {
    let p = Profile::new(trace);
    validate_profile(&p, plan)
}

pub(crate) fn validate_profile(p: &Profile, plan: &SwapPlan) -> Result<(), PlanError> {
    let n = p.n;
    for (si, s) in plan.swaps.iter().enumerate() {
        let t = s.tensor as usize;
        if t >= p.bytes.len() {
            return Err(PlanError::UnknownTensor {
                swap: si,
                tensor: s.tensor,
            });
        }
        let back = s.in_before.map(|i| [i, s.in_issue]);
        for op in [s.out_after, s.out_at]
            .into_iter()
            .chain(back.into_iter().flatten())
        {
            if op >= n {
                return Err(PlanError::OpOutOfRange { swap: si, op });
            }
        }
        let acc = p.t_acc(t);
        let Ok(pos) = acc.binary_search(&(s.out_after as u32)) else {
            return Err(PlanError::NotAnAccess {
                swap: si,
                op: s.out_after,
            });
        };
        if s.wraps() {
            if !p.cross[t] {
                return Err(PlanError::WrapNotAcrossIterations { swap: si });
            }
            if pos + 1 != acc.len() || s.in_before != Some(acc[0] as usize) {
                let found = if pos + 1 == acc.len() {
                    acc.first()
                } else {
                    acc.get(pos + 1)
                };
                return Err(PlanError::NotNextAccess {
                    swap: si,
                    found: found.map(|&k| k as usize),
                });
            }
            if !(Some(s.in_issue) <= s.in_before && s.out_after <= s.out_at) {
                return Err(PlanError::BadIssueOrder { swap: si });
            }
        } else {
            let next = acc.get(pos + 1).map(|&k| k as usize);
            if next != s.in_before || (next.is_none() && p.cross[t]) {
                return Err(PlanError::NotNextAccess {
                    swap: si,
                    found: next,
                });
            }
            let issue_ok = s
                .in_before
                .is_none_or(|i| s.out_after.max(s.out_at) < s.in_issue && s.in_issue <= i);
            let from = p.copy_from(t, s.out_after);
            if !(from <= s.out_at && s.out_at <= p.death[t] && issue_ok) {
                return Err(PlanError::BadIssueOrder { swap: si });
            }
        }
        if !(s.in_delay_ns.is_finite() && s.in_delay_ns >= 0.0) {
            return Err(PlanError::BadIssueOrder { swap: si });
        }
    }
    let mut keys: Vec<(u32, usize, usize)> = plan
        .swaps
        .iter()
        .enumerate()
        .map(|(i, s)| (s.tensor, s.out_after, i))
        .collect();
    keys.sort_unstable();
    for w in keys.windows(2) {
        if w[0].0 == w[1].0 && w[0].1 == w[1].1 {
            return Err(PlanError::DuplicateGap {
                a: w[0].2,
                b: w[1].2,
            });
        }
        // An early copy-out of the later gap must not start before the earlier gap's
        // tensor is back: it copies the device's version.
        let (prev, cur) = (&plan.swaps[w[0].2], &plan.swaps[w[1].2]);
        let back_by = prev.in_before.unwrap_or(usize::MAX);
        if w[0].0 == w[1].0 && cur.out_at < cur.out_after && cur.out_at < back_by {
            return Err(PlanError::BadIssueOrder { swap: w[1].2 });
        }
    }
    Ok(())
}

/// [`validate`], then simulate: every swapped tensor must be back before its next access, and
/// a plan claiming zero overhead must simulate to `overhead = 0` and `peak ≤ limit`.
pub fn check(
    trace: &OpTrace,
    plan: &SwapPlan,
    limit: u64,
    copy: CopyModel,
) -> Result<SimResult, PlanError> {
    let p = Profile::new(trace);
    validate_profile(&p, plan)?;
    let r = sim::simulate_profile(&p, plan, limit, copy, SimOptions::default());
    if r.on_demand > 0 {
        return Err(PlanError::NotBackInTime {
            on_demand: r.on_demand,
        });
    }
    if plan.claims_zero_overhead && (r.overhead > 0.0 || r.peak_bytes > limit) {
        return Err(PlanError::ClaimBroken {
            overhead: r.overhead,
            peak: r.peak_bytes,
            limit,
        });
    }
    Ok(r)
}
