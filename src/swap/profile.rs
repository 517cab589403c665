//! What every part of `swap` needs to know about an [`OpTrace`] without swapping, computed once
//! in O(ops + accesses + tensors): op start times, the no-swap load per op, and each tensor's
//! life and sorted accesses. Malformed traces are sanitised here (out-of-range ids ignored,
//! non-finite or negative durations read as 0, lifetimes clamped to the trace), so nothing
//! downstream can panic on any `OpTrace`.

use crate::ops::OpTrace;

/// Op-level facts of one iteration without swapping.
#[derive(Clone, Debug)]
pub(crate) struct Profile {
    pub n: usize,
    /// `start[k]` = S_k = Σ_{j<k} d_j; `start[n]` = T0 (no-swap iteration time).
    pub start: Vec<f64>,
    pub dur: Vec<f64>,
    pub bytes: Vec<u64>,
    /// Tensor counted in memory before op 0 (resident).
    pub resident: Vec<bool>,
    /// Alive across the iteration boundary: resident and never freed.
    pub cross: Vec<bool>,
    /// First op at which a non-resident tensor is live (None: never live).
    pub birth: Vec<Option<usize>>,
    /// Last op at which the tensor is live (n − 1 when never freed).
    pub death: Vec<usize>,
    /// L_k: bytes live during op k (resident + born ≤ k, not dead before k).
    pub load: Vec<u64>,
    /// Bytes live at t = 0 (resident tensors).
    pub initial: u64,
    /// CSR: accesses (reads ∪ writes, deduplicated) of op k.
    pub op_acc_off: Vec<usize>,
    pub op_acc: Vec<u32>,
    /// CSR: sorted ops accessing tensor t.
    pub t_acc_off: Vec<usize>,
    pub t_acc: Vec<u32>,
    /// CSR: sorted ops writing tensor t (a subset of its accesses).
    pub t_wr_off: Vec<usize>,
    pub t_wr: Vec<u32>,
    /// CSR: non-resident tensors born at op k; tensors dying after op k.
    pub born_off: Vec<usize>,
    pub born: Vec<u32>,
    pub dies_off: Vec<usize>,
    pub dies: Vec<u32>,
}

fn csr(n: usize, pairs: &mut [(u32, u32)]) -> (Vec<usize>, Vec<u32>) {
    pairs.sort_unstable();
    let mut off = vec![0usize; n + 1];
    for &(k, _) in pairs.iter() {
        off[k as usize + 1] += 1;
    }
    for k in 0..n {
        off[k + 1] += off[k];
    }
    (off, pairs.iter().map(|&(_, v)| v).collect())
}

pub(crate) fn sane_ns(t: f64) -> f64 {
    if t.is_finite() && t > 0.0 { t } else { 0.0 }
}

