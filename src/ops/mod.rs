//! One training iteration at the level of operations: which tensors each op reads and writes,
//! when each tensor is born and dies, and how long each op takes. This is what AutoSwap plans
//! on (`crate::swap`): the access pattern between a tensor's uses decides whether it can be
//! copied to host memory and back in time.
//!
//! Conventions (every importer converts to them; [`OpTrace::validate`] checks them):
//! - ops are numbered 0..n in execution order; a tensor born at op `b` is live from op `b` on
//!   (the importers that know which op creates a tensor — DTR logs, generated traces — make `b`
//!   that op, which writes it; an itermem trace only knows the `cudaMalloc`, so `b` is the first
//!   op after it); a tensor dying at op `d` is dead after op `d` (its last use may be `d`);
//! - a tensor alive before the iteration (a constant, a parameter, optimizer state, an input) is
//!   `resident` from the start; one never freed in the iteration lives to its end (and, being
//!   resident at the start of the next, is alive across the iteration boundary);
//! - a tensor is live at op `i` when `(resident or born_at ≤ i) and (dies_after ≥ i or never
//!   dies)`: lifetimes are the half-open op ranges `[born_at, dies_after + 1)` of the planner
//!   (`crate::plan`), and every access of a tensor lies inside its lifetime;
//! - sizes are bytes of the tensor's storage (views and aliases share their storage's tensor);
//! - `reads` and `writes` have no duplicates; an in-place op has its tensor in both.
//!
//! Equations the helpers keep: `live_bytes()[i] = Σ bytes of the tensors live at op i`
//! (= resident + born at ≤ i − dead after < i), `peak() = max_i live_bytes()[i]` (first such
//! op), `accesses(t) = sorted { i : t ∈ ops[i].reads ∪ ops[i].writes }`.
//!
//! # Importers
//!
//! [`load`] reads a file, gzip-compressed or not, and recognises its format by content (never by
//! name):
//!
//! | format | recognised by | durations |
//! |---|---|---|
//! | DTR op log (uwsampl/dtr-prototype, `dtr.rs`) | JSON lines with `"INSTRUCTION"` | measured (`TIME`, ns) |
//! | generated dispatch trace (`generated.rs`) | JSON lines with `"ev"` | cost model (FLOPs, bytes) |
//! | itermem trace ([`crate::trace`], `from_trace.rs`) | the magic `ITERMEM\0` | cost model (bytes touched) |
//! | SINGA memory access log (`singa.rs`) | a first line `Malloc <ptr> <size> <ms>`, `Free`, `Read`, `Mutable` or `Layer` | cost model (bytes touched) |
//!
//! Gzip input decompresses to at most [`LoadOptions::max_decompressed`] bytes (1 GiB unless
//! raised, `--max-decompressed`) and is recognised from its first 64 KiB before more is
//! decompressed, as in [`crate::import`]: a gzip bomb costs at most the limit.
//!
//! Each importer's module doc lists its modelling decisions. What all of them share:
//!
//! - **Ops that touch no data are not ops.** A view (DTR `CALL` whose results all alias an
//!   argument; `aten.view`, `aten.t`, `aten.detach`, … in a generated trace), a metadata query
//!   (`prim.device`) or a profiler marker launches no kernel and moves no byte: it is dropped,
//!   so AutoSwap does not see an "access" that would keep a tensor on the device. What was
//!   dropped is counted in [`OpStats`].
//! - **A tensor that is never live during an op is left out** (a constant released before the
//!   first op, a block allocated and freed between two launches), and counted.
//! - **Errors, never panics**: a malformed file gives an [`OpsError`] naming the file and the
//!   line (or event); the result of every importer is checked with [`OpTrace::validate`].
//!
//! The cost model is [`cost::CostModel`]; [`calibrate`] compares it with measured times.
//!
//! Generated iterations: [`random`] (seeded random ones, for property tests and benchmarks) and
//! [`tree`] (a Tree-LSTM: thousands of tensors, none of 1 MiB); [`to_dtr_log`] writes one as
//! a DTR log that [`load`] reads back.

pub mod calibrate;
pub mod cost;
mod dtr;
mod error;
mod from_trace;
mod generated;
pub mod random;
mod singa;
pub mod tree;

#[cfg(test)]
pub(crate) mod tests;

use std::path::Path;

pub use cost::{CostError, CostModel};
pub use dtr::to_dtr_log;
pub use error::{InvariantError, Location, OpsError, Problem};
pub use from_trace::{Birth, from_events, from_events_with_births};

