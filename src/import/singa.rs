//! SINGA's memory logs, as the SmartPool and AutoSwap authors recorded them (Apache SINGA with
//! their memory pool; published with their code, github.com/junzhezhang/onlineColoring:
//! `memInfo_alex_20itr_100size.text` and the others, read by `swap.cpp`'s
//! `strVec_2_pieceMsgVec`). One record per line, fields separated by one space:
//!
//! | line | meaning |
//! |---|---|
//! | `Malloc <ptr> <size> <t>` | a block of `size` bytes at `ptr` (hex, `0x…`) |
//! | `Free <ptr> <t>` | the block at `ptr` is freed |
//! | `Read <ptr> [<t>]` | an op reads the block at `ptr` (SINGA's `Block::data()`) |
//! | `Mutable <ptr> [<t>]` | an op writes it (`Block::mutable_data()`) |
//! | `Layer <name> [<t>]` | a layer starts (the access logs of `swap.cpp`) |
//!
//! `t` is a wall-clock time in milliseconds (`1512107272964`; `swap.cpp` reads it as a
//! `double`, so a fraction is accepted). The allocation logs have `Malloc` and `Free` lines
//! only; the access logs add `Read`, `Mutable` and `Layer`. An access's third field is read as a
//! time, as `swap.cpp` does; a block's size is always its `Malloc`'s.
//!
//! Recognised by content: a first non-blank line that is one of these records. Allocations are
//! paired with frees by address ([`super::AddressPairing`]), as for every format that records
//! addresses; `Read`, `Mutable` and `Layer` lines are not allocations (counted as ignored
//! records). How `plan` and `replay` group the accesses into ops: `crate::ops::singa`.

use std::path::Path;

use super::error::{ImportError, Location, Problem};
use super::{AddressPairing, ImportOptions, Recording, Source};

/// One line of a SINGA memory log.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Record<'a> {
    Malloc {
        addr: u64,
        size: u64,
        time_us: u64,
    },
    Free {
        addr: u64,
        time_us: u64,
    },
    Access {
        addr: u64,
        write: bool,
        time_us: Option<u64>,
    },
    Layer {
        name: &'a str,
        time_us: Option<u64>,
    },
}

/// A line that is no record, with its 1-based number and the byte offset where it starts.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct LineError {
    pub line: u64,
    pub byte: u64,
    pub message: String,
}

/// Whether `text` starts (after blank lines) with a SINGA memory-log record.
pub(crate) fn looks_like_singa_log(text: &[u8]) -> bool {
    let Some(first) = text
        .split(|&b| b == b'\n')
        .find(|line| !line.iter().all(u8::is_ascii_whitespace))
    else {
        return false;
    };
    std::str::from_utf8(first).is_ok_and(|line| parse_line(line.trim_end_matches('\r')).is_ok())
}

/// Whether the log has accesses (`Read` or `Mutable` lines): an access log.
pub(crate) fn has_accesses(records: &[(u64, Record<'_>)]) -> bool {
    records
        .iter()
        .any(|(_, record)| matches!(record, Record::Access { .. }))
}

/// Every record of `text` with its 1-based line number; the first line that is none, as an
/// error.
pub(crate) fn parse(text: &[u8]) -> Result<Vec<(u64, Record<'_>)>, LineError> {
    let mut records = Vec::new();
    let mut byte = 0u64;
    for (index, raw) in text.split(|&b| b == b'\n').enumerate() {
        let line = index as u64 + 1;
        let start = byte;
        byte += raw.len() as u64 + 1;
        let error = |message: String| LineError {
            line,
            byte: start,
            message,
        };
        let Ok(content) = std::str::from_utf8(raw) else {
            return Err(error("the line is not UTF-8 text".into()));
        };
        let content = content.trim_end_matches('\r');
        if content.trim().is_empty() {
            continue;
        }
        records.push((line, parse_line(content).map_err(error)?));
    }
    Ok(records)
}

fn parse_line(line: &str) -> Result<Record<'_>, String> {
    let fields: Vec<&str> = line.split_ascii_whitespace().collect();
    let shown = || {
        let mut shown: String = line.chars().take(80).collect();
        if shown.len() < line.len() {
            shown.push('…');
        }
        shown
    };
    let arity = |expected: &str| format!("'{}': a SINGA memory-log line is `{expected}`", shown());
    match fields.as_slice() {
        ["Malloc", ptr, size, time] => Ok(Record::Malloc {
            addr: address(ptr)?,
            size: size
                .parse()
                .ok()
                .filter(|&s| s > 0)
                .ok_or_else(|| format!("Malloc size '{size}' is not a positive byte count"))?,
            time_us: time_us(time)?,
        }),
        ["Malloc", ..] => Err(arity("Malloc <ptr> <size> <ms>")),
        ["Free", ptr, time] => Ok(Record::Free {
            addr: address(ptr)?,
            time_us: time_us(time)?,
        }),
        ["Free", ..] => Err(arity("Free <ptr> <ms>")),
        [kind @ ("Read" | "Mutable"), ptr, rest @ ..] if rest.len() <= 1 => Ok(Record::Access {
            addr: address(ptr)?,
            write: *kind == "Mutable",
            time_us: rest.first().map(|t| time_us(t)).transpose()?,
        }),
        ["Read" | "Mutable", ..] => Err(arity("Read|Mutable <ptr> [<ms>]")),
        ["Layer", name, rest @ ..] if rest.len() <= 1 => Ok(Record::Layer {
            name,
            time_us: rest.first().map(|t| time_us(t)).transpose()?,
        }),
        ["Layer", ..] => Err(arity("Layer <name> [<ms>]")),
        _ => Err(format!(
            "'{}' is no SINGA memory-log record (Malloc, Free, Read, Mutable or Layer)",
            shown()
        )),
    }
}

fn address(text: &str) -> Result<u64, String> {
    text.strip_prefix("0x")
        .and_then(|hex| u64::from_str_radix(hex, 16).ok())
        .ok_or_else(|| format!("'{text}' is not a hexadecimal address (0x…)"))
}

/// Milliseconds (a fraction allowed, as `swap.cpp` reads a `double`) as microseconds.
fn time_us(text: &str) -> Result<u64, String> {
    let bad = || format!("'{text}' is not a time in milliseconds");
    if !text.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return Err(bad());
    }
    let ms: f64 = text.parse().map_err(|_| bad())?;
    let us = (ms * 1e3).round();
    if us.is_finite() && us < u64::MAX as f64 {
        Ok(us as u64)
    } else {
        Err(bad())
    }
}

/// A SINGA log's allocations as a [`Recording`].
pub(crate) fn import(
    bytes: &[u8],
    source: Source,
    _options: &ImportOptions,
) -> Result<Recording, ImportError> {
    let path = source.path.clone();
    let records = parse(bytes).map_err(|err| line_error(&path, err))?;
    let mut pairing = AddressPairing::default();
    for (_, record) in &records {
        match *record {
            Record::Malloc {
                addr,
                size,
                time_us,
            } => pairing.alloc(addr, size, Some(time_us)),
            Record::Free { addr, time_us } => pairing.free(addr, None, Some(time_us)),
            Record::Access { .. } | Record::Layer { .. } => pairing.ignore(),
        }
    }
    pairing
        .finish(source)
        .map_err(|err| ImportError::new(&path, Location::File, Problem::Structure(err.to_string())))
}

fn line_error(path: &Path, err: LineError) -> ImportError {
    ImportError::new(
        path,
        Location::Line {
            line: err.line,
            byte: err.byte,
        },
        Problem::Malformed(err.message),
    )
}
