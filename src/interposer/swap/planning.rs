//! The planning thread: the captured timing iteration turned into an op trace, planned, and
//! the plan's swaps as a schedule in the terms of the running program.

use super::super::driver as cuda;
use super::super::pool::{PoolPlan, SwapReady};
use super::{SwapConfig, median};
use crate::event::{AllocId, Event, EventKind};
use crate::ops::{self, Birth, LoadOptions, OpTrace, TensorId};
use crate::swap::CopyModel;
use crate::swap::combined::{Executable, ExecutorInputs, PlanJson};
use rustc_hash::FxHashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

/// Objective evaluations of Bayesian optimisation (as `itermem plan`'s default).
const EVALUATIONS: usize = 36;

/// Host slots are aligned like device allocations.
const HOST_ALIGN: u64 = 512;

/// The shim and real drivers count device memory in 256-byte granules (at least).
pub(super) const GRANULE: u64 = 256;

/// Marks a position of the iteration that is not an op.
pub(super) const NOT_AN_OP: u32 = u32::MAX;
/// The slot position of a resident tensor's swap (it has no malloc in the iteration).
const NOT_A_SLOT: u64 = u64::MAX;

/// The blocks at addresses of their own, with their own memory, when a plan is made, by
/// allocation; and the granularity they are rounded to.
#[derive(Default)]
pub(super) struct Blocks {
    pub(super) by_id: FxHashMap<AllocId, OwnBlock>,
    pub(super) granularity: u64,
}

/// A block at an address of its own, as the planner sees it.
#[derive(Clone, Copy, Debug)]
pub(super) struct OwnBlock {
    pub(super) va: u64,
    pub(super) rounded: u64,
    /// Its own memory is page-locked host memory (it came when the device was full).
    pub(super) on_host: bool,
}

pub(super) fn granules(bytes: u64) -> u64 {
    bytes.div_ceil(GRANULE) * GRANULE
}

/// One planned swap, in the terms of the running program.
#[derive(Clone, Debug)]
pub(super) struct Planned {
    /// Position in the iteration of the malloc of the tensor (its pool slot).
    pub(super) position: u64,
    /// The block and its address, for a resident tensor (it has no malloc in the iteration).
    pub(super) resident: Option<(AllocId, u64)>,
    pub(super) host_offset: u64,
    /// An early copy-out: the copy is queued after the tensor's last write, and the tensor
    /// stays on the device for the reads up to the op in `leaves_after` that it leaves after.
    pub(super) early: bool,
}

/// A block of the program's the pool takes at activation (its memory becomes the pool's
/// granules at `offset`, mapped at the block's own addresses).
#[derive(Clone, Copy, Debug)]
pub(super) struct Resident {
    pub(super) id: AllocId,
    pub(super) va: u64,
    /// Its own memory is page-locked host memory (it came when the device was full).
    pub(super) on_host: bool,
    pub(super) offset: u64,
    pub(super) rounded: u64,
    /// Host offset of its slot when the plan has it away at the iteration's start (a swap that
    /// wraps the boundary): it then starts on the host.
    pub(super) away_at_start: Option<u64>,
}

/// The swaps of a plan, indexed by the ops at which they are issued.
#[derive(Debug, Default)]
pub struct Schedule {
    /// Op index at each event position of the iteration (`NOT_AN_OP` elsewhere).
    pub(super) op_at: Vec<u32>,
    /// Per op: swaps queued when it ends.
    pub(super) outs_after: Vec<Vec<u32>>,
    /// Per op: early copy-outs whose tensor leaves the device when it ends (its last read
    /// before the gap).
    pub(super) leaves_after: Vec<Vec<u32>>,
    /// Per op: swaps queued before it is launched.
    pub(super) ins_before: Vec<Vec<u32>>,
    pub(super) swaps: Vec<Planned>,
    pub(super) residents: Vec<Resident>,
    pub(super) host_bytes: u64,
    pub(super) predicted_ns: f64,
    pub(super) predicted_base_ns: f64,
    /// Why no plan keeps the limit, said if this one does not fit it when it would start.
    pub unfit: String,
    /// The plan and what it was made from (for the second plan).
    pub(super) made: Option<Arc<Made>>,
}

impl Schedule {
    /// Whether the pool takes no block of the program's (it is then one allocation).
    pub fn takes_no_blocks(&self) -> bool {
        self.residents.is_empty()
    }

