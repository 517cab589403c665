//! Offline simulation: an [`Instance`] replayed through a policy, giving its footprint and every
//! buffer's placement.
//!
//! **Replay order** ([`replay_order`]). An instance has lifetimes, not a call sequence; the
//! sequence is rebuilt as: at each event time t, first the frees of the buffers with
//! `upper == t`, then the allocations of the buffers with `lower == t`; within each group by
//! ascending id. Frees first is what the half-open convention means (a buffer is not live at its
//! `upper`, so one born at that instant may take its place). The order among frees of one instant
//! does not change any policy here (coalescing gives the same free blocks in any order); the order
//! among allocations does, and ascending id is the documented choice. Instances imported from a
//! trace have one event per instant, so for them the order is the program's.
//!
//! **Footprints** ([`Policy`]):
//! - `Cnmem` — one initial reservation, tuned as a user would: the smallest reservation found
//!   under which cnmem never grows ([`tune_cnmem`]). The starting point is the high-water mark H:
//!   replay in one unbounded region and take the largest end offset reached. H alone is not
//!   always enough: a bounded region is not the same machine as an unbounded one, because its
//!   free tail block is finite, so best fit may take the tail where the unbounded run took
//!   another block, and from there the run differs and may grow (7 of 60 random instances of the
//!   property test; growth then cost up to +89 %; real cnmem does the same, see the `H` runs of
//!   `tests/cnmem.rs`). The same unbounded run also yields a *safe*
//!   reservation S ≥ H from which on every reservation provably repeats the unbounded run (at
//!   each allocation that took a block other than the tail, S ≥ tail start + that block's size,
//!   so the tail never wins). The tuning tries H, then 15 evenly spaced steps up to S, then S,
//!   and keeps the first that does not grow; the footprint is that reservation. Since cnmem is
//!   not monotone in the reservation, a smaller non-growing reservation may exist (even below H);
//!   no exhaustive search is attempted.
//! - `CnmemGrow` — no reservation, one exactly-sized region per miss; footprint = Σ regions.
//! - `CudaMalloc` — see [`CudaMallocModel`].
//! - `Caching` — PyTorch's caching allocator; footprint = Σ segments.

use super::{
    BlockAllocator, CNMEM_GRANULARITY, CachingAllocator, Cnmem, CnmemConfig, FakeAddressSpace,
    PolicyError, Region, round_up,
};
use crate::plan::Instance;
use std::collections::BTreeMap;
use std::fmt;

/// One step of a replay; the index is into `instance.buffers()`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Alloc(usize),
    Free(usize),
}

/// The call sequence of an instance (module doc): by time, frees before allocations, then id.
pub fn replay_order(instance: &Instance) -> Vec<Op> {
    let buffers = instance.buffers();
    let mut keyed: Vec<((u64, bool, u64), Op)> = Vec::with_capacity(2 * buffers.len());
    for (i, b) in buffers.iter().enumerate() {
        keyed.push(((b.upper, false, b.id), Op::Free(i)));
        keyed.push(((b.lower, true, b.id), Op::Alloc(i)));
    }
    keyed.sort_unstable_by_key(|&(key, _)| key);
    keyed.into_iter().map(|(_, op)| op).collect()
}

/// Where a policy put one buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    pub id: u64,
    pub address: u64,
    /// Index into [`Simulation::regions`].
    pub region: usize,
    /// `address − regions[region].base`.
    pub offset: u64,
    /// Bytes the policy gave the buffer (≥ its size: rounding, unsplit remainders).
    pub size: u64,
}

/// The result of replaying an instance through a policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Simulation {
    /// Device bytes the policy needed: Σ regions for the pooling policies, the peak of the live
    /// rounded sizes for `cudaMalloc`.
    pub footprint: u64,
    /// One per buffer, in the order of `instance.buffers()`.
    pub placements: Vec<Placement>,
    /// The regions (`cudaMalloc`s) in the order they were made.
    pub regions: Vec<Region>,
}

