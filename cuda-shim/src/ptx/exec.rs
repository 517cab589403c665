//! The interpreter: CUDA's execution model over [`Inst`]s.
//!
//! A block runs on one host thread, warp after warp: a warp executes each instruction for its
//! 32 lanes at once (registers are stored lane-minor, `[u64; 32]` per register), so the cost of
//! decoding is shared by the lanes. Divergent lanes each keep a program counter; the warp runs the
//! lanes at the smallest one (they reconverge where the paths meet, as on a GPU with structured
//! control flow). A warp runs until `bar.sync` or its end, then the next; when every warp has
//! arrived, the barrier opens. Blocks run in parallel on host threads.
//!
//! Addresses: global memory is the device's (host) address space, checked against live device
//! memory (an access outside it is a fault, `CUDA_ERROR_ILLEGAL_ADDRESS`). Shared, local and
//! parameter memory have windows of their own; a generic address of one of them lies at that
//! window's base (`cvta`), far above every user-space address.

use super::ir::*;
use super::parse::Kernel;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// Generic addresses of the shared, local and parameter windows (above the x86-64 user space).
pub const SHARED_WINDOW: u64 = 0xA000_0000_0000_0000;
pub const LOCAL_WINDOW: u64 = 0xB000_0000_0000_0000;
pub const PARAM_WINDOW: u64 = 0xC000_0000_0000_0000;
const WINDOW_SIZE: u64 = 1 << 40;

const FULL: u32 = u32::MAX;

/// Where a kernel may read and write device memory.
pub trait Memory: Sync {
    /// The range of accessible memory that holds `addr`, if any.
    fn range(&self, addr: u64) -> Option<Region>;
}

/// A range `[start, end)` a kernel may access; `host` for mapped page-locked host memory, which
/// a GPU reaches over the host link (zero-copy).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    pub start: u64,
    pub end: u64,
    pub host: bool,
}

/// What a launch did: thread-instructions executed, and bytes it read or wrote in mapped host
/// memory (what a GPU would have moved over the host link).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub thread_instructions: u64,
    pub host_bytes: u64,
}

/// Why a launch stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// An access outside every allocation (`CUDA_ERROR_ILLEGAL_ADDRESS`).
    IllegalAddress { addr: u64, line: u32 },
    /// An access not aligned to its size (`CUDA_ERROR_MISALIGNED_ADDRESS`).
    Misaligned { addr: u64, line: u32 },
    /// An instruction outside the subset (`CUDA_ERROR_INVALID_PTX`).
    Unsupported { what: String, line: u32 },
    /// A device `assert` failed (`CUDA_ERROR_ASSERT`): CUDA's message for each thread that
    /// failed it in the warp that stopped the kernel, one line each.
    Assert { message: String },
    /// A launch configuration the kernel cannot run with (`CUDA_ERROR_INVALID_VALUE`).
    InvalidConfiguration(String),
}

/// One launch's configuration and what it reads.
pub struct Launch<'a> {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub dynamic_shared: usize,
    /// The packed parameter buffer (offsets of [`Kernel::params`]).
    pub params: &'a [u8],
    /// The device address of each module-level variable, by index.
    pub globals: &'a [u64],
    pub memory: &'a dyn Memory,
    /// Host threads that may run blocks at once.
    pub threads: usize,
    /// Receives what the kernel's `printf`s wrote, once, after the last block (blocks in order
    /// of their index, each block's lines in the order its threads wrote them).
    pub printf: &'a (dyn Fn(&[u8]) + Sync),
}

/// The first instruction outside the subset, if the kernel has one.
pub fn first_unsupported(kernel: &Kernel) -> Option<Fault> {
    let inst = &kernel.insts[kernel.first_unsupported?];
    match &inst.op {
        Op::Unsupported { what } => Some(Fault::Unsupported {
            what: what.clone(),
            line: inst.line,
        }),
        _ => None,
    }
}

/// Runs every block of the launch; returns the first fault, after which no new block starts.
pub fn run(kernel: &Kernel, launch: &Launch) -> Result<Counts, Fault> {
    if let Some(fault) = first_unsupported(kernel) {
        return Err(fault);
    }
    let threads_per_block: u64 = launch.block.iter().map(|&d| d as u64).product();
    if threads_per_block == 0 || threads_per_block > 1024 || launch.grid.contains(&0) {
        return Err(Fault::InvalidConfiguration(format!(
            "grid {:?} block {:?}",
            launch.grid, launch.block
        )));
    }
    let blocks = launch.grid.iter().map(|&d| d as usize).product::<usize>();
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let fault: Mutex<Option<Fault>> = Mutex::new(None);
    let executed = AtomicU64::new(0);
    let host_bytes = AtomicU64::new(0);
    let printed: Mutex<Vec<(usize, Vec<u8>)>> = Mutex::new(Vec::new());
    let work = || {
        let mut block = BlockState::new(kernel, launch);
        loop {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            let index = next.fetch_add(1, Ordering::Relaxed);
            if index >= blocks {
                break;
            }
            let [gx, gy, _] = launch.grid;
            let ctaid = [
                (index % gx as usize) as u32,
                ((index / gx as usize) % gy as usize) as u32,
                (index / (gx as usize * gy as usize)) as u32,
            ];
            let result = block.run(ctaid);
            if !block.printf.is_empty() {
                let text = std::mem::take(&mut block.printf);
                printed
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((index, text));
            }
            if let Err(f) = result {
                stop.store(true, Ordering::Relaxed);
                let mut first = fault.lock().unwrap_or_else(|e| e.into_inner());
                first.get_or_insert(f);
                break;
            }
        }
        executed.fetch_add(block.executed, Ordering::Relaxed);
        host_bytes.fetch_add(block.host_bytes, Ordering::Relaxed);
    };
    let helpers = launch.threads.min(blocks).saturating_sub(1);
    if helpers == 0 {
        work();
    } else {
        std::thread::scope(|scope| {
            for _ in 0..helpers {
                scope.spawn(work);
            }
            work();
        });
    }
    let mut printed = printed.into_inner().unwrap_or_else(|e| e.into_inner());
    if !printed.is_empty() {
        printed.sort_by_key(|&(index, _)| index);
        let text: Vec<u8> = printed.into_iter().flat_map(|(_, t)| t).collect();
        (launch.printf)(&text);
    }
    match fault.into_inner().unwrap_or_else(|e| e.into_inner()) {
        Some(f) => Err(f),
        None => Ok(Counts {
            thread_instructions: executed.into_inner(),
            host_bytes: host_bytes.into_inner(),
        }),
    }
}

struct Warp {
    regs: Vec<[u64; 32]>,
    /// Lanes that have not exited.
    live: u32,
    /// Whether every live lane is at `pc`; otherwise `pcs` holds each lane's.
    uniform: bool,
    pc: u32,
    pcs: [u32; 32],
    /// Index of the warp's first thread in the block.
    first_thread: u32,
    done: bool,
}

struct BlockState<'a> {
    k: &'a Kernel,
    l: &'a Launch<'a>,
    ctaid: [u32; 3],
    shared: Vec<u8>,
    local: Vec<u8>,
    warps: Vec<Warp>,
    nthreads: u32,
    /// Last device range found valid, so most accesses need no lookup.
    valid: Region,
    /// Thread-instructions executed (lanes × instructions).
    executed: u64,
    /// Bytes accessed in mapped host memory.
    host_bytes: u64,
    /// What this block's `printf`s wrote so far.
    printf: Vec<u8>,
}

/// Which window an address of a given space falls in, after `cvta` decoding.
enum Place {
    Device(u64),
    Shared(usize),
    Local(usize),
    Param(usize),
}

