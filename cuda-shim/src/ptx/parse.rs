//! PTX text → [`Module`]: module-level variables and each `.entry` lowered to [`Inst`]s.
//!
//! Every directive nvcc emits is read; what the interpreter cannot run (an opcode or modifier
//! outside the subset of docs/ARCHITECTURE.md, a call of a function the module does not define)
//! becomes an [`Op::Unsupported`] that the launch reports with its line, so loading a module never
//! fails because of one kernel.
//!
//! Calls of the module's `.func`s are inlined where they are made: the callee's body is lowered
//! again at each call site with registers and labels of its own, its parameters are the caller's
//! `.param` slots of that call (per-thread local memory) and `ret` branches past the copy. So the
//! interpreter has no call stack to keep, and a kernel's speed does not depend on whether nvcc
//! inlined a function. Recursion (which needs a stack) is outside the subset.

use super::PtxError;
use super::ir::*;
use super::lex::{Literal, Tok, Token, number, tokens};
use std::collections::HashMap;

/// A module-level `.global` or `.const` variable: the driver gives each one device memory.
#[derive(Clone, Debug)]
pub struct Global {
    pub name: String,
    pub size: usize,
    pub align: usize,
    pub init: Vec<u8>,
}

/// An `.entry` parameter as placed in the packed argument buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParamDecl {
    pub offset: usize,
    pub size: usize,
}

#[derive(Clone, Debug)]
pub struct Kernel {
    pub name: String,
    pub params: Vec<ParamDecl>,
    pub regs: u32,
    pub insts: Vec<Inst>,
    /// Static `.shared` bytes; dynamic shared memory starts at this offset (rounded to 16).
    pub shared_static: usize,
    /// `.local` bytes per thread.
    pub local_size: usize,
    /// Index of the first instruction outside the subset, found once here so that each launch
    /// can refuse the kernel without scanning it.
    pub first_unsupported: Option<usize>,
}

#[derive(Clone, Debug, Default)]
pub struct Module {
    pub kernels: Vec<Kernel>,
    pub globals: Vec<Global>,
}

/// One operand as written.
#[derive(Clone, Debug)]
enum Opnd {
    Name(String),
    Num(Literal),
    Neg(Literal),
    Not(String),
    Vec(Vec<Opnd>),
    Addr(Box<Opnd>, i64),
    /// `a|b`: two destinations (setp, shfl).
    Pair(String, String),
}

/// A variable's address space as far as symbols go.
#[derive(Clone, Copy)]
enum SymKind {
    Global(u32),
    Shared(u64),
    Local(u64),
    Param(u64),
}

struct Parser {
    toks: Vec<Token>,
    at: usize,
    module: Module,
    /// Module-level symbols (globals, consts, shared) by name.
    symbols: HashMap<String, SymKind>,
    /// Module-level `.shared` bytes, placed before each kernel's own.
    shared_module: usize,
    /// The module's `.func` definitions by name.
    funcs: HashMap<String, Func>,
    /// The functions being inlined, outermost first (a call of one of them is recursion).
    inlining: Vec<String>,
}

/// A `.func` definition: its return and parameter names and where its body starts.
#[derive(Clone)]
struct Func {
    rets: Vec<String>,
    params: Vec<String>,
    /// Token index of the body's `{`.
    body: usize,
}

/// Calls nested deeper than this are reported rather than inlined.
const MAX_INLINE_DEPTH: usize = 32;

/// The label, in an inlined function's own label space, of the end of its copy (no PTX label
/// contains a space).
const RETURN_LABEL: &str = " return";

pub fn parse(text: &str) -> Result<Module, PtxError> {
    let mut p = Parser {
        toks: tokens(text)?,
        at: 0,
        module: Module::default(),
        symbols: HashMap::new(),
        shared_module: 0,
        funcs: HashMap::new(),
        inlining: Vec::new(),
    };
    p.find_functions()?;
    p.at = 0;
    p.module_body()?;
    Ok(p.module)
}

