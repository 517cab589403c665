//! A generated training iteration of many small tensors: a Child-Sum Tree-LSTM (Tai et al.,
//! 2015) over a batch of parse trees, the kind of dynamic, tree-structured model whose
//! iteration holds thousands of tensors and none of 1 MiB. The shared op logs are CNNs,
//! a Transformer and an LSTM whose activations are MiBs each; this generator is what AutoSwap's
//! swap units (`crate::swap::autoswap`) are measured on, written as a DTR op log
//! ([`super::to_dtr_log`]) so that `itermem plan` reads it like the shared ones.
//!
//! # The model
//!
//! One random binary tree shape of `leaves` leaves (every internal node has two children), a
//! batch of `batch` trees of that shape (a bucket of equal parses), each node a word of
//! `input` features and a cell of `hidden` units, processed node by node in post-order
//! (forward) and in reverse (backward), as a framework without dynamic batching runs it.
//! Per node, forward (`x` its word, children `(h_l, c_l)`, `(h_r, c_r)`):
//!
//! ```text
//! x = embedding(ids)            hsum = h_l + h_r
//! iou = x W_iou + b + hsum U_iou           i, o = σ(iou_i), σ(iou_o)   u = tanh(iou_u)
//! f_k = σ(x W_f + b_f + h_k U_f)           c = i ⊙ u + Σ_k f_k ⊙ c_k   h = o ⊙ tanh(c)
//! ```
//!
//! Each line is one kernel per product or sum, and the tensors autograd saves (x, hsum,
//! i, o, u, f_k, tanh(c), the children's h and c) live until the node's backward pass, which
//! makes one kernel per gradient term, accumulates the weight gradients in place and frees
//! what it used. A linear classifier and a cross-entropy sit on the root; SGD updates every
//! weight in place at the end and zeroes its gradient (both resident, alive across
//! iterations). With the defaults (96 leaves, batch 128, 256 units and features) and seed 1:
//! 191 nodes, 7,067 ops and 6,308 tensors, activations of 128 and 384 KiB, the largest tensor
//! a 768 KiB weight. Sizes saturate at `u64::MAX` rather than overflow.
//!
//! Op times are the roofline ([`CostModel::titan_v`], the GPU of the DTR logs) of each
//! kernel's FLOPs and bytes, times a seeded factor in `[1.5, 3)`: the DTR logs' measured
//! kernels take 1.7–3.1× the roofline (median ratios, `ops::cost`).

use super::{CostModel, Op, OpTrace, Tensor, TensorId};
use crate::rng::SplitMix64;

/// The shape of a generated Tree-LSTM iteration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TreeLstm {
    pub leaves: usize,
    pub batch: u64,
    pub hidden: u64,
    pub input: u64,
    pub vocabulary: u64,
    pub classes: u64,
}

impl Default for TreeLstm {
    fn default() -> TreeLstm {
        TreeLstm {
            leaves: 96,
            batch: 128,
            hidden: 256,
            input: 256,
            vocabulary: 512,
            classes: 5,
        }
    }
}

/// Bytes of an fp32 value.
const F32: u64 = 4;

/// Builds the iteration: tensor ids in order of appearance (resident ones first), each tensor
/// freed after its last use by the op that the program drops it at.
struct Builder {
    rng: SplitMix64,
    cost: CostModel,
    tensors: Vec<Tensor>,
    ops: Vec<Op>,
}

impl Builder {
    fn resident(&mut self, bytes: u64) -> TensorId {
        let id = self.tensors.len() as TensorId;
        self.tensors.push(Tensor {
            id,
            bytes,
            resident: true,
            dies_after: None,
            born_at: None,
        });
        id
    }

    fn push_op(&mut self, name: &str, reads: &[TensorId], writes: Vec<TensorId>, flops: f64) {
        let moved = reads
            .iter()
            .chain(&writes)
            .map(|&t| self.tensors[t as usize].bytes)
            .fold(0u64, u64::saturating_add);
        let factor = 1.5 + 1.5 * self.rng.unit();
        self.ops.push(Op {
            name: name.into(),
            reads: reads.to_vec(),
            writes,
            time_ns: (self.cost.op_time_ns(flops, moved) * factor).round(),
            measured: true,
            flops: 0.0,
        });
    }

