//! itermem's settings: `ITERMEM_*` environment variables, read once, like
//! `PYTORCH_CUDA_ALLOC_CONF`.
//!
//! Reading goes in two steps (raw strings, then a validated [`Config`]) through one table of
//! options ([`OPTIONS`]) that also documents them. A malformed value or an unknown `ITERMEM_*`
//! variable gets one clear `itermem:` line on stderr naming the variable, the value and the
//! accepted forms, and the default is kept: a typo must never crash or silently change the host
//! program.

use crate::swap::CopyModel;
use std::ffi::OsString;
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};

/// What the interposer does with the calls it sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Pass-through, exactly the real runtime's behaviour; nothing recorded.
    Off,
    /// Pass-through plus the access log (trace, iteration detection, statistics).
    Record,
    /// SmartPool (planned pool).
    Pool,
    /// AutoSwap.
    Swap,
    /// NVIDIA cnmem's policy, as a baseline.
    Cnmem,
}

impl Mode {
    pub fn parse(text: &str) -> Option<Mode> {
        Some(match text.trim().to_ascii_lowercase().as_str() {
            "off" => Mode::Off,
            "record" => Mode::Record,
            "pool" => Mode::Pool,
            "swap" => Mode::Swap,
            "cnmem" => Mode::Cnmem,
            _ => return None,
        })
    }

    /// Whether the mode only reports what the sequence of events shows: nothing the program's
    /// calls wait for depends on it (no plan is served from it), so its events may be
    /// sequenced off the program's threads and its detector run late.
    pub fn only_reports(self) -> bool {
        matches!(self, Mode::Record | Mode::Cnmem)
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Off => "off",
            Mode::Record => "record",
            Mode::Pool => "pool",
            Mode::Swap => "swap",
            Mode::Cnmem => "cnmem",
        })
    }
}

/// A memory limit: bytes, or a fraction of the device's memory.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Limit {
    Bytes(u64),
    Fraction(f64),
}

/// The validated configuration the interposer runs with.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Config {
    pub mode: Mode,
    pub trace: Option<PathBuf>,
    pub stats: Option<PathBuf>,
    pub limit: Option<Limit>,
    /// `env_logger` filter for itermem's own log lines.
    pub log: Option<String>,
    /// cnmem mode: bytes reserved with the first `cudaMalloc` (0 = grow from empty).
    pub cnmem_reservation: u64,
    /// cnmem mode: a real cnmem library to route allocations through.
    pub cnmem_library: Option<PathBuf>,
    /// Fault injection for tests: the hook of this CUDA function panics inside itermem's code
    /// (after the real call), to prove the host program survives any bug of ours; from its
    /// n-th call on with `NAME@n` (a panic while swap mode has tensors on the host).
    pub inject_panic: Option<(String, u64)>,
    /// Swap mode: a swapped-out range is filled with `0xFF` before anything else may use it,
    /// so an access itermem did not see shows as wrong results.
    pub swap_verify: bool,
    /// Swap mode: make a second plan, in the background, from the op times measured under
    /// the first, and switch to it at an iteration boundary if it is faster.
    pub swap_second_plan: SecondPlan,
    /// Swap mode: write the plan in use here (the JSON of `itermem plan --json`).
    pub plan_out: Option<PathBuf>,
    /// Swap mode: the host link the planner assumes for its copies (None: measured before
    /// the first plan).
    pub bandwidth: Option<CopyModel>,
    /// Swap mode: the smallest tensor the planner swaps.
    pub swap_min_bytes: u64,
    /// Record and cnmem modes: where events are put in order.
    pub sequencer: Sequencer,
}

/// Swap mode's second plan (`ITERMEM_SWAP_SECOND_PLAN`): none, one that replaces the first
/// where it is faster, or (for tests: every switch exercised) wherever the first stalls.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SecondPlan {
    Off,
    IfFaster,
    Always,
}

/// Where record and cnmem modes put events in order (`interposer/staging.rs`): on a thread of
/// itermem's own, which takes that work off the program's threads but competes with them for
/// a core, or on the program's threads, as pool and swap modes always do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Sequencer {
    /// A thread of its own where the machine has at least [`Sequencer::AUTO_CORES`] cores.
    Auto,
    Thread,
    Inline,
}

