//! PyTorch profiler (Kineto) traces, and Chrome trace-event JSON in general: GPU memory events.
//!
//! With `profile_memory=True` the profiler writes one instant event per allocation and per
//! free of the caching allocator:
//! `{"ph": "i", "name": "[memory]", "ts": µs, "args": {"Device Type": 1, "Device Id": 0,
//! "Addr": …, "Bytes": ±n, "Total Allocated": …, "Total Reserved": …}}`; `Bytes` > 0 allocates
//! at `Addr`, `Bytes` < 0 frees the block at `Addr`. `Device Type` is `c10::DeviceType`: 0 CPU,
//! 1 CUDA (also what ROCm builds report); only CUDA events are device memory, the others are
//! counted and ignored, as are 0-byte events. The document is either an object with a
//! `traceEvents` array (what Kineto writes) or a bare array of events (the Chrome "JSON Array
//! Format").
//!
//! # Reading 50–100 MB of JSON quickly
//!
//! The document is decoded in one pass with `serde_json`, through seeds and visitors that look
//! at three fields of each event (`name`, `ts`, `args`) and skip everything else without
//! building it (no `serde_json::Value`, no string copies: keys are matched in place). Only
//! memory events are kept, as 40-byte records. Errors carry the line and column and the index
//! of the event being read (`traceEvents[i]`).
//!
//! # Order
//!
//! Events are not written in time order: the profiler writes each thread's events together,
//! and the backward pass frees on the autograd thread what the main thread allocated. The
//! memory events are therefore sorted by `ts` (stable: file order on equal timestamps) before
//! frees are paired with allocations. Timestamps are compared as `f64`, which rounds
//! monotonically, so two events are never swapped; those closer than the precision of an f64
//! (a quarter of a microsecond at today's epoch times) keep their file order.

use std::fmt;
use std::path::Path;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::error::{ImportError, Location, Problem};
use super::recording::DeviceSummary;
use super::{AddressPairing, ImportOptions, Recording, Source, choose_device};

/// `c10::DeviceType::CUDA`.
const CUDA_DEVICE_TYPE: i128 = 1;

/// One GPU memory event, in file order.
#[derive(Clone, Copy, Debug)]
struct MemEvent {
    /// Index in the event array.
    index: u64,
    ts: f64,
    device: u32,
    /// `None` when the event has no `Addr`.
    addr: Option<u64>,
    bytes: i64,
}

/// What the decoder keeps while it walks the document.
#[derive(Debug, Default)]
struct Sink {
    /// CUDA memory events.
    memory: Vec<MemEvent>,
    /// `[memory]` events of other device types (CPU, …).
    other_device_events: u64,
    saw_trace_events: bool,
    /// While inside the event array: the index of the event being read.
    current: Option<u64>,
}

/// Imports the trace in `bytes` (already decompressed).
pub(crate) fn import(
    bytes: &[u8],
    source: Source,
    options: &ImportOptions,
) -> Result<Recording, ImportError> {
    let path = source.path.clone();
    let path = path.as_path();
    let mut sink = Sink::default();
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let parsed = Document { sink: &mut sink }
        .deserialize(&mut de)
        .and_then(|()| {
            if sink.saw_trace_events {
                de.end()
            } else {
                Ok(())
            }
        });
    if let Err(err) = parsed {
        return Err(json_error(path, &err, sink.current));
    }
    if !sink.saw_trace_events {
        return Err(ImportError::new(
            path,
            Location::File,
            Problem::Structure(
                "a JSON object without `traceEvents`: not a PyTorch profiler / Chrome trace"
                    .to_string(),
            ),
        ));
    }
    pair(path, source, sink, options)
}

