//! Round trips, corruptions and concurrency of the trace format, writer and reader.

use super::format::{self, kind};
use super::*;
use crate::event::{CopyKind, Event, EventKind, MemKind};

use crate::test_support::TempPath;

fn header() -> TraceHeader {
    TraceHeader {
        word_size: 8,
        clock: Clock::MonotonicSinceStart,
        start_unix_ns: 1_700_000_000_123_456_789,
        pid: 4242,
        device_name: "Simulated GPU ünicode".into(),
        device_total_memory: 16 << 30,
        command_line: vec!["python".into(), "train.py".into(), "--epochs=1".into()],
    }
}

fn ev(time_ns: u64, kind: EventKind) -> Event {
    Event::new(time_ns, kind)
}

/// One event of every kind and variant, with edge values (huge ids, time going backwards).
fn every_kind() -> Vec<Event> {
    vec![
        ev(
            10,
            EventKind::KernelName {
                kernel: 0,
                name: "void gemm<float>(float*, int) → ü".into(),
            },
        ),
        ev(
            20,
            EventKind::Malloc {
                id: 1,
                addr: 0x7f00_0000_0000,
                size: 1 << 20,
                kind: MemKind::Device,
                stream: 0,
            },
        ),
        ev(
            25,
            EventKind::Malloc {
                id: u64::MAX,
                addr: u64::MAX,
                size: u64::MAX,
                kind: MemKind::PinnedHost,
                stream: u64::MAX,
            },
        ),
        ev(
            30,
            EventKind::Malloc {
                id: 3,
                addr: 0x1000,
                size: 512,
                kind: MemKind::Async,
                stream: 0xdead_beef,
            },
        ),
        ev(
            31,
            EventKind::Malloc {
                id: 4,
                addr: 0x2000,
                size: 0,
                kind: MemKind::Managed,
                stream: 0,
            },
        ),
        // Time goes backwards (events from two threads reach the writer out of order).
        ev(
            5,
            EventKind::Launch {
                kernel: 0,
                stream: 7,
                layout_known: true,
                touched: smallvec::smallvec![1, 3, u64::MAX],
            },
        ),
        ev(
            40,
            EventKind::Launch {
                kernel: u32::MAX,
                stream: 0,
                layout_known: false,
                touched: smallvec::smallvec![],
            },
        ),
        ev(
            50,
            EventKind::Memcpy {
                dst: Some(1),
                src: None,
                bytes: 4096,
                kind: CopyKind::HostToDevice,
                stream: 0,
                asynchronous: false,
            },
        ),
        ev(
            51,
            EventKind::Memcpy {
                dst: None,
                src: Some(1),
                bytes: 1,
                kind: CopyKind::DeviceToHost,
                stream: 7,
                asynchronous: true,
            },
        ),
        ev(
            51,
            EventKind::GraphLaunch {
                exec: 0x5555_0000_1230,
                stream: 7,
                nodes: 3,
            },
        ),
        ev(
            52,
            EventKind::Memcpy {
                dst: Some(3),
                src: Some(1),
                bytes: 0,
                kind: CopyKind::Default,
                stream: 7,
                asynchronous: true,
            },
        ),
        ev(
            53,
            EventKind::Memcpy {
                dst: None,
                src: None,
                bytes: 8,
                kind: CopyKind::HostToHost,
                stream: 0,
                asynchronous: false,
            },
        ),
        ev(
            54,
            EventKind::Memcpy {
                dst: Some(1),
                src: Some(1),
                bytes: 8,
                kind: CopyKind::DeviceToDevice,
                stream: 0,
                asynchronous: false,
            },
        ),
        ev(
            60,
            EventKind::Memset {
                dst: Some(3),
                bytes: 512,
                stream: 0,
                asynchronous: false,
            },
        ),
        ev(
            61,
            EventKind::Memset {
                dst: None,
                bytes: 16,
                stream: 9,
                asynchronous: true,
            },
        ),
        ev(
            70,
            EventKind::Free {
                id: 3,
                stream: 0xdead_beef,
            },
        ),
        ev(u64::MAX, EventKind::Free { id: 1, stream: 0 }),
        ev(
            0,
            EventKind::Free {
                id: u64::MAX,
                stream: 0,
            },
        ),
    ]
}

