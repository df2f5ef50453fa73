//! The compiler's working graph: the IR graph with fused ops added, plus the load-time
//! recipes of weights that passes derived (BN folding).

use crate::expr::Expr;
use crate::program::Recipe;
use npu_ir::{DType, Graph, Node, TensorType, ValueId, ValueKind};
use std::collections::HashMap;

/// An op of the compiler graph: an ATen op as parsed, or a fused op made by a pass.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    Ir(npu_ir::Op),
    Fused(FusedOp),
}

/// Activation applied in a producer's epilogue.
pub type Act = npu_ir::UnaryOp;

#[derive(Debug, Clone, PartialEq)]
pub enum FusedOp {
    /// conv2d (BN already folded into its weights) with an optional activation, and with
    /// `residual` a tensor of the output's shape added before it (`act(conv + r)`).
    /// Inputs: x, weight, optional bias, r when `residual`.
    Conv2d {
        stride: [usize; 2],
        padding: [usize; 2],
        dilation: [usize; 2],
        groups: usize,
        act: Option<Act>,
        residual: bool,
    },
    /// linear with an activation epilogue. Inputs: x, weight, optional bias.
    Linear { act: Act },
    /// `r + x @ weight^T` (a residual add folded into the GEMM as its bias term, rounded as
    /// PyTorch rounds the two ops). Inputs: x, weight, r (r has the output's shape).
    LinearAdd,
    /// `linear(rms_norm(x, norm_weight, eps), weight, bias?)`, then act: the norm runs in the
    /// GEMM's prologue. Inputs: x, weight, bias?, norm_weight.
    NormLinear { eps: f64, act: Option<Act> },
    /// A chain of elementwise ops as one expression over broadcast inputs.
    Elementwise(Expr),
    /// x * rsqrt(mean(x^2, -1) + eps) * weight, in f32. Inputs: x, weight.
    RmsNorm { eps: f64 },
    /// softmax(x * scale + mask) over the last dim. Inputs: x, mask (broadcastable).
    MaskedSoftmax { scale: f64 },
    /// softmax(q k^T * scale + mask) v with grouped K/V heads. Inputs: q, k, v, optional mask.
    /// q: [B, H, S, D]; k, v: [B, KVH, T, D], H a multiple of KVH; mask broadcastable to [B, H, S, T].
    Attention { scale: f64, causal: bool },
    /// x * cos + rotate_half(x) * sin over the last dim. Inputs: x, cos, sin (broadcastable).
    Rope,
}

impl Op {
    pub fn ir(&self) -> Option<&npu_ir::Op> {
        match self {
            Op::Ir(op) => Some(op),
            Op::Fused(_) => None,
        }
    }

    pub fn name(&self) -> String {
        match self {
            Op::Ir(op) => op.name(),
            Op::Fused(f) => match f {
                FusedOp::Conv2d { act, residual, .. } => format!(
                    "conv2d{}{}",
                    if *residual { "+add" } else { "" },
                    act.map_or(String::new(), |a| format!("+{}", a.name()))
                ),
                FusedOp::Linear { act } => format!("linear+{}", act.name()),
                FusedOp::LinearAdd => "linear+add".into(),
                FusedOp::NormLinear { .. } => "rms_norm+linear".into(),
                FusedOp::Elementwise(e) => format!("elementwise({})", e),
                FusedOp::RmsNorm { .. } => "rms_norm".into(),
                FusedOp::MaskedSoftmax { .. } => "masked_softmax".into(),
                FusedOp::Attention { .. } => "attention".into(),
                FusedOp::Rope => "rope".into(),
            },
        }
    }
}

/// Ops whose result is the input's storage seen through new metadata (no data moves).
pub fn is_view_op(op: &Op) -> bool {
    matches!(
        op,
        Op::Ir(
            npu_ir::Op::Reshape
                | npu_ir::Op::Transpose { .. }
                | npu_ir::Op::Permute { .. }
                | npu_ir::Op::Slice { .. }
                | npu_ir::Op::Expand { .. }
                | npu_ir::Op::Chunk { .. }
                | npu_ir::Op::Split { .. }
                | npu_ir::Op::Identity
        )
    )
}

pub type CGraph = Graph<Op>;
pub type CNode = Node<Op>;

