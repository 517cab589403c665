//! `itermem trace info|export`: read a trace once to check and summarise it, then (for exports)
//! a second time to write the chosen format.
//!
//! The first pass decodes every record, so a corrupt or truncated trace is refused before any
//! output is written (exit code 2, the message names the byte offset). The `--json` output of
//! `info` is a stable interface: fields are only ever added.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, Subcommand, ValueEnum};
use serde::Serialize;

use itermem::analysis::{self, Analysis, EventCounts, HostCounts, KernelStat};
use itermem::detect::DetectorConfig;
use itermem::event::{Event, EventKind};
use itermem::export::{self, human_bytes};
use itermem::import;
use itermem::trace::{EndRecord, Events, TraceError, TraceFile, TraceHeader};

use super::{BadInput, InputArgs};

#[derive(Debug, Args)]
pub struct TraceArgs {
    #[command(subcommand)]
    command: TraceCommand,
}

#[derive(Debug, Subcommand)]
enum TraceCommand {
    /// Counts, peak live device memory, streams, busiest kernels and the detected iteration.
    Info(InfoArgs),
    /// Convert a trace for other tools.
    Export(ExportArgs),
}

/// How the iteration detector runs over the trace.
#[derive(Debug, Args)]
struct DetectArgs {
    /// Longest iteration looked for, in events.
    #[arg(long, default_value_t = DetectorConfig::for_cuda_events().max_period)]
    max_period: usize,
    /// Consecutive copies of an iteration needed to confirm it (2 to 64).
    #[arg(long, default_value_t = DetectorConfig::for_cuda_events().repeats)]
    repeats: usize,
    /// Fewest events that may confirm a period (suppresses short transient repetitions).
    #[arg(long, default_value_t = DetectorConfig::for_cuda_events().min_window)]
    min_window: usize,
}

impl DetectArgs {
    fn config(&self) -> DetectorConfig {
        DetectorConfig {
            max_period: self.max_period,
            repeats: self.repeats,
            min_window: self.min_window,
        }
    }
}

