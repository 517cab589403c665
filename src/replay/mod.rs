//! `itermem replay`: a recorded iteration turned back into the CUDA calls a framework would make
//! for it, so every mode of the interposer runs on workloads recorded on real GPUs.
//!
//! A [`Program`] is one iteration as steps (allocate, free, launch a kernel, upload from the
//! host), built from any file `itermem plan` or `itermem compare` reads:
//!
//! - **op-level traces** (DTR op logs, generated dispatch traces, itermem traces with accesses;
//!   [`crate::ops`]): each op is one kernel launch whose arguments are the device pointers of
//!   the tensors it reads and writes, taking the op's duration, except the host copies of an
//!   itermem trace, which are copies again (`cudaMemcpyAsync`, the downloaded bytes checked on
//!   the host); a tensor is allocated right before the op that creates it and freed right
//!   after its last op;
//! - **allocation-only recordings** (PyTorch snapshots, profiler traces, itermem traces without
//!   launches, DSA CSV; [`crate::import`]): their allocations and frees in order, a kernel that
//!   writes each buffer right after its allocation and one that checks it right before its
//!   free; the time between two events of the recording is the duration of the kernel between
//!   them. When the recording repeats, the iteration `itermem compare` plans is replayed (its
//!   persistent blocks allocated once, before the first iteration); otherwise the whole
//!   recording is the iteration.
//!
//! [`runner`] executes a program through the CUDA runtime API and verifies every byte
//! ([`pattern`]): the replay is an ordinary CUDA program, so it runs under `itermem run` in every
//! mode, and its own trace reproduces the input iteration.
//!
//! Modelling decisions, the same for every format:
//! - **Tensors alive before the iteration** (weights, optimizer state, inputs) are allocated and
//!   uploaded from the host before the first iteration. One freed during the iteration (an
//!   input batch) is allocated and uploaded again at the iteration's end, for the next one, as a
//!   data loader would; one allocated during the iteration and never freed is freed at its end,
//!   so the live bytes at every iteration boundary are the same.
//! - **`--scale F`** multiplies every size (rounded up to whole bytes; a tensor of 0 bytes is
//!   neither allocated nor touched) and **`--time-scale F`** every duration. A size above
//!   [`MAX_TENSOR_BYTES`], before or after scaling, is refused with the tensor and the value
//!   ([`ProgramError`]): no device holds it, and sums of such sizes would overflow.
//! - **A recording's times are event indices, not a clock to step through**: its events are
//!   sorted, so a buffer living from 0 to 2^64 − 1 costs what a buffer living from 0 to 1 costs.
//! - **The cost is known before anything runs** ([`Program::cost`]): the device memory the
//!   replay needs, the host memory (cuda-shim's device memory is host memory) and the kernels.
//! - **An op touching more tensors than one launch can carry** ([`runner::MAX_ACCESSES`]) is
//!   split into consecutive launches; the op's duration goes to the last of them.

pub mod cuda;
pub mod pattern;
pub mod runner;

#[cfg(test)]
mod tests;

use std::fmt;
use std::path::Path;

use crate::detect::DetectorConfig;
use crate::import::{self, ImportOptions, Loaded as Imported};
use crate::ops::{self, HostCopy, LoadOptions, OpTrace, OpsError};
use crate::plan::Instance;

/// Index of a tensor in [`Program::bytes`].
pub type TensorId = u32;

/// The largest tensor a replay allocates, before or after scaling: 2^48 B (256 TiB), more than
/// any device holds. Below it, the live bytes of up to 2^32 tensors are summed exactly.
pub const MAX_TENSOR_BYTES: u64 = 1 << 48;

/// A program that cannot be built from what the file says: the file, the tensor and the value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProgramError {
    pub source: String,
    pub message: String,
}

impl fmt::Display for ProgramError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.source, self.message)
    }
}

impl std::error::Error for ProgramError {}

/// What running a program takes, known before it runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cost {
    /// The most bytes allocated at once on the device (sizes already scaled).
    pub device_bytes: u64,
    /// Host memory: cuda-shim's device memory lives in host memory, plus the staging buffer of
    /// the largest copy and the program itself.
    pub host_bytes: u64,
    /// Kernel launches over every iteration.
    pub kernels: u64,
}