/// A simulation that breaks an invariant (found by [`Simulation::validate`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlacementError {
    /// Buffers `a` and `b` are live at the same time and their ranges intersect.
    Overlap { a: u64, b: u64 },
    /// Buffer `id` does not lie inside its region.
    OutsideRegion { id: u64 },
    /// The simulation does not have one placement per buffer, in order.
    Mismatch,
}

impl fmt::Display for PlacementError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlacementError::Overlap { a, b } => {
                write!(f, "buffers {a} and {b} are live together and overlap")
            }
            PlacementError::OutsideRegion { id } => {
                write!(f, "buffer {id} lies outside its region")
            }
            PlacementError::Mismatch => write!(f, "placements do not match the instance"),
        }
    }
}

impl std::error::Error for PlacementError {}

impl Simulation {
    /// Checks, independently of the policy, that no two buffers live at the same time share a
    /// byte and that each block lies in its region: a sweep in replay order over an interval
    /// map of the live blocks, O(n log n).
    pub fn validate(&self, instance: &Instance) -> Result<(), PlacementError> {
        let buffers = instance.buffers();
        if self.placements.len() != buffers.len()
            || self
                .placements
                .iter()
                .zip(buffers)
                .any(|(p, b)| p.id != b.id)
        {
            return Err(PlacementError::Mismatch);
        }
        for p in &self.placements {
            let inside = self.regions.get(p.region).is_some_and(|r| {
                r.base.checked_add(p.offset) == Some(p.address)
                    && p.offset
                        .checked_add(p.size)
                        .is_some_and(|end| end <= r.size)
            });
            if !inside {
                return Err(PlacementError::OutsideRegion { id: p.id });
            }
        }
        // start → (end, id) of the live blocks.
        let mut live: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
        for op in replay_order(instance) {
            match op {
                Op::Free(i) => {
                    live.remove(&self.placements[i].address);
                }
                Op::Alloc(i) => {
                    let p = &self.placements[i];
                    let end = p.address + p.size;
                    let below = live.range(..=p.address).next_back();
                    let above = live.range(p.address..).next();
                    let clash = match (below, above) {
                        (Some((_, &(prev_end, other))), _) if prev_end > p.address => Some(other),
                        (_, Some((&next_start, &(_, other)))) if next_start < end => Some(other),
                        _ => None,
                    };
                    if let Some(other) = clash {
                        return Err(PlacementError::Overlap { a: other, b: p.id });
                    }
                    live.insert(p.address, (end, p.id));
                }
            }
        }
        Ok(())
    }
}

/// Replays `instance` through `allocator` in [`replay_order`]; returns one placement per buffer
/// (regions numbered as in `allocator.regions()`).
pub fn replay<A: BlockAllocator>(
    instance: &Instance,
    allocator: &mut A,
) -> Result<Vec<Placement>, PolicyError> {
    completed(Replay::new(instance, &never).placements(allocator))
}

/// cnmem with an initial reservation of `reservation` bytes (0 = none) and growth allowed.
pub fn simulate_cnmem(instance: &Instance, reservation: u64) -> Result<Simulation, PolicyError> {
    completed(Replay::new(instance, &never).cnmem(reservation))
}

/// A reservation that makes cnmem behave as with an unbounded region: twice Σ of all rounded
/// sizes (at least 512).
///
/// Why it suffices: in one region, an allocation only extends the used prefix by its own size,
/// so the end offset e of the prefix stays ≤ Σ; the free tail block is then ≥ 2Σ − e ≥ Σ ≥ e ≥
/// any other free block (all lie below e). Best fit therefore takes the tail only when no other
/// block fits, and on a size tie the other block wins by its lower address: exactly the choices
/// made with an infinite tail.
pub fn unbounded_reservation(instance: &Instance) -> Result<u64, PolicyError> {
    let mut total: u64 = 0;
    for b in instance.buffers() {
        let rounded = round_up(b.size, CNMEM_GRANULARITY)?;
        total = total
            .checked_add(rounded)
            .ok_or(PolicyError::SizeOverflow { size: b.size })?;
    }
    total
        .checked_mul(2)
        .map(|r| r.max(CNMEM_GRANULARITY))
        .ok_or(PolicyError::SizeOverflow { size: total })
}

