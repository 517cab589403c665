//! [`Recording`]: the allocation log of one device, whatever file it came from, and what the
//! planner and the detector take from it.
//!
//! # Invariants (checked by [`Recording::new`], the only constructor)
//!
//! - Every [`AllocEvent::Alloc`] has an id no other alloc of the recording has: ids are stable
//!   per *allocation*, never per address (addresses are reused after a free).
//! - Every [`AllocEvent::Free`] names an id allocated earlier and not yet freed: frees of blocks
//!   allocated before the recording started were dropped by the importer (and counted in
//!   [`ImportStats::dropped_frees`]).
//! - Event `i` of the recording is `events()[i]`: every index below (lifetimes, the period, the
//!   boundary) counts allocs and frees of this device only, in recorded order.
//!
//! # Lifetimes
//!
//! A block allocated at event `a` and freed at event `f` is live over the half-open interval
//! `[a, f)` (the convention of [`crate::plan`]): it is not live at its free, so a block allocated
//! by the very next event may reuse its memory. A block never freed is live until the end of
//! whatever window is being converted ([`Recording::to_instance`]).
//!
//! # The iteration
//!
//! See [`Recording::iteration`] for how the training step is told apart from the layer loops
//! inside it, and [`Recording::iteration_buffers`] for what happens to blocks that cross the
//! iteration's boundary.

use std::collections::HashMap;
use std::fmt;
use std::ops::Range;
use std::path::PathBuf;

use crate::analysis::Iteration;
use crate::detect::{self, DetectError, DetectorConfig, Segment};
use crate::plan::{Buffer, Instance, InstanceError};

use super::Format;

/// Where a recording came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Source {
    pub format: Format,
    pub path: PathBuf,
    /// Whether the file was gzip-compressed.
    pub gzip: bool,
}

/// One allocation or free, in recorded order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AllocEvent {
    /// `size` bytes allocated; `id` names this allocation for the whole recording.
    Alloc {
        id: u64,
        size: u64,
        /// The device address, when the format records one.
        addr: Option<u64>,
        /// Time in microseconds on the recording's clock (Unix epoch for PyTorch files, the
        /// trace start for itermem traces), when the format records one. Fractions of a
        /// microsecond are truncated.
        time_us: Option<u64>,
    },
    /// The allocation `id` is freed.
    Free { id: u64, time_us: Option<u64> },
}

impl AllocEvent {
    /// The allocation this event allocates or frees.
    pub fn id(&self) -> u64 {
        match *self {
            AllocEvent::Alloc { id, .. } | AllocEvent::Free { id, .. } => id,
        }
    }

    pub fn time_us(&self) -> Option<u64> {
        match *self {
            AllocEvent::Alloc { time_us, .. } | AllocEvent::Free { time_us, .. } => time_us,
        }
    }

    pub fn is_alloc(&self) -> bool {
        matches!(self, AllocEvent::Alloc { .. })
    }
}

/// Raw alloc and free records one device has in the file (before frees were paired).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceSummary {
    pub device: u32,
    pub allocs: u64,
    pub frees: u64,
}

impl DeviceSummary {
    pub fn events(&self) -> u64 {
        self.allocs + self.frees
    }
}

/// What the importer left out or repaired, for the chosen device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ImportStats {
    /// Frees whose address (or id) had no live allocation: blocks allocated before the recording
    /// started. Dropped: they are not events of the recording.
    pub dropped_frees: u64,
    /// Allocations at an address that was still live (no free seen in between). The later free
    /// at that address is paired with the latest allocation; the earlier one is never freed.
    pub reused_live_addresses: u64,
    /// Frees whose recorded size differs from the size of the allocation they were paired with.
    pub size_mismatches: u64,
    /// Records of the chosen device that are neither an allocation nor a free (segment events,
    /// `free_completed`, pinned host memory, launches, …).
    pub ignored_records: u64,
}

/// Why events do not form a recording.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordingError {
    /// Event `index` allocates an id an earlier event already allocated.
    DuplicateId { index: usize, id: u64 },
    /// Event `index` frees an id that is not live (never allocated, or already freed).
    FreeOfDeadId { index: usize, id: u64 },
}

impl fmt::Display for RecordingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecordingError::DuplicateId { index, id } => write!(
                f,
                "event {index} allocates id {id}, which an earlier event already allocated"
            ),
            RecordingError::FreeOfDeadId { index, id } => {
                write!(f, "event {index} frees id {id}, which is not live")
            }
        }
    }
}