fn align_up(v: usize, a: usize) -> usize {
    v.div_ceil(a.max(1)) * a.max(1)
}

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.at).map(|t| &t.tok)
    }

    fn line(&self) -> u32 {
        self.toks
            .get(self.at)
            .or(self.toks.last())
            .map_or(0, |t| t.line)
    }

    fn next(&mut self) -> Result<Tok, PtxError> {
        let t = self
            .toks
            .get(self.at)
            .ok_or_else(|| PtxError::syntax(self.line(), "unexpected end of PTX".into()))?;
        self.at += 1;
        Ok(t.tok.clone())
    }

    fn eat(&mut self, c: char) -> bool {
        if self.peek() == Some(&Tok::Punct(c)) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, c: char) -> Result<(), PtxError> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(PtxError::syntax(
                self.line(),
                format!("expected '{c}', found {:?}", self.peek()),
            ))
        }
    }

    fn word(&mut self) -> Result<String, PtxError> {
        match self.next()? {
            Tok::Word(w) => Ok(w),
            other => Err(PtxError::syntax(
                self.line(),
                format!("expected a name, found {other:?}"),
            )),
        }
    }

    fn int(&mut self) -> Result<u64, PtxError> {
        match self.next()? {
            Tok::Num(n) => match number(&n) {
                Some(Literal::Int(v)) => Ok(v),
                _ => Err(PtxError::syntax(self.line(), format!("bad integer {n}"))),
            },
            other => Err(PtxError::syntax(
                self.line(),
                format!("expected an integer, found {other:?}"),
            )),
        }
    }

    /// Skips the rest of the current line (directives without a terminating `;`).
    fn skip_line(&mut self, line: u32) {
        while self.toks.get(self.at).is_some_and(|t| t.line == line) {
            self.at += 1;
        }
    }

    fn skip_braces(&mut self) -> Result<(), PtxError> {
        let mut depth = 0;
        loop {
            match self.next()? {
                Tok::Punct('{') => depth += 1,
                Tok::Punct('}') => {
                    depth -= 1;
                    if depth == 0 {
                        return Ok(());
                    }
                }
                _ => {}
            }
        }
    }

    fn skip_statement(&mut self) -> Result<(), PtxError> {
        while !matches!(self.next()?, Tok::Punct(';')) {}
        Ok(())
    }

    fn module_body(&mut self) -> Result<(), PtxError> {
        while let Some(tok) = self.peek().cloned() {
            let line = self.line();
            match tok {
                Tok::Word(w) => match w.as_str() {
                    ".version" | ".target" | ".address_size" | ".file" => self.skip_line(line),
                    ".visible" | ".extern" | ".weak" | ".common" => self.at += 1,
                    ".section" => {
                        self.at += 2;
                        self.skip_braces()?;
                    }
                    ".pragma" => self.skip_statement()?,
                    ".entry" => {
                        self.at += 1;
                        self.entry()?;
                    }
                    ".func" => {
                        self.at += 1;
                        self.skip_function()?;
                    }
                    ".global" | ".const" | ".shared" => {
                        self.at += 1;
                        let space = match w.as_str() {
                            ".global" => Space::Global,
                            ".const" => Space::Const,
                            _ => Space::Shared,
                        };
                        self.module_variable(space)?;
                    }
                    _ => {
                        return Err(PtxError::syntax(
                            line,
                            format!("unknown module directive {w}"),
                        ));
                    }
                },
                Tok::Punct(';') => self.at += 1,
                other => {
                    return Err(PtxError::syntax(line, format!("unexpected {other:?}")));
                }
            }
        }
        Ok(())
    }

    /// Records every module-level `.func` definition (a function may be defined after the
    /// kernels that call it, once declared).
    fn find_functions(&mut self) -> Result<(), PtxError> {
        let mut depth = 0usize;
        let mut i = 0;
        while i < self.toks.len() {
            match &self.toks[i].tok {
                Tok::Punct('{') => depth += 1,
                Tok::Punct('}') => depth = depth.saturating_sub(1),
                Tok::Word(w) if depth == 0 && w == ".func" => {
                    self.at = i + 1;
                    if let Some((name, func)) = self.function_header()? {
                        self.funcs.insert(name, func);
                    }
                    i = self.at;
                    continue;
                }
                _ => {}
            }
            i += 1;
        }
        Ok(())
    }

    /// `[(.param … ret)] name [(.param … , …)]` up to the body's `{` (left unread) or the `;`
    /// of a declaration; the function if it is a definition whose parameters are all `.param`.
    fn function_header(&mut self) -> Result<Option<(String, Func)>, PtxError> {
        let mut rets = Vec::new();
        let mut only_params = true;
        if self.peek() == Some(&Tok::Punct('(')) {
            only_params &= self.parameter_list(&mut rets)?;
        }
        let name = self.word()?;
        let mut params = Vec::new();
        if self.peek() == Some(&Tok::Punct('(')) {
            only_params &= self.parameter_list(&mut params)?;
        }
        // Attributes (.noreturn, performance directives) up to the body or the `;`.
        loop {
            match self.peek() {
                Some(Tok::Punct('{')) => {
                    let body = self.at;
                    self.skip_braces()?;
                    return Ok(only_params.then_some((name, Func { rets, params, body })));
                }
                Some(Tok::Punct(';')) | None => return Ok(None),
                Some(_) => self.at += 1,
            }
        }
    }

    /// `( .param decl, … )`: the names; whether every one was a `.param`.
    fn parameter_list(&mut self, names: &mut Vec<String>) -> Result<bool, PtxError> {
        self.expect('(')?;
        let mut only_params = true;
        if self.eat(')') {
            return Ok(true);
        }
        loop {
            let space = self.word()?;
            only_params &= space == ".param";
            names.push(self.declaration()?.name);
            if !self.eat(',') {
                break;
            }
        }
        self.expect(')')?;
        Ok(only_params)
    }

    /// A `.func` declaration or definition at module level: read by [`Self::find_functions`],
    /// lowered where it is called.
    fn skip_function(&mut self) -> Result<(), PtxError> {
        loop {
            match self.peek() {
                Some(Tok::Punct(';')) => {
                    self.at += 1;
                    return Ok(());
                }
                Some(Tok::Punct('{')) => return self.skip_braces(),
                Some(_) => self.at += 1,
                None => return Ok(()),
            }
        }
    }

    /// `[.align N] [.vN] .type name[dims] [= init]` after the state space; returns
    /// (name, element type, element count or None for `[]`, alignment, initial bytes).
    fn declaration(&mut self) -> Result<Declared, PtxError> {
        let mut align = 0usize;
        let mut vector = 1usize;
        let mut ty = None;
        loop {
            let w = self.word()?;
            match w.as_str() {
                ".align" => align = self.int()? as usize,
                ".v2" => vector = 2,
                ".v4" => vector = 4,
                ".ptr" | ".global" | ".shared" | ".const" | ".local" => {}
                _ if w.starts_with('.') => {
                    ty = Some(Ty::parse(&w[1..]).ok_or_else(|| {
                        PtxError::syntax(self.line(), format!("unknown type {w}"))
                    })?);
                }
                _ => {
                    let ty =
                        ty.ok_or_else(|| PtxError::syntax(self.line(), "missing type".into()))?;
                    let elem = ty.bytes() * vector;
                    let mut count = Some(1usize);
                    while self.eat('[') {
                        if self.eat(']') {
                            count = None;
                        } else {
                            let n = self.int()? as usize;
                            self.expect(']')?;
                            count = count.map(|c| c * n);
                        }
                    }
                    let mut init = Vec::new();
                    if self.eat('=') {
                        self.initializer(ty, &mut init)?;
                    }
                    return Ok(Declared {
                        name: w,
                        ty,
                        size: count.map(|c| c * elem),
                        align: if align == 0 { elem } else { align },
                        init,
                    });
                }
            }
        }
    }

    fn initializer(&mut self, ty: Ty, out: &mut Vec<u8>) -> Result<(), PtxError> {
        if self.eat('{') {
            loop {
                self.initializer(ty, out)?;
                if !self.eat(',') {
                    break;
                }
            }
            return self.expect('}');
        }
        let negative = self.eat('-');
        let line = self.line();
        match self.next()? {
            Tok::Num(n) => {
                let lit =
                    number(&n).ok_or_else(|| PtxError::syntax(line, format!("bad literal {n}")))?;
                let bits = literal_bits(lit, ty, negative);
                out.extend_from_slice(&bits.to_le_bytes()[..ty.bytes()]);
                Ok(())
            }
            other => Err(PtxError::syntax(
                line,
                format!("unsupported initializer {other:?} (only numbers)"),
            )),
        }
    }

    fn module_variable(&mut self, space: Space) -> Result<(), PtxError> {
        let d = self.declaration()?;
        self.expect(';')?;
        match space {
            Space::Shared => {
                let offset = align_up(self.shared_module, d.align);
                self.shared_module = offset + d.size.unwrap_or(0);
                let offset = if d.size.is_some() {
                    offset as u64
                } else {
                    DYNAMIC
                };
                self.symbols.insert(d.name, SymKind::Shared(offset));
            }
            _ => {
                let index = self.module.globals.len() as u32;
                let size = d.size.unwrap_or(0);
                let mut init = d.init;
                init.resize(size, 0);
                self.module.globals.push(Global {
                    name: d.name.clone(),
                    size,
                    align: d.align,
                    init,
                });
                self.symbols.insert(d.name, SymKind::Global(index));
            }
        }
        Ok(())
    }

    fn entry(&mut self) -> Result<(), PtxError> {
        let name = self.word()?;
        let mut locals: HashMap<String, SymKind> = HashMap::new();
        let mut params = Vec::new();
        let mut end = 0usize;
        self.expect('(')?;
        if !self.eat(')') {
            loop {
                let w = self.word()?;
                if w != ".param" {
                    return Err(PtxError::syntax(
                        self.line(),
                        format!("expected .param, found {w}"),
                    ));
                }
                let d = self.declaration()?;
                let size = d.size.unwrap_or(0);
                let offset = align_up(end, d.align);
                end = offset + size;
                locals.insert(d.name, SymKind::Param(offset as u64));
                params.push(ParamDecl { offset, size });
                if !self.eat(',') {
                    break;
                }
            }
            self.expect(')')?;
        }
        // Performance directives (.maxntid 256, 1, 1 …) up to the body.
        while !matches!(self.peek(), Some(Tok::Punct('{')) | None) {
            self.at += 1;
        }
        let mut body = Body {
            regs: HashMap::new(),
            nregs: 0,
            locals,
            shared: self.shared_module,
            local: 0,
            labels: HashMap::new(),
            pending: Vec::new(),
            insts: Vec::new(),
            in_function: false,
        };
        self.body(&mut body)?;
        let shared_static = body.shared;
        // Dynamic `.extern .shared` symbols start after this kernel's static shared memory.
        let dynamic_base = align_up(shared_static, 16) as u64;
        body.resolve_labels()?;
        let mut insts = std::mem::take(&mut body.insts);
        for inst in &mut insts {
            fix_dynamic_shared(&mut inst.op, dynamic_base);
        }
        let first_unsupported = insts
            .iter()
            .position(|i| matches!(i.op, Op::Unsupported { .. }));
        self.module.kernels.push(Kernel {
            name,
            params,
            regs: body.nregs,
            insts,
            shared_static,
            local_size: body.local,
            first_unsupported,
        });
        Ok(())
    }

    fn body(&mut self, b: &mut Body) -> Result<(), PtxError> {
        self.expect('{')?;
        let mut depth = 1;
        while depth > 0 {
            let line = self.line();
            match self.next()? {
                Tok::Punct('{') => depth += 1,
                Tok::Punct('}') => depth -= 1,
                Tok::Punct(';') => {}
                Tok::Punct('@') => {
                    let negated = self.eat('!');
                    let pred = self.word()?;
                    let reg = b.reg(&pred, line)?;
                    let opcode = self.word()?;
                    self.instruction(b, Some((reg, negated)), &opcode, line)?;
                }
                Tok::Word(w) if self.peek() == Some(&Tok::Punct(':')) => {
                    self.at += 1;
                    b.labels.insert(w, b.insts.len() as u32);
                }
                Tok::Word(w) => match w.as_str() {
                    ".reg" => self.registers(b)?,
                    ".loc" | ".file" => self.skip_line(line),
                    ".pragma" => self.skip_statement()?,
                    // A call's `.param` slots are per-thread local memory.
                    ".local" | ".param" => {
                        let d = self.declaration()?;
                        let offset = align_up(b.local, d.align);
                        b.local = offset + d.size.unwrap_or(0);
                        b.locals.insert(d.name, SymKind::Local(offset as u64));
                    }
                    ".shared" => {
                        let d = self.declaration()?;
                        match d.size {
                            Some(size) => {
                                let offset = align_up(b.shared, d.align);
                                b.shared = offset + size;
                                b.locals.insert(d.name, SymKind::Shared(offset as u64));
                            }
                            None => {
                                b.locals.insert(d.name, SymKind::Shared(DYNAMIC));
                            }
                        }
                    }
                    _ => self.instruction(b, None, &w, line)?,
                },
                other => return Err(PtxError::syntax(line, format!("unexpected {other:?}"))),
            }
        }
        Ok(())
    }

    fn registers(&mut self, b: &mut Body) -> Result<(), PtxError> {
        let mut w = self.word()?;
        if w == ".v2" || w == ".v4" {
            return Err(PtxError::syntax(
                self.line(),
                "vector registers are outside the subset".into(),
            ));
        }
        if Ty::parse(w.trim_start_matches('.')).is_none() {
            return Err(PtxError::syntax(
                self.line(),
                format!("unknown register type {w}"),
            ));
        }
        loop {
            w = self.word()?;
            if self.eat('<') {
                let n = self.int()?;
                self.expect('>')?;
                for i in 0..n {
                    b.declare(format!("{w}{i}"));
                }
            } else {
                b.declare(w);
            }
            if !self.eat(',') {
                break;
            }
        }
        self.expect(';')
    }

    fn operand(&mut self) -> Result<Opnd, PtxError> {
        let line = self.line();
        match self.next()? {
            Tok::Punct('{') => {
                let mut parts = Vec::new();
                loop {
                    parts.push(self.operand()?);
                    if !self.eat(',') {
                        break;
                    }
                }
                self.expect('}')?;
                Ok(Opnd::Vec(parts))
            }
            Tok::Punct('[') => {
                let base = if matches!(self.peek(), Some(Tok::Num(_))) {
                    Opnd::Num(self.literal()?)
                } else {
                    Opnd::Name(self.word()?)
                };
                let mut offset = 0i64;
                while self.eat('+') {
                    let negative = self.eat('-');
                    let v = self.int()? as i64;
                    offset += if negative { -v } else { v };
                }
                if self.eat('-') {
                    offset -= self.int()? as i64;
                }
                self.expect(']')?;
                Ok(Opnd::Addr(Box::new(base), offset))
            }
            Tok::Punct('-') => Ok(Opnd::Neg(self.literal()?)),
            Tok::Punct('!') => Ok(Opnd::Not(self.word()?)),
            Tok::Num(n) => number(&n)
                .map(Opnd::Num)
                .ok_or_else(|| PtxError::syntax(line, format!("bad literal {n}"))),
            Tok::Word(w) => {
                if self.eat('|') {
                    let second = self.word()?;
                    return Ok(Opnd::Pair(w, second));
                }
                // `sym+4` as a plain operand (mov of an address).
                if self.eat('+') {
                    let v = self.int()? as i64;
                    return Ok(Opnd::Addr(Box::new(Opnd::Name(w)), v));
                }
                Ok(Opnd::Name(w))
            }
            other => Err(PtxError::syntax(
                line,
                format!("unexpected operand {other:?}"),
            )),
        }
    }

    fn literal(&mut self) -> Result<Literal, PtxError> {
        let line = self.line();
        match self.next()? {
            Tok::Num(n) => {
                number(&n).ok_or_else(|| PtxError::syntax(line, format!("bad literal {n}")))
            }
            other => Err(PtxError::syntax(
                line,
                format!("expected a number, found {other:?}"),
            )),
        }
    }

    fn instruction(
        &mut self,
        b: &mut Body,
        guard: Option<(u32, bool)>,
        opcode: &str,
        line: u32,
    ) -> Result<(), PtxError> {
        if opcode == "call" || opcode.starts_with("call.") {
            return self.call(b, guard, line);
        }
        if b.in_function && (opcode == "ret" || opcode.starts_with("ret.")) {
            self.expect(';')?;
            b.pending
                .push((b.insts.len(), RETURN_LABEL.to_string(), line));
            b.insts.push(Inst {
                guard,
                op: Op::Bra { target: 0 },
                line,
            });
            return Ok(());
        }
        let mut ops = Vec::new();
        if !self.eat(';') {
            loop {
                ops.push(self.operand()?);
                if !self.eat(',') {
                    break;
                }
            }
            self.expect(';')?;
        }
        let op = match lower(b, &self.symbols, opcode, &ops, line) {
            Ok(op) => op,
            Err(Lowering::Unsupported(what)) => Op::Unsupported { what },
            Err(Lowering::Error(e)) => return Err(e),
        };
        if let Op::Bra { .. } = op {
            let Some(Opnd::Name(label)) = ops.first() else {
                return Err(PtxError::syntax(line, "bra needs a label".into()));
            };
            b.pending.push((b.insts.len(), label.clone(), line));
        }
        b.insts.push(Inst { guard, op, line });
        Ok(())
    }
}