/// Index of a tensor in [`OpTrace::tensors`].
pub type TensorId = u32;

#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    pub id: TensorId,
    pub bytes: u64,
    /// Alive before the iteration starts (constant, parameter, optimizer state, input).
    pub resident: bool,
    /// Op after which the tensor is dead (None: alive to the end of the iteration).
    pub dies_after: Option<usize>,
    /// Op that creates it (None for resident tensors).
    pub born_at: Option<usize>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Op {
    pub name: String,
    /// Tensors read (inputs), without duplicates.
    pub reads: Vec<TensorId>,
    /// Tensors written (outputs, and inputs updated in place), without duplicates.
    pub writes: Vec<TensorId>,
    /// Duration in nanoseconds: measured when `measured`, else from the cost model.
    pub time_ns: f64,
    pub measured: bool,
    /// Floating-point operations (0 when unknown).
    pub flops: f64,
}

/// Name of the op of a host-to-device copy in an itermem trace ([`Op::host_copy`]).
pub const UPLOAD_OP: &str = "memcpy HtoD";
/// Name of the op of a device-to-host copy in an itermem trace.
pub const DOWNLOAD_OP: &str = "memcpy DtoH";

/// The direction of an op that is a copy between host and device memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostCopy {
    /// Writes its one tensor from host memory.
    Upload,
    /// Reads its one tensor into host memory.
    Download,
}

impl Op {
    /// Whether the op is a recorded `cudaMemcpy*` between host and device memory (itermem
    /// traces; other formats have no such op): the replay makes the same copy.
    pub fn host_copy(&self) -> Option<HostCopy> {
        match (self.name.as_str(), self.reads.len(), self.writes.len()) {
            (UPLOAD_OP, 0, 1) => Some(HostCopy::Upload),
            (DOWNLOAD_OP, 1, 0) => Some(HostCopy::Download),
            _ => None,
        }
    }
}

/// One iteration of a training program, op by op.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OpTrace {
    /// Where it was read from (for reports).
    pub source: String,
    pub tensors: Vec<Tensor>,
    pub ops: Vec<Op>,
}

impl Tensor {
    /// Whether the tensor is live at op `op` (see the module conventions).
    pub fn is_live_at(&self, op: usize) -> bool {
        self.born_at.is_none_or(|b| b <= op) && self.dies_after.is_none_or(|d| d >= op)
    }
}

/// The highest live bytes of a trace and the first op at which they are reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Peak {
    pub op: usize,
    pub bytes: u64,
}

impl OpTrace {
    /// The ops that access `tensor` (read or write), ascending, each once. O(total accesses);
    /// use [`OpTrace::access_lists`] for every tensor at once.
    pub fn accesses(&self, tensor: TensorId) -> Vec<usize> {
        self.ops
            .iter()
            .enumerate()
            .filter(|(_, op)| op.reads.contains(&tensor) || op.writes.contains(&tensor))
            .map(|(i, _)| i)
            .collect()
    }

    /// For every tensor (indexed by id), the ops that access it, ascending, each once. Ids out
    /// of range (an unvalidated trace) are skipped.
    pub fn access_lists(&self) -> Vec<Vec<usize>> {
        let mut lists = vec![Vec::new(); self.tensors.len()];
        for (i, op) in self.ops.iter().enumerate() {
            for &t in op.reads.iter().chain(&op.writes) {
                if let Some(list) = lists.get_mut(t as usize) {
                    let list: &mut Vec<usize> = list;
                    if list.last() != Some(&i) {
                        list.push(i);
                    }
                }
            }
        }
        lists
    }

    /// Bytes of the resident tensors (live before the first op).
    pub fn resident_bytes(&self) -> u64 {
        self.tensors
            .iter()
            .filter(|t| t.resident)
            .map(|t| t.bytes)
            .sum()
    }

