//! [`TraceFile`]: reads a trace (header, then events one by one) without ever panicking.
//!
//! The file is memory-mapped by [`TraceFile::open`]: traces run to gigabytes and the CLI walks
//! them front to back once or twice, which the page cache serves better than copies. Mapping is
//! sound only while nobody changes the file (see the SAFETY comment); [`TraceFile::read`] loads a
//! copy instead, for a trace that may still be growing.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use memmap2::Mmap;

use super::error::{Part, Problem, TraceError};
use super::format::{
    self, Cursor, Decoded, FieldError, MAGIC, MIN_HEADER_LEN, OLDEST_VERSION, VERSION, offset,
};
use super::{Clock, EndRecord, TraceHeader};
use crate::event::Event;

enum Data {
    Mapped(Mmap),
    Owned(Vec<u8>),
}

impl Data {
    fn bytes(&self) -> &[u8] {
        match self {
            Data::Mapped(map) => map,
            Data::Owned(bytes) => bytes,
        }
    }
}

/// A trace file whose header has been checked; [`TraceFile::events`] decodes the records.
pub struct TraceFile {
    path: PathBuf,
    data: Data,
    version: u16,
    header: TraceHeader,
    /// Offset of the first record (the header length).
    records_start: usize,
}

impl TraceFile {
    /// Opens and maps a **finished** trace (one whose writer has exited).
    pub fn open(path: impl AsRef<Path>) -> Result<TraceFile, TraceError> {
        let path = path.as_ref();
        let io_error = |err| TraceError::new(path, Part::File, 0, Problem::Io(err));
        let file = File::open(path).map_err(io_error)?;
        let len = file.metadata().map_err(io_error)?.len();
        if len == 0 {
            // Mapping 0 bytes fails on some systems; the answer is known anyway.
            return Err(TraceError::new(path, Part::File, 0, Problem::Empty));
        }
        // SAFETY: `Mmap::map` is unsafe because another process may change or truncate the file
        // while it is mapped (undefined behaviour for the slices we hand out, SIGBUS on
        // truncation). This function's precondition, stated in its doc, is that the trace is
        // finished: itermem writers only append, and only while the traced program runs, and
        // the CLI reads traces afterwards. A trace that may still grow goes through `read`.
        let map = unsafe { Mmap::map(&file) }.map_err(io_error)?;
        TraceFile::parse(path, Data::Mapped(map))
    }

    /// Reads the whole file into memory: for a trace whose writer may still be running (the
    /// records up to its last flush are read; a half-written last record is an error at its
    /// offset, like any truncation).
    pub fn read(path: impl AsRef<Path>) -> Result<TraceFile, TraceError> {
        let path = path.as_ref();
        let mut bytes = Vec::new();
        File::open(path)
            .and_then(|mut f| f.read_to_end(&mut bytes))
            .map_err(|err| TraceError::new(path, Part::File, 0, Problem::Io(err)))?;
        TraceFile::parse(path, Data::Owned(bytes))
    }

    /// A trace held in memory; `name` is used in error messages.
    pub fn from_bytes(name: impl AsRef<Path>, bytes: Vec<u8>) -> Result<TraceFile, TraceError> {
        TraceFile::parse(name.as_ref(), Data::Owned(bytes))
    }