/// How the `Cnmem` policy's reservation was chosen (module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct CnmemTuning {
    /// H: the largest end offset reached when replaying in one unbounded region.
    pub high_water: u64,
    /// S ≥ H: every reservation ≥ S repeats the unbounded run exactly, hence never grows.
    pub safe_reservation: u64,
    /// The first of H, the [`CNMEM_TUNING_STEPS`] − 1 evenly spaced steps between H and S
    /// (rounded up to 512), and S under which the run does not grow.
    pub reservation: u64,
}

/// Number of steps between the high-water mark and the safe reservation tried by [`tune_cnmem`].
pub const CNMEM_TUNING_STEPS: u64 = 16;

/// Finds the reservation of the `Cnmem` policy (module doc): one replay in an unbounded region
/// ([`unbounded_reservation`]) gives H and S, then at most [`CNMEM_TUNING_STEPS`] probe replays
/// without growth (each abandoned at its first miss) pick the first reservation that suffices;
/// S itself needs no probe.
pub fn tune_cnmem(instance: &Instance) -> Result<CnmemTuning, PolicyError> {
    completed(Replay::new(instance, &never).tune())
}

/// Calls of a replay between two questions to its `stop` ([`simulate_until`]).
const STOP_EVERY: usize = 1024;

/// The `stop` of a replay that always completes.
fn never() -> bool {
    false
}

/// What a replay that is never stopped returns.
fn completed<T>(result: Result<Option<T>, PolicyError>) -> Result<T, PolicyError> {
    result.map(|done| done.expect("a replay that is never stopped completes"))
}

/// The replays of one simulation: the instance, its call sequence, sorted once for all of them
/// (the tuned cnmem replays it up to [`CNMEM_TUNING_STEPS`] + 2 times), and the `stop` each
/// asks every [`STOP_EVERY`] calls: a replay is abandoned (`Ok(None)`) once it returns true.
struct Replay<'a> {
    instance: &'a Instance,
    order: Vec<Op>,
    stop: &'a dyn Fn() -> bool,
}

