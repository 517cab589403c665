//! Iteration detection: finds the repeating training iteration in a stream of events.
//!
//! This module owns two things: the mapping from a recorded event to a *token* (a `u64` that is
//! equal for two events exactly when they play the same role in an iteration), and the period
//! detector that runs on the token stream, online ([`Detector::push`], one event at a time from
//! the CUDA hooks) or offline ([`detect`], [`segments`] on a recorded trace). It depends on
//! nothing but `std`, so the CLI and the interposer share it unchanged.
//!
//! # Definitions and invariants
//!
//! Let `s[0..=n]` be the tokens pushed so far, `k` = [`DetectorConfig::repeats`],
//! `m` = [`DetectorConfig::min_window`], `P` = [`DetectorConfig::max_period`], and
//! `window(p) = max(k·p, m)`. A lag `p` is **valid at `n`** when
//!
//! ```text
//! 1 ≤ p ≤ P  ∧  n + 1 ≥ window(p)  ∧  s[i] = s[i − p]  for every i in (n − window(p) + p, n]
//! ```
//!
//! i.e. the last `window(p)` tokens are `p`-periodic: with `m = 0`, the last `k·p` tokens are
//! `k` copies of one iteration. The *stretch* of a valid lag is the longest run of newest events
//! that is `p`-periodic. The detector keeps these invariants:
//!
//! 1. **A reported period is real.** On [`Change::Detected`] at event `n`,
//!    `length = min{p : p valid at n}`. On [`Change::Changed`] at `n`, `length` is valid at `n`
//!    and its stretch reaches back furthest among the valid lags examined (the smallest on ties),
//!    so the iteration that holds a transient inner repetition takes over from it. Every
//!    comparison is an exact token comparison (no hashing): no collision can fake a period.
//! 2. **A period is kept while the stream follows it.** While a period `p` is in force,
//!    `s[i] = s[i − p]` for every event since it was found (so it stays valid); the first event
//!    with `s[n] ≠ s[n − p]` ends it ([`Change::Lost`], or [`Change::Changed`] when a lag is
//!    valid at that very event).
//! 3. **A valid period is not missed.** Lag `p` is examined at every event `n` with
//!    `(n + 1) mod interval(p) = 0` while no period is in force, where
//!    `interval(p) = 2^max(⌊log₂ p⌋, L₀)` and `L₀ = ⌊log₂ max(1, m / 2k)⌋`; the events skipped
//!    while a period was in force are made up for at the event that ends it. Whenever an
//!    examined lag is valid, some period is put in force. So a period that stays
//!    valid is taken at most `interval(p) − 1 ≤ max(p, m / 2k) − 1` events after it became valid
//!    unless another period is in force: a clean stream of period `p` is found by event
//!    `window(p) + max(p, m / 2k)`, which is `(k + 1)·p` when `m ≤ k·p`.
//! 4. **Memory is bounded.** The detector keeps the last `H = max(k·P, m)` events (between `H` and
//!    `2·max(H, 1024)` of them), plus scratch space of `H` words.
//!
//! # Why it is built this way
//!
//! The question "is lag `p` valid now?" for *all* lags at once is answered exactly by the
//! Z-function of the recent tokens read newest-first: `z[p]` is the number of newest tokens that
//! equal the token `p` earlier, so `p` is valid iff `z[p] ≥ window(p) − p`, and one pass costs
//! time linear in the window. Lags are grouped in levels by powers of two: level `L` examines
//! lags `p < 2^(L+1)` over the last `max(k·(2^(L+1) − 1), m)` tokens and is scheduled every
//! `2^L` events, so each level costs `O(k)` per event (`O(1)` more for `m`) and, over the
//! `⌊log₂ P⌋ + 1` levels, a searching detector spends `O(k·log P)` amortised per event. Once a
//! period is found, each event is one comparison (`O(1)`) and no level runs. When the period
//! ends, one pass runs at the highest level scheduled meanwhile and at least at the level of the
//! pass that found it: that pass is paid for by the skipped passes or by the finding pass (each
//! is charged once), so the total stays `O(n·k·log P)` time for `n` events, `O(k·P + m)` memory.
//! The rerun of the finding level matters: the finding pass reported the smallest valid lag,
//! which may be an inner repetition (`AA` inside `AABC`) valid at the very phase where that level
//! is always scheduled; without the rerun the full iteration could be hidden forever.
//! Rolling hashes would find candidate lags too, but they still need a search over lags and a
//! verification; the Z-function gives both at once, exactly.
//!
//! # Behaviour on real streams
//!
//! - **Warm-up** (a first iteration that allocates optimizer state, say) is never part of a
//!   window once the steady state has repeated `k` times, so the period comes from the
//!   repetitive suffix.
//! - **Nested repetition.** An iteration made of repeated layers, `(AB)³C`, is found as the full
//!   7-event iteration once it has repeated `k` times; before that the inner `AB` may be reported
//!   for a while (it *is* the smallest period of the recent events) and ends at a `C`, where the
//!   full iteration takes over if it is valid by then ([`Change::Changed`]). Once the full
//!   iteration is in force, inner repetitions never replace it (invariant 2). A `min_window`
//!   longer than the inner repetition suppresses such transient short periods.
//!   An iteration that is itself a repetition, `ABAB`, is reported as `AB`: from the events
//!   alone the two cannot be told apart, and the smallest period is the one every multiple
//!   follows; a consumer that needs whole training steps may plan over a multiple of `length`.
//! - **Noise.** One stray event ends the period at that event ([`Change::Lost`]); the same length
//!   is found again, with the boundary shifted, within `(k + 1)·p` events of the stray (when
//!   `m ≤ k·p`), once the iteration has repeated `k` times after it. One missing event behaves
//!   the same, except that with `k = 2` the events around the gap really do contain two copies
//!   of the shortened iteration, so a period of `p − 1` may be reported and lost in between;
//!   `k ≥ 3` rules that out.
//! - **Pattern change** (an evaluation pass, a new batch shape): the old period is lost at the
//!   first event that differs, and the new one is reported once it has repeated `k` times.

use std::error::Error;
use std::fmt;

// ---------------------------------------------------------------------------------------------
// Tokens
// ---------------------------------------------------------------------------------------------

/// Bytes per malloc size class (cnmem and PyTorch round to 512 B as well).
pub const SIZE_CLASS_BYTES: u64 = 512;

/// The top two bits of a token name its kind, so tokens of different kinds never collide.
const KIND_SHIFT: u32 = 62;
/// The low 62 bits of a token carry its value.
const VALUE_MASK: u64 = (1 << KIND_SHIFT) - 1;
const MALLOC_KIND: u64 = 1 << KIND_SHIFT;
const FREE_KIND: u64 = 2 << KIND_SHIFT;
const LAUNCH_KIND: u64 = 3 << KIND_SHIFT;