impl Parser {
    /// `call[.uni] [(ret),] name[, (arg, …)][, prototype];`: `vprintf` becomes [`Op::Printf`],
    /// `__assertfail` [`Op::AssertFail`], a
    /// function the module defines is inlined, anything else (an external function such as
    /// `malloc` or `__assertfail`, a call through a pointer, recursion) is unsupported.
    fn call(
        &mut self,
        b: &mut Body,
        guard: Option<(u32, bool)>,
        line: u32,
    ) -> Result<(), PtxError> {
        let mut rets = Vec::new();
        if self.eat('(') {
            rets = self.call_operands()?;
            self.expect(',')?;
        }
        let callee = self.operand()?;
        let mut args = Vec::new();
        let mut prototype = false;
        if self.eat(',') {
            if self.eat('(') {
                args = self.call_operands()?;
            }
            prototype = self.eat(',');
            if prototype {
                self.operand()?;
            }
        }
        self.expect(';')?;
        let unsupported = |what: String| Inst {
            guard,
            op: Op::Unsupported { what },
            line,
        };
        let (Opnd::Name(callee), false) = (callee, prototype) else {
            b.insts
                .push(unsupported("call through a function pointer".into()));
            return Ok(());
        };
        // The caller's `.param` slots of this call, as local offsets.
        let slots = |names: &[Opnd]| -> Option<Vec<u64>> {
            names
                .iter()
                .map(|n| match n {
                    Opnd::Name(n) => match b.locals.get(n) {
                        Some(SymKind::Local(o)) => Some(*o),
                        _ => None,
                    },
                    _ => None,
                })
                .collect()
        };
        let (Some(ret_slots), Some(arg_slots)) = (slots(&rets), slots(&args)) else {
            b.insts.push(unsupported(format!(
                "call of {callee} with non-.param operands"
            )));
            return Ok(());
        };
        if callee == "vprintf" && arg_slots.len() == 2 && ret_slots.len() <= 1 {
            b.insts.push(Inst {
                guard,
                op: Op::Printf {
                    fmt: arg_slots[0],
                    args: arg_slots[1],
                    ret: ret_slots.first().copied(),
                },
                line,
            });
            return Ok(());
        }
        if callee == "__assertfail" && arg_slots.len() == 5 && ret_slots.is_empty() {
            b.insts.push(Inst {
                guard,
                op: Op::AssertFail {
                    message: arg_slots[0],
                    file: arg_slots[1],
                    line: arg_slots[2],
                    function: arg_slots[3],
                },
                line,
            });
            return Ok(());
        }
        let func = match self.funcs.get(&callee) {
            Some(f) if f.params.len() == arg_slots.len() && f.rets.len() == ret_slots.len() => {
                f.clone()
            }
            Some(_) => {
                b.insts.push(unsupported(format!(
                    "call of {callee} with other arguments"
                )));
                return Ok(());
            }
            None => {
                b.insts.push(unsupported(format!("call of {callee}")));
                return Ok(());
            }
        };
        if self.inlining.contains(&callee) || self.inlining.len() >= MAX_INLINE_DEPTH {
            b.insts
                .push(unsupported(format!("recursive call of {callee}")));
            return Ok(());
        }
        // A guarded call: the lanes whose guard fails branch past the copy.
        let skip = guard.map(|(p, negated)| {
            b.insts.push(Inst {
                guard: Some((p, !negated)),
                op: Op::Bra { target: 0 },
                line,
            });
            b.insts.len() - 1
        });
        let mut locals: HashMap<String, SymKind> = HashMap::new();
        for (name, &slot) in func.params.iter().zip(&arg_slots) {
            locals.insert(name.clone(), SymKind::Local(slot));
        }
        for (name, &slot) in func.rets.iter().zip(&ret_slots) {
            locals.insert(name.clone(), SymKind::Local(slot));
        }
        let caller = Scope {
            regs: std::mem::take(&mut b.regs),
            locals: std::mem::replace(&mut b.locals, locals),
            labels: std::mem::take(&mut b.labels),
            pending: std::mem::take(&mut b.pending),
            in_function: std::mem::replace(&mut b.in_function, true),
        };
        let resume = self.at;
        self.at = func.body;
        self.inlining.push(callee);
        let lowered = self.body(b).and_then(|()| {
            b.labels
                .insert(RETURN_LABEL.to_string(), b.insts.len() as u32);
            b.resolve_labels()
        });
        self.inlining.pop();
        self.at = resume;
        b.regs = caller.regs;
        b.locals = caller.locals;
        b.labels = caller.labels;
        b.pending = caller.pending;
        b.in_function = caller.in_function;
        lowered?;
        if let Some(index) = skip {
            b.insts[index].op = Op::Bra {
                target: b.insts.len() as u32,
            };
        }
        Ok(())
    }

