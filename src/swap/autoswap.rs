//! AutoSwap (Zhang et al., "Efficient Memory Management for GPU-based Deep Learning Systems"):
//! score the idle gaps of large tensors, take them in priority order until the memory load
//! fits the limit, and schedule the copies.
//!
//! # Candidates
//!
//! A candidate is one idle gap of one tensor of at least [`AutoSwapOptions::min_bytes`]
//! (1 MiB), or of a swap unit of smaller tensors (below): between two consecutive accesses
//! `o < i`, or, for a tensor alive across iterations, from its last access `o` of the
//! iteration to its first access `i` of the next (wrapping), or, for a tensor the program
//! frees without accessing it again, from its last access to its free (*final*: swapped out,
//! never back; `c_in = 0` in the scores). The paper keeps the gaps that span the peak-load op;
//! we keep those spanning *any* op whose no-swap load `L_k` exceeds the limit (the same set
//! when one region is over the limit), and during selection skip a gap whose absence would
//! cover no op that is still over the limit.
//!
//! # Swap units
//!
//! A tensor below `min_bytes` is not worth a copy by itself in the paper's setting, and
//! thousands of them (a Tree-LSTM's cells, `ops::tree`) made AutoSwap remove nothing where the
//! copy bound allows 40 % of the peak. With [`AutoSwapOptions::units`], their gaps are grouped
//! into *swap units* that compete with the large tensors as single candidates: in order of
//! their last access before the gap (per kind: returning, wrapping, final), a gap joins the
//! first open unit whose *common gap* — from the latest last access `o` of its members to the
//! earliest next access `i` — still keeps 3/4 (`UNIT_KEEP`) of every member's own gap, and a
//! unit closes once it holds `min_bytes` (the tensors a framework creates and frees together,
//! a cell's gates and states, fall into one). A unit is scored, selected and scheduled on its
//! common gap with its total bytes and copy times, and becomes one [`Swap`] per member: every
//! member leaves when op `o` ends (`out_at = o`), back to back on the out stream, and every
//! swap-in is issued at the same op and delay, to be back before op `i`.
//!
//! **Cost model: one copy per member.** The executor copies a tensor as one
//! `cuMemcpyAsync` of its own range (`interposer::swap`), and a unit's members are not contiguous in the pool
//! (each has its own offset and lifetime), so nothing lets a unit share the fixed latency of a
//! copy: a unit costs `Σ c_out(b_m)` out and `Σ c_in(b_m)` in, exactly what the simulator
//! charges its member swaps. Grouping buys a decision on the gap the members share, not
//! cheaper copies; one latency per unit would need its members packed into one range
//! (contiguous in the pool over their lives, or gathered into a staging buffer), which
//! neither the pool nor the executor does. The zero-stall bound ([`super::bound`]) charges
//! every tensor its own copies too, so it stays an upper bound on plans with units.
//!
//! # Early copy-out
//!
//! A tensor read several times after its last write (a convolution's output, read by the
//! batch norm and later by its backward pass) holds the same bytes from that write on, so
//! with [`AutoSwapOptions::early_out`] the copy-out of a returning or final gap of a single
//! tensor starts when its last write `w` before the gap ends (`out_from`, [`Swap::out_at`]
//! `< out_after`), overlapping the reads up to `o`; the tensor stays on the device for them
//! and leaves when both the copy and op `o` have ended, with no second copy (the simulator
//! models exactly that). Its copy-out runs `lead = max(c_out − (E_o − E_w), 0)`
//! past `E_o` instead of `c_out`, which the scores and the schedule use below. Wrapping gaps
//! keep their copy-out after the last access (the optimizer writes weights last), and so do
//! units. When an earlier gap of the same tensor is also swapped, the copy-out waits until
//! that swap has brought it back (`copy_after_return`).
//!
//! Early copy-outs change the schedule of every later copy on the out stream and, through
//! the scores, the order of selection, which alone cost up to 0.5 points at some limits on
//! the shared logs (DenseNet-121's WDOA plan at zero overhead most); [`plan_with`] therefore
//! also makes each plan without them and keeps the better, as it does for units.
//!
//! [`plan_with`] makes each plan with and without units and keeps the better: units change
//! the standardised scores of every candidate, and on the shared logs that alone cost
//! 0.1–1.5 points at some limits (DenseNet-121, the generated ResNet-50, its DOA plan most).
//!
//! # Scores (b = bytes, L = limit, L(t) = no-swap load, gap `[E_o, S_i]`, unrolled for wraps)
//!
//! ```text
//! G     = S_i − E_o                                  (wrapping: T0 − E_o + S_i)
//! DOA   = G − lead − c_in(b)                         duration of absence (lead = c_out(b)
//!                                                     without early copy-out)
//! AOA   = DOA · b          if DOA ≥ 0                area of absence (paper: "DOA/size when
//!       = DOA / b          if DOA < 0                 DOA < 0", so big tensors that cannot
//!                                                     make it rank last, not first)
//! WDOA  = ∫_{E_o}^{S_i} (L(t) − L) dt                 load-weighted DOA (byte·ns; signed)
//! SWDOA = ∫_{E_o + lead}^{S_i − c_in} max(L(t) − L, 0) dt   (0 if DOA ≤ 0)
//! ```
//!
//! WDOA follows the authors' reference implementation (Apache SINGA `SwapGPU::SelectBlock`,
//! which adds `load − limit` over the ops in the gap); here it is weighted by time. The text
//! of SWDOA was not available to us: our SWDOA is the *shrunk, rectified* WDOA — only the
//! excess above the limit counts, and only while the tensor can actually be away (the gap
//! minus both copies). Each score is standardised over the candidates (z-score, 0 when all
//! are equal) and the priority is `a·z(AOA) + b·z(DOA) + c·z(WDOA) + d·z(SWDOA)`, weights
//! clamped to [−1, 1] (NaN → 0). Ties break by tensor id, then gap.
//!
//! # Selection and scheduling
//!
//! Candidates are taken in priority order while the estimated op-level load exceeds the limit
//! (a segment tree of `L_k` with range-add; a tensor counts as away during op k only if it is
//! away for all of `[S_k, E_k]`): first with each gap's ideal absence
//! `[E_o + lead, S_i − c_in]`, then the chosen set is scheduled (swap-outs right after their
//! last access or early, FIFO on the out stream; swap-ins as late as possible, backwards from the
//! latest need on the in stream, each issued at the last op launch before its start plus a
//! delay) and the load re-estimated with the scheduled absences; if it still exceeds the
//! limit, selection continues (at most [`AutoSwapOptions::rounds`] times). A gap whose
//! swap-in cannot be scheduled after its own swap-out is dropped. The final plan is simulated
//! once to set [`SwapPlan::claims_zero_overhead`].
//!
//! When that plan stalls or cannot keep the limit, a second plan trades stalls for memory
//! (`Gaps::TradeStalls`): after the same selection, the gaps still left out are taken with
//! the compute stream waiting for their copies (away from their swap-out until the op after
//! the gap's last op over the limit), and short gaps are kept instead of dropped. The plan
//! with the lower simulated overhead is returned (one that keeps the limit first, then fewer
//! swapped bytes), so a limit below what hidden copies reach is kept at a measured cost
//! instead of exceeded.
//!
//! *Stretched plans* compete in the same way. Beyond what hidden copies reach, the compute
//! stream must wait wherever a copy stream is saturated (the forward pass of an LSTM produces
//! 16.6 GB/s of activations against PCIe 3's 13.2 GB/s out). A plan that hides its copies on
//! a timeline where they are `f` = 1.1, 1.25, 1.5 or 2 times faster chooses the tensors such a
//! stretched run can free; its swap-ins are then re-issued for the real copy time (as late as
//! possible, serial, on the stall-free timeline, so they start early enough that each op
//! waits only for what the saturated streams impose), and the simulator with the real copy
//! model prices it: ops wait for swap-outs where the out stream lags. On the DTR logs this is
//! what reaches the reference's reductions at ≤ 15 % overhead (LSTM: 80.4 → 89.2 %).
//!
//! Cost: O(ops + accesses + C log C + C log ops) per round for C candidates, for each of up to
//! six plans (hide, stall trading, four stretched), each also simulated once, in [`plan_with`]
//! twice with units or early copy-outs (with and without them), four times with both.

