//! Streams: each one a worker thread that runs its operations in submission order.
//!
//! Ordering is expressed with [`Marker`]s, one per operation, completed when the operation has
//! run. An operation may list markers of other streams it must wait for; that single mechanism
//! gives events (`cuStreamWaitEvent` adds the event's marker), and the legacy default stream:
//!
//! - an operation on the legacy stream (handle 0 or `CU_STREAM_LEGACY`) waits for the last
//!   operation of every blocking stream submitted before it;
//! - an operation on a blocking stream waits for the last operation submitted to the legacy
//!   stream before it;
//! - streams created with `CU_STREAM_NON_BLOCKING` take part in neither rule.
//!
//! Every submission holds the registry lock while it reads those tails and appends its own
//! marker, so "submitted before" is one total order, as it is for a real context. Destroying a
//! stream drops its sender: the worker drains what was queued, then exits (CUDA semantics: the
//! call returns at once, queued work still completes).
//!
//! With `CUDA_SHIM_JITTER_US` set, every worker sleeps a random time before each operation,
//! drawn from a generator seeded by `CUDA_SHIM_SEED` and the stream's ordinal (creation order),
//! so an interleaving that exposes a missing wait can be replayed.

use crate::result::{CuResult, INVALID_HANDLE, UNKNOWN};
use crossbeam_channel::{Receiver, Sender};
use parking_lot::{Condvar, Mutex};
use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::thread::ThreadId;
use std::time::{Duration, Instant};

/// Completion of one operation, with the time it completed (what events time).
pub struct Marker {
    done: Mutex<Option<Instant>>,
    cond: Condvar,
}

impl Marker {
    pub fn new() -> Arc<Marker> {
        Arc::new(Marker {
            done: Mutex::new(None),
            cond: Condvar::new(),
        })
    }

    pub fn complete(&self) {
        *self.done.lock() = Some(Instant::now());
        self.cond.notify_all();
    }

    pub fn completed_at(&self) -> Option<Instant> {
        *self.done.lock()
    }

    pub fn wait(&self) -> Instant {
        let mut done = self.done.lock();
        loop {
            if let Some(at) = *done {
                return at;
            }
            self.cond.wait(&mut done);
        }
    }
}

/// What a stream's worker does with each operation; implemented by the device.
pub trait Executor: Send + Sync + 'static {
    type Work: Send + 'static;
    fn execute(&self, work: Self::Work);
    /// Records the delay drawn for one operation (for the reproducibility digest).
    fn jittered(&self, stream_ordinal: u64, delay: Duration);
    /// `execute` panicked (a bug of the simulation): the operation still counts as done, so
    /// nothing waiting for it hangs; the executor decides what the program sees.
    fn failed(&self) {}
}

struct Op<W> {
    work: W,
    deps: Vec<Arc<Marker>>,
    done: Arc<Marker>,
}

pub struct Stream<W> {
    pub ordinal: u64,
    blocking: bool,
    /// The priority the stream was created with (kept for `cuStreamGetPriority`; the workers do
    /// not schedule by it: each stream has a thread of its own).
    priority: i32,
    sender: Sender<Op<W>>,
    tail: Mutex<Arc<Marker>>,
}

struct Registry<W> {
    legacy: Arc<Stream<W>>,
    created: HashMap<usize, Arc<Stream<W>>>,
    per_thread: HashMap<ThreadId, Arc<Stream<W>>>,
    next_ordinal: u64,
}

/// All streams of the context.
pub struct Streams<E: Executor> {
    executor: &'static E,
    jitter: Duration,
    seed: u64,
    registry: Mutex<Registry<E::Work>>,
}

/// What [`Streams::identity`] answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Identity {
    pub id: usize,
    pub legacy: bool,
    pub blocking: bool,
}

/// Handle values with a fixed meaning, as in `cuda.h`.
pub const LEGACY: usize = 0x1;
pub const PER_THREAD: usize = 0x2;