    /// `a, b, …)` of a call (the `(` read).
    fn call_operands(&mut self) -> Result<Vec<Opnd>, PtxError> {
        let mut out = Vec::new();
        if self.eat(')') {
            return Ok(out);
        }
        loop {
            out.push(self.operand()?);
            if !self.eat(',') {
                break;
            }
        }
        self.expect(')')?;
        Ok(out)
    }
}

/// What a caller's lowering keeps aside while a callee is inlined.
struct Scope {
    regs: HashMap<String, u32>,
    locals: HashMap<String, SymKind>,
    labels: HashMap<String, u32>,
    pending: Vec<(usize, String, u32)>,
    in_function: bool,
}

struct Declared {
    name: String,
    #[allow(dead_code)]
    ty: Ty,
    size: Option<usize>,
    align: usize,
    init: Vec<u8>,
}

struct Body {
    regs: HashMap<String, u32>,
    nregs: u32,
    locals: HashMap<String, SymKind>,
    shared: usize,
    local: usize,
    labels: HashMap<String, u32>,
    pending: Vec<(usize, String, u32)>,
    insts: Vec<Inst>,
    /// Lowering an inlined function's body: `ret` branches to [`RETURN_LABEL`].
    in_function: bool,
}

impl Body {
    /// Points each pending branch at its label (of the current label space).
    fn resolve_labels(&mut self) -> Result<(), PtxError> {
        for (index, label, line) in std::mem::take(&mut self.pending) {
            let target = *self
                .labels
                .get(&label)
                .ok_or_else(|| PtxError::syntax(line, format!("unknown label {label}")))?;
            if let Op::Bra { target: t } = &mut self.insts[index].op {
                *t = target;
            }
        }
        Ok(())
    }

    fn declare(&mut self, name: String) {
        let index = self.nregs;
        self.regs.insert(name, index);
        self.nregs += 1;
    }

    fn reg(&self, name: &str, line: u32) -> Result<u32, PtxError> {
        self.regs
            .get(name)
            .copied()
            .ok_or_else(|| PtxError::syntax(line, format!("undeclared register {name}")))
    }
}

/// Marker offset of a dynamic `.extern .shared` symbol until the kernel's static size is known.
const DYNAMIC: u64 = u64::MAX;

