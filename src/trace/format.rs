//! The byte layout of `docs/trace-format.md`, in code: constants, the varint and zigzag
//! encodings, the header and record encoders, and the field decoder the reader builds on.
//!
//! Encoding and decoding live side by side so that a change to one is a change to the other; the
//! round-trip tests in `trace::tests` hold them together.
//!
//! Invariant of the decoder: no length read from the file is trusted before it is compared with
//! the bytes actually there, so a corrupt file can cost at most a bounded amount of work and
//! never an out-of-bounds index, an overflow or a huge allocation.

use std::io;

use super::error::Problem;
use super::{EndRecord, TraceHeader};
use crate::event::{Event, EventKind, Touched};

/// The first 8 bytes of every trace.
pub const MAGIC: [u8; 8] = *b"ITERMEM\0";

/// Whether the file at `path` starts with [`MAGIC`] (an error for a file that cannot be read
/// or is shorter than it): how every reader tells an itermem trace from other recordings.
pub fn starts_with_magic(path: &std::path::Path) -> std::io::Result<bool> {
    let mut magic = [0u8; 8];
    std::io::Read::read_exact(&mut std::fs::File::open(path)?, &mut magic)?;
    Ok(magic == MAGIC)
}
/// The format version this build writes. Version 2 added the device of each event; version-1
/// files are still read (every event on device 0).
pub const VERSION: u16 = 2;
/// The oldest version this build reads.
pub const OLDEST_VERSION: u16 = 1;
/// Length of a version-1 header with an empty device name and no command line: the fixed fields
/// (38 bytes) plus the argument count (4 bytes).
pub const MIN_HEADER_LEN: u32 = 42;

/// Header field offsets (version 1).
pub mod offset {
    pub const MAGIC: u64 = 0;
    pub const VERSION: u64 = 8;
    pub const WORD_SIZE: u64 = 10;
    pub const CLOCK: u64 = 11;
    pub const HEADER_LEN: u64 = 12;
    pub const START_UNIX_NS: u64 = 16;
    pub const DEVICE_TOTAL_MEMORY: u64 = 24;
    pub const PID: u64 = 32;
    pub const DEVICE_NAME_LEN: u64 = 36;
}

/// Record kinds (the first byte of every record). 0 is never written and is an error.
pub mod kind {
    pub const MALLOC: u8 = 1;
    pub const FREE: u8 = 2;
    pub const MEMCPY: u8 = 3;
    pub const MEMSET: u8 = 4;
    pub const LAUNCH: u8 = 5;
    pub const KERNEL_NAME: u8 = 6;
    /// A graph launch marker (readers before it skip it as an unknown kind).
    pub const GRAPH_LAUNCH: u8 = 7;
    /// Written once by a writer that finishes cleanly; not an event.
    pub const END: u8 = 16;
}

/// Flag bits of memcpy records.
pub mod memcpy_flags {
    pub const HAS_DST: u8 = 1;
    pub const HAS_SRC: u8 = 2;
    pub const ASYNC: u8 = 4;
    pub const ALL: u8 = HAS_DST | HAS_SRC | ASYNC;
}

/// Flag bits of memset records.
pub mod memset_flags {
    pub const HAS_DST: u8 = 1;
    pub const ASYNC: u8 = 2;
    pub const ALL: u8 = HAS_DST | ASYNC;
}

/// Flag bits of launch records.
pub mod launch_flags {
    pub const LAYOUT_KNOWN: u8 = 1;
    pub const ALL: u8 = LAYOUT_KNOWN;
}

/// Appends `value` as unsigned LEB128 (7 bits per byte, low bits first, high bit = more).
pub fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Zigzag: 0, -1, 1, -2, … ↦ 0, 1, 2, 3, … so small negative deltas stay short.
pub fn zigzag(value: i64) -> u64 {
    ((value << 1) ^ (value >> 63)) as u64
}

pub fn unzigzag(value: u64) -> i64 {
    ((value >> 1) as i64) ^ -((value & 1) as i64)
}

/// The time field of a record: the difference to the previous record's time, wrapping, so that
/// every pair of `u64` times round-trips (events reach the writer thread nearly, not exactly,
/// in time order).
fn put_time(out: &mut Vec<u8>, prev_time: &mut u64, time_ns: u64) {
    put_varint(out, zigzag(time_ns.wrapping_sub(*prev_time) as i64));
    *prev_time = time_ns;
}

