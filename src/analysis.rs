//! The summary of a recorded event stream: counts, streams, live device bytes over time, the
//! peak, the busiest kernels, and the training iteration found by [`crate::detect`].
//!
//! It owns one convention that every consumer of a trace shares with the live recorder
//! (`interposer::recorder`): **event indices count access events only** ([`Numbering`]).
//! Device mallocs and frees, memcpy, memset and launch events are numbered 0, 1, 2, … in trace
//! order. `KernelName` records are metadata, and pinned host allocations and their frees are
//! not accesses of device memory: neither gets an index or a token. A framework allocates
//! pinned memory at moments that depend on timing (PyTorch's pinned-memory cache calls
//! `cudaHostAlloc` whenever its blocks are still in flight), so counting those calls would
//! move every later device event and break the period. The period, the boundary and the peak
//! index reported offline are the ones the interposer computes online for the same run.
//!
//! Tokens (what the detector compares) are exactly the recorder's: malloc → size class, free →
//! lifetime in events (free index − malloc index), launch → kernel id, memcpy → direction and
//! bytes, memset → bytes (see [`token`]). Live bytes count device memory only (device, managed
//! and stream-ordered allocations; pinned host memory is not device memory).
//!
//! Built as a push-style [`Analyzer`] so a caller can stream a trace of any size through it and
//! stop at the first corrupt record; it keeps one `u64` of tokens and one of live bytes per event
//! (the detector's offline entry point wants the whole stream), plus the live allocations.

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use serde::Serialize;

use crate::detect::{self, DetectError, DetectorConfig, Period};
use crate::event::{AllocId, Event, EventKind, KernelId, MemKind, StreamHandle};
use crate::plan::Buffer;

/// Event counts by kind. `malloc`/`free` count device memory only (device, managed, async);
/// pinned host memory is counted in [`Analysis::host`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct EventCounts {
    pub malloc: u64,
    pub free: u64,
    pub launch: u64,
    pub memcpy: u64,
    pub memset: u64,
}

/// Pinned-host (`cudaMallocHost`/`cudaHostAlloc`/`cudaFreeHost`) counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct HostCounts {
    pub malloc: u64,
    pub free: u64,
}

/// Launch count of one kernel.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct KernelStat {
    pub id: KernelId,
    /// From the trace's `KernelName` record; `None` if the trace never named it.
    pub name: Option<String>,
    pub launches: u64,
}

/// The repeating iteration, as [`detect::detect`] found it over the whole stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Iteration {
    /// Events per iteration.
    pub period_events: u64,
    /// Index of the first event of an iteration (iterations are
    /// `[boundary + j·period, boundary + (j + 1)·period)`).
    pub boundary_event: u64,
    /// Complete iterations in the periodic stretch.
    pub iterations_seen: u64,
    /// First event of the periodic stretch.
    pub start_event: u64,
    /// Index of the event at which the period was found.
    pub detected_at_event: u64,
}

impl Iteration {
    /// The iteration a detected period describes.
    pub(crate) fn from_period(p: &Period) -> Iteration {
        Iteration {
            period_events: p.length,
            boundary_event: p.boundary,
            iterations_seen: p.iterations_seen,
            start_event: p.start,
            detected_at_event: p.detected_at,
        }
    }

    /// Start indices of the complete iterations aligned with the boundary inside the periodic
    /// stretch `[start_event, start_event + iterations_seen · period_events)`.
    pub fn aligned_starts(&self) -> Vec<u64> {
        let p = self.period_events;
        if p == 0 {
            return Vec::new();
        }
        let end = self
            .start_event
            .saturating_add(self.iterations_seen.saturating_mul(p));
        let first = if self.boundary_event >= self.start_event {
            self.boundary_event - (self.boundary_event - self.start_event) / p * p
        } else {
            self.boundary_event + (self.start_event - self.boundary_event).div_ceil(p) * p
        };
        let mut starts = Vec::new();
        let mut s = first;
        while let Some(next) = s.checked_add(p).filter(|&next| next <= end) {
            starts.push(s);
            s = next;
        }
        starts
    }

