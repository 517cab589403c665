//! Runs a [`Program`] through the CUDA runtime API and verifies every tensor it reads.
//!
//! Everything goes through the ordinary runtime calls a framework makes (`cudaMalloc`,
//! `cudaFree`, `cudaLaunchKernel` on one stream, `cudaMemcpyAsync` for uploads,
//! `cudaStreamSynchronize` at each iteration's end), so an interposer sees a training program.
//! Each launch carries one by-value parameter, `KernelArgs`: the device pointers of the
//! tensors the op touches (where an interposer looking for pointers among a kernel's arguments
//! finds them), with sizes, pattern seeds and what to do with each.
//!
//! The kernel writes each tensor it produces with the pattern of (tensor, version, iteration)
//! and checks each tensor it reads against the version it should hold ([`super::pattern`]):
//! a sample of words at most reads, every byte at the last read of a version. The first
//! mismatch is written into a report in mapped page-locked memory, which the host polls after
//! each launch: the replay stops at once and names the iteration, the op, the tensor, its
//! address and the expected and found words.
//!
//! **Kernels exist on cuda-shim only, for now.** On the shim a kernel is a host function
//! registered with `cudaShimRegisterKernel`; it takes at least the op's duration on its stream,
//! sleeping after its work (durations are paced against the previous kernel's scheduled end, so
//! the sleeps' overshoot does not accumulate over thousands of short kernels). On NVIDIA's
//! runtime the replay stops with a clear message: the same kernel as PTX is future work.

use std::ffi::c_void;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use super::cuda::{self, Dim3, Runtime, Stream};
use super::pattern::{self, Mismatch};
use super::{AccessKind, Download, Launch, Program, Step, TensorId};

/// The most tensors one launch carries (its parameter stays below CUDA's 4 KiB limit).
pub const MAX_ACCESSES: usize = 96;

/// A kernel that starts within this much of the previous kernel's scheduled end ran back to
/// back with it: its duration counts from that scheduled end, not from its own start.
const BACK_TO_BACK_NS: u64 = 100_000;

const WRITE: u32 = 0;
const CHECK_SAMPLED: u32 = 1;
const CHECK_ALL: u32 = 2;

/// One tensor of a launch.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    address: u64,
    bytes: u64,
    seed: u64,
    tensor: u32,
    kind: u32,
}

/// The kernel's only parameter, passed by value.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct KernelArgs {
    /// The mismatch report (mapped page-locked memory, addressable by the kernel).
    report: u64,
    iteration: u64,
    op: u64,
    duration_ns: u64,
    /// When the host launched it ([`now_ns`]): a kernel that starts long after is waiting for
    /// the work it depends on, one that starts right after was waiting for the host.
    issued_ns: u64,
    count: u64,
    slots: [Slot; MAX_ACCESSES],
}

const _: () = assert!(size_of::<KernelArgs>() <= 4096);

/// The first mismatch a kernel found; `done` is set last.
#[repr(C)]
struct Report {
    claimed: AtomicU32,
    done: AtomicU32,
    iteration: u64,
    op: u64,
    tensor: u64,
    address: u64,
    offset: u64,
    expected: u64,
    found: u64,
}

/// A word a kernel read that was not what the op expected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct MismatchFound {
    pub iteration: u64,
    pub op: u64,
    pub tensor: u64,
    pub address: u64,
    /// Byte offset of the word in the tensor.
    pub offset: u64,
    pub expected: u64,
    pub found: u64,
}

impl std::fmt::Display for MismatchFound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "iteration {}, op {}: tensor {} at {:#x} holds {:#018x} at byte {} where \
             {:#018x} was written",
            self.iteration,
            self.op,
            self.tensor,
            self.address,
            self.found,
            self.offset,
            self.expected
        )
    }
}

#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    pub iterations: u32,
    /// After op `op` of the first iteration, overwrite the first word of the first tensor it
    /// writes (a host-to-device copy), to show that verification catches a corruption.
    pub corrupt_op: Option<u64>,
    /// Keep every kernel's start and end on the device ([`Outcome::kernel_timeline`]).
    pub kernel_timeline: bool,
}

