//! The independent validator: proves a [`Plan`] is safe to execute, or names the conflict.
//!
//! It shares nothing with the planners but [`Alignment::round_up`], so a planner bug cannot
//! hide itself. For buffers `i ≠ j` with aligned sizes `s_i = aligned(size_i)` it checks
//!
//! * `offset_i mod a = 0` (every offset aligned),
//! * `offset_i + s_i ≤ footprint` (every buffer inside the pool), with equality for some `i`
//!   (the footprint reported is the one used: `footprint = max_i (offset_i + s_i)`),
//! * `T_i ∩ T_j ≠ ∅ ⇒ [offset_i, offset_i + s_i) ∩ [offset_j, offset_j + s_j) = ∅`
//!   (overlapping resident times ⇒ disjoint ranges), where `T_i` is the resident time of `i`:
//!   its lifetime `[lower_i, upper_i)` minus its absence windows ([`Instance::resident`]). A
//!   buffer has one offset for its whole life (the plan holds one per buffer), so after an
//!   absence it must find its range free again.
//!
//! Together these imply `Σ_{i resident at t} s_i ≤ footprint` at every instant `t`.
//!
//! **How**, in O(N log N) time and O(N) space for N resident intervals (N = n without
//! absences), never an n×n matrix: a sweep over the 2N interval events in time order (frees
//! before allocations at equal times, since intervals are half-open) keeps the resident
//! buffers in an ordered map keyed by offset. While no conflict has been found the resident
//! ranges are pairwise disjoint, so a newly resident range overlaps some resident range iff it
//! overlaps its predecessor or its successor in offset order: two lookups per allocation.

use std::collections::BTreeMap;
use std::fmt;

use super::{Alignment, Instance, Plan};

/// Why a plan is not valid for an instance. Buffers are named by their index in the instance
/// (`a`, `b`) and by their id (`a_id`, `b_id`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Conflict {
    /// The plan does not have one offset per buffer.
    WrongLength { offsets: usize, buffers: usize },
    /// `offset + aligned size` does not fit in a `u64`.
    Overflow { a: usize, a_id: u64, offset: u64 },
    /// An offset that is not a multiple of the plan's alignment.
    Misaligned {
        a: usize,
        a_id: u64,
        offset: u64,
        alignment: u64,
    },
    /// A buffer that ends beyond the footprint.
    OutOfBounds {
        a: usize,
        a_id: u64,
        end: u64,
        footprint: u64,
    },
    /// The footprint claimed is larger than the highest end of any buffer.
    SlackFootprint { claimed: u64, used: u64 },
    /// Buffers `a` and `b` are both resident at `time` and their byte ranges intersect.
    Overlap {
        a: usize,
        b: usize,
        a_id: u64,
        b_id: u64,
        time: u64,
        a_range: (u64, u64),
        b_range: (u64, u64),
    },
}

impl Conflict {
    /// The pair of buffer indices involved, when the conflict is between two buffers.
    pub fn pair(&self) -> Option<(usize, usize)> {
        match *self {
            Conflict::Overlap { a, b, .. } => Some((a, b)),
            _ => None,
        }
    }
}

impl fmt::Display for Conflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Conflict::WrongLength { offsets, buffers } => {
                write!(f, "the plan has {offsets} offsets for {buffers} buffers")
            }
            Conflict::Overflow { a_id, offset, .. } => {
                write!(f, "buffer {a_id} at offset {offset} ends beyond 2^64")
            }
            Conflict::Misaligned {
                a_id,
                offset,
                alignment,
                ..
            } => write!(
                f,
                "buffer {a_id} is at offset {offset}, not a multiple of the alignment {alignment}"
            ),
            Conflict::OutOfBounds {
                a_id,
                end,
                footprint,
                ..
            } => write!(
                f,
                "buffer {a_id} ends at {end}, beyond the footprint {footprint}"
            ),
            Conflict::SlackFootprint { claimed, used } => write!(
                f,
                "the plan claims a footprint of {claimed} bytes but its buffers end by {used}"
            ),
            Conflict::Overlap {
                a_id,
                b_id,
                time,
                a_range,
                b_range,
                ..
            } => write!(
                f,
                "buffers {a_id} [{}, {}) and {b_id} [{}, {}) are both resident at {time} and overlap",
                a_range.0, a_range.1, b_range.0, b_range.1
            ),
        }
    }
}

impl std::error::Error for Conflict {}

/// Proves that `plan` places every buffer of `instance` safely (see the module doc for the
/// exact conditions), or returns the first conflict found. O(n log n).
pub fn validate(instance: &Instance, plan: &Plan) -> Result<(), Conflict> {
    validate_parts(instance, &plan.offsets, plan.footprint, plan.alignment)
}

pub(crate) fn validate_parts(
    instance: &Instance,
    offsets: &[u64],
    footprint: u64,
    alignment: Alignment,
) -> Result<(), Conflict> {
    let buffers = instance.buffers();
    if offsets.len() != buffers.len() {
        return Err(Conflict::WrongLength {
            offsets: offsets.len(),
            buffers: buffers.len(),
        });
    }
    // Per-buffer checks first: the byte range [offset, end) of each buffer.
    let mut ends = Vec::with_capacity(buffers.len());
    let mut used = 0u64;
    for (a, (buf, &offset)) in buffers.iter().zip(offsets).enumerate() {
        let end = alignment
            .round_up(buf.size)
            .and_then(|s| offset.checked_add(s))
            .ok_or(Conflict::Overflow {
                a,
                a_id: buf.id,
                offset,
            })?;
        if !alignment.is_aligned(offset) {
            return Err(Conflict::Misaligned {
                a,
                a_id: buf.id,
                offset,
                alignment: alignment.get(),
            });
        }
        if end > footprint {
            return Err(Conflict::OutOfBounds {
                a,
                a_id: buf.id,
                end,
                footprint,
            });
        }
        used = used.max(end);
        ends.push(end);
    }
    if used != footprint {
        return Err(Conflict::SlackFootprint {
            claimed: footprint,
            used,
        });
    }

    // The sweep. Events: (time, is_alloc, index) per resident interval; frees sort before
    // allocations. The intervals of one buffer are disjoint, so it is never in the map twice.
    let mut events: Vec<(u64, bool, usize)> = Vec::with_capacity(2 * buffers.len());
    for i in 0..buffers.len() {
        for (lower, upper) in instance.resident(i) {
            events.push((lower, true, i));
            events.push((upper, false, i));
        }
    }
    events.sort_unstable();
    // Live ranges keyed by (offset, index) so that equal offsets stay distinct keys.
    let mut live: BTreeMap<(u64, usize), u64> = BTreeMap::new();
    for (time, is_alloc, i) in events {
        let key = (offsets[i], i);
        if !is_alloc {
            live.remove(&key);
            continue;
        }
        let end = ends[i];
        let below = live.range(..key).next_back();
        let above = live.range(key..).next();
        let hit = match (below, above) {
            (Some((&(o, j), &e)), _) if e > offsets[i] => Some((j, o, e)),
            (_, Some((&(o, j), &e))) if o < end => Some((j, o, e)),
            _ => None,
        };
        if let Some((j, o, e)) = hit {
            let (a, b) = (i.min(j), i.max(j));
            let range = |k: usize| if k == i { (offsets[i], end) } else { (o, e) };
            return Err(Conflict::Overlap {
                a,
                b,
                a_id: buffers[a].id,
                b_id: buffers[b].id,
                time,
                a_range: range(a),
                b_range: range(b),
            });
        }
        live.insert(key, end);
    }
    Ok(())
}
