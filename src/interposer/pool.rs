//! Pool mode (SmartPool): once the iteration is known, every planned `cudaMalloc` of an
//! iteration is served from one pool at the offset planned offline, and its `cudaFree` returns
//! nothing to the runtime.
//!
//! Life cycle: the recorder keeps the recent device mallocs and frees ([`History`]). When the
//! detector finds the iteration (length `p`, boundary `b`), the complete iteration `[b − p, b)`
//! becomes an allocation problem: every malloc freed within it is a buffer, at its position
//! relative to the iteration's start (one that crosses the boundary holds its range from its
//! malloc to the end and from the start to its free). A block that outlives its own copy of the
//! next iteration (an input loaded before the last one is released) makes the problem the last
//! two iterations, `[b − 2p, b)`, so its two copies alive at once get two ranges, used in turn.
//! A background thread plans it (best of several orderings,
//! [`crate::plan`]); the pool (one real `cudaMalloc` of the footprint) is installed at the next
//! iteration boundary. From then on a malloc at relative position `r` with the planned size gets
//! `base + offset(r)`; anything else (another size, an unplanned position, a persistent tensor)
//! goes to the real allocator (the fallback) and is counted. If the program stops following the
//! period, the pool stops serving (its blocks stay valid until freed) and a new period is
//! planned into a new pool; until that pool serves, mallocs are placed first fit in the left
//! pool's free ranges (a loop inside the iteration planned first, say, leaves its pool to the
//! rest of the iteration), and it is released once its last block is freed.
//!
//! Invariants:
//! - a range is handed out only if no live pool block overlaps it (checked on every serve, so a
//!   program that drifts from its plan gets the fallback, never shared memory);
//! - **the GPU decides when memory is free** (design §2.2): a pool free records an event on every
//!   stream that used the block; the next tenant of an overlapping range makes each stream it is
//!   first used on wait for those events (`cudaStreamWaitEvent`), unless it is the same stream.
//!   Real `cudaFree` synchronises the device; this gives the same safety without the stall.

use super::driver as cuda;
use super::real::allocation_gone;
use super::swap::SwapConfig;
use super::swap::executor::Executor;
use super::swap::planning::Schedule;
use crate::event::AllocId;
use crate::plan::{Absence, Buffer, Instance};
use rustc_hash::FxHashMap;
use std::collections::{BTreeMap, VecDeque};

/// One device malloc seen while recording, for planning.
#[derive(Clone, Copy, Debug)]
struct Record {
    id: AllocId,
    index: u64,
    size: u64,
    freed_at: Option<u64>,
}

/// The recent device mallocs (with their frees), bounded to the detector's window.
#[derive(Default)]
pub struct History {
    records: VecDeque<Record>,
    position: FxHashMap<AllocId, u64>,
    /// Index of the first record in `records` (records are numbered as pushed).
    first: u64,
}

impl History {
    /// How many events of history planning may need (the longest period times two).
    const WINDOW: u64 = 2 << 17;

    pub fn malloc(&mut self, id: AllocId, index: u64, size: u64) {
        let number = self.first + self.records.len() as u64;
        self.records.push_back(Record {
            id,
            index,
            size,
            freed_at: None,
        });
        self.position.insert(id, number);
        while self
            .records
            .front()
            .is_some_and(|r| r.index + Self::WINDOW < index)
        {
            if let Some(old) = self.records.pop_front() {
                self.position.remove(&old.id);
            }
            self.first += 1;
        }
    }

    pub fn free(&mut self, id: AllocId, index: u64) {
        if let Some(number) = self.position.remove(&id)
            && let Some(record) = self.records.get_mut((number - self.first) as usize)
        {
            record.freed_at = Some(index);
        }
    }

    /// Whether `[start, start + length)` may be the training iteration: it allocates device
    /// memory and frees as many blocks as it allocates. In a steady training loop every repeat
    /// does; a repeat that keeps blocks is the program loading its weights or a layer of the
    /// forward pass keeping its activations, one that frees more is a layer of the backward
    /// pass, one without a malloc is a run of launches (an optimizer updating every parameter):
    /// loops inside the iteration, whose plans would serve one loop and fall back after it.
    pub fn balanced(&self, start: u64, length: u64) -> bool {
        let window = start..start.saturating_add(length);
        let (mallocs, frees) = self.records.iter().fold((0, 0), |(m, f), r| {
            let freed = r.freed_at.is_some_and(|at| window.contains(&at));
            (
                m + usize::from(window.contains(&r.index)),
                f + usize::from(freed),
            )
        });
        mallocs > 0 && mallocs == frees
    }

    /// Whether no malloc of the history is made or freed in `[start, start + length)`: a
    /// period of launches and copies alone, as a framework's caching allocator makes once its
    /// segments exist.
    pub fn allocation_free(&self, start: u64, length: u64) -> bool {
        let window = start..start.saturating_add(length);
        !self
            .records
            .iter()
            .any(|r| window.contains(&r.index) || r.freed_at.is_some_and(|at| window.contains(&at)))
    }

