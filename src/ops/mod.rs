//! One training iteration at the level of operations: which tensors each op reads and writes,
//! when each tensor is born and dies, and how long each op takes. This is what AutoSwap plans
//! on (`crate::swap`): the access pattern between a tensor's uses decides whether it can be
//! copied to host memory and back in time.
//!
//! Conventions (every importer converts to them):
//! - ops are numbered 0..n in execution order; a tensor born at op `b` is written by it and live
//!   from then on; a tensor dying at op `d` is dead after op `d` (its last use may be `d`);
//! - a tensor alive before the iteration (a constant, a parameter, optimizer state, an input) is
//!   `resident` from the start; one never freed in the iteration lives to its end (and, being
//!   resident at the start of the next, is alive across the iteration boundary);
//! - sizes are bytes of the tensor's storage (views and aliases share their storage's tensor).

/// Index of a tensor in [`OpTrace::tensors`].
pub type TensorId = u32;

#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    pub id: TensorId,
    pub bytes: u64,
    /// Alive before the iteration starts (constant, parameter, optimizer state, input).
    pub resident: bool,
    /// Op after which the tensor is dead (None: alive to the end of the iteration).
    pub dies_after: Option<usize>,
    /// Op that creates it (None for resident tensors).
    pub born_at: Option<usize>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Op {
    pub name: String,
    /// Tensors read (inputs), without duplicates.
    pub reads: Vec<TensorId>,
    /// Tensors written (outputs, and inputs updated in place), without duplicates.
    pub writes: Vec<TensorId>,
    /// Duration in nanoseconds: measured when `measured`, else from the cost model.
    pub time_ns: f64,
    pub measured: bool,
    /// Floating-point operations (0 when unknown).
    pub flops: f64,
}

/// One iteration of a training program, op by op.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OpTrace {
    /// Where it was read from (for reports).
    pub source: String,
    pub tensors: Vec<Tensor>,
    pub ops: Vec<Op>,
}
