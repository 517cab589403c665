//! What itermem keeps per CUDA device: the device's own sequence of events (indices, live
//! bytes, the iteration detector, the batch for the trace) and its allocator (pool or cnmem).
//!
//! A data-parallel program runs one training loop per GPU, usually one host thread each; their
//! events interleave as the threads happen to run, so one detector over all of them would find
//! no period, and one pool could not serve two devices. Each device has its own, created at its
//! first event (on a thread whose current context is that device's, so a pool or a cnmem region
//! is allocated on the right device). Swap mode swaps on device 0; other devices are recorded.

use super::cnmem::CnmemState;
use super::driver as cuda;
use super::pool::PoolState;
use super::swap::SwapConfig;
use super::swap::planning::Capture;
use crate::analysis::{EventCounts, HostCounts};
use crate::config::{Config, Mode};
use crate::detect::{Change, Detector, DetectorConfig, Period};
use crate::event::{AllocId, Event, EventKind};
use parking_lot::Mutex;
use rustc_hash::FxHashMap;
use std::cell::Cell;
use std::sync::atomic::{
    AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering, Ordering::Relaxed,
};
use std::sync::{Arc, OnceLock};

/// Devices itermem tells apart; a larger ordinal is counted as the last one (reported once).
pub const MAX_DEVICES: usize = 64;

/// The ordered part of one device's events: one short critical section assigns each event its
/// index, updates the live bytes, pushes its token to the detector and queues it for the trace.
pub(super) struct Sequencer {
    pub next_index: u64,
    pub live_bytes: u64,
    pub peak_live_bytes: u64,
    pub detection: Detection,
    /// The device's events by kind, counted under the sequencer (an atomic per event would
    /// cost every hook a locked instruction more).
    pub tally: Tally,
    /// Events not yet handed to the trace writer, in sequence order, and the time of the first.
    pub pending: Vec<Event>,
    pub pending_since_ns: u64,
    /// The time of the device's last event: the next one's is never earlier (the clock read by
    /// one thread after another may be, by nanoseconds: `clock.rs`).
    pub last_time_ns: u64,
    /// Record and cnmem modes on the program's threads: the launches of `pending` whose blocks
    /// the trace writer's thread resolves (`late.rs`): each one's place in `pending` and the
    /// end of its pointer words in `pending_words`.
    pub pending_late: Vec<(u32, u32)>,
    pub pending_words: Vec<u64>,
    /// Swap mode: the live device allocations (id → size), which become the resident tensors of
    /// a captured iteration, and the iteration being captured for planning.
    pub swap_live: Option<FxHashMap<AllocId, u64>>,
    pub capture: Option<Capture>,
}

impl Sequencer {
    fn new(swapping: bool, deferred: bool, batch: usize) -> Sequencer {
        Sequencer {
            next_index: 0,
            live_bytes: 0,
            peak_live_bytes: 0,
            detection: Detection::new(deferred, batch),
            tally: Tally::default(),
            pending: Vec::with_capacity(batch),
            pending_since_ns: 0,
            last_time_ns: 0,
            pending_late: Vec::new(),
            pending_words: Vec::new(),
            swap_live: swapping.then(FxHashMap::default),
            capture: None,
        }
    }
}

/// A device's events counted by kind: a part of the [`Sequencer`] of its own, so that it can be
/// counted from an event kept in the sequencer's own trace batch.
#[derive(Default)]
pub(super) struct Tally {
    pub counts: EventCounts,
    pub host: HostCounts,
    pub pointer_words_scanned: u64,
}

impl Tally {
    /// Counts an event of `kind`; `pinned`: a malloc or free of page-locked host memory;
    /// `words`: the pointer words a launch's arguments were scanned for.
    pub fn count(&mut self, kind: &EventKind, pinned: bool, words: u64) {
        let counter = match (kind, pinned) {
            (EventKind::Malloc { .. }, false) => &mut self.counts.malloc,
            (EventKind::Malloc { .. }, true) => &mut self.host.malloc,
            (EventKind::Free { .. }, false) => &mut self.counts.free,
            (EventKind::Free { .. }, true) => &mut self.host.free,
            (EventKind::Launch { .. }, _) => &mut self.counts.launch,
            (EventKind::Memcpy { .. }, _) => &mut self.counts.memcpy,
            (EventKind::Memset { .. }, _) => &mut self.counts.memset,
            (EventKind::KernelName { .. } | EventKind::GraphLaunch { .. }, _) => return,
        };
        *counter += 1;
        self.pointer_words_scanned += words;
    }
}