use super::profile::Profile;
use super::sim::{SimOptions, SimResult, simulate_profile};
use super::{CopyModel, Swap, SwapPlan};
use crate::ops::{OpTrace, TensorId};

/// Weights of the four standardised scores, each in [−1, 1].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Weights {
    pub aoa: f64,
    pub doa: f64,
    pub wdoa: f64,
    pub swdoa: f64,
}

impl Weights {
    pub const AOA: Weights = Weights {
        aoa: 1.0,
        doa: 0.0,
        wdoa: 0.0,
        swdoa: 0.0,
    };
    pub const DOA: Weights = Weights {
        aoa: 0.0,
        doa: 1.0,
        wdoa: 0.0,
        swdoa: 0.0,
    };
    pub const WDOA: Weights = Weights {
        aoa: 0.0,
        doa: 0.0,
        wdoa: 1.0,
        swdoa: 0.0,
    };
    pub const SWDOA: Weights = Weights {
        aoa: 0.0,
        doa: 0.0,
        wdoa: 0.0,
        swdoa: 1.0,
    };

    /// `[a, b, c, d]` = (AOA, DOA, WDOA, SWDOA).
    pub fn from_array(w: [f64; 4]) -> Weights {
        Weights {
            aoa: w[0],
            doa: w[1],
            wdoa: w[2],
            swdoa: w[3],
        }
    }
    pub fn to_array(self) -> [f64; 4] {
        [self.aoa, self.doa, self.wdoa, self.swdoa]
    }
    fn sanitized(self) -> [f64; 4] {
        self.to_array()
            .map(|w| if w.is_nan() { 0.0 } else { w.clamp(-1.0, 1.0) })
    }
}

