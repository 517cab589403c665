//! Files recognised by their content, never by their name: every reader of itermem accepts
//! gzip-compressed input (recognised by its magic bytes) and names an unknown format by the
//! bytes it starts with. One decoder and one way of saying it serve the trace importers
//! ([`crate::import`]) and the op-level importers ([`crate::ops`]).
//!
//! # Gzip bombs
//!
//! A few megabytes of gzip can expand to gigabytes, so decompression is streamed and guarded
//! ([`read_content`]):
//!
//! - **The format is recognised from the first [`HEAD_BYTES`] decompressed bytes**, by the
//!   caller's own recogniser, before anything more is decompressed: content of no known format
//!   is refused with the bytes it starts with after 64 KiB, not after decompressing the whole.
//! - **The content stays the format it began as**, checked as it arrives: text (no NUL byte in
//!   its first 16, no pickle's `PROTO`: JSON, JSON lines, CSV) holds no NUL byte; a pickle is a
//!   sequence of opcodes that ends at `STOP` ([`crate::import::pickle::Framing`]); an itermem
//!   trace, records of a non-zero kind ([`crate::trace::format::Framing`]). The first byte that
//!   breaks this stops the decompression with its offset: a recognised head followed by a
//!   gigabyte of zeros or of random bytes, the cheapest bombs, costs a few megabytes. So does
//!   one of filler that the format would accept (spaces after JSON, the same valid event or
//!   line a million times, records of an unknown kind in a trace): any content stops after
//!   [`MAX_FILLER`] bytes that repeat a pattern of at most [`MAX_PERIOD`] bytes, text after as
//!   many blanks.
//! - **Past [`RATIO_AFTER`] bytes (16 MiB), the content costs memory in proportion to the
//!   file**: a stream whose decompressed bytes exceed [`MAX_RATIO`] (100) times the compressed
//!   bytes consumed so far is stopped there, with the ratio and the offset. Content that stays
//!   well-formed and varied, yet compresses hundreds of times (numbered lines padded with
//!   spaces, a pattern longer than [`MAX_PERIOD`]), is thus refused after 16 MiB; a real
//!   recording expands less than 50:1. What is held is at most the larger of 16 MiB and 100
//!   times the file's size.
//! - **At most `limit` decompressed bytes are accepted** ([`DEFAULT_MAX_DECOMPRESSED`], 1 GiB,
//!   unless raised: `--max-decompressed` on the command line, `max_decompressed` in the load
//!   options). The output buffer never grows past the limit, so no content costs more than the
//!   limit in memory, plus one 64 KiB chunk and the decoder's window.
//!
//! Plain (uncompressed) files are not limited: their size on disk is their size in memory, and
//! the user chose to read them.

use std::fmt;
use std::io::{self, Read};

/// The first two bytes of a gzip stream.
pub(crate) const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// The most bytes a gzip-compressed input may decompress to unless the caller raises it.
///
/// Far above any real recording (the largest file of the project's real traces, a 54 MB
/// PyTorch profiler trace, decompresses to 51 MiB) and far below what would exhaust a
/// workstation's memory: the issue this guards against is a 10 MB file that took 10 GB.
pub const DEFAULT_MAX_DECOMPRESSED: u64 = 1 << 30;

/// How many decompressed bytes format recognition looks at before decompressing more: enough
/// for every format's first line or magic (a DTR log line is under 400 bytes).
pub(crate) const HEAD_BYTES: usize = 64 * 1024;

/// Why [`read_content`] gave no content.
#[derive(Debug)]
pub(crate) enum ReadError {
    /// Reading the file failed.
    Io(io::Error),
    /// A corrupt or truncated gzip stream.
    Gzip {
        error: io::Error,
        /// Compressed bytes the decoder had consumed when it stopped.
        compressed_offset: u64,
    },
    /// The gzip stream decompresses to more than `limit` bytes.
    TooLarge { limit: u64 },
    /// The first [`HEAD_BYTES`] decompressed bytes are of no format the caller reads.
    Unrecognised { first_bytes: Vec<u8> },
    /// The content stops being the format it began as at `offset` of the decompressed data (a
    /// NUL byte in text, a byte that is no pickle opcode, a trace record of kind 0): what the
    /// reader would refuse, refused before the rest is decompressed.
    Malformed { offset: u64, message: String },
}

