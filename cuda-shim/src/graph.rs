//! CUDA graphs: stream capture, graphs, executable graphs and their launch.
//!
//! A [`Graph`] is a list of boxed [`Node`]s (a node's handle is its box's address, stable while
//! the graph lives); a node is an [`Op`] and the handles of the nodes it depends on. Capture
//! builds one: while a stream captures, [`Context::enqueue`] appends the work a call would have
//! submitted as a node depending on the stream's *frontier* (the nodes its next work follows),
//! which then becomes that node. An event recorded on a capturing stream remembers the
//! frontier; a stream waiting for it adopts it (a stream that was not capturing joins the
//! capture: fork/join). Instantiation orders the nodes topologically into an [`Exec`];
//! `cuGraphLaunch` submits its operations to the stream one after the other, so the graph is
//! one unit of stream order (it follows earlier work of the stream, later work follows all of
//! it) and its nodes run in an order their dependencies allow (branches do not overlap, which
//! CUDA allows but does not promise). The first operation of a launch waits for the last of the
//! exec's previous launch, so launches of one exec never overlap, whatever their streams.
//!
//! Memory nodes (`cuGraphAddMemAllocNode`, `cuMemAllocAsync` on a capturing stream, and their
//! free twins) follow CUDA's rules on a [`GraphAlloc`]: a fixed address from the node's
//! creation, live from a launch of its alloc node to its free, one executable graph at a time
//! for a graph with memory nodes, and a relaunch refused (`INVALID_VALUE`) while what the
//! previous launch allocated is unfreed, unless instantiated with auto-free on launch.
//!
//! What is illegal while capturing (the CUDA Programming Guide's "prohibited and unhandled
//! operations") returns CUDA's code and invalidates the captures concerned: ending them
//! returns `CUDA_ERROR_STREAM_CAPTURE_INVALIDATED` and no graph.

use crate::device::{Context, Device, Work};
use crate::memory::DeviceKind;
use crate::result::*;
use crate::stats::Stats;
use crate::stream::{Identity, Marker};
use parking_lot::{Mutex, MutexGuard};
use std::cell::Cell;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::thread::ThreadId;

/// `CUstreamCaptureMode`.
pub const MODE_GLOBAL: u32 = 0;
pub const MODE_THREAD_LOCAL: u32 = 1;
pub const MODE_RELAXED: u32 = 2;

/// `CUstreamCaptureStatus`.
const STATUS_NONE: u32 = 0;
const STATUS_ACTIVE: u32 = 1;
const STATUS_INVALIDATED: u32 = 2;

/// The counter a node's work adds to each time it runs (bytes copied or set, kernel launches),
/// as the submission of the same work does.
pub type Tally = Option<(&'static AtomicU64, u64)>;

/// What a node does.
#[derive(Clone)]
pub enum Op {
    /// Work a stream runs: a kernel (its arguments copied), a copy, a memset, a host function.
    Work(Work, Tally),
    /// An event record node (`CU_EVENT_RECORD_EXTERNAL` during capture).
    EventRecord(usize),
    /// An event wait node (`CU_EVENT_WAIT_EXTERNAL` during capture).
    EventWait(usize),
    /// A child graph node: a copy of the child graph, run as one node.
    Child(Box<Graph>),
    /// A memory alloc node: the graph allocation starting at this address (see [`GraphAlloc`])
    /// is allocated when the node runs.
    MemAlloc(usize),
    /// A memory free node: frees the graph allocation starting at this address.
    MemFree(usize),
}

impl Op {
    fn label(&self) -> &'static str {
        match self {
            Op::Work(Work::Launch { .. }, _) => "kernel",
            Op::Work(Work::Copy { .. }, _) => "memcpy",
            Op::Work(Work::Memset { .. }, _) => "memset",
            Op::Work(Work::Host(_), _) => "host",
            Op::Work(Work::Free { .. }, _) => "free",
            Op::Work(Work::Marker, _) => "empty",
            Op::EventRecord(_) => "event_record",
            Op::EventWait(_) => "event_wait",
            Op::Child(_) => "graph",
            Op::MemAlloc(_) => "mem_alloc",
            Op::MemFree(_) => "mem_free",
        }
    }

    fn is_memory(&self) -> bool {
        matches!(self, Op::MemAlloc(_) | Op::MemFree(_))
    }
}

pub struct Node {
    op: Op,
    /// Handles of the nodes this one follows.
    deps: Vec<usize>,
}

#[derive(Default)]
pub struct Graph {
    /// Boxed: a node's address is its handle, which must not move when the vector grows.
    #[allow(clippy::vec_box)]
    nodes: Vec<Box<Node>>,
}

impl Graph {
    fn handles(&self) -> Vec<usize> {
        self.nodes
            .iter()
            .map(|n| &**n as *const Node as usize)
            .collect()
    }

    /// The node handles and operations in an order that respects every dependency (Kahn's
    /// algorithm, ties in the order nodes were added; a cycle is `INVALID_VALUE`), a child
    /// graph's in place of its node.
    fn ordered(&self) -> CuResult<Vec<(usize, Op)>> {
        let handles = self.handles();
        let index: HashMap<usize, usize> =
            handles.iter().enumerate().map(|(i, &h)| (h, i)).collect();
        let mut waiting: Vec<usize> = self.nodes.iter().map(|n| n.deps.len()).collect();
        let mut followers = vec![Vec::new(); handles.len()];
        for (i, node) in self.nodes.iter().enumerate() {
            for dep in &node.deps {
                followers[*index.get(dep).ok_or(INVALID_VALUE)?].push(i);
            }
        }
        let mut ready: BTreeSet<usize> = (0..handles.len()).filter(|&i| waiting[i] == 0).collect();
        let mut ops = Vec::with_capacity(handles.len());
        let mut done = 0;
        while let Some(i) = ready.pop_first() {
            done += 1;
            match &self.nodes[i].op {
                Op::Child(child) => ops.extend(child.ordered()?),
                op => ops.push((handles[i], op.clone())),
            }
            for &f in &followers[i] {
                waiting[f] -= 1;
                if waiting[f] == 0 {
                    ready.insert(f);
                }
            }
        }
        if done != handles.len() {
            return Err(INVALID_VALUE);
        }
        Ok(ops)
    }
}

/// A node as `cuGraphExecUpdate` compares it: its kind, its function (kernels) and the
/// positions of the nodes it depends on.
#[derive(PartialEq)]
struct Shape {
    kind: &'static str,
    function: Option<String>,
    deps: Vec<usize>,
}