    /// The record of the malloc made at event `index`, if the history still holds it.
    fn at(&self, index: u64) -> Option<&Record> {
        let number = self.records.partition_point(|r| r.index < index);
        self.records.get(number).filter(|r| r.index == index)
    }

    /// When malloc `r` is freed: its own free, or while it is live, as long after its malloc
    /// as its copy of one `period` earlier (same size) was freed: a block of a periodic program
    /// lives as long in every period, and the plan is made before the last period's blocks
    /// that cross its end are freed. A wrong guess costs a fallback, never an overlap (the pool
    /// checks every range it serves).
    fn free_of(&self, r: &Record, period: u64) -> Option<u64> {
        r.freed_at.or_else(|| {
            let earlier = self.at(r.index.checked_sub(period)?)?;
            let life = earlier.freed_at?.checked_sub(earlier.index)?;
            (earlier.size == r.size).then(|| r.index + life)
        })
    }

    /// The stretch of events to plan for a period of `period` events confirmed at `boundary`:
    /// the last period, or the last two when one of its blocks outlives its copy of the next
    /// period (freed after that copy's malloc: `x = x.cuda()` in a Python loop releases the last
    /// batch only once the next one is on the device); one range could not hold both copies.
    pub fn window(&self, boundary: u64, period: u64) -> (u64, u64) {
        let start = boundary.saturating_sub(period);
        let outlives = self
            .records
            .iter()
            .filter(|r| r.index >= start && r.index < boundary)
            .filter_map(|r| self.free_of(r, period)?.checked_sub(r.index))
            .any(|life| life > period && life < 2 * period);
        match start.checked_sub(period) {
            Some(earlier) if outlives => (earlier, 2 * period),
            _ => (start, period),
        }
    }

    /// The allocation problem of the stretch `[start, start + length)` of a program repeating
    /// every `period` events: the mallocs made in it, as buffers with lifetimes relative to
    /// `start` (the buffer's id is its malloc's relative position). One freed after the
    /// stretch's end but less than `length` after its malloc crosses the boundary (an input
    /// loaded for the next iteration, a block a loop hands to its next repeat): it holds its
    /// range from its malloc to the end and from the start to its free (the same block of the
    /// next stretch), absent in between. Mallocs freed later, or never, are not planned.
    pub fn iteration(&self, start: u64, length: u64, period: u64) -> Option<Instance> {
        let end = start.checked_add(length)?;
        let mut absences = Vec::new();
        let buffers = self
            .records
            .iter()
            .filter(|r| r.index >= start && r.index < end)
            .filter_map(|r| {
                let freed = self.free_of(r, period)?;
                let position = r.index - start;
                let (lower, upper) = if freed < end {
                    (position, freed - start)
                } else if freed - r.index < length {
                    let wrapped = freed - end;
                    if wrapped > 0 {
                        absences.push(Absence {
                            id: position,
                            from: wrapped,
                            to: position,
                        });
                        (0, length)
                    } else {
                        (position, length)
                    }
                } else {
                    return None;
                };
                Some(Buffer {
                    id: position,
                    lower,
                    upper,
                    size: r.size,
                })
            })
            .collect();
        Instance::with_absences(buffers, absences).ok()
    }
}

/// A planned iteration: the offset of each planned malloc, by relative position.
#[derive(Clone, Debug)]
pub struct PoolPlan {
    /// Event index of an iteration start; iterations are `[start + j·length, …)`.
    pub start: u64,
    pub length: u64,
    /// Relative position → (size, offset in the pool).
    pub slots: FxHashMap<u64, (u64, u64)>,
    pub footprint: u64,
    /// Peak live bytes of the planned buffers (the lower bound the footprint is compared with).
    pub peak_live: u64,
}

/// A pool in service (or retired, kept until its last block is freed).
pub struct Pool {
    pub base: u64,
    pub plan: PoolPlan,
    /// Live pool blocks: offset → (end offset, allocation id).
    live: BTreeMap<u64, (u64, AllocId)>,
    pub serving: bool,
}

impl Pool {
    pub fn new(base: u64, plan: PoolPlan) -> Pool {
        Pool {
            base,
            plan,
            live: BTreeMap::new(),
            serving: true,
        }
    }

    pub fn contains(&self, addr: u64) -> bool {
        addr >= self.base && addr - self.base < self.plan.footprint
    }

    /// The address for a malloc of `size` at event `index`, if the plan has a free slot for it.
    pub fn serve(&mut self, index: u64, size: u64, id: AllocId) -> Option<u64> {
        if !self.serving || index < self.plan.start {
            return None;
        }
        let position = (index - self.plan.start) % self.plan.length;
        let &(planned, offset) = self.plan.slots.get(&position)?;
        if planned != size || self.overlaps_live(offset, offset + size) {
            return None;
        }
        self.live.insert(offset, (offset + size, id));
        Some(self.base + offset)
    }