impl Default for Weights {
    /// Equal weight on every score.
    fn default() -> Self {
        Weights {
            aoa: 1.0,
            doa: 1.0,
            wdoa: 1.0,
            swdoa: 1.0,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AutoSwapOptions {
    /// Smallest candidate (bytes): a tensor at least this large is a candidate by itself;
    /// smaller ones only as members of a swap unit of at least this many bytes (with `units`).
    pub min_bytes: u64,
    /// Schedule-and-reselect rounds.
    pub rounds: usize,
    /// Group tensors below `min_bytes` into swap units (see the module documentation).
    pub units: bool,
    /// Copy a tensor out right after its last write before the gap, overlapping the reads
    /// that follow it, instead of after its last access (see the module documentation).
    pub early_out: bool,
    /// [`super::combined::bo_plan`] only: when none of its runs finds a plan of zero overhead
    /// although the copy bound allows one, make them again with a larger budget, then search
    /// from their plans (`super::augment`; costly where no such plan exists in AutoSwap's
    /// reach: up to twelve times the first run, and the search's budget).
    pub retry_zero_overhead: bool,
}

impl Default for AutoSwapOptions {
    fn default() -> Self {
        AutoSwapOptions {
            min_bytes: 1 << 20,
            rounds: 8,
            units: true,
            early_out: true,
            retry_zero_overhead: true,
        }
    }
}

/// One tensor of a candidate, with its own idle gap (accesses `out_after` and `in_before`, as
/// in [`Candidate`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Member {
    pub tensor: TensorId,
    pub bytes: u64,
    pub out_after: usize,
    pub in_before: usize,
}

/// One idle gap of a tensor, or of a swap unit, with its raw scores.
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    /// The tensor (a unit: its first member).
    pub tensor: TensorId,
    /// The tensor's bytes (a unit: its members' sum).
    pub bytes: u64,
    /// The last access before the gap (a unit: the latest of its members').
    pub out_after: usize,
    /// The op after which the copy-out starts: `out_after`, or with
    /// [`AutoSwapOptions::early_out`] the tensor's last write at or before it (a single
    /// tensor's returning or final gap only).
    pub out_from: usize,
    /// The next access; for a final gap (`returns = false`), the op after the tensor is freed
    /// (a unit: the earliest of its members').
    pub in_before: usize,
    pub wraps: bool,
    /// False for a final gap: the tensor is not accessed again before it is freed, so it
    /// leaves the device for good (no swap-in, [`Swap::in_before`] = None).
    pub returns: bool,
    pub gap_ns: f64,
    pub doa: f64,
    pub aoa: f64,
    pub wdoa: f64,
    pub swdoa: f64,
    /// The tensors copied: the tensor itself, or the members of a swap unit.
    pub members: Vec<Member>,
}

impl Candidate {
    /// Swap-out time: one copy per member, back to back on the out stream.
    pub fn out_ns(&self, copy: CopyModel) -> f64 {
        self.members.iter().map(|m| copy.out_ns(m.bytes)).sum()
    }
    /// Swap-in time (0 for a final gap): one copy per member, back to back on the in stream.
    pub fn in_ns(&self, copy: CopyModel) -> f64 {
        if !self.returns {
            return 0.0;
        }
        self.members.iter().map(|m| copy.in_ns(m.bytes)).sum()
    }
}

/// The candidates of `trace` under `limit`, with raw scores: the tensors of at least
/// `min_bytes` in (tensor, gap) order, then the swap units.
pub fn candidates(
    trace: &OpTrace,
    limit: u64,
    copy: CopyModel,
    opts: &AutoSwapOptions,
) -> Vec<Candidate> {
    let p = Profile::new(trace);
    candidates_profile(&p, limit, copy, opts)
}

struct Integrals {
    /// W[k] = Σ_{j<k} (L_j − L) d_j
    signed: Vec<f64>,
    /// X[k] = Σ_{j<k} max(L_j − L, 0) d_j
    excess: Vec<f64>,
}

impl Integrals {
    fn new(p: &Profile, limit: u64) -> Integrals {
        let mut signed = Vec::with_capacity(p.n + 1);
        let mut excess = Vec::with_capacity(p.n + 1);
        let (mut w, mut x) = (0.0, 0.0);
        signed.push(0.0);
        excess.push(0.0);
        for k in 0..p.n {
            let e = p.load[k] as f64 - limit as f64;
            w += e * p.dur[k];
            x += e.max(0.0) * p.dur[k];
            signed.push(w);
            excess.push(x);
        }
        Integrals { signed, excess }
    }
    /// ∫_0^t max(L(t) − L, 0) for t in [0, T0].
    fn excess_to(&self, p: &Profile, limit: u64, t: f64) -> f64 {
        let t = t.clamp(0.0, p.t0());
        match p.op_at(t) {
            None => 0.0,
            Some(k) => {
                let e = (p.load[k] as f64 - limit as f64).max(0.0);
                self.excess[k] + e * (t - p.start[k]).min(p.dur[k])
            }
        }
    }
    /// Excess integral on the unrolled axis [0, 2 T0).
    fn excess_unrolled(&self, p: &Profile, limit: u64, t: f64) -> f64 {
        let t0 = p.t0();
        if t <= t0 {
            self.excess_to(p, limit, t)
        } else {
            self.excess[p.n] + self.excess_to(p, limit, t - t0)
        }
    }
}

pub(crate) fn candidates_profile(
    p: &Profile,
    limit: u64,
    copy: CopyModel,
    opts: &AutoSwapOptions,
) -> Vec<Candidate> {
    let n = p.n;
    let mut out = Vec::new();
    if n == 0 {
        return out;
    }
    // over[k] = number of ops j < k with L_j > limit.
    let mut over = vec![0usize; n + 1];
    for k in 0..n {
        over[k + 1] = over[k] + usize::from(p.load[k] > limit);
    }
    if over[n] == 0 {
        return out;
    }
    let scoring = Scoring {
        p,
        ints: Integrals::new(p, limit),
        limit,
        copy,
    };
    let mut small: Vec<(Kind, Member)> = Vec::new();
    for t in 0..p.bytes.len() {
        let b = p.bytes[t];
        if b == 0 || b < opts.min_bytes && !opts.units {
            continue;
        }
        let acc = p.t_acc(t);
        let mut gaps: Vec<(usize, usize, Kind)> = acc
            .windows(2)
            .map(|w| (w[0] as usize, w[1] as usize, Kind::RETURNS))
            .filter(|&(o, i, _)| over[i] - over[o + 1] > 0)
            .collect();
        if let (Some(&first), Some(&last)) = (acc.first(), acc.last()) {
            let (o, i) = (last as usize, first as usize);
            let after_death = p.death[t] + 1;
            if p.cross[t] && over[n] - over[o + 1] + over[i] > 0 {
                gaps.push((o, i, Kind::WRAPS));
            } else if !p.cross[t] && after_death > o + 1 && over[after_death] - over[o + 1] > 0 {
                gaps.push((o, after_death, Kind::FINAL));
            }
        }
        for (o, i, kind) in gaps {
            let early = opts.early_out && !kind.wraps;
            let member = Member {
                tensor: t as TensorId,
                bytes: b,
                out_after: o,
                in_before: i,
            };
            if b >= opts.min_bytes {
                out.push(scoring.candidate(kind, vec![member], early));
            } else {
                small.push((kind, member));
            }
        }
    }
    for (kind, members) in units(&scoring, small, opts.min_bytes, &over) {
        out.push(scoring.candidate(kind, members, false));
    }
    out
}

/// Which kind of idle gap (see the candidates in the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Kind {
    wraps: bool,
    returns: bool,
}

impl Kind {
    const RETURNS: Kind = Kind {
        wraps: false,
        returns: true,
    };
    const WRAPS: Kind = Kind {
        wraps: true,
        returns: true,
    };
    const FINAL: Kind = Kind {
        wraps: false,
        returns: false,
    };
}

/// What scoring a candidate needs.
struct Scoring<'a> {
    p: &'a Profile,
    ints: Integrals,
    limit: u64,
    copy: CopyModel,
}

impl Scoring<'_> {
    /// `[E_o, S_i]` of a gap from `o` to `i` on the unrolled axis.
    fn window(&self, kind: Kind, o: usize, i: usize) -> (f64, f64) {
        let s_i = if kind.wraps {
            self.p.t0() + self.p.start[i]
        } else {
            self.p.start[i]
        };
        (self.p.end(o), s_i)
    }

    /// The candidate copying `members` (one tensor, or a unit whose common gap runs from the
    /// latest of their last accesses to the earliest of their next ones), with its scores;
    /// with `early`, a single tensor's copy-out starts after its last write.
    fn candidate(&self, kind: Kind, members: Vec<Member>, early: bool) -> Candidate {
        let (p, limit) = (self.p, self.limit);
        let n = p.n;
        let o = members.iter().map(|m| m.out_after).max().unwrap_or(0);
        let i = members.iter().map(|m| m.in_before).min().unwrap_or(0);
        let b = members
            .iter()
            .map(|m| m.bytes)
            .fold(0u64, u64::saturating_add);
        let out_from = match members.as_slice() {
            [m] if early => p.copy_from(m.tensor as usize, o),
            _ => o,
        };
        let mut c = Candidate {
            tensor: members.first().map_or(0, |m| m.tensor),
            bytes: b,
            out_after: o,
            out_from,
            in_before: i,
            wraps: kind.wraps,
            returns: kind.returns,
            gap_ns: 0.0,
            doa: 0.0,
            aoa: 0.0,
            wdoa: 0.0,
            swdoa: 0.0,
            members,
        };
        let c_in = c.in_ns(self.copy);
        let (e_o, s_i) = self.window(kind, o, i);
        let ints = &self.ints;
        c.gap_ns = s_i - e_o;
        let lead = copy_lead(p, &c, self.copy);
        c.doa = c.gap_ns - lead - c_in;
        c.aoa = if c.doa >= 0.0 {
            c.doa * b as f64
        } else {
            c.doa / b as f64
        };
        c.wdoa = if kind.wraps {
            ints.signed[n] - ints.signed[o + 1] + ints.signed[i]
        } else {
            ints.signed[i] - ints.signed[o + 1]
        };
        c.swdoa = if c.doa > 0.0 {
            (ints.excess_unrolled(p, limit, s_i - c_in)
                - ints.excess_unrolled(p, limit, e_o + lead))
            .max(0.0)
        } else {
            0.0
        };
        c
    }
}

