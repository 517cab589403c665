//! DTR op logs (uwsampl/dtr-prototype, the logs of `simrd/logs.zip`) as an [`OpTrace`].
//!
//! A log is JSON lines, one instruction each, written by DTR's instrumented PyTorch while it ran
//! one training iteration on a Titan V. The semantics follow the origin's own parser,
//! `simrd/simrd/parse/parse.py` (`parse_file`) with `simrd/simrd/parse/graph.py` and the
//! runtime's storage model (`simrd/simrd/tensor.py`: `Storage.ref_ext`, `Tensor.from_op`),
//! read at commit 7f50d99; no code was copied. What we followed:
//!
//! | instruction | simrd | here |
//! |---|---|---|
//! | `CONSTANT{NAME}` + the next line `MEMORY{NAME, MEMORY}` | a `constant` op with no inputs, its result pinned, 1 reference | a **resident** tensor of `MEMORY` bytes with 1 reference; no op |
//! | `CALL{NAME, ARGS, RESULT, TIME}` + for each result a `MEMORY` and an `ALIAS` line | an op of cost `TIME`; a result with `ALIAS` −1 is a new storage of `MEMORY` bytes, one with `ALIAS` k ≥ 0 shares the storage of `ARGS[k]` (size 0); every result starts with 1 reference | the same; the op reads the storages of `ARGS` and writes its new storages; a `CALL` whose results **all** alias (a view: `view`, `t`, `expand`, …) is **no op** (no data moves), its results are new references to existing storages |
//! | `MUTATE{NAME, ARGS, MUTATE, TIME}` | a new *version* of each mutated argument, as a new storage, and a release of the old version | an **in-place write**: one op reading every argument's storage and writing the mutated arguments' storages; the reference moves from the old version to the new one, so the count does not change |
//! | `COPY{SRC, DST}` | `DST` names the same tensor, +1 reference | the same (+1 on the storage) |
//! | `COPY_FROM{SRC, DST}` | `DST` is rebound to `SRC`'s tensor: −1 on the old one, +1 on `SRC`'s | the same (the +1 first, so rebinding a name to its own storage cannot free it) |
//! | `RELEASE{NAME}` | −1 reference; an undefined name is ignored (`ignore_undefined_release`) | the same, counted in [`OpStats::ignored_releases`] |
//! | `ANNOTATE START` | instructions before the first `START` are skipped | the same (the state is reset at the first `START`) |
//! | `ANNOTATE BACKWARD` | marks the ops after it as backward | recorded as [`OpStats::backward_starts_at`] |
//!
//! **Reference counts are per storage**, as in simrd's runtime (`Storage.ref_ext`: every tensor
//! on a storage, aliases included, adds its references to the storage's). A storage is freed
//! when its count reaches 0: its tensor **dies after the last op executed before that
//! `RELEASE`**. A constant released before the first op is never live during an op and is left
//! out; a storage still referenced at the end lives to the end (simrd's "outputs").
//!
//! Other decisions:
//! - **Times are measured** (`TIME`, ns, per op); the time of the dropped view ops is counted in
//!   [`OpStats::dropped_time_ns`] (small: a few µs each).
//! - **Constants are resident** wherever they appear in the log: DTR logs a parameter, the input
//!   batch or a scalar as a `CONSTANT` just before its first use, but all of them exist before
//!   the iteration starts.
//! - **MUTATE is physical, not functional**: simrd models an in-place op as producing a fresh
//!   storage (so that it can rematerialise it), which would double-count memory; a swap planner
//!   needs the physical picture, one storage written in place.
//! - **A CALL's `MEMORY`/`ALIAS` lines may come in any order** within the block that follows it
//!   (simrd requires `MEMORY`, `ALIAS` per result in order); each must name a result of the call
//!   and appear once.
//! - **Numbers may be JSON numbers or strings** (the logs write `"MEMORY":"256"`, `"ALIAS":"-1"`).
//! - **Strict where simrd asserts**: a name defined twice, a name never defined used as an
//!   argument, a storage used (or released) after its count reached 0, a `MEMORY` that follows
//!   nothing, an alias index out of range are errors naming the line.