/// Token of a malloc of `size_bytes`: its size class, `⌈size / 512⌉` (0 for a 0-byte malloc).
pub fn malloc_token(size_bytes: u64) -> u64 {
    // ⌈u64::MAX / 512⌉ < 2^55, so the class always fits in the value bits.
    MALLOC_KIND | size_bytes.div_ceil(SIZE_CLASS_BYTES)
}

/// Token of a free: the lifetime of the freed block in events (free index − malloc index).
/// Lifetimes of 2^62 events or more share one token.
pub fn free_token(lifetime_events: u64) -> u64 {
    FREE_KIND | lifetime_events.min(VALUE_MASK)
}

/// Token of a copy or memset: its kind (`cudaMemcpyKind`, or 5 for a memset) and byte count, in
/// the kind bits no other token uses. Kinds above 15 and sizes of 2^58 bytes or more share
/// tokens.
pub fn transfer_token(kind: u64, bytes: u64) -> u64 {
    const KIND_BITS: u32 = 58;
    ((kind & 0xF) << KIND_BITS) | bytes.min((1 << KIND_BITS) - 1)
}

/// Token of a kernel launch: the kernel's id. Ids below 2^62 (every user-space address) keep
/// distinct tokens; the top two bits of larger ids are folded into the low ones.
pub fn launch_token(kernel_id: u64) -> u64 {
    LAUNCH_KIND | ((kernel_id ^ (kernel_id >> KIND_SHIFT)) & VALUE_MASK)
}

// ---------------------------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------------------------

/// Largest accepted [`DetectorConfig::max_period`].
pub const MAX_PERIOD_LIMIT: usize = 1 << 30;
/// Largest accepted [`DetectorConfig::repeats`].
pub const MAX_REPEATS: usize = 64;
/// Largest accepted [`DetectorConfig::min_window`].
pub const MAX_MIN_WINDOW: usize = 1 << 30;

/// What the detector looks for. Checked once by [`Detector::new`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DetectorConfig {
    /// Longest period looked for, in events (`1 ..= MAX_PERIOD_LIMIT`; default `1 << 17`).
    pub max_period: usize,
    /// `k`: how many consecutive copies of an iteration confirm it (`2 ..= MAX_REPEATS`;
    /// default 2).
    pub repeats: usize,
    /// Fewest events that may confirm a period: `p` needs its last `max(k·p, min_window)` events
    /// to be `p`-periodic (`0 ..= MAX_MIN_WINDOW`; default 0, which is exactly "`k` copies").
    /// A few hundred keeps short-lived periods (a run of identical launches) from being reported.
    pub min_window: usize,
}

impl Default for DetectorConfig {
    fn default() -> Self {
        DetectorConfig {
            max_period: 1 << 17,
            repeats: 2,
            min_window: 0,
        }
    }
}

impl DetectorConfig {
    /// The configuration itermem runs on CUDA event streams, online and offline alike: the
    /// defaults, with `min_window` = 128 so a short run of identical launches (a layer loop, a
    /// burst of copies) is not reported as a period of its own.
    pub fn for_cuda_events() -> DetectorConfig {
        DetectorConfig {
            min_window: 128,
            ..DetectorConfig::default()
        }
    }
}

/// A [`DetectorConfig`] field out of range; the message names the field, the value and the
/// accepted range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigError {
    /// `max_period` is 0 or above [`MAX_PERIOD_LIMIT`].
    MaxPeriod(usize),
    /// `repeats` is below 2 or above [`MAX_REPEATS`].
    Repeats(usize),
    /// `min_window` is above [`MAX_MIN_WINDOW`].
    MinWindow(usize),
    /// `repeats · max_period` does not fit in `usize` on this platform.
    WindowTooLarge { max_period: usize, repeats: usize },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::MaxPeriod(value) => write!(
                f,
                "detector max_period is {value}, which should be a number of events \
                 from 1 to {MAX_PERIOD_LIMIT}"
            ),
            ConfigError::Repeats(value) => write!(
                f,
                "detector repeats is {value}, which should be a count from 2 to {MAX_REPEATS}"
            ),
            ConfigError::MinWindow(value) => write!(
                f,
                "detector min_window is {value}, which should be a number of events \
                 from 0 to {MAX_MIN_WINDOW}"
            ),
            ConfigError::WindowTooLarge {
                max_period,
                repeats,
            } => write!(
                f,
                "detector window repeats × max_period = {repeats} × {max_period} \
                 does not fit in memory on this platform"
            ),
        }
    }
}

impl Error for ConfigError {}

// ---------------------------------------------------------------------------------------------
// Reports
// ---------------------------------------------------------------------------------------------

/// A period in force: the stream has repeated an iteration of `length` events.
///
/// Event indices are absolute (the first event pushed is 0). Iterations are the half-open
/// ranges `[boundary + j·length, boundary + (j + 1)·length)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Period {
    /// Events per iteration.
    pub length: u64,
    /// Index of the event at which the period was found.
    pub detected_at: u64,
    /// First event of the periodic stretch: `s[i] = s[i − length]` for every
    /// `i ≥ start + length` seen since. The stretch is traced back over at most twice the
    /// examined window (at least `2·max(k·length, min_window)` events) and the retained
    /// history; a longer stretch reports a later start and fewer `iterations_seen`.
    pub start: u64,
    /// First event of an iteration. The live bytes after event `boundary − 1` are the least over
    /// the last `length` events before detection (earliest on ties), so few lifetimes cross it.
    pub boundary: u64,
    /// Complete iterations in the periodic stretch so far: `(events − start) / length`, where
    /// `events` counts the events pushed; at least `repeats` when found, updated on every event.
    pub iterations_seen: u64,
}

/// What one [`Detector::push`] changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// No period appeared or ended (an established period may have seen one more event).
    Unchanged,
    /// A period was found while none was in force.
    Detected(Period),
    /// The period in force stopped matching at this event; none is in force now. Carries the
    /// lost period as it stood on its last matching event.
    Lost(Period),
    /// The period in force stopped matching at this event, and another period is valid at this
    /// very event and is now in force.
    Changed { lost: Period, detected: Period },
}

/// One periodic stretch of a recorded stream, as listed by [`segments`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    /// The period as it stood on the last event that followed it.
    pub period: Period,
    /// First event that did not follow the period, or the stream length if none did:
    /// the stretch is `[period.start, end)`.
    pub end: u64,
}