    /// The last complete iteration of a stream of `n` events: `(start, length)` with
    /// `length = min(period, n)` and `start` the largest index ≡ the boundary (mod length) whose
    /// iteration ends inside the periodic stretch (inside the stream if the stretch is shorter
    /// than one period). `(0, 0)` for a zero period.
    pub fn last_window(&self, n: u64) -> (u64, u64) {
        let length = self.period_events.min(n);
        if length == 0 {
            return (0, 0);
        }
        let stretch_end = self
            .start_event
            .saturating_add(self.iterations_seen.saturating_mul(length))
            .min(n);
        let limit = if stretch_end >= length {
            stretch_end
        } else {
            n
        };
        let phase = self.boundary_event % length;
        let last = limit - length;
        let start = if last >= phase {
            last - (last - phase) % length
        } else {
            last
        };
        (start, length)
    }
}

/// Everything `itermem trace info` reports about a stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Analysis {
    /// Access events (the indexed ones: everything but kernel names).
    pub events: u64,
    pub counts: EventCounts,
    pub host: HostCounts,
    /// `KernelName` records.
    pub kernel_names: u64,
    /// `GraphLaunch` records: CUDA graph launches, whose nodes' work is among the events.
    pub graph_launches: u64,
    /// Frees of ids the stream never allocated (or freed twice): not in `counts` or `host`.
    pub unmatched_frees: u64,
    /// Mallocs reusing the id of a live allocation (the older one is forgotten).
    pub duplicate_ids: u64,
    /// Every stream handle that appears in an event, ascending.
    pub streams: Vec<StreamHandle>,
    /// Live device bytes after each access event (`live_bytes[i]` after event `i`).
    pub live_bytes: Vec<u64>,
    pub peak_live_bytes: u64,
    /// First event at which the peak was reached (`None` when nothing was ever live).
    pub peak_event: Option<u64>,
    pub peak_time_ns: Option<u64>,
    /// Time of the first and of the last event (`None` for an empty stream).
    pub first_time_ns: Option<u64>,
    pub last_time_ns: Option<u64>,
    /// Kernels by launch count, most launched first (ties: lower id first).
    pub kernels: Vec<KernelStat>,
    pub iteration: Option<Iteration>,
}

impl Analysis {
    /// Live device bytes at the end of the stream.
    pub fn live_at_end(&self) -> u64 {
        self.live_bytes.last().copied().unwrap_or(0)
    }

    /// Duration covered by the events.
    pub fn duration_ns(&self) -> u64 {
        match (self.first_time_ns, self.last_time_ns) {
            (Some(first), Some(last)) => last.saturating_sub(first),
            _ => 0,
        }
    }
}

/// The detector token of an access event; `malloc_index` gives the index of the malloc a free
/// ends (`None` if unknown). Returns `None` for `KernelName` (no token).
///
/// Must stay equal to what `interposer::recorder` pushes online.
pub fn token(kind: &EventKind, index: u64, malloc_index: Option<u64>) -> Option<u64> {
    Some(match kind {
        EventKind::Malloc { size, .. } => detect::malloc_token(*size),
        EventKind::Free { .. } => {
            detect::free_token(malloc_index.map_or(u64::MAX, |m| index.saturating_sub(m)))
        }
        EventKind::Memcpy { bytes, kind, .. } => detect::transfer_token(*kind as u64, *bytes),
        EventKind::Memset { bytes, .. } => detect::transfer_token(MEMSET_TRANSFER_KIND, *bytes),
        EventKind::Launch { kernel, .. } => detect::launch_token(u64::from(*kernel)),
        EventKind::KernelName { .. } | EventKind::GraphLaunch { .. } => return None,
    })
}

/// The transfer kind memsets are tokenised with (copy kinds are 0–4).
pub const MEMSET_TRANSFER_KIND: u64 = 5;

/// The access-event index of each event of one device's stream, in trace order (the module
/// doc's convention).
#[derive(Clone, Debug, Default)]
pub struct Numbering {
    next: u64,
    /// Live pinned host allocations: their frees take no index either.
    host: HashSet<AllocId>,
}