impl<'a> BlockState<'a> {
    fn new(k: &'a Kernel, l: &'a Launch<'a>) -> BlockState<'a> {
        let nthreads = l.block.iter().product::<u32>();
        let nwarps = nthreads.div_ceil(32);
        BlockState {
            k,
            l,
            ctaid: [0; 3],
            shared: vec![0; k.shared_static.div_ceil(16) * 16 + l.dynamic_shared],
            local: vec![0; k.local_size * 32],
            warps: (0..nwarps)
                .map(|w| Warp {
                    regs: vec![[0; 32]; k.regs as usize],
                    live: 0,
                    uniform: true,
                    pc: 0,
                    pcs: [0; 32],
                    first_thread: w * 32,
                    done: false,
                })
                .collect(),
            nthreads,
            valid: Region {
                start: 0,
                end: 0,
                host: false,
            },
            executed: 0,
            host_bytes: 0,
            printf: Vec::new(),
        }
    }

    fn run(&mut self, ctaid: [u32; 3]) -> Result<(), Fault> {
        self.ctaid = ctaid;
        // Shared memory starts each block undefined; zeroed here so runs are reproducible.
        self.shared.fill(0);
        let nthreads = self.nthreads;
        for w in &mut self.warps {
            let lanes = (nthreads - w.first_thread).min(32);
            w.live = if lanes == 32 {
                FULL
            } else {
                (1u32 << lanes) - 1
            };
            w.uniform = true;
            w.pc = 0;
            w.done = false;
            for r in &mut w.regs {
                *r = [0; 32];
            }
        }
        // Local memory is per thread; a warp's threads share this buffer in turn, so it holds
        // 32 threads' worth and each warp runs with its own copy when several are resident.
        let nwarps = self.warps.len();
        let mut locals = if self.k.local_size > 0 && nwarps > 1 {
            vec![vec![0u8; self.local.len()]; nwarps]
        } else {
            Vec::new()
        };
        loop {
            let mut done = 0;
            for w in 0..nwarps {
                if self.warps[w].done {
                    done += 1;
                    continue;
                }
                if !locals.is_empty() {
                    std::mem::swap(&mut self.local, &mut locals[w]);
                }
                let mut warp = std::mem::replace(
                    &mut self.warps[w],
                    Warp {
                        regs: Vec::new(),
                        live: 0,
                        uniform: true,
                        pc: 0,
                        pcs: [0; 32],
                        first_thread: 0,
                        done: true,
                    },
                );
                let result = self.run_warp(&mut warp);
                self.warps[w] = warp;
                if !locals.is_empty() {
                    std::mem::swap(&mut self.local, &mut locals[w]);
                }
                match result? {
                    Stop::Barrier => {}
                    Stop::Done => {
                        self.warps[w].done = true;
                        done += 1;
                    }
                }
            }
            if done == nwarps {
                return Ok(());
            }
            // Every warp still running waits at the barrier: the next round releases them.
        }
    }

    fn special(&self, w: &Warp, s: Special) -> [u64; 32] {
        let [bx, by, _] = self.l.block;
        let tid = |lane: usize, d: u8| -> u64 {
            let t = w.first_thread + lane as u32;
            (match d {
                0 => t % bx,
                1 => (t / bx) % by,
                _ => t / (bx * by),
            }) as u64
        };
        let all = |v: u64| [v; 32];
        match s {
            Special::Tid(d) => per_lane(|l| tid(l, d)),
            Special::Ntid(d) => all(self.l.block[d as usize] as u64),
            Special::Ctaid(d) => all(self.ctaid[d as usize] as u64),
            Special::Nctaid(d) => all(self.l.grid[d as usize] as u64),
            Special::LaneId => per_lane(|l| l as u64),
            Special::WarpId => all((w.first_thread / 32) as u64),
            Special::NWarpId => all(self.warps.len() as u64),
            Special::SmId | Special::GridId => all(0),
            Special::NSmId => all(1),
            Special::LanemaskEq => per_lane(|l| 1u64 << l),
            Special::LanemaskLt => per_lane(|l| (1u64 << l) - 1),
            Special::LanemaskLe => per_lane(|l| (2u64 << l) - 1),
            Special::LanemaskGt => per_lane(|l| (!((2u64 << l) - 1)) & 0xFFFF_FFFF),
            Special::LanemaskGe => per_lane(|l| (!((1u64 << l) - 1)) & 0xFFFF_FFFF),
            Special::Clock | Special::Clock64 => all(self.executed),
            Special::GlobalTimer => all(std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64)),
            Special::DynamicSmemSize => all(self.l.dynamic_shared as u64),
            Special::TotalSmemSize => all(self.shared.len() as u64),
        }
    }

    fn read(&self, w: &Warp, s: Src) -> [u64; 32] {
        match s {
            Src::Reg(r) => w.regs[r as usize],
            Src::Imm(v) => [v; 32],
            Src::Special(s) => self.special(w, s),
            Src::Symbol(sym) => {
                [match sym {
                    Symbol::Global(i, off) => self
                        .l
                        .globals
                        .get(i as usize)
                        .copied()
                        .unwrap_or(0)
                        .wrapping_add(off as u64),
                    Symbol::Shared(o) => o,
                    Symbol::Local(o) => o,
                    Symbol::Param(o) => o,
                }; 32]
            }
        }
    }

    /// Resolves the address of one lane's access of `len` bytes in `space`.
    fn place(&mut self, space: Space, addr: u64, len: usize, line: u32) -> Result<Place, Fault> {
        let illegal = Fault::IllegalAddress { addr, line };
        if addr % (len as u64) != 0 {
            return Err(Fault::Misaligned { addr, line });
        }
        let (space, offset) = match space {
            Space::Generic => {
                if (SHARED_WINDOW..SHARED_WINDOW + WINDOW_SIZE).contains(&addr) {
                    (Space::Shared, addr - SHARED_WINDOW)
                } else if (LOCAL_WINDOW..LOCAL_WINDOW + WINDOW_SIZE).contains(&addr) {
                    (Space::Local, addr - LOCAL_WINDOW)
                } else if (PARAM_WINDOW..PARAM_WINDOW + WINDOW_SIZE).contains(&addr) {
                    (Space::Param, addr - PARAM_WINDOW)
                } else {
                    (Space::Global, addr)
                }
            }
            s => (s, addr),
        };
        let within = |offset: u64, size: usize| {
            offset
                .checked_add(len as u64)
                .is_some_and(|e| e <= size as u64)
        };
        match space {
            Space::Shared if within(offset, self.shared.len()) => {
                Ok(Place::Shared(offset as usize))
            }
            Space::Local if within(offset, self.k.local_size) => Ok(Place::Local(offset as usize)),
            Space::Param if within(offset, self.l.params.len()) => {
                Ok(Place::Param(offset as usize))
            }
            Space::Global | Space::Const => {
                let end = offset.checked_add(len as u64).ok_or(illegal.clone())?;
                if offset < self.valid.start || end > self.valid.end {
                    match self.l.memory.range(offset) {
                        Some(region) if end <= region.end => self.valid = region,
                        _ => return Err(illegal),
                    }
                }
                if self.valid.host {
                    self.host_bytes += len as u64;
                }
                Ok(Place::Device(offset))
            }
            _ => Err(illegal),
        }
    }

    /// The host address of a resolved place of `len` bytes (checked by [`Self::place`]).
    fn host_address(&mut self, place: &Place, lane: usize, len: usize) -> *mut u8 {
        let slice_at = |buffer: &mut [u8], at: usize| buffer[at..at + len].as_mut_ptr();
        match *place {
            Place::Device(addr) => addr as *mut u8,
            Place::Shared(o) => slice_at(&mut self.shared, o),
            Place::Local(o) => slice_at(&mut self.local, lane * self.k.local_size + o),
            Place::Param(o) => self.l.params[o..o + len].as_ptr() as *mut u8,
        }
    }

    fn load(&mut self, place: &Place, lane: usize, len: usize) -> u64 {
        let at = self.host_address(place, lane, len);
        // SAFETY: `at` addresses `len` readable bytes: a checked range of live device memory
        // (other blocks may write it at the same time, as on a GPU: such a kernel has a race) or
        // a bounds-checked slice of this block's buffers.
        unsafe {
            match len {
                1 => at.read() as u64,
                2 => (at as *const u16).read_unaligned() as u64,
                4 => (at as *const u32).read_unaligned() as u64,
                _ => (at as *const u64).read_unaligned(),
            }
        }
    }

    fn store(&mut self, place: &Place, lane: usize, len: usize, v: u64) -> Result<(), ()> {
        if let Place::Param(_) = place {
            return Err(());
        }
        let at = self.host_address(place, lane, len);
        // SAFETY: as in `load`, for writable bytes (parameters were refused above).
        unsafe {
            match len {
                1 => at.write(v as u8),
                2 => (at as *mut u16).write_unaligned(v as u16),
                4 => (at as *mut u32).write_unaligned(v as u32),
                _ => (at as *mut u64).write_unaligned(v),
            }
        }
        Ok(())
    }

    /// One lane's `len`-byte value at `addr` in `space`.
    fn read_lane(
        &mut self,
        space: Space,
        addr: u64,
        len: usize,
        lane: usize,
        line: u32,
    ) -> Result<u64, Fault> {
        let place = self.place(space, addr, len, line)?;
        Ok(self.load(&place, lane, len))
    }