impl Segment {
    /// Events in the periodic stretch `[period.start, end)`.
    pub fn covered_events(&self) -> u64 {
        self.end.saturating_sub(self.period.start)
    }
}

/// Why an offline helper refused its input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DetectError {
    /// The configuration is out of range.
    Config(ConfigError),
    /// `tokens` and `live` must describe the same events.
    LengthMismatch { tokens: usize, live: usize },
}

impl fmt::Display for DetectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DetectError::Config(error) => error.fmt(f),
            DetectError::LengthMismatch { tokens, live } => write!(
                f,
                "{tokens} tokens but {live} live-byte values; there should be one of each per event"
            ),
        }
    }
}

impl Error for DetectError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            DetectError::Config(error) => Some(error),
            DetectError::LengthMismatch { .. } => None,
        }
    }
}

impl From<ConfigError> for DetectError {
    fn from(error: ConfigError) -> Self {
        DetectError::Config(error)
    }
}

// ---------------------------------------------------------------------------------------------
// The online detector
// ---------------------------------------------------------------------------------------------

/// Online period detector: feed it every event with [`Detector::push`].
///
/// Cost per event: `O(1)` while a period is in force, `O(k·log max_period)` amortised while
/// searching (see the module documentation for the argument).
#[derive(Clone, Debug)]
pub struct Detector {
    config: DetectorConfig,
    /// `L₀`: the lowest level that runs; levels below it would re-read the `min_window` too often.
    lowest_level: u32,
    /// The highest level; its lags reach `max_period`.
    top_level: u32,
    /// `H = max(k·max_period, min_window)`: events always retained.
    retained_events: usize,
    /// Recent tokens and live bytes; `tokens[i]` is event `first_retained + i`.
    tokens: Vec<u64>,
    live: Vec<u64>,
    first_retained: u64,
    /// Events pushed so far (the index of the next event).
    events: u64,
    /// The period in force, if any.
    lock: Option<Lock>,
    /// Scratch: the recent tokens, newest first, and their Z-function.
    newest_first: Vec<u64>,
    z: Vec<usize>,
}

/// The period in force and how it was found.
#[derive(Clone, Copy, Debug)]
struct Lock {
    period: Period,
    /// `events` when the period was found: the levels scheduled after it have not run.
    found_at_events: u64,
    /// The level of the scheduled pass that found the period, to run again when it ends (the
    /// pass reported the smallest valid lag; a longer one it saw may outlast it). 0 when the
    /// period was found at the end of another one.
    rerun_level: u32,
}

/// Which valid lag a pass takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Choice {
    /// The smallest: the definition of the period, used while searching.
    Smallest,
    /// The one whose periodic stretch reaches back furthest (the smallest on ties): used when a
    /// period ends, so the iteration that holds an inner repetition takes over from it.
    Oldest,
}

impl Detector {
    /// A detector with no history, after checking `config`.
    pub fn new(config: DetectorConfig) -> Result<Self, ConfigError> {
        if config.max_period == 0 || config.max_period > MAX_PERIOD_LIMIT {
            return Err(ConfigError::MaxPeriod(config.max_period));
        }
        if config.repeats < 2 || config.repeats > MAX_REPEATS {
            return Err(ConfigError::Repeats(config.repeats));
        }
        if config.min_window > MAX_MIN_WINDOW {
            return Err(ConfigError::MinWindow(config.min_window));
        }
        let longest_window =
            config
                .repeats
                .checked_mul(config.max_period)
                .ok_or(ConfigError::WindowTooLarge {
                    max_period: config.max_period,
                    repeats: config.repeats,
                })?;
        let lowest_level = (config.min_window / (2 * config.repeats)).max(1).ilog2();
        let top_level = config.max_period.ilog2().max(lowest_level);
        Ok(Detector {
            config,
            lowest_level,
            top_level,
            retained_events: longest_window.max(config.min_window),
            tokens: Vec::new(),
            live: Vec::new(),
            first_retained: 0,
            events: 0,
            lock: None,
            newest_first: Vec::new(),
            z: Vec::new(),
        })
    }

    /// The configuration this detector runs with.
    pub fn config(&self) -> &DetectorConfig {
        &self.config
    }

    /// Events pushed so far.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// The period in force, if any.
    pub fn period(&self) -> Option<Period> {
        self.lock.map(|lock| lock.period)
    }

    /// Records one event: its token and the live device bytes after it. Returns what changed.
    pub fn push(&mut self, token: u64, live_bytes: u64) -> Change {
        self.remember(token, live_bytes);
        let index = self.events;
        self.events += 1;
        let Some(lock) = self.lock else {
            // Searching: run the highest level scheduled at this event (it covers the lower ones).
            let level = self.events.trailing_zeros();
            return match self.search(level, Choice::Smallest) {
                Some(found) => Change::Detected(found),
                None => Change::Unchanged,
            };
        };
        let mut period = lock.period;
        let follows = index
            .checked_sub(period.length)
            .and_then(|earlier| self.token_at(earlier))
            == Some(token);
        if follows {
            period.iterations_seen = (self.events - period.start) / period.length;
            self.lock = Some(Lock { period, ..lock });
            return Change::Unchanged;
        }
        self.lock = None;
        // Catch up: the highest level scheduled at any event since the period was found (the
        // highest bit in which the two event counts differ), and the level that found it.
        let missed_level = (lock.found_at_events ^ self.events)
            .checked_ilog2()
            .unwrap_or(0);
        match self.search(missed_level.max(lock.rerun_level), Choice::Oldest) {
            Some(detected) => Change::Changed {
                lost: period,
                detected,
            },
            None => Change::Lost(period),
        }
    }

    /// Appends one event to the history, first dropping events older than the retained window
    /// once twice that many are held (amortised `O(1)`).
    fn remember(&mut self, token: u64, live_bytes: u64) {
        let keep = self.retained_events;
        if self.tokens.len() >= keep.max(1024).saturating_mul(2) {
            let drop = self.tokens.len() - keep;
            self.tokens.drain(..drop);
            self.live.drain(..drop);
            self.first_retained += drop as u64;
        }
        self.tokens.push(token);
        self.live.push(live_bytes);
    }

    /// The token of event `index`, if it is still retained.
    fn token_at(&self, index: u64) -> Option<u64> {
        let offset = usize::try_from(index.checked_sub(self.first_retained)?).ok()?;
        self.tokens.get(offset).copied()
    }

