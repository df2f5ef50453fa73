//! Generic elementwise fusion: a producer joins its consumer's expression when its result is
//! read only by that consumer and has the consumer's shape (so one index addresses both).
//! Operands from outside the group may have any broadcastable shape: lowering binds them with
//! broadcast strides. Every remaining elementwise node becomes a one-op expression.
//! Every pointwise IR op (unary, binary, ternary, clamp, masked_fill, cast) is elementwise.

use crate::expr::{Expr, Instr};
use crate::graph::{remove_nodes, CGraph, FusedOp, Module, Op, Uses};
use npu_ir::pointwise::Rule;
use npu_ir::{BinaryOp, DType, Op as IrOp, TernaryOp, UnaryOp, ValueId};
use std::collections::{BTreeMap, HashMap, HashSet};

/// The most nodes one fused expression takes: bounds the kernel's size and keeps its
/// external inputs well within `Instr::Load`'s u16 index.
const MAX_GROUP: usize = 1024;

fn is_elementwise(op: &Op) -> bool {
    matches!(
        op,
        Op::Ir(
            IrOp::Unary(_)
                | IrOp::Binary { .. }
                | IrOp::BinaryScalar { .. }
                | IrOp::Clamp { .. }
                | IrOp::Ternary { .. }
                | IrOp::MaskedFill { .. }
                | IrOp::Cast
        ) | Op::Fused(FusedOp::Elementwise(_))
    )
}

struct Builder<'a> {
    g: &'a CGraph,
    uses: &'a Uses,
    members: &'a HashSet<usize>,
    ext: Vec<ValueId>,
    code: Vec<Instr>,
    /// Operand holes of the node `emit` wrote: (position in `code`, value); [`Builder::build`]
    /// fills them with the producer's code or a load.
    holes: Vec<(usize, ValueId)>,
    ext_index: HashMap<ValueId, usize>,
}

/// One node's code being written out by [`Builder::build`].
struct Frame {
    code: Vec<Instr>,
    holes: Vec<(usize, ValueId)>,
    at: usize,
    hole: usize,
    /// Append a cast to bool when the node's code is done (see [`Builder::fragment`]).
    cast_bool: bool,
}

impl Builder<'_> {
    /// Marks an operand: a hole that `build` fills (no recursion, so a group may be a
    /// chain of any length).
    fn operand(&mut self, v: ValueId) {
        self.holes.push((self.code.len(), v));
        self.code.push(Instr::Load(u16::MAX));
    }

    /// Node `n`'s own code with its operand holes.
    fn fragment(&mut self, n: usize) -> Frame {
        self.code.clear();
        self.holes.clear();
        self.emit(n);
        // A bool value inside the chain must stay 0/1 (`add` of two bools is True).
        let node = &self.g.nodes[n];
        let cast_bool = self.g.ty(node.outputs[0]).dtype == DType::Bool && !yields_bool(&node.op);
        Frame {
            code: std::mem::take(&mut self.code),
            holes: std::mem::take(&mut self.holes),
            at: 0,
            hole: 0,
            cast_bool,
        }
    }

    /// The postfix code of the group rooted at `root` into `code`, depth first, left
    /// operand first, external inputs numbered in first-use order; iterative.
    fn build(&mut self, root: usize) {
        let mut out = Vec::new();
        let mut root_frame = self.fragment(root);
        root_frame.cast_bool = false; // the group's output is rounded by the store
        let mut stack = vec![root_frame];
        while let Some(f) = stack.last_mut() {
            if f.at == f.code.len() {
                if f.cast_bool {
                    out.push(Instr::Cast(DType::Bool));
                }
                stack.pop();
                continue;
            }
            let hole = f.holes.get(f.hole).filter(|h| h.0 == f.at).map(|h| h.1);
            let instr = f.code[f.at].clone();
            f.at += 1;
            let Some(v) = hole else {
                out.push(instr);
                continue;
            };
            f.hole += 1;
            match self.uses.producer[v.idx()] {
                Some((p, _)) if self.members.contains(&p) => {
                    let frame = self.fragment(p);
                    stack.push(frame);
                }
                _ => {
                    let next = self.ext.len();
                    let k = *self.ext_index.entry(v).or_insert(next);
                    if k == next {
                        self.ext.push(v);
                    }
                    out.push(Instr::Load(k as u16));
                }
            }
        }
        self.code = out;
    }

    fn emit(&mut self, n: usize) {
        let node = &self.g.nodes[n];
        let ins = &node.inputs;
        match &node.op {
            Op::Ir(IrOp::Unary(u)) => {
                self.operand(ins[0]);
                let dtype = self.g.ty(node.outputs[0]).dtype;
                self.code.push(Instr::Unary(u.for_dtype(dtype)));
            }
            Op::Ir(IrOp::Ternary { op, scalars }) => {
                let mut next = 0;
                for s in scalars {
                    match s {
                        Some(s) => self.code.push(Instr::Const(*s as f32)),
                        None => {
                            self.operand(ins[next]);
                            next += 1;
                        }
                    }
                }
                self.code.push(Instr::Ternary(*op));
            }
            // where(mask, value, x)
            Op::Ir(IrOp::MaskedFill { value }) => {
                self.operand(ins[1]);
                match value {
                    Some(v) => self.code.push(Instr::Const(*v as f32)),
                    None => self.operand(ins[2]),
                }
                self.operand(ins[0]);
                self.code.push(Instr::Ternary(TernaryOp::Where));
            }
            Op::Ir(IrOp::Binary { op, alpha }) => {
                self.operand(ins[0]);
                self.operand(ins[1]);
                if *alpha != 1.0 {
                    self.code
                        .extend([Instr::Const(*alpha as f32), Instr::Binary(BinaryOp::Mul)]);
                }
                self.code.push(Instr::Binary(*op));
            }
            Op::Ir(IrOp::BinaryScalar {
                op,
                scalar,
                scalar_lhs,
            }) => {
                if *scalar_lhs {
                    self.code.push(Instr::Const(*scalar as f32));
                    self.operand(ins[0]);
                } else {
                    self.operand(ins[0]);
                    self.code.push(Instr::Const(*scalar as f32));
                }
                self.code.push(Instr::Binary(*op));
            }
            Op::Ir(IrOp::Clamp { min, max }) => {
                self.operand(ins[0]);
                self.code.push(Instr::Clamp {
                    min: min.map(|x| x as f32),
                    max: max.map(|x| x as f32),
                });
            }
            Op::Ir(IrOp::Cast) => {
                self.operand(ins[0]);
                self.code
                    .push(Instr::Cast(self.g.ty(node.outputs[0]).dtype));
            }
            Op::Fused(FusedOp::Elementwise(e)) => {
                for i in &e.code {
                    match i {
                        Instr::Load(k) => self.operand(ins[*k as usize]),
                        other => self.code.push(other.clone()),
                    }
                }
            }
            _ => unreachable!("only elementwise nodes are grouped"),
        }
    }
}