impl std::error::Error for RecordingError {}

/// The allocations and frees of one device, in recorded order. See the module documentation
/// for the invariants.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recording {
    source: Source,
    device: u32,
    devices: Vec<DeviceSummary>,
    events: Vec<AllocEvent>,
    stats: ImportStats,
}

/// A block left out of an iteration's instance: live over the whole iteration (a weight, an
/// optimizer state), or for longer than an iteration (see [`IterationBuffers`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PersistentBuffer {
    pub id: u64,
    pub size: u64,
}

/// The buffers of one iteration, as [`Recording::iteration_buffers`] splits them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IterationBuffers {
    /// First event of the iteration in the recording (the instance's time 0).
    pub start: u64,
    /// Events in the iteration: the instance's lifetimes lie in `[0, length]`.
    pub length: u64,
    /// The transient buffers, lifetimes relative to `start`.
    pub instance: Instance,
    /// Blocks live over the whole iteration (allocated before it, freed after it or never):
    /// not in `instance`.
    pub persistent: Vec<PersistentBuffer>,
    /// Blocks allocated in the iteration that live `length` events or more, so that the copies
    /// of two consecutive iterations overlap: not in `instance`.
    pub long_lived: Vec<PersistentBuffer>,
    /// Ids of the buffers in `instance` allocated in the iteration and live at its end, widened
    /// to the whole iteration `[0, length)`.
    pub wrapped: Vec<u64>,
    /// Ids of blocks allocated before the iteration and freed in it that were left out as the
    /// previous iteration's copies of `wrapped` or `long_lived` blocks.
    pub previous_copies: Vec<u64>,
}

impl Recording {
    /// Checks the invariants of the module documentation. The recording is given device 0,
    /// with a device summary counted from `events`, and empty statistics.
    pub fn new(source: Source, events: Vec<AllocEvent>) -> Result<Recording, RecordingError> {
        let mut live: HashMap<u64, ()> = HashMap::with_capacity(events.len() / 2 + 1);
        let mut seen: HashMap<u64, ()> = HashMap::with_capacity(events.len() / 2 + 1);
        let (mut allocs, mut frees) = (0, 0);
        for (index, event) in events.iter().enumerate() {
            match *event {
                AllocEvent::Alloc { id, .. } => {
                    if seen.insert(id, ()).is_some() {
                        return Err(RecordingError::DuplicateId { index, id });
                    }
                    live.insert(id, ());
                    allocs += 1;
                }
                AllocEvent::Free { id, .. } => {
                    if live.remove(&id).is_none() {
                        return Err(RecordingError::FreeOfDeadId { index, id });
                    }
                    frees += 1;
                }
            }
        }
        Ok(Recording {
            source,
            device: 0,
            devices: vec![DeviceSummary {
                device: 0,
                allocs,
                frees,
            }],
            events,
            stats: ImportStats::default(),
        })
    }

    /// Names the device the events are from and every device the file has (ascending).
    pub(crate) fn with_devices(mut self, device: u32, devices: Vec<DeviceSummary>) -> Recording {
        self.device = device;
        self.devices = devices;
        self
    }

    pub(crate) fn with_stats(mut self, stats: ImportStats) -> Recording {
        self.stats = stats;
        self
    }

    pub fn source(&self) -> &Source {
        &self.source
    }

    /// The device these events are from.
    pub fn device(&self) -> u32 {
        self.device
    }

    /// Every device the file names, ascending by id, with its alloc and free records (a
    /// snapshot lists every entry of `device_traces`, even empty ones).
    pub fn devices(&self) -> &[DeviceSummary] {
        &self.devices
    }

    pub fn events(&self) -> &[AllocEvent] {
        &self.events
    }

    pub fn stats(&self) -> &ImportStats {
        &self.stats
    }

    pub fn len(&self) -> usize {
        self.events.len()
    }

    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// Allocations in the recording.
    pub fn allocs(&self) -> usize {
        self.events.iter().filter(|e| e.is_alloc()).count()
    }

    /// Frees in the recording (frees of blocks allocated before it are not events).
    pub fn frees(&self) -> usize {
        self.events.len() - self.allocs()
    }

