//! cuda-shim: the simulated CUDA driver that itermem is developed and tested on.
//!
//! No machine of the project has a GPU, so this crate stands in for `libcuda.so.1`: device
//! memory in its own address range with a capacity, streams as worker threads with real ordering
//! semantics, events, kernels as registered host functions, a timing and jitter model, and
//! statistics. It exports the CUDA 12 driver API under NVIDIA's names and prototypes; the runtime
//! (`libcudart.so.12`) is the sibling crate `cuda-shim-runtime`, built on these exports exactly as
//! NVIDIA's runtime is built on the driver. `tools/build-shim` links both into shared libraries.
//!
//! Module map: `config` (environment), `memory` (device and pinned memory), `stream` (ordering),
//! `kernel` (function registry and parameter layout), `vmm` (reserved ranges and
//! mapped physical memory), `device` (the context and every
//! operation's semantics), `stats` (counters), `exports` (the C ABI), `result` (error codes),
//! `fatbin` (the PTX inside the fatbinaries of nvcc-built programs), `graph` (stream capture
//! and CUDA graphs).

pub mod config;
pub mod device;
pub mod export_table;
pub mod exports;
pub mod fatbin;
pub mod graph;
pub mod green;
pub mod kernel;
pub mod memory;
pub mod module;
pub mod ptx;
pub mod result;
pub mod stats;
pub mod stream;
pub mod vmm;
