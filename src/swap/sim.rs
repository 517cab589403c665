//! Event-driven timeline simulator: one compute stream, one swap-out stream and one swap-in
//! stream, each in order; memory accounted at every event.
//!
//! # Semantics
//!
//! * Op `k` is *launched* when op `k − 1` ends (time `R_k`); swap-ins whose `in_issue = k` are
//!   then queued on the swap-in stream with earliest start `R_k + in_delay_ns`.
//! * Op `k` starts at the first instant `≥ R_k` at which (1) every tensor it accesses is on the
//!   device (swap-in complete) — waiting here is *backward* stall — and (2) the tensors born at
//!   `k` fit: `load + Σ born_k ≤ limit` — waiting here is *forward* stall (the op waits for
//!   swap-outs to complete). It then allocates its born tensors and runs for `d_k`, from a
//!   handoff `h` ([`CopyModel::handoff_ns`]) later if it waited: its stream resumes after the
//!   copy stream's event.
//! * When op `k` ends, tensors dying after `k` are freed, then the swap-outs with `out_at = k`
//!   are queued: each starts at the previous swap-out's end, or `E_k + h` when the swap-out
//!   stream was idle by then (it waits for the compute stream's event), and releases the tensor's
//!   bytes when it completes (`+ c_out(b)`). An *early* swap-out (`out_at < out_after`) copies
//!   while the tensor stays on the device for its remaining reads; its bytes are released when
//!   both the copy and op `out_after` have ended (the later of the two), with no second copy.
//! * The swap-in at the head of its queue starts at the first instant at which the stream is
//!   free, its earliest time has come, the tensor's swap-out has completed, and
//!   `load + b ≤ limit` (else it is *delayed*, the paper's backward case); it reacquires `b` at
//!   that instant and completes `h + c_in(b)` later when the stream was idle (it resumes on
//!   another stream's event or the host's queueing), `c_in(b)` when it follows the previous
//!   swap-in.
//! * An op that touches a tensor on the host with no swap-in queued gets an on-demand swap-in
//!   (counted in [`SimResult::on_demand`]; a valid plan never needs one).
//! * If nothing is in flight and something still waits for memory, the limit cannot be met:
//!   the waiting op (else the head swap-in) proceeds over the limit ([`SimResult::over_limit`]).
//! * Steady state: a tensor swapped out across the iteration boundary starts the iteration on
//!   the host. Swap-outs still running when the last op ends spill into the next iteration; if
//!   any do, the iteration is simulated a second time with that spill carried in (the swap-out
//!   stream busy, those tensors' bytes held until their copy ends) and the second run is
//!   reported.
//!
//! Iteration time `T` = end of the last op; `overhead = T / T0 − 1` with `T0 = Σ d_k`.
//! Cost: O((ops + accesses + swaps) · log(events)); no per-time-step loops.

use super::profile::Profile;
use super::{CopyModel, Swap, SwapPlan};
use crate::ops::{OpTrace, TensorId};
use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};

/// What to record besides the summary.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimOptions {
    /// Record the load curve and per-stream events (for drawing).
    pub record: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    Compute,
    SwapOut,
    SwapIn,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum What {
    Op(usize),
    /// Swap-out of a tensor (index of the swap in the plan).
    Out {
        tensor: TensorId,
        swap: usize,
    },
    /// Planned swap-in.
    In {
        tensor: TensorId,
        swap: usize,
    },
    /// Swap-in the plan did not provide.
    OnDemandIn {
        tensor: TensorId,
    },
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StreamEvent {
    pub stream: Stream,
    pub start_ns: f64,
    pub end_ns: f64,
    pub what: What,
}

/// The outcome of simulating one (steady-state) iteration.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SimResult {
    /// Iteration time with the plan (end of the last op).
    pub time_ns: f64,
    /// Iteration time without swapping, `T0 = Σ d_k`.
    pub base_time_ns: f64,
    /// `time_ns / base_time_ns − 1` (0 for an empty or zero-time trace).
    pub overhead: f64,
    pub peak_bytes: u64,
    pub limit: u64,
    /// The limit could not be kept: something was allocated over it.
    pub over_limit: bool,
    /// Total time ops waited after their launch (forward + backward).
    pub stall_ns: f64,
    /// Time ops waited for memory (swap-outs to complete).
    pub stall_forward_ns: f64,
    /// Time ops waited for their tensors (swap-ins to complete).
    pub stall_backward_ns: f64,
    /// Swaps whose copy-out ran, and their bytes (each copied out and back).
    pub swaps: usize,
    pub swapped_bytes: u64,
    /// Swap-ins the plan did not provide (0 for a valid plan).
    pub on_demand: usize,
    /// `(time, load)` after every change (only with [`SimOptions::record`]).
    pub load_curve: Vec<(f64, u64)>,
    /// Every op and copy (only with [`SimOptions::record`]).
    pub events: Vec<StreamEvent>,
}