/// What a kernel does with one tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccessKind {
    /// Fills the tensor with its next version's pattern.
    Write,
    /// Checks a sample of words against the version it should hold.
    CheckSampled,
    /// Checks every byte: the last read of a version, when a corruption must be caught.
    CheckAll,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access {
    pub tensor: TensorId,
    pub kind: AccessKind,
}

/// One kernel launch: one op of the trace (or one event of a recording).
#[derive(Clone, Debug, PartialEq)]
pub struct Launch {
    /// The op (or event) of the input it stands for, for messages.
    pub op: u64,
    /// Which of the replay's [`runner::KERNELS`] runs it: ops of one name run one kernel, as
    /// in the program recorded (a hash of the name; writing and checking kernels of a
    /// recording are two).
    pub kernel: usize,
    /// Checks first, then writes (an in-place op has both for its tensor).
    pub accesses: Vec<Access>,
    /// How long the kernel takes on the device, at least.
    pub duration_ns: u64,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    Alloc(TensorId),
    Free(TensorId),
    /// A host-to-device copy of the tensor's next content (an input for the next iteration,
    /// or a copy of the trace).
    Upload(TensorId),
    /// A device-to-host copy of the tensor (a copy of the trace), checked on the host.
    Download(Download),
    Launch(Launch),
}

/// A device-to-host copy of op `op`, and how much of what arrives is checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Download {
    pub op: u64,
    pub tensor: TensorId,
    pub check: AccessKind,
}

/// Where a program came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// One kernel per op of an op-level trace.
    Ops,
    /// Allocations and frees of a recording, with writing and checking kernels.
    Allocations,
}

/// One iteration to replay, sizes and durations already scaled.
#[derive(Clone, Debug, PartialEq)]
pub struct Program {
    pub source: String,
    pub origin: Origin,
    /// Bytes of each tensor (0: never allocated).
    pub bytes: Vec<u64>,
    /// Tensors allocated and uploaded before the first iteration.
    pub resident: Vec<TensorId>,
    /// One iteration; the tensors live at its end are those live at its start.
    pub steps: Vec<Step>,
}

/// How sizes and times are scaled.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Scaling {
    pub size: f64,
    pub time: f64,
}

impl Default for Scaling {
    fn default() -> Scaling {
        Scaling {
            size: 1.0,
            time: 1.0,
        }
    }
}

impl Scaling {
    /// `bytes` scaled, or why it cannot be replayed (`what` names the tensor).
    fn bytes(&self, source: &str, what: &str, bytes: u64) -> Result<u64, ProgramError> {
        if bytes == 0 {
            return Ok(0);
        }
        let scaled = (bytes as f64 * self.size).ceil();
        if bytes > MAX_TENSOR_BYTES || scaled > MAX_TENSOR_BYTES as f64 {
            let at_scale = if self.size == 1.0 {
                String::new()
            } else {
                format!(" ({scaled:.0} B at --scale {})", self.size)
            };
            return Err(ProgramError {
                source: source.to_string(),
                message: format!(
                    "{what} has {bytes} bytes{at_scale}, above the 2^48 B (256 TiB) a replay \
                     allocates: no device holds it"
                ),
            });
        }
        Ok((scaled as u64).max(1))
    }

    fn duration_ns(&self, ns: f64) -> u64 {
        (ns.max(0.0) * self.time).round() as u64
    }
}

impl Program {
    /// Bytes live before the first step (the resident tensors; at most `u64::MAX`).
    pub fn resident_bytes(&self) -> u64 {
        self.resident
            .iter()
            .fold(0u64, |sum, &t| sum.saturating_add(self.bytes[t as usize]))
    }

