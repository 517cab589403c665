//! The LD_PRELOAD interposer: the hooks exported under the CUDA runtime's names, and the one
//! process-wide state they report to.
//!
//! Every hook goes through [`intercept`]: it calls the real function exactly once and returns
//! its result, whatever happens in itermem's own code. itermem's part (the observer) runs inside
//! `catch_unwind`; a panic there is reported once, switches the whole process to pass-through
//! and still returns the real call's result, so no bug of ours can crash or change the host
//! program (in swap mode, after bringing the swapped tensors back; where one cannot come back
//! in time, the program stops with an `itermem: fatal:` line rather than compute on). A thread-local flag keeps calls made while a hook is running (itermem's own, or the
//! runtime calling back into its exported names) out of the log.
//!
//! The state is created at the first hooked call from the `ITERMEM_*` environment. However the
//! process ends, the trace is flushed and the statistics written (`ending.rs`).

mod backing;
mod bandwidth;
mod clock;
mod cnmem;
mod device;
mod driver;
mod ending;
mod graphs;
pub mod hooks;
mod late;
mod live;
pub mod pluggable;
mod pool;
mod real;
mod recorder;
pub mod resolve;
mod staging;
mod swap;

pub use recorder::{DeviceSummary, Recorder, Summary};

use crate::config::{Config, Mode};
use std::cell::{Cell, OnceCell};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// `cudaErrorSharedObjectSymbolNotFound`: the real function does not exist.
pub const CUDA_ERROR_SYMBOL_NOT_FOUND: u32 = 302;

/// Cleared forever after an internal error: from then on every hook passes through.
/// `Relaxed`: a flag with no data behind it; a hook seeing it late records one more event.
static ACTIVE: AtomicBool = AtomicBool::new(true);

static STATE: OnceLock<Option<Recorder>> = OnceLock::new();

/// What a thread of the program's keeps for the hooks.
struct HookThread {
    /// Set while this thread runs itermem's observer code.
    in_hook: Cell<bool>,
    /// This thread's count of observed calls, registered with the recorder at the first: a
    /// counter of its own, so that threads calling at once share no cache line per call.
    calls: OnceCell<Arc<AtomicU64>>,
}

thread_local! {
    static HOOK_THREAD: HookThread = const {
        HookThread {
            in_hook: Cell::new(false),
            calls: OnceCell::new(),
        }
    };
}

/// The recorder, if calls are being observed (mode not `off`, no internal error so far).
fn recorder() -> Option<&'static Recorder> {
    if !ACTIVE.load(Ordering::Relaxed) {
        return None;
    }
    // Starting runs inside a hook too: a panic there must not reach the host program either.
    STATE
        .get_or_init(|| {
            catch_unwind(start).unwrap_or_else(|_| {
                ACTIVE.store(false, Ordering::Relaxed);
                report(format_args!(
                    "internal error while starting; passing every call through from now on \
                     (the program is unaffected)"
                ));
                None
            })
        })
        .as_ref()
}

fn start() -> Option<Recorder> {
    // Every panic of itermem's is caught and reported in one `itermem:` line of its own; Rust's
    // message and backtrace (RUST_BACKTRACE) would land in the program's stderr and, slow to
    // print, change its timing. They go to itermem's debug log instead. The hook is this
    // library's own: a cdylib carries its own std, so a Rust host program keeps its hook.
    std::panic::set_hook(Box::new(|info| log::debug!("{info}")));
    let config = Config::from_env();
    init_logging(&config);
    log::debug!("configuration: {config:?}");
    if config.mode == Mode::Off {
        return None;
    }
    ending::install(&config);
    let staged =
        config.mode.only_reports() && config.sequencer.on_own_thread() && start_sequencing();
    Some(Recorder::new(config, staged))
}

/// Starts the thread that sequences staged events (`staging.rs`) once the recorder exists;
/// whether it started (if not, events are sequenced on the program's threads).
fn start_sequencing() -> bool {
    let sequence = || loop {
        match STATE.get() {
            Some(Some(recorder)) => return recorder.sequence_staged(),
            Some(None) => return, // starting failed: nothing to sequence
            None => std::thread::sleep(std::time::Duration::from_millis(1)),
        }
    };
    std::thread::Builder::new()
        .name("itermem-sequence".into())
        .spawn(sequence)
        .is_ok()
}