    /// Whether this is a second plan, made while a first served: it replaces that one
    /// ([`PoolState::switch_plan`](super::super::pool::PoolState::switch_plan)).
    pub fn is_second(&self) -> bool {
        self.made.as_ref().is_some_and(|made| made.inputs.patient)
    }
}

/// What the sequencer captured of the timing iteration (see `Recorder::emit`).
pub struct Capture {
    /// Absolute index of the window's first event.
    pub start: u64,
    pub length: u64,
    /// Synthetic mallocs of the allocations live at the window's start, then its events.
    pub events: Vec<Event>,
    pub synthetic: u64,
    /// The graph launches that began while the window was being captured: (absolute index
    /// of the first event, events), for [`Capture::with_graph_launches`].
    pub graphs: Vec<(u64, u64)>,
}

impl Capture {
    /// For a window that allocates and frees nothing: the bytes its calls use and the bytes
    /// live across it. An iteration under a caching allocator uses nearly all it holds; a loop
    /// of launches within an iteration (a layer's kernels, repeated) leaves most of it alone.
    pub(super) fn use_of_live(&self) -> Option<(u64, u64)> {
        let (live, window) = self.events.split_at(self.synthetic as usize);
        let mut used = rustc_hash::FxHashSet::default();
        for event in window {
            match &event.kind {
                EventKind::Malloc { .. } | EventKind::Free { .. } => return None,
                EventKind::Launch { touched, .. } => used.extend(touched.iter().copied()),
                EventKind::Memcpy { dst, src, .. } => used.extend(dst.iter().chain(src)),
                EventKind::Memset { dst, .. } => used.extend(dst.iter()),
                _ => {}
            }
        }
        let (mut used_bytes, mut live_bytes) = (0, 0);
        for event in live {
            if let EventKind::Malloc { id, size, .. } = event.kind {
                live_bytes += size;
                if used.contains(&id) {
                    used_bytes += size;
                }
            }
        }
        Some((used_bytes, live_bytes))
    }

    /// The captured events with a `GraphLaunch` marker before the window's part of each graph
    /// launch, so that the planner keeps everything a launch uses resident for all of it
    /// (`ops::from_trace`). The markers are not in `events`: a launch may begin before the
    /// window does, and the events of the window are counted by index.
    fn with_graph_launches(&self) -> Vec<Event> {
        let (start, end) = (self.start, self.start + self.length);
        let mut graphs: Vec<(u64, u64)> = (self.graphs.iter())
            .filter(|&&(first, nodes)| first < end && first + nodes > start)
            .map(|&(first, nodes)| {
                let from = first.max(start);
                (from, (first + nodes).min(end) - from)
            })
            .collect();
        graphs.sort_unstable();
        let mut events = Vec::with_capacity(self.events.len() + graphs.len());
        let mut graphs = graphs.into_iter().peekable();
        for (at, event) in self.events.iter().enumerate() {
            let index = (at as u64).checked_sub(self.synthetic).map(|i| start + i);
            while let Some(&(first, nodes)) = graphs.peek()
                && Some(first) == index
            {
                let marker = EventKind::GraphLaunch {
                    exec: 0,
                    stream: 0,
                    nodes,
                };
                events.push(Event::new(0, marker));
                graphs.next();
            }
            events.push(event.clone());
        }
        events
    }
}

/// The op times of `timed` ops, ns, from their (start, end) timing events, which are destroyed.
fn read_op_times(timed: &[(u64, usize, usize)]) -> Vec<f64> {
    let mut op_time_ns = Vec::with_capacity(timed.len());
    for &(_, start, end) in timed {
        cuda::synchronize_event(end);
        op_time_ns.push(cuda::elapsed_ns(start, end).unwrap_or(0.0).max(0.0));
        cuda::destroy_event(start);
        cuda::destroy_event(end);
    }
    op_time_ns
}