    /// Pool mode between two plans: the first range of `size` bytes (at a multiple of 512, as
    /// planned offsets are) that no live block holds, so the memory of a plan the program left
    /// serves it until the next plan, instead of the device holding the pool and new blocks.
    pub fn serve_first_fit(&mut self, size: u64, id: AllocId) -> Option<u64> {
        const ALIGN: u64 = 512;
        let mut cursor = 0u64;
        for (&offset, &(end, _)) in &self.live {
            if offset >= cursor.saturating_add(size) {
                break;
            }
            cursor = cursor.max(end.div_ceil(ALIGN) * ALIGN);
        }
        if cursor.checked_add(size)? > self.plan.footprint {
            return None;
        }
        self.live.insert(cursor, (cursor + size, id));
        Some(self.base + cursor)
    }

    /// The live blocks overlapping offsets `[start, end)`: (offset, end, id).
    pub fn overlapping(&self, start: u64, end: u64) -> Vec<(u64, u64, AllocId)> {
        let before = self
            .live
            .range(..start)
            .next_back()
            .filter(|(_, (e, _))| *e > start);
        before
            .into_iter()
            .chain(self.live.range(start..end))
            .map(|(&offset, &(end, id))| (offset, end, id))
            .collect()
    }

    /// The offsets `[start, end)` of live block `id`.
    pub fn offset_of(&self, id: AllocId) -> Option<(u64, u64)> {
        self.live
            .iter()
            .find(|(_, (_, owner))| *owner == id)
            .map(|(&offset, &(end, _))| (offset, end))
    }

    /// Takes the block at `offset` out of the live blocks (its bytes went to the host, or it
    /// was moved aside): its range may be served to others.
    pub fn take_out(&mut self, offset: u64) {
        self.live.remove(&offset);
    }

    /// Puts block `id` back at `[offset, end)`; false if a live block holds part of the range.
    pub fn put_back(&mut self, offset: u64, end: u64, id: AllocId) -> bool {
        if self.overlaps_live(offset, end) {
            return false;
        }
        self.live.insert(offset, (end, id));
        true
    }

    fn overlaps_live(&self, start: u64, end: u64) -> bool {
        // The block starting at or before `start`, and any block starting inside the range.
        let before = self.live.range(..=start).next_back();
        let inside = self.live.range(start..end).next();
        before.is_some_and(|(_, &(e, _))| e > start) || inside.is_some()
    }

    /// Releases the block at `addr`; None if no live block starts there.
    pub fn release(&mut self, addr: u64) -> Option<(u64, u64)> {
        let offset = addr.checked_sub(self.base)?;
        let (end, _) = self.live.remove(&offset)?;
        Some((offset, end))
    }

    /// Start address of the live block containing `addr` (interior pointers).
    pub fn block_start(&self, addr: u64) -> Option<u64> {
        let offset = addr.checked_sub(self.base)?;
        let (&start, &(end, _)) = self.live.range(..=offset).next_back()?;
        (offset < end).then_some(self.base + start)
    }