/// How many of a content's first bytes an "unknown format" message shows.
const SHOWN_BYTES: usize = 16;

/// The content of a file whose first bytes, `head`, were already read from `reader` (any
/// number, even none): decompressed, with a limit, if it starts with the gzip magic, else
/// `head` followed by the rest of `reader`, unlimited; and whether it was gzip.
///
/// For gzip content longer than [`HEAD_BYTES`], `recognise` is asked about the first
/// [`HEAD_BYTES`] decompressed bytes before more is decompressed; `false` stops with
/// [`ReadError::Unrecognised`]. (Shorter content is returned whole: the caller's own
/// recognition then sees all of it and can tell "empty" from "unknown".) More than `limit`
/// decompressed bytes stop with [`ReadError::TooLarge`], having held at most `limit` of them.
/// `size_hint` is the file's size on disk (0 when unknown), used to size the first buffer.
pub(crate) fn read_content(
    mut reader: impl Read,
    mut head: Vec<u8>,
    size_hint: u64,
    limit: u64,
    recognise: impl FnOnce(&[u8]) -> bool,
) -> Result<(Vec<u8>, bool), ReadError> {
    while head.len() < GZIP_MAGIC.len() {
        let mut byte = [0u8; 1];
        match reader.read(&mut byte) {
            Ok(0) => break,
            Ok(_) => head.push(byte[0]),
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(ReadError::Io(err)),
        }
    }
    if head.starts_with(&GZIP_MAGIC) {
        let compressed = io::Cursor::new(head).chain(reader);
        return gunzip(compressed, size_hint, limit, recognise).map(|bytes| (bytes, true));
    }
    let rest = usize::try_from(size_hint).map_or(0, |size| size.saturating_sub(head.len()));
    head.reserve_exact(rest);
    reader.read_to_end(&mut head).map_err(ReadError::Io)?;
    Ok((head, false))
}

/// Counts the compressed bytes the decoder has consumed, and remembers whether reading the
/// file itself failed (an I/O error, not corrupt data).
struct Counting<R> {
    inner: R,
    consumed: u64,
    failed: bool,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.inner.read(buf) {
            Ok(n) => {
                self.consumed += n as u64;
                Ok(n)
            }
            Err(err) => {
                self.failed |= err.kind() != io::ErrorKind::Interrupted;
                Err(err)
            }
        }
    }
}

/// Decompresses every member of a gzip stream, within `limit` (see [`read_content`]).
fn gunzip(
    compressed: impl Read,
    size_hint: u64,
    limit: u64,
    recognise: impl FnOnce(&[u8]) -> bool,
) -> Result<Vec<u8>, ReadError> {
    let mut decoder = flate2::read::MultiGzDecoder::new(Counting {
        inner: compressed,
        consumed: 0,
        failed: false,
    });
    let cap = usize::try_from(limit).unwrap_or(usize::MAX);
    // Profiler traces compress about 15:1: start with room for 8:1, within the limit.
    let first = usize::try_from(size_hint.saturating_mul(8)).unwrap_or(usize::MAX);
    let mut out: Vec<u8> = Vec::with_capacity(first.min(cap));
    // Decompressed in chunks, so that the output grows by at most doubling and never past the
    // limit (`read_to_end` would double past it).
    let mut chunk = vec![0u8; HEAD_BYTES];
    let mut recognise = Some(recognise);
    // Chosen once the head is recognised (see the module documentation).
    let mut check = Check {
        format: Framing::Nothing,
        filler: 0,
    };
    loop {
        let n = match decoder.read(&mut chunk) {
            Ok(0) => return Ok(out),
            Ok(n) => n,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
            Err(error) => {
                let counting = decoder.get_ref();
                return Err(if counting.failed {
                    ReadError::Io(error)
                } else {
                    ReadError::Gzip {
                        error,
                        compressed_offset: counting.consumed,
                    }
                });
            }
        };
        let len = out.len() + n;
        if len as u64 > limit {
            return Err(ReadError::TooLarge { limit });
        }
        if out.capacity() < len {
            // `len <= limit`, so the new capacity stays within the limit.
            let wanted = out.capacity().saturating_mul(2).clamp(len, cap);
            out.reserve_exact(wanted - out.len());
        }
        let mut start = out.len();
        out.extend_from_slice(&chunk[..n]);
        expansion(out.len(), decoder.get_ref().consumed)
            .map_err(|(offset, message)| ReadError::Malformed { offset, message })?;
        if out.len() > HEAD_BYTES
            && let Some(recognise) = recognise.take()
        {
            if !recognise(&out[..HEAD_BYTES]) {
                return Err(ReadError::Unrecognised {
                    first_bytes: out[..SHOWN_BYTES].to_vec(),
                });
            }
            check = Check::of(&out);
            start = 0;
        }
        check
            .advance(&out, start)
            .map_err(|(offset, message)| ReadError::Malformed { offset, message })?;
    }
}

