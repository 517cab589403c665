//! The executor: what swap mode adds to the pool, and the per-call path that carries out a
//! plan's swaps (the life cycle: `mod.rs`).

use super::super::backing::{Backing, Block, ChunkedPool};
use super::super::driver as cuda;
use super::super::pool::{Pool, PoolPlan, PoolState, Waits};
use super::super::real::allocation_gone;
use super::planning::{
    Blocks, Capture, GRANULE, NOT_AN_OP, OwnBlock, Planned, Resident, Schedule, granules,
    make_schedule,
};
use super::second_plan::{SecondReport, TimedCopy, second_plan};
use super::{IterationStats, PlanStats, SwapConfig, SwapStats, median};
use crate::event::{AllocId, StreamHandle};
use crate::swap::CopyModel;
use rustc_hash::FxHashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

/// Per-iteration statistics kept at most.
const ITERATIONS_KEPT: usize = 1000;

/// Where the op times of a first and of a second plan come from (`PlanStats::op_times`).
const FIRST: &str = "timing iteration";
const SECOND: &str = "measured under the first plan";

/// Iterations under a first plan timed op by op for the second plan (each op's median counts:
/// one iteration's times vary with what else runs on the machine).
const SECOND_TIMED_ITERATIONS: u64 = 3;

/// A tensor whose bytes are on the host.
#[derive(Clone, Copy, Debug)]
struct Away {
    pool: u64,
    offset: u64,
    end: u64,
    host: u64,
    /// A resident block's own address (its range of the pool is mapped there too); None for a
    /// tensor the pool served, whose address is `pool + offset`.
    alias: Option<u64>,
}

/// Blocks' content between [`PoolState::take_residents`] and [`PoolState::place_residents`]:
/// page-locked staging memory, and each block with its copy there.
pub struct Staged {
    staging: u64,
    places: Vec<(Resident, u64)>,
}

/// A block whose memory was released and could not be given again: its content cannot be kept
/// exact, so the program stops, saying so (never computes on with wrong values).
fn lost_block(va: u64, bytes: u64) -> ! {
    super::super::report(format_args!(
        "fatal: the device refused {bytes} bytes for the block at {va:#x} just after releasing \
         them; its content cannot be restored, and the program stops here"
    ));
    std::process::exit(1)
}

/// A call that runs with a tensor brought back over its borrowers, who wait on the host.
#[derive(Debug)]
pub struct Exchange {
    id: AllocId,
    away: Away,
    /// Borrowers moved aside: (offset, end, id, temporary host copy).
    moved: Vec<(u64, u64, AllocId, u64)>,
}

/// What a call prepared before it runs, finished after it ([`PoolState::finish`]).
#[derive(Debug, Default)]
pub struct Prepared {
    timing_start: Option<usize>,
    exchanges: Vec<Exchange>,
    /// The op, when the plan queues swap-outs after it.
    swap_outs_after: Option<usize>,
}

impl Prepared {
    /// Nothing to finish (the common case: no timing, no exchange, no swap-out).
    pub fn is_empty(&self) -> bool {
        self.timing_start.is_none() && self.exchanges.is_empty() && self.swap_outs_after.is_none()
    }
}

/// A timing iteration in progress: events `[start, end)`, and the (start, end) timing events
/// of each op, by event index.
struct Timing {
    start: u64,
    end: u64,
    ops: Vec<(u64, usize, usize)>,
    host_start: Option<Instant>,
    /// Device bytes of the program's own blocks at the iteration's start (a boundary: the
    /// blocks that stay outside the pool).
    resident_bytes: u64,
    /// Under a first plan, its copies.
    copies: Vec<TimedCopy>,
}

/// Where a planned swap copies its tensor out ([`PoolState::out_site`]).
struct OutSite {
    id: AllocId,
    out_stream: u64,
    host: u64,
    verify: bool,
    pool_index: usize,
    offset: u64,
    end: u64,
}

/// Everything swap mode adds to the pool.
pub struct Executor {
    config: SwapConfig,
    /// The limit in bytes, once resolved ([`Executor::limit`]).
    limit: Option<Option<u64>>,
    /// The copy model, once resolved ([`Executor::copy_model`]).
    copy: Option<(CopyModel, &'static str)>,
    schedule: Option<Arc<Schedule>>,
    /// Whether planned swaps are issued (false once the plan is abandoned).
    following: bool,
    out_stream: u64,
    in_stream: u64,
    host_base: u64,
    /// The allocation in each swapped slot this iteration.
    slot_ids: FxHashMap<u64, AllocId>,
    /// Planned swap-ins not issued yet (their range was still held).
    coming_back: Vec<AllocId>,
    /// Tensors of this iteration whose early copy-out is queued, still on the device for their
    /// reads before the gap, and whether a call wrote them since the copy began (it is stale).
    early: FxHashMap<AllocId, bool>,
    away: FxHashMap<AllocId, Away>,
    /// Blocks served from mapped host memory: address → (host address, bytes).
    host_backed: std::collections::BTreeMap<u64, (u64, u64)>,
    /// Host memory the program's blocks live in: mapped host memory, and the host memory of
    /// blocks at addresses of their own (`blocks`) that came when the device was full.
    host_backed_bytes: u64,
    /// Freed blocks of mapped host memory not released yet: (host address, events recorded on
    /// every stream that used the block at its free). Released once all have completed.
    host_backed_freed: Vec<(u64, smallvec::SmallVec<[usize; 2]>)>,
    /// Real device allocations of the program: address → bytes (granules).
    real_blocks: FxHashMap<u64, u64>,
    real_bytes: u64,
    /// The virtual memory API, once looked for (None inside: the driver has none).
    backing: Option<Option<Backing>>,
    /// Blocks of the program's at addresses of their own (`backing.rs`): address → block.
    blocks: std::collections::BTreeMap<u64, (Block, AllocId)>,
    /// Device bytes of the blocks' own memory.
    own_block_bytes: u64,
    /// Pools made of granules (those that took residents): base → pool.
    chunked_pools: FxHashMap<u64, ChunkedPool>,
    timing: Option<Timing>,
    /// The iteration under a first plan whose ops are timed for the second plan.
    second_timing: Option<Timing>,
    /// The second planning thread's findings, once it has them; `second_pending` while it
    /// runs.
    second_report: Arc<parking_lot::Mutex<Option<SecondReport>>>,
    second_pending: bool,
    /// Whether the call being made is in `second_timing` and its swaps' copies are timed
    /// (unless `ITERMEM_BANDWIDTH` gives the copy model).
    copies_timed: bool,
    /// Stall measurements not yet read: (start, end) timing events.
    stalls: Vec<(usize, usize)>,
    spare_timing: Vec<usize>,
    iteration: IterationStats,
    /// Which iteration of the plan `iteration` counts (None before the first).
    iteration_number: Option<u64>,
    iteration_host_start: Option<Instant>,
    pub stats: SwapStats,
}

impl Executor {
    /// Whether the page-locked host slots are no allocation any more (a device reset).
    pub fn memory_lost(&self) -> bool {
        self.host_base != 0 && allocation_gone(self.host_base)
    }

    pub fn new(config: SwapConfig) -> Executor {
        Executor {
            config,
            limit: None,
            copy: None,
            schedule: None,
            following: false,
            out_stream: 0,
            in_stream: 0,
            host_base: 0,
            slot_ids: FxHashMap::default(),
            coming_back: Vec::new(),
            early: FxHashMap::default(),
            away: FxHashMap::default(),
            host_backed: Default::default(),
            host_backed_bytes: 0,
            host_backed_freed: Vec::new(),
            real_blocks: FxHashMap::default(),
            real_bytes: 0,
            backing: None,
            blocks: Default::default(),
            own_block_bytes: 0,
            chunked_pools: FxHashMap::default(),
            timing: None,
            second_timing: None,
            second_report: Default::default(),
            second_pending: false,
            copies_timed: false,
            stalls: Vec::new(),
            spare_timing: Vec::new(),
            iteration: IterationStats::default(),
            iteration_number: None,
            iteration_host_start: None,
            stats: SwapStats::default(),
        }
    }

    /// The limit in bytes, resolved against the device's memory the first time it is needed
    /// (None: no limit, or a share of a device whose memory the driver does not tell).
    fn limit(&mut self) -> Option<u64> {
        use crate::config::Limit;
        if let Some(resolved) = self.limit {
            return resolved;
        }
        let resolved = match self.config.limit {
            None => None,
            Some(Limit::Bytes(bytes)) => Some(bytes),
            Some(Limit::Fraction(f)) => {
                cuda::ensure_context();
                let (_, total) = super::super::real::device_identity();
                if total == 0 {
                    super::super::report(format_args!(
                        "the driver does not tell the device's memory: ITERMEM_LIMIT as a \
                         percentage is ignored"
                    ));
                }
                (total > 0).then_some((total as f64 * f) as u64)
            }
        };
        self.limit = Some(resolved);
        self.stats.limit_bytes = resolved;
        resolved
    }

    /// The copy model to plan with: `ITERMEM_BANDWIDTH`, else the link measured the first time
    /// it is needed (at the first malloc under a limit, while device memory is still free for
    /// the measurement's buffer: at most `room` bytes, what the limit leaves), else PCIe 3.
    fn copy_model(&mut self, room: u64) -> (CopyModel, &'static str) {
        if let Some(resolved) = self.copy {
            return resolved;
        }
        let (copy, source) = match self.config.copy {
            Some(copy) => (copy, "ITERMEM_BANDWIDTH"),
            None => match super::super::bandwidth::measure(room) {
                Some(measured) => (measured, "measured"),
                None => (CopyModel::default(), "pcie3 (not measured)"),
            },
        };
        self.stats.copy_model = source;
        self.stats.copy_out_gb_s = 1.0 / copy.out_ns_per_byte;
        self.stats.copy_in_gb_s = 1.0 / copy.in_ns_per_byte;
        self.copy = Some((copy, source));
        (copy, source)
    }

