//! Fuzz targets for every importer and for the trace reader, run as ordinary tests on stable
//! Rust (issue 14: "a fuzz target per importer and for the trace reader … with a fixed corpus
//! and a few thousand seeded mutations: 0 panics, peak memory bounded").
//!
//! Each target starts from small valid inputs built here (and, when `../shared/real-traces` is
//! present, a few small real files; "SKIPPED" is printed when it is not), applies
//! [`MUTATIONS`] seeded mutations (bit flips, byte inserts and deletes, truncation, splicing in
//! pieces of other seeds, duplicated chunks, huge integers and varints; one to four of them per
//! input, an eighth of the inputs gzipped afterwards) and runs the importer on each input under
//! `catch_unwind`. Errors are the expected outcome; a panic, or a case that holds more than
//! [`CASE_HEAP_BOUND`] of heap, is a failure reported with the case's PRNG seed and its
//! mutations, and the input is saved for reproduction. At the end the process's peak resident
//! memory must be below [`PROCESS_RSS_BOUND`].
//!
//! Heap is counted by a global allocator, per thread (the test functions run in parallel; the
//! importers are single-threaded): resident memory alone would miss an allocation sized from a
//! corrupt header that is reserved but never touched, which is exactly the bug to catch.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::io::Write;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use itermem::event::{CopyKind, Event, EventKind, MemKind};
use itermem::import::{self, ImportOptions, Loaded};
use itermem::ops;
use itermem::rng::SplitMix64;
use itermem::trace::{Clock, TraceFile, TraceHeader};
use serde_pickle::{SerOptions, Value};

#[path = "support/measured.rs"]
mod measured;
#[path = "support/real_traces.rs"]
#[allow(dead_code)] // the fuzz targets need one file, not the folder
mod real_traces;
#[path = "support/samples.rs"]
mod samples;
use real_traces::real_trace;
use samples::{GEN, dict, entry};

/// Mutated inputs per target.
const MUTATIONS: u64 = 5000;
/// The most heap one case may hold at once beyond what was live before it: the inputs are at
/// most a few hundred KB, so anything near this is an allocation sized from the input's claims.
const CASE_HEAP_BOUND: usize = 64 << 20;
/// The most resident memory the whole test process may ever have reached.
const PROCESS_RSS_BOUND: u64 = 512 << 20;

// ---------------------------------------------------------------------------------------------
// Heap accounting
// ---------------------------------------------------------------------------------------------

/// The system allocator, counting the bytes each thread holds.
struct Counting;

thread_local! {
    /// Heap bytes allocated and not yet freed by this thread (frees of another thread's
    /// allocations saturate at 0).
    static LIVE: Cell<usize> = const { Cell::new(0) };
    /// The highest `LIVE` since the last [`measure`] began.
    static PEAK: Cell<usize> = const { Cell::new(0) };
}

fn charge(bytes: usize) {
    // `try_with`: the slots are gone while the thread is being torn down; nothing to count then.
    let _ = LIVE.try_with(|live| {
        let now = live.get().saturating_add(bytes);
        live.set(now);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
    });
}

fn credit(bytes: usize) {
    let _ = LIVE.try_with(|live| live.set(live.get().saturating_sub(bytes)));
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so the
// `GlobalAlloc` contract holds exactly as it does for `System`; the bookkeeping only touches
// const-initialised thread-local cells, which neither allocate nor unwind.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller keeps `alloc`'s contract (a non-zero-size layout); passed on as is.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            charge(layout.size());
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            charge(layout.size());
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller guarantees `ptr` came from this allocator (hence from `System`)
        // with `layout`.
        unsafe { System.dealloc(ptr, layout) };
        credit(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller guarantees `ptr` came from `System` with `layout` and that
        // `new_size` is valid for it.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            // Charged before the old block is credited: a moving realloc holds both.
            charge(new_size);
            credit(layout.size());
        }
        new
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Runs `f` and returns its result and the most heap this thread held during it, beyond what
/// it held before.
fn measure<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let before = LIVE.with(Cell::get);
    PEAK.with(|peak| peak.set(before));
    let result = f();
    let peak = PEAK.with(Cell::get);
    (result, peak.saturating_sub(before))
}

/// The peak resident memory of this process so far (`VmHWM`), in bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

// ---------------------------------------------------------------------------------------------
// Mutations
// ---------------------------------------------------------------------------------------------

/// Numbers that overflow, underflow or are not integers, for text formats.
const TEXT_NUMBERS: [&str; 14] = [
    "0",
    "-1",
    "18446744073709551615",
    "18446744073709551616",
    "9223372036854775807",
    "-9223372036854775808",
    "4294967296",
    "1e308",
    "1e999",
    "-0.0",
    "0.5",
    "99999999999999999999999999999999",
    "NaN",
    "\"12\"",
];