#[derive(Debug, Args)]
struct InfoArgs {
    /// The trace file.
    file: PathBuf,
    /// Print machine-readable JSON (a stable format) instead of text.
    #[arg(long)]
    json: bool,
    /// How many kernels to list, most launched first.
    #[arg(long, default_value_t = 10)]
    top: usize,
    #[command(flatten)]
    detect: DetectArgs,
    #[command(flatten)]
    input: InputArgs,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Format {
    /// One row per event, with a header line.
    Csv,
    /// Chrome / Perfetto trace-event JSON.
    Chrome,
    /// `id,lower,upper,size` of the buffers of one iteration (lifetimes in events, half-open,
    /// relative to the iteration's first event; buffers crossing a boundary are clipped to it).
    DsaCsv,
    /// The pickle `torch.cuda.memory._snapshot()` returns, for PyTorch's memory viewer
    /// (pytorch.org/memory_viz): each device allocation a segment of one block (one device).
    TorchSnapshot,
}

#[derive(Debug, Args)]
struct ExportArgs {
    /// The trace file.
    file: PathBuf,
    #[arg(long, value_enum)]
    format: Format,
    /// Output file (default: standard output).
    #[arg(short, long)]
    output: Option<PathBuf>,
    /// dsa-csv: which complete iteration to export, counted from the first one aligned with the
    /// detected boundary (default: the one starting at the boundary).
    #[arg(long)]
    iteration: Option<usize>,
    #[command(flatten)]
    detect: DetectArgs,
    #[command(flatten)]
    input: InputArgs,
}

pub fn run(args: TraceArgs) -> anyhow::Result<()> {
    match args.command {
        TraceCommand::Info(args) => info(&args),
        TraceCommand::Export(args) => export(&args),
    }
}

/// An itermem trace as it is, or any other recording `import` reads (PyTorch snapshot,
/// profiler trace), converted to an in-memory itermem trace of its mallocs and frees.
/// The trace of `path`, and the format it was converted from (None for an itermem trace).
fn open(path: &Path, input: &InputArgs) -> anyhow::Result<(TraceFile, Option<String>)> {
    if itermem::trace::format::starts_with_magic(path).unwrap_or(true) {
        // (An unreadable or short file is reported by the trace reader, with its offset.)
        return Ok((TraceFile::open(path)?, None));
    }
    let recording = import::load_recording(path, &input.import_options())?;
    let source = recording.source();
    let format = format!(
        "{}{}",
        source.format,
        if source.gzip { ", gzip" } else { "" }
    );
    let mut header = TraceHeader::for_this_process(recording.source().format.to_string(), 0);
    header.pid = 0;
    header.start_unix_ns = 0;
    header.command_line = vec![path.display().to_string()];
    let bytes = itermem::trace::format::encode_trace(&header, &recording.to_events())?;
    Ok((TraceFile::from_bytes(path, bytes)?, Some(format)))
}

/// A checked trace: the file and the analysis of all its events.
struct Loaded {
    file: TraceFile,
    /// The device `--from-device` chose (`analysis` and exports are of its events alone).
    device: Option<u32>,
    /// Each device's own summary, by ordinal (one entry for a single-device program).
    devices: Vec<DeviceInfoJson>,
    /// The size of the file on disk (for an imported file, not of its conversion).
    file_bytes: u64,
    /// The format an imported file was converted from; None for an itermem trace.
    converted_from: Option<String>,
    analysis: Analysis,
    end: Option<EndRecord>,
    /// Where the file ends inside a record: the process ended without closing the trace.
    cut_at: Option<u64>,
}

/// Reads the trace once, analysing each device's events apart (each device runs its own
/// iteration; kernel names are every device's). With several devices, a second pass analyses
/// all events together for the totals.
fn load(path: &Path, detect: &DetectArgs, input: &InputArgs) -> anyhow::Result<Loaded> {
    let (file, converted_from) = open(path, input)?;
    let file_bytes = std::fs::metadata(path).map_or(file.len_bytes(), |meta| meta.len());
    let mut analyzers: BTreeMap<u32, analysis::Analyzer> = BTreeMap::new();
    let mut names = Vec::new();
    let mut events = file.events();
    let mut cut_at = None;
    for event in events.by_ref() {
        match event {
            Ok(event) if matches!(event.kind, EventKind::KernelName { .. }) => {
                analyzers.values_mut().for_each(|a| a.push(&event));
                names.push(event);
            }
            Ok(event) => analyzers
                .entry(event.device)
                .or_insert_with(|| {
                    let mut analyzer = analysis::Analyzer::new();
                    names.iter().for_each(|name| analyzer.push(name));
                    analyzer
                })
                .push(&event),
            Err(err) if err.is_cut() => cut_at = Some(err.offset()),
            Err(err) => return Err(err.into()),
        }
    }
    let end = events.end_record();
    let config = detect.config();
    let mut analyses = analyzers
        .into_iter()
        .map(|(device, analyzer)| Ok((device, analyzer.finish(&config)?)))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let devices = analyses
        .iter()
        .map(|(device, a)| DeviceInfoJson::new(*device, a))
        .collect();
    let analysis = match (input.device, analyses.len()) {
        (Some(device), _) => {
            let found = analyses.iter().position(|(d, _)| *d == device);
            let Some(found) = found else {
                let available: Vec<u32> = analyses.iter().map(|(d, _)| *d).collect();
                return Err(BadInput(format!(
                    "{}: --from-device {device}: the trace has no event of that device \
                     (devices: {available:?})",
                    path.display()
                ))
                .into());
            };
            analyses.swap_remove(found).1
        }
        (None, 0) => analysis::Analyzer::new().finish(&config)?,
        (None, 1) => analyses.pop().expect("one analysis").1,
        (None, _) => with_events(&file, None, |events| Ok(analysis::analyze(events, &config)))??,
    };
    Ok(Loaded {
        file,
        device: input.device,
        devices,
        file_bytes,
        converted_from,
        analysis,
        end,
        cut_at,
    })
}

/// The events of a trace as plain `Event`s, stopping at the first error, which it keeps.
struct UntilError<'a> {
    events: Events<'a>,
    error: Option<TraceError>,
    /// Only this device's events (and the kernel names, which are every device's).
    device: Option<u32>,
}

impl Iterator for UntilError<'_> {
    type Item = Event;

    fn next(&mut self) -> Option<Event> {
        loop {
            match self.events.next()? {
                Ok(event) if self.device.is_none_or(|d| d == event.device) => return Some(event),
                Ok(event) if matches!(event.kind, EventKind::KernelName { .. }) => {
                    return Some(event);
                }
                Ok(_) => {}
                Err(err) => {
                    self.error = Some(err);
                    return None;
                }
            }
        }
    }
}