    pub fn is_idle(&self) -> bool {
        self.live.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(slots: &[(u64, u64, u64)], length: u64, footprint: u64) -> PoolPlan {
        PoolPlan {
            start: 100,
            length,
            slots: slots
                .iter()
                .map(|&(pos, size, off)| (pos, (size, off)))
                .collect(),
            footprint,
            peak_live: footprint,
        }
    }

    /// (lower, upper, size) of each buffer.
    fn spans(instance: &Instance) -> Vec<(u64, u64, u64)> {
        instance
            .buffers()
            .iter()
            .map(|b| (b.lower, b.upper, b.size))
            .collect()
    }

    #[test]
    fn history_turns_one_iteration_into_relative_buffers() {
        let mut h = History::default();
        h.malloc(1, 5, 100); // before the iteration
        h.malloc(2, 10, 64);
        h.malloc(3, 12, 32);
        h.free(2, 15);
        h.malloc(4, 16, 16); // outlives the iteration
        h.free(3, 18);
        h.free(1, 19);
        let buffers = spans(&h.iteration(10, 10, 10).unwrap());
        assert_eq!(buffers, vec![(0, 5, 64), (2, 8, 32)]);
        // Mallocs at 5, 10, 12, 16, frees at 15, 18, 19.
        assert!(h.balanced(12, 7), "mallocs 12 and 16, frees 15 and 18");
        assert!(
            !h.balanced(10, 6),
            "mallocs 10 and 12, frees 15: keeps a block"
        );
        assert!(!h.balanced(16, 4), "malloc 16, frees 18 and 19: frees more");
        assert!(!h.balanced(6, 4), "no malloc at all");
    }

    #[test]
    fn a_block_crossing_the_boundary_holds_its_range_to_the_end_and_from_the_start() {
        let mut h = History::default();
        h.malloc(1, 10, 64);
        h.malloc(2, 17, 32); // freed in the next iteration, 5 events later: crosses
        h.free(1, 14);
        h.malloc(3, 18, 16); // lives longer than an iteration: not planned
        h.free(2, 22);
        h.free(3, 40);
        let instance = h.iteration(10, 10, 10).unwrap();
        assert_eq!(spans(&instance), vec![(0, 4, 64), (0, 10, 32)]);
        assert_eq!(
            instance.absences(1),
            [(2, 7)],
            "away from its free to its malloc"
        );
    }

    #[test]
    fn a_live_block_is_planned_as_long_as_its_copy_of_one_period_earlier_lived() {
        let mut h = History::default();
        h.malloc(1, 7, 32); // period 10: position 7, freed 5 events later
        h.free(1, 12);
        h.malloc(2, 17, 32); // its copy, still live when the plan is made
        assert_eq!(spans(&h.iteration(10, 10, 10).unwrap()), vec![(0, 10, 32)]);
        h.malloc(3, 18, 64); // no copy one period earlier: not planned
        assert_eq!(h.iteration(10, 10, 10).unwrap().len(), 1);
    }

    #[test]
    fn a_block_outliving_its_next_copy_makes_the_window_two_periods() {
        let mut h = History::default();
        // Period 10: the block at position 8 is freed 13 events later, after its next copy.
        for (id, at) in [(1, 8), (2, 18), (3, 28)] {
            h.malloc(id, at, 32);
        }
        h.free(1, 21);
        h.free(2, 31);
        assert_eq!(h.window(30, 10), (10, 20));
        // In the window [10, 30): the copy at 18 is freed at 31 (known), the one at 28 at 41
        // (as its copy lived): both cross the end, and overlap (at 18–20 and 0–1): two ranges.
        let instance = h.iteration(10, 20, 10).unwrap();
        assert_eq!(spans(&instance), vec![(0, 20, 32), (0, 20, 32)]);
        assert_eq!(instance.absences(0), [(1, 8)]);
        assert_eq!(instance.absences(1), [(11, 18)]);
        // Freed before its next copy's malloc: one period is enough.
        let mut h = History::default();
        h.malloc(1, 8, 32);
        h.free(1, 17);
        h.malloc(2, 18, 32);
        assert_eq!(h.window(20, 10), (10, 10));
    }

    #[test]
    fn a_left_pool_serves_first_fit_around_its_live_blocks() {
        let mut pool = Pool::new(0x1000, plan(&[(0, 64, 0)], 10, 2048));
        pool.serving = false;
        assert_eq!(pool.serve_first_fit(600, 1), Some(0x1000));
        assert_eq!(
            pool.serve_first_fit(100, 2),
            Some(0x1000 + 1024),
            "after 600, aligned"
        );
        assert_eq!(pool.release(0x1000), Some((0, 600)));
        assert_eq!(pool.serve_first_fit(512, 3), Some(0x1000), "the freed gap");
        assert_eq!(
            pool.serve_first_fit(1024, 4),
            None,
            "no gap of 1024 left in 2048"
        );
        assert_eq!(
            pool.serve_first_fit(512, 5),
            Some(0x1000 + 512),
            "between 0..512 and 1024.."
        );
    }

    #[test]
    fn serves_planned_slots_of_every_iteration_and_refuses_overlaps() {
        let mut pool = Pool::new(0x1000, plan(&[(0, 64, 0), (3, 32, 64)], 10, 96));
        assert_eq!(
            pool.serve(99, 64, 1),
            None,
            "before the plan's first iteration"
        );
        assert_eq!(pool.serve(100, 64, 1), Some(0x1000));
        assert_eq!(pool.serve(103, 32, 2), Some(0x1040));
        assert_eq!(pool.serve(104, 32, 3), None, "unplanned position");
        assert_eq!(pool.serve(113, 16, 3), None, "planned position, other size");
        assert_eq!(pool.serve(110, 64, 4), None, "slot still taken by id 1");
        assert_eq!(pool.block_start(0x1010), Some(0x1000));
        assert_eq!(pool.release(0x1000), Some((0, 64)));
        assert_eq!(pool.release(0x1000), None, "double free");
        assert_eq!(
            pool.serve(110, 64, 4),
            Some(0x1000),
            "next iteration reuses the slot"
        );
        pool.serving = false;
        assert_eq!(pool.serve(113, 32, 5), None, "retired pools serve nothing");
        assert!(pool.contains(0x105f) && !pool.contains(0x1060));
    }
}

/// A freed pool range whose last users may still be running: `event` completes on `stream` when
/// they are done.
#[derive(Clone, Copy, Debug)]
struct Fence {
    start: u64,
    end: u64,
    stream: u64,
    event: usize,
}

/// Counters of pool mode, for the statistics.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct PoolStats {
    /// Plans made (more than one: the pattern changed and was planned again).
    pub plans: u64,
    /// Bytes of the pool in service (0 before the first plan).
    pub pool_bytes: u64,
    /// Peak live bytes of the planned iteration (what the footprint is compared with).
    pub planned_peak_live_bytes: u64,
    /// Event index from which the pool serves (the first planned iteration).
    pub first_planned_event: Option<u64>,
    /// Mallocs served from a pool.
    pub served: u64,
    /// Of those, mallocs served first fit from the pool of a plan the program left, while no
    /// plan served.
    pub served_between_plans: u64,
    /// Device mallocs given to the real allocator before the first planned iteration.
    pub fallback_before_plan: u64,
    /// Device mallocs given to the real allocator from the first planned iteration on.
    pub fallback_after_plan: u64,
    /// Of those, the ones made while no plan served (after the program left a plan, before the
    /// next one was installed): the rest are mallocs a plan in service did not have.
    pub fallback_between_plans: u64,
    /// `cudaStreamWaitEvent`s inserted so a range is reused only after its last users finished.
    pub stream_waits: u64,
    /// Planning time of the last plan, in milliseconds.
    pub plan_ms: f64,
    /// Pool bytes given back to the device when it was out of memory for an allocation itermem
    /// passed through (which was then retried).
    pub released_out_of_memory_bytes: u64,
    /// Plans dropped then, their pool idle.
    pub plans_dropped_out_of_memory: u64,
}