/// A swap unit being filled: its members and their common gap `(o, i)`.
struct OpenUnit {
    members: Vec<Member>,
    bytes: u64,
    o: usize,
    i: usize,
    /// The longest member gap, ns.
    longest_ns: f64,
}

/// Share of every member's idle gap a unit's common gap keeps (see the module documentation):
/// a member loses at most a quarter of its time away. Not critical: 0.5, 0.75, 0.9 and 0.97
/// give the same zero-overhead reduction on the generated Tree-LSTM log (41.0 % of the peak
/// with units alone).
const UNIT_KEEP: f64 = 0.75;

/// Groups the gaps `small` of tensors below `min_bytes` into swap units of at least
/// `min_bytes` (see the module documentation); `over` as in [`candidates_profile`]. A unit
/// whose common gap spans no op over the limit, or that stays below `min_bytes`, is left out
/// (as a small tensor is without units). O(G log G + G·U) for G gaps and U units open at
/// once (those whose common gap can still keep [`UNIT_KEEP`] of a later gap).
fn units(
    scoring: &Scoring<'_>,
    mut small: Vec<(Kind, Member)>,
    min_bytes: u64,
    over: &[usize],
) -> Vec<(Kind, Vec<Member>)> {
    small.sort_unstable_by_key(|(kind, m)| (*kind, m.out_after, m.in_before, m.tensor));
    let n = scoring.p.n;
    let spans_over = |kind: Kind, o: usize, i: usize| {
        if kind.wraps {
            over[n] - over[o + 1] + over[i] > 0
        } else {
            o < i && over[i] - over[o + 1] > 0
        }
    };
    let mut done = Vec::new();
    for group in small.chunk_by(|a, b| a.0 == b.0) {
        let kind = group[0].0;
        let mut open: Vec<OpenUnit> = Vec::new();
        let close = |u: OpenUnit, done: &mut Vec<(Kind, Vec<Member>)>| {
            if u.bytes >= min_bytes && spans_over(kind, u.o, u.i) {
                done.push((kind, u.members));
            }
        };
        for &(_, m) in group {
            let (e_o, s_i) = scoring.window(kind, m.out_after, m.in_before);
            let gap = s_i - e_o;
            // Units that can no longer keep their share once their gap starts at `e_o`.
            let mut k = 0;
            while k < open.len() {
                let u = &open[k];
                let (_, u_s) = scoring.window(kind, u.o, u.i);
                if u_s - e_o < UNIT_KEEP * u.longest_ns {
                    close(open.swap_remove(k), &mut done);
                } else {
                    k += 1;
                }
            }
            let fits = open.iter().position(|u| {
                let (o, i) = (u.o.max(m.out_after), u.i.min(m.in_before));
                let (a, b) = scoring.window(kind, o, i);
                b - a >= UNIT_KEEP * u.longest_ns.max(gap)
            });
            match fits {
                Some(k) => {
                    let u = &mut open[k];
                    u.members.push(m);
                    u.bytes = u.bytes.saturating_add(m.bytes);
                    u.o = u.o.max(m.out_after);
                    u.i = u.i.min(m.in_before);
                    u.longest_ns = u.longest_ns.max(gap);
                    if u.bytes >= min_bytes {
                        close(open.swap_remove(k), &mut done);
                    }
                }
                None => open.push(OpenUnit {
                    members: vec![m],
                    bytes: m.bytes,
                    o: m.out_after,
                    i: m.in_before,
                    longest_ns: gap,
                }),
            }
        }
        for u in open {
            close(u, &mut done);
        }
    }
    done
}

fn zscores(xs: impl Iterator<Item = f64> + Clone) -> Vec<f64> {
    let v: Vec<f64> = xs.map(|x| if x.is_finite() { x } else { 0.0 }).collect();
    if v.is_empty() {
        return v;
    }
    let m = v.iter().sum::<f64>() / v.len() as f64;
    let var = v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / v.len() as f64;
    let sd = var.sqrt();
    if !(sd > 0.0 && sd.is_finite()) {
        return vec![0.0; v.len()];
    }
    v.iter().map(|x| (x - m) / sd).collect()
}

/// Standardised aggregate priority of each candidate (same order).
pub fn priorities(cands: &[Candidate], weights: Weights) -> Vec<f64> {
    let w = weights.sanitized();
    let z = [
        zscores(cands.iter().map(|c| c.aoa)),
        zscores(cands.iter().map(|c| c.doa)),
        zscores(cands.iter().map(|c| c.wdoa)),
        zscores(cands.iter().map(|c| c.swdoa)),
    ];
    (0..cands.len())
        .map(|j| (0..4).map(|s| w[s] * z[s][j]).sum())
        .collect()
}

/// Segment tree over ops: range add, range max.
pub(crate) struct MaxTree {
    n: usize,
    mx: Vec<i128>,
    lz: Vec<i128>,
}