/// Runs `write` over the events of `file` (of `device` only, when given); a decoding error
/// (only possible if the file changed since the first pass) is returned after it.
fn with_events<T>(
    file: &TraceFile,
    device: Option<u32>,
    write: impl FnOnce(&mut UntilError<'_>) -> io::Result<T>,
) -> anyhow::Result<T> {
    let mut events = UntilError {
        events: file.events(),
        error: None,
        device,
    };
    let result = write(&mut events);
    if let Some(err) = events.error.filter(|err| !err.is_cut()) {
        return Err(err.into());
    }
    Ok(result?)
}

fn info(args: &InfoArgs) -> anyhow::Result<()> {
    let loaded = load(&args.file, &args.detect, &args.input)?;
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    if args.json {
        let json = InfoJson::new(&loaded, args.top);
        serde_json::to_writer_pretty(&mut out, &json)?;
        writeln!(out)?;
    } else {
        print_info(&mut out, &loaded, args.top)?;
    }
    out.flush()?;
    Ok(())
}

/// `trace info --json`. Stable: fields are added, never renamed or removed.
#[derive(Serialize)]
struct InfoJson<'a> {
    file: String,
    /// The format an imported file was converted from (null for an itermem trace).
    converted_from: Option<&'a str>,
    format_version: u16,
    /// The size of the file on disk.
    file_bytes: u64,
    /// Whether the writer finished cleanly (the end record is present).
    complete: bool,
    /// Events the writer reported lost (from the end record; null without one).
    events_lost: Option<u64>,
    /// Byte at which the file ends inside a record (the process ended without closing the
    /// trace: a crash, `_exit`, SIGKILL); null when it ends at a record boundary.
    cut_at_byte: Option<u64>,
    device: DeviceJson<'a>,
    pid: u32,
    command_line: &'a [String],
    start_unix_ns: u64,
    duration_ns: u64,
    /// Indexed events (all but kernel names).
    access_events: u64,
    /// Device memory only for malloc/free (device, managed, async).
    events: EventCounts,
    host_events: HostCounts,
    kernel_names: u64,
    /// CUDA graph launches (their nodes' work is counted in `events`).
    graph_launches: u64,
    unmatched_frees: u64,
    streams: &'a [u64],
    peak_live_bytes: u64,
    peak_event: Option<u64>,
    peak_time_ns: Option<u64>,
    live_bytes_at_end: u64,
    #[serde(flatten)]
    iteration: IterationJson,
    top_kernels: &'a [KernelStat],
    /// Each device's own events, peak and iteration (one entry for a single-device program;
    /// with several, the fields above are of all devices together).
    devices: &'a [DeviceInfoJson],
}

/// One device's part of `trace info --json`; its event indices are the device's own.
#[derive(Serialize)]
struct DeviceInfoJson {
    device: u32,
    access_events: u64,
    events: EventCounts,
    peak_live_bytes: u64,
    peak_event: Option<u64>,
    live_bytes_at_end: u64,
    #[serde(flatten)]
    iteration: IterationJson,
}

/// The detected iteration's part of `trace info --json` (the file's and each device's).
#[derive(Serialize)]
struct IterationJson {
    period_events: Option<u64>,
    boundary_event: Option<u64>,
    iterations: u64,
    iteration_start_event: Option<u64>,
    detected_at_event: Option<u64>,
}

impl IterationJson {
    fn new(a: &Analysis) -> IterationJson {
        let it = a.iteration.as_ref();
        IterationJson {
            period_events: it.map(|i| i.period_events),
            boundary_event: it.map(|i| i.boundary_event),
            iterations: it.map_or(0, |i| i.iterations_seen),
            iteration_start_event: it.map(|i| i.start_event),
            detected_at_event: it.map(|i| i.detected_at_event),
        }
    }
}

impl DeviceInfoJson {
    fn new(device: u32, a: &Analysis) -> DeviceInfoJson {
        DeviceInfoJson {
            device,
            access_events: a.events,
            events: a.counts,
            peak_live_bytes: a.peak_live_bytes,
            peak_event: a.peak_event,
            live_bytes_at_end: a.live_at_end(),
            iteration: IterationJson::new(a),
        }
    }
}

#[derive(Serialize)]
struct DeviceJson<'a> {
    name: &'a str,
    total_memory: u64,
}

