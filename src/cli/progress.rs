//! Progress on long work (`plan`'s Bayesian optimisation and `--sweep`, `compare`, `replay`):
//! a bar on stderr, shown only when stderr is a terminal, once the work has taken a second
//! (then redrawn five times a second, so a single long step, e.g. `compare`'s budgeted search,
//! shows its time passing), and never with `--quiet`. stdout (the result) is never touched, so
//! piped or redirected output is the same bytes as before.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// `--quiet`, set once by `cli::main` before any command runs.
static QUIET: AtomicBool = AtomicBool::new(false);

/// How long work runs before its bar appears (shorter work stays silent).
const SHOW_AFTER: Duration = Duration::from_secs(1);

pub fn set_quiet(quiet: bool) {
    QUIET.store(quiet, Ordering::Relaxed);
}

/// Whether `--quiet` was given (passed on to `itermem replay`'s child).
pub fn quiet() -> bool {
    QUIET.load(Ordering::Relaxed)
}

/// A bar of `total` steps, labelled `message`, shown by a thread of its own after
/// [`SHOW_AFTER`]; steps may be reported from any thread. Removed when dropped.
pub struct Progress {
    shared: Arc<Shared>,
    shower: Option<JoinHandle<()>>,
}

struct Shared {
    done: AtomicU64,
    finished: AtomicBool,
    bar: Mutex<Option<indicatif::ProgressBar>>,
}

impl Progress {
    pub fn new(message: impl Into<String>, total: u64) -> Progress {
        let shared = Arc::new(Shared {
            done: AtomicU64::new(0),
            finished: AtomicBool::new(false),
            bar: Mutex::new(None),
        });
        let enabled = !quiet() && std::io::stderr().is_terminal();
        let message = message.into();
        let shower = enabled.then(|| {
            let shared = Arc::clone(&shared);
            let start = Instant::now();
            std::thread::spawn(move || {
                while start.elapsed() < SHOW_AFTER {
                    if shared.finished.load(Ordering::Acquire) {
                        return;
                    }
                    std::thread::park_timeout(SHOW_AFTER.saturating_sub(start.elapsed()));
                }
                let Ok(mut bar) = shared.bar.lock() else {
                    return;
                };
                if shared.finished.load(Ordering::Acquire) {
                    return;
                }
                // Set up hidden, then drawn: its first frame is already right.
                let shown = indicatif::ProgressBar::with_draw_target(
                    Some(total),
                    indicatif::ProgressDrawTarget::hidden(),
                )
                .with_elapsed(start.elapsed())
                .with_message(message)
                .with_position(shared.done.load(Ordering::Relaxed).min(total));
                if let Ok(style) = indicatif::ProgressStyle::with_template(
                    "{msg} [{elapsed_precise}] {wide_bar} {pos}/{len}",
                ) {
                    shown.set_style(style);
                }
                shown.set_draw_target(indicatif::ProgressDrawTarget::stderr());
                shown.enable_steady_tick(Duration::from_millis(200));
                *bar = Some(shown);
            })
        });
        Progress { shared, shower }
    }

    /// `done` steps of the total are done.
    pub fn set(&self, done: u64) {
        self.shared.done.store(done, Ordering::Relaxed);
        if let Ok(bar) = self.shared.bar.lock()
            && let Some(bar) = bar.as_ref()
        {
            bar.set_position(done);
        }
    }
}

impl Drop for Progress {
    /// Removes the bar (the result follows on stdout).
    fn drop(&mut self) {
        self.shared.finished.store(true, Ordering::Release);
        if let Some(shower) = self.shower.take() {
            shower.thread().unpark();
            let _ = shower.join();
        }
        if let Ok(mut bar) = self.shared.bar.lock()
            && let Some(bar) = bar.take()
        {
            bar.finish_and_clear();
        }
    }
}
