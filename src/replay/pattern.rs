//! The content a replayed tensor holds: a pattern derived from (tensor, version, iteration), so
//! any stale, foreign or lost byte differs from what a reader expects.
//!
//! Word `j` (8 bytes, little-endian) of a tensor written with seed `s` is `s ^ j·φ` (φ the
//! 64-bit golden ratio): one multiply and one xor per word, so writing and checking run at
//! memory speed, and two seeds differ in every word. A tail shorter than a word holds the low
//! bytes of the next word. Seeds mix their three inputs with SplitMix64 ([`crate::rng`]), so
//! neighbouring versions or tensors share no structure.

const PHI: u64 = 0x9E37_79B9_7F4A_7C15;

/// Words checked by a sampled check besides the first and the last.
const SAMPLES: u64 = 6;

/// The seed of `tensor`'s content after its `version`-th write of `iteration`.
pub fn seed(tensor: u32, version: u32, iteration: u32) -> u64 {
    let packed = (u64::from(tensor) << 32 | u64::from(version))
        ^ u64::from(iteration).wrapping_mul(0xD1B5_4A32_D192_ED03);
    crate::rng::SplitMix64::new(packed).next_u64()
}

/// Word `index` of the pattern of `seed`.
pub fn word(seed: u64, index: u64) -> u64 {
    seed ^ index.wrapping_mul(PHI)
}

/// A word that differs from the pattern: where, what was expected and what was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mismatch {
    /// Byte offset of the word in the tensor.
    pub offset: u64,
    pub expected: u64,
    pub found: u64,
}

/// Fills `bytes` with the pattern of `seed`.
pub fn fill(bytes: &mut [u8], seed: u64) {
    let mut words = bytes.chunks_exact_mut(8);
    let mut index = 0;
    for chunk in &mut words {
        chunk.copy_from_slice(&word(seed, index).to_le_bytes());
        index += 1;
    }
    let tail = words.into_remainder();
    let last = word(seed, index).to_le_bytes();
    tail.copy_from_slice(&last[..tail.len()]);
}

/// The first word of `bytes` that is not the pattern of `seed`.
pub fn check_all(bytes: &[u8], seed: u64) -> Option<Mismatch> {
    let words = bytes.chunks_exact(8);
    let tail = words.remainder();
    for (index, chunk) in words.enumerate() {
        let found = u64::from_le_bytes(chunk.try_into().unwrap_or([0; 8]));
        let expected = word(seed, index as u64);
        if found != expected {
            return Some(Mismatch {
                offset: index as u64 * 8,
                expected,
                found,
            });
        }
    }
    check_tail(bytes, tail, seed)
}

/// Checks the first and the last word and `SAMPLES` (6) words placed by the seed.
pub fn check_sampled(bytes: &[u8], seed: u64) -> Option<Mismatch> {
    let whole_words = bytes.len() as u64 / 8;
    if whole_words == 0 {
        return check_tail(bytes, bytes, seed);
    }
    let mut position = seed;
    let picks = (0..SAMPLES).map(|_| {
        position = position.wrapping_mul(PHI).rotate_left(17);
        position % whole_words
    });
    for index in [0, whole_words - 1].into_iter().chain(picks) {
        let start = index as usize * 8;
        let chunk: [u8; 8] = bytes[start..start + 8].try_into().unwrap_or([0; 8]);
        let found = u64::from_le_bytes(chunk);
        let expected = word(seed, index);
        if found != expected {
            return Some(Mismatch {
                offset: start as u64,
                expected,
                found,
            });
        }
    }
    check_tail(bytes, &bytes[whole_words as usize * 8..], seed)
}

/// Checks the bytes after the last whole word (`tail`, the end of `bytes`), reported as the
/// word they belong to, padded with the expected bytes.
fn check_tail(bytes: &[u8], tail: &[u8], seed: u64) -> Option<Mismatch> {
    if tail.is_empty() {
        return None;
    }
    let index = (bytes.len() - tail.len()) as u64 / 8;
    let expected = word(seed, index).to_le_bytes();
    if tail == &expected[..tail.len()] {
        return None;
    }
    let mut found = expected;
    found[..tail.len()].copy_from_slice(tail);
    Some(Mismatch {
        offset: index * 8,
        expected: u64::from_le_bytes(expected),
        found: u64::from_le_bytes(found),
    })
}
