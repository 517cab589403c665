//! The second planning thread: a plan made from the op times measured under the first, and
//! whether it replaces the first.

use super::super::driver as cuda;
use super::super::pool::SwapReady;
use super::median;
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
    copies: Vec<TimedCopy>,
    always: bool,
) -> anyhow::Result<(SecondReport, Option<SwapReady>)> {
    let started = Instant::now();
    cuda::ensure_context();
    let planning = &made.planning;
    // Before the op times: the handoffs are timed from the ops' end events, which those free.
    let copy = copy_model_measured(made.inputs.copy, &copies);
    let inputs = ExecutorInputs {
        op_time_ns: planning.op_times(&timed)?,
        copy,
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

/// A planned copy timed under a first plan.
pub(super) struct TimedCopy {
    /// To the host.
    pub(super) out: bool,
    pub(super) bytes: u64,
    /// Timing events on the copy's stream, after its waits and after the copy.
    pub(super) start: usize,
    pub(super) end: usize,
    /// A swap-out's: the timing event after the op it follows, which the copy's stream waited
    /// for (an op's event, not the copy's to destroy).
    pub(super) after: Option<usize>,
}

/// `model` with the latency and time per byte each way of the planned `copies` timed under a
/// first plan (their own timing events are destroyed), and the handoff between streams
/// ([`handoff_of`]): the line fitted
/// through each direction's (bytes, time) points, or, where the sizes do not differ enough for
/// a line, the median of (time − the model's latency) ÷ bytes. The link measured at activation
/// was idle; under the plan it carries every swap while the kernels run, and each copy pays a
/// fixed cost (a stream's wake-up, its delay) that a time per byte alone would charge to every
/// byte of the large ones: `mlp_train --adam` at 3× (12 GB/s) was planned at 9.9 GB/s, with
/// stalls of 58 ms an iteration predicted where 37 were measured.
fn copy_model_measured(model: CopyModel, copies: &[TimedCopy]) -> CopyModel {
    let mut timed = [Vec::new(), Vec::new()];
    for copy in copies {
        cuda::synchronize_event(copy.end);
        if let Some(ns) = cuda::elapsed_ns(copy.start, copy.end).filter(|_| copy.bytes > 0) {
            timed[usize::from(copy.out)].push((copy.bytes as f64, ns));
        }
    }
    let handoff_ns = handoff_of(copies).unwrap_or(model.handoff_ns);
    for copy in copies {
        cuda::destroy_event(copy.start);
        cuda::destroy_event(copy.end);
    }
    let [into, out] = timed;
    let (out_latency_ns, out_ns_per_byte) =
        link_of(&out, (model.out_latency_ns, model.out_ns_per_byte));
    let (in_latency_ns, in_ns_per_byte) =
        link_of(&into, (model.in_latency_ns, model.in_ns_per_byte));
    CopyModel {
        out_ns_per_byte,
        out_latency_ns,
        in_ns_per_byte,
        in_latency_ns,
        handoff_ns,
    }
}

/// The mean time from an op's end to the start of the swap-out that follows it, over the
/// swap-outs whose stream was idle by then (the one before had ended): the wake-up of a
/// stream waiting on another's event, which the simulator charges at every such crossing.
/// The mean, since what the crossings of an iteration cost together is their sum: on
/// cuda-shim, a median of tens of µs hides the tenth that takes a millisecond on a loaded
/// host. None where no swap-out qualifies. The copies' end events must have completed.
fn handoff_of(copies: &[TimedCopy]) -> Option<f64> {
    let mut previous_end = None;
    let mut handoffs = Vec::new();
    for copy in copies.iter().filter(|copy| copy.out) {
        let idle = |after: usize| {
            previous_end
                .and_then(|end| cuda::elapsed_ns(end, after))
                .is_some_and(|gap| gap >= 0.0)
        };
        if let Some(after) = copy.after.filter(|&after| idle(after))
            && let Some(ns) = cuda::elapsed_ns(after, copy.start)
        {
            handoffs.push(ns.max(0.0));
        }
        previous_end = Some(copy.end);
    }
    let (median, count) = super::median(handoffs.iter().copied())?;
    let mean = handoffs.iter().sum::<f64>() / count as f64;
    log::debug!(
        "handoff between streams: {count} swap-outs on an idle stream, mean {mean:.0} ns, \
         median {median:.0} ns"
    );
    Some(mean)
}

/// Latency and time per byte of one direction's timed copies (bytes, ns): the least-squares
/// line where the sizes span at least a factor of two and it gives a positive slope; else the
/// median of (time − `given` latency) ÷ bytes with that latency; `given` where none was timed.
fn link_of(points: &[(f64, f64)], given: (f64, f64)) -> (f64, f64) {
    let n = points.len() as f64;
    let (smallest, largest) = points.iter().fold((f64::INFINITY, 0.0_f64), |(lo, hi), p| {
        (lo.min(p.0), hi.max(p.0))
    });
    if points.len() >= 2 && largest >= 2.0 * smallest {
        let mean_bytes = points.iter().map(|p| p.0).sum::<f64>() / n;
        let mean_ns = points.iter().map(|p| p.1).sum::<f64>() / n;
        let covariance: f64 = points
            .iter()
            .map(|p| (p.0 - mean_bytes) * (p.1 - mean_ns))
            .sum();
        let variance: f64 = points.iter().map(|p| (p.0 - mean_bytes).powi(2)).sum();
        let slope = covariance / variance;
        if slope > 0.0 && slope.is_finite() {
            return ((mean_ns - slope * mean_bytes).max(0.0), slope);
        }
    }
    match median((points.iter()).map(|&(bytes, ns)| (ns - given.0).max(0.0) / bytes)) {
        Some((per_byte, _)) if per_byte > 0.0 => (given.0, per_byte),
        _ => given,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Copies of several sizes, each paying a fixed 60 µs besides 0.1 ns per byte (10 GB/s):
    /// the line recovers both, where a time per byte alone would charge the fixed cost to
    /// every byte; one size alone gives the median per byte after the given latency.
    #[test]
    fn the_link_under_a_plan_is_a_line_through_its_copies() {
        let at = |bytes: f64| (bytes, 60_000.0 + 0.1 * bytes);
        let sizes = [65_536.0, 1_048_576.0, 4_194_304.0, 4_194_304.0, 262_144.0];
        let points: Vec<(f64, f64)> = sizes.iter().map(|&b| at(b)).collect();
        let (latency, per_byte) = link_of(&points, (10_000.0, 1.0));
        assert!((latency - 60_000.0).abs() < 1e-3, "{latency}");
        assert!((per_byte - 0.1).abs() < 1e-9, "{per_byte}");
        let one_size = [at(4_194_304.0), at(4_194_304.0)];
        let (latency, per_byte) = link_of(&one_size, (10_000.0, 1.0));
        assert_eq!(latency, 10_000.0);
        assert!((per_byte - (50_000.0 / 4_194_304.0 + 0.1)).abs() < 1e-9);
        assert_eq!(link_of(&[], (10_000.0, 1.0)), (10_000.0, 1.0));
    }
}
