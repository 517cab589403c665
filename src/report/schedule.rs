//! The swap schedule drawn against the program's timeline.
//!
//! Swap mode does not record when its copies ran: its statistics count them per iteration
//! (`swap.iterations[]`), and its plan (`--plan-out`) says at which of the iteration's ops each
//! copy is issued (`out_at_op`; `in_issue_op` + `in_delay_ns`) and how fast the planner
//! expected the host link to be (`executor.copy`). So the report draws the *planned* copies:
//! in every iteration the statistics list, op `k` is the `k`-th launch, copy or memset from
//! that iteration's `start_event` on (the planner's ops, [`crate::ops::from_trace`]), a copy
//! starts at the time the program issued that op (plus the swap-in's delay) and lasts what the
//! copy model gives for its bytes. The page says that these are planned times. At most
//! [`MAX_COPIES`] copies are drawn: those of the first iterations when there are more.
//!
//! Copies last microseconds in a run of seconds, so the page also draws the first swapped
//! iteration alone ([`Zoom`]): its kernel launches one by one (at most [`MAX_ZOOM_LAUNCHES`])
//! against its copies.

use serde::Serialize;
use serde_json::Value;

use super::source::{Item, Recorded};
use crate::swap::CopyModel;

pub const MAX_COPIES: usize = 4000;
pub const MAX_ZOOM_LAUNCHES: usize = 4000;

#[derive(Clone, Debug, Default, Serialize)]
pub struct Schedule {
    /// `[start, end, bytes]` of each copy to host memory, and of each copy back.
    pub out: Vec<[u64; 3]>,
    pub back: Vec<[u64; 3]>,
    /// Iterations with copies drawn, of those the statistics list.
    pub iterations_drawn: usize,
    pub iterations: usize,
    pub zoom: Option<Zoom>,
}

/// The first swapped iteration, from its first launch or copy to its last.
#[derive(Clone, Debug, Serialize)]
pub struct Zoom {
    pub start: u64,
    pub end: u64,
    /// `[time, stream]` of each launch in it, the first [`MAX_ZOOM_LAUNCHES`].
    pub launches: Vec<[u64; 2]>,
    /// Launches in it beyond those.
    pub left_out: usize,
}

/// The planned copies of `plan` (`itermem plan --json`'s JSON) in the iterations that start at
/// `starts` (access-event indices).
pub fn build(recorded: &Recorded, plan: &Value, starts: &[u64]) -> Schedule {
    let swaps = plan["swaps"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    // The plan's copy model (no copy time without one).
    let copy: Option<CopyModel> = serde_json::from_value(plan["executor"]["copy"].clone()).ok();
    let ops: Vec<(usize, u64)> = recorded
        .items
        .iter()
        .enumerate()
        .filter(|(_, (_, item))| matches!(item, Item::Launch { .. } | Item::Transfer))
        .map(|(index, &(time, _))| (index, time))
        .collect();
    // A swap that wraps is copied back in the next iteration, `ops_per_iteration` ops on.
    let ops_per_iteration = plan["executor"]["op_time_ns"]
        .as_array()
        .map_or(0, Vec::len);
    let per_iteration = (2 * swaps.len()).max(1);
    let drawn = (MAX_COPIES / per_iteration).max(1).min(starts.len());
    let mut schedule = Schedule {
        iterations_drawn: drawn,
        iterations: starts.len(),
        ..Schedule::default()
    };
    for &start in &starts[..drawn] {
        let first = ops.partition_point(|&(index, _)| (index as u64) < start);
        let op_time = |k: &Value, later: usize| {
            let k = usize::try_from(k.as_u64()?).ok()?;
            ops.get(first.checked_add(later)?.checked_add(k)?)
                .map(|&(_, time)| time)
        };
        for swap in swaps {
            let bytes = swap["bytes"].as_u64().unwrap_or(0);
            if let Some(at) = op_time(&swap["out_at_op"], 0) {
                let end = at.saturating_add(copy.map_or(0.0, |c| c.out_ns(bytes)) as u64);
                schedule.out.push([at, end, bytes]);
            }
            let later = if swap["wraps"].as_bool() == Some(true) {
                ops_per_iteration
            } else {
                0
            };
            if let Some(issued) = op_time(&swap["in_issue_op"], later) {
                let at = issued.saturating_add(swap["in_delay_ns"].as_f64().unwrap_or(0.0) as u64);
                let end = at.saturating_add(copy.map_or(0.0, |c| c.in_ns(bytes)) as u64);
                schedule.back.push([at, end, bytes]);
            }
        }
    }
    schedule.zoom = zoom(recorded, starts, schedule.out.iter().chain(&schedule.back));
    schedule
}

/// The [`Zoom`] of the iteration at `starts[0]`, if the recording reaches it: from its first
/// launch or copy to its last (not to the next iteration: a program issues an iteration's work
/// in a burst and then waits for the device, and the wait would squeeze the burst into a
/// sliver). `copies` are all the copies drawn; those starting in the iteration count.
fn zoom<'a>(
    recorded: &Recorded,
    starts: &[u64],
    copies: impl Iterator<Item = &'a [u64; 3]>,
) -> Option<Zoom> {
    let first = usize::try_from(*starts.first()?).ok()?;
    let last = starts
        .get(1)
        .and_then(|&next| usize::try_from(next).ok())
        .unwrap_or(recorded.items.len())
        .min(recorded.items.len());
    let items = recorded.items.get(first..last)?;
    let begins = items.first()?.0;
    let next = recorded.items.get(last).map_or(u64::MAX, |&(time, _)| time);
    let launches: Vec<[u64; 2]> = items
        .iter()
        .filter_map(|&(time, item)| match item {
            Item::Launch { stream } => Some([time, stream]),
            _ => None,
        })
        .collect();
    let spans = launches.iter().map(|&[time, _]| (time, time)).chain(
        copies
            .filter(|copy| (begins..next).contains(&copy[0]))
            .map(|copy| (copy[0], copy[1])),
    );
    let (start, end) = spans.fold(None, |span: Option<(u64, u64)>, (from, to)| {
        Some(span.map_or((from, to), |(lo, hi)| (lo.min(from), hi.max(to))))
    })?;
    Some(Zoom {
        start,
        end: end.max(start.saturating_add(1)),
        left_out: launches.len().saturating_sub(MAX_ZOOM_LAUNCHES),
        launches: launches.into_iter().take(MAX_ZOOM_LAUNCHES).collect(),
    })
}
