//! The instructions the interpreter runs: PTX lowered so that every register is an index, every
//! immediate is raw bits of the instruction's type and every label is an instruction index.

/// A PTX fundamental type. Registers hold every type as raw bits in a `u64`, zero-extended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ty {
    B8,
    B16,
    B32,
    B64,
    U8,
    U16,
    U32,
    U64,
    S8,
    S16,
    S32,
    S64,
    F16,
    F32,
    F64,
    Pred,
}

impl Ty {
    pub fn parse(s: &str) -> Option<Ty> {
        Some(match s {
            "b8" => Ty::B8,
            "b16" => Ty::B16,
            "b32" => Ty::B32,
            "b64" => Ty::B64,
            "u8" => Ty::U8,
            "u16" => Ty::U16,
            "u32" => Ty::U32,
            "u64" => Ty::U64,
            "s8" => Ty::S8,
            "s16" => Ty::S16,
            "s32" => Ty::S32,
            "s64" => Ty::S64,
            "f16" => Ty::F16,
            "f32" => Ty::F32,
            "f64" => Ty::F64,
            "pred" => Ty::Pred,
            _ => return None,
        })
    }

    pub fn bytes(self) -> usize {
        match self {
            Ty::B8 | Ty::U8 | Ty::S8 | Ty::Pred => 1,
            Ty::B16 | Ty::U16 | Ty::S16 | Ty::F16 => 2,
            Ty::B32 | Ty::U32 | Ty::S32 | Ty::F32 => 4,
            Ty::B64 | Ty::U64 | Ty::S64 | Ty::F64 => 8,
        }
    }

    pub fn signed(self) -> bool {
        matches!(self, Ty::S8 | Ty::S16 | Ty::S32 | Ty::S64)
    }

    pub fn float(self) -> bool {
        matches!(self, Ty::F16 | Ty::F32 | Ty::F64)
    }

    /// Bits of this type, zero-extended (what a register holds after a write of this type).
    pub fn mask(self, v: u64) -> u64 {
        match self.bytes() {
            1 => v & 0xFF,
            2 => v & 0xFFFF,
            4 => v & 0xFFFF_FFFF,
            _ => v,
        }
    }

    /// The value as a signed integer of 64 bits (sign-extended for signed types).
    pub fn sext(self, v: u64) -> i64 {
        match self {
            Ty::S8 => v as i8 as i64,
            Ty::S16 => v as i16 as i64,
            Ty::S32 => v as i32 as i64,
            _ => v as i64,
        }
    }
}

/// A register index, or an immediate already in the instruction's type.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Src {
    Reg(u32),
    Imm(u64),
    /// A per-thread special register (`%tid.x`, `%laneid`, …).
    Special(Special),
    /// The address of a variable: a module-level `.global`/`.const` (resolved at launch), a
    /// `.shared` or `.local` offset in its window, or an entry parameter's offset.
    Symbol(Symbol),
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Symbol {
    Global(u32, i64),
    Shared(u64),
    Local(u64),
    Param(u64),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Special {
    Tid(u8),
    Ntid(u8),
    Ctaid(u8),
    Nctaid(u8),
    LaneId,
    WarpId,
    NWarpId,
    SmId,
    NSmId,
    GridId,
    LanemaskEq,
    LanemaskLt,
    LanemaskLe,
    LanemaskGt,
    LanemaskGe,
    Clock,
    Clock64,
    GlobalTimer,
    DynamicSmemSize,
    TotalSmemSize,
}

/// State spaces of loads, stores, atomics and `cvta`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Space {
    Generic,
    Global,
    Shared,
    Local,
    Const,
    Param,
}