    /// Live bytes after each event: `live[i]` counts the blocks allocated at or before event `i`
    /// and not freed at or before it.
    pub fn live_bytes(&self) -> Vec<u64> {
        let mut sizes: HashMap<u64, u64> = HashMap::with_capacity(self.events.len() / 2 + 1);
        let mut live = 0u64;
        self.events
            .iter()
            .map(|event| {
                match *event {
                    AllocEvent::Alloc { id, size, .. } => {
                        sizes.insert(id, size);
                        live = live.saturating_add(size);
                    }
                    AllocEvent::Free { id, .. } => {
                        live = live.saturating_sub(sizes.remove(&id).unwrap_or(0));
                    }
                }
                live
            })
            .collect()
    }

    /// The detector tokens of the events ([`detect::malloc_token`] of the size for an alloc,
    /// [`detect::free_token`] of the lifetime in events for a free), as the interposer computes
    /// them online.
    pub fn tokens(&self) -> Vec<u64> {
        let mut allocated_at: HashMap<u64, u64> = HashMap::with_capacity(self.events.len() / 2 + 1);
        self.events
            .iter()
            .enumerate()
            .map(|(index, event)| match *event {
                AllocEvent::Alloc { id, size, .. } => {
                    allocated_at.insert(id, index as u64);
                    detect::malloc_token(size)
                }
                AllocEvent::Free { id, .. } => {
                    let lifetime = allocated_at
                        .remove(&id)
                        .map_or(u64::MAX, |at| index as u64 - at);
                    detect::free_token(lifetime)
                }
            })
            .collect()
    }

    /// The DSA instance of the events in `range` (all events for `None`).
    ///
    /// Conventions: lifetimes are event indices **relative to the range start** (`lower = a −
    /// start`), half-open; a block allocated in the range and not freed in it (never freed, or
    /// freed after the range) lives to the range end (clipped); a block allocated before the
    /// range start is left out, even if it is freed inside the range; 0-byte allocations are
    /// left out (no memory to place). A range reaching past the recording is cut at its end; an
    /// empty range gives an empty instance. Buffer ids are the recording's allocation ids;
    /// buffers are listed in allocation order.
    ///
    /// With `None` this is the derivation of the project's derived DSA CSV files: logical time =
    /// index among allocs and frees, never freed → live to the end.
    pub fn to_instance(&self, range: Option<Range<usize>>) -> Result<Instance, InstanceError> {
        let n = self.events.len();
        let range = range.unwrap_or(0..n);
        let (start, end) = (range.start.min(n), range.end.min(n));
        if start >= end {
            return Instance::new(Vec::new());
        }
        let mut open: HashMap<u64, usize> = HashMap::new(); // id → index in `buffers`
        let mut buffers = Vec::new();
        for (index, event) in self.events[start..end].iter().enumerate() {
            let t = index as u64;
            match *event {
                AllocEvent::Alloc { id, size, .. } => {
                    if size > 0 {
                        open.insert(id, buffers.len());
                        buffers.push(Buffer {
                            id,
                            lower: t,
                            upper: (end - start) as u64,
                            size,
                        });
                    }
                }
                AllocEvent::Free { id, .. } => {
                    if let Some(at) = open.remove(&id) {
                        buffers[at].upper = t;
                    }
                }
            }
        }
        Instance::new(buffers)
    }

    /// The training iteration of the recording, or `None` if it does not repeat.
    ///
    /// The detector ([`crate::detect`]) runs over one token per event ([`Recording::tokens`])
    /// with the live bytes after each event, and lists every exactly periodic stretch
    /// ([`detect::segments`]). On real training steps those stretches are mostly the *layer
    /// loops* inside a step (the same block allocating and freeing the same sizes for each of 24
    /// transformer layers: periods of 60–100 events), which may cover more events than the step
    /// itself; and the step may never repeat exactly (the first one allocates the optimizer
    /// state). [`choose_iteration`] turns the segments into the step: the longest period the
    /// whole recording (after an ignored warm-up) follows at ≥ 90 % of its events — see there
    /// for the rule and the figures measured on the real recordings.
    ///
    /// Fails only for an invalid detector configuration.
    pub fn iteration(&self, config: &DetectorConfig) -> Result<Option<Iteration>, DetectError> {
        let (tokens, live) = (self.tokens(), self.live_bytes());
        let segments = detect::segments(&tokens, &live, config)?;
        Ok(choose_iteration(&tokens, &live, &segments, config))
    }