/// What a replay did.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Outcome {
    /// Host time of each iteration completed (its work synchronised at its end), seconds.
    pub iteration_seconds: Vec<f64>,
    pub launches: u64,
    /// Kernels the device ran: equal to `launches` unless a launch was lost.
    pub kernels_run: u64,
    pub allocations: u64,
    pub uploads: u64,
    pub downloads: u64,
    pub bytes_written: u64,
    pub checks_sampled: u64,
    pub checks_all: u64,
    pub bytes_checked_all: u64,
    /// Reads of tensors never written since their allocation (nothing to compare).
    pub unwritten_reads: u64,
    pub mismatch: Option<MismatchFound>,
    /// With [`RunOptions::kernel_timeline`]: every kernel run, in order.
    #[serde(skip)]
    pub kernel_timeline: Vec<KernelSpan>,
}

/// When one kernel was launched and ran on the device: nanoseconds since the replay's first
/// launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelSpan {
    pub iteration: u64,
    pub op: u64,
    /// When the host launched it.
    pub issued_ns: u64,
    pub start_ns: u64,
    pub end_ns: u64,
}

/// The content state of one tensor.
#[derive(Clone, Copy, Default)]
pub(crate) struct Content {
    address: u64,
    written: bool,
    iteration: u32,
    version: u32,
}

/// Runs `program` for `options.iterations` iterations, calling `iterations_done` with the
/// count after each. A mismatch ends the replay early and is in the outcome; a CUDA error is
/// an error.
pub fn run(
    program: &Program,
    options: &RunOptions,
    iterations_done: &dyn Fn(u32),
) -> anyhow::Result<Outcome> {
    let runtime = Runtime::load()?;
    let Some(register) = runtime.shim_register_kernel else {
        bail!(
            "this CUDA runtime has no cudaShimRegisterKernel: replay kernels exist for cuda-shim \
             only (pass --shim)"
        );
    };
    let sizes = [size_of::<KernelArgs>()];
    for (kernel, name) in KERNELS.iter().zip(KERNEL_NAMES) {
        // SAFETY: a registration of our kernel with one parameter of KernelArgs's size, as the
        // kernel reads it; the name is a static NUL-terminated string.
        let result = unsafe { register(*kernel, name.as_ptr(), 1, sizes.as_ptr(), 0) };
        runtime.check(result, || "cudaShimRegisterKernel".into())?;
    }
    TIMELINE.store(options.kernel_timeline, Ordering::Relaxed);
    let mut replay = Replay::start(&runtime, program)?;
    let outcome = replay.run(options, iterations_done);
    replay.finish()?;
    let mut outcome = outcome?;
    outcome.kernel_timeline = std::mem::take(&mut *SPANS.lock());
    Ok(outcome)
}

struct Replay<'a> {
    runtime: &'a Runtime,
    program: &'a Program,
    stream: Stream,
    report: *mut Report,
    contents: Vec<Content>,
    staging: Vec<u8>,
    outcome: Outcome,
}