    /// The NUL-terminated string at generic address `addr` (at most 64 KiB of it).
    fn string(&mut self, addr: u64, lane: usize, line: u32) -> Result<Vec<u8>, Fault> {
        let mut out = Vec::new();
        for i in 0..(64 << 10) {
            match self.read_lane(Space::Generic, addr.wrapping_add(i), 1, lane, line)? as u8 {
                0 => break,
                c => out.push(c),
            }
        }
        Ok(out)
    }

    fn run_warp(&mut self, w: &mut Warp) -> Result<Stop, Fault> {
        let insts = &self.k.insts;
        loop {
            if w.live == 0 {
                return Ok(Stop::Done);
            }
            let (pc, mask) = if w.uniform {
                (w.pc, w.live)
            } else {
                let mut pc = u32::MAX;
                let mut mask = 0;
                for lane in 0..32 {
                    if w.live & (1 << lane) != 0 {
                        let p = w.pcs[lane];
                        if p < pc {
                            pc = p;
                            mask = 1 << lane;
                        } else if p == pc {
                            mask |= 1 << lane;
                        }
                    }
                }
                if mask == w.live {
                    w.uniform = true;
                    w.pc = pc;
                }
                (pc, mask)
            };
            let Some(inst) = insts.get(pc as usize) else {
                // Falling off the end of the body is `ret`.
                w.live &= !mask;
                continue;
            };
            let exec = match inst.guard {
                None => mask,
                Some((p, negated)) => {
                    let m = w.regs[p as usize]
                        .iter()
                        .enumerate()
                        .fold(0u32, |m, (lane, &v)| {
                            m | (u32::from((v != 0) != negated) << lane)
                        });
                    m & mask
                }
            };
            self.executed += exec.count_ones() as u64;
            let mut jump = None;
            match &inst.op {
                Op::Bra { target } => jump = Some(*target),
                Op::Exit => {
                    w.live &= !exec;
                }
                Op::BarSync if exec != 0 => {
                    self.advance(w, pc, mask, exec, None);
                    return Ok(Stop::Barrier);
                }
                op => self.execute(w, op, exec, inst.line)?,
            }
            self.advance(w, pc, mask, exec, jump);
        }
    }

    /// Moves the lanes of `mask` past `pc`: those of `exec` to `jump` if it is a taken branch.
    fn advance(&self, w: &mut Warp, pc: u32, mask: u32, exec: u32, jump: Option<u32>) {
        let mask = mask & w.live;
        let taken = if jump.is_some() { exec & mask } else { 0 };
        let target = jump.unwrap_or(pc + 1);
        if w.uniform && mask == w.live {
            if taken == mask {
                w.pc = target;
                return;
            }
            if taken == 0 {
                w.pc = pc + 1;
                return;
            }
            for lane in 0..32 {
                w.pcs[lane] = pc;
            }
            w.uniform = false;
        }
        for lane in 0..32 {
            let bit = 1u32 << lane;
            if mask & bit != 0 {
                w.pcs[lane] = if taken & bit != 0 { target } else { pc + 1 };
            }
        }
    }