/// Huge and malformed LEB128 varints and fixed-width integers, for binary formats.
const BINARY_NUMBERS: [&[u8]; 9] = [
    &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01], // u64::MAX
    &[0xff; 11],                                                   // runs past 64 bits
    &[
        0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00,
    ], // overlong zero
    &[0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01], // 2^63
    &[0xff, 0xff, 0xff, 0x7f],                                     // 2^28 - 1
    &[0xff, 0xff, 0xff, 0xff],                                     // u32::MAX
    &[0x00, 0x00, 0x00, 0x80],                                     // i32::MIN
    &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f],             // i64::MAX
    &[0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80],             // i64::MIN
];

/// One change to an input; kept to report a failing case.
#[derive(Debug)]
enum Mutation {
    FlipBit {
        at: usize,
        bit: u8,
    },
    SetByte {
        at: usize,
        value: u8,
    },
    Insert {
        at: usize,
        bytes: Vec<u8>,
    },
    Delete {
        at: usize,
        len: usize,
    },
    Truncate {
        len: usize,
    },
    /// Copies `len` bytes from `from` to just before `to`.
    Duplicate {
        from: usize,
        len: usize,
        to: usize,
    },
    /// Inserts `len` bytes of seed `seed` from `from` at `at`.
    Splice {
        at: usize,
        seed: usize,
        from: usize,
        len: usize,
    },
    /// Replaces the number (a run of ASCII digits, and a sign) found from `at` on, or else the
    /// bytes at `at`, with `number`.
    Number {
        at: usize,
        number: Vec<u8>,
    },
}

impl Mutation {
    fn random(rng: &mut SplitMix64, input: &[u8], seeds: &[Seed]) -> Mutation {
        let len = input.len();
        let at = |rng: &mut SplitMix64| rng.below(len as u64 + 1) as usize;
        let within = |rng: &mut SplitMix64| rng.below(len.max(1) as u64) as usize;
        match rng.below(10) {
            0 | 1 => Mutation::FlipBit {
                at: within(rng),
                bit: rng.below(8) as u8,
            },
            2 => {
                const INTERESTING: [u8; 12] = [
                    0, 1, 0x7f, 0x80, 0xff, b'{', b'[', b'"', b'\n', b',', b'-', b'9',
                ];
                let value = if rng.below(2) == 0 {
                    INTERESTING[rng.below(INTERESTING.len() as u64) as usize]
                } else {
                    rng.next_u64() as u8
                };
                Mutation::SetByte {
                    at: within(rng),
                    value,
                }
            }
            3 => {
                let n = 1 + rng.below(16) as usize;
                Mutation::Insert {
                    at: at(rng),
                    bytes: (0..n).map(|_| rng.next_u64() as u8).collect(),
                }
            }
            4 => Mutation::Delete {
                at: within(rng),
                len: 1 + rng.below(32) as usize,
            },
            5 => Mutation::Truncate { len: at(rng) },
            6 => Mutation::Duplicate {
                from: within(rng),
                len: 1 + rng.below(256) as usize,
                to: at(rng),
            },
            7 => {
                let seed = rng.below(seeds.len() as u64) as usize;
                let other = seeds[seed].bytes.len();
                Mutation::Splice {
                    at: at(rng),
                    seed,
                    from: rng.below(other.max(1) as u64) as usize,
                    len: 1 + rng.below(128) as usize,
                }
            }
            _ => {
                let number = if rng.below(2) == 0 {
                    TEXT_NUMBERS[rng.below(TEXT_NUMBERS.len() as u64) as usize]
                        .as_bytes()
                        .to_vec()
                } else {
                    BINARY_NUMBERS[rng.below(BINARY_NUMBERS.len() as u64) as usize].to_vec()
                };
                Mutation::Number {
                    at: within(rng),
                    number,
                }
            }
        }
    }