impl Graph {
    fn shape(&self) -> Vec<Shape> {
        let index: HashMap<usize, usize> = (self.handles().into_iter().enumerate())
            .map(|(i, h)| (h, i))
            .collect();
        (self.nodes.iter())
            .map(|n| {
                let mut deps: Vec<usize> = n.deps.iter().map(|d| index[d]).collect();
                deps.sort_unstable();
                let function = match &n.op {
                    Op::Work(Work::Launch { layout, .. }, _) => Some(layout.name.clone()),
                    _ => None,
                };
                Shape {
                    kind: n.op.label(),
                    function,
                    deps,
                }
            })
            .collect()
    }
}

/// A copy of a graph (a child graph node's): new nodes, the same edges between them.
impl Clone for Graph {
    fn clone(&self) -> Graph {
        let old = self.handles();
        let mut nodes: Vec<Box<Node>> = (self.nodes.iter())
            .map(|n| {
                Box::new(Node {
                    op: n.op.clone(),
                    deps: n.deps.clone(),
                })
            })
            .collect();
        let new: HashMap<usize, usize> = (old.iter().zip(&nodes))
            .map(|(&o, n)| (o, &**n as *const Node as usize))
            .collect();
        for node in &mut nodes {
            for dep in &mut node.deps {
                *dep = new[dep];
            }
        }
        Graph { nodes }
    }
}

/// An executable graph: its operations in a topological order.
pub struct Exec {
    /// `CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH`: a launch first frees what the previous
    /// one allocated and left unfreed.
    auto_free: bool,
    /// Each operation with the handle of the graph node it came from.
    ops: Mutex<Vec<(usize, Op)>>,
    /// The graph's node handles and [`Graph::shape`], what `cuGraphExecUpdate` compares.
    nodes: Vec<usize>,
    shape: Vec<Shape>,
    /// The last operation of the latest launch: the next launch waits for it.
    last: Mutex<Option<Arc<Marker>>>,
}

/// The memory of a memory alloc node (a *graph allocation*). Its address is fixed when the
/// node is made (CUDA's rule), so the shim takes the block from the device's heap then and
/// keeps it while the graph or an executable graph of it exists, or the allocation is live
/// (capacity counts it all that time, as CUDA's graph pool keeps its physical memory). `live`
/// is its CUDA lifetime: from a launch of its alloc node to its free (a free node's launch,
/// `cuMemFree`, `cuMemFreeAsync`); the shim does not unmap it in between, so an access
/// outside that lifetime reads what was there rather than faulting as on CUDA.
pub struct GraphAlloc {
    device: &'static Device,
    size: usize,
    /// The graph whose alloc node made it, while that graph exists.
    graph: Option<usize>,
    /// The graph with a free node for it (one only: CUDA frees a graph allocation once, in
    /// its own graph or in another one).
    freed_by: Option<usize>,
    live: bool,
}

/// A capture sequence.
struct Capture {
    graph: usize,
    mode: u32,
    thread: ThreadId,
    /// The stream it began on, which must end it.
    origin: usize,
    invalidated: bool,
}

/// A stream taking part in a capture.
struct Joined {
    capture: u64,
    frontier: Vec<usize>,
    /// The handle of the context owning the stream, and whether the stream is blocking (the
    /// legacy stream of that context must not be used meanwhile).
    context: usize,
    blocking: bool,
}

#[derive(Default)]
struct State {
    graphs: HashMap<usize, Box<Graph>>,
    execs: HashMap<usize, Arc<Exec>>,
    captures: HashMap<u64, Capture>,
    /// Capturing streams, by [`crate::stream::Identity::id`].
    streams: HashMap<usize, Joined>,
    /// Events last recorded in a capture: the capture and the frontier they stand for.
    events: HashMap<usize, (u64, Vec<usize>)>,
    next_capture: u64,
    /// Graph allocations, by start address.
    allocs: HashMap<usize, GraphAlloc>,
    /// Graphs with memory nodes that have an executable graph: graph → exec.
    memory_execs: HashMap<usize, usize>,
    /// Per device ordinal, the high-water marks of graph memory used and reserved
    /// (`CU_GRAPH_MEM_ATTR_USED_MEM_HIGH`, `…_RESERVED_MEM_HIGH`).
    highs: HashMap<usize, (u64, u64)>,
}

/// Every graph, executable graph and capture of the process.
#[derive(Default)]
pub struct Graphs {
    /// How many captures are in progress: with none, submissions skip the lock.
    active: AtomicUsize,
    state: Mutex<State>,
}

thread_local! {
    /// `cuThreadExchangeStreamCaptureMode`'s mode of this thread (global until changed).
    static MODE: Cell<u32> = const { Cell::new(MODE_GLOBAL) };
}

/// `cuThreadExchangeStreamCaptureMode`: sets the calling thread's mode, returns the previous.
pub fn exchange_mode(mode: u32) -> CuResult<u32> {
    if mode > MODE_RELAXED {
        return Err(INVALID_VALUE);
    }
    MODE.try_with(|m| m.replace(mode)).map_err(|_| UNKNOWN)
}

/// What [`Graphs::free_allocation`] found at an address freed outside graphs.
pub enum GraphFree {
    /// Not a graph allocation: the heap's free applies.
    NotGraph,
    /// A live graph allocation, now freed (its block stays reserved for its graph).
    Freed,
    /// A live graph allocation no graph or executable graph can allocate again: freed, and its
    /// block is the caller's to return to the heap as an ordinary free does.
    Release,
}

impl State {
    /// Takes `size` bytes of `device` for a new alloc node of `graph`.
    fn new_alloc(&mut self, device: &'static Device, size: usize, graph: usize) -> CuResult<usize> {
        let addr = device
            .memory
            .alloc(size, DeviceKind::Device, &device.stats)?;
        let alloc = GraphAlloc {
            device,
            size,
            graph: Some(graph),
            freed_by: None,
            live: false,
        };
        self.allocs.insert(addr, alloc);
        self.note_highs(device.ordinal);
        Ok(addr)
    }

    /// A free node of `graph` for `addr`: it must be the start of a graph allocation that no
    /// graph frees yet (`INVALID_VALUE` otherwise, as `cuGraphAddMemFreeNode` says).
    fn free_in(&mut self, addr: usize, graph: usize) -> CuResult<()> {
        let alloc = self.allocs.get_mut(&addr).ok_or(INVALID_VALUE)?;
        if alloc.freed_by.is_some() {
            return Err(INVALID_VALUE);
        }
        alloc.freed_by = Some(graph);
        Ok(())
    }

