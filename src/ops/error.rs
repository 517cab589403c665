//! [`OpsError`]: why a file could not be turned into an [`OpTrace`](super::OpTrace), with the
//! file and the place in it; [`InvariantError`]: which convention of [`super`] an `OpTrace`
//! breaks.
//!
//! Places are 1-based lines for the JSON-lines formats (DTR logs, generated dispatch traces) and
//! 0-based event indices for itermem traces. For a gzip file the line is one of the
//! *decompressed* text (the message says so). Bad input is always an error, never a panic.

use crate::content::{Bounded, Excerpt, FirstBytes, TooLarge};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use super::TensorId;
use crate::trace::TraceError;

/// Where in the file the problem is.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Location {
    /// The file as a whole (cannot be opened, unknown format, nothing usable in it).
    File,
    /// A 1-based line of a JSON-lines file or a text log.
    Line(u64),
    /// A 0-based index among the access events of an itermem trace (kernel names excluded).
    Event(u64),
}

/// What is wrong, without the where.
#[derive(Debug)]
#[non_exhaustive]
pub enum Problem {
    /// The file cannot be opened or read.
    Io(io::Error),
    /// The gzip stream is corrupt or truncated.
    Gzip(io::Error),
    /// The gzip stream decompresses to more than `limit` bytes
    /// ([`LoadOptions::max_decompressed`](super::LoadOptions::max_decompressed)).
    DecompressedTooLarge { limit: u64 },
    /// Gzip content that stops being the format it began as at `offset` of the decompressed
    /// data (see `crate::content`).
    Malformed { offset: u64, message: String },
    /// The file has no content (after decompression, for a gzip file).
    Empty,
    /// The content is none of the formats [`super::load`] reads.
    UnknownFormat { first_bytes: Vec<u8> },
    /// A line that is not a JSON object.
    Json(String),
    /// A line of a text log (SINGA's) that is none of its records: the message says why.
    BadLine(String),
    /// A required field is missing.
    MissingField {
        record: &'static str,
        field: &'static str,
    },
    /// A field holds a value of the wrong type or out of range.
    BadValue {
        field: &'static str,
        value: String,
        expected: &'static str,
    },
    /// A record kind (DTR `INSTRUCTION`, generated `ev`) this build does not know.
    UnknownRecord { kind: String },
    /// A record that may only follow another one is out of place (e.g. `MEMORY` without a
    /// preceding `CONSTANT` or `CALL`), or the one that must follow is missing.
    OutOfPlace { found: String, expected: String },
    /// A tensor name or id that was never defined.
    UnknownTensor { name: String },
    /// A tensor name or id defined twice.
    DuplicateTensor { name: String },
    /// A tensor used after the last reference to its storage was released (or after its free).
    UseAfterRelease { name: String },
    /// Nothing to plan on: the message says what is missing.
    NoOps(String),
    /// The iteration detector refused its configuration.
    Detector(String),
    /// An itermem trace that cannot be read (the trace error has its own byte offset).
    Trace(Box<TraceError>),
    /// The imported trace breaks a convention of [`super`] (a bug in the input's logic).
    Invariant(Box<InvariantError>),
}

/// A file that could not be imported: the file, the place and the problem.
#[derive(Debug)]
pub struct OpsError {
    pub path: PathBuf,
    pub location: Location,
    pub problem: Problem,
    /// The file was gzip-compressed: lines are those of the decompressed text.
    pub gzip: bool,
}

impl OpsError {
    pub(crate) fn new(path: &Path, location: Location, problem: Problem) -> OpsError {
        OpsError {
            path: path.to_path_buf(),
            location,
            problem,
            gzip: false,
        }
    }

    pub(crate) fn line(path: &Path, line: u64, problem: Problem) -> OpsError {
        OpsError::new(path, Location::Line(line), problem)
    }

    pub(crate) fn file(path: &Path, problem: Problem) -> OpsError {
        OpsError::new(path, Location::File, problem)
    }
}

impl fmt::Display for OpsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Problem::Trace(err) = &self.problem {
            // A trace error already names the file and the byte offset.
            return write!(f, "{err}");
        }
        write!(f, "{}", self.path.display())?;
        match self.location {
            Location::File => {}
            Location::Line(line) => {
                write!(f, ", line {line}")?;
                if self.gzip {
                    write!(f, " (of the decompressed text)")?;
                }
            }
            Location::Event(index) => write!(f, ", event {index}")?,
        }
        write!(f, ": {}", self.problem)
    }
}

// No `source()`: the inner error is already part of the message, and `{:#}` would print it
// twice ("corrupt deflate stream: corrupt deflate stream").
impl std::error::Error for OpsError {}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::Io(err) => write!(f, "{err}"),
            Problem::Gzip(err) => write!(f, "corrupt or truncated gzip data: {err}"),
            Problem::DecompressedTooLarge { limit } => write!(f, "{}", TooLarge(*limit)),
            Problem::Malformed { offset, message } => {
                write!(f, "at byte {offset} of the decompressed data: {message}")
            }
            Problem::Empty => write!(f, "the file is empty"),
            Problem::UnknownFormat { first_bytes } => {
                write!(
                    f,
                    "unrecognised content (starts with{}): expected a DTR op log (JSON lines with \"INSTRUCTION\"), a generated \
                     dispatch trace (JSON lines with \"ev\") or an itermem trace, each \
                     optionally gzipped",
                    FirstBytes(first_bytes)
                )
            }
            Problem::Json(msg) => write!(f, "not a JSON object: {}", Bounded(msg)),
            Problem::MissingField { record, field } => {
                write!(f, "{record} record without the field `{field}`")
            }
            Problem::BadValue {
                field,
                value,
                expected,
            } => write!(
                f,
                "field `{field}` is {}; expected {expected}",
                Excerpt(value)
            ),
            Problem::UnknownRecord { kind } => {
                write!(f, "unknown record kind \"{}\"", Excerpt(kind))
            }
            Problem::OutOfPlace { found, expected } => write!(
                f,
                "found {} where {} was expected",
                Excerpt(found),
                Excerpt(expected)
            ),
            Problem::UnknownTensor { name } => {
                write!(f, "tensor {} was never defined", Excerpt(name))
            }
            Problem::DuplicateTensor { name } => {
                write!(f, "tensor {} is defined twice", Excerpt(name))
            }
            Problem::UseAfterRelease { name } => write!(
                f,
                "tensor {} is used after the last reference to its storage was released",
                Excerpt(name)
            ),
            Problem::NoOps(msg) => write!(f, "{}", Bounded(msg)),
            Problem::BadLine(msg) => write!(f, "{}", Bounded(msg)),
            Problem::Detector(msg) => write!(f, "iteration detection failed: {}", Bounded(msg)),
            Problem::Trace(err) => write!(f, "{err}"),
            Problem::Invariant(err) => write!(f, "the imported trace is inconsistent: {err}"),
        }
    }
}

/// A convention of [`super::OpTrace`] that a trace breaks ([`super::OpTrace::validate`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvariantError {
    /// The tensor concerned, if one is.
    pub tensor: Option<TensorId>,
    /// The op concerned, if one is.
    pub op: Option<usize>,
    /// The rule broken, in words.
    pub rule: String,
}

impl fmt::Display for InvariantError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(tensor) = self.tensor {
            write!(f, "tensor {tensor}: ")?;
        }
        if let Some(op) = self.op {
            write!(f, "op {op}: ")?;
        }
        write!(f, "{}", self.rule)
    }
}

impl std::error::Error for InvariantError {}
