//! Tests of the importers: hand-made inputs for every format and boundary convention, malformed
//! inputs, and the real recordings of `../shared/real-traces` (skipped with a message when the
//! folder is absent, as in a fresh clone).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde_pickle::{SerOptions, Value};

use super::pickle::{PValue, unpickle};
use super::*;
use crate::analysis::Iteration;
use crate::detect::DetectorConfig;
use crate::event::{Event, EventKind, MemKind};

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

use crate::test_support::samples::{dict, entry, s};
use crate::test_support::{TempPath, buffer, real_traces, write_trace};

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}

fn hex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

fn recording_of(path: &Path) -> Recording {
    match load(path).unwrap() {
        Loaded::Recording(r) => r,
        Loaded::Instance(_) => panic!("expected a recording"),
    }
}

fn instance_of(path: &Path) -> Instance {
    match load(path).unwrap() {
        Loaded::Instance(i) => i,
        Loaded::Recording(_) => panic!("expected an instance"),
    }
}

fn alloc(id: u64, size: u64) -> AllocEvent {
    AllocEvent::Alloc {
        id,
        size,
        addr: None,
        time_us: None,
    }
}

fn free(id: u64) -> AllocEvent {
    AllocEvent::Free { id, time_us: None }
}

fn source() -> Source {
    Source {
        format: Format::ItermemTrace,
        path: PathBuf::from("synthetic"),
        gzip: false,
    }
}

// ---------------------------------------------------------------------------------------------
// Detection, gzip, errors common to every format
// ---------------------------------------------------------------------------------------------

#[test]
fn formats_are_recognised_by_content_not_name() {
    assert_eq!(
        detect_format(b"ITERMEM\0\x01\x00"),
        Some(Format::ItermemTrace)
    );
    assert_eq!(detect_format(&[0x80, 4, 0x95]), Some(Format::TorchSnapshot));
    assert_eq!(detect_format(b"(dp0\nVx\n"), Some(Format::TorchSnapshot));
    assert_eq!(
        detect_format(b"\xEF\xBB\xBF \n{\"traceEvents\": []}"),
        Some(Format::ChromeTrace)
    );
    assert_eq!(
        detect_format(b"[{\"ph\": \"i\"}]"),
        Some(Format::ChromeTrace)
    );
    assert_eq!(
        detect_format(b"id,lower,upper,size\n0,0,1,8\n"),
        Some(Format::DsaCsv)
    );
    assert_eq!(detect_format(b"\n 3, 0, 4, 16\r\n"), Some(Format::DsaCsv));
    assert_eq!(detect_format(b"a,b,c\n"), None);
    assert_eq!(detect_format(b"\x80\x09"), None);
    assert_eq!(detect_format(b"   \n"), None);

    // A CSV named like a pickle is read as a CSV, a pickle named .csv as a pickle.
    let csv = TempPath::with("instance.pickle", b"id,lower,upper,size\n7,0,2,64\n");
    assert_eq!(instance_of(&csv.0).buffers(), [buffer(7, 0, 2, 64)]);
    let pickle = TempPath::with("snapshot.csv", &snapshot_pickle(&[tiny_device_trace()]));
    assert_eq!(
        recording_of(&pickle.0).source().format,
        Format::TorchSnapshot
    );
}

#[test]
fn gzip_is_transparent_and_damage_is_reported() {
    let text = b"id,lower,upper,size\n0,0,3,10\n1,1,2,20\n";
    let plain = TempPath::with("plain.csv", text);
    let packed = TempPath::with("packed.bin", &gzip(text));
    assert_eq!(instance_of(&plain.0), instance_of(&packed.0));
    assert_eq!(read_dsa_csv(&packed.0).unwrap(), instance_of(&plain.0));

    let json = kineto_json(&[memory_event(5.0, 1, 0, Some(0x100), 64)]);
    let packed = TempPath::with("trace.json.gz", &gzip(json.as_bytes()));
    let recording = recording_of(&packed.0);
    assert!(recording.source().gzip);
    assert_eq!(recording.source().format, Format::ChromeTrace);

    // Truncated gzip: an error naming the file, the gzip stream and the offset reached.
    let whole = gzip(&json.repeat(50).into_bytes());
    let cut = TempPath::with("cut.json.gz", &whole[..whole.len() / 2]);
    let err = load(&cut.0).unwrap_err();
    assert!(matches!(err.problem(), Problem::Gzip { .. }), "{err}");
    let message = err.to_string();
    assert!(message.contains("cut.json.gz (gzip)"), "{message}");
    assert!(message.contains("corrupt or truncated gzip"), "{message}");

    // Corrupt deflate data after a valid header.
    let mut corrupt = gzip(text);
    for b in corrupt.iter_mut().skip(12).take(8) {
        *b ^= 0xA5;
    }
    let bad = TempPath::with("corrupt.gz", &corrupt);
    assert!(matches!(
        load(&bad.0).unwrap_err().problem(),
        Problem::Gzip { .. }
    ));
}

#[test]
fn unreadable_empty_and_unknown_files_are_errors() {
    let missing = std::env::temp_dir().join("itermem-import-test-does-not-exist");
    let err = load(&missing).unwrap_err();
    assert!(matches!(err.problem(), Problem::Io(_)));
    assert!(err.to_string().contains("does-not-exist"));

    let empty = TempPath::with("empty", b"");
    assert!(matches!(
        load(&empty.0).unwrap_err().problem(),
        Problem::Empty
    ));
    let empty_gz = TempPath::with("empty.gz", &gzip(b""));
    let err = load(&empty_gz.0).unwrap_err();
    assert!(matches!(err.problem(), Problem::Empty) && err.gzip());

    let unknown = TempPath::with("unknown.bin", b"GIF89a....");
    let err = load(&unknown.0).unwrap_err();
    let message = err.to_string();
    assert!(matches!(err.problem(), Problem::UnknownFormat { .. }));
    assert!(message.contains("47 49 46 38"), "{message}");
    assert!(message.contains("DSA CSV"), "{message}");
}

/// A gzip file of `head` followed by `mebibytes` MiB of `fill`, built from one compressed MiB
/// repeated as members of a multi-member gzip file: a 10 GiB bomb takes 10 MB and no time.
fn gzip_bomb(head: &[u8], fill: u8, mebibytes: usize) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    let chunk = vec![fill; 1 << 20];
    enc.write_all(&chunk).unwrap();
    let member = enc.finish().unwrap();
    let mut out = gzip(head);
    out.reserve(member.len() * mebibytes);
    for _ in 0..mebibytes {
        out.extend_from_slice(&member);
    }
    out
}

/// The peak resident memory of this process so far (`VmHWM`), in bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

#[test]
fn a_gzip_bomb_of_blanks_stops_after_16_mib_long_before_the_limit() {
    // Issue 14's bomb: 10 MB of gzip expanding to 10 GiB, here a valid start of a profiler
    // trace ("[", then blanks, which JSON allows): issue 36 stops it after 16 MiB, expanding
    // 500 times (the 1 GiB limit stopped it before, having held 1 GiB).
    let bomb = TempPath::with("bomb.json.gz", &gzip_bomb(b"[", b' ', 10 << 10));
    let err = load(&bomb.0).unwrap_err();
    assert!(
        matches!(err.location(), Location::Byte(at) if (16 << 20..17 << 20).contains(at)),
        "{err}"
    );
    assert!(err.gzip());
    let message = err.to_string();
    assert!(
        message.starts_with(&format!("{} (gzip): at byte ", bomb.0.display())),
        "{message}"
    );
    assert!(
        message.contains(":1), past 16777216 bytes more than the 100:1"),
        "{message}"
    );
    // Neither the 10 GiB nor the limit's 1 GiB were held (the test harness included).
    assert!(peak_rss() < 1 << 30, "peak RSS {} bytes", peak_rss());
}