    /// The virtual memory API, looked for once.
    fn backing(&mut self) -> Option<Backing> {
        *self.backing.get_or_insert_with(|| {
            let backing = Backing::detect();
            if backing.is_none() {
                log::info!(
                    "the driver has no virtual memory API: blocks allocated before a plan stay \
                     where they are"
                );
            }
            backing
        })
    }

    /// Where the own memory of blocks is counted: host memory with the mapped host memory the
    /// program lives in, device memory against the limit.
    fn own_memory(&mut self, on_host: bool) -> &mut u64 {
        if on_host {
            &mut self.host_backed_bytes
        } else {
            &mut self.own_block_bytes
        }
    }

    /// The block at an address of its own that `addr` lies in.
    fn block_at(&self, addr: u64) -> Option<&Block> {
        let (&va, (block, _)) = self.blocks.range(..=addr).next_back()?;
        (addr < va + block.rounded).then_some(block)
    }

    /// The swap's tensor this iteration: the resident block, or what its slot served.
    fn swapped_id(&self, planned: &Planned) -> Option<AllocId> {
        planned
            .resident
            .map(|(id, _)| id)
            .or_else(|| self.slot_ids.get(&planned.position).copied())
    }

    fn note_mapped_after_plan(&mut self) {
        if self.stats.plans > 0 {
            let after = &mut self.stats.mapped_host_bytes_after_plan;
            *after = (*after).max(self.host_backed_bytes);
        }
    }

    fn timing_event(&mut self) -> Option<usize> {
        self.spare_timing.pop().or_else(cuda::timing_event)
    }

    /// The iteration being timed op by op that event `index` is in: the timing iteration, or
    /// the one under a first plan timed for the second plan.
    fn timed_at(&mut self, index: u64) -> Option<&mut Timing> {
        [&mut self.timing, &mut self.second_timing]
            .into_iter()
            .flatten()
            .find(|t| (t.start..t.end).contains(&index))
    }

    /// The timing events of `timing`, for reuse (it is given up).
    fn spare_timing_of(&mut self, timing: Timing) {
        let ops = timing
            .ops
            .into_iter()
            .flat_map(|(_, start, end)| [start, end]);
        let copies = (timing.copies.into_iter()).flat_map(|copy| [copy.start, copy.end]);
        self.spare_timing.extend(ops.chain(copies));
    }

    /// The statistics of the plan in use.
    fn plan_stats(&mut self) -> Option<&mut PlanStats> {
        self.stats.plans_made.last_mut()
    }

    /// Adds what became of a chosen second plan to why it was chosen.
    fn note_second(&mut self, outcome: &str) {
        let reason = &mut self.stats.second_plan;
        if !reason.is_empty() {
            reason.push_str("; ");
        }
        reason.push_str(outcome);
    }
}

impl PoolState {
    fn exec(&mut self) -> Option<&mut Executor> {
        self.executor.as_mut()
    }

    /// Swap mode: a real device allocation of the program (counted against the limit).
    pub fn real_malloc(&mut self, addr: u64, size: u64) {
        if let Some(exec) = self.exec() {
            let bytes = granules(size);
            exec.real_blocks.insert(addr, bytes);
            exec.real_bytes += bytes;
        }
    }

    /// Swap mode: a real device allocation was freed.
    pub fn real_free(&mut self, addr: u64) {
        if let Some(exec) = self.exec()
            && let Some(bytes) = exec.real_blocks.remove(&addr)
        {
            exec.real_bytes -= bytes;
        }
    }

    /// Device bytes in use: the program's real allocations and every pool.
    fn device_bytes(&self) -> u64 {
        let pools: u64 = self.pools.iter().map(|p| granules(p.plan.footprint)).sum();
        self.executor
            .as_ref()
            .map_or(0, |e| e.real_bytes + e.own_block_bytes)
            + pools
    }

    /// Whether a new pool of `footprint` bytes keeps the device under the limit (always
    /// outside swap mode), once the blocks it takes have given their own memory back.
    pub(in crate::interposer) fn fits_limit(
        &mut self,
        footprint: u64,
        taken: Option<&Schedule>,
    ) -> bool {
        let releasing: u64 = taken.map_or(0, |s| {
            (s.residents.iter())
                .filter(|r| !r.on_host)
                .map(|r| r.rounded)
                .sum()
        });
        let in_use = self.device_bytes().saturating_sub(releasing);
        let Some(exec) = self.executor.as_mut() else {
            return true;
        };
        // A pool that takes blocks is made of granules.
        let footprint = match exec.backing().filter(|_| releasing > 0) {
            Some(backing) => backing.rounded(footprint),
            None => granules(footprint),
        };
        exec.limit().is_none_or(|limit| in_use + footprint <= limit)
    }

    /// Swap mode, a malloc no pool serves: a block at an address of its own where it is large
    /// enough (on the device, or on the host past the limit), else mapped host memory past the
    /// limit, else None (the real allocator serves it).
    pub(in crate::interposer) fn overflow(&mut self, size: u64, id: AllocId) -> Option<u64> {
        let in_use = self.device_bytes();
        let exec = self.executor.as_mut()?;
        let limit = exec.limit()?;
        exec.copy_model(limit.saturating_sub(in_use));
        if size >= exec.config.min_bytes
            && let Some(backing) = exec.backing().filter(|b| b.worth(size))
        {
            // Past the limit, page-locked host memory at the block's addresses: where the
            // interposer sees the copies that must infer their direction (as for mapped host
            // memory, `host_backed_malloc`).
            let on_host = in_use + backing.rounded(size) > limit;
            if (!on_host || super::super::resolve::is_interposer())
                && let Some(block) = backing.allocate(size, on_host)
            {
                let va = block.va;
                log::debug!(
                    "malloc of {size} bytes at {va:#x}, an address of its own on the {} \
                     ({in_use} bytes in use)",
                    if on_host { "host" } else { "device" }
                );
                *exec.own_memory(on_host) += block.rounded;
                if on_host {
                    exec.stats.warmup_host_allocations += 1;
                    exec.stats.warmup_host_bytes =
                        exec.stats.warmup_host_bytes.max(exec.host_backed_bytes);
                    exec.note_mapped_after_plan();
                }
                exec.blocks.insert(va, (block, id));
                return Some(va);
            }
        }
        if in_use + granules(size) <= limit {
            return None;
        }
        self.host_backed_malloc(size)
    }

    /// Whether `addr` lies in a block of the program's at an address of its own.
    pub(in crate::interposer) fn in_block(&self, addr: u64) -> bool {
        self.executor
            .as_ref()
            .is_some_and(|exec| exec.block_at(addr).is_some())
    }

    /// Swap mode: a device malloc served from mapped host memory (the device is at the limit,
    /// or the real allocator found no room: a fragmented device says so below the limit).
    ///
    /// Only where itermem's hooks see the program's copies, which must let the driver infer
    /// the direction of a copy to or from such a block (CUDA leaves a copy whose kind
    /// contradicts its pointers undefined). Through PyTorch's pluggable allocator without
    /// `LD_PRELOAD` they do not: the device serves the malloc, and the limit is not kept.
    pub fn host_backed_malloc(&mut self, size: u64) -> Option<u64> {
        let exec = self.executor.as_mut()?;
        if !super::super::resolve::is_interposer() {
            static REPORTED: AtomicBool = AtomicBool::new(false);
            if !REPORTED.swap(true, Relaxed) {
                super::super::report(format_args!(
                    "swap mode keeps ITERMEM_LIMIT only under LD_PRELOAD: through the pluggable \
                     allocator alone itermem sees no copy, so memory past the limit comes from \
                     the device"
                ));
            }
            return None;
        }
        let (host, device) = cuda::mapped_host(size.max(1))?;
        exec.host_backed.insert(device, (host, size));
        exec.host_backed_bytes += size;
        exec.stats.warmup_host_allocations += 1;
        exec.stats.warmup_host_bytes = exec.stats.warmup_host_bytes.max(exec.host_backed_bytes);
        exec.note_mapped_after_plan();
        Some(device)
    }

    /// Whether `addr` lies in a block served from mapped host memory (copies to and from it
    /// must let the driver infer their direction).
    pub fn host_backed(&self, addr: u64) -> bool {
        self.executor.as_ref().is_some_and(|exec| {
            let mapped = exec
                .host_backed
                .range(..=addr)
                .next_back()
                .is_some_and(|(&start, &(_, size))| addr < start + size.max(1));
            let block_on_host =
                (exec.block_at(addr)).is_some_and(|block| block.on_host && block.has_own_memory());
            mapped || block_on_host
        })
    }

    /// Frees a block served from mapped host memory or one whose bytes are away; None if
    /// `addr` is neither (the pool's own free applies).
    pub(in crate::interposer) fn free_swapped(&mut self, addr: u64, id: AllocId) -> Option<bool> {
        let exec = self.executor.as_mut()?;
        // Freed before it left: its early copy is fenced on the range, nothing else to undo.
        exec.early.remove(&id);
        if let Some((host, size)) = exec.host_backed.remove(&addr) {
            exec.host_backed_bytes -= size;
            self.release_host_backed(host, id);
            return Some(true);
        }
        if self.in_block(addr) {
            return Some(self.free_block(addr, id));
        }
        let exec = self.executor.as_mut()?;
        exec.away.remove(&id)?;
        self.used_on.remove(&id);
        self.drop_waits(id);
        // The swap-out's fence already covers the range for its next tenant.
        Some(true)
    }