fn put_opt_id(out: &mut Vec<u8>, id: Option<u64>) {
    if let Some(id) = id {
        put_varint(out, id);
    }
}

/// Encodes the header. Fails (InvalidInput) only for a device name over 65,535 bytes or a
/// header over 4 GiB, which no real process has.
pub fn encode_header(header: &TraceHeader) -> io::Result<Vec<u8>> {
    let invalid = |what: &str| io::Error::new(io::ErrorKind::InvalidInput, what.to_string());
    let mut out = Vec::with_capacity(128);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.push(header.word_size);
    out.push(header.clock as u8);
    out.extend_from_slice(&0u32.to_le_bytes()); // header length, patched below
    out.extend_from_slice(&header.start_unix_ns.to_le_bytes());
    out.extend_from_slice(&header.device_total_memory.to_le_bytes());
    out.extend_from_slice(&header.pid.to_le_bytes());
    let name_len = u16::try_from(header.device_name.len())
        .map_err(|_| invalid("trace header: device name longer than 65535 bytes"))?;
    out.extend_from_slice(&name_len.to_le_bytes());
    out.extend_from_slice(header.device_name.as_bytes());
    let argc = u32::try_from(header.command_line.len())
        .map_err(|_| invalid("trace header: too many command-line arguments"))?;
    out.extend_from_slice(&argc.to_le_bytes());
    for arg in &header.command_line {
        let len = u32::try_from(arg.len())
            .map_err(|_| invalid("trace header: command-line argument over 4 GiB"))?;
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(arg.as_bytes());
    }
    let total = u32::try_from(out.len()).map_err(|_| invalid("trace header over 4 GiB"))?;
    out[offset::HEADER_LEN as usize..offset::HEADER_LEN as usize + 4]
        .copy_from_slice(&total.to_le_bytes());
    Ok(out)
}

/// Appends one record: kind, body length, body. `body` is scratch space reused across calls.
fn put_record(out: &mut Vec<u8>, kind: u8, body: &[u8]) {
    out.push(kind);
    put_varint(out, body.len() as u64);
    out.extend_from_slice(body);
}

/// Appends the record of `event` to `out`. `prev_time` is the time of the previous record (0
/// before the first) and is updated; `body` is scratch space.
pub fn encode_event(event: &Event, prev_time: &mut u64, body: &mut Vec<u8>, out: &mut Vec<u8>) {
    body.clear();
    put_time(body, prev_time, event.time_ns);
    let kind = match &event.kind {
        EventKind::Malloc {
            id,
            addr,
            size,
            kind,
            stream,
        } => {
            put_varint(body, *id);
            put_varint(body, *addr);
            put_varint(body, *size);
            body.push(*kind as u8);
            put_varint(body, *stream);
            kind::MALLOC
        }
        EventKind::Free { id, stream } => {
            put_varint(body, *id);
            put_varint(body, *stream);
            kind::FREE
        }
        EventKind::Memcpy {
            dst,
            src,
            bytes,
            kind,
            stream,
            asynchronous,
        } => {
            let mut flags = 0;
            if dst.is_some() {
                flags |= memcpy_flags::HAS_DST;
            }
            if src.is_some() {
                flags |= memcpy_flags::HAS_SRC;
            }
            if *asynchronous {
                flags |= memcpy_flags::ASYNC;
            }
            body.push(flags);
            put_opt_id(body, *dst);
            put_opt_id(body, *src);
            put_varint(body, *bytes);
            body.push(*kind as u8);
            put_varint(body, *stream);
            kind::MEMCPY
        }
        EventKind::Memset {
            dst,
            bytes,
            stream,
            asynchronous,
        } => {
            let mut flags = 0;
            if dst.is_some() {
                flags |= memset_flags::HAS_DST;
            }
            if *asynchronous {
                flags |= memset_flags::ASYNC;
            }
            body.push(flags);
            put_opt_id(body, *dst);
            put_varint(body, *bytes);
            put_varint(body, *stream);
            kind::MEMSET
        }
        EventKind::Launch {
            kernel,
            stream,
            layout_known,
            touched,
        } => {
            put_varint(body, u64::from(*kernel));
            put_varint(body, *stream);
            body.push(if *layout_known {
                launch_flags::LAYOUT_KNOWN
            } else {
                0
            });
            put_varint(body, touched.len() as u64);
            for id in touched {
                put_varint(body, *id);
            }
            kind::LAUNCH
        }
        EventKind::KernelName { kernel, name } => {
            put_varint(body, u64::from(*kernel));
            put_varint(body, name.len() as u64);
            body.extend_from_slice(name.as_bytes());
            kind::KERNEL_NAME
        }
        EventKind::GraphLaunch {
            exec,
            stream,
            nodes,
        } => {
            put_varint(body, *exec);
            put_varint(body, *stream);
            put_varint(body, *nodes);
            kind::GRAPH_LAUNCH
        }
    };
    if kind != kind::KERNEL_NAME {
        put_varint(body, u64::from(event.device));
    }
    put_record(out, kind, body);
}

