//! The planner's scaling benchmark: a seeded random instance shaped like real training, planned
//! by SmartPool best-fit, with the time it took (for `itermem bench plan`; with `--budget-ms`
//! the same instances time the search against its wall-clock budget, and `--family` picks
//! those of [`somas_instance`] or [`iopddl_instance`] instead: IOPDDL- and SOMAS-sized
//! instances shaped after the shared traces of those benchmarks).
//!
//! The instance (`random_instance(n, seed)`) is a run of training iterations of a 400-layer
//! model, shaped after the LM 2.7B trace (6,770 buffers per step, ~900 live at the peak), as
//! many iterations as it takes to reach `n` buffers:
//!
//! * forward, per layer: two activations saved for backward (1, 1.5, 2 or 4 MiB by layer kind,
//!   times 1–4) and two short temporaries (512 B · log-uniform 1..2^13, living 1–4 events);
//! * backward, in reverse: three short temporaries (up to 16 MiB, 1–6 events), a weight
//!   gradient (up to 8 MiB) that lives until the optimizer step ends the iteration, then the
//!   layer's activations die;
//!
//! so ~800 buffers are live at each peak (4.75 GB for seed 1), lifetimes nest as in
//! backpropagation, and sizes repeat and span five orders of magnitude. One event per
//! allocation and per activation free: about `1.25 n` distinct instants.
//!
//! A single iteration of a model so deep that 25,000 activations are live at once fragments
//! the pool far more (every gap query then sees thousands of taken runs): best-fit takes about
//! 1.6 s on 100k such buffers (docs/BENCHMARKS.md; one iteration is a single part, so splitting
//! greedy runs into parts does not help there), against ~0.2 s here.

use std::time::{Duration, Instant};

use super::{Buffer, Instance, PlanError, PlanOptions, Policy, validate};
use crate::rng::SplitMix64;

/// A seeded random instance of `n` buffers (see the module doc). Ids are `0..n`.
pub fn random_instance(n: usize, seed: u64) -> Instance {
    let mut rng = SplitMix64::new(seed);
    let mut buffers: Vec<Buffer> = Vec::with_capacity(n);
    let mut t = 0u64; // the event clock
    let widths = [1u64 << 20, 3 << 19, 1 << 21, 1 << 22];
    let push = |buffers: &mut Vec<Buffer>, lower: u64, upper: u64, size: u64| {
        if buffers.len() < n {
            let id = buffers.len() as u64;
            buffers.push(Buffer {
                id,
                lower,
                upper,
                size,
            });
        }
    };
    while buffers.len() < n {
        // Forward: per layer two activations saved for backward and two short temporaries.
        let mut saved: Vec<[(u64, u64); 2]> = Vec::with_capacity(LAYERS);
        for layer in 0..LAYERS {
            let act = widths[layer % widths.len()] * (1 + rng.below(4));
            saved.push([(act, t), (act, t + 1)]);
            t += 2;
            for _ in 0..2 {
                let size = 512 * log_uniform(&mut rng, 1 << 13);
                push(&mut buffers, t, t + 1 + rng.below(4), size);
                t += 1;
            }
        }
        // Backward, in reverse: three short temporaries, one weight gradient (live until the
        // optimizer step ends the iteration), then the layer's saved activations die.
        let mut grads = Vec::with_capacity(LAYERS);
        for keep in saved.iter().rev() {
            for _ in 0..3 {
                let size = 512 * log_uniform(&mut rng, 1 << 15);
                push(&mut buffers, t, t + 1 + rng.below(6), size);
                t += 1;
            }
            grads.push((512 * (1 + rng.below(1 << 14)), t));
            t += 1;
            for &(size, lower) in keep {
                push(&mut buffers, lower, t, size);
                t += 1;
            }
        }
        t += 1;
        for (size, lower) in grads {
            push(&mut buffers, lower, t, size);
        }
        t += 1;
    }
    // Ids are unique, sizes and lifetimes non-empty: `new` cannot fail.
    Instance::new(buffers).unwrap_or_default()
}

/// Layers of the model of [`random_instance`]: ~8 buffers each per iteration.
const LAYERS: usize = 400;

/// The families of seeded instances `itermem bench plan --family` generates (see
/// [`family_instance`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Family {
    /// [`random_instance`]: iterations of a 400-layer model, nothing live between them.
    Training,
    /// [`somas_instance`]: training steps of a ResNet-like CNN after SOMAS' ResNet-50 trace,
    /// with weights live throughout.
    Somas,
    /// [`iopddl_instance`]: one large operator graph after IOPDDL's instances.
    Iopddl,
}

impl Family {
    pub fn name(self) -> &'static str {
        match self {
            Family::Training => "training",
            Family::Somas => "somas",
            Family::Iopddl => "iopddl",
        }
    }
}

/// A seeded instance of `n` buffers of `family`. Ids are `0..n`.
pub fn family_instance(family: Family, n: usize, seed: u64) -> Instance {
    match family {
        Family::Training => random_instance(n, seed),
        Family::Somas => somas_instance(n, seed),
        Family::Iopddl => iopddl_instance(n, seed),
    }
}