    fn apply(&self, input: &mut Vec<u8>, seeds: &[Seed]) {
        let len = input.len();
        match *self {
            Mutation::FlipBit { at, bit } => {
                if let Some(b) = input.get_mut(at) {
                    *b ^= 1 << bit;
                }
            }
            Mutation::SetByte { at, value } => {
                if let Some(b) = input.get_mut(at) {
                    *b = value;
                }
            }
            Mutation::Insert { at, ref bytes } => {
                input.splice(at.min(len)..at.min(len), bytes.iter().copied());
            }
            Mutation::Delete { at, len: n } => {
                input.drain(at.min(len)..(at + n).min(len));
            }
            Mutation::Truncate { len: n } => input.truncate(n),
            Mutation::Duplicate { from, len: n, to } => {
                let from = from.min(len);
                let chunk = input[from..(from + n).min(len)].to_vec();
                input.splice(to.min(len)..to.min(len), chunk);
            }
            Mutation::Splice {
                at,
                seed,
                from,
                len: n,
            } => {
                let other = &seeds[seed].bytes;
                let from = from.min(other.len());
                let chunk = &other[from..(from + n).min(other.len())];
                input.splice(at.min(len)..at.min(len), chunk.iter().copied());
            }
            Mutation::Number { at, ref number } => {
                let at = at.min(len);
                let digits = input[at..]
                    .iter()
                    .position(u8::is_ascii_digit)
                    .map(|i| at + i);
                let range = match digits {
                    Some(start) => {
                        let start = if start > 0 && input[start - 1] == b'-' {
                            start - 1
                        } else {
                            start
                        };
                        let end = input[start + 1..]
                            .iter()
                            .position(|b| !b.is_ascii_digit())
                            .map_or(len, |i| start + 1 + i);
                        start..end
                    }
                    None => at..(at + number.len()).min(len),
                };
                input.splice(range, number.iter().copied());
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The runner
// ---------------------------------------------------------------------------------------------

/// A valid input a target's mutations start from.
#[derive(Clone)]
struct Seed {
    name: String,
    bytes: Vec<u8>,
}

fn seed(name: impl Into<String>, bytes: impl Into<Vec<u8>>) -> Seed {
    Seed {
        name: name.into(),
        bytes: bytes.into(),
    }
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(bytes).unwrap();
    enc.finish().unwrap()
}

/// A fresh path for a target's inputs.
fn scratch(name: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("fuzz-{}-{name}", std::process::id()))
}

/// A small real file as a seed (decompressed if gzip), if the folder and the file are there.
fn real_seed(relative: &str) -> Option<Seed> {
    let path = real_trace(relative)?;
    let raw = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let bytes = if raw.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::MultiGzDecoder::new(&raw[..]), &mut out)
            .unwrap();
        out
    } else {
        raw
    };
    Some(seed(format!("real {relative}"), bytes))
}

/// Runs `target` on every seed and on [`MUTATIONS`] mutated inputs; panics listing every case
/// that panicked or held more than [`CASE_HEAP_BOUND`]. `target` says whether the importer
/// accepted the input: how many mutated inputs still get through (printed) shows how deep
/// the mutations reach.
fn fuzz(name: &str, seeds: &[Seed], target: impl Fn(&[u8]) -> bool) {
    // The case seeds differ between targets: FNV-1a of the target's name.
    let base = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    let mut failures = Vec::new();
    let mut worst = (0usize, String::new());
    let mut accepted = 0;
    let mut failed_cases = 0;
    let cases = seeds.len() as u64 + MUTATIONS;
    for case in 0..cases {
        let (input, what) = case_input(base, case, seeds, seeds.len());
        let (outcome, heap) = measure(|| catch_unwind(AssertUnwindSafe(|| target(&input))));
        let mut failed = None;
        if let Ok(true) = outcome {
            accepted += 1;
        }
        if let Err(payload) = outcome {
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "(no message)".into());
            failed = Some(format!("{name}: panicked ({message}) on {what}"));
        } else if heap > CASE_HEAP_BOUND {
            failed = Some(format!("{name}: held {heap} bytes of heap on {what}"));
        }
        if let Some(failure) = failed {
            // The first few are saved and listed; the rest only counted.
            if failures.len() < 20 {
                let saved = scratch(&format!("{name}-failure-{case}"));
                std::fs::write(&saved, &input).unwrap();
                failures.push(format!("{failure}; input saved as {}", saved.display()));
            }
            failed_cases += 1;
        }
        if heap > worst.0 {
            worst = (heap, what);
        }
    }
    eprintln!(
        "{name}: {cases} inputs, {accepted} accepted, {failed_cases} failures, most heap held \
         by one case {} bytes ({})",
        worst.0, worst.1
    );
    assert!(
        failures.is_empty(),
        "{failed_cases} of {cases} inputs failed; the first:\n{}",
        failures.join("\n")
    );
    let rss = peak_rss();
    assert!(
        rss < PROCESS_RSS_BOUND,
        "peak resident memory {rss} bytes, over {PROCESS_RSS_BOUND}"
    );
}

