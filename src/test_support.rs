//! Helpers shared by the unit tests of several modules.

/// Sample inputs of the importers, shared with the fuzz targets (`tests/fuzz.rs`).
#[path = "../tests/support/samples.rs"]
pub mod samples;

#[path = "../tests/support/real_traces.rs"]
mod real_traces;
pub use real_traces::{real_trace, real_traces};

use crate::event::Event;
use crate::trace::{Clock, TraceHeader, TraceWriter};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A fresh path in the temp directory, removed on drop.
pub struct TempPath(pub PathBuf);

impl TempPath {
    pub fn new(name: &str) -> TempPath {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        TempPath(std::env::temp_dir().join(format!(
            "itermem-unit-test-{}-{n}-{name}",
            std::process::id()
        )))
    }

    /// A fresh path holding `bytes`.
    pub fn with(name: &str, bytes: &[u8]) -> TempPath {
        let path = TempPath::new(name);
        std::fs::write(&path.0, bytes).unwrap();
        path
    }
}

impl Drop for TempPath {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// An itermem trace of `events` at `path`, recorded on a 1 GiB device named "sim".
pub fn write_trace(path: &Path, events: impl IntoIterator<Item = Event>) {
    let header = TraceHeader {
        word_size: 8,
        clock: Clock::MonotonicSinceStart,
        start_unix_ns: 0,
        pid: 1,
        device_name: "sim".into(),
        device_total_memory: 1 << 30,
        command_line: vec!["train".into()],
    };
    let writer = TraceWriter::create(path, header).unwrap();
    for event in events {
        writer.record(event);
    }
    writer.finish().unwrap();
}

/// A planner buffer: `size` bytes live over `[lower, upper)`.
pub fn buffer(id: u64, lower: u64, upper: u64, size: u64) -> crate::plan::Buffer {
    crate::plan::Buffer {
        id,
        lower,
        upper,
        size,
    }
}