impl Sequencer {
    /// Cores from which `auto` sequences on a thread of its own: with fewer, that thread takes
    /// a core from the program and the GPU runtime's own threads (measured on 2 cores:
    /// docs/BENCHMARKS.md, hot path).
    pub const AUTO_CORES: usize = 4;

    pub fn on_own_thread(self) -> bool {
        match self {
            Sequencer::Thread => true,
            Sequencer::Inline => false,
            Sequencer::Auto => std::thread::available_parallelism()
                .is_ok_and(|cores| cores.get() >= Sequencer::AUTO_CORES),
        }
    }
}

impl Default for Config {
    fn default() -> Config {
        Config {
            mode: Mode::Record,
            trace: None,
            stats: None,
            limit: None,
            log: None,
            cnmem_reservation: 0,
            cnmem_library: None,
            inject_panic: None,
            swap_verify: false,
            swap_second_plan: SecondPlan::IfFaster,
            plan_out: None,
            bandwidth: None,
            swap_min_bytes: crate::swap::AutoSwapOptions::default().min_bytes,
            sequencer: Sequencer::Auto,
        }
    }
}

/// One `ITERMEM_*` variable: its name, accepted forms and how it sets the configuration.
pub struct Opt {
    pub name: &'static str,
    pub forms: &'static str,
    pub doc: &'static str,
    apply: fn(&mut Config, &str) -> bool,
}

/// Every variable itermem reads.
pub const OPTIONS: &[Opt] = &[
    Opt {
        name: "ITERMEM_MODE",
        forms: "off, record, pool, swap or cnmem",
        doc: "what the interposer does (default record)",
        apply: |c, v| Mode::parse(v).map(|m| c.mode = m).is_some(),
    },
    Opt {
        name: "ITERMEM_TRACE",
        forms: "a file path (%p: the process id)",
        doc: "write the access trace to this file",
        apply: |c, v| path(v).map(|p| c.trace = Some(p)).is_some(),
    },
    Opt {
        name: "ITERMEM_STATS",
        forms: "a file path (%p: the process id)",
        doc: "write a JSON summary to this file at exit",
        apply: |c, v| path(v).map(|p| c.stats = Some(p)).is_some(),
    },
    Opt {
        name: "ITERMEM_LIMIT",
        forms: "bytes with an optional K, M, G or T suffix (e.g. 6G), or a percentage of device memory (e.g. 75%)",
        doc: "device memory limit for swap mode",
        apply: |c, v| parse_limit(v).map(|l| c.limit = Some(l)).is_some(),
    },
    Opt {
        name: "ITERMEM_LOG",
        forms: "an env_logger filter (e.g. info, itermem=debug)",
        doc: "log filter for itermem's own messages",
        apply: |c, v| {
            let valid = env_filter::Builder::new().try_parse(v).is_ok();
            valid.then(|| c.log = Some(v.to_string())).is_some()
        },
    },
    Opt {
        name: "ITERMEM_CNMEM_RESERVATION",
        forms: "bytes with an optional K, M, G or T suffix (e.g. 2G), or 0",
        doc: "cnmem mode: the initial reservation (default 0: grow region by region)",
        apply: |c, v| parse_bytes(v).map(|b| c.cnmem_reservation = b).is_some(),
    },
    Opt {
        name: "ITERMEM_CNMEM_LIB",
        forms: "the path of a cnmem shared library (e.g. target/cnmem/libcnmem.so)",
        doc: "cnmem mode: route allocations through this real cnmem build",
        apply: |c, v| path(v).map(|p| c.cnmem_library = Some(p)).is_some(),
    },
    Opt {
        name: "ITERMEM_INJECT_PANIC",
        forms: "the name of a hooked CUDA function (e.g. cudaFree), optionally @N: from its N-th call on",
        doc: "testing aid: itermem's code in that hook panics, to show the program survives",
        apply: |c, v| {
            let (name, from) = match v.trim().split_once('@') {
                Some((name, n)) => (name, n.parse::<u64>().ok().filter(|&n| n > 0)),
                None => (v.trim(), Some(1)),
            };
            let valid = crate::interposer::hooks::HOOK_NAMES.contains(&name);
            match from {
                Some(from) if valid => {
                    c.inject_panic = Some((name.to_string(), from));
                    true
                }
                _ => false,
            }
        },
    },
    Opt {
        name: "ITERMEM_SWAP_VERIFY",
        forms: "0 or 1",
        doc: "swap mode: poison swapped-out ranges, so an access itermem missed shows in results",
        apply: |c, v| match v.trim() {
            "0" => {
                c.swap_verify = false;
                true
            }
            "1" => {
                c.swap_verify = true;
                true
            }
            _ => false,
        },
    },
    Opt {
        name: "ITERMEM_SWAP_SECOND_PLAN",
        forms: "0, 1 or always",
        doc: "swap mode: a second plan from op times measured under the first (1, the default)",
        apply: |c, v| {
            c.swap_second_plan = match v.trim() {
                "0" => SecondPlan::Off,
                "1" => SecondPlan::IfFaster,
                "always" => SecondPlan::Always,
                _ => return false,
            };
            true
        },
    },
    Opt {
        name: "ITERMEM_PLAN_OUT",
        forms: "a file path (%p: the process id)",
        doc: "swap mode: write the plan in use to this file (JSON of itermem plan)",
        apply: |c, v| path(v).map(|p| c.plan_out = Some(p)).is_some(),
    },
    Opt {
        name: "ITERMEM_BANDWIDTH",
        forms: "pcie3, pcie4, pcie5, nvlink or GB/s (e.g. 12.5)",
        doc: "swap mode: the host link the planner assumes (default: measured before the \
              first plan, pcie3 where it cannot be)",
        apply: |c, v| CopyModel::parse(v).map(|m| c.bandwidth = Some(m)).is_some(),
    },
    Opt {
        name: "ITERMEM_SWAP_MIN_BYTES",
        forms: "bytes with an optional K, M, G suffix (e.g. 256K)",
        doc: "swap mode: the smallest tensor the planner swaps on its own; smaller ones move \
              in swap units of at least that many bytes where the pool does not fit without \
              them (default 1M)",
        apply: |c, v| parse_bytes(v).map(|b| c.swap_min_bytes = b).is_some(),
    },
    Opt {
        name: "ITERMEM_SEQUENCER",
        forms: "auto, thread or inline",
        doc: "record and cnmem modes: put events in order on a thread of itermem's own \
              (thread), on the program's threads (inline), or on its own thread where the \
              machine has at least 4 cores (auto, the default)",
        apply: |c, v| {
            let sequencer = match v.trim() {
                "auto" => Sequencer::Auto,
                "thread" => Sequencer::Thread,
                "inline" => Sequencer::Inline,
                _ => return false,
            };
            c.sequencer = sequencer;
            true
        },
    },
];

