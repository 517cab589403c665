//! CUDA graphs as itermem sees them: the work of each graph's nodes, kept from the calls that
//! made the nodes, so that each launch of an instantiated graph can be recorded as the kernels,
//! copies and memsets it runs.
//!
//! Work submitted to a capturing stream does not run: it becomes a node of the capture's graph
//! (the hooks ask the driver, `driver::capture`). It is kept here, under that graph, instead of
//! being recorded; so is each node the explicit API adds (`cuGraphAdd*Node`, a child graph's
//! nodes copied into its parent, as CUDA copies the child). Instantiating copies a graph's list
//! for the exec graph; `cuGraphExecKernelNodeSetParams` and `cuGraphExecUpdate` change that copy
//! as they change what the exec graph runs. A node keeps the addresses it was given, not the
//! allocations they fell in: a graph runs on fixed addresses, and each launch resolves them
//! against the allocations live then.
//!
//! Nodes are kept in the order they were added, which is a topological order of a captured
//! graph; the driver may run independent branches in another order, which changes no access.
//! Host, event and empty nodes touch no device memory and are not kept. Memory alloc and free
//! nodes are kept: a launch allocates and frees their graph allocations (see
//! `hooks::on_graph_launch`), which are then tracked like `cudaMallocAsync` memory.

use super::recorder::Kernel;
use crate::event::CopyKind;
use parking_lot::Mutex;
use rustc_hash::FxHashMap;
use std::sync::Arc;

/// What one node does to device memory, with the addresses it was given.
#[derive(Clone, Debug)]
pub enum NodeWork {
    /// A kernel launch: the values of its kernel's pointer words (empty when the layout is
    /// unknown), read from the arguments when the node was made (CUDA copies them then too).
    Kernel {
        kernel: &'static Kernel,
        words: Vec<u64>,
    },
    Copy {
        dst: u64,
        src: u64,
        bytes: u64,
        kind: CopyKind,
    },
    Set {
        dst: u64,
        bytes: u64,
    },
    /// A memory alloc node (`cudaMallocAsync` in a capture, `cuGraphAddMemAllocNode`): each
    /// launch allocates `size` bytes at `addr`, the address fixed when the node was made.
    Alloc {
        addr: u64,
        size: u64,
    },
    /// A memory free node: each launch frees the graph allocation at `addr`.
    Free {
        addr: u64,
    },
}

impl NodeWork {
    /// Whether the node allocates or frees memory rather than touching it.
    pub fn is_memory(&self) -> bool {
        matches!(self, NodeWork::Alloc { .. } | NodeWork::Free { .. })
    }
}

/// A node: its handle (0 when the driver did not name it) and its work.
#[derive(Clone, Debug)]
pub struct Node {
    pub handle: usize,
    pub work: NodeWork,
}

/// The graphs and exec graphs of the process, by handle.
#[derive(Default)]
pub struct Graphs {
    graphs: Mutex<FxHashMap<usize, Vec<Node>>>,
    /// Shared with the launches that are being recorded: a launch never holds the lock.
    execs: Mutex<FxHashMap<usize, Arc<Vec<Node>>>>,
}

impl Graphs {
    /// A node added to `graph`, by capture or by the explicit API.
    pub fn add(&self, graph: usize, node: Node) {
        self.graphs.lock().entry(graph).or_default().push(node);
    }

    /// A child graph node: the child's nodes, copied into `graph`.
    pub fn add_child(&self, graph: usize, child: usize) {
        let mut graphs = self.graphs.lock();
        let nodes = graphs.get(&child).cloned().unwrap_or_default();
        graphs.entry(graph).or_default().extend(nodes);
    }

    pub fn destroy(&self, graph: usize) {
        self.graphs.lock().remove(&graph);
    }

    /// `exec` was instantiated from `graph`: it runs the graph's nodes as they are now.
    pub fn instantiate(&self, exec: usize, graph: usize) {
        let nodes = self.graphs.lock().get(&graph).cloned().unwrap_or_default();
        self.execs.lock().insert(exec, Arc::new(nodes));
    }

    /// `cuGraphExecKernelNodeSetParams`: `exec`'s node `handle` runs `work` from now on.
    pub fn set_node(&self, exec: usize, handle: usize, work: NodeWork) {
        let mut execs = self.execs.lock();
        let Some(nodes) = execs.get_mut(&exec) else {
            return;
        };
        if let Some(node) = Arc::make_mut(nodes)
            .iter_mut()
            .find(|n| n.handle == handle && handle != 0)
        {
            node.work = work;
        }
    }

    /// `cuGraphExecUpdate` succeeded: `exec` runs `graph`'s work, node by node in the same
    /// positions (what the driver requires of an update), under the handles `exec` was
    /// instantiated with.
    pub fn update(&self, exec: usize, graph: usize) {
        let new = self.graphs.lock().get(&graph).cloned().unwrap_or_default();
        let mut execs = self.execs.lock();
        let Some(nodes) = execs.get_mut(&exec) else {
            return;
        };
        let handles = nodes.iter().map(|n| n.handle);
        let updated: Vec<Node> = if nodes.len() == new.len() {
            handles
                .zip(new)
                .map(|(handle, n)| Node {
                    handle,
                    work: n.work,
                })
                .collect()
        } else {
            new
        };
        *nodes = Arc::new(updated);
    }

    pub fn destroy_exec(&self, exec: usize) {
        self.execs.lock().remove(&exec);
    }

    /// The nodes a launch of `exec` runs (None for an exec graph itermem never saw made).
    pub fn launched(&self, exec: usize) -> Option<Arc<Vec<Node>>> {
        self.execs.lock().get(&exec).cloned()
    }
}
