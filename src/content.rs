//! Files recognised by their content, never by their name: every reader of itermem accepts
//! gzip-compressed input (recognised by its magic bytes) and names an unknown format by the
//! bytes it starts with. One decoder and one way of saying it serve the trace importers
//! ([`crate::import`]) and the op-level importers ([`crate::ops`]).

use std::fmt;
use std::io::{self, Read};

/// The first two bytes of a gzip stream.
pub(crate) const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// A corrupt or truncated gzip stream.
#[derive(Debug)]
pub(crate) struct CorruptGzip {
    pub error: io::Error,
    /// Compressed bytes the decoder had consumed when it stopped.
    pub compressed_offset: u64,
}

/// Decompresses a whole gzip file (every member of a multi-member file).
pub(crate) fn gunzip(raw: &[u8]) -> Result<Vec<u8>, CorruptGzip> {
    /// Counts the compressed bytes the decoder has consumed.
    struct Counting<'a> {
        data: &'a [u8],
        pos: usize,
    }
    impl Read for Counting<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let rest = &self.data[self.pos..];
            let n = rest.len().min(buf.len());
            buf[..n].copy_from_slice(&rest[..n]);
            self.pos += n;
            Ok(n)
        }
    }
    let mut decoder = flate2::read::MultiGzDecoder::new(Counting { data: raw, pos: 0 });
    // Profiler traces compress about 15:1; start with room for that, capped.
    let mut out = Vec::with_capacity(raw.len().saturating_mul(8).min(1 << 30));
    match decoder.read_to_end(&mut out) {
        Ok(_) => Ok(out),
        Err(error) => Err(CorruptGzip {
            error,
            compressed_offset: decoder.get_ref().pos as u64,
        }),
    }
}

/// `raw` decompressed if it starts with the gzip magic, else unchanged; and whether it was gzip.
pub(crate) fn gunzip_if_gzip(raw: Vec<u8>) -> Result<(Vec<u8>, bool), CorruptGzip> {
    if raw.starts_with(&GZIP_MAGIC) {
        Ok((gunzip(&raw)?, true))
    } else {
        Ok((raw, false))
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(bytes).unwrap();
        enc.finish().unwrap()
    }

    #[test]
    fn gunzip_reads_every_member_and_reports_where_a_stream_breaks() {
        let mut two = gzip(b"first ");
        two.extend(gzip(b"second"));
        assert_eq!(
            gunzip_if_gzip(two).unwrap(),
            (b"first second".to_vec(), true)
        );
        assert_eq!(
            gunzip_if_gzip(b"plain".to_vec()).unwrap(),
            (b"plain".to_vec(), false)
        );
        let whole = gzip(&[7u8; 4096]);
        let cut = &whole[..whole.len() - 4];
        let err = gunzip(cut).unwrap_err();
        assert!(err.compressed_offset > 0 && err.compressed_offset <= cut.len() as u64);
    }

    #[test]
    fn first_bytes_are_shown_in_hex() {
        assert_eq!(FirstBytes(&[0x1f, 0x8b, 0]).to_string(), " 1f 8b 00");
    }
}
