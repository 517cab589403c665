//! [`Instance`]: a validated allocation problem, the gatekeeper every planner and policy takes.
//!
//! A buffer may have *absence windows* (AutoSwap, design §2.1): half-open intervals
//! `[from, to)` inside its lifetime (not all of it) during which it is swapped out to host memory and
//! does not need its range. It keeps one offset for its whole life; other buffers may use its
//! range while it is absent ("a rectangle with a hole"). Its *resident intervals* are its
//! lifetime minus its absence windows, and they are all that planners, bounds and the
//! validator count.

use std::fmt;

/// One buffer: `size` bytes live over the half-open event interval `[lower, upper)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Buffer {
    pub id: u64,
    pub lower: u64,
    pub upper: u64,
    pub size: u64,
}

impl Buffer {
    /// Whether the two lifetimes share an instant (half-open intervals; absences ignored, see
    /// [`Instance::resident_overlap`]).
    pub fn overlaps_in_time(&self, other: &Buffer) -> bool {
        self.lower < other.upper && other.lower < self.upper
    }
}

/// Buffer `id` is not resident (swapped out) during the half-open window `[from, to)`, which
/// must lie inside its lifetime and not cover all of it: `lower ≤ from < to ≤ upper`. (A
/// tensor kept across the iteration boundary may be away at its first or last instant.)
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Absence {
    pub id: u64,
    pub from: u64,
    pub to: u64,
}

/// Why a set of buffers (and absence windows) is not an instance, naming the offending buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InstanceError {
    /// `lower >= upper`: the buffer is never live.
    EmptyLifetime { id: u64, lower: u64, upper: u64 },
    /// A buffer of 0 bytes.
    ZeroSize { id: u64 },
    /// Two buffers with the same id.
    DuplicateId { id: u64 },
    /// An absence window names a buffer id that no buffer has.
    UnknownAbsence { id: u64 },
    /// An absence window with `from >= to`.
    EmptyAbsence { id: u64, from: u64, to: u64 },
    /// An absence window outside the lifetime, or all of it (`lower ≤ from`, `to ≤ upper`, not
    /// both equal: a buffer is resident at some instant of its life).
    AbsenceOutsideLifetime {
        id: u64,
        from: u64,
        to: u64,
        lower: u64,
        upper: u64,
    },
    /// Two absence windows of one buffer share an instant.
    OverlappingAbsences {
        id: u64,
        first: (u64, u64),
        second: (u64, u64),
    },
}

impl InstanceError {
    /// The id of the buffer the error is about.
    pub fn id(&self) -> u64 {
        match *self {
            InstanceError::EmptyLifetime { id, .. }
            | InstanceError::ZeroSize { id }
            | InstanceError::DuplicateId { id }
            | InstanceError::UnknownAbsence { id }
            | InstanceError::EmptyAbsence { id, .. }
            | InstanceError::AbsenceOutsideLifetime { id, .. }
            | InstanceError::OverlappingAbsences { id, .. } => id,
        }
    }
}

impl fmt::Display for InstanceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InstanceError::EmptyLifetime { id, lower, upper } => write!(
                f,
                "buffer {id} has an empty lifetime [{lower}, {upper}): lower must be below upper"
            ),
            InstanceError::ZeroSize { id } => write!(f, "buffer {id} has size 0"),
            InstanceError::DuplicateId { id } => write!(f, "buffer id {id} appears twice"),
            InstanceError::UnknownAbsence { id } => {
                write!(
                    f,
                    "an absence window names buffer {id}, which does not exist"
                )
            }
            InstanceError::EmptyAbsence { id, from, to } => write!(
                f,
                "buffer {id} has an empty absence window [{from}, {to}): from must be below to"
            ),
            InstanceError::AbsenceOutsideLifetime {
                id,
                from,
                to,
                lower,
                upper,
            } => write!(
                f,
                "buffer {id} has an absence window [{from}, {to}) outside its lifetime \
                 [{lower}, {upper}), or all of it"
            ),
            InstanceError::OverlappingAbsences { id, first, second } => write!(
                f,
                "buffer {id} has overlapping absence windows [{}, {}) and [{}, {})",
                first.0, first.1, second.0, second.1
            ),
        }
    }
}

