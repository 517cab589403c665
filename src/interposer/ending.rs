//! However the process ends, what itermem recorded reaches its files: the trace (flushed, with
//! its end record) and the statistics.
//!
//! | ending | what runs |
//! |---|---|
//! | `exit`, return from `main` | `atexit` handler |
//! | `_exit`, `_Exit` (no atexit handlers) | our exports of those names, then the real ones |
//! | SIGTERM, SIGINT | the `itermem-signals` thread (signal-hook); then the default action if the program left it |
//! | SIGABRT, SIGSEGV, SIGBUS, SIGILL, SIGFPE | a handler that wakes the `itermem-crash` thread and waits for it at most [`CRASH_FLUSH_WAIT_MS`], then lets the signal take its course (the program's own handler, or the default action) |
//! | SIGKILL, power loss | nothing can run: the trace holds what the writer had written, up to about 100 ms before (the recorder hands a batch over after 50 ms, the writer writes within 50 ms) |
//!
//! A crashing thread may hold any lock, malloc's included, so its handler does nothing but
//! async-signal-safe calls (`write` to a pipe, `nanosleep`); the flush runs on a thread of its
//! own, and when it cannot finish in time (a lock the crashed thread holds), the process dies
//! anyway with what the writer already had. A child forked without exec inherits the handlers
//! but not the threads and never flushes its parent's files.
//!
//! The statistics and plan files are replaced atomically ([`write_atomically`]): a reader sees
//! the previous file or the new one, never a part.

use super::{ACTIVE, STATE, report};
use crate::config::{Config, Mode};
use serde::Serialize;
use std::ffi::{c_int, c_void};
use std::panic::catch_unwind;
use std::path::Path;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering};

/// How long a crashing thread waits for the flush before the signal takes its course.
pub const CRASH_FLUSH_WAIT_MS: u64 = 2000;

const FATAL_SIGNALS: [c_int; 5] = [
    libc::SIGABRT,
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGILL,
    libc::SIGFPE,
];

/// Write end of the pipe that wakes the crash thread (-1: none).
static CRASH_PIPE: AtomicI32 = AtomicI32::new(-1);
/// Set by the first crashing thread: later ones (and the same one, again) do not flush.
static CRASHING: AtomicBool = AtomicBool::new(false);
/// Set by the crash thread when the files are written.
static CRASH_FLUSHED: AtomicBool = AtomicBool::new(false);
/// The process that installed the handlers (a forked child's crash is not ours to flush).
static OWNER: AtomicU32 = AtomicU32::new(0);
/// The actions the fatal signals had before ours, in the order of [`FATAL_SIGNALS`].
static PREVIOUS: OnceLock<[libc::sigaction; FATAL_SIGNALS.len()]> = OnceLock::new();

/// Sets up every ending of the table; called once, when recording starts.
pub(super) fn install(config: &Config) {
    // SAFETY: registering a plain `extern "C" fn()` with atexit has no preconditions.
    unsafe { libc::atexit(at_exit) };
    if config.trace.is_some() || config.stats.is_some() {
        install_signal_flush();
        install_crash_flush();
    }
}

extern "C" fn at_exit() {
    let _ = catch_unwind(|| finish(true));
}

/// `_exit(2)`: the program ends without atexit handlers (as forked workers and some crash
/// paths do); the files are written first. (Not in unit-test builds: a test binary must not
/// take over its own `_exit`.)
#[cfg(not(test))]
#[unsafe(no_mangle)]
pub extern "C" fn _exit(status: c_int) -> ! {
    end_now(status)
}

/// `_Exit(3)`, the C99 name of `_exit` (the same function in every libc).
#[cfg(not(test))]
#[unsafe(no_mangle)]
#[allow(non_snake_case)]
pub extern "C" fn _Exit(status: c_int) -> ! {
    end_now(status)
}

/// Writes the files, then ends the process through the real `_exit`.
#[cfg(not(test))]
fn end_now(status: c_int) -> ! {
    use super::real::RealFn;
    type Exit = unsafe extern "C" fn(c_int) -> !;
    static EXIT: RealFn = RealFn::new(c"_exit");
    let _ = catch_unwind(|| finish(true));
    // SAFETY: `_exit` has the prototype `void (int)` and never returns.
    if let Some(exit) = unsafe { EXIT.get::<Exit>() } {
        // SAFETY: as above.
        unsafe { exit(status) }
    }
    // SAFETY: exit_group ends every thread of the process; it does not return.
    unsafe { libc::syscall(libc::SYS_exit_group, status as libc::c_long) };
    // Not a panic: nothing may unwind out of an `extern "C"` function.
    std::process::abort()
}