/// What the passes work on: the graph and the recipes for weights they derived.
#[derive(Debug, Clone)]
pub struct Module {
    pub graph: CGraph,
    /// Weights computed at load time from checkpoint tensors (BN folding).
    pub recipes: HashMap<ValueId, Recipe<ValueId>>,
}

impl Module {
    pub fn new(graph: Graph) -> Module {
        Module {
            graph: graph.map_ops(Op::Ir),
            recipes: HashMap::new(),
        }
    }

    /// Adds a weight computed at load time by `recipe`.
    pub fn add_derived_weight(
        &mut self,
        name: String,
        ty: TensorType,
        recipe: Recipe<ValueId>,
    ) -> ValueId {
        let id = self
            .graph
            .add_value(name.clone(), ty, ValueKind::Weight { key: name });
        self.recipes.insert(id, recipe);
        id
    }
}

/// Replaces every read of `old` (node inputs and graph outputs) by `new`.
pub fn replace_uses(g: &mut CGraph, old: ValueId, new: ValueId) {
    replace_uses_many(g, &HashMap::from([(old, new)]));
}

/// Applies a whole substitution map in one sweep (chains `a -> b -> c` resolve to `c`).
pub fn replace_uses_many(g: &mut CGraph, map: &HashMap<ValueId, ValueId>) {
    if map.is_empty() {
        return;
    }
    // Each key's final value, found once (a chain of n no-ops costs O(n), not O(n^2)).
    let mut last: HashMap<ValueId, ValueId> = HashMap::with_capacity(map.len());
    let mut path = Vec::new();
    for &start in map.keys() {
        let mut v = start;
        while let (None, Some(&n)) = (last.get(&v), map.get(&v)) {
            path.push(v);
            v = n;
        }
        let end = last.get(&v).copied().unwrap_or(v);
        for p in path.drain(..) {
            last.insert(p, end);
        }
    }
    let resolve = |v: ValueId| last.get(&v).copied().unwrap_or(v);
    for node in &mut g.nodes {
        for v in &mut node.inputs {
            *v = resolve(*v);
        }
    }
    for v in &mut g.outputs {
        *v = resolve(*v);
    }
}

/// Keeps nodes whose index is not in `dead` (sorted or not).
pub fn remove_nodes(g: &mut CGraph, dead: &[usize]) {
    if dead.is_empty() {
        return;
    }
    let mut kill = vec![false; g.nodes.len()];
    for &d in dead {
        kill[d] = true;
    }
    let mut i = 0;
    g.nodes.retain(|_| {
        let keep = !kill[i];
        i += 1;
        keep
    });
}

/// Def-use facts of a graph at one moment; rebuilt after rewrites.
pub struct Uses {
    pub producer: Vec<Option<(usize, usize)>>,
    pub users: Vec<Vec<usize>>,
    pub is_output: Vec<bool>,
}

impl Uses {
    pub fn of(g: &CGraph) -> Uses {
        let mut is_output = vec![false; g.values.len()];
        for v in &g.outputs {
            is_output[v.idx()] = true;
        }
        Uses {
            producer: g.producers(),
            users: g.users(),
            is_output,
        }
    }

    /// The node producing `v`, if any.
    pub fn producer<'g>(&self, g: &'g CGraph, v: ValueId) -> Option<(usize, &'g CNode)> {
        self.producer[v.idx()].map(|(n, _)| (n, &g.nodes[n]))
    }

    /// True when `v` is read by exactly one node, once or more, and is not a graph output.
    pub fn single_use(&self, v: ValueId) -> bool {
        self.users[v.idx()].len() == 1 && !self.is_output[v.idx()]
    }
}

/// Normalizes a possibly negative dim against `rank`.
pub fn norm_dim(dim: i64, rank: usize) -> Option<usize> {
    let d = if dim < 0 { dim + rank as i64 } else { dim };
    (0..rank as i64).contains(&d).then_some(d as usize)
}

/// The storage dtype of a tensor whose IR dtype is `ir`, for a program computing in `compute`
/// whose model dtype is `model`: model-dtype tensors take the compute dtype, wider float
/// islands (an f32 softmax inside a bf16 model) keep their precision, integers never change.
pub fn storage_dtype(ir: DType, model: DType, compute: DType) -> DType {
    if !ir.is_float() {
        return ir;
    }
    if ir == model || ir == DType::F64 {
        return compute;
    }
    if ir.size_bytes() > compute.size_bytes() {
        ir
    } else {
        compute
    }
}
