//! Offline memory planning: where each buffer of an allocation problem lives in one pool.
//!
//! The problem (dynamic storage allocation, DSA): buffers with a size and a lifetime; place
//! each at an offset so that two buffers whose lifetimes overlap never overlap in memory, and
//! the footprint max(offset + size) is as small as possible. The lower bound is the peak of the
//! live bytes. Lifetimes are half-open event intervals `[lower, upper)`: a buffer is not live
//! at `upper`, so a buffer born at `upper` may take its place (the convention of the DSA CSV
//! format `id,lower,upper,size`; every importer converts to it).

mod instance;

pub use instance::{Buffer, Instance, InstanceError};