/// Simulate `plan` on `trace` under `limit` bytes.
pub fn simulate(
    trace: &OpTrace,
    plan: &SwapPlan,
    limit: u64,
    copy: CopyModel,
    opts: SimOptions,
) -> SimResult {
    let p = Profile::new(trace);
    simulate_profile(&p, plan, limit, copy, opts)
}

pub(crate) fn simulate_profile(
    p: &Profile,
    plan: &SwapPlan,
    limit: u64,
    copy: CopyModel,
    opts: SimOptions,
) -> SimResult {
    let first = Machine::new(p, &plan.swaps, limit, copy, opts.record, None).run();
    if first.spill.is_empty() {
        return first.result;
    }
    let carry = Carry {
        out_free: first.out_spill,
        outs: first.spill,
    };
    Machine::new(p, &plan.swaps, limit, copy, opts.record, Some(&carry))
        .run()
        .result
}

struct Carry {
    out_free: f64,
    /// (swap index, release time relative to the iteration start)
    outs: Vec<(usize, f64)>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum St {
    Device,
    SwappingOut,
    Host,
    SwappingIn,
}

#[derive(Clone, Copy, Debug)]
enum Ev {
    OpEnd(usize),
    OutEnd(usize),
    InEnd(u32),
    Wake,
}

struct Timed {
    t: f64,
    seq: u64,
    ev: Ev,
}
impl PartialEq for Timed {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Timed {}
impl PartialOrd for Timed {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Timed {
    // Min-heap on (time, sequence).
    fn cmp(&self, o: &Self) -> Ordering {
        o.t.total_cmp(&self.t).then(o.seq.cmp(&self.seq))
    }
}

#[derive(Clone, Copy)]
enum InJob {
    Planned { swap: usize, earliest: f64 },
    OnDemand(u32),
}

struct Run {
    result: SimResult,
    out_spill: f64,
    spill: Vec<(usize, f64)>,
}

struct Machine<'a> {
    p: &'a Profile,
    swaps: &'a [Swap],
    limit: u64,
    copy: CopyModel,
    record: bool,
    now: f64,
    seq: u64,
    heap: BinaryHeap<Timed>,
    load: u64,
    peak: u64,
    over: bool,
    held: Vec<bool>,
    dead: Vec<bool>,
    state: Vec<St>,
    in_pending: Vec<bool>,
    next_op: usize,
    op_running: bool,
    ready_at: f64,
    resident_at: Option<f64>,
    compute_end: f64,
    stall_fwd: f64,
    stall_bwd: f64,
    out_free: f64,
    out_end: Vec<f64>,
    out_by_op: Vec<Vec<usize>>,
    /// Early swap-outs by their `out_after`: the op whose end lets the tensor leave.
    leave_by_op: Vec<Vec<usize>>,
    in_by_op: Vec<Vec<usize>>,
    in_queue: VecDeque<InJob>,
    in_busy: bool,
    in_start: f64,
    /// End of the last swap-in: the swap-in stream is idle after it.
    in_free: f64,
    in_job: Option<InJob>,
    wake_at: f64,
    swaps_done: usize,
    swapped_bytes: u64,
    on_demand: usize,
    curve: Vec<(f64, u64)>,
    events: Vec<StreamEvent>,
}

impl<'a> Machine<'a> {
    fn new(
        p: &'a Profile,
        swaps: &'a [Swap],
        limit: u64,
        copy: CopyModel,
        record: bool,
        carry: Option<&Carry>,
    ) -> Machine<'a> {
        let nt = p.bytes.len();
        let n = p.n;
        let mut out_by_op = vec![Vec::new(); n];
        let mut leave_by_op = vec![Vec::new(); n];
        let mut in_by_op = vec![Vec::new(); n];
        let mut state = vec![St::Device; nt];
        for (i, s) in swaps.iter().enumerate() {
            let t = s.tensor as usize;
            if t >= nt || s.out_at >= n || s.in_before.is_some() && s.in_issue >= n {
                continue;
            }
            out_by_op[s.out_at].push(i);
            if s.out_at < s.out_after && s.out_after < n {
                leave_by_op[s.out_after].push(i);
            }
            if s.in_before.is_some() {
                in_by_op[s.in_issue].push(i);
            }
            if s.wraps() && p.cross[t] {
                state[t] = St::Host;
            }
        }
        for v in &mut in_by_op {
            v.sort_by(|&a, &b| {
                let (x, y) = (&swaps[a], &swaps[b]);
                x.in_delay_ns
                    .total_cmp(&y.in_delay_ns)
                    .then(x.in_before.cmp(&y.in_before))
                    .then(a.cmp(&b))
            });
        }
        let mut held = vec![false; nt];
        let mut load = 0u64;
        for t in 0..nt {
            if p.resident[t] && p.birth[t].is_some() && state[t] == St::Device {
                held[t] = true;
                load = load.saturating_add(p.bytes[t]);
            }
        }
        let mut m = Machine {
            p,
            swaps,
            limit,
            copy,
            record,
            now: 0.0,
            seq: 0,
            heap: BinaryHeap::new(),
            load,
            peak: load,
            over: false,
            held,
            dead: vec![false; nt],
            state,
            in_pending: vec![false; nt],
            next_op: 0,
            op_running: false,
            ready_at: 0.0,
            resident_at: None,
            compute_end: 0.0,
            stall_fwd: 0.0,
            stall_bwd: 0.0,
            out_free: 0.0,
            out_end: vec![f64::NAN; swaps.len()],
            out_by_op,
            leave_by_op,
            in_by_op,
            in_queue: VecDeque::new(),
            in_busy: false,
            in_start: 0.0,
            in_free: 0.0,
            in_job: None,
            wake_at: f64::NAN,
            swaps_done: 0,
            swapped_bytes: 0,
            on_demand: 0,
            curve: Vec::new(),
            events: Vec::new(),
        };
        if let Some(c) = carry {
            m.out_free = c.out_free;
            for &(s, rel) in &c.outs {
                let t = m.swaps[s].tensor as usize;
                if m.state[t] == St::Host {
                    m.state[t] = St::SwappingOut;
                    m.held[t] = true;
                    m.load = m.load.saturating_add(p.bytes[t]);
                    m.push(rel, Ev::OutEnd(s));
                }
            }
            m.peak = m.load;
        }
        if m.over_check(0) {
            m.over = true;
        }
        m.mark();
        if n > 0 {
            m.launch(0);
        }
        m
    }