    /// `live_bytes()[i]`: bytes of the tensors live at op `i` (resident or born at ≤ i, not
    /// dead after an op < i): the memory op `i` needs, its outputs and its last-used inputs
    /// included. One entry per op; O(ops + tensors).
    pub fn live_bytes(&self) -> Vec<u64> {
        let n = self.ops.len();
        // delta[i]: bytes becoming live at op i (i64 arithmetic on u64 sizes would overflow
        // for absurd inputs; two u64 arrays cannot).
        let mut born = vec![0u64; n + 1];
        let mut dead = vec![0u64; n + 1];
        for t in &self.tensors {
            let start = t.born_at.unwrap_or(0).min(n);
            born[start] = born[start].saturating_add(t.bytes);
            if let Some(d) = t.dies_after {
                let end = d.saturating_add(1).min(n);
                dead[end] = dead[end].saturating_add(t.bytes);
            }
        }
        let mut live = 0u64;
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            live = live.saturating_add(born[i]).saturating_sub(dead[i]);
            out.push(live);
        }
        out
    }

    /// The highest [`OpTrace::live_bytes`] and the first op reaching it (`None` without ops).
    pub fn peak(&self) -> Option<Peak> {
        let mut best: Option<Peak> = None;
        for (op, bytes) in self.live_bytes().into_iter().enumerate() {
            if best.is_none_or(|p| bytes > p.bytes) {
                best = Some(Peak { op, bytes });
            }
        }
        best
    }

    /// Sum of the op durations, ns.
    pub fn total_time_ns(&self) -> f64 {
        self.ops.iter().map(|op| op.time_ns).sum()
    }

    /// Checks every convention of the module doc; the first rule broken is returned.
    /// O(ops + tensors + accesses).
    pub fn validate(&self) -> Result<(), InvariantError> {
        let n = self.ops.len();
        let err = |tensor: Option<TensorId>, op: Option<usize>, rule: String| InvariantError {
            tensor,
            op,
            rule,
        };
        for (index, t) in self.tensors.iter().enumerate() {
            let id = Some(t.id);
            if t.id as usize != index {
                return Err(err(id, None, format!("stored at index {index}")));
            }
            if t.resident != t.born_at.is_none() {
                return Err(err(
                    id,
                    None,
                    "is resident but born at an op, or neither".to_string(),
                ));
            }
            if let Some(b) = t.born_at.filter(|&b| b >= n) {
                return Err(err(id, None, format!("born at op {b} of {n}")));
            }
            if let Some(d) = t.dies_after {
                if d >= n {
                    return Err(err(id, None, format!("dies after op {d} of {n}")));
                }
                if t.born_at.is_some_and(|b| d < b) {
                    return Err(err(id, Some(d), "dies before it is born".to_string()));
                }
            }
        }
        let mut seen: Vec<usize> = vec![usize::MAX; self.tensors.len()];
        for (i, op) in self.ops.iter().enumerate() {
            if !(op.time_ns.is_finite() && op.time_ns >= 0.0) {
                return Err(err(None, Some(i), format!("duration {} ns", op.time_ns)));
            }
            if !(op.flops.is_finite() && op.flops >= 0.0) {
                return Err(err(None, Some(i), format!("{} FLOPs", op.flops)));
            }
            for (list, what) in [(&op.reads, "reads"), (&op.writes, "writes")] {
                for &t in list {
                    let Some(tensor) = self.tensors.get(t as usize) else {
                        return Err(err(
                            Some(t),
                            Some(i),
                            format!("{what} a tensor that does not exist"),
                        ));
                    };
                    // `seen[t] == i` once per list: a second hit in the same list is a duplicate.
                    if seen[t as usize] == i {
                        return Err(err(Some(t), Some(i), format!("listed twice in {what}")));
                    }
                    seen[t as usize] = i;
                    if !tensor.is_live_at(i) {
                        return Err(err(
                            Some(t),
                            Some(i),
                            format!("{what} it outside its lifetime"),
                        ));
                    }
                }
                // Reset between the lists: an in-place op has its tensor in both.
                for &t in list {
                    if let Some(s) = seen.get_mut(t as usize) {
                        *s = usize::MAX;
                    }
                }
            }
        }
        Ok(())
    }
}

/// The formats [`load`] reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpFormat {
    /// A DTR op log (uwsampl/dtr-prototype).
    DtrLog,
    /// A generated dispatch trace (TorchDispatchMode under FakeTensorMode).
    Generated,
    /// An itermem trace ([`crate::trace`]).
    ItermemTrace,
    /// A SINGA memory access log (`Read`/`Mutable` lines between `Malloc` and `Free`).
    SingaLog,
}

