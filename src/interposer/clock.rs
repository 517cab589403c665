//! The time of each event: nanoseconds since recording started, on the monotonic clock.
//!
//! Read at every event, on the program's thread. `clock_gettime(CLOCK_MONOTONIC)` costs about
//! 24 ns there (`docs/BENCHMARKS.md`, hot path), a tenth of what a hook may add. Where the
//! kernel itself computes that clock from the time-stamp counter (its clocksource is `tsc`:
//! the counter runs at a constant rate, through sleep states, and agrees across CPUs, or the
//! kernel would have chosen another), the clock reads the counter instead (about 10 ns) and
//! turns ticks into nanoseconds on a line anchored to the monotonic clock:
//!
//! - until 10 ms have passed since the start there is no rate yet, and every read is the
//!   monotonic clock's;
//! - then the rate is the ticks and nanoseconds that passed since the start, and every
//!   [`ANCHOR_NS`] the first reader past the anchor moves it: the line goes on from where it
//!   was (times never go back) with a slope that meets the monotonic clock again at the next
//!   anchor, so the two never drift apart by more than a rate error over one interval
//!   (microseconds).
//!
//! Elsewhere (another clocksource, or not x86-64) every read is the monotonic clock's.
//! `Instant::elapsed` reads the same clock too, but spends a checked subtraction of two
//! `timespec`s and a 128-bit conversion on it; here it is one multiply-add.

use std::sync::atomic::{AtomicU64, Ordering::Acquire, Ordering::Relaxed, Ordering::Release};

/// Monotonic nanoseconds after the start at which the counter's rate is first measured.
const CALIBRATE_AFTER_NS: u64 = 10_000_000;
/// Nanoseconds between two anchors of the counter's line on the monotonic clock.
const ANCHOR_NS: u64 = 100_000_000;

/// The start of recording, and the line that turns counter ticks into its nanoseconds.
pub struct Clock {
    start_ns: u64,
    /// The counter at the start; `None` where the monotonic clock is read at every event.
    start_ticks: Option<u64>,
    line: Line,
}

/// `ns = at_ns + (ticks − at_ticks) × per_tick ÷ 2³²` (`per_tick` 0: not calibrated yet),
/// under a sequence lock: `version` is odd while an anchor is being moved.
#[derive(Default)]
struct Line {
    version: AtomicU64,
    at_ticks: AtomicU64,
    at_ns: AtomicU64,
    per_tick: AtomicU64,
    /// Ticks from `at_ticks` after which the next reader moves the anchor.
    next_after: AtomicU64,
}

impl Clock {
    pub fn start() -> Clock {
        let start_ticks = counter_is_the_kernels_clock().then(ticks);
        Clock {
            start_ns: monotonic_ns(),
            start_ticks,
            line: Line::default(),
        }
    }

    /// Nanoseconds since [`Clock::start`].
    #[inline]
    pub fn elapsed_ns(&self) -> u64 {
        let Some(start_ticks) = self.start_ticks else {
            return monotonic_ns().saturating_sub(self.start_ns);
        };
        loop {
            let version = self.line.version.load(Acquire);
            let at_ticks = self.line.at_ticks.load(Relaxed);
            let at_ns = self.line.at_ns.load(Relaxed);
            let per_tick = self.line.per_tick.load(Relaxed);
            let next_after = self.line.next_after.load(Relaxed);
            let now = ticks();
            std::sync::atomic::fence(Acquire);
            if version & 1 == 1 || self.line.version.load(Relaxed) != version {
                std::hint::spin_loop();
                continue;
            }
            let since = now.saturating_sub(at_ticks);
            if per_tick == 0 || since >= next_after {
                return self.anchor(version, start_ticks, now);
            }
            return at_ns + ((since as u128 * per_tick as u128) >> 32) as u64;
        }
    }