/// Encodes a trace in memory without the writer thread; returns the bytes and the offset of
/// each record.
fn encode(header: &TraceHeader, events: &[Event], end: bool) -> (Vec<u8>, Vec<usize>) {
    let mut out = format::encode_header(header).unwrap();
    let mut starts = Vec::new();
    let mut prev = 0;
    let mut body = Vec::new();
    for e in events {
        starts.push(out.len());
        format::encode_event(e, &mut prev, &mut body, &mut out);
    }
    if end {
        starts.push(out.len());
        format::encode_end(
            &EndRecord {
                events_written: events.len() as u64,
                events_lost: 0,
            },
            &mut body,
            &mut out,
        );
    }
    (out, starts)
}

fn read_all(file: &TraceFile) -> Result<Vec<Event>, TraceError> {
    file.events().collect()
}

fn open_bytes(bytes: Vec<u8>) -> Result<TraceFile, TraceError> {
    TraceFile::from_bytes("t.itrace", bytes)
}

/// The error of reading `bytes` to the end (header or record), which must exist.
fn first_error(bytes: Vec<u8>) -> TraceError {
    match open_bytes(bytes) {
        Err(e) => e,
        Ok(file) => read_all(&file).expect_err("expected a corrupt trace"),
    }
}

#[test]
fn every_event_kind_round_trips_through_the_writer() {
    let path = TempPath::new("roundtrip.itrace");
    let events = every_kind();
    let writer = TraceWriter::create(&path.0, header()).unwrap();
    for e in &events {
        writer.record(e.clone());
    }
    let summary = writer.finish().unwrap();
    assert_eq!(summary.events_written, events.len() as u64);
    assert_eq!(summary.events_lost, 0);
    assert_eq!(summary.error, None);
    assert_eq!(
        summary.bytes_written,
        std::fs::metadata(&path.0).unwrap().len()
    );

    for file in [
        TraceFile::open(&path.0).unwrap(),
        TraceFile::read(&path.0).unwrap(),
    ] {
        assert_eq!(file.version(), format::VERSION);
        assert_eq!(file.header(), &header());
        let mut it = file.events();
        let read: Vec<Event> = it.by_ref().map(Result::unwrap).collect();
        assert_eq!(read, events);
        assert_eq!(
            it.end_record(),
            Some(EndRecord {
                events_written: events.len() as u64,
                events_lost: 0
            })
        );
    }
}

#[test]
fn launches_are_compact() {
    let launch = ev(
        1_000,
        EventKind::Launch {
            kernel: 12,
            stream: 0,
            layout_known: true,
            touched: smallvec::smallvec![100, 101, 102],
        },
    );
    let (bytes, starts) = encode(&header(), &[launch], false);
    // kind 1 + length 1 + Δt 1000 (2) + kernel 1 + stream 1 + flags 1 + count 1 + 3 ids (1 each)
    // + device 1
    assert_eq!(bytes.len() - starts[0], 12);
}

#[test]
fn an_empty_trace_and_a_header_with_an_empty_command_line_read_back() {
    let mut h = header();
    h.device_name.clear();
    h.command_line.clear();
    let (bytes, _) = encode(&h, &[], false);
    assert_eq!(bytes.len(), format::MIN_HEADER_LEN as usize);
    let file = open_bytes(bytes).unwrap();
    assert_eq!(file.header(), &h);
    assert_eq!(read_all(&file).unwrap(), vec![]);
}

