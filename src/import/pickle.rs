//! A restricted unpickler: Python pickles (protocols 0–5) of plain data only — `dict`, `list`,
//! `tuple`, `set`, `frozenset`, `str`, `bytes`, `int`, `float`, `bool`, `None`.
//!
//! # Why not `serde-pickle`
//!
//! `serde-pickle` 1.2 (the current release) fails on the real snapshots with "recursive
//! structure found" although they have no cycle: it counts the references to each memoized
//! object, but a shared container (the `frames` of two trace entries with the same stack) is
//! converted once per reference while the counters of the objects *inside* it were only counted
//! once, so the second conversion finds them gone. A snapshot shares thousands of such
//! containers (the ViT one: 1,910; 340,000 memo lookups). This decoder shares values the way
//! Python does, through reference counting (`Rc`), so a shared frame list is one allocation
//! however often it is referenced, and decoding is one pass over the opcodes.
//!
//! # Why it is safe
//!
//! Only data opcodes exist here. Every opcode that reaches outside plain data — `GLOBAL`,
//! `STACK_GLOBAL`, `INST`, `OBJ`, `NEWOBJ(_EX)`, `REDUCE`, `BUILD`, `EXT1/2/4`, `PERSID`,
//! `BINPERSID` — is refused with its byte offset (loading a global is how a pickle runs code),
//! as are out-of-band buffers. Every length is checked against the bytes that remain before
//! anything is allocated, so a corrupt file costs at most time linear in its size. Nested
//! containers are freed iteratively, so a pickle of a million nested lists cannot overflow the
//! stack when it is dropped. Cycles (possible through `APPEND` to a memoized list) are leaked,
//! not followed: readers of this value never descend more than a few fixed levels.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use super::error::Problem;

/// A decoded value. Containers are shared, as in Python.
#[derive(Clone, Debug)]
pub(crate) enum PValue {
    None,
    Bool(bool),
    Int(i128),
    /// An integer beyond ±2^127 (its value is not kept).
    BigInt,
    Float(f64),
    Str(Rc<str>),
    Bytes(Rc<[u8]>),
    Container(Rc<Container>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    List,
    Tuple,
    /// Items alternate key, value.
    Dict,
    Set,
    FrozenSet,
}

#[derive(Debug)]
pub(crate) struct Container {
    pub(crate) kind: Kind,
    pub(crate) items: RefCell<Vec<PValue>>,
}

impl Drop for Container {
    /// Frees nested containers with a work list instead of recursion.
    fn drop(&mut self) {
        let mut pending = std::mem::take(self.items.get_mut());
        while let Some(value) = pending.pop() {
            if let PValue::Container(rc) = value
                && let Ok(mut inner) = Rc::try_unwrap(rc)
            {
                pending.append(inner.items.get_mut());
            }
        }
    }
}

impl PValue {
    fn container(kind: Kind, items: Vec<PValue>) -> PValue {
        PValue::Container(Rc::new(Container {
            kind,
            items: RefCell::new(items),
        }))
    }

    /// The value of `key` in a dict with string keys (the last one wins, as in Python).
    pub(crate) fn get(&self, key: &str) -> Option<PValue> {
        let PValue::Container(c) = self else {
            return None;
        };
        if c.kind != Kind::Dict {
            return None;
        }
        let items = c.items.borrow();
        items
            .chunks_exact(2)
            .rev()
            .find(|pair| matches!(&pair[0], PValue::Str(k) if &**k == key))
            .map(|pair| pair[1].clone())
    }

    /// The `(key, value)` pairs of a dict, `None` for anything else.
    pub(crate) fn dict_items(&self) -> Option<Vec<(PValue, PValue)>> {
        match self {
            PValue::Container(c) if c.kind == Kind::Dict => Some(
                c.items
                    .borrow()
                    .chunks_exact(2)
                    .map(|pair| (pair[0].clone(), pair[1].clone()))
                    .collect(),
            ),
            _ => None,
        }
    }

    /// The items of a list or tuple, `None` for anything else.
    pub(crate) fn list_items(&self) -> Option<Vec<PValue>> {
        match self {
            PValue::Container(c) if matches!(c.kind, Kind::List | Kind::Tuple) => {
                Some(c.items.borrow().clone())
            }
            _ => None,
        }
    }

    pub(crate) fn as_str(&self) -> Option<&str> {
        match self {
            PValue::Str(s) => Some(s),
            _ => None,
        }
    }