    /// The time at `now` ticks, read from the monotonic clock, and the line anchored there
    /// (by this reader, unless another one is at it).
    #[cold]
    #[inline(never)]
    fn anchor(&self, version: u64, start_ticks: u64, now: u64) -> u64 {
        let line = &self.line;
        let mono = monotonic_ns().saturating_sub(self.start_ns);
        let per_tick = line.per_tick.load(Relaxed);
        if per_tick == 0 && mono < CALIBRATE_AFTER_NS {
            return mono;
        }
        if line
            .version
            .compare_exchange(version, version + 1, Acquire, Relaxed)
            .is_err()
        {
            // Another reader moves the anchor; read the line again.
            return self.elapsed_ns();
        }
        let elapsed_ticks = now.saturating_sub(start_ticks).max(1);
        // Nanoseconds a tick over the whole run so far, 32.32 fixed point.
        let rate = ((mono as u128) << 32) / elapsed_ticks as u128;
        let (at_ns, per_tick) = if per_tick == 0 {
            (mono, rate)
        } else {
            // The line goes on from where it is, and aims at the monotonic clock one interval on.
            let at_ticks = line.at_ticks.load(Relaxed);
            let on_line = line.at_ns.load(Relaxed)
                + ((now.saturating_sub(at_ticks) as u128 * per_tick as u128) >> 32) as u64;
            let interval_ticks = ((ANCHOR_NS as u128) << 32) / rate.max(1);
            let aim = (mono + ANCHOR_NS)
                .saturating_sub(on_line)
                .max(ANCHOR_NS / 2);
            let per_tick = ((aim as u128) << 32) / interval_ticks.max(1);
            (on_line, per_tick.clamp(rate / 2, rate * 2))
        };
        let per_tick = per_tick.clamp(1, u64::MAX as u128) as u64;
        let next_after = ((ANCHOR_NS as u128) << 32) / per_tick as u128;
        line.at_ticks.store(now, Relaxed);
        line.at_ns.store(at_ns, Relaxed);
        line.per_tick.store(per_tick, Relaxed);
        line.next_after
            .store(next_after.min(u64::MAX as u128) as u64, Relaxed);
        line.version.store(version + 2, Release);
        at_ns
    }
}

/// Whether the kernel's monotonic clock is the time-stamp counter (see the module's docs).
fn counter_is_the_kernels_clock() -> bool {
    cfg!(target_arch = "x86_64")
        && std::fs::read_to_string(
            "/sys/devices/system/clocksource/clocksource0/current_clocksource",
        )
        .is_ok_and(|source| source.trim() == "tsc")
}

/// The time-stamp counter (0 where there is none: never read then).
#[inline]
fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: RDTSC exists on every x86-64 CPU and only reads the counter.
    #[allow(unused_unsafe)]
    unsafe {
        core::arch::x86_64::_rdtsc()
    }
    #[cfg(not(target_arch = "x86_64"))]
    0
}

#[inline]
fn monotonic_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid out-parameter, and CLOCK_MONOTONIC exists on every Linux (it
    // cannot fail; were it to, `now` stays 0 and the event gets time 0).
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    (now.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(now.tv_nsec as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elapsed_time_follows_the_monotonic_clock() {
        let clock = Clock::start();
        let before = std::time::Instant::now();
        let first = clock.elapsed_ns();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let second = clock.elapsed_ns();
        let slept = before.elapsed().as_nanos() as u64;
        assert!(second >= first + 2_000_000, "{first} then {second}");
        assert!(
            second - first <= slept,
            "{} ns measured over {slept} ns",
            second - first
        );
    }

    /// Across calibration and several anchors, read from several threads at once: times a
    /// thread reads never go back, and every one stays within 50 µs of the monotonic clock
    /// read around it.
    #[test]
    fn counter_time_stays_on_the_monotonic_clock_and_never_goes_back() {
        let clock = Clock::start();
        std::thread::scope(|scope| {
            for _ in 0..3 {
                scope.spawn(|| {
                    let mut last = 0;
                    let end = monotonic_ns() + 3 * ANCHOR_NS;
                    loop {
                        let before = monotonic_ns().saturating_sub(clock.start_ns);
                        let time = clock.elapsed_ns();
                        let after = monotonic_ns().saturating_sub(clock.start_ns);
                        assert!(time >= last, "{last} then {time}");
                        assert!(
                            time + 50_000 >= before && time <= after + 50_000,
                            "{time} read between {before} and {after}"
                        );
                        last = time;
                        if after + clock.start_ns > end {
                            break;
                        }
                    }
                });
            }
        });
    }
}