impl Numbering {
    /// The index `kind` takes, or `None` for a kernel name, a pinned host malloc or the free
    /// of one.
    pub fn number(&mut self, kind: &EventKind) -> Option<u64> {
        let indexed = match kind {
            EventKind::KernelName { .. } | EventKind::GraphLaunch { .. } => false,
            EventKind::Malloc { id, kind, .. } if !kind.is_device() => {
                self.host.insert(*id);
                false
            }
            EventKind::Malloc { id, .. } => {
                // A device malloc reusing a host block's id ends that block.
                self.host.remove(id);
                true
            }
            EventKind::Free { id, .. } => !self.host.remove(id),
            _ => true,
        };
        indexed.then(|| {
            self.next += 1;
            self.next - 1
        })
    }

    /// Access events numbered so far.
    pub fn count(&self) -> u64 {
        self.next
    }
}

/// A live allocation.
#[derive(Clone, Copy, Debug)]
struct Live {
    /// `None` for a pinned host block (see [`Numbering`]).
    index: Option<u64>,
    size: u64,
    kind: MemKind,
}

/// Feeds events one by one; [`Analyzer::finish`] runs the detector and returns the summary.
#[derive(Debug, Default)]
pub struct Analyzer {
    numbering: Numbering,
    counts: EventCounts,
    host: HostCounts,
    kernel_names: u64,
    graph_launches: u64,
    unmatched_frees: u64,
    duplicate_ids: u64,
    streams: BTreeSet<StreamHandle>,
    live: HashMap<AllocId, Live>,
    live_bytes: u64,
    live_series: Vec<u64>,
    tokens: Vec<u64>,
    peak_live_bytes: u64,
    peak_event: Option<u64>,
    peak_time_ns: Option<u64>,
    first_time_ns: Option<u64>,
    last_time_ns: Option<u64>,
    names: HashMap<KernelId, String>,
    launches: BTreeMap<KernelId, u64>,
}

impl Analyzer {
    pub fn new() -> Analyzer {
        Analyzer::default()
    }

    /// Access events pushed so far.
    pub fn events(&self) -> u64 {
        self.numbering.count()
    }

    pub fn push(&mut self, event: &Event) {
        self.first_time_ns.get_or_insert(event.time_ns);
        self.last_time_ns = Some(event.time_ns);
        let index = self.numbering.number(&event.kind);
        let mut malloc_index = None;
        match &event.kind {
            EventKind::KernelName { kernel, name } => {
                self.kernel_names += 1;
                self.names.insert(*kernel, name.clone());
                return;
            }
            EventKind::GraphLaunch { stream, .. } => {
                self.streams.insert(*stream);
                self.graph_launches += 1;
                return;
            }
            EventKind::Malloc {
                id,
                size,
                kind,
                stream,
                ..
            } => {
                self.streams.insert(*stream);
                if kind.is_device() {
                    self.counts.malloc += 1;
                    self.live_bytes = self.live_bytes.saturating_add(*size);
                } else {
                    self.host.malloc += 1;
                }
                let new = Live {
                    index,
                    size: *size,
                    kind: *kind,
                };
                if let Some(old) = self.live.insert(*id, new) {
                    self.duplicate_ids += 1;
                    if old.kind.is_device() {
                        self.live_bytes = self.live_bytes.saturating_sub(old.size);
                    }
                }
            }
            EventKind::Free { id, stream } => {
                self.streams.insert(*stream);
                match self.live.remove(id) {
                    Some(block) => {
                        malloc_index = block.index;
                        if block.kind.is_device() {
                            self.counts.free += 1;
                            self.live_bytes = self.live_bytes.saturating_sub(block.size);
                        } else {
                            self.host.free += 1;
                        }
                    }
                    None => self.unmatched_frees += 1,
                }
            }
            EventKind::Memcpy { stream, .. } => {
                self.streams.insert(*stream);
                self.counts.memcpy += 1;
            }
            EventKind::Memset { stream, .. } => {
                self.streams.insert(*stream);
                self.counts.memset += 1;
            }
            EventKind::Launch { kernel, stream, .. } => {
                self.streams.insert(*stream);
                self.counts.launch += 1;
                *self.launches.entry(*kernel).or_insert(0) += 1;
            }
        }
        let Some(index) = index else {
            return;
        };
        if let Some(token) = token(&event.kind, index, malloc_index) {
            self.tokens.push(token);
        }
        self.live_series.push(self.live_bytes);
        if self.live_bytes > self.peak_live_bytes {
            self.peak_live_bytes = self.live_bytes;
            self.peak_event = Some(index);
            self.peak_time_ns = Some(event.time_ns);
        }
    }