#[test]
fn the_decompression_limit_is_an_option_and_plain_files_have_none() {
    // A valid profiler trace of one allocation, padded to 2 MiB with blanks.
    let mut json = kineto_json(&[memory_event(5.0, 1, 0, Some(0x100), 64)]).into_bytes();
    json.splice(1..1, std::iter::repeat_n(b' ', 2 << 20));
    let packed = TempPath::with("padded.json.gz", &gzip(&json));
    let small = ImportOptions {
        max_decompressed: 1 << 20,
        ..ImportOptions::default()
    };
    let err = load_with(&packed.0, &small).unwrap_err();
    assert!(
        matches!(err.problem(), Problem::DecompressedTooLarge { limit } if *limit == 1 << 20),
        "{err}"
    );
    let message = err.to_string();
    assert!(message.contains("padded.json.gz (gzip)"), "{message}");
    assert!(
        message.contains("more than 1048576 bytes (1.0 MiB)"),
        "{message}"
    );
    assert!(message.contains("`--max-decompressed 4M`"), "{message}");
    // The default limit, or the exact size, reads it.
    assert_eq!(recording_of(&packed.0).events().len(), 1);
    let exact = ImportOptions {
        max_decompressed: json.len() as u64,
        ..ImportOptions::default()
    };
    assert!(load_with(&packed.0, &exact).is_ok());
    // The same content uncompressed is read whatever the limit.
    let plain = TempPath::with("padded.json", &json);
    let Loaded::Recording(recording) = load_with(&plain.0, &small).unwrap() else {
        panic!("expected a recording");
    };
    assert_eq!(recording.events().len(), 1);
}

#[test]
fn gzip_of_no_known_format_is_refused_from_its_first_bytes() {
    // 64 KiB of noise and then 10 GiB of zeros: refused as unknown, not at the limit, so
    // decompression stopped after the head.
    let mut rng = crate::rng::SplitMix64::new(14);
    let noise: Vec<u8> = std::iter::once(b'~')
        .chain((1..64 << 10).map(|_| rng.next_u64() as u8))
        .collect();
    let bomb = TempPath::with("noise.gz", &gzip_bomb(&noise, 0, 10 << 10));
    let err = load(&bomb.0).unwrap_err();
    match err.problem() {
        Problem::UnknownFormat { first_bytes } => assert_eq!(first_bytes[..], noise[..16]),
        other => panic!("{other:?}: {err}"),
    }
    assert!(err.gzip());
    let message = err.to_string();
    assert!(
        message.contains("noise.gz (gzip): unrecognised content (starts with 7e "),
        "{message}"
    );
    // The DSA CSV reader refuses it the same way.
    let err = read_dsa_csv(&bomb.0).unwrap_err();
    assert!(
        matches!(err.problem(), Problem::UnknownFormat { .. }),
        "{err}"
    );
}

// ---------------------------------------------------------------------------------------------
// DSA CSV
// ---------------------------------------------------------------------------------------------

#[test]
fn csv_header_is_optional_and_whitespace_tolerated() {
    let expected = vec![buffer(0, 0, 3, 10), buffer(5, 2, 4, 1 << 40)];
    for text in [
        "id,lower,upper,size\n0,0,3,10\n5,2,4,1099511627776\n",
        "0,0,3,10\n5,2,4,1099511627776",
        "\u{FEFF}ID, Lower, Upper, Size\r\n\r\n 0 , 0 , 3 , 10 \r\n5,2,4,1099511627776\r\n\n",
    ] {
        let instance = parse_dsa_csv("inline.csv", text.as_bytes()).unwrap();
        assert_eq!(instance.buffers(), expected.as_slice(), "{text:?}");
    }
    // Half-open lifetimes are taken as they are: [0, 3) and [3, 5) never overlap.
    let touching = parse_dsa_csv("t.csv", b"0,0,3,10\n1,3,5,10\n").unwrap();
    assert_eq!(touching.peak_live(), 10);
    // The last time read: an `upper` of 2^32 - 2.
    let far = parse_dsa_csv("far.csv", b"0,4294967293,4294967294,8\n").unwrap();
    assert_eq!(far.buffers()[0].upper, u64::from(u32::MAX) - 1);
    assert!(
        parse_dsa_csv("e.csv", b"id,lower,upper,size\n")
            .unwrap()
            .is_empty()
    );
}

#[test]
fn csv_errors_name_the_line_and_byte() {
    let cases: [(&str, u64, u64, &str); 9] = [
        (
            "id,lower,upper,size\n0,0,3,10\n1,2,x,4\n",
            3,
            29,
            "upper is `x`",
        ),
        ("0,0,3,10\n1,2,4\n", 2, 9, "3 fields"),
        ("0,0,3,10\n1,2,4,5,6\n", 2, 9, "5 fields"),
        ("0,0,3,10\n\n1,4,4,8\n", 3, 10, "lower 4 ≥ upper 4"),
        ("0,0,3,10\n1,0,1,0\n", 2, 9, "size 0"),
        ("0,0,3,10\n0,1,2,8\n", 2, 9, "already appears on line 1"),
        ("0,0,3,-1\n", 1, 0, "size is `-1`"),
        // Times end below 2^32 - 1: `upper + 1` fits 32 bits.
        ("0,0,3,10\n1,0,4294967295,8\n", 2, 9, "upper 4294967295;"),
        (
            "0,0,18446744073709551615,8\n",
            1,
            0,
            "upper 18446744073709551615;",
        ),
    ];
    for (text, line, byte, fragment) in cases {
        let err = parse_dsa_csv("bad.csv", text.as_bytes()).unwrap_err();
        assert_eq!(
            err.location(),
            &Location::Line { line, byte },
            "{text:?}: {err}"
        );
        let message = err.to_string();
        assert!(message.contains(fragment), "{text:?}: {message}");
        assert!(
            message.starts_with(&format!("bad.csv: line {line} (byte {byte}): ")),
            "{message}"
        );
    }
    // Through `load`, the error also names the format.
    let file = TempPath::with("bad.csv", b"id,lower,upper,size\n0,0,3,10\n1,2,x,4\n");
    let message = load(&file.0).unwrap_err().to_string();
    assert!(message.contains("(DSA CSV): line 3"), "{message}");
    // read_dsa_csv refuses other formats by name.
    let pickle = TempPath::with("s.pickle", &snapshot_pickle(&[tiny_device_trace()]));
    let err = read_dsa_csv(&pickle.0).unwrap_err();
    assert!(matches!(err.problem(), Problem::WrongKind { .. }), "{err}");
    let csv = TempPath::with("ok.csv", b"0,0,1,8\n");
    let err = load_recording(&csv.0, &ImportOptions::default()).unwrap_err();
    assert!(
        err.to_string().contains("not an allocation recording"),
        "{err}"
    );
    let text = TempPath::with("prose.csv", b"hello world\n");
    assert!(
        read_dsa_csv(&text.0)
            .unwrap_err()
            .to_string()
            .contains("line 1")
    );
}