impl<'a> Replay<'a> {
    fn start(runtime: &'a Runtime, program: &'a Program) -> anyhow::Result<Replay<'a>> {
        let mut stream: Stream = std::ptr::null_mut();
        // SAFETY: cudaStreamCreate writes one stream handle into `stream`.
        let result = unsafe { (runtime.stream_create)(&mut stream) };
        runtime.check(result, || "cudaStreamCreate".into())?;
        let mut report: *mut c_void = std::ptr::null_mut();
        // SAFETY: cudaHostAlloc writes the address of `size_of::<Report>()` bytes into `report`.
        let result = unsafe {
            (runtime.host_alloc)(&mut report, size_of::<Report>(), cuda::HOST_ALLOC_MAPPED)
        };
        runtime.check(result, || "cudaHostAlloc of the mismatch report".into())?;
        // SAFETY: `report` is `size_of::<Report>()` writable bytes just allocated, suitably
        // aligned (page-locked allocations are page aligned); all zeroes is a valid Report.
        unsafe { std::ptr::write_bytes(report.cast::<Report>(), 0, 1) };
        Ok(Replay {
            runtime,
            program,
            stream,
            report: report.cast(),
            contents: vec![Content::default(); program.bytes.len()],
            staging: Vec::new(),
            outcome: Outcome::default(),
        })
    }

    fn report(&self) -> &Report {
        // SAFETY: allocated and initialised in `start`, freed only in `finish`.
        unsafe { &*self.report }
    }

    fn run(
        &mut self,
        options: &RunOptions,
        iterations_done: &dyn Fn(u32),
    ) -> anyhow::Result<Outcome> {
        for &t in &self.program.resident {
            self.alloc(t, 0)?;
            self.upload(t, 0)?;
        }
        'iterations: for iteration in 0..options.iterations {
            let started = Instant::now();
            for step in &self.program.steps {
                match step {
                    Step::Alloc(t) => self.alloc(*t, iteration)?,
                    Step::Free(t) => self.free(*t)?,
                    Step::Upload(t) => self.upload(*t, iteration)?,
                    Step::Download(download) => {
                        if let Some(mismatch) = self.download(download, iteration)? {
                            self.outcome.mismatch = Some(mismatch);
                            break 'iterations;
                        }
                    }
                    Step::Launch(launch) => {
                        self.launch(launch, iteration)?;
                        if iteration == 0 && options.corrupt_op == Some(launch.op) {
                            self.corrupt(launch)?;
                        }
                        if self.report().done.load(Ordering::Acquire) != 0 {
                            break 'iterations;
                        }
                    }
                }
            }
            self.synchronize()?;
            if self.report().done.load(Ordering::Acquire) != 0 {
                break;
            }
            self.outcome
                .iteration_seconds
                .push(started.elapsed().as_secs_f64());
            iterations_done(iteration + 1);
        }
        self.synchronize()?;
        self.outcome.kernels_run = KERNELS_RUN.iter().map(|k| k.load(Ordering::Relaxed)).sum();
        let report = self.report();
        if self.outcome.mismatch.is_none() && report.done.load(Ordering::Acquire) != 0 {
            self.outcome.mismatch = Some(MismatchFound {
                iteration: report.iteration,
                op: report.op,
                tensor: report.tensor,
                address: report.address,
                offset: report.offset,
                expected: report.expected,
                found: report.found,
            });
        }
        Ok(std::mem::take(&mut self.outcome))
    }

    fn synchronize(&self) -> anyhow::Result<()> {
        // SAFETY: a stream created in `start`.
        let result = unsafe { (self.runtime.stream_synchronize)(self.stream) };
        self.runtime
            .check(result, || "cudaStreamSynchronize".into())
    }

    fn alloc(&mut self, t: TensorId, iteration: u32) -> anyhow::Result<()> {
        let bytes = self.program.bytes[t as usize];
        let mut ptr: *mut c_void = std::ptr::null_mut();
        // SAFETY: cudaMalloc writes one device address into `ptr`.
        let result = unsafe { (self.runtime.malloc)(&mut ptr, bytes as usize) };
        self.runtime.check(result, || {
            format!("cudaMalloc of tensor {t} ({bytes} bytes) in iteration {iteration}")
        })?;
        self.contents[t as usize] = Content {
            address: ptr as u64,
            ..Content::default()
        };
        self.outcome.allocations += 1;
        Ok(())
    }

    fn free(&mut self, t: TensorId) -> anyhow::Result<()> {
        let address = std::mem::take(&mut self.contents[t as usize]).address;
        // SAFETY: an address cudaMalloc returned and not freed since.
        let result = unsafe { (self.runtime.free)(address as *mut c_void) };
        self.runtime
            .check(result, || format!("cudaFree of tensor {t} at {address:#x}"))
    }

    /// The seed of `t`'s next version, written in `iteration`.
    fn next_version(&mut self, t: TensorId, iteration: u32) -> u64 {
        let content = &mut self.contents[t as usize];
        content.version = if content.written && content.iteration == iteration {
            content.version + 1
        } else {
            1
        };
        content.iteration = iteration;
        content.written = true;
        self.outcome.bytes_written += self.program.bytes[t as usize];
        pattern::seed(t, content.version, iteration)
    }

    fn upload(&mut self, t: TensorId, iteration: u32) -> anyhow::Result<()> {
        let bytes = self.program.bytes[t as usize] as usize;
        let seed = self.next_version(t, iteration);
        self.staging.resize(bytes, 0);
        pattern::fill(&mut self.staging, seed);
        let address = self.contents[t as usize].address;
        // SAFETY: copies `bytes` bytes from the staging buffer (pageable: the runtime stages it
        // before returning, so it may be refilled at once) to a live allocation of that size.
        let result = unsafe {
            (self.runtime.memcpy_async)(
                address as *mut c_void,
                self.staging.as_ptr().cast(),
                bytes,
                cuda::MEMCPY_HOST_TO_DEVICE,
                self.stream,
            )
        };
        self.outcome.uploads += 1;
        self.runtime.check(result, || {
            format!("cudaMemcpyAsync to tensor {t} ({bytes} bytes)")
        })
    }

    /// Copies the tensor to the host once the work before it is done, and checks it there.
    fn download(
        &mut self,
        download: &Download,
        iteration: u32,
    ) -> anyhow::Result<Option<MismatchFound>> {
        let t = download.tensor;
        let bytes = self.program.bytes[t as usize] as usize;
        let content = self.contents[t as usize];
        self.staging.resize(bytes, 0);
        // SAFETY: copies `bytes` bytes of a live allocation of that size into the staging
        // buffer, which nothing else uses until the stream is synchronised below.
        let result = unsafe {
            (self.runtime.memcpy_async)(
                self.staging.as_mut_ptr().cast(),
                content.address as *const c_void,
                bytes,
                cuda::MEMCPY_DEVICE_TO_HOST,
                self.stream,
            )
        };
        self.runtime.check(result, || {
            format!("cudaMemcpyAsync from tensor {t} ({bytes} bytes)")
        })?;
        self.synchronize()?;
        self.outcome.downloads += 1;
        if !content.written {
            self.outcome.unwritten_reads += 1;
            return Ok(None);
        }
        let seed = pattern::seed(t, content.version, content.iteration);
        let mismatch = if download.check == AccessKind::CheckAll {
            self.outcome.checks_all += 1;
            self.outcome.bytes_checked_all += bytes as u64;
            pattern::check_all(&self.staging, seed)
        } else {
            self.outcome.checks_sampled += 1;
            pattern::check_sampled(&self.staging, seed)
        };
        Ok(mismatch.map(|m| MismatchFound {
            iteration: u64::from(iteration),
            op: download.op,
            tensor: u64::from(t),
            address: content.address,
            offset: m.offset,
            expected: m.expected,
            found: m.found,
        }))
    }

    fn launch(&mut self, launch: &Launch, iteration: u32) -> anyhow::Result<()> {
        let chunks = launch.accesses.chunks(MAX_ACCESSES);
        let last = chunks.len().saturating_sub(1);
        for (index, chunk) in chunks.enumerate() {
            let mut args = KernelArgs {
                report: self.report as u64,
                iteration: u64::from(iteration),
                op: launch.op,
                duration_ns: if index == last { launch.duration_ns } else { 0 },
                issued_ns: 0,
                count: 0,
                slots: [Slot::default(); MAX_ACCESSES],
            };
            for access in chunk {
                let t = access.tensor;
                let content = self.contents[t as usize];
                if content.address == 0 {
                    bail!(
                        "internal error: op {} touches tensor {t}, which is not allocated",
                        launch.op
                    );
                }
                let (kind, seed) = match access.kind {
                    AccessKind::Write => (WRITE, self.next_version(t, iteration)),
                    _ if !content.written => {
                        self.outcome.unwritten_reads += 1;
                        continue;
                    }
                    kind => {
                        let seed = pattern::seed(t, content.version, content.iteration);
                        if kind == AccessKind::CheckAll {
                            self.outcome.checks_all += 1;
                            self.outcome.bytes_checked_all += self.program.bytes[t as usize];
                            (CHECK_ALL, seed)
                        } else {
                            self.outcome.checks_sampled += 1;
                            (CHECK_SAMPLED, seed)
                        }
                    }
                };
                args.slots[args.count as usize] = Slot {
                    address: content.address,
                    bytes: self.program.bytes[t as usize],
                    seed,
                    tensor: t,
                    kind,
                };
                args.count += 1;
            }
            args.issued_ns = now_ns();
            let mut params = [(&raw mut args).cast::<c_void>()];
            let one = Dim3 { x: 1, y: 1, z: 1 };
            // SAFETY: our registered kernel with its one parameter; the runtime copies the
            // argument at the launch, so `args` may go out of scope after it.
            let result = unsafe {
                (self.runtime.launch_kernel)(
                    KERNELS[launch.kernel % KERNELS.len()] as *const c_void,
                    one,
                    one,
                    params.as_mut_ptr(),
                    0,
                    self.stream,
                )
            };
            self.runtime
                .check(result, || format!("cudaLaunchKernel of op {}", launch.op))?;
            self.outcome.launches += 1;
        }
        Ok(())
    }

    /// Overwrites the first word of the first tensor `launch` writes (see
    /// [`RunOptions::corrupt_op`]).
    fn corrupt(&mut self, launch: &Launch) -> anyhow::Result<()> {
        let Some(access) = launch.accesses.iter().find(|a| a.kind == AccessKind::Write) else {
            bail!("--corrupt: op {} writes no tensor", launch.op);
        };
        let t = access.tensor;
        let bytes = (self.program.bytes[t as usize] as usize).min(8);
        let garbage = [0xA5u8; 8];
        // SAFETY: copies at most 8 bytes, no more than the tensor's size, into a live
        // allocation, from a local array the pageable copy stages before returning.
        let result = unsafe {
            (self.runtime.memcpy_async)(
                self.contents[t as usize].address as *mut c_void,
                garbage.as_ptr().cast(),
                bytes,
                cuda::MEMCPY_HOST_TO_DEVICE,
                self.stream,
            )
        };
        self.runtime
            .check(result, || format!("cudaMemcpyAsync corrupting tensor {t}"))
    }

    /// Frees what is still allocated, the report and the stream.
    fn finish(self) -> anyhow::Result<()> {
        for (t, content) in self.contents.iter().enumerate() {
            if content.address != 0 {
                // SAFETY: an address cudaMalloc returned and not freed since.
                let result = unsafe { (self.runtime.free)(content.address as *mut c_void) };
                self.runtime
                    .check(result, || format!("cudaFree of tensor {t}"))?;
            }
        }
        // SAFETY: allocated with cudaHostAlloc in `start`; no kernel uses it any more (the
        // frees above waited for the device).
        let result = unsafe { (self.runtime.free_host)(self.report.cast()) };
        self.runtime.check(result, || "cudaFreeHost".into())?;
        // SAFETY: the stream created in `start`.
        let result = unsafe { (self.runtime.stream_destroy)(self.stream) };
        self.runtime
            .check(result, || "cudaStreamDestroy".into())
            .context("ending the replay")
    }
}

