//! Importers: allocation recordings made by other tools (and by itermem itself), turned into
//! one [`Recording`] type the detector and the planner share, or directly into a DSA
//! [`Instance`].
//!
//! This module owns the edge between foreign formats and itermem's conventions: half-open
//! lifetimes in event indices, allocation ids that are stable per allocation (never addresses,
//! which are reused), one device at a time. Every format is converted here, once, and its
//! boundary cases are tested here, so the planner and the detector never see a foreign
//! convention.
//!
//! | format | recognised by | gives |
//! |---|---|---|
//! | itermem trace ([`crate::trace`]) | the magic `ITERMEM\0` | device `Malloc`/`Free` events (device, managed and stream-ordered memory; pinned host memory is not device memory and is left out) |
//! | PyTorch memory snapshot (`torch.cuda.memory._snapshot()` pickle) | pickle `PROTO` opcode (`80 02..05`), or the start of a protocol 0/1 dict or list | `device_traces`: `alloc` → alloc, `free_requested` (or the older name `free`) → free |
//! | PyTorch profiler / Chrome trace JSON | first non-blank byte `{` or `[` | instant events `[memory]` of `Device Type` 1 (CUDA), `Bytes` > 0 → alloc at `Addr`, < 0 → free |
//! | DSA CSV `id,lower,upper,size` | a first line that is that header or four integers | an [`Instance`] ([`read_dsa_csv`]) |
//! | SINGA memory log (the SmartPool/AutoSwap authors', `singa.rs`) | a first line `Malloc <ptr> <size> <ms>`, `Free <ptr> <ms>`, `Read`/`Mutable <ptr>` or `Layer <name>` | `Malloc` → alloc, `Free` → free (times in ms) |
//!
//! Any of them may be gzip-compressed (magic `1f 8b`); the content is recognised after
//! decompression. The file name plays no part: a `.json` that holds a pickle is read as a
//! pickle.
//!
//! # Gzip input is limited
//!
//! A gzip file may decompress to at most [`ImportOptions::max_decompressed`] bytes,
//! [`DEFAULT_MAX_DECOMPRESSED`] (1 GiB) unless raised (the CLI's `--max-decompressed BYTES`,
//! with a K, M, G or T suffix, on `trace info`, `trace export`, `compare` and `plan`): beyond
//! it the import stops with [`Problem::DecompressedTooLarge`], naming the file, the limit and
//! the flag, having held no more than the limit in memory. And the format is recognised from
//! the first 64 KiB decompressed: content of no format above is refused as
//! [`Problem::UnknownFormat`] (with the bytes it starts with) before the rest is decompressed;
//! content that stops being the format it began as (a NUL byte in text, a byte that is no
//! pickle opcode, 16 MiB of filler, past 16 MiB an expansion above 100:1; `crate::content`)
//! is refused at that byte as [`Problem::Malformed`]. All guard against gzip bombs (a 10 MB file that expands to 10 GB); the limit is 20 times
//! the largest real recording the project has (51 MiB decompressed). Plain files are not
//! limited: their size on disk is what they take in memory.
//!
//! # Why these choices
//!
//! - **Frees are paired by address with the latest allocation at that address.** PyTorch
//!   formats record addresses only; the caching allocator reuses them as soon as a block is
//!   freed. A free whose address has no live allocation belongs to a block allocated before the
//!   recording started: it is dropped and counted ([`ImportStats::dropped_frees`]), since it has
//!   no beginning. An allocation never freed lives to the end of the window converted.
//! - **Snapshots: `free_requested`, not `free_completed`.** `free_requested` is when the
//!   program let go of the tensor (what a planner must honour); `free_completed` is when the
//!   caching allocator could reuse the block after pending stream uses, which is the
//!   allocator's business and which itermem's executor re-derives with events (design §2.2).
//!   `segment_*` events are cudaMalloc/cudaFree of the allocator's pools and `snapshot`/`oom`
//!   are markers: none is an allocation of the program. Old snapshots (PyTorch ≤ 2.1) have no
//!   `time_us`; their events are in recorded order, which is all the importers need.
//! - **Profiler traces are sorted by timestamp.** The profiler writes each thread's events
//!   together (the autograd thread's frees after the main thread's allocations), so file
//!   order is not time order; a stable sort by `ts` (file order on ties) restores it. Only
//!   `Device Type` 1 (CUDA, which ROCm builds also report) is device memory; CPU memory events
//!   (type 0) are ignored.
//! - **One device per recording.** The planner plans one device's memory. A file with several
//!   devices gives the one with the most alloc and free records (the lowest id on ties) unless
//!   [`ImportOptions::device`] names one; [`Recording::devices`] lists them all.
//! - **The JSON reader never builds a generic value of the document.** A profiler trace is
//!   mostly kernels and CPU ops (the V100 trace: 54 MB of JSON, 216,000 events, 28,000 of them
//!   memory events); events are decoded one by one into a small struct (keys and names are
//!   matched in place, no string is copied) and only memory events are kept: 0.26 s for that
//!   file in a release build, against 0.83 s to build and drop a `serde_json::Value`.
//! - **Pickles are read by a restricted unpickler of our own** (`pickle.rs`): plain data
//!   only; every opcode that would load a Python global (a class, a function: how a pickle
//!   runs code) is refused with its byte offset. `serde-pickle` 1.2 was the plan, but it
//!   cannot read the real snapshots: it fails on containers shared between trace entries,
//!   which every snapshot has by the thousand. It remains a dev-dependency that writes the
//!   tests' pickles.
//! - **Errors, never panics**: a malformed file gives an [`ImportError`] naming the file and the
//!   place (byte offset, line, JSON path or event index).