#[test]
fn real_dsa_benchmarks_load() {
    let Some(root) = real_traces() else { return };
    let capacity = 1 << 20;
    for (name, buffers, tight) in [
        ("A", 154, true),
        ("B", 170, true),
        ("C", 203, false),
        ("D", 213, false),
        ("E", 215, true),
        ("F", 296, true),
        ("G", 308, true),
    ] {
        let path = root.join(format!(
            "dsa-benchmarks/minimalloc-challenging/{name}.1048576.csv"
        ));
        let instance = read_dsa_csv(&path).unwrap();
        assert_eq!(instance.len(), buffers, "{name}");
        // Half-open lifetimes: the peak never exceeds the capacity the file is named after.
        assert!(instance.peak_live() <= capacity, "{name}");
        assert_eq!(instance.peak_live() == capacity, tight, "{name}");
    }
    let somas = read_dsa_csv(root.join("dsa-benchmarks/somas_tensors/resnet50.csv")).unwrap();
    assert_eq!((somas.len(), somas.peak_live()), (1042, 1_515_472_556));
    let iopddl = read_dsa_csv(root.join("dsa-benchmarks/iopddl/G_1.csv")).unwrap();
    assert_eq!(iopddl.len(), 816);
}

// ---------------------------------------------------------------------------------------------
// The restricted unpickler
// ---------------------------------------------------------------------------------------------

#[test]
fn unpickler_reads_plain_data_of_every_protocol() {
    // pickle.dumps([1, -2, 300, 70000, -70000, 2**63, -2**63-1, 2**64+5, 2**200, 1.5, 'héllo',
    // b'\x00\x01', (1,2), (1,2,3,4), {1,2}, frozenset([3]), True, False, None, [], {}], 4)
    let misc4 = hex(
        "80049592000000000000005d94284b014afeffffff4d2c014a701101004a90eefeff8a09000000000000\
         0080008a09ffffffffffffff7fff8a090500000000000000018a1a000000000000000000000000000000\
         0000000000000000000001473ff80000000000008c0668c3a96c6c6f9443020001944b014b028694284b\
         014b024b034b0474948f94284b014b0290284b03919488894e5d947d94652e",
    );
    let value = unpickle(&misc4).unwrap();
    let items = value.list_items().unwrap();
    assert_eq!(items.len(), 21);
    let ints: Vec<Option<u64>> = items[..8].iter().map(PValue::as_u64).collect();
    assert_eq!(
        ints,
        [
            Some(1),
            None,
            Some(300),
            Some(70000),
            None,
            Some(1 << 63),
            None,
            None
        ]
    );
    assert!(matches!(items[1], PValue::Int(-2)));
    assert!(matches!(items[6], PValue::Int(v) if v == -(1i128 << 63) - 1));
    assert!(matches!(items[7], PValue::Int(v) if v == (1i128 << 64) + 5));
    assert!(matches!(items[8], PValue::BigInt));
    assert!(matches!(items[9], PValue::Float(v) if v == 1.5));
    assert_eq!(items[10].as_str(), Some("héllo"));
    assert!(matches!(&items[11], PValue::Bytes(b) if b[..] == [0, 1]));
    assert_eq!(items[13].list_items().map(|t| t.len()), Some(4));
    assert_eq!(items[14].describe(), "a set of 2 items");
    assert_eq!(items[15].describe(), "a set of 1 items");
    assert_eq!(items[16].as_u64(), Some(1));
    assert!(matches!(items[18], PValue::None));
    assert_eq!(items[20].dict_items().map(|d| d.len()), Some(0));

    // Protocol 0 (text opcodes, memo by PUT/GET) and protocol 2 of a snapshot-shaped dict.
    let p0: &[u8] = b"(dp0\nVdevice_traces\np1\n(lp2\n(lp3\n(dp4\nVaction\np5\nValloc\np6\nsVaddr\
        \np7\nI4096\nsVsize\np8\nI512\nsVstream\np9\nI0\nsVframes\np10\n(lp11\n(dp12\nVfilename\
        \np13\nVa.py\np14\nsVline\np15\nI3\nsVname\np16\nVf\np17\nsasa(dp18\ng5\nVfree_requested\
        \np19\nsg7\nI4096\nsg8\nI512\nsg9\nI0\nsg10\n(lp20\nsaasVsegments\np21\n(lp22\ns.";
    let p2 = hex(
        "80027d710028580d0000006465766963655f74726163657371015d71025d7103287d7104285806000000\
         616374696f6e71055805000000616c6c6f63710658040000006164647271074d0010580400000073697a\
         6571084d0002580600000073747265616d71094b0058060000006672616d6573710a5d710b7d710c2858\
         0800000066696c656e616d65710d5804000000612e7079710e58040000006c696e65710f4b0358040000\
         006e616d65711058010000006671117561757d7112286805580e000000667265655f7265717565737465\
         64711368074d001068084d000268094b00680a5d711475656158080000007365676d656e747371155d71\
         16752e",
    );
    for bytes in [p0, &p2[..]] {
        let value = unpickle(bytes).unwrap();
        let traces = value.get("device_traces").unwrap().list_items().unwrap();
        let entries = traces[0].list_items().unwrap();
        assert_eq!(entries.len(), 2);
        assert_eq!(
            entries[1].get("action").unwrap().as_str(),
            Some("free_requested")
        );
        assert_eq!(entries[1].get("addr").unwrap().as_u64(), Some(4096));
        // Through the importer, by content.
        let file = TempPath::with("proto.pickle", bytes);
        let recording = recording_of(&file.0);
        assert_eq!(
            recording.events(),
            [
                AllocEvent::Alloc {
                    id: 0,
                    size: 512,
                    addr: Some(4096),
                    time_us: None
                },
                free(0)
            ]
        );
    }
}

#[test]
fn unpickler_shares_memoized_containers() {
    // c = {'f': 'file'}; pickle.dumps({'x': [c, c, c], 'y': c}, 4): serde-pickle 1.2 fails on
    // this with "recursive structure found" (the real snapshots are full of such sharing).
    let shared = hex(
        "80049525000000000000007d94288c0178945d94287d948c0166948c0466696c65947368036803658c01\
         79946803752e",
    );
    assert!(
        serde_pickle::value_from_slice(&shared, serde_pickle::DeOptions::new()).is_err(),
        "serde-pickle reads shared containers now: src/import/pickle.rs may be retired"
    );
    let value = unpickle(&shared).unwrap();
    let x = value.get("x").unwrap().list_items().unwrap();
    assert_eq!(x.len(), 3);
    for c in x.iter().chain([&value.get("y").unwrap()]) {
        assert_eq!(c.get("f").unwrap().as_str(), Some("file"));
    }
}