/// The fences a pool block's users must wait for, and the streams that already did.
#[derive(Default)]
pub(super) struct Waits {
    pub fences: smallvec::SmallVec<[(u64, usize); 4]>,
    pub waited: smallvec::SmallVec<[u64; 2]>,
    /// An event of itermem's that only these waits use (a swap-in's), reused once it is done.
    pub owned: Option<usize>,
}

/// A plan of swap mode, made by its planning thread: the pool, the swaps, the planning time.
pub(super) type SwapReady = (PoolPlan, std::sync::Arc<Schedule>, f64);

/// Everything pool mode (and swap mode) keeps, behind one lock (taken only in those modes).
#[derive(Default)]
pub struct PoolState {
    pub history: History,
    /// The pool in service, and retired pools that still have live blocks.
    pub(super) pools: Vec<Pool>,
    /// A plan made by the planning thread, waiting to be taken.
    ready: std::sync::Arc<parking_lot::Mutex<Option<(PoolPlan, f64)>>>,
    /// Swap mode's plans, from its own planning thread.
    pub(super) swap_ready: std::sync::Arc<parking_lot::Mutex<Option<SwapReady>>>,
    /// A taken plan whose first iteration has not started yet: its pool is allocated at that
    /// boundary, where the live memory is least, not while an iteration's blocks still live.
    pub(super) next: Option<(PoolPlan, Option<std::sync::Arc<Schedule>>)>,
    fences: Vec<Fence>,
    /// Streams that used each live pool block (to fence it when freed).
    pub(super) used_on: FxHashMap<AllocId, smallvec::SmallVec<[u64; 2]>>,
    /// Fences a pool block's users must wait for (stream fenced on, event), and the streams
    /// that have already waited.
    pub(super) waits: FxHashMap<AllocId, Waits>,
    /// Whether `used_on` or `waits` may hold a block: set under the lock whenever either gains
    /// one, cleared (under the lock too) by `before_use` when both are empty. Read without the
    /// lock (`DeviceState::pool_users`), so that a use of blocks none of which is the pool's
    /// takes no lock while the pool has no block in use: a program's thread learns of a pool
    /// block only from the malloc that set it (and whatever ordered its use after that).
    pub(super) users: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Serves since the fences were last pruned of completed ones.
    serves_since_prune: u32,
    pub(super) spare_events: Vec<usize>,
    /// Events of finished waits, reused once they have completed.
    retired_events: Vec<usize>,
    /// Swap mode's executor (None in pool mode).
    pub(super) executor: Option<Executor>,
    pub stats: PoolStats,
}

impl PoolState {
    /// Swap mode's state: the pool with its executor.
    pub fn for_swaps(config: SwapConfig) -> PoolState {
        PoolState {
            executor: Some(Executor::new(config)),
            ..PoolState::default()
        }
    }

    /// Whether memory of itermem's here is no allocation any more (a device reset took it):
    /// a pool's, or swap mode's page-locked host slots.
    pub fn memory_lost(&self) -> bool {
        self.pools.iter().any(|pool| allocation_gone(pool.base))
            || self.executor.as_ref().is_some_and(Executor::memory_lost)
    }

    /// Plans the period of `period` events that ended at `boundary` ([`History::window`]) on
    /// a background thread.
    pub fn plan_iteration(&mut self, boundary: u64, period: u64) {
        self.retire(boundary);
        let (start, length) = self.history.window(boundary, period);
        let Some(instance) = self.history.iteration(start, length, period) else {
            return;
        };
        if instance.is_empty() {
            return;
        }
        let ready = self.ready.clone();
        let spawned = std::thread::Builder::new()
            .name("itermem-planner".into())
            .spawn(move || {
                let options = crate::plan::PlanOptions {
                    budget: std::time::Duration::from_millis(250),
                    ..Default::default()
                };
                // A failure here must neither end the host (this thread is ours) nor go
                // unnoticed: the pool just never serves, and says so.
                let planned = std::panic::catch_unwind(|| {
                    crate::plan::plan(&instance, crate::plan::Policy::Search, &options)
                });
                let Ok(Ok(report)) = planned else {
                    super::report(format_args!(
                        "internal error while planning the pool; pool mode records only"
                    ));
                    return;
                };
                let slots = instance
                    .buffers()
                    .iter()
                    .zip(&report.plan.offsets)
                    .map(|(b, &offset)| (b.id, (b.size, offset)))
                    .collect();
                let plan = PoolPlan {
                    start,
                    length,
                    slots,
                    footprint: report.footprint,
                    peak_live: report.lower_bound,
                };
                *ready.lock() = Some((plan, report.elapsed.as_secs_f64() * 1e3));
            });
        if spawned.is_err() {
            super::report(format_args!(
                "cannot start the planning thread; pool mode records only"
            ));
        }
    }