impl std::error::Error for InstanceError {}

/// A set of buffers that satisfies every assumption of the planners: non-empty lifetimes,
/// non-zero sizes, unique ids, and absence windows that are non-empty, inside their buffer's
/// lifetime (not all of it) and pairwise disjoint per buffer. [`Instance::new`] and
/// [`Instance::with_absences`] are the only ways to build one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Instance {
    buffers: Vec<Buffer>,
    /// The absence windows of the buffer at index `i` are
    /// `windows[window_start[i]..window_start[i + 1]]`: sorted, and separated by at least one
    /// resident instant (touching windows are joined). Both vectors are empty when no buffer has a window, so an instance without
    /// absences costs nothing more and compares equal however it was built.
    window_start: Vec<usize>,
    windows: Vec<(u64, u64)>,
}

impl Instance {
    /// Checks each invariant separately and names the first bad buffer.
    pub fn new(buffers: Vec<Buffer>) -> Result<Instance, InstanceError> {
        let mut seen = std::collections::HashSet::with_capacity(buffers.len());
        for b in &buffers {
            if b.lower >= b.upper {
                return Err(InstanceError::EmptyLifetime {
                    id: b.id,
                    lower: b.lower,
                    upper: b.upper,
                });
            }
            if b.size == 0 {
                return Err(InstanceError::ZeroSize { id: b.id });
            }
            if !seen.insert(b.id) {
                return Err(InstanceError::DuplicateId { id: b.id });
            }
        }
        Ok(Instance {
            buffers,
            window_start: Vec::new(),
            windows: Vec::new(),
        })
    }

    /// [`Instance::new`], plus absence windows (any order). Each window is checked on its own
    /// (known buffer, non-empty, inside the lifetime and not all of it), then the windows of each buffer
    /// must be pairwise disjoint; windows that merely touch (`[a, b)`, `[b, c)`) are joined.
    pub fn with_absences(
        buffers: Vec<Buffer>,
        absences: Vec<Absence>,
    ) -> Result<Instance, InstanceError> {
        let mut instance = Instance::new(buffers)?;
        if absences.is_empty() {
            return Ok(instance);
        }
        let index: std::collections::HashMap<u64, usize> = instance
            .buffers
            .iter()
            .enumerate()
            .map(|(i, b)| (b.id, i))
            .collect();
        let mut keyed: Vec<(usize, u64, u64)> = Vec::with_capacity(absences.len());
        for a in &absences {
            let &i = index
                .get(&a.id)
                .ok_or(InstanceError::UnknownAbsence { id: a.id })?;
            let b = instance.buffers[i];
            if a.from >= a.to {
                return Err(InstanceError::EmptyAbsence {
                    id: a.id,
                    from: a.from,
                    to: a.to,
                });
            }
            if a.from < b.lower || a.to > b.upper || (a.from == b.lower && a.to == b.upper) {
                return Err(InstanceError::AbsenceOutsideLifetime {
                    id: a.id,
                    from: a.from,
                    to: a.to,
                    lower: b.lower,
                    upper: b.upper,
                });
            }
            keyed.push((i, a.from, a.to));
        }
        keyed.sort_unstable();
        let n = instance.buffers.len();
        let mut window_start = Vec::with_capacity(n + 1);
        let mut windows: Vec<(u64, u64)> = Vec::with_capacity(keyed.len());
        let mut keyed = keyed.into_iter().peekable();
        for (i, buffer) in instance.buffers.iter().enumerate() {
            let first = windows.len();
            window_start.push(first);
            while let Some((_, from, to)) = keyed.next_if(|&(k, _, _)| k == i) {
                match windows[first..].last_mut() {
                    Some(last) if from < last.1 => {
                        return Err(InstanceError::OverlappingAbsences {
                            id: buffer.id,
                            first: *last,
                            second: (from, to),
                        });
                    }
                    Some(last) if from == last.1 => last.1 = to,
                    _ => windows.push((from, to)),
                }
            }
        }
        window_start.push(windows.len());
        instance.window_start = window_start;
        instance.windows = windows;
        Ok(instance)
    }

    pub fn buffers(&self) -> &[Buffer] {
        &self.buffers
    }