/// `path` with `%p` replaced by `pid` and `%%` by `%` (bytes: a path need not be UTF-8).
pub fn with_pid(path: &Path, pid: u32) -> PathBuf {
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    let bytes = path.as_os_str().as_bytes();
    let mut out = Vec::with_capacity(bytes.len() + 8);
    let mut i = 0;
    while i < bytes.len() {
        match (bytes[i], bytes.get(i + 1)) {
            (b'%', Some(b'p')) => {
                out.extend_from_slice(pid.to_string().as_bytes());
                i += 2;
            }
            (b'%', Some(b'%')) => {
                out.push(b'%');
                i += 2;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    PathBuf::from(OsString::from_vec(out))
}

fn path(value: &str) -> Option<PathBuf> {
    (!value.trim().is_empty()).then(|| PathBuf::from(value))
}

/// Parses `123`, `64K`, `6G`, `1.5T`-free binary sizes, or `75%` / `75 %`.
pub fn parse_limit(text: &str) -> Option<Limit> {
    let text = text.trim();
    if let Some(percent) = text.strip_suffix('%') {
        let value: f64 = percent.trim().parse().ok()?;
        return (value > 0.0 && value <= 100.0).then_some(Limit::Fraction(value / 100.0));
    }
    parse_bytes(text).filter(|&b| b > 0).map(Limit::Bytes)
}

/// Parses a byte count with an optional binary suffix (K, M, G, T; `B`/`iB` accepted).
pub fn parse_bytes(text: &str) -> Option<u64> {
    let upper = text.trim().to_ascii_uppercase();
    let number = upper.trim_end_matches("IB").trim_end_matches('B');
    let (digits, shift) = match number.chars().last()? {
        'K' => (&number[..number.len() - 1], 10),
        'M' => (&number[..number.len() - 1], 20),
        'G' => (&number[..number.len() - 1], 30),
        'T' => (&number[..number.len() - 1], 40),
        _ => (number, 0),
    };
    digits.trim().parse::<u64>().ok()?.checked_mul(1 << shift)
}

/// A problem found while reading the environment: reported, never fatal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem(pub String);

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "itermem: {}", self.0)
    }
}