    /// Frees a block at an address of its own: its range of a pool (if the pool took it) is
    /// fenced for the next tenant, and its addresses are released once the work of every
    /// stream that used it is done. False for an interior pointer.
    fn free_block(&mut self, addr: u64, id: AllocId) -> bool {
        let Some(exec) = self.executor.as_mut() else {
            return false;
        };
        let Some((block, _)) = exec.blocks.remove(&addr) else {
            return false;
        };
        // Its range of a pool, unless it is away (the swap-out's fence covers the range then).
        let was_away = exec.away.remove(&id).is_some();
        let range = self
            .pools
            .iter_mut()
            .filter(|_| !was_away)
            .find_map(|pool| {
                let (start, end) = pool.offset_of(id)?;
                pool.take_out(start);
                Some((pool.base + start, pool.base + end))
            });
        let users = self.retire_block(id, range);
        // As `cudaFree` does, the host waits for the work that used the block (on its users'
        // streams only, not behind queued swaps): memory held after its free would count
        // against the limit and send the next mallocs to host memory.
        for stream in users {
            match self.record_event(stream) {
                Some(event) => {
                    cuda::synchronize_event(event);
                    self.spare_events.push(event);
                }
                None => {
                    cuda::synchronize();
                    break;
                }
            }
        }
        if let Some(exec) = self.executor.as_mut() {
            if block.has_own_memory() {
                *exec.own_memory(block.on_host) -= block.rounded;
            }
            block.release();
        }
        true
    }

    /// Releases the mapped host memory of freed block `id` once the work of every stream that
    /// used it is done. The host does not wait: a device-wide synchronisation here stalled the
    /// program at every such free (up to 400 ms on DenseNet at 70 %, behind queued swap-outs).
    /// If an event cannot be recorded, it waits for the device, as `cudaFreeHost` does.
    fn release_host_backed(&mut self, host: u64, id: AllocId) {
        let mut events = smallvec::SmallVec::new();
        for stream in self.used_on.remove(&id).unwrap_or_default() {
            let Some(event) = self.record_event(stream) else {
                cuda::synchronize();
                break;
            };
            events.push(event);
        }
        if let Some(exec) = self.executor.as_mut() {
            exec.host_backed_freed.push((host, events));
        }
        self.release_finished_host_frees();
    }

    /// Releases the freed blocks of mapped host memory whose users have finished.
    pub(in crate::interposer) fn release_finished_host_frees(&mut self) {
        let Some(exec) = self.executor.as_mut() else {
            return;
        };
        let mut spare = Vec::new();
        exec.host_backed_freed.retain(|(host, events)| {
            let done = events.iter().all(|&event| cuda::completed(event));
            if done {
                cuda::free_host(*host);
                spare.extend(events.iter().copied());
            }
            !done
        });
        self.spare_events.extend(spare);
    }

    /// Swap mode, at a detected period: times the first iteration starting at or after
    /// `next`; returns its window `[start, start + length)` for the sequencer to capture.
    pub fn begin_timing(&mut self, boundary: u64, length: u64, next: u64) -> Option<(u64, u64)> {
        let exec = self.executor.as_mut()?;
        if exec.timing.is_some() || length == 0 {
            return None;
        }
        let behind = next.saturating_sub(boundary);
        let start = boundary + behind.div_ceil(length) * length;
        exec.timing = Some(Timing {
            start,
            end: start + length,
            ops: Vec::new(),
            host_start: None,
            resident_bytes: 0,
            copies: Vec::new(),
        });
        Some((start, length))
    }

    /// Stops serving and following the plan (the program left its period at event `index`).
    pub(in crate::interposer) fn abandon(&mut self, index: u64) {
        let Some(exec) = self.exec() else { return };
        if exec.following {
            exec.stats.plans_abandoned += 1;
            if exec.stats.abandoned_at_events.len() < ITERATIONS_KEPT {
                exec.stats.abandoned_at_events.push(index);
            }
        }
        exec.following = false;
        // Tensors with an early copy stay on the device: no plan lets them leave now.
        exec.early.clear();
        exec.timing = None;
        if let Some(timing) = exec.second_timing.take() {
            exec.spare_timing_of(timing);
        }
    }

    /// The planning thread of swap mode: from the captured timing iteration to a plan ready to
    /// install at the next boundary.
    pub fn plan_swaps(&mut self, capture: Capture) {
        let Some(timing) = self.exec().and_then(|exec| exec.timing.take()) else {
            return;
        };
        if timing.ops.is_empty() {
            // An iteration of mallocs and frees alone: nothing to time or swap, the pool is
            // planned as in pool mode.
            self.plan_iteration(capture.start + capture.length, capture.length);
            return;
        }
        if let Some((used, live)) = capture.use_of_live()
            && used < live / 2
        {
            log::info!(
                "period of {} events left alone: it allocates nothing and uses {used} of the \
                 {live} bytes live across it (a loop within the iteration)",
                capture.length
            );
            return;
        }
        self.retire(capture.start + capture.length);
        let Some(exec) = self.executor.as_mut() else {
            return;
        };
        if timing.start != capture.start {
            return;
        }
        exec.stats.timing_iteration_ns = timing
            .host_start
            .map_or(0.0, |t| t.elapsed().as_secs_f64() * 1e9);
        let limit = exec.limit().unwrap_or(u64::MAX);
        let outside = timing.resident_bytes + GRANULE;
        exec.stats.budget_bytes = limit.saturating_sub(outside);
        let config = exec.config.clone();
        let (copy, _) = exec.copy_model(0);
        let blocks = Blocks {
            by_id: (exec.blocks.iter())
                .filter(|(_, (block, _))| block.has_own_memory())
                .map(|(&va, (block, id))| {
                    let (rounded, on_host) = (block.rounded, block.on_host);
                    (
                        *id,
                        OwnBlock {
                            va,
                            rounded,
                            on_host,
                        },
                    )
                })
                .collect(),
            granularity: exec.backing.flatten().map_or(0, |b| b.granularity),
        };
        let ready = self.swap_ready.clone();
        let spawned = std::thread::Builder::new()
            .name("itermem-planner".into())
            .spawn(move || {
                let planned = std::panic::catch_unwind(move || {
                    make_schedule(&config, copy, capture, timing.ops, limit, outside, blocks)
                });
                match planned {
                    Ok(Ok(made)) => *ready.lock() = Some(made),
                    Ok(Err(err)) => super::super::report(format_args!(
                        "cannot plan swaps ({err:#}); swap mode records only"
                    )),
                    Err(_) => super::super::report(format_args!(
                        "internal error while planning swaps; swap mode records only"
                    )),
                }
            });
        if spawned.is_err() {
            super::super::report(format_args!(
                "cannot start the planning thread; swap mode records only"
            ));
        }
    }

    /// Swap mode: a plan was installed with its pool (`Pool` just pushed); sets up streams and
    /// the host slots.
    pub(in crate::interposer) fn start_schedule(&mut self, schedule: Arc<Schedule>, index: u64) {
        let pool_bytes = self.pools.last().map_or(0, |p| p.plan.footprint);
        let plan_ms = self.stats.plan_ms;
        let Some(exec) = self.exec() else { return };
        if !schedule.swaps.is_empty() {
            if exec.out_stream == 0 {
                match (cuda::stream(), cuda::stream()) {
                    (Some(out), Some(into)) => (exec.out_stream, exec.in_stream) = (out, into),
                    _ => {
                        super::super::report(format_args!(
                            "cannot create the swap streams; the pool serves without swaps"
                        ));
                        return;
                    }
                }
            }
            // Host slots of an earlier plan stay: tensors may still be away in them.
            match cuda::pinned_host(schedule.host_bytes) {
                Some(base) => exec.host_base = base,
                None => {
                    super::super::report(format_args!(
                        "cannot allocate {} bytes of page-locked host memory; the pool serves \
                         without swaps",
                        schedule.host_bytes
                    ));
                    return;
                }
            }
            exec.stats.pinned_host_bytes += schedule.host_bytes;
        }
        // A second plan replaces its first: one plan of the period.
        if !schedule.is_second() {
            exec.stats.plans += 1;
        }
        exec.note_mapped_after_plan();
        exec.stats.swaps_planned = schedule.swaps.len() as u64;
        exec.stats.early_outs_planned = schedule.swaps.iter().filter(|s| s.early).count() as u64;
        exec.stats.predicted_iteration_ns = schedule.predicted_ns;
        exec.stats.predicted_base_iteration_ns = schedule.predicted_base_ns;
        if let Some(plan) = exec.plan_stats() {
            plan.serves = false;
        }
        let copy = schedule.made.as_ref().map(|made| made.inputs.copy);
        if exec.stats.plans_made.len() < ITERATIONS_KEPT {
            exec.stats.plans_made.push(PlanStats {
                op_times: if schedule.is_second() { SECOND } else { FIRST },
                swaps: schedule.swaps.len() as u64,
                pool_bytes,
                copy_out_gb_s: copy.map_or(0.0, |c| 1.0 / c.out_ns_per_byte),
                copy_in_gb_s: copy.map_or(0.0, |c| 1.0 / c.in_ns_per_byte),
                handoff_ns: copy.map_or(0.0, |c| c.handoff()),
                predicted_iteration_ns: schedule.predicted_ns,
                predicted_base_iteration_ns: schedule.predicted_base_ns,
                plan_ms,
                serves: true,
                ..Default::default()
            });
        }
        let exec = self.executor.as_mut().expect("checked above");
        // A first plan's iterations from its second on are timed op by op for the second plan
        // (the first may begin with the activation's copies).
        exec.second_timing = None;
        if exec.config.second_plan != crate::config::SecondPlan::Off
            && schedule.made.is_some()
            && !schedule.is_second()
            && let Some(pool) = self.pools.last()
        {
            let start = pool.plan.start + pool.plan.length;
            exec.second_timing = Some(Timing {
                start,
                end: start + SECOND_TIMED_ITERATIONS * pool.plan.length,
                ops: Vec::new(),
                host_start: None,
                resident_bytes: 0,
                copies: Vec::new(),
            });
        }
        exec.slot_ids.clear();
        exec.following = true;
        exec.iteration_number = None;
        exec.schedule = Some(schedule);
        self.roll(index);
    }