#[test]
fn unknown_record_kinds_are_skipped_and_their_time_still_counts() {
    let mut out = format::encode_header(&header()).unwrap();
    let mut prev = 0;
    let mut body = Vec::new();
    format::encode_event(
        &ev(100, EventKind::Free { id: 1, stream: 0 }),
        &mut prev,
        &mut body,
        &mut out,
    );
    // Kind 99, time delta +50, then three bytes of future fields.
    out.extend_from_slice(&[99, 4, format::zigzag(50) as u8, 1, 2, 3]);
    // A known kind with a trailing field appended by a later version.
    let mut free = Vec::new();
    let mut prev2 = 150;
    format::encode_event(
        &ev(160, EventKind::Free { id: 2, stream: 0 }),
        &mut prev2,
        &mut body,
        &mut free,
    );
    free[1] += 2; // body length
    free.extend_from_slice(&[0xaa, 0xbb]);
    out.extend_from_slice(&free);
    let file = open_bytes(out).unwrap();
    let events = read_all(&file).unwrap();
    assert_eq!(
        events,
        vec![
            ev(100, EventKind::Free { id: 1, stream: 0 }),
            ev(160, EventKind::Free { id: 2, stream: 0 }),
        ]
    );
}

#[test]
fn a_longer_header_from_a_later_version_is_skipped_over() {
    let mut bytes = format::encode_header(&header()).unwrap();
    let extra = [1u8, 2, 3, 4, 5];
    let new_len = (bytes.len() + extra.len()) as u32;
    bytes[12..16].copy_from_slice(&new_len.to_le_bytes());
    bytes.extend_from_slice(&extra);
    let mut prev = 0;
    let mut body = Vec::new();
    let e = ev(7, EventKind::Free { id: 1, stream: 0 });
    format::encode_event(&e, &mut prev, &mut body, &mut bytes);
    let file = open_bytes(bytes).unwrap();
    assert_eq!(file.header(), &header());
    assert_eq!(read_all(&file).unwrap(), vec![e]);
}

#[test]
fn an_empty_file_is_reported_as_such() {
    let path = TempPath::new("empty.itrace");
    std::fs::write(&path.0, b"").unwrap();
    for result in [
        TraceFile::open(&path.0),
        TraceFile::read(&path.0),
        open_bytes(vec![]),
    ] {
        let err = result.err().unwrap();
        assert!(matches!(err.problem(), Problem::Empty), "{err}");
        assert_eq!(err.offset(), 0);
        assert!(err.to_string().contains("empty"), "{err}");
    }
}

#[test]
fn a_missing_file_names_the_path() {
    let err = TraceFile::open("/nonexistent/dir/x.itrace").err().unwrap();
    assert!(matches!(err.problem(), Problem::Io(_)));
    assert!(
        err.to_string().starts_with("/nonexistent/dir/x.itrace: "),
        "{err}"
    );
}

#[test]
fn wrong_magic_is_not_a_trace() {
    let (mut bytes, _) = encode(&header(), &every_kind(), true);
    bytes[0] = b'X';
    let err = first_error(bytes);
    assert!(matches!(err.problem(), Problem::BadMagic { .. }), "{err}");
    assert_eq!(err.offset(), 0);
    assert!(err.to_string().contains("not an itermem trace"), "{err}");
    // A text file.
    let err = first_error(b"hello, world\n".to_vec());
    assert!(matches!(err.problem(), Problem::BadMagic { .. }), "{err}");
}

#[test]
fn a_future_version_is_refused_at_byte_8() {
    let (mut bytes, _) = encode(&header(), &every_kind(), true);
    bytes[8..10].copy_from_slice(&3u16.to_le_bytes());
    let err = first_error(bytes);
    assert!(
        matches!(
            err.problem(),
            Problem::UnsupportedVersion {
                found: 3,
                supported: 2
            }
        ),
        "{err}"
    );
    assert_eq!(err.offset(), 8);
    assert_eq!(
        err.to_string(),
        "t.itrace: corrupt header at byte 8: unsupported format version 3 (this build of \
         itermem reads versions 1 to 2)"
    );
}