    pub fn len(&self) -> usize {
        self.buffers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buffers.is_empty()
    }

    /// Whether some buffer has an absence window.
    pub fn has_absences(&self) -> bool {
        !self.windows.is_empty()
    }

    /// The absence windows of the buffer at `index` (instance order, not id): sorted, disjoint,
    /// non-touching, inside its lifetime.
    pub fn absences(&self, index: usize) -> &[(u64, u64)] {
        if self.window_start.is_empty() {
            &[]
        } else {
            &self.windows[self.window_start[index]..self.window_start[index + 1]]
        }
    }

    /// The resident intervals of the buffer at `index`: its lifetime minus its absence
    /// windows, as sorted, non-empty, non-touching half-open intervals (just `[lower, upper)`
    /// when it has no window).
    pub fn resident(&self, index: usize) -> Resident<'_> {
        let b = &self.buffers[index];
        Resident {
            cursor: b.lower,
            upper: b.upper,
            windows: self.absences(index).iter(),
            done: false,
        }
    }

    /// The number of instants the buffer at `index` is resident.
    pub fn resident_length(&self, index: usize) -> u64 {
        let b = &self.buffers[index];
        let absent: u64 = self.absences(index).iter().map(|&(f, t)| t - f).sum();
        b.upper - b.lower - absent
    }

    /// The first instant at which the buffers at indices `a` and `b` are both resident, if any.
    pub fn resident_overlap(&self, a: usize, b: usize) -> Option<u64> {
        let (mut x, mut y) = (self.resident(a).peekable(), self.resident(b).peekable());
        while let (Some(&(xl, xu)), Some(&(yl, yu))) = (x.peek(), y.peek()) {
            if xl < yu && yl < xu {
                return Some(xl.max(yl));
            }
            if xu <= yu {
                x.next();
            } else {
                y.next();
            }
        }
        None
    }

    /// The largest sum of sizes resident at one instant: no placement can use less memory.
    pub fn peak_live(&self) -> u64 {
        let mut changes: Vec<(u64, i128)> = Vec::with_capacity(2 * self.buffers.len());
        for (i, b) in self.buffers.iter().enumerate() {
            for (lower, upper) in self.resident(i) {
                changes.push((lower, i128::from(b.size)));
                changes.push((upper, -i128::from(b.size)));
            }
        }
        // At equal times frees come first: a buffer is not live at its `upper`.
        changes.sort_unstable_by_key(|&(time, delta)| (time, delta > 0));
        let (mut live, mut peak) = (0i128, 0i128);
        for (_, delta) in changes {
            live += delta;
            peak = peak.max(live);
        }
        peak as u64
    }
}

/// The resident intervals of one buffer ([`Instance::resident`]).
#[derive(Clone, Debug)]
pub struct Resident<'a> {
    /// Start of the next resident interval.
    cursor: u64,
    upper: u64,
    windows: std::slice::Iter<'a, (u64, u64)>,
    done: bool,
}

