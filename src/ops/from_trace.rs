//! itermem's own traces ([`crate::trace`]) as an [`OpTrace`]: one detected iteration of kernel
//! launches and copies, over the device allocations.
//!
//! Decisions:
//! - **The iteration** is [`LoadOptions::window`] when given; otherwise it is chosen like the importer chooses one for SmartPool
//!   ([`crate::import::choose_iteration`] over the detector's segments, [`crate::detect`]), but
//!   on *every* access event (device mallocs and frees, copies, memsets, launches, numbered by
//!   [`crate::analysis::Numbering`], with the recorder's tokens, [`crate::analysis::token`])
//!   since the ops are launches; the window is the last complete iteration aligned with the boundary (the rule of
//!   [`crate::import::Recording::iteration_buffers`]: furthest from warm-up, starting where the
//!   live bytes are least). Without a period the whole trace is the window
//!   ([`OpStats::window_detected`] is false).
//! - **Ops are the launches, copies and memsets in the window**, in trace order. A launch reads
//!   and writes every device allocation it touches: the trace records which allocations a
//!   kernel's arguments point into, not the direction, and treating each as read and written
//!   is the safe side for a swap planner (a tensor a kernel might write must be on the device
//!   and must be copied out again). A copy reads its source and writes its destination when
//!   they are tracked device allocations; a memset writes its destination. A launch whose
//!   parameter layout is unknown touches nothing (it still takes time).
//! - **Tensors are the device allocations** (device, managed, stream-ordered; pinned host
//!   memory is not device memory). One allocated before the window and not freed before it is
//!   **resident**; one allocated inside is **born at the first op after its malloc** (the trace
//!   cannot say which kernel fills it; a malloc after the window's last op belongs to the next
//!   iteration and is left out); a free inside the window kills it **after the last op before
//!   the free**; never freed → alive to the end. An allocation with no op during its life is
//!   left out (counted).
//! - **Durations from the cost model**: the trace has no kernel times. A launch moves the bytes
//!   of the allocations it touches, each counted once (no direction is known, and counting
//!   every allocation as read and written would double a guess); device↔device copies and
//!   memsets move their bytes (a copy reads and writes them: 2×); host↔device copies take the
//!   host link ([`CostModel::host_copy_time_ns`](super::CostModel::host_copy_time_ns)). No FLOPs
//!   are known: launches are modelled as memory-bound. A caching allocator's pooled segments
//!   make "touched bytes" a whole segment: on PyTorch traces this overestimates.

use std::collections::HashMap;
use std::path::Path;

use super::error::{Location, OpsError, Problem};
use super::{
    LoadOptions, Loaded, Op, OpFormat, OpStats, Tensor, TensorId, finish, never_live, push_unique,
};
use crate::analysis::{Numbering, token};
use crate::detect::{self, DetectorConfig};
use crate::event::{AllocId, CopyKind, Event, EventKind, KernelId};
use crate::import::{ImportOptions, choose_device, choose_iteration, device_summaries};
use crate::trace::TraceFile;

pub(super) fn parse(
    path: &Path,
    bytes: Vec<u8>,
    options: &LoadOptions,
) -> Result<Loaded, OpsError> {
    let trace = TraceFile::from_bytes(path, bytes)
        .map_err(|err| OpsError::file(path, Problem::Trace(Box::new(err))))?;
    let mut events = Vec::new();
    for event in trace.events() {
        match event {
            Ok(event) => events.push(event),
            // A trace its process did not close: the events before the cut.
            Err(err) if err.is_cut() => break,
            Err(err) => return Err(OpsError::file(path, Problem::Trace(Box::new(err)))),
        }
    }
    let events = one_device(path, events, options.device)?;
    from_events(path, &events, options)
}

/// The events of one device (each device runs its own iteration; kernel names are every
/// device's), chosen as the importers choose one ([`crate::import::choose_device`]).
fn one_device(
    path: &Path,
    events: Vec<Event>,
    requested: Option<u32>,
) -> Result<Vec<Event>, OpsError> {
    let devices = device_summaries(&events);
    if requested.is_none() && devices.len() <= 1 {
        return Ok(events);
    }
    let options = ImportOptions {
        device: requested,
        ..ImportOptions::default()
    };
    let device = choose_device(path, &devices, &options)
        .map_err(|err| OpsError::file(path, Problem::NoOps(err.problem().to_string())))?;
    Ok(events
        .into_iter()
        .filter(|e| Some(e.device) == device || matches!(e.kind, EventKind::KernelName { .. }))
        .collect())
}