/// Nanoseconds since the first launch, the common clock of the host and the kernels.
fn now_ns() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// Kernels that ran, per kernel: the launches the device executed, compared with those made.
static KERNELS_RUN: [AtomicU64; KERNELS.len()] = [const { AtomicU64::new(0) }; KERNELS.len()];

/// Whether kernels record their spans, and the spans recorded (for a timeline of the device).
static TIMELINE: AtomicBool = AtomicBool::new(false);
static SPANS: parking_lot::Mutex<Vec<KernelSpan>> = parking_lot::Mutex::new(Vec::new());

/// Scheduled end of the previous kernel, on [`now_ns`]'s clock.
static PREVIOUS_END: AtomicU64 = AtomicU64::new(0);

/// The replay's kernels: the same body under eight names, so ops of different names launch
/// different kernels, as they did in the program recorded (an interposer tells kernels apart).
pub const KERNELS: [cuda::ShimKernel; 8] = [
    replay_kernel::<0>,
    replay_kernel::<1>,
    replay_kernel::<2>,
    replay_kernel::<3>,
    replay_kernel::<4>,
    replay_kernel::<5>,
    replay_kernel::<6>,
    replay_kernel::<7>,
];

const KERNEL_NAMES: [&std::ffi::CStr; 8] = [
    c"itermem_replay_op0",
    c"itermem_replay_op1",
    c"itermem_replay_op2",
    c"itermem_replay_op3",
    c"itermem_replay_op4",
    c"itermem_replay_op5",
    c"itermem_replay_op6",
    c"itermem_replay_op7",
];

