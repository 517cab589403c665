//! Alignment: every planned size is rounded up to a multiple of the pool's granularity.
//!
//! Allocators hand out blocks in units (cnmem and PyTorch's caching allocator use 512 bytes),
//! so the planner does too: buffer `i` occupies `aligned(size_i) = ⌈size_i / a⌉ · a` bytes and
//! every offset is a multiple of `a`. Because every aligned size is a multiple of `a`, a planner
//! that only ever places a buffer at 0 or at the end of another buffer produces aligned offsets
//! for free. `a = 1` means no alignment.
//!
//! Everything a planner reports is in aligned bytes: the footprint, and the lower bound, which
//! is the peak resident bytes of the *aligned* sizes (`max_t Σ_{i resident at t}
//! aligned(size_i)`; resident = live and not in an absence window, see [`Instance::resident`]).
//! The peak of the unaligned sizes is reported next to it ([`Bounds::unaligned_peak`]) so that
//! ratios can be compared with tools that do not align (MiniMalloc, idealloc).

use std::num::NonZeroU64;

use super::Instance;

/// The granularity of the pool, in bytes: a positive integer (not necessarily a power of two).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Alignment(NonZeroU64);

impl Alignment {
    /// 512 bytes, the granularity of cnmem and of PyTorch's caching allocator.
    pub const DEFAULT: Alignment = Alignment(NonZeroU64::new(512).unwrap());
    /// No rounding: sizes are planned as given.
    pub const NONE: Alignment = Alignment(NonZeroU64::MIN);

    /// `None` for 0, which is not a granularity.
    pub const fn new(bytes: u64) -> Option<Alignment> {
        match NonZeroU64::new(bytes) {
            Some(a) => Some(Alignment(a)),
            None => None,
        }
    }

    pub const fn get(self) -> u64 {
        self.0.get()
    }

    /// `⌈size / a⌉ · a`, or `None` when that does not fit in a `u64`.
    pub fn round_up(self, size: u64) -> Option<u64> {
        let a = self.get();
        match size % a {
            0 => Some(size),
            r => size.checked_add(a - r),
        }
    }

    pub fn is_aligned(self, offset: u64) -> bool {
        offset.is_multiple_of(self.get())
    }
}

impl Default for Alignment {
    fn default() -> Alignment {
        Alignment::DEFAULT
    }
}

/// The two lower bounds of an instance: no placement can have a smaller footprint than
/// `aligned_peak` (with this alignment) or than `unaligned_peak` (with none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    pub alignment: Alignment,
    /// `max_t Σ_{i resident at t} aligned(size_i)`: the lower bound every ratio is measured
    /// against.
    pub aligned_peak: u64,
    /// `max_t Σ_{i resident at t} size_i`: [`Instance::peak_live`].
    pub unaligned_peak: u64,
}

impl Bounds {
    /// `None` when an aligned size or the sum of all aligned sizes overflows a `u64` (then no
    /// plan is representable, see [`super::PlanError::TooLarge`]).
    pub fn of(instance: &Instance, alignment: Alignment) -> Option<Bounds> {
        let sizes = aligned_sizes(instance, alignment)?;
        Some(Bounds {
            alignment,
            aligned_peak: peak_of(instance, &sizes),
            unaligned_peak: instance.peak_live(),
        })
    }
}

/// The aligned size of every buffer, in instance order, provided their sum fits in a `u64`.
///
/// That proviso is what lets every planner use plain `u64` arithmetic: a buffer placed at 0 or
/// on top of other buffers ends at most at `Σ aligned(size_i)`.
pub(crate) fn aligned_sizes(instance: &Instance, alignment: Alignment) -> Option<Vec<u64>> {
    let mut total: u64 = 0;
    let mut sizes = Vec::with_capacity(instance.len());
    for b in instance.buffers() {
        let s = alignment.round_up(b.size)?;
        total = total.checked_add(s)?;
        sizes.push(s);
    }
    Some(sizes)
}

/// `max_t Σ_{i resident at t} sizes[i]` (frees before allocations at equal times:
/// half-open).
pub(crate) fn peak_of(instance: &Instance, sizes: &[u64]) -> u64 {
    let mut changes: Vec<(u64, bool, u64)> = Vec::with_capacity(2 * sizes.len());
    for (i, &s) in sizes.iter().enumerate() {
        for (lower, upper) in instance.resident(i) {
            changes.push((lower, true, s));
            changes.push((upper, false, s));
        }
    }
    changes.sort_unstable_by_key(|&(time, alloc, _)| (time, alloc));
    let (mut live, mut peak) = (0u64, 0u64);
    for (_, alloc, s) in changes {
        if alloc {
            // Cannot overflow: the sum of all sizes fits (see `aligned_sizes`).
            live += s;
            peak = peak.max(live);
        } else {
            live -= s;
        }
    }
    peak
}