    /// The buffers of one iteration, in the form the planner takes: see [`IterationBuffers`].
    ///
    /// The iteration used is the **last complete one of the periodic stretch that is aligned
    /// with the boundary**: it starts at `boundary_event + j·period_events` for the largest `j`
    /// (possibly negative) that ends it by the end of the stretch
    /// (`start_event + iterations_seen · period_events`) and of the recording. The last one is
    /// the furthest from warm-up, and starting at the boundary (the least live bytes) keeps the
    /// blocks crossing it few.
    ///
    /// With `b` the iteration's first event, `e = b + length`, a block allocated at `a` and
    /// freed at `f` (`f = ∞` if never freed) is:
    ///
    /// - **persistent** if it is live over the whole iteration (`a < b` and `f ≥ e`): left out,
    ///   listed in `persistent`. Weights and optimizer state are placed once, not per iteration
    ///   (design §2: they keep their own blocks).
    /// - **inside** if `b ≤ a` and `f ≤ e`: `[a − b, f − b)`.
    /// - **long-lived** if `b ≤ a` and `f − a ≥ length` (finite): it outlives a whole iteration,
    ///   so its copies in two consecutive iterations are live at the same time and cannot share
    ///   one offset. Left out, listed in `long_lived` (the executor serves it from the fallback
    ///   allocator, or a planner unrolls two iterations).
    /// - **crossing the end** if `b ≤ a < e < f` and it is not long-lived (or never freed): the
    ///   next iteration frees it. In a periodic stream every iteration allocates its copy at the
    ///   same position, so in a pool that replays the plan the copy of this iteration and that
    ///   of the previous one are one table slot, busy on both sides of the boundary: over
    ///   `[a − b, length)` and over `[0, f − e)`. One interval cannot express the hole in
    ///   between, so the buffer is **wrapped**: widened to `[0, length)` (listed in
    ///   `wrapped`). This over-reserves only while the slot is idle and is sound for a pool that
    ///   gives the k-th allocation of every iteration the same offset; clipping both pieces
    ///   instead would let the planner give them two offsets, which no replay can honour. The
    ///   boundary sits where the live bytes are least, so few blocks cross it.
    /// - **crossing the start** if `a < b < f < e`: the previous iteration's copy of a wrapped
    ///   or long-lived block if a block of the same size allocated exactly `length` events
    ///   later is one (left out, listed in `previous_copies`: that block stands for both);
    ///   otherwise a one-off block (an input loaded before the iteration, say), clipped to
    ///   `[0, f − b)`.
    ///
    /// 0-byte blocks are left out. Ids are the recording's allocation ids. The instance's peak
    /// plus the persistent and long-lived bytes bounds the iteration's live bytes from above.
    pub fn iteration_buffers(&self, iteration: &Iteration) -> IterationBuffers {
        let n = self.events.len() as u64;
        let (start, length) = iteration.last_window(n);
        let end = start + length;
        let mut out = IterationBuffers {
            start,
            length,
            instance: Instance::default(),
            persistent: Vec::new(),
            long_lived: Vec::new(),
            wrapped: Vec::new(),
            previous_copies: Vec::new(),
        };
        if length == 0 {
            return out;
        }

        // Every block allocated before `end`: (id, alloc index, size, free index).
        let mut blocks: Vec<(u64, u64, u64, Option<u64>)> = Vec::new();
        let mut open: HashMap<u64, usize> = HashMap::new();
        for (index, event) in self.events.iter().enumerate() {
            let index = index as u64;
            match *event {
                AllocEvent::Alloc { id, size, .. } => {
                    if index < end {
                        open.insert(id, blocks.len());
                        blocks.push((id, index, size, None));
                    } else if open.is_empty() {
                        break; // every block allocated before `end` is freed
                    }
                }
                AllocEvent::Free { id, .. } => {
                    if let Some(at) = open.remove(&id) {
                        blocks[at].3 = Some(index);
                    }
                }
            }
        }
        #[derive(Clone, Copy, PartialEq, Eq)]
        enum Class {
            Dead,
            Persistent,
            Inside,
            LongLived,
            Wrapped,
            CrossingStart,
        }
        let class_of = |&(_, a, size, f): &(u64, u64, u64, Option<u64>)| {
            let freed = f.unwrap_or(u64::MAX);
            if size == 0 || freed <= start {
                Class::Dead
            } else if a < start {
                if freed >= end {
                    Class::Persistent
                } else {
                    Class::CrossingStart
                }
            } else if freed <= end {
                Class::Inside
            } else if f.is_some_and(|f| f - a >= length) {
                Class::LongLived
            } else {
                Class::Wrapped
            }
        };
        // Alloc index → (size, class), to recognise previous copies.
        let by_alloc: HashMap<u64, (u64, Class)> = blocks
            .iter()
            .filter(|b| b.1 >= start)
            .map(|b| (b.1, (b.2, class_of(b))))
            .collect();

        let mut buffers = Vec::new();
        for block in &blocks {
            let &(id, a, size, f) = block;
            let freed = f.unwrap_or(u64::MAX);
            match class_of(block) {
                Class::Dead => {}
                Class::Persistent => out.persistent.push(PersistentBuffer { id, size }),
                Class::LongLived => out.long_lived.push(PersistentBuffer { id, size }),
                Class::Inside => buffers.push(Buffer {
                    id,
                    lower: a - start,
                    upper: freed - start,
                    size,
                }),
                Class::Wrapped => {
                    out.wrapped.push(id);
                    buffers.push(Buffer {
                        id,
                        lower: 0,
                        upper: length,
                        size,
                    });
                }
                Class::CrossingStart => {
                    let next = by_alloc.get(&(a + length));
                    if next.is_some_and(|&(s, class)| {
                        s == size && matches!(class, Class::Wrapped | Class::LongLived)
                    }) {
                        out.previous_copies.push(id);
                    } else {
                        buffers.push(Buffer {
                            id,
                            lower: 0,
                            upper: freed - start,
                            size,
                        });
                    }
                }
            }
        }
        // Ids are unique, lifetimes non-empty and sizes non-zero by construction.
        out.instance = Instance::new(buffers).unwrap_or_default();
        out
    }