impl<E: Executor> Streams<E> {
    pub fn new(executor: &'static E, jitter: Duration, seed: u64) -> Streams<E> {
        let legacy = spawn(executor, 0, true, jitter, seed);
        Streams {
            executor,
            jitter,
            seed,
            registry: Mutex::new(Registry {
                legacy,
                created: HashMap::new(),
                per_thread: HashMap::new(),
                next_ordinal: 1,
            }),
        }
    }

    /// Creates a stream and returns its handle.
    pub fn create(&self, non_blocking: bool) -> usize {
        self.create_with_priority(non_blocking, 0)
    }

    /// Creates a stream with a priority (already clamped to the device's range).
    pub fn create_with_priority(&self, non_blocking: bool, priority: i32) -> usize {
        let mut registry = self.registry.lock();
        let ordinal = registry.take_ordinal();
        let mut stream = spawn(
            self.executor,
            ordinal,
            !non_blocking,
            self.jitter,
            self.seed,
        );
        if let Some(s) = Arc::get_mut(&mut stream) {
            s.priority = priority;
        }
        let handle = Arc::as_ptr(&stream) as usize;
        registry.created.insert(handle, stream);
        handle
    }

    pub fn destroy(&self, handle: usize) -> CuResult<()> {
        self.registry
            .lock()
            .created
            .remove(&handle)
            .map(drop)
            .ok_or(INVALID_HANDLE)
    }

    /// Destroys every created and per-thread stream (the context is reset or destroyed): as
    /// with `destroy`, queued work still finishes and then the streams' threads end.
    pub fn clear(&self) {
        let mut registry = self.registry.lock();
        registry.created.clear();
        registry.per_thread.clear();
    }

    /// Whether stream `handle` is non-blocking, and its priority (the special handles are
    /// blocking streams of priority 0).
    pub fn properties(&self, handle: usize) -> CuResult<(bool, i32)> {
        let mut registry = self.registry.lock();
        let stream = registry.resolve(handle, self)?;
        Ok((!stream.blocking, stream.priority))
    }

    /// Whether `handle` is a live stream created in this registry (not a special handle).
    pub fn owns(&self, handle: usize) -> bool {
        self.registry.lock().created.contains_key(&handle)
    }

    /// Whether `handle` names a stream (0, the two special handles, or a live created stream).
    pub fn check(&self, handle: usize) -> CuResult<()> {
        match handle {
            0 | LEGACY | PER_THREAD => Ok(()),
            _ if self.registry.lock().created.contains_key(&handle) => Ok(()),
            _ => Err(INVALID_HANDLE),
        }
    }

    /// Who stream `handle` is, whatever handle names it: the address of the stream itself (the
    /// per-thread stream of the calling thread for `PER_THREAD`), whether it is the legacy
    /// stream, and whether it is blocking (what stream capture keys its state by).
    pub fn identity(&self, handle: usize) -> CuResult<Identity> {
        let mut registry = self.registry.lock();
        let stream = registry.resolve(handle, self)?;
        Ok(Identity {
            id: Arc::as_ptr(&stream) as usize,
            legacy: Arc::ptr_eq(&stream, &registry.legacy),
            blocking: stream.blocking,
        })
    }

    /// Queues `work` on stream `handle` after `wait_for` (if any) and returns the marker that
    /// completes when it has run.
    pub fn submit(
        &self,
        handle: usize,
        work: E::Work,
        wait_for: Option<Arc<Marker>>,
    ) -> CuResult<Arc<Marker>> {
        let mut registry = self.registry.lock();
        let stream = registry.resolve(handle, self)?;
        let mut deps: Vec<Arc<Marker>> = wait_for.into_iter().collect();
        if Arc::ptr_eq(&stream, &registry.legacy) {
            deps.extend(registry.blocking().map(|s| s.tail.lock().clone()));
        } else if stream.blocking {
            deps.push(registry.legacy.tail.lock().clone());
        }
        deps.retain(|m| m.completed_at().is_none());
        let done = Marker::new();
        *stream.tail.lock() = done.clone();
        stream
            .sender
            .send(Op {
                work,
                deps,
                done: done.clone(),
            })
            .map_err(|_| UNKNOWN)?;
        Ok(done)
    }