/// How [`load_with`] converts a file.
#[derive(Clone, Debug, PartialEq)]
pub struct LoadOptions {
    /// Durations of ops the file does not time (generated and itermem traces).
    pub cost: CostModel,
    /// itermem traces: take these access events `[start, start + length)` as the iteration
    /// instead of choosing one (the swap executor plans the iteration it timed, and
    /// `itermem plan --timings` reproduces that plan from the trace).
    pub window: Option<(u64, u64)>,
    /// The most bytes a gzip-compressed file may decompress to (a guard against gzip bombs,
    /// as in [`crate::import`]; the CLI's `--max-decompressed`); plain files are not limited.
    pub max_decompressed: u64,
    /// itermem traces of several devices: the device whose iteration to take (None: the one
    /// with the most allocations and frees, as [`crate::import`] chooses).
    pub device: Option<u32>,
}

impl Default for LoadOptions {
    fn default() -> LoadOptions {
        LoadOptions {
            cost: CostModel::default(),
            window: None,
            max_decompressed: crate::content::DEFAULT_MAX_DECOMPRESSED,
            device: None,
        }
    }
}

/// What an importer left out or inferred, for reports.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OpStats {
    /// Records read (lines, or access events of an itermem trace).
    pub records: u64,
    /// Ops of the file dropped because they touch no data (views, metadata, markers).
    pub dropped_ops: u64,
    /// Their measured time (DTR logs; 0 elsewhere), ns.
    pub dropped_time_ns: f64,
    /// Tensors left out because they are never live during an op.
    pub dropped_tensors: u64,
    /// Releases (DTR) or frees (generated, itermem) of names the file never defined: ignored.
    pub ignored_releases: u64,
    /// Accesses to tensors that are not live device memory (itermem launches touching pinned
    /// host memory or freed blocks): ignored.
    pub ignored_accesses: u64,
    /// First op of the backward pass when the file says (DTR `ANNOTATE BACKWARD`).
    pub backward_starts_at: Option<usize>,
    /// itermem traces: the access events `[start, start + length)` taken as the iteration, and
    /// whether they are a detected iteration (false: no period found, the whole trace).
    pub window: Option<(u64, u64)>,
    pub window_detected: bool,
}

/// A file converted by [`load_with`].
#[derive(Clone, Debug, PartialEq)]
pub struct Loaded {
    pub trace: OpTrace,
    pub format: OpFormat,
    pub stats: OpStats,
}

/// Reads one iteration from `path` (any format of the module table, gzip or not) with the
/// default cost model (V100).
pub fn load(path: impl AsRef<Path>) -> Result<OpTrace, OpsError> {
    load_with(path, &LoadOptions::default()).map(|loaded| loaded.trace)
}

/// [`load`] with options, returning the format and the importer's statistics too.
pub fn load_with(path: impl AsRef<Path>, options: &LoadOptions) -> Result<Loaded, OpsError> {
    let path = path.as_ref();
    let file = std::fs::File::open(path).map_err(|err| OpsError::file(path, Problem::Io(err)))?;
    let size = file.metadata().map_or(0, |m| m.len());
    // Streamed from the file: a gzip file is never held whole besides its content.
    read(path, file, Vec::new(), size, options)
}

/// Converts the content of a file (`name` is used in messages and as the trace's `source`).
pub fn parse(name: &Path, bytes: Vec<u8>, options: &LoadOptions) -> Result<Loaded, OpsError> {
    read(name, std::io::empty(), bytes, 0, options)
}

/// Reads a file's content (`head`, then the rest of `reader`; see
/// [`crate::content::read_content`]), decompressing gzip within `options.max_decompressed`,
/// and converts it.
fn read(
    name: &Path,
    reader: impl std::io::Read,
    head: Vec<u8>,
    size: u64,
    options: &LoadOptions,
) -> Result<Loaded, OpsError> {
    let limit = options.max_decompressed;
    let (bytes, gzip) = crate::content::read_content(reader, head, size, limit, head_recognised)
        .map_err(|err| read_error(name, err))?;
    let result = match detect_format(&bytes) {
        Some(OpFormat::DtrLog) => dtr::parse(name, &bytes, options),
        Some(OpFormat::Generated) => generated::parse(name, &bytes, options),
        Some(OpFormat::ItermemTrace) => from_trace::parse(name, bytes, options),
        Some(OpFormat::SingaLog) => singa::parse(name, &bytes, options),
        None if bytes.iter().all(u8::is_ascii_whitespace) => {
            Err(OpsError::file(name, Problem::Empty))
        }
        None => Err(OpsError::file(
            name,
            Problem::UnknownFormat {
                first_bytes: bytes.iter().copied().take(16).collect(),
            },
        )),
    };
    result.map_err(|mut err| {
        err.gzip = gzip;
        err
    })
}