/// What a period's plans are made from: the timed iteration's op trace, the blocks the pool
/// takes, and the executor's inputs without op times. Kept with the first plan, so that the
/// second is made from the same iteration with the op times measured under the first.
#[derive(Debug)]
pub(super) struct Planning {
    config: SwapConfig,
    name: PathBuf,
    pub(super) trace: ops::OpTrace,
    births: Vec<Birth>,
    /// The blocks the pool takes: (tensor, block, its address and size).
    taken: Vec<(TensorId, AllocId, OwnBlock)>,
    granularity: u64,
    /// Event position (in the window) of each op.
    op_positions: Vec<u64>,
    start: u64,
    length: u64,
    /// Synthetic mallocs before the window's events in the capture.
    synthetic: u64,
    /// Everything but the op times.
    inputs: ExecutorInputs,
    /// The program's own peak over the iteration: every allocation, at its own size.
    program_peak: u64,
}

/// A plan and what it was made from (the op times in `inputs`).
#[derive(Debug)]
pub(super) struct Made {
    pub(super) planning: Arc<Planning>,
    pub(super) inputs: ExecutorInputs,
    pub(super) planned: Executable,
    /// The plan as `ITERMEM_PLAN_OUT` holds it: a second plan is written there once it is
    /// installed (the file is the plan in use).
    pub(super) json: PlanJson,
}

impl Planning {
    /// The op trace of the captured timing iteration and the blocks its pool takes.
    fn new(
        config: &SwapConfig,
        copy: CopyModel,
        capture: Capture,
        limit: u64,
        outside_pool_bytes: u64,
        blocks: Blocks,
    ) -> anyhow::Result<Planning> {
        let window = capture.synthetic..capture.synthetic + capture.length;
        let window_events = &capture.events[window.start as usize..window.end as usize];
        let is_op = |e: &Event| {
            matches!(
                e.kind,
                EventKind::Launch { .. } | EventKind::Memcpy { .. } | EventKind::Memset { .. }
            )
        };
        let op_positions: Vec<u64> = window_events
            .iter()
            .enumerate()
            .filter(|(_, e)| is_op(e))
            .map(|(i, _)| i as u64)
            .collect();
        let allow_swaps = !window_events.iter().any(|e| {
            matches!(
                e.kind,
                EventKind::Launch {
                    layout_known: false,
                    ..
                }
            )
        });
        let name = config
            .trace
            .clone()
            .unwrap_or_else(|| PathBuf::from("(this process)"));
        let options = LoadOptions {
            window: Some((capture.synthetic, capture.length)),
            ..Default::default()
        };
        let events = capture.with_graph_launches();
        let (loaded, births) = ops::from_events_with_births(&name, &events, &options)?;
        // The blocks at addresses of their own that are live over the whole iteration: the pool
        // takes them, each on granules of its own (`combined_pool`), and their own memory then
        // leaves the bytes outside the pool.
        let taken: Vec<(TensorId, AllocId, OwnBlock)> = births
            .iter()
            .enumerate()
            .filter_map(|(tensor, birth)| match birth {
                // Not one freed in the iteration: the next iteration's block of that role is
                // another one (allocated in this iteration), which the plan cannot take.
                Birth::Resident(id)
                    if allow_swaps && loaded.trace.tensors.get(tensor)?.dies_after.is_none() =>
                {
                    Some((tensor as TensorId, *id, *blocks.by_id.get(id)?))
                }
                _ => None,
            })
            .collect();
        // Device memory the blocks leave outside the pool (those on the host never counted).
        let taken_bytes: u64 = (taken.iter())
            .filter(|(_, _, block)| !block.on_host)
            .map(|(_, _, block)| block.rounded)
            .sum();
        // A pool that takes blocks is made of granules: its last one may reach past the plan's
        // footprint, and counts as outside.
        let rounding = if taken.is_empty() {
            0
        } else {
            blocks.granularity
        };
        let mut inputs = ExecutorInputs {
            window: [capture.start, capture.length],
            op_time_ns: Vec::new(),
            copy,
            budget_bytes: 0,
            outside_pool_bytes: outside_pool_bytes.saturating_sub(taken_bytes) + rounding,
            evaluations: EVALUATIONS,
            min_swap_bytes: config.min_bytes,
            allow_swaps,
            residents: (taken.iter())
                .map(|&(tensor, _, block)| (tensor, block.rounded))
                .collect(),
            granularity: blocks.granularity,
            patient: false,
        };
        inputs.budget_bytes = inputs.budget_for(limit);
        Ok(Planning {
            config: config.clone(),
            name,
            program_peak: loaded.trace.peak().map_or(0, |p| p.bytes),
            trace: loaded.trace,
            births,
            taken,
            granularity: blocks.granularity,
            op_positions,
            start: capture.start,
            length: capture.length,
            synthetic: capture.synthetic,
            inputs,
        })
    }