/// A device's iteration detector and what it found.
pub(super) struct Detected {
    detector: Detector,
    /// How many times a period was found (more than once: the pattern changed).
    pub changes: u64,
    /// The period that has covered the most events so far, with that count: what the training
    /// loop is, as opposed to the warm-up, an evaluation pass or the teardown.
    dominant: Option<(Period, u64)>,
    /// Deferred: a pushed batch of tokens, emptied, for the sequencer to fill again (a buffer
    /// allocated on one thread and freed on another costs the C allocator more than the
    /// tokens in it).
    spare: Vec<(u64, u64)>,
}

impl Detected {
    fn new() -> Detected {
        Detected {
            detector: Detector::new(DetectorConfig::for_cuda_events())
                .expect("the detector configuration for CUDA events is valid"),
            changes: 0,
            dominant: None,
            spare: Vec::new(),
        }
    }

    /// Pushes the token of device `ordinal`'s next event (every access event pushes one, so
    /// its index is the detector's count), with the live bytes after it; logs what changed.
    pub fn push(&mut self, ordinal: u32, token: u64, live_bytes: u64) -> Change {
        let index = self.detector.events();
        let change = self.detector.push(token, live_bytes);
        let (lost, detected) = match change {
            Change::Unchanged => (None, None),
            Change::Detected(period) => (None, Some(period)),
            Change::Lost(period) => (Some(period), None),
            Change::Changed { lost, detected } => (Some(lost), Some(detected)),
        };
        if let Some(period) = lost {
            self.covered(period, index);
            log::info!(
                "device {ordinal}: iteration of {} events no longer followed at event {index}",
                period.length
            );
        }
        if let Some(period) = detected {
            self.changes += 1;
            log::info!(
                "device {ordinal}: iteration detected at event {index}: {} events, boundary at \
                 event {}",
                period.length,
                period.boundary
            );
        }
        change
    }

    /// Accounts for `period` having held over `[period.start, end)`.
    fn covered(&mut self, period: Period, end: u64) {
        let events = end.saturating_sub(period.start);
        if self.dominant.is_none_or(|(_, best)| events >= best) {
            self.dominant = Some((period, events));
        }
    }

    /// The dominant period, counting the one in force up to the last event pushed.
    pub fn dominant_period(&self) -> Option<Period> {
        let current = self
            .detector
            .period()
            .map(|p| (p, self.detector.events().saturating_sub(p.start)));
        match (self.dominant, current) {
            (Some((best, covered)), Some((now, now_covered))) => {
                Some(if now_covered >= covered { now } else { best })
            }
            (best, now) => best.or(now).map(|(p, _)| p),
        }
    }
}

/// Where a device's detector runs.
pub(super) enum Detection {
    /// Pool and swap modes act on its answers at once: pushed under the sequencer.
    Here(Box<Detected>),
    /// Record and cnmem modes with a trace only report its answers: the tokens (with the live
    /// bytes after each event) go with each trace batch and are pushed on the trace writer's
    /// thread, off the program's (`recorder::hand_over`).
    Deferred {
        detected: Arc<Mutex<Detected>>,
        tokens: Vec<(u64, u64)>,
    },
}

impl Detection {
    fn new(deferred: bool, batch: usize) -> Detection {
        if deferred {
            Detection::Deferred {
                detected: Arc::new(Mutex::new(Detected::new())),
                tokens: Vec::with_capacity(batch),
            }
        } else {
            Detection::Here(Box::new(Detected::new()))
        }
    }

    /// Pushes the token of device `ordinal`'s next event here, or keeps it for the trace
    /// writer's thread (the answer is then `Unchanged`: nothing acts on it).
    #[inline]
    pub fn push(&mut self, ordinal: u32, token: u64, live_bytes: u64) -> Change {
        match self {
            Detection::Here(detected) => detected.push(ordinal, token, live_bytes),
            Detection::Deferred { tokens, .. } => {
                tokens.push((token, live_bytes));
                Change::Unchanged
            }
        }
    }

    /// The work of pushing the tokens kept so far, to run after the trace batch they belong
    /// to; None when none are kept.
    pub fn take_kept(&mut self, ordinal: u32) -> Option<impl FnOnce() + Send + 'static> {
        let Detection::Deferred { detected, tokens } = self else {
            return None;
        };
        if tokens.is_empty() {
            return None;
        }
        // Not waiting for the writer's thread while it pushes: a new buffer then.
        let mut next = detected
            .try_lock()
            .map(|mut detected| std::mem::take(&mut detected.spare))
            .unwrap_or_default();
        if next.capacity() == 0 {
            next.reserve(tokens.capacity());
        }
        let mut tokens = std::mem::replace(tokens, next);
        let detected = Arc::clone(detected);
        Some(move || {
            let mut detected = detected.lock();
            for &(token, live_bytes) in &tokens {
                detected.push(ordinal, token, live_bytes);
            }
            tokens.clear();
            detected.spare = tokens;
        })
    }

    /// Pushes the tokens kept so far on this thread: the trace could not be opened, so no
    /// writer's thread will. Inlined: every event without a trace asks, and then nothing is
    /// kept.
    #[inline]
    pub fn push_kept_here(&mut self, ordinal: u32) {
        if let Detection::Deferred { .. } = self
            && let Some(push) = self.take_kept(ordinal)
        {
            push();
        }
    }

    /// What the statistics report: the dominant period and how many times one was found
    /// (once the kept tokens are pushed: after the trace is flushed).
    pub fn found(&self) -> (Option<Period>, u64) {
        match self {
            Detection::Here(detected) => (detected.dominant_period(), detected.changes),
            Detection::Deferred { detected, .. } => {
                let detected = detected.lock();
                (detected.dominant_period(), detected.changes)
            }
        }
    }
}