    /// Live bytes after each step of the iteration (summed exactly, at most `u64::MAX`).
    pub fn live_bytes(&self) -> Vec<u64> {
        let mut live: u128 = self.resident.iter().map(|&t| self.size(t)).sum();
        self.steps
            .iter()
            .map(|step| {
                match *step {
                    Step::Alloc(t) => live += self.size(t),
                    Step::Free(t) => live -= self.size(t),
                    Step::Upload(_) | Step::Download(_) | Step::Launch(_) => {}
                }
                u64::try_from(live).unwrap_or(u64::MAX)
            })
            .collect()
    }

    fn size(&self, t: TensorId) -> u128 {
        u128::from(self.bytes[t as usize])
    }

    /// The most bytes live at once.
    pub fn peak_bytes(&self) -> u64 {
        self.live_bytes()
            .into_iter()
            .max()
            .unwrap_or(0)
            .max(self.resident_bytes())
    }

    pub fn launches(&self) -> usize {
        self.steps
            .iter()
            .filter(|s| matches!(s, Step::Launch(_)))
            .count()
    }

    /// What running `iterations` iterations takes ([`Cost`]).
    pub fn cost(&self, iterations: u32) -> Cost {
        let device_bytes = self.peak_bytes();
        // Kernels: an op touching more tensors than one launch carries is split.
        let per_iteration: u64 = self
            .steps
            .iter()
            .map(|step| match step {
                Step::Launch(l) => l.accesses.len().div_ceil(runner::MAX_ACCESSES).max(1) as u64,
                _ => 0,
            })
            .sum();
        // The host stages one copy at a time: the resident uploads and the copies of the steps.
        let copied = self.steps.iter().filter_map(|step| match step {
            Step::Upload(t) | Step::Download(Download { tensor: t, .. }) => Some(t),
            _ => None,
        });
        let staging = self
            .resident
            .iter()
            .chain(copied)
            .map(|&t| self.bytes[t as usize])
            .max()
            .unwrap_or(0);
        let accesses: usize = self
            .steps
            .iter()
            .map(|step| match step {
                Step::Launch(l) => l.accesses.len(),
                _ => 0,
            })
            .sum();
        let program = self.steps.len() * size_of::<Step>()
            + accesses * size_of::<Access>()
            + self.bytes.len() * (size_of::<u64>() + size_of::<runner::Content>());
        Cost {
            device_bytes,
            host_bytes: device_bytes
                .saturating_add(staging)
                .saturating_add(program as u64),
            kernels: per_iteration.saturating_mul(u64::from(iterations)),
        }
    }

    /// Builds the program of an op-level trace (see the module documentation).
    pub fn from_ops(trace: &OpTrace, scaling: Scaling) -> Result<Program, ProgramError> {
        let bytes: Vec<u64> = trace
            .tensors
            .iter()
            .enumerate()
            .map(|(i, t)| scaling.bytes(&trace.source, &format!("tensor {i}"), t.bytes))
            .collect::<Result<_, _>>()?;
        let exists = |t: TensorId| bytes[t as usize] > 0;
        let n = trace.ops.len();
        let mut born = vec![Vec::new(); n];
        let mut dying = vec![Vec::new(); n];
        let mut freed_at_end = Vec::new();
        let mut reloaded_at_end = Vec::new();
        let mut resident = Vec::new();
        for (t, tensor) in trace.tensors.iter().enumerate() {
            let t = t as TensorId;
            if !exists(t) {
                continue;
            }
            if tensor.resident {
                resident.push(t);
            } else if let Some(b) = tensor.born_at.filter(|&b| b < n) {
                born[b].push(t);
            }
            match (tensor.dies_after.filter(|&d| d < n), tensor.resident) {
                (Some(d), true) => {
                    dying[d].push(t);
                    reloaded_at_end.push(t);
                }
                (Some(d), false) => dying[d].push(t),
                (None, false) if tensor.born_at.is_some_and(|b| b < n) => freed_at_end.push(t),
                (None, _) => {}
            }
        }
        let accesses = trace.access_lists();
        let mut steps = Vec::new();
        for (i, op) in trace.ops.iter().enumerate() {
            steps.extend(born[i].iter().map(|&t| Step::Alloc(t)));
            let check = |t: TensorId| Access {
                tensor: t,
                kind: if last_read_of_version(trace, &accesses[t as usize], i, t) {
                    AccessKind::CheckAll
                } else {
                    AccessKind::CheckSampled
                },
            };
            let write = |t: TensorId| Access {
                tensor: t,
                kind: AccessKind::Write,
            };
            let checks = op.reads.iter().copied().filter(|&t| exists(t)).map(check);
            let writes = op.writes.iter().copied().filter(|&t| exists(t)).map(write);
            let accesses: Vec<Access> = checks.chain(writes).collect();
            steps.push(match (op.host_copy(), accesses.as_slice()) {
                // The copy itself: it takes what the link takes, not a modelled time.
                (Some(HostCopy::Upload), &[access]) => Step::Upload(access.tensor),
                (Some(HostCopy::Download), &[access]) => Step::Download(Download {
                    op: i as u64,
                    tensor: access.tensor,
                    check: access.kind,
                }),
                _ => Step::Launch(Launch {
                    op: i as u64,
                    kernel: kernel_of(&op.name),
                    accesses,
                    duration_ns: scaling.duration_ns(op.time_ns),
                }),
            });
            steps.extend(dying[i].iter().map(|&t| Step::Free(t)));
        }
        steps.extend(freed_at_end.iter().map(|&t| Step::Free(t)));
        for &t in &reloaded_at_end {
            steps.push(Step::Alloc(t));
            steps.push(Step::Upload(t));
        }
        Ok(Program {
            source: trace.source.clone(),
            origin: Origin::Ops,
            bytes,
            resident,
            steps,
        })
    }