impl<'a> InfoJson<'a> {
    fn new(loaded: &'a Loaded, top: usize) -> InfoJson<'a> {
        let a = &loaded.analysis;
        let h = loaded.file.header();
        InfoJson {
            file: loaded.file.path().display().to_string(),
            converted_from: loaded.converted_from.as_deref(),
            format_version: loaded.file.version(),
            file_bytes: loaded.file_bytes,
            complete: loaded.end.is_some(),
            events_lost: loaded.end.map(|e| e.events_lost),
            cut_at_byte: loaded.cut_at,
            device: DeviceJson {
                name: &h.device_name,
                total_memory: h.device_total_memory,
            },
            pid: h.pid,
            command_line: &h.command_line,
            start_unix_ns: h.start_unix_ns,
            duration_ns: a.duration_ns(),
            access_events: a.events,
            events: a.counts,
            host_events: a.host,
            kernel_names: a.kernel_names,
            graph_launches: a.graph_launches,
            unmatched_frees: a.unmatched_frees,
            streams: &a.streams,
            peak_live_bytes: a.peak_live_bytes,
            peak_event: a.peak_event,
            peak_time_ns: a.peak_time_ns,
            live_bytes_at_end: a.live_at_end(),
            iteration: IterationJson::new(a),
            top_kernels: &a.kernels[..a.kernels.len().min(top)],
            devices: &loaded.devices,
        }
    }
}

/// A duration in the unit that suits it: `850 ns`, `12.500 µs`, `3.250 ms`, `12.345 s`.
fn seconds(ns: u64) -> String {
    let ns_f = ns as f64;
    match ns {
        0..1_000 => format!("{ns} ns"),
        1_000..1_000_000 => format!("{:.3} µs", ns_f / 1e3),
        1_000_000..1_000_000_000 => format!("{:.3} ms", ns_f / 1e6),
        _ => format!("{:.3} s", ns_f / 1e9),
    }
}

fn print_info(out: &mut impl Write, loaded: &Loaded, top: usize) -> io::Result<()> {
    let a = &loaded.analysis;
    let h = loaded.file.header();
    let state = match loaded.end {
        Some(EndRecord { events_lost: 0, .. }) => "complete".to_string(),
        Some(EndRecord { events_lost, .. }) => format!("complete, {events_lost} events LOST"),
        None => match loaded.cut_at {
            Some(at) => format!(
                "INCOMPLETE: cut at byte {at}, the process ended without closing the trace; \
                 the events before the cut are read"
            ),
            None => "no end record: the writer did not finish".to_string(),
        },
    };
    let format = match &loaded.converted_from {
        Some(format) => format!("{format}, converted"),
        None => format!("format v{}", loaded.file.version()),
    };
    writeln!(
        out,
        "trace       {} ({}, {format}, {state})",
        loaded.file.path().display(),
        human_bytes(loaded.file_bytes),
    )?;
    writeln!(
        out,
        "program     pid {}: {}",
        h.pid,
        h.command_line.join(" ")
    )?;
    let device = if h.device_name.is_empty() {
        "(unknown)"
    } else {
        &h.device_name
    };
    writeln!(
        out,
        "device      {device}, {} total",
        human_bytes(h.device_total_memory)
    )?;
    writeln!(
        out,
        "duration    {} over {} events (+{} kernel names)",
        seconds(a.duration_ns()),
        a.events,
        a.kernel_names
    )?;
    let c = &a.counts;
    writeln!(
        out,
        "events      malloc {}  free {}  launch {}  memcpy {}  memset {}",
        c.malloc, c.free, c.launch, c.memcpy, c.memset
    )?;
    if a.graph_launches > 0 {
        writeln!(
            out,
            "graphs      {} graph launches (their nodes' work is in the events above)",
            a.graph_launches
        )?;
    }
    writeln!(
        out,
        "pinned host malloc {}  free {}",
        a.host.malloc, a.host.free
    )?;
    if a.unmatched_frees > 0 {
        writeln!(
            out,
            "warning     {} frees of allocations not in the trace",
            a.unmatched_frees
        )?;
    }
    let streams: Vec<String> = a.streams.iter().map(|s| format!("{s:#x}")).collect();
    writeln!(
        out,
        "streams     {}: {}",
        a.streams.len(),
        streams.join(" ")
    )?;
    match (a.peak_event, a.peak_time_ns) {
        (Some(event), Some(time)) => writeln!(
            out,
            "peak        {} ({} B) live device memory at event {event} (t = {}); {} at the end",
            human_bytes(a.peak_live_bytes),
            a.peak_live_bytes,
            seconds(time),
            human_bytes(a.live_at_end())
        )?,
        _ => writeln!(out, "peak        no device memory allocated")?,
    }
    match &a.iteration {
        Some(it) => writeln!(
            out,
            "iteration   {} events, boundary at event {}, {} iterations seen (periodic from \
             event {}, found at event {})",
            it.period_events,
            it.boundary_event,
            it.iterations_seen,
            it.start_event,
            it.detected_at_event
        )?,
        None => writeln!(out, "iteration   none detected")?,
    }
    if loaded.devices.len() > 1 {
        writeln!(out, "per device (each its own event numbering):")?;
        for d in &loaded.devices {
            let iteration = match d.iteration.period_events {
                Some(events) => {
                    format!("iteration {events} events, {} seen", d.iteration.iterations)
                }
                None => "no iteration".to_string(),
            };
            writeln!(
                out,
                "  device {}: {} events, peak {} ({} B), {iteration}",
                d.device,
                d.access_events,
                human_bytes(d.peak_live_bytes),
                d.peak_live_bytes
            )?;
        }
    }
    if !a.kernels.is_empty() {
        writeln!(out, "top kernels (launches):")?;
        for k in a.kernels.iter().take(top) {
            let name = k.name.as_deref().unwrap_or("(unnamed)");
            writeln!(out, "  {:>10}  #{:<5} {name}", k.launches, k.id)?;
        }
    }
    Ok(())
}

fn export(args: &ExportArgs) -> anyhow::Result<()> {
    let loaded = load(&args.file, &args.detect, &args.input)?;
    let buffers = match args.format {
        Format::DsaCsv => Some(dsa_buffers(&loaded, args.iteration)?),
        _ => {
            if args.iteration.is_some() {
                return Err(BadInput("--iteration applies to --format dsa-csv only".into()).into());
            }
            None
        }
    };
    let (mut out, name): (Box<dyn Write>, String) = match &args.output {
        Some(path) => {
            let file =
                File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
            (Box::new(BufWriter::new(file)), path.display().to_string())
        }
        None => (
            Box::new(BufWriter::new(io::stdout().lock())),
            "standard output".to_string(),
        ),
    };
    let file = &loaded.file;
    match args.format {
        Format::Csv => with_events(file, loaded.device, |events| {
            export::write_csv(events, &mut out)
        }),
        Format::Chrome => with_events(file, loaded.device, |events| {
            export::write_chrome(file.header(), events, &mut out)
        }),
        Format::DsaCsv => {
            let buffers = buffers.unwrap_or_default();
            export::write_dsa_csv(&buffers, &mut out).map_err(Into::into)
        }
        Format::TorchSnapshot => with_events(file, loaded.device, |events| {
            export::write_torch_snapshot(events, loaded.device.unwrap_or(0), &mut out)
        }),
    }
    .with_context(|| format!("cannot write {name}"))
}

/// The buffers of the chosen iteration.
fn dsa_buffers(
    loaded: &Loaded,
    choice: Option<usize>,
) -> anyhow::Result<Vec<itermem::plan::Buffer>> {
    let path = loaded.file.path().display();
    let a = &loaded.analysis;
    let Some(it) = &a.iteration else {
        return Err(BadInput(format!(
            "{path}: no repeating iteration detected in its {} events, so there is no iteration \
             to export (see --repeats, --min-window, --max-period)",
            a.events
        ))
        .into());
    };
    let starts = it.aligned_starts();
    let start = match choice {
        Some(n) => *starts.get(n).ok_or_else(|| {
            BadInput(format!(
                "{path}: --iteration {n} does not exist: the trace has {} complete iterations \
                 of {} events (0 to {})",
                starts.len(),
                it.period_events,
                starts.len().saturating_sub(1)
            ))
        })?,
        None => match starts.iter().find(|&&s| s == it.boundary_event) {
            Some(&s) => s,
            None => *starts.last().ok_or_else(|| {
                BadInput(format!(
                    "{path}: the detected iteration of {} events has no complete copy in the \
                     trace",
                    it.period_events
                ))
            })?,
        },
    };
    with_events(&loaded.file, loaded.device, |events| {
        Ok(analysis::iteration_buffers(events, start, it.period_events))
    })
}