    fn over_check(&self, extra: u64) -> bool {
        self.load.saturating_add(extra) > self.limit
    }

    fn push(&mut self, t: f64, ev: Ev) {
        self.seq += 1;
        self.heap.push(Timed {
            t,
            seq: self.seq,
            ev,
        });
    }

    fn mark(&mut self) {
        self.peak = self.peak.max(self.load);
        if self.record {
            self.curve.push((self.now, self.load));
        }
    }

    fn event(&mut self, stream: Stream, start_ns: f64, end_ns: f64, what: What) {
        if self.record {
            self.events.push(StreamEvent {
                stream,
                start_ns,
                end_ns,
                what,
            });
        }
    }

    /// Op `k` becomes the next op: queue its swap-ins.
    fn launch(&mut self, k: usize) {
        self.next_op = k;
        self.ready_at = self.now;
        self.resident_at = None;
        for idx in 0..self.in_by_op[k].len() {
            let s = self.in_by_op[k][idx];
            let t = self.swaps[s].tensor as usize;
            if self.in_pending[t] {
                continue;
            }
            self.in_pending[t] = true;
            let earliest = self.now + super::profile::sane_ns(self.swaps[s].in_delay_ns);
            self.in_queue
                .push_back(InJob::Planned { swap: s, earliest });
        }
    }