    /// Runs level `level` (capped to the top level; nothing below the lowest) on the events
    /// pushed so far. If a lag is valid, takes the one `choice` names as the period in force and
    /// returns it.
    fn search(&mut self, level: u32, choice: Choice) -> Option<Period> {
        if level < self.lowest_level {
            return None;
        }
        let level = level.min(self.top_level);
        // Lags examined: 1 ≤ p < lag_limit, over the newest `span` events.
        let lag_limit = 1usize
            .checked_shl(level + 1)
            .unwrap_or(usize::MAX)
            .min(self.config.max_period + 1);
        let (repeats, min_window) = (self.config.repeats, self.config.min_window);
        // window(p) = max(k·p, min_window) ≤ max(k·max_period, min_window), checked by `new`.
        let window = |lag: usize| (repeats * lag).max(min_window);
        let span = window(lag_limit - 1).min(self.tokens.len());
        let recent = self.tokens.get(self.tokens.len() - span..)?;
        self.newest_first.clear();
        self.newest_first.extend(recent.iter().rev());
        let (lag, run) = pick_lag(
            &self.newest_first,
            lag_limit,
            &mut self.z,
            |lag, run| run + lag >= window(lag),
            choice,
        )?;

        let events = self.events;
        let length = lag as u64;
        // The newest `run + lag` events are `lag`-periodic. If the run reached the end of the
        // span, the stretch may go further back: follow it, for at most another span.
        let mut start = events - (run + lag) as u64;
        if run + lag == span {
            for _ in 0..span {
                let Some(before) = start.checked_sub(1) else {
                    break;
                };
                match (self.token_at(before), self.token_at(before + length)) {
                    (Some(a), Some(b)) if a == b => start = before,
                    _ => break,
                }
            }
        }
        // The boundary follows the event with the least live bytes in the last iteration.
        let last_iteration = self.live.get(self.live.len().checked_sub(lag)?..)?;
        let mut least = 0;
        for (offset, &bytes) in last_iteration.iter().enumerate() {
            if last_iteration.get(least).is_some_and(|&best| bytes < best) {
                least = offset;
            }
        }
        let period = Period {
            length,
            detected_at: events - 1,
            start,
            boundary: events - length + least as u64 + 1,
            iterations_seen: (events - start) / length,
        };
        self.lock = Some(Lock {
            period,
            found_at_events: events,
            rerun_level: if choice == Choice::Smallest { level } else { 0 },
        });
        Some(period)
    }
}

/// Computes the Z-function of `newest_first` (`z[p]` = how many of the newest tokens equal the
/// token `p` positions older, capped at `len − p`) for the lags `1 ≤ p < lag_limit`, and returns
/// the `(p, z[p])` that `choice` names among those `is_valid` accepts. Time `O(len)`.
fn pick_lag(
    newest_first: &[u64],
    lag_limit: usize,
    z: &mut Vec<usize>,
    is_valid: impl Fn(usize, usize) -> bool,
    choice: Choice,
) -> Option<(usize, usize)> {
    let len = newest_first.len();
    let limit = lag_limit.min(len);
    z.clear();
    z.resize(limit, 0);
    let mut best: Option<(usize, usize)> = None;
    // [box_start, box_end): the match `newest_first[box_start..box_end] =
    // newest_first[..box_end − box_start]` reaching furthest; box_start ≥ 1 once box_end > 0.
    let (mut box_start, mut box_end) = (0, 0);
    for lag in 1..limit {
        let mut run = if lag < box_end {
            // lag − box_start < lag < limit = z.len().
            (box_end - lag).min(z[lag - box_start])
        } else {
            0
        };
        while lag + run < len && newest_first[run] == newest_first[lag + run] {
            run += 1;
        }
        z[lag] = run;
        if lag + run > box_end {
            (box_start, box_end) = (lag, lag + run);
        }
        if !is_valid(lag, run) {
            continue;
        }
        match choice {
            Choice::Smallest => return Some((lag, run)),
            // The stretch of lag p is the newest p + z[p] events.
            Choice::Oldest => {
                if best.is_none_or(|(best_lag, best_run)| lag + run > best_lag + best_run) {
                    best = Some((lag, run));
                }
            }
        }
    }
    best
}

// ---------------------------------------------------------------------------------------------
// Offline helpers
// ---------------------------------------------------------------------------------------------

/// Every periodic stretch of a recorded stream, in order: `tokens[i]` and `live[i]` describe
/// event `i`. The last segment ends at `tokens.len()` if its period is still in force there.
pub fn segments(
    tokens: &[u64],
    live: &[u64],
    config: &DetectorConfig,
) -> Result<Vec<Segment>, DetectError> {
    if tokens.len() != live.len() {
        return Err(DetectError::LengthMismatch {
            tokens: tokens.len(),
            live: live.len(),
        });
    }
    let mut detector = Detector::new(*config)?;
    let mut found = Vec::new();
    for (index, (&token, &bytes)) in tokens.iter().zip(live).enumerate() {
        match detector.push(token, bytes) {
            Change::Unchanged | Change::Detected(_) => {}
            Change::Lost(period) | Change::Changed { lost: period, .. } => found.push(Segment {
                period,
                end: index as u64,
            }),
        }
    }
    if let Some(period) = detector.period() {
        found.push(Segment {
            period,
            end: tokens.len() as u64,
        });
    }
    Ok(found)
}

