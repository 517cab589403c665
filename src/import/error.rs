//! [`ImportError`]: why a file could not be imported, with the file and the place in it.
//!
//! Every importer reports the most precise place its format allows: a byte offset for binary
//! formats (pickle opcodes, itermem traces, the gzip stream), a line for CSV, a line and column
//! plus the event index for JSON, a key path for the structure of a snapshot. For a gzip file,
//! places inside the data refer to the *decompressed* bytes (the message says so).

use crate::content::{Bounded, Excerpt, FirstBytes, TooLarge};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use crate::plan::InstanceError;
use crate::trace::TraceError;

use super::Format;

/// Where in the file the problem is.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Location {
    /// The file as a whole (cannot be opened, unknown format, no usable events).
    File,
    /// A byte offset (in the decompressed data when [`ImportError::gzip`] is set).
    Byte(u64),
    /// A 1-based line of a text file, and the byte offset at which that line starts.
    Line { line: u64, byte: u64 },
    /// A 1-based line and column of a JSON document, and the JSON path of the value being read
    /// when known (e.g. `traceEvents[1234]`).
    Json {
        line: u64,
        column: u64,
        path: Option<String>,
    },
    /// A path into a decoded structure (e.g. `device_traces[0][17].size`).
    Path(String),
    /// The index of a record among the file's events (0-based, file order).
    Event(u64),
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::File => Ok(()),
            Location::Byte(offset) => write!(f, "at byte {offset}"),
            Location::Line { line, byte } => write!(f, "line {line} (byte {byte})"),
            Location::Json { line, column, path } => {
                if let Some(path) = path {
                    write!(f, "at {path} (line {line}, column {column})")
                } else {
                    write!(f, "line {line}, column {column}")
                }
            }
            Location::Path(path) => write!(f, "at {path}"),
            Location::Event(index) => write!(f, "event {index}"),
        }
    }
}

/// What is wrong, without the where.
#[derive(Debug)]
#[non_exhaustive]
pub enum Problem {
    /// The file cannot be opened or read.
    Io(io::Error),
    /// The file has no bytes (after decompression, for a gzip file).
    Empty,
    /// The content is none of the formats this build reads.
    UnknownFormat { first_bytes: Vec<u8> },
    /// The gzip stream is corrupt or truncated; `compressed_offset` is how far the decoder got.
    Gzip {
        error: io::Error,
        compressed_offset: u64,
    },
    /// Gzip content that stops being the format it began as (see `crate::content`).
    Malformed(String),
    /// The gzip stream decompresses to more than `limit` bytes
    /// ([`ImportOptions::max_decompressed`](super::ImportOptions::max_decompressed)).
    DecompressedTooLarge { limit: u64 },
    /// An itermem trace that cannot be read (the trace error has its own byte offset).
    Trace(TraceError),
    /// JSON that does not parse, or whose values have the wrong types.
    Json(String),
    /// A pickle that does not decode.
    Pickle(String),
    /// A pickle that refers to a Python global, class or extension: only plain data
    /// (dict, list, tuple, str, bytes, int, float, bool, None) is accepted, since loading a
    /// global is how a pickle runs code.
    PickleGlobal { opcode: &'static str, name: String },
    /// The file parses but does not have the structure of its format.
    Structure(String),
    /// A profiler trace whose GPU memory events carry no `Addr`: frees cannot be matched to
    /// allocations, so no lifetime can be derived.
    NoAddresses { memory_events: u64 },
    /// Nothing to import: the message says what was expected and how to record it.
    NoEvents(String),
    /// The requested device has no events in the file.
    NoSuchDevice { requested: u32, available: Vec<u32> },
    /// A malformed line of a DSA CSV file.
    Csv(String),
    /// Two records give the same allocation id.
    DuplicateId { id: u64 },
    /// The buffers do not form a valid instance.
    Instance(InstanceError),
    /// The file holds an instance (DSA CSV) where a recording was asked for, or the reverse.
    WrongKind { found: Format, wanted: &'static str },
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::Io(err) => write!(f, "{err}"),
            Problem::Empty => write!(f, "the file is empty"),
            Problem::UnknownFormat { first_bytes } => {
                write!(
                    f,
                    "unrecognised content (starts with{}): expected an itermem trace, a PyTorch memory snapshot pickle \
                     (torch.cuda.memory._snapshot()), a PyTorch profiler / Chrome trace JSON with \
                     [memory] events, or a DSA CSV `id,lower,upper,size`, each optionally gzipped",
                    FirstBytes(first_bytes)
                )
            }
            Problem::Gzip {
                error,
                compressed_offset,
            } => write!(
                f,
                "corrupt or truncated gzip data (the decoder stopped after {compressed_offset} \
                 compressed bytes): {error}"
            ),
            Problem::DecompressedTooLarge { limit } => write!(f, "{}", TooLarge(*limit)),
            Problem::Malformed(msg) => write!(f, "{msg}"),
            Problem::Trace(err) => write!(f, "{err}"),
            Problem::Json(msg) | Problem::Pickle(msg) | Problem::Structure(msg) => {
                write!(f, "{}", Bounded(msg))
            }
            Problem::PickleGlobal { opcode, name } => write!(
                f,
                "the pickle refers to a Python global/class ({opcode} {}); only plain \
                 dict/list/str/int/float data is accepted (a global is how a pickle runs code)",
                Excerpt(name)
            ),
            Problem::NoAddresses { memory_events } => write!(
                f,
                "its {memory_events} GPU [memory] events have no `Addr`, so frees cannot be \
                 matched with allocations and no lifetime can be derived (record with a PyTorch \
                 version whose profiler writes Addr, or take a memory snapshot instead)"
            ),
            Problem::NoEvents(msg) | Problem::Csv(msg) => write!(f, "{}", Bounded(msg)),
            Problem::NoSuchDevice {
                requested,
                available,
            } => {
                write!(f, "device {requested} has no events; devices with events:")?;
                if available.is_empty() {
                    write!(f, " none")?;
                }
                for d in available {
                    write!(f, " {d}")?;
                }
                Ok(())
            }
            Problem::DuplicateId { id } => write!(f, "allocation id {id} appears twice"),
            Problem::Instance(err) => write!(f, "{err}"),
            Problem::WrongKind { found, wanted } => {
                write!(f, "this is a {found} file, not {wanted}")
            }
        }
    }
}