    /// Activation of a plan whose pool takes blocks of the program's (`schedule.residents`):
    /// their content goes to page-locked staging memory, their own memory is released, the
    /// pool is allocated in granules, and each block's range of it is mapped at the block's
    /// addresses. Returns the pool's base and the staging, which [`PoolState::place_residents`]
    /// empties once the pool is installed; None (with everything as before) if it cannot be.
    /// The host waits for the device here, once per plan.
    pub(in crate::interposer) fn take_residents(
        &mut self,
        footprint: u64,
        schedule: &Schedule,
    ) -> Option<(u64, Staged)> {
        let exec = self.executor.as_mut()?;
        exec.backing()?;
        let still_there = schedule.residents.iter().all(|r| {
            exec.blocks
                .get(&r.va)
                .is_some_and(|(block, id)| *id == r.id && block.has_own_memory())
        });
        if !still_there {
            super::super::report(format_args!(
                "a block the plan takes into its pool was freed before the plan began; the plan \
                 is not used"
            ));
            return None;
        }
        let total: u64 = schedule.residents.iter().map(|r| r.rounded).sum();
        let staging = cuda::pinned_host(total)?;
        cuda::synchronize();
        let mut at = 0;
        let mut places = Vec::with_capacity(schedule.residents.len());
        for r in &schedule.residents {
            cuda::copy(staging + at, r.va, r.rounded, 0);
            places.push((*r, staging + at));
            at += r.rounded;
        }
        if !cuda::synchronize() {
            cuda::free_host(staging);
            return None;
        }
        for r in &schedule.residents {
            if let Some((block, _)) = exec.blocks.get_mut(&r.va) {
                block.release_own();
                let on_host = block.on_host;
                *exec.own_memory(on_host) -= r.rounded;
            }
        }
        if let Some(base) = self.alias_pool(footprint, schedule) {
            return Some((base, Staged { staging, places }));
        }
        // Undone: every block gets memory of its own again, with its content.
        let exec = self.executor.as_mut()?;
        for r in &schedule.residents {
            let Some((block, _)) = exec.blocks.get_mut(&r.va) else {
                continue;
            };
            block.release_own();
            let on_host = block.on_host;
            if !block.remap_own(on_host) {
                lost_block(r.va, r.rounded);
            }
            *exec.own_memory(on_host) += r.rounded;
        }
        for &(r, host) in &places {
            cuda::copy(r.va, host, r.rounded, 0);
        }
        cuda::synchronize();
        cuda::free_host(staging);
        super::super::report(format_args!(
            "cannot allocate a pool of {footprint} bytes in granules for the blocks it takes; \
             the plan is not used"
        ));
        None
    }

    /// A pool of `footprint` bytes in granules, with the blocks `schedule` takes (their own
    /// memory released) mapped at their ranges of it; None with no pool left and nothing
    /// mapped at the blocks' addresses.
    fn alias_pool(&mut self, footprint: u64, schedule: &Schedule) -> Option<u64> {
        let exec = self.executor.as_mut()?;
        let pool = exec.backing()?.allocate_pool(footprint)?;
        let aliased = schedule.residents.iter().all(|r| {
            exec.blocks
                .get_mut(&r.va)
                .is_some_and(|(block, _)| block.alias(&pool, r.offset))
        });
        if !aliased {
            for r in &schedule.residents {
                if let Some((block, _)) = exec.blocks.get_mut(&r.va) {
                    block.release_own();
                }
            }
            pool.release();
            return None;
        }
        let base = pool.va;
        exec.chunked_pools.insert(base, pool);
        Some(base)
    }

    /// A pool for `plan`: in granules with its blocks mapped where `schedule` takes blocks
    /// ([`PoolState::alias_pool`]), else one allocation.
    fn allocate_pool_for(&mut self, plan: &PoolPlan, schedule: &Schedule) -> Option<u64> {
        if schedule.takes_no_blocks() {
            cuda::malloc(plan.footprint.max(1))
        } else {
            self.alias_pool(plan.footprint, schedule)
        }
    }

    /// Activation of a second plan at iteration boundary `index`, in place of the first plan
    /// it was made for ([`Schedule::is_second`]), which served until here. The boundary must
    /// find the first plan's swaps settled: no tensor of an iteration live in its pool, and no
    /// tensor away but the blocks it takes (their swaps wrap the boundary); else the switch
    /// waits for the next boundary. The host waits for the device once, the blocks' content
    /// goes to page-locked staging memory (from their ranges, or their host slots), the first
    /// pool and its host slots are released, and then the second pool is allocated and the
    /// blocks mapped there, as at an activation: the device never holds both pools. If the
    /// second pool cannot be had, the first is made again; if neither can, the blocks get
    /// host memory of their own, with their content, and no plan serves.
    pub(in crate::interposer) fn switch_plan(
        &mut self,
        mut plan: PoolPlan,
        schedule: Arc<Schedule>,
        index: u64,
    ) {
        // The first plan's last iteration ends here, in its statistics.
        self.roll(index);
        self.read_second_report();
        let Some(exec) = self.executor.as_mut() else {
            return;
        };
        let planning = |s: &Schedule| s.made.as_ref().map(|made| Arc::as_ptr(&made.planning));
        let Some(current) = (exec.schedule.clone())
            .filter(|current| exec.following && planning(current) == planning(&schedule))
        else {
            exec.note_second(
                "not installed: the program left the first plan's period before the \
                 second could begin",
            );
            return;
        };
        let ids = |s: &Schedule| {
            let mut ids: Vec<AllocId> = s.residents.iter().map(|r| r.id).collect();
            ids.sort_unstable();
            ids
        };
        let taken = ids(&current);
        let Some(first) = self.pools.last().filter(|pool| pool.serving) else {
            exec.note_second("not installed: the first plan's pool no longer serves");
            return;
        };
        let (first_base, first_footprint) = (first.base, first.plan.footprint);
        let settled = (first.overlapping(0, first_footprint).iter())
            .all(|(_, _, id)| taken.binary_search(id).is_ok())
            && (exec.away.iter())
                .all(|(id, away)| taken.binary_search(id).is_ok() && away.pool == first_base);
        if !settled {
            log::info!("the second plan waits for the next boundary: the first's is not settled");
            plan.start += plan.length;
            self.next = Some((plan, Some(schedule)));
            return;
        }
        let limit = exec.limit().unwrap_or(u64::MAX);
        let footprint = match exec.backing().filter(|_| !schedule.takes_no_blocks()) {
            Some(backing) => backing.rounded(plan.footprint),
            None => granules(plan.footprint),
        };
        let in_use = self
            .device_bytes()
            .saturating_sub(granules(first_footprint));
        let Some(exec) = self.executor.as_mut() else {
            return;
        };
        if ids(&schedule) != taken {
            exec.note_second("not installed: it takes other blocks than the first");
            return;
        }
        if in_use + footprint > limit {
            exec.note_second(&format!(
                "not installed: its pool of {footprint} bytes does not fit beside the {in_use} \
                 bytes the device holds outside the first plan's, under the limit of {limit}"
            ));
            return;
        }
        // The blocks' content, wherever it is once the device is idle.
        cuda::synchronize();
        let total: u64 = current.residents.iter().map(|r| r.rounded).sum();
        let staging = match total {
            0 => 0,
            _ => match cuda::pinned_host(total) {
                Some(staging) => staging,
                None => {
                    exec.note_second(&format!(
                        "not installed: no {total} bytes of page-locked staging memory"
                    ));
                    return;
                }
            },
        };
        let mut staged_at = FxHashMap::default();
        let mut at = staging;
        for r in &current.residents {
            match exec.away.get(&r.id) {
                // SAFETY: the host slot and the staging are page-locked host allocations of
                // ours of at least `rounded` bytes from these addresses, and the device, idle
                // now, uses neither.
                Some(away) => unsafe {
                    std::ptr::copy_nonoverlapping(
                        away.host as *const u8,
                        at as *mut u8,
                        r.rounded as usize,
                    )
                },
                None => {
                    cuda::copy(at, r.va, r.rounded, 0);
                }
            }
            staged_at.insert(r.id, at);
            at += r.rounded;
        }
        if !cuda::synchronize() {
            cuda::free_host(staging);
            exec.note_second("not installed: staging the blocks failed");
            return;
        }
        // The first plan ends: its pool, its host slots, its blocks' mappings.
        for r in &current.residents {
            if let Some((block, _)) = exec.blocks.get_mut(&r.va) {
                block.release_own();
            }
            exec.away.remove(&r.id);
        }
        if exec.host_base != 0 {
            cuda::free_host(exec.host_base);
            exec.host_base = 0;
            exec.stats.pinned_host_bytes -= current.host_bytes;
        }
        exec.schedule = None;
        exec.following = false;
        exec.coming_back.clear();
        for r in &current.residents {
            self.used_on.remove(&r.id);
            self.drop_waits(r.id);
        }
        let first = self.pools.pop().expect("the serving pool");
        self.free_pool_memory(first.base);
        let (plan, schedule, reason) = match self.allocate_pool_for(&plan, &schedule) {
            Some(base) => {
                if let Some(made) = &schedule.made {
                    made.planning.write(&made.json);
                }
                let installed = format!("installed at event {index}");
                (Some((base, plan)), schedule, installed)
            }
            None => {
                let again = PoolPlan {
                    start: plan.start,
                    ..first.plan
                };
                let base = self.allocate_pool_for(&again, &current);
                let why = format!(
                    "not installed: the device refused its pool of {} bytes",
                    plan.footprint
                );
                (base.map(|base| (base, again)), current, why)
            }
        };
        let Some(exec) = self.executor.as_mut() else {
            return;
        };
        exec.note_second(&reason);
        let Some((base, plan)) = plan else {
            // Neither pool: each block gets host memory of its own back, with its content.
            for r in &schedule.residents {
                let Some((block, _)) = exec.blocks.get_mut(&r.va) else {
                    continue;
                };
                if !block.remap_own(true) {
                    lost_block(r.va, r.rounded);
                }
                *exec.own_memory(true) += r.rounded;
                cuda::copy(r.va, staged_at[&r.id], r.rounded, 0);
            }
            cuda::synchronize();
            if staging != 0 {
                cuda::free_host(staging);
            }
            super::super::report(format_args!(
                "the device refused the pool of the second plan and of the first again; the \
                 blocks they took live in host memory, and no plan serves"
            ));
            return;
        };
        self.stats.pool_bytes = plan.footprint;
        self.stats.planned_peak_live_bytes = plan.peak_live;
        let places: Vec<(Resident, u64)> = (schedule.residents.iter())
            .map(|r| (*r, staged_at[&r.id]))
            .collect();
        self.pools.push(Pool::new(base, plan));
        self.start_schedule(schedule, index);
        if staging != 0 {
            self.place_residents(Staged { staging, places });
        }
    }