/// Whether the first 64 KiB of decompressed content may be of a format [`load`] reads: a
/// format [`detect_format`] names, or a JSON object whose first line runs past them (decided
/// once the whole content is there; no real log has such a line).
fn head_recognised(head: &[u8]) -> bool {
    if detect_format(head).is_some() {
        return true;
    }
    let text = head.trim_ascii_start();
    text.starts_with(b"{") && !text.contains(&b'\n')
}

/// Why a file's content could not be read, as an [`OpsError`].
pub(crate) fn read_error(name: &Path, err: crate::content::ReadError) -> OpsError {
    use crate::content::ReadError;
    let problem = match err {
        ReadError::Io(err) => return OpsError::file(name, Problem::Io(err)),
        ReadError::Gzip { error, .. } => Problem::Gzip(error),
        ReadError::TooLarge { limit } => Problem::DecompressedTooLarge { limit },
        ReadError::Unrecognised { first_bytes } => Problem::UnknownFormat { first_bytes },
        ReadError::Malformed { offset, message } => Problem::Malformed { offset, message },
    };
    let mut err = OpsError::file(name, problem);
    err.gzip = true;
    err
}

/// The format of decompressed content, from its first bytes or its first non-blank line.
pub fn detect_format(content: &[u8]) -> Option<OpFormat> {
    if content.starts_with(&crate::trace::format::MAGIC) {
        return Some(OpFormat::ItermemTrace);
    }
    if crate::import::singa::looks_like_singa_log(content) {
        return Some(OpFormat::SingaLog);
    }
    let line = content
        .split(|&b| b == b'\n')
        .find(|l| !l.iter().all(u8::is_ascii_whitespace))?;
    let value: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(line).ok()?;
    if value.contains_key("INSTRUCTION") {
        Some(OpFormat::DtrLog)
    } else if value.contains_key("ev") {
        Some(OpFormat::Generated)
    } else {
        None
    }
}

/// Builds the [`OpTrace`] of an importer from its draft tensors (indexed by draft id; `None`
/// for a tensor the importer found never live during an op, e.g. released before the first
/// op): drops those and the ones dying before their birth (counted in `stats`), renumbers the
/// rest densely, and validates the result.
pub(crate) fn finish(
    path: &Path,
    tensors: Vec<Option<Tensor>>,
    mut ops: Vec<Op>,
    stats: &mut OpStats,
) -> Result<OpTrace, OpsError> {
    let n = ops.len();
    let mut new_id: Vec<Option<TensorId>> = Vec::with_capacity(tensors.len());
    let mut kept = Vec::with_capacity(tensors.len());
    for t in tensors {
        let t = t.filter(|t| !never_live(t, n));
        match t {
            None => {
                stats.dropped_tensors += 1;
                new_id.push(None);
            }
            Some(t) => {
                let id = kept.len() as TensorId;
                new_id.push(Some(id));
                kept.push(Tensor { id, ..t });
            }
        }
    }
    for (i, op) in ops.iter_mut().enumerate() {
        for list in [&mut op.reads, &mut op.writes] {
            for t in list.iter_mut() {
                *t = new_id.get(*t as usize).copied().flatten().ok_or_else(|| {
                    OpsError::file(
                        path,
                        Problem::Invariant(Box::new(InvariantError {
                            tensor: Some(*t),
                            op: Some(i),
                            rule: "accessed although it is never live during an op".into(),
                        })),
                    )
                })?;
            }
        }
    }
    let trace = OpTrace {
        source: path.display().to_string(),
        tensors: kept,
        ops,
    };
    trace
        .validate()
        .map_err(|err| OpsError::file(path, Problem::Invariant(Box::new(err))))?;
    Ok(trace)
}

/// Whether `finish` leaves tensor `t` out of a trace of `n_ops` ops: no op, or it dies before
/// it is born.
pub(crate) fn never_live(t: &Tensor, n_ops: usize) -> bool {
    n_ops == 0 || matches!((t.born_at, t.dies_after), (Some(b), Some(d)) if d < b)
}

/// Pushes `t` to `list` unless present (keeps the first-seen order).
pub(crate) fn push_unique(list: &mut Vec<TensorId>, t: TensorId) {
    if !list.contains(&t) {
        list.push(t);
    }
}
