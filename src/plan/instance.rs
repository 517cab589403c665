//! [`Instance`]: a validated allocation problem, the gatekeeper every planner and policy takes.

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
    /// Whether the two lifetimes share an instant (half-open intervals).
    pub fn overlaps_in_time(&self, other: &Buffer) -> bool {
        self.lower < other.upper && other.lower < self.upper
    }
}

/// Why a set of buffers is not an instance, naming the offending buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InstanceError {
    /// `lower >= upper`: the buffer is never live.
    EmptyLifetime { id: u64, lower: u64, upper: u64 },
    /// A buffer of 0 bytes.
    ZeroSize { id: u64 },
    /// Two buffers with the same id.
    DuplicateId { id: u64 },
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
        }
    }
}

impl std::error::Error for InstanceError {}

/// A set of buffers that satisfies every assumption of the planners: non-empty lifetimes,
/// non-zero sizes, unique ids. [`Instance::new`] is the only way to build one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Instance {
    buffers: Vec<Buffer>,
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
        Ok(Instance { buffers })
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

    /// The largest sum of sizes live at one instant: no placement can use less memory.
    pub fn peak_live(&self) -> u64 {
        let mut changes: Vec<(u64, i128)> = Vec::with_capacity(2 * self.buffers.len());
        for b in &self.buffers {
            changes.push((b.lower, i128::from(b.size)));
            changes.push((b.upper, -i128::from(b.size)));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn b(id: u64, lower: u64, upper: u64, size: u64) -> Buffer {
        Buffer {
            id,
            lower,
            upper,
            size,
        }
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
}