fn fix_dynamic_shared(op: &mut Op, base: u64) {
    let fix = |s: &mut Src| {
        if let Src::Symbol(Symbol::Shared(o)) = s
            && *o >= DYNAMIC / 2
        {
            *o = base + (*o - DYNAMIC / 2);
        }
    };
    let fix_addr = |a: &mut Addr| {
        if let Src::Symbol(Symbol::Shared(o)) = &mut a.base
            && *o >= DYNAMIC / 2
        {
            *o = base + (*o - DYNAMIC / 2);
        }
    };
    match op {
        Op::Unary { a, .. } | Op::Cvta { a, .. } => fix(a),
        Op::Binary { a, b, .. } => {
            fix(a);
            fix(b)
        }
        Op::Ld { addr, .. } | Op::St { addr, .. } | Op::Atom { addr, .. } => fix_addr(addr),
        _ => {}
    }
}

enum Lowering {
    Unsupported(String),
    Error(PtxError),
}

impl From<PtxError> for Lowering {
    fn from(e: PtxError) -> Self {
        Lowering::Error(e)
    }
}

fn literal_bits(lit: Literal, ty: Ty, negative: bool) -> u64 {
    let bits = match (lit, ty) {
        (Literal::Int(v), _) => {
            if negative {
                v.wrapping_neg()
            } else {
                v
            }
        }
        (Literal::F32(f), Ty::F64) => (if negative { -f } else { f } as f64).to_bits(),
        (Literal::F32(f), _) => (if negative { -f } else { f }).to_bits() as u64,
        (Literal::F64(f), Ty::F32) => ((if negative { -f } else { f }) as f32).to_bits() as u64,
        (Literal::F64(f), _) => (if negative { -f } else { f }).to_bits(),
    };
    ty.mask(bits)
}

fn special(name: &str) -> Option<Special> {
    let dim = |s: &str| match s {
        "x" => Some(0u8),
        "y" => Some(1),
        "z" => Some(2),
        _ => None,
    };
    if let Some((reg, d)) = name.split_once('.') {
        let d = dim(d)?;
        return Some(match reg {
            "%tid" => Special::Tid(d),
            "%ntid" => Special::Ntid(d),
            "%ctaid" => Special::Ctaid(d),
            "%nctaid" => Special::Nctaid(d),
            _ => return None,
        });
    }
    Some(match name {
        "%laneid" => Special::LaneId,
        "%warpid" => Special::WarpId,
        "%nwarpid" => Special::NWarpId,
        "%smid" => Special::SmId,
        "%nsmid" => Special::NSmId,
        "%gridid" => Special::GridId,
        "%lanemask_eq" => Special::LanemaskEq,
        "%lanemask_lt" => Special::LanemaskLt,
        "%lanemask_le" => Special::LanemaskLe,
        "%lanemask_gt" => Special::LanemaskGt,
        "%lanemask_ge" => Special::LanemaskGe,
        "%clock" => Special::Clock,
        "%clock64" => Special::Clock64,
        "%globaltimer" => Special::GlobalTimer,
        "%dynamic_smem_size" => Special::DynamicSmemSize,
        "%total_smem_size" => Special::TotalSmemSize,
        _ => return None,
    })
}

/// What the parser knows when it lowers one instruction.
struct Ctx<'a> {
    b: &'a Body,
    module: &'a HashMap<String, SymKind>,
    line: u32,
}

impl Ctx<'_> {
    fn sym(&self, name: &str, offset: i64) -> Option<Src> {
        let kind = self
            .b
            .locals
            .get(name)
            .copied()
            .or_else(|| self.module.get(name).copied())?;
        Some(Src::Symbol(match kind {
            SymKind::Global(i) => Symbol::Global(i, offset),
            SymKind::Shared(o) if o == DYNAMIC => Symbol::Shared(DYNAMIC / 2 + offset as u64),
            SymKind::Shared(o) => Symbol::Shared(o.wrapping_add(offset as u64)),
            SymKind::Local(o) => Symbol::Local(o.wrapping_add(offset as u64)),
            SymKind::Param(o) => Symbol::Param(o.wrapping_add(offset as u64)),
        }))
    }

    fn src(&self, o: &Opnd, ty: Ty) -> Result<Src, Lowering> {
        Ok(match o {
            Opnd::Num(l) => Src::Imm(literal_bits(*l, ty, false)),
            Opnd::Neg(l) => Src::Imm(literal_bits(*l, ty, true)),
            Opnd::Name(n) => {
                if let Some(&r) = self.b.regs.get(n) {
                    Src::Reg(r)
                } else if let Some(s) = special(n) {
                    Src::Special(s)
                } else if let Some(s) = self.sym(n, 0) {
                    s
                } else if n == "WARP_SZ" {
                    // PTX's one predefined constant.
                    Src::Imm(32)
                } else if n.starts_with('%') {
                    // A special register outside the subset (%envreg*, which the driver sets for
                    // cooperative launches and `grid.sync()` reads; %reserved_smem_offset_*,
                    // cooperative groups' block-tile state in reserved shared memory; …).
                    return Err(Lowering::Unsupported(n.clone()));
                } else {
                    return Err(Lowering::Error(PtxError::syntax(
                        self.line,
                        format!("unknown name {n}"),
                    )));
                }
            }
            Opnd::Addr(base, off) => match &**base {
                Opnd::Name(n) => self.sym(n, *off).ok_or_else(|| {
                    Lowering::Error(PtxError::syntax(self.line, format!("unknown symbol {n}")))
                })?,
                _ => return Err(Lowering::Unsupported("address arithmetic operand".into())),
            },
            Opnd::Not(_) | Opnd::Vec(_) | Opnd::Pair(..) => {
                return Err(Lowering::Unsupported(format!("operand {o:?}")));
            }
        })
    }

    fn dst(&self, o: &Opnd) -> Result<u32, Lowering> {
        match o {
            Opnd::Name(n) => Ok(self.b.reg(n, self.line)?),
            _ => Err(Lowering::Unsupported(format!("destination {o:?}"))),
        }
    }

    fn opt_dst(&self, o: &Opnd) -> Result<Option<u32>, Lowering> {
        match o {
            Opnd::Name(n) if n == "_" => Ok(None),
            _ => self.dst(o).map(Some),
        }
    }

    fn addr(&self, o: &Opnd) -> Result<Addr, Lowering> {
        let Opnd::Addr(base, offset) = o else {
            return Err(Lowering::Unsupported(format!("address {o:?}")));
        };
        let base = match &**base {
            Opnd::Num(Literal::Int(v)) => Src::Imm(*v),
            Opnd::Name(n) => {
                if let Some(&r) = self.b.regs.get(n) {
                    Src::Reg(r)
                } else {
                    return Ok(Addr {
                        base: self.sym(n, *offset).ok_or_else(|| {
                            Lowering::Error(PtxError::syntax(
                                self.line,
                                format!("unknown symbol {n}"),
                            ))
                        })?,
                        offset: 0,
                    });
                }
            }
            other => return Err(Lowering::Unsupported(format!("address {other:?}"))),
        };
        Ok(Addr {
            base,
            offset: *offset,
        })
    }
}