    fn parse(path: &Path, data: Data) -> Result<TraceFile, TraceError> {
        let (version, header, records_start) = parse_header(path, data.bytes())?;
        Ok(TraceFile {
            path: path.to_path_buf(),
            data,
            version,
            header,
            records_start,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The format version of the file (from [`format::OLDEST_VERSION`] to [`format::VERSION`]).
    pub fn version(&self) -> u16 {
        self.version
    }

    pub fn header(&self) -> &TraceHeader {
        &self.header
    }

    /// Size of the file in bytes.
    pub fn len_bytes(&self) -> u64 {
        self.data.bytes().len() as u64
    }

    /// The events in file order. The iterator stops after the first error.
    pub fn events(&self) -> Events<'_> {
        Events {
            path: &self.path,
            data: self.data.bytes(),
            version: self.version,
            pos: self.records_start,
            prev_time: 0,
            end: None,
            done: false,
        }
    }
}

fn parse_header(path: &Path, data: &[u8]) -> Result<(u16, TraceHeader, usize), TraceError> {
    let file_len = data.len() as u64;
    let err = |at: u64, problem| TraceError::new(path, Part::Header, at, problem);
    let field_err = |e: FieldError| TraceError::new(path, Part::Header, e.at, e.problem);
    let truncated = |needed: u64| err(0, Problem::TruncatedHeader { needed, file_len });

    if data.is_empty() {
        return Err(TraceError::new(path, Part::File, 0, Problem::Empty));
    }
    let prefix = &data[..data.len().min(MAGIC.len())];
    if prefix != &MAGIC[..prefix.len()] {
        return Err(err(
            offset::MAGIC,
            Problem::BadMagic {
                found: prefix.to_vec(),
            },
        ));
    }
    let min_len = u64::from(MIN_HEADER_LEN);
    if file_len < offset::VERSION + 2 {
        return Err(truncated(min_len));
    }
    // The version comes before anything else so that a future layout is reported as such.
    let version = u16::from_le_bytes([data[8], data[9]]);
    if !(OLDEST_VERSION..=VERSION).contains(&version) {
        return Err(err(
            offset::VERSION,
            Problem::UnsupportedVersion {
                found: version,
                supported: VERSION,
            },
        ));
    }
    if file_len < offset::START_UNIX_NS {
        return Err(truncated(min_len));
    }
    let mut cur = Cursor::new(data, 0, "header");
    cur.bytes(offset::WORD_SIZE, "magic and version")
        .map_err(field_err)?;
    let word_size = cur.u8("word size").map_err(field_err)?;
    if word_size != 4 && word_size != 8 {
        return Err(err(
            offset::WORD_SIZE,
            Problem::BadWordSize { found: word_size },
        ));
    }
    let raw_clock = cur.u8("clock").map_err(field_err)?;
    let clock = Clock::from_u8(raw_clock).ok_or_else(|| {
        err(
            offset::CLOCK,
            Problem::UnsupportedClock { found: raw_clock },
        )
    })?;
    let header_len = cur.u32("header length").map_err(field_err)?;
    if header_len < MIN_HEADER_LEN {
        return Err(err(
            offset::HEADER_LEN,
            Problem::HeaderTooShort {
                length: u64::from(header_len),
                minimum: min_len,
            },
        ));
    }
    if u64::from(header_len) > file_len {
        return Err(truncated(u64::from(header_len)));
    }
    // From here on the fields are read within the declared header only.
    let header_bytes = &data[..header_len as usize];
    let mut cur = Cursor::new(header_bytes, 0, "header");
    cur.bytes(offset::START_UNIX_NS, "fixed fields")
        .map_err(field_err)?;
    let start_unix_ns = cur.u64("start time").map_err(field_err)?;
    let device_total_memory = cur.u64("device total memory").map_err(field_err)?;
    let pid = cur.u32("pid").map_err(field_err)?;
    let name_len = cur.u16("device name length").map_err(field_err)?;
    let device_name = cur
        .str(u64::from(name_len), "device name")
        .map_err(field_err)?
        .to_string();
    let argc = cur.u32("argument count").map_err(field_err)?;
    // No capacity is reserved from `argc`: each argument takes at least 4 bytes, so a corrupt
    // count fails at the first argument past the header instead of reserving a huge vector.
    let mut command_line = Vec::new();
    for _ in 0..argc {
        let len = cur.u32("argument length").map_err(field_err)?;
        let arg = cur.str(u64::from(len), "argument").map_err(field_err)?;
        command_line.push(arg.to_string());
    }
    // Bytes between here and `header_len` are fields of later versions: skipped.
    let header = TraceHeader {
        word_size,
        clock,
        start_unix_ns,
        pid,
        device_name,
        device_total_memory,
        command_line,
    };
    Ok((version, header, header_len as usize))
}

/// Iterator over the events of a [`TraceFile`], in file order. Yields `Err` once at the first
/// corrupt record and then ends. Unknown record kinds are skipped.
pub struct Events<'a> {
    path: &'a Path,
    data: &'a [u8],
    /// The file's format version (how record bodies are laid out).
    version: u16,
    /// Offset of the next record.
    pos: usize,
    prev_time: u64,
    end: Option<EndRecord>,
    done: bool,
}

impl Events<'_> {
    /// The writer's end record, once the iterator has passed it (`None` before, or if the
    /// writer never finished cleanly).
    pub fn end_record(&self) -> Option<EndRecord> {
        self.end
    }

    /// Byte offset of the next record to be read.
    pub fn offset(&self) -> u64 {
        self.pos as u64
    }

    fn next_record(&mut self) -> Result<Option<Event>, TraceError> {
        loop {
            if self.pos >= self.data.len() {
                return Ok(None);
            }
            let start = self.pos;
            let file_len = self.data.len() as u64;
            let err = |problem| TraceError::new(self.path, Part::Record, start as u64, problem);
            let record_kind = self.data[start];
            let mut frame = Cursor::new(&self.data[start + 1..], start as u64 + 1, "file");
            let length = frame.varint("record length").map_err(|e| match e.problem {
                Problem::FieldPastEnd { .. } => err(Problem::TruncatedRecord { file_len }),
                other => err(other),
            })?;
            let body_start = frame.offset() as usize;
            let body_len = match usize::try_from(length) {
                Ok(len) if len <= self.data.len() - body_start => len,
                _ => return Err(err(Problem::LengthPastEnd { length, file_len })),
            };
            if record_kind == 0 {
                return Err(err(Problem::ZeroKind));
            }
            let body_bytes = &self.data[body_start..body_start + body_len];
            let mut body = Cursor::new(body_bytes, body_start as u64, "record body");
            let decoded =
                format::decode_body(record_kind, &mut body, &mut self.prev_time, self.version)
                    .map_err(|e| err(e.problem))?;
            self.pos = body_start + body_len;
            match decoded {
                Decoded::Event(event) => return Ok(Some(event)),
                Decoded::End(end) => self.end = Some(end),
                Decoded::Unknown => {}
            }
        }
    }
}

impl Iterator for Events<'_> {
    type Item = Result<Event, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.next_record() {
            Ok(Some(event)) => Some(Ok(event)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

impl std::iter::FusedIterator for Events<'_> {}