/// Case `case` of a target whose cases are seeded from `base`: the seed of that index unchanged,
/// then mutations of the first `mutable` seeds (one to four, an eighth of them gzipped
/// afterwards); and what it is, to reproduce it.
fn case_input(base: u64, case: u64, seeds: &[Seed], mutable: usize) -> (Vec<u8>, String) {
    if let Some(s) = seeds.get(case as usize) {
        return (s.bytes.clone(), format!("seed {:?} unchanged", s.name));
    }
    let rng_seed = base ^ case.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut rng = SplitMix64::new(rng_seed);
    let seeds = &seeds[..mutable];
    let from = rng.below(seeds.len() as u64) as usize;
    let mut input = seeds[from].bytes.clone();
    let mut applied = Vec::new();
    for _ in 0..1 + rng.below(4) {
        let mutation = Mutation::random(&mut rng, &input, seeds);
        mutation.apply(&mut input, seeds);
        applied.push(mutation);
    }
    let zipped = rng.below(8) == 0;
    if zipped {
        input = gzip(&input);
    }
    let what = format!(
        "case {case} (rng seed {rng_seed:#x}): seed {:?}, {applied:?}{}",
        seeds[from].name,
        if zipped { ", then gzipped" } else { "" }
    );
    (input, what)
}

/// A file removed when dropped.
struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A target that reads its input from a file (the importers open files themselves); the file
/// goes with the target.
fn from_file(name: &str, read: impl Fn(&Path) -> bool) -> impl Fn(&[u8]) -> bool {
    let file = TempFile(scratch(name));
    move |input: &[u8]| {
        // Overwritten in place and then cut to length, not truncated to 0 first
        // (`fs::write`): ext4 flushes a file truncated to 0 and rewritten when it is closed,
        // which would make every case take milliseconds.
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&file.0)
            .unwrap();
        out.write_all(input).unwrap();
        out.set_len(input.len() as u64).unwrap();
        drop(out);
        read(&file.0)
    }
}

// ---------------------------------------------------------------------------------------------
// Seeds
// ---------------------------------------------------------------------------------------------

fn header() -> TraceHeader {
    TraceHeader {
        word_size: 8,
        clock: Clock::MonotonicSinceStart,
        start_unix_ns: 1_700_000_000_000_000_000,
        pid: 77,
        device_name: "Fuzz GPU".into(),
        device_total_memory: 8 << 30,
        command_line: vec!["python".into(), "train.py".into()],
    }
}

/// Every kind of event: kernel names, device, managed, stream-ordered and pinned host
/// allocations, copies, memsets, launches touching few and many (spilled) allocations, a
/// layout-less launch, frees; `iters` iterations of 8 layers.
fn training(iters: u64) -> Vec<Event> {
    let mut t = 0;
    let mut events = Vec::new();
    let mut push = |kind: EventKind| {
        t += 250;
        events.push(Event::new(t, kind));
    };
    for (kernel, name) in ["fwd<float>", "bwd", "step"].iter().enumerate() {
        push(EventKind::KernelName {
            kernel: kernel as u32,
            name: name.to_string(),
        });
    }
    let malloc = |id, size, kind, stream| EventKind::Malloc {
        id,
        addr: 0x7000_0000 + id * 0x1_0000,
        size,
        kind,
        stream,
    };
    push(malloc(1, 1 << 20, MemKind::Device, 0));
    push(malloc(2, 1 << 16, MemKind::PinnedHost, 0));
    push(malloc(3, 4096, MemKind::Managed, 0));
    let mut id = 4;
    for _ in 0..iters {
        let first = id;
        for layer in 0..8u64 {
            push(malloc(id, 1024 + 512 * layer, MemKind::Device, 0));
            push(EventKind::Launch {
                kernel: 0,
                stream: 0,
                layout_known: true,
                touched: [1, id].into_iter().collect(),
            });
            id += 1;
        }
        push(malloc(id, 8192, MemKind::Async, 0x55));
        push(EventKind::Memcpy {
            dst: Some(id),
            src: Some(2),
            bytes: 8192,
            kind: CopyKind::HostToDevice,
            stream: 0x55,
            asynchronous: true,
        });
        push(EventKind::Memset {
            dst: Some(id),
            bytes: 8192,
            stream: 0x55,
            asynchronous: true,
        });
        push(EventKind::Launch {
            kernel: 1,
            stream: 0x55,
            layout_known: true,
            touched: (first..=id).chain([1, 3]).collect(),
        });
        push(EventKind::Launch {
            kernel: 2,
            stream: 0,
            layout_known: false,
            touched: Default::default(),
        });
        push(EventKind::Memcpy {
            dst: None,
            src: Some(id),
            bytes: 4,
            kind: CopyKind::DeviceToHost,
            stream: 0,
            asynchronous: false,
        });
        for freed in first..=id {
            push(EventKind::Free {
                id: freed,
                stream: if freed == id { 0x55 } else { 0 },
            });
        }
        id += 1;
    }
    push(EventKind::Free { id: 1, stream: 0 });
    push(EventKind::Free { id: 2, stream: 0 });
    events
}

