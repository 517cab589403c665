//! PTX tokens: words (opcodes with their dotted modifiers, registers, labels, symbols),
//! numbers, strings and punctuation, each with the line it came from.

use super::PtxError;

#[derive(Clone, Debug, PartialEq)]
pub enum Tok {
    /// `ld.global.f32`, `%r12`, `%tid.x`, `$L__BB0_2`, `_Z6kernelPf`, `.reg`.
    Word(String),
    /// A literal as written: `42`, `0x1F`, `0f3F800000`, `0d3FF0000000000000`, `1.5`.
    Num(String),
    Str(String),
    Punct(char),
}

#[derive(Clone, Debug)]
pub struct Token {
    pub tok: Tok,
    pub line: u32,
}

fn word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '$' | '.' | '%')
}

/// Splits PTX text into tokens, dropping `//` and `/* */` comments.
pub fn tokens(text: &str) -> Result<Vec<Token>, PtxError> {
    let bytes: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let mut line = 1u32;
    while i < bytes.len() {
        let c = bytes[i];
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c == '/' && bytes.get(i + 1) == Some(&'/') {
            while i < bytes.len() && bytes[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && bytes.get(i + 1) == Some(&'*') {
            i += 2;
            while i < bytes.len() && !(bytes[i] == '*' && bytes.get(i + 1) == Some(&'/')) {
                if bytes[i] == '\n' {
                    line += 1;
                }
                i += 1;
            }
            i += 2;
        } else if c == '"' {
            let start = i + 1;
            i += 1;
            while i < bytes.len() && bytes[i] != '"' {
                i += 1;
            }
            let s: String = bytes[start..i.min(bytes.len())].iter().collect();
            out.push(Token {
                tok: Tok::Str(s),
                line,
            });
            i += 1;
        } else if c.is_ascii_digit() {
            let start = i;
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == '.') {
                i += 1;
            }
            out.push(Token {
                tok: Tok::Num(bytes[start..i].iter().collect()),
                line,
            });
        } else if word_char(c) {
            let start = i;
            // `::` belongs to a word (`.L2::evict_last`, `.shared::cta`).
            while i < bytes.len()
                && (word_char(bytes[i])
                    || (bytes[i] == ':' && bytes.get(i + 1) == Some(&':'))
                    || (bytes[i] == ':' && i > 0 && bytes[i - 1] == ':'))
            {
                i += 1;
            }
            out.push(Token {
                tok: Tok::Word(bytes[start..i].iter().collect()),
                line,
            });
        } else if ",;:{}[]()+-@!|<>=".contains(c) {
            out.push(Token {
                tok: Tok::Punct(c),
                line,
            });
            i += 1;
        } else {
            return Err(PtxError::syntax(
                line,
                format!("unexpected character {c:?}"),
            ));
        }
    }
    Ok(out)
}

/// The value of an integer or float literal, as raw bits (floats: `0f`/`0d` hex or decimal,
/// stored as f64 bits for a decimal; the caller converts to the instruction's type).
pub fn number(text: &str) -> Option<Literal> {
    let lower = text.to_ascii_lowercase();
    if let Some(hex) = lower.strip_prefix("0f") {
        return u32::from_str_radix(hex, 16)
            .ok()
            .map(|b| Literal::F32(f32::from_bits(b)));
    }
    if let Some(hex) = lower.strip_prefix("0d") {
        return u64::from_str_radix(hex, 16)
            .ok()
            .map(|b| Literal::F64(f64::from_bits(b)));
    }
    let digits = lower.trim_end_matches('u');
    if let Some(hex) = digits.strip_prefix("0x") {
        return u64::from_str_radix(hex, 16).ok().map(Literal::Int);
    }
    if let Some(bin) = digits.strip_prefix("0b") {
        return u64::from_str_radix(bin, 2).ok().map(Literal::Int);
    }
    if digits.contains('.') || digits.contains('e') {
        return digits.parse::<f64>().ok().map(Literal::F64);
    }
    if digits.len() > 1 && digits.starts_with('0') {
        return u64::from_str_radix(&digits[1..], 8).ok().map(Literal::Int);
    }
    digits.parse::<u64>().ok().map(Literal::Int)
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Literal {
    Int(u64),
    F32(f32),
    F64(f64),
}