    /// Stops serving (the program left its period at event `index`); blocks already served
    /// stay valid.
    pub fn retire(&mut self, index: u64) {
        self.next = None;
        for pool in &mut self.pools {
            pool.serving = false;
        }
        self.abandon(index);
    }

    /// Takes a ready plan, to serve from the first iteration boundary at or after `index`, and
    /// allocates its pool (one real allocation of the footprint) once that boundary is reached.
    pub(super) fn install(&mut self, index: u64) {
        let pool_plan = self.ready.lock().take().map(|(plan, ms)| (plan, None, ms));
        let swap_plan = || self.swap_ready.lock().take();
        let taken = pool_plan.or_else(|| swap_plan().map(|(plan, s, ms)| (plan, Some(s), ms)));
        if let Some((mut plan, schedule, plan_ms)) = taken {
            let behind = index.saturating_sub(plan.start);
            plan.start += behind.div_ceil(plan.length) * plan.length;
            // A second plan of swap mode replaces its period's first.
            if !schedule.as_ref().is_some_and(|s| s.is_second()) {
                self.stats.plans += 1;
            }
            self.stats.plan_ms = plan_ms;
            self.next = Some((plan, schedule));
        }
        if self
            .next
            .as_ref()
            .is_none_or(|(plan, _)| index < plan.start)
        {
            return;
        }
        let Some((plan, schedule)) = self.next.take() else {
            return;
        };
        // A pool left with no block live (its last one freed before the program left its
        // plan) must not stand beside the new one.
        self.release_idle_retired_pools();
        if let Some(schedule) = schedule.as_ref().filter(|s| s.is_second()) {
            let schedule = schedule.clone();
            self.switch_plan(plan, schedule, index);
            return;
        }
        if !self.fits_limit(plan.footprint, schedule.as_deref()) {
            match &schedule {
                Some(schedule) => super::report(format_args!(
                    "ITERMEM_LIMIT of {} bytes cannot be kept with the device alone: {}. No \
                     plan is used: mallocs past the limit run from mapped host memory, which a \
                     GPU reads over its host link",
                    self.executor
                        .as_ref()
                        .and_then(|e| e.stats.limit_bytes)
                        .unwrap_or(0),
                    schedule.unfit
                )),
                None => super::report(format_args!(
                    "a pool of {} bytes would exceed ITERMEM_LIMIT; the plan is not used",
                    plan.footprint
                )),
            }
            return;
        }
        let takes_blocks = schedule.as_ref().filter(|s| !s.takes_no_blocks());
        let (base, staged) = match takes_blocks {
            Some(schedule) => {
                let schedule = schedule.clone();
                match self.take_residents(plan.footprint, &schedule) {
                    Some((base, staged)) => (base, Some(staged)),
                    None => return,
                }
            }
            None => match cuda::malloc(plan.footprint.max(1)) {
                Some(base) => (base, None),
                None => {
                    super::report(format_args!(
                        "cannot allocate a pool of {} bytes; pool mode records only",
                        plan.footprint
                    ));
                    return;
                }
            },
        };
        self.stats.pool_bytes = plan.footprint;
        self.stats.planned_peak_live_bytes = plan.peak_live;
        self.stats.first_planned_event.get_or_insert(plan.start);
        self.pools.push(Pool::new(base, plan));
        if let Some(schedule) = schedule {
            self.start_schedule(schedule, index);
        }
        if let Some(staged) = staged {
            self.place_residents(staged);
        }
    }

    /// Serves the device malloc of `size` that will be event `index`, or None (fallback).
    pub fn malloc(&mut self, index: u64, size: u64, id: AllocId) -> Option<u64> {
        self.install(index);
        self.roll(index);
        let serving = self.pools.iter_mut().rev().find(|p| p.serving);
        let position = serving.as_ref().and_then(|pool| pool.position(index));
        let planned = serving.and_then(|pool| pool.serve(index, size, id));
        // A pointer names one allocation: never hand out the address of a tensor that is away.
        let planned = planned.filter(|&addr| !self.is_away_start(addr) || !self.undo_serve(addr));
        let served = match planned {
            // No position: no plan serves.
            None if position.is_none() => self.serve_between_plans(size, id),
            planned => planned,
        };
        let Some(addr) = served else {
            match self.stats.first_planned_event {
                Some(first) if index >= first => {
                    log::debug!("malloc of {size} bytes at position {position:?} not served");
                    self.stats.fallback_after_plan += 1;
                    if position.is_none() {
                        self.stats.fallback_between_plans += 1;
                    }
                }
                _ => self.stats.fallback_before_plan += 1,
            }
            return self.overflow(size, id);
        };
        if let Some(position) = position.filter(|_| planned.is_some()) {
            self.served_slot(position, id);
        }
        self.stats.served += 1;
        self.serves_since_prune += 1;
        if self.serves_since_prune >= 64 {
            self.serves_since_prune = 0;
            self.prune_fences();
        }
        let fences = self.pending_fences(addr, addr + size);
        if !fences.is_empty() {
            self.add_waits(
                id,
                Waits {
                    fences,
                    ..Waits::default()
                },
            );
        }
        Some(addr)
    }