    fn execute(&mut self, w: &mut Warp, op: &Op, exec: u32, line: u32) -> Result<(), Fault> {
        if exec == 0 {
            return Ok(());
        }
        match *op {
            Op::Unary { op, ty, ftz, d, a } => {
                let a = self.read(w, a);
                let r = unary(op, ty, ftz, &a);
                write(w, d, exec, &r);
            }
            Op::Binary {
                op,
                ty,
                round,
                ftz,
                sat,
                d,
                a,
                b,
            } => {
                let (a, b) = (self.read(w, a), self.read(w, b));
                let r = binary(op, ty, Mods { round, ftz, sat }, &a, &b);
                write(w, d, exec, &r);
            }
            Op::Ternary {
                op,
                ty,
                round,
                ftz,
                sat,
                d,
                a,
                b,
                c,
            } => {
                let (a, b, c) = (self.read(w, a), self.read(w, b), self.read(w, c));
                let r = ternary(op, ty, Mods { round, ftz, sat }, &a, &b, &c);
                write(w, d, exec, &r);
            }
            Op::Half {
                op,
                pair,
                d,
                a,
                b,
                c,
            } => {
                let (a, b, c) = (self.read(w, a), self.read(w, b), self.read(w, c));
                let r = per_lane(|l| {
                    let one = |shift: u32| -> u64 {
                        let x = |v: u64| f16_to_f64((v >> shift) as u16);
                        let (a, b, c) = (x(a[l]), x(b[l]), x(c[l]));
                        // Sums and products of halves are exact in f64; a fused a*b+c is
                        // rounded once through its exact two-part sum.
                        let h = match op {
                            HalfOp::Add => f16_from_f64(a + b, 0.0),
                            HalfOp::Sub => f16_from_f64(a - b, 0.0),
                            HalfOp::Mul => f16_from_f64(a * b, 0.0),
                            HalfOp::Fma => {
                                let p = a * b;
                                let s = p + c;
                                let bp = s - c;
                                let err = (p - bp) + (c - (s - bp));
                                f16_from_f64(s, err)
                            }
                        };
                        (h as u64) << shift
                    };
                    if pair { one(0) | one(16) } else { one(0) }
                });
                write(w, d, exec, &r);
            }
            Op::Bfi {
                ty,
                d,
                a,
                b,
                pos,
                len,
            } => {
                let (a, b, pos, len) = (
                    self.read(w, a),
                    self.read(w, b),
                    self.read(w, pos),
                    self.read(w, len),
                );
                let bits = ty.bytes() as u64 * 8;
                let r = per_lane(|l| {
                    let (p, n) = (pos[l] & 0xFF, len[l] & 0xFF);
                    let mut out = b[l];
                    for i in 0..n.min(bits) {
                        if p + i < bits {
                            let bit = (a[l] >> i) & 1;
                            out = (out & !(1 << (p + i))) | (bit << (p + i));
                        }
                    }
                    ty.mask(out)
                });
                write(w, d, exec, &r);
            }
            Op::Lop3 { d, a, b, c, lut } => {
                let (a, b, c) = (self.read(w, a), self.read(w, b), self.read(w, c));
                let r = per_lane(|l| {
                    let mut out = 0u64;
                    for bit in 0..32 {
                        let i = (((a[l] >> bit) & 1) << 2)
                            | (((b[l] >> bit) & 1) << 1)
                            | ((c[l] >> bit) & 1);
                        out |= (((lut as u64) >> i) & 1) << bit;
                    }
                    out
                });
                write(w, d, exec, &r);
            }
            Op::Setp {
                cmp,
                ty,
                ftz,
                d,
                d2,
                a,
                b,
                combine,
            } => {
                let (a, b) = (self.read(w, a), self.read(w, b));
                let mut r: [u64; 32] = if ty.float() {
                    per_lane(|l| compare(cmp, ty, ftz, a[l], b[l]) as u64)
                } else {
                    compare_integers(cmp, ty, &a, &b)
                };
                let mut r2: [u64; 32] = per_lane(|l| 1 - r[l]);
                if let Some((op, c, neg)) = combine {
                    let c = self.read(w, c);
                    for l in 0..32 {
                        let cv = (c[l] != 0) != neg;
                        let f = |x: u64| -> u64 {
                            let x = x != 0;
                            (match op {
                                BoolOp::And => x && cv,
                                BoolOp::Or => x || cv,
                                BoolOp::Xor => x ^ cv,
                            }) as u64
                        };
                        r[l] = f(r[l]);
                        r2[l] = f(r2[l]);
                    }
                }
                write(w, d, exec, &r);
                if let Some(d2) = d2 {
                    write(w, d2, exec, &r2);
                }
            }
            Op::Set {
                cmp,
                dty,
                ty,
                d,
                a,
                b,
            } => {
                let (a, b) = (self.read(w, a), self.read(w, b));
                let r = per_lane(|l| {
                    let t = compare(cmp, ty, false, a[l], b[l]);
                    match (dty, t) {
                        (Ty::F32, true) => 1.0f32.to_bits() as u64,
                        (_, true) => dty.mask(u64::MAX),
                        (_, false) => 0,
                    }
                });
                write(w, d, exec, &r);
            }
            Op::PredLogic { op, d, a, b } => {
                let (a, b) = (self.read(w, a), self.read(w, b));
                let r = per_lane(|l| {
                    let (x, y) = (a[l] != 0, b[l] != 0);
                    (match op {
                        Binary::And => x && y,
                        Binary::Or => x || y,
                        _ => x ^ y,
                    }) as u64
                });
                write(w, d, exec, &r);
            }
            Op::Cvt {
                dty,
                sty,
                round,
                ftz,
                sat,
                d,
                a,
            } => {
                let a = self.read(w, a);
                let r = per_lane(|l| convert(dty, sty, round, ftz, sat, a[l]));
                write(w, d, exec, &r);
            }
            Op::Testp { ty, kind, d, a } => {
                let a = self.read(w, a);
                let r = per_lane(|l| {
                    let x = if ty == Ty::F32 {
                        f32::from_bits(a[l] as u32) as f64
                    } else {
                        f64::from_bits(a[l])
                    };
                    let sub = if ty == Ty::F32 {
                        f32::from_bits(a[l] as u32).is_subnormal()
                    } else {
                        x.is_subnormal()
                    };
                    (match kind {
                        0 => x.is_finite(),
                        1 => x.is_infinite(),
                        2 => !x.is_nan(),
                        3 => x.is_nan(),
                        4 => x.is_normal() && !sub,
                        _ => sub,
                    }) as u64
                });
                write(w, d, exec, &r);
            }
            Op::Pack { part, d, ref parts } => {
                let bits = part.bytes() * 8;
                let values: Vec<[u64; 32]> = parts.iter().map(|&p| self.read(w, p)).collect();
                let r = per_lane(|l| {
                    values
                        .iter()
                        .enumerate()
                        .fold(0u64, |acc, (i, v)| acc | (part.mask(v[l]) << (i * bits)))
                });
                write(w, d, exec, &r);
            }
            Op::Unpack { part, ref ds, a } => {
                let bits = part.bytes() * 8;
                let a = self.read(w, a);
                for (i, dst) in ds.iter().enumerate() {
                    if let Some(dst) = *dst {
                        let r = per_lane(|l| part.mask(a[l] >> (i * bits)));
                        write(w, dst, exec, &r);
                    }
                }
            }
            Op::Cvta {
                space,
                to_space,
                d,
                a,
            } => {
                let base = match space {
                    Space::Shared => SHARED_WINDOW,
                    Space::Local => LOCAL_WINDOW,
                    Space::Param => PARAM_WINDOW,
                    _ => 0,
                };
                let a = self.read(w, a);
                let r = per_lane(|l| {
                    if base == 0 {
                        a[l]
                    } else if to_space {
                        a[l].wrapping_sub(base)
                    } else {
                        a[l].wrapping_add(base)
                    }
                });
                write(w, d, exec, &r);
            }
            Op::Ld {
                space,
                ty,
                ref ds,
                addr,
            } => {
                let base = self.read(w, addr.base);
                let size = ty.bytes();
                let total = size * ds.len();
                let mut out = vec![[0u64; 32]; ds.len()];
                for lane in lanes(exec) {
                    let at = base[lane].wrapping_add(addr.offset as u64);
                    let place = self.place(space, at, total, line)?;
                    for (i, o) in out.iter_mut().enumerate() {
                        let p = offset_place(&place, i * size);
                        o[lane] = extend(ty, self.load(&p, lane, size));
                    }
                }
                for (i, dst) in ds.iter().enumerate() {
                    if let Some(dst) = *dst {
                        write(w, dst, exec, &out[i]);
                    }
                }
            }
            Op::St {
                space,
                ty,
                ref srcs,
                addr,
            } => {
                let base = self.read(w, addr.base);
                let values: Vec<[u64; 32]> = srcs.iter().map(|&s| self.read(w, s)).collect();
                let size = ty.bytes();
                let total = size * srcs.len();
                for lane in lanes(exec) {
                    let at = base[lane].wrapping_add(addr.offset as u64);
                    let place = self.place(space, at, total, line)?;
                    for (i, v) in values.iter().enumerate() {
                        let p = offset_place(&place, i * size);
                        self.store(&p, lane, size, v[lane])
                            .map_err(|()| Fault::IllegalAddress { addr: at, line })?;
                    }
                }
            }
            Op::Atom {
                space,
                op,
                ty,
                d,
                addr,
                b,
                c,
            } => {
                let base = self.read(w, addr.base);
                let (b, c) = (self.read(w, b), self.read(w, c));
                let size = ty.bytes();
                let mut out = [0u64; 32];
                for lane in lanes(exec) {
                    let at = base[lane].wrapping_add(addr.offset as u64);
                    let place = self.place(space, at, size, line)?;
                    let update = |old: u64| atomic(op, ty, old, b[lane], c[lane]);
                    out[lane] = match place {
                        Place::Device(a) if size == 4 => {
                            // SAFETY: `place` checked that the 4 aligned bytes lie in live device
                            // memory; other blocks access them only atomically, as on a GPU.
                            let atom = unsafe { AtomicU32::from_ptr(a as *mut u32) };
                            let mut old = atom.load(Ordering::Relaxed);
                            loop {
                                let new = update(old as u64) as u32;
                                match atom.compare_exchange_weak(
                                    old,
                                    new,
                                    Ordering::AcqRel,
                                    Ordering::Relaxed,
                                ) {
                                    Ok(_) => break old as u64,
                                    Err(now) => old = now,
                                }
                            }
                        }
                        Place::Device(a) => {
                            // SAFETY: as above, for 8 aligned bytes.
                            let atom = unsafe { AtomicU64::from_ptr(a as *mut u64) };
                            let mut old = atom.load(Ordering::Relaxed);
                            loop {
                                let new = update(old);
                                match atom.compare_exchange_weak(
                                    old,
                                    new,
                                    Ordering::AcqRel,
                                    Ordering::Relaxed,
                                ) {
                                    Ok(_) => break old,
                                    Err(now) => old = now,
                                }
                            }
                        }
                        ref p => {
                            let old = self.load(p, lane, size);
                            let new = update(old);
                            self.store(p, lane, size, new)
                                .map_err(|()| Fault::IllegalAddress { addr: at, line })?;
                            old
                        }
                    };
                }
                if let Some(d) = d {
                    write(w, d, exec, &out);
                }
            }
            Op::Shfl {
                mode,
                d,
                p,
                a,
                b,
                c,
            } => {
                let (a, b, c) = (self.read(w, a), self.read(w, b), self.read(w, c));
                let mut r = [0u64; 32];
                let mut pv = [0u64; 32];
                for lane in lanes(exec) {
                    let (bval, cval) = (b[lane] as u32 & 31, c[lane] as u32 & 31);
                    let segmask = (c[lane] as u32 >> 8) & 31;
                    let l = lane as u32;
                    let max_lane = (l & segmask) | (cval & !segmask);
                    let min_lane = l & segmask;
                    let (j, ok) = match mode {
                        ShflMode::Up => {
                            let j = l as i32 - bval as i32;
                            (j, j >= max_lane as i32)
                        }
                        ShflMode::Down => {
                            let j = (l + bval) as i32;
                            (j, j <= max_lane as i32)
                        }
                        ShflMode::Bfly => {
                            let j = (l ^ bval) as i32;
                            (j, j <= max_lane as i32)
                        }
                        ShflMode::Idx => {
                            let j = (min_lane | (bval & !segmask)) as i32;
                            (j, j <= max_lane as i32)
                        }
                    };
                    let j = if ok { j as usize } else { lane };
                    r[lane] = a[j & 31] & 0xFFFF_FFFF;
                    pv[lane] = ok as u64;
                }
                write(w, d, exec, &r);
                if let Some(p) = p {
                    write(w, p, exec, &pv);
                }
            }
            Op::Vote {
                mode,
                d,
                a,
                negate,
                mask,
            } => {
                let (a, mask) = (self.read(w, a), self.read(w, mask));
                let mut ballot = 0u32;
                for lane in lanes(exec) {
                    if (a[lane] != 0) != negate {
                        ballot |= 1 << lane;
                    }
                }
                let r = per_lane(|lane| {
                    let members = exec & mask[lane] as u32;
                    let ballot = ballot & members;
                    match mode {
                        VoteMode::Ballot => ballot as u64,
                        VoteMode::Any => (ballot != 0) as u64,
                        VoteMode::All => (ballot == members) as u64,
                        VoteMode::Uni => (ballot == 0 || ballot == members) as u64,
                    }
                });
                write(w, d, exec, &r);
            }
            Op::Activemask { d } => write(w, d, exec, &[exec as u64; 32]),
            Op::Match {
                all,
                ty,
                d,
                p,
                a,
                mask,
            } => {
                let (a, mask) = (self.read(w, a), self.read(w, mask));
                let first = exec.trailing_zeros() as usize;
                let members = exec & mask[first] as u32;
                let same = |lane: usize| -> u32 {
                    lanes(members)
                        .filter(|&o| ty.mask(a[o]) == ty.mask(a[lane]))
                        .fold(0, |m, o| m | 1 << o)
                };
                let r = per_lane(|lane| {
                    let m = same(lane);
                    (if all && m != members { 0 } else { m }) as u64
                });
                write(w, d, exec, &r);
                if let Some(p) = p {
                    let uniform = (same(first) == members) as u64;
                    write(w, p, exec, &[uniform; 32]);
                }
            }
            Op::Redux { op, ty, d, a, mask } => {
                let (a, mask) = (self.read(w, a), self.read(w, mask));
                let reduce = |members: u32| {
                    let mut acc: Option<u64> = None;
                    for lane in lanes(members) {
                        acc = Some(match acc {
                            None => ty.mask(a[lane]),
                            Some(x) => atomic(op, ty, x, a[lane], 0),
                        });
                    }
                    acc.unwrap_or(0)
                };
                let r = if mask.iter().all(|&m| m as u32 == FULL) {
                    [reduce(exec); 32]
                } else {
                    per_lane(|lane| reduce(exec & mask[lane] as u32))
                };
                write(w, d, exec, &r);
            }
            Op::Unsupported { ref what } => {
                return Err(Fault::Unsupported {
                    what: what.clone(),
                    line,
                });
            }
            Op::Printf { fmt, args, ret } => {
                for lane in lanes(exec) {
                    let fmt = self.read_lane(Space::Local, fmt, 8, lane, line)?;
                    let format = self.string(fmt, lane, line)?;
                    let at = self.read_lane(Space::Local, args, 8, lane, line)?;
                    let mut args = ArgBuffer {
                        block: self,
                        lane,
                        at,
                        line,
                    };
                    let text = super::printf::format(&format, &mut args)?;
                    if let Some(ret) = ret {
                        let place = self.place(Space::Local, ret, 4, line)?;
                        let _ = self.store(&place, lane, 4, text.len() as u64);
                    }
                    self.printf.extend_from_slice(&text);
                }
            }
            Op::AssertFail {
                message,
                file,
                line: at,
                function,
            } => {
                let mut text = String::new();
                for lane in lanes(exec) {
                    let mut string = |slot: u64| -> Result<String, Fault> {
                        let addr = self.read_lane(Space::Local, slot, 8, lane, line)?;
                        Ok(String::from_utf8_lossy(&self.string(addr, lane, line)?).into_owned())
                    };
                    let (message, file, function) =
                        (string(message)?, string(file)?, string(function)?);
                    let at = self.read_lane(Space::Local, at, 4, lane, line)? as u32;
                    let t = w.first_thread + lane as u32;
                    let [bx, by, _] = self.l.block;
                    let [cx, cy, cz] = self.ctaid;
                    text += &format!(
                        "{file}:{at}: {function}: block: [{cx},{cy},{cz}], thread: [{},{},{}] \
                         Assertion `{message}` failed.\n",
                        t % bx,
                        (t / bx) % by,
                        t / (bx * by)
                    );
                }
                return Err(Fault::Assert { message: text });
            }
            Op::Nop | Op::BarSync | Op::Bra { .. } | Op::Exit => {}
        }
        Ok(())
    }
}