/// SIGTERM and SIGINT flush the trace and write the statistics. If the program left the signal
/// at its default action, that action (termination) is carried out afterwards; a handler of the
/// program's own runs as before (signal-hook chains it) and decides.
fn install_signal_flush() {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let defaults: Vec<i32> = [SIGTERM, SIGINT]
        .into_iter()
        .filter(|&signal| has_default_action(signal))
        .collect();
    let mut signals = match signal_hook::iterator::Signals::new([SIGTERM, SIGINT]) {
        Ok(signals) => signals,
        Err(err) => {
            report(format_args!(
                "cannot watch SIGTERM/SIGINT ({err}); the trace is flushed at exit only"
            ));
            return;
        }
    };
    let spawned = std::thread::Builder::new()
        .name("itermem-signals".into())
        .spawn(move || {
            for signal in signals.forever() {
                let terminating = defaults.contains(&signal);
                let _ = catch_unwind(|| finish(terminating));
                if terminating {
                    let _ = signal_hook::low_level::emulate_default_handler(signal);
                }
            }
        });
    if let Err(err) = spawned {
        report(format_args!(
            "cannot start the signal thread ({err}); the trace is flushed at exit only"
        ));
    }
}

fn has_default_action(signal: i32) -> bool {
    // SAFETY: querying (act = NULL) the current action into a zeroed sigaction.
    unsafe {
        let mut current: libc::sigaction = std::mem::zeroed();
        libc::sigaction(signal, std::ptr::null(), &mut current) == 0
            && current.sa_sigaction == libc::SIG_DFL
    }
}

/// The crash thread, its pipe, and the handlers of the fatal signals (module doc).
fn install_crash_flush() {
    let mut ends = [0 as c_int; 2];
    // SAFETY: `ends` has room for the two descriptors.
    if unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        report(format_args!(
            "cannot watch for crashes ({}); a crash loses the last moments of the trace",
            std::io::Error::last_os_error()
        ));
        return;
    }
    let [read_end, write_end] = ends;
    let spawned = std::thread::Builder::new()
        .name("itermem-crash".into())
        .spawn(move || {
            let mut byte = 0u8;
            // SAFETY: reads one byte into `byte` from our own pipe.
            while unsafe { libc::read(read_end, (&mut byte as *mut u8).cast(), 1) } < 0
                && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
            {
            }
            let _ = catch_unwind(|| finish(true));
            CRASH_FLUSHED.store(true, Ordering::SeqCst);
        });
    if let Err(err) = spawned {
        report(format_args!(
            "cannot start the crash thread ({err}); a crash loses the last moments of the trace"
        ));
        // SAFETY: our own descriptors, used by nothing else.
        unsafe { (libc::close(read_end), libc::close(write_end)) };
        return;
    }
    CRASH_PIPE.store(write_end, Ordering::SeqCst);
    OWNER.store(std::process::id(), Ordering::SeqCst);
    // SAFETY: all-zero is a valid sigaction (SIG_DFL, empty mask, no flags).
    let mut previous: [libc::sigaction; FATAL_SIGNALS.len()] = unsafe { std::mem::zeroed() };
    for (signal, previous) in FATAL_SIGNALS.iter().zip(previous.iter_mut()) {
        // SAFETY: querying into a valid sigaction.
        unsafe { libc::sigaction(*signal, std::ptr::null(), previous) };
    }
    // Stored before the handlers exist, so a handler always finds it.
    let previous = PREVIOUS.get_or_init(|| previous);
    for (signal, previous) in FATAL_SIGNALS.iter().zip(previous) {
        // SAFETY: all-zero is a valid sigaction; the fields set are those of a SA_SIGINFO
        // handler with the prototype sigaction(2) documents.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_fatal_signal as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESTART;
            action.sa_mask = previous.sa_mask;
            libc::sigaction(*signal, &action, std::ptr::null_mut());
        }
    }
}