    /// A non-negative integer that fits in 64 bits (`True`/`False` count as 1/0, as in Python).
    pub(crate) fn as_u64(&self) -> Option<u64> {
        match self {
            PValue::Int(v) => u64::try_from(*v).ok(),
            PValue::Bool(b) => Some(u64::from(*b)),
            _ => None,
        }
    }

    /// A short description of the value for messages.
    pub(crate) fn describe(&self) -> String {
        match self {
            PValue::None => "None".to_string(),
            PValue::Bool(b) => format!("the bool {b}"),
            PValue::Int(v) => format!("the integer {v}"),
            PValue::BigInt => "an integer beyond 128 bits".to_string(),
            PValue::Float(v) => format!("the float {v}"),
            PValue::Str(s) => format!("the string {:?}", s.chars().take(40).collect::<String>()),
            PValue::Bytes(b) => format!("bytes of length {}", b.len()),
            PValue::Container(c) => {
                let n = c.items.borrow().len();
                match c.kind {
                    Kind::List => format!("a list of {n} items"),
                    Kind::Tuple => format!("a tuple of {n} items"),
                    Kind::Dict => format!("a dict of {} items", n / 2),
                    Kind::Set | Kind::FrozenSet => format!("a set of {n} items"),
                }
            }
        }
    }
}

/// Decodes a pickle; an error gives the byte offset of the opcode at fault.
pub(crate) fn unpickle(bytes: &[u8]) -> Result<PValue, (u64, Problem)> {
    Machine {
        bytes,
        pos: 0,
        stack: Vec::new(),
        marks: Vec::new(),
        memo: HashMap::new(),
    }
    .run()
}

struct Machine<'a> {
    bytes: &'a [u8],
    pos: usize,
    stack: Vec<PValue>,
    /// Stack lengths at each MARK.
    marks: Vec<usize>,
    memo: HashMap<u64, PValue>,
}

type Step<T> = Result<T, (u64, Problem)>;