impl Profile {
    pub fn new(trace: &OpTrace) -> Profile {
        let n = trace.ops.len();
        let nt = trace.tensors.len();
        let dur: Vec<f64> = trace.ops.iter().map(|o| sane_ns(o.time_ns)).collect();
        let mut start = Vec::with_capacity(n + 1);
        let mut t = 0.0;
        start.push(0.0);
        for &d in &dur {
            t += d;
            start.push(t);
        }
        // Accesses.
        let mut op_pairs: Vec<(u32, u32)> = Vec::new();
        let mut scratch: Vec<u32> = Vec::new();
        for (k, op) in trace.ops.iter().enumerate() {
            scratch.clear();
            scratch.extend(
                op.reads
                    .iter()
                    .chain(op.writes.iter())
                    .copied()
                    .filter(|&id| (id as usize) < nt),
            );
            scratch.sort_unstable();
            scratch.dedup();
            op_pairs.extend(scratch.iter().map(|&id| (k as u32, id)));
        }
        let mut t_pairs: Vec<(u32, u32)> = op_pairs.iter().map(|&(k, id)| (id, k)).collect();
        let mut wr_pairs: Vec<(u32, u32)> = trace
            .ops
            .iter()
            .enumerate()
            .flat_map(|(k, op)| op.writes.iter().map(move |&id| (id, k as u32)))
            .filter(|&(id, _)| (id as usize) < nt)
            .collect();
        wr_pairs.sort_unstable();
        wr_pairs.dedup();
        let (op_acc_off, op_acc) = csr(n, &mut op_pairs);
        let (t_acc_off, t_acc) = csr(nt, &mut t_pairs);
        let (t_wr_off, t_wr) = csr(nt, &mut wr_pairs);

        let bytes: Vec<u64> = trace.tensors.iter().map(|t| t.bytes).collect();
        let resident: Vec<bool> = trace.tensors.iter().map(|t| t.resident).collect();
        let mut birth = vec![None; nt];
        let mut death = vec![n.saturating_sub(1); nt];
        let mut cross = vec![false; nt];
        let mut born_pairs = Vec::new();
        let mut dies_pairs = Vec::new();
        let mut diff = vec![0i128; n + 1];
        let mut initial = 0u64;
        for (i, tensor) in trace.tensors.iter().enumerate() {
            if n == 0 {
                if tensor.resident {
                    initial = initial.saturating_add(tensor.bytes);
                }
                continue;
            }
            let first_acc = t_acc[t_acc_off[i]..t_acc_off[i + 1]]
                .first()
                .map(|&k| k as usize);
            let b = if tensor.resident {
                Some(0)
            } else {
                tensor.born_at.filter(|&k| k < n).or(first_acc)
            };
            let Some(b) = b else { continue };
            let d = tensor.dies_after.map_or(n - 1, |d| d.min(n - 1)).max(b);
            birth[i] = Some(b);
            death[i] = d;
            cross[i] = tensor.resident && tensor.dies_after.is_none();
            if tensor.resident {
                initial = initial.saturating_add(tensor.bytes);
            } else {
                born_pairs.push((b as u32, i as u32));
            }
            if tensor.dies_after.is_some() {
                dies_pairs.push((d as u32, i as u32));
            }
            diff[b] += tensor.bytes as i128;
            diff[d + 1] -= tensor.bytes as i128;
        }
        let mut load = Vec::with_capacity(n);
        let mut acc = 0i128;
        for &d in diff.iter().take(n) {
            acc += d;
            load.push(acc.clamp(0, u64::MAX as i128) as u64);
        }
        let (born_off, born) = csr(n, &mut born_pairs);
        let (dies_off, dies) = csr(n, &mut dies_pairs);
        Profile {
            n,
            start,
            dur,
            bytes,
            resident,
            cross,
            birth,
            death,
            load,
            initial,
            op_acc_off,
            op_acc,
            t_acc_off,
            t_acc,
            t_wr_off,
            t_wr,
            born_off,
            born,
            dies_off,
            dies,
        }
    }

    pub fn t0(&self) -> f64 {
        self.start[self.n]
    }
    pub fn op_acc(&self, k: usize) -> &[u32] {
        &self.op_acc[self.op_acc_off[k]..self.op_acc_off[k + 1]]
    }
    pub fn t_acc(&self, t: usize) -> &[u32] {
        &self.t_acc[self.t_acc_off[t]..self.t_acc_off[t + 1]]
    }
    /// The earliest op after which a copy of tensor `t` made for its idle gap after access
    /// `o` is still current: its last write at or before `o` (only reads follow it up to `o`,
    /// so a copy-out may start there and overlap them), or `o` itself when nothing before
    /// writes it in the iteration (a resident tensor's value comes from the previous one).
    pub fn copy_from(&self, t: usize, o: usize) -> usize {
        let w = &self.t_wr[self.t_wr_off[t]..self.t_wr_off[t + 1]];
        match w.partition_point(|&k| k as usize <= o) {
            0 => o,
            j => w[j - 1] as usize,
        }
    }
    pub fn born(&self, k: usize) -> &[u32] {
        &self.born[self.born_off[k]..self.born_off[k + 1]]
    }
    pub fn dies(&self, k: usize) -> &[u32] {
        &self.dies[self.dies_off[k]..self.dies_off[k + 1]]
    }
    /// E_k, the end of op k without swapping.
    pub fn end(&self, k: usize) -> f64 {
        self.start[k + 1]
    }
    /// The no-swap peak and its first op (None without ops).
    pub fn peak(&self) -> (u64, Option<usize>) {
        let mut best = (self.initial, None);
        for (k, &l) in self.load.iter().enumerate() {
            if best.1.is_none() || l > best.0 {
                best = (l, Some(k));
            }
        }
        best
    }
    /// Index of the last op starting at or before `t` (ops 0..n), None if `t < 0` or no ops.
    pub fn op_at(&self, t: f64) -> Option<usize> {
        if self.n == 0 {
            return None;
        }
        let c = self.start[..self.n].partition_point(|&s| s <= t);
        c.checked_sub(1)
    }
}