/// The period of a recorded stream: the one whose stretch covers the most events (the steady
/// state of a training run, even when teardown or evaluation follows it); the later one on
/// ties. `None` if no period was ever found.
pub fn detect(
    tokens: &[u64],
    live: &[u64],
    config: &DetectorConfig,
) -> Result<Option<Period>, DetectError> {
    Ok(segments(tokens, live, config)?
        .into_iter()
        .max_by_key(Segment::covered_events)
        .map(|segment| segment.period))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(max_period: usize, repeats: usize, min_window: usize) -> DetectorConfig {
        DetectorConfig {
            max_period,
            repeats,
            min_window,
        }
    }

    /// `len` distinct launch tokens: an iteration with no inner repetition.
    fn distinct(family: u64, len: usize) -> Vec<u64> {
        (0..len as u64)
            .map(|i| launch_token(family * 1_000_000 + i))
            .collect()
    }

    fn repeat(pattern: &[u64], times: usize) -> Vec<u64> {
        pattern.repeat(times)
    }

    /// Pushes every token (with 0 live bytes) and returns the changes with their index.
    fn changes(config: DetectorConfig, tokens: &[u64]) -> Vec<(u64, Change)> {
        let mut detector = Detector::new(config).unwrap();
        let mut out = Vec::new();
        for (index, &token) in tokens.iter().enumerate() {
            let change = detector.push(token, 0);
            if change != Change::Unchanged {
                out.push((index as u64, change));
            }
        }
        out
    }

    /// The period a change puts in force, if any.
    fn taken(change: &Change) -> Option<Period> {
        match *change {
            Change::Detected(period)
            | Change::Changed {
                detected: period, ..
            } => Some(period),
            Change::Unchanged | Change::Lost(_) => None,
        }
    }

    fn lengths_of(segments: &[Segment]) -> Vec<u64> {
        segments.iter().map(|s| s.period.length).collect()
    }

    #[test]
    fn tokens_of_different_kinds_never_collide() {
        let values = [0, 1, 2, 511, 512, 513, 1 << 40, u64::MAX];
        let mut all: Vec<u64> = Vec::new();
        for &v in &values {
            all.push(malloc_token(v));
            all.push(free_token(v));
            all.push(launch_token(v));
        }
        for &t in &all {
            let kind = t >> KIND_SHIFT;
            assert!((1..=3).contains(&kind), "token {t:#x} has no kind");
        }
        for &v in &values {
            for kind in 0..=5 {
                let t = transfer_token(kind, v);
                assert_eq!(
                    t >> KIND_SHIFT,
                    0,
                    "transfer token {t:#x} collides with other kinds"
                );
                assert!(!all.contains(&t));
            }
        }
        assert_ne!(transfer_token(1, 4), transfer_token(2, 4));
        assert_ne!(transfer_token(1, 4), transfer_token(1, 8));
        assert_ne!(malloc_token(512), free_token(1));
        assert_ne!(malloc_token(512), launch_token(1));
        assert_ne!(free_token(1), launch_token(1));
    }

    #[test]
    fn malloc_tokens_are_512_byte_size_classes() {
        assert_eq!(malloc_token(0), MALLOC_KIND);
        assert_eq!(malloc_token(1), malloc_token(512));
        assert_ne!(malloc_token(512), malloc_token(513));
        assert_eq!(malloc_token(513), malloc_token(1024));
        assert_eq!(malloc_token(u64::MAX) & VALUE_MASK, u64::MAX.div_ceil(512));
        assert_eq!(free_token(u64::MAX), free_token(VALUE_MASK));
        assert_ne!(
            launch_token(0x7f00_0000_1234),
            launch_token(0x7f00_0000_1235)
        );
    }

    #[test]
    fn config_is_checked_and_errors_name_the_field() {
        let bad = [
            (config(0, 2, 0), "max_period is 0"),
            (config(MAX_PERIOD_LIMIT + 1, 2, 0), "max_period"),
            (config(8, 1, 0), "repeats is 1"),
            (config(8, MAX_REPEATS + 1, 0), "repeats"),
            (config(8, 2, MAX_MIN_WINDOW + 1), "min_window"),
        ];
        for (cfg, expected) in bad {
            let error = Detector::new(cfg).unwrap_err();
            assert!(error.to_string().contains(expected), "{error}");
        }
        assert!(Detector::new(DetectorConfig::default()).is_ok());
        assert!(Detector::new(config(MAX_PERIOD_LIMIT, MAX_REPEATS, MAX_MIN_WINDOW)).is_ok());
    }

    #[test]
    fn empty_and_mismatched_input() {
        let cfg = DetectorConfig::default();
        assert_eq!(detect(&[], &[], &cfg), Ok(None));
        assert_eq!(segments(&[], &[], &cfg), Ok(Vec::new()));
        assert_eq!(
            detect(&[1, 2], &[0], &cfg),
            Err(DetectError::LengthMismatch { tokens: 2, live: 1 })
        );
        assert!(matches!(
            detect(&[1], &[1], &config(0, 2, 0)),
            Err(DetectError::Config(ConfigError::MaxPeriod(0)))
        ));
    }

    #[test]
    fn exact_periodic_stream_is_found_by_the_third_iteration() {
        for p in [1, 2, 3, 7, 37, 64, 100, 1000, 1021] {
            let tokens = repeat(&distinct(1, p), 5);
            let found = changes(DetectorConfig::default(), &tokens);
            assert_eq!(found.len(), 1, "p = {p}: {found:?}");
            let (index, Change::Detected(period)) = found[0] else {
                panic!("p = {p}: {found:?}");
            };
            assert_eq!(period.length, p as u64);
            assert_eq!(period.detected_at, index);
            assert!(period.detected_at < 3 * p as u64, "p = {p}: {period:?}");
            assert_eq!(period.start, 0);
            assert!(period.iterations_seen >= 2);
        }
    }

    #[test]
    fn iterations_seen_grows_with_the_stream() {
        let p = 10;
        let tokens = repeat(&distinct(1, p), 9);
        let mut detector = Detector::new(DetectorConfig::default()).unwrap();
        for &t in &tokens {
            detector.push(t, 0);
        }
        let period = detector.period().unwrap();
        assert_eq!(period.start, 0);
        assert_eq!(period.iterations_seen, 9);
        assert_eq!(detector.events(), 90);
    }

    #[test]
    fn repeats_sets_the_copies_needed() {
        let p = 16;
        let tokens = repeat(&distinct(1, p), 6);
        let found = changes(config(1 << 10, 4, 0), &tokens);
        let (_, Change::Detected(period)) = found[0] else {
            panic!("{found:?}");
        };
        assert_eq!(period.length, 16);
        assert!(period.detected_at >= 4 * 16 - 1 && period.detected_at < 5 * 16);
        assert!(period.iterations_seen >= 4);
    }

    #[test]
    fn warm_up_iterations_do_not_confuse_it() {
        // Iteration 1 allocates optimizer state (extra mallocs), iteration 2 differs again,
        // then the steady state repeats.
        let steady = distinct(1, 300);
        let mut first = steady.clone();
        first.splice(100..100, (0..40).map(|i| malloc_token(4096 * (i + 1))));
        let mut second = steady.clone();
        second[17] = launch_token(999);
        let mut tokens = first.clone();
        tokens.extend(&second);
        let steady_start = tokens.len() as u64;
        tokens.extend(repeat(&steady, 6));
        let found = changes(DetectorConfig::default(), &tokens);
        assert_eq!(found.len(), 1, "{found:?}");
        let (_, Change::Detected(period)) = found[0] else {
            panic!("{found:?}");
        };
        assert_eq!(period.length, 300);
        // The stretch really begins inside iteration 2, after its odd event (17 + 1).
        assert_eq!(period.start, steady_start - 300 + 18);
        assert!(period.detected_at < steady_start + 3 * 300);
    }

    #[test]
    fn stretch_start_is_traced_beyond_the_examined_span() {
        // 300 warm-up events, then period 1021: it becomes valid after 2342 events and is found
        // by the pass at 2560 events, which examines only the newest 2046.
        let warm_up = distinct(2, 300);
        let mut tokens = warm_up.clone();
        tokens.extend(repeat(&distinct(1, 1021), 4));
        let found = changes(DetectorConfig::default(), &tokens);
        let (index, Change::Detected(period)) = found[0] else {
            panic!("{found:?}");
        };
        assert_eq!((index, period.length), (2559, 1021));
        assert_eq!(period.start, 300);
        assert_eq!(period.iterations_seen, (2560 - 300) / 1021);
    }

    #[test]
    fn an_inner_repetition_at_the_scheduled_phase_does_not_hide_the_iteration() {
        // In AABC the pass for lag 4 runs every 4 events; after a 2-event warm-up it always
        // lands right after AA, where lag 1 is valid and smaller. The iteration must still win
        // when the inner AA ends.
        let (a, b, c) = (launch_token(1), launch_token(2), launch_token(3));
        let mut tokens = vec![launch_token(8), launch_token(9)];
        tokens.extend(repeat(&[a, a, b, c], 20));
        let found = changes(DetectorConfig::default(), &tokens);
        let last = found.last().unwrap();
        assert!(taken(&last.1).is_some_and(|p| p.length == 4), "{found:?}");
        assert!(last.0 < 2 + 4 * 4, "{found:?}");
    }

    /// Live bytes of a forward/backward iteration of `p` events: rising through the forward
    /// pass, falling through the backward pass, least after event `low` of the iteration.
    fn live_curve(p: usize, low: usize, persistent: u64) -> Vec<u64> {
        (0..p)
            .map(|i| {
                let phase = (i + p - low) % p; // 0 at the least
                let height = phase.min(p - phase) as u64;
                persistent + 1000 + 4096 * height
            })
            .collect()
    }

    #[test]
    fn boundary_is_placed_at_the_least_live_memory() {
        let p = 120;
        let low = 77; // least live bytes after event 77 of each iteration
        let steady = distinct(1, p);
        let mut live = live_curve(p, low, 1 << 30).repeat(5);
        // Warm-up allocated optimizer state: the first iteration has less persistent memory,
        // which must not matter (the boundary comes from the last iteration seen).
        for bytes in live.iter_mut().take(p) {
            *bytes -= 1 << 29;
        }
        let tokens = repeat(&steady, 5);
        let period = detect(&tokens, &live, &DetectorConfig::default())
            .unwrap()
            .unwrap();
        assert_eq!(period.length, p as u64);
        assert_eq!(period.boundary % p as u64, (low as u64 + 1) % p as u64);
        assert!(period.boundary <= period.detected_at + 1);
        assert!(period.boundary + p as u64 > period.detected_at);
    }

    #[test]
    fn boundary_ties_take_the_earliest_event() {
        let p = 10;
        // Two equal minima, after events 3 and 8 of each iteration.
        let curve: Vec<u64> = (0..p)
            .map(|i| if i == 3 || i == 8 { 5 } else { 50 })
            .collect();
        let tokens = repeat(&distinct(1, p), 4);
        let live = curve.repeat(4);
        let mut detector = Detector::new(DetectorConfig::default()).unwrap();
        let mut found = None;
        for (&t, &l) in tokens.iter().zip(&live) {
            if let Change::Detected(period) = detector.push(t, l) {
                found = Some(period);
            }
        }
        let period = found.unwrap();
        // The last iteration before detection is events (detected_at − 9 ..= detected_at);
        // the earlier of its two minima decides.
        let window_start = period.detected_at + 1 - p as u64;
        let earliest_min = (window_start..=period.detected_at)
            .find(|&i| i % p as u64 == 3 || i % p as u64 == 8)
            .unwrap();
        assert_eq!(period.boundary, earliest_min + 1);
    }

    #[test]
    fn nested_layers_yield_the_full_iteration() {
        // (AB)³C: three identical layers and a loss.
        let (a, b, c) = (launch_token(1), launch_token(2), launch_token(3));
        let iteration = [a, b, a, b, a, b, c];
        let tokens = repeat(&iteration, 12);
        let found = changes(DetectorConfig::default(), &tokens);
        // The inner AB is a real period of the recent events until the first C …
        assert!(matches!(found[0].1, Change::Detected(p) if p.length == 2));
        // … and the full iteration, once found, is never replaced.
        let full = found
            .iter()
            .position(|(_, c)| taken(c).is_some_and(|p| p.length == 7))
            .unwrap();
        assert_eq!(full, found.len() - 1, "{found:?}");
        assert!(found[full].0 < 3 * 7);
        // It takes over at a C, where the inner AB ends.
        assert_eq!(found[full].0 % 7, 6, "{found:?}");
        assert_eq!(
            detect(&tokens, &[0; 84], &DetectorConfig::default())
                .unwrap()
                .map(|p| p.length),
            Some(7)
        );
        // A window longer than the inner repetition suppresses the transient AB.
        let found = changes(config(1 << 17, 2, 8), &tokens);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(matches!(found[0].1, Change::Detected(p) if p.length == 7));
    }

    #[test]
    fn an_iteration_made_of_two_halves_is_reported_as_its_half() {
        let (a, b) = (launch_token(1), launch_token(2));
        let tokens = repeat(&[a, b, a, b], 10);
        let period = detect(&tokens, &[0; 40], &DetectorConfig::default())
            .unwrap()
            .unwrap();
        assert_eq!(period.length, 2);
        let halves = [distinct(1, 50), distinct(1, 50)].concat();
        let tokens = repeat(&halves, 5);
        let period = detect(&tokens, &vec![0; tokens.len()], &DetectorConfig::default())
            .unwrap()
            .unwrap();
        assert_eq!(period.length, 50);
    }

    #[test]
    fn a_stray_event_loses_the_period_for_at_most_k_plus_one_iterations() {
        let p = 200u64;
        let steady = distinct(1, p as usize);
        for repeats in [2, 3] {
            let mut tokens = repeat(&steady, 6);
            let stray_at = tokens.len() as u64 + 57;
            tokens.extend(repeat(&steady, 8));
            tokens.insert(stray_at as usize, malloc_token(12345));
            let found = changes(config(1 << 17, repeats, 0), &tokens);
            assert_eq!(found.len(), 3, "k = {repeats}: {found:?}");
            assert!(matches!(found[1], (i, Change::Lost(l)) if i == stray_at && l.length == p));
            let (again_at, Change::Detected(again)) = found[2] else {
                panic!("{found:?}");
            };
            assert_eq!(again.length, p);
            assert!(again_at <= stray_at + (repeats as u64 + 1) * p, "{found:?}");
            // The iteration boundary moved by the one extra event.
            assert_eq!(again.start, stray_at + 1);
        }
    }

    #[test]
    fn a_missing_event_loses_the_period_only_for_a_while() {
        let p = 200usize;
        let steady = distinct(1, p);
        for repeats in [2, 3] {
            let mut tokens = repeat(&steady, 6);
            let missing_at = tokens.len() + 57;
            tokens.extend(repeat(&steady, 8));
            tokens.remove(missing_at);
            let found = changes(config(1 << 17, repeats, 0), &tokens);
            let last = found.last().unwrap();
            assert!(
                taken(&last.1).is_some_and(|l| l.length == p as u64),
                "{found:?}"
            );
            assert!(
                last.0 <= (missing_at + (repeats + 1) * p) as u64,
                "{found:?}"
            );
            // With k = 2 the shortened iteration may show up in between; with k = 3 it cannot.
            assert!(
                matches!(found[1], (i, Change::Lost(l)) if i == missing_at as u64 && l.length == p as u64),
                "{found:?}"
            );
            for (_, change) in &found[2..found.len() - 1] {
                match change {
                    Change::Detected(q) | Change::Lost(q) => {
                        assert!(repeats == 2 && q.length == p as u64 - 1, "{found:?}")
                    }
                    Change::Changed { .. } | Change::Unchanged => panic!("{found:?}"),
                }
            }
        }
    }

    #[test]
    fn evaluation_pass_is_noticed_and_training_found_again() {
        let train = distinct(1, 50);
        let eval = distinct(2, 30);
        let mut tokens = repeat(&train, 10);
        let eval_at = tokens.len() as u64;
        tokens.extend(repeat(&eval, 6));
        let train_again_at = tokens.len() as u64;
        tokens.extend(repeat(&train, 10));
        let live = vec![0; tokens.len()];

        let found = segments(&tokens, &live, &DetectorConfig::default()).unwrap();
        assert_eq!(lengths_of(&found), [50, 30, 50], "{found:?}");
        assert_eq!(found[0].end, eval_at);
        assert_eq!(found[0].period.iterations_seen, 10);
        assert_eq!(found[1].period.start, eval_at);
        assert_eq!(found[1].end, train_again_at);
        assert!(found[1].period.detected_at < eval_at + 3 * 30);
        assert!(found[2].period.detected_at < train_again_at + 3 * 50);
        assert_eq!(found[2].end, tokens.len() as u64);

        let lost = changes(DetectorConfig::default(), &tokens);
        assert!(lost.contains(&(eval_at, Change::Lost(found[0].period))));
        assert_eq!(
            detect(&tokens, &live, &DetectorConfig::default())
                .unwrap()
                .map(|p| p.length),
            Some(50)
        );
    }

    #[test]
    fn batch_shape_change_is_a_new_period_of_the_same_length() {
        // 20 layers, each: malloc an activation, launch, free. Doubling the batch doubles the
        // activations; launches and lifetimes stay the same.
        let iteration = |batch: u64| -> Vec<u64> {
            (1..=20)
                .flat_map(|layer| {
                    let activation = malloc_token(batch * 1024 * layer);
                    [activation, launch_token(layer), free_token(3)]
                })
                .collect()
        };
        let mut tokens = iteration(32).repeat(5);
        let change_at = tokens.len() as u64;
        tokens.extend(iteration(64).repeat(5));
        let found = segments(&tokens, &vec![0; tokens.len()], &DetectorConfig::default()).unwrap();
        assert_eq!(lengths_of(&found), [60, 60], "{found:?}");
        assert_eq!(found[0].end, change_at);
        // The new stretch starts with the launch and free of the old iteration's last layer:
        // those events match one iteration later too.
        assert_eq!(found[1].period.start, change_at - 2);
        assert!(found[1].period.detected_at < change_at + 3 * 60);
    }

    #[test]
    fn a_new_period_valid_at_the_breaking_event_is_a_change() {
        let (a, b) = (launch_token(1), launch_token(2));
        let mut tokens = repeat(&[a, b], 5);
        tokens.extend([b, b, b]);
        let found = changes(DetectorConfig::default(), &tokens);
        assert_eq!(found.len(), 2, "{found:?}");
        let (index, Change::Changed { lost, detected }) = found[1] else {
            panic!("{found:?}");
        };
        assert_eq!(index, 10);
        assert_eq!((lost.length, detected.length), (2, 1));
        assert_eq!(detected.start, 9);
    }

    #[test]
    fn max_period_is_respected() {
        let tokens = repeat(&distinct(1, 100), 6);
        let live = vec![0; tokens.len()];
        assert_eq!(detect(&tokens, &live, &config(99, 2, 0)), Ok(None));
        let period = detect(&tokens, &live, &config(100, 2, 0)).unwrap().unwrap();
        assert_eq!(period.length, 100);
        assert_eq!(detect(&tokens, &live, &config(1, 2, 0)), Ok(None));
    }

    #[test]
    fn degenerate_streams_do_not_panic() {
        let same = vec![u64::MAX; 5000];
        let period = detect(&same, &same, &config(1, 64, MAX_MIN_WINDOW)).unwrap();
        assert_eq!(period, None); // window 2^30 never fills
        let period = detect(&same, &same, &config(1, 2, 0)).unwrap().unwrap();
        assert_eq!(
            (period.length, period.start, period.iterations_seen),
            (1, 0, 5000)
        );
        let mut alternating = Detector::new(config(3, 2, 1)).unwrap();
        for i in 0..10_000u64 {
            let _ = alternating.push(i % 2, u64::MAX - i);
        }
        assert_eq!(alternating.period().map(|p| p.length), Some(2));
    }

    #[test]
    fn history_stays_bounded() {
        let cfg = config(64, 2, 0);
        let mut detector = Detector::new(cfg).unwrap();
        let mut rng = crate::rng::SplitMix64::new(7);
        for _ in 0..50_000 {
            let _ = detector.push(rng.next_u64() % 3, 0);
            assert!(detector.tokens.len() <= 2 * 1024);
        }
    }

    #[test]
    fn large_stream_with_long_period() {
        let p = 20_000;
        let mut rng = crate::rng::SplitMix64::new(42);
        let steady: Vec<u64> = (0..p)
            .map(|_| launch_token(rng.next_u64() % 5000))
            .collect();
        let steady_live: Vec<u64> = (0..p as u64).map(|i| (i * 7919) % 100_003).collect();
        let mut tokens: Vec<u64> = (0..7_000)
            .map(|_| malloc_token(rng.next_u64() % 100))
            .collect();
        let warm_up = tokens.len() as u64;
        let mut live = vec![1 << 40; tokens.len()];
        while tokens.len() < 2_000_000 {
            tokens.extend(&steady);
            live.extend(&steady_live);
        }
        tokens.truncate(2_000_000);
        live.truncate(2_000_000);
        let found = segments(&tokens, &live, &DetectorConfig::default()).unwrap();
        let last = found.last().unwrap();
        assert_eq!(last.period.length, p as u64);
        assert_eq!(last.end, 2_000_000);
        assert!(last.period.start <= warm_up);
        assert!(last.period.detected_at < warm_up + 3 * p as u64);
        assert_eq!(
            last.period.iterations_seen,
            (2_000_000 - last.period.start) / p as u64
        );
        // The least live value of the steady iteration is at i = 0 (0 bytes).
        assert_eq!((last.period.boundary - warm_up) % p as u64, 1);
    }

    /// The definition, computed the slow way: `run[p]` is the current run of `s[i] = s[i − p]`.
    struct Oracle {
        tokens: Vec<u64>,
        run: Vec<usize>,
        config: DetectorConfig,
    }

    impl Oracle {
        fn new(config: DetectorConfig) -> Self {
            Oracle {
                tokens: Vec::new(),
                run: vec![0; config.max_period + 1],
                config,
            }
        }

        fn push(&mut self, token: u64) {
            self.tokens.push(token);
            let n = self.tokens.len() - 1;
            for p in 1..=self.config.max_period {
                self.run[p] = if n >= p && self.tokens[n - p] == token {
                    self.run[p] + 1
                } else {
                    0
                };
            }
        }

        fn valid(&self, p: usize) -> bool {
            let window = (self.config.repeats * p).max(self.config.min_window);
            (1..=self.config.max_period).contains(&p) && self.run[p] + p >= window
        }

        fn smallest_valid(&self) -> Option<usize> {
            (1..=self.config.max_period).find(|&p| self.valid(p))
        }
    }

    /// The smallest `d` such that the infinite repetition of `pattern` has period `d`.
    fn primitive_period(pattern: &[u64]) -> usize {
        let p = pattern.len();
        (1..=p)
            .find(|&d| p.is_multiple_of(d) && (0..p).all(|i| pattern[i] == pattern[i % d]))
            .unwrap_or(p)
    }

    #[test]
    fn random_periodic_streams_match_the_definition() {
        let mut rng = crate::rng::SplitMix64::new(2024);
        for case in 0..400 {
            let repeats = rng.range(2, 5) as usize;
            let min_window = if rng.range(0, 3) == 0 {
                0
            } else {
                rng.range(1, 41) as usize
            };
            let max_period = rng.range(4, 71) as usize;
            let cfg = config(max_period, repeats, min_window);
            let alphabet = rng.range(2, 7);
            let len = rng.range(1, max_period as u64 + 1) as usize;
            let pattern: Vec<u64> = (0..len).map(|_| rng.range(1, alphabet + 1)).collect();
            let truth = primitive_period(&pattern);
            let warm_up_len = rng.range(0, 3 * len as u64 + 1) as usize;
            let mut tokens: Vec<u64> = (0..warm_up_len)
                .map(|_| rng.range(1, alphabet + 3))
                .collect();
            let steady_len = (repeats + 6) * len + 2 * max_period + 2 * min_window;
            tokens.extend(pattern.iter().cycle().take(steady_len));
            let live: Vec<u64> = (0..tokens.len()).map(|_| rng.range(0, 10)).collect();

            let mut detector = Detector::new(cfg).unwrap();
            let mut oracle = Oracle::new(cfg);
            for (n, (&token, &bytes)) in tokens.iter().zip(&live).enumerate() {
                let before = detector.period();
                oracle.push(token);
                let change = detector.push(token, bytes);
                let context = format!("case {case}, {cfg:?}, event {n}, {change:?}");
                let (lost, detected) = match change {
                    Change::Unchanged => (None, None),
                    Change::Detected(p) => (None, Some(p)),
                    Change::Lost(p) => (Some(p), None),
                    Change::Changed { lost, detected } => (Some(lost), Some(detected)),
                };
                if let Some(lost) = lost {
                    let p = lost.length as usize;
                    assert_eq!(before.map(|b| b.length), Some(lost.length), "{context}");
                    assert_ne!(tokens[n - p], token, "lost while following: {context}");
                }
                if let Some(found) = detected {
                    let p = found.length as usize;
                    assert!(oracle.valid(p), "{context}");
                    if lost.is_none() {
                        assert_eq!(oracle.smallest_valid(), Some(p), "{context}");
                    } else {
                        // Every smaller valid lag has a shorter stretch (a tie within the
                        // examined span would have gone to the smaller lag).
                        let stretch = |q: usize| oracle.run[q] + q;
                        for q in (1..p).filter(|&q| oracle.valid(q)) {
                            assert!(stretch(q) < stretch(p), "{q}: {context}");
                        }
                    }
                    assert_eq!(found.detected_at, n as u64, "{context}");
                    let last = &live[n + 1 - p..=n];
                    let least = last.iter().position(|b| b == last.iter().min().unwrap());
                    assert_eq!(
                        found.boundary,
                        (n + 2 - p + least.unwrap()) as u64,
                        "{context}"
                    );
                    // Streams here are shorter than the retained history, and a stretch of
                    // up to twice the examined span is traced exactly.
                    let stretch = oracle.run[p] + p;
                    let true_start = (n + 1 - stretch) as u64;
                    if stretch <= 2 * (repeats * p).max(min_window) {
                        assert_eq!(found.start, true_start, "{context}");
                    } else {
                        assert!(found.start >= true_start, "{context}");
                    }
                }
                match detector.period() {
                    Some(now) => {
                        let p = now.length as usize;
                        assert!(oracle.valid(p), "kept an invalid period: {context}");
                        assert_eq!(
                            now.iterations_seen,
                            (n as u64 + 1 - now.start) / now.length,
                            "{context}"
                        );
                        assert!(now.iterations_seen >= repeats as u64, "{context}");
                    }
                    None => {
                        // Invariant 3: at an event where lag p's level runs, p is not valid.
                        for p in 1..=max_period {
                            let level = p.ilog2().max(detector.lowest_level);
                            if (n + 1) % (1 << level) == 0 {
                                assert!(!oracle.valid(p), "missed {p}: {context}");
                            }
                        }
                    }
                }
            }
            let end = detector.period().map(|p| p.length as usize);
            assert_eq!(
                end,
                Some(truth),
                "case {case}: {cfg:?}, pattern {pattern:?}"
            );
            let found = detect(&tokens, &live, &cfg)
                .unwrap()
                .map(|p| p.length as usize);
            assert_eq!(
                found,
                Some(truth),
                "case {case}: {cfg:?}, pattern {pattern:?}"
            );
        }
    }
}