impl<'a> Machine<'a> {
    fn run(mut self) -> Step<PValue> {
        loop {
            let at = self.pos;
            let Some(&op) = self.bytes.get(self.pos) else {
                return Err(self.error(
                    at,
                    format!(
                        "truncated pickle: no STOP opcode before the end ({} bytes)",
                        self.bytes.len()
                    ),
                ));
            };
            self.pos += 1;
            match op {
                b'.' => {
                    let value = self.pop(at, "STOP")?;
                    if self.pos < self.bytes.len() {
                        return Err(self.error(
                            self.pos,
                            format!(
                                "{} bytes after the pickle's STOP opcode",
                                self.bytes.len() - self.pos
                            ),
                        ));
                    }
                    return Ok(value);
                }
                0x80 => {
                    let protocol = self.fixed(at, 1)?[0];
                    if protocol > 5 {
                        return Err(self.error(
                            at,
                            format!("pickle protocol {protocol} (this reader knows 0 to 5)"),
                        ));
                    }
                }
                0x95 => {
                    self.fixed(at, 8)?; // FRAME: a length hint only
                }
                // Constants.
                b'N' => self.stack.push(PValue::None),
                0x88 => self.stack.push(PValue::Bool(true)),
                0x89 => self.stack.push(PValue::Bool(false)),
                // Integers.
                b'K' => {
                    let v = self.fixed(at, 1)?[0];
                    self.stack.push(PValue::Int(i128::from(v)));
                }
                b'M' => {
                    let b = self.fixed(at, 2)?;
                    self.stack
                        .push(PValue::Int(i128::from(u16::from_le_bytes([b[0], b[1]]))));
                }
                b'J' => {
                    let b = self.fixed(at, 4)?;
                    let v = i32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                    self.stack.push(PValue::Int(i128::from(v)));
                }
                0x8a | 0x8b => {
                    let width = if op == 0x8a { 1 } else { 4 };
                    let n = self.length(at, width)?;
                    let b = self.fixed(at, n)?;
                    self.stack.push(long_from_le(b));
                }
                b'I' | b'L' => {
                    let line = self.line(at)?;
                    let text = line.trim().trim_end_matches('L');
                    let value = match (op, text) {
                        (b'I', "01") => PValue::Bool(true),
                        (b'I', "00") => PValue::Bool(false),
                        _ => match text.parse::<i128>() {
                            Ok(v) => PValue::Int(v),
                            Err(_) if !text.is_empty() && is_decimal(text) => PValue::BigInt,
                            Err(_) => {
                                return Err(
                                    self.error(at, format!("invalid integer literal {text:?}"))
                                );
                            }
                        },
                    };
                    self.stack.push(value);
                }
                // Floats.
                b'G' => {
                    let b = self.fixed(at, 8)?;
                    let mut be = [0u8; 8];
                    be.copy_from_slice(b);
                    self.stack.push(PValue::Float(f64::from_be_bytes(be)));
                }
                b'F' => {
                    let line = self.line(at)?;
                    let v = line.trim().parse::<f64>().map_err(|_| {
                        self.error(at, format!("invalid float literal {:?}", line.trim()))
                    })?;
                    self.stack.push(PValue::Float(v));
                }
                // Text.
                0x8c | b'X' | 0x8d => {
                    let width = match op {
                        0x8c => 1,
                        b'X' => 4,
                        _ => 8,
                    };
                    let n = self.length(at, width)?;
                    let b = self.fixed(at, n)?;
                    self.stack
                        .push(PValue::Str(String::from_utf8_lossy(b).as_ref().into()));
                }
                b'V' => {
                    let line = self.line(at)?;
                    self.stack
                        .push(PValue::Str(raw_unicode_unescape(&line).as_str().into()));
                }
                // Protocol 0–2 byte strings, read as text (Python 3's default, ASCII).
                b'U' | b'T' => {
                    let width = if op == b'U' { 1 } else { 4 };
                    let n = self.length(at, width)?;
                    let b = self.fixed(at, n)?;
                    self.stack
                        .push(PValue::Str(String::from_utf8_lossy(b).as_ref().into()));
                }
                b'S' => {
                    let line = self.line(at)?;
                    let text = line.trim();
                    let unquoted = text
                        .strip_prefix('\'')
                        .and_then(|t| t.strip_suffix('\''))
                        .or_else(|| text.strip_prefix('"').and_then(|t| t.strip_suffix('"')))
                        .ok_or_else(|| self.error(at, "STRING literal without quotes"))?;
                    self.stack.push(PValue::Str(unquoted.into()));
                }
                // Bytes.
                b'C' | b'B' | 0x8e | 0x96 => {
                    let width = match op {
                        b'C' => 1,
                        b'B' => 4,
                        _ => 8,
                    };
                    let n = self.length(at, width)?;
                    let b = self.fixed(at, n)?;
                    self.stack.push(PValue::Bytes(b.into()));
                }
                // Containers.
                b']' => self.stack.push(PValue::container(Kind::List, Vec::new())),
                b')' => self.stack.push(PValue::container(Kind::Tuple, Vec::new())),
                b'}' => self.stack.push(PValue::container(Kind::Dict, Vec::new())),
                0x8f => self.stack.push(PValue::container(Kind::Set, Vec::new())),
                b'l' | b't' | 0x91 => {
                    let items = self.pop_mark(at)?;
                    let kind = match op {
                        b'l' => Kind::List,
                        b't' => Kind::Tuple,
                        _ => Kind::FrozenSet,
                    };
                    self.stack.push(PValue::container(kind, items));
                }
                b'd' => {
                    let items = self.pop_mark(at)?;
                    if items.len() % 2 != 0 {
                        return Err(self.error(at, "DICT with an odd number of items"));
                    }
                    self.stack.push(PValue::container(Kind::Dict, items));
                }
                0x85..=0x87 => {
                    let n = usize::from(op - 0x84);
                    if self.stack.len() < self.floor() + n {
                        return Err(self.error(at, "stack underflow (TUPLEn)"));
                    }
                    let items = self.stack.split_off(self.stack.len() - n);
                    self.stack.push(PValue::container(Kind::Tuple, items));
                }
                b'a' => {
                    let value = self.pop(at, "APPEND")?;
                    self.extend_top(at, &[Kind::List], vec![value])?;
                }
                b'e' => {
                    let items = self.pop_mark(at)?;
                    self.extend_top(at, &[Kind::List], items)?;
                }
                b's' => {
                    let value = self.pop(at, "SETITEM")?;
                    let key = self.pop(at, "SETITEM")?;
                    self.extend_top(at, &[Kind::Dict], vec![key, value])?;
                }
                b'u' => {
                    let items = self.pop_mark(at)?;
                    if items.len() % 2 != 0 {
                        return Err(self.error(at, "SETITEMS with an odd number of items"));
                    }
                    self.extend_top(at, &[Kind::Dict], items)?;
                }
                0x90 => {
                    let items = self.pop_mark(at)?;
                    self.extend_top(at, &[Kind::Set], items)?;
                }
                // Stack manipulation.
                b'(' => self.marks.push(self.stack.len()),
                b'0' => {
                    if self.stack.len() > self.floor() {
                        self.stack.pop();
                    } else if self.marks.pop().is_none() {
                        return Err(self.error(at, "stack underflow (POP)"));
                    }
                }
                b'1' => {
                    self.pop_mark(at)?;
                }
                b'2' => {
                    let top = self
                        .stack
                        .last()
                        .cloned()
                        .ok_or_else(|| self.error(at, "stack underflow (DUP)"))?;
                    self.stack.push(top);
                }
                // Memo.
                b'g' | b'h' | b'j' => {
                    let id = match op {
                        b'g' => self.decimal_line(at)?,
                        b'h' => u64::from(self.fixed(at, 1)?[0]),
                        _ => self.length(at, 4)? as u64,
                    };
                    let value = self
                        .memo
                        .get(&id)
                        .cloned()
                        .ok_or_else(|| self.error(at, format!("memo entry {id} is missing")))?;
                    self.stack.push(value);
                }
                b'p' | b'q' | b'r' | 0x94 => {
                    let id = match op {
                        b'p' => self.decimal_line(at)?,
                        b'q' => u64::from(self.fixed(at, 1)?[0]),
                        b'r' => self.length(at, 4)? as u64,
                        _ => self.memo.len() as u64,
                    };
                    let top = self
                        .stack
                        .last()
                        .cloned()
                        .ok_or_else(|| self.error(at, "stack underflow (memo PUT)"))?;
                    self.memo.insert(id, top);
                }
                // Everything that reaches outside plain data.
                b'c' | b'i' => {
                    let module = self.line(at)?;
                    let name = self.line(at)?;
                    let opcode = if op == b'c' { "GLOBAL" } else { "INST" };
                    return Err(refuse(at, opcode, format!("{module}.{name}")));
                }
                0x93 => {
                    let mut names = self.stack.iter().rev().take(2).map(|v| match v {
                        PValue::Str(s) => s.to_string(),
                        _ => "?".to_string(),
                    });
                    let name = names.next().unwrap_or_default();
                    let module = names.next().unwrap_or_default();
                    return Err(refuse(at, "STACK_GLOBAL", format!("{module}.{name}")));
                }
                b'R' => return Err(refuse(at, "REDUCE", "(a call)".to_string())),
                b'b' => return Err(refuse(at, "BUILD", "(object state)".to_string())),
                b'o' => return Err(refuse(at, "OBJ", "(an object)".to_string())),
                0x81 => return Err(refuse(at, "NEWOBJ", "(an object)".to_string())),
                0x92 => return Err(refuse(at, "NEWOBJ_EX", "(an object)".to_string())),
                0x82..=0x84 => return Err(refuse(at, "EXT", "(a registered global)".to_string())),
                b'P' => {
                    let id = self.line(at)?;
                    return Err(refuse(at, "PERSID", format!("(persistent id {id})")));
                }
                b'Q' => return Err(refuse(at, "BINPERSID", "(a persistent id)".to_string())),
                0x97 | 0x98 => {
                    return Err(self.error(at, "out-of-band buffers are not supported"));
                }
                other => {
                    return Err(self.error(at, format!("unknown pickle opcode 0x{other:02x}")));
                }
            }
        }
    }