impl MaxTree {
    pub fn new(vals: &[u64]) -> MaxTree {
        let n = vals.len().max(1);
        let mut t = MaxTree {
            n,
            mx: vec![i128::MIN / 4; 4 * n],
            lz: vec![0; 4 * n],
        };
        if !vals.is_empty() {
            t.build(1, 0, n - 1, vals);
        }
        t
    }
    fn build(&mut self, x: usize, l: usize, r: usize, v: &[u64]) {
        if l == r {
            self.mx[x] = v[l] as i128;
            return;
        }
        let m = (l + r) / 2;
        self.build(2 * x, l, m, v);
        self.build(2 * x + 1, m + 1, r, v);
        self.mx[x] = self.mx[2 * x].max(self.mx[2 * x + 1]);
    }
    /// Add `d` on ops `[a, b)`.
    pub fn add(&mut self, a: usize, b: usize, d: i128) {
        if a < b && b <= self.n {
            self.upd(1, 0, self.n - 1, a, b - 1, d);
        }
    }
    fn upd(&mut self, x: usize, l: usize, r: usize, a: usize, b: usize, d: i128) {
        if b < l || r < a {
            return;
        }
        if a <= l && r <= b {
            self.mx[x] += d;
            self.lz[x] += d;
            return;
        }
        let m = (l + r) / 2;
        self.upd(2 * x, l, m, a, b, d);
        self.upd(2 * x + 1, m + 1, r, a, b, d);
        self.mx[x] = self.mx[2 * x].max(self.mx[2 * x + 1]) + self.lz[x];
    }
    /// Max on ops `[a, b)` (i128::MIN/4 when empty).
    pub fn max(&self, a: usize, b: usize) -> i128 {
        if a >= b || b > self.n {
            return i128::MIN / 4;
        }
        self.qry(1, 0, self.n - 1, a, b - 1)
    }
    fn qry(&self, x: usize, l: usize, r: usize, a: usize, b: usize) -> i128 {
        if b < l || r < a {
            return i128::MIN / 4;
        }
        if a <= l && r <= b {
            return self.mx[x];
        }
        let m = (l + r) / 2;
        self.qry(2 * x, l, m, a, b)
            .max(self.qry(2 * x + 1, m + 1, r, a, b))
            + self.lz[x]
    }
    pub fn global(&self) -> i128 {
        self.mx[1]
    }
}

/// Ops entirely inside the time window `[a, b]` of the unrolled axis, restricted to the gap
/// `(o, i)` (wrapping gaps give up to two ranges).
pub(crate) fn away_ranges(
    p: &Profile,
    o: usize,
    i: usize,
    wraps: bool,
    a: f64,
    b: f64,
) -> [(usize, usize); 2] {
    let n = p.n;
    let t0 = p.t0();
    // First op with start ≥ x; number of ops with end ≤ y.
    let first_from = |x: f64| p.start[..n].partition_point(|&s| s < x);
    let ends_by = |y: f64| p.start[1..=n].partition_point(|&e| e <= y);
    if !wraps {
        let lo = first_from(a).max(o + 1);
        let hi = ends_by(b).min(i);
        return [(lo, hi.max(lo)), (0, 0)];
    }
    // Part in this iteration after o: [a, min(b, T0)]; part before i: [max(a − T0, 0), b − T0].
    let lo1 = first_from(a).max(o + 1);
    let hi1 = if b >= t0 { n } else { ends_by(b) };
    let r1 = (lo1, hi1.max(lo1));
    let lo2 = if a > t0 { first_from(a - t0) } else { 0 };
    let hi2 = if b >= t0 { ends_by(b - t0).min(i) } else { 0 };
    [r1, (lo2, hi2.max(lo2))]
}

/// AutoSwap with default options.
pub fn plan(trace: &OpTrace, limit: u64, weights: Weights, copy: CopyModel) -> SwapPlan {
    plan_with(trace, limit, weights, copy, &AutoSwapOptions::default())
}

/// Simulate `plan` (summary only): overhead, peak, swapped bytes, stalls.
pub fn evaluate(trace: &OpTrace, plan: &SwapPlan, limit: u64, copy: CopyModel) -> SimResult {
    super::sim::simulate(trace, plan, limit, copy, SimOptions::default())
}

/// AutoSwap with `opts`. With units or early copy-outs, the plan is also made without each
/// (and without both) and the best one kept (the first on a tie; see the module
/// documentation): neither then makes a plan worse at given weights.
pub fn plan_with(
    trace: &OpTrace,
    limit: u64,
    weights: Weights,
    copy: CopyModel,
    opts: &AutoSwapOptions,
) -> SwapPlan {
    let p = Profile::new(trace);
    let mut best = plan_profile(&p, limit, weights, copy, opts);
    let mut variants: Vec<AutoSwapOptions> = Vec::new();
    for (units, early_out) in [(false, opts.early_out), (opts.units, false), (false, false)] {
        let variant = AutoSwapOptions {
            units,
            early_out,
            ..*opts
        };
        if variant != *opts && !variants.contains(&variant) {
            variants.push(variant);
        }
    }
    for variant in &variants {
        let tried = plan_profile(&p, limit, weights, copy, variant);
        if better(&tried.1, &best.1) {
            best = tried;
        }
    }
    best.0
}

/// [`plan_with`] without the comparison: units and early copy-outs exactly as `opts` says.
pub(crate) fn plan_as_told(
    trace: &OpTrace,
    limit: u64,
    weights: Weights,
    copy: CopyModel,
    opts: &AutoSwapOptions,
) -> SwapPlan {
    plan_profile(&Profile::new(trace), limit, weights, copy, opts).0
}

/// Whether `a` is a better plan than `b`: one that keeps the limit, then less overhead, then
/// fewer swapped bytes.
fn better(a: &SimResult, b: &SimResult) -> bool {
    let key = |r: &SimResult| (r.over_limit, r.overhead, r.swapped_bytes);
    key(a).partial_cmp(&key(b)) == Some(std::cmp::Ordering::Less)
}

/// The hidden plan, or, when it stalls or cannot keep the limit, the best of it and the
/// stall-trading and stretched plans, with its simulation.
fn plan_profile(
    p: &Profile,
    limit: u64,
    weights: Weights,
    copy: CopyModel,
    opts: &AutoSwapOptions,
) -> (SwapPlan, SimResult) {
    let planned = |planning: CopyModel, gaps: Gaps| {
        let plan = select_and_schedule(p, limit, weights, planning, opts, gaps);
        let plan = if planning == copy {
            plan
        } else {
            reissue_swap_ins(p, plan, copy)
        };
        priced(p, plan, limit, copy)
    };
    let hidden = planned(copy, Gaps::Hide);
    if hidden.1.overhead == 0.0 && !hidden.1.over_limit {
        return hidden;
    }
    let mut best = hidden;
    let stretched = STRETCHES.map(|f| (copy.scaled_time(1.0 / f), Gaps::Hide));
    for (planning, gaps) in std::iter::once((copy, Gaps::TradeStalls)).chain(stretched) {
        let tried = planned(planning, gaps);
        if better(&tried.1, &best.1) {
            best = tried;
        }
    }
    best
}