fn lower(
    b: &Body,
    module: &HashMap<String, SymKind>,
    opcode: &str,
    ops: &[Opnd],
    line: u32,
) -> Result<Op, Lowering> {
    let unsupported = || Lowering::Unsupported(opcode.to_string());
    let cx = Ctx { b, module, line };
    let mut parts = opcode.split('.');
    let base = parts.next().unwrap_or("");
    let mods: Vec<&str> = parts.collect();
    let has = |m: &str| mods.contains(&m);
    let types: Vec<Ty> = mods.iter().filter_map(|m| Ty::parse(m)).collect();
    let ty = types.last().copied();
    let round = mods
        .iter()
        .find_map(|m| {
            Some(match *m {
                "rn" => Round::Rn,
                "rz" => Round::Rz,
                "rm" => Round::Rm,
                "rp" => Round::Rp,
                "rni" => Round::Rni,
                "rzi" => Round::Rzi,
                "rmi" => Round::Rmi,
                "rpi" => Round::Rpi,
                _ => return None,
            })
        })
        .unwrap_or(Round::Default);
    let ftz = has("ftz");
    // Directed rounding (`__fadd_rz`, libdevice's `expf` uses `fma.rm`) is exact for f32 add,
    // sub, mul and fma, and for conversions; elsewhere it is outside the subset rather than
    // silently rounded to nearest.
    let directed = matches!(round, Round::Rz | Round::Rm | Round::Rp);
    let rounds_exactly = ty == Some(Ty::F32) && matches!(base, "add" | "sub" | "mul" | "fma");
    if directed && base != "cvt" && ty.is_some_and(Ty::float) && !rounds_exactly {
        return Err(unsupported());
    }
    let sat = has("sat");
    let n = ops.len();
    let need = |k: usize| if n == k { Ok(()) } else { Err(unsupported()) };
    let space = mods
        .iter()
        .find_map(|m| {
            Some(match *m {
                "global" => Space::Global,
                "shared" | "shared::cta" => Space::Shared,
                "local" => Space::Local,
                "const" => Space::Const,
                "param" => Space::Param,
                _ => return None,
            })
        })
        .unwrap_or(Space::Generic);
    let pair = has("f16x2");
    if (pair || types == [Ty::F16]) && matches!(base, "add" | "sub" | "mul" | "fma") {
        // Half arithmetic rounds to nearest even (`.rn` or no modifier) without `.ftz`/`.sat`.
        let arity = if base == "fma" { 4 } else { 3 };
        if !matches!(round, Round::Default | Round::Rn) || ftz || sat || n != arity {
            return Err(unsupported());
        }
        let half = if pair { Ty::B32 } else { Ty::B16 };
        return Ok(Op::Half {
            op: match base {
                "add" => HalfOp::Add,
                "sub" => HalfOp::Sub,
                "mul" => HalfOp::Mul,
                _ => HalfOp::Fma,
            },
            pair,
            d: cx.dst(&ops[0])?,
            a: cx.src(&ops[1], half)?,
            b: cx.src(&ops[2], half)?,
            c: if arity == 4 {
                cx.src(&ops[3], half)?
            } else {
                Src::Imm(0)
            },
        });
    }
    if mods
        .iter()
        .any(|m| *m == "f16x2" || *m == "bf16" || *m == "bf16x2" || *m == "e4m3x2")
    {
        return Err(unsupported());
    }
    // Conversions between half and single or double precision: to half rounding to nearest
    // even (`.rn`), from half exact.
    let half_cvt = base == "cvt"
        && !sat
        && match types.as_slice() {
            [Ty::F16, Ty::F32 | Ty::F64] => round == Round::Rn,
            [Ty::F32 | Ty::F64, Ty::F16] => round == Round::Default,
            _ => false,
        };
    // Half precision is moved (ld, st, mov) but not computed with or converted.
    if types.contains(&Ty::F16) && !matches!(base, "ld" | "ldu" | "st" | "mov") && !half_cvt {
        return Err(unsupported());
    }
    Ok(match base {
        "mov" => {
            let ty = ty.ok_or_else(unsupported)?;
            need(2)?;
            match (&ops[0], &ops[1]) {
                (Opnd::Vec(ds), a) => Op::Unpack {
                    part: part_ty(ty, ds.len())?,
                    ds: ds.iter().map(|d| cx.opt_dst(d)).collect::<Result<_, _>>()?,
                    a: cx.src(a, ty)?,
                },
                (d, Opnd::Vec(ps)) => {
                    let part = part_ty(ty, ps.len())?;
                    Op::Pack {
                        part,
                        d: cx.dst(d)?,
                        parts: ps
                            .iter()
                            .map(|p| cx.src(p, part))
                            .collect::<Result<_, _>>()?,
                    }
                }
                (d, a) => Op::Unary {
                    op: Unary::Mov,
                    ty,
                    ftz,
                    d: cx.dst(d)?,
                    a: cx.src(a, ty)?,
                },
            }
        }
        "add" | "sub" | "mul" | "div" | "rem" | "min" | "max" | "and" | "or" | "xor" | "shl"
        | "shr" | "copysign" | "mul24" => {
            let ty = ty.ok_or_else(unsupported)?;
            need(3)?;
            let op = match base {
                "add" => Binary::Add,
                "sub" => Binary::Sub,
                "mul" if has("hi") => Binary::MulHi,
                "mul" if has("wide") => Binary::MulWide,
                "mul" => Binary::MulLo,
                "mul24" if has("lo") => Binary::Mul24Lo,
                "div" => Binary::Div,
                "rem" => Binary::Rem,
                "min" => Binary::Min,
                "max" => Binary::Max,
                "and" => Binary::And,
                "or" => Binary::Or,
                "xor" => Binary::Xor,
                "shl" => Binary::Shl,
                "shr" => Binary::Shr,
                "copysign" => Binary::Copysign,
                _ => return Err(unsupported()),
            };
            if has("cc") || has("relu") || has("NaN") {
                return Err(unsupported());
            }
            if ty == Ty::Pred {
                return Ok(Op::PredLogic {
                    op,
                    d: cx.dst(&ops[0])?,
                    a: pred_src(&cx, &ops[1])?,
                    b: pred_src(&cx, &ops[2])?,
                });
            }
            // Shift amounts are always .u32.
            let bty = if matches!(op, Binary::Shl | Binary::Shr) {
                Ty::U32
            } else {
                ty
            };
            Op::Binary {
                op,
                ty,
                round,
                ftz,
                sat,
                d: cx.dst(&ops[0])?,
                a: cx.src(&ops[1], ty)?,
                b: cx.src(&ops[2], bty)?,
            }
        }
        "not" | "cnot" if ty == Some(Ty::Pred) => {
            need(2)?;
            Op::PredLogic {
                op: Binary::Xor,
                d: cx.dst(&ops[0])?,
                a: pred_src(&cx, &ops[1])?,
                b: Src::Imm(1),
            }
        }
        "neg" | "abs" | "not" | "cnot" | "popc" | "clz" | "brev" | "bfind" | "sqrt" | "rsqrt"
        | "rcp" | "ex2" | "lg2" | "sin" | "cos" | "tanh" => {
            let ty = ty.ok_or_else(unsupported)?;
            need(2)?;
            let op = match base {
                "neg" => Unary::Neg,
                "abs" => Unary::Abs,
                "not" => Unary::Not,
                "cnot" => Unary::Cnot,
                "popc" => Unary::Popc,
                "clz" => Unary::Clz,
                "brev" => Unary::Brev,
                "bfind" => Unary::Bfind {
                    shiftamt: has("shiftamt"),
                },
                "sqrt" => Unary::Sqrt,
                "rsqrt" => Unary::Rsqrt,
                "rcp" => Unary::Rcp,
                "ex2" => Unary::Ex2,
                "lg2" => Unary::Lg2,
                "sin" => Unary::Sin,
                "cos" => Unary::Cos,
                _ => Unary::Tanh,
            };
            if matches!(op, Unary::Rcp | Unary::Sqrt) && ty == Ty::F64 && has("approx") {
                return Err(unsupported());
            }
            Op::Unary {
                op,
                ty,
                ftz,
                d: cx.dst(&ops[0])?,
                a: cx.src(&ops[1], ty)?,
            }
        }
        "mad" | "fma" | "mad24" | "selp" | "bfe" | "prmt" | "shf" => {
            let ty = ty.ok_or_else(unsupported)?;
            need(4)?;
            let op = match base {
                "mad" if ty.float() => Ternary::Fma,
                "mad" if has("hi") => Ternary::MadHi,
                "mad" if has("wide") => Ternary::MadWide,
                "mad" => Ternary::MadLo,
                "mad24" if has("lo") => Ternary::Mad24Lo,
                "fma" => Ternary::Fma,
                "selp" => Ternary::Selp,
                "bfe" => Ternary::Bfe,
                "prmt" if mods.len() == 1 => Ternary::Prmt,
                "shf" if has("l") => Ternary::ShfL { wrap: has("wrap") },
                "shf" if has("r") => Ternary::ShfR { wrap: has("wrap") },
                _ => return Err(unsupported()),
            };
            if has("cc") {
                return Err(unsupported());
            }
            let (bty, cty) = match op {
                Ternary::Selp => (ty, Ty::Pred),
                Ternary::Bfe => (Ty::U32, Ty::U32),
                Ternary::MadWide => (ty, wide(ty)),
                Ternary::ShfL { .. } | Ternary::ShfR { .. } => (Ty::B32, Ty::U32),
                _ => (ty, ty),
            };
            let c = if op == Ternary::Selp {
                pred_src(&cx, &ops[3])?
            } else {
                cx.src(&ops[3], cty)?
            };
            Op::Ternary {
                op,
                ty,
                round,
                ftz,
                sat,
                d: cx.dst(&ops[0])?,
                a: cx.src(&ops[1], ty)?,
                b: cx.src(&ops[2], bty)?,
                c,
            }
        }
        "bfi" => {
            let ty = ty.ok_or_else(unsupported)?;
            need(5)?;
            Op::Bfi {
                ty,
                d: cx.dst(&ops[0])?,
                a: cx.src(&ops[1], ty)?,
                b: cx.src(&ops[2], ty)?,
                pos: cx.src(&ops[3], Ty::U32)?,
                len: cx.src(&ops[4], Ty::U32)?,
            }
        }
        "lop3" => {
            need(5)?;
            let lut = match &ops[4] {
                Opnd::Num(Literal::Int(v)) => *v as u8,
                _ => return Err(unsupported()),
            };
            Op::Lop3 {
                d: cx.dst(&ops[0])?,
                a: cx.src(&ops[1], Ty::B32)?,
                b: cx.src(&ops[2], Ty::B32)?,
                c: cx.src(&ops[3], Ty::B32)?,
                lut,
            }
        }
        "setp" | "set" => {
            let cmp = mods
                .iter()
                .find_map(|m| cmp_op(m))
                .ok_or_else(unsupported)?;
            let combine_op = mods.iter().find_map(|m| match *m {
                "and" => Some(BoolOp::And),
                "or" => Some(BoolOp::Or),
                "xor" => Some(BoolOp::Xor),
                _ => None,
            });
            if base == "set" {
                need(3)?;
                if combine_op.is_some() || types.len() != 2 {
                    return Err(unsupported());
                }
                let sty = types[1];
                return Ok(Op::Set {
                    cmp,
                    dty: types[0],
                    ty: sty,
                    d: cx.dst(&ops[0])?,
                    a: cx.src(&ops[1], sty)?,
                    b: cx.src(&ops[2], sty)?,
                });
            }
            let ty = ty.ok_or_else(unsupported)?;
            let (d, d2) = match &ops[0] {
                Opnd::Pair(p, q) => (b.reg(p, line)?, Some(b.reg(q, line)?)),
                o => (cx.dst(o)?, None),
            };
            let combine = match (combine_op, ops.len()) {
                (None, 3) => None,
                (Some(op), 4) => {
                    let (c, neg) = match &ops[3] {
                        Opnd::Not(n) => (Src::Reg(b.reg(n, line)?), true),
                        o => (cx.src(o, Ty::Pred)?, false),
                    };
                    Some((op, c, neg))
                }
                _ => return Err(unsupported()),
            };
            Op::Setp {
                cmp,
                ty,
                ftz,
                d,
                d2,
                a: cx.src(&ops[1], ty)?,
                b: cx.src(&ops[2], ty)?,
                combine,
            }
        }
        "cvt" => {
            need(2)?;
            if types.len() != 2 {
                return Err(unsupported());
            }
            Op::Cvt {
                dty: types[0],
                sty: types[1],
                round,
                ftz,
                sat,
                d: cx.dst(&ops[0])?,
                a: cx.src(&ops[1], types[1])?,
            }
        }
        "testp" => {
            need(2)?;
            let ty = ty.ok_or_else(unsupported)?;
            let kind = mods
                .iter()
                .find_map(|m| {
                    Some(match *m {
                        "finite" => 0,
                        "infinite" => 1,
                        "number" => 2,
                        "notanumber" => 3,
                        "normal" => 4,
                        "subnormal" => 5,
                        _ => return None,
                    })
                })
                .ok_or_else(unsupported)?;
            Op::Testp {
                ty,
                kind,
                d: cx.dst(&ops[0])?,
                a: cx.src(&ops[1], ty)?,
            }
        }
        "cvta" => {
            need(2)?;
            if space == Space::Generic {
                return Err(unsupported());
            }
            Op::Cvta {
                space,
                to_space: has("to"),
                d: cx.dst(&ops[0])?,
                a: cx.src(&ops[1], Ty::U64)?,
            }
        }
        "ld" | "ldu" => {
            need(2)?;
            let ty = ty.ok_or_else(unsupported)?;
            let ds = match &ops[0] {
                Opnd::Vec(v) => v.iter().map(|d| cx.opt_dst(d)).collect::<Result<_, _>>()?,
                o => vec![Some(cx.dst(o)?)],
            };
            let addr = cx.addr(&ops[1])?;
            Op::Ld {
                space: param_slot_space(space, &addr),
                ty,
                ds,
                addr,
            }
        }
        "st" => {
            need(2)?;
            let ty = ty.ok_or_else(unsupported)?;
            let srcs = match &ops[1] {
                Opnd::Vec(v) => v.iter().map(|s| cx.src(s, ty)).collect::<Result<_, _>>()?,
                o => vec![cx.src(o, ty)?],
            };
            let addr = cx.addr(&ops[0])?;
            Op::St {
                space: param_slot_space(space, &addr),
                ty,
                srcs,
                addr,
            }
        }
        "atom" | "red" => {
            let ty = ty.ok_or_else(unsupported)?;
            let op = mods
                .iter()
                .find_map(|m| atom_op(m))
                .ok_or_else(unsupported)?;
            if !matches!(space, Space::Global | Space::Shared | Space::Generic) || ty == Ty::F16 {
                return Err(unsupported());
            }
            let (d, rest) = if base == "atom" {
                (Some(cx.dst(&ops[0])?), &ops[1..])
            } else {
                (None, ops)
            };
            let expected = if op == AtomOp::Cas { 3 } else { 2 };
            if rest.len() != expected {
                return Err(unsupported());
            }
            Op::Atom {
                space,
                op,
                ty,
                d,
                addr: cx.addr(&rest[0])?,
                b: cx.src(&rest[1], ty)?,
                c: if op == AtomOp::Cas {
                    cx.src(&rest[2], ty)?
                } else {
                    Src::Imm(0)
                },
            }
        }
        "bra" => Op::Bra { target: 0 },
        "ret" | "exit" => Op::Exit,
        "bar" | "barrier" => {
            if has("warp") {
                Op::Nop
            } else if (has("sync") || mods.is_empty() || has("aligned"))
                && !has("arrive")
                && !has("red")
            {
                match ops.first() {
                    Some(Opnd::Num(Literal::Int(0))) | None if ops.len() <= 1 => Op::BarSync,
                    _ => return Err(unsupported()),
                }
            } else {
                return Err(unsupported());
            }
        }
        "membar" | "fence" | "prefetch" | "prefetchu" | "nanosleep" => Op::Nop,
        "shfl" => {
            if !has("sync") || ops.len() != 5 {
                return Err(unsupported());
            }
            let mode = mods
                .iter()
                .find_map(|m| {
                    Some(match *m {
                        "up" => ShflMode::Up,
                        "down" => ShflMode::Down,
                        "bfly" => ShflMode::Bfly,
                        "idx" => ShflMode::Idx,
                        _ => return None,
                    })
                })
                .ok_or_else(unsupported)?;
            let (d, p) = match &ops[0] {
                Opnd::Pair(d, p) => (b.reg(d, line)?, Some(b.reg(p, line)?)),
                o => (cx.dst(o)?, None),
            };
            Op::Shfl {
                mode,
                d,
                p,
                a: cx.src(&ops[1], Ty::B32)?,
                b: cx.src(&ops[2], Ty::U32)?,
                c: cx.src(&ops[3], Ty::U32)?,
            }
        }
        "match" => {
            let ty = ty.ok_or_else(unsupported)?;
            let all = has("all");
            if ops.len() != 3 || !(all || has("any")) || !matches!(ty, Ty::B32 | Ty::B64) {
                return Err(unsupported());
            }
            let (d, p) = match &ops[0] {
                Opnd::Pair(d, p) if all => (b.reg(d, line)?, Some(b.reg(p, line)?)),
                o => (cx.dst(o)?, None),
            };
            Op::Match {
                all,
                ty,
                d,
                p,
                a: cx.src(&ops[1], ty)?,
                mask: cx.src(&ops[2], Ty::B32)?,
            }
        }
        "vote" => {
            if ops.len() != 3 {
                return Err(unsupported());
            }
            let mode = if has("ballot") {
                VoteMode::Ballot
            } else if has("all") {
                VoteMode::All
            } else if has("any") {
                VoteMode::Any
            } else if has("uni") {
                VoteMode::Uni
            } else {
                return Err(unsupported());
            };
            let (a, negate) = match &ops[1] {
                Opnd::Not(n) => (Src::Reg(b.reg(n, line)?), true),
                o => (cx.src(o, Ty::Pred)?, false),
            };
            Op::Vote {
                mode,
                d: cx.dst(&ops[0])?,
                a,
                negate,
                mask: cx.src(&ops[2], Ty::B32)?,
            }
        }
        "activemask" => {
            need(1)?;
            Op::Activemask {
                d: cx.dst(&ops[0])?,
            }
        }
        "redux" => {
            let ty = ty.ok_or_else(unsupported)?;
            let op = mods
                .iter()
                .find_map(|m| atom_op(m))
                .ok_or_else(unsupported)?;
            need(3)?;
            Op::Redux {
                op,
                ty,
                d: cx.dst(&ops[0])?,
                a: cx.src(&ops[1], ty)?,
                mask: cx.src(&ops[2], Ty::B32)?,
            }
        }
        _ => return Err(unsupported()),
    })
}