use std::collections::HashMap;
use std::path::Path;

use serde_json::{Map, Value, json};

use super::error::{InvariantError, OpsError, Problem};
use super::{
    LoadOptions, Loaded, Op, OpFormat, OpStats, OpTrace, Tensor, TensorId, finish, push_unique,
};

type Object = Map<String, Value>;

/// A `CALL` waiting for the `MEMORY` and `ALIAS` lines of its results.
struct PendingCall {
    line: u64,
    name: String,
    args: Vec<String>,
    time_ns: f64,
    /// Per result: name, `MEMORY`, `ALIAS`.
    results: Vec<(String, Option<u64>, Option<i64>)>,
}

/// What the next line must complete.
enum Pending {
    None,
    Constant { line: u64, name: String },
    Call(PendingCall),
}

#[derive(Default)]
struct State {
    /// Draft tensors, one per storage (index = storage id); `None` once left out.
    tensors: Vec<Option<Tensor>>,
    /// References to each storage.
    refs: Vec<u64>,
    /// Name → storage.
    names: HashMap<String, TensorId>,
    ops: Vec<Op>,
    stats: OpStats,
}

struct Parser<'a> {
    path: &'a Path,
    line: u64,
    state: State,
    pending: Pending,
    started: bool,
}

pub(super) fn parse(path: &Path, bytes: &[u8], _options: &LoadOptions) -> Result<Loaded, OpsError> {
    let mut parser = Parser {
        path,
        line: 0,
        state: State::default(),
        pending: Pending::None,
        started: false,
    };
    let mut records = 0u64;
    for (index, raw) in bytes.split(|&b| b == b'\n').enumerate() {
        parser.line = index as u64 + 1;
        if raw.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        records += 1;
        let object: Object = serde_json::from_slice(raw)
            .map_err(|err| OpsError::line(path, parser.line, Problem::Json(err.to_string())))?;
        parser.instruction(&object)?;
    }
    match std::mem::replace(&mut parser.pending, Pending::None) {
        Pending::None => {}
        Pending::Constant { line, name } => {
            return Err(OpsError::line(
                path,
                line,
                Problem::OutOfPlace {
                    found: "the end of the file".into(),
                    expected: format!("the MEMORY line of constant {name}"),
                },
            ));
        }
        Pending::Call(call) => {
            return Err(OpsError::line(
                path,
                call.line,
                Problem::OutOfPlace {
                    found: "the end of the file".into(),
                    expected: format!("the MEMORY and ALIAS lines of the results of {}", call.name),
                },
            ));
        }
    }
    let State {
        tensors,
        ops,
        mut stats,
        ..
    } = parser.state;
    stats.records = records;
    let trace = finish(path, tensors, ops, &mut stats)?;
    Ok(Loaded {
        trace,
        format: OpFormat::DtrLog,
        stats,
    })
}