#[test]
fn bad_header_fields_are_reported_at_their_offsets() {
    let (good, _) = encode(&header(), &[], false);
    let cases: Vec<(usize, Vec<u8>, u64)> = vec![
        (10, vec![3], 10),                          // word size
        (11, vec![0], 11),                          // clock
        (12, 41u32.to_le_bytes().to_vec(), 12),     // header length below the minimum
        (36, 0xffffu16.to_le_bytes().to_vec(), 38), // device name past the header
    ];
    for (at, patch, offset) in cases {
        let mut bytes = good.clone();
        bytes[at..at + patch.len()].copy_from_slice(&patch);
        let err = first_error(bytes);
        assert_eq!(err.offset(), offset, "{err}");
        assert!(!err.is_in_record());
    }
    // Header length past the end of the file.
    let mut bytes = good.clone();
    bytes[12..16].copy_from_slice(&10_000u32.to_le_bytes());
    let err = first_error(bytes);
    assert!(
        matches!(
            err.problem(),
            Problem::TruncatedHeader { needed: 10_000, .. }
        ),
        "{err}"
    );
    // A device name that is not UTF-8.
    let mut bytes = good.clone();
    bytes[38] = 0xff;
    let err = first_error(bytes);
    assert!(matches!(err.problem(), Problem::BadUtf8 { .. }), "{err}");
    assert_eq!(err.offset(), 38);
    // An absurd argument count fails at the first argument past the header.
    let mut h = header();
    h.command_line.clear();
    let mut bytes = format::encode_header(&h).unwrap();
    let argc_at = bytes.len() - 4;
    bytes[argc_at..].copy_from_slice(&u32::MAX.to_le_bytes());
    let err = first_error(bytes);
    assert!(
        matches!(err.problem(), Problem::FieldPastEnd { .. }),
        "{err}"
    );
    assert_eq!(err.offset(), argc_at as u64 + 4);
}

#[test]
fn truncation_at_every_offset_is_an_error_at_the_right_offset_or_a_clean_prefix() {
    let events = every_kind();
    let (bytes, starts) = encode(&header(), &events, true);
    let header_len = starts[0];
    for cut in 0..=bytes.len() {
        let result = open_bytes(bytes[..cut].to_vec());
        if cut < header_len {
            let err = result.err().unwrap_or_else(|| panic!("cut {cut}: opened"));
            assert!(!err.is_in_record(), "cut {cut}: {err}");
            if cut == 0 {
                assert!(matches!(err.problem(), Problem::Empty));
            } else {
                assert!(
                    matches!(err.problem(), Problem::TruncatedHeader { .. }),
                    "cut {cut}: {err}"
                );
            }
            continue;
        }
        let file = result.unwrap();
        let read: Result<Vec<Event>, TraceError> = read_all(&file);
        match starts.iter().position(|&s| s == cut) {
            // At a record boundary: the events before it, and no error.
            Some(n) => assert_eq!(read.unwrap(), events[..n.min(events.len())], "cut {cut}"),
            None if cut == bytes.len() => assert_eq!(read.unwrap(), events),
            None => {
                let record = starts.iter().rev().find(|&&s| s < cut).unwrap();
                let err = read.expect_err("truncated record read as valid");
                assert_eq!(err.offset(), *record as u64, "cut {cut}: {err}");
                assert!(err.is_in_record());
                let events_before = file.events().take_while(Result::is_ok).count();
                assert_eq!(
                    events_before,
                    starts.iter().position(|s| s == record).unwrap()
                );
            }
        }
    }
}

#[test]
fn an_absurd_record_length_names_the_record_and_the_file_size() {
    let (mut bytes, starts) = encode(&header(), &every_kind(), false);
    let at = starts[2];
    // Replace the record from `at` on by a kind and a 10-byte varint length of u64::MAX.
    bytes.truncate(at);
    bytes.push(kind::FREE);
    bytes.extend_from_slice(&[0xff; 9]);
    bytes.push(0x01);
    let len = bytes.len();
    let err = first_error(bytes);
    assert_eq!(err.offset(), at as u64);
    assert_eq!(
        err.to_string(),
        format!(
            "t.itrace: corrupt record at byte {at}: length {} runs past the end of the file \
             ({len} bytes)",
            u64::MAX
        )
    );
    // One byte too long.
    let (mut bytes, starts) = encode(&header(), &every_kind(), false);
    let last = *starts.last().unwrap();
    bytes[last + 1] += 1;
    let err = first_error(bytes);
    assert!(
        matches!(err.problem(), Problem::LengthPastEnd { .. }),
        "{err}"
    );
    assert_eq!(err.offset(), last as u64);
}