/// itermem traces: a few iterations, one without its end record (a process that crashed),
/// one with no events.
fn trace_seeds() -> Vec<Seed> {
    let whole = itermem::trace::format::encode_trace(&header(), &training(3)).unwrap();
    let cut = whole[..whole.len() - 5].to_vec();
    let empty = itermem::trace::format::encode_trace(&header(), &[]).unwrap();
    vec![
        seed("trace of 3 iterations", whole),
        seed("trace without its end", cut),
        seed("trace without events", empty),
    ]
}

/// PyTorch memory snapshots: two devices, with and without times, in protocols 2 and 3, and a
/// small real snapshot.
fn snapshot_seeds() -> Vec<Seed> {
    let device = |base: i64, timed: bool| -> Value {
        let t = |us: i64| timed.then_some(us);
        Value::List(vec![
            entry("segment_alloc", base, 1 << 21, t(1)),
            entry("alloc", base, 512, t(2)),
            entry("alloc", base + 512, 1024, t(3)),
            entry("free_requested", base, 512, t(4)),
            entry("free_completed", base, 512, t(5)),
            entry("alloc", base, 256, t(6)),
            entry("free", base + 512, 1024, t(7)),
            entry("free_requested", base + 4096, 64, t(8)),
            entry("snapshot", 0, 0, t(9)),
        ])
    };
    let snapshot = |timed: bool| {
        dict(vec![
            ("segments", Value::List(Vec::new())),
            (
                "device_traces",
                Value::List(vec![device(0x1000, timed), device(0x9000, timed)]),
            ),
        ])
    };
    let mut seeds = vec![
        seed(
            "snapshot, protocol 3",
            serde_pickle::value_to_vec(&snapshot(true), SerOptions::new()).unwrap(),
        ),
        seed(
            "snapshot without times, protocol 2",
            serde_pickle::value_to_vec(&snapshot(false), SerOptions::new().proto_v2()).unwrap(),
        ),
    ];
    seeds.extend(real_seed("pytorch-snapshots/tiny_linear10kx50k_3fwd.pkl"));
    seeds
}

fn memory_event(ts: f64, device_type: i64, device: i64, addr: u64, bytes: i64) -> String {
    format!(
        "{{\"ph\": \"i\", \"cat\": \"cpu_instant_event\", \"s\": \"t\", \"name\": \"[memory]\", \
         \"pid\": 1, \"tid\": 2, \"ts\": {ts}, \"args\": {{\"Ev Idx\": 7, \"Device Type\": \
         {device_type}, \"Device Id\": {device}, \"Addr\": {addr}, \"Bytes\": {bytes}, \
         \"Total Allocated\": 0, \"Total Reserved\": 0}}}}"
    )
}

/// Profiler traces: memory events of two devices and the CPU, out of time order, with kernels,
/// runtime calls and profiler steps; also the bare-array form.
fn chrome_events() -> Vec<String> {
    let mut events = vec![
        r#"{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0, "dur": 50}"#
            .to_string(),
        r#"{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#2", "ts": 50, "dur": 50}"#
            .to_string(),
        r#"{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 10, "dur": 2, "args": {"correlation": 7}}"#
            .to_string(),
        r#"{"ph": "X", "cat": "kernel", "name": "gemm", "ts": 55, "dur": 5, "args": {"correlation": 7, "Bytes": [1]}}"#
            .to_string(),
        r#"{"ph": "X", "cat": "Runtime", "name": "cudaLaunchKernel", "ts": 60, "dur": 2, "args": {"correlation": 8}}"#
            .to_string(),
        r#"{"ph": "X", "cat": "Kernel", "name": "relu", "ts": 70, "dur": 1.5, "args": {"correlation": 8}}"#
            .to_string(),
    ];
    for (ts, device_type, device, addr, bytes) in [
        (20.0, 1, 0, 0x100, 64),
        (5.0, 1, 0, 0x200, 128),
        (30.0, 1, 0, 0x100, -64),
        (31.5, 1, 1, 0x100, 4096),
        (40.0, 0, -1, 0x5000, 8),
        (45.0, 1, 0, 0x300, -32),
        (80.0, 1, 0, 0x200, -128),
    ] {
        events.push(memory_event(ts, device_type, device, addr, bytes));
    }
    events
}

fn chrome_seeds() -> Vec<Seed> {
    let events = chrome_events();
    let object = format!(
        "{{\"schemaVersion\": 1, \"deviceProperties\": [{{\"id\": 0, \"name\": \"GPU\"}}], \
         \"traceEvents\": [{}], \"traceName\": \"x\"}}",
        events.join(",\n")
    );
    let array = format!("[{}]", events.join(","));
    vec![
        seed("profiler trace", object.into_bytes()),
        seed("profiler trace, bare array", array.into_bytes()),
    ]
}