/// Appends the end record (time delta 0: it carries no time of its own).
pub fn encode_end(end: &EndRecord, body: &mut Vec<u8>, out: &mut Vec<u8>) {
    body.clear();
    put_varint(body, 0);
    put_varint(body, end.events_written);
    put_varint(body, end.events_lost);
    put_record(out, kind::END, body);
}

/// A failed field read: where the field starts (absolute file offset) and what is wrong.
#[derive(Debug)]
pub(crate) struct FieldError {
    pub at: u64,
    pub problem: Problem,
}

/// Reads fields from `data`, a slice of the file starting at absolute offset `base`, never past
/// its end. `container` names the slice in messages ("header", "record body").
pub(crate) struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
    base: u64,
    container: &'static str,
}

impl<'a> Cursor<'a> {
    pub fn new(data: &'a [u8], base: u64, container: &'static str) -> Cursor<'a> {
        Cursor {
            data,
            pos: 0,
            base,
            container,
        }
    }

    /// Absolute file offset of the next byte.
    pub fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    fn past_end(&self, field: &'static str) -> FieldError {
        FieldError {
            at: self.offset(),
            problem: Problem::FieldPastEnd {
                field,
                container: self.container,
                container_len: self.data.len() as u64,
            },
        }
    }

    pub fn invalid(&self, at: u64, field: &'static str, value: u64) -> FieldError {
        FieldError {
            at,
            problem: Problem::InvalidValue { field, value },
        }
    }

    pub fn bytes(&mut self, len: u64, field: &'static str) -> Result<&'a [u8], FieldError> {
        let remaining = self.data.len() - self.pos;
        match usize::try_from(len) {
            Ok(len) if len <= remaining => {
                let out = &self.data[self.pos..self.pos + len];
                self.pos += len;
                Ok(out)
            }
            _ => Err(self.past_end(field)),
        }
    }

    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], FieldError> {
        let bytes = self.bytes(N as u64, field)?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    pub fn u8(&mut self, field: &'static str) -> Result<u8, FieldError> {
        Ok(self.array::<1>(field)?[0])
    }

    pub fn u16(&mut self, field: &'static str) -> Result<u16, FieldError> {
        Ok(u16::from_le_bytes(self.array(field)?))
    }

    pub fn u32(&mut self, field: &'static str) -> Result<u32, FieldError> {
        Ok(u32::from_le_bytes(self.array(field)?))
    }

    pub fn u64(&mut self, field: &'static str) -> Result<u64, FieldError> {
        Ok(u64::from_le_bytes(self.array(field)?))
    }

    /// Unsigned LEB128, at most 10 bytes and 64 bits.
    pub fn varint(&mut self, field: &'static str) -> Result<u64, FieldError> {
        let at = self.offset();
        let start = self.pos;
        let mut value = 0u64;
        for i in 0..10 {
            let Some(&byte) = self.data.get(start + i) else {
                self.pos = start;
                return Err(self.past_end(field));
            };
            let low = u64::from(byte & 0x7f);
            if i == 9 && byte > 1 {
                return Err(FieldError {
                    at,
                    problem: Problem::VarintTooLong { field },
                });
            }
            value |= low << (7 * i);
            if byte & 0x80 == 0 {
                self.pos = start + i + 1;
                return Ok(value);
            }
        }
        Err(FieldError {
            at,
            problem: Problem::VarintTooLong { field },
        })
    }

    /// A varint that must fit in `u32`.
    pub fn varint_u32(&mut self, field: &'static str) -> Result<u32, FieldError> {
        let at = self.offset();
        let value = self.varint(field)?;
        u32::try_from(value).map_err(|_| self.invalid(at, field, value))
    }

    /// `len` bytes of UTF-8.
    pub fn str(&mut self, len: u64, field: &'static str) -> Result<&'a str, FieldError> {
        let at = self.offset();
        let bytes = self.bytes(len, field)?;
        std::str::from_utf8(bytes).map_err(|_| FieldError {
            at,
            problem: Problem::BadUtf8 { field },
        })
    }

    /// Flags byte whose bits outside `allowed` must be zero.
    pub fn flags(&mut self, allowed: u8, field: &'static str) -> Result<u8, FieldError> {
        let at = self.offset();
        let flags = self.u8(field)?;
        if flags & !allowed != 0 {
            return Err(self.invalid(at, field, u64::from(flags)));
        }
        Ok(flags)
    }
}

/// What one record body decodes to.
#[derive(Debug)]
pub(crate) enum Decoded {
    Event(Event),
    End(EndRecord),
    /// A kind this build does not know: skipped (its time delta still applies).
    Unknown,
}

/// Decodes the body of a record of kind `record_kind` (not 0) of a file of format `version`.
/// `prev_time` is the previous record's time and is updated. Bytes after the known fields are
/// ignored (later revisions may append fields).
pub(crate) fn decode_body(
    record_kind: u8,
    body: &mut Cursor<'_>,
    prev_time: &mut u64,
    version: u16,
) -> Result<Decoded, FieldError> {
    let delta = unzigzag(body.varint("time delta")?);
    let time_ns = prev_time.wrapping_add(delta as u64);
    *prev_time = time_ns;
    let event_kind = match record_kind {
        kind::MALLOC => {
            let id = body.varint("allocation id")?;
            let addr = body.varint("address")?;
            let size = body.varint("size")?;
            let at = body.offset();
            let raw = body.u8("memory kind")?;
            let mem_kind = crate::event::MemKind::from_u8(raw)
                .ok_or_else(|| body.invalid(at, "memory kind", u64::from(raw)))?;
            let stream = body.varint("stream")?;
            EventKind::Malloc {
                id,
                addr,
                size,
                kind: mem_kind,
                stream,
            }
        }
        kind::FREE => {
            let id = body.varint("allocation id")?;
            let stream = body.varint("stream")?;
            EventKind::Free { id, stream }
        }
        kind::MEMCPY => {
            let flags = body.flags(memcpy_flags::ALL, "memcpy flags")?;
            let dst = if flags & memcpy_flags::HAS_DST != 0 {
                Some(body.varint("destination id")?)
            } else {
                None
            };
            let src = if flags & memcpy_flags::HAS_SRC != 0 {
                Some(body.varint("source id")?)
            } else {
                None
            };
            let bytes = body.varint("bytes")?;
            let at = body.offset();
            let raw = body.u8("copy kind")?;
            let copy_kind = crate::event::CopyKind::from_u8(raw)
                .ok_or_else(|| body.invalid(at, "copy kind", u64::from(raw)))?;
            let stream = body.varint("stream")?;
            EventKind::Memcpy {
                dst,
                src,
                bytes,
                kind: copy_kind,
                stream,
                asynchronous: flags & memcpy_flags::ASYNC != 0,
            }
        }
        kind::MEMSET => {
            let flags = body.flags(memset_flags::ALL, "memset flags")?;
            let dst = if flags & memset_flags::HAS_DST != 0 {
                Some(body.varint("destination id")?)
            } else {
                None
            };
            let bytes = body.varint("bytes")?;
            let stream = body.varint("stream")?;
            EventKind::Memset {
                dst,
                bytes,
                stream,
                asynchronous: flags & memset_flags::ASYNC != 0,
            }
        }
        kind::LAUNCH => {
            let kernel = body.varint_u32("kernel id")?;
            let stream = body.varint("stream")?;
            let flags = body.flags(launch_flags::ALL, "launch flags")?;
            let count = body.varint("touched count")?;
            // No capacity is reserved from `count`: each id takes at least one byte, so a
            // corrupt count fails at the first id past the end of the body instead of reserving
            // a huge vector.
            let mut touched = Touched::new();
            for _ in 0..count {
                touched.push(body.varint("touched allocation id")?);
            }
            EventKind::Launch {
                kernel,
                stream,
                layout_known: flags & launch_flags::LAYOUT_KNOWN != 0,
                touched,
            }
        }
        kind::KERNEL_NAME => {
            let kernel = body.varint_u32("kernel id")?;
            let len = body.varint("name length")?;
            let name = body.str(len, "kernel name")?.to_string();
            EventKind::KernelName { kernel, name }
        }
        kind::GRAPH_LAUNCH => {
            let exec = body.varint("graph exec")?;
            let stream = body.varint("stream")?;
            let nodes = body.varint("graph nodes")?;
            EventKind::GraphLaunch {
                exec,
                stream,
                nodes,
            }
        }
        kind::END => {
            let events_written = body.varint("events written")?;
            let events_lost = body.varint("events lost")?;
            return Ok(Decoded::End(EndRecord {
                events_written,
                events_lost,
            }));
        }
        _ => return Ok(Decoded::Unknown),
    };
    let device = match event_kind {
        EventKind::KernelName { .. } => 0,
        _ if version >= 2 => body.varint_u32("device")?,
        _ => 0,
    };
    Ok(Decoded::Event(Event {
        time_ns,
        device,
        kind: event_kind,
    }))
}

/// A whole trace in memory: the header, the events and the end record, as a writer would have
/// written them (for recordings imported from other formats, so every trace command reads them).
pub fn encode_trace(header: &TraceHeader, events: &[Event]) -> io::Result<Vec<u8>> {
    let mut out = encode_header(header)?;
    let (mut prev_time, mut body) = (0u64, Vec::new());
    for event in events {
        encode_event(event, &mut prev_time, &mut body, &mut out);
    }
    let end = EndRecord {
        events_written: events.len() as u64,
        events_lost: 0,
    };
    encode_end(&end, &mut body, &mut out);
    Ok(out)
}

/// Checks where each record of a trace ends as its bytes arrive, so a gzip-compressed trace that
/// turns into something else after its start is refused at that byte, not after decompressing
/// it all ([`crate::content`]): a record of kind 0 (never written; the reader refuses it too) or
/// a malformed length. The header and the bodies are left to the reader.
#[derive(Default)]
pub(crate) struct Framing {
    /// Offset of the next record, once the header's length is known.
    pos: Option<usize>,
}

impl Framing {
    /// Checks the records complete in `content` (everything decompressed so far) that were not
    /// checked yet: the offset and what is wrong, if anything is.
    pub(crate) fn advance(&mut self, content: &[u8]) -> Result<(), (u64, String)> {
        let at = offset::HEADER_LEN as usize;
        let pos = match self.pos {
            Some(pos) => pos,
            None => {
                let Some(len) = content.get(at..at + 4) else {
                    return Ok(());
                };
                let len = u32::from_le_bytes(len.try_into().expect("4 bytes"));
                *self.pos.insert(len.max(MIN_HEADER_LEN) as usize)
            }
        };
        let mut pos = pos;
        while let Some(&kind) = content.get(pos) {
            if kind == 0 {
                return Err((
                    pos as u64,
                    "a record of kind 0, which is never written".into(),
                ));
            }
            let mut frame = Cursor::new(&content[pos + 1..], pos as u64 + 1, "file");
            let length = match frame.varint("record length") {
                Ok(length) => length,
                Err(err) if matches!(err.problem, Problem::FieldPastEnd { .. }) => break,
                Err(err) => return Err((err.at, err.problem.to_string())),
            };
            let end = usize::try_from(length)
                .ok()
                .and_then(|len| (frame.offset() as usize).checked_add(len));
            match end {
                Some(end) if end <= content.len() => pos = end,
                _ => break,
            }
        }
        self.pos = Some(pos);
        Ok(())
    }
}