/// Turns the memory events into a recording of the chosen device.
fn pair(
    path: &Path,
    source: Source,
    sink: Sink,
    options: &ImportOptions,
) -> Result<Recording, ImportError> {
    let mut devices: Vec<DeviceSummary> = Vec::new();
    for event in &sink.memory {
        let at = match devices.binary_search_by_key(&event.device, |d| d.device) {
            Ok(at) => at,
            Err(at) => {
                devices.insert(
                    at,
                    DeviceSummary {
                        device: event.device,
                        allocs: 0,
                        frees: 0,
                    },
                );
                at
            }
        };
        match event.bytes.signum() {
            1 => devices[at].allocs += 1,
            -1 => devices[at].frees += 1,
            _ => {}
        }
    }
    let Some(device) = choose_device(path, &devices, options)? else {
        let mut message = "no GPU memory events: the trace has no `[memory]` event of Device \
                           Type 1 (CUDA) that allocates or frees (profile with \
                           torch.profiler.profile(profile_memory=True) on a CUDA device)"
            .to_string();
        if sink.other_device_events > 0 {
            message.push_str(&format!(
                "; it has {} memory events of other devices (CPU)",
                sink.other_device_events
            ));
        }
        return Err(ImportError::new(
            path,
            Location::File,
            Problem::NoEvents(message),
        ));
    };
    let mut events: Vec<MemEvent> = sink
        .memory
        .into_iter()
        .filter(|e| e.device == device)
        .collect();
    let with_addr = events.iter().filter(|e| e.addr.is_some()).count();
    if with_addr == 0 {
        return Err(ImportError::new(
            path,
            Location::File,
            Problem::NoAddresses {
                memory_events: events.len() as u64,
            },
        ));
    }
    if let Some(missing) = events.iter().find(|e| e.addr.is_none()) {
        return Err(ImportError::new(
            path,
            Location::Event(missing.index),
            Problem::Structure(format!(
                "this GPU [memory] event has no `Addr`, while {with_addr} others have one"
            )),
        ));
    }
    // Stable: equal timestamps keep file order.
    events.sort_by(|a, b| a.ts.total_cmp(&b.ts));
    let mut pairing = AddressPairing::default();
    for event in &events {
        let addr = event.addr.unwrap_or_default();
        let time_us = (event.ts.is_finite() && event.ts >= 0.0).then_some(event.ts as u64);
        match event.bytes.signum() {
            1 => pairing.alloc(addr, event.bytes.unsigned_abs(), time_us),
            -1 => pairing.free(addr, Some(event.bytes.unsigned_abs()), time_us),
            _ => pairing.ignore(),
        }
    }
    let recording = pairing.finish(source).map_err(|err| {
        ImportError::new(path, Location::File, Problem::Structure(err.to_string()))
    })?;
    Ok(recording.with_devices(device, devices))
}

/// A serde_json error with its line, column and the event being read.
fn json_error(path: &Path, err: &serde_json::Error, current: Option<u64>) -> ImportError {
    let (line, column) = (err.line() as u64, err.column() as u64);
    let message = err.to_string();
    let suffix = format!(" at line {line} column {column}");
    let message = message
        .strip_suffix(&suffix)
        .unwrap_or(&message)
        .to_string();
    let problem = if err.is_eof() {
        Problem::Json(format!("{message} (truncated JSON?)"))
    } else {
        Problem::Json(message)
    };
    ImportError::new(
        path,
        Location::Json {
            line,
            column,
            path: current.map(|i| format!("traceEvents[{i}]")),
        },
        problem,
    )
}

// ---------------------------------------------------------------------------------------------
// The document: `{"traceEvents": [...], ...}` or `[...]`
// ---------------------------------------------------------------------------------------------

struct Document<'s> {
    sink: &'s mut Sink,
}

impl<'de> DeserializeSeed<'de> for Document<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Document<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a trace object with `traceEvents`, or an array of trace events")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<Key>()? {
            if key == Key::TraceEvents && !self.sink.saw_trace_events {
                self.sink.saw_trace_events = true;
                map.next_value_seed(EventArray {
                    sink: &mut *self.sink,
                })?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<(), A::Error> {
        self.sink.saw_trace_events = true;
        EventArray { sink: self.sink }.visit_seq(seq)
    }
}

struct EventArray<'s> {
    sink: &'s mut Sink,
}

impl<'de> DeserializeSeed<'de> for EventArray<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for EventArray<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of trace events")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut index = 0u64;
        loop {
            self.sink.current = Some(index);
            let Some(event) = seq.next_element_seed(EventSeed { index })? else {
                break;
            };
            if let Some(event) = event {
                self.sink.absorb(event).map_err(de::Error::custom)?;
            }
            index += 1;
        }
        self.sink.current = None;
        Ok(())
    }
}