    /// A kernel reading `reads` and making one new tensor of `bytes`.
    fn call(&mut self, name: &str, reads: &[TensorId], bytes: u64, flops: f64) -> TensorId {
        let id = self.tensors.len() as TensorId;
        self.tensors.push(Tensor {
            id,
            bytes,
            resident: false,
            dies_after: None,
            born_at: Some(self.ops.len()),
        });
        self.push_op(name, reads, vec![id], flops);
        id
    }

    /// A kernel reading `reads` and updating `target` in place.
    fn update(&mut self, name: &str, reads: &[TensorId], target: TensorId, flops: f64) {
        let mut all = reads.to_vec();
        if !all.contains(&target) {
            all.push(target);
        }
        self.push_op(name, &all, vec![target], flops);
    }

    /// The program drops `ts` after the last op so far.
    fn free(&mut self, ts: &[TensorId]) {
        let last = self.ops.len().saturating_sub(1);
        for &t in ts {
            self.tensors[t as usize].dies_after = Some(last);
        }
    }
}

/// Weights and their gradients (resident).
struct Params {
    emb: TensorId,
    ids: TensorId,
    w_iou: TensorId,
    u_iou: TensorId,
    b_iou: TensorId,
    w_f: TensorId,
    u_f: TensorId,
    b_f: TensorId,
    w_out: TensorId,
    labels: TensorId,
    /// Gradients of `emb`, `w_iou`, `u_iou`, `w_f`, `u_f`, `w_out`.
    grads: [TensorId; 6],
}

/// What a node's forward pass leaves for its backward pass and its parent.
struct Saved {
    children: Option<[usize; 2]>,
    x: TensorId,
    hsum: Option<TensorId>,
    i: TensorId,
    o: TensorId,
    u: TensorId,
    f: Option<[TensorId; 2]>,
    tc: TensorId,
    c: TensorId,
    h: TensorId,
}

/// A random binary tree of `leaves` leaves as children lists in post-order (children before
/// their parent; the root last).
fn random_tree(rng: &mut SplitMix64, leaves: usize) -> Vec<Option<[usize; 2]>> {
    fn build(rng: &mut SplitMix64, leaves: usize, nodes: &mut Vec<Option<[usize; 2]>>) -> usize {
        if leaves <= 1 {
            nodes.push(None);
            return nodes.len() - 1;
        }
        let left = rng.range(1, leaves as u64) as usize;
        let l = build(rng, left, nodes);
        let r = build(rng, leaves - left, nodes);
        nodes.push(Some([l, r]));
        nodes.len() - 1
    }
    let mut nodes = Vec::with_capacity(2 * leaves.max(1));
    build(rng, leaves.max(1), &mut nodes);
    nodes
}