/// Everything itermem keeps for one device.
pub(super) struct DeviceState {
    pub ordinal: u32,
    /// The index the device's next event will get (the sequencer's, readable without its lock).
    pub next_index: AtomicU64,
    /// Record and cnmem modes: the key the device's next event gets (`staging.rs`).
    pub next_key: AtomicU64,
    pub sequencer: Mutex<Sequencer>,
    /// Pool and swap modes' state (None in other modes, and in swap mode on devices but 0).
    pub pool: Option<Mutex<PoolState>>,
    /// The pool's `users` flag, readable without its lock: false while no pool block is in
    /// use or waited for (a launch then has nothing to note or wait for in the pool).
    pub pool_users: Option<Arc<AtomicBool>>,
    /// cnmem mode's allocator (None in other modes).
    pub cnmem: Option<Mutex<CnmemState>>,
    /// Swap mode: a captured timing iteration, handed from the sequencer to the planner.
    pub captured: Mutex<Option<Capture>>,
    pub capture_done: AtomicBool,
}

impl DeviceState {
    /// Whether this device's pool (pool mode) has no block in use or waited for: a use then has
    /// nothing to note or wait for there. Read without the pool's lock.
    #[inline]
    pub fn pool_idle(&self) -> bool {
        (self.pool_users.as_ref()).is_some_and(|users| !users.load(Ordering::Acquire))
    }

    fn new(ordinal: u32, config: &Config, batch: usize) -> DeviceState {
        // Record and cnmem modes only report the detector's answers (no plan is made from
        // them): with a trace, it runs on the trace writer's thread.
        let deferred = config.trace.is_some() && config.mode.only_reports();
        let pool = pool_state(config);
        let pool_users = pool.as_ref().map(|pool| Arc::clone(&pool.users));
        DeviceState {
            ordinal,
            next_index: AtomicU64::new(0),
            next_key: AtomicU64::new(0),
            sequencer: Mutex::new(Sequencer::new(config.mode == Mode::Swap, deferred, batch)),
            pool: pool.map(Mutex::new),
            pool_users,
            cnmem: cnmem_state(config).map(Mutex::new),
            captured: Mutex::new(None),
            capture_done: AtomicBool::new(false),
        }
    }

    /// After a device reset or a context destroyed: if itermem's own memory on this device
    /// went with it, its allocator starts afresh, as at the first event (the old one's memory
    /// is not freed again: the driver may have given those addresses to someone else since),
    /// keeping its statistics. Whether it did.
    pub fn renew_lost_allocator(&self, config: &Config) -> bool {
        let pool_lost = self.pool.as_ref().is_some_and(|pool| {
            let mut pool = pool.lock();
            let lost = pool.memory_lost();
            if lost && let Some(mut fresh) = pool_state(config) {
                fresh.stats = std::mem::take(&mut pool.stats);
                fresh.users = Arc::clone(&pool.users);
                fresh.note_users();
                *pool = fresh;
            }
            lost
        });
        let cnmem_lost = self.cnmem.as_ref().is_some_and(|cnmem| {
            let mut cnmem = cnmem.lock();
            let lost = cnmem.memory_lost();
            if lost && let Some(mut fresh) = cnmem_state(config) {
                fresh.stats = std::mem::take(&mut cnmem.stats);
                *cnmem = fresh;
            }
            lost
        });
        pool_lost || cnmem_lost
    }
}

/// Pool and swap modes' state of a device, None otherwise. In swap mode every device the
/// program uses swaps, each under the limit (a data-parallel rank trains on its own device,
/// which need not be device 0).
fn pool_state(config: &Config) -> Option<PoolState> {
    match config.mode {
        Mode::Pool => Some(PoolState::default()),
        Mode::Swap => Some(PoolState::for_swaps(SwapConfig {
            limit: config.limit,
            copy: config.bandwidth,
            min_bytes: config.swap_min_bytes,
            verify: config.swap_verify,
            plan_out: config.plan_out.clone(),
            trace: config.trace.clone(),
            second_plan: config.swap_second_plan,
        })),
        _ => None,
    }
}