    /// Builds the program of an allocation problem: `persistent` sizes live throughout, each
    /// buffer of `instance` allocated at its `lower` and freed at its `upper`, with a kernel
    /// writing it after its allocation and one checking it before its free. `step_ns[t]`, when
    /// known, is the time from event `t` to the next. The buffers' events are sorted, never
    /// laid out over every time from 0 to the last `upper`: the program is as long as the
    /// instance, whatever its times.
    pub fn from_allocations(
        source: &str,
        instance: &Instance,
        persistent: &[u64],
        step_ns: &[Option<f64>],
        scaling: Scaling,
    ) -> Result<Program, ProgramError> {
        let mut bytes: Vec<u64> = persistent
            .iter()
            .enumerate()
            .map(|(i, &s)| scaling.bytes(source, &format!("persistent block {i}"), s))
            .collect::<Result<_, _>>()?;
        let resident: Vec<TensorId> = (0..bytes.len() as TensorId)
            .filter(|&t| bytes[t as usize] > 0)
            .collect();
        let first = bytes.len() as TensorId;
        for buffer in instance.buffers() {
            let what = format!("buffer {}", buffer.id);
            bytes.push(scaling.bytes(source, &what, buffer.size)?);
        }
        // (time, frees before allocations, tensor): at each time the buffers ending, then those
        // starting, each group in the instance's order.
        let mut events: Vec<(u64, bool, TensorId)> = Vec::with_capacity(2 * bytes.len());
        for (i, buffer) in instance.buffers().iter().enumerate() {
            let t = first + i as TensorId;
            if bytes[t as usize] > 0 {
                events.push((buffer.lower, true, t));
                events.push((buffer.upper, false, t));
            }
        }
        events.sort_unstable();
        let mut steps = Vec::new();
        for group in events.chunk_by(|a, b| a.0 == b.0) {
            let time = group[0].0;
            let duration_ns = usize::try_from(time)
                .ok()
                .and_then(|i| step_ns.get(i).copied().flatten())
                .map_or(0, |ns| scaling.duration_ns(ns));
            let launch = |tensors: &[TensorId], kind: AccessKind, duration_ns: u64| {
                Step::Launch(Launch {
                    op: time,
                    kernel: usize::from(kind != AccessKind::Write),
                    accesses: tensors
                        .iter()
                        .map(|&tensor| Access { tensor, kind })
                        .collect(),
                    duration_ns,
                })
            };
            let split = group.partition_point(|e| !e.1);
            let frees: Vec<TensorId> = group[..split].iter().map(|e| e.2).collect();
            let allocs: Vec<TensorId> = group[split..].iter().map(|e| e.2).collect();
            if !frees.is_empty() {
                let duration = if allocs.is_empty() { duration_ns } else { 0 };
                steps.push(launch(&frees, AccessKind::CheckAll, duration));
                steps.extend(frees.iter().map(|&t| Step::Free(t)));
            }
            if !allocs.is_empty() {
                steps.extend(allocs.iter().map(|&t| Step::Alloc(t)));
                steps.push(launch(&allocs, AccessKind::Write, duration_ns));
            }
        }
        Ok(Program {
            source: source.to_string(),
            origin: Origin::Allocations,
            bytes,
            resident,
            steps,
        })
    }
}