/// Training steps of a ResNet-like CNN, shaped after SOMAS' ResNet-50 trace (1,042 tensors in
/// one step of 1,029 events: 131 live throughout, sizes 4 B–49 MiB with 45 distinct values,
/// median lifetime 110 events), with as many steps as it takes to reach `n` buffers:
///
/// * 160 weights (512 B · 2^k, k uniform in 0..16) live from the first event to the last, as
///   weights and optimizer state do across steps;
/// * forward, per layer of 100 in four stages: an activation saved for backward (12.25 MiB
///   halved per stage, times 1, 2 or 4), a small statistic saved too (128 B–4 KiB) and a
///   workspace (512 B · log-uniform 1..2^14, 1–3 events);
/// * backward, in reverse: the output's gradient (the activation's size, living until the
///   next layer's), a workspace, the weight's gradient (its weight's size, until the optimizer
///   step), then the layer's saved tensors die.
///
/// So between two steps only the weights are live: the steps are independent once the
/// weights are stacked, as in any real multi-step trace.
pub fn somas_instance(n: usize, seed: u64) -> Instance {
    const WEIGHTS: usize = 160;
    const LAYERS: usize = 100;
    let mut rng = SplitMix64::new(seed);
    let weights: Vec<u64> = (0..WEIGHTS).map(|_| 512 << rng.below(16)).collect();
    let mut spans: Vec<(u64, u64, u64)> = Vec::with_capacity(n);
    let mut t = 1u64;
    let push = |spans: &mut Vec<(u64, u64, u64)>, lower: u64, upper: u64, size: u64| {
        if spans.len() + WEIGHTS < n {
            spans.push((lower, upper, size));
        }
    };
    while spans.len() + WEIGHTS < n {
        let mut saved = Vec::with_capacity(LAYERS);
        for layer in 0..LAYERS {
            let stage = (layer * 4 / LAYERS) as u64;
            let act = ((49u64 << 18) >> stage) << rng.below(3);
            let stat = 128 << rng.below(6);
            saved.push((act, stat, t));
            t += 1;
            push(
                &mut spans,
                t,
                t + 1 + rng.below(3),
                512 * log_uniform(&mut rng, 1 << 14),
            );
            t += 1;
        }
        let mut grads = Vec::with_capacity(LAYERS);
        let mut grad_out: Option<(u64, u64)> = None;
        for (layer, &(act, stat, born)) in saved.iter().enumerate().rev() {
            let here = t;
            if let Some((size, lower)) = grad_out.take() {
                push(&mut spans, lower, here + 1, size);
            }
            grad_out = Some((act, here));
            push(
                &mut spans,
                here,
                here + 1 + rng.below(3),
                512 * log_uniform(&mut rng, 1 << 14),
            );
            grads.push((weights[layer % WEIGHTS], here + 1));
            t += 2;
            push(&mut spans, born, t, act);
            push(&mut spans, born, t, stat);
            t += 1;
        }
        if let Some((size, lower)) = grad_out {
            push(&mut spans, lower, t, size);
        }
        t += 1;
        for (size, lower) in grads {
            push(&mut spans, lower, t, size);
        }
        t += 1;
    }
    let end = t + 1;
    let buffers = weights
        .iter()
        .take(n)
        .map(|&size| (0, end, size))
        .chain(spans)
        .enumerate()
        .map(|(id, (lower, upper, size))| Buffer {
            id: id as u64,
            lower,
            upper,
            size,
        })
        .collect();
    Instance::new(buffers).unwrap_or_default()
}

/// One operator graph shaped after IOPDDL's `G_1` (816 buffers over 1,356 events: one output
/// per operator, median lifetime 81 events with a tail to half the graph, sizes 8 B–1.2 GB
/// from 154 distinct values, 170 live at most), as long as `n` operators: operator `k` is
/// born at event `k` and lives log-uniform 8–700 events (its consumers lie nearby in the
/// topological order, however large the graph; median 75, about 155 live at once), its size
/// drawn from a palette of 160 values `m · 2^e + 1` (m in 1..=3, e in 3..28: as in G_1, whose
/// sizes are mostly of that form).
/// Nothing splits such a graph in time: it is one part.
pub fn iopddl_instance(n: usize, seed: u64) -> Instance {
    let mut rng = SplitMix64::new(seed);
    let palette: Vec<u64> = (0..160)
        .map(|_| (rng.range(1, 4) << rng.range(3, 28)) + 1)
        .collect();
    let buffers = (0..n as u64)
        .map(|k| Buffer {
            id: k,
            lower: k,
            upper: k + (8.0 * (rng.unit() * (700.0f64 / 8.0).ln()).exp()) as u64,
            size: palette[rng.below(palette.len() as u64) as usize],
        })
        .collect();
    Instance::new(buffers).unwrap_or_default()
}

/// Uniform in `log` over `1..=max`.
fn log_uniform(rng: &mut SplitMix64, max: u64) -> u64 {
    let x = (rng.unit() * ((max as f64).ln())).exp();
    (x as u64).clamp(1, max)
}

/// The measurements of one scaling run.
#[derive(Clone, Debug)]
pub struct ScalingReport {
    pub buffers: usize,
    pub seed: u64,
    /// Aligned peak live bytes.
    pub lower_bound: u64,
    /// Best-fit footprint.
    pub footprint: u64,
    pub ratio: f64,
    /// Best-fit planning time (from the instance to the plan).
    pub plan_elapsed: Duration,
    /// Time the independent validator took to accept the plan.
    pub validate_elapsed: Duration,
    /// Whether the validator accepted the plan (always, unless best-fit has a bug).
    pub valid: bool,
}

/// Generates `random_instance(n, seed)` and plans it with SmartPool best-fit (512-byte
/// alignment), timing the planner and the validator. For `itermem bench plan`.
pub fn bench_scaling(n: usize, seed: u64) -> Result<ScalingReport, PlanError> {
    let instance = random_instance(n, seed);
    let report = super::plan(&instance, Policy::BestFit, &PlanOptions::default())?;
    let start = Instant::now();
    let valid = validate(&instance, &report.plan).is_ok();
    let validate_elapsed = start.elapsed();
    Ok(ScalingReport {
        buffers: n,
        seed,
        lower_bound: report.lower_bound,
        footprint: report.footprint,
        ratio: report.ratio,
        plan_elapsed: report.elapsed,
        validate_elapsed,
        valid,
    })
}