mod dsa_csv;
mod error;
mod kineto;
pub(crate) mod pickle;
mod recording;
pub(crate) mod singa;
mod snapshot;
mod trace_import;

#[cfg(test)]
mod tests;

use std::fmt;
use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

pub use crate::content::DEFAULT_MAX_DECOMPRESSED;
pub use dsa_csv::{parse_dsa_csv, read_dsa_csv};
pub use error::{ImportError, Location, Problem};
pub use recording::{
    AllocEvent, DeviceSummary, ImportStats, IterationBuffers, MIN_MATCH_RATIO, PersistentBuffer,
    Recording, RecordingError, Source, choose_iteration,
};

use crate::plan::Instance;

/// The file formats the importers recognise.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    /// itermem's own binary trace.
    ItermemTrace,
    /// A `torch.cuda.memory._snapshot()` pickle.
    TorchSnapshot,
    /// A PyTorch profiler (Kineto) / Chrome trace-event JSON file.
    ChromeTrace,
    /// An offline DSA instance, CSV `id,lower,upper,size`.
    DsaCsv,
    /// A SINGA memory log (`Malloc`/`Free` lines, and in access logs `Read`/`Mutable`).
    SingaLog,
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Format::ItermemTrace => "itermem trace",
            Format::TorchSnapshot => "PyTorch memory snapshot",
            Format::ChromeTrace => "PyTorch profiler trace JSON",
            Format::DsaCsv => "DSA CSV",
            Format::SingaLog => "SINGA memory log",
        })
    }
}

/// What a file holds: a recording of allocations, or an instance already.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Loaded {
    Recording(Recording),
    Instance(Instance),
}

/// Choices an import can take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImportOptions {
    /// The device to import from a file with several (`None`: the one with the most alloc and
    /// free records, the lowest id on ties). Snapshot devices are indices into
    /// `device_traces`; profiler devices are `Device Id`; an itermem trace has device 0.
    pub device: Option<u32>,
    /// The most bytes a gzip-compressed file may decompress to (see the module documentation);
    /// plain files are not limited.
    pub max_decompressed: u64,
}

impl Default for ImportOptions {
    fn default() -> ImportOptions {
        ImportOptions {
            device: None,
            max_decompressed: DEFAULT_MAX_DECOMPRESSED,
        }
    }
}

/// Imports a file of any supported format, recognised by its content.
pub fn load(path: impl AsRef<Path>) -> Result<Loaded, ImportError> {
    load_with(path, &ImportOptions::default())
}

/// [`load`] with options.
pub fn load_with(path: impl AsRef<Path>, options: &ImportOptions) -> Result<Loaded, ImportError> {
    let path = path.as_ref();
    let input = Input::open(path, options.max_decompressed)?;
    let Some(format) = input.format() else {
        let first_bytes = input.bytes().iter().take(16).copied().collect();
        return Err(
            ImportError::new(path, Location::File, Problem::UnknownFormat { first_bytes })
                .gzipped(input.gzip),
        );
    };
    let gzip = input.gzip;
    let source = Source {
        format,
        path: path.to_path_buf(),
        gzip,
    };
    let loaded = match format {
        Format::ItermemTrace => trace_import::import(input, source, options).map(Loaded::Recording),
        Format::TorchSnapshot => {
            snapshot::import(input.bytes(), source, options).map(Loaded::Recording)
        }
        Format::ChromeTrace => {
            kineto::import(input.bytes(), source, options).map(Loaded::Recording)
        }
        Format::DsaCsv => dsa_csv::parse_dsa_csv(path, input.bytes()).map(Loaded::Instance),
        Format::SingaLog => singa::import(input.bytes(), source, options).map(Loaded::Recording),
    };
    loaded.map_err(|err| err.in_format(format, gzip))
}