    /// The op times of iterations of this period timed op by op (`timed`: event index and
    /// timing events of each op), in op order: each op's median over the iterations.
    pub(super) fn op_times(&self, timed: &[(u64, usize, usize)]) -> anyhow::Result<Vec<f64>> {
        let op_time_ns = read_op_times(timed);
        let ops = self.op_positions.len();
        let timed_positions = timed.iter().map(|t| (t.0 - self.start) % self.length);
        let cycled = self.op_positions.iter().copied().cycle().take(timed.len());
        if ops == 0 || !timed.len().is_multiple_of(ops) || !timed_positions.eq(cycled) {
            anyhow::bail!(
                "the timed iterations timed {} calls but the trace has {ops} ops an iteration",
                timed.len()
            );
        }
        let iterations = timed.len() / ops;
        Ok((0..ops)
            .map(|op| {
                median((0..iterations).map(|i| op_time_ns[i * ops + op])).map_or(0.0, |m| m.0)
            })
            .collect())
    }

    /// The plan made with `inputs` (this planning's, with op times) and its schedule in the
    /// terms of the running program; with the plan as `ITERMEM_PLAN_OUT` writes it.
    pub(super) fn schedule(
        self: &Arc<Planning>,
        inputs: ExecutorInputs,
        started: Instant,
    ) -> anyhow::Result<(SwapReady, PlanJson)> {
        let (reduced, kept, planned) = inputs.plan(&self.trace)?;
        let position_of = |tensor: usize| -> Option<u64> {
            match self.births.get(kept[tensor] as usize)? {
                Birth::Malloc(index) => index.checked_sub(self.synthetic),
                Birth::Resident(_) => None,
            }
        };
        let block_of = |tensor: usize| self.taken.iter().find(|t| t.0 == kept[tensor]);
        let mut slots = FxHashMap::default();
        for (tensor, t) in reduced.tensors.iter().enumerate() {
            if let (Some(position), Some(offset)) =
                (position_of(tensor), planned.pool.offsets[tensor])
            {
                slots.insert(position, (t.bytes, offset));
            }
        }
        let n_ops = reduced.ops.len();
        let mut op_at = vec![NOT_AN_OP; self.length as usize];
        for (op, &position) in self.op_positions.iter().enumerate() {
            op_at[position as usize] = op as u32;
        }
        let mut schedule = Schedule {
            op_at,
            outs_after: vec![Vec::new(); n_ops],
            leaves_after: vec![Vec::new(); n_ops],
            ins_before: vec![Vec::new(); n_ops],
            swaps: Vec::new(),
            residents: Vec::new(),
            host_bytes: 0,
            predicted_ns: planned.result.time_ns,
            predicted_base_ns: planned.result.base_time_ns,
            unfit: String::new(),
            made: None,
        };
        for (tensor, &offset) in planned.pool.offsets.iter().enumerate() {
            if let (Some(&(_, id, block)), Some(offset)) = (block_of(tensor), offset) {
                anyhow::ensure!(
                    offset.is_multiple_of(self.granularity),
                    "internal error: the pool put a block at offset {offset}, off its granule"
                );
                schedule.residents.push(Resident {
                    id,
                    va: block.va,
                    on_host: block.on_host,
                    offset,
                    rounded: block.rounded,
                    away_at_start: None,
                });
            }
        }
        for (planned_index, swap) in planned.plan.swaps.iter().enumerate() {
            let tensor = swap.tensor as usize;
            let resident = block_of(tensor).map(|&(_, id, block)| (id, block.va));
            let Some(position) = position_of(tensor).or(resident.map(|_| NOT_A_SLOT)) else {
                continue;
            };
            if let Some((id, _)) = resident.filter(|_| swap.wraps())
                && let Some(r) = schedule.residents.iter_mut().find(|r| r.id == id)
            {
                r.away_at_start = Some(schedule.host_bytes);
            }
            let bytes = reduced.tensors[tensor].bytes;
            let index = schedule.swaps.len() as u32;
            schedule.outs_after[swap.out_at].push(index);
            let early = swap.out_at < swap.out_after;
            if early {
                schedule.leaves_after[swap.out_after].push(index);
            }
            if let Some(need) = swap.in_before {
                let queued = planned.pool.swap_in_op(planned_index, swap.in_issue, need);
                schedule.ins_before[queued].push(index);
            }
            schedule.swaps.push(Planned {
                position,
                resident,
                host_offset: schedule.host_bytes,
                early,
            });
            schedule.host_bytes += bytes.div_ceil(HOST_ALIGN) * HOST_ALIGN;
        }
        let plan = PoolPlan {
            start: self.start,
            length: self.length,
            slots,
            footprint: planned.pool.footprint,
            peak_live: planned.pool.lower_bound,
        };
        let json = PlanJson::executed(
            self.name.display().to_string(),
            &reduced,
            &planned,
            started.elapsed(),
            inputs.clone(),
        );
        // Said when the plan cannot be installed (`PoolState::install`, which knows the device's
        // bytes then; the planner counted them at the timing iteration's start).
        let outside_pool_bytes = inputs.outside_pool_bytes;
        // The smallest limit said is one a plan keeps: where this plan does not fit, planned
        // again for what its pool needs (a plan for another budget lends differently).
        let fitting = if planned.fits {
            Some(planned.pool.footprint)
        } else {
            inputs.smallest_fitting_budget(&self.trace, &planned)
        };
        let program_peak = self.program_peak;
        let busiest = busiest_op_note(&reduced, inputs.budget_bytes);
        let min_bytes = self.config.min_bytes;
        schedule.unfit = match fitting.map(|budget| outside_pool_bytes + granules(budget)) {
            Some(smallest) if smallest >= program_peak => format!(
                "no plan lowers the program's peak of {program_peak} bytes, which is the \
                 smallest limit that can be kept: {}",
                busiest.unwrap_or_else(|| format!(
                    "every block it holds at its peak (a caching allocator's segment, say) is \
                     used then or too soon before and after to be away, or is smaller than \
                     ITERMEM_SWAP_MIN_BYTES ({min_bytes} bytes) and in no swap unit"
                ))
            ),
            Some(smallest) => format!(
                "the program holds {outside_pool_bytes} bytes outside the iteration's pool, \
                 whose smallest plan takes {} more; the smallest limit that can is {smallest} \
                 bytes{}",
                smallest - outside_pool_bytes,
                busiest.map(|note| format!(" ({note})")).unwrap_or_default()
            ),
            None => format!(
                "the program holds {outside_pool_bytes} bytes outside the iteration's pool, \
                 whose smallest plan here takes {} more, and no plan made again for that much \
                 keeps to it; the program's peak of {program_peak} bytes needs no plan{}",
                planned.pool.footprint,
                busiest.map(|note| format!(" ({note})")).unwrap_or_default()
            ),
        };
        schedule.made = Some(Arc::new(Made {
            planning: self.clone(),
            inputs,
            planned,
            json: json.clone(),
        }));
        let ms = started.elapsed().as_secs_f64() * 1e3;
        Ok(((plan, Arc::new(schedule), ms), json))
    }

