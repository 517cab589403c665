//! [`TraceError`]: everything that can be wrong with a trace file, with the file and the byte
//! offset, so a user can find the damage with `xxd -s OFFSET`.
//!
//! Offsets: for a header field, the offset of that field; for a record, the offset of the
//! record's first byte (its kind), whatever inside it is wrong; the message names the field.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// Which part of the file an error is in (it picks the wording of the message).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Part {
    /// The file as a whole (cannot be opened, is empty).
    File,
    Header,
    Record,
}

/// What is wrong, without the where.
#[derive(Debug)]
#[non_exhaustive]
pub enum Problem {
    /// The file cannot be opened, read or mapped.
    Io(io::Error),
    /// The file has no bytes at all.
    Empty,
    /// The first bytes are not the trace magic.
    BadMagic { found: Vec<u8> },
    /// A format version this build cannot read.
    UnsupportedVersion { found: u16, supported: u16 },
    /// A clock id this build does not know.
    UnsupportedClock { found: u8 },
    /// A pointer size other than 4 or 8 bytes.
    BadWordSize { found: u8 },
    /// The header-length field is smaller than the fields every version has.
    HeaderTooShort { length: u64, minimum: u64 },
    /// The file ends before the end of the header.
    TruncatedHeader { needed: u64, file_len: u64 },
    /// The file ends inside a record's kind byte or length varint.
    TruncatedRecord { file_len: u64 },
    /// A record's length runs past the end of the file.
    LengthPastEnd { length: u64, file_len: u64 },
    /// A field runs past the end of its container (the header or a record body).
    FieldPastEnd {
        field: &'static str,
        container: &'static str,
        container_len: u64,
    },
    /// A varint longer than 10 bytes or larger than 64 bits.
    VarintTooLong { field: &'static str },
    /// An enum, flag or id field holds a value outside its table.
    InvalidValue { field: &'static str, value: u64 },
    /// A string field is not UTF-8.
    BadUtf8 { field: &'static str },
    /// Record kind 0, which no writer produces (typically zeroed space after a crash).
    ZeroKind,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::Io(err) => write!(f, "{err}"),
            Problem::Empty => write!(f, "the file is empty (0 bytes), not an itermem trace"),
            Problem::BadMagic { found } => {
                write!(f, "not an itermem trace: the file starts with")?;
                for b in found {
                    write!(f, " {b:02x}")?;
                }
                write!(f, ", expected \"ITERMEM\\0\"")
            }
            Problem::UnsupportedVersion { found, supported } => write!(
                f,
                "unsupported format version {found} (this build of itermem reads versions {} \
                 to {supported})",
                super::format::OLDEST_VERSION
            ),
            Problem::UnsupportedClock { found } => {
                write!(
                    f,
                    "unknown clock id {found} (this build knows 1 = monotonic)"
                )
            }
            Problem::BadWordSize { found } => {
                write!(f, "word size {found} bytes (expected 4 or 8)")
            }
            Problem::HeaderTooShort { length, minimum } => write!(
                f,
                "header length {length} is less than the {minimum} bytes every header has"
            ),
            Problem::TruncatedHeader { needed, file_len } => write!(
                f,
                "truncated header: the header needs {needed} bytes but the file has {file_len}"
            ),
            Problem::TruncatedRecord { file_len } => write!(
                f,
                "truncated record: the file ends (at {file_len} bytes) inside the record's kind \
                 and length"
            ),
            Problem::LengthPastEnd { length, file_len } => write!(
                f,
                "length {length} runs past the end of the file ({file_len} bytes)"
            ),
            Problem::FieldPastEnd {
                field,
                container,
                container_len,
            } => write!(
                f,
                "field `{field}` runs past the end of the {container} ({container_len} bytes)"
            ),
            Problem::VarintTooLong { field } => {
                write!(f, "field `{field}`: varint longer than 64 bits")
            }
            Problem::InvalidValue { field, value } => {
                write!(f, "invalid value {value} for field `{field}`")
            }
            Problem::BadUtf8 { field } => write!(f, "field `{field}` is not valid UTF-8"),
            Problem::ZeroKind => {
                write!(f, "record kind 0 is invalid (zeroed or overwritten data?)")
            }
        }
    }
}

/// A trace file that cannot be read, with where and what.
///
/// Displays as `PATH: corrupt record at byte 1234: length 99999 runs past the end of the file
/// (5000 bytes)`.
#[derive(Debug)]
pub struct TraceError {
    path: PathBuf,
    offset: u64,
    part: Part,
    problem: Problem,
}

impl TraceError {
    pub(crate) fn new(path: &Path, part: Part, offset: u64, problem: Problem) -> TraceError {
        TraceError {
            path: path.to_path_buf(),
            offset,
            part,
            problem,
        }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Byte offset of the bad header field, or of the first byte of the bad record (0 for errors
    /// about the file as a whole).
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// What is wrong.
    pub fn problem(&self) -> &Problem {
        &self.problem
    }

    /// Whether the error is in a record (as opposed to the header or the file as a whole): the
    /// events before it are valid.
    pub fn is_in_record(&self) -> bool {
        self.part == Part::Record
    }

    /// Whether the file ends inside this record: a trace whose process ended without closing
    /// it (a crash, `_exit`, SIGKILL). The events before it are valid and complete; readers
    /// take them and say where the trace was cut.
    pub fn is_cut(&self) -> bool {
        /// Longer than any record the writer makes: a length beyond it is corruption.
        const LONGEST_RECORD: u64 = 1 << 20;
        match self.problem {
            Problem::TruncatedRecord { .. } => true,
            Problem::LengthPastEnd { length, .. } => length <= LONGEST_RECORD,
            _ => false,
        }
    }
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = self.path.display();
        match self.part {
            Part::File => write!(f, "{path}: {}", self.problem),
            Part::Header => write!(
                f,
                "{path}: corrupt header at byte {}: {}",
                self.offset, self.problem
            ),
            Part::Record => write!(
                f,
                "{path}: corrupt record at byte {}: {}",
                self.offset, self.problem
            ),
        }
    }
}

// No `source()`: the I/O error is already part of the message, and `{:#}` would print it twice.
impl std::error::Error for TraceError {}
