//! SINGA's memory access logs (`crate::import`'s `singa.rs` gives the line format and its
//! source) as an [`super::OpTrace`]: the log becomes the events of an itermem trace and takes
//! the path of one (`from_trace.rs`), which finds the iteration and makes the ops.
//!
//! Decisions:
//! - **Ops.** The log names no op, only accesses. With `Layer` lines, an op is the accesses
//!   from one `Layer` line to the next, named after the layer. Without, an op is a run of
//!   `Read` lines followed by a run of `Mutable` lines (an op reads its inputs, then writes its
//!   outputs: a `Read` after a `Mutable` starts the next op), named `singa op (R reads, W
//!   writes)` (the iteration detector sees ops of the same shape as the same kernel). A `Free`
//!   ends the op before it (the block was used by then); a `Malloc` does not (an op allocates
//!   its outputs before writing them).
//! - **Each op reads and writes every block it accesses**, as every launch of an itermem trace
//!   does (`from_trace.rs`): the safe side for a swap planner. An access to an address with no
//!   live block is ignored (counted).
//! - **Durations from the cost model**, as for itermem traces: the log's times are whole
//!   milliseconds, coarser than most ops.
//! - **A log without `Read` or `Mutable` lines** (the allocation logs) has no ops: `plan` says
//!   so, and `replay` replays its allocations instead, as for any allocation recording.

use std::collections::HashMap;
use std::path::Path;

use super::error::{Location, OpsError, Problem};
use super::{LoadOptions, Loaded, OpFormat};
use crate::event::{AllocId, Event, EventKind, KernelId, MemKind, Touched};
use crate::import::singa::{self, Record};

pub(super) fn parse(path: &Path, bytes: &[u8], options: &LoadOptions) -> Result<Loaded, OpsError> {
    let records = singa::parse(bytes).map_err(|err| {
        OpsError::new(
            path,
            Location::Line(err.line),
            Problem::BadLine(err.message),
        )
    })?;
    if !singa::has_accesses(&records) {
        return Err(OpsError::file(
            path,
            Problem::NoOps(
                "a SINGA allocation log (Malloc and Free lines only) records no accesses: \
                 plan needs the access log (Read and Mutable lines)"
                    .into(),
            ),
        ));
    }
    let events = to_events(&records);
    let mut loaded = super::from_events(path, &events, options)?;
    loaded.format = OpFormat::SingaLog;
    Ok(loaded)
}

/// The log's records as the events of an itermem trace, accesses grouped into launches.
fn to_events(records: &[(u64, Record<'_>)]) -> Vec<Event> {
    let layered = records
        .iter()
        .any(|(_, record)| matches!(record, Record::Layer { .. }));
    let mut events = Vec::new();
    let mut kernels: HashMap<String, KernelId> = HashMap::new();
    let mut live: HashMap<u64, AllocId> = HashMap::new();
    let mut next_id: AllocId = 1;
    let mut now_ns = 0u64;
    let mut op = OpBuilder::default();
    for (_, record) in records {
        match *record {
            Record::Malloc {
                addr,
                size,
                time_us,
            } => {
                now_ns = time_us.saturating_mul(1000);
                live.insert(addr, next_id);
                events.push(Event::new(
                    now_ns,
                    EventKind::Malloc {
                        id: next_id,
                        addr,
                        size,
                        kind: MemKind::Device,
                        stream: 0,
                    },
                ));
                next_id += 1;
            }
            Record::Free { addr, time_us } => {
                op.close(now_ns, &mut kernels, &mut events);
                now_ns = time_us.saturating_mul(1000);
                // A free of a block allocated before the log began has no beginning: dropped.
                if let Some(id) = live.remove(&addr) {
                    events.push(Event::new(now_ns, EventKind::Free { id, stream: 0 }));
                }
            }
            Record::Layer { name, time_us } => {
                op.close(now_ns, &mut kernels, &mut events);
                now_ns = time_us.map_or(now_ns, |t| t.saturating_mul(1000));
                op.name = Some(name.to_string());
            }
            Record::Access {
                addr,
                write,
                time_us,
            } => {
                if !layered && !write && op.writes > 0 {
                    op.close(now_ns, &mut kernels, &mut events);
                }
                now_ns = time_us.map_or(now_ns, |t| t.saturating_mul(1000));
                // Not live: the launch names only live blocks; from_trace counts the rest.
                let id = live.get(&addr).copied().unwrap_or(0);
                if write {
                    op.writes += 1;
                } else {
                    op.reads += 1;
                }
                if !op.touched.contains(&id) {
                    op.touched.push(id);
                }
            }
        }
    }
    op.close(now_ns, &mut kernels, &mut events);
    events
}

/// The op being read: its accesses so far and, in a layered log, its layer's name.
#[derive(Default)]
struct OpBuilder {
    name: Option<String>,
    touched: Touched,
    reads: u32,
    writes: u32,
}

impl OpBuilder {
    /// Emits the op as a launch (with its kernel's name before its first launch) if it has
    /// accesses, and starts the next.
    fn close(
        &mut self,
        now_ns: u64,
        kernels: &mut HashMap<String, KernelId>,
        events: &mut Vec<Event>,
    ) {
        let op = std::mem::take(self);
        if op.reads + op.writes == 0 {
            return;
        }
        let name = op
            .name
            .unwrap_or_else(|| format!("singa op ({} reads, {} writes)", op.reads, op.writes));
        let next = kernels.len() as KernelId;
        let kernel = *kernels.entry(name.clone()).or_insert_with(|| {
            events.push(Event::new(
                now_ns,
                EventKind::KernelName { kernel: next, name },
            ));
            next
        });
        events.push(Event::new(
            now_ns,
            EventKind::Launch {
                kernel,
                stream: 0,
                layout_known: true,
                touched: op.touched,
            },
        ));
    }
}