impl<'a> Replay<'a> {
    fn new(instance: &'a Instance, stop: &'a dyn Fn() -> bool) -> Replay<'a> {
        Replay {
            instance,
            order: replay_order(instance),
            stop,
        }
    }

    /// Whether the replay must stop before its `k`-th call.
    fn stops_at(&self, k: usize) -> bool {
        k.is_multiple_of(STOP_EVERY) && (self.stop)()
    }

    /// [`replay`].
    fn placements<A: BlockAllocator>(
        &self,
        allocator: &mut A,
    ) -> Result<Option<Vec<Placement>>, PolicyError> {
        let buffers = self.instance.buffers();
        let mut placements: Vec<Option<Placement>> = vec![None; buffers.len()];
        for (k, &op) in self.order.iter().enumerate() {
            if self.stops_at(k) {
                return Ok(None);
            }
            match op {
                Op::Alloc(i) => {
                    let address = allocator.alloc(buffers[i].size)?;
                    let size = allocator
                        .block_size(address)
                        .expect("a block just allocated has a size");
                    let (region, bounds) = allocator
                        .region_of(address)
                        .expect("a block just allocated lies in a region");
                    placements[i] = Some(Placement {
                        id: buffers[i].id,
                        address,
                        region,
                        offset: address - bounds.base,
                        size,
                    });
                }
                Op::Free(i) => {
                    let address = placements[i]
                        .expect("replay_order frees a buffer after allocating it")
                        .address;
                    allocator.free(address)?;
                }
            }
        }
        Ok(Some(
            placements
                .into_iter()
                .map(|p| p.expect("every buffer is allocated once"))
                .collect(),
        ))
    }

    fn run<A: BlockAllocator>(&self, mut allocator: A) -> Result<Option<Simulation>, PolicyError> {
        let Some(placements) = self.placements(&mut allocator)? else {
            return Ok(None);
        };
        Ok(Some(Simulation {
            footprint: allocator.reserved(),
            placements,
            regions: allocator.regions(),
        }))
    }

    /// [`simulate_cnmem`].
    fn cnmem(&self, reservation: u64) -> Result<Option<Simulation>, PolicyError> {
        let cnmem = Cnmem::new(
            FakeAddressSpace::new(),
            CnmemConfig {
                reservation,
                can_grow: true,
            },
        )?;
        self.run(cnmem)
    }

    /// [`tune_cnmem`].
    fn tune(&self) -> Result<Option<CnmemTuning>, PolicyError> {
        let instance = self.instance;
        if instance.is_empty() {
            return Ok(Some(CnmemTuning::default()));
        }
        let mut cnmem = Cnmem::new(
            FakeAddressSpace::new(),
            CnmemConfig {
                reservation: unbounded_reservation(instance)?,
                can_grow: false,
            },
        )?;
        let base = cnmem.regions()[0].base;
        let buffers = instance.buffers();
        let mut addresses = vec![0u64; buffers.len()];
        let (mut high_water, mut safe) = (0u64, 0u64);
        for (k, &op) in self.order.iter().enumerate() {
            if self.stops_at(k) {
                return Ok(None);
            }
            match op {
                Op::Alloc(i) => {
                    let size = buffers[i].size;
                    // The unbounded region always has a free tail and always fits (see
                    // `unbounded_reservation`).
                    let tail = cnmem.last_free_block().map(|(a, _)| a);
                    let chosen = cnmem.best_fit(size);
                    let address = cnmem.alloc(size)?;
                    let end = address - base + cnmem.block_size(address).unwrap_or(0);
                    high_water = high_water.max(end);
                    match (tail, chosen) {
                        (Some(tail), Some((chosen, chosen_size))) if chosen != tail => {
                            safe = safe.max(tail - base + chosen_size);
                        }
                        _ => {}
                    }
                    addresses[i] = address;
                }
                Op::Free(i) => {
                    cnmem.free(addresses[i])?;
                }
            }
        }
        let safe = safe.max(high_water);
        let step = (safe - high_water).div_ceil(CNMEM_TUNING_STEPS);
        let mut reservation = safe;
        for k in 0..CNMEM_TUNING_STEPS {
            let candidate = round_up(high_water + k * step, CNMEM_GRANULARITY)?.min(safe);
            match self.fits_without_growth(candidate)? {
                Some(true) => {
                    reservation = candidate;
                    break;
                }
                Some(false) => {}
                None => return Ok(None),
            }
        }
        Ok(Some(CnmemTuning {
            high_water,
            safe_reservation: safe,
            reservation,
        }))
    }

    /// Whether cnmem with `reservation` serves the whole replay without growing.
    fn fits_without_growth(&self, reservation: u64) -> Result<Option<bool>, PolicyError> {
        let mut cnmem = Cnmem::new(
            FakeAddressSpace::new(),
            CnmemConfig {
                reservation,
                can_grow: false,
            },
        )?;
        match self.placements(&mut cnmem) {
            Ok(done) => Ok(done.map(|_| true)),
            Err(PolicyError::OutOfMemory { .. }) => Ok(Some(false)),
            Err(e) => Err(e),
        }
    }
}

/// PyTorch's caching allocator (default configuration, unlimited device memory).
pub fn simulate_caching(instance: &Instance) -> Result<Simulation, PolicyError> {
    completed(simulate_until(instance, Policy::Caching, &never))
}

/// Plain `cudaMalloc`/`cudaFree` per buffer.
///
/// Rule: footprint = max over time of Σ `round_up(size, granularity)` over the live buffers,
/// with a default granularity of 512 B. Why 512 B: it is the rounding cnmem and PyTorch apply
/// themselves, so the gap between this baseline and theirs is exactly their packing and caching
/// overhead, and it equals the lower bound "peak of live 512-rounded sizes" — the footprint of
/// an ideal allocator that never fragments. Real CUDA is coarser (the driver maps 2 MiB pages and
/// sub-allocates small requests inside them, so `nvidia-smi` moves in 2 MiB steps); cuda-shim
/// counts 256-byte granules (`peak_device_bytes`). Set `granularity` to 256 to match the shim.
/// Placements: each buffer gets a fresh region (its own `cudaMalloc`), never reused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CudaMallocModel {
    pub granularity: u64,
}