#[test]
fn unpickler_refuses_globals_with_their_offset() {
    // pickle.dumps(collections.OrderedDict(a=1), 2): GLOBAL at byte 2.
    let global = hex(
        "800263636f6c6c656374696f6e730a4f726465726564446963740a71002952710158010000006171024b01732e",
    );
    let (offset, problem) = unpickle(&global).unwrap_err();
    assert_eq!(offset, 2);
    assert!(
        matches!(&problem, Problem::PickleGlobal { opcode: "GLOBAL", name } if name == "collections.OrderedDict"),
        "{problem}"
    );
    // pickle.dumps({'device_traces': collections.OrderedDict(a=1)}, 4): STACK_GLOBAL at 57.
    let stack_global = hex(
        "8004953c000000000000007d948c0d6465766963655f747261636573948c0b636f6c6c656374696f6e73\
         948c0b4f726465726564446963749493942952948c0161944b0173732e",
    );
    let (offset, problem) = unpickle(&stack_global).unwrap_err();
    assert_eq!(offset, 57);
    assert!(
        matches!(&problem, Problem::PickleGlobal { opcode: "STACK_GLOBAL", name } if name == "collections.OrderedDict"),
        "{problem}"
    );
    // Through the importer: the file, the byte and the refusal.
    let file = TempPath::with("evil.pickle", &stack_global);
    let message = load(&file.0).unwrap_err().to_string();
    assert!(
        message.contains("evil.pickle (PyTorch memory snapshot): at byte 57: the pickle refers to a Python global"),
        "{message}"
    );
    // Protocol 0 pickles of bytes and sets need globals too: refused, not guessed.
    let (_, problem) = unpickle(b"(lp0\nc_codecs\nencode\np1\n.").unwrap_err();
    assert!(matches!(problem, Problem::PickleGlobal { .. }));
    // One pickle per file: what follows STOP is refused, not ignored.
    let (offset, problem) = unpickle(b"\x80\x02N.\x00\x00").unwrap_err();
    assert_eq!(offset, 4);
    assert_eq!(
        problem.to_string(),
        "2 bytes after the pickle's STOP opcode"
    );
    // A global named with 8 KB of binary: 80 characters of it are quoted, escaped.
    let mut binary = b"(lp0\nc".to_vec();
    binary.extend((0..8000u32).map(|i| [1u8, 0xfe, b'"', b'x'][i as usize % 4]));
    binary.extend_from_slice(b"\nencode\np1\n.");
    let (_, problem) = unpickle(&binary).unwrap_err();
    let message = problem.to_string();
    assert!(message.contains(r#"(GLOBAL \u{1}�\"x\u{1}"#), "{message}");
    assert!(
        message.len() < 600 && !message.contains('\u{1}'),
        "{message}"
    );
    for (bytes, opcode) in [
        (&b"\x80\x02N\x85R."[..], "REDUCE"),
        (b"\x80\x02}b.", "BUILD"),
        (b"\x80\x02\x82\x01.", "EXT"),
        (b"\x80\x02Q.", "BINPERSID"),
    ] {
        let (_, problem) = unpickle(bytes).unwrap_err();
        assert!(
            matches!(problem, Problem::PickleGlobal { opcode: o, .. } if o == opcode),
            "{problem}"
        );
    }
}

#[test]
fn unpickler_reports_damage_without_panicking() {
    let good = snapshot_pickle(&[tiny_device_trace()]);
    // Every truncation is an error, none a panic.
    for cut in 0..good.len() {
        assert!(unpickle(&good[..cut]).is_err(), "cut at {cut}");
    }
    let (offset, problem) = unpickle(b"\x80\x02]\xff.").unwrap_err();
    assert_eq!(offset, 3);
    assert!(problem.to_string().contains("unknown pickle opcode 0xff"));
    let (offset, _) = unpickle(b"\x80\x02X\xff\xff\xff\x7fabc.").unwrap_err();
    assert_eq!(offset, 2);
    assert!(unpickle(b"\x80\x02h\x05.").is_err()); // missing memo entry
    assert!(unpickle(b"\x80\x02a.").is_err()); // APPEND on an empty stack
    assert!(unpickle(b"\x80\x02K\x01a.").is_err()); // APPEND to an int
    assert!(unpickle(b"\x80\x09.").is_err()); // unknown protocol
    // A million nested lists decode and drop without exhausting the stack.
    let depth = 1_000_000;
    let mut nested = vec![0x80, 4];
    nested.extend(std::iter::repeat_n(b']', depth));
    nested.extend(std::iter::repeat_n(b'a', depth - 1));
    nested.push(b'.');
    let value = unpickle(&nested).unwrap();
    drop(value);
}

// ---------------------------------------------------------------------------------------------
// PyTorch snapshots
// ---------------------------------------------------------------------------------------------

fn snapshot_value(devices: &[Vec<Value>]) -> Value {
    dict(vec![
        ("segments", Value::List(Vec::new())),
        (
            "device_traces",
            Value::List(devices.iter().map(|d| Value::List(d.clone())).collect()),
        ),
    ])
}

fn snapshot_pickle(devices: &[Vec<Value>]) -> Vec<u8> {
    serde_pickle::value_to_vec(&snapshot_value(devices), SerOptions::new()).unwrap()
}

/// alloc A@0x1000, alloc B@0x2000, free A, alloc C@0x1000 (address reuse), free of 0x9000
/// (allocated before the recording), free B, segment and free_completed noise; C never freed.
fn tiny_device_trace() -> Vec<Value> {
    vec![
        entry("segment_alloc", 0x1000, 1 << 20, Some(1)),
        entry("alloc", 0x1000, 512, Some(10)),
        entry("alloc", 0x2000, 1024, Some(11)),
        entry("free_requested", 0x1000, 512, Some(12)),
        entry("free_completed", 0x1000, 512, Some(13)),
        entry("alloc", 0x1000, 256, Some(14)),
        entry("free_requested", 0x9000, 64, Some(15)),
        entry("free_requested", 0x2000, 1024, Some(16)),
        entry("oom", 0, 0, Some(17)),
    ]
}

#[test]
fn snapshot_pairs_frees_by_address_and_ids_by_allocation() {
    let file = TempPath::with("tiny.pickle", &snapshot_pickle(&[tiny_device_trace()]));
    let recording = recording_of(&file.0);
    let at = |id, size, addr, t| AllocEvent::Alloc {
        id,
        size,
        addr: Some(addr),
        time_us: Some(t),
    };
    let freed = |id, t| AllocEvent::Free {
        id,
        time_us: Some(t),
    };
    assert_eq!(
        recording.events(),
        [
            at(0, 512, 0x1000, 10),
            at(1, 1024, 0x2000, 11),
            freed(0, 12),
            at(2, 256, 0x1000, 14),
            freed(1, 16),
        ]
    );
    assert_eq!(recording.stats().dropped_frees, 1);
    assert_eq!(recording.stats().ignored_records, 3);
    assert_eq!(
        recording.devices(),
        [DeviceSummary {
            device: 0,
            allocs: 3,
            frees: 3
        }]
    );
    // Lifetimes: [0, 2), [1, 4), and C never freed → live to the end (5 events).
    let instance = recording.to_instance(None).unwrap();
    assert_eq!(
        instance.buffers(),
        [
            buffer(0, 0, 2, 512),
            buffer(1, 1, 4, 1024),
            buffer(2, 3, 5, 256)
        ]
    );
    assert_eq!(recording.live_bytes(), [512, 1536, 1024, 1280, 256]);
}

#[test]
fn snapshot_without_time_and_with_several_devices() {
    let old = vec![
        entry("alloc", 0x10, 8, None),
        entry("free", 0x10, 8, None), // the older name of free_requested
    ];
    let busy = vec![
        entry("alloc", 0x10, 8, Some(1)),
        entry("alloc", 0x20, 8, Some(2)),
        entry("free_requested", 0x10, 8, Some(3)),
    ];
    let pickle = snapshot_pickle(&[old.clone(), busy, Vec::new()]);
    let file = TempPath::with("multi.pickle", &pickle);
    // Default: the device with the most alloc and free records (device 1: 3 events).
    let recording = recording_of(&file.0);
    assert_eq!(recording.device(), 1);
    assert_eq!(recording.len(), 3);
    assert_eq!(recording.devices().len(), 3);
    // Chosen: device 0, whose entries have no time_us.
    let zero = load_recording(
        &file.0,
        &ImportOptions {
            device: Some(0),
            ..ImportOptions::default()
        },
    )
    .unwrap();
    assert_eq!(zero.device(), 0);
    assert_eq!(
        zero.events(),
        [
            AllocEvent::Alloc {
                id: 0,
                size: 8,
                addr: Some(0x10),
                time_us: None
            },
            free(0)
        ]
    );
    // A device without events is an error listing those that have some.
    let err = load_recording(
        &file.0,
        &ImportOptions {
            device: Some(2),
            ..ImportOptions::default()
        },
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .ends_with("device 2 has no events; devices with events: 0 1"),
        "{err}"
    );
    // Ties go to the lowest id.
    let tie = TempPath::with("tie.pickle", &snapshot_pickle(&[old.clone(), old]));
    assert_eq!(recording_of(&tie.0).device(), 0);
}

#[test]
fn snapshot_structure_errors_name_the_place() {
    let cases: Vec<(Value, &str)> = vec![
        (
            Value::List(vec![]),
            "torch.cuda.memory_snapshot() (segments only",
        ),
        (Value::I64(3), "holds the integer 3, not a snapshot dict"),
        (
            dict(vec![("segments", Value::List(vec![]))]),
            "no `device_traces` key (keys: \"segments\")",
        ),
        (
            dict(vec![("device_traces", Value::I64(1))]),
            "at device_traces: device_traces is the integer 1",
        ),
        (
            snapshot_value(&[vec![entry("alloc", 1, 2, None), Value::I64(5)]]),
            "at device_traces[0][1]: the integer 5, expected a dict",
        ),
        (
            snapshot_value(&[vec![dict(vec![
                ("action", s("alloc")),
                ("addr", Value::I64(4)),
            ])]]),
            "at device_traces[0][0]: the entry has no `size`",
        ),
        (
            snapshot_value(&[vec![entry("alloc", -4, 2, None)]]),
            "at device_traces[0][0].addr: the integer -4, expected a non-negative integer",
        ),
        (
            snapshot_value(&[vec![dict(vec![("addr", Value::I64(4))])]]),
            "the entry has no `action`",
        ),
        (
            snapshot_value(&[Vec::new(), Vec::new()]),
            "no allocation history",
        ),
    ];
    for (value, fragment) in cases {
        let bytes = serde_pickle::value_to_vec(&value, SerOptions::new()).unwrap();
        let file = TempPath::with("bad.pickle", &bytes);
        let message = load(&file.0).unwrap_err().to_string();
        assert!(message.contains(fragment), "{fragment}: {message}");
        assert!(
            message.contains("bad.pickle (PyTorch memory snapshot)"),
            "{message}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Profiler (Chrome trace) JSON
// ---------------------------------------------------------------------------------------------

fn memory_event(ts: f64, device_type: i64, device: i64, addr: Option<u64>, bytes: i64) -> String {
    let addr = addr.map_or(String::new(), |a| format!("\"Addr\": {a}, "));
    format!(
        "{{\"ph\": \"i\", \"cat\": \"cpu_instant_event\", \"s\": \"t\", \"name\": \"[memory]\", \
         \"pid\": 1, \"tid\": 2, \"ts\": {ts}, \"args\": {{\"Ev Idx\": 7, \"Device Type\": \
         {device_type}, \"Device Id\": {device}, {addr}\"Bytes\": {bytes}, \"Total Allocated\": \
         0, \"Total Reserved\": 0}}}}"
    )
}

fn kineto_json(events: &[String]) -> String {
    format!(
        "{{\"schemaVersion\": 1, \"deviceProperties\": [{{\"id\": 0, \"name\": \"GPU\"}}], \
         \"traceEvents\": [{}], \"traceName\": \"x\"}}",
        events.join(",\n")
    )
}

#[test]
fn profiler_memory_events_are_sorted_paired_and_filtered() {
    let kernel = r#"{"ph": "X", "cat": "kernel", "name": "gemm", "ts": 1, "dur": 5,
        "args": {"Addr": "not a number", "Bytes": [1, 2], "Device Type": {"x": null}}}"#;
    let events = vec![
        kernel.to_string(),
        // Written out of time order (two threads): the free of 0x100 comes first in the file.
        memory_event(30.0, 1, 0, Some(0x100), -64),
        memory_event(10.0, 1, 0, Some(0x100), 64),
        memory_event(20.0, 1, 0, Some(0x200), 128),
        memory_event(25.5, 0, -1, Some(0x300), 4), // CPU memory: ignored
        memory_event(26.0, 1, 0, Some(0x999), -8), // allocated before the recording
        memory_event(31.0, 1, 0, Some(0x100), 32), // address reused
        memory_event(31.0, 1, 0, Some(0x400), 0),  // 0 bytes: ignored
        memory_event(40.75, 1, 1, Some(0x100), 16), // another device
        r#"{"name": "[memory]", "ph": "i", "ts": 50, "args": {"Device Type": 1,
            "Device Id": 0, "Addr": "0x500", "Bytes": 8}}"#
            .to_string(),
    ];
    let file = TempPath::with("trace.json", kineto_json(&events).as_bytes());
    let recording = recording_of(&file.0);
    assert_eq!(recording.source().format, Format::ChromeTrace);
    assert_eq!(recording.device(), 0);
    let at = |id, size, addr, t| AllocEvent::Alloc {
        id,
        size,
        addr: Some(addr),
        time_us: Some(t),
    };
    assert_eq!(
        recording.events(),
        [
            at(0, 64, 0x100, 10),
            at(1, 128, 0x200, 20),
            AllocEvent::Free {
                id: 0,
                time_us: Some(30)
            },
            at(2, 32, 0x100, 31),
            at(3, 8, 0x500, 50),
        ]
    );
    assert_eq!(recording.stats().dropped_frees, 1);
    assert_eq!(recording.stats().ignored_records, 1);
    assert_eq!(
        recording.devices(),
        [
            DeviceSummary {
                device: 0,
                allocs: 4,
                frees: 2
            },
            DeviceSummary {
                device: 1,
                allocs: 1,
                frees: 0
            }
        ]
    );
    let other = load_recording(
        &file.0,
        &ImportOptions {
            device: Some(1),
            ..ImportOptions::default()
        },
    )
    .unwrap();
    assert_eq!(other.events(), [at(0, 16, 0x100, 40)]);

    // The Chrome "JSON Array Format": a bare array of events.
    let array = format!("[{}]", events.join(","));
    let file = TempPath::with("array.json", array.as_bytes());
    assert_eq!(recording_of(&file.0).events(), recording.events());
}

#[test]
fn profiler_equal_timestamps_keep_file_order() {
    let events = vec![
        memory_event(5.0, 1, 0, Some(0x1), 10),
        memory_event(5.0, 1, 0, Some(0x1), -10),
        memory_event(5.0, 1, 0, Some(0x1), 20),
    ];
    let file = TempPath::with("ties.json", kineto_json(&events).as_bytes());
    let recording = recording_of(&file.0);
    assert_eq!(recording.frees(), 1);
    assert_eq!(recording.stats().reused_live_addresses, 0);
}

#[test]
fn profiler_errors_say_what_is_missing_and_where() {
    let no_addr = kineto_json(&[
        memory_event(1.0, 1, 0, None, 64),
        memory_event(2.0, 1, 0, None, -64),
    ]);
    let mixed = kineto_json(&[
        memory_event(1.0, 1, 0, Some(1), 64),
        memory_event(2.0, 1, 0, None, -64),
    ]);
    let bad_bytes = kineto_json(&[
        memory_event(1.0, 1, 0, Some(1), 64),
        r#"{"name": "[memory]", "ts": 3, "args": {"Device Type": 1, "Device Id": 0, "Addr": 1,
            "Bytes": "many"}}"#
            .to_string(),
    ]);
    let cpu_only = kineto_json(&[memory_event(1.0, 0, -1, Some(1), 64)]);
    let cases: Vec<(String, &str)> = vec![
        (no_addr, "its 2 GPU [memory] events have no `Addr`"),
        (mixed, "event 1: this GPU [memory] event has no `Addr`"),
        (
            bad_bytes,
            "at traceEvents[1] (line 3, column 30): a CUDA [memory] event whose `args.Bytes` is \
             not a number, expected an integer",
        ),
        (cpu_only, "no GPU memory events"),
        (
            "{\"traceEvents\": [{\"name\": \"x\"},, ]}".to_string(),
            "at traceEvents[1] (line 1, column 32): expected value",
        ),
        (
            "{\"traceEvents\": [{\"name\": \"[memory]\", \"ts\": 1".to_string(),
            "(truncated JSON?)",
        ),
        (
            "{\"ev\": \"meta\"}\n{\"ev\": \"alloc\"}\n".to_string(),
            "a JSON object without `traceEvents`",
        ),
        (
            "[[1.5, 2, 4096, 3], [2.5, 4, 4096, 3]]".to_string(),
            "raw memory timeline",
        ),
        (
            "{\"traceEvents\": 5}".to_string(),
            "expected an array of trace events",
        ),
        ("\"just a string\"".to_string(), "unrecognised content"),
    ];
    for (text, fragment) in cases {
        let file = TempPath::with("bad.json", text.as_bytes());
        let message = load(&file.0).unwrap_err().to_string();
        assert!(message.contains(fragment), "{fragment}\n  got: {message}");
        assert!(message.contains("bad.json"), "{message}");
    }
}

