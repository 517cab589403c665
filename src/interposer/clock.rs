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
//!   was (no jump) with a slope that meets the monotonic clock again at the next anchor, so
//!   the two never drift apart by more than a rate error over one interval (about a
//!   microsecond here). The counter and the clock are read together for it ([`paired`]); the
//!   new line is written beside the one in use and then switched to, so no reader waits for
//!   the one moving it (which may be preempted there).
//!
//! Readings nanoseconds apart on two threads may come out in the other order (where one
//! thread's was the monotonic clock's, just before calibration, or just across an anchor);
//! each device's sequencer keeps its events' times in order.
//!
//! Elsewhere (another clocksource, or not x86-64) every read is the monotonic clock's.
//! `Instant::elapsed` reads the same clock too, but spends a checked subtraction of two
//! `timespec`s and a 128-bit conversion on it; here it is one multiply-add.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::*};

/// Monotonic nanoseconds after the start at which the counter's rate is first measured.
const CALIBRATE_AFTER_NS: u64 = 10_000_000;
/// Nanoseconds between two anchors of the counter's line on the monotonic clock.
const ANCHOR_NS: u64 = 100_000_000;
/// Counter ticks above which two readings around one of the monotonic clock are too far
/// apart to pair them (about 1 µs at 3 GHz; the read itself takes tens of nanoseconds). Half
/// of it is the most a pairing can be off: over the 10 ms of calibration, a rate error of at
/// most 5·10⁻⁵, a few microseconds over the first interval before the next anchor corrects it.
const PAIR_TICKS: u64 = 3_000;

/// The start of recording, and the line that turns counter ticks into its nanoseconds.
pub struct Clock {
    start_ns: u64,
    /// The counter at the start; `None` where the monotonic clock is read at every event.
    start_ticks: Option<u64>,
    /// Two lines: readers read `lines[current]`, the one moving the anchor writes the other
    /// and then makes it current, so no reader ever waits for a mover that was preempted.
    lines: [Line; 2],
    current: AtomicUsize,
    /// Taken by the reader that moves the anchor.
    moving: AtomicBool,
}

/// `ns = at_ns + (ticks − at_ticks) × per_tick ÷ 2³²` (`per_tick` 0: not calibrated yet),
/// under a sequence number that is odd while the line is written.
#[derive(Default)]
struct Line {
    version: AtomicU64,
    at_ticks: AtomicU64,
    at_ns: AtomicU64,
    per_tick: AtomicU64,
    /// Ticks from `at_ticks` after which a reader moves the anchor.
    next_after: AtomicU64,
}

/// One consistent reading of a [`Line`].
#[derive(Clone, Copy)]
struct Read {
    at_ticks: u64,
    at_ns: u64,
    per_tick: u64,
    next_after: u64,
}

impl Read {
    #[inline]
    fn at(&self, now: u64) -> u64 {
        let since = now.saturating_sub(self.at_ticks);
        self.at_ns + ((since as u128 * self.per_tick as u128) >> 32) as u64
    }
}

impl Clock {
    pub fn start() -> Clock {
        let (start_ns, start_ticks) = if counter_is_the_kernels_clock()
            && let Some((start_ns, start_ticks)) = paired()
        {
            (start_ns, Some(start_ticks))
        } else {
            (monotonic_ns(), None)
        };
        Clock {
            start_ns,
            start_ticks,
            lines: Default::default(),
            current: AtomicUsize::new(0),
            moving: AtomicBool::new(false),
        }
    }

    /// Nanoseconds since [`Clock::start`].
    #[inline]
    pub fn elapsed_ns(&self) -> u64 {
        let Some(start_ticks) = self.start_ticks else {
            return monotonic_ns().saturating_sub(self.start_ns);
        };
        loop {
            let line = &self.lines[self.current.load(Acquire) & 1];
            let version = line.version.load(Acquire);
            let read = Read {
                at_ticks: line.at_ticks.load(Relaxed),
                at_ns: line.at_ns.load(Relaxed),
                per_tick: line.per_tick.load(Relaxed),
                next_after: line.next_after.load(Relaxed),
            };
            let now = ticks();
            std::sync::atomic::fence(Acquire);
            if version & 1 == 1 || line.version.load(Relaxed) != version {
                // Read while rewritten: it was no longer current. Read the current one.
                continue;
            }
            if read.per_tick == 0 || now.saturating_sub(read.at_ticks) >= read.next_after {
                return self.anchor(start_ticks, read, now);
            }
            return read.at(now);
        }
    }

