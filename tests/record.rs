//! The interposer in record mode on real programs running on the simulated GPU: the program's
//! output is unchanged, the trace holds its true per-iteration counts and the detector finds its
//! iteration; many threads, an internal panic and a SIGTERM do not hurt the program or the trace.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use support::{
    itermem, number, program, results, run_ok, run_under_itermem, scratch, stdout_ok, trace_info,
};

/// The interposer as `itermem run` finds it.
fn preload_library() -> PathBuf {
    itermem::interposer::library_beside(Path::new(itermem()))
}

#[test]
fn recording_mlp_train_changes_nothing_and_finds_its_iteration() {
    let mlp = program("mlp_train");
    let mlp = mlp.to_str().unwrap();
    let (layers, iters) = (6u64, 5u64);
    let args = [mlp, "--iters", "5", "--layers", "6"];
    let jitter = [("CUDA_SHIM_JITTER_US", "100"), ("CUDA_SHIM_SEED", "9")];
    let plain = run_ok(Path::new(mlp), &args[1..], &jitter);
    let trace = scratch("mlp.itrace");
    let trace_arg = trace.to_str().unwrap();
    let recorded = stdout_ok(&run_under_itermem(
        &["--mode", "record", "--trace", trace_arg],
        &args,
        &jitter,
    ));
    assert_eq!(
        recorded, plain,
        "the program's output changed under itermem"
    );

    let per_iteration = |key| number(&plain, key);
    let info = trace_info(&trace);
    let persistent = number(&plain, "persistent_allocations");
    assert_eq!(persistent, 2 * layers);
    let mallocs = persistent + iters * per_iteration("mallocs_per_iteration");
    assert_eq!(info["events"]["malloc"], mallocs);
    assert_eq!(info["events"]["free"], mallocs, "every block is freed");
    assert_eq!(
        info["events"]["launch"],
        iters * per_iteration("launches_per_iteration")
    );
    // Each weight tensor is uploaded once and read back once for the checksum.
    assert_eq!(
        info["events"]["memcpy"],
        2 * persistent + iters * per_iteration("memcpys_per_iteration")
    );
    let period = per_iteration("mallocs_per_iteration")
        + per_iteration("frees_per_iteration")
        + per_iteration("launches_per_iteration")
        + per_iteration("memcpys_per_iteration");
    assert_eq!(info["period_events"], period, "{info:#}");
    assert_eq!(info["iterations"], iters);
    // Detected by the second or third iteration: within three periods of the steady state.
    let start = info["iteration_start_event"].as_u64().unwrap();
    let detected_at = info["detected_at_event"].as_u64().unwrap();
    assert!(detected_at < start + 3 * period, "{info:#}");
    // The pinned staging buffers are counted apart from device memory.
    assert_eq!(info["host_events"]["malloc"], 3);
    std::fs::remove_file(&trace).unwrap();
}

#[test]
fn the_sequencing_thread_records_what_the_programs_threads_record() {
    let mlp = program("mlp_train");
    let args = [mlp.to_str().unwrap(), "--iters", "6"];
    let jitter = [("CUDA_SHIM_JITTER_US", "50"), ("CUDA_SHIM_SEED", "3")];
    let recorded = |sequencer: &str| {
        let trace = scratch(&format!("mlp-{sequencer}.itrace"));
        let stats = scratch(&format!("mlp-{sequencer}.json"));
        let env = [jitter[0], jitter[1], ("ITERMEM_SEQUENCER", sequencer)];
        let output = stdout_ok(&run_under_itermem(
            &[
                "--trace",
                trace.to_str().unwrap(),
                "--stats",
                stats.to_str().unwrap(),
            ],
            &args,
            &env,
        ));
        let (info, mut summary) = (trace_info(&trace), support::read_json(&stats));
        summary["trace"] = serde_json::Value::Null;
        std::fs::remove_file(&trace).unwrap();
        std::fs::remove_file(&stats).unwrap();
        (output, info, summary)
    };
    let (inline, thread) = (recorded("inline"), recorded("thread"));
    assert_eq!(inline.0, thread.0, "the program's output");
    assert_eq!(inline.2, thread.2, "the statistics");
    for key in [
        "access_events",
        "events",
        "host_events",
        "kernel_names",
        "unmatched_frees",
        "peak_live_bytes",
        "peak_event",
        "live_bytes_at_end",
        "period_events",
        "boundary_event",
        "iterations",
        "iteration_start_event",
        "detected_at_event",
        "top_kernels",
    ] {
        assert_eq!(inline.1[key], thread.1[key], "trace info's {key}");
    }
}