impl Config {
    /// Builds the configuration from `(name, value)` pairs (the process environment, or a
    /// test's), returning the problems found alongside it.
    pub fn from_vars<I, K, V>(vars: I) -> (Config, Vec<Problem>)
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: AsRef<str>,
    {
        let mut config = Config::default();
        let mut problems = Vec::new();
        for (name, value) in vars {
            let (name, value) = (name.as_ref(), value.as_ref());
            if !name.starts_with("ITERMEM_") {
                continue;
            }
            match OPTIONS.iter().find(|o| o.name == name) {
                Some(option) if (option.apply)(&mut config, value) => {}
                Some(option) => problems.push(Problem(format!(
                    "ignoring {name}={value:?}: expected {}",
                    option.forms
                ))),
                None => problems.push(Problem(format!(
                    "ignoring unknown variable {name}; known: {}",
                    OPTIONS
                        .iter()
                        .map(|o| o.name)
                        .collect::<Vec<_>>()
                        .join(", ")
                ))),
            }
        }
        config.one_file_each(&mut problems);
        if config.mode == Mode::Swap && config.limit.is_none() {
            problems.push(Problem(
                "ITERMEM_MODE=swap without ITERMEM_LIMIT: nothing is swapped (the pool serves \
                 as in pool mode)"
                    .into(),
            ));
        }
        (config, problems)
    }

    /// Reads the process environment, printing each problem once on stderr.
    /// [`Config::from_vars`] for the process environment's own strings: a path need not be
    /// UTF-8 (a Linux path is bytes); any other value that is not gets a problem line.
    pub fn from_os_vars<I>(vars: I) -> (Config, Vec<Problem>)
    where
        I: IntoIterator<Item = (OsString, OsString)>,
    {
        let mut text = Vec::new();
        let mut bytes = Vec::new();
        for (name, value) in vars {
            let Ok(name) = name.into_string() else {
                continue; // not one of ours: every ITERMEM_ name is ASCII
            };
            match value.into_string() {
                Ok(value) => text.push((name, value)),
                Err(value) if name.starts_with("ITERMEM_") => bytes.push((name, value)),
                Err(_) => {}
            }
        }
        let (mut config, mut problems) = Config::from_vars(text);
        if bytes.is_empty() {
            return (config, problems);
        }
        for (name, value) in bytes {
            let slot = match name.as_str() {
                "ITERMEM_TRACE" => &mut config.trace,
                "ITERMEM_STATS" => &mut config.stats,
                "ITERMEM_PLAN_OUT" => &mut config.plan_out,
                "ITERMEM_CNMEM_LIB" => &mut config.cnmem_library,
                _ => {
                    problems.push(Problem(format!(
                        "ignoring {name}={value:?}: the value is not UTF-8"
                    )));
                    continue;
                }
            };
            *slot = Some(PathBuf::from(value));
        }
        config.one_file_each(&mut problems);
        (config, problems)
    }

    /// The trace, the statistics and the plan go to different files: a later one naming an
    /// earlier one's file is dropped with a problem line (it would replace what was written).
    fn one_file_each(&mut self, problems: &mut Vec<Problem>) {
        let same = |a: &Path, b: &Path| {
            a == b
                || matches!(
                    (std::fs::canonicalize(a), std::fs::canonicalize(b)),
                    (Ok(a), Ok(b)) if a == b
                )
        };
        let trace = self.trace.clone();
        let stats = self.stats.clone();
        for (name, slot, earlier) in [
            (
                "ITERMEM_STATS",
                &mut self.stats,
                vec![("ITERMEM_TRACE", trace.clone())],
            ),
            (
                "ITERMEM_PLAN_OUT",
                &mut self.plan_out,
                vec![("ITERMEM_TRACE", trace), ("ITERMEM_STATS", stats)],
            ),
        ] {
            let Some(path) = slot.clone() else { continue };
            if let Some((other, _)) = earlier
                .iter()
                .find(|(_, p)| p.as_deref().is_some_and(|p| same(p, &path)))
            {
                problems.push(Problem(format!(
                    "ignoring {name}={}: {other} names the same file",
                    path.display()
                )));
                *slot = None;
            }
        }
    }