    /// The time at `now` ticks, `read` being the current line: the monotonic clock's before
    /// calibration, the current line's after. Unless another reader is at it, the line is
    /// also anchored anew, at a [`paired`] reading (not at `now`: the reader may have been
    /// preempted since).
    #[cold]
    #[inline(never)]
    fn anchor(&self, start_ticks: u64, read: Read, now: u64) -> u64 {
        let calibrated = read.per_tick != 0;
        let time = if calibrated {
            read.at(now)
        } else {
            monotonic_ns().saturating_sub(self.start_ns)
        };
        if (!calibrated && time < CALIBRATE_AFTER_NS) || self.moving.swap(true, Acquire) {
            return time;
        }
        let Some((mono, at_ticks)) = paired() else {
            self.moving.store(false, Release);
            return time; // slowed at every try: the line goes on until the next reader
        };
        let mono = mono.saturating_sub(self.start_ns);
        let elapsed_ticks = at_ticks.saturating_sub(start_ticks).max(1);
        // Nanoseconds a tick over the whole run so far, 32.32 fixed point.
        let rate = ((mono as u128) << 32) / elapsed_ticks as u128;
        let (at_ns, per_tick) = if !calibrated {
            (mono.max(time), rate)
        } else {
            // The line goes on from where it is, aimed at the monotonic clock one interval on.
            let on_line = read.at(at_ticks);
            let interval_ticks = ((ANCHOR_NS as u128) << 32) / rate.max(1);
            let aim = (mono + ANCHOR_NS)
                .saturating_sub(on_line)
                .max(ANCHOR_NS / 2);
            let per_tick = ((aim as u128) << 32) / interval_ticks.max(1);
            (on_line, per_tick.clamp(rate / 2, rate * 2))
        };
        let per_tick = per_tick.clamp(1, u64::MAX as u128) as u64;
        let next_after = (((ANCHOR_NS as u128) << 32) / per_tick as u128).min(u64::MAX as u128);
        let next = self.current.load(Relaxed) ^ 1;
        let line = &self.lines[next];
        let version = line.version.load(Relaxed);
        line.version.store(version + 1, Relaxed);
        std::sync::atomic::fence(Release);
        line.at_ticks.store(at_ticks, Relaxed);
        line.at_ns.store(at_ns, Relaxed);
        line.per_tick.store(per_tick, Relaxed);
        line.next_after.store(next_after as u64, Relaxed);
        line.version.store(version + 2, Release);
        self.current.store(next, Release);
        self.moving.store(false, Release);
        time
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

/// The monotonic clock and the counter read at the same moment (the counter halfway between a
/// reading before and one after), or None if the thread was preempted or slowed in between at
/// every one of a few tries: a delay there would make the rate wrong by as much.
fn paired() -> Option<(u64, u64)> {
    (0..8).find_map(|_| {
        let before = ticks();
        let ns = monotonic_ns();
        let after = ticks();
        (after.wrapping_sub(before) < PAIR_TICKS).then(|| (ns, before + (after - before) / 2))
    })
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

    /// Across calibration and several anchors, read from several threads at once: every time
    /// stays within 50 µs of the monotonic clock read around it, and a thread's times go back
    /// by no more than a nanosecond or so (the trace keeps each device's times in order:
    /// `Sequencer::last_time_ns`).
    #[test]
    fn counter_time_stays_on_the_monotonic_clock() {
        let clock = Clock::start();
        // Where the kernel reads the counter, so does the clock (a pairing that always failed
        // would fall back to `clock_gettime` unseen).
        assert_eq!(clock.start_ticks.is_some(), counter_is_the_kernels_clock());
        std::thread::scope(|scope| {
            for _ in 0..3 {
                scope.spawn(|| {
                    let mut last = 0;
                    let end = monotonic_ns() + 3 * ANCHOR_NS;
                    loop {
                        let before = monotonic_ns().saturating_sub(clock.start_ns);
                        let time = clock.elapsed_ns();
                        let after = monotonic_ns().saturating_sub(clock.start_ns);
                        assert!(time + 1_000 >= last, "{last} then {time}");
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