    /// Writes the plan chosen to `ITERMEM_PLAN_OUT`, if given.
    pub(super) fn write(&self, json: &PlanJson) {
        let Some(path) = &self.config.plan_out else {
            return;
        };
        let written = serde_json::to_string_pretty(json)
            .map_err(std::io::Error::other)
            .and_then(|text| {
                super::super::ending::write_atomically(path, (text + "\n").as_bytes())
            });
        if let Err(err) = written {
            super::super::report(format_args!(
                "cannot write the plan to {}: {err}",
                path.display()
            ));
        }
    }
}

/// The op of `reduced` that alone uses more than the pool's `budget`, in words: no plan, at any
/// overhead, has its blocks away while it runs, which is why a limit cannot be kept (a
/// caching allocator's iteration copying between two of its segments, say).
fn busiest_op_note(reduced: &OpTrace, budget: u64) -> Option<String> {
    let busiest = crate::swap::busiest_op(reduced).filter(|busiest| busiest.bytes > budget)?;
    let sizes: Vec<String> = (busiest.tensors.iter())
        .map(|&(_, bytes)| bytes.to_string())
        .collect();
    Some(format!(
        "op {} of the iteration's {} ({}) itself uses {} bytes of its blocks ({}), which must \
         all be on the device while it runs, and the limit leaves the iteration's blocks \
         {budget} bytes",
        busiest.op,
        reduced.ops.len(),
        reduced.ops[busiest.op].name,
        busiest.bytes,
        sizes.join(" + ")
    ))
}

