//! Where `itermem run` finds the interposer it preloads, and `itermem library-path`.
//!
//! 1. `--lib PATH` when given (in `run_cmd`);
//! 2. `libitermem.so` beside the executable (or in `deps/` beside it): a build of the checkout,
//!    `target/release/itermem` ([`itermem::interposer::library_beside`]);
//! 3. the copy the executable carries: `build.rs` has cargo's cdylib included in the executable
//!    ([`CARRIED`]), and it is written once to the user's cache directory
//!    (`$XDG_CACHE_HOME/itermem/`, else `~/.cache/itermem/`), named by its length and hash, so
//!    an executable of another build never loads this build's copy and a copy already written is
//!    used as it is. This is how the command of `cargo install` and of the wheel finds it: both
//!    install the executable alone.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

use super::BadInput;

/// The interposer library of the build that made this executable (empty when it was built by
/// `cargo check`, which links nothing).
static CARRIED: &[u8] = include_bytes!(env!("INTERPOSER_CDYLIB_PATH"));

/// `itermem library-path`: prints the library `itermem run` preloads by default (writing the
/// carried copy first if needed), for `LD_PRELOAD=$(itermem library-path) ./train` and for
/// PyTorch's pluggable allocator (`itermem.library_path()` of the Python package).
pub fn print_path() -> anyhow::Result<()> {
    let path = default_library()?;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{}", path.display())?;
    Ok(())
}

/// The library beside this executable, else the copy it carries, written to the cache.
pub fn default_library() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("cannot locate the itermem executable")?;
    let beside = itermem::interposer::library_beside(&exe);
    if beside.is_file() {
        return Ok(beside);
    }
    if CARRIED.is_empty() {
        bail!(BadInput(format!(
            "{} does not exist and this itermem executable carries no copy of the library \
             (built by `cargo check`?): build it with `cargo build`, or pass --lib",
            beside.display()
        )));
    }
    let dir = cache_dir().ok_or_else(|| {
        BadInput(
            "neither XDG_CACHE_HOME nor HOME is set, so there is nowhere to write the \
             interposer library this executable carries: set one, or pass --lib"
                .to_string(),
        )
    })?;
    write_once(&dir, CARRIED)
}

fn cache_dir() -> Option<PathBuf> {
    let absolute = |var: &str| {
        std::env::var_os(var)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    absolute("XDG_CACHE_HOME")
        .or_else(|| absolute("HOME").map(|home| home.join(".cache")))
        .map(|cache| cache.join("itermem"))
}

/// `bytes` as `dir/libitermem-<len>-<hash>.so`: written (to a temporary name, then renamed, so
/// a process starting meanwhile never loads half a file) unless a file of that name and length
/// is there.
fn write_once(dir: &Path, bytes: &[u8]) -> anyhow::Result<PathBuf> {
    use std::hash::Hasher;
    let mut hasher = rustc_hash::FxHasher::default();
    hasher.write(bytes);
    let path = dir.join(format!(
        "libitermem-{}-{:016x}.so",
        bytes.len(),
        hasher.finish()
    ));
    if path.metadata().is_ok_and(|m| m.len() == bytes.len() as u64) {
        return Ok(path);
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let temporary = dir.join(format!(".libitermem-{}.tmp", std::process::id()));
    std::fs::write(&temporary, bytes)
        .and_then(|()| std::fs::rename(&temporary, &path))
        .with_context(|| format!("cannot write the interposer library to {}", path.display()))
        .inspect_err(|_| {
            let _ = std::fs::remove_file(&temporary);
        })?;
    Ok(path)
}