    fn run(mut self) -> Run {
        loop {
            self.progress(false);
            match self.heap.pop() {
                Some(Timed { t, ev, .. }) => {
                    self.now = self.now.max(t);
                    self.handle(ev);
                }
                None => {
                    let waiting = self.next_op < self.p.n || !self.in_queue.is_empty();
                    if !waiting || !self.progress(true) {
                        break;
                    }
                }
            }
        }
        let t0 = self.p.t0();
        let time = self.compute_end;
        let overhead = if t0 > 0.0 {
            (time / t0 - 1.0).max(0.0)
        } else {
            0.0
        };
        let mut spill = Vec::new();
        for (s, &e) in self.out_end.iter().enumerate() {
            if e > time && self.swaps[s].wraps() {
                spill.push((s, e - time));
            }
        }
        let out_spill = (self.out_free - time).max(0.0);
        Run {
            result: SimResult {
                time_ns: time,
                base_time_ns: t0,
                overhead,
                peak_bytes: self.peak,
                limit: self.limit,
                over_limit: self.over,
                stall_ns: self.stall_fwd + self.stall_bwd,
                stall_forward_ns: self.stall_fwd,
                stall_backward_ns: self.stall_bwd,
                swaps: self.swaps_done,
                swapped_bytes: self.swapped_bytes,
                on_demand: self.on_demand,
                load_curve: self.curve,
                events: self.events,
            },
            out_spill,
            spill,
        }
    }

    /// Start whatever can start now; with `force`, start one blocked thing over the limit.
    fn progress(&mut self, force: bool) -> bool {
        let mut any = false;
        if force {
            if self.try_op(true) || self.try_in(true) {
                return true;
            }
            return false;
        }
        loop {
            let a = self.try_op(false);
            let b = self.try_in(false);
            if !(a || b) {
                return any;
            }
            any = true;
        }
    }

    fn try_op(&mut self, force: bool) -> bool {
        if self.op_running || self.next_op >= self.p.n {
            return false;
        }
        let k = self.next_op;
        let p = self.p;
        let mut wait = false;
        let mut queued = false;
        for &t in p.op_acc(k) {
            let t = t as usize;
            match self.state[t] {
                St::Device => {}
                St::SwappingIn | St::SwappingOut => wait = true,
                St::Host => {
                    if self.dead[t] {
                        continue;
                    }
                    if !self.in_pending[t] {
                        self.in_pending[t] = true;
                        self.on_demand += 1;
                        self.in_queue.push_back(InJob::OnDemand(t as u32));
                        queued = true;
                    }
                    wait = true;
                }
            }
        }
        if wait {
            return queued;
        }
        let resident_at = *self.resident_at.get_or_insert(self.now);
        let born: u64 = p
            .born(k)
            .iter()
            .map(|&t| p.bytes[t as usize])
            .fold(0, u64::saturating_add);
        if self.over_check(born) {
            if !force {
                return false;
            }
            self.over = true;
        }
        // Waiting means resuming on another stream's event.
        let start = if self.now > self.ready_at {
            self.now + self.copy.handoff()
        } else {
            self.now
        };
        self.stall_bwd += resident_at - self.ready_at;
        self.stall_fwd += self.now - resident_at;
        if self.now > resident_at {
            self.stall_fwd += start - self.now;
        } else {
            self.stall_bwd += start - self.now;
        }
        for &t in p.born(k) {
            let t = t as usize;
            if !self.held[t] && !self.dead[t] {
                self.held[t] = true;
                self.load = self.load.saturating_add(p.bytes[t]);
            }
        }
        self.mark();
        self.op_running = true;
        let end = start + p.dur[k];
        self.event(Stream::Compute, start, end, What::Op(k));
        self.push(end, Ev::OpEnd(k));
        true
    }