    /// Runs the detector over the whole stream and returns the summary. Fails only for an
    /// invalid detector configuration.
    pub fn finish(self, config: &DetectorConfig) -> Result<Analysis, DetectError> {
        // The training step, not the smallest repeating loop (a layer loop may cover most
        // events): the same choice the importers make (see `import::choose_iteration`).
        let segments = detect::segments(&self.tokens, &self.live_series, config)?;
        let iteration =
            crate::import::choose_iteration(&self.tokens, &self.live_series, &segments, config);
        let mut kernels: Vec<KernelStat> = self
            .launches
            .iter()
            .map(|(&id, &launches)| KernelStat {
                id,
                name: self.names.get(&id).cloned(),
                launches,
            })
            .collect();
        // Named kernels that were never launched are not listed.
        kernels.sort_by(|a, b| b.launches.cmp(&a.launches).then(a.id.cmp(&b.id)));
        Ok(Analysis {
            events: self.numbering.count(),
            counts: self.counts,
            host: self.host,
            kernel_names: self.kernel_names,
            graph_launches: self.graph_launches,
            unmatched_frees: self.unmatched_frees,
            duplicate_ids: self.duplicate_ids,
            streams: self.streams.into_iter().collect(),
            live_bytes: self.live_series,
            peak_live_bytes: self.peak_live_bytes,
            peak_event: self.peak_event,
            peak_time_ns: self.peak_time_ns,
            first_time_ns: self.first_time_ns,
            last_time_ns: self.last_time_ns,
            kernels,
            iteration,
        })
    }
}

/// Analyses a whole stream at once.
pub fn analyze(
    events: impl IntoIterator<Item = impl Borrow<Event>>,
    config: &DetectorConfig,
) -> Result<Analysis, DetectError> {
    let mut analyzer = Analyzer::new();
    for event in events {
        analyzer.push(event.borrow());
    }
    analyzer.finish(config)
}