    /// Pool mode, while no plan serves (the program left the last one): the newest retired
    /// pool with room, first fit ([`Pool::serve_first_fit`]). Not in swap mode, where a retired
    /// pool's free ranges may belong to tensors that are away.
    fn serve_between_plans(&mut self, size: u64, id: AllocId) -> Option<u64> {
        if self.executor.is_some() {
            return None;
        }
        let addr = self
            .pools
            .iter_mut()
            .rev()
            .find_map(|pool| pool.serve_first_fit(size, id))?;
        self.stats.served_between_plans += 1;
        Some(addr)
    }

    /// Whether `addr` lies in a pool (its blocks never reach the real `cudaFree`).
    pub fn owns(&self, addr: u64) -> bool {
        self.pools.iter().any(|p| p.contains(addr)) || self.host_backed(addr) || self.in_block(addr)
    }

    /// Frees the pool block at `addr`: fences its range on every stream that used it. False if
    /// no live pool block starts there (a double or interior free).
    pub fn free(&mut self, addr: u64, id: AllocId) -> bool {
        if let Some(freed) = self.free_swapped(addr, id) {
            return freed;
        }
        let Some(pool) = self.pools.iter_mut().find(|p| p.contains(addr)) else {
            return false;
        };
        let Some((start, end)) = pool.release(addr) else {
            log::debug!("free of {addr:#x} (allocation {id}): no live pool block starts there");
            return false;
        };
        let range = (pool.base + start, pool.base + end);
        self.retire_block(id, Some(range));
        self.release_idle_retired_pools();
        true
    }

    /// The end of block `id`'s tenancy: its waits are retired and, where it held `range` of a
    /// pool, the range is fenced on every stream that used the block, for its next tenant.
    /// Returns those streams.
    pub(super) fn retire_block(
        &mut self,
        id: AllocId,
        range: Option<(u64, u64)>,
    ) -> smallvec::SmallVec<[u64; 2]> {
        self.drop_waits(id);
        let users = self.used_on.remove(&id).unwrap_or_default();
        if let Some((start, end)) = range {
            for &stream in &users {
                self.fence(start, end, stream);
            }
        }
        users
    }

    /// Forgets what block `id`'s users must wait for; its own event (a swap-in's) is reused
    /// once done, not leaked (a swap per iteration would otherwise create an event each time).
    pub(super) fn drop_waits(&mut self, id: AllocId) {
        if let Some(owned) = self.waits.remove(&id).and_then(|w| w.owned) {
            self.retired_events.push(owned);
        }
    }

    /// Fences `[start, end)` with an event recorded now on `stream`: its next tenant waits.
    pub(super) fn fence(&mut self, start: u64, end: u64, stream: u64) {
        if let Some(event) = self.record_event(stream) {
            self.fences.push(Fence {
                start,
                end,
                stream,
                event,
            });
        }
    }

    /// An event (a spare one when there is one) recorded now on `stream`; None if the driver
    /// cannot create or record one.
    pub(super) fn record_event(&mut self, stream: u64) -> Option<usize> {
        let event = self.spare_events.pop().or_else(cuda::event)?;
        if cuda::record(event, stream) {
            Some(event)
        } else {
            self.spare_events.push(event);
            None
        }
    }

    /// The fences on `[start, end)` whose users have not finished: (stream, event), one per
    /// stream. A stream's events complete in the order they were recorded, so its last fence on
    /// the range implies the earlier ones: waiting for each would add a wait to the waiting
    /// stream per earlier tenant (eleven before one swap-in of `mlp_train --adam`), each an
    /// operation on the critical path of the copy.
    pub(super) fn pending_fences(
        &self,
        start: u64,
        end: u64,
    ) -> smallvec::SmallVec<[(u64, usize); 4]> {
        let mut seen: smallvec::SmallVec<[u64; 4]> = smallvec::SmallVec::new();
        let mut pending = smallvec::SmallVec::new();
        for f in self.fences.iter().rev() {
            if f.start < end && start < f.end && !seen.contains(&f.stream) {
                seen.push(f.stream);
                if !cuda::completed(f.event) {
                    pending.push((f.stream, f.event));
                }
            }
        }
        pending
    }