/// The fatal signals' handler: async-signal-safe calls only (module doc).
extern "C" fn on_fatal_signal(signal: c_int, info: *mut libc::siginfo_t, context: *mut c_void) {
    // SAFETY: getpid, write and nanosleep are async-signal-safe; the pipe is ours.
    unsafe {
        let pipe = CRASH_PIPE.load(Ordering::SeqCst);
        let ours = libc::getpid() as u32 == OWNER.load(Ordering::SeqCst);
        if ours && pipe >= 0 && !CRASHING.swap(true, Ordering::SeqCst) {
            let byte = 1u8;
            libc::write(pipe, (&byte as *const u8).cast(), 1);
            let step = libc::timespec {
                tv_sec: 0,
                tv_nsec: 10_000_000,
            };
            for _ in 0..CRASH_FLUSH_WAIT_MS / 10 {
                if CRASH_FLUSHED.load(Ordering::SeqCst) {
                    break;
                }
                libc::nanosleep(&step, std::ptr::null_mut());
            }
        }
    }
    let index = FATAL_SIGNALS.iter().position(|&s| s == signal);
    let previous = index.and_then(|i| PREVIOUS.get().map(|all| all[i]));
    match previous {
        Some(previous)
            if previous.sa_sigaction != libc::SIG_DFL && previous.sa_sigaction != libc::SIG_IGN =>
        {
            // SAFETY: the program's own handler, called as the kernel would have called it.
            unsafe {
                if previous.sa_flags & libc::SA_SIGINFO != 0 {
                    let handler: extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void) =
                        std::mem::transmute(previous.sa_sigaction);
                    handler(signal, info, context);
                } else {
                    let handler: extern "C" fn(c_int) = std::mem::transmute(previous.sa_sigaction);
                    handler(signal);
                }
            }
        }
        _ => {
            // SAFETY: sigaction and raise are async-signal-safe. With the default action back,
            // a fault re-executes its instruction when the handler returns, and a sent signal
            // (kill, raise, abort: si_code <= 0) is raised again, pending until we return.
            unsafe {
                let mut default: libc::sigaction = std::mem::zeroed();
                default.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(signal, &default, std::ptr::null_mut());
                if info.is_null() || (*info).si_code <= 0 {
                    libc::raise(signal);
                }
            }
        }
    }
}

/// Flushes the trace and writes the statistics file; at the end of the process (`closing`) the
/// trace gets its end record. Safe to run more than once (the statistics are simply rewritten).
fn finish(closing: bool) {
    let Some(Some(recorder)) = STATE.get() else {
        return;
    };
    // A child forked without exec inherits the recorder but not its writer thread (waiting
    // for it would hang the child's exit), and the trace and statistics are the parent's.
    if std::process::id() != recorder.pid {
        return;
    }
    recorder.flush(closing);
    if let Some(path) = &recorder.config.stats {
        write_stats(
            path,
            &Stats {
                mode: recorder.config.mode,
                trace: recorder
                    .config
                    .trace
                    .as_deref()
                    .map(|p| p.display().to_string()),
                internal_error: !ACTIVE.load(Ordering::Relaxed),
                summary: recorder.summary(),
            },
        );
    }
}

/// The statistics file (`ITERMEM_STATS`): stable keys, documented in `docs/reference.md`.
#[derive(Serialize)]
struct Stats {
    mode: Mode,
    trace: Option<String>,
    /// Whether itermem hit an internal error and went pass-through.
    internal_error: bool,
    #[serde(flatten)]
    summary: super::Summary,
}

fn write_stats(path: &Path, stats: &Stats) {
    let result = serde_json::to_string_pretty(stats)
        .map_err(std::io::Error::other)
        .and_then(|text| write_atomically(path, (text + "\n").as_bytes()));
    if let Err(err) = result {
        report(format_args!(
            "cannot write statistics to {}: {err}",
            path.display()
        ));
    }
}

/// Replaces `path` with `bytes` so that a reader sees the old file or the new, never a part:
/// written to a temporary file beside it (same file system), then renamed over it. A path
/// that is not a regular file (`/dev/stderr`, a FIFO) is written in place.
pub(super) fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    if std::fs::metadata(path).is_ok_and(|meta| !meta.is_file()) {
        return std::fs::write(path, bytes);
    }
    let mut name = std::ffi::OsString::from(".");
    name.push(path.file_name().unwrap_or(path.as_os_str()));
    name.push(format!(".{}.tmp", std::process::id()));
    let temporary = path.with_file_name(name);
    let written = std::fs::File::create(&temporary)
        .and_then(|mut file| file.write_all(bytes))
        .and_then(|()| std::fs::rename(&temporary, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::write_atomically;

    #[test]
    fn a_replaced_file_is_whole_and_no_temporary_file_stays() {
        let dir = std::env::temp_dir().join(format!("itermem-atomic-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("stats.json");
        std::fs::write(&path, "old").unwrap();
        write_atomically(&path, b"new and longer").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new and longer");
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("stats.json")]);
        // Not a regular file: written in place, never renamed over.
        write_atomically(std::path::Path::new("/dev/null"), b"x").unwrap();
        use std::os::unix::fs::FileTypeExt;
        assert!(
            std::fs::metadata("/dev/null")
                .unwrap()
                .file_type()
                .is_char_device()
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}