/// The most a gzip stream may expand, decompressed bytes per compressed byte, once it has given
/// [`RATIO_AFTER`] bytes: so that content past that costs memory in proportion to the file, at
/// most this many times its size. The project's real traces, each recompressed with `gzip -9`,
/// expand at most 41:1 (the ViT snapshot, 1.2 MB; 35:1 the largest above 16 MiB, the ResNet-50
/// profiler trace); twice that, rounded up, leaves room for recordings that repeat more. A bomb
/// expands hundreds of times (deflate's most is 1032:1), so one of a few megabytes is refused
/// after [`RATIO_AFTER`] bytes; one kept below the cap can give at most 100 times its size,
/// 256 MiB for a 2.6 MB file.
const MAX_RATIO: u64 = 100;

/// How many decompressed bytes any gzip stream may give whatever its ratio ([`MAX_RATIO`]):
/// small recordings compress best (the ViT snapshot above), and as much as this costs nothing.
const RATIO_AFTER: usize = 16 << 20;

/// Whether `decompressed` bytes from `consumed` compressed ones stay within [`MAX_RATIO`]: if
/// not, the offset and why, as for content that stops being its format. `consumed` counts what
/// the decoder has read ahead too (up to its 32 KiB buffer), so the ratio is never overstated.
fn expansion(decompressed: usize, consumed: u64) -> Result<(), (u64, String)> {
    let decompressed = decompressed as u64;
    if decompressed <= RATIO_AFTER as u64 || decompressed <= MAX_RATIO.saturating_mul(consumed) {
        return Ok(());
    }
    Err((
        decompressed,
        format!(
            "{consumed} bytes of gzip data gave {decompressed} ({}:1), past {RATIO_AFTER} bytes \
             more than the {MAX_RATIO}:1 that guards against gzip bombs (real recordings \
             expand less than 50:1)",
            decompressed / consumed.max(1)
        ),
    ))
}

/// The most decompressed bytes in a row that are filler: a pattern of at most [`MAX_PERIOD`]
/// bytes repeated, or blanks (spaces, tabs, line ends) in text. No recording repeats itself
/// exactly for megabytes (its times, ids and addresses change); a gzip bomb does, since
/// repetition is what compresses a thousandfold.
const MAX_FILLER: usize = 16 << 20;

/// The longest pattern whose repetition is filler.
const MAX_PERIOD: usize = 4096;

/// Whether `piece` is a pattern of at most [`MAX_PERIOD`] bytes repeated (and at least twice):
/// `piece[k..] == piece[..len - k]` for some period `k`. Candidates are the offsets where the
/// piece's first 64 bytes come again, so varied content costs one short comparison each.
fn repeats(piece: &[u8]) -> bool {
    const PROBE: usize = 64;
    let longest = MAX_PERIOD.min(piece.len() / 2);
    if longest == 0 || piece.len() < 2 * PROBE {
        return false;
    }
    let probe = &piece[..PROBE];
    memchr::memchr_iter(piece[0], &piece[1..=longest]).any(|at| {
        let k = at + 1;
        piece[k..k + PROBE] == *probe && piece[k..] == piece[..piece.len() - k]
    })
}

/// How decompressed content is checked as it arrives: by the format it begins as, and for
/// filler (counted in whole pieces as they arrive: a piece that is all filler extends the run,
/// any other ends it).
struct Check {
    format: Framing,
    filler: usize,
}

enum Framing {
    Nothing,
    /// No NUL byte (see [`is_text`]).
    Text,
    Pickle(crate::import::pickle::Framing),
    Trace(crate::trace::format::Framing),
}