/// One training iteration of a Child-Sum Tree-LSTM of `shape` (see the module doc),
/// deterministic given `seed`.
pub fn tree_lstm_iteration(seed: u64, shape: &TreeLstm) -> OpTrace {
    let mut rng = SplitMix64::new(seed);
    let tree = random_tree(&mut rng, shape.leaves);
    let mut b = Builder {
        rng,
        cost: CostModel::titan_v(),
        tensors: Vec::new(),
        ops: Vec::new(),
    };
    let (bs, h, x, c) = (shape.batch, shape.hidden, shape.input, shape.classes);
    let fp32 = |a: u64, b: u64| a.saturating_mul(b).saturating_mul(F32);
    let vec_h = fp32(bs, h);
    let vec_x = fp32(bs, x);
    let vec_3h = vec_h.saturating_mul(3);
    let mm = |m: u64, k: u64, n: u64| 2.0 * m as f64 * k as f64 * n as f64;
    let h3 = h.saturating_mul(3);
    let sizes = [
        fp32(shape.vocabulary, x),
        fp32(x, h3),
        fp32(h, h3),
        fp32(x, h),
        fp32(h, h),
        fp32(h, c),
    ];
    let p = Params {
        emb: b.resident(sizes[0]),
        ids: b.resident(fp32(bs, tree.len() as u64).saturating_mul(2)),
        w_iou: b.resident(sizes[1]),
        u_iou: b.resident(sizes[2]),
        b_iou: b.resident(fp32(h3, 1)),
        w_f: b.resident(sizes[3]),
        u_f: b.resident(sizes[4]),
        b_f: b.resident(fp32(h, 1)),
        w_out: b.resident(sizes[5]),
        labels: b.resident(fp32(bs, 2)),
        grads: sizes.map(|s| b.resident(s)),
    };

    // Forward, post-order.
    let mut saved: Vec<Saved> = Vec::with_capacity(tree.len());
    for &children in &tree {
        let xt = b.call("embedding", &[p.emb, p.ids], vec_x, 0.0);
        let hs = children.map(|[l, r]| (saved[l].h, saved[r].h));
        let hsum = hs.map(|(hl, hr)| b.call("add", &[hl, hr], vec_h, 0.0));
        let mut iou = b.call("addmm", &[xt, p.w_iou, p.b_iou], vec_3h, mm(bs, x, h3));
        if let Some(hsum) = hsum {
            let ah = b.call("mm", &[hsum, p.u_iou], vec_3h, mm(bs, h, h3));
            let sum = b.call("add", &[iou, ah], vec_3h, 0.0);
            b.free(&[iou, ah]);
            iou = sum;
        }
        let i = b.call("sigmoid", &[iou], vec_h, 0.0);
        let o = b.call("sigmoid", &[iou], vec_h, 0.0);
        let u = b.call("tanh", &[iou], vec_h, 0.0);
        b.free(&[iou]);
        let mut cell = b.call("mul", &[i, u], vec_h, 0.0);
        let f = children.map(|kids| {
            let fx = b.call("addmm", &[xt, p.w_f, p.b_f], vec_h, mm(bs, x, h));
            let f = kids.map(|k| {
                let (hk, ck) = (saved[k].h, saved[k].c);
                let fh = b.call("mm", &[hk, p.u_f], vec_h, mm(bs, h, h));
                let s = b.call("add", &[fx, fh], vec_h, 0.0);
                b.free(&[fh]);
                let fk = b.call("sigmoid", &[s], vec_h, 0.0);
                b.free(&[s]);
                let fc = b.call("mul", &[fk, ck], vec_h, 0.0);
                let next = b.call("add", &[cell, fc], vec_h, 0.0);
                b.free(&[cell, fc]);
                cell = next;
                fk
            });
            b.free(&[fx]);
            f
        });
        let tc = b.call("tanh", &[cell], vec_h, 0.0);
        let ht = b.call("mul", &[o, tc], vec_h, 0.0);
        saved.push(Saved {
            children,
            x: xt,
            hsum,
            i,
            o,
            u,
            f,
            tc,
            c: cell,
            h: ht,
        });
    }
    let root = tree.len() - 1;
    let logits = b.call(
        "addmm",
        &[saved[root].h, p.w_out],
        fp32(bs, c),
        mm(bs, h, c),
    );
    let loss = b.call("cross_entropy", &[logits, p.labels], F32, 0.0);

    // Backward, reverse post-order: each node's gradients (dh, and dc from its parent).
    let mut dh: Vec<Option<TensorId>> = vec![None; tree.len()];
    let mut dc_in: Vec<Option<TensorId>> = vec![None; tree.len()];
    let dlogits = b.call(
        "cross_entropy_backward",
        &[logits, p.labels, loss],
        fp32(bs, c),
        0.0,
    );
    b.free(&[loss, logits]);
    dh[root] = Some(b.call("mm", &[dlogits, p.w_out], vec_h, mm(bs, c, h)));
    b.update(
        "mm_accumulate",
        &[saved[root].h, dlogits],
        p.grads[5],
        mm(h, bs, c),
    );
    b.free(&[dlogits, saved[root].h, saved[root].c]);
    for n in (0..tree.len()).rev() {
        let s = &saved[n];
        let (s_x, s_hsum, s_i, s_o, s_u, s_f, s_tc, children) =
            (s.x, s.hsum, s.i, s.o, s.u, s.f, s.tc, s.children);
        let Some(dhn) = dh[n].take() else { continue };
        let d_o = b.call("mul", &[dhn, s_tc], vec_h, 0.0);
        let dtc = b.call("mul", &[dhn, s_o], vec_h, 0.0);
        b.free(&[dhn]);
        let mut dc = b.call("tanh_backward", &[dtc, s_tc], vec_h, 0.0);
        b.free(&[dtc, s_tc]);
        if let Some(extra) = dc_in[n].take() {
            let sum = b.call("add", &[dc, extra], vec_h, 0.0);
            b.free(&[dc, extra]);
            dc = sum;
        }
        let di = b.call("mul", &[dc, s_u], vec_h, 0.0);
        let du = b.call("mul", &[dc, s_i], vec_h, 0.0);
        let mut dfx: Option<TensorId> = None;
        let mut dh_child: [Option<TensorId>; 2] = [None, None];
        if let (Some(kids), Some(f)) = (children, s_f) {
            for j in (0..2).rev() {
                let (hk, ck) = (saved[kids[j]].h, saved[kids[j]].c);
                let df = b.call("mul", &[dc, ck], vec_h, 0.0);
                dc_in[kids[j]] = Some(b.call("mul", &[dc, f[j]], vec_h, 0.0));
                let ds = b.call("sigmoid_backward", &[df, f[j]], vec_h, 0.0);
                b.free(&[df, f[j], ck]);
                dh_child[j] = Some(b.call("mm", &[ds, p.u_f], vec_h, mm(bs, h, h)));
                b.update("mm_accumulate", &[hk, ds], p.grads[4], mm(h, bs, h));
                b.free(&[hk]);
                dfx = Some(match dfx {
                    None => ds,
                    Some(prev) => {
                        let sum = b.call("add", &[prev, ds], vec_h, 0.0);
                        b.free(&[prev, ds]);
                        sum
                    }
                });
            }
        }
        b.free(&[dc]);
        let di2 = b.call("sigmoid_backward", &[di, s_i], vec_h, 0.0);
        let do2 = b.call("sigmoid_backward", &[d_o, s_o], vec_h, 0.0);
        let du2 = b.call("tanh_backward", &[du, s_u], vec_h, 0.0);
        b.free(&[di, d_o, du, s_i, s_o, s_u]);
        let diou = b.call("cat", &[di2, do2, du2], vec_3h, 0.0);
        b.free(&[di2, do2, du2]);
        let mut dx = b.call("mm", &[diou, p.w_iou], vec_x, mm(bs, h3, x));
        b.update("mm_accumulate", &[s_x, diou], p.grads[1], mm(x, bs, h3));
        if let (Some(kids), Some(hsum)) = (children, s_hsum) {
            let dhsum = b.call("mm", &[diou, p.u_iou], vec_h, mm(bs, h3, h));
            b.update("mm_accumulate", &[hsum, diou], p.grads[2], mm(h, bs, h3));
            b.free(&[hsum]);
            for j in 0..2 {
                if let Some(part) = dh_child[j] {
                    dh[kids[j]] = Some(b.call("add", &[part, dhsum], vec_h, 0.0));
                    b.free(&[part]);
                }
            }
            b.free(&[dhsum]);
        }
        b.free(&[diou]);
        if let Some(dfx) = dfx {
            let dxf = b.call("mm", &[dfx, p.w_f], vec_x, mm(bs, h, x));
            b.update("mm_accumulate", &[s_x, dfx], p.grads[3], mm(x, bs, h));
            let sum = b.call("add", &[dx, dxf], vec_x, 0.0);
            b.free(&[dfx, dx, dxf]);
            dx = sum;
        }
        b.update("index_add", &[dx, p.ids], p.grads[0], 0.0);
        b.free(&[dx, s_x]);
    }

    // SGD, then the gradients are zeroed for the next iteration.
    let weights = [p.emb, p.w_iou, p.u_iou, p.w_f, p.u_f, p.w_out];
    for (&w, &g) in weights.iter().zip(&p.grads) {
        b.update("sgd", &[g], w, 0.0);
        b.update("zero", &[], g, 0.0);
    }
    OpTrace {
        source: format!("tree-lstm (seed {seed})"),
        tensors: b.tensors,
        ops: b.ops,
    }
}
