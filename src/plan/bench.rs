//! The planner's scaling benchmark: a seeded random instance shaped like real training, planned
//! by SmartPool best-fit, with the time it took (for `itermem bench plan`; with `--budget-ms`
//! the same instances time the search against its wall-clock budget).
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