/// A lane's `printf` argument buffer, read in order, each argument aligned to its size.
struct ArgBuffer<'b, 'a> {
    block: &'b mut BlockState<'a>,
    lane: usize,
    at: u64,
    line: u32,
}

impl super::printf::Args for ArgBuffer<'_, '_> {
    type Error = Fault;

    fn next(&mut self, size: usize) -> Result<u64, Fault> {
        let at = self.at.next_multiple_of(size as u64);
        self.at = at + size as u64;
        self.block
            .read_lane(Space::Generic, at, size, self.lane, self.line)
    }

    fn string(&mut self, addr: u64) -> Result<Vec<u8>, Fault> {
        self.block.string(addr, self.lane, self.line)
    }
}

enum Stop {
    Barrier,
    Done,
}

fn lanes(mask: u32) -> impl Iterator<Item = usize> {
    (0..32).filter(move |l| mask & (1 << l) != 0)
}

fn offset_place(p: &Place, by: usize) -> Place {
    match *p {
        Place::Device(a) => Place::Device(a + by as u64),
        Place::Shared(o) => Place::Shared(o + by),
        Place::Local(o) => Place::Local(o + by),
        Place::Param(o) => Place::Param(o + by),
    }
}

/// A loaded value as a register holds it: signed types sign-extend to 32 bits at least (as
/// `ld.s8` into a `.s32` register does), others zero-extend.
fn extend(ty: Ty, v: u64) -> u64 {
    match ty {
        Ty::S8 => v as i8 as i32 as u32 as u64,
        Ty::S16 => v as i16 as i32 as u32 as u64,
        _ => v,
    }
}

fn write(w: &mut Warp, d: u32, mask: u32, values: &[u64; 32]) {
    let reg = &mut w.regs[d as usize];
    if mask == FULL {
        *reg = *values;
    } else {
        for lane in lanes(mask) {
            reg[lane] = values[lane];
        }
    }
}

fn f32_of(v: u64, ftz: bool) -> f32 {
    let x = f32::from_bits(v as u32);
    if ftz && x.is_subnormal() {
        0.0f32.copysign(x)
    } else {
        x
    }
}

fn bits32(x: f32, ftz: bool) -> u64 {
    let x = if ftz && x.is_subnormal() {
        0.0f32.copysign(x)
    } else {
        x
    };
    x.to_bits() as u64
}

/// `[f(0), …, f(31)]`, as a plain loop the compiler unrolls and vectorises.
#[inline(always)]
fn per_lane(f: impl Fn(usize) -> u64) -> [u64; 32] {
    let mut r = [0u64; 32];
    for (lane, v) in r.iter_mut().enumerate() {
        *v = f(lane);
    }
    r
}

#[inline(always)]
fn map1(a: &[u64; 32], f: impl Fn(u64) -> u64) -> [u64; 32] {
    per_lane(|l| f(a[l]))
}

#[inline(always)]
fn map2(a: &[u64; 32], b: &[u64; 32], f: impl Fn(u64, u64) -> u64) -> [u64; 32] {
    per_lane(|l| f(a[l], b[l]))
}

/// A float unary operation, in f64: for f32 operands the result rounded once to f32 is the
/// correctly rounded one for `sqrt` and `rcp` (f64 has more than twice f32's precision), and
/// within PTX's bounds for the `.approx` ones.
fn unary_float(op: Unary, x: f64) -> f64 {
    match op {
        Unary::Neg => -x,
        Unary::Abs => x.abs(),
        Unary::Sqrt => x.sqrt(),
        Unary::Rsqrt => 1.0 / x.sqrt(),
        Unary::Rcp => 1.0 / x,
        Unary::Ex2 => x.exp2(),
        Unary::Lg2 => x.log2(),
        Unary::Sin => x.sin(),
        Unary::Cos => x.cos(),
        Unary::Tanh => x.tanh(),
        _ => x,
    }
}

fn unary(op: Unary, ty: Ty, ftz: bool, a: &[u64; 32]) -> [u64; 32] {
    if op == Unary::Mov {
        return *a;
    }
    match ty {
        Ty::F32 => map1(a, |v| {
            bits32(unary_float(op, f32_of(v, ftz) as f64) as f32, ftz)
        }),
        Ty::F64 => map1(a, |v| unary_float(op, f64::from_bits(v)).to_bits()),
        _ => {
            let bits = ty.bytes() as u32 * 8;
            map1(a, |v| {
                ty.mask(match op {
                    Unary::Mov => v,
                    Unary::Neg => (ty.sext(v)).wrapping_neg() as u64,
                    Unary::Abs => ty.sext(v).wrapping_abs() as u64,
                    Unary::Not => !v,
                    Unary::Cnot => (ty.mask(v) == 0) as u64,
                    Unary::Popc => ty.mask(v).count_ones() as u64,
                    Unary::Clz => (ty.mask(v).leading_zeros() - (64 - bits)) as u64,
                    Unary::Brev => ty.mask(v).reverse_bits() >> (64 - bits),
                    Unary::Bfind { shiftamt } => {
                        let msb = bits - 1;
                        let negative = ty.signed() && (v >> msb) & 1 == 1;
                        let x = ty.mask(if negative { !v } else { v });
                        if x == 0 {
                            0xFFFF_FFFF
                        } else {
                            let pos = 63 - x.leading_zeros();
                            (if shiftamt { msb - pos } else { pos }) as u64
                        }
                    }
                    _ => v,
                })
            })
        }
    }
}