    /// The transient buffers of one iteration: [`Recording::iteration_buffers`]`.instance`.
    pub fn iteration_instance(&self, iteration: &Iteration) -> Instance {
        self.iteration_buffers(iteration).instance
    }

    /// The recording as itermem events (device mallocs and frees on stream 0; times from the
    /// recording in µs, or the event index when it has none), so trace commands read it.
    pub fn to_events(&self) -> Vec<crate::event::Event> {
        use crate::event::{Event, EventKind, MemKind};
        self.events
            .iter()
            .enumerate()
            .map(|(index, event)| {
                let time_ns = event
                    .time_us()
                    .map_or(index as u64, |us| us.saturating_mul(1000));
                let kind = match *event {
                    AllocEvent::Alloc { id, size, addr, .. } => EventKind::Malloc {
                        id,
                        addr: addr.unwrap_or(0),
                        size,
                        kind: MemKind::Device,
                        stream: 0,
                    },
                    AllocEvent::Free { id, .. } => EventKind::Free { id, stream: 0 },
                };
                Event::new(time_ns, kind)
            })
            .collect()
    }
}

/// Fraction of the positions `i` of a candidate's stretch where `s[i] = s[i + P]` needed to
/// accept a period `P` (see [`choose_iteration`]).
pub const MIN_MATCH_RATIO: f64 = 0.9;

/// How many of the segments covering the most events are paired to propose step periods.
const PAIRED_SEGMENTS: usize = 48;