impl Parser<'_> {
    fn err(&self, problem: Problem) -> OpsError {
        OpsError::line(self.path, self.line, problem)
    }

    fn instruction(&mut self, j: &Object) -> Result<(), OpsError> {
        let kind = self.string(j, "instruction", "INSTRUCTION")?;
        match std::mem::replace(&mut self.pending, Pending::None) {
            Pending::None => {}
            Pending::Constant { name, .. } => {
                let found = self.string(j, "MEMORY", "NAME").ok();
                if kind != "MEMORY" || found.as_deref() != Some(name.as_str()) {
                    return Err(self.err(Problem::OutOfPlace {
                        found: describe(&kind, found.as_deref()),
                        expected: format!("MEMORY of constant {name}"),
                    }));
                }
                let bytes = self.uint(j, "MEMORY", "MEMORY")?;
                return self.define_constant(name, bytes);
            }
            Pending::Call(mut call) => {
                self.call_detail(j, &kind, &mut call)?;
                if call
                    .results
                    .iter()
                    .all(|(_, memory, alias)| memory.is_some() && alias.is_some())
                {
                    return self.complete_call(call);
                }
                self.pending = Pending::Call(call);
                return Ok(());
            }
        }
        match kind.as_str() {
            "CONSTANT" => {
                let name = self.string(j, "CONSTANT", "NAME")?;
                self.pending = Pending::Constant {
                    line: self.line,
                    name,
                };
            }
            "CALL" => {
                let name = self.string(j, "CALL", "NAME")?;
                let args = self.strings(j, "CALL", "ARGS")?;
                let results = self.strings(j, "CALL", "RESULT")?;
                let time_ns = self.time(j, "CALL")?;
                let call = PendingCall {
                    line: self.line,
                    name,
                    args,
                    time_ns,
                    results: results.into_iter().map(|r| (r, None, None)).collect(),
                };
                if call.results.is_empty() {
                    self.complete_call(call)?;
                } else {
                    self.pending = Pending::Call(call);
                }
            }
            "MUTATE" => self.mutate(j)?,
            "COPY" => {
                let src = self.string(j, "COPY", "SRC")?;
                let dst = self.string(j, "COPY", "DST")?;
                let storage = self.live_storage(&src)?;
                self.bind(dst, storage)?;
            }
            "COPY_FROM" => {
                let src = self.string(j, "COPY_FROM", "SRC")?;
                let dst = self.string(j, "COPY_FROM", "DST")?;
                let storage = self.live_storage(&src)?;
                let old = self.live_storage(&dst)?;
                self.state.refs[storage as usize] += 1;
                self.state.names.insert(dst.clone(), storage);
                self.release(old, &dst)?;
            }
            "RELEASE" => {
                let name = self.string(j, "RELEASE", "NAME")?;
                match self.state.names.get(&name) {
                    None => self.state.stats.ignored_releases += 1,
                    Some(&storage) => self.release(storage, &name)?,
                }
            }
            "ANNOTATE" => {
                let annotation = self.string(j, "ANNOTATE", "ANNOTATION")?;
                match annotation.as_str() {
                    "START" if !self.started => {
                        self.started = true;
                        // simrd skips everything before the first START.
                        self.state = State::default();
                    }
                    "BACKWARD" => {
                        let at = self.state.ops.len();
                        self.state.stats.backward_starts_at.get_or_insert(at);
                    }
                    // A later START, or an annotation simrd does not use: nothing to do.
                    _ => {}
                }
            }
            "MEMORY" | "ALIAS" => {
                let name = self.string(j, "MEMORY", "NAME").ok();
                return Err(self.err(Problem::OutOfPlace {
                    found: describe(&kind, name.as_deref()),
                    expected: "a CONSTANT or CALL before it".into(),
                }));
            }
            _ => return Err(self.err(Problem::UnknownRecord { kind })),
        }
        Ok(())
    }

    /// A `MEMORY` or `ALIAS` line inside the block after a `CALL`.
    fn call_detail(&self, j: &Object, kind: &str, call: &mut PendingCall) -> Result<(), OpsError> {
        let name = self.string(j, "MEMORY", "NAME").ok();
        let out_of_place = || {
            self.err(Problem::OutOfPlace {
                found: describe(kind, name.as_deref()),
                expected: format!(
                    "the MEMORY and ALIAS lines of the results of {} (line {})",
                    call.name, call.line
                ),
            })
        };
        let Some(slot) = call
            .results
            .iter_mut()
            .find(|(result, _, _)| Some(result.as_str()) == name.as_deref())
        else {
            return Err(out_of_place());
        };
        match kind {
            "MEMORY" if slot.1.is_none() => slot.1 = Some(self.uint(j, "MEMORY", "MEMORY")?),
            "ALIAS" if slot.2.is_none() => {
                let alias = self.int(j, "ALIAS", "ALIAS")?;
                if alias < -1 || alias >= call.args.len() as i64 {
                    return Err(self.err(Problem::BadValue {
                        field: "ALIAS",
                        value: alias.to_string(),
                        expected: "-1 (a new storage) or the index of an argument of the call",
                    }));
                }
                slot.2 = Some(alias);
            }
            _ => return Err(out_of_place()),
        }
        Ok(())
    }

    fn complete_call(&mut self, call: PendingCall) -> Result<(), OpsError> {
        // Errors of a completed call point at the CALL line.
        let line = std::mem::replace(&mut self.line, call.line);
        let result = self.complete_call_inner(call);
        self.line = line;
        result
    }

    fn complete_call_inner(&mut self, call: PendingCall) -> Result<(), OpsError> {
        let mut args = Vec::with_capacity(call.args.len());
        for name in &call.args {
            args.push(self.live_storage(name)?);
        }
        let view = !call.results.is_empty() && call.results.iter().all(|r| r.2 != Some(-1));
        if view {
            self.state.stats.dropped_ops += 1;
            self.state.stats.dropped_time_ns += call.time_ns;
        }
        let op_index = self.state.ops.len();
        let mut reads = Vec::with_capacity(args.len());
        for &a in &args {
            push_unique(&mut reads, a);
        }
        let mut writes = Vec::with_capacity(call.results.len());
        for (name, memory, alias) in call.results {
            let storage = match alias.unwrap_or(-1) {
                -1 => {
                    let id = self.new_storage(memory.unwrap_or(0), Some(op_index));
                    writes.push(id);
                    id
                }
                k => args[k as usize],
            };
            self.bind(name, storage)?;
        }
        if !view {
            self.state.ops.push(Op {
                name: call.name,
                reads,
                writes,
                time_ns: call.time_ns,
                measured: true,
                flops: 0.0,
            });
        }
        Ok(())
    }

    fn mutate(&mut self, j: &Object) -> Result<(), OpsError> {
        let name = self.string(j, "MUTATE", "NAME")?;
        let arg_names = self.strings(j, "MUTATE", "ARGS")?;
        let time_ns = self.time(j, "MUTATE")?;
        let Some(Value::Array(indices)) = j.get("MUTATE") else {
            return Err(self.err(Problem::MissingField {
                record: "MUTATE",
                field: "MUTATE",
            }));
        };
        let mut args = Vec::with_capacity(arg_names.len());
        for a in &arg_names {
            args.push(self.live_storage(a)?);
        }
        let mut reads = Vec::with_capacity(args.len());
        for &a in &args {
            push_unique(&mut reads, a);
        }
        let mut writes = Vec::new();
        for index in indices {
            let k = as_int(index)
                .filter(|&k| k >= 0 && (k as usize) < args.len())
                .ok_or_else(|| {
                    self.err(Problem::BadValue {
                        field: "MUTATE",
                        value: index.to_string(),
                        expected: "indices of arguments of the op",
                    })
                })?;
            push_unique(&mut writes, args[k as usize]);
        }
        self.state.ops.push(Op {
            name,
            reads,
            writes,
            time_ns,
            measured: true,
            flops: 0.0,
        });
        Ok(())
    }

    fn define_constant(&mut self, name: String, bytes: u64) -> Result<(), OpsError> {
        let id = self.new_storage(bytes, None);
        self.bind(name, id)
    }

    /// A new storage with 0 references (the caller binds a name to it).
    fn new_storage(&mut self, bytes: u64, born_at: Option<usize>) -> TensorId {
        let id = self.state.tensors.len() as TensorId;
        self.state.tensors.push(Some(Tensor {
            id,
            bytes,
            resident: born_at.is_none(),
            dies_after: None,
            born_at,
        }));
        self.state.refs.push(0);
        id
    }

    /// Binds a new name to `storage` (+1 reference).
    fn bind(&mut self, name: String, storage: TensorId) -> Result<(), OpsError> {
        if self.state.names.contains_key(&name) {
            return Err(self.err(Problem::DuplicateTensor { name }));
        }
        self.state.names.insert(name, storage);
        self.state.refs[storage as usize] += 1;
        Ok(())
    }

    /// The storage of `name`, which must still be referenced.
    fn live_storage(&self, name: &str) -> Result<TensorId, OpsError> {
        let storage = *self
            .state
            .names
            .get(name)
            .ok_or_else(|| self.err(Problem::UnknownTensor { name: name.into() }))?;
        if self.state.refs[storage as usize] == 0 {
            return Err(self.err(Problem::UseAfterRelease { name: name.into() }));
        }
        Ok(storage)
    }

    /// −1 reference on `storage`; at 0 its tensor dies after the last op executed.
    fn release(&mut self, storage: TensorId, name: &str) -> Result<(), OpsError> {
        let refs = &mut self.state.refs[storage as usize];
        if *refs == 0 {
            return Err(self.err(Problem::UseAfterRelease { name: name.into() }));
        }
        *refs -= 1;
        if *refs == 0 {
            let slot = &mut self.state.tensors[storage as usize];
            match self.state.ops.len().checked_sub(1) {
                // Released before any op: never live during one.
                None => *slot = None,
                Some(last) => {
                    if let Some(t) = slot {
                        t.dies_after = Some(last);
                    }
                }
            }
        }
        Ok(())
    }

    fn string(
        &self,
        j: &Object,
        record: &'static str,
        field: &'static str,
    ) -> Result<String, OpsError> {
        match j.get(field) {
            Some(Value::String(s)) => Ok(s.clone()),
            Some(other) => Err(self.err(Problem::BadValue {
                field,
                value: other.to_string(),
                expected: "a string",
            })),
            None => Err(self.err(Problem::MissingField { record, field })),
        }
    }

    fn strings(
        &self,
        j: &Object,
        record: &'static str,
        field: &'static str,
    ) -> Result<Vec<String>, OpsError> {
        let bad = |value: &Value| {
            self.err(Problem::BadValue {
                field,
                value: value.to_string(),
                expected: "an array of tensor names",
            })
        };
        match j.get(field) {
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| v.as_str().map(str::to_owned).ok_or_else(|| bad(v)))
                .collect(),
            Some(other) => Err(bad(other)),
            None => Err(self.err(Problem::MissingField { record, field })),
        }
    }

    fn int(&self, j: &Object, record: &'static str, field: &'static str) -> Result<i64, OpsError> {
        let value = j
            .get(field)
            .ok_or_else(|| self.err(Problem::MissingField { record, field }))?;
        as_int(value).ok_or_else(|| {
            self.err(Problem::BadValue {
                field,
                value: value.to_string(),
                expected: "an integer (a JSON number or a string of digits)",
            })
        })
    }

    fn uint(&self, j: &Object, record: &'static str, field: &'static str) -> Result<u64, OpsError> {
        let value = j
            .get(field)
            .ok_or_else(|| self.err(Problem::MissingField { record, field }))?;
        let parsed = match value {
            Value::Number(n) => n.as_u64(),
            Value::String(s) => s.trim().parse().ok(),
            _ => None,
        };
        parsed.ok_or_else(|| {
            self.err(Problem::BadValue {
                field,
                value: value.to_string(),
                expected: "a byte count ≥ 0 (a JSON number or a string of digits)",
            })
        })
    }

    /// `TIME` in ns: a finite number ≥ 0, as a JSON number or a string.
    fn time(&self, j: &Object, record: &'static str) -> Result<f64, OpsError> {
        let value = j.get("TIME").ok_or_else(|| {
            self.err(Problem::MissingField {
                record,
                field: "TIME",
            })
        })?;
        let parsed = match value {
            Value::Number(n) => n.as_f64(),
            Value::String(s) => s.trim().parse::<f64>().ok(),
            _ => None,
        };
        parsed
            .filter(|t| t.is_finite() && *t >= 0.0)
            .ok_or_else(|| {
                self.err(Problem::BadValue {
                    field: "TIME",
                    value: value.to_string(),
                    expected: "a duration in ns ≥ 0",
                })
            })
    }
}