fn csv_seeds() -> Vec<Seed> {
    let mut seeds = vec![
        seed(
            "csv with header",
            "id,lower,upper,size\n0,0,3,10\n1,1,2,20\n2,2,9,4096\n3,5,6,1\n",
        ),
        seed(
            "csv without header",
            "\u{feff}7, 0, 4, 16\r\n\r\n8,3,5,512\r\n",
        ),
    ];
    seeds.extend(real_seed(
        "derived-dsa-csv/tiny_linear10kx50k_3fwd_dev0.csv",
    ));
    seeds.extend(real_seed(
        "dsa-benchmarks/minimalloc-challenging/A.1048576.csv",
    ));
    seeds
}

const DTR: [&str; 17] = [
    r#"{"ANNOTATION":"START","INSTRUCTION":"ANNOTATE"}"#,
    r#"{"INSTRUCTION":"CONSTANT","NAME":"w"}"#,
    r#"{"INSTRUCTION":"MEMORY","MEMORY":"100","NAME":"w"}"#,
    r#"{"INSTRUCTION":"CONSTANT","NAME":"x"}"#,
    r#"{"INSTRUCTION":"MEMORY","MEMORY":10,"NAME":"x"}"#,
    r#"{"ARGS":["x","w"],"INSTRUCTION":"CALL","NAME":"conv","RESULT":["y"],"TIME":"1000"}"#,
    r#"{"INSTRUCTION":"MEMORY","MEMORY":"50","NAME":"y"}"#,
    r#"{"ALIAS":"-1","INSTRUCTION":"ALIAS","NAME":"y"}"#,
    r#"{"ARGS":["y"],"INSTRUCTION":"CALL","NAME":"view","RESULT":["v"],"TIME":"3"}"#,
    r#"{"INSTRUCTION":"MEMORY","MEMORY":"50","NAME":"v"}"#,
    r#"{"ALIAS":"0","INSTRUCTION":"ALIAS","NAME":"v"}"#,
    r#"{"INSTRUCTION":"RELEASE","NAME":"x"}"#,
    r#"{"ANNOTATION":"BACKWARD","INSTRUCTION":"ANNOTATE"}"#,
    r#"{"ARGS":["v"],"INSTRUCTION":"CALL","NAME":"relu","RESULT":["z"],"TIME":250}"#,
    r#"{"INSTRUCTION":"MEMORY","MEMORY":"50","NAME":"z"}"#,
    r#"{"ALIAS":-1,"INSTRUCTION":"ALIAS","NAME":"z"}"#,
    r#"{"INSTRUCTION":"RELEASE","NAME":"y"}"#,
];

fn dtr_seeds() -> Vec<Seed> {
    let mut seeds = vec![seed("dtr log", DTR.join("\n"))];
    seeds.extend(real_seed(
        "dtr-op-logs/unet-6-8000000000.0-2020-10-1-10-57-18-default.log.gz",
    ));
    seeds
}

fn generated_seeds() -> Vec<Seed> {
    let mut seeds = vec![seed("generated trace", GEN.join("\n"))];
    seeds.extend(real_seed("generated-cpu/gen_vgg16_b32_sgd.jsonl.gz"));
    seeds
}

// ---------------------------------------------------------------------------------------------
// Targets
// ---------------------------------------------------------------------------------------------

#[test]
fn fuzz_trace_reader() {
    fuzz("trace-reader", &trace_seeds(), |input| {
        let Ok(trace) = TraceFile::from_bytes("fuzz.itrace", input.to_vec()) else {
            return false;
        };
        let mut events = trace.events();
        let clean = events.by_ref().all(|event| event.is_ok());
        clean && events.end_record().is_some()
    });
}

/// The trace importers take files: every recording is also turned into its allocation problem,
/// as `compare` does.
fn import_target(name: &str) -> impl Fn(&[u8]) -> bool {
    from_file(name, |path| {
        match import::load_with(path, &ImportOptions::default()) {
            Ok(Loaded::Recording(recording)) => recording.to_instance(None).is_ok(),
            Ok(Loaded::Instance(_)) => true,
            Err(_) => false,
        }
    })
}

#[test]
fn fuzz_import_itermem_trace() {
    fuzz(
        "import-itermem-trace",
        &trace_seeds(),
        import_target("import.itrace"),
    );
}

#[test]
fn fuzz_import_torch_snapshot() {
    fuzz(
        "import-snapshot",
        &snapshot_seeds(),
        import_target("import.pickle"),
    );
}

#[test]
fn fuzz_import_profiler_trace() {
    fuzz(
        "import-profiler-trace",
        &chrome_seeds(),
        import_target("import.json"),
    );
}

#[test]
fn fuzz_import_dsa_csv() {
    let read = from_file("import.csv", |path| import::read_dsa_csv(path).is_ok());
    fuzz("import-dsa-csv", &csv_seeds(), |input| {
        let parsed = import::parse_dsa_csv("fuzz.csv", input).is_ok();
        read(input) || parsed
    });
}