#[test]
fn an_overlong_varint_is_corrupt() {
    let (mut bytes, _) = encode(&header(), &[], false);
    let at = bytes.len();
    bytes.push(kind::FREE);
    bytes.extend_from_slice(&[0x80; 11]);
    bytes.push(0);
    let err = first_error(bytes);
    assert!(
        matches!(err.problem(), Problem::VarintTooLong { .. }),
        "{err}"
    );
    assert_eq!(err.offset(), at as u64);
    // Bit 64 set in the 10th byte.
    let (mut bytes, _) = encode(&header(), &[], false);
    bytes.push(kind::FREE);
    bytes.extend_from_slice(&[0xff; 9]);
    bytes.push(0x02);
    let err = first_error(bytes);
    assert!(
        matches!(err.problem(), Problem::VarintTooLong { .. }),
        "{err}"
    );
}

/// A record of `kind` with `body`, after a valid header.
fn with_record(record_kind: u8, body: &[u8]) -> (Vec<u8>, usize) {
    let (mut bytes, _) = encode(&header(), &[], false);
    let at = bytes.len();
    bytes.push(record_kind);
    format::put_varint(&mut bytes, body.len() as u64);
    bytes.extend_from_slice(body);
    (bytes, at)
}

#[test]
fn invalid_enum_values_flags_and_ids_are_corrupt_records() {
    let cases: Vec<(u8, Vec<u8>, &str)> = vec![
        // time, id, addr, size, memory kind 9, stream
        (kind::MALLOC, vec![0, 1, 0, 8, 9, 0], "memory kind"),
        // time, flags, bytes, copy kind 7, stream
        (kind::MEMCPY, vec![0, 0, 8, 7, 0], "copy kind"),
        (kind::MEMCPY, vec![0, 0x80, 8, 1, 0], "memcpy flags"),
        (kind::MEMSET, vec![0, 0x04, 8, 0], "memset flags"),
        // time, kernel id 2^32 (varint), ...
        (
            kind::LAUNCH,
            vec![0, 0x80, 0x80, 0x80, 0x80, 0x10, 0, 0, 0],
            "kernel id",
        ),
        (kind::LAUNCH, vec![0, 1, 0, 0x02, 0], "launch flags"),
        (
            kind::KERNEL_NAME,
            vec![0, 0x80, 0x80, 0x80, 0x80, 0x10, 0],
            "kernel id",
        ),
    ];
    for (record_kind, body, field) in cases {
        let (bytes, at) = with_record(record_kind, &body);
        let err = first_error(bytes);
        assert_eq!(err.offset(), at as u64, "{err}");
        assert!(err.is_in_record());
        assert!(err.to_string().contains(field), "{err}");
        assert!(
            matches!(err.problem(), Problem::InvalidValue { .. }),
            "{err}"
        );
    }
}

#[test]
fn kind_zero_bad_utf8_and_overrunning_fields_are_corrupt_records() {
    let (bytes, at) = with_record(0, &[0, 1, 0]);
    let err = first_error(bytes);
    assert!(matches!(err.problem(), Problem::ZeroKind), "{err}");
    assert_eq!(err.offset(), at as u64);

    let (bytes, at) = with_record(kind::KERNEL_NAME, &[0, 1, 2, 0xc3, 0x28]);
    let err = first_error(bytes);
    assert!(matches!(err.problem(), Problem::BadUtf8 { .. }), "{err}");
    assert_eq!(err.offset(), at as u64);

    // A launch claiming a billion touched ids in a 5-byte body.
    let (bytes, at) = with_record(kind::LAUNCH, &[0, 1, 0, 1, 0x80, 0x94, 0xeb, 0xdc, 0x03]);
    let err = first_error(bytes);
    assert!(
        matches!(err.problem(), Problem::FieldPastEnd { .. }),
        "{err}"
    );
    assert_eq!(err.offset(), at as u64);

    // An empty body has no time delta.
    let (bytes, at) = with_record(kind::FREE, &[]);
    let err = first_error(bytes);
    assert_eq!(err.offset(), at as u64);
    assert!(err.to_string().contains("time delta"), "{err}");
}