#[test]
fn launches_name_the_allocations_their_arguments_point_into() {
    // Resolved at the launch (inline), or late on the sequencing thread.
    for sequencer in ["inline", "thread"] {
        launches_resolved(sequencer);
    }
}

fn launches_resolved(sequencer: &str) {
    let touch = program("touch_patterns");
    let trace = scratch(&format!("touch-{sequencer}.itrace"));
    let output = run_under_itermem(
        &["--trace", trace.to_str().unwrap()],
        &[touch.to_str().unwrap()],
        &[("ITERMEM_SEQUENCER", sequencer)],
    );
    assert!(stdout_ok(&output).contains("ok"));
    let csv = Command::new(itermem())
        .args(["trace", "export", "--format", "csv"])
        .arg(&trace)
        .output()
        .unwrap();
    let csv = stdout_ok(&csv);
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let column = |name| header.iter().position(|h| *h == name).unwrap();
    let (event, kernel, touched) = (column("event"), column("kernel_name"), column("touched"));
    let launches: Vec<(String, String)> = csv
        .lines()
        .skip(1)
        .map(|line| line.split(',').collect::<Vec<_>>())
        .filter(|cells| cells[event] == "launch")
        .map(|cells| (cells[kernel].to_string(), cells[touched].to_string()))
        .collect();
    let expected = [
        ("one", "1"),  // base pointer
        ("one", "2"),  // interior pointer
        ("view", "3"), // pointer inside a struct parameter
        ("two", "1"),  // the same block twice
        ("count", ""), // an integer
        ("one", ""),   // a pointer into a freed block
    ];
    let expected: Vec<(String, String)> = expected
        .iter()
        .map(|(k, t)| (k.to_string(), t.to_string()))
        .collect();
    assert_eq!(launches, expected, "{sequencer}");
    std::fs::remove_file(&trace).unwrap();
}

#[test]
fn eight_threads_calling_cuda_at_once_are_all_recorded() {
    // Whichever thread puts the events in order: the program's threads, or itermem's own.
    for sequencer in ["inline", "thread"] {
        eight_threads_recorded(sequencer);
    }
}

fn eight_threads_recorded(sequencer: &str) {
    let stress = program("stress_threads");
    let trace = scratch(&format!("stress-{sequencer}.itrace"));
    let stats = scratch(&format!("stress-{sequencer}.json"));
    let output = run_under_itermem(
        &[
            "--trace",
            trace.to_str().unwrap(),
            "--stats",
            stats.to_str().unwrap(),
        ],
        &[
            stress.to_str().unwrap(),
            "--threads",
            "8",
            "--rounds",
            "300",
        ],
        &[
            ("CUDA_SHIM_JITTER_US", "20"),
            ("ITERMEM_SEQUENCER", sequencer),
        ],
    );
    assert!(stdout_ok(&output).contains("ok"));
    let info = trace_info(&trace);
    for kind in ["malloc", "free", "launch", "memcpy"] {
        assert_eq!(info["events"][kind], 2400, "{kind}: {info:#}");
    }
    let summary = support::read_json(&stats);
    assert_eq!(summary["events"]["launch"], 2400);
    assert_eq!(summary["internal_error"], false);
    assert_eq!(summary["live_bytes_at_exit"], 0);
    std::fs::remove_file(&trace).unwrap();
    std::fs::remove_file(&stats).unwrap();
}

