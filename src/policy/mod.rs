//! Allocation-policy baselines: what memory other allocators would need for the same program.
//!
//! The module owns three policies, each written once and used twice: offline, replayed on a
//! [`crate::plan::Instance`] over a [`FakeAddressSpace`] to measure a footprint; online (the
//! interposer's `ITERMEM_MODE=cnmem`), driven by the application's `cudaMalloc`/`cudaFree` over a
//! [`RegionSource`] that calls the real `cudaMalloc`.
//!
//! - [`Cnmem`] — NVIDIA's cnmem as used by Theano and Caffe: 512 B rounding, address-ordered
//!   best fit, allocation at the low end of the block, one exactly-sized `cudaMalloc` per miss,
//!   no merging across `cudaMalloc` boundaries, never shrinks. Its module doc lists the rules
//!   read in the real source; `tests/cnmem.rs` compares it with the real library.
//! - [`CachingAllocator`] — PyTorch's CUDA caching allocator, default configuration (small and
//!   large pools, 2 MiB / 20 MiB / rounded segments, best fit with splitting thresholds).
//! - `cudaMalloc` (exact) — every buffer is its own `cudaMalloc`, freed when the buffer dies:
//!   see [`CudaMallocModel`] for the granularity rule.
//!
//! [`sim`] replays an instance through them ([`simulate`], [`Policy`]) and returns the footprint
//! and every placement. The invariants every simulation satisfies (checked by
//! [`Simulation::validate`] and the property tests):
//!
//!   overlapping lifetimes ⇒ disjoint address ranges,
//!   each block ⊂ its region,
//!   footprint ≥ peak of Σ live rounded sizes.
//!
//! Why an abstract region source instead of a fixed pool: cnmem's footprint *is* its sequence of
//! `cudaMalloc`s (a reservation plus one region per miss), and adjacent regions must stay
//! unmergeable exactly as with real `cudaMalloc`, so the policy must see each region as a unit.

mod arena;
pub mod caching;
pub mod cnmem;
mod region;
pub mod sim;

pub use caching::{CachingAllocator, Pool};
pub use cnmem::{CNMEM_GRANULARITY, Cnmem, CnmemConfig};
pub use region::{FakeAddressSpace, Region, RegionSource};
pub use sim::{
    CNMEM_TUNING_STEPS, CnmemTuning, CudaMallocModel, Op, Placement, PlacementError, Policy,
    Simulation, replay, replay_order, simulate, simulate_caching, simulate_cnmem,
    simulate_cuda_malloc, simulate_until, tune_cnmem, unbounded_reservation,
};

use std::fmt;

/// The interface the policies share: enough for the replay and for the interposer's hooks.
pub trait BlockAllocator {
    /// Allocates `size` (> 0) bytes; returns the block's address.
    fn alloc(&mut self, size: u64) -> Result<u64, PolicyError>;
    /// Frees the block at `addr`; returns its size.
    fn free(&mut self, addr: u64) -> Result<u64, PolicyError>;
    /// Size of the allocated block at `addr` (≥ the request: rounding, unsplit remainders).
    fn block_size(&self, addr: u64) -> Option<u64>;
    /// Σ sizes of the regions obtained from the source: the policy's footprint so far.
    fn reserved(&self) -> u64;
    /// Σ sizes of the allocated blocks.
    fn in_use(&self) -> u64;
    /// Index (into [`BlockAllocator::regions`]) and bounds of the region holding `addr`.
    fn region_of(&self, addr: u64) -> Option<(usize, Region)>;
    /// Every region obtained so far.
    fn regions(&self) -> Vec<Region>;
}

/// Why a policy could not serve a call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PolicyError {
    /// A request of 0 bytes. Real cnmem returns NULL with success and `cudaMalloc(0)` returns
    /// success with NULL; the caller (the hook) does the same without asking the policy.
    ZeroSize,
    /// Rounding `size` up overflows `u64`.
    SizeOverflow { size: u64 },
    /// No free block fits `size` (rounded) bytes and the source refused a region (or growth is
    /// forbidden); `reserved` is what the policy held at that moment.
    OutOfMemory { size: u64, reserved: u64 },
    /// `addr` is not the start of an allocated block (double free, foreign pointer).
    UnknownAddress { addr: u64 },
    /// The region source returned an empty, overflowing or overlapping region.
    BadRegion { base: u64, size: u64 },
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PolicyError::ZeroSize => write!(f, "a request of 0 bytes"),
            PolicyError::SizeOverflow { size } => {
                write!(f, "a request of {size} bytes overflows when rounded up")
            }
            PolicyError::OutOfMemory { size, reserved } => write!(
                f,
                "out of memory: no free block of {size} bytes and no new region \
                 ({reserved} bytes reserved)"
            ),
            PolicyError::UnknownAddress { addr } => {
                write!(f, "{addr:#x} is not the start of an allocated block")
            }
            PolicyError::BadRegion { base, size } => write!(
                f,
                "the region source returned an unusable region of {size} bytes at {base:#x}"
            ),
        }
    }
}

impl std::error::Error for PolicyError {}

/// `value` rounded up to a multiple of `to` (> 0).
pub fn round_up(value: u64, to: u64) -> Result<u64, PolicyError> {
    value
        .checked_next_multiple_of(to)
        .ok_or(PolicyError::SizeOverflow { size: value })
}

#[cfg(test)]
mod tests;