    /// After [`PoolState::take_residents`] and the plan's installation: each block's content
    /// goes to its range of the pool, or to its host slot where the plan has it away at the
    /// iteration's start (a swap that wraps the boundary).
    pub(in crate::interposer) fn place_residents(&mut self, staged: Staged) {
        let Staged { staging, places } = staged;
        let Some(pool_index) = self.pools.len().checked_sub(1) else {
            return;
        };
        let base = self.pools[pool_index].base;
        let host_base = self.executor.as_ref().map_or(0, |e| e.host_base);
        let mut away = Vec::new();
        for &(r, host) in &places {
            let end = r.offset + r.rounded;
            match r.away_at_start.filter(|_| host_base != 0) {
                Some(slot) => {
                    // SAFETY: both are page-locked host allocations of ours, of at least
                    // `rounded` bytes from these addresses, and no copy uses them now.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            host as *const u8,
                            (host_base + slot) as *mut u8,
                            r.rounded as usize,
                        )
                    };
                    away.push((
                        r.id,
                        Away {
                            pool: base,
                            offset: r.offset,
                            end,
                            host: host_base + slot,
                            alias: Some(r.va),
                        },
                    ));
                }
                None => {
                    cuda::copy(r.va, host, r.rounded, 0);
                    self.pools[pool_index].put_back(r.offset, end, r.id);
                }
            }
            self.track(r.id);
            self.drop_waits(r.id);
        }
        cuda::synchronize();
        cuda::free_host(staging);
        if let Some(exec) = self.executor.as_mut() {
            exec.away.extend(away);
        }
    }

    /// Gives back the memory of a pool of itermem's: in granules (it took blocks), or one
    /// allocation.
    pub(in crate::interposer) fn free_pool_memory(&mut self, base: u64) {
        match self.exec().and_then(|e| e.chunked_pools.remove(&base)) {
            Some(pool) => pool.release(),
            None => cuda::free(base),
        }
    }

    /// The op that event `index` is under the followed plan, with its swap-ins (before it) and
    /// whether swap-outs follow it (copies, or tensors leaving after an early copy). None when
    /// no plan is followed or the event is no op.
    fn op_of(&self, index: u64) -> Option<(usize, Vec<u32>, bool)> {
        let exec = self.executor.as_ref()?;
        if !exec.following {
            return None;
        }
        let schedule = exec.schedule.as_ref()?;
        let plan = &self.pools.last()?.plan;
        let position = index.checked_sub(plan.start)? % plan.length;
        let op = *schedule.op_at.get(position as usize)?;
        if op == NOT_AN_OP {
            return None;
        }
        let op = op as usize;
        Some((
            op,
            schedule.ins_before[op].clone(),
            !schedule.outs_after[op].is_empty() || !schedule.leaves_after[op].is_empty(),
        ))
    }

    /// Notes the allocation a swapped slot got this iteration.
    pub(in crate::interposer) fn served_slot(&mut self, position: u64, id: AllocId) {
        if let Some(exec) = self.exec()
            && exec.following
        {
            exec.slot_ids.insert(position, id);
        }
    }

    /// Iteration bookkeeping at event `index`: closes finished iterations and reads the stall
    /// measurements that completed.
    pub(in crate::interposer) fn roll(&mut self, index: u64) {
        let Some(exec) = self.executor.as_mut() else {
            return;
        };
        if let Some(timing) = &mut exec.timing
            && index >= timing.start
            && timing.host_start.is_none()
        {
            timing.host_start = Some(Instant::now());
            timing.resident_bytes = exec.real_bytes + exec.own_block_bytes;
        }
        let mut pending = Vec::new();
        for (a, b) in std::mem::take(&mut exec.stalls) {
            if cuda::completed(b) {
                if let Some(ns) = cuda::elapsed_ns(a, b) {
                    exec.iteration.stall_ns += ns;
                    exec.stats.stall_ns += ns;
                }
                exec.spare_timing.extend([a, b]);
            } else {
                pending.push((a, b));
            }
        }
        exec.stalls = pending;
        let Some((start, length)) = self.pools.last().map(|p| (p.plan.start, p.plan.length)) else {
            return;
        };
        let exec = self.executor.as_mut().expect("checked above");
        if exec.schedule.is_none() || !exec.following || index < start {
            return;
        }
        let number = (index - start) / length;
        if exec.iteration_number == Some(number) {
            return;
        }
        let now = Instant::now();
        let plan = exec.stats.plans_made.len().saturating_sub(1);
        if exec.iteration_number.is_some() {
            let mut done = std::mem::take(&mut exec.iteration);
            done.time_ns = exec
                .iteration_host_start
                .map_or(0.0, |t| now.duration_since(t).as_secs_f64() * 1e9);
            if exec.stats.iterations.len() < ITERATIONS_KEPT {
                exec.stats.iterations.push(done);
            }
            let under_plan = || (exec.stats.iterations.iter()).filter(|i| i.plan == plan);
            let times = median(under_plan().map(|i| i.time_ns));
            let stalls = median(under_plan().map(|i| i.stall_ns));
            if let (Some((time, iterations)), Some((stall, _))) = (times, stalls) {
                exec.stats.measured_iteration_ns = time;
                exec.stats.measured_stall_ns = stall;
                if let Some(stats) = exec.plan_stats() {
                    stats.measured_iteration_ns = time;
                    stats.measured_stall_ns = stall;
                    stats.iterations = iterations as u64;
                }
            }
        }
        exec.iteration = IterationStats {
            start_event: start + number * length,
            plan,
            ..Default::default()
        };
        exec.iteration_number = Some(number);
        exec.iteration_host_start = Some(now);
        exec.slot_ids.clear();
        exec.early.clear();
        self.second_plan_step(index);
    }

    /// At an iteration boundary `index` under a first plan: once the iteration timed for the
    /// second plan is over, the second plan is made on a thread of its own
    /// ([`second_plan`]), which hands it to [`PoolState::install`] if it is chosen.
    fn second_plan_step(&mut self, index: u64) {
        self.read_second_report();
        let Some(exec) = self.executor.as_mut() else {
            return;
        };
        if exec.second_timing.as_ref().is_none_or(|t| index < t.end) {
            return;
        }
        let timing = exec.second_timing.take().expect("checked above");
        let Some(made) = (exec.schedule.as_ref())
            .filter(|_| exec.following)
            .and_then(|schedule| schedule.made.clone())
        else {
            exec.spare_timing_of(timing);
            return;
        };
        let Timing { ops, copies, .. } = timing;
        let (report, ready) = (exec.second_report.clone(), self.swap_ready.clone());
        let always = exec.config.second_plan == crate::config::SecondPlan::Always;
        let spawned = std::thread::Builder::new()
            .name("itermem-second-plan".into())
            .spawn(move || {
                let made = std::panic::catch_unwind(move || second_plan(made, ops, copies, always));
                let (found, plan) = match made {
                    Ok(Ok(made)) => made,
                    Ok(Err(err)) => (
                        SecondReport {
                            remeasured: None,
                            reason: format!("not made: {err:#}"),
                        },
                        None,
                    ),
                    Err(_) => (
                        SecondReport {
                            remeasured: None,
                            reason: "not made: internal error while planning".into(),
                        },
                        None,
                    ),
                };
                // The report first: the switch adds to it what became of the plan.
                *report.lock() = Some(found);
                // Not over a first plan of another period, made after a deviation.
                let mut slot = ready.lock();
                if slot.is_none() {
                    *slot = plan;
                }
            });
        let exec = self.executor.as_mut().expect("checked above");
        match spawned {
            Ok(_) => exec.second_pending = true,
            Err(_) => exec.stats.second_plan = "not made: cannot start its thread".into(),
        }
    }

    /// Takes what the second planning thread found into the statistics, once it has.
    fn read_second_report(&mut self) {
        let Some(exec) = self.executor.as_mut() else {
            return;
        };
        if !exec.second_pending {
            return;
        }
        let Some(report) = exec.second_report.lock().take() else {
            return;
        };
        exec.second_pending = false;
        exec.stats.second_plan = report.reason;
        let Some((time, base)) = report.remeasured else {
            return;
        };
        let first = (exec.stats.plans_made.iter_mut().rev()).find(|p| p.op_times == FIRST);
        if let Some(first) = first {
            first.remeasured_iteration_ns = time;
            first.remeasured_base_iteration_ns = base;
        }
        if exec.schedule.as_ref().is_some_and(|s| !s.is_second()) {
            exec.stats.predicted_iteration_ns = time;
            exec.stats.predicted_base_iteration_ns = base;
        }
    }

    /// Swap mode, before a launch, copy or memset (event `index`) on `stream` that uses `ids`
    /// (of which `read`, a copy's source, is only read; every other one may be written):
    /// timing, planned swap-ins, swap-ins waiting for their range, tensors that are away, and
    /// early copy-outs made stale by a write.
    pub fn prepare(
        &mut self,
        ids: &[AllocId],
        read: Option<AllocId>,
        stream: StreamHandle,
        index: u64,
    ) -> Prepared {
        let mut prepared = Prepared::default();
        // A plan starts at its boundary even when no malloc comes there (an iteration of
        // launches alone, as under a caching allocator).
        self.install(index);
        self.roll(index);
        // A write after an early copy began (the plan has only reads there): the copy may hold
        // older bytes, so the tensor is copied again when it leaves.
        if let Some(exec) = self.executor.as_mut()
            && !exec.early.is_empty()
        {
            for id in ids.iter().filter(|&&id| Some(id) != read) {
                if let Some(stale) = exec.early.get_mut(id) {
                    *stale = true;
                }
            }
        }
        if let Some(exec) = self.executor.as_mut() {
            exec.copies_timed = exec.config.copy.is_none()
                && (exec.second_timing.as_ref()).is_some_and(|t| (t.start..t.end).contains(&index));
        }
        if let Some((op, ins, outs)) = self.op_of(index) {
            if let Some(exec) = self.executor.as_mut() {
                for swap in ins {
                    let planned = exec
                        .schedule
                        .as_ref()
                        .and_then(|schedule| schedule.swaps.get(swap as usize));
                    if let Some(id) = planned.and_then(|p| exec.swapped_id(p)) {
                        exec.coming_back.push(id);
                    }
                }
            }
            prepared.swap_outs_after = outs.then_some(op);
        }
        // Swap-ins due: a borrower the program has not freed yet may still hold the range (the
        // plan lends it until the swap-in starts), so they are tried again before every call;
        // once a plan is abandoned, every tensor away is due.
        let due: Vec<AllocId> = match self.executor.as_mut() {
            Some(e) if !e.following => e.away.keys().copied().collect(),
            Some(e) => std::mem::take(&mut e.coming_back),
            None => Vec::new(),
        };
        for id in due {
            if !self.swap_in(id)
                && let Some(exec) = self.exec()
            {
                exec.coming_back.push(id);
            }
        }
        for &id in ids {
            let Some(exec) = self.executor.as_mut() else {
                break;
            };
            if !exec.away.contains_key(&id) {
                continue;
            }
            log::debug!("allocation {id} is used at event {index} while away");
            exec.stats.on_demand_swap_ins += 1;
            exec.iteration.on_demand_swap_ins += 1;
            if !self.swap_in(id)
                && let Some(exchange) = self.exchange_in(id, ids)
            {
                prepared.exchanges.push(exchange);
            }
        }
        // An op is timed from after the waits for its tensors (swap-ins, earlier tenants of
        // their ranges) to its end: its own time, without the stalls of the plan it runs under.
        if let Some(exec) = self.executor.as_mut()
            && exec.timed_at(index).is_some()
        {
            self.before_use(ids.iter().copied(), stream);
            let exec = self.executor.as_mut().expect("checked above");
            if let Some(event) = exec.timing_event() {
                if cuda::record(event, stream) {
                    prepared.timing_start = Some(event);
                } else {
                    exec.spare_timing.push(event);
                }
            }
        }
        prepared
    }

    /// Swap mode, after the call prepared by [`PoolState::prepare`] (`index` its event when it
    /// succeeded): the op's timing, its planned swap-outs, and the end of its exchanges.
    pub fn finish(&mut self, prepared: Prepared, stream: StreamHandle, index: Option<u64>) {
        for exchange in prepared.exchanges {
            self.exchange_out(exchange);
        }
        let Some(index) = index else {
            if let (Some(event), Some(exec)) = (prepared.timing_start, self.exec()) {
                exec.spare_timing.push(event);
            }
            return;
        };
        let mut op_end = None;
        if let Some(start) = prepared.timing_start {
            let exec = self.executor.as_mut().expect("timing implies swap mode");
            match exec.timing_event() {
                Some(end) if cuda::record(end, stream) => {
                    if let Some(timing) = exec.timed_at(index) {
                        timing.ops.push((index, start, end));
                        op_end = Some(end);
                    }
                }
                _ => exec.spare_timing.push(start),
            }
        }
        let schedule = self.executor.as_ref().and_then(|e| e.schedule.clone());
        if let (Some(op), Some(schedule)) = (prepared.swap_outs_after, schedule) {
            for &swap in &schedule.outs_after[op] {
                let early = schedule.swaps[swap as usize].early;
                self.swap_out(&schedule, swap as usize, !early, op_end);
            }
            for &swap in &schedule.leaves_after[op] {
                self.leave_after_early_copy(&schedule, swap as usize, op_end);
            }
        }
    }

    /// Queues the copy-out of planned swap `swap` of this iteration. With `leaves`, the tensor
    /// leaves the device with it; otherwise (an early copy-out) it stays for its reads until
    /// [`PoolState::leave_after_early_copy`]. `op_end`: the timing event after the op it
    /// follows, where ops are timed (the copy's stream waits for it: a handoff).
    fn swap_out(&mut self, schedule: &Schedule, swap: usize, leaves: bool, op_end: Option<usize>) {
        let planned = &schedule.swaps[swap];
        let Some(site) = self.out_site(planned) else {
            return;
        };
        let OutSite {
            id,
            out_stream,
            host,
            verify,
            pool_index,
            offset,
            end,
        } = site;
        let addr = self.pools[pool_index].base + offset;
        // The copy starts after every use of the tensor so far.
        let users = self.used_on.get(&id).cloned().unwrap_or_default();
        for stream in users {
            let Some(event) = self.spare_events.pop().or_else(cuda::event) else {
                return;
            };
            let ordered = cuda::record(event, stream) && cuda::wait(out_stream, event);
            self.spare_events.push(event);
            if !ordered {
                return;
            }
        }
        // Earlier waits of the block (its swap-in) are the copy's too.
        if let Some(waits) = self.waits.get(&id) {
            for &(_, event) in &waits.fences {
                cuda::wait(out_stream, event);
            }
        }
        let timed = self.copy_timing_start(out_stream);
        if !cuda::copy(host, addr, end - offset, out_stream) {
            return;
        }
        // The poison is part of what a swap-out costs its stream in this mode.
        if leaves && verify {
            cuda::fill(addr, 0xFF, end - offset, out_stream);
        }
        self.copy_timing_end(timed, out_stream, end - offset, true, op_end);
        if !leaves {
            log::debug!(
                "early copy-out of allocation {id} ({} bytes at {addr:#x})",
                end - offset
            );
            // Whatever the range holds next waits for the copy to have read it.
            self.fence(addr, addr + (end - offset), out_stream);
            let exec = self.executor.as_mut().expect("checked above");
            exec.early.insert(id, false);
            return;
        }
        log::debug!(
            "swap-out of allocation {id} ({} bytes at {addr:#x})",
            end - offset
        );
        self.fence(addr, addr + (end - offset), out_stream);
        self.leave(planned, &site);
    }

    /// The last read before the gap of early copy-out `swap` has been queued: its tensor leaves
    /// the device. Its range is fenced on the streams that used it (the reads) as it was on
    /// the copy when that was queued, so the next tenant and the swap-in wait for both; with
    /// `ITERMEM_SWAP_VERIFY` the out stream waits for them too and poisons the range. If a
    /// call wrote the tensor since the copy began, the copy is made again now instead, after
    /// every use, as a swap-out after the last access (never a stale copy back), following
    /// `op_end` as [`PoolState::swap_out`] does.
    fn leave_after_early_copy(&mut self, schedule: &Schedule, swap: usize, op_end: Option<usize>) {
        let planned = &schedule.swaps[swap];
        let Some(exec) = self.executor.as_mut() else {
            return;
        };
        let Some(id) = exec.swapped_id(planned) else {
            return;
        };
        // No early copy was queued (its op came before the plan did, or it failed): the
        // tensor stays, as after a swap-out that could not be queued.
        let Some(stale) = exec.early.remove(&id) else {
            return;
        };
        if stale {
            exec.stats.early_outs_copied_again += 1;
            self.swap_out(schedule, swap, true, op_end);
            return;
        }
        let Some(site) = self.out_site(planned) else {
            return;
        };
        let base = self.pools[site.pool_index].base;
        let (start, stop) = (base + site.offset, base + site.end);
        let users = self.used_on.get(&id).cloned().unwrap_or_default();
        for stream in users {
            self.fence(start, stop, stream);
        }
        if site.verify {
            for (_, event) in self.pending_fences(start, stop) {
                cuda::wait(site.out_stream, event);
            }
            cuda::fill(start, 0xFF, stop - start, site.out_stream);
            self.fence(start, stop, site.out_stream);
        }
        log::debug!("allocation {id} leaves after its early copy-out");
        self.leave(planned, &site);
        if let Some(exec) = self.exec() {
            exec.stats.early_outs += 1;
        }
    }

    /// Where planned swap `planned` of this iteration copies out: its tensor, in the serving
    /// pool at `[offset, end)`, to its host slot; None if the tensor is not there.
    fn out_site(&self, planned: &Planned) -> Option<OutSite> {
        let exec = self.executor.as_ref()?;
        let id = exec.swapped_id(planned)?;
        let pool_index = self.pools.len().checked_sub(1)?;
        let (offset, end) = self.pools[pool_index].offset_of(id)?;
        Some(OutSite {
            id,
            out_stream: exec.out_stream,
            host: exec.host_base + planned.host_offset,
            verify: exec.config.verify,
            pool_index,
            offset,
            end,
        })
    }

    /// The tensor of `site` is away from now on, in its host slot: its range may be lent (the
    /// fences on it order its next tenant).
    fn leave(&mut self, planned: &Planned, site: &OutSite) {
        let &OutSite {
            id,
            host,
            pool_index,
            offset,
            end,
            ..
        } = site;
        let base = self.pools[pool_index].base;
        self.pools[pool_index].take_out(offset);
        self.track(id);
        self.drop_waits(id);
        let Some(exec) = self.executor.as_mut() else {
            return;
        };
        exec.away.insert(
            id,
            Away {
                pool: base,
                offset,
                end,
                host,
                alias: planned.resident.map(|(_, va)| va),
            },
        );
        exec.stats.swapped_out += 1;
        exec.stats.swapped_out_bytes += end - offset;
        exec.iteration.swapped_out += 1;
        exec.iteration.swapped_out_bytes += end - offset;
    }

    /// Queues the swap-in of `id` if it is away and no live block holds its range; true when it
    /// is (or was already) resident.
    fn swap_in(&mut self, id: AllocId) -> bool {
        let Some(exec) = self.executor.as_ref() else {
            return true;
        };
        let Some(&away) = exec.away.get(&id) else {
            return true;
        };
        let in_stream = exec.in_stream;
        let Some(pool) = self.pools.iter_mut().find(|p| p.base == away.pool) else {
            return false;
        };
        if !pool.put_back(away.offset, away.end, id) {
            log::debug!(
                "swap-in of allocation {id} waits: its range is held by {:?}",
                pool.overlapping(away.offset, away.end)
            );
            return false;
        }
        let (start, end) = (away.pool + away.offset, away.pool + away.end);
        log::debug!(
            "swap-in of allocation {id} ({} bytes at {start:#x})",
            end - start
        );
        // After the borrowers' last uses and the swap-out.
        for fence in self.pending_fences(start, end) {
            cuda::wait(in_stream, fence.1);
        }
        let Some(done) = self.spare_events.pop().or_else(cuda::event) else {
            return false;
        };
        let timed = self.copy_timing_start(in_stream);
        cuda::copy(start, away.host, end - start, in_stream);
        self.copy_timing_end(timed, in_stream, end - start, false, None);
        cuda::record(done, in_stream);
        self.add_waits(
            id,
            Waits {
                fences: smallvec::smallvec![(in_stream, done)],
                waited: smallvec::SmallVec::new(),
                owned: Some(done),
            },
        );
        let exec = self.executor.as_mut().expect("checked above");
        exec.away.remove(&id);
        exec.stats.swapped_in += 1;
        exec.stats.swapped_in_bytes += end - start;
        exec.iteration.swapped_in += 1;
        exec.iteration.swapped_in_bytes += end - start;
        true
    }

    /// Brings `id` back over the live blocks that hold its range, for one call that does not
    /// use them (`uses`): they are copied to host memory and the host waits for every copy.
    fn exchange_in(&mut self, id: AllocId, uses: &[AllocId]) -> Option<Exchange> {
        let away = *self.executor.as_ref()?.away.get(&id)?;
        let pool = self.pools.iter_mut().find(|p| p.base == away.pool)?;
        let holders = pool.overlapping(away.offset, away.end);
        if holders.iter().any(|(_, _, holder)| uses.contains(holder)) {
            super::super::report(format_args!(
                "a call uses a swapped tensor and the tensor that holds its range at once; \
                 it runs with the tensor away"
            ));
            return None;
        }
        cuda::synchronize();
        let mut moved = Vec::new();
        for (offset, end, holder) in holders {
            let temp = cuda::pinned_host(end - offset)?;
            cuda::copy(temp, away.pool + offset, end - offset, 0);
            pool.take_out(offset);
            moved.push((offset, end, holder, temp));
        }
        cuda::copy(
            away.pool + away.offset,
            away.host,
            away.end - away.offset,
            0,
        );
        cuda::synchronize();
        pool.put_back(away.offset, away.end, id);
        let exec = self.executor.as_mut()?;
        exec.away.remove(&id);
        exec.stats.exchanges += 1;
        Some(Exchange { id, away, moved })
    }

    /// After the call of an exchange: the tensor goes back to the host, its borrowers return.
    fn exchange_out(&mut self, exchange: Exchange) {
        let Exchange { id, away, moved } = exchange;
        let verify = self.executor.as_ref().is_some_and(|e| e.config.verify);
        let Some(pool) = self.pools.iter_mut().find(|p| p.base == away.pool) else {
            return;
        };
        let (start, bytes) = (away.pool + away.offset, away.end - away.offset);
        cuda::synchronize();
        cuda::copy(away.host, start, bytes, 0);
        if verify {
            cuda::fill(start, 0xFF, bytes, 0);
        }
        pool.take_out(away.offset);
        for &(offset, end, holder, temp) in &moved {
            cuda::copy(away.pool + offset, temp, end - offset, 0);
            pool.put_back(offset, end, holder);
        }
        cuda::synchronize();
        for (_, _, _, temp) in moved {
            cuda::free_host(temp);
        }
        if let Some(exec) = self.exec() {
            exec.away.insert(id, away);
        }
    }

    /// Before a planned copy on itermem's `stream`, where copies are timed for the second plan:
    /// the timing event recorded before it.
    fn copy_timing_start(&mut self, stream: u64) -> Option<usize> {
        let exec = self.exec().filter(|e| e.copies_timed)?;
        let start = exec.timing_event()?;
        if cuda::record(start, stream) {
            Some(start)
        } else {
            exec.spare_timing.push(start);
            None
        }
    }

    /// After the copy [`PoolState::copy_timing_start`] began timing: its end, kept with its
    /// bytes, its direction and, for a swap-out, the timing event of the op it follows if any.
    fn copy_timing_end(
        &mut self,
        start: Option<usize>,
        stream: u64,
        bytes: u64,
        out: bool,
        after: Option<usize>,
    ) {
        let (Some(start), Some(exec)) = (start, self.executor.as_mut()) else {
            return;
        };
        match exec.timing_event() {
            Some(end) if cuda::record(end, stream) => match &mut exec.second_timing {
                Some(timing) => timing.copies.push(TimedCopy {
                    out,
                    bytes,
                    start,
                    end,
                    after,
                }),
                None => exec.spare_timing.extend([start, end]),
            },
            end => exec.spare_timing.extend(std::iter::once(start).chain(end)),
        }
    }

    /// Before `stream` waits for a swap-in: a timing event pair around the wait measures the
    /// stall. Returns the event to record after the wait.
    pub(in crate::interposer) fn stall_start(&mut self, stream: StreamHandle) -> Option<usize> {
        let exec = self.exec()?;
        let start = exec.timing_event()?;
        cuda::record(start, stream).then_some(start)
    }

    pub(in crate::interposer) fn stall_end(&mut self, start: usize, stream: StreamHandle) {
        let Some(exec) = self.exec() else { return };
        match exec.timing_event() {
            Some(end) if cuda::record(end, stream) => exec.stalls.push((start, end)),
            _ => exec.spare_timing.push(start),
        }
    }

    /// After an internal error, before every call passes through: every tensor that is away
    /// comes back now (the host waits), since nothing will bring it back later; and again at
    /// each free after it, for those whose range a live block held. Returns how many are still
    /// away, because a live block holds their range.
    pub fn restore_all(&mut self) -> usize {
        let mut away: Vec<(AllocId, Away)> = match self.executor.as_ref() {
            Some(exec) => exec.away.iter().map(|(&id, &a)| (id, a)).collect(),
            None => return 0,
        };
        // Nested lending leaves tensors away in each other's ranges: they come back in the
        // plan's order (the op each one's swap-in is queued before; one that comes back later
        // comes back at the free of the one before, as the plan has it), blocks taken into
        // the pool last (they get memory of their own where their range is held), and where
        // the plan says nothing, the tensor allocated last first (a backward pass's order).
        let turns = self.swap_in_turns();
        away.sort_by_key(|(id, a)| {
            let turn = turns.get(&a.host).copied().unwrap_or(usize::MAX);
            (a.alias.is_some(), turn, std::cmp::Reverse(*id))
        });
        let mut stranded = 0;
        // The device is waited for once, before the first copy: the swap-outs and the
        // borrowers' work must be done (a free passes here for every block).
        let mut synchronized = false;
        for (id, a) in away {
            let back = self
                .pools
                .iter_mut()
                .find(|p| p.base == a.pool)
                .is_some_and(|pool| pool.put_back(a.offset, a.end, id));
            if !back && a.alias.is_none() {
                log::debug!(
                    "tensor {id} stays away: [{:#x}, {:#x}) is held by {:?}",
                    a.pool + a.offset,
                    a.pool + a.end,
                    self.pools
                        .iter()
                        .find(|p| p.base == a.pool)
                        .map(|p| p.overlapping(a.offset, a.end))
                );
                stranded += 1;
                continue;
            }
            if !synchronized {
                cuda::synchronize();
                synchronized = true;
            }
            let home = if back {
                Some(a.pool + a.offset)
            } else {
                a.alias.filter(|&va| self.detach_block(va))
            };
            let restored = home.is_some_and(|home| cuda::copy(home, a.host, a.end - a.offset, 0));
            if restored {
                if let Some(exec) = self.exec() {
                    exec.away.remove(&id);
                }
            } else {
                stranded += 1;
            }
        }
        if synchronized {
            cuda::synchronize();
        }
        stranded
    }

    /// At an internal error, before every call passes through: nothing is served any more,
    /// every tensor that is away comes back ([`PoolState::restore_all`]; one whose range a live
    /// block holds, at that block's free: [`PoolState::free_after_error`]), and the pools
    /// nothing uses go back to the device, whose real allocator serves the program from now
    /// on. `index` is the event the program is at. Returns how many tensors are still away:
    /// Ok where the program has always freed a borrower before it used the tensor whose range
    /// it borrowed (no on-demand swap-in so far) and the plan swaps out no holder before the
    /// tensor's turn, so the plan's order brings them back in time; Err where one of them may
    /// be read before it is back (nothing would see it).
    pub fn after_internal_error(&mut self, index: u64) -> Result<usize, usize> {
        self.stop_serving();
        let stranded = self.restore_all();
        self.release_idle_retired_pools();
        let deviated = self
            .executor
            .as_ref()
            .is_some_and(|e| e.stats.on_demand_swap_ins + e.stats.exchanges > 0);
        if stranded > 0 && (deviated || self.held_by_swapped(index)) {
            Err(stranded)
        } else {
            Ok(stranded)
        }
    }

    /// After an internal error, the program's free of block `id` at `addr` of itermem's
    /// allocator (false: no live block starts there). As real `cudaFree`, the host waits for
    /// the device first: itermem no longer knows which streams use the block, and its memory
    /// (its own, or mapped host memory) is released at once. A tensor still away whose range
    /// the block held comes back now, before the program's next call: the plan lent a range
    /// only within its tensor's absence, so the program frees the borrower before it uses the
    /// tensor again.
    pub fn free_after_error(&mut self, addr: u64, id: AllocId) -> bool {
        if self.executor.is_none() {
            return self.free(addr, id);
        }
        cuda::synchronize();
        let freed = self.free(addr, id);
        self.release_finished_host_frees();
        if freed && self.executor.as_ref().is_some_and(|e| !e.away.is_empty()) {
            let left = self.restore_all();
            log::info!("after the internal error: {left} tensor(s) still away");
            self.release_idle_retired_pools();
        }
        freed
    }

    /// After an internal error, a device malloc the real allocator refused even after the
    /// pools nothing used were given back: mapped host memory, as before the error past the
    /// limit (swap mode promised the program that it fits). None outside swap mode.
    pub fn host_backed_after_error(&mut self, size: u64) -> Option<u64> {
        self.executor.as_ref()?;
        self.host_backed_malloc(size)
    }

    /// Whether a tensor still away waits for a block that the plan swaps out before that
    /// tensor's swap-in, `index` being the event the program is at: the plan brings the
    /// tensor back once that block is away, a swap-out that no longer happens after the
    /// error, so the program would use the tensor before the block's free (Adam's layers take
    /// turns in one range this way). A block the plan does not swap out before then is freed
    /// by then, as the executor's own swap-in waits for it.
    fn held_by_swapped(&self, index: u64) -> bool {
        let Some(exec) = self.executor.as_ref() else {
            return false;
        };
        let (Some(schedule), true) = (exec.schedule.as_ref(), exec.following) else {
            return false;
        };
        let Some(pool) = self.pools.last() else {
            return false;
        };
        let Some(at) = index.checked_sub(pool.plan.start) else {
            return false;
        };
        let position = (at % pool.plan.length) as usize;
        // The last op the program has made in this iteration (None: none yet).
        let now = (schedule
            .op_at
            .get(..=position)
            .unwrap_or(&schedule.op_at)
            .iter())
        .rev()
        .find(|&&op| op != NOT_AN_OP)
        .map(|&op| op as usize);
        let mut outs: FxHashMap<AllocId, Vec<usize>> = FxHashMap::default();
        for (op, swaps) in schedule.outs_after.iter().enumerate() {
            for &swap in swaps {
                if let Some(id) =
                    (schedule.swaps.get(swap as usize)).and_then(|p| exec.swapped_id(p))
                {
                    outs.entry(id).or_default().push(op);
                }
            }
        }
        let turns = self.swap_in_turns();
        let after_now = |op: usize| now.is_none_or(|now| op > now);
        exec.away.values().any(|a| {
            // A tensor the plan does not bring back is not used again.
            let Some(&turn) = turns.get(&a.host).filter(|_| a.alias.is_none()) else {
                return false;
            };
            // A swap-in already due waits for whatever comes before the iteration's end.
            let due = if after_now(turn) {
                turn
            } else {
                schedule.outs_after.len()
            };
            (self.pools.iter())
                .filter(|pool| pool.base == a.pool)
                .flat_map(|pool| pool.overlapping(a.offset, a.end))
                .any(|(_, _, holder)| {
                    let swapped_out = (outs.get(&holder).into_iter().flatten())
                        .any(|&op| after_now(op) && op < due);
                    if swapped_out {
                        log::debug!(
                            "a tensor away (swap-in before op {turn}) waits for block {holder}, \
                             which the plan swaps out after ops {:?} (now at op {now:?})",
                            outs.get(&holder)
                        );
                    }
                    swapped_out
                })
        })
    }

    /// The plan's order of its swap-ins: the op each is queued before, by host slot address.
    fn swap_in_turns(&self) -> FxHashMap<u64, usize> {
        let mut turns = FxHashMap::default();
        let Some(exec) = self.executor.as_ref() else {
            return turns;
        };
        let Some(schedule) = exec.schedule.as_ref() else {
            return turns;
        };
        for (op, swaps) in schedule.ins_before.iter().enumerate() {
            for &swap in swaps {
                if let Some(planned) = schedule.swaps.get(swap as usize) {
                    turns.insert(exec.host_base + planned.host_offset, op);
                }
            }
        }
        turns
    }

    /// A block taken into a pool whose range borrowers hold gets memory of its own again at its
    /// own addresses (device memory, else host memory): how it comes back when the plan can no
    /// longer bring it. True if it has.
    fn detach_block(&mut self, va: u64) -> bool {
        let Some(exec) = self.executor.as_mut() else {
            return false;
        };
        let Some((block, _)) = exec.blocks.get_mut(&va) else {
            return false;
        };
        let Some(on_host) = [false, true]
            .into_iter()
            .find(|&on_host| block.remap_own(on_host))
        else {
            return false;
        };
        let rounded = block.rounded;
        *exec.own_memory(on_host) += rounded;
        true
    }

    /// Whether a tensor that is away starts at `addr`.
    pub(in crate::interposer) fn is_away_start(&self, addr: u64) -> bool {
        self.executor.as_ref().is_some_and(|e| {
            (e.away.values()).any(|a| a.alias.is_none() && a.pool + a.offset == addr)
        })
    }

    /// Whether a tensor of the pool at `base` is away (its range must stay for its return).
    pub(in crate::interposer) fn has_away_in(&self, base: u64) -> bool {
        self.executor
            .as_ref()
            .is_some_and(|e| e.away.values().any(|a| a.pool == base))
    }

    /// Takes back the block just served at `addr`; true.
    pub(in crate::interposer) fn undo_serve(&mut self, addr: u64) -> bool {
        if let Some(pool) = self.pools.iter_mut().find(|p| p.contains(addr)) {
            pool.release(addr);
        }
        true
    }

    /// The start of the away block containing `addr` (an interior pointer into a tensor whose
    /// bytes are on the host).
    pub(in crate::interposer) fn away_start(&self, addr: u64) -> Option<u64> {
        let exec = self.executor.as_ref()?;
        exec.away
            .values()
            .find(|a| a.alias.is_none() && addr >= a.pool + a.offset && addr < a.pool + a.end)
            .map(|a| a.pool + a.offset)
    }
}

impl Pool {
    /// The planned slot position of a malloc at event `index`.
    pub fn position(&self, index: u64) -> Option<u64> {
        Some(index.checked_sub(self.plan.start)? % self.plan.length)
    }
}