/// The fields of one event the importer looks at.
#[derive(Debug, Default)]
struct RawEvent {
    index: u64,
    is_memory: bool,
    ts: Number,
    args: MemArgs,
}

impl Sink {
    /// Keeps a memory event; the error message is for the event being read.
    fn absorb(&mut self, event: RawEvent) -> Result<(), String> {
        if !event.is_memory {
            return Ok(());
        }
        let args = &event.args;
        let device_type = args
            .device_type
            .integer()
            .ok_or_else(|| "a [memory] event without an integer `args.Device Type`".to_string())?;
        if device_type != CUDA_DEVICE_TYPE {
            self.other_device_events += 1;
            return Ok(());
        }
        let device = args
            .device_id
            .integer()
            .and_then(|id| u32::try_from(id).ok())
            .ok_or_else(|| {
                format!(
                    "a CUDA [memory] event whose `args.Device Id` is {}, expected a device number",
                    args.device_id
                )
            })?;
        let bytes = args
            .bytes
            .integer()
            .and_then(|b| i64::try_from(b).ok())
            .ok_or_else(|| {
                format!(
                    "a CUDA [memory] event whose `args.Bytes` is {}, expected an integer",
                    args.bytes
                )
            })?;
        let addr = match args.addr {
            Number::Missing => None,
            other => Some(
                other
                    .integer()
                    .and_then(|a| u64::try_from(a).ok())
                    .ok_or_else(|| {
                        format!(
                            "a CUDA [memory] event whose `args.Addr` is {other}, expected an \
                             address"
                        )
                    })?,
            ),
        };
        let ts = event.ts.float().ok_or_else(|| {
            format!(
                "a CUDA [memory] event whose `ts` is {}, expected a number",
                event.ts
            )
        })?;
        self.memory.push(MemEvent {
            index: event.index,
            ts,
            device,
            addr,
            bytes,
        });
        Ok(())
    }
}

/// Decodes one element of the event array: `Some` for an object, an error for anything else.
struct EventSeed {
    index: u64,
}

impl<'de> DeserializeSeed<'de> for EventSeed {
    type Value = Option<RawEvent>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for EventSeed {
    type Value = Option<RawEvent>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a trace event object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut event = RawEvent {
            index: self.index,
            ..RawEvent::default()
        };
        while let Some(key) = map.next_key::<Key>()? {
            match key {
                Key::Name => event.is_memory = map.next_value::<IsMemory>()?.0,
                Key::Ts => event.ts = map.next_value()?,
                Key::Args => event.args = map.next_value()?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Some(event))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, _seq: A) -> Result<Self::Value, A::Error> {
        Err(de::Error::custom(
            "a trace event is an array, not an object: this looks like the raw memory timeline \
             of HolisticTraceAnalysis / export_memory_timeline ([ts, action, bytes, category]), \
             which has no addresses and cannot give lifetimes",
        ))
    }
}

// ---------------------------------------------------------------------------------------------
// Keys, names and lenient numbers, matched in place without copying
// ---------------------------------------------------------------------------------------------

/// The keys the importer looks at, in events, in `args` and at the top level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Key {
    TraceEvents,
    Name,
    Ts,
    Args,
    DeviceType,
    DeviceId,
    Addr,
    Bytes,
    Other,
}

impl<'de> de::Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Key, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_str<E: de::Error>(self, key: &str) -> Result<Key, E> {
                Ok(match key {
                    "traceEvents" => Key::TraceEvents,
                    "name" => Key::Name,
                    "ts" => Key::Ts,
                    "args" => Key::Args,
                    "Device Type" => Key::DeviceType,
                    "Device Id" => Key::DeviceId,
                    "Addr" => Key::Addr,
                    "Bytes" => Key::Bytes,
                    _ => Key::Other,
                })
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

/// Whether an event's `name` is `[memory]` (any other value, of any type, is not).
struct IsMemory(bool);