#[test]
fn a_panic_inside_a_hook_does_not_hurt_the_program() {
    let mlp = program("mlp_train");
    let args = [mlp.to_str().unwrap(), "--iters", "3"];
    let plain = run_ok(&mlp, &args[1..], &[]);
    // In cnmem mode (one 16 MiB region) the panicking free is of a block itermem's allocator
    // served: passed through, the real cudaFree would reject it (cudaErrorInvalidValue, and
    // mlp_train exits) or, at the region's start, release the region under the program's other
    // blocks.
    for (mode, reservation) in [("record", "0"), ("cnmem", "16M")] {
        let stats = scratch(&format!("panic-{mode}.json"));
        let output = run_under_itermem(
            &["--mode", mode, "--stats", stats.to_str().unwrap()],
            &args,
            &[
                ("ITERMEM_INJECT_PANIC", "cudaFree"),
                ("ITERMEM_CNMEM_RESERVATION", reservation),
                ("RUST_BACKTRACE", "1"),
            ],
        );
        let stdout = stdout_ok(&output);
        if mode == "record" {
            assert_eq!(stdout, plain);
        } else {
            // The allocator's own chunks change the shim's counters, not the program's results.
            assert_eq!(results(&stdout), results(&plain), "{mode}");
        }
        // One line of itermem's, and nothing of Rust's panic machinery (no message, no
        // backtrace, even with RUST_BACKTRACE=1), in the program's stderr.
        let stderr = String::from_utf8_lossy(&output.stderr);
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{mode}: {stderr}");
        assert!(
            lines[0].starts_with("itermem: internal error in the cudaFree hook"),
            "{mode}: {stderr}"
        );
        let summary = support::read_json(&stats);
        assert_eq!(summary["internal_error"], true, "{mode}");
        std::fs::remove_file(&stats).unwrap();
    }
}

