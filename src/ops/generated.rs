//! Generated dispatch traces (`gen_*.jsonl.gz`: a `TorchDispatchMode` tracer under
//! `FakeTensorMode`, one steady-state iteration) as an [`OpTrace`].
//!
//! One JSON event per line: `{"ev":"meta"}`; `{"ev":"pre","id","bytes"}` a storage alive
//! before the step; `{"ev":"alloc","id","bytes","op"}` a storage created by op `op`;
//! `{"ev":"free","id","op"}`; `{"ev":"op","i","name","r","w","flops"}` (ops numbered 0, 1, …
//! in order); `{"ev":"end","op"}`. Ids name storages, so views already share their storage's id.
//!
//! Decisions:
//! - **`pre` storages are resident** wherever the line appears (the tracer writes it just
//!   before the first op that uses it).
//! - **`alloc` at op `a`: born at op `a`** (the tracer writes allocations before the op record
//!   that makes them; every real file has the storage in that op's `w`).
//! - **`free` at op `k`: dies after the last op before `k`.** The tracer writes a free before
//!   the record of op `k` (the storage was dropped before op `k` finished, usually between ops
//!   `k − 1` and `k`); on the real files the last access is always before `k`.
//! - **Dataless ops are dropped**: `prim.*` (device queries: half of the ops of the ResNet-50
//!   file), `profiler.*` markers and the aten view and metadata ops (`view`, `t`, `detach`,
//!   `expand`, `permute`, … listed in `VIEW_OPS`) touch no data; the tracer lists their
//!   storage in `r` (and `w` for views), which would be an access that keeps a tensor on the
//!   device for nothing. An op that allocates is always kept. Births and deaths at a dropped op
//!   move to the next and the previous kept op.
//! - **Durations from the cost model** (the file has no times): `flops` from
//!   `torch.utils.flop_counter` (0 for elementwise ops, which are memory-bound anyway) and
//!   bytes = Σ bytes of the storages read + Σ bytes of the storages written (an in-place op
//!   counts its tensor twice: read and written). A storage's size bounds what a view of it
//!   moves, so slicing ops are overestimated. `aten.empty*`/`new_empty*` allocate without a
//!   kernel: duration 0.
//! - **A `free` of an id never declared is ignored** (counted); a second free of an id, a
//!   duplicate id, an op referring to an unknown id or ops out of order are errors naming the
//!   line.

use std::collections::HashMap;
use std::path::Path;

use serde::Deserialize;

use super::error::{OpsError, Problem};
use super::{LoadOptions, Loaded, Op, OpFormat, OpStats, Tensor, TensorId, finish, push_unique};

/// aten ops that only make a view or read metadata (no kernel, no data moved).
const VIEW_OPS: &[&str] = &[
    "_reshape_alias",
    "_unsafe_view",
    "adjoint",
    "alias",
    "as_strided",
    "detach",
    "diagonal",
    "expand",
    "expand_as",
    "indices",
    "lift_fresh",
    "movedim",
    "narrow",
    "permute",
    "select",
    "slice",
    "split",
    "split_with_sizes",
    "squeeze",
    "swapaxes",
    "swapdims",
    "t",
    "transpose",
    "unbind",
    "unflatten",
    "unfold",
    "unsqueeze",
    "values",
    "view",
    "view_as",
    "view_as_complex",
    "view_as_real",
];

/// aten ops that allocate without launching a kernel.
const ALLOC_OPS: &[&str] = &[
    "empty",
    "empty_like",
    "empty_permuted",
    "empty_strided",
    "new_empty",
    "new_empty_strided",
];

/// `(namespace, base name)` of `aten.view.default`.
fn split_name(name: &str) -> (&str, &str) {
    let mut parts = name.split('.');
    let ns = parts.next().unwrap_or("");
    (ns, parts.next().unwrap_or(""))
}

/// Whether an op touches no data (see the module doc).
pub(crate) fn is_dataless(name: &str) -> bool {
    match split_name(name) {
        ("prim" | "profiler", _) => true,
        ("aten", base) => VIEW_OPS.contains(&base),
        _ => false,
    }
}