/// Whether `op` always yields 0 or 1 (so a bool result needs no rounding).
fn yields_bool(op: &Op) -> bool {
    match op {
        Op::Ir(IrOp::Unary(u)) => u.rule() == Rule::Bool,
        Op::Ir(IrOp::Binary { op, .. } | IrOp::BinaryScalar { op, .. }) => op.rule() == Rule::Bool,
        _ => false,
    }
}

/// Returns counts: `elementwise` (kernels), `elementwise_chains` (kernels from 2+ ops),
/// `silu_mul` and `add_relu` (chains containing those pairs).
pub fn fuse_elementwise(m: &mut Module) -> BTreeMap<String, usize> {
    let g = &m.graph;
    let uses = Uses::of(g);
    let mut members: HashMap<usize, Vec<usize>> = HashMap::new();
    for (n, node) in g.nodes.iter().enumerate() {
        if !is_elementwise(&node.op) || node.outputs.len() != 1 {
            continue;
        }
        let out_shape = &g.ty(node.outputs[0]).shape;
        let mut group = vec![n];
        let mut seen = HashSet::new();
        for &v in &node.inputs {
            let Some((p, _)) = uses.producer[v.idx()] else {
                continue;
            };
            if !seen.insert(p) || !uses.single_use(v) || &g.ty(v).shape != out_shape {
                continue;
            }
            if members
                .get(&p)
                .is_some_and(|sub| group.len() + sub.len() <= MAX_GROUP)
            {
                group.extend(members.remove(&p).unwrap_or_default());
            }
        }
        members.insert(n, group);
    }
    let mut stats = BTreeMap::from([
        ("elementwise".to_string(), 0),
        ("elementwise_chains".to_string(), 0),
        ("silu_mul".to_string(), 0),
        ("add_relu".to_string(), 0),
    ]);
    let mut rewrites = Vec::new();
    let mut dead = Vec::new();
    for (root, group) in members {
        let set: HashSet<usize> = group.iter().copied().collect();
        let mut b = Builder {
            g,
            uses: &uses,
            members: &set,
            ext: Vec::new(),
            code: Vec::new(),
            holes: Vec::new(),
            ext_index: HashMap::new(),
        };
        b.build(root);
        let has = |pred: &dyn Fn(&Op) -> bool| group.iter().any(|&i| pred(&g.nodes[i].op));
        let unary = |u: UnaryOp| move |op: &Op| matches!(op, Op::Ir(IrOp::Unary(x)) if *x == u);
        let bin = |o: BinaryOp| move |op: &Op| matches!(op, Op::Ir(IrOp::Binary { op: x, .. }) if *x == o);
        *stats.get_mut("elementwise").unwrap() += 1;
        if group.len() > 1 {
            *stats.get_mut("elementwise_chains").unwrap() += 1;
            if has(&unary(UnaryOp::Silu)) && has(&bin(BinaryOp::Mul)) {
                *stats.get_mut("silu_mul").unwrap() += 1;
            }
            if has(&unary(UnaryOp::Relu)) && has(&bin(BinaryOp::Add)) {
                *stats.get_mut("add_relu").unwrap() += 1;
            }
        }
        dead.extend(group.iter().copied().filter(|&i| i != root));
        rewrites.push((root, Expr { code: b.code }, b.ext));
    }
    for (root, expr, inputs) in rewrites {
        let node = &mut m.graph.nodes[root];
        node.op = Op::Fused(FusedOp::Elementwise(expr));
        node.inputs = inputs;
    }
    remove_nodes(&mut m.graph, &dead);
    stats
}