    fn try_in(&mut self, force: bool) -> bool {
        if self.in_busy {
            return false;
        }
        let Some(&job) = self.in_queue.front() else {
            return false;
        };
        let (t, earliest) = match job {
            InJob::Planned { swap, earliest } => (self.swaps[swap].tensor as usize, earliest),
            InJob::OnDemand(t) => (t as usize, self.now),
        };
        match self.state[t] {
            St::SwappingOut => return false,
            St::Device | St::SwappingIn => {
                // Nothing to bring back (the swap-out never ran).
                self.in_queue.pop_front();
                self.in_pending[t] = false;
                return true;
            }
            St::Host => {}
        }
        if self.dead[t] {
            self.in_queue.pop_front();
            self.in_pending[t] = false;
            return true;
        }
        if self.now < earliest {
            if self.wake_at != earliest {
                self.wake_at = earliest;
                self.push(earliest, Ev::Wake);
            }
            return false;
        }
        let b = self.p.bytes[t];
        if self.over_check(b) {
            if !force {
                return false;
            }
            self.over = true;
        }
        self.in_queue.pop_front();
        self.state[t] = St::SwappingIn;
        self.held[t] = true;
        self.load = self.load.saturating_add(b);
        self.mark();
        self.in_busy = true;
        self.in_start = if self.now > self.in_free {
            self.now + self.copy.handoff()
        } else {
            self.now
        };
        self.in_job = Some(job);
        self.push(self.in_start + self.copy.in_ns(b), Ev::InEnd(t as u32));
        true
    }

    fn handle(&mut self, ev: Ev) {
        let p = self.p;
        match ev {
            Ev::Wake => {}
            Ev::OpEnd(k) => {
                self.op_running = false;
                self.compute_end = self.now;
                for &t in p.dies(k) {
                    let t = t as usize;
                    if self.held[t] && self.state[t] == St::Device {
                        self.held[t] = false;
                        self.load = self.load.saturating_sub(p.bytes[t]);
                    }
                    self.dead[t] = true;
                }
                // Early swap-outs whose last read this was: the tensor leaves now if its copy
                // is done (else when the copy ends).
                for idx in 0..self.leave_by_op[k].len() {
                    let s = self.leave_by_op[k][idx];
                    let t = self.swaps[s].tensor as usize;
                    if self.state[t] != St::Device || self.out_end[s].is_nan() {
                        continue;
                    }
                    if self.out_end[s] <= self.now {
                        self.state[t] = St::Host;
                        if self.held[t] {
                            self.held[t] = false;
                            self.load = self.load.saturating_sub(p.bytes[t]);
                        }
                    } else {
                        self.state[t] = St::SwappingOut;
                    }
                }
                self.mark();
                for idx in 0..self.out_by_op[k].len() {
                    let s = self.out_by_op[k][idx];
                    let t = self.swaps[s].tensor as usize;
                    if self.state[t] != St::Device || !self.held[t] || self.dead[t] {
                        continue;
                    }
                    let early = self.swaps[s].out_at < self.swaps[s].out_after;
                    let b = p.bytes[t];
                    let start = if self.out_free > self.now {
                        self.out_free
                    } else {
                        self.now + self.copy.handoff()
                    };
                    let end = start + self.copy.out_ns(b);
                    self.out_free = end;
                    self.out_end[s] = end;
                    if !early {
                        self.state[t] = St::SwappingOut;
                    }
                    self.swaps_done += 1;
                    self.swapped_bytes = self.swapped_bytes.saturating_add(b);
                    self.event(
                        Stream::SwapOut,
                        start,
                        end,
                        What::Out {
                            tensor: t as u32,
                            swap: s,
                        },
                    );
                    self.push(end, Ev::OutEnd(s));
                }
                if k + 1 < p.n {
                    self.launch(k + 1);
                } else {
                    self.next_op = p.n;
                }
            }
            Ev::OutEnd(s) => {
                let t = self.swaps[s].tensor as usize;
                if self.state[t] == St::SwappingOut {
                    self.state[t] = St::Host;
                    if self.held[t] {
                        self.held[t] = false;
                        self.load = self.load.saturating_sub(p.bytes[t]);
                    }
                    self.mark();
                }
            }
            Ev::InEnd(t) => {
                let tu = t as usize;
                self.state[tu] = St::Device;
                self.in_pending[tu] = false;
                self.in_busy = false;
                self.in_free = self.now;
                let what = match self.in_job.take() {
                    Some(InJob::Planned { swap, .. }) => What::In { tensor: t, swap },
                    _ => What::OnDemandIn { tensor: t },
                };
                self.event(Stream::SwapIn, self.in_start, self.now, what);
                if self.dead[tu] && self.held[tu] {
                    self.held[tu] = false;
                    self.load = self.load.saturating_sub(p.bytes[tu]);
                    self.mark();
                }
            }
        }
    }
}