/// The device buffers live during the access events `[start, start + length)`, lifetimes
/// clipped to that window and made relative to `start`.
///
/// Clipping is how buffers that cross a boundary are treated: one allocated before the window
/// (a weight, or an activation of the previous iteration) starts at 0; one still alive after it
/// (or never freed) ends at `length`; one alive throughout is `[0, length)`. In a periodic
/// stream the piece `[a, length)` of a buffer crossing the end and the piece `[0, f)` of its
/// counterpart from the previous iteration together give exactly the bytes live at every event,
/// so the peak of the buffers equals the peak live bytes of the iteration. Zero-byte buffers are
/// left out. A malloc at index `m` is live from `m` on, a free at index `f` ends it at `f`
/// (half-open `[m, f)`, the convention of every lifetime in itermem). Sorted by `(lower, id)`.
pub fn iteration_buffers(
    events: impl IntoIterator<Item = impl Borrow<Event>>,
    start: u64,
    length: u64,
) -> Vec<Buffer> {
    let end = start.saturating_add(length);
    let mut live: HashMap<AllocId, (u64, u64)> = HashMap::new(); // id → (malloc index, size)
    let mut out = Vec::new();
    let mut numbering = Numbering::default();
    let clip = |id, from: u64, to: u64, size, out: &mut Vec<Buffer>| {
        let lower = from.max(start);
        let upper = to.min(end);
        if lower < upper && size > 0 {
            out.push(Buffer {
                id,
                lower: lower - start,
                upper: upper - start,
                size,
            });
        }
    };
    for event in events {
        let kind = &event.borrow().kind;
        let Some(index) = numbering.number(kind) else {
            continue;
        };
        if index >= end {
            break;
        }
        match kind {
            EventKind::Malloc { id, size, .. } => {
                if let Some((from, size)) = live.insert(*id, (index, *size)) {
                    // A reused id ends the older block here.
                    clip(*id, from, index, size, &mut out);
                }
            }
            EventKind::Free { id, .. } => {
                if let Some((from, size)) = live.remove(id) {
                    clip(*id, from, index, size, &mut out);
                }
            }
            _ => {}
        }
    }
    for (id, (from, size)) in live {
        clip(id, from, end, size, &mut out);
    }
    out.sort_by_key(|b| (b.lower, b.id, b.upper));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::CopyKind;

    fn ev(kind: EventKind) -> Event {
        Event::new(0, kind)
    }

    fn malloc(id: u64, size: u64) -> Event {
        ev(EventKind::Malloc {
            id,
            addr: 0x1000 * id,
            size,
            kind: MemKind::Device,
            stream: 0,
        })
    }

    fn free(id: u64) -> Event {
        ev(EventKind::Free { id, stream: 0 })
    }

    fn launch(kernel: u32) -> Event {
        ev(EventKind::Launch {
            kernel,
            stream: 7,
            layout_known: true,
            touched: smallvec::smallvec![],
        })
    }

    /// A weight (id 1), then `iters` iterations of: malloc A (1 KiB), malloc B (2 KiB), two
    /// launches, free A, memcpy D2H, free B.
    fn training(iters: u64) -> Vec<Event> {
        let mut out = vec![
            ev(EventKind::KernelName {
                kernel: 0,
                name: "fwd".into(),
            }),
            ev(EventKind::KernelName {
                kernel: 1,
                name: "bwd".into(),
            }),
            malloc(1, 4096),
        ];
        let mut id = 2;
        for _ in 0..iters {
            out.push(malloc(id, 1024));
            out.push(malloc(id + 1, 2048));
            out.push(launch(0));
            out.push(launch(1));
            out.push(free(id));
            out.push(ev(EventKind::Memcpy {
                dst: None,
                src: Some(id + 1),
                bytes: 4,
                kind: CopyKind::DeviceToHost,
                stream: 0,
                asynchronous: false,
            }));
            out.push(free(id + 1));
            id += 2;
        }
        out
    }

    #[test]
    fn counts_peak_kernels_and_period_of_a_training_loop() {
        let events = training(6);
        let a = analyze(&events, &DetectorConfig::default()).unwrap();
        assert_eq!(a.events, 1 + 6 * 7);
        assert_eq!(
            a.counts,
            EventCounts {
                malloc: 13,
                free: 12,
                launch: 12,
                memcpy: 6,
                memset: 0
            }
        );
        assert_eq!(a.kernel_names, 2);
        assert_eq!(a.streams, vec![0, 7]);
        assert_eq!(a.peak_live_bytes, 4096 + 1024 + 2048);
        assert_eq!(a.peak_event, Some(2)); // weight 0, A 1, B 2
        assert_eq!(a.live_at_end(), 4096);
        assert_eq!(a.kernels[0].name.as_deref(), Some("fwd"));
        assert_eq!(a.kernels[0].launches, 6);
        let it = a.iteration.unwrap();
        assert_eq!(it.period_events, 7);
        // The least live memory within an iteration is after `free B` (event 7 + 7j): the
        // boundary is the event after it.
        assert_eq!((it.boundary_event - 1) % 7, 0, "{it:?}");
        assert!(it.iterations_seen >= 5, "{it:?}");
    }

    fn host_malloc(id: u64) -> Event {
        ev(EventKind::Malloc {
            id,
            addr: id,
            size: 100,
            kind: MemKind::PinnedHost,
            stream: 0,
        })
    }

    #[test]
    fn pinned_host_memory_is_counted_apart_not_live_and_not_indexed() {
        let events = vec![host_malloc(1), malloc(2, 10_000), free(2), free(1), free(3)];
        let a = analyze(&events, &DetectorConfig::default()).unwrap();
        assert_eq!(a.host, HostCounts { malloc: 1, free: 1 });
        assert_eq!((a.counts.malloc, a.counts.free), (1, 1));
        assert_eq!(a.unmatched_frees, 1);
        assert_eq!(a.peak_live_bytes, 10_000);
        // The device malloc is access event 0: the host malloc and its free take no index.
        assert_eq!(a.peak_event, Some(0));
        assert_eq!((a.events, a.live_bytes.len()), (3, 3));
        assert_eq!(a.iteration, None);
    }

    /// PyTorch's pinned-memory cache allocates whenever its blocks are in flight: host
    /// allocations at irregular points of the iteration must leave the period, the boundary and
    /// every device buffer's lifetime as they are without them.
    #[test]
    fn host_allocations_at_irregular_points_leave_the_iteration_unchanged() {
        let plain = training(12);
        let mut noisy = Vec::new();
        let mut host_id = 1_000;
        for (i, event) in plain.iter().enumerate() {
            noisy.push(event.clone());
            if i % 5 == 3 || i % 11 == 0 {
                noisy.push(host_malloc(host_id));
                host_id += 1;
            }
            if i % 13 == 7 {
                noisy.push(free(host_id - 1));
            }
        }
        let config = DetectorConfig::default();
        let (a, b) = (
            analyze(&plain, &config).unwrap(),
            analyze(&noisy, &config).unwrap(),
        );
        assert!(b.host.malloc > 10, "{:?}", b.host);
        assert_eq!(b.iteration, a.iteration);
        assert_eq!((b.events, b.peak_event), (a.events, a.peak_event));
        let it = a.iteration.unwrap();
        assert_eq!(
            iteration_buffers(&noisy, it.boundary_event, it.period_events),
            iteration_buffers(&plain, it.boundary_event, it.period_events)
        );
    }

    #[test]
    fn numbering_skips_names_host_blocks_and_their_frees_only() {
        let mut n = Numbering::default();
        let kinds = [
            host_malloc(7),
            malloc(8, 1),
            free(7),
            free(8),
            free(7),
            launch(0),
        ];
        let indices: Vec<_> = kinds.iter().map(|e| n.number(&e.kind)).collect();
        // The second free of 7 is not a host block's any more: an (unmatched) access event.
        assert_eq!(indices, [None, Some(0), None, Some(1), Some(2), Some(3)]);
        assert_eq!(n.count(), 4);
    }

    #[test]
    fn tokens_follow_the_recorder() {
        let free_kind = EventKind::Free { id: 1, stream: 0 };
        assert_eq!(token(&free_kind, 10, Some(4)), Some(detect::free_token(6)));
        assert_eq!(
            token(&launch(3).kind, 0, None),
            Some(detect::launch_token(3))
        );
        assert_eq!(token(&training(1)[0].kind, 0, None), None);
    }

    #[test]
    fn iteration_buffers_clip_lifetimes_to_the_window() {
        let events = training(4);
        // Iteration j covers access events [1 + 7j, 8 + 7j).
        let buffers = iteration_buffers(&events, 8, 7);
        assert_eq!(
            buffers,
            vec![
                Buffer {
                    id: 1,
                    lower: 0,
                    upper: 7,
                    size: 4096
                },
                Buffer {
                    id: 4,
                    lower: 0,
                    upper: 4,
                    size: 1024
                },
                Buffer {
                    id: 5,
                    lower: 1,
                    upper: 6,
                    size: 2048
                },
            ]
        );
        // A window shifted by 3 cuts both activations.
        let shifted = iteration_buffers(&events, 11, 7);
        let peak: u64 = (0..7)
            .map(|t| {
                shifted
                    .iter()
                    .filter(|b| b.lower <= t && t < b.upper)
                    .map(|b| b.size)
                    .sum::<u64>()
            })
            .max()
            .unwrap();
        assert_eq!(peak, 4096 + 1024 + 2048);
    }

    #[test]
    fn aligned_starts_stay_inside_the_stretch() {
        let it = Iteration {
            period_events: 7,
            boundary_event: 15,
            iterations_seen: 3,
            start_event: 3,
            detected_at_event: 20,
        };
        // Stretch [3, 24): aligned starts 8 and 15 (22 + 7 > 24).
        assert_eq!(it.aligned_starts(), vec![8, 15]);
    }
}