    /// The output paths with `%p` replaced by `pid` (and `%%` by `%`), as in LLVM's profile
    /// file names: processes started with one environment (one per GPU) write their own files.
    pub fn for_process(mut self, pid: u32) -> Config {
        for path in [&mut self.trace, &mut self.stats, &mut self.plan_out]
            .into_iter()
            .flatten()
        {
            *path = with_pid(path, pid);
        }
        self
    }

    pub fn from_env() -> Config {
        let (config, problems) = Config::from_os_vars(std::env::vars_os());
        let config = config.for_process(std::process::id());
        for problem in problems {
            // Not `eprintln!`: it panics when stderr is closed, and this runs inside a hook.
            let _ = writeln!(std::io::stderr(), "{problem}");
        }
        config
    }

    /// Whether calls are observed at all (everything but `off`).
    pub fn observes(&self) -> bool {
        self.mode != Mode::Off
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(vars: &[(&str, &str)]) -> (Config, Vec<Problem>) {
        Config::from_vars(vars.iter().copied())
    }

    #[test]
    fn defaults_record_without_outputs() {
        let (c, problems) = config(&[("PATH", "/bin")]);
        assert_eq!(c, Config::default());
        assert!(problems.is_empty());
        assert!(c.observes());
    }

    #[test]
    fn every_option_is_read() {
        let (c, problems) = config(&[
            ("ITERMEM_MODE", "OFF"),
            ("ITERMEM_TRACE", "/tmp/t.itrace"),
            ("ITERMEM_STATS", "/tmp/s.json"),
            ("ITERMEM_LIMIT", "75%"),
            ("ITERMEM_LOG", "debug"),
        ]);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(c.mode, Mode::Off);
        assert!(!c.observes());
        assert_eq!(c.trace, Some(PathBuf::from("/tmp/t.itrace")));
        assert_eq!(c.stats, Some(PathBuf::from("/tmp/s.json")));
        assert_eq!(c.limit, Some(Limit::Fraction(0.75)));
        assert_eq!(c.log.as_deref(), Some("debug"));
    }

    #[test]
    fn bad_values_name_variable_value_and_forms_and_keep_defaults() {
        let (c, problems) = config(&[("ITERMEM_LIMIT", "12Q"), ("ITERMEM_MODE", "fast")]);
        assert_eq!(c, Config::default());
        assert_eq!(problems.len(), 2);
        assert!(problems[0].0.contains("ITERMEM_LIMIT=\"12Q\""));
        assert!(problems[0].0.contains("K, M, G or T"));
        assert!(problems[1].0.contains("ITERMEM_MODE=\"fast\""));
        assert!(problems[1].to_string().starts_with("itermem: "));
    }

    #[test]
    fn unknown_variables_and_swap_without_a_limit_are_reported() {
        let (c, problems) = config(&[("ITERMEM_TRACEFILE", "x"), ("ITERMEM_MODE", "swap")]);
        assert_eq!(c.mode, Mode::Swap);
        assert!(
            problems
                .iter()
                .any(|p| p.0.contains("unknown variable ITERMEM_TRACEFILE"))
        );
        assert!(
            problems
                .iter()
                .any(|p| p.0.contains("without ITERMEM_LIMIT"))
        );
        let (_, problems) = config(&[("ITERMEM_MODE", "swap"), ("ITERMEM_LIMIT", "60%")]);
        assert!(problems.is_empty(), "{problems:?}");
    }

    #[test]
    fn outputs_never_share_a_file_and_paths_need_not_be_utf8() {
        let (c, problems) = config(&[
            ("ITERMEM_TRACE", "/tmp/x"),
            ("ITERMEM_STATS", "/tmp/x"),
            ("ITERMEM_PLAN_OUT", "/tmp/y"),
        ]);
        assert_eq!(c.trace, Some(PathBuf::from("/tmp/x")));
        assert_eq!((c.stats, c.plan_out), (None, Some(PathBuf::from("/tmp/y"))));
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].0.contains("ITERMEM_TRACE names the same file"));