    fn error(&self, at: usize, message: impl Into<String>) -> (u64, Problem) {
        (at as u64, Problem::Pickle(message.into()))
    }

    /// The next `n` bytes, or an error if the file ends first.
    fn fixed(&mut self, at: usize, n: usize) -> Step<&'a [u8]> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&end| end <= self.bytes.len())
            .ok_or_else(|| {
                self.error(
                    at,
                    format!(
                        "truncated pickle: the opcode at byte {at} needs {n} more bytes, the file \
                         has {}",
                        self.bytes.len().saturating_sub(self.pos)
                    ),
                )
            })?;
        let (start, bytes) = (self.pos, self.bytes);
        self.pos = end;
        Ok(&bytes[start..end])
    }

    /// A little-endian unsigned length of `width` bytes (1, 4 or 8).
    fn length(&mut self, at: usize, width: usize) -> Step<usize> {
        let b = self.fixed(at, width)?;
        let v = b
            .iter()
            .rev()
            .fold(0u64, |acc, &byte| (acc << 8) | u64::from(byte));
        // A length beyond the file is caught by the `fixed` that follows.
        Ok(usize::try_from(v).unwrap_or(usize::MAX))
    }

    /// A newline-terminated argument (protocol 0).
    fn line(&mut self, at: usize) -> Step<String> {
        let rest = &self.bytes[self.pos..];
        let Some(end) = rest.iter().position(|&b| b == b'\n') else {
            return Err(self.error(at, "truncated pickle: a text argument has no newline"));
        };
        let text = String::from_utf8_lossy(&rest[..end]).into_owned();
        self.pos += end + 1;
        Ok(text)
    }

    fn decimal_line(&mut self, at: usize) -> Step<u64> {
        let line = self.line(at)?;
        line.trim()
            .parse()
            .map_err(|_| self.error(at, format!("invalid memo index {:?}", line.trim())))
    }

    /// The stack length below which the current MARK forbids popping.
    fn floor(&self) -> usize {
        self.marks.last().copied().unwrap_or(0)
    }

    fn pop(&mut self, at: usize, opcode: &str) -> Step<PValue> {
        if self.stack.len() <= self.floor() {
            return Err(self.error(at, format!("stack underflow ({opcode})")));
        }
        self.stack
            .pop()
            .ok_or_else(|| self.error(at, format!("stack underflow ({opcode})")))
    }

    /// The items above the last MARK.
    fn pop_mark(&mut self, at: usize) -> Step<Vec<PValue>> {
        let mark = self
            .marks
            .pop()
            .ok_or_else(|| self.error(at, "no MARK on the stack"))?;
        Ok(self.stack.split_off(mark.min(self.stack.len())))
    }

    /// Appends `items` to the container on top of the stack, which must be of one of `kinds`.
    fn extend_top(&mut self, at: usize, kinds: &[Kind], items: Vec<PValue>) -> Step<()> {
        match self.stack.last() {
            Some(PValue::Container(c)) if kinds.contains(&c.kind) => {
                c.items.borrow_mut().extend(items);
                Ok(())
            }
            Some(other) => Err(self.error(
                at,
                format!(
                    "cannot add items to {} (expected {:?})",
                    other.describe(),
                    kinds
                ),
            )),
            None => Err(self.error(at, "stack underflow (adding items)")),
        }
    }
}