fn binary(
    op: Binary,
    ty: Ty,
    Mods { round, ftz, sat }: Mods,
    a: &[u64; 32],
    b: &[u64; 32],
) -> [u64; 32] {
    if let Some(r) = binary_fast(op, ty, round, ftz || sat, a, b) {
        return r;
    }
    match ty {
        Ty::F32 => {
            let clamp = |x: f32| {
                if sat {
                    if x.is_nan() { 0.0 } else { x.clamp(0.0, 1.0) }
                } else {
                    x
                }
            };
            map2(a, b, |x, y| {
                let (x, y) = (f32_of(x, ftz), f32_of(y, ftz));
                let r = match op {
                    Binary::Add => directed32(x + y, two_sum(x as f64, y as f64), round),
                    Binary::Sub => directed32(x - y, two_sum(x as f64, -y as f64), round),
                    Binary::MulLo => directed32(x * y, (x as f64 * y as f64, 0.0), round),
                    Binary::Div => x / y,
                    Binary::Min => x.min(y),
                    Binary::Max => x.max(y),
                    Binary::Copysign => y.copysign(x),
                    _ => f32::NAN,
                };
                bits32(clamp(r), ftz)
            })
        }
        Ty::F64 => map2(a, b, |x, y| {
            let (x, y) = (f64::from_bits(x), f64::from_bits(y));
            let r = match op {
                Binary::Add => x + y,
                Binary::Sub => x - y,
                Binary::MulLo => x * y,
                Binary::Div => x / y,
                Binary::Min => x.min(y),
                Binary::Max => x.max(y),
                Binary::Copysign => y.copysign(x),
                _ => f64::NAN,
            };
            let r = if sat {
                if r.is_nan() { 0.0 } else { r.clamp(0.0, 1.0) }
            } else {
                r
            };
            r.to_bits()
        }),
        _ => {
            let bits = ty.bytes() as u32 * 8;
            let signed = ty.signed();
            map2(a, b, |x, y| {
                let (ux, uy) = (ty.mask(x), ty.mask(y));
                let (sx, sy) = (ty.sext(x), ty.sext(y));
                match op {
                    Binary::Add | Binary::Sub if sat && ty == Ty::S32 => {
                        let r = if op == Binary::Add { sx + sy } else { sx - sy };
                        ty.mask(r.clamp(i32::MIN as i64, i32::MAX as i64) as u64)
                    }
                    Binary::Add => ty.mask(ux.wrapping_add(uy)),
                    Binary::Sub => ty.mask(ux.wrapping_sub(uy)),
                    Binary::MulLo => ty.mask(ux.wrapping_mul(uy)),
                    Binary::Mul24Lo => {
                        let m = |v: u64, s: i64| {
                            if signed {
                                ((s << 40) >> 40) as u64
                            } else {
                                v & 0xFF_FFFF
                            }
                        };
                        ty.mask(m(ux, sx).wrapping_mul(m(uy, sy)))
                    }
                    Binary::MulHi => {
                        if signed {
                            ty.mask(((sx as i128 * sy as i128) >> bits) as u64)
                        } else {
                            ty.mask(((ux as u128 * uy as u128) >> bits) as u64)
                        }
                    }
                    Binary::MulWide => {
                        let r = if signed {
                            (sx as i128 * sy as i128) as u128
                        } else {
                            ux as u128 * uy as u128
                        };
                        if bits == 32 {
                            r as u64
                        } else {
                            (r as u64) & ((1u64 << (2 * bits)) - 1)
                        }
                    }
                    Binary::Div => {
                        if uy == 0 {
                            ty.mask(u64::MAX)
                        } else if signed {
                            ty.mask(sx.wrapping_div(sy) as u64)
                        } else {
                            ux / uy
                        }
                    }
                    Binary::Rem => {
                        if uy == 0 {
                            ux
                        } else if signed {
                            ty.mask(sx.wrapping_rem(sy) as u64)
                        } else {
                            ux % uy
                        }
                    }
                    Binary::Min => {
                        if signed {
                            ty.mask(sx.min(sy) as u64)
                        } else {
                            ux.min(uy)
                        }
                    }
                    Binary::Max => {
                        if signed {
                            ty.mask(sx.max(sy) as u64)
                        } else {
                            ux.max(uy)
                        }
                    }
                    Binary::And => ux & uy,
                    Binary::Or => ux | uy,
                    Binary::Xor => ux ^ uy,
                    Binary::Shl => {
                        let s = (y & 0xFFFF_FFFF) as u32;
                        if s >= bits { 0 } else { ty.mask(ux << s) }
                    }
                    Binary::Shr => {
                        let s = ((y & 0xFFFF_FFFF) as u32).min(bits);
                        if signed {
                            ty.mask((sx >> s.min(63)) as u64)
                        } else if s >= bits {
                            0
                        } else {
                            ux >> s
                        }
                    }
                    Binary::Copysign => ux,
                }
            })
        }
    }
}

/// The rounding, flush-to-zero and saturation modifiers of a float instruction.
#[derive(Clone, Copy)]
struct Mods {
    round: Round,
    ftz: bool,
    sat: bool,
}

/// The common cases of [`binary`] with the operation chosen once for the 32 lanes (the general
/// path chooses per lane): integer add, sub, mul.lo, logic and shifts, and f32 add, sub, mul
/// rounded to nearest without `.ftz`/`.sat`.
#[inline(always)]
fn binary_fast(
    op: Binary,
    ty: Ty,
    round: Round,
    modified: bool,
    a: &[u64; 32],
    b: &[u64; 32],
) -> Option<[u64; 32]> {
    let f = |v: u64| f32::from_bits(v as u32);
    let nearest = matches!(round, Round::Default | Round::Rn) && !modified;
    if ty == Ty::F32 && nearest {
        return Some(match op {
            Binary::Add => map2(a, b, |x, y| (f(x) + f(y)).to_bits() as u64),
            Binary::Sub => map2(a, b, |x, y| (f(x) - f(y)).to_bits() as u64),
            Binary::MulLo => map2(a, b, |x, y| (f(x) * f(y)).to_bits() as u64),
            _ => return None,
        });
    }
    if ty.float() || modified {
        return None;
    }
    let m = ty.mask(u64::MAX);
    Some(match op {
        Binary::Add => map2(a, b, |x, y| x.wrapping_add(y) & m),
        Binary::Sub => map2(a, b, |x, y| x.wrapping_sub(y) & m),
        Binary::MulLo => map2(a, b, |x, y| x.wrapping_mul(y) & m),
        Binary::And => map2(a, b, |x, y| x & y & m),
        Binary::Or => map2(a, b, |x, y| (x | y) & m),
        Binary::Xor => map2(a, b, |x, y| (x ^ y) & m),
        Binary::Shl if m == u64::MAX => map2(a, b, |x, y| {
            let s = y as u32;
            if s >= 64 { 0 } else { x << s }
        }),
        Binary::Shl if m == 0xFFFF_FFFF => map2(a, b, |x, y| {
            let s = y as u32;
            if s >= 32 { 0 } else { (x << s) & m }
        }),
        _ => return None,
    })
}

/// Integer comparisons of 32 lanes with the comparison chosen once: each value becomes a key
/// that compares unsigned (signed values biased by 2^63 after sign extension).
fn compare_integers(cmp: Cmp, ty: Ty, a: &[u64; 32], b: &[u64; 32]) -> [u64; 32] {
    let shift = 64 - ty.bytes() as u32 * 8;
    let m = ty.mask(u64::MAX);
    let keys = |v: &[u64; 32]| {
        if ty.signed() {
            map1(v, |x| ((((x << shift) as i64) >> shift) as u64) ^ (1 << 63))
        } else {
            map1(v, |x| x & m)
        }
    };
    let (ka, kb) = (keys(a), keys(b));
    let test = |f: fn(&u64, &u64) -> bool| map2(&ka, &kb, |x, y| f(&x, &y) as u64);
    match cmp {
        Cmp::Eq | Cmp::Equ => test(u64::eq),
        Cmp::Ne | Cmp::Neu => test(u64::ne),
        Cmp::Lt | Cmp::Ltu | Cmp::Lo => test(u64::lt),
        Cmp::Le | Cmp::Leu | Cmp::Ls => test(u64::le),
        Cmp::Gt | Cmp::Gtu | Cmp::Hi => test(u64::gt),
        Cmp::Ge | Cmp::Geu | Cmp::Hs => test(u64::ge),
        Cmp::Num => [1; 32],
        Cmp::Nan => [0; 32],
    }
}

