//! The aggregation's bounds and the schedule's placement, on recordings built by hand.

use serde_json::json;

use super::schedule;
use super::source::{Item, Recorded};
use super::timeline::{self, MAX_RECTS, MEMORY_BUCKETS};
use crate::import::Format;

fn recorded(items: Vec<(u64, Item)>) -> Recorded {
    Recorded {
        format: Format::ItermemTrace,
        items,
        timed: true,
        iteration: None,
        note: None,
    }
}

fn alloc(id: u64, addr: u64, size: u64) -> Item {
    Item::Alloc {
        id,
        addr: Some(addr),
        size,
    }
}

#[test]
fn a_long_recording_draws_a_bounded_page_with_its_exact_peak() {
    // 20,000 allocations of growing size, each freed at once: the peak is the last one.
    let mut items = Vec::new();
    for id in 0..20_000u64 {
        items.push((2 * id, alloc(id, 0x1000_0000, 256 * (id + 1))));
        items.push((2 * id + 1, Item::Free { id }));
    }
    let timeline = timeline::build(&recorded(items));
    assert_eq!(timeline.live.len(), MEMORY_BUCKETS);
    assert_eq!(timeline.peak_bytes, 256 * 20_000);
    let most = timeline.live.iter().map(|cell| cell[1]).max();
    assert_eq!(most, Some(timeline.peak_bytes), "a bucket holds the peak");
    let placement = &timeline.placement;
    assert_eq!(placement.rects.len(), MAX_RECTS);
    assert_eq!(placement.allocations, 20_000);
    assert_eq!(placement.left_out, 20_000 - MAX_RECTS);
    // The largest are kept: the smallest drawn is allocation MAX_RECTS from the top.
    let smallest = placement.rects.iter().map(|r| r[3]).min();
    assert_eq!(smallest, Some(256 * (20_000 - MAX_RECTS as u64 + 1)));
    assert!(placement.left_out_share > 0.0 && placement.left_out_share < 1.0);
}

#[test]
fn distant_address_ranges_are_stacked_without_the_gap_between_them() {
    let items = vec![
        (0, alloc(1, 0x7f00_0000_0000, 4096)),
        (1, alloc(2, 0x7f00_0000_1000, 4096)), // adjacent: the same range
        (2, alloc(3, 0x5500_0000_0000, 1024)), // far below
        (3, Item::Free { id: 1 }),
    ];
    let placement = timeline::build(&recorded(items)).placement;
    assert_eq!(placement.height, 4096 * 2 + 1024);
    assert_eq!(
        placement.clusters,
        vec![[0, 0x5500_0000_0000, 1024], [1024, 0x7f00_0000_0000, 8192]]
    );
    let mut rects = placement.rects.clone();
    rects.sort_by_key(|r| r[2]);
    // [alloc time, free time (the end when never freed), y, bytes]
    assert_eq!(
        rects,
        vec![
            [2, 3, 0, 1024],
            [0, 3, 1024, 4096],
            [1, 3, 1024 + 4096, 4096]
        ]
    );
}

#[test]
fn planned_copies_start_at_their_ops_in_each_iteration_the_run_swapped() {
    // Two iterations of ops at events 2.., each: launch, copy, launch (times 10 apart).
    let mut items = vec![(0, alloc(1, 0x1000, 100)), (5, alloc(2, 0x2000, 100))];
    for n in 0..6u64 {
        let item = if n % 3 == 1 {
            Item::Transfer
        } else {
            Item::Launch { stream: 0 }
        };
        items.push((100 + 10 * n, item));
    }
    let plan = json!({
        "swaps": [
            {"bytes": 100, "out_at_op": 0, "in_issue_op": 2, "in_delay_ns": 3.0, "wraps": false},
            {"bytes": 50, "out_at_op": 2, "in_issue_op": 1, "in_delay_ns": 0.0, "wraps": true},
        ],
        "executor": {
            "op_time_ns": [1.0, 1.0, 1.0],
            "copy": {"out_ns_per_byte": 0.5, "out_latency_ns": 1.0,
                     "in_ns_per_byte": 1.0, "in_latency_ns": 0.0},
        },
    });
    let s = schedule::build(&recorded(items), &plan, &[2, 5]);
    assert_eq!((s.iterations_drawn, s.iterations), (2, 2));
    // Iteration at event 2: ops at 100, 110, 120; the next one's at 130, 140, 150.
    assert_eq!(
        s.out,
        vec![
            [100, 151, 100],
            [120, 146, 50],
            [130, 181, 100],
            [150, 176, 50]
        ]
    );
    // The wrapping swap comes back at op 1 of the next iteration (none after the last).
    assert_eq!(
        s.back,
        vec![[123, 223, 100], [140, 190, 50], [153, 253, 100]]
    );
}
