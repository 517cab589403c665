//! The time of each event: nanoseconds since recording started.
//!
//! Read at every event, on the program's thread. `Instant::elapsed` reads the same clock
//! (`CLOCK_MONOTONIC`), then spends a checked subtraction of two `timespec`s and a 128-bit
//! conversion on it, about a third of the cost of the read itself; here it is one multiply-add.

/// The start of recording, on the monotonic clock.
pub struct Clock {
    start_ns: u64,
}

impl Clock {
    pub fn start() -> Clock {
        Clock {
            start_ns: monotonic_ns(),
        }
    }

    /// Nanoseconds since [`Clock::start`].
    #[inline]
    pub fn elapsed_ns(&self) -> u64 {
        monotonic_ns().saturating_sub(self.start_ns)
    }
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
}