/// An integer given as a JSON number or a string.
fn as_int(value: &Value) -> Option<i64> {
    match value {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

fn describe(kind: &str, name: Option<&str>) -> String {
    match name {
        Some(name) => format!("{kind} {name}"),
        None => kind.to_string(),
    }
}

/// `trace` as a DTR op log that this module's reader (`parse`) reads back (how `itermem plan`
/// reads a generated iteration, e.g. [`super::tree::tree_lstm_iteration`]): the resident
/// tensors as `CONSTANT`s first, in id order; each op as a `CALL` whose results are the tensors
/// it creates (all its writes must then be born at it) or, when it creates none, a `MUTATE` of
/// its writes (DTR has no other in-place write, so a written tensor is read too); a `RELEASE`
/// after the op after which a tensor dies. Reading the log back gives `trace` with its ids renumbered in that
/// order (the same ids when they already are: resident tensors first, then by birth), every op
/// measured, and no FLOPs (DTR logs carry none).
pub fn to_dtr_log(trace: &OpTrace) -> Result<String, InvariantError> {
    trace.validate()?;
    let name = |t: TensorId| format!("t{t}");
    let mut lines = vec![json!({"INSTRUCTION": "ANNOTATE", "ANNOTATION": "START"})];
    let mut dying: Vec<Vec<TensorId>> = vec![Vec::new(); trace.ops.len()];
    for t in &trace.tensors {
        if let Some(d) = t.dies_after {
            dying[d].push(t.id);
        }
        if t.resident {
            lines.push(json!({"INSTRUCTION": "CONSTANT", "NAME": name(t.id)}));
            lines.push(json!({"INSTRUCTION": "MEMORY", "NAME": name(t.id), "MEMORY": t.bytes}));
        }
    }
    for (k, op) in trace.ops.iter().enumerate() {
        let born = |t: &TensorId| trace.tensors[*t as usize].born_at == Some(k);
        let new = op.writes.iter().filter(|t| born(t)).count();
        let args: Vec<String> = op.reads.iter().map(|&t| name(t)).collect();
        if new == op.writes.len() {
            let results: Vec<String> = op.writes.iter().map(|&t| name(t)).collect();
            lines.push(json!({"INSTRUCTION": "CALL", "NAME": op.name, "ARGS": args,
                "RESULT": results, "TIME": op.time_ns}));
            for &t in &op.writes {
                let bytes = trace.tensors[t as usize].bytes;
                lines.push(json!({"INSTRUCTION": "MEMORY", "NAME": name(t), "MEMORY": bytes}));
                lines.push(json!({"INSTRUCTION": "ALIAS", "NAME": name(t), "ALIAS": -1}));
            }
        } else if new == 0 {
            let mut args = op.reads.clone();
            for &t in &op.writes {
                push_unique(&mut args, t);
            }
            let mutated: Vec<usize> = op
                .writes
                .iter()
                .filter_map(|w| args.iter().position(|a| a == w))
                .collect();
            let args: Vec<String> = args.iter().map(|&t| name(t)).collect();
            lines.push(
                json!({"INSTRUCTION": "MUTATE", "NAME": op.name, "ARGS": args,
                "MUTATE": mutated, "TIME": op.time_ns}),
            );
        } else {
            return Err(InvariantError {
                tensor: None,
                op: Some(k),
                rule: "creates tensors and writes others in place (a DTR log cannot say so)".into(),
            });
        }
        for &t in &dying[k] {
            lines.push(json!({"INSTRUCTION": "RELEASE", "NAME": name(t)}));
        }
    }
    let mut out = String::new();
    for line in lines {
        out.push_str(&line.to_string());
        out.push('\n');
    }
    Ok(out)
}