// ---------------------------------------------------------------------------------------------
// itermem traces
// ---------------------------------------------------------------------------------------------

fn malloc_event(time_ns: u64, id: u64, size: u64, kind: MemKind) -> Event {
    Event::new(
        time_ns,
        EventKind::Malloc {
            id,
            addr: 0x7000 + id * 0x100,
            size,
            kind,
            stream: 0,
        },
    )
}

fn free_event(time_ns: u64, id: u64) -> Event {
    Event::new(time_ns, EventKind::Free { id, stream: 0 })
}

#[test]
fn itermem_traces_keep_device_memory_and_their_ids() {
    let events = vec![
        malloc_event(1_000, 1, 4096, MemKind::Device),
        malloc_event(2_000, 2, 64, MemKind::PinnedHost),
        Event::new(
            2_500,
            EventKind::Launch {
                kernel: 0,
                stream: 0,
                layout_known: true,
                touched: [1].into_iter().collect(),
            },
        ),
        malloc_event(3_000, 3, 512, MemKind::Managed),
        free_event(4_000, 2),
        free_event(5_000, 1),
        free_event(6_999, 77), // never allocated
        malloc_event(7_000, 4, 100, MemKind::Async),
    ];
    let file = TempPath::new("run.itrace");
    write_trace(&file.0, events.clone());
    let recording = recording_of(&file.0);
    assert_eq!(recording.source().format, Format::ItermemTrace);
    let at = |id, size, t| AllocEvent::Alloc {
        id,
        size,
        addr: Some(0x7000 + id * 0x100),
        time_us: Some(t),
    };
    assert_eq!(
        recording.events(),
        [
            at(1, 4096, 1),
            at(3, 512, 3),
            AllocEvent::Free {
                id: 1,
                time_us: Some(5)
            },
            at(4, 100, 7),
        ]
    );
    assert_eq!(recording.stats().dropped_frees, 1);
    assert_eq!(recording.stats().ignored_records, 3); // pinned malloc + its free + launch
    assert_eq!(recording.device(), 0);

    // The same trace gzipped.
    let packed = TempPath::with("run.itrace.gz", &gzip(&std::fs::read(&file.0).unwrap()));
    let unpacked = recording_of(&packed.0);
    assert_eq!(unpacked.events(), recording.events());
    assert!(unpacked.source().gzip);

    // An id allocated twice is an error naming the event.
    let dup = TempPath::new("dup.itrace");
    write_trace(
        &dup.0,
        vec![
            malloc_event(1, 5, 8, MemKind::Device),
            free_event(2, 5),
            malloc_event(3, 5, 8, MemKind::Device),
        ],
    );
    let message = load(&dup.0).unwrap_err().to_string();
    assert!(
        message.contains("event 2: allocation id 5 appears twice"),
        "{message}"
    );

    // A trace its process did not close (cut inside the end record): every event before the
    // cut is read.
    let mut bytes = std::fs::read(&file.0).unwrap();
    bytes.truncate(bytes.len() - 3);
    let cut = TempPath::with("cut.itrace", &bytes);
    assert_eq!(recording_of(&cut.0).events(), recording.events());

    // A corrupt trace (a record of kind 0): the trace reader's own message, with its offset.
    let second = {
        let trace = crate::trace::TraceFile::open(&file.0).unwrap();
        let mut events = trace.events();
        events.next().unwrap().unwrap();
        events.offset() as usize
    };
    let mut bytes = std::fs::read(&file.0).unwrap();
    bytes[second] = 0;
    let corrupt = TempPath::with("corrupt.itrace", &bytes);
    let message = load(&corrupt.0).unwrap_err().to_string();
    assert!(message.contains(&format!("at byte {second}")), "{message}");
}