/// An address operand `[base + offset]`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Addr {
    pub base: Src,
    pub offset: i64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Round {
    /// No rounding modifier: round to nearest even for floats, truncation for float→int.
    Default,
    Rn,
    Rz,
    Rm,
    Rp,
    /// Round to an integral value (`.rni`, `.rzi`, `.rmi`, `.rpi`).
    Rni,
    Rzi,
    Rmi,
    Rpi,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Lo,
    Ls,
    Hi,
    Hs,
    Equ,
    Neu,
    Ltu,
    Leu,
    Gtu,
    Geu,
    Num,
    Nan,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BoolOp {
    And,
    Or,
    Xor,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unary {
    Mov,
    Neg,
    Abs,
    Not,
    Cnot,
    Popc,
    Clz,
    Brev,
    /// `bfind`: the position of the most significant bit that differs from the sign (0xFFFFFFFF
    /// if none); with `.shiftamt`, the left shift that brings it to the top.
    Bfind {
        shiftamt: bool,
    },
    Sqrt,
    Rsqrt,
    Rcp,
    Ex2,
    Lg2,
    Sin,
    Cos,
    Tanh,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Binary {
    Add,
    Sub,
    MulLo,
    MulHi,
    MulWide,
    Mul24Lo,
    Div,
    Rem,
    Min,
    Max,
    And,
    Or,
    Xor,
    Shl,
    Shr,
    Copysign,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ternary {
    MadLo,
    MadHi,
    MadWide,
    Mad24Lo,
    Fma,
    /// `selp d, a, b, p`: a where p, else b.
    Selp,
    /// `bfe d, a, pos, len`.
    Bfe,
    /// `prmt.b32 d, a, b, selector`.
    Prmt,
    /// `shf.l`/`shf.r` (`.wrap` or `.clamp`): funnel shift of `b:a` by `c`.
    ShfL {
        wrap: bool,
    },
    ShfR {
        wrap: bool,
    },
}

/// Half-precision arithmetic (`.f16`, or `.f16x2` on both halves of a 32-bit register).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HalfOp {
    Add,
    Sub,
    Mul,
    Fma,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomOp {
    Add,
    Min,
    Max,
    Exch,
    Cas,
    And,
    Or,
    Xor,
    Inc,
    Dec,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShflMode {
    Up,
    Down,
    Bfly,
    Idx,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VoteMode {
    All,
    Any,
    Uni,
    Ballot,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    Unary {
        op: Unary,
        ty: Ty,
        ftz: bool,
        d: u32,
        a: Src,
    },
    Binary {
        op: Binary,
        ty: Ty,
        round: Round,
        ftz: bool,
        sat: bool,
        d: u32,
        a: Src,
        b: Src,
    },
    Ternary {
        op: Ternary,
        ty: Ty,
        round: Round,
        ftz: bool,
        sat: bool,
        d: u32,
        a: Src,
        b: Src,
        c: Src,
    },
    /// `add/sub/mul/fma[.rn].f16` and `.f16x2` (`pair`): each half rounded once, to nearest even.
    Half {
        op: HalfOp,
        pair: bool,
        d: u32,
        a: Src,
        b: Src,
        c: Src,
    },
    /// `bfi d, a, b, pos, len`.
    Bfi {
        ty: Ty,
        d: u32,
        a: Src,
        b: Src,
        pos: Src,
        len: Src,
    },
    /// `lop3.b32 d, a, b, c, lut`.
    Lop3 {
        d: u32,
        a: Src,
        b: Src,
        c: Src,
        lut: u8,
    },
    Setp {
        cmp: Cmp,
        ty: Ty,
        ftz: bool,
        d: u32,
        /// `setp … p|q`: q receives the complement.
        d2: Option<u32>,
        a: Src,
        b: Src,
        /// `.and`/`.or`/`.xor` with a predicate, possibly negated.
        combine: Option<(BoolOp, Src, bool)>,
    },
    /// `set.cmp.dtype.stype`: all ones (1.0 for f32) where true.
    Set {
        cmp: Cmp,
        dty: Ty,
        ty: Ty,
        d: u32,
        a: Src,
        b: Src,
    },
    /// `and/or/xor/not.pred`.
    PredLogic {
        op: Binary,
        d: u32,
        a: Src,
        b: Src,
    },
    Cvt {
        dty: Ty,
        sty: Ty,
        round: Round,
        ftz: bool,
        sat: bool,
        d: u32,
        a: Src,
    },
    /// `testp.finite/infinite/number/notanumber/normal/subnormal`.
    Testp {
        ty: Ty,
        kind: u8,
        d: u32,
        a: Src,
    },
    /// `mov.b64 d, {a, b}` and friends: concatenation, lowest part first.
    Pack {
        part: Ty,
        d: u32,
        parts: Vec<Src>,
    },
    /// `mov.b64 {d0, d1}, a`: the parts of `a`, lowest first (`None` for `_`).
    Unpack {
        part: Ty,
        ds: Vec<Option<u32>>,
        a: Src,
    },
    Ld {
        space: Space,
        ty: Ty,
        ds: Vec<Option<u32>>,
        addr: Addr,
    },
    St {
        space: Space,
        ty: Ty,
        srcs: Vec<Src>,
        addr: Addr,
    },
    Atom {
        space: Space,
        op: AtomOp,
        ty: Ty,
        /// `None` for `red`.
        d: Option<u32>,
        addr: Addr,
        b: Src,
        c: Src,
    },
    /// `cvta.to.space` (generic → space) or `cvta.space` (space → generic).
    Cvta {
        space: Space,
        to_space: bool,
        d: u32,
        a: Src,
    },
    Bra {
        target: u32,
    },
    Exit,
    BarSync,
    Shfl {
        mode: ShflMode,
        d: u32,
        p: Option<u32>,
        a: Src,
        b: Src,
        c: Src,
    },
    /// Each lane votes over the lanes of its own `membermask`, as in [`Op::Redux`].
    Vote {
        mode: VoteMode,
        d: u32,
        a: Src,
        negate: bool,
        mask: Src,
    },
    Activemask {
        d: u32,
    },
    /// `match.any.sync` (`all: false`: the lanes holding this lane's value) or `match.all.sync`
    /// (the lanes if all hold one value, else 0; `p` whether they do) over the warp's lanes.
    Match {
        all: bool,
        ty: Ty,
        d: u32,
        p: Option<u32>,
        a: Src,
        mask: Src,
    },
    /// `redux.sync.op.type d, a, membermask`.
    /// Each lane reduces over the lanes of its own `membermask` (lanes of different groups,
    /// e.g. cooperative groups' labeled partitions, run one `redux` with different masks).
    Redux {
        op: AtomOp,
        ty: Ty,
        d: u32,
        a: Src,
        mask: Src,
    },
    /// `call vprintf, (fmt, args)` (device `printf`): the parameters are per-thread local
    /// slots holding the format's generic address and the argument buffer's; `ret` receives the
    /// number of characters written.
    Printf {
        fmt: u64,
        args: u64,
        ret: Option<u64>,
    },
    /// `call __assertfail, (message, file, line, function, char size)` (a failed device
    /// `assert`): the parameters are per-thread local slots.
    AssertFail {
        message: u64,
        file: u64,
        line: u64,
        function: u64,
    },
    /// Fences and hints: ordered already, since the interpreter runs a block on one thread.
    Nop,
    /// An instruction outside the subset: the launch fails with its name and line.
    Unsupported {
        what: String,
    },
}

#[derive(Clone, Debug)]
pub struct Inst {
    /// `@p` or `@!p`: the predicate register and whether it is negated.
    pub guard: Option<(u32, bool)>,
    pub op: Op,
    /// Line of the PTX text, for messages.
    pub line: u32,
}