/// The kernel body, run by cuda-shim on the stream's thread. It must not panic (the shim would
/// report a launch failure): every access is within the slots' bounds by construction.
extern "C" fn replay_kernel<const K: usize>(params: *mut *mut c_void) {
    let start = now_ns();
    KERNELS_RUN[K].fetch_add(1, Ordering::Relaxed);
    // SAFETY: cuda-shim passes one pointer per registered parameter; ours is one KernelArgs,
    // copied at the launch and alive while the body runs.
    let args = unsafe { &*(*params).cast::<KernelArgs>() };
    // SAFETY: the report stays allocated until every kernel completed (see `finish`).
    let report = unsafe { &*(args.report as *const Report) };
    let count = (args.count as usize).min(MAX_ACCESSES);
    for slot in &args.slots[..count] {
        let address = slot.address as *mut u8;
        let len = slot.bytes as usize;
        let mismatch = if slot.kind == WRITE {
            // SAFETY: a live device allocation of `len` bytes, addressable from the host on
            // cuda-shim; only this kernel touches it while the stream runs it.
            pattern::fill(
                unsafe { std::slice::from_raw_parts_mut(address, len) },
                slot.seed,
            );
            None
        } else {
            // SAFETY: as above, read only.
            let bytes = unsafe { std::slice::from_raw_parts(address, len) };
            if slot.kind == CHECK_ALL {
                pattern::check_all(bytes, slot.seed)
            } else {
                pattern::check_sampled(bytes, slot.seed)
            }
        };
        if let Some(mismatch) = mismatch {
            record(report, args, slot, mismatch);
        }
    }
    pace(start, args.duration_ns);
    if TIMELINE.load(Ordering::Relaxed) {
        SPANS.lock().push(KernelSpan {
            iteration: args.iteration,
            op: args.op,
            issued_ns: args.issued_ns,
            start_ns: start,
            end_ns: now_ns(),
        });
    }
}