impl Check {
    fn of(content: &[u8]) -> Check {
        let format = match crate::import::detect_format(content) {
            Some(crate::import::Format::TorchSnapshot) => Framing::Pickle(Default::default()),
            Some(crate::import::Format::ItermemTrace) => Framing::Trace(Default::default()),
            _ if is_text(content) => Framing::Text,
            _ => Framing::Nothing,
        };
        Check { format, filler: 0 }
    }

    /// Checks `content`, all decompressed so far, of which `new` onwards arrived last.
    fn advance(&mut self, content: &[u8], new: usize) -> Result<(), (u64, String)> {
        let piece = &content[new..];
        let text = matches!(self.format, Framing::Text);
        let blank = |b: &u8| matches!(b, b' ' | b'\t' | b'\r' | b'\n');
        let filler = repeats(piece) || text && !piece.is_empty() && piece.iter().all(blank);
        self.filler = if filler { self.filler + piece.len() } else { 0 };
        if self.filler > MAX_FILLER {
            return Err((
                content.len() as u64,
                format!(
                    "more than {MAX_FILLER} bytes repeating a pattern of at most {MAX_PERIOD} \
                     bytes, or of blanks"
                ),
            ));
        }
        match &mut self.format {
            Framing::Nothing => Ok(()),
            Framing::Text => match memchr::memchr(0, piece) {
                Some(at) => Err(((new + at) as u64, NOT_TEXT.to_string())),
                None => Ok(()),
            },
            Framing::Pickle(framing) => framing.advance(content),
            Framing::Trace(framing) => framing.advance(content),
        }
    }
}

/// Whether content begins as one of the text formats: its first [`SHOWN_BYTES`] hold no NUL
/// byte and it is no pickle of protocol 2 or later (binary formats, the itermem trace's magic
/// included, have one there).
fn is_text(content: &[u8]) -> bool {
    let first = &content[..content.len().min(SHOWN_BYTES)];
    !first.contains(&0) && first.first() != Some(&0x80)
}

/// Shows the first bytes of unrecognised content in hex, each after a space (" 1f 8b 08").
pub(crate) struct FirstBytes<'a>(pub &'a [u8]);

impl fmt::Display for FirstBytes<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, " {b:02x}")?;
        }
        Ok(())
    }
}

/// What a NUL byte in decompressed text content is.
const NOT_TEXT: &str = "a NUL byte, after a start of text (JSON, JSON lines or CSV), \
                                   none of which holds one: not the format the file begins as";

/// The most characters of a file's content an error message quotes.
pub const QUOTED_CHARS: usize = 80;

/// A piece of a file's content in an error message: at most [`QUOTED_CHARS`] characters of it,
/// escaped (control characters, quotes and backslashes as in Rust's `escape_debug`), then `…`
/// if there was more. Binary input thus stays on one short line.
pub struct Excerpt<'a>(pub &'a str);

impl fmt::Display for Excerpt<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut chars = self.0.chars();
        for c in chars.by_ref().take(QUOTED_CHARS) {
            write!(f, "{}", c.escape_debug())?;
        }
        if chars.next().is_some() {
            f.write_str("…")?;
        }
        Ok(())
    }
}

/// A message that may quote a file's content (its own or a parser's, such as serde_json's
/// `invalid type: string "…"`): every span between double quotes or backticks is cut after
/// [`QUOTED_CHARS`] characters, control characters are escaped everywhere, and the whole is cut
/// after [`MESSAGE_CHARS`] characters shown (whatever quoting the input itself holds).
pub struct Bounded<'a>(pub &'a str);

/// The most characters of a [`Bounded`] message.
const MESSAGE_CHARS: usize = 800;

impl fmt::Display for Bounded<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The quote that opened the current span, and how many characters it has held.
        let mut open: Option<(char, usize)> = None;
        let mut escaped = false;
        let mut written = 0;
        for c in self.0.chars() {
            let shown = match open {
                Some((quote, count)) if c == quote && !escaped => {
                    if count > QUOTED_CHARS {
                        f.write_str("…")?;
                    }
                    open = None;
                    true
                }
                Some((quote, count)) => {
                    open = Some((quote, count + 1));
                    count < QUOTED_CHARS
                }
                None => {
                    if c == '"' || c == '`' {
                        open = Some((c, 0));
                    }
                    true
                }
            };
            escaped = c == '\\' && !escaped;
            if !shown {
                continue;
            }
            if written == MESSAGE_CHARS {
                return f.write_str("…");
            }
            written += 1;
            if c.is_control() {
                write!(f, "{}", c.escape_debug())?;
            } else {
                write!(f, "{c}")?;
            }
        }
        if open.is_some_and(|(_, count)| count > QUOTED_CHARS) {
            f.write_str("…")?;
        }
        Ok(())
    }
}