impl<'de> de::Deserialize<'de> for IsMemory {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<IsMemory, D::Error> {
        struct NameVisitor;
        impl<'de> Visitor<'de> for NameVisitor {
            type Value = IsMemory;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an event name")
            }
            fn visit_str<E: de::Error>(self, name: &str) -> Result<IsMemory, E> {
                Ok(IsMemory(name == "[memory]"))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<IsMemory, E> {
                Ok(IsMemory(false))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<IsMemory, E> {
                Ok(IsMemory(false))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<IsMemory, E> {
                Ok(IsMemory(false))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<IsMemory, E> {
                Ok(IsMemory(false))
            }
            fn visit_unit<E: de::Error>(self) -> Result<IsMemory, E> {
                Ok(IsMemory(false))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<IsMemory, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(IsMemory(false))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<IsMemory, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(IsMemory(false))
            }
        }
        deserializer.deserialize_any(NameVisitor)
    }
}

/// A JSON value read leniently as a number: other events may put anything under these keys, so
/// a non-number is only an error for the memory events that need it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
enum Number {
    #[default]
    Missing,
    Int(i128),
    Float(f64),
    /// Present but not a number (a string that is not one, a bool, an object, …).
    Other,
}

impl Number {
    /// The value as an integer (a float only if it is integral).
    fn integer(self) -> Option<i128> {
        match self {
            Number::Int(v) => Some(v),
            Number::Float(v) if v.is_finite() && v.fract() == 0.0 && v.abs() < 1e38 => {
                Some(v as i128)
            }
            _ => None,
        }
    }

    fn float(self) -> Option<f64> {
        match self {
            Number::Int(v) => Some(v as f64),
            Number::Float(v) if v.is_finite() => Some(v),
            _ => None,
        }
    }
}

impl fmt::Display for Number {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Number::Missing => f.write_str("missing"),
            Number::Int(v) => write!(f, "{v}"),
            Number::Float(v) => write!(f, "{v}"),
            Number::Other => f.write_str("not a number"),
        }
    }
}

impl<'de> de::Deserialize<'de> for Number {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Number, D::Error> {
        struct NumberVisitor;
        impl<'de> Visitor<'de> for NumberVisitor {
            type Value = Number;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Number, E> {
                Ok(Number::Int(i128::from(v)))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Number, E> {
                Ok(Number::Int(i128::from(v)))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Number, E> {
                Ok(Number::Float(v))
            }
            /// Some exporters write addresses as strings, decimal or `0x…`.
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Number, E> {
                let v = v.trim();
                let parsed = match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
                    Some(hex) => i128::from_str_radix(hex, 16).ok(),
                    None => v.parse().ok(),
                };
                Ok(parsed.map_or(Number::Other, Number::Int))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Number, E> {
                Ok(Number::Other)
            }
            fn visit_unit<E: de::Error>(self) -> Result<Number, E> {
                Ok(Number::Other)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Number, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Number::Other)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Number, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Number::Other)
            }
        }
        deserializer.deserialize_any(NumberVisitor)
    }
}

/// The memory fields of an event's `args` (absent fields stay [`Number::Missing`]; `args` that
/// is not an object counts as empty).
#[derive(Clone, Copy, Debug, Default)]
struct MemArgs {
    device_type: Number,
    device_id: Number,
    addr: Number,
    bytes: Number,
}

impl<'de> de::Deserialize<'de> for MemArgs {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<MemArgs, D::Error> {
        struct ArgsVisitor;
        impl<'de> Visitor<'de> for ArgsVisitor {
            type Value = MemArgs;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("event args")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<MemArgs, A::Error> {
                let mut args = MemArgs::default();
                while let Some(key) = map.next_key::<Key>()? {
                    match key {
                        Key::DeviceType => args.device_type = map.next_value()?,
                        Key::DeviceId => args.device_id = map.next_value()?,
                        Key::Addr => args.addr = map.next_value()?,
                        Key::Bytes => args.bytes = map.next_value()?,
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(args)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<MemArgs, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(MemArgs::default())
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<MemArgs, E> {
                Ok(MemArgs::default())
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<MemArgs, E> {
                Ok(MemArgs::default())
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<MemArgs, E> {
                Ok(MemArgs::default())
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<MemArgs, E> {
                Ok(MemArgs::default())
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<MemArgs, E> {
                Ok(MemArgs::default())
            }
            fn visit_unit<E: de::Error>(self) -> Result<MemArgs, E> {
                Ok(MemArgs::default())
            }
        }
        deserializer.deserialize_any(ArgsVisitor)
    }
}