/// The kernel that runs ops named `name` (FNV-1a of the name).
fn kernel_of(name: &str) -> usize {
    let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    (hash % runner::KERNELS.len() as u64) as usize
}

/// Whether op `op`'s read of `tensor` is the last read of the version it holds: the op writes
/// it too, or no later op reads it before it is written again.
fn last_read_of_version(trace: &OpTrace, accesses: &[usize], op: usize, tensor: TensorId) -> bool {
    if trace.ops[op].writes.contains(&tensor) {
        return true;
    }
    let next = accesses.partition_point(|&a| a <= op);
    accesses
        .get(next)
        .is_none_or(|&j| !trace.ops[j].reads.contains(&tensor))
}

/// How [`load`] reads a file.
#[derive(Clone, Debug, Default)]
pub struct LoadSettings {
    pub scaling: Scaling,
    pub max_decompressed: Option<u64>,
}

/// Reads `path` in any format `plan` or `compare` reads and builds its program: op-level
/// formats first (an itermem trace without a launch falls through to its allocations).
pub fn load(path: &Path, settings: &LoadSettings) -> anyhow::Result<Program> {
    let mut ops_options = LoadOptions::default();
    let mut import_options = ImportOptions::default();
    if let Some(limit) = settings.max_decompressed {
        ops_options.max_decompressed = limit;
        import_options.max_decompressed = limit;
    }
    match ops::load_with(path, &ops_options) {
        Ok(loaded) => return Ok(Program::from_ops(&loaded.trace, settings.scaling)?),
        Err(err) if not_op_level(&err) => {}
        Err(err) => return Err(err.into()),
    }
    let source = path.display().to_string();
    let program = match import::load_with(path, &import_options)? {
        Imported::Instance(instance) => {
            Program::from_allocations(&source, &instance, &[], &[], settings.scaling)?
        }
        Imported::Recording(recording) => {
            let times: Vec<Option<u64>> = recording.events().iter().map(|e| e.time_us()).collect();
            let gaps = |start: usize, length: usize| -> Vec<Option<f64>> {
                (start..start + length)
                    .map(|i| match (times.get(i), times.get(i + 1)) {
                        (Some(&Some(a)), Some(&Some(b))) => Some(b.saturating_sub(a) as f64 * 1e3),
                        _ => None,
                    })
                    .collect()
            };
            match recording.iteration(&DetectorConfig::for_cuda_events())? {
                Some(iteration) => {
                    let buffers = recording.iteration_buffers(&iteration);
                    let persistent: Vec<u64> = buffers
                        .persistent
                        .iter()
                        .chain(&buffers.long_lived)
                        .map(|b| b.size)
                        .collect();
                    let step_ns = gaps(buffers.start as usize, buffers.length as usize);
                    Program::from_allocations(
                        &source,
                        &buffers.instance,
                        &persistent,
                        &step_ns,
                        settings.scaling,
                    )?
                }
                None => {
                    let instance = recording.to_instance(None)?;
                    let step_ns = gaps(0, recording.len());
                    Program::from_allocations(&source, &instance, &[], &step_ns, settings.scaling)?
                }
            }
        }
    };
    Ok(program)
}

/// The op-level importers do not read this file as ops: not their format, or an itermem trace
/// without launches.
fn not_op_level(err: &OpsError) -> bool {
    matches!(
        err.problem,
        ops::Problem::UnknownFormat { .. } | ops::Problem::NoOps(_)
    )
}