/// The sentence every "too large" error ends with: the limit and how to raise it.
pub(crate) struct TooLarge(pub u64);

impl fmt::Display for TooLarge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let limit = self.0;
        write!(
            f,
            "the gzip data decompresses to more than {limit} bytes ({}), the limit that guards \
             against gzip bombs; if the file is genuine, raise it with `--max-decompressed \
             BYTES` (e.g. `--max-decompressed {}`)",
            crate::export::human_bytes(limit),
            suggestion(limit)
        )
    }
}

/// A limit four times `limit`, written the way `--max-decompressed` takes it.
fn suggestion(limit: u64) -> String {
    let raised = limit.saturating_mul(4);
    match raised.trailing_zeros() {
        40.. => format!("{}T", raised >> 40),
        30..40 => format!("{}G", raised >> 30),
        20..30 => format!("{}M", raised >> 20),
        10..20 => format!("{}K", raised >> 10),
        _ => raised.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(bytes).unwrap();
        enc.finish().unwrap()
    }

    /// [`read_content`] of bytes in memory, recognising anything.
    fn read(raw: Vec<u8>, limit: u64) -> Result<(Vec<u8>, bool), ReadError> {
        read_content(io::empty(), raw, 0, limit, |_| true)
    }

    #[test]
    fn gunzip_reads_every_member_and_reports_where_a_stream_breaks() {
        let mut two = gzip(b"first ");
        two.extend(gzip(b"second"));
        assert_eq!(
            read(two, 1 << 20).unwrap(),
            (b"first second".to_vec(), true)
        );
        assert_eq!(
            read(b"plain".to_vec(), 1).unwrap(),
            (b"plain".to_vec(), false)
        );
        let whole = gzip(&[7u8; 4096]);
        let cut = whole[..whole.len() - 4].to_vec();
        let len = cut.len() as u64;
        match read(cut, 1 << 20).unwrap_err() {
            ReadError::Gzip {
                compressed_offset, ..
            } => assert!(compressed_offset > 0 && compressed_offset <= len),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_head_and_the_rest_of_a_reader_are_one_content() {
        let packed = gzip(b"0123456789");
        for split in [0, 1, 2, 5, packed.len()] {
            let (head, rest) = packed.split_at(split);
            let got = read_content(rest, head.to_vec(), 0, 1 << 20, |_| true).unwrap();
            assert_eq!(got, (b"0123456789".to_vec(), true), "split at {split}");
        }
        let got = read_content(&b"in"[..], b"pla".to_vec(), 5, 1, |_| false).unwrap();
        assert_eq!(got, (b"plain".to_vec(), false));
        // One byte, and none.
        assert_eq!(read(vec![0x1f], 1).unwrap(), (vec![0x1f], false));
        assert_eq!(read(Vec::new(), 1).unwrap(), (Vec::new(), false));
    }

    #[test]
    fn decompression_stops_at_the_limit_holding_no_more_than_it() {
        let content = vec![b'x'; 3 * HEAD_BYTES + 17];
        let packed = gzip(&content);
        let exact = content.len() as u64;
        let (got, was_gzip) = read(packed.clone(), exact).unwrap();
        assert!(was_gzip && got == content);
        assert!(got.capacity() as u64 <= exact, "{}", got.capacity());
        match read(packed, exact - 1).unwrap_err() {
            ReadError::TooLarge { limit } => assert_eq!(limit, exact - 1),
            other => panic!("{other:?}"),
        }
        // A limit below the head: the limit speaks first.
        assert!(matches!(
            read(gzip(&[b'y'; 100]), 99).unwrap_err(),
            ReadError::TooLarge { limit: 99 }
        ));
        // Plain content is not limited.
        assert_eq!(read(content.clone(), 1).unwrap(), (content, false));
    }

    #[test]
    fn a_piece_repeats_when_a_short_pattern_fills_it() {
        let pattern = |len: usize| -> Vec<u8> { (0..len).map(|i| (i * 7 % 251) as u8).collect() };
        assert!(repeats(&[7u8; 1000]));
        assert!(repeats(&b"abc".repeat(1000)));
        assert!(repeats(&pattern(MAX_PERIOD).repeat(3)[5..]));
        // A longer pattern, a counter, too little to tell: not filler.
        assert!(!repeats(&pattern(MAX_PERIOD + 1).repeat(3)));
        let counted: String = (0..5000).map(|i| format!("{{\"ts\": {i}}},")).collect();
        assert!(!repeats(counted.as_bytes()));
        assert!(!repeats(b"aaaa"));
    }

    #[test]
    fn past_16_mib_content_expands_at_most_100_to_1() {
        assert!(expansion(RATIO_AFTER, 1).is_ok());
        let past = RATIO_AFTER as u64 + 84; // 100 × 167,773
        assert!(expansion(past as usize, past / 100).is_ok());
        let (offset, message) = expansion(past as usize, past / 100 - 1).unwrap_err();
        assert_eq!(offset, past);
        assert!(
            message.contains(" (100:1), past 16777216 bytes"),
            "{message}"
        );
        // Varied content past 16 MiB that expands less is read whole: lines of a DSA CSV.
        let mut csv = b"id,lower,upper,size\n".to_vec();
        for id in 0..1_200_000u64 {
            csv.extend(format!("{id},{},{},{}\n", id % 977, id % 977 + 5, id * 13 % 4099).bytes());
        }
        assert!(csv.len() > RATIO_AFTER);
        assert_eq!(read(gzip(&csv), 1 << 30).unwrap().0, csv);
    }

    #[test]
    fn a_nul_byte_after_a_text_head_stops_decompression_at_its_offset() {
        let mut bomb = b"id,lower,upper,size\n".to_vec();
        bomb.resize(HEAD_BYTES + 1000, b'\n');
        bomb.resize(64 * HEAD_BYTES, 0);
        match read(gzip(&bomb), 1 << 30).unwrap_err() {
            ReadError::Malformed { offset, .. } => assert_eq!(offset, HEAD_BYTES as u64 + 1000),
            other => panic!("{other:?}"),
        }
        // So do 16 MiB of blanks, in any mix.
        let mut blank = b"[".to_vec();
        blank.extend(std::iter::repeat_n(b" \n", 10 << 20).flatten());
        assert!(matches!(
            read(gzip(&blank), 1 << 30).unwrap_err(),
            ReadError::Malformed { offset, .. } if offset > 16 << 20 && offset < 17 << 20
        ));
        // And 16 MiB of one valid line repeated.
        let mut lines = b"id,lower,upper,size\n".to_vec();
        lines.extend(std::iter::repeat_n(b"\n0,0,1,10".as_slice(), 3 << 20).flatten());
        assert!(matches!(
            read(gzip(&lines), 1 << 30).unwrap_err(),
            ReadError::Malformed { offset, .. } if offset > 16 << 20 && offset < 17 << 20
        ));
        // The NUL bytes within the head count too.
        bomb.truncate(100);
        bomb.resize(64 * HEAD_BYTES, 0);
        assert!(matches!(
            read(gzip(&bomb), 1 << 30).unwrap_err(),
            ReadError::Malformed { offset: 100, .. }
        ));
        // A binary head (a pickle, a trace) may hold NUL bytes anywhere.
        bomb[1] = 0;
        assert_eq!(read(gzip(&bomb), 1 << 30).unwrap().0, bomb);
    }

    #[test]
    fn a_pickle_or_a_trace_followed_by_zeros_stops_where_its_format_ends() {
        let ints = serde_pickle::Value::List((0..40_000).map(serde_pickle::Value::I64).collect());
        let pickle = serde_pickle::value_to_vec(&ints, serde_pickle::SerOptions::new()).unwrap();
        let events: Vec<crate::event::Event> = (0..10_000)
            .map(|id| crate::event::Event {
                time_ns: id,
                device: 0,
                kind: crate::event::EventKind::Free { id, stream: 0 },
            })
            .collect();
        let header = crate::trace::TraceHeader {
            word_size: 8,
            clock: crate::trace::Clock::MonotonicSinceStart,
            start_unix_ns: 0,
            pid: 1,
            device_name: "GPU".into(),
            device_total_memory: 1 << 30,
            command_line: Vec::new(),
        };
        let trace = crate::trace::format::encode_trace(&header, &events).unwrap();
        for (content, what) in [
            (pickle, "data after the pickle's STOP opcode"),
            (trace, "a record of kind 0, which is never written"),
        ] {
            assert!(content.len() > HEAD_BYTES);
            assert_eq!(read(gzip(&content), 1 << 30).unwrap().0, content);
            let mut bomb = content.clone();
            bomb.resize(content.len() + 64 * HEAD_BYTES, 0);
            match read(gzip(&bomb), 1 << 30).unwrap_err() {
                ReadError::Malformed { offset, message } => {
                    assert_eq!((offset, message.as_str()), (content.len() as u64, what));
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn the_format_is_recognised_from_the_head_alone() {
        let mut content = b"GIF89a".to_vec();
        content.resize(4 * HEAD_BYTES, b'.');
        let mut asked = None;
        let err = read_content(io::empty(), gzip(&content), 0, 1 << 30, |head| {
            asked = Some(head.len());
            false
        })
        .unwrap_err();
        assert_eq!(asked, Some(HEAD_BYTES));
        match err {
            ReadError::Unrecognised { first_bytes } => assert_eq!(first_bytes, content[..16]),
            other => panic!("{other:?}"),
        }
        // Content no longer than the head is returned whole, unasked.
        let short = vec![b'.'; HEAD_BYTES];
        let got = read_content(io::empty(), gzip(&short), 0, 1 << 30, |_| unreachable!());
        assert_eq!(got.unwrap(), (short, true));
    }

    #[test]
    fn read_errors_of_the_file_are_not_corrupt_gzip() {
        struct Failing;
        impl Read for Failing {
            fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
                Err(io::Error::other("disk on fire"))
            }
        }
        let packed = gzip(b"some text");
        let err = read_content(Failing, packed[..5].to_vec(), 0, 1 << 20, |_| true).unwrap_err();
        assert!(matches!(err, ReadError::Io(_)), "{err:?}");
        let err = read_content(Failing, Vec::new(), 0, 1 << 20, |_| true).unwrap_err();
        assert!(matches!(err, ReadError::Io(_)), "{err:?}");
    }

    #[test]
    fn first_bytes_are_shown_in_hex() {
        assert_eq!(FirstBytes(&[0x1f, 0x8b, 0]).to_string(), " 1f 8b 00");
    }

    #[test]
    fn the_limit_message_says_how_to_raise_it() {
        let text = TooLarge(1 << 30).to_string();
        assert!(
            text.contains("more than 1073741824 bytes (1.0 GiB)"),
            "{text}"
        );
        assert!(text.contains("`--max-decompressed 4G`"), "{text}");
        assert_eq!(suggestion(1000), "4000");
        assert_eq!(suggestion(1 << 20), "4M");
        assert_eq!(suggestion(u64::MAX), u64::MAX.to_string());
    }

    #[test]
    fn quoted_input_is_cut_after_80_characters_and_escaped() {
        let binary = "\u{1}\u{7f}\"\\".repeat(100);
        let excerpt = Excerpt(&binary).to_string();
        assert!(excerpt.starts_with(r#"\u{1}\u{7f}\"\\"#), "{excerpt}");
        assert!(
            excerpt.ends_with('…') && !excerpt.contains('\u{1}'),
            "{excerpt}"
        );
        assert_eq!(Excerpt("short").to_string(), "short");

        let long = "x".repeat(8000);
        let message = format!("invalid type: string \"{long}\", expected u64 at `{long}`");
        let bounded = Bounded(&message).to_string();
        let quoted = format!("\"{}…\"", "x".repeat(80));
        let start = format!("invalid type: string {quoted}, expected");
        assert!(bounded.starts_with(&start), "{bounded}");
        assert!(
            bounded.ends_with(&format!("`{}…`", "x".repeat(80))),
            "{bounded}"
        );
        assert_eq!(
            Bounded("line\nbreak \"ok\"").to_string(),
            "line\\nbreak \"ok\""
        );
        assert!(Bounded(&"y".repeat(5000)).to_string().chars().count() <= 801);
    }
}
