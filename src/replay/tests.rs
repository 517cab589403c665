use super::pattern::{self, Mismatch};
use super::*;
use crate::ops::Op;
use crate::ops::tests::tensor;
use crate::plan::Buffer;

#[test]
fn patterns_round_trip_and_catch_every_changed_byte() {
    for len in [0usize, 1, 7, 8, 9, 64, 1000, 4099] {
        let mut bytes = vec![0u8; len];
        let seed = pattern::seed(3, 2, 1);
        pattern::fill(&mut bytes, seed);
        assert_eq!(pattern::check_all(&bytes, seed), None, "len {len}");
        assert_eq!(pattern::check_sampled(&bytes, seed), None, "len {len}");
        for at in [0, len / 2, len.saturating_sub(1)] {
            if len == 0 {
                continue;
            }
            let mut changed = bytes.clone();
            changed[at] ^= 0x40;
            let found = pattern::check_all(&changed, seed).expect("a changed byte is caught");
            assert_eq!(found.offset, (at / 8 * 8) as u64, "len {len} at {at}");
            assert_ne!(found.expected, found.found);
        }
        if len >= 8 {
            // The first and the last word are always sampled; an older version anywhere.
            let mut changed = bytes.clone();
            changed[len - 1] ^= 1;
            assert!(
                pattern::check_sampled(&changed, seed).is_some(),
                "len {len}"
            );
            let older = pattern::seed(3, 1, 1);
            let found = pattern::check_sampled(&bytes, older);
            assert!(
                matches!(found, Some(Mismatch { offset: 0, .. })),
                "len {len}"
            );
        }
    }
}

#[test]
fn seeds_differ_for_every_tensor_version_and_iteration() {
    let mut seen = std::collections::HashSet::new();
    for tensor in 0..20 {
        for version in 0..20 {
            for iteration in 0..20 {
                assert!(seen.insert(pattern::seed(tensor, version, iteration)));
            }
        }
    }
}

fn op(reads: &[u32], writes: &[u32], time_ns: f64) -> Op {
    Op {
        name: "op".into(),
        reads: reads.to_vec(),
        writes: writes.to_vec(),
        time_ns,
        measured: true,
        flops: 0.0,
    }
}

/// Weight 0 (resident), input 1 (resident, consumed at op 0), activation 2 (op 0 → op 2),
/// gradient 3 (op 1, updates the weight in place at op 2), a block 4 born at op 2 and never freed.
fn small_trace() -> OpTrace {
    OpTrace {
        source: "small".into(),
        tensors: vec![
            tensor(0, 1000, None, None),
            tensor(1, 400, None, Some(0)),
            tensor(2, 3000, Some(0), Some(2)),
            tensor(3, 1000, Some(1), Some(2)),
            tensor(4, 10, Some(2), None),
        ],
        ops: vec![
            op(&[0, 1], &[2], 1000.0),
            op(&[2], &[3], 2000.0),
            op(&[0, 2, 3], &[0, 4], 3000.0),
        ],
    }
}

#[test]
fn an_op_trace_becomes_one_launch_per_op_with_its_lifetimes() {
    let trace = small_trace();
    trace.validate().unwrap();
    let program = Program::from_ops(
        &trace,
        Scaling {
            size: 0.5,
            time: 2.0,
        },
    )
    .unwrap();
    assert_eq!(program.bytes, vec![500, 200, 1500, 500, 5]);
    assert_eq!(program.resident, vec![0, 1]);
    let launch = |op: u64, accesses: &[(u32, AccessKind)], duration_ns: u64| {
        Step::Launch(Launch {
            op,
            kernel: kernel_of("op"),
            accesses: accesses
                .iter()
                .map(|&(tensor, kind)| Access { tensor, kind })
                .collect(),
            duration_ns,
        })
    };
    use AccessKind::*;
    assert_eq!(
        program.steps,
        vec![
            Step::Alloc(2),
            // The weight is read again at op 2: sampled; the input's last read: whole.
            launch(0, &[(0, CheckSampled), (1, CheckAll), (2, Write)], 2000),
            Step::Free(1),
            Step::Alloc(3),
            // The activation is read again at op 2.
            launch(1, &[(2, CheckSampled), (3, Write)], 4000),
            Step::Alloc(4),
            launch(
                2,
                &[
                    (0, CheckAll),
                    (2, CheckAll),
                    (3, CheckAll),
                    (0, Write),
                    (4, Write)
                ],
                6000
            ),
            Step::Free(2),
            Step::Free(3),
            // Born and never freed: freed at the end; the consumed input comes back.
            Step::Free(4),
            Step::Alloc(1),
            Step::Upload(1),
        ]
    );
    // The live bytes after each op are the trace's, scaled.
    let live = program.live_bytes();
    let after_launch: Vec<u64> = program
        .steps
        .iter()
        .zip(&live)
        .filter(|(s, _)| matches!(s, Step::Launch(_)))
        .map(|(_, &l)| l)
        .collect();
    let expected: Vec<u64> = trace.live_bytes().iter().map(|b| b / 2).collect();
    assert_eq!(after_launch, expected);
    assert_eq!(program.peak_bytes(), trace.peak().unwrap().bytes / 2);
    assert_eq!(live.last(), Some(&program.resident_bytes()));
}