    /// Graph memory of device `ordinal`: (bytes of live allocations, bytes of all of them).
    fn usage(&self, ordinal: usize) -> (u64, u64) {
        let mut usage = (0, 0);
        for alloc in self.allocs.values() {
            if alloc.device.ordinal == ordinal {
                let bytes = alloc.size.next_multiple_of(crate::memory::GRANULE) as u64;
                usage.1 += bytes;
                if alloc.live {
                    usage.0 += bytes;
                }
            }
        }
        usage
    }

    fn note_highs(&mut self, ordinal: usize) {
        let (used, reserved) = self.usage(ordinal);
        let high = self.highs.entry(ordinal).or_default();
        *high = (high.0.max(used), high.1.max(reserved));
    }

    /// Returns to their heaps the blocks of graph allocations that are not live and that no
    /// graph or executable graph can allocate again.
    fn release_unused(&mut self) {
        let mut kept: HashSet<usize> = HashSet::new();
        for exec in self.execs.values() {
            kept.extend(exec.ops.lock().iter().filter_map(|(_, op)| match op {
                Op::MemAlloc(addr) => Some(*addr),
                _ => None,
            }));
        }
        let unused: Vec<usize> = (self.allocs.iter())
            .filter(|(addr, a)| a.graph.is_none() && !a.live && !kept.contains(addr))
            .map(|(&addr, _)| addr)
            .collect();
        for addr in unused {
            if let Some(alloc) = self.allocs.remove(&addr) {
                let device = alloc.device;
                // Not live, so no queued work may use it (an exec that ran it is gone).
                let _ = device.memory.free(addr, &device.stats);
            }
        }
    }

    /// A launch running `ops`: each alloc node's allocation must not be live (unless
    /// `auto_free`: then it is freed first), each free node's must be; `INVALID_VALUE` and no
    /// change otherwise. Allocations become live or freed in the order of the operations.
    fn launch_memory(&mut self, ops: &[(usize, Op)], auto_free: bool) -> CuResult<()> {
        let mut after: HashMap<usize, bool> = HashMap::new();
        for (_, op) in ops {
            let (addr, allocates) = match op {
                Op::MemAlloc(addr) => (*addr, true),
                Op::MemFree(addr) => (*addr, false),
                _ => continue,
            };
            let alloc = self.allocs.get(&addr).ok_or(INVALID_VALUE)?;
            let live = after.get(&addr).copied().unwrap_or(alloc.live);
            if (allocates && live && !auto_free) || (!allocates && !live) {
                return Err(INVALID_VALUE);
            }
            after.insert(addr, allocates);
        }
        let mut devices = Vec::new();
        for (addr, live) in after {
            if let Some(alloc) = self.allocs.get_mut(&addr) {
                alloc.live = live;
                devices.push(alloc.device.ordinal);
            }
        }
        for ordinal in devices {
            self.note_highs(ordinal);
        }
        Ok(())
    }

    fn invalidate(&mut self, capture: u64) {
        if let Some(c) = self.captures.get_mut(&capture) {
            c.invalidated = true;
        }
    }

    fn add_node(&mut self, graph: usize, op: Op, deps: Vec<usize>) -> CuResult<usize> {
        let graph = self.graphs.get_mut(&graph).ok_or(INVALID_VALUE)?;
        let node = Box::new(Node { op, deps });
        let handle = &*node as *const Node as usize;
        graph.nodes.push(node);
        Ok(handle)
    }

    /// The capture stream `stream` takes part in, if any (`CUDA_ERROR_STREAM_CAPTURE_INVALIDATED`
    /// once invalidated).
    fn joined(&self, stream: usize) -> CuResult<Option<&Joined>> {
        match self.streams.get(&stream) {
            Some(joined) if self.captures[&joined.capture].invalidated => {
                Err(STREAM_CAPTURE_INVALIDATED)
            }
            joined => Ok(joined),
        }
    }

    /// Appends `op` to the capture of `stream` after its frontier; false if it does not capture.
    fn capture_op(&mut self, stream: usize, op: Op) -> CuResult<bool> {
        let Some(joined) = self.joined(stream)? else {
            return Ok(false);
        };
        let (graph, deps) = (
            self.captures[&joined.capture].graph,
            joined.frontier.clone(),
        );
        let node = self.add_node(graph, op, deps)?;
        if let Some(joined) = self.streams.get_mut(&stream) {
            joined.frontier = vec![node];
        }
        Ok(true)
    }

    /// Use of `context`'s legacy stream: while a blocking stream of it captures, that would
    /// make the legacy stream depend on the capture, so the captures are invalidated and the
    /// call fails with `CUDA_ERROR_STREAM_CAPTURE_IMPLICIT`.
    fn implicit(&mut self, context: usize) -> CuResult<()> {
        match self.invalidate_streams(|j| j.blocking && j.context == context) {
            true => Err(STREAM_CAPTURE_IMPLICIT),
            false => Ok(()),
        }
    }

    /// Invalidates the captures of the capturing streams `which` selects; whether there were
    /// any.
    fn invalidate_streams(&mut self, which: impl Fn(&Joined) -> bool) -> bool {
        let captures: Vec<u64> = (self.streams.values())
            .filter(|j| which(j))
            .map(|j| j.capture)
            .collect();
        for &capture in &captures {
            self.invalidate(capture);
        }
        !captures.is_empty()
    }

    /// Ends capture `id`: its streams and events leave it, its graph is returned (or destroyed,
    /// with the error, when it was invalidated or a forked stream never joined the origin).
    fn finish(&mut self, id: u64, active: &AtomicUsize) -> CuResult<usize> {
        let Some(capture) = self.captures.remove(&id) else {
            return Err(ILLEGAL_STATE);
        };
        active.fetch_sub(1, Ordering::AcqRel);
        let origin = self.streams.remove(&capture.origin).map(|j| j.frontier);
        let others: Vec<usize> = (self.streams.iter())
            .filter(|(_, j)| j.capture == id)
            .map(|(&s, _)| s)
            .collect();
        let mut tails = Vec::new();
        for stream in others {
            if let Some(joined) = self.streams.remove(&stream) {
                tails.extend(joined.frontier);
            }
        }
        self.events.retain(|_, (capture, _)| *capture != id);
        let result = if capture.invalidated {
            Err(STREAM_CAPTURE_INVALIDATED)
        } else {
            let joined = self.ancestors(capture.graph, origin.unwrap_or_default());
            if tails.iter().all(|t| joined.contains(t)) {
                Ok(capture.graph)
            } else {
                Err(STREAM_CAPTURE_UNJOINED)
            }
        };
        if result.is_err() {
            self.graphs.remove(&capture.graph);
            self.graph_gone(capture.graph);
        }
        result
    }