/// The planning thread's work: op times from the timing events, the op trace of the captured
/// iteration, the plan, and its schedule in the terms of the running program.
pub(super) fn make_schedule(
    config: &SwapConfig,
    copy: CopyModel,
    capture: Capture,
    timed: Vec<(u64, usize, usize)>,
    limit: u64,
    outside_pool_bytes: u64,
    blocks: Blocks,
) -> anyhow::Result<SwapReady> {
    let started = Instant::now();
    cuda::ensure_context();
    let planning = Planning::new(config, copy, capture, limit, outside_pool_bytes, blocks)?;
    let inputs = ExecutorInputs {
        op_time_ns: planning.op_times(&timed)?,
        ..planning.inputs.clone()
    };
    let planning = Arc::new(planning);
    let (ready, json) = planning.schedule(inputs, started)?;
    planning.write(&json);
    Ok(ready)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{CopyKind, MemKind};

    /// A window of launches alone is told apart from an inner loop by how much of what is live
    /// across it its calls use; a window that allocates or frees is no such window.
    #[test]
    fn a_window_without_mallocs_counts_the_live_bytes_its_calls_use() {
        let malloc = |id, size| {
            Event::new(
                0,
                EventKind::Malloc {
                    id,
                    addr: id * 4096,
                    size,
                    kind: MemKind::Device,
                    stream: 0,
                },
            )
        };
        let launch = |touched: &[AllocId]| {
            Event::new(
                0,
                EventKind::Launch {
                    kernel: 7,
                    stream: 0,
                    layout_known: true,
                    touched: touched.iter().copied().collect(),
                },
            )
        };
        let copy = Event::new(
            0,
            EventKind::Memcpy {
                dst: Some(3),
                src: None,
                bytes: 4,
                kind: CopyKind::HostToDevice,
                stream: 0,
                asynchronous: true,
            },
        );
        let capture = |window: Vec<Event>| {
            let mut events = vec![malloc(1, 100), malloc(2, 1000), malloc(3, 10)];
            let length = window.len() as u64;
            events.extend(window);
            Capture {
                start: 50,
                length,
                events,
                synthetic: 3,
                graphs: Vec::new(),
            }
        };
        let inner_loop = capture(vec![launch(&[1]), launch(&[1]), copy.clone()]);
        assert_eq!(inner_loop.use_of_live(), Some((110, 1110)));
        let iteration = capture(vec![launch(&[1, 2]), copy, launch(&[2])]);
        assert_eq!(iteration.use_of_live(), Some((1110, 1110)));
        let allocating = capture(vec![launch(&[1]), malloc(4, 10)]);
        assert_eq!(allocating.use_of_live(), None);
    }

    /// The live planner's window gets a marker before each graph launch's part of it: one
    /// that begins before the window is cut at its start, one that ends after it at its end.
    #[test]
    fn a_captured_window_marks_the_graph_launches_in_it() {
        let launch = |kernel| {
            Event::new(
                0,
                EventKind::Launch {
                    kernel,
                    stream: 0,
                    layout_known: true,
                    touched: Default::default(),
                },
            )
        };
        let resident = Event::new(
            0,
            EventKind::Malloc {
                id: 1,
                addr: 0,
                size: 8,
                kind: MemKind::Device,
                stream: 0,
            },
        );
        // One synthetic malloc, then the window's events 10..16.
        let mut events = vec![resident];
        events.extend((0..6).map(launch));
        let capture = Capture {
            start: 10,
            length: 6,
            events,
            synthetic: 1,
            graphs: vec![(8, 3), (12, 2), (15, 4), (30, 1)],
        };
        let marked: Vec<Option<u64>> = (capture.with_graph_launches().iter())
            .map(|e| match e.kind {
                EventKind::GraphLaunch { nodes, .. } => Some(nodes),
                _ => None,
            })
            .collect();
        let (g, e) = (Some, None);
        assert_eq!(
            marked,
            [e, g(1), e, e, g(2), e, e, e, g(1), e],
            "malloc, [10], 11, [12 13], 14, [15]"
        );
    }
}