    /// The marker of the last operation submitted to `handle`.
    pub fn tail(&self, handle: usize) -> CuResult<Arc<Marker>> {
        let mut registry = self.registry.lock();
        let stream = registry.resolve(handle, self)?;
        let tail = stream.tail.lock().clone();
        Ok(tail)
    }

    /// Markers of the last operation of every stream: waiting for all of them is a device-wide
    /// synchronisation.
    pub fn all_tails(&self) -> Vec<Arc<Marker>> {
        let registry = self.registry.lock();
        std::iter::once(&registry.legacy)
            .chain(registry.created.values())
            .chain(registry.per_thread.values())
            .map(|s| s.tail.lock().clone())
            .collect()
    }
}

impl<W: Send + 'static> Registry<W> {
    fn take_ordinal(&mut self) -> u64 {
        self.next_ordinal += 1;
        self.next_ordinal - 1
    }

    fn blocking(&self) -> impl Iterator<Item = &Arc<Stream<W>>> {
        self.created
            .values()
            .chain(self.per_thread.values())
            .filter(|s| s.blocking)
    }

    fn resolve<E: Executor<Work = W>>(
        &mut self,
        handle: usize,
        streams: &Streams<E>,
    ) -> CuResult<Arc<Stream<W>>> {
        match handle {
            0 | LEGACY => Ok(self.legacy.clone()),
            PER_THREAD => {
                let thread = std::thread::current().id();
                if let Some(stream) = self.per_thread.get(&thread) {
                    return Ok(stream.clone());
                }
                let ordinal = self.take_ordinal();
                let stream = spawn(
                    streams.executor,
                    ordinal,
                    true,
                    streams.jitter,
                    streams.seed,
                );
                self.per_thread.insert(thread, stream.clone());
                Ok(stream)
            }
            _ => self.created.get(&handle).cloned().ok_or(INVALID_HANDLE),
        }
    }
}

fn spawn<E: Executor>(
    executor: &'static E,
    ordinal: u64,
    blocking: bool,
    jitter: Duration,
    seed: u64,
) -> Arc<Stream<E::Work>> {
    let (sender, receiver) = crossbeam_channel::unbounded();
    let first = Marker::new();
    first.complete();
    std::thread::Builder::new()
        .name(format!("cuda-shim-stream-{ordinal}"))
        .spawn(move || run(executor, receiver, ordinal, jitter, seed))
        .expect("cuda-shim: cannot start a stream thread");
    Arc::new(Stream {
        ordinal,
        blocking,
        priority: 0,
        sender,
        tail: Mutex::new(first),
    })
}

/// A stream's random delays as time actually lost: a sleep lasts longer than asked (tens of µs
/// more on a loaded machine: a 10 µs sleep took 37–79 µs here), so each delay is cut by what
/// earlier sleeps overran. Without this, `CUDA_SHIM_JITTER_US=20` cost every operation about
/// 110 µs instead of 10 on average, and a stream's work slowed with its number of operations
/// (events and waits included) as no GPU's does.
#[derive(Default)]
struct Delays {
    /// What sleeps overran and later delays have not yet used up.
    overrun: Duration,
}

impl Delays {
    /// Delays the stream by `delay`, less what earlier sleeps overran. The overrun kept is at
    /// most a hundred times `jitter`, so a long preemption (the machine's, not a delay drawn)
    /// does not stop the delays of the operations after it for long.
    fn wait(&mut self, delay: Duration, jitter: Duration) {
        if delay <= self.overrun {
            self.overrun -= delay;
            return;
        }
        let asked = delay - self.overrun;
        let slept = Instant::now();
        std::thread::sleep(asked);
        self.overrun = (slept.elapsed().saturating_sub(asked)).min(jitter.saturating_mul(100));
    }
}

