//! Counters of one simulated device, readable through `cuShimGetStats` (the calling thread's
//! current device) and written as JSON to `CUDA_SHIM_STATS` at process exit.
//!
//! Counters are plain `Relaxed` atomics: each is an independent tally, nothing is published
//! through them. `current_device_bytes` is only changed under the heap lock, so the peak derived
//! from it is exact.

use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

#[derive(Default)]
pub struct Stats {
    pub capacity_bytes: AtomicU64,
    pub current_device_bytes: AtomicU64,
    pub peak_device_bytes: AtomicU64,
    pub live_device_allocations: AtomicU64,
    pub device_alloc_calls: AtomicU64,
    pub device_free_calls: AtomicU64,
    pub current_pinned_bytes: AtomicU64,
    pub peak_pinned_bytes: AtomicU64,
    pub h2d_bytes: AtomicU64,
    pub d2h_bytes: AtomicU64,
    pub d2d_bytes: AtomicU64,
    pub memset_bytes: AtomicU64,
    pub kernel_launches: AtomicU64,
    pub jitter_digest: AtomicU64,
    pub ptx_thread_instructions: AtomicU64,
    pub ptx_kernel_ns: AtomicU64,
    pub zero_copy_bytes: AtomicU64,
    pub live_events: AtomicU64,
    pub peak_live_events: AtomicU64,
}

/// A consistent-enough copy of the counters, laid out as `struct cudaShimStats` in cuda_shim.h.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct StatsSnapshot {
    pub capacity_bytes: u64,
    pub current_device_bytes: u64,
    pub peak_device_bytes: u64,
    pub live_device_allocations: u64,
    pub device_alloc_calls: u64,
    pub device_free_calls: u64,
    pub current_pinned_bytes: u64,
    pub peak_pinned_bytes: u64,
    pub h2d_bytes: u64,
    pub d2h_bytes: u64,
    pub d2d_bytes: u64,
    pub memset_bytes: u64,
    pub kernel_launches: u64,
    pub jitter_digest: u64,
    /// PTX instructions interpreted, counted once per thread that executed each.
    pub ptx_thread_instructions: u64,
    /// Wall time spent running PTX kernels (their rate is the interpreter's speed).
    pub ptx_kernel_ns: u64,
    /// Bytes of mapped page-locked host memory that kernels and memsets reached (zero-copy,
    /// charged at `CUDA_SHIM_H2D_GBPS`).
    pub zero_copy_bytes: u64,
    /// Events of the device not destroyed (a program or library that creates events faster
    /// than it destroys them shows here).
    pub live_events: u64,
    pub peak_live_events: u64,
}

impl Stats {
    pub fn device_allocated(&self, bytes: u64) {
        let now = self.current_device_bytes.fetch_add(bytes, Relaxed) + bytes;
        self.peak_device_bytes.fetch_max(now, Relaxed);
        self.live_device_allocations.fetch_add(1, Relaxed);
        self.device_alloc_calls.fetch_add(1, Relaxed);
    }

    pub fn device_freed(&self, bytes: u64) {
        self.current_device_bytes.fetch_sub(bytes, Relaxed);
        self.live_device_allocations.fetch_sub(1, Relaxed);
        self.device_free_calls.fetch_add(1, Relaxed);
    }

    pub fn pinned_allocated(&self, bytes: u64) {
        let now = self.current_pinned_bytes.fetch_add(bytes, Relaxed) + bytes;
        self.peak_pinned_bytes.fetch_max(now, Relaxed);
    }

    pub fn pinned_freed(&self, bytes: u64) {
        self.current_pinned_bytes.fetch_sub(bytes, Relaxed);
    }

    pub fn event_created(&self) {
        let now = self.live_events.fetch_add(1, Relaxed) + 1;
        self.peak_live_events.fetch_max(now, Relaxed);
    }

    pub fn event_destroyed(&self) {
        self.live_events.fetch_sub(1, Relaxed);
    }

    pub fn add(counter: &AtomicU64, amount: u64) {
        counter.fetch_add(amount, Relaxed);
    }

    pub fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot {
            capacity_bytes: self.capacity_bytes.load(Relaxed),
            current_device_bytes: self.current_device_bytes.load(Relaxed),
            peak_device_bytes: self.peak_device_bytes.load(Relaxed),
            live_device_allocations: self.live_device_allocations.load(Relaxed),
            device_alloc_calls: self.device_alloc_calls.load(Relaxed),
            device_free_calls: self.device_free_calls.load(Relaxed),
            current_pinned_bytes: self.current_pinned_bytes.load(Relaxed),
            peak_pinned_bytes: self.peak_pinned_bytes.load(Relaxed),
            h2d_bytes: self.h2d_bytes.load(Relaxed),
            d2h_bytes: self.d2h_bytes.load(Relaxed),
            d2d_bytes: self.d2d_bytes.load(Relaxed),
            memset_bytes: self.memset_bytes.load(Relaxed),
            kernel_launches: self.kernel_launches.load(Relaxed),
            jitter_digest: self.jitter_digest.load(Relaxed),
            ptx_thread_instructions: self.ptx_thread_instructions.load(Relaxed),
            ptx_kernel_ns: self.ptx_kernel_ns.load(Relaxed),
            zero_copy_bytes: self.zero_copy_bytes.load(Relaxed),
            live_events: self.live_events.load(Relaxed),
            peak_live_events: self.peak_live_events.load(Relaxed),
        }
    }
}

/// Writes the statistics as pretty JSON; failures are reported, never fatal.
pub fn write_json(path: &str, value: &impl Serialize) {
    let result = serde_json::to_string_pretty(value)
        .map_err(std::io::Error::other)
        .and_then(|text| std::fs::write(path, text + "\n"));
    if let Err(err) = result {
        eprintln!("cuda-shim: could not write statistics to {path}: {err}");
    }
}
