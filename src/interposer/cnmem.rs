//! cnmem mode (`ITERMEM_MODE=cnmem`): the program's `cudaMalloc`s are served by NVIDIA cnmem's
//! policy ([`crate::policy::Cnmem`]), as Theano and Caffe used it, so its footprint can be
//! compared with SmartPool's on the same run. Regions come from the driver (`cuMemAlloc`),
//! exactly sized on every miss after the initial reservation (`ITERMEM_CNMEM_RESERVATION`,
//! default none), and are never returned until exit.
//!
//! Like real cnmem with one manager, a freed block is reused at once: the policy assumes the
//! program uses its blocks on one stream (or synchronises its streams), as cnmem's users did.

use super::pool::cuda;
use crate::policy::{Cnmem, CnmemConfig, RegionSource};

/// Regions from the real driver.
pub struct DriverRegions;

impl RegionSource for DriverRegions {
    fn grow(&mut self, bytes: u64) -> Option<u64> {
        cuda::malloc(bytes)
    }
}

/// Counters of cnmem mode, for the statistics.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct CnmemStats {
    /// Bytes of all regions (cnmem's footprint: it never shrinks).
    pub reserved_bytes: u64,
    pub regions: u64,
    /// Mallocs served by the policy.
    pub served: u64,
    /// Mallocs the policy could not serve (the device is full), left to the real allocator.
    pub fallback: u64,
}

pub struct CnmemState {
    allocator: Option<Cnmem<DriverRegions>>,
    pub stats: CnmemStats,
}

impl CnmemState {
    pub fn new(reservation: u64) -> CnmemState {
        let config = CnmemConfig {
            reservation,
            can_grow: true,
        };
        let allocator = match Cnmem::new(DriverRegions, config) {
            Ok(allocator) => Some(allocator),
            Err(err) => {
                super::report(format_args!(
                    "cnmem mode cannot reserve its region ({err}); recording only"
                ));
                None
            }
        };
        CnmemState {
            allocator,
            stats: CnmemStats::default(),
        }
    }

    pub fn malloc(&mut self, size: u64) -> Option<u64> {
        let allocator = self.allocator.as_mut()?;
        match allocator.alloc(size) {
            Ok(addr) => {
                self.stats.served += 1;
                self.stats.reserved_bytes = allocator.reserved();
                self.stats.regions = allocator.regions().len() as u64;
                Some(addr)
            }
            Err(_) => {
                self.stats.fallback += 1;
                None
            }
        }
    }

    /// Whether `addr` lies in one of the policy's regions.
    pub fn owns(&self, addr: u64) -> bool {
        self.allocator
            .as_ref()
            .is_some_and(|a| a.region_of(addr).is_some())
    }

    /// Frees the block at `addr`; false if no live block starts there.
    pub fn free(&mut self, addr: u64) -> bool {
        self.allocator
            .as_mut()
            .is_some_and(|a| a.free(addr).is_ok())
    }
}
