//! Where the policies' memory comes from: a [`RegionSource`] hands out regions (one
//! `cudaMalloc` each), and [`FakeAddressSpace`] is the source of the offline simulations.
//!
//! The policies never free a region (neither cnmem nor the caching allocator without
//! `empty_cache` shrinks), so the trait has a single method; whoever owns the allocator gets the
//! regions back with `into_parts` and may release them at teardown.

/// One region obtained from a [`RegionSource`]: `[base, base + size)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Region {
    pub base: u64,
    pub size: u64,
}

impl Region {
    /// One past the last byte (`base + size`; a source never returns a region that overflows).
    pub fn end(&self) -> u64 {
        self.base + self.size
    }

    pub fn contains(&self, addr: u64) -> bool {
        self.base <= addr && addr < self.end()
    }
}

/// A supplier of device memory regions: `cudaMalloc` online, a fake address space offline.
///
/// Contract: a returned region `[base, base + bytes)` does not overflow `u64`, does not overlap
/// any region returned before, and stays valid as long as the allocator that asked for it lives.
/// Regions may be adjacent (real `cudaMalloc` often returns back-to-back blocks): the policies
/// never merge across region boundaries anyway.
pub trait RegionSource {
    /// Obtains a new region of exactly `bytes` (> 0) bytes and returns its base address, or
    /// `None` when the device has no memory left.
    fn grow(&mut self, bytes: u64) -> Option<u64>;
}

impl<S: RegionSource + ?Sized> RegionSource for &mut S {
    fn grow(&mut self, bytes: u64) -> Option<u64> {
        (**self).grow(bytes)
    }
}

impl<S: RegionSource + ?Sized> RegionSource for Box<S> {
    fn grow(&mut self, bytes: u64) -> Option<u64> {
        (**self).grow(bytes)
    }
}

/// The region source of offline simulations: regions are laid out back to back from
/// [`FakeAddressSpace::BASE`] upwards, each starting at a multiple of `align` (512 B by
/// default, the granularity of both cnmem and the caching allocator, so regions of those
/// policies end up exactly adjacent, as successive `cudaMalloc`s on cuda-shim do). An optional
/// capacity bounds the sum of the region sizes, like a device's memory.
///
/// Invariant: `next` = end of the last region handed out (or `BASE`); `reserved` = Σ sizes
/// handed out ≤ `capacity`.
#[derive(Clone, Debug)]
pub struct FakeAddressSpace {
    next: u64,
    align: u64,
    capacity: u64,
    reserved: u64,
}

impl FakeAddressSpace {
    /// Where the first region starts: non-zero, so that no address is mistaken for NULL, and
    /// round, so that offsets are easy to read in a debugger.
    pub const BASE: u64 = 1 << 32;

    /// An unbounded address space with 512-byte alignment.
    pub fn new() -> FakeAddressSpace {
        FakeAddressSpace {
            next: Self::BASE,
            align: 512,
            capacity: u64::MAX,
            reserved: 0,
        }
    }

    /// A space that refuses to grow beyond `capacity` bytes in total.
    pub fn with_capacity(capacity: u64) -> FakeAddressSpace {
        FakeAddressSpace {
            capacity,
            ..FakeAddressSpace::new()
        }
    }

    /// Regions start at multiples of `align` (a power of two), leaving gaps after regions whose
    /// size is not a multiple of it.
    pub fn with_alignment(mut self, align: u64) -> FakeAddressSpace {
        assert!(align.is_power_of_two(), "alignment must be a power of two");
        self.align = align;
        self
    }

    /// Total bytes handed out so far.
    pub fn reserved(&self) -> u64 {
        self.reserved
    }
}

impl Default for FakeAddressSpace {
    fn default() -> Self {
        FakeAddressSpace::new()
    }
}

impl RegionSource for FakeAddressSpace {
    fn grow(&mut self, bytes: u64) -> Option<u64> {
        if bytes == 0 || self.capacity - self.reserved < bytes {
            return None;
        }
        let base = self.next.checked_next_multiple_of(self.align)?;
        let end = base.checked_add(bytes)?;
        self.next = end;
        self.reserved += bytes;
        Some(base)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_are_back_to_back_and_capacity_bounded() {
        let mut space = FakeAddressSpace::with_capacity(2048);
        assert_eq!(space.grow(512), Some(FakeAddressSpace::BASE));
        assert_eq!(space.grow(1024), Some(FakeAddressSpace::BASE + 512));
        assert_eq!(space.grow(1024), None, "beyond the capacity");
        assert_eq!(space.grow(512), Some(FakeAddressSpace::BASE + 1536));
        assert_eq!(space.reserved(), 2048);
        assert_eq!(space.grow(0), None);
    }

    #[test]
    fn alignment_leaves_gaps() {
        let mut space = FakeAddressSpace::new().with_alignment(4096);
        let a = space.grow(100).unwrap();
        let b = space.grow(100).unwrap();
        assert_eq!(b - a, 4096);
        assert_eq!(space.reserved(), 200);
    }
}