fn ops_target(input: &[u8]) -> bool {
    ops::parse(
        Path::new("fuzz.log"),
        input.to_vec(),
        &ops::LoadOptions::default(),
    )
    .is_ok()
}

#[test]
fn fuzz_ops_dtr_log() {
    fuzz("ops-dtr-log", &dtr_seeds(), ops_target);
}

#[test]
fn fuzz_ops_generated_trace() {
    fuzz("ops-generated-trace", &generated_seeds(), ops_target);
}

#[test]
fn fuzz_ops_itermem_trace() {
    fuzz("ops-itermem-trace", &trace_seeds(), ops_target);
}

#[test]
fn fuzz_ops_profiler_kernel_steps() {
    let read = from_file("calibrate.json", |path| {
        ops::calibrate::profiler_kernel_steps(path).is_ok()
    });
    fuzz("ops-profiler-kernel-steps", &chrome_seeds(), read);
}

// ---------------------------------------------------------------------------------------------
// The command line, as a user runs it (issue 36)
// ---------------------------------------------------------------------------------------------

/// Mutated inputs of the command-line target in an ordinary test run; `ITERMEM_FUZZ_CLI`
/// sets another count (the one-off large run: `ITERMEM_FUZZ_CLI=10000`), `ITERMEM_FUZZ_EXE`
/// another `itermem` (the test's own is a debug build: arithmetic overflow panics there).
const CLI_MUTATIONS: u64 = 24;
/// The most resident memory one command may reach, its replay child included.
const RUN_RSS_BOUND: u64 = 256 << 20;
/// A command running longer than this hangs.
const RUN_DEADLINE: std::time::Duration = std::time::Duration::from_secs(60);

/// The commands each input goes to, in turn: a replay of two short iterations, scaled down, its
/// host memory within 128 MiB (a mutated size asks for any amount: above it, refused).
const COMMANDS: [&[&str]; 5] = [
    &["trace", "info"],
    &["compare"],
    &["report", "-o", "/dev/null"],
    &["plan", "--limit", "70%", "--evaluations", "4"],
    &[
        "replay",
        "--shim",
        "--iters",
        "2",
        "--scale",
        "0.001",
        "--time-scale",
        "0",
        "--max-host-memory",
        "128M",
    ],
];

/// The values that made `replay` panic, abort or take gigabytes, and extreme sizes.
fn extreme_seeds() -> Vec<Seed> {
    let csv = |name: &str, upper: u64, size: u64| {
        seed(name, format!("id,lower,upper,size\n0,0,{upper},{size}\n"))
    };
    vec![
        csv("csv ending at 2^64 - 1", u64::MAX, 100),
        csv("csv ending at 2^32 - 1", u64::from(u32::MAX), 100),
        csv("csv ending at 5e7", 50_000_000, 100),
        csv("csv of size 2^64 - 1", 1, u64::MAX),
        seed(
            "snapshot of size 2^64 - 1",
            samples::snapshot_of_size(u64::MAX),
        ),
    ]
}

/// Gzip bombs whose first bytes are a recognised format: `head` then 1.1 GiB of zeros, of
/// spaces, of one valid event repeated or of numbered lines of spaces
/// ([`samples::counted_piece`]: no short pattern, only the expansion ratio stops them), over
/// the 1 GiB limit, as gzip members of 64 MiB compressed once: a few MB of file. Refused within
/// a few tens of megabytes.
///
/// Each is written straight to a file, never held whole: a command's peak resident memory, as
/// `wait4` gives it, starts from the test process's own (a spawned child reports the highest
/// of its parent's at its `exec`), so the test process stays small.
fn bomb_files(heads: &[Seed]) -> Vec<(String, TempFile)> {
    let mut bombs = Vec::new();
    const EVENT: &str = r#",{"ph": "X", "cat": "kernel", "name": "gemm", "ts": 1, "dur": 1}"#;
    /// Appends the next piece of a filler to its text ([`samples::bomb_member`]).
    type Piece = fn(u64, &mut String);
    let fillers: [(&str, Piece); 4] = [
        ("zeros", |_, text| text.push('\0')),
        ("spaces", |_, text| text.push(' ')),
        ("one valid event", |_, text| text.push_str(EVENT)),
        ("numbered lines of spaces", samples::counted_piece),
    ];
    for (index, (filler, piece)) in fillers.into_iter().enumerate() {
        let member = TempFile(scratch(&format!("bomb-member-{index}")));
        samples::bomb_member(&member.0, piece);
        for head in heads {
            let bomb = TempFile(scratch(&format!("bomb-{index}-{}", bombs.len())));
            samples::write_bomb(&bomb.0, &head.bytes, &member.0, 18);
            let name = format!("gzip bomb of {filler} after {:?}", head.name);
            bombs.push((name, bomb));
        }
    }
    bombs
}

