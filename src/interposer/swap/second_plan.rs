//! The second planning thread: a plan made from the op times measured under the first, and
//! whether it replaces the first.

use super::super::driver as cuda;
use super::super::pool::SwapReady;
use super::planning::Made;
use crate::swap::CopyModel;
use crate::swap::combined::ExecutorInputs;
use std::sync::Arc;
use std::time::Instant;

/// How much faster than the first plan (with the op times measured under it), as a share of
/// its iteration, a second plan must be to replace it: switching costs a wait for the device
/// and a round trip of the blocks the pools take through host memory, once.
const SECOND_PLAN_GAIN: f64 = 0.02;

/// What the second planning thread found, for the statistics (read at the next iteration).
pub(super) struct SecondReport {
    /// The first plan's simulated time and base from the op times measured under it.
    pub(super) remeasured: Option<(f64, f64)>,
    /// Whether a second plan was made and chosen, and why (or why not).
    pub(super) reason: String,
}

/// The second planning thread's work: the op times measured under the first plan (`made`),
/// the first plan's time with them, and a plan made with them and the full search, chosen if
/// it is faster by [`SECOND_PLAN_GAIN`] of the iteration (or whatever it costs, with
/// `always`). Not made where the first plan does not stall with these times: no plan can be
/// faster.
pub(super) fn second_plan(
    made: Arc<Made>,
    timed: Vec<(u64, usize, usize)>,
    copies: Vec<(bool, u64, usize, usize)>,
    always: bool,
) -> anyhow::Result<(SecondReport, Option<SwapReady>)> {
    let started = Instant::now();
    cuda::ensure_context();
    let planning = &made.planning;
    let inputs = ExecutorInputs {
        op_time_ns: planning.op_times(&timed)?,
        copy: copy_model_measured(made.inputs.copy, &copies),
        patient: true,
        ..made.inputs.clone()
    };
    let first = inputs.predict(&planning.trace, &made.planned)?;
    let ms = |ns: f64| ns / 1e6;
    let mut report = SecondReport {
        remeasured: Some((first.time_ns, first.base_time_ns)),
        reason: String::new(),
    };
    if first.time_ns <= first.base_time_ns {
        report.reason = format!(
            "not made: the first plan does not stall with the op times measured under it \
             ({:.1} ms an iteration)",
            ms(first.time_ns)
        );
        return Ok((report, None));
    }
    let (ready, _) = planning.schedule(inputs, started)?;
    let second = ready.1.predicted_ns;
    let compared = format!(
        "{:.1} ms an iteration against the first plan's {:.1} ms, both from the op times \
         measured under the first (base {:.1} ms)",
        ms(second),
        ms(first.time_ns),
        ms(first.base_time_ns)
    );
    let faster = first.time_ns - second >= SECOND_PLAN_GAIN * first.time_ns;
    if !faster && !always {
        report.reason = format!("not chosen: {compared}");
        return Ok((report, None));
    }
    let forced = if faster {
        ""
    } else {
        " (ITERMEM_SWAP_SECOND_PLAN=always)"
    };
    report.reason = format!("chosen{forced}: {compared}");
    Ok((report, Some(ready)))
}

/// `model` with the time per byte each way of the planned `copies` timed under a first plan
/// (to the host or not, bytes, timing events, which are destroyed): the median over the
/// copies of (time − the model's latency) ÷ bytes, where any was timed. The link measured at
/// activation was idle; under the plan it carries every swap while the kernels run.
fn copy_model_measured(model: CopyModel, copies: &[(bool, u64, usize, usize)]) -> CopyModel {
    let mut per_byte = [Vec::new(), Vec::new()];
    for &(out, bytes, start, end) in copies {
        cuda::synchronize_event(end);
        let latency = if out {
            model.out_latency_ns
        } else {
            model.in_latency_ns
        };
        if let Some(ns) = cuda::elapsed_ns(start, end).filter(|_| bytes > 0) {
            per_byte[usize::from(out)].push((ns - latency).max(0.0) / bytes as f64);
        }
        cuda::destroy_event(start);
        cuda::destroy_event(end);
    }
    let median = |times: &mut Vec<f64>| {
        times.sort_by(f64::total_cmp);
        times.get(times.len() / 2).copied().filter(|&t| t > 0.0)
    };
    let [mut into, mut out] = per_byte;
    CopyModel {
        out_ns_per_byte: median(&mut out).unwrap_or(model.out_ns_per_byte),
        in_ns_per_byte: median(&mut into).unwrap_or(model.in_ns_per_byte),
        ..model
    }
}