#[test]
fn random_corruption_never_panics() {
    let (good, _) = encode(&header(), &every_kind(), true);
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..5_000 {
        let mut bytes = good.clone();
        for _ in 0..1 + next() % 4 {
            let i = (next() % bytes.len() as u64) as usize;
            bytes[i] = next() as u8;
        }
        if let Ok(file) = open_bytes(bytes) {
            for item in file.events() {
                if let Err(err) = item {
                    assert!(err.offset() < file.len_bytes());
                }
            }
        }
    }
}

#[test]
fn eight_threads_recording_at_once_lose_nothing() {
    const THREADS: u64 = 8;
    const PER_THREAD: u64 = 5_000;
    let path = TempPath::new("threads.itrace");
    // A small channel, so that senders really block on a full channel.
    let writer = TraceWriter::with_capacity(&path.0, header(), 64).unwrap();
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let writer = &writer;
            s.spawn(move || {
                for i in 0..PER_THREAD {
                    writer.record(ev(
                        i,
                        EventKind::Launch {
                            kernel: t as u32,
                            stream: t,
                            layout_known: true,
                            touched: smallvec::smallvec![i],
                        },
                    ));
                }
            });
        }
    });
    let summary = writer.finish().unwrap();
    assert_eq!(summary.events_written, THREADS * PER_THREAD);
    assert_eq!(summary.events_lost, 0);

    let file = TraceFile::open(&path.0).unwrap();
    let mut next = vec![0u64; THREADS as usize];
    for e in file.events() {
        let e = e.unwrap();
        let EventKind::Launch {
            kernel, touched, ..
        } = e.kind
        else {
            panic!("unexpected {e:?}")
        };
        // Each thread's events arrive complete and in its own order.
        assert_eq!(touched.as_slice(), &[next[kernel as usize]]);
        assert_eq!(e.time_ns, next[kernel as usize]);
        next[kernel as usize] += 1;
    }
    assert_eq!(next, vec![PER_THREAD; THREADS as usize]);
}

#[test]
fn flush_makes_events_readable_before_finish() {
    let path = TempPath::new("flush.itrace");
    let writer = TraceWriter::create(&path.0, header()).unwrap();
    let events = every_kind();
    for e in &events[..5] {
        writer.record(e.clone());
    }
    writer.flush();
    // From another thread too (as a SIGTERM watcher would).
    std::thread::scope(|s| {
        s.spawn(|| writer.flush());
    });
    let file = TraceFile::read(&path.0).unwrap();
    let mut it = file.events();
    let read: Vec<Event> = it.by_ref().map(Result::unwrap).collect();
    assert_eq!(read, events[..5]);
    assert_eq!(it.end_record(), None);

    for e in &events[5..] {
        writer.record(e.clone());
    }
    assert!(writer.flush_timeout(std::time::Duration::from_secs(10)));
    let file = TraceFile::read(&path.0).unwrap();
    assert_eq!(read_all(&file).unwrap(), events);
    writer.finish().unwrap();
}

#[test]
fn dropping_a_writer_finishes_the_file() {
    let path = TempPath::new("drop.itrace");
    {
        let writer = TraceWriter::create(&path.0, header()).unwrap();
        for e in every_kind() {
            writer.record(e);
        }
    }
    let file = TraceFile::open(&path.0).unwrap();
    let mut it = file.events();
    assert_eq!(it.by_ref().count(), every_kind().len());
    assert!(it.end_record().is_some());
}

#[test]
fn creating_a_trace_in_a_missing_directory_fails_cleanly() {
    let err = TraceWriter::create(std::path::Path::new("/nonexistent/dir/t.itrace"), header())
        .err()
        .unwrap();
    assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
}