fn refuse(at: usize, opcode: &'static str, name: String) -> (u64, Problem) {
    (at as u64, Problem::PickleGlobal { opcode, name })
}

fn is_decimal(text: &str) -> bool {
    let digits = text.strip_prefix(['-', '+']).unwrap_or(text);
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
}

/// A little-endian two's-complement integer (`LONG1`/`LONG4`).
fn long_from_le(bytes: &[u8]) -> PValue {
    if bytes.is_empty() {
        return PValue::Int(0);
    }
    if bytes.len() > 16 {
        // Beyond 128 bits unless it is a sign extension of a smaller value.
        let (low, high) = bytes.split_at(16);
        let fill = if low[15] & 0x80 != 0 { 0xFF } else { 0x00 };
        if high.iter().any(|&b| b != fill) {
            return PValue::BigInt;
        }
        return long_from_le(low);
    }
    let negative = bytes[bytes.len() - 1] & 0x80 != 0;
    let mut buf = [if negative { 0xFF } else { 0x00 }; 16];
    buf[..bytes.len()].copy_from_slice(bytes);
    PValue::Int(i128::from_le_bytes(buf))
}

/// Decodes the `\uXXXX` / `\UXXXXXXXX` escapes of protocol 0's raw-unicode-escape text.
fn raw_unicode_unescape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\' {
            let digits = match chars.peek() {
                Some('u') => 4,
                Some('U') => 8,
                _ => 0,
            };
            if digits > 0 {
                let mut lookahead = chars.clone();
                lookahead.next();
                let hex: String = lookahead.by_ref().take(digits).collect();
                let decoded = u32::from_str_radix(&hex, 16)
                    .ok()
                    .and_then(char::from_u32)
                    .filter(|_| hex.len() == digits);
                if let Some(decoded) = decoded {
                    out.push(decoded);
                    chars = lookahead;
                    continue;
                }
            }
        }
        out.push(c);
    }
    out
}