impl Iterator for Resident<'_> {
    type Item = (u64, u64);

    /// Non-empty pieces only: a window may start at the lifetime's start or end at its end.
    fn next(&mut self) -> Option<(u64, u64)> {
        while !self.done {
            let piece = match self.windows.next() {
                Some(&(from, to)) => {
                    let piece = (self.cursor, from);
                    self.cursor = to;
                    piece
                }
                None => {
                    self.done = true;
                    (self.cursor, self.upper)
                }
            };
            if piece.0 < piece.1 {
                return Some(piece);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::test_support::buffer as b;

    fn out(id: u64, from: u64, to: u64) -> Absence {
        Absence { id, from, to }
    }

    #[test]
    fn rejections_name_the_buffer() {
        assert_eq!(
            Instance::new(vec![b(7, 3, 3, 1)]),
            Err(InstanceError::EmptyLifetime {
                id: 7,
                lower: 3,
                upper: 3
            })
        );
        assert_eq!(
            Instance::new(vec![b(1, 0, 1, 0)]),
            Err(InstanceError::ZeroSize { id: 1 })
        );
        assert_eq!(
            Instance::new(vec![b(1, 0, 1, 5), b(1, 1, 2, 5)]),
            Err(InstanceError::DuplicateId { id: 1 })
        );
    }

    #[test]
    fn peak_live_treats_upper_as_dead() {
        let i = Instance::new(vec![b(0, 0, 2, 10), b(1, 2, 4, 10), b(2, 1, 3, 5)]).unwrap();
        assert_eq!(i.peak_live(), 15);
        assert!(!i.buffers()[0].overlaps_in_time(&i.buffers()[1]));
        assert!(i.buffers()[0].overlaps_in_time(&i.buffers()[2]));
    }

    #[test]
    fn absence_rejections_name_the_buffer() {
        let bufs = || vec![b(4, 0, 10, 8), b(5, 2, 6, 8)];
        let with = |a: Vec<Absence>| Instance::with_absences(bufs(), a);
        // Buffer errors come first, as in `new`.
        assert_eq!(
            Instance::with_absences(vec![b(1, 0, 1, 0)], vec![out(1, 0, 1)]),
            Err(InstanceError::ZeroSize { id: 1 })
        );
        assert_eq!(
            with(vec![out(9, 3, 4)]),
            Err(InstanceError::UnknownAbsence { id: 9 })
        );
        for (from, to) in [(3, 3), (5, 4)] {
            assert_eq!(
                with(vec![out(4, from, to)]),
                Err(InstanceError::EmptyAbsence { id: 4, from, to })
            );
        }
        // A tensor kept across the iteration boundary: away at the lifetime's first and last
        // instants, resident in between only.
        let ends = with(vec![out(4, 0, 3), out(4, 7, 10)]).unwrap();
        let index = ends.buffers().iter().position(|b| b.id == 4).unwrap();
        assert_eq!(ends.resident(index).collect::<Vec<_>>(), vec![(3, 7)]);
        assert_eq!(ends.resident_length(index), 4);
        // Inside, and not all of it: resident at some instant.
        for (from, to) in [(0, 10), (7, 12), (0, 11)] {
            assert_eq!(
                with(vec![out(4, from, to)]),
                Err(InstanceError::AbsenceOutsideLifetime {
                    id: 4,
                    from,
                    to,
                    lower: 0,
                    upper: 10
                })
            );
        }
        assert_eq!(
            with(vec![out(5, 3, 5), out(4, 6, 8), out(4, 2, 7)]),
            Err(InstanceError::OverlappingAbsences {
                id: 4,
                first: (2, 7),
                second: (6, 8)
            })
        );
        let err = with(vec![out(5, 1, 4)]).unwrap_err();
        assert_eq!(err.id(), 5);
        assert!(err.to_string().contains("buffer 5"), "{err}");
    }

    #[test]
    fn resident_intervals_and_peak() {
        // Buffer 0 is out during [2,4) and [4,5) (joined) and [7,8).
        let i = Instance::with_absences(
            vec![b(0, 0, 10, 10), b(1, 2, 5, 10), b(2, 9, 12, 1)],
            vec![out(0, 7, 8), out(0, 4, 5), out(0, 2, 4)],
        )
        .unwrap();
        assert!(i.has_absences());
        assert_eq!(i.absences(0), &[(2, 5), (7, 8)]);
        assert_eq!(i.absences(1), &[]);
        assert_eq!(
            i.resident(0).collect::<Vec<_>>(),
            vec![(0, 2), (5, 7), (8, 10)]
        );
        assert_eq!(i.resident(1).collect::<Vec<_>>(), vec![(2, 5)]);
        assert_eq!(i.resident_length(0), 6);
        // 0 and 1 are never resident together; 0 and 2 meet at 9.
        assert_eq!(i.resident_overlap(0, 1), None);
        assert_eq!(i.resident_overlap(0, 2), Some(9));
        assert_eq!(i.resident_overlap(2, 0), Some(9));
        assert_eq!(i.peak_live(), 11);
        // Without the windows, 0 and 1 coexist.
        assert_eq!(Instance::new(i.buffers().to_vec()).unwrap().peak_live(), 20);
        // No windows at all: the same instance as `new` builds.
        let plain = vec![b(0, 0, 10, 10)];
        assert_eq!(
            Instance::with_absences(plain.clone(), vec![]),
            Instance::new(plain)
        );
    }
}