#[test]
fn an_allocation_problem_writes_each_buffer_at_birth_and_checks_it_at_death() {
    let buffer = |id, lower, upper, size| Buffer {
        id,
        lower,
        upper,
        size,
    };
    let instance = Instance::new(vec![
        buffer(7, 0, 2, 100),
        buffer(8, 1, 3, 50),
        buffer(9, 2, 3, 10),
    ])
    .unwrap();
    let times = [Some(1000.0), None, Some(5000.0)];
    let program =
        Program::from_allocations("csv", &instance, &[64], &times, Scaling::default()).unwrap();
    assert_eq!(program.bytes, vec![64, 100, 50, 10]);
    assert_eq!(program.resident, vec![0]);
    let launch = |op: u64, tensors: &[u32], kind: AccessKind, duration_ns: u64| {
        Step::Launch(Launch {
            op,
            kernel: usize::from(kind == AccessKind::CheckAll),
            accesses: tensors
                .iter()
                .map(|&tensor| Access { tensor, kind })
                .collect(),
            duration_ns,
        })
    };
    use AccessKind::*;
    assert_eq!(
        program.steps,
        vec![
            Step::Alloc(1),
            launch(0, &[1], Write, 1000),
            Step::Alloc(2),
            launch(1, &[2], Write, 0),
            launch(2, &[1], CheckAll, 0),
            Step::Free(1),
            Step::Alloc(3),
            launch(2, &[3], Write, 5000),
            launch(3, &[2, 3], CheckAll, 0),
            Step::Free(2),
            Step::Free(3),
        ]
    );
    assert_eq!(program.peak_bytes(), 64 + 100 + 50);
}

#[test]
fn the_replay_kernels_are_distinct_functions() {
    let addresses: std::collections::HashSet<usize> =
        runner::KERNELS.iter().map(|&k| k as usize).collect();
    assert_eq!(addresses.len(), runner::KERNELS.len());
}

#[test]
fn the_host_copies_of_an_itermem_trace_are_replayed_as_copies() {
    let mut trace = small_trace();
    // Op 0 becomes the upload of the input, op 1 reads the activation back to the host.
    trace.ops[0] = Op {
        name: ops::UPLOAD_OP.into(),
        ..op(&[], &[2], 1000.0)
    };
    trace.ops[1] = Op {
        name: ops::DOWNLOAD_OP.into(),
        ..op(&[2], &[], 1000.0)
    };
    trace.tensors[3].born_at = Some(2);
    let program = Program::from_ops(&trace, Scaling::default()).unwrap();
    assert_eq!(
        program.steps[..3],
        [Step::Alloc(2), Step::Upload(2), Step::Free(1)]
    );
    assert_eq!(
        program.steps[3],
        Step::Download(Download {
            op: 1,
            tensor: 2,
            check: AccessKind::CheckSampled,
        })
    );
    assert_eq!(program.launches(), 1);
}

#[test]
fn far_times_cost_their_events_and_impossible_sizes_are_refused_naming_them() {
    let instance = |times: [u64; 3], size: u64| {
        Instance::new(vec![
            Buffer {
                id: 0,
                lower: times[0],
                upper: times[2],
                size,
            },
            Buffer {
                id: 1,
                lower: times[1],
                upper: times[2],
                size: 10,
            },
        ])
        .unwrap()
    };
    let build = |instance: &Instance, scaling| {
        Program::from_allocations("far.csv", instance, &[], &[], scaling)
    };
    let near = build(&instance([0, 1, 2], 100), Scaling::default()).unwrap();
    let far = build(&instance([0, 1 << 40, u64::MAX], 100), Scaling::default()).unwrap();
    // The same steps, only the ops (the times) differ.
    assert_eq!(far.steps.len(), near.steps.len());
    assert_eq!(far.peak_bytes(), 110);
    assert_eq!(far.cost(3).kernels, 3 * 3);
    assert!(matches!(&far.steps[4], Step::Launch(l) if l.op == u64::MAX));

    let err = build(&instance([0, 1, 2], u64::MAX), Scaling::default()).unwrap_err();
    assert_eq!(err.source, "far.csv");
    assert!(
        err.message
            .contains("buffer 0 has 18446744073709551615 bytes"),
        "{err}"
    );
    let scaled = Scaling {
        size: 1e12,
        time: 1.0,
    };
    let err = build(&instance([0, 1, 2], 1000), scaled).unwrap_err();
    assert!(
        err.message
            .contains("buffer 0 has 1000 bytes (1000000000000000 B at --scale"),
        "{err}"
    );
}