        use std::os::unix::ffi::OsStringExt;
        let latin1 = OsString::from_vec(b"/tmp/caf\xe9.itrace".to_vec());
        let (c, problems) = Config::from_os_vars([
            (OsString::from("ITERMEM_TRACE"), latin1.clone()),
            (OsString::from("ITERMEM_STATS"), latin1.clone()),
            (
                OsString::from("ITERMEM_MODE"),
                OsString::from_vec(b"po\xffl".to_vec()),
            ),
            (OsString::from("HOME"), OsString::from_vec(b"\xff".to_vec())),
        ]);
        assert_eq!(c.trace, Some(PathBuf::from(latin1)));
        assert_eq!(c.stats, None);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(
            problems
                .iter()
                .any(|p| p.0.contains("ITERMEM_MODE") && p.0.contains("UTF-8"))
        );
    }

    #[test]
    fn percent_p_in_output_paths_is_the_process_id() {
        let (c, _) = config(&[
            ("ITERMEM_TRACE", "/tmp/run-%p.itrace"),
            ("ITERMEM_STATS", "/tmp/100%%-%p/s.json"),
        ]);
        let c = c.for_process(4242);
        assert_eq!(c.trace, Some(PathBuf::from("/tmp/run-4242.itrace")));
        assert_eq!(c.stats, Some(PathBuf::from("/tmp/100%-4242/s.json")));
    }

    #[test]
    fn a_log_filter_env_logger_cannot_parse_is_reported_once() {
        let (c, problems) = config(&[("ITERMEM_LOG", "itermem=debug")]);
        assert!(problems.is_empty());
        assert_eq!(c.log.as_deref(), Some("itermem=debug"));
        let (c, problems) = config(&[("ITERMEM_LOG", "a=b=c")]);
        assert_eq!((c.log, problems.len()), (None, 1));
    }

    #[test]
    fn injected_panics_name_a_hook_and_optionally_the_call_they_start_at() {
        let (c, problems) = config(&[("ITERMEM_INJECT_PANIC", "cudaFree")]);
        assert!(problems.is_empty());
        assert_eq!(c.inject_panic, Some(("cudaFree".into(), 1)));
        let (c, _) = config(&[("ITERMEM_INJECT_PANIC", "cudaLaunchKernel@280")]);
        assert_eq!(c.inject_panic, Some(("cudaLaunchKernel".into(), 280)));
        for bad in ["cudaFree@0", "cudaFree@x", "@3", "cuda Free", "cudaFreee"] {
            let (c, problems) = config(&[("ITERMEM_INJECT_PANIC", bad)]);
            assert_eq!((c.inject_panic, problems.len()), (None, 1), "{bad}");
        }
    }

    #[test]
    fn swap_options() {
        let (c, problems) = config(&[
            ("ITERMEM_SWAP_VERIFY", "1"),
            ("ITERMEM_PLAN_OUT", "plan.json"),
            ("ITERMEM_BANDWIDTH", "pcie4"),
            ("ITERMEM_SWAP_MIN_BYTES", "256K"),
        ]);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(c.swap_min_bytes, 256 << 10);
        assert!(c.swap_verify);
        assert_eq!(c.plan_out, Some(PathBuf::from("plan.json")));
        assert_eq!(c.bandwidth, Some(CopyModel::pcie4()));
        let (c, problems) = config(&[
            ("ITERMEM_SWAP_VERIFY", "yes"),
            ("ITERMEM_BANDWIDTH", "x"),
            ("ITERMEM_SWAP_MIN_BYTES", "big"),
        ]);
        assert!(!c.swap_verify);
        assert_eq!(c.bandwidth, None);
        assert_eq!(c.swap_min_bytes, 1 << 20);
        assert_eq!(problems.len(), 3, "{problems:?}");
    }

    #[test]
    fn limits_and_sizes() {
        assert_eq!(parse_limit("6G"), Some(Limit::Bytes(6 << 30)));
        assert_eq!(parse_limit("512MiB"), Some(Limit::Bytes(512 << 20)));
        assert_eq!(parse_limit("0"), None);
        assert_eq!(parse_limit("150%"), None);
        assert_eq!(parse_limit("-5%"), None);
        assert_eq!(parse_bytes("99999999999999T"), None);
    }
}