/// Imports a file that holds a recording (not a DSA CSV).
pub fn load_recording(
    path: impl AsRef<Path>,
    options: &ImportOptions,
) -> Result<Recording, ImportError> {
    let path = path.as_ref();
    match load_with(path, options)? {
        Loaded::Recording(recording) => Ok(recording),
        Loaded::Instance(_) => Err(ImportError::new(
            path,
            Location::File,
            Problem::WrongKind {
                found: Format::DsaCsv,
                wanted: "an allocation recording",
            },
        )),
    }
}

/// The format of a file's content (after decompression), if it is one this module reads.
pub fn detect_format(content: &[u8]) -> Option<Format> {
    if content.starts_with(&crate::trace::format::MAGIC) {
        return Some(Format::ItermemTrace);
    }
    // Protocols 2–5 start with PROTO; protocols 0 and 1 start with the empty dict or list
    // of the top-level object and its memo slot 0.
    if matches!(content, [0x80, 2..=5, ..])
        || [b"(dp0\n".as_slice(), b"(lp0\n", b"}q\x00", b"]q\x00"]
            .iter()
            .any(|start| content.starts_with(start))
    {
        return Some(Format::TorchSnapshot);
    }
    let text = content.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(content);
    match text.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'{' | b'[') => return Some(Format::ChromeTrace),
        Some(_) => {}
        None => return None,
    }
    if dsa_csv::looks_like_dsa_csv(text) {
        return Some(Format::DsaCsv);
    }
    if singa::looks_like_singa_log(text) {
        return Some(Format::SingaLog);
    }
    None
}

/// A file's content, decompressed if it was gzip.
pub(crate) struct Input {
    path: std::path::PathBuf,
    gzip: bool,
    content: Content,
}

enum Content {
    Bytes(Vec<u8>),
    /// An uncompressed itermem trace, opened (memory-mapped) by the trace reader itself.
    Trace(crate::trace::TraceFile),
}

impl Input {
    /// Opens `path`: an uncompressed itermem trace is mapped, anything else read whole,
    /// decompressed within `max_decompressed` bytes if it is gzip.
    fn open(path: &Path, max_decompressed: u64) -> Result<Input, ImportError> {
        let io_error = |err| ImportError::new(path, Location::File, Problem::Io(err));
        let mut file = File::open(path).map_err(io_error)?;
        let mut head = [0u8; 8];
        let mut got = 0;
        while got < head.len() {
            match file.read(&mut head[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(err) => return Err(io_error(err)),
            }
        }
        let head = &head[..got];
        if head.is_empty() {
            return Err(ImportError::new(path, Location::File, Problem::Empty));
        }
        if head == crate::trace::format::MAGIC {
            // Traces run to gigabytes: let the trace reader map the file instead of copying it.
            drop(file);
            let trace = crate::trace::TraceFile::open(path).map_err(|err| {
                ImportError::new(path, Location::File, Problem::Trace(err))
                    .in_format(Format::ItermemTrace, false)
            })?;
            return Ok(Input {
                path: path.to_path_buf(),
                gzip: false,
                content: Content::Trace(trace),
            });
        }
        let size = file.metadata().map_or(0, |m| m.len());
        let recognise = |first: &[u8]| detect_format(first).is_some();
        let (bytes, gzip) =
            crate::content::read_content(file, head.to_vec(), size, max_decompressed, recognise)
                .map_err(|err| read_error(path, err))?;
        if gzip && bytes.is_empty() {
            return Err(ImportError::new(path, Location::File, Problem::Empty).gzipped(true));
        }
        Ok(Input {
            path: path.to_path_buf(),
            gzip,
            content: Content::Bytes(bytes),
        })
    }

    /// The content (for a mapped trace, its bytes are not needed: empty).
    fn bytes(&self) -> &[u8] {
        match &self.content {
            Content::Bytes(bytes) => bytes,
            Content::Trace(_) => &[],
        }
    }

    fn format(&self) -> Option<Format> {
        match &self.content {
            Content::Trace(_) => Some(Format::ItermemTrace),
            Content::Bytes(bytes) => detect_format(bytes),
        }
    }
}

/// Why a file's content could not be read, as an import error. Every error but a failed read
/// happens inside gzip data.
fn read_error(path: &Path, err: crate::content::ReadError) -> ImportError {
    use crate::content::ReadError;
    let problem = match err {
        ReadError::Io(err) => return ImportError::new(path, Location::File, Problem::Io(err)),
        ReadError::Gzip {
            error,
            compressed_offset,
        } => Problem::Gzip {
            error,
            compressed_offset,
        },
        ReadError::TooLarge { limit } => Problem::DecompressedTooLarge { limit },
        ReadError::Unrecognised { first_bytes } => Problem::UnknownFormat { first_bytes },
        ReadError::Malformed { offset, message } => {
            let problem = Problem::Malformed(message);
            return ImportError::new(path, Location::Byte(offset), problem).gzipped(true);
        }
    };
    ImportError::new(path, Location::File, problem).gzipped(true)
}

/// The allocations and frees of each device among itermem's `events`, by device id.
pub(crate) fn device_summaries<'a>(
    events: impl IntoIterator<Item = &'a crate::event::Event>,
) -> Vec<DeviceSummary> {
    use crate::event::EventKind;
    let mut devices: Vec<DeviceSummary> = Vec::new();
    for event in events {
        let (allocs, frees) = match event.kind {
            EventKind::Malloc { .. } => (1, 0),
            EventKind::Free { .. } => (0, 1),
            _ => continue,
        };
        match devices.iter_mut().find(|d| d.device == event.device) {
            Some(d) => (d.allocs, d.frees) = (d.allocs + allocs, d.frees + frees),
            None => devices.push(DeviceSummary {
                device: event.device,
                allocs,
                frees,
            }),
        }
    }
    devices.sort_by_key(|d| d.device);
    devices
}