/// cnmem mode's allocator, None in other modes.
fn cnmem_state(config: &Config) -> Option<CnmemState> {
    (config.mode == Mode::Cnmem)
        .then(|| CnmemState::new(config.cnmem_reservation, config.cnmem_library.as_deref()))
}

/// The devices seen so far, by ordinal.
pub(super) struct Devices {
    slots: [OnceLock<DeviceState>; MAX_DEVICES],
    /// One more than the highest ordinal seen: what [`Devices::seen`] looks through (every
    /// free and launch does, so one device costs one slot, not all of them).
    end: AtomicUsize,
    /// Set once a second device has had events (see [`Devices::at_most_one_seen`]).
    several: AtomicBool,
}

impl Devices {
    pub fn new() -> Devices {
        Devices {
            slots: [const { OnceLock::new() }; MAX_DEVICES],
            end: AtomicUsize::new(0),
            several: AtomicBool::new(false),
        }
    }

    /// The state of device `ordinal`, created now if this is its first event.
    pub fn get(&self, ordinal: u32, config: &Config, batch: usize) -> &DeviceState {
        if let Some(state) = self.slots.get(ordinal as usize).and_then(OnceLock::get) {
            return state;
        }
        self.create(ordinal, config, batch)
    }

    #[cold]
    fn create(&self, ordinal: u32, config: &Config, batch: usize) -> &DeviceState {
        let slot = (ordinal as usize).min(MAX_DEVICES - 1);
        if slot != ordinal as usize {
            static REPORTED: AtomicBool = AtomicBool::new(false);
            if !REPORTED.swap(true, Relaxed) {
                super::report(format_args!(
                    "device {ordinal} and above are counted as device {slot}"
                ));
            }
        }
        let state = self.slots[slot].get_or_init(|| {
            let state = DeviceState::new(slot as u32, config, batch);
            self.end.fetch_max(slot + 1, Relaxed);
            state
        });
        // Before any event of the new device, so before any of its blocks exists.
        if self.seen().nth(1).is_some() {
            self.several.store(true, Ordering::Release);
        }
        state
    }

    /// Whether at most one device has had events (its blocks are then all the blocks a launch
    /// can touch). Inlined: every launch of record mode with a trace asks.
    #[inline]
    pub fn at_most_one_seen(&self) -> bool {
        !self.several.load(Ordering::Acquire)
    }

    /// The devices that have had events, by ordinal.
    pub fn seen(&self) -> impl Iterator<Item = &DeviceState> {
        self.slots[..self.end.load(Relaxed)]
            .iter()
            .filter_map(OnceLock::get)
    }
}

/// The device of the calling thread's current context, which its CUDA calls act on; 0 when no
/// context is current (the runtime then makes device 0's current at the call). On a machine
/// with one device, nothing to ask once that is known; otherwise one driver call
/// (`cuCtxGetCurrent`) per event, the context's device remembered per thread. Inlined: every
/// hooked call asks, and on one device the answer is one load.
#[inline]
pub fn current_device() -> u32 {
    if single_device() { 0 } else { context_device() }
}

/// [`current_device`] on a machine with several devices (or before the driver said how many).
#[inline(never)]
fn context_device() -> u32 {
    thread_local!(static LAST: Cell<(usize, u32)> = const { Cell::new((0, 0)) });
    let context = cuda::current_context();
    if context == 0 {
        return 0;
    }
    LAST.with(|last| {
        let (known, device) = last.get();
        if known == context {
            return device;
        }
        let device = cuda::current_device().unwrap_or(0);
        last.set((context, device));
        device
    })
}

/// How many devices the machine has, as far as known: [`UNKNOWN`] until the driver is
/// initialised and says so.
static DEVICE_COUNT: AtomicU8 = AtomicU8::new(UNKNOWN);
const UNKNOWN: u8 = 0;
const ONE: u8 = 1;
const SEVERAL: u8 = 2;

/// Whether the machine has exactly one device (known once the driver is initialised and says
/// so; until then, not assumed).
#[inline]
fn single_device() -> bool {
    match DEVICE_COUNT.load(Relaxed) {
        ONE => true,
        SEVERAL => false,
        _ => count_devices(),
    }
}

/// [`single_device`] until the driver has said how many devices there are.
#[cold]
fn count_devices() -> bool {
    match cuda::device_count() {
        Some(1) => {
            DEVICE_COUNT.store(ONE, Relaxed);
            true
        }
        Some(_) => {
            DEVICE_COUNT.store(SEVERAL, Relaxed);
            false
        }
        None => false,
    }
}