fn init_logging(config: &Config) {
    if let Some(filter) = &config.log {
        // A host program with a logger of its own keeps it: then ours is simply not installed.
        let _ = env_logger::Builder::new()
            .parse_filters(filter)
            .format(|out, record| {
                use std::io::Write;
                writeln!(out, "itermem: {}: {}", record.level(), record.args())
            })
            .try_init();
    }
}

/// The real call of one hook; its result is kept so a panic in the observer after the call
/// still returns it.
pub struct Call<F: FnMut() -> u32> {
    real: F,
    result: Option<u32>,
}

impl<F: FnMut() -> u32> Call<F> {
    /// Runs the real function and returns its result. Observers call it once; only one that
    /// retries the call on purpose (an allocation after itermem gave memory back) calls it
    /// again.
    pub fn run(&mut self) -> u32 {
        let result = (self.real)();
        self.result = Some(result);
        result
    }

    /// The result of the last run, or of a first run now (after a panic of the observer).
    fn result_or_run(&mut self) -> u32 {
        match self.result {
            Some(result) => result,
            None => self.run(),
        }
    }
}

/// Runs one hooked call: `real` exactly once, `observe` around it when recording. Inlined
/// into every hook, so a call made while a hook runs (a runtime call reaching the driver's
/// hook) costs one thread-local check; the rest is `observed`.
#[inline(always)]
pub fn intercept<F: FnMut() -> u32>(
    name: &'static str,
    mut real: F,
    observe: impl FnOnce(&'static Recorder, &mut Call<F>) -> u32,
) -> u32 {
    // Looked up once (a thread-local access costs a call in a shared library).
    let Ok(thread) = HOOK_THREAD.try_with(|thread| thread as *const HookThread) else {
        return real(); // the thread is exiting: its locals are gone
    };
    // SAFETY: the thread's own thread-local, alive until this thread ends; this function runs
    // on the thread and returns before it ends.
    let thread = unsafe { &*thread };
    if thread.in_hook.replace(true) {
        return real(); // a call made while a hook runs on this thread
    }
    observed(name, thread, real, observe)
}

/// [`intercept`] of a call made outside itermem's code (`in_hook` just set).
#[inline(never)]
fn observed<F: FnMut() -> u32>(
    name: &'static str,
    thread: &HookThread,
    mut real: F,
    observe: impl FnOnce(&'static Recorder, &mut Call<F>) -> u32,
) -> u32 {
    let in_hook = &thread.in_hook;
    let Some(recorder) = recorder() else {
        in_hook.set(false);
        return real();
    };
    let calls = thread
        .calls
        .get_or_init(|| recorder.counters.calls.register());
    // Only this thread writes it: no read-modify-write needed.
    calls.store(calls.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    let mut call = Call { real, result: None };
    // What the observer answered, if it got that far: a call it served itself (a free of a
    // pool block) must not be served a second time by the pass-through below.
    let mut answered = None;
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let result = observe(recorder, &mut call);
        answered = Some(result);
        if let Some((hook, from)) = &recorder.config.inject_panic {
            static CALLS: AtomicU64 = AtomicU64::new(0);
            if hook == name && CALLS.fetch_add(1, Ordering::Relaxed) + 1 >= *from {
                panic!("ITERMEM_INJECT_PANIC={name}: injected failure");
            }
        }
        result
    }));
    in_hook.set(false);
    match outcome {
        Ok(result) => result,
        Err(_) => {
            if ACTIVE.swap(false, Ordering::Relaxed) {
                // Swap mode: what is on the host comes back before the program goes on, and
                // the memory of itermem's that nothing uses goes back to the device.
                let stranded = catch_unwind(AssertUnwindSafe(|| recorder.after_internal_error()));
                match stranded {
                    Ok(Ok(0)) => report(format_args!(
                        "internal error in the {name} hook; passing every call through from now \
                         on (the program is unaffected)"
                    )),
                    Ok(Ok(n)) => report(format_args!(
                        "internal error in the {name} hook; passing every call through from now \
                         on; {n} swapped tensor(s) come back to the device when the program \
                         frees the blocks the plan lent their memory to, before it uses them again"
                    )),
                    Ok(Err(n)) => stop_after_error(name, n),
                    Err(_) if recorder.config.mode == Mode::Swap => stop_after_error(name, 0),
                    Err(_) => report(format_args!(
                        "internal error in the {name} hook; passing every call through from now \
                         on (the program is unaffected)"
                    )),
                }
            }
            answered.unwrap_or_else(|| call.result_or_run())
        }
    }
}

