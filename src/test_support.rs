//! Helpers shared by the unit tests of several modules.

use std::path::PathBuf;
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