// ---------------------------------------------------------------------------------------------
// Recording: invariants, instances, iterations
// ---------------------------------------------------------------------------------------------

#[test]
fn recordings_reject_broken_pairings() {
    assert_eq!(
        Recording::new(source(), vec![alloc(1, 8), free(1), alloc(1, 8)]),
        Err(RecordingError::DuplicateId { index: 2, id: 1 })
    );
    assert_eq!(
        Recording::new(source(), vec![alloc(1, 8), free(1), free(1)]),
        Err(RecordingError::FreeOfDeadId { index: 2, id: 1 })
    );
    assert_eq!(
        Recording::new(source(), vec![free(3)]),
        Err(RecordingError::FreeOfDeadId { index: 0, id: 3 })
    );
}

#[test]
fn to_instance_ranges_clip_and_drop_as_documented() {
    // 0: alloc 1   1: alloc 2   2: free 1   3: alloc 3 (0 B)   4: alloc 4   5: free 2   6: free 4
    // 7: alloc 5 (never freed)
    let events = vec![
        alloc(1, 10),
        alloc(2, 20),
        free(1),
        alloc(3, 0),
        alloc(4, 40),
        free(2),
        free(4),
        alloc(5, 50),
    ];
    let recording = Recording::new(source(), events).unwrap();
    assert_eq!(
        recording.to_instance(None).unwrap().buffers(),
        [
            buffer(1, 0, 2, 10),
            buffer(2, 1, 5, 20),
            buffer(4, 4, 6, 40),
            buffer(5, 7, 8, 50)
        ]
    );
    // [2, 6): blocks 1 and 2, allocated before the range, are left out although they are freed
    // in it; block 4 is allocated at 4 − 2 = 2 and freed at 6, past the range: clipped to 4.
    assert_eq!(
        recording.to_instance(Some(2..6)).unwrap().buffers(),
        [buffer(4, 2, 4, 40)]
    );
    assert_eq!(
        recording.to_instance(Some(4..7)).unwrap().buffers(),
        [buffer(4, 0, 2, 40)]
    );
    assert!(recording.to_instance(Some(5..5)).unwrap().is_empty());
    #[allow(clippy::reversed_empty_ranges)]
    let reversed = Some(6..2);
    assert!(recording.to_instance(reversed).unwrap().is_empty());
    assert_eq!(
        recording.to_instance(Some(7..100)).unwrap().buffers(),
        [buffer(5, 0, 1, 50)]
    );
    assert_eq!(recording.tokens()[2], crate::detect::free_token(2));
    assert_eq!(recording.tokens()[3], crate::detect::malloc_token(0));
    assert_eq!(recording.live_bytes(), [10, 30, 20, 20, 60, 40, 0, 50]);
}

