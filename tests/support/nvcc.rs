//! The programs of `tests/programs/cu/`, built by NVIDIA's nvcc (`tools/build-cuda-programs`,
//! which installs it from PyPI). Shared by the workspace's tests (`tests/support` and
//! `cuda-shim/tests`, which includes this file by path).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The repository's root: the nearest folder above the test's crate holding the build script.
fn repository() -> &'static Path {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    crate_dir
        .ancestors()
        .find(|dir| dir.join("tools/build-cuda-programs").exists())
        .unwrap_or(crate_dir)
}

/// The binary of `tests/programs/cu/NAME.cu` (`NAME-static` for the static runtime's build),
/// building them all once per test process. `None`, after one `SKIPPED <test>: …` line on the
/// terminal, when nvcc cannot be installed here (PyPI unreachable).
pub fn built(name: &str) -> Option<PathBuf> {
    static BUILT: OnceLock<bool> = OnceLock::new();
    let ok = *BUILT.get_or_init(|| {
        let output = Command::new(repository().join("tools/build-cuda-programs"))
            .output()
            .expect("cannot run tools/build-cuda-programs");
        match output.status.code() {
            Some(0) => true,
            Some(3) => false,
            _ => panic!(
                "tools/build-cuda-programs failed ({}):\n{}\n{}",
                output.status,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ),
        }
    });
    if !ok {
        let test = std::thread::current()
            .name()
            .unwrap_or("a test")
            .to_string();
        // Written to the stream itself, which the test harness does not capture.
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED {test}: nvcc could not be installed from PyPI (tools/build-cuda-programs)"
        );
        return None;
    }
    Some(repository().join("target/programs/cu").join(name))
}