    /// `graph` was destroyed: its allocations that are not live and belong to no executable
    /// graph go back to the heap.
    fn graph_gone(&mut self, graph: usize) {
        self.memory_execs.remove(&graph);
        for alloc in self.allocs.values_mut() {
            if alloc.graph == Some(graph) {
                alloc.graph = None;
            }
        }
        self.release_unused();
    }

    /// `from` and every node they depend on, directly or not.
    fn ancestors(&self, graph: usize, from: Vec<usize>) -> HashSet<usize> {
        let deps: HashMap<usize, &[usize]> =
            self.graphs.get(&graph).map_or_else(HashMap::new, |g| {
                (g.nodes.iter())
                    .map(|n| (&**n as *const Node as usize, n.deps.as_slice()))
                    .collect()
            });
        let mut seen = HashSet::new();
        let mut todo = from;
        while let Some(node) = todo.pop() {
            if seen.insert(node) {
                todo.extend(deps.get(&node).copied().unwrap_or_default());
            }
        }
        seen
    }
}

impl Graphs {
    fn capturing(&self) -> bool {
        self.active.load(Ordering::Acquire) != 0
    }

    /// A call that is unsafe during capture (it allocates, frees or synchronises outside stream
    /// order): under the calling thread's mode, the captures that prohibit it are invalidated
    /// and it fails with `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`. A global-mode thread is
    /// prohibited by its own non-relaxed captures and by any thread's global captures, a
    /// thread-local one by its own non-relaxed captures, a relaxed one by none.
    pub fn unsafe_call(&self) -> CuResult<()> {
        if !self.capturing() {
            return Ok(());
        }
        let mode = MODE.try_with(Cell::get).unwrap_or(MODE_GLOBAL);
        let me = std::thread::current().id();
        let mut state = self.state.lock();
        let prohibiting: Vec<u64> = (state.captures.iter())
            .filter(|(_, c)| {
                let own = c.thread == me && c.mode != MODE_RELAXED;
                match mode {
                    MODE_GLOBAL => own || c.mode == MODE_GLOBAL,
                    MODE_THREAD_LOCAL => own,
                    _ => false,
                }
            })
            .map(|(&id, _)| id)
            .collect();
        if prohibiting.is_empty() {
            return Ok(());
        }
        for id in prohibiting {
            state.invalidate(id);
        }
        Err(STREAM_CAPTURE_UNSUPPORTED)
    }

    /// `cuEventQuery`/`cuEventSynchronize` of an event last recorded in a capture: it stands
    /// for no work, `CUDA_ERROR_CAPTURED_EVENT`, and the capture is invalidated.
    pub fn check_event(&self, event: usize) -> CuResult<()> {
        if !self.capturing() {
            return Ok(());
        }
        let mut state = self.state.lock();
        match state.events.get(&event).map(|(capture, _)| *capture) {
            Some(capture) => {
                state.invalidate(capture);
                Err(CAPTURED_EVENT)
            }
            None => Ok(()),
        }
    }

    // ---- graphs and executable graphs ----

    /// `cuGraphCreate`: an empty graph.
    pub fn create(&self) -> usize {
        let graph = Box::<Graph>::default();
        let handle = &*graph as *const Graph as usize;
        self.state.lock().graphs.insert(handle, graph);
        handle
    }

    /// `cuGraphDestroy`: its allocations that are not live and belong to no executable graph
    /// go back to the heap.
    pub fn destroy(&self, graph: usize) -> CuResult<()> {
        let mut state = self.state.lock();
        if state.captures.values().any(|c| c.graph == graph) {
            return Err(INVALID_VALUE);
        }
        state.graphs.remove(&graph).ok_or(INVALID_VALUE)?;
        state.graph_gone(graph);
        Ok(())
    }

    /// `cuGraphGetNodes`: the node handles, in the order they were added.
    pub fn nodes(&self, graph: usize) -> CuResult<Vec<usize>> {
        let state = self.state.lock();
        Ok(state.graphs.get(&graph).ok_or(INVALID_VALUE)?.handles())
    }

    /// `cuGraphInstantiateWithFlags`: the nodes in an order that respects every dependency. A
    /// graph with memory nodes may have one executable graph at a time (a second is
    /// `INVALID_VALUE`: CUDA documents an error without naming it).
    pub fn instantiate(&self, handle: usize, auto_free: bool) -> CuResult<usize> {
        let mut state = self.state.lock();
        let graph = state.graphs.get(&handle).ok_or(INVALID_VALUE)?;
        let memory = graph.nodes.iter().any(|n| n.op.is_memory());
        if memory && state.memory_execs.contains_key(&handle) {
            return Err(INVALID_VALUE);
        }
        let exec = Arc::new(Exec {
            auto_free,
            ops: Mutex::new(graph.ordered()?),
            nodes: graph.handles(),
            shape: graph.shape(),
            last: Mutex::new(None),
        });
        let exec_handle = Arc::as_ptr(&exec) as usize;
        state.execs.insert(exec_handle, exec);
        if memory {
            state.memory_execs.insert(handle, exec_handle);
        }
        Ok(exec_handle)
    }

    /// Adds a node running `op` to `graph` after `deps` (distinct nodes of that graph; a graph
    /// being captured takes no explicit nodes).
    pub fn add(&self, graph: usize, op: Op, deps: &[usize]) -> CuResult<usize> {
        self.add_with(graph, deps, |_, _| Ok(op))
    }

    /// `cuGraphAddMemAllocNode`: an alloc node of `size` bytes of `device`; its handle and the
    /// allocation's address, fixed from now on.
    pub fn add_alloc(
        &self,
        graph: usize,
        deps: &[usize],
        device: &'static Device,
        size: usize,
    ) -> CuResult<(usize, usize)> {
        let mut addr = 0;
        let node = self.add_with(graph, deps, |state, graph| {
            addr = state.new_alloc(device, size, graph)?;
            Ok(Op::MemAlloc(addr))
        })?;
        Ok((node, addr))
    }

