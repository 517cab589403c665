//! The offline DSA CSV format, `id,lower,upper,size`: one buffer per line, live over the
//! half-open interval `[lower, upper)` (the convention of MiniMalloc's benchmarks and of
//! [`crate::plan`], so no conversion is needed).
//!
//! The file already is an allocation problem, so it becomes an [`Instance`] directly. Accepted:
//! an optional header line `id,lower,upper,size` (every file of the project's benchmarks has
//! one), blank lines, spaces around fields, CRLF line ends, a UTF-8 BOM. Anything else — a
//! missing or extra field, a non-integer, `lower ≥ upper`, an `upper` of [`TIME_END`] (2^32 − 1)
//! or more, a 0-byte buffer, an id seen before — is an error naming the line (1-based) and the
//! byte offset at which it starts.

use std::collections::HashMap;
use std::path::Path;

use super::error::{ImportError, Location, Problem};
use super::{Format, Input};
use crate::content::Excerpt;
use crate::plan::{Buffer, Instance};

const HEADER: [&str; 4] = ["id", "lower", "upper", "size"];

/// The first time this reader refuses: `lower` and `upper` are event indices below 2^32 − 1,
/// so that every exclusive end `upper + 1` fits 32 bits. The planners and `replay` store times
/// as `u64` and sort a buffer's events rather than lay out every time up to the last (an
/// instance costs in proportion to its buffers whatever its times), so this bound is the
/// format's, not their storage's: a far time is refused as what it almost always is, a
/// mistake in the file, instead of being planned or replayed. The largest real instance the
/// project has ends at 1,048,576.
const TIME_END: u64 = u32::MAX as u64;

/// Reads a DSA CSV file (gzip-compressed or not, within
/// [`DEFAULT_MAX_DECOMPRESSED`](super::DEFAULT_MAX_DECOMPRESSED) bytes) into an [`Instance`].
pub fn read_dsa_csv(path: impl AsRef<Path>) -> Result<Instance, ImportError> {
    let path = path.as_ref();
    let input = Input::open(path, super::DEFAULT_MAX_DECOMPRESSED)?;
    let gzip = input.gzip;
    let bytes = input.bytes();
    if !looks_like_dsa_csv(bytes) {
        let found = input.format();
        return Err(match found {
            Some(found) => ImportError::new(
                path,
                Location::File,
                Problem::WrongKind {
                    found,
                    wanted: "a DSA CSV (id,lower,upper,size)",
                },
            ),
            None => ImportError::new(
                path,
                Location::Line { line: 1, byte: 0 },
                Problem::Csv(
                    "expected the header `id,lower,upper,size` or a line of four integers"
                        .to_string(),
                ),
            ),
        }
        .in_format(Format::DsaCsv, gzip));
    }
    parse_dsa_csv(path, bytes).map_err(|err| err.in_format(Format::DsaCsv, gzip))
}

/// Parses DSA CSV text held in memory; `name` is used in errors.
pub fn parse_dsa_csv(name: impl AsRef<Path>, text: &[u8]) -> Result<Instance, ImportError> {
    let name = name.as_ref();
    let error = |line: u64, byte: u64, message: String| {
        ImportError::new(name, Location::Line { line, byte }, Problem::Csv(message))
    };
    let mut buffers = Vec::new();
    let mut line_of: HashMap<u64, (u64, u64)> = HashMap::new(); // id → (line, byte)
    let mut first = true;
    let (text, base) = match text.strip_prefix(b"\xEF\xBB\xBF") {
        Some(rest) => (rest, 3),
        None => (text, 0),
    };
    for (number, byte, line) in lines(text, base) {
        let Ok(line) = std::str::from_utf8(line) else {
            return Err(error(
                number,
                byte,
                "the line is not UTF-8 text".to_string(),
            ));
        };
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        if std::mem::take(&mut first) && is_header(&fields) {
            continue;
        }
        if fields.len() != 4 {
            return Err(error(
                number,
                byte,
                format!(
                    "{} fields in `{}`; expected 4: id,lower,upper,size",
                    fields.len(),
                    Excerpt(line)
                ),
            ));
        }
        let mut values = [0u64; 4];
        for ((value, field), column) in values.iter_mut().zip(&fields).zip(HEADER) {
            *value = field.parse().map_err(|_| {
                error(
                    number,
                    byte,
                    format!(
                        "{column} is `{}`, which should be an unsigned integer (below 2^64)",
                        Excerpt(field)
                    ),
                )
            })?;
        }
        let [id, lower, upper, size] = values;
        if lower >= upper {
            return Err(error(
                number,
                byte,
                format!(
                    "buffer {id} has lower {lower} ≥ upper {upper}; lifetimes are half-open \
                     [lower, upper) and must not be empty"
                ),
            ));
        }
        if upper >= TIME_END {
            return Err(error(
                number,
                byte,
                format!(
                    "buffer {id} has upper {upper}; times are event indices, read below \
                     {TIME_END} (2^32 − 1) so that `upper + 1` fits 32 bits"
                ),
            ));
        }
        if size == 0 {
            return Err(error(number, byte, format!("buffer {id} has size 0")));
        }
        if let Some((earlier, _)) = line_of.insert(id, (number, byte)) {
            return Err(error(
                number,
                byte,
                format!("buffer id {id} already appears on line {earlier}"),
            ));
        }
        buffers.push(Buffer {
            id,
            lower,
            upper,
            size,
        });
    }
    Instance::new(buffers).map_err(|err| {
        // Every rule was checked per line above; name the line anyway if one slipped through.
        let id = err.id();
        let location = line_of
            .get(&id)
            .map_or(Location::File, |&(line, byte)| Location::Line {
                line,
                byte,
            });
        ImportError::new(name, location, Problem::Instance(err))
    })
}

/// Whether the first non-blank line is the header or four comma-separated integers.
pub(crate) fn looks_like_dsa_csv(text: &[u8]) -> bool {
    let text = text.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(text);
    let Some((_, _, line)) = lines(text, 0).find(|(_, _, l)| !l.trim_ascii().is_empty()) else {
        return false;
    };
    let Ok(line) = std::str::from_utf8(line) else {
        return false;
    };
    let fields: Vec<&str> = line.trim().split(',').map(str::trim).collect();
    is_header(&fields) || (fields.len() == 4 && fields.iter().all(|f| f.parse::<u64>().is_ok()))
}

fn is_header(fields: &[&str]) -> bool {
    fields.len() == HEADER.len()
        && fields
            .iter()
            .zip(HEADER)
            .all(|(f, h)| f.eq_ignore_ascii_case(h))
}

/// Lines with their 1-based number and starting byte offset, without the line end.
/// `base` is the offset of `text` in the file.
fn lines(text: &[u8], base: u64) -> impl Iterator<Item = (u64, u64, &[u8])> {
    let mut offset = base;
    text.split(|&b| b == b'\n')
        .enumerate()
        .map(move |(index, line)| {
            let start = offset;
            offset += line.len() as u64 + 1;
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            (index as u64 + 1, start, line)
        })
}