/// The copy speed-ups the stretched plans are made for (see the module documentation).
const STRETCHES: [f64; 4] = [1.1, 1.25, 1.5, 2.0];

/// `plan` simulated under `copy`, with [`SwapPlan::claims_zero_overhead`] set from the result.
fn priced(p: &Profile, mut plan: SwapPlan, limit: u64, copy: CopyModel) -> (SwapPlan, SimResult) {
    let r = simulate_profile(p, &plan, limit, copy, SimOptions::default());
    plan.claims_zero_overhead = r.overhead == 0.0 && r.peak_bytes <= limit && r.on_demand == 0;
    (plan, r)
}

/// Re-issue the swap-ins of a plan made for faster copies so that, under `copy`, each would
/// still end in time on the stall-free timeline: serial, as late as possible backwards from
/// the latest need, each issued at the last op launch before its start plus a delay (as in
/// [`schedule`]). Where that start precedes the tensor's swap-out end, the executor's
/// swap-in simply waits for the swap-out.
fn reissue_swap_ins(p: &Profile, mut plan: SwapPlan, copy: CopyModel) -> SwapPlan {
    let mut returning: Vec<usize> = (0..plan.swaps.len())
        .filter(|&s| plan.swaps[s].in_before.is_some())
        .collect();
    returning.sort_by(|&x, &y| {
        let (a, b) = (&plan.swaps[x], &plan.swaps[y]);
        b.in_before.cmp(&a.in_before).then(b.tensor.cmp(&a.tensor))
    });
    let mut next_start = f64::INFINITY;
    for s in returning {
        let swap = &mut plan.swaps[s];
        let Some(need) = swap.in_before else {
            continue;
        };
        let bytes = p.bytes.get(swap.tensor as usize).copied().unwrap_or(0);
        let start = (p.start[need].min(next_start) - copy.in_ns(bytes)).max(0.0);
        next_start = start;
        let earliest = if swap.wraps() {
            0
        } else {
            swap.out_at.max(swap.out_after) + 1
        };
        (swap.in_issue, swap.in_delay_ns) = issue_at(p, start, earliest, need);
    }
    plan
}

/// How an executor that issues at op launches starts a swap-in at `start` (stall-free
/// timeline): at the launch of the op running then, kept within `[earliest, need]`, plus the
/// delay from that launch.
fn issue_at(p: &Profile, start: f64, earliest: usize, need: usize) -> (usize, f64) {
    let issue = p.op_at(start).unwrap_or(0).clamp(earliest, need);
    (issue, (start - p.start[issue]).max(0.0))
}

/// What to do with a gap too short to copy the tensor out and back without stalling.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Gaps {
    /// Drop it: the plan hides every copy behind compute (the paper's AutoSwap).
    Hide,
    /// Keep it: its swap-in is issued when the op that needs it is launched, and the compute
    /// stream waits for the copies. This trades stall time for memory when no stall-free plan
    /// keeps the limit.
    TradeStalls,
}

/// Where a gap kept under [`Gaps::TradeStalls`] issues its swap-in: at the launch of the op
/// after the gap's last op over the limit (`last_over[k]` = the last op before `k` whose
/// no-swap load exceeds the limit), so the tensor is away for every such op and back as early
/// as that allows. Returns the issuing op and the ops the tensor is away for.
fn stall_window(
    p: &Profile,
    c: &Candidate,
    last_over: &[Option<usize>],
) -> (usize, [(usize, usize); 2]) {
    let (o, i) = (c.out_after, c.in_before);
    match last_over[i] {
        Some(m) if !c.wraps && m > o => (m + 1, [(o + 1, m + 1), (0, 0)]),
        Some(m) if c.wraps => (m + 1, [(o + 1, p.n), (0, m + 1)]),
        _ if c.wraps => (0, [(o + 1, p.n), (0, 0)]),
        _ => (i, [(o + 1, i), (0, 0)]),
    }
}

/// One scheduled swap: its swap-out end and swap-in start, both on the iteration's axis
/// (a wrapping swap's swap-in serves the next iteration: it is away on `[out_end, T0 + in_start]`).
pub(super) struct Sched {
    pub(super) cand: usize,
    out_end: f64,
    in_start: f64,
    /// Kept under [`Gaps::TradeStalls`] although its copies cannot be hidden: the op whose
    /// launch issues its swap-in.
    stalled: Option<usize>,
}

/// Serial out stream forward (each right after its last access); serial in stream backward from
/// the latest need, as late as possible. The in stream is periodic: every swap-in is placed in
/// `[0, T0)` before the op that needs it. A gap whose swap-in would have to start before its
/// swap-out ends (for a wrapping gap: before the iteration starts) is dropped (kept, issued at
/// its [`stall_window`], under [`Gaps::TradeStalls`]), and the rest is
/// rescheduled without it (at most twice; dropping only moves the others' outs earlier).
pub(super) fn schedule(
    p: &Profile,
    cands: &[Candidate],
    chosen: &[usize],
    copy: CopyModel,
    gaps: Gaps,
    last_over: &[Option<usize>],
) -> Vec<Sched> {
    let t0 = p.t0();
    let mut keep: Vec<usize> = chosen.to_vec();
    let mut res: Vec<Sched> = Vec::new();
    for _ in 0..3 {
        let mut outs = keep.clone();
        outs.sort_by_key(|&c| (cands[c].out_from, cands[c].tensor));
        // `out_end`: when the tensor leaves (its copy and its last access both ended).
        let mut out_end = vec![0.0; cands.len()];
        let mut free = f64::NEG_INFINITY;
        for &c in &outs {
            let s = p.end(cands[c].out_from).max(free);
            free = s + cands[c].out_ns(copy);
            out_end[c] = free.max(p.end(cands[c].out_after));
        }
        let mut ins = keep.clone();
        ins.sort_by(|&x, &y| {
            let (a, b) = (&cands[x], &cands[y]);
            b.in_before.cmp(&a.in_before).then(b.tensor.cmp(&a.tensor))
        });
        let mut next_start = f64::INFINITY;
        res.clear();
        let mut dropped = false;
        for &c in &ins {
            let cd = &cands[c];
            if !cd.returns {
                // A final gap has no swap-in; it helps only if its swap-out ends before the
                // tensor is freed (else the free waits for the copy).
                if out_end[c] < p.start[cd.in_before] {
                    res.push(Sched {
                        cand: c,
                        out_end: out_end[c],
                        in_start: p.start[cd.in_before],
                        stalled: None,
                    });
                } else {
                    dropped = true;
                }
                continue;
            }
            let in_start = p.start[cd.in_before].min(next_start) - cd.in_ns(copy);
            let lower = if cd.wraps {
                (out_end[c] - t0).max(0.0)
            } else {
                out_end[c]
            };
            if in_start < lower {
                if gaps == Gaps::TradeStalls {
                    let (issue, _) = stall_window(p, cd, last_over);
                    res.push(Sched {
                        cand: c,
                        out_end: out_end[c],
                        in_start: p.start[issue],
                        stalled: Some(issue),
                    });
                } else {
                    dropped = true;
                }
                continue;
            }
            next_start = in_start;
            res.push(Sched {
                cand: c,
                out_end: out_end[c],
                in_start,
                stalled: None,
            });
        }
        if !dropped {
            break;
        }
        keep = res.iter().map(|s| s.cand).collect();
    }
    res
}