    /// `cuGraphAddMemFreeNode`: a free node of the graph allocation starting at `addr`.
    pub fn add_free(&self, graph: usize, deps: &[usize], addr: usize) -> CuResult<usize> {
        self.add_with(graph, deps, |state, graph| {
            state.free_in(addr, graph)?;
            Ok(Op::MemFree(addr))
        })
    }

    /// [`Graphs::add`] of the operation `op` makes once the graph and dependencies are checked.
    fn add_with(
        &self,
        graph: usize,
        deps: &[usize],
        op: impl FnOnce(&mut State, usize) -> CuResult<Op>,
    ) -> CuResult<usize> {
        let mut state = self.state.lock();
        if state.captures.values().any(|c| c.graph == graph) {
            return Err(INVALID_VALUE);
        }
        let nodes: HashSet<usize> = (state.graphs.get(&graph).ok_or(INVALID_VALUE)?)
            .handles()
            .into_iter()
            .collect();
        let mut seen = HashSet::new();
        if deps.iter().any(|d| !nodes.contains(d) || !seen.insert(*d)) {
            return Err(INVALID_VALUE);
        }
        let op = op(&mut state, graph)?;
        state.add_node(graph, op, deps.to_vec())
    }

    /// The operation of node `node` of any graph (`INVALID_VALUE` for an unknown handle).
    fn node_op(&self, node: usize) -> CuResult<Op> {
        let state = self.state.lock();
        (state.graphs.values())
            .flat_map(|g| g.nodes.iter())
            .find(|n| &***n as *const Node as usize == node)
            .map(|n| n.op.clone())
            .ok_or(INVALID_VALUE)
    }

    /// `cuGraphMemAllocNodeGetParams`: the alloc node's address, size and device ordinal.
    pub fn alloc_params(&self, node: usize) -> CuResult<(usize, usize, usize)> {
        let Op::MemAlloc(addr) = self.node_op(node)? else {
            return Err(INVALID_VALUE);
        };
        let state = self.state.lock();
        let alloc = state.allocs.get(&addr).ok_or(INVALID_VALUE)?;
        Ok((addr, alloc.size, alloc.device.ordinal))
    }

    /// `cuGraphMemFreeNodeGetParams`: the address the free node frees.
    pub fn free_params(&self, node: usize) -> CuResult<usize> {
        match self.node_op(node)? {
            Op::MemFree(addr) => Ok(addr),
            _ => Err(INVALID_VALUE),
        }
    }

    /// `cuMemFree`/`cuMemFreeAsync` of `addr` outside capture: a live graph allocation is
    /// freed; one that is not live is `INVALID_VALUE` (freed already, or never allocated by a
    /// launch); other memory is the heap's.
    pub fn free_allocation(&self, addr: usize) -> CuResult<GraphFree> {
        let mut state = self.state.lock();
        let Some(alloc) = state.allocs.get_mut(&addr) else {
            return Ok(GraphFree::NotGraph);
        };
        if !alloc.live {
            return Err(INVALID_VALUE);
        }
        alloc.live = false;
        let gone = alloc.graph.is_none();
        let kept = gone
            && (state.execs.values()).any(|e| {
                (e.ops.lock().iter()).any(|(_, op)| matches!(op, Op::MemAlloc(a) if *a == addr))
            });
        if gone && !kept {
            state.allocs.remove(&addr);
            return Ok(GraphFree::Release);
        }
        Ok(GraphFree::Freed)
    }

    /// `cuDeviceGetGraphMemAttribute` of device `ordinal`: `CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT`
    /// (0), `…_USED_MEM_HIGH` (1), `…_RESERVED_MEM_CURRENT` (2), `…_RESERVED_MEM_HIGH` (3).
    pub fn memory_attribute(&self, ordinal: usize, attr: u32) -> CuResult<u64> {
        let state = self.state.lock();
        let (used, reserved) = state.usage(ordinal);
        let (used_high, reserved_high) = state.highs.get(&ordinal).copied().unwrap_or_default();
        match attr {
            0 => Ok(used),
            1 => Ok(used_high),
            2 => Ok(reserved),
            3 => Ok(reserved_high),
            _ => Err(INVALID_VALUE),
        }
    }

    /// `cuDeviceSetGraphMemAttribute`: a high-water mark (attribute 1 or 3) reset to zero, the
    /// only value allowed.
    pub fn reset_high(&self, ordinal: usize, attr: u32, value: u64) -> CuResult<()> {
        let mut state = self.state.lock();
        let high = state.highs.entry(ordinal).or_default();
        match (attr, value) {
            (1, 0) => high.0 = 0,
            (3, 0) => high.1 = 0,
            _ => return Err(INVALID_VALUE),
        }
        Ok(())
    }

    /// `cuGraphAddDependencies`: `to[i]` follows `from[i]`; both nodes of `graph` and the edge
    /// new, else `INVALID_VALUE` (and no edge is added).
    pub fn add_dependencies(&self, graph: usize, from: &[usize], to: &[usize]) -> CuResult<()> {
        let mut state = self.state.lock();
        let graph = state.graphs.get_mut(&graph).ok_or(INVALID_VALUE)?;
        let index: HashMap<usize, usize> = (graph.handles().into_iter().enumerate())
            .map(|(i, h)| (h, i))
            .collect();
        let mut edges = HashSet::new();
        for (f, t) in from.iter().zip(to) {
            let (Some(_), Some(&i)) = (index.get(f), index.get(t)) else {
                return Err(INVALID_VALUE);
            };
            if f == t || graph.nodes[i].deps.contains(f) || !edges.insert((*f, i)) {
                return Err(INVALID_VALUE);
            }
        }
        for (f, i) in edges {
            graph.nodes[i].deps.push(f);
        }
        Ok(())
    }

    /// A copy of `graph`, for a child graph node (a graph with memory nodes cannot be one:
    /// `INVALID_VALUE`).
    pub fn copy(&self, graph: usize) -> CuResult<Box<Graph>> {
        let state = self.state.lock();
        let graph = state.graphs.get(&graph).ok_or(INVALID_VALUE)?;
        if graph.nodes.iter().any(|n| n.op.is_memory()) {
            return Err(INVALID_VALUE);
        }
        Ok(graph.clone())
    }

    /// `cuGraphExecKernelNodeSetParams`: the kernel launch `node` of `exec` runs from its next
    /// launch on (`INVALID_VALUE` if `node` is not a kernel node of it).
    pub fn set_kernel(&self, exec: usize, node: usize, work: Work) -> CuResult<()> {
        let exec = (self.state.lock().execs.get(&exec).cloned()).ok_or(INVALID_VALUE)?;
        let mut ops = exec.ops.lock();
        let (_, op) = (ops.iter_mut().find(|(n, _)| *n == node)).ok_or(INVALID_VALUE)?;
        match op {
            Op::Work(old @ Work::Launch { .. }, _) => *old = work,
            _ => return Err(INVALID_VALUE),
        }
        Ok(())
    }