/// The interposer built with the executable `exe`: `libitermem.so` beside it (`cargo build`
/// puts both in `target/<profile>/`) or in `deps/` (where `cargo test` leaves it); the newer
/// when both exist, because only `cargo build` refreshes the copy beside the executable, and a
/// stale one would run old code.
pub fn library_beside(exe: &Path) -> PathBuf {
    let beside = exe.with_file_name("libitermem.so");
    let in_deps = exe.with_file_name("deps").join("libitermem.so");
    let modified = |path: &Path| path.metadata().and_then(|m| m.modified()).ok();
    match (modified(&beside), modified(&in_deps)) {
        (Some(b), Some(d)) if d > b => in_deps,
        (None, Some(_)) => in_deps,
        _ => beside,
    }
}

/// What a free of `addr` returns instead of reaching the real runtime, if it must not. After
/// an internal error every call passes through, but a block of itermem's own allocator (pool,
/// swap or cnmem mode) was never the runtime's: forwarding its free would release the whole
/// pool under live blocks, or fail. Such a free is answered by itermem's allocator
/// (`cudaSuccess`, or `cudaErrorInvalidValue` for an interior pointer or a double free, as real
/// CUDA) and its memory stays with itermem until exit. One relaxed load while itermem works
/// normally (its own hooks never forward such a free).
#[inline(always)]
pub fn kept_by_itermem(addr: u64) -> Option<u32> {
    if ACTIVE.load(Ordering::Relaxed) {
        None
    } else {
        kept_after_error(addr)
    }
}

/// [`kept_by_itermem`] after an internal error.
#[cold]
fn kept_after_error(addr: u64) -> Option<u32> {
    let Some(Some(recorder)) = STATE.get() else {
        return None;
    };
    const SUCCESS: u32 = 0;
    const INVALID_VALUE: u32 = 1;
    let answer = || {
        recorder.serves(addr).then(|| {
            if recorder.free_served_after_error(addr) {
                SUCCESS
            } else {
                INVALID_VALUE
            }
        })
    };
    // When even that fails, keeping the block (a leak) is safer than freeing it.
    catch_unwind(AssertUnwindSafe(answer)).unwrap_or(Some(SUCCESS))
}

/// The program's tensors could not be brought back after an internal error (`stranded` of
/// them, 0: not known): going on could compute on wrong values, so the program stops, saying
/// why.
#[cold]
fn stop_after_error(name: &str, stranded: usize) -> ! {
    let which = match stranded {
        0 => "the swapped tensors".to_string(),
        n => format!("{n} swapped tensor(s), whose memory other blocks hold,"),
    };
    report(format_args!(
        "fatal: internal error in the {name} hook, and {which} could not be brought back to the \
         device; the program stops here rather than compute on wrong values"
    ));
    std::process::exit(1)
}

/// The recorder after an internal error (None while itermem works, or in mode `off`): what
/// the hooks that must still answer for itermem's memory ask ([`kept_by_itermem`], and a
/// device malloc the real allocator refuses).
#[cold]
pub fn recorder_after_error() -> Option<&'static Recorder> {
    if ACTIVE.load(Ordering::Relaxed) {
        return None;
    }
    STATE.get()?.as_ref()
}

/// Whether itermem works normally (no internal error so far). One relaxed load.
#[inline(always)]
pub fn active() -> bool {
    ACTIVE.load(Ordering::Relaxed)
}

/// One `itermem:` line on stderr; never panics (a closed stderr is ignored).
pub fn report(message: std::fmt::Arguments) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "itermem: {message}");
}
