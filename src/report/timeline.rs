//! The recording aggregated into what the page draws, each part bounded whatever the
//! recording's length, so a page of a million events draws as fast as one of a thousand.
//!
//! - **Live device bytes**: [`MEMORY_BUCKETS`] time buckets, each the least and the most bytes
//!   live after any event in it (an empty bucket repeats the bytes live before it). The peak is
//!   therefore drawn exactly: it is the most of the bucket it falls in.
//! - **Placement** (address × time): one rectangle per allocation that has an address, the
//!   [`MAX_RECTS`] largest by bytes × lifetime when there are more (the rest are counted, and
//!   their share of bytes × time is given). The address axis leaves out the gaps between
//!   address ranges in use: ranges closer than [`ADDRESS_GAP`] are one cluster, and clusters are
//!   drawn one above the other, so a pool and the separate allocations beside it both show.
//! - **Kernels**: launches per stream per [`LANE_BUCKETS`] buckets, the [`MAX_LANES`] busiest
//!   streams each in a lane of their own.
//! - **Iterations**: the start time of each complete detected iteration, at most
//!   [`MAX_BOUNDARIES`] (every k-th beyond).

use std::collections::HashMap;

use serde::Serialize;

use super::source::{Item, Recorded};
use crate::event::StreamHandle;

pub const MEMORY_BUCKETS: usize = 1500;
pub const MAX_RECTS: usize = 5000;
pub const ADDRESS_GAP: u64 = 2 << 20;
pub const LANE_BUCKETS: usize = 600;
pub const MAX_LANES: usize = 8;
pub const MAX_BOUNDARIES: usize = 400;