/// Converts recorded events (as read from an itermem trace named `name`) into one iteration of
/// ops; see the module doc for the rules.
pub fn from_events(
    name: &Path,
    events: &[Event],
    options: &LoadOptions,
) -> Result<Loaded, OpsError> {
    from_events_with_births(name, events, options).map(|(loaded, _)| loaded)
}

/// Where a tensor of [`from_events_with_births`] came from: what the swap executor needs to
/// find it again at run time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Birth {
    /// Allocated by the access event of this index (in every iteration).
    Malloc(u64),
    /// Live at the window's start: this allocation.
    Resident(AllocId),
}

/// [`from_events`], and the [`Birth`] of each tensor of the result.
pub fn from_events_with_births(
    name: &Path,
    events: &[Event],
    options: &LoadOptions,
) -> Result<(Loaded, Vec<Birth>), OpsError> {
    // Pass 1: tokens and live device bytes per access event, for the iteration choice.
    let mut tokens = Vec::new();
    let mut live_series = Vec::new();
    let mut live: HashMap<AllocId, (u64, u64)> = HashMap::new(); // device blocks: id → (index, size)
    let mut live_bytes = 0u64;
    let mut numbering = Numbering::default();
    for event in events {
        let Some(index) = numbering.number(&event.kind) else {
            continue;
        };
        let malloc_index = match &event.kind {
            EventKind::Free { id, .. } => live.get(id).map(|&(i, _)| i),
            _ => None,
        };
        let Some(t) = token(&event.kind, index, malloc_index) else {
            continue;
        };
        match &event.kind {
            EventKind::Malloc { id, size, .. } => {
                if let Some((_, old)) = live.insert(*id, (index, *size)) {
                    live_bytes = live_bytes.saturating_sub(old);
                }
                live_bytes = live_bytes.saturating_add(*size);
            }
            EventKind::Free { id, .. } => {
                if let Some((_, size)) = live.remove(id) {
                    live_bytes = live_bytes.saturating_sub(size);
                }
            }
            _ => {}
        }
        tokens.push(t);
        live_series.push(live_bytes);
    }
    let n = tokens.len() as u64;
    let config = DetectorConfig::for_cuda_events();
    let segments = detect::segments(&tokens, &live_series, &config)
        .map_err(|err| OpsError::file(name, Problem::Detector(err.to_string())))?;
    let iteration = choose_iteration(&tokens, &live_series, &segments, &config);
    let mut stats = OpStats {
        records: n,
        ..OpStats::default()
    };
    let (start, length) = match (options.window, iteration) {
        (Some((start, length)), _) => {
            if length == 0 || start.checked_add(length).is_none_or(|end| end > n) {
                return Err(OpsError::new(
                    name,
                    Location::File,
                    Problem::NoOps(format!(
                        "the window of events [{start}, {start} + {length}) is not inside the \
                         trace's {n} access events"
                    )),
                ));
            }
            stats.window_detected = true;
            (start, length)
        }
        (None, Some(it)) if it.period_events > 0 && it.period_events <= n => {
            stats.window_detected = true;
            it.last_window(n)
        }
        (None, _) => (0, n),
    };
    stats.window = Some((start, length));
    let end = start + length;

    // Pass 2: the window's ops and tensors. Before the window only the live device
    // allocations are followed (id → size); at the window's first event they become resident.
    let mut names: HashMap<KernelId, String> = HashMap::new();
    let mut pre_live: HashMap<AllocId, u64> = HashMap::new();
    let mut tensors: Vec<Option<Tensor>> = Vec::new();
    // Parallel to `tensors`.
    let mut births: Vec<Birth> = Vec::new();
    let mut by_alloc: HashMap<AllocId, TensorId> = HashMap::new(); // live device allocations
    let mut ops: Vec<Op> = Vec::new();
    let mut numbering = Numbering::default();
    let mut in_window = false;
    // Graph launches: the graph being read (its first op in the window, if any, and the events
    // of its nodes still to come), and each one's ops in the window.
    let mut graph: Option<(Option<usize>, u64)> = None;
    let mut graphs: Vec<std::ops::Range<usize>> = Vec::new();
    let make_resident = |pre_live: &mut HashMap<AllocId, u64>,
                         tensors: &mut Vec<Option<Tensor>>,
                         births: &mut Vec<Birth>,
                         by_alloc: &mut HashMap<AllocId, TensorId>| {
        let mut ids: Vec<(AllocId, u64)> = pre_live.drain().collect();
        ids.sort_unstable();
        for (id, bytes) in ids {
            let t = tensors.len() as TensorId;
            tensors.push(Some(Tensor {
                id: t,
                bytes,
                resident: true,
                dies_after: None,
                born_at: None,
            }));
            births.push(Birth::Resident(id));
            by_alloc.insert(id, t);
        }
    };
    for event in events {
        if let EventKind::KernelName { kernel, name } = &event.kind {
            names.insert(*kernel, name.clone());
            continue;
        }
        if let EventKind::GraphLaunch { nodes, .. } = &event.kind {
            graph = (*nodes > 0).then_some((None, *nodes));
            continue;
        }
        let is_op = matches!(
            event.kind,
            EventKind::Launch { .. } | EventKind::Memcpy { .. } | EventKind::Memset { .. }
        );
        if is_op && let Some((first, left)) = &mut graph {
            if numbering.count() >= start {
                first.get_or_insert(ops.len());
            }
            *left -= 1;
            if *left == 0 {
                if let Some(first) = *first {
                    graphs.push(first..ops.len() + 1);
                }
                graph = None;
            }
        }
        let Some(index) = numbering.number(&event.kind) else {
            continue;
        };
        if index >= end {
            break;
        }
        if index < start {
            match &event.kind {
                EventKind::Malloc { id, size, .. } => {
                    pre_live.insert(*id, *size);
                }
                EventKind::Free { id, .. } => {
                    pre_live.remove(id);
                }
                _ => {}
            }
            continue;
        }
        if !in_window {
            in_window = true;
            make_resident(&mut pre_live, &mut tensors, &mut births, &mut by_alloc);
        }
        let op_count = ops.len();
        match &event.kind {
            EventKind::Malloc { id, size, .. } => {
                // A reused id ends the older block.
                if let Some(old) = by_alloc.remove(id) {
                    kill(&mut tensors, old, op_count);
                }
                let t = tensors.len() as TensorId;
                tensors.push(Some(Tensor {
                    id: t,
                    bytes: *size,
                    resident: false,
                    dies_after: None,
                    // The next op; left out at the end if no op follows.
                    born_at: Some(op_count),
                }));
                births.push(Birth::Malloc(index));
                by_alloc.insert(*id, t);
            }
            EventKind::Free { id, .. } => match by_alloc.remove(id) {
                Some(t) => kill(&mut tensors, t, op_count),
                None => stats.ignored_releases += 1,
            },
            EventKind::Launch {
                kernel, touched, ..
            } => {
                let mut list = Vec::with_capacity(touched.len());
                let mut bytes = 0u64;
                for id in touched {
                    match by_alloc.get(id) {
                        Some(&t) => {
                            let before = list.len();
                            push_unique(&mut list, t);
                            if list.len() > before {
                                let size = tensors[t as usize].as_ref().map_or(0, |t| t.bytes);
                                bytes = bytes.saturating_add(size);
                            }
                        }
                        None => stats.ignored_accesses += 1,
                    }
                }
                let name = names
                    .get(kernel)
                    .cloned()
                    .unwrap_or_else(|| format!("kernel#{kernel}"));
                ops.push(Op {
                    name,
                    reads: list.clone(),
                    writes: list,
                    time_ns: options.cost.op_time_ns(0.0, bytes),
                    measured: false,
                    flops: 0.0,
                });
            }
            EventKind::Memcpy {
                dst,
                src,
                bytes,
                kind,
                ..
            } => {
                let mut tracked = |id: &Option<AllocId>| match id {
                    None => None,
                    Some(id) => {
                        let t = by_alloc.get(id).copied();
                        if t.is_none() {
                            stats.ignored_accesses += 1;
                        }
                        t
                    }
                };
                let reads: Vec<TensorId> = tracked(src).into_iter().collect();
                let writes: Vec<TensorId> = tracked(dst).into_iter().collect();
                let device_to_device = match kind {
                    CopyKind::DeviceToDevice => true,
                    CopyKind::Default => !reads.is_empty() && !writes.is_empty(),
                    _ => false,
                };
                let time_ns = if device_to_device {
                    options.cost.op_time_ns(0.0, bytes.saturating_mul(2))
                } else {
                    options.cost.host_copy_time_ns(*bytes)
                };
                let name = match kind {
                    CopyKind::HostToDevice => super::UPLOAD_OP,
                    CopyKind::DeviceToHost => super::DOWNLOAD_OP,
                    CopyKind::DeviceToDevice => "memcpy DtoD",
                    CopyKind::HostToHost => "memcpy HtoH",
                    CopyKind::Default => "memcpy",
                };
                ops.push(Op {
                    name: name.into(),
                    reads,
                    writes,
                    time_ns,
                    measured: false,
                    flops: 0.0,
                });
            }
            EventKind::Memset { dst, bytes, .. } => {
                let writes: Vec<TensorId> = match dst {
                    None => Vec::new(),
                    Some(id) => match by_alloc.get(id) {
                        Some(&t) => vec![t],
                        None => {
                            stats.ignored_accesses += 1;
                            Vec::new()
                        }
                    },
                };
                ops.push(Op {
                    name: "memset".into(),
                    reads: Vec::new(),
                    writes,
                    time_ns: options.cost.op_time_ns(0.0, *bytes),
                    measured: false,
                    flops: 0.0,
                });
            }
            _ => {}
        }
    }
    if !in_window {
        make_resident(&mut pre_live, &mut tensors, &mut births, &mut by_alloc);
    }
    if let Some((Some(first), _)) = graph {
        graphs.push(first..ops.len());
    }
    let n = ops.len();
    for range in graphs {
        let (first, end) = (range.start.min(n), range.end.min(n));
        one_unit(&mut ops[first..end], &tensors, first);
    }
    // Births after the last op: the next iteration's blocks (left out by `finish`).
    let n_ops = ops.len();
    for slot in &mut tensors {
        if slot
            .as_ref()
            .is_some_and(|t| t.born_at.is_some_and(|b| b >= n_ops))
        {
            *slot = None;
        }
    }
    if n_ops == 0 {
        return Err(OpsError::new(
            name,
            Location::File,
            Problem::NoOps(
                "the iteration has no kernel launch, copy or memset (record with itermem's \
                 interposer around a training loop)"
                    .into(),
            ),
        ));
    }
    let births = tensors
        .iter()
        .zip(births)
        .filter(|(t, _)| t.as_ref().is_some_and(|t| !never_live(t, n_ops)))
        .map(|(_, birth)| birth)
        .collect();
    let trace = finish(name, tensors, ops, &mut stats)?;
    let loaded = Loaded {
        trace,
        format: OpFormat::ItermemTrace,
        stats,
    };
    Ok((loaded, births))
}

