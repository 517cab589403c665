//! PTX: the kernels of nvcc-built programs, run by an interpreter.
//!
//! Every binary nvcc builds for a real architecture also carries the kernel's PTX (NVIDIA's
//! documented virtual ISA) for the driver to compile when no machine code fits the GPU. The shim
//! has no machine code it can run, so it takes that path always: [`parse`] reads a module's text
//! and [`run`] executes one kernel with CUDA's execution model (grid, blocks, warps of 32,
//! `.shared` memory, barriers, shuffles, votes, atomics). The supported subset is listed in
//! docs/ARCHITECTURE.md; anything outside it fails the launch with `CUDA_ERROR_INVALID_PTX`
//! naming the instruction and its line, never a wrong result.

mod exec;
mod ir;
mod lex;
mod parse;
mod printf;

pub use exec::{
    Counts, Fault, LOCAL_WINDOW, Launch, Memory, PARAM_WINDOW, Region, SHARED_WINDOW,
    first_unsupported, run,
};
pub use parse::{Global, Kernel, Module, ParamDecl, parse};

use std::fmt;

/// A module the parser cannot read at all (the kernel-level subset is checked at launch).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PtxError {
    pub line: u32,
    pub message: String,
}

impl PtxError {
    fn syntax(line: u32, message: String) -> PtxError {
        PtxError { line, message }
    }
}

impl fmt::Display for PtxError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "PTX line {}: {}", self.line, self.message)
    }
}

impl std::error::Error for PtxError {}

#[cfg(test)]
mod tests;