/// Whether an op allocates without a kernel.
pub(crate) fn is_alloc_only(name: &str) -> bool {
    matches!(split_name(name), ("aten", base) if ALLOC_OPS.contains(&base))
}

#[derive(Deserialize)]
#[serde(tag = "ev", rename_all = "lowercase")]
enum Record {
    Meta {},
    Pre {
        id: u64,
        bytes: u64,
    },
    Alloc {
        id: u64,
        bytes: u64,
        op: u64,
    },
    Free {
        id: u64,
        op: u64,
    },
    Op {
        i: u64,
        name: String,
        #[serde(default)]
        r: Vec<u64>,
        #[serde(default)]
        w: Vec<u64>,
        #[serde(default)]
        flops: f64,
    },
    End {
        op: Option<u64>,
    },
}

struct FileOp {
    line: u64,
    name: String,
    r: Vec<u64>,
    w: Vec<u64>,
    flops: f64,
    allocates: bool,
}

struct Storage {
    bytes: u64,
    /// File op that creates it (None: `pre`).
    alloc_op: Option<u64>,
    /// File op before which it is freed.
    free_op: Option<u64>,
}

pub(super) fn parse(path: &Path, bytes: &[u8], options: &LoadOptions) -> Result<Loaded, OpsError> {
    let mut stats = OpStats::default();
    let mut storages: Vec<Storage> = Vec::new();
    let mut by_id: HashMap<u64, usize> = HashMap::new();
    let mut ops: Vec<FileOp> = Vec::new();
    let mut end: Option<(u64, u64)> = None; // (line, op)
    for (index, raw) in bytes.split(|&b| b == b'\n').enumerate() {
        let line = index as u64 + 1;
        if raw.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        stats.records += 1;
        let err = |problem| OpsError::line(path, line, problem);
        let record: Record = serde_json::from_slice(raw).map_err(|e| {
            // An unknown `ev` is a record kind we do not know; anything else is bad JSON.
            let msg = e.to_string();
            if msg.starts_with("unknown variant") {
                let kind = msg.split('`').nth(1).unwrap_or("?").to_string();
                err(Problem::UnknownRecord { kind })
            } else {
                err(Problem::Json(msg))
            }
        })?;
        if end.is_some() {
            return Err(err(Problem::OutOfPlace {
                found: "a record".into(),
                expected: "nothing after the `end` record".into(),
            }));
        }
        let mut declare = |id: u64, storage: Storage| {
            if by_id.insert(id, storages.len()).is_some() {
                return Err(err(Problem::DuplicateTensor {
                    name: format!("id {id}"),
                }));
            }
            storages.push(storage);
            Ok(())
        };
        match record {
            Record::Meta {} => {}
            Record::Pre { id, bytes } => declare(
                id,
                Storage {
                    bytes,
                    alloc_op: None,
                    free_op: None,
                },
            )?,
            Record::Alloc { id, bytes, op } => declare(
                id,
                Storage {
                    bytes,
                    alloc_op: Some(op),
                    free_op: None,
                },
            )?,
            Record::Free { id, op } => match by_id.get(&id) {
                None => stats.ignored_releases += 1,
                Some(&s) => {
                    if storages[s].free_op.replace(op).is_some() {
                        return Err(err(Problem::UseAfterRelease {
                            name: format!("id {id} (freed twice)"),
                        }));
                    }
                }
            },
            Record::Op {
                i,
                name,
                r,
                w,
                flops,
            } => {
                if i != ops.len() as u64 {
                    return Err(err(Problem::BadValue {
                        field: "i",
                        value: i.to_string(),
                        expected: "ops numbered 0, 1, 2, … in file order",
                    }));
                }
                if !(flops.is_finite() && flops >= 0.0) {
                    return Err(err(Problem::BadValue {
                        field: "flops",
                        value: flops.to_string(),
                        expected: "a FLOP count ≥ 0",
                    }));
                }
                ops.push(FileOp {
                    line,
                    name,
                    r,
                    w,
                    flops,
                    allocates: false,
                });
            }
            Record::End { op } => end = Some((line, op.unwrap_or(ops.len() as u64))),
        }
    }
    if let Some((line, op)) = end
        && op != ops.len() as u64
    {
        return Err(OpsError::line(
            path,
            line,
            Problem::BadValue {
                field: "op",
                value: op.to_string(),
                expected: "the number of ops in the file",
            },
        ));
    }
    let n_file = ops.len();
    for s in &storages {
        if let Some(a) = s.alloc_op
            && let Some(op) = usize::try_from(a).ok().and_then(|a| ops.get_mut(a))
        {
            op.allocates = true;
        }
    }

    // Kept ops and the maps between the numberings.
    let keep: Vec<bool> = ops
        .iter()
        .map(|op| op.allocates || !is_dataless(&op.name))
        .collect();
    let mut new_index = vec![None; n_file];
    let mut kept = 0usize;
    for (i, &k) in keep.iter().enumerate() {
        if k {
            new_index[i] = Some(kept);
            kept += 1;
        }
    }
    // next_kept[i]: first kept op at file index ≥ i; kept_before[k]: kept ops at file index < k.
    let mut next_kept = vec![None; n_file + 1];
    for i in (0..n_file).rev() {
        next_kept[i] = new_index[i].or(next_kept[i + 1]);
    }
    let mut kept_before = vec![0usize; n_file + 1];
    for i in 0..n_file {
        kept_before[i + 1] = kept_before[i] + usize::from(keep[i]);
    }
    stats.dropped_ops = (n_file - kept) as u64;

    let tensors: Vec<Option<Tensor>> = storages
        .iter()
        .enumerate()
        .map(|(index, s)| {
            let born_at = match s.alloc_op {
                None => None,
                Some(a) => {
                    let a = usize::try_from(a).unwrap_or(usize::MAX).min(n_file);
                    // Allocated after the last op: never live during one.
                    Some(next_kept[a]?)
                }
            };
            let dies_after = match s.free_op {
                None => None,
                Some(k) => {
                    let k = usize::try_from(k).unwrap_or(usize::MAX).min(n_file);
                    // Freed before the first kept op: never live during one.
                    Some(kept_before[k].checked_sub(1)?)
                }
            };
            Some(Tensor {
                id: index as TensorId,
                bytes: s.bytes,
                resident: s.alloc_op.is_none(),
                dies_after,
                born_at,
            })
        })
        .collect();

    let mut out_ops = Vec::with_capacity(kept);
    for (op, _) in ops.into_iter().zip(&keep).filter(|(_, k)| **k) {
        let lookup = |ids: &[u64]| -> Result<(Vec<TensorId>, u64), OpsError> {
            let mut list = Vec::with_capacity(ids.len());
            let mut bytes = 0u64;
            for id in ids {
                let &s = by_id.get(id).ok_or_else(|| {
                    OpsError::line(
                        path,
                        op.line,
                        Problem::UnknownTensor {
                            name: format!("id {id}"),
                        },
                    )
                })?;
                let before = list.len();
                push_unique(&mut list, s as TensorId);
                if list.len() > before {
                    bytes = bytes.saturating_add(storages[s].bytes);
                }
            }
            Ok((list, bytes))
        };
        let (reads, read_bytes) = lookup(&op.r)?;
        let (writes, written_bytes) = lookup(&op.w)?;
        let time_ns = if is_alloc_only(&op.name) {
            0.0
        } else {
            options
                .cost
                .op_time_ns(op.flops, read_bytes.saturating_add(written_bytes))
        };
        out_ops.push(Op {
            name: op.name,
            reads,
            writes,
            time_ns,
            measured: false,
            flops: op.flops,
        });
    }
    let trace = finish(path, tensors, out_ops, &mut stats)?;
    Ok(Loaded {
        trace,
        format: OpFormat::Generated,
        stats,
    })
}