/// The ops of one graph launch (the first being op `first`): the launch is enqueued at once,
/// so every tensor any of them uses must be resident from the first to the last, as if each
/// op used them all (where the tensor is alive then: a block another thread allocates or
/// frees among the launch's events is left as it is).
fn one_unit(ops: &mut [Op], tensors: &[Option<Tensor>], first: usize) {
    let mut all: Vec<TensorId> = Vec::new();
    for op in ops.iter() {
        for &t in op.reads.iter().chain(&op.writes) {
            push_unique(&mut all, t);
        }
    }
    for (at, op) in (first..).zip(ops.iter_mut()) {
        for &t in &all {
            let alive = tensors[t as usize].as_ref().is_some_and(|tensor| {
                tensor.born_at.is_none_or(|born| born <= at)
                    && tensor.dies_after.is_none_or(|dies| at <= dies)
            });
            if alive {
                push_unique(&mut op.reads, t);
                push_unique(&mut op.writes, t);
            }
        }
    }
}

/// Ends tensor `t`'s life at a free seen after `op_count` ops: it dies after op
/// `op_count − 1`; with no op since its birth (or before the first op) it is never live
/// during an op and is left out (`finish` counts it).
fn kill(tensors: &mut [Option<Tensor>], t: TensorId, op_count: usize) {
    let slot = &mut tensors[t as usize];
    let Some(tensor) = slot else {
        return;
    };
    let first = tensor.born_at.unwrap_or(0);
    if op_count == 0 || op_count <= first {
        *slot = None;
    } else {
        tensor.dies_after = Some(op_count - 1);
    }
}