    /// Drops the fences whose users have finished; their events are reused.
    fn prune_fences(&mut self) {
        self.release_finished_host_frees();
        let (done, pending): (Vec<Fence>, Vec<Fence>) = self
            .fences
            .drain(..)
            .partition(|f| cuda::completed(f.event));
        self.spare_events.extend(done.iter().map(|f| f.event));
        self.fences = pending;
        let (done, pending): (Vec<usize>, Vec<usize>) = self
            .retired_events
            .drain(..)
            .partition(|&event| cuda::completed(event));
        self.spare_events.extend(done);
        self.retired_events = pending;
    }

    /// The device answered out of memory to an allocation itermem passed through: gives it
    /// the pool memory nothing uses now, as PyTorch's allocator empties its cache before it
    /// retries. That is every retired pool without live blocks and, in pool mode, the serving
    /// pool if no block lives in it: its plan is then dropped (reported once) and pool mode
    /// records until the program's pattern changes and is planned again. Returns the bytes
    /// given back.
    pub fn release_unused(&mut self) -> u64 {
        let idle_serving = self
            .pools
            .iter_mut()
            .find(|p| p.serving && p.is_idle())
            .filter(|_| self.executor.is_none());
        if let Some(pool) = idle_serving {
            pool.serving = false;
            self.next = None;
            if self.stats.plans_dropped_out_of_memory == 0 {
                super::report(format_args!(
                    "the device is out of memory for an allocation outside the plan; the idle \
                     pool of {} bytes is given back and pool mode records until the pattern \
                     changes",
                    pool.plan.footprint
                ));
            }
            self.stats.plans_dropped_out_of_memory += 1;
        }
        let held = |pools: &[Pool]| pools.iter().map(|p| p.plan.footprint).sum::<u64>();
        let before = held(&self.pools);
        self.release_idle_retired_pools();
        let released = before - held(&self.pools);
        self.stats.released_out_of_memory_bytes += released;
        released
    }

    /// No pool serves any more (after an internal error): each is released once no block
    /// lives in it.
    pub(super) fn stop_serving(&mut self) {
        self.next = None;
        for pool in &mut self.pools {
            pool.serving = false;
        }
    }

    /// Returns retired pools without live blocks or tensors away to the runtime (whose
    /// `cudaFree` waits for the device, so fenced work on them is finished first).
    pub(super) fn release_idle_retired_pools(&mut self) {
        let unused: Vec<u64> = self
            .pools
            .iter()
            .filter(|pool| !pool.serving && pool.is_idle() && !self.has_away_in(pool.base))
            .map(|pool| pool.base)
            .collect();
        for &base in &unused {
            self.free_pool_memory(base);
        }
        self.pools.retain(|pool| !unused.contains(&pool.base));
    }

    /// Before work on `stream` that uses pool blocks `ids`: waits for the fences their ranges
    /// carry from earlier tenants on other streams, and remembers the stream.
    pub fn before_use(&mut self, ids: impl IntoIterator<Item = AllocId>, stream: u64) {
        let mut events: smallvec::SmallVec<[usize; 4]> = smallvec::SmallVec::new();
        for id in ids {
            if let Some(streams) = self.used_on.get_mut(&id)
                && !streams.contains(&stream)
            {
                streams.push(stream);
            }
            let Some(waits) = self.waits.get_mut(&id) else {
                continue;
            };
            if waits.waited.contains(&stream) {
                continue;
            }
            waits.waited.push(stream);
            for &(fenced_on, event) in &waits.fences {
                if fenced_on != stream && !events.contains(&event) {
                    events.push(event);
                }
            }
        }
        if !events.is_empty() {
            // Every wait for another stream's work on the blocks (a swap-in, a lender's
            // swap-out, an earlier tenant) is swapping's stall: timed, as the simulator counts
            // waits for tensors and for memory alike; once for the call, as each timing is
            // two more operations on the program's stream.
            let stall = self.stall_start(stream);
            for event in events {
                if cuda::wait(stream, event) {
                    self.stats.stream_waits += 1;
                }
            }
            if let Some(start) = stall {
                self.stall_end(start, stream);
            }
        }
        if self.used_on.is_empty() && self.waits.is_empty() {
            self.users
                .store(false, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Records that pool block `id` now exists (its users are tracked from here on, none yet).
    pub fn track(&mut self, id: AllocId) {
        self.note_users();
        self.used_on.insert(id, smallvec::SmallVec::new());
    }

    /// The fences pool block `id`'s next users wait for (replacing any it had).
    pub(super) fn add_waits(&mut self, id: AllocId, waits: Waits) {
        self.note_users();
        self.waits.insert(id, waits);
    }

    /// A block enters `used_on` or `waits` (see `users`): only through [`PoolState::track`] and
    /// [`PoolState::add_waits`], and for a fresh state that replaces one with users.
    pub(super) fn note_users(&self) {
        self.users.store(true, std::sync::atomic::Ordering::Release);
    }

    /// The start of the live pool block containing `addr`.
    pub fn block_start(&self, addr: u64) -> Option<u64> {
        let pool = self.pools.iter().find(|p| p.contains(addr))?;
        pool.block_start(addr).or_else(|| self.away_start(addr))
    }
}