fn run<E: Executor>(
    executor: &'static E,
    receiver: Receiver<Op<E::Work>>,
    ordinal: u64,
    jitter: Duration,
    seed: u64,
) {
    let mut rng = fastrand::Rng::with_seed(seed ^ ordinal.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut delays = Delays::default();
    for op in receiver {
        for dep in &op.deps {
            dep.wait();
        }
        if !jitter.is_zero() {
            let delay = Duration::from_nanos(rng.u64(0..=jitter.as_nanos() as u64));
            executor.jittered(ordinal, delay);
            delays.wait(delay, jitter);
        }
        let executed = catch_unwind(AssertUnwindSafe(|| executor.execute(op.work)));
        op.done.complete();
        if executed.is_err() {
            executor.failed();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering::SeqCst};

    /// Appends a value to a log, after its gate (if any) opened: a test holds work at a gate
    /// while it checks what must or must not have run, instead of hoping a sleeping operation is
    /// still asleep when it looks (which a loaded machine breaks).
    #[derive(Default)]
    struct Log {
        entries: Mutex<Vec<u32>>,
        delays: AtomicU64,
    }

    /// Value whose execution panics, as a bug of the simulation would.
    const PANICS: u32 = u32::MAX;

    /// Opens when its `Opener` is dropped.
    type Gate = Option<Receiver<()>>;
    type Opener = Sender<()>;

    fn gate() -> (Opener, Gate) {
        let (opener, gate) = crossbeam_channel::bounded(0);
        (opener, Some(gate))
    }

    /// Longest a test waits for work that must complete: far beyond any load, and a wrong
    /// ordering fails instead of hanging.
    const PATIENCE: Duration = Duration::from_secs(60);

    /// How long a test gives work that must not run to (wrongly) run: absence of an event
    /// cannot be awaited, so this bounds only how likely a wrong order is caught, never
    /// whether a right one passes.
    const CHANCE: Duration = Duration::from_millis(50);

    /// Whether `marker` completes within `timeout`.
    fn completes_within(marker: &Marker, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut done = marker.done.lock();
        while done.is_none() {
            if marker.cond.wait_until(&mut done, deadline).timed_out() {
                return done.is_some();
            }
        }
        true
    }

    impl Executor for Log {
        type Work = (u32, Gate);
        fn execute(&self, (value, gate): (u32, Gate)) {
            assert_ne!(value, PANICS, "simulated bug");
            if let Some(gate) = gate {
                // Err once the opener is dropped: the gate is open.
                let _ = gate.recv();
            }
            self.entries.lock().push(value);
        }
        fn jittered(&self, _: u64, delay: Duration) {
            self.delays.fetch_add(delay.as_nanos() as u64, SeqCst);
        }
        fn failed(&self) {
            self.entries.lock().push(PANICS);
        }
    }

    fn setup(jitter_us: u64) -> (&'static Log, Streams<Log>) {
        let log: &'static Log = Box::leak(Box::default());
        (log, Streams::new(log, Duration::from_micros(jitter_us), 1))
    }

    #[test]
    fn one_stream_runs_in_submission_order() {
        let (log, streams) = setup(200);
        let s = streams.create(false);
        let mut last = None;
        for i in 0..50 {
            last = Some(streams.submit(s, (i, None), None).unwrap());
        }
        last.unwrap().wait();
        assert_eq!(*log.entries.lock(), (0..50).collect::<Vec<_>>());
    }

    #[test]
    fn a_panicking_operation_completes_and_its_stream_goes_on() {
        let (log, streams) = setup(0);
        let s = streams.create(false);
        let failed = streams.submit(s, (PANICS, None), None).unwrap();
        failed.wait();
        streams.submit(s, (1, None), None).unwrap().wait();
        assert_eq!(*log.entries.lock(), vec![PANICS, 1]);
    }

    #[test]
    fn waiting_on_a_marker_orders_two_streams() {
        let (log, streams) = setup(0);
        let a = streams.create(true);
        let b = streams.create(true);
        let (open, held) = gate();
        let first = streams.submit(a, (1, held), None).unwrap();
        let second = streams.submit(b, (2, None), Some(first)).unwrap();
        assert!(
            !completes_within(&second, CHANCE),
            "b ran before the operation of a it waits for"
        );
        drop(open);
        assert!(completes_within(&second, PATIENCE));
        assert_eq!(*log.entries.lock(), vec![1, 2]);
    }

    #[test]
    fn legacy_stream_waits_for_blocking_streams_but_not_non_blocking_ones() {
        let (log, streams) = setup(0);
        let blocking = streams.create(false);
        let non_blocking = streams.create(true);
        let (open_non_blocking, held_non_blocking) = gate();
        let (open_blocking, held_blocking) = gate();
        let nine = streams
            .submit(non_blocking, (9, held_non_blocking), None)
            .unwrap();
        streams.submit(blocking, (1, held_blocking), None).unwrap();
        let legacy = streams.submit(0, (2, None), None).unwrap();
        assert!(
            !completes_within(&legacy, CHANCE),
            "legacy ran before the blocking stream"
        );
        drop(open_blocking);
        assert!(
            completes_within(&legacy, PATIENCE),
            "legacy waits for the non-blocking stream"
        );
        assert_eq!(*log.entries.lock(), vec![1, 2]);
        drop(open_non_blocking);
        assert!(completes_within(&nine, PATIENCE));
        assert_eq!(*log.entries.lock(), vec![1, 2, 9]);
    }

    #[test]
    fn blocking_stream_waits_for_earlier_legacy_work() {
        let (log, streams) = setup(0);
        let blocking = streams.create(false);
        let non_blocking = streams.create(true);
        let (open, held) = gate();
        streams.submit(0, (1, held), None).unwrap();
        let three = streams.submit(non_blocking, (3, None), None).unwrap();
        let two = streams.submit(blocking, (2, None), None).unwrap();
        assert!(
            completes_within(&three, PATIENCE),
            "a non-blocking stream waits for legacy work"
        );
        assert!(
            !completes_within(&two, CHANCE),
            "a blocking stream ran before earlier legacy work"
        );
        drop(open);
        assert!(completes_within(&two, PATIENCE));
        assert_eq!(*log.entries.lock(), vec![3, 1, 2]);
    }

    #[test]
    fn destroyed_stream_finishes_queued_work_and_its_handle_dies() {
        let (log, streams) = setup(0);
        let s = streams.create(false);
        let (open, held) = gate();
        let done = streams.submit(s, (5, held), None).unwrap();
        streams.destroy(s).unwrap(); // while its work is still queued
        assert_eq!(
            streams.submit(s, (6, None), None).err(),
            Some(INVALID_HANDLE)
        );
        assert_eq!(streams.destroy(s), Err(INVALID_HANDLE));
        drop(open);
        assert!(completes_within(&done, PATIENCE));
        assert_eq!(*log.entries.lock(), vec![5]);
    }

    #[test]
    fn jitter_is_a_function_of_the_seed() {
        let draw = |seed| {
            let log: &'static Log = Box::leak(Box::default());
            let streams = Streams::new(log, Duration::from_micros(100), seed);
            let s = streams.create(false);
            for i in 0..20 {
                streams.submit(s, (i, None), None).unwrap();
            }
            streams.tail(s).unwrap().wait();
            log.delays.load(SeqCst)
        };
        assert_eq!(draw(42), draw(42));
        assert_ne!(draw(42), draw(43));
    }

    /// What a sleep overran is taken off the next delays, so a stream loses what was drawn on
    /// average; a sleep's own overrun is kept at most a hundred times the jitter.
    #[test]
    fn delays_use_up_what_earlier_sleeps_overran() {
        let us = Duration::from_micros;
        let mut delays = Delays { overrun: us(50) };
        delays.wait(us(20), us(20));
        delays.wait(us(20), us(20));
        assert_eq!(delays.overrun, us(10));
        delays.wait(us(15), us(20));
        assert!(delays.overrun <= us(2000), "{:?}", delays.overrun);
        let mut delays = Delays { overrun: us(0) };
        delays.wait(us(1), Duration::from_nanos(1));
        assert!(delays.overrun <= Duration::from_nanos(100));
    }
}