/// Picks the device: the requested one (an error if it has no events), else the one with the
/// most events (the lowest id on ties). `None` when no device has events and none was asked.
pub(crate) fn choose_device(
    path: &Path,
    devices: &[DeviceSummary],
    options: &ImportOptions,
) -> Result<Option<u32>, ImportError> {
    match options.device {
        Some(requested) => {
            if devices
                .iter()
                .any(|d| d.device == requested && d.events() > 0)
            {
                Ok(Some(requested))
            } else {
                Err(ImportError::new(
                    path,
                    Location::File,
                    Problem::NoSuchDevice {
                        requested,
                        available: devices
                            .iter()
                            .filter(|d| d.events() > 0)
                            .map(|d| d.device)
                            .collect(),
                    },
                ))
            }
        }
        None => Ok(devices
            .iter()
            .filter(|d| d.events() > 0)
            .max_by_key(|d| (d.events(), std::cmp::Reverse(d.device)))
            .map(|d| d.device)),
    }
}

/// Pairs frees with allocations by address (see the module documentation) and numbers the
/// allocations 0, 1, 2, … in allocation order.
#[derive(Debug, Default)]
pub(crate) struct AddressPairing {
    events: Vec<AllocEvent>,
    /// Live allocations by address: (id, size).
    live: std::collections::HashMap<u64, (u64, u64)>,
    next_id: u64,
    stats: ImportStats,
}

impl AddressPairing {
    pub(crate) fn alloc(&mut self, addr: u64, size: u64, time_us: Option<u64>) {
        let id = self.next_id;
        self.next_id += 1;
        if self.live.insert(addr, (id, size)).is_some() {
            self.stats.reused_live_addresses += 1;
        }
        self.events.push(AllocEvent::Alloc {
            id,
            size,
            addr: Some(addr),
            time_us,
        });
    }

    /// A free at `addr`; `size` is the size the free record gives, if any.
    pub(crate) fn free(&mut self, addr: u64, size: Option<u64>, time_us: Option<u64>) {
        match self.live.remove(&addr) {
            Some((id, allocated)) => {
                if size.is_some_and(|s| s != allocated) {
                    self.stats.size_mismatches += 1;
                }
                self.events.push(AllocEvent::Free { id, time_us });
            }
            None => self.stats.dropped_frees += 1,
        }
    }

    pub(crate) fn ignore(&mut self) {
        self.stats.ignored_records += 1;
    }

    pub(crate) fn finish(self, source: Source) -> Result<Recording, RecordingError> {
        Ok(Recording::new(source, self.events)?.with_stats(self.stats))
    }
}