/// `ld.param`/`st.param` of a call's parameter slot (a `.param` of a body, or of an inlined
/// function) is an access of the thread's local memory, where those slots live.
fn param_slot_space(space: Space, addr: &Addr) -> Space {
    match (space, addr.base) {
        (Space::Param, Src::Symbol(Symbol::Local(_))) => Space::Local,
        _ => space,
    }
}

fn pred_src(cx: &Ctx, o: &Opnd) -> Result<Src, Lowering> {
    cx.src(o, Ty::Pred)
}

fn part_ty(ty: Ty, parts: usize) -> Result<Ty, Lowering> {
    Ok(match (ty.bytes(), parts) {
        (8, 2) => Ty::B32,
        (8, 4) | (4, 2) => Ty::B16,
        (4, 4) | (2, 2) => Ty::B8,
        _ => return Err(Lowering::Unsupported(format!("mov of {parts} parts"))),
    })
}

fn wide(ty: Ty) -> Ty {
    match ty {
        Ty::S16 => Ty::S32,
        Ty::U16 => Ty::U32,
        Ty::S32 => Ty::S64,
        _ => Ty::U64,
    }
}

fn cmp_op(m: &str) -> Option<Cmp> {
    Some(match m {
        "eq" => Cmp::Eq,
        "ne" => Cmp::Ne,
        "lt" => Cmp::Lt,
        "le" => Cmp::Le,
        "gt" => Cmp::Gt,
        "ge" => Cmp::Ge,
        "lo" => Cmp::Lo,
        "ls" => Cmp::Ls,
        "hi" => Cmp::Hi,
        "hs" => Cmp::Hs,
        "equ" => Cmp::Equ,
        "neu" => Cmp::Neu,
        "ltu" => Cmp::Ltu,
        "leu" => Cmp::Leu,
        "gtu" => Cmp::Gtu,
        "geu" => Cmp::Geu,
        "num" => Cmp::Num,
        "nan" => Cmp::Nan,
        _ => return None,
    })
}

fn atom_op(m: &str) -> Option<AtomOp> {
    Some(match m {
        "add" => AtomOp::Add,
        "min" => AtomOp::Min,
        "max" => AtomOp::Max,
        "exch" => AtomOp::Exch,
        "cas" => AtomOp::Cas,
        "and" => AtomOp::And,
        "or" => AtomOp::Or,
        "xor" => AtomOp::Xor,
        "inc" => AtomOp::Inc,
        "dec" => AtomOp::Dec,
        _ => return None,
    })
}