/// The most bytes one opcode's argument may take in a gzip-compressed pickle ([`Framing`]): a
/// memory snapshot holds strings of a few hundred bytes at most.
const MAX_ARGUMENT: usize = 16 << 20;

/// How an opcode's argument is laid out.
enum Argument {
    /// `n` bytes.
    Fixed(usize),
    /// A little-endian length of `n` bytes, then that many bytes.
    Counted(usize),
    /// `n` lines, each ending with `\n` (protocol 0).
    Lines(usize),
}

/// The argument of opcode `op`, or `None` if no protocol (0–5) has that opcode.
fn argument(op: u8) -> Option<Argument> {
    use Argument::{Counted, Fixed, Lines};
    Some(match op {
        b'('
        | b'.'
        | b'0'
        | b'1'
        | b'2'
        | b'N'
        | b'R'
        | b'b'
        | b'a'
        | b'e'
        | b'd'
        | b'}'
        | b'l'
        | b']'
        | b'o'
        | b's'
        | b'u'
        | b't'
        | b')'
        | b'Q'
        | 0x81
        | 0x85..=0x89
        | 0x8f..=0x94
        | 0x97
        | 0x98 => Fixed(0),
        b'K' | b'q' | b'h' | 0x80 | 0x82 => Fixed(1),
        b'M' | 0x83 => Fixed(2),
        b'J' | b'r' | b'j' | 0x84 => Fixed(4),
        // FRAME's length counts the opcodes that follow, which are checked as such.
        b'G' | 0x95 => Fixed(8),
        b'U' | b'C' | 0x8a | 0x8c => Counted(1),
        b'T' | b'X' | b'B' | 0x8b => Counted(4),
        0x8d | 0x8e | 0x96 => Counted(8),
        b'I' | b'L' | b'F' | b'S' | b'V' | b'p' | b'g' | b'P' => Lines(1),
        b'c' | b'i' => Lines(2),
        _ => return None,
    })
}

/// Checks where each opcode of a pickle ends as its bytes arrive, so a gzip-compressed file
/// that turns into something else after a pickle's start is refused at that byte, not after
/// decompressing it all ([`crate::content`]): a byte that is no opcode, an argument over
/// [`MAX_ARGUMENT`], or anything after `STOP` (which [`unpickle`] refuses too).
#[derive(Default)]
pub(crate) struct Framing {
    /// Offset of the next opcode.
    pos: usize,
    stopped: bool,
}

impl Framing {
    /// Checks the opcodes complete in `content` (everything decompressed so far) that were not
    /// checked yet: the offset and what is wrong, if anything is.
    pub(crate) fn advance(&mut self, content: &[u8]) -> Result<(), (u64, String)> {
        while let Some(&op) = content.get(self.pos) {
            let at = self.pos as u64;
            if self.stopped {
                return Err((at, "data after the pickle's STOP opcode".into()));
            }
            let rest = &content[self.pos + 1..];
            let length = match argument(op) {
                None => return Err((at, format!("{op:#04x} is no pickle opcode"))),
                Some(Argument::Fixed(n)) => n,
                Some(Argument::Counted(width)) => {
                    let Some(count) = rest.get(..width) else {
                        return Ok(());
                    };
                    let count = count.iter().rev().fold(0u64, |n, &b| {
                        n.saturating_mul(256).saturating_add(u64::from(b))
                    });
                    match usize::try_from(count) {
                        Ok(count) if count <= MAX_ARGUMENT => width + count,
                        _ => return Err((at, format!("an argument of {count} bytes"))),
                    }
                }
                Some(Argument::Lines(lines)) => {
                    let window = &rest[..rest.len().min(MAX_ARGUMENT)];
                    let ends = window.iter().enumerate().filter(|(_, b)| **b == b'\n');
                    match ends.map(|(i, _)| i).nth(lines - 1) {
                        Some(last) => last + 1,
                        None if window.len() == MAX_ARGUMENT => {
                            return Err((at, format!("a line over {MAX_ARGUMENT} bytes")));
                        }
                        None => return Ok(()),
                    }
                }
            };
            if rest.len() < length {
                return Ok(());
            }
            self.pos += 1 + length;
            self.stopped = op == b'.';
        }
        Ok(())
    }
}