/// cnmem mode on a device the size of what it holds at its peak (mlp_train: 9.8 MB):
/// after an internal error the program's mallocs go to the real allocator, which finds the
/// device held by cnmem's regions the program freed its blocks from. They are given back and
/// the malloc retried, so the program trains on unchanged (before: out of memory).
#[test]
fn after_an_internal_error_cnmem_gives_back_the_regions_the_program_left() {
    let mlp = program("mlp_train");
    let args = [mlp.to_str().unwrap(), "--iters", "10"];
    let plain = run_ok(&mlp, &args[1..], &[]);
    let shim_stats = scratch("cnmem-error-shim.json");
    let output = run_under_itermem(
        &["--mode", "cnmem"],
        &args,
        &[("CUDA_SHIM_STATS", shim_stats.to_str().unwrap())],
    );
    assert_eq!(results(&stdout_ok(&output)), results(&plain));
    let device = support::read_json(&shim_stats)["peak_device_bytes"].to_string();
    std::fs::remove_file(shim_stats).unwrap();
    for hook in ["cudaMalloc@20", "cudaFree@40", "cudaLaunchKernel@100"] {
        let output = run_under_itermem(
            &["--mode", "cnmem"],
            &args,
            &[
                ("ITERMEM_INJECT_PANIC", hook),
                ("CUDA_SHIM_DEVICE_MEMORY", &device),
            ],
        );
        assert_eq!(results(&stdout_ok(&output)), results(&plain), "{hook}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("internal error in the"), "{hook}: {stderr}");
    }
}

#[test]
fn a_child_forked_without_exec_exits_and_leaves_the_parents_trace_alone() {
    // The child's exit() runs itermem's exit handler: it must not wait for the writer thread
    // it did not inherit (it would hang), nor write the parent's trace and statistics.
    let fork_exit = program("fork_exit");
    let trace = scratch("fork.itrace");
    let stats = scratch("fork.json");
    let output = run_under_itermem(
        &[
            "--trace",
            trace.to_str().unwrap(),
            "--stats",
            stats.to_str().unwrap(),
        ],
        &[fork_exit.to_str().unwrap()],
        &[],
    );
    assert_eq!(stdout_ok(&output), "parent ok\n");
    let info = trace_info(&trace);
    assert_eq!(info["events"]["malloc"], 1, "{info:#}");
    assert_eq!(info["events"]["free"], 1, "{info:#}");
    assert_eq!(support::read_json(&stats)["live_bytes_at_exit"], 0);
    std::fs::remove_file(&trace).unwrap();
    std::fs::remove_file(&stats).unwrap();
}

#[test]
fn mode_off_is_pass_through_and_records_nothing() {
    let mlp = program("mlp_train");
    let args = [mlp.to_str().unwrap(), "--iters", "2"];
    let plain = run_ok(&mlp, &args[1..], &[]);
    let trace = scratch("off.itrace");
    let output = run_under_itermem(
        &["--mode", "off", "--trace", trace.to_str().unwrap()],
        &args,
        &[],
    );
    assert_eq!(stdout_ok(&output), plain);
    assert!(!trace.exists(), "mode off wrote a trace");
}

#[test]
fn bad_configuration_gets_one_clear_line_and_the_program_runs() {
    let mlp = program("mlp_train");
    let args = [mlp.to_str().unwrap(), "--iters", "1"];
    let plain = run_ok(&mlp, &args[1..], &[]);
    let output = run_under_itermem(
        &[],
        &args,
        &[("ITERMEM_LIMIT", "12Q"), ("ITERMEM_TRACEFILE", "x")],
    );
    assert_eq!(stdout_ok(&output), plain);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("itermem: ignoring ITERMEM_LIMIT=\"12Q\": expected bytes"),
        "{stderr}"
    );
    assert!(
        stderr.contains("unknown variable ITERMEM_TRACEFILE"),
        "{stderr}"
    );
}

/// mlp_train recording to `trace` for as long as it is let run, once it has printed the loss
/// line of `iteration`; and its stdout, which must be kept open while it runs (a closed pipe
/// would end it with SIGPIPE).
fn training_past_iteration(
    trace: &Path,
    iteration: u32,
) -> (std::process::Child, impl Iterator + use<>) {
    use std::io::BufRead;
    let mut child = Command::new(program("mlp_train"))
        .args(["--iters", "100000"])
        .env("LD_LIBRARY_PATH", support::shim_lib_dir())
        .env("LD_PRELOAD", preload_library())
        .env("ITERMEM_TRACE", trace)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = std::io::BufReader::new(stdout).lines();
    let line = format!("iter {iteration} ");
    assert!(lines.any(|l| l.unwrap().starts_with(&line)));
    (child, lines)
}

#[test]
fn sigterm_flushes_a_complete_trace() {
    let trace = scratch("sigterm.itrace");
    // Wait until training runs (the first loss line), then terminate it.
    let (mut child, _stdout) = training_past_iteration(&trace, 1);
    // SAFETY: sending a signal to our own child process.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        status.signal(),
        Some(libc::SIGTERM),
        "the default action still terminates"
    );
    let info = trace_info(&trace);
    assert_eq!(info["complete"], true, "{info:#}");
    assert!(info["events"]["launch"].as_u64().unwrap() >= 2 * 47);
    std::fs::remove_file(&trace).unwrap();
}