#[derive(Clone, Debug, Serialize)]
pub struct Timeline {
    /// First and last item time.
    pub start: u64,
    pub end: u64,
    /// `[least, most]` live bytes per bucket of `(end - start + 1) / MEMORY_BUCKETS`.
    pub live: Vec<[u64; 2]>,
    pub peak_bytes: u64,
    pub peak_time: u64,
    pub placement: Placement,
    pub lanes: Vec<Lane>,
    pub lane_buckets: usize,
    /// Start time of the drawn iterations, and how many complete iterations there are.
    pub iteration_starts: Vec<u64>,
    pub iterations: usize,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Placement {
    /// `[alloc time, free time (end when never freed), y, bytes]`, y on the gapless axis.
    pub rects: Vec<[u64; 4]>,
    /// `[y, first address, bytes]` of each address cluster.
    pub clusters: Vec<[u64; 3]>,
    /// The gapless axis' height: the clusters' bytes together.
    pub height: u64,
    /// Allocations with an address, and how many of them are not drawn.
    pub allocations: usize,
    pub left_out: usize,
    /// The left-out allocations' share of bytes × time, 0 to 1.
    pub left_out_share: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Lane {
    /// The stream handle as the program passed it; `None` for the streams merged as "other".
    pub stream: Option<StreamHandle>,
    pub launches: u64,
    pub counts: Vec<u32>,
}

/// The time of item `index` (None for an index past the recording).
pub fn time_of(recorded: &Recorded, index: u64) -> Option<u64> {
    recorded
        .items
        .get(usize::try_from(index).ok()?)
        .map(|&(t, _)| t)
}

pub fn build(recorded: &Recorded) -> Timeline {
    let start = recorded.items.iter().map(|&(t, _)| t).min().unwrap_or(0);
    let end = recorded.items.iter().map(|&(t, _)| t).max().unwrap_or(0);
    let bucket = |t: u64, buckets: usize| -> usize {
        let span = u128::from(end - start) + 1;
        (u128::from(t.clamp(start, end) - start) * buckets as u128 / span) as usize
    };

    let mut live: Vec<Option<[u64; 2]>> = vec![None; MEMORY_BUCKETS];
    let mut sizes: HashMap<u64, (u64, Option<u64>, u64)> = HashMap::new(); // id → size, addr, alloc time
    let mut lifetimes: Vec<(u64, u64, u64, u64)> = Vec::new(); // alloc, free, addr, bytes
    let mut lanes: HashMap<StreamHandle, Vec<u32>> = HashMap::new();
    let (mut bytes, mut peak_bytes, mut peak_time) = (0u64, 0u64, start);
    for &(t, item) in &recorded.items {
        match item {
            Item::Alloc { id, addr, size } => {
                // Saturating throughout: a corrupt recording's sizes must not overflow.
                bytes = bytes.saturating_add(size);
                sizes.insert(id, (size, addr, t));
            }
            Item::Free { id } => {
                if let Some((size, addr, born)) = sizes.remove(&id) {
                    bytes = bytes.saturating_sub(size);
                    if let Some(addr) = addr {
                        lifetimes.push((born, t, addr, size));
                    }
                }
            }
            Item::Launch { stream } => {
                lanes.entry(stream).or_insert_with(|| vec![0; LANE_BUCKETS])
                    [bucket(t, LANE_BUCKETS)] += 1;
            }
            Item::Transfer => {}
        }
        if bytes > peak_bytes {
            (peak_bytes, peak_time) = (bytes, t);
        }
        let cell = live[bucket(t, MEMORY_BUCKETS)].get_or_insert([bytes, bytes]);
        cell[0] = cell[0].min(bytes);
        cell[1] = cell[1].max(bytes);
    }
    lifetimes.extend(
        sizes
            .into_values()
            .filter_map(|(size, addr, born)| Some((born, end, addr?, size))),
    );
    let mut before = 0;
    let live = live
        .into_iter()
        .map(|cell| {
            let cell = cell.unwrap_or([before, before]);
            before = cell[1];
            cell
        })
        .collect();

    let iterations = recorded
        .iteration
        .map(|i| i.aligned_starts())
        .unwrap_or_default();
    let stride = iterations.len().div_ceil(MAX_BOUNDARIES).max(1);
    let iteration_starts = iterations
        .iter()
        .step_by(stride)
        .filter_map(|&index| time_of(recorded, index))
        .collect();

    Timeline {
        start,
        end,
        live,
        peak_bytes,
        peak_time,
        placement: placement(lifetimes),
        lanes: busiest_lanes(lanes),
        lane_buckets: LANE_BUCKETS,
        iteration_starts,
        iterations: iterations.len(),
    }
}

/// The placement of `lifetimes` (`(alloc time, free time, address, bytes)`).
fn placement(mut lifetimes: Vec<(u64, u64, u64, u64)>) -> Placement {
    let allocations = lifetimes.len();
    let weight = |&(born, died, _, size): &(u64, u64, u64, u64)| {
        u128::from(size) * (u128::from(died.saturating_sub(born)) + 1)
    };
    let total: u128 = lifetimes.iter().map(weight).sum();
    lifetimes.sort_by_key(|l| std::cmp::Reverse(weight(l)));
    let left_out: u128 = lifetimes.iter().skip(MAX_RECTS).map(weight).sum();
    lifetimes.truncate(MAX_RECTS);

    let mut ranges: Vec<(u64, u64)> = lifetimes
        .iter()
        .map(|&(_, _, addr, size)| (addr, addr.saturating_add(size)))
        .collect();
    ranges.sort_unstable();
    let mut clusters: Vec<[u64; 3]> = Vec::new(); // y, first address, bytes
    let mut height = 0u64;
    for (lo, hi) in ranges {
        match clusters.last_mut() {
            Some(c) if lo <= c[1].saturating_add(c[2]).saturating_add(ADDRESS_GAP) => {
                let grown = hi.saturating_sub(c[1]).max(c[2]);
                height = height.saturating_add(grown - c[2]);
                c[2] = grown;
            }
            _ => {
                clusters.push([height, lo, hi - lo]);
                height = height.saturating_add(hi - lo);
            }
        }
    }
    let rects = lifetimes
        .iter()
        .map(|&(born, died, addr, size)| {
            let at = clusters.partition_point(|c| c[1] <= addr) - 1;
            let c = clusters[at];
            [born, died, c[0].saturating_add(addr - c[1]), size]
        })
        .collect();
    Placement {
        rects,
        clusters,
        height,
        allocations,
        left_out: allocations.saturating_sub(MAX_RECTS),
        left_out_share: if total == 0 {
            0.0
        } else {
            left_out as f64 / total as f64
        },
    }
}

/// The [`MAX_LANES`] busiest streams, the rest merged into one lane.
fn busiest_lanes(lanes: HashMap<StreamHandle, Vec<u32>>) -> Vec<Lane> {
    let mut lanes: Vec<Lane> = lanes
        .into_iter()
        .map(|(stream, counts)| Lane {
            stream: Some(stream),
            launches: counts.iter().map(|&c| u64::from(c)).sum(),
            counts,
        })
        .collect();
    lanes.sort_by_key(|lane| (std::cmp::Reverse(lane.launches), lane.stream));
    if lanes.len() > MAX_LANES {
        let rest = lanes.split_off(MAX_LANES - 1);
        let mut other = Lane {
            stream: None,
            launches: 0,
            counts: vec![0; LANE_BUCKETS],
        };
        for lane in rest {
            other.launches += lane.launches;
            for (sum, c) in other.counts.iter_mut().zip(lane.counts) {
                *sum += c;
            }
        }
        lanes.push(other);
    }
    lanes
}