fn ternary(
    op: Ternary,
    ty: Ty,
    Mods { round, ftz, sat }: Mods,
    a: &[u64; 32],
    b: &[u64; 32],
    c: &[u64; 32],
) -> [u64; 32] {
    let bits = ty.bytes() as u32 * 8;
    let nearest = matches!(round, Round::Default | Round::Rn) && !ftz && !sat;
    match op {
        Ternary::Fma if ty == Ty::F32 && nearest => {
            let f = |v: u64| f32::from_bits(v as u32);
            return per_lane(|l| f(a[l]).mul_add(f(b[l]), f(c[l])).to_bits() as u64);
        }
        Ternary::MadLo => {
            let m = ty.mask(u64::MAX);
            return per_lane(|l| a[l].wrapping_mul(b[l]).wrapping_add(c[l]) & m);
        }
        Ternary::Selp => return per_lane(|l| if c[l] != 0 { a[l] } else { b[l] }),
        _ => {}
    }
    per_lane(|l| {
        let (x, y, z) = (a[l], b[l], c[l]);
        match op {
            Ternary::Selp => {
                if z != 0 {
                    x
                } else {
                    y
                }
            }
            Ternary::Fma if ty == Ty::F32 => {
                let (x, y, z) = (f32_of(x, ftz), f32_of(y, ftz), f32_of(z, ftz));
                let exact = two_sum(x as f64 * y as f64, z as f64);
                let r = directed32(x.mul_add(y, z), exact, round);
                let r = if sat {
                    if r.is_nan() { 0.0 } else { r.clamp(0.0, 1.0) }
                } else {
                    r
                };
                bits32(r, ftz)
            }
            Ternary::Fma => f64::from_bits(x)
                .mul_add(f64::from_bits(y), f64::from_bits(z))
                .to_bits(),
            Ternary::MadLo => ty.mask(ty.mask(x).wrapping_mul(ty.mask(y)).wrapping_add(z)),
            Ternary::Mad24Lo => {
                ty.mask((x & 0xFF_FFFF).wrapping_mul(y & 0xFF_FFFF).wrapping_add(z))
            }
            Ternary::MadHi => {
                let hi = if ty.signed() {
                    ((ty.sext(x) as i128 * ty.sext(y) as i128) >> bits) as u64
                } else {
                    ((ty.mask(x) as u128 * ty.mask(y) as u128) >> bits) as u64
                };
                ty.mask(hi.wrapping_add(z))
            }
            Ternary::MadWide => {
                let p = if ty.signed() {
                    (ty.sext(x) as i128 * ty.sext(y) as i128) as u64
                } else {
                    (ty.mask(x) as u128 * ty.mask(y) as u128) as u64
                };
                let r = p.wrapping_add(z);
                if bits == 16 { r & 0xFFFF_FFFF } else { r }
            }
            Ternary::Bfe => {
                let (pos, len) = ((y & 0xFF) as u32, (z & 0xFF) as u32);
                let v = ty.mask(x);
                if len == 0 {
                    return 0;
                }
                let field = if pos >= bits { 0 } else { v >> pos };
                let len = len.min(bits);
                let mut r = if len >= 64 {
                    field
                } else {
                    field & ((1u64 << len) - 1)
                };
                if ty.signed() {
                    let sign_at = (pos + len - 1).min(bits - 1);
                    if (v >> sign_at) & 1 == 1 {
                        r |= !((1u64 << len.min(63)) - 1);
                    }
                    if pos >= bits && (v >> (bits - 1)) & 1 == 1 {
                        r = u64::MAX;
                    }
                }
                ty.mask(r)
            }
            Ternary::Prmt => {
                let bytes = ((y & 0xFFFF_FFFF) << 32 | (x & 0xFFFF_FFFF)).to_le_bytes();
                let mut out = 0u64;
                for i in 0..4 {
                    let sel = (z >> (4 * i)) & 0xF;
                    let byte = bytes[(sel & 7) as usize];
                    let byte = if sel & 8 != 0 {
                        if byte & 0x80 != 0 { 0xFF } else { 0 }
                    } else {
                        byte
                    };
                    out |= (byte as u64) << (8 * i);
                }
                out
            }
            Ternary::ShfL { wrap } | Ternary::ShfR { wrap } => {
                let n = if wrap {
                    (z & 31) as u32
                } else {
                    (z as u32).min(32)
                };
                let both = ((y & 0xFFFF_FFFF) << 32) | (x & 0xFFFF_FFFF);
                if matches!(op, Ternary::ShfL { .. }) {
                    ((both << n) >> 32) & 0xFFFF_FFFF
                } else {
                    (both >> n) & 0xFFFF_FFFF
                }
            }
        }
    })
}

fn compare(cmp: Cmp, ty: Ty, ftz: bool, a: u64, b: u64) -> bool {
    if ty.float() {
        let (x, y) = if ty == Ty::F32 {
            (f32_of(a, ftz) as f64, f32_of(b, ftz) as f64)
        } else {
            (f64::from_bits(a), f64::from_bits(b))
        };
        let unordered = x.is_nan() || y.is_nan();
        return match cmp {
            Cmp::Eq => x == y,
            Cmp::Ne => !unordered && x != y,
            Cmp::Lt | Cmp::Lo => x < y,
            Cmp::Le | Cmp::Ls => x <= y,
            Cmp::Gt | Cmp::Hi => x > y,
            Cmp::Ge | Cmp::Hs => x >= y,
            Cmp::Equ => unordered || x == y,
            Cmp::Neu => unordered || x != y,
            Cmp::Ltu => unordered || x < y,
            Cmp::Leu => unordered || x <= y,
            Cmp::Gtu => unordered || x > y,
            Cmp::Geu => unordered || x >= y,
            Cmp::Num => !unordered,
            Cmp::Nan => unordered,
        };
    }
    let (ua, ub) = (ty.mask(a), ty.mask(b));
    let (sa, sb) = (ty.sext(a), ty.sext(b));
    let signed = ty.signed();
    match cmp {
        Cmp::Eq | Cmp::Equ => ua == ub,
        Cmp::Ne | Cmp::Neu => ua != ub,
        Cmp::Lt | Cmp::Ltu => {
            if signed {
                sa < sb
            } else {
                ua < ub
            }
        }
        Cmp::Le | Cmp::Leu => {
            if signed {
                sa <= sb
            } else {
                ua <= ub
            }
        }
        Cmp::Gt | Cmp::Gtu => {
            if signed {
                sa > sb
            } else {
                ua > ub
            }
        }
        Cmp::Ge | Cmp::Geu => {
            if signed {
                sa >= sb
            } else {
                ua >= ub
            }
        }
        Cmp::Lo => ua < ub,
        Cmp::Ls => ua <= ub,
        Cmp::Hi => ua > ub,
        Cmp::Hs => ua >= ub,
        Cmp::Num => true,
        Cmp::Nan => false,
    }
}

/// Rounds an exactly representable f64 to f32 in a directed mode.
fn f32_directed(exact: f64, round: Round) -> f32 {
    let r = exact as f32;
    let back = r as f64;
    let toward = |up: bool| step(r, up);
    match round {
        Round::Rz if back.abs() > exact.abs() => toward(r < 0.0),
        Round::Rm if back > exact => toward(false),
        Round::Rp if back < exact => toward(true),
        _ => r,
    }
}

/// `hi + lo = a + b` exactly (Knuth's TwoSum).
fn two_sum(a: f64, b: f64) -> (f64, f64) {
    let hi = a + b;
    let bb = hi - a;
    (hi, (a - (hi - bb)) + (b - bb))
}

/// `r`, the f32 nearest to the exact value `hi + lo`, rounded in `round`'s direction instead
/// (round to nearest leaves it). `hi + lo` is exact: the sign of `exact − r` says which way
/// nearest went.
fn directed32(r: f32, (hi, lo): (f64, f64), round: Round) -> f32 {
    if !r.is_finite() || !matches!(round, Round::Rz | Round::Rm | Round::Rp) {
        return r;
    }
    let d = (hi - r as f64) + lo;
    match round {
        Round::Rm if d < 0.0 => step(r, false),
        Round::Rp if d > 0.0 => step(r, true),
        Round::Rz if (r > 0.0 && d < 0.0) || (r < 0.0 && d > 0.0) => step(r, r < 0.0),
        _ => r,
    }
}