/// The example at the end of `docs/trace-format.md`, byte for byte.
#[test]
fn the_documented_example_encodes_as_shown() {
    let h = TraceHeader {
        word_size: 8,
        clock: Clock::MonotonicSinceStart,
        start_unix_ns: 0x1122_3344_5566_7788,
        pid: 1234,
        device_name: "GPU".into(),
        device_total_memory: 16 << 30,
        command_line: vec!["./a.out".into()],
    };
    let events = [
        ev(
            1_000,
            EventKind::Malloc {
                id: 1,
                addr: 0x7f00_0000_0000,
                size: 1 << 20,
                kind: MemKind::Device,
                stream: 0,
            },
        ),
        ev(3_000, EventKind::Free { id: 1, stream: 0 }),
    ];
    let (bytes, _) = encode(&h, &events, false);
    let hex: Vec<String> = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let expected = "49 54 45 52 4d 45 4d 00 02 00 08 01 38 00 00 00 \
                    88 77 66 55 44 33 22 11 00 00 00 00 04 00 00 00 \
                    d2 04 00 00 03 00 47 50 55 01 00 00 00 07 00 00 \
                    00 2e 2f 61 2e 6f 75 74 \
                    01 10 d0 0f 01 80 80 80 80 80 e0 1f 80 80 40 00 00 00 \
                    02 05 a0 1f 01 00 00";
    assert_eq!(hex.join(" "), expected);
}

/// A file of version 1 (the example as version 1 wrote it: no device fields) is still read,
/// every event on device 0.
#[test]
fn a_version_1_file_is_read_with_every_event_on_device_0() {
    let hex = "49 54 45 52 4d 45 4d 00 01 00 08 01 38 00 00 00 \
               88 77 66 55 44 33 22 11 00 00 00 00 04 00 00 00 \
               d2 04 00 00 03 00 47 50 55 01 00 00 00 07 00 00 \
               00 2e 2f 61 2e 6f 75 74 \
               01 0f d0 0f 01 80 80 80 80 80 e0 1f 80 80 40 00 00 \
               02 04 a0 1f 01 00";
    let bytes = hex
        .split_whitespace()
        .map(|b| u8::from_str_radix(b, 16).unwrap())
        .collect();
    let file = open_bytes(bytes).unwrap();
    assert_eq!(file.version(), 1);
    let events = read_all(&file).unwrap();
    assert_eq!(events.len(), 2);
    assert!(events.iter().all(|e| e.device == 0));
    assert_eq!(events[1].kind, EventKind::Free { id: 1, stream: 0 });
}

#[test]
fn the_device_of_every_event_round_trips() {
    let events: Vec<Event> = every_kind()
        .into_iter()
        .enumerate()
        .map(|(i, mut e)| {
            if !matches!(e.kind, EventKind::KernelName { .. }) {
                e.device = [0, 1, 7, u32::MAX][i % 4];
            }
            e
        })
        .collect();
    let (bytes, _) = encode(&header(), &events, true);
    let file = open_bytes(bytes).unwrap();
    assert_eq!(read_all(&file).unwrap(), events);
}

#[test]
fn the_writer_can_be_shared_between_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<TraceWriter>();
}

/// A writer in a `static` cannot be moved into `finish`: `close` ends the file, and what comes
/// later is counted, not written.
#[test]
fn close_writes_the_end_record_and_counts_later_events_as_lost() {
    let path = TempPath::new("close.itrace");
    let writer = TraceWriter::create(&path.0, header()).unwrap();
    let events = every_kind();
    for e in &events {
        writer.record(e.clone());
    }
    let summary = writer.close().unwrap();
    assert_eq!(summary.events_written, events.len() as u64);
    assert_eq!(summary.events_lost, 0);
    let file = TraceFile::read(&path.0).unwrap();
    let mut it = file.events();
    assert_eq!(it.by_ref().count(), events.len());
    assert_eq!(
        it.end_record(),
        Some(EndRecord {
            events_written: events.len() as u64,
            events_lost: 0
        })
    );

    writer.record(events[0].clone());
    writer.flush();
    assert_eq!(writer.close().unwrap().events_lost, 1);
    writer.record(events[1].clone());
    let summary = writer.finish().unwrap();
    assert_eq!(summary.events_written, events.len() as u64);
    assert_eq!(summary.events_lost, 2);
    // The file is unchanged since `close`.
    assert_eq!(std::fs::metadata(&path.0).unwrap().len(), file.len_bytes());
}