/// A training-like stream: `steps` steps, each an input, `layers` identical layers (3
/// allocations and their frees), a gradient and a temporary; with `warm_up`, the first step
/// allocates two optimizer states (never freed) where the others allocate and free the
/// temporary, so every step has `6·layers + 6` events but the first differs from the others.
fn training_stream(steps: usize, layers: usize, warm_up: bool) -> Vec<AllocEvent> {
    let mut events = Vec::new();
    let mut next = 0u64;
    let mut new = |events: &mut Vec<AllocEvent>, size| {
        next += 1;
        events.push(alloc(next, size));
        next
    };
    for step in 0..steps {
        let input = new(&mut events, 4096);
        for _ in 0..layers {
            let a = new(&mut events, 1024);
            let b = new(&mut events, 2048);
            events.push(free(a));
            let c = new(&mut events, 512);
            events.push(free(b));
            events.push(free(c));
        }
        let grad = new(&mut events, 8192);
        if step == 0 && warm_up {
            new(&mut events, 1 << 20); // optimizer state, never freed
            new(&mut events, 1 << 20);
        } else {
            let temp = new(&mut events, 64);
            events.push(free(temp));
        }
        events.push(free(grad));
        events.push(free(input));
    }
    events
}

#[test]
fn iteration_is_the_step_not_the_layer_loop() {
    let config = DetectorConfig::default();
    let step = 6 * 20 + 6;
    // Exact steps: the detector's own segment.
    let exact = Recording::new(source(), training_stream(4, 20, false)).unwrap();
    let it = exact.iteration(&config).unwrap().unwrap();
    assert_eq!(it.period_events, step as u64, "{it:?}");
    assert_eq!(it.iterations_seen, 4);

    // Two steps, the first with a warm-up: the step never repeats exactly, the layer loop (6
    // events) covers most of the stream; the step is still what is found.
    let warm = Recording::new(source(), training_stream(2, 20, true)).unwrap();
    let segments = crate::detect::segments(&warm.tokens(), &warm.live_bytes(), &config).unwrap();
    assert!(segments.iter().all(|s| s.period.length != step as u64));
    let it = warm.iteration(&config).unwrap().unwrap();
    assert_eq!(it.period_events, step as u64, "{it:?}");
    assert_eq!(it.iterations_seen, 2);

    // One step whose layer loop covers less than 90 % of it: no iteration.
    let single = Recording::new(source(), training_stream(1, 5, true)).unwrap();
    assert_eq!(single.iteration(&config).unwrap(), None);
    // An invalid configuration is an error, not a panic.
    let invalid = DetectorConfig {
        repeats: 1,
        ..config
    };
    assert!(single.iteration(&invalid).is_err());
}

#[test]
fn iteration_buffers_split_persistent_wrapped_and_inside() {
    // Before the steady state: a weight (100, never freed) and an input (101, freed in
    // iteration 2). Iteration j (6 events from 2 + 6j): t allocated and freed; a filler or the
    // free of the previous iteration's w; w, freed two events into the next iteration; two
    // small blocks never freed.
    let mut events = vec![alloc(100, 1 << 20), alloc(101, 77)];
    let mut id = 0;
    let mut pending_w: Option<u64> = None;
    for j in 0..5 {
        id += 1;
        let t = id;
        events.push(alloc(t, 10));
        events.push(free(t));
        match pending_w.take() {
            Some(w) => events.push(free(w)),
            None => events.push(alloc(1000 + j, 1)),
        }
        id += 1;
        let w = id;
        events.push(alloc(w, 30));
        if j == 2 {
            events.push(free(101));
        } else {
            events.push(alloc(2000 + j, 2));
        }
        events.push(alloc(3000 + j, 3));
        pending_w = Some(w);
    }
    let recording = Recording::new(source(), events).unwrap();
    let it = Iteration {
        period_events: 6,
        boundary_event: 2,
        iterations_seen: 5,
        start_event: 2,
        detected_at_event: 31,
    };
    let split = recording.iteration_buffers(&it);
    // The last aligned iteration that ends by the stretch end (2 + 5·6 = 32): [26, 32).
    assert_eq!((split.start, split.length), (26, 6));
    // Persistent: the weight and the blocks earlier iterations never freed.
    let mut persistent: Vec<u64> = split.persistent.iter().map(|p| p.id).collect();
    persistent.sort_unstable();
    assert_eq!(
        persistent,
        [100, 1000, 2000, 2001, 2003, 3000, 3001, 3002, 3003]
    );
    // t (id 9) is inside; w (id 10) crosses the end and is wrapped to [0, 6), standing for
    // the previous w (id 8, allocated at 23, freed at 28), which is left out; the blocks
    // allocated in the iteration and never freed are wrapped too.
    assert_eq!(
        split.instance.buffers(),
        [
            buffer(9, 0, 1, 10),
            buffer(10, 0, 6, 30),
            buffer(2004, 0, 6, 2),
            buffer(3004, 0, 6, 3)
        ]
    );
    assert_eq!(split.wrapped, [10, 2004, 3004]);
    assert_eq!(split.previous_copies, [8]);
    assert!(split.long_lived.is_empty());
}

#[test]
fn iteration_buffers_set_long_lived_blocks_apart() {
    // Period 4: t allocated and freed; X allocated at position 2 and freed at position 3 of
    // the next iteration (5 events: longer than an iteration); a filler in the first.
    let events = vec![
        alloc(1, 5),
        free(1),
        alloc(2, 7),
        alloc(3, 1),
        alloc(4, 5),
        free(4),
        alloc(5, 7),
        free(2),
        alloc(6, 5),
        free(6),
        alloc(7, 7),
        free(5),
        alloc(8, 5),
        free(8),
        alloc(9, 7),
        free(7),
    ];
    let recording = Recording::new(source(), events).unwrap();
    let it = Iteration {
        period_events: 4,
        boundary_event: 0,
        iterations_seen: 3,
        start_event: 0,
        detected_at_event: 11,
    };
    let split = recording.iteration_buffers(&it);
    assert_eq!(split.start, 8);
    assert_eq!(split.long_lived, [PersistentBuffer { id: 7, size: 7 }]);
    assert_eq!(split.previous_copies, [5]);
    assert_eq!(split.persistent, [PersistentBuffer { id: 3, size: 1 }]);
    assert_eq!(split.instance.buffers(), [buffer(6, 0, 1, 5)]);
}