/// AutoSwap's selection and schedule for the copy model `copy` (the plan is not simulated).
fn select_and_schedule(
    p: &Profile,
    limit: u64,
    weights: Weights,
    copy: CopyModel,
    opts: &AutoSwapOptions,
    gaps: Gaps,
) -> SwapPlan {
    let cands = candidates_profile(p, limit, copy, opts);
    let sched = select(p, &cands, limit, weights, copy, opts, gaps);
    swaps_of(p, &cands, &sched)
}

/// `last_over[k]`: the last op before `k` whose no-swap load exceeds `limit` (see
/// [`stall_window`]).
pub(super) fn last_over_limit(p: &Profile, limit: u64) -> Vec<Option<usize>> {
    let mut last_over = Vec::with_capacity(p.n + 1);
    last_over.push(None);
    for k in 0..p.n {
        let prev = last_over[k];
        last_over.push(if p.load[k] > limit { Some(k) } else { prev });
    }
    last_over
}

/// AutoSwap's selection among `cands` in the order of their priorities under `weights`, and
/// its schedule.
fn select(
    p: &Profile,
    cands: &[Candidate],
    limit: u64,
    weights: Weights,
    copy: CopyModel,
    opts: &AutoSwapOptions,
    gaps: Gaps,
) -> Vec<Sched> {
    let last_over = &last_over_limit(p, limit);
    let pri = priorities(cands, weights);
    let mut order: Vec<usize> = (0..cands.len()).collect();
    order.sort_by(|&x, &y| {
        pri[y]
            .total_cmp(&pri[x])
            .then(cands[x].tensor.cmp(&cands[y].tensor))
            .then(cands[x].out_after.cmp(&cands[y].out_after))
    });
    let rounds = opts.rounds;
    let lim = limit as i128;
    let mut chosen: Vec<usize> = Vec::new();
    let mut pos = 0;
    let mut sched: Vec<Sched> = Vec::new();
    let mut tree = MaxTree::new(&p.load);
    let t0 = p.t0();
    // Under `TradeStalls`, a second pass over the order takes the gaps left out, each away for
    // its stall window, once the hidden copies alone cannot keep the limit.
    let mut stall_pass = false;
    let mut taken = vec![false; cands.len()];
    for _ in 0..rounds.max(1) {
        // Continue selecting with ideal absences on top of the current estimate.
        while p.n > 0 && tree.global() > lim {
            if pos == order.len() {
                if gaps == Gaps::Hide || stall_pass {
                    break;
                }
                stall_pass = true;
                pos = 0;
                continue;
            }
            let c = &cands[order[pos]];
            pos += 1;
            if taken[order[pos - 1]] {
                continue;
            }
            let (a, b) = ideal_absence(p, c, copy);
            let rs = if stall_pass && c.returns {
                stall_window(p, c, last_over).1
            } else {
                away_ranges(p, c.out_after, c.in_before, c.wraps, a, b)
            };
            if rs.iter().all(|&(x, y)| tree.max(x, y) <= lim) {
                continue;
            }
            for (x, y) in rs {
                tree.add(x, y, -(c.bytes as i128));
            }
            chosen.push(order[pos - 1]);
            taken[order[pos - 1]] = true;
        }
        sched = schedule(p, cands, &chosen, copy, gaps, last_over);
        chosen = sched.iter().map(|s| s.cand).collect();
        taken.fill(false);
        for &c in &chosen {
            taken[c] = true;
        }
        tree = MaxTree::new(&p.load);
        for s in &sched {
            let c = &cands[s.cand];
            let back = if c.wraps { s.in_start + t0 } else { s.in_start };
            let away = if s.stalled.is_some() {
                stall_window(p, c, last_over).1
            } else {
                away_ranges(p, c.out_after, c.in_before, c.wraps, s.out_end, back)
            };
            for (x, y) in away {
                tree.add(x, y, -(c.bytes as i128));
            }
        }
        let exhausted = pos >= order.len() && (gaps == Gaps::Hide || stall_pass);
        if p.n == 0 || tree.global() <= lim || exhausted {
            break;
        }
    }
    sched
}

/// The plan of the scheduled candidates `sched`.
pub(super) fn swaps_of(p: &Profile, cands: &[Candidate], sched: &[Sched]) -> SwapPlan {
    // One swap per member: a unit's members leave after its last member's access, back to
    // back, and are queued back together before its first member's next access.
    let mut swaps = Vec::new();
    for s in sched {
        let c = &cands[s.cand];
        let back = c.returns.then(|| {
            let earliest = if c.wraps { 0 } else { c.out_after + 1 };
            match s.stalled {
                Some(issue) => (issue, (s.in_start - p.start[issue]).max(0.0)),
                None => issue_at(p, s.in_start, earliest, c.in_before),
            }
        });
        swaps.extend(c.members.iter().map(|m| Swap {
            tensor: m.tensor,
            out_after: m.out_after,
            out_at: c.out_from,
            in_before: back.map(|_| m.in_before),
            in_issue: back.map_or(c.out_after, |(j, _)| j),
            in_delay_ns: back.map_or(0.0, |(_, delay)| delay),
        }));
    }
    copy_after_return(&mut swaps);
    SwapPlan {
        swaps,
        claims_zero_overhead: false,
    }
}

