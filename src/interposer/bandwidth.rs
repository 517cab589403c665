//! The host link, measured: before swap mode plans, two copies of each size each way between a
//! page-locked host buffer and a device buffer of itermem's, timed with events on a stream of
//! its own. A real machine ranges from PCIe 3 (~12 GB/s) to NVLink-C2C (~450 GB/s); a planner
//! that assumed one link would misplace every swap on the others.

use super::driver as cuda;
use crate::swap::CopyModel;

/// The short copy: mostly the latency of a copy.
const SMALL: u64 = 64 << 10;
/// Sizes of the long copy tried in turn: the largest that keeps the device under the limit
/// and that the device has room for.
const LARGE: [u64; 4] = [8 << 20, 2 << 20, 512 << 10, 256 << 10];
/// Timed copies of each size and direction; the fastest counts (a copy of the program's on the
/// same link, or a busy host, only slows one down). Five cost well under a millisecond on PCIe
/// and leave one undisturbed copy likely on a loaded machine.
const RUNS: usize = 5;

/// The copy model of this machine's link, with a device buffer of at most `room` bytes; None
/// when it cannot be measured (no room, or a driver call failed).
pub fn measure(room: u64) -> Option<CopyModel> {
    cuda::ensure_context();
    let (large, device) = LARGE
        .iter()
        .filter(|&&bytes| bytes <= room)
        .find_map(|&bytes| cuda::malloc(bytes).map(|device| (bytes, device)))?;
    let measured = cuda::pinned_host(large).and_then(|host| {
        let model = cuda::stream().and_then(|stream| {
            let model = model_of(device, host, large, stream);
            cuda::destroy_stream(stream);
            model
        });
        cuda::free_host(host);
        model
    });
    cuda::free(device);
    measured
}

fn model_of(device: u64, host: u64, large: u64, stream: u64) -> Option<CopyModel> {
    let (start, end) = (cuda::timing_event()?, cuda::timing_event());
    let timed = end.and_then(|end| {
        let fastest = |dst: u64, src: u64, bytes: u64| -> Option<f64> {
            let mut best = f64::INFINITY;
            // One untimed copy first: the first copy of a buffer pays for mapping it.
            for run in 0..=RUNS {
                let ok = cuda::record(start, stream)
                    && cuda::copy(dst, src, bytes, stream)
                    && cuda::record(end, stream)
                    && cuda::synchronize_event(end);
                if !ok {
                    return None;
                }
                if run > 0 {
                    best = best.min(cuda::elapsed_ns(start, end)?);
                }
            }
            Some(best)
        };
        let out = line(
            fastest(host, device, SMALL)?,
            fastest(host, device, large)?,
            large,
        );
        let into = line(
            fastest(device, host, SMALL)?,
            fastest(device, host, large)?,
            large,
        );
        cuda::destroy_event(end);
        Some((out, into))
    });
    cuda::destroy_event(start);
    let ((out_latency_ns, out_ns_per_byte), (in_latency_ns, in_ns_per_byte)) = timed?;
    Some(CopyModel {
        out_ns_per_byte,
        out_latency_ns,
        in_ns_per_byte,
        in_latency_ns,
        handoff_ns: 0.0,
    })
}

/// Latency and time per byte of the line through the two timed copies (`SMALL` bytes in
/// `small_ns`, `large` bytes in `large_ns`); a timer too coarse to tell them apart gives the
/// long copy's average.
fn line(small_ns: f64, large_ns: f64, large: u64) -> (f64, f64) {
    let slope = (large_ns - small_ns) / (large - SMALL) as f64;
    if slope > 0.0 && slope.is_finite() {
        let latency = (small_ns - slope * SMALL as f64).max(0.0);
        (latency, slope)
    } else {
        (0.0, large_ns.max(1.0) / large as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_through_two_copies_recovers_latency_and_bandwidth() {
        // 10 µs + 0.08 ns/B (12.5 GB/s).
        let at = |bytes: u64| 10_000.0 + 0.08 * bytes as f64;
        let (latency, per_byte) = line(at(SMALL), at(8 << 20), 8 << 20);
        assert!((latency - 10_000.0).abs() < 1e-6, "{latency}");
        assert!((per_byte - 0.08).abs() < 1e-12, "{per_byte}");
        // A coarse timer: both copies read the same.
        assert_eq!(
            line(500.0, 500.0, 1000 + SMALL),
            (0.0, 500.0 / (1000 + SMALL) as f64)
        );
    }
}
