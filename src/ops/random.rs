//! Seeded random iterations, for the planners' property tests and benchmarks
//! (`itermem bench swap`): one generator, so a benchmark times the iterations the tests check.

use super::{Op, OpTrace, Tensor};
use crate::rng::SplitMix64;

/// A random training-like iteration of `n_ops` ops (0–200 µs each, one in ten free) and
/// `n_tensors` tensors of 0–63 `unit`s: resident parameters (alive across iterations) and
/// optimizer state, activations born in "forward" and read again in "backward", temporaries.
pub fn random_iteration(
    rng: &mut SplitMix64,
    n_ops: usize,
    n_tensors: usize,
    unit: u64,
) -> OpTrace {
    let n = n_ops.max(1);
    let mut tensors = Vec::with_capacity(n_tensors);
    let mut ops: Vec<Op> = (0..n)
        .map(|k| {
            let t = if rng.below(10) == 0 {
                0.0
            } else {
                rng.range(1, 2000) as f64 * 100.0
            };
            Op {
                name: format!("op{k}"),
                reads: Vec::new(),
                writes: Vec::new(),
                time_ns: t,
                measured: true,
                flops: 0.0,
            }
        })
        .collect();
    for id in 0..n_tensors {
        let bytes = if rng.below(20) == 0 {
            0
        } else {
            rng.range(1, 64) * unit
        };
        let kind = rng.below(4);
        let (resident, born, dies) = match kind {
            0 => (true, None, None),
            1 => (true, None, Some(rng.below(n as u64) as usize)),
            _ => {
                let b = rng.below(n as u64) as usize;
                let d = if rng.below(8) == 0 {
                    None
                } else {
                    Some(b + rng.below((n - b) as u64) as usize)
                };
                (false, Some(b), d)
            }
        };
        let lo = born.unwrap_or(0);
        let hi = dies.unwrap_or(n - 1);
        let mut acc = Vec::new();
        if let Some(b) = born {
            acc.push(b);
        }
        for _ in 0..rng.below(4) {
            acc.push(rng.range(lo as u64, hi as u64 + 1) as usize);
        }
        acc.sort_unstable();
        acc.dedup();
        for (j, &k) in acc.iter().enumerate() {
            if j == 0 && born.is_some() || rng.below(3) == 0 {
                ops[k].writes.push(id as u32);
            } else {
                ops[k].reads.push(id as u32);
            }
        }
        tensors.push(Tensor {
            id: id as u32,
            bytes,
            resident,
            dies_after: dies,
            born_at: born,
        });
    }
    OpTrace {
        source: "random".into(),
        tensors,
        ops,
    }
}