/// Whether some op only reads a tensor that an earlier op wrote: only then can an early
/// copy-out start before the last access ([`Profile::copy_from`]). Live traces have such reads
/// only where a copy reads its source (every kernel argument counts as written).
pub(crate) fn has_reads_after_writes(trace: &OpTrace) -> bool {
    let mut written = vec![false; trace.tensors.len()];
    for op in &trace.ops {
        let read_after_write =
            |t: &TensorId| !op.writes.contains(t) && written.get(*t as usize) == Some(&true);
        if op.reads.iter().any(read_after_write) {
            return true;
        }
        for &t in &op.writes {
            if let Some(w) = written.get_mut(t as usize) {
                *w = true;
            }
        }
    }
    false
}

/// An early copy-out copies the device's version, so it may not start before the same
/// tensor's previous swap (an earlier gap of it, also chosen) has brought it back: such an
/// `out_at` moves to that swap's `in_before` (still at or before its own `out_after`).
fn copy_after_return(swaps: &mut [Swap]) {
    let mut order: Vec<usize> = (0..swaps.len()).collect();
    order.sort_by_key(|&s| (swaps[s].tensor, swaps[s].out_after));
    for w in order.windows(2) {
        let (prev, cur) = (&swaps[w[0]], &swaps[w[1]]);
        if prev.tensor != cur.tensor || cur.out_at >= cur.out_after {
            continue;
        }
        if let Some(back) = prev.in_before.filter(|&i| cur.out_at < i) {
            swaps[w[1]].out_at = back.min(swaps[w[1]].out_after);
        }
    }
}

/// How long candidate `c`'s copy-out runs after its last access before the gap: all of it
/// (`c_out`), or for an early copy-out what the reads since `out_from` do not cover.
fn copy_lead(p: &Profile, c: &Candidate, copy: CopyModel) -> f64 {
    let overlap = p.end(c.out_after) - p.end(c.out_from);
    (c.out_ns(copy) - overlap).max(0.0)
}

/// When candidate `c`'s tensor can be away with no stall, on the iteration's axis (past `T0`
/// for a wrapping gap): from when it has left (its copy-out and its last access before the gap
/// both ended) to when its swap-in must start to be back for its next access.
pub(super) fn ideal_absence(p: &Profile, c: &Candidate, copy: CopyModel) -> (f64, f64) {
    let left = p.end(c.out_after) + copy_lead(p, c, copy);
    let next = if c.wraps {
        p.t0() + p.start[c.in_before]
    } else {
        p.start[c.in_before]
    };
    (left, next - c.in_ns(copy))
}

/// The most op steps the relaxation of [`every_gap_plan`] simulates (simulations × ops):
/// about a second on the generated ResNet-50.
const RELAX_SIMULATED_OPS: usize = 2_000_000;

/// The plan of last resort, for a limit where AutoSwap's selection cannot keep the limit: every
/// candidate gap swapped, out right after its last access and back when the op that needs it is
/// launched, so that the compute stream waits for each swap-in (on the simulator, and on a GPU).
/// Only what an op uses (and what has no gap spanning an op over the limit) is on the device
/// while it runs, so this keeps every limit at which the op's own tensors fit. None when even it
/// cannot.
///
/// With `relax`, its stalls are then cut, one swap at a time, while the limit is kept: each
/// swap-in, in the order of need, is issued earlier (to start two, one or half a copy time
/// ahead of its need on the stall-free timeline) where that lowers the simulated overhead,
/// and each swap is left out where that does not raise it, within [`RELAX_SIMULATED_OPS`].
/// Unrelaxed, every tensor is away whenever it is not used: the plan whose pool, with
/// swapped ranges lent ([`super::combined::combined_pool`]), fragments least.
pub fn every_gap_plan(
    trace: &OpTrace,
    limit: u64,
    copy: CopyModel,
    opts: &AutoSwapOptions,
    relax: bool,
) -> Option<(SwapPlan, SimResult)> {
    let p = Profile::new(trace);
    let opts = AutoSwapOptions {
        early_out: false,
        ..*opts
    };
    let cands = candidates_profile(&p, limit, copy, &opts);
    let mut swaps = Vec::new();
    for c in &cands {
        let issue = if c.returns { c.in_before } else { c.out_after };
        swaps.extend(c.members.iter().map(|m| Swap {
            tensor: m.tensor,
            out_after: m.out_after,
            out_at: c.out_after,
            in_before: c.returns.then_some(m.in_before),
            in_issue: issue,
            in_delay_ns: 0.0,
        }));
    }
    let plan = SwapPlan {
        swaps,
        claims_zero_overhead: false,
    };
    let (plan, result) = priced(&p, plan, limit, copy);
    if result.over_limit {
        return None;
    }
    Some(if relax {
        relaxed(&p, plan, result, limit, copy)
    } else {
        (plan, result)
    })
}

/// [`every_gap_plan`]'s relaxation of `plan` (simulated as `result`).
fn relaxed(
    p: &Profile,
    mut plan: SwapPlan,
    mut result: SimResult,
    limit: u64,
    copy: CopyModel,
) -> (SwapPlan, SimResult) {
    let mut budget = RELAX_SIMULATED_OPS / (p.n + plan.swaps.len()).max(1);
    let mut try_plan = |tried: SwapPlan, result: &SimResult, keep_equal: bool| {
        if budget == 0 {
            return None;
        }
        budget -= 1;
        let t = priced(p, tried, limit, copy);
        let better =
            t.1.overhead < result.overhead || keep_equal && t.1.overhead == result.overhead;
        (!t.1.over_limit && better).then_some(t)
    };
    let mut order: Vec<usize> = (0..plan.swaps.len())
        .filter(|&s| plan.swaps[s].in_before.is_some())
        .collect();
    order.sort_by_key(|&s| (plan.swaps[s].in_before, plan.swaps[s].tensor));
    for s in order {
        let swap = &plan.swaps[s];
        let Some(need) = swap.in_before else {
            continue;
        };
        let bytes = p.bytes.get(swap.tensor as usize).copied().unwrap_or(0);
        let earliest = if swap.wraps() { 0 } else { swap.out_after + 1 };
        for lead in [2.0, 1.0, 0.5] {
            let start = p.start[need] - lead * copy.in_ns(bytes);
            let (issue, delay) = issue_at(p, start, earliest, need);
            let mut tried = plan.clone();
            tried.swaps[s].in_issue = issue;
            tried.swaps[s].in_delay_ns = delay;
            if let Some(t) = try_plan(tried, &result, false) {
                (plan, result) = t;
                break;
            }
        }
    }
    let mut s = 0;
    while s < plan.swaps.len() {
        let mut tried = plan.clone();
        tried.swaps.remove(s);
        match try_plan(tried, &result, true) {
            Some(t) => (plan, result) = t,
            None => s += 1,
        }
    }
    (plan, result)
}