    /// `cuGraphExecUpdate`: `graph`'s operations replace `exec`'s (from its next launch on)
    /// when the two graphs have the same topology, node kinds and kernel functions; otherwise
    /// `exec` is unchanged and the answer is the `CUgraphExecUpdateResult` and the first node
    /// of `graph` that differs (a graph with child graph or memory nodes is not supported).
    pub fn update(&self, exec: usize, graph: usize) -> CuResult<Result<(), (u32, usize)>> {
        const TOPOLOGY_CHANGED: u32 = 2;
        const NODE_TYPE_CHANGED: u32 = 3;
        const FUNCTION_CHANGED: u32 = 4;
        const NOT_SUPPORTED: u32 = 6;
        let state = self.state.lock();
        let exec = state.execs.get(&exec).cloned().ok_or(INVALID_VALUE)?;
        let graph = state.graphs.get(&graph).ok_or(INVALID_VALUE)?;
        let (shape, handles) = (graph.shape(), graph.handles());
        if shape.len() != exec.shape.len() {
            return Ok(Err((TOPOLOGY_CHANGED, 0)));
        }
        for ((new, old), &node) in shape.iter().zip(&exec.shape).zip(&handles) {
            let differs = match () {
                _ if new.kind == "graph" || new.kind.starts_with("mem_") => Some(NOT_SUPPORTED),
                _ if new.deps != old.deps => Some(TOPOLOGY_CHANGED),
                _ if new.kind != old.kind => Some(NODE_TYPE_CHANGED),
                _ if new.function != old.function => Some(FUNCTION_CHANGED),
                _ => None,
            };
            if let Some(result) = differs {
                return Ok(Err((result, node)));
            }
        }
        let old: HashMap<usize, usize> = handles
            .into_iter()
            .zip(exec.nodes.iter().copied())
            .collect();
        let ops = (graph.ordered()?.into_iter())
            .map(|(node, op)| (old[&node], op))
            .collect();
        *exec.ops.lock() = ops;
        Ok(Ok(()))
    }

    /// Whether `exec` is a live executable graph (`INVALID_VALUE` if not).
    pub fn check_exec(&self, exec: usize) -> CuResult<()> {
        let state = self.state.lock();
        state.execs.get(&exec).map(drop).ok_or(INVALID_VALUE)
    }

    /// `cuGraphExecDestroy`; a graph allocation only it could allocate again goes back to the
    /// heap once not live, after the exec's last launch.
    pub fn exec_destroy(&self, exec: usize) -> CuResult<()> {
        let mut state = self.state.lock();
        let exec = state.execs.remove(&exec).ok_or(INVALID_VALUE)?;
        let handle = Arc::as_ptr(&exec) as usize;
        state.memory_execs.retain(|_, e| *e != handle);
        drop(state);
        if exec.ops.lock().iter().any(|(_, op)| op.is_memory()) {
            let last = exec.last.lock().clone();
            if let Some(last) = last {
                last.wait();
            }
            self.state.lock().release_unused();
        }
        Ok(())
    }

    /// `cuGraphDebugDotPrint`: the graph in Graphviz's language, one vertex per node labelled
    /// with its kind, one edge per dependency.
    pub fn dot(&self, graph: usize) -> CuResult<String> {
        let state = self.state.lock();
        let graph = state.graphs.get(&graph).ok_or(INVALID_VALUE)?;
        let mut text = String::from("digraph cuda_shim_graph {\n");
        for node in &graph.nodes {
            let handle = &**node as *const Node as usize;
            text += &format!("  n{handle:x} [label=\"{}\"];\n", node.op.label());
            for dep in &node.deps {
                text += &format!("  n{dep:x} -> n{handle:x};\n");
            }
        }
        text += "}\n";
        Ok(text)
    }
}

// ---- what the driver calls do during capture (the contexts' side) ----