// ---------------------------------------------------------------------------------------------
// The real recordings
// ---------------------------------------------------------------------------------------------

/// Loads a real file, printing how long it took.
fn timed_recording(path: &Path) -> Recording {
    let started = Instant::now();
    let recording = recording_of(path);
    eprintln!(
        "imported {} in {:.2?}: {} allocs, {} frees",
        path.display(),
        started.elapsed(),
        recording.allocs(),
        recording.frees()
    );
    recording
}

/// The recording's instance against the derived CSV: same buffers and peak, and, when
/// `exact`, the very same lifetimes.
fn check_against_derived(recording: &Recording, csv: &Path, exact: bool) {
    let derived = read_dsa_csv(csv).unwrap();
    let mine = recording.to_instance(None).unwrap();
    assert_eq!(mine.len(), derived.len(), "{}", csv.display());
    assert_eq!(mine.peak_live(), derived.peak_live(), "{}", csv.display());
    if exact {
        assert_eq!(mine, derived, "{}", csv.display());
    }
}

#[test]
fn real_snapshots_match_the_readme_and_the_derived_csvs() {
    let Some(root) = real_traces() else { return };
    // (file, allocs, free_requested, frees of blocks allocated before recording, whether the
    // lifetimes equal the derived CSV's exactly)
    for (name, allocs, frees, dropped, exact) in [
        ("cs336_lm2.7b_b4_ctx128_fp32_fullstep", 6770, 5894, 0, true),
        (
            "cs336_lm_small_b32_ctx256_fp32_fwdbwd",
            1721,
            1721,
            2,
            false,
        ),
        ("vit_l16_b1_adam_3steps", 1497, 1493, 0, true),
        ("tiny_linear10kx50k_3fwd", 12, 7, 0, true),
    ] {
        let ext = if name.starts_with("tiny") {
            "pkl"
        } else {
            "pickle"
        };
        let path = root.join(format!("pytorch-snapshots/{name}.{ext}"));
        let recording = timed_recording(&path);
        assert_eq!(recording.allocs(), allocs, "{name}");
        // Frees of blocks allocated before the recording are dropped, and counted.
        assert_eq!(recording.frees() as u64, frees - dropped, "{name}");
        assert_eq!(recording.stats().dropped_frees, dropped, "{name}");
        let summary = recording.devices()[recording.device() as usize];
        assert_eq!(
            (summary.allocs, summary.frees),
            (allocs as u64, frees),
            "{name}"
        );
        // The lifetimes are lost only where a dropped free shifts the logical time (the CSV
        // counts dropped frees as events); buffers and peak are the same.
        check_against_derived(
            &recording,
            &root.join(format!("derived-dsa-csv/{name}_dev0.csv")),
            exact,
        );
    }
}

#[test]
fn real_vit_snapshot_iteration_is_one_training_step() {
    let Some(root) = real_traces() else { return };
    let recording = timed_recording(&root.join("pytorch-snapshots/vit_l16_b1_adam_3steps.pickle"));
    assert_eq!(recording.devices().len(), 4); // device_traces has 4 GPUs, 3 of them empty
    assert_eq!(recording.device(), 0);
    assert_eq!(recording.len(), 2990);
    for config in [DetectorConfig::for_cuda_events(), DetectorConfig::default()] {
        let it = recording.iteration(&config).unwrap().unwrap();
        eprintln!("vit ({config:?}): {it:?}");
        // The recording holds two steps of 1,495 events; the detector alone reports the layer
        // loop (60 events, 22 repeats), which covers most of them.
        assert_eq!(it.period_events, 1495, "{it:?}");
        assert_eq!(it.iterations_seen, 2, "{it:?}");
        let split = recording.iteration_buffers(&it);
        assert_eq!(split.length, 1495);
        // The 477 MiB block allocated at the end of a step and freed at the end of the next
        // (1,500 events later) outlives the step.
        assert!(
            split.long_lived.iter().any(|b| b.size == 500_072_448),
            "{split:?}"
        );
        let clipped = recording
            .to_instance(Some(
                split.start as usize..(split.start + split.length) as usize,
            ))
            .unwrap();
        let excluded: u64 = split
            .long_lived
            .iter()
            .chain(&split.persistent)
            .map(|b| b.size)
            .sum();
        assert!(split.instance.peak_live() + excluded >= clipped.peak_live());
    }
    let detected = crate::detect::detect(
        &recording.tokens(),
        &recording.live_bytes(),
        &DetectorConfig::for_cuda_events(),
    )
    .unwrap()
    .unwrap();
    assert_eq!(
        detected.length, 60,
        "the detector alone finds the layer loop"
    );
}

#[test]
fn real_single_step_snapshots_have_no_iteration() {
    let Some(root) = real_traces() else { return };
    for name in [
        "cs336_lm2.7b_b4_ctx128_fp32_fullstep.pickle",
        "cs336_lm_small_b32_ctx256_fp32_fwdbwd.pickle",
    ] {
        let recording = recording_of(&root.join("pytorch-snapshots").join(name));
        // One step: its layer loops (100 and 84 events) repeat, but cover a fraction of it.
        assert_eq!(
            recording
                .iteration(&DetectorConfig::for_cuda_events())
                .unwrap(),
            None,
            "{name}"
        );
    }
}

#[test]
fn real_v100_profiler_trace() {
    let Some(root) = real_traces() else { return };
    let path = root.join("kineto/hta_v100_ddp_rank1_profile_memory.json.gz");
    let recording = timed_recording(&path);
    assert_eq!(recording.device(), 1);
    assert_eq!((recording.allocs(), recording.frees()), (13_385, 13_385));
    assert_eq!(recording.stats().dropped_frees, 0);
    assert_eq!(recording.stats().reused_live_addresses, 0);
    assert_eq!(recording.stats().size_mismatches, 0);
    assert!(recording.events().iter().all(|e| e.time_us().is_some()));
    check_against_derived(
        &recording,
        &root.join("derived-dsa-csv/hta_v100_ddp_rank1_profile_memory_gpu1.csv"),
        true,
    );
    let it = recording
        .iteration(&DetectorConfig::for_cuda_events())
        .unwrap()
        .unwrap();
    eprintln!("hta: {it:?}");
    assert_eq!(it.period_events, 26_770 / 5);
    assert_eq!(it.iterations_seen, 5);
    // Exact: one periodic stretch over the whole recording.
    assert_eq!(it.start_event, 0);
    let split = recording.iteration_buffers(&it);
    assert!(split.persistent.is_empty() && split.wrapped.is_empty());
    assert_eq!(split.instance.len(), 13_385 / 5);
    assert_eq!(
        split.instance.peak_live(),
        recording.to_instance(None).unwrap().peak_live()
    );
}

#[test]
fn real_profiler_files_without_lifetimes_are_refused_clearly() {
    let Some(root) = real_traces() else { return };
    let err = load(root.join("kineto/kineto_tbplugin_resnet50_b32_v100_workers0.pt.trace.json.gz"))
        .unwrap_err();
    assert!(
        matches!(
            err.problem(),
            Problem::NoAddresses {
                memory_events: 8220
            }
        ),
        "{err}"
    );
    let message = load(root.join("kineto/hta_resnet_memory_timeline.raw.json.gz"))
        .unwrap_err()
        .to_string();
    assert!(message.contains("raw memory timeline"), "{message}");
}