impl Default for CudaMallocModel {
    fn default() -> Self {
        CudaMallocModel { granularity: 512 }
    }
}

/// The `cudaMalloc` baseline under `model` (see [`CudaMallocModel`]).
pub fn simulate_cuda_malloc(
    instance: &Instance,
    model: CudaMallocModel,
) -> Result<Simulation, PolicyError> {
    use super::RegionSource;
    let granularity = model.granularity.max(1);
    let buffers = instance.buffers();
    let mut space = FakeAddressSpace::new().with_alignment(granularity.next_power_of_two());
    let mut placements: Vec<Option<Placement>> = vec![None; buffers.len()];
    let mut regions = Vec::with_capacity(buffers.len());
    let (mut live, mut peak) = (0u64, 0u64);
    for op in replay_order(instance) {
        match op {
            Op::Alloc(i) => {
                let size = round_up(buffers[i].size, granularity)?;
                let address = space.grow(size).ok_or(PolicyError::SizeOverflow { size })?;
                placements[i] = Some(Placement {
                    id: buffers[i].id,
                    address,
                    region: regions.len(),
                    offset: 0,
                    size,
                });
                regions.push(Region {
                    base: address,
                    size,
                });
                live += size;
                peak = peak.max(live);
            }
            Op::Free(i) => {
                live -= placements[i]
                    .expect("replay_order frees a buffer after allocating it")
                    .size;
            }
        }
    }
    Ok(Simulation {
        footprint: peak,
        placements: placements
            .into_iter()
            .map(|p| p.expect("every buffer is allocated once"))
            .collect(),
        regions,
    })
}

/// The baselines, by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Policy {
    /// cnmem with the tuned reservation ([`tune_cnmem`]).
    Cnmem,
    /// cnmem from empty, growing by exactly-sized regions.
    CnmemGrow,
    /// Plain `cudaMalloc` with the default [`CudaMallocModel`].
    CudaMalloc,
    /// PyTorch's caching allocator.
    Caching,
}

impl Policy {
    pub const ALL: [Policy; 4] = [
        Policy::Cnmem,
        Policy::CnmemGrow,
        Policy::CudaMalloc,
        Policy::Caching,
    ];

    /// Stable name for reports and command lines.
    pub fn name(self) -> &'static str {
        match self {
            Policy::Cnmem => "cnmem",
            Policy::CnmemGrow => "cnmem_grow",
            Policy::CudaMalloc => "cudamalloc",
            Policy::Caching => "pytorch_caching",
        }
    }

    /// The inverse of [`Policy::name`].
    pub fn from_name(name: &str) -> Option<Policy> {
        Policy::ALL.into_iter().find(|p| p.name() == name)
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Replays `instance` through `policy` (module doc) and returns its footprint and placements.
pub fn simulate(instance: &Instance, policy: Policy) -> Result<Simulation, PolicyError> {
    completed(simulate_until(instance, policy, &never))
}

/// [`simulate`], abandoned (`Ok(None)`) once `stop` returns true: it is asked before anything
/// starts, and by every replay every 1,024 calls. Why: the planner offers these placements
/// under a wall-clock budget (`plan/online.rs`), and nothing else could cut a replay short.
pub fn simulate_until(
    instance: &Instance,
    policy: Policy,
    stop: &dyn Fn() -> bool,
) -> Result<Option<Simulation>, PolicyError> {
    if stop() {
        return Ok(None);
    }
    let replay = || Replay::new(instance, stop);
    match policy {
        Policy::Cnmem => {
            let replay = replay();
            match replay.tune()? {
                Some(tuning) => replay.cnmem(tuning.reservation),
                None => Ok(None),
            }
        }
        Policy::CnmemGrow => replay().cnmem(0),
        Policy::CudaMalloc => simulate_cuda_malloc(instance, CudaMallocModel::default()).map(Some),
        Policy::Caching => replay().run(CachingAllocator::new(FakeAddressSpace::new())),
    }
}
