//! The trace file: a compact, versioned, little-endian binary log of every [`Event`] the
//! interposer saw, written while the program runs and read back by the `itermem` CLI.
//!
//! The byte layout is specified in `docs/trace-format.md`; that document, not this code, is the
//! contract a third-party reader is written from, and [`format`](mod@format) follows it line by line.
//!
//! Why it is built this way:
//! - **Self-describing records** (kind byte + body length + body): a reader skips kinds it does
//!   not know and ignores trailing bytes of a body it does know, so later versions can add
//!   records and fields without breaking old readers. The version number changes only for
//!   incompatible layouts, and a reader refuses versions it does not know.
//! - **Compact**: ids, sizes and the time delta to the previous record are LEB128 varints, so a
//!   launch record takes about 7 bytes plus 1–3 per allocation it touches (a real trace of a
//!   small MLP averages 15 bytes per event); a training run logs millions of them.
//! - **Writing never stalls the program for long and never loses silently**: [`TraceWriter`]
//!   hands events to one background thread through a bounded channel (a full channel makes the
//!   caller wait, it never drops), and a failing disk turns into one `itermem:` line on stderr and
//!   a count of lost events, never a panic.
//! - **Reading never panics**: [`TraceFile`] checks every length against the file and every enum
//!   value against its table, and reports a [`TraceError`] naming the file and the byte offset.

pub mod format;

mod error;
mod reader;
mod writer;

#[cfg(test)]
mod tests;

pub use error::{Problem, TraceError};
pub use reader::{Events, TraceFile};
pub use writer::{AfterBatch, BeforeBatch, TraceSummary, TraceWriter};

use serde::Serialize;

#[cfg(doc)]
use crate::event::Event;

/// Which clock the events' `time_ns` fields are measured on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Clock {
    /// Nanoseconds of `CLOCK_MONOTONIC` elapsed since the recording started; the start itself is
    /// [`TraceHeader::start_unix_ns`] on the wall clock.
    MonotonicSinceStart = 1,
}

impl Clock {
    pub fn from_u8(value: u8) -> Option<Clock> {
        match value {
            1 => Some(Clock::MonotonicSinceStart),
            _ => None,
        }
    }
}

/// What the trace header says about the recording (everything but the format's own fields:
/// magic, version and header length are the writer's business).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TraceHeader {
    /// Size of a pointer in the traced process, in bytes (4 or 8).
    pub word_size: u8,
    /// The clock event times use.
    pub clock: Clock,
    /// Wall-clock time at which the recording started (event time 0), in ns since the Unix epoch.
    pub start_unix_ns: u64,
    /// Process id of the traced program.
    pub pid: u32,
    /// Name of the CUDA device (empty when unknown).
    pub device_name: String,
    /// Total memory of the device in bytes (0 when unknown).
    pub device_total_memory: u64,
    /// The traced program's command line, one string per argument (lossily converted to UTF-8).
    pub command_line: Vec<String>,
}

impl TraceHeader {
    /// A header for the calling process: its pid, its command line, the native word size, the
    /// monotonic clock, and `start_unix_ns` = now. The caller must take its event times from the
    /// same instant (set `start_unix_ns` itself if its clock started earlier).
    pub fn for_this_process(device_name: String, device_total_memory: u64) -> TraceHeader {
        let start_unix_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
            .unwrap_or(0);
        TraceHeader {
            word_size: std::mem::size_of::<usize>() as u8,
            clock: Clock::MonotonicSinceStart,
            start_unix_ns,
            pid: std::process::id(),
            device_name,
            device_total_memory,
            command_line: std::env::args_os()
                .map(|a| a.to_string_lossy().into_owned())
                .collect(),
        }
    }
}

/// The closing record a writer appends when it finishes cleanly. Its absence means the program
/// ended without [`TraceWriter::finish`] (killed, crashed, or the trace was copied while open);
/// the events before that point are still valid.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct EndRecord {
    /// Events the writer put in the file (this record not included).
    pub events_written: u64,
    /// Events that were recorded but could not be written (after a write error).
    pub events_lost: u64,
}