impl Context {
    fn graphs(&self) -> &'static Graphs {
        &self.driver().graphs
    }

    /// While any capture is in progress, `stream`'s identity and the locked capture state;
    /// None otherwise (the common case, which takes no lock).
    fn capture_state(
        &self,
        stream: usize,
    ) -> CuResult<Option<(Identity, MutexGuard<'static, State>)>> {
        let graphs = self.graphs();
        if !graphs.capturing() {
            return Ok(None);
        }
        let identity = self.streams.identity(stream)?;
        Ok(Some((identity, graphs.state.lock())))
    }

    /// Queues `work` on `stream` of this context, or appends it to the stream's capture.
    /// Returns the marker of the submitted operation, None when captured; `tally` is counted
    /// now if it runs, at each launch if captured. Using the legacy stream while a blocking
    /// stream of this context captures is `CUDA_ERROR_STREAM_CAPTURE_IMPLICIT`.
    pub(crate) fn enqueue(
        &self,
        stream: usize,
        work: Work,
        tally: Tally,
    ) -> CuResult<Option<Arc<Marker>>> {
        if let Some((identity, mut state)) = self.capture_state(stream)? {
            if state.capture_op(identity.id, Op::Work(work.clone(), tally))? {
                return Ok(None);
            }
            if identity.legacy {
                state.implicit(self.handle())?;
            }
        }
        let done = self.streams.submit(stream, work, None)?;
        if let Some((counter, amount)) = tally {
            Stats::add(counter, amount);
        }
        Ok(Some(done))
    }

    /// Whether `stream` takes part in a capture.
    pub(crate) fn captures(&self, stream: usize) -> CuResult<bool> {
        let state = self.capture_state(stream)?;
        Ok(state.is_some_and(|(identity, state)| state.streams.contains_key(&identity.id)))
    }

    /// A call on `stream` that cannot be captured: one that makes the host wait for the stream
    /// (synchronising or querying it, a synchronous copy on it: a capturing stream has nothing
    /// to wait for), or a graph launch (child graph nodes are not supported).
    /// On a capturing stream it is `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED` and the capture is
    /// invalidated; on the legacy stream while a blocking stream captures,
    /// `CUDA_ERROR_STREAM_CAPTURE_IMPLICIT`.
    pub(crate) fn outside_capture(&self, stream: usize) -> CuResult<()> {
        let Some((identity, mut state)) = self.capture_state(stream)? else {
            return Ok(());
        };
        if let Some(capture) = state.streams.get(&identity.id).map(|j| j.capture) {
            state.invalidate(capture);
            return Err(STREAM_CAPTURE_UNSUPPORTED);
        }
        if identity.legacy {
            state.implicit(self.handle())?;
        }
        Ok(())
    }

    /// `cuMemAllocAsync` on a capturing stream: an alloc node of `size` bytes of `device`
    /// after the stream's frontier; the allocation's address.
    pub(crate) fn capture_alloc(
        &self,
        stream: usize,
        device: &'static Device,
        size: usize,
    ) -> CuResult<usize> {
        let (identity, mut state) = self.capture_state(stream)?.ok_or(ILLEGAL_STATE)?;
        let capture = state.joined(identity.id)?.ok_or(ILLEGAL_STATE)?.capture;
        let graph = state.captures[&capture].graph;
        let addr = state.new_alloc(device, size, graph)?;
        state.capture_op(identity.id, Op::MemAlloc(addr))?;
        Ok(addr)
    }

    /// `cuMemFreeAsync` on a capturing stream: a free node of the graph allocation at `addr`
    /// (`INVALID_VALUE` for other memory, or one a graph frees already).
    pub(crate) fn capture_free(&self, stream: usize, addr: usize) -> CuResult<()> {
        let (identity, mut state) = self.capture_state(stream)?.ok_or(ILLEGAL_STATE)?;
        let capture = state.joined(identity.id)?.ok_or(ILLEGAL_STATE)?.capture;
        let graph = state.captures[&capture].graph;
        state.free_in(addr, graph)?;
        state.capture_op(identity.id, Op::MemFree(addr)).map(drop)
    }

    /// `cuCtxSynchronize` while a stream of this context captures: unsupported, in any mode,
    /// and those captures are invalidated.
    pub(crate) fn check_synchronize(&self) -> CuResult<()> {
        let graphs = self.graphs();
        if !graphs.capturing() {
            return Ok(());
        }
        let mut state = graphs.state.lock();
        match state.invalidate_streams(|j| j.context == self.handle()) {
            true => Err(STREAM_CAPTURE_UNSUPPORTED),
            false => Ok(()),
        }
    }

    /// `cuStreamBeginCapture_v2` on a stream of this context.
    pub fn begin_capture(&self, stream: usize, mode: u32) -> CuResult<()> {
        if mode > MODE_RELAXED {
            return Err(INVALID_VALUE);
        }
        let identity = self.streams.identity(stream)?;
        if identity.legacy {
            return Err(STREAM_CAPTURE_UNSUPPORTED);
        }
        let graphs = self.graphs();
        let graph = graphs.create();
        let mut state = graphs.state.lock();
        if state.streams.contains_key(&identity.id) {
            state.graphs.remove(&graph);
            return Err(ILLEGAL_STATE);
        }
        state.next_capture += 1;
        let id = state.next_capture;
        let capture = Capture {
            graph,
            mode,
            thread: std::thread::current().id(),
            origin: identity.id,
            invalidated: false,
        };
        state.captures.insert(id, capture);
        let joined = Joined {
            capture: id,
            frontier: Vec::new(),
            context: self.handle(),
            blocking: identity.blocking,
        };
        state.streams.insert(identity.id, joined);
        graphs.active.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// `cuStreamEndCapture`: the captured graph. Only the stream that began the capture ends it
    /// (`CUDA_ERROR_STREAM_CAPTURE_UNMATCHED` from a stream that joined it,
    /// `CUDA_ERROR_ILLEGAL_STATE` from one not capturing), and from the thread that began it
    /// unless relaxed (`CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD`, the capture goes on).
    pub fn end_capture(&self, stream: usize) -> CuResult<usize> {
        let identity = self.streams.identity(stream)?;
        let graphs = self.graphs();
        let mut state = graphs.state.lock();
        let id = state
            .streams
            .get(&identity.id)
            .map(|j| j.capture)
            .ok_or(ILLEGAL_STATE)?;
        let capture = &state.captures[&id];
        if capture.origin != identity.id {
            return Err(STREAM_CAPTURE_UNMATCHED);
        }
        if capture.mode != MODE_RELAXED && capture.thread != std::thread::current().id() {
            return Err(STREAM_CAPTURE_WRONG_THREAD);
        }
        state.finish(id, &graphs.active)
    }

    /// `cuStreamIsCapturing`/`cuStreamGetCaptureInfo`: the status, and during a capture its id,
    /// graph and the stream's frontier (valid until the stream's next captured call). The
    /// legacy stream while a blocking stream captures is `CUDA_ERROR_STREAM_CAPTURE_IMPLICIT`.
    pub fn capture_info(&self, stream: usize) -> CuResult<CaptureInfo> {
        let identity = self.streams.identity(stream)?;
        let graphs = self.graphs();
        let state = graphs.state.lock();
        let Some(joined) = state.streams.get(&identity.id) else {
            let implicit = identity.legacy
                && (state.streams.values()).any(|j| j.blocking && j.context == self.handle());
            if implicit {
                return Err(STREAM_CAPTURE_IMPLICIT);
            }
            return Ok(CaptureInfo::default());
        };
        let capture = &state.captures[&joined.capture];
        Ok(CaptureInfo {
            status: if capture.invalidated {
                STATUS_INVALIDATED
            } else {
                STATUS_ACTIVE
            },
            id: joined.capture,
            graph: capture.graph,
            frontier: (joined.frontier.as_ptr(), joined.frontier.len()),
        })
    }

    /// `cuStreamUpdateCaptureDependencies`: the capturing stream's next work follows `deps`
    /// (nodes of its capture's graph) as well as its frontier, or, with `set`, instead of it.
    /// `CUDA_ERROR_ILLEGAL_STATE` on a stream not capturing.
    pub fn update_capture_dependencies(
        &self,
        stream: usize,
        deps: &[usize],
        set: bool,
    ) -> CuResult<()> {
        let identity = self.streams.identity(stream)?;
        let mut state = self.graphs().state.lock();
        let capture = state.joined(identity.id)?.ok_or(ILLEGAL_STATE)?.capture;
        let graph = state.captures[&capture].graph;
        let nodes: HashSet<usize> = (state.graphs.get(&graph).ok_or(INVALID_VALUE)?)
            .handles()
            .into_iter()
            .collect();
        if deps.iter().any(|d| !nodes.contains(d)) {
            return Err(INVALID_VALUE);
        }
        if let Some(joined) = state.streams.get_mut(&identity.id) {
            if set {
                joined.frontier.clear();
            }
            for &dep in deps {
                if !joined.frontier.contains(&dep) {
                    joined.frontier.push(dep);
                }
            }
        }
        Ok(())
    }

    /// `cuEventRecord[WithFlags]` of `event` on `stream`: during a capture the event stands for
    /// the stream's frontier (an event record node first when `external`). Returns whether the
    /// stream captures (then nothing is submitted).
    pub(crate) fn capture_record(
        &self,
        event: usize,
        stream: usize,
        external: bool,
    ) -> CuResult<bool> {
        let Some((identity, mut state)) = self.capture_state(stream)? else {
            return Ok(false);
        };
        let Some(joined) = state.joined(identity.id)? else {
            state.events.remove(&event);
            if identity.legacy {
                state.implicit(self.handle())?;
            }
            return Ok(false);
        };
        let capture = joined.capture;
        if external {
            state.capture_op(identity.id, Op::EventRecord(event))?;
        }
        let frontier = state.streams[&identity.id].frontier.clone();
        state.events.insert(event, (capture, frontier));
        Ok(true)
    }

    /// `cuStreamWaitEvent`: an event recorded in a capture adds its frontier to the waiting
    /// stream's, and a stream not yet capturing joins that capture; an event of another capture
    /// is `CUDA_ERROR_STREAM_CAPTURE_MERGE`. A capturing stream waiting for an event recorded
    /// outside capture gets an event wait node with `external`, and
    /// `CUDA_ERROR_STREAM_CAPTURE_ISOLATION` without. Returns whether the wait was captured.
    pub(crate) fn capture_wait(
        &self,
        stream: usize,
        event: usize,
        external: bool,
    ) -> CuResult<bool> {
        let Some((identity, mut state)) = self.capture_state(stream)? else {
            return Ok(false);
        };
        let recorded = state.events.get(&event).cloned();
        let joined = state.streams.get(&identity.id).map(|j| j.capture);
        match (recorded, joined) {
            (Some((capture, nodes)), Some(own)) => {
                if capture != own {
                    state.invalidate(capture);
                    state.invalidate(own);
                    return Err(STREAM_CAPTURE_MERGE);
                }
                state.joined(identity.id)?;
                if let Some(joined) = state.streams.get_mut(&identity.id) {
                    for node in nodes {
                        if !joined.frontier.contains(&node) {
                            joined.frontier.push(node);
                        }
                    }
                }
                Ok(true)
            }
            (Some((capture, nodes)), None) => {
                if state.captures[&capture].invalidated {
                    return Err(STREAM_CAPTURE_INVALIDATED);
                }
                if identity.legacy {
                    state.invalidate(capture);
                    return Err(STREAM_CAPTURE_IMPLICIT);
                }
                let joined = Joined {
                    capture,
                    frontier: nodes,
                    context: self.handle(),
                    blocking: identity.blocking,
                };
                state.streams.insert(identity.id, joined);
                Ok(true)
            }
            (None, Some(own)) if !external => {
                state.invalidate(own);
                Err(STREAM_CAPTURE_ISOLATION)
            }
            (None, Some(_)) => state.capture_op(identity.id, Op::EventWait(event)),
            (None, None) => {
                if identity.legacy {
                    state.implicit(self.handle())?;
                }
                Ok(false)
            }
        }
    }

    /// `cuGraphLaunch`: submits the exec's operations to `stream` in their order, the first
    /// after the exec's previous launch. Launching into a capturing stream (a child graph node
    /// on CUDA) is not supported: `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`, and the capture is
    /// invalidated.
    pub fn launch_graph(&self, exec: usize, stream: usize) -> CuResult<()> {
        let graphs = self.graphs();
        let exec = graphs
            .state
            .lock()
            .execs
            .get(&exec)
            .cloned()
            .ok_or(INVALID_VALUE)?;
        self.outside_capture(stream)?;
        let driver = self.driver();
        let ops = exec.ops.lock().clone();
        let mut last = exec.last.lock();
        if ops.iter().any(|(_, op)| op.is_memory()) {
            graphs.state.lock().launch_memory(&ops, exec.auto_free)?;
        }
        let mut after = last.take();
        let mut tail = None;
        for (_, op) in &ops {
            let (work, wait_for, recorded) = match op {
                Op::Work(work, _) => (work.clone(), None, None),
                Op::Child(_) => return Err(UNKNOWN), // flattened by `ordered`
                // The memory is the graph's from the node's creation (see `GraphAlloc`).
                Op::MemAlloc(_) | Op::MemFree(_) => (Work::Marker, None, None),
                Op::EventRecord(event) => (Work::Marker, None, Some(driver.event(*event)?)),
                Op::EventWait(event) => {
                    let marker = driver.event(*event)?.recorded.lock().clone();
                    (Work::Marker, marker, None)
                }
            };
            let wait_for = match (after.take(), wait_for) {
                (Some(previous), Some(event)) => {
                    // Two waits: the previous launch's end first, as a marker of its own.
                    self.streams.submit(stream, Work::Marker, Some(previous))?;
                    Some(event)
                }
                (previous, event) => previous.or(event),
            };
            let done = self.streams.submit(stream, work, wait_for)?;
            if let Op::Work(_, Some((counter, amount))) = op {
                Stats::add(counter, *amount);
            }
            if let Some(event) = recorded {
                *event.recorded.lock() = Some(done.clone());
            }
            tail = Some(done);
        }
        if tail.is_none() {
            // An empty graph still orders the stream after the previous launch.
            tail = Some(self.streams.submit(stream, Work::Marker, after)?);
        }
        *last = tail;
        Ok(())
    }
}

/// What `capture_info` answers.
pub struct CaptureInfo {
    pub status: u32,
    pub id: u64,
    pub graph: usize,
    pub frontier: (*const usize, usize),
}

impl Default for CaptureInfo {
    fn default() -> CaptureInfo {
        CaptureInfo {
            status: STATUS_NONE,
            id: 0,
            graph: 0,
            frontier: (std::ptr::null(), 0),
        }
    }
}

/// Writes `text` to `path` (`cuGraphDebugDotPrint`): `CUDA_ERROR_OPERATING_SYSTEM` if it fails.
pub fn write_file(path: &str, text: &str) -> CuResult<()> {
    std::fs::write(path, text).map_err(|_| OPERATING_SYSTEM)
}