/// A file that cannot be imported.
///
/// Displays as `PATH: line 7 (byte 131): ...`, `PATH (gzip): at byte 1234 of the decompressed
/// data: ...`, `PATH: at traceEvents[88] (line 3, column 17): ...`.
///
/// Boxed: errors are rare and the `Ok` side of every import result stays small.
#[derive(Debug)]
pub struct ImportError(Box<Inner>);

#[derive(Debug)]
struct Inner {
    path: PathBuf,
    gzip: bool,
    format: Option<Format>,
    location: Location,
    problem: Problem,
}

impl ImportError {
    pub(crate) fn new(path: &Path, location: Location, problem: Problem) -> ImportError {
        ImportError(Box::new(Inner {
            path: path.to_path_buf(),
            gzip: false,
            format: None,
            location,
            problem,
        }))
    }

    pub(crate) fn in_format(mut self, format: Format, gzip: bool) -> ImportError {
        self.0.format.get_or_insert(format);
        self.0.gzip = gzip;
        self
    }

    pub(crate) fn gzipped(mut self, gzip: bool) -> ImportError {
        self.0.gzip = gzip;
        self
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.0.path
    }

    /// The format the content was recognised as, if it got that far.
    pub fn format(&self) -> Option<Format> {
        self.0.format
    }

    /// Whether the file is gzip-compressed (locations then refer to the decompressed data).
    pub fn gzip(&self) -> bool {
        self.0.gzip
    }

    pub fn location(&self) -> &Location {
        &self.0.location
    }

    pub fn problem(&self) -> &Problem {
        &self.0.problem
    }
}

impl fmt::Display for ImportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Problem::Trace(err) = &self.0.problem {
            // A trace error already names the file and the byte offset.
            return if self.0.gzip {
                write!(f, "{err} (offset in the decompressed data)")
            } else {
                write!(f, "{err}")
            };
        }
        write!(f, "{}", self.0.path.display())?;
        if let Some(format) = self.0.format {
            write!(f, " ({format}")?;
            if self.0.gzip {
                write!(f, ", gzip")?;
            }
            write!(f, ")")?;
        } else if self.0.gzip {
            write!(f, " (gzip)")?;
        }
        write!(f, ": ")?;
        if self.0.location != Location::File {
            write!(f, "{}", self.0.location)?;
            if self.0.gzip && matches!(self.0.location, Location::Byte(_) | Location::Line { .. }) {
                write!(f, " of the decompressed data")?;
            }
            write!(f, ": ")?;
        }
        write!(f, "{}", self.0.problem)
    }
}

impl std::error::Error for ImportError {}