/// `mlp_train --iters 10` preloaded with itermem, its trace at `trace`, through `sh -c SCRIPT`
/// (which ends by exec'ing the program, `$0` and `$@`); killed if it has not ended in 60 s.
fn traced_through_shell(script: &str, trace: &Path) -> std::process::Output {
    let mlp = program("mlp_train");
    Command::new("timeout")
        .args(["60", "sh", "-c", script])
        .arg(&mlp)
        .args(["--iters", "10"])
        .env("LD_LIBRARY_PATH", support::shim_lib_dir())
        .env("LD_PRELOAD", preload_library())
        .env("ITERMEM_TRACE", trace)
        .env_remove("ITERMEM_STATS")
        .output()
        .unwrap()
}

#[test]
fn a_fifo_as_the_trace_is_refused_instead_of_hanging_the_program() {
    let plain = run_ok(&program("mlp_train"), &["--iters", "10"], &[]);
    let fifo = scratch("trace.fifo");
    let name = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
    let output = traced_through_shell("exec \"$0\" \"$@\"", &fifo);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{}: {stderr}", output.status);
    assert_eq!(String::from_utf8_lossy(&output.stdout), plain);
    assert!(
        stderr.contains("cannot write the trace") && stderr.contains("FIFO"),
        "{stderr}"
    );
    std::fs::remove_file(fifo).unwrap();
}

#[test]
fn a_trace_beyond_the_file_size_limit_is_cut_without_killing_the_program() {
    let plain = run_ok(&program("mlp_train"), &["--iters", "10"], &[]);
    let trace = scratch("ulimit.itrace");
    // 8 KiB: the header and the first batches fit, the rest of the 10 iterations do not.
    let output = traced_through_shell("ulimit -f 8 && exec \"$0\" \"$@\"", &trace);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{}: {stderr}", output.status);
    assert_eq!(String::from_utf8_lossy(&output.stdout), plain);
    assert!(stderr.contains("File too large"), "{stderr}");
    std::fs::remove_file(trace).unwrap();
}

/// After an internal error, a free of a block itermem's allocator served still gets real
/// CUDA's answers: an interior pointer or a double free is `cudaErrorInvalidValue`
/// (`shim_checks invalid_free` checks both; issue 14, item 3: success before).
#[test]
fn after_an_internal_error_invalid_frees_of_served_blocks_still_fail() {
    let checks = program("shim_checks");
    let output = run_under_itermem(
        &["--mode", "cnmem"],
        &[checks.to_str().unwrap(), "invalid_free"],
        &[
            ("ITERMEM_INJECT_PANIC", "cudaFree"),
            ("ITERMEM_CNMEM_RESERVATION", "16M"),
        ],
    );
    let stdout = stdout_ok(&output);
    assert!(stdout.contains("invalid_free ok"), "{stdout}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("internal error in the cudaFree hook"),
        "{stderr}"
    );
}

