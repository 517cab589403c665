//! The shared real workloads: `../shared/real-traces`, beside the checkout, read in place and
//! never copied into the repository. One source for the library's unit tests (through
//! `src/test_support.rs`) and the integration tests (through `support`).

use std::io::Write;
use std::path::{Path, PathBuf};

/// The shared real-traces folder, or `None` after saying that the calling test is skipped.
pub fn real_traces() -> Option<PathBuf> {
    real_trace("")
}

/// `relative` inside the shared real-traces folder, or `None` after saying that the calling
/// test is skipped because it is absent.
pub fn real_trace(relative: &str) -> Option<PathBuf> {
    let folder = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/real-traces");
    let path = if relative.is_empty() {
        folder
    } else {
        folder.join(relative)
    };
    if path.exists() {
        return Some(path);
    }
    say_skipped(format_args!(
        "{} is absent (the shared real traces are not part of a clone)",
        path.display()
    ));
    None
}

/// Says on the terminal that the calling test is skipped, and why.
pub fn say_skipped(why: std::fmt::Arguments) {
    // The harness names each test's thread after the test.
    let current = std::thread::current();
    let test = current.name().unwrap_or("a test");
    // Written to the stream itself: the harness captures `eprintln!` and shows it only for a
    // failing test, so a skipped test would look like a passing one.
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {why}");
}