/// Writes the first mismatch into the report; later ones are dropped.
fn record(report: &Report, args: &KernelArgs, slot: &Slot, mismatch: Mismatch) {
    if report
        .claimed
        .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Relaxed)
        .is_err()
    {
        return;
    }
    let fields = report as *const Report as *mut Report;
    // SAFETY: the claim above makes this thread the only writer of the plain fields, and the
    // host reads them only after `done` is set with Release below.
    unsafe {
        (*fields).iteration = args.iteration;
        (*fields).op = args.op;
        (*fields).tensor = u64::from(slot.tensor);
        (*fields).address = slot.address;
        (*fields).offset = mismatch.offset;
        (*fields).expected = mismatch.expected;
        (*fields).found = mismatch.found;
    }
    report.done.store(1, Ordering::Release);
}

/// Sleeps until the kernel has taken `duration_ns` since it started (since the previous
/// kernel's scheduled end, when it ran back to back).
fn pace(start: u64, duration_ns: u64) {
    thread_local! {
        static PRECISE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
    if !PRECISE.get() {
        // SAFETY: PR_SET_TIMERSLACK of the calling thread to 1 ns: its sleeps end on time
        // rather than up to 50 µs late (Linux's default slack).
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
        PRECISE.set(true);
    }
    let previous = PREVIOUS_END.load(Ordering::Relaxed);
    let begin = if start.saturating_sub(previous) <= BACK_TO_BACK_NS {
        previous
    } else {
        start
    };
    let end = begin + duration_ns;
    let now = now_ns();
    if end > now {
        std::thread::sleep(Duration::from_nanos(end - now));
    }
    PREVIOUS_END.store(end.max(begin), Ordering::Relaxed);
}
