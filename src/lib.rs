//! itermem: iteration-aware GPU memory management for unmodified training programs.
//!
//! The library grows issue by issue (see `docs/ARCHITECTURE.md`); the simulated CUDA platform it
//! is developed on lives in the `cuda-shim` workspace member.

pub mod analysis;
pub mod bo;
pub mod config;
mod content;
pub mod detect;
pub mod event;
pub mod export;
pub mod import;
pub mod interposer;
pub mod ops;
pub mod plan;
pub mod policy;
pub mod replay;
pub mod report;
pub mod rng;
pub mod svg;
pub mod swap;
pub mod trace;

#[cfg(test)]
mod test_support;