#[test]
fn a_killed_program_leaves_a_trace_of_all_but_its_last_moments() {
    let trace = scratch("killed.itrace");
    let (mut child, _stdout) = training_past_iteration(&trace, 3);
    // Iterations 0-3 have ended: the writer puts them on disk while the program runs (within
    // about 100 ms: the batch age and the writer's delay). Wait until the file holds them,
    // not for a fixed time, which a loaded machine can overrun; a writer that kept them in
    // memory never gets there.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let four_iterations = || {
        let output = Command::new(itermem())
            .args(["trace", "info", "--json"])
            .arg(&trace)
            .output()
            .unwrap();
        let info: serde_json::Value =
            serde_json::from_slice(&output.stdout).unwrap_or(serde_json::Value::Null);
        let period = info["period_events"].as_u64();
        let events = info["access_events"].as_u64().unwrap_or(0);
        period.is_some_and(|period| events >= 4 * period)
    };
    while !four_iterations() {
        assert!(
            std::time::Instant::now() < deadline,
            "iterations 0-3 are not in the trace a minute after they ended"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.kill().unwrap(); // SIGKILL: no handler, no atexit
    child.wait().unwrap();
    let info = trace_info(&trace);
    assert_eq!(info["complete"], false);
    let period = info["period_events"]
        .as_u64()
        .expect("the iteration is found");
    let events = info["access_events"].as_u64().unwrap();
    assert!(events >= 4 * period, "{events} events, period {period}");
    std::fs::remove_file(trace).unwrap();
}

/// Processes started with one environment (one per GPU, as torchrun does) and one trace path:
/// the file is never written by two of them at once, and `%p` gives each its own (issue 14,
/// item 9: mixed or corrupt traces before).
#[test]
fn concurrent_processes_never_share_a_trace_file() {
    let mlp = program("mlp_train");
    // 30 iterations (about 2 s): the two runs overlap even on a loaded machine.
    let start = |trace: &Path| {
        Command::new(&mlp)
            .args(["--iters", "30"])
            .env("LD_LIBRARY_PATH", support::shim_lib_dir())
            .env("LD_PRELOAD", preload_library())
            .env("ITERMEM_TRACE", trace)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    // The same file: one writes it, the other says why it does not; both train.
    let shared = scratch("shared.itrace");
    let (a, b) = (start(&shared), start(&shared));
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    assert!(a.status.success() && b.status.success());
    let refused = [&a, &b]
        .iter()
        .filter(|o| String::from_utf8_lossy(&o.stderr).contains("another running process"))
        .count();
    assert_eq!(refused, 1, "exactly one of the two writes the trace");
    let info = trace_info(&shared);
    assert_eq!(info["complete"], true);
    std::fs::remove_file(&shared).unwrap();

    // %p: one complete trace per process, each with its own pid.
    let pattern = scratch("per-%p.itrace");
    let children = [start(&pattern), start(&pattern)];
    for child in children {
        let pid = child.id();
        assert!(child.wait_with_output().unwrap().status.success());
        let own = PathBuf::from(pattern.to_str().unwrap().replace("%p", &pid.to_string()));
        let info = trace_info(&own);
        assert_eq!(
            (info["complete"].clone(), info["pid"].as_u64()),
            (true.into(), Some(pid.into()))
        );
        std::fs::remove_file(own).unwrap();
    }
}

/// A program that ends within milliseconds of its start, by `exit`, `_exit`, `_Exit`, `abort`,
/// a segmentation fault, or a SIGABRT handler of its own: the trace holds every event and is
/// complete, the statistics are written, and the ending is the program's (its status, its
/// signal, its handler) (issue 14, item 8: an empty trace and no statistics before).
#[test]
fn every_ending_of_a_program_leaves_its_whole_trace_and_statistics() {
    use std::os::unix::process::ExitStatusExt;
    let crash = program("crash_exit");
    for (how, code, signal) in [
        ("exit", Some(3), None),
        ("_exit", Some(3), None),
        ("_Exit", Some(3), None),
        ("abort", None, Some(libc::SIGABRT)),
        ("segv", None, Some(libc::SIGSEGV)),
        ("own-handler", Some(7), None),
    ] {
        let trace = scratch(&format!("ending-{how}.itrace"));
        let stats = scratch(&format!("ending-{how}.json"));
        let output = Command::new(&crash)
            .args([how, "2000"])
            .env("LD_LIBRARY_PATH", support::shim_lib_dir())
            .env("LD_PRELOAD", preload_library())
            .env("ITERMEM_TRACE", &trace)
            .env("ITERMEM_STATS", &stats)
            .output()
            .unwrap();
        assert_eq!(
            (output.status.code(), output.status.signal()),
            (code, signal),
            "{how}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let info = trace_info(&trace);
        assert_eq!(info["complete"], true, "{how}");
        assert_eq!(info["events"]["malloc"], 2000, "{how}");
        assert_eq!(info["events"]["free"], 2000, "{how}");
        assert_eq!(support::read_json(&stats)["events"]["free"], 2000, "{how}");
        std::fs::remove_file(trace).unwrap();
        std::fs::remove_file(stats).unwrap();
    }
}