#[test]
fn fuzz_command_line() {
    let mutations = std::env::var("ITERMEM_FUZZ_CLI").map_or(CLI_MUTATIONS, |n| {
        n.parse().expect("ITERMEM_FUZZ_CLI: a count")
    });
    let exe =
        std::env::var("ITERMEM_FUZZ_EXE").unwrap_or_else(|_| env!("CARGO_BIN_EXE_itermem").into());
    let mut seeds = Vec::new();
    for group in [
        trace_seeds(),
        snapshot_seeds(),
        chrome_seeds(),
        csv_seeds(),
        dtr_seeds(),
        generated_seeds(),
    ] {
        seeds.extend(group.into_iter().take(2));
    }
    seeds.extend(extreme_seeds());
    // A bomb after a start of every format: an itermem trace cut in a record, a snapshot, a
    // profiler trace, a DSA CSV, a DTR log, a generated trace.
    let heads: Vec<Seed> = [1, 3, 4, 7, 8, 11]
        .iter()
        .filter_map(|&i| seeds.get(i).cloned())
        .collect();
    let bombs = bomb_files(&heads);
    let input = TempFile(scratch("cli-input"));
    let mut failures = Vec::new();
    let mut peak = (0u64, String::new());
    let mut floor = u64::MAX;
    let mut slowest = (std::time::Duration::ZERO, String::new());
    let (mut errors, mut panics, mut aborts, mut hangs, mut failed_cases) = (0, 0, 0, 0, 0);
    let cases = (seeds.len() + bombs.len()) as u64 + mutations;
    for case in 0..cases {
        // The seeds, the bombs, then the mutations.
        let bomb = (case as usize)
            .checked_sub(seeds.len())
            .and_then(|i| bombs.get(i));
        let (path, what) = match bomb {
            Some((what, file)) => (&file.0, what.clone()),
            None => {
                let case = if case < seeds.len() as u64 {
                    case
                } else {
                    case - bombs.len() as u64
                };
                let (bytes, what) = case_input(0x36, case, &seeds, seeds.len());
                std::fs::write(&input.0, &bytes).unwrap();
                (&input.0, what)
            }
        };
        let name = path.display().to_string();
        let args = COMMANDS[case as usize % COMMANDS.len()];
        let mut command = std::process::Command::new(&exe);
        command.args(args).arg(path);
        let run = measured::run_measured(&mut command, RUN_DEADLINE);
        let mut failed = Vec::new();
        if run.hung {
            hangs += 1;
            failed.push("hung".to_string());
        } else if let Some(signal) = run.signal {
            aborts += 1;
            failed.push(format!("killed by signal {signal}"));
        } else if run.code == Some(101) {
            panics += 1;
            failed.push("panicked".to_string());
        } else if run.code != Some(0) {
            errors += 1;
            if run.code != Some(2) || !run.stderr.contains(&name) {
                failed.push("an error that is not bad input naming the file".to_string());
            }
        }
        if run.max_rss > RUN_RSS_BOUND {
            failed.push(format!("reached {} bytes resident", run.max_rss));
        }
        if run.max_rss > peak.0 {
            peak = (run.max_rss, format!("{args:?} on {what}"));
        }
        floor = floor.min(run.max_rss);
        if run.cpu > slowest.0 {
            slowest = (run.cpu, format!("{args:?} on {what}"));
        }
        if !failed.is_empty() {
            failed_cases += 1;
        }
        if !failed.is_empty() && failures.len() < 20 {
            let saved = scratch(&format!("cli-failure-{case}"));
            std::fs::copy(path, &saved).unwrap();
            let stderr = run.stderr.lines().next().unwrap_or("").to_string();
            failures.push(format!(
                "{args:?} {}: {what}: {stderr}; input saved as {}",
                failed.join(", "),
                saved.display()
            ));
        }
    }
    eprintln!(
        "command line: {cases} runs ({mutations} mutations, {} seeds of which {} gzip bombs) \
         over trace info, compare, report, plan, replay: {errors} refused, {panics} panics, {aborts} \
         aborts, {hangs} hangs, peak resident {} bytes ({}), the least {floor} bytes (this \
         test process's own, which every run's figure includes), the most processor time \
         {:?} ({})",
        seeds.len() + bombs.len(),
        bombs.len(),
        peak.0,
        peak.1,
        slowest.0,
        slowest.1
    );
    assert!(
        failures.is_empty(),
        "{failed_cases} of {cases} runs failed; the first:\n{}",
        failures.join("\n")
    );
}