/// The neighbouring f32 of a finite `x`, above (`up`) or below it.
fn step(x: f32, up: bool) -> f32 {
    if x == 0.0 {
        let tiny = f32::from_bits(1);
        return if up { tiny } else { -tiny };
    }
    let bits = x.to_bits();
    let away = (x > 0.0) == up;
    f32::from_bits(if away { bits + 1 } else { bits - 1 })
}

fn round_int(x: f64, round: Round) -> f64 {
    match round {
        Round::Rni | Round::Rn | Round::Default => x.round_ties_even(),
        Round::Rmi | Round::Rm => x.floor(),
        Round::Rpi | Round::Rp => x.ceil(),
        Round::Rzi | Round::Rz => x.trunc(),
    }
}

fn convert(dty: Ty, sty: Ty, round: Round, ftz: bool, sat: bool, v: u64) -> u64 {
    match (dty, sty) {
        // Lowered only with `.rn` (to half) or exact (from half); f32 → f64 is exact, so one
        // rounding to half.
        (Ty::F16, Ty::F32) => return f16_from_f64(f32_of(v, ftz) as f64, 0.0) as u64,
        (Ty::F16, _) => return f16_from_f64(f64::from_bits(v), 0.0) as u64,
        (Ty::F32, Ty::F16) => return (f16_to_f64(v as u16) as f32).to_bits() as u64,
        (_, Ty::F16) => return f16_to_f64(v as u16).to_bits(),
        _ => {}
    }
    match (dty.float(), sty.float()) {
        (false, false) => {
            let s = sty.sext(v);
            let u = sty.mask(v);
            if sat {
                let (lo, hi): (i128, i128) = match dty {
                    Ty::S8 => (-128, 127),
                    Ty::S16 => (-32768, 32767),
                    Ty::S32 => (i32::MIN as i128, i32::MAX as i128),
                    Ty::S64 => (i64::MIN as i128, i64::MAX as i128),
                    Ty::U8 => (0, 255),
                    Ty::U16 => (0, 65535),
                    Ty::U32 => (0, u32::MAX as i128),
                    _ => (0, u64::MAX as i128),
                };
                let x = if sty.signed() { s as i128 } else { u as i128 };
                return dty.mask(x.clamp(lo, hi) as u64);
            }
            let wide = if sty.signed() { s as u64 } else { u };
            match dty {
                Ty::S8 | Ty::S16 => extend(dty, wide),
                _ => dty.mask(wide),
            }
        }
        (true, false) => {
            let exact_i = if sty.signed() {
                sty.sext(v) as i128
            } else {
                sty.mask(v) as i128
            };
            match dty {
                Ty::F32 => {
                    let r = match round {
                        Round::Rz | Round::Rm | Round::Rp if sty.bytes() <= 4 => {
                            f32_directed(exact_i as f64, round)
                        }
                        _ => {
                            if sty.signed() {
                                exact_i as i64 as f32
                            } else {
                                exact_i as u64 as f32
                            }
                        }
                    };
                    bits32(r, ftz)
                }
                _ => (if sty.signed() {
                    exact_i as i64 as f64
                } else {
                    exact_i as u64 as f64
                })
                .to_bits(),
            }
        }
        (false, true) => {
            let x = if sty == Ty::F32 {
                f32_of(v, ftz) as f64
            } else {
                f64::from_bits(v)
            };
            if x.is_nan() {
                return 0;
            }
            let r = round_int(x, round);
            let clamp = |lo: f64, hi: f64| r.clamp(lo, hi);
            dty.mask(match dty {
                Ty::S8 => clamp(-128.0, 127.0) as i64 as u64,
                Ty::S16 => clamp(-32768.0, 32767.0) as i64 as u64,
                Ty::S32 => clamp(i32::MIN as f64, i32::MAX as f64) as i64 as u64,
                Ty::S64 => r as i64 as u64,
                Ty::U8 => clamp(0.0, 255.0) as u64,
                Ty::U16 => clamp(0.0, 65535.0) as u64,
                Ty::U32 => clamp(0.0, u32::MAX as f64) as u64,
                _ => r as u64,
            })
        }
        (true, true) => {
            let x = if sty == Ty::F32 {
                f32_of(v, ftz) as f64
            } else {
                f64::from_bits(v)
            };
            let x = if matches!(round, Round::Rni | Round::Rzi | Round::Rmi | Round::Rpi) {
                round_int(x, round)
            } else {
                x
            };
            let x = if sat {
                if x.is_nan() { 0.0 } else { x.clamp(0.0, 1.0) }
            } else {
                x
            };
            match dty {
                Ty::F32 => {
                    let r = if sty == Ty::F64 && matches!(round, Round::Rz | Round::Rm | Round::Rp)
                    {
                        f32_directed(x, round)
                    } else {
                        x as f32
                    };
                    bits32(r, ftz)
                }
                _ => x.to_bits(),
            }
        }
    }
}

fn atomic(op: AtomOp, ty: Ty, old: u64, b: u64, c: u64) -> u64 {
    let (o, bb) = (ty.mask(old), ty.mask(b));
    ty.mask(match (op, ty) {
        (AtomOp::Add, Ty::F32) => {
            (f32::from_bits(o as u32) + f32::from_bits(bb as u32)).to_bits() as u64
        }
        (AtomOp::Add, Ty::F64) => (f64::from_bits(o) + f64::from_bits(bb)).to_bits(),
        (AtomOp::Min, Ty::F32) => f32::from_bits(o as u32)
            .min(f32::from_bits(bb as u32))
            .to_bits() as u64,
        (AtomOp::Max, Ty::F32) => f32::from_bits(o as u32)
            .max(f32::from_bits(bb as u32))
            .to_bits() as u64,
        (AtomOp::Add, _) => o.wrapping_add(bb),
        (AtomOp::Min, _) if ty.signed() => ty.sext(o).min(ty.sext(bb)) as u64,
        (AtomOp::Max, _) if ty.signed() => ty.sext(o).max(ty.sext(bb)) as u64,
        (AtomOp::Min, _) => o.min(bb),
        (AtomOp::Max, _) => o.max(bb),
        (AtomOp::Exch, _) => bb,
        (AtomOp::Cas, _) => {
            if o == bb {
                ty.mask(c)
            } else {
                o
            }
        }
        (AtomOp::And, _) => o & bb,
        (AtomOp::Or, _) => o | bb,
        (AtomOp::Xor, _) => o ^ bb,
        (AtomOp::Inc, _) => {
            if o >= bb {
                0
            } else {
                o + 1
            }
        }
        (AtomOp::Dec, _) => {
            if o == 0 || o > bb {
                bb
            } else {
                o - 1
            }
        }
    })
}

/// The value of IEEE half-precision bits (exact in f64).
fn f16_to_f64(h: u16) -> f64 {
    let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = (h >> 10) & 0x1F;
    let mant = (h & 0x3FF) as f64;
    sign * match exp {
        0 => mant * 2f64.powi(-24),
        31 if mant == 0.0 => f64::INFINITY,
        31 => f64::NAN,
        e => (1.0 + mant / 1024.0) * 2f64.powi(e as i32 - 15),
    }
}

/// `x + err` (`err` tiny beside `x`, the rest of an exact two-part sum, else 0) rounded to the
/// nearest half, ties to even; NaN is the canonical 0x7FFF, as the GPU writes it.
fn f16_from_f64(x: f64, err: f64) -> u16 {
    if x.is_nan() {
        return 0x7FFF;
    }
    let sign: u16 = if x.is_sign_negative() { 0x8000 } else { 0 };
    let a = x.abs();
    // Past the midpoint of 65504 and 2^16, to infinity (ties go to the even 2^16).
    if a > 65520.0 || (a == 65520.0 && err * x.signum() >= 0.0) {
        return sign | 0x7C00;
    }
    // The significand in units of the half's last place: 2^-24 below 2^-14, 2^(e-10) above.
    let e = if a < 2f64.powi(-14) {
        -14
    } else {
        ((a.to_bits() >> 52) as i32) - 1023
    };
    let ulp = 2f64.powi(e - 10);
    let q = a / ulp;
    let mut r = q.round_ties_even();
    // A tie that is not one: the discarded part decides.
    if q - q.floor() == 0.5 && err != 0.0 {
        r = if (err > 0.0) == (x > 0.0) {
            q.ceil()
        } else {
            q.floor()
        };
    }
    let bits = if e == -14 && r < 1024.0 {
        r as u16
    } else {
        (((e + 15) as u16) << 10) + (r as u16 - 1024)
    };
    sign | bits
}