/// The training iteration of a token stream, from the exact periodic stretches the detector
/// found in it (`segments`, as [`detect::segments`] lists them for `tokens` and `live`).
///
/// # The problem
///
/// The detector reports the *smallest* period that repeats exactly `k` times. A training step
/// is full of inner loops (one per transformer layer, say), each an exact period of its own, and
/// the step as a whole often never repeats exactly within a recording: the first step allocates
/// the optimizer state, blocks allocated before the first step have other lifetimes, and a
/// recording of a few steps holds few copies, one of them the warm-up. On the ViT-L/16 snapshot (two
/// steps of 1,495 events in 2,990) the first 40 events of the two steps differ, so no exact
/// detector can report 1,495 with `k = 2`; what it reports are two layer loops of 60 events,
/// which cover 2,640 of the 2,990 events: by coverage alone, the layer loop "is" the iteration.
///
/// # The rule
///
/// 1. **Candidates**: the length of every segment, and, for every two of the 48 segments
///    covering the most events that have the same length (the same layer loop in two steps),
///    the distances between their starts and between their ends (the ViT: 1,650 − 155 =
///    2,970 − 1,475 = 1,495).
/// 2. **Acceptance**: a candidate `P` (at most `max_period`) is accepted when the stream
///    *mostly* repeats with period `P`: there is a start `t ≤ n/2` with at least
///    `k = repeats` copies after it (`n − t ≥ k·P`) such that `s[i] = s[i + P]` for at least
///    [`MIN_MATCH_RATIO`] (90 %) of the positions `i` in `[t, n − P)`. The smallest such `t` is
///    the start of the stretch; warm-up before it (up to half the recording) is ignored.
/// 3. **Choice**: the *longest* accepted period that is not a multiple of a shorter accepted
///    period matching at least as well (within 0.01 over the whole stream). The step contains
///    the layer loops, so it is longer than any of them; a multiple of the step (two steps)
///    matches no better than the step itself and is set aside.
///
/// The iteration's boundary and counts come from the detector's segment when one has exactly
/// the chosen length (an exact period: its boundary is the least-live event the detector chose).
/// Otherwise the period is approximate: `start_event` is `t`, `iterations_seen` is
/// `(n − t) / P`, `detected_at_event` is the last event, and `boundary_event` follows the event
/// with the least live bytes among the last `P` (earliest on ties), like the detector's.
///
/// `None` when no candidate is accepted: a recording of a single step (the CS336 snapshots),
/// whose layer loops cover only a quarter of the events, has no iteration to plan.
///
/// Measured: ViT-L/16 snapshot → 1,495 events, 2 iterations; V100 profiler trace → 5,354
/// events, 5 iterations (an exact segment covering all 26,770 events).
pub fn choose_iteration(
    tokens: &[u64],
    live: &[u64],
    segments: &[Segment],
    config: &DetectorConfig,
) -> Option<Iteration> {
    let n = tokens.len().min(live.len());
    let repeats = config.repeats.max(2);
    let mut candidates: Vec<usize> = segments
        .iter()
        .map(|s| usize::try_from(s.period.length).unwrap_or(usize::MAX))
        .collect();
    let mut biggest: Vec<&Segment> = segments.iter().collect();
    biggest.sort_by_key(|s| std::cmp::Reverse(s.covered_events()));
    biggest.truncate(PAIRED_SEGMENTS);
    for (i, a) in biggest.iter().enumerate() {
        for b in &biggest[i + 1..] {
            if a.period.length != b.period.length {
                continue;
            }
            for d in [
                a.period.start.abs_diff(b.period.start),
                a.end.abs_diff(b.end),
            ] {
                candidates.push(usize::try_from(d).unwrap_or(usize::MAX));
            }
        }
    }
    candidates.sort_unstable();
    candidates.dedup();
    candidates.retain(|&p| {
        p >= 1 && p <= config.max_period && p.checked_mul(repeats).is_some_and(|w| w <= n)
    });

    // Accepted candidates: (period, stretch start, whole-stream match ratio).
    let mut accepted: Vec<(usize, usize, f64)> = Vec::new();
    for &p in &candidates {
        let matches: Vec<bool> = (0..n - p).map(|i| tokens[i] == tokens[i + p]).collect();
        let total = matches.iter().filter(|&&m| m).count();
        // Smallest start t with a good enough match ratio over [t, n − p).
        let last_start = (n / 2).min(n - repeats * p);
        let mut matched_after = total; // matches in [t, n − p)
        let mut found = None;
        for t in 0..=last_start {
            let positions = n - p - t;
            if positions > 0 && matched_after as f64 >= MIN_MATCH_RATIO * positions as f64 {
                found = Some(t);
                break;
            }
            if t < matches.len() && matches[t] {
                matched_after -= 1;
            }
        }
        if let Some(t) = found {
            accepted.push((p, t, total as f64 / (n - p) as f64));
        }
    }
    let &(period, start, _) = accepted.iter().rev().find(|&&(p, _, ratio)| {
        !accepted
            .iter()
            .any(|&(q, _, q_ratio)| q < p && p % q == 0 && q_ratio >= ratio - 0.01)
    })?;

    // An exact segment of that length gives the detector's own figures.
    let exact = segments
        .iter()
        .filter(|s| s.period.length == period as u64)
        .max_by_key(|s| s.covered_events());
    if let Some(segment) = exact {
        let p = segment.period;
        return Some(Iteration {
            iterations_seen: segment.covered_events() / p.length.max(1),
            ..Iteration::from_period(&p)
        });
    }
    let last = &live[n - period..n];
    let least = last
        .iter()
        .enumerate()
        .min_by_key(|&(offset, &bytes)| (bytes, offset))
        .map_or(0, |(offset, _)| offset);
    Some(Iteration {
        period_events: period as u64,
        boundary_event: (n - period + least + 1) as u64,
        iterations_seen: ((n - start) / period) as u64,
        start_event: start as u64,
        detected_at_event: n.saturating_sub(1) as u64,
    })
}
