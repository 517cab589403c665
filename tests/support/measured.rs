//! Runs a command as a user would and measures what it cost: its exit, its stderr, its peak
//! resident memory (its own and its waited-for children's, as `/usr/bin/time` reports it) and
//! whether it had to be killed for running past a deadline.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How a measured command ended.
#[derive(Debug)]
pub struct Measured {
    /// The exit code; `None` when a signal ended it (a panic that aborts, an allocation failure).
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub stderr: String,
    /// The peak resident memory of the command and of the children it waited for, bytes.
    pub max_rss: u64,
    /// The processor time (user and system) of the command and of those children: unlike its
    /// wall time, hardly longer on a loaded machine.
    pub cpu: Duration,
    /// Killed at the deadline.
    pub hung: bool,
}

/// Runs `command` (stdout discarded) and kills it after `deadline`.
#[allow(clippy::zombie_processes)] // reaped by `wait4`, which also gives its resource usage
pub fn run_measured(command: &mut Command, deadline: Duration) -> Measured {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut pipe = child.stderr.take().unwrap();
    // The stderr is read on a thread, so a command writing much of it cannot block on the pipe.
    let reader = std::thread::spawn(move || {
        let mut text = Vec::new();
        let _ = pipe.read_to_end(&mut text);
        String::from_utf8_lossy(&text).into_owned()
    });
    let pid = child.id() as libc::pid_t;
    let started = Instant::now();
    let mut hung = false;
    let (status, usage) = loop {
        let mut status = 0;
        // SAFETY: an all-zero rusage is a valid value for wait4 to overwrite.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: waits for our own child, writing into the two locals above.
        let waited = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        if waited == pid {
            break (status, usage);
        }
        assert!(waited == 0, "wait4: {}", std::io::Error::last_os_error());
        if started.elapsed() > deadline && !hung {
            hung = true;
            let _ = child.kill();
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let stderr = reader.join().unwrap();
    Measured {
        code: libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)),
        signal: libc::WIFSIGNALED(status).then(|| libc::WTERMSIG(status)),
        stderr,
        max_rss: usage.ru_maxrss as u64 * 1024,
        cpu: seconds(usage.ru_utime) + seconds(usage.ru_stime),
        hung,
    }
}

fn seconds(time: libc::timeval) -> Duration {
    Duration::new(time.tv_sec as u64, time.tv_usec as u32 * 1000)
}
