//! The node builder rules write with: each helper appends one primitive node whose output
//! metadata (shape, dtype) follows ATen's rules, and returns its value.

use npu_ir::{
    BinaryOp, Composite, DType, Graph, MinMax, Node, NodeId, Op, TensorType, TernaryOp, UnaryOp,
    ValueId, ValueKind,
};
use std::collections::{HashMap, HashSet};

/// A rule's error: what is wrong with the node's operands (the pass adds the node).
pub type R<T> = Result<T, String>;

/// Emits the primitive nodes that replace one composite node.
pub struct Emitter<'a> {
    graph: &'a mut Graph,
    names: &'a mut HashSet<String>,
    /// The node being rewritten.
    pub node: &'a Node,
    pub(super) out: Vec<Node>,
    next: usize,
    /// Fresh values that [`Self::bind`] renamed to an original output: later reads of them
    /// read the output.
    renamed: HashMap<ValueId, ValueId>,
}

/// ATen's broadcast of two shapes.
pub fn broadcast(a: &[usize], b: &[usize]) -> R<Vec<usize>> {
    let n = a.len().max(b.len());
    let at = |s: &[usize], i: usize| (i + s.len()).checked_sub(n).map_or(1, |j| s[j]);
    (0..n)
        .map(|i| match (at(a, i), at(b, i)) {
            (x, y) if x == y => Ok(x),
            (1, y) => Ok(y),
            (x, 1) => Ok(x),
            (x, y) => Err(format!(
                "shapes {a:?} and {b:?} do not broadcast ({x} vs {y})"
            )),
        })
        .collect()
}

/// The result dtype of arithmetic on two tensors (PyTorch's promotion for the dtypes the
/// rules combine: a float beats an integer, the wider float wins).
pub fn promote(a: DType, b: DType) -> DType {
    match (a.is_float(), b.is_float()) {
        (true, false) => a,
        (false, true) => b,
        _ if a == b => a,
        (true, true) if a == DType::F64 || b == DType::F64 => DType::F64,
        // two different floats of f16/bf16/f32
        (true, true) => DType::F32,
        (false, false) => {
            if a == DType::Bool {
                b
            } else if b == DType::Bool || a.size_bytes() >= b.size_bytes() {
                a
            } else {
                b
            }
        }
    }
}

/// Normalizes a possibly negative dim against `rank`.
pub fn dim(d: i64, rank: usize) -> R<usize> {
    crate::graph::norm_dim(d, rank).ok_or_else(|| format!("dim {d} out of range for rank {rank}"))
}

/// Normalized reduction dims; empty = every dim (ATen's convention for `dim=[]`/None).
pub fn reduce_dims(dims: &[i64], rank: usize) -> R<Vec<usize>> {
    if dims.is_empty() {
        return Ok((0..rank).collect());
    }
    let mut v = dims
        .iter()
        .map(|&d| dim(d, rank.max(1)))
        .collect::<R<Vec<_>>>()?;
    v.sort_unstable();
    v.dedup();
    Ok(v)
}

fn op_type(op: &Op) -> String {
    match op {
        Op::Binary { op, .. } => format!("aten.{}.Tensor", op.name()),
        Op::BinaryScalar { op, .. } => format!("aten.{}.Scalar", op.name()),
        other => format!("aten.{}.default", other.name()),
    }
}

impl<'a> Emitter<'a> {
    pub(super) fn new(
        graph: &'a mut Graph,
        names: &'a mut HashSet<String>,
        node: &'a Node,
    ) -> Emitter<'a> {
        Emitter {
            graph,
            names,
            node,
            out: Vec::new(),
            next: 0,
            renamed: HashMap::new(),
        }
    }

    /// The composite being rewritten.
    pub fn composite(&self) -> R<&'a Composite> {
        match &self.node.op {
            Op::Composite(c) => Ok(c),
            other => Err(format!("internal: {} is not a composite", other.name())),
        }
    }

    pub fn ty(&self, v: ValueId) -> &TensorType {
        self.graph.ty(v)
    }

    pub fn shape(&self, v: ValueId) -> Vec<usize> {
        self.graph.ty(v).shape.clone()
    }

    pub fn dtype(&self, v: ValueId) -> DType {
        self.graph.ty(v).dtype
    }

    /// Input `i` of the node being rewritten.
    pub fn input(&self, i: usize) -> R<ValueId> {
        self.node.inputs.get(i).copied().ok_or_else(|| {
            format!(
                "expected at least {} tensor inputs, got {}",
                i + 1,
                self.node.inputs.len()
            )
        })
    }

    /// Output `i` of the node being rewritten.
    pub fn output(&self, i: usize) -> R<ValueId> {
        self.node.outputs.get(i).copied().ok_or_else(|| {
            format!(
                "expected at least {} outputs, got {}",
                i + 1,
                self.node.outputs.len()
            )
        })
    }

    /// `v`, or the output it was bound to.
    fn current(&self, v: ValueId) -> ValueId {
        self.renamed.get(&v).copied().unwrap_or(v)
    }

    fn fresh(&mut self) -> String {
        loop {
            let n = format!("{}__d{}", self.node.name, self.next);
            self.next += 1;
            if self.names.insert(n.clone()) {
                return n;
            }
        }
    }

    /// Appends `op` over `inputs` with fresh outputs of the given types.
    pub fn emit(&mut self, op: Op, inputs: Vec<ValueId>, outs: Vec<TensorType>) -> Vec<ValueId> {
        let inputs = inputs.into_iter().map(|v| self.current(v)).collect();
        let id = NodeId(u32::MAX); // renumbered when the pass rebuilds the node list
        let outputs = outs
            .into_iter()
            .enumerate()
            .map(|(index, ty)| {
                let name = self.fresh();
                self.graph
                    .add_value(name, ty, ValueKind::NodeOutput { node: id, index })
            })
            .collect();
        let name = self.fresh();
        self.out.push(Node {
            name,
            op_type: op_type(&op),
            op,
            inplace: false,
            inputs,
            outputs,
        });
        self.out
            .last()
            .map(|n| n.outputs.clone())
            .unwrap_or_default()
    }

    pub fn emit1(&mut self, op: Op, inputs: Vec<ValueId>, ty: TensorType) -> ValueId {
        self.emit(op, inputs, vec![ty])[0]
    }

    /// Makes `r` the value of the rewritten node's output `i`: the node that produced `r`
    /// here writes the original output value instead (so value names and ids of outputs
    /// stay stable), or, when `r` is not fresh or its type differs, a cast/reshape/alias
    /// node does.
    pub fn bind(&mut self, i: usize, r: ValueId) -> R<()> {
        let out = self.output(i)?;
        let r = self.current(r);
        let (rt, ot) = (self.ty(r).clone(), self.ty(out).clone());
        if rt.numel() != ot.numel() {
            return Err(format!(
                "internal: decomposed output {i} is {rt}, the graph declares {ot}"
            ));
        }
        // An output bound before is not fresh: it keeps its own name.
        let fresh = if self.node.outputs.contains(&r) {
            None
        } else {
            self.out.iter().rposition(|n| n.outputs.contains(&r))
        };
        match fresh {
            Some(p) if rt == ot => {
                let k = self.out[p]
                    .outputs
                    .iter()
                    .position(|v| *v == r)
                    .unwrap_or(0);
                self.out[p].outputs[k] = out;
                for n in &mut self.out[p + 1..] {
                    for v in &mut n.inputs {
                        if *v == r {
                            *v = out;
                        }
                    }
                }
                self.renamed.insert(r, out);
                Ok(())
            }
            _ => {
                let op = if rt.dtype != ot.dtype {
                    Op::Cast
                } else if rt.shape != ot.shape {
                    Op::Reshape
                } else {
                    Op::Identity
                };
                let r = if rt.dtype != ot.dtype && rt.shape != ot.shape {
                    self.reshape(r, &ot.shape)
                } else {
                    r
                };
                let name = self.fresh();
                self.out.push(Node {
                    name,
                    op_type: op_type(&op),
                    op,
                    inplace: false,
                    inputs: vec![r],
                    outputs: vec![out],
                });
                Ok(())
            }
        }
    }

    // ---- elementwise ----

    pub fn unary(&mut self, u: UnaryOp, x: ValueId) -> ValueId {
        let ty = self.ty(x).clone();
        self.emit1(Op::Unary(u), vec![x], ty)
    }

    /// `a op (alpha * b)` with broadcasting.
    pub fn binary_alpha(&mut self, op: BinaryOp, a: ValueId, b: ValueId, alpha: f64) -> R<ValueId> {
        let shape = broadcast(&self.ty(a).shape, &self.ty(b).shape)?;
        let dtype = promote(self.dtype(a), self.dtype(b));
        Ok(self.emit1(
            Op::Binary { op, alpha },
            vec![a, b],
            TensorType { shape, dtype },
        ))
    }

    pub fn binary(&mut self, op: BinaryOp, a: ValueId, b: ValueId) -> R<ValueId> {
        self.binary_alpha(op, a, b, 1.0)
    }

    pub fn add(&mut self, a: ValueId, b: ValueId) -> R<ValueId> {
        self.binary(BinaryOp::Add, a, b)
    }
    pub fn sub(&mut self, a: ValueId, b: ValueId) -> R<ValueId> {
        self.binary(BinaryOp::Sub, a, b)
    }
    pub fn mul(&mut self, a: ValueId, b: ValueId) -> R<ValueId> {
        self.binary(BinaryOp::Mul, a, b)
    }
    pub fn div(&mut self, a: ValueId, b: ValueId) -> R<ValueId> {
        self.binary(BinaryOp::Div, a, b)
    }

    /// `x op s` (`s op x` when `lhs`). A float scalar on an integer tensor gives f32.
    fn scalar_op(&mut self, op: BinaryOp, x: ValueId, s: f64, lhs: bool) -> ValueId {
        let mut ty = self.ty(x).clone();
        if !ty.dtype.is_float() && (s.fract() != 0.0 || op == BinaryOp::Div) {
            ty.dtype = DType::F32;
        }
        self.emit1(
            Op::BinaryScalar {
                op,
                scalar: s,
                scalar_lhs: lhs,
            },
            vec![x],
            ty,
        )
    }

    pub fn scalar(&mut self, op: BinaryOp, x: ValueId, s: f64) -> ValueId {
        self.scalar_op(op, x, s, false)
    }

    /// `s op x`.
    pub fn rscalar(&mut self, op: BinaryOp, s: f64, x: ValueId) -> ValueId {
        self.scalar_op(op, x, s, true)
    }

    /// `x * s`, skipped when `s == 1`.
    pub fn scale(&mut self, x: ValueId, s: f64) -> ValueId {
        if s == 1.0 {
            x
        } else {
            self.scalar(BinaryOp::Mul, x, s)
        }
    }

    /// `a op b` for a comparison `op` (a bool result), with broadcasting.
    pub fn compare(&mut self, op: BinaryOp, a: ValueId, b: ValueId) -> R<ValueId> {
        let shape = broadcast(&self.ty(a).shape, &self.ty(b).shape)?;
        Ok(self.emit1(
            Op::Binary { op, alpha: 1.0 },
            vec![a, b],
            TensorType {
                shape,
                dtype: DType::Bool,
            },
        ))
    }

    /// `x op s` for a comparison `op` (a bool result).
    pub fn compare_scalar(&mut self, op: BinaryOp, x: ValueId, s: f64) -> ValueId {
        let shape = self.shape(x);
        self.emit1(
            Op::BinaryScalar {
                op,
                scalar: s,
                scalar_lhs: false,
            },
            vec![x],
            TensorType {
                shape,
                dtype: DType::Bool,
            },
        )
    }

    /// `cond ? a : b`, broadcast; the result has the promoted dtype of `a` and `b`.
    pub fn select(&mut self, cond: ValueId, a: ValueId, b: ValueId) -> R<ValueId> {
        let ab = broadcast(&self.ty(a).shape, &self.ty(b).shape)?;
        let shape = broadcast(&self.ty(cond).shape, &ab)?;
        let dtype = promote(self.dtype(a), self.dtype(b));
        Ok(self.emit1(
            Op::Ternary {
                op: TernaryOp::Where,
                scalars: [None; 3],
            },
            vec![cond, a, b],
            TensorType { shape, dtype },
        ))
    }

    /// `[0, 1, .., n - 1]` as `dtype`.
    pub fn arange(&mut self, n: usize, dtype: DType) -> ValueId {
        self.emit1(
            Op::Arange {
                start: 0.0,
                end: n as f64,
                step: 1.0,
            },
            vec![],
            TensorType {
                shape: vec![n],
                dtype,
            },
        )
    }

    pub fn clamp(&mut self, x: ValueId, min: Option<f64>, max: Option<f64>) -> ValueId {
        let ty = self.ty(x).clone();
        self.emit1(Op::Clamp { min, max }, vec![x], ty)
    }

    pub fn cast(&mut self, x: ValueId, dtype: DType) -> ValueId {
        if self.dtype(x) == dtype {
            return x;
        }
        let shape = self.shape(x);
        self.emit1(Op::Cast, vec![x], TensorType { shape, dtype })
    }

    /// f16/bf16 values go up to f32 for statistics (PyTorch's opmath type); others stay.
    pub fn upcast(&mut self, x: ValueId) -> ValueId {
        match self.dtype(x) {
            DType::F16 | DType::BF16 => self.cast(x, DType::F32),
            DType::F32 | DType::F64 => x,
            _ => self.cast(x, DType::F32),
        }
    }

    // ---- views and data movement ----

    pub fn reshape(&mut self, x: ValueId, shape: &[usize]) -> ValueId {
        if self.ty(x).shape == shape {
            return x;
        }
        let dtype = self.dtype(x);
        self.emit1(
            Op::Reshape,
            vec![x],
            TensorType {
                shape: shape.to_vec(),
                dtype,
            },
        )
    }

    pub fn permute(&mut self, x: ValueId, perm: &[usize]) -> ValueId {
        if perm.iter().enumerate().all(|(i, &p)| i == p) {
            return x;
        }
        let t = self.ty(x).clone();
        let shape = perm.iter().map(|&p| t.shape[p]).collect();
        self.emit1(
            Op::Permute {
                dims: perm.iter().map(|&p| p as i64).collect(),
            },
            vec![x],
            TensorType {
                shape,
                dtype: t.dtype,
            },
        )
    }

    pub fn transpose(&mut self, x: ValueId, a: usize, b: usize) -> ValueId {
        let mut perm: Vec<usize> = (0..self.ty(x).rank()).collect();
        perm.swap(a, b);
        self.permute(x, &perm)
    }

    /// `x[start:start+len]` along `d` (already normalized and in range).
    pub fn slice(&mut self, x: ValueId, d: usize, start: usize, len: usize) -> ValueId {
        let t = self.ty(x).clone();
        if start == 0 && len == t.shape[d] {
            return x;
        }
        let mut shape = t.shape.clone();
        shape[d] = len;
        self.emit1(
            Op::Slice {
                dim: d as i64,
                start: start as i64,
                end: (start + len) as i64,
                step: 1,
            },
            vec![x],
            TensorType {
                shape,
                dtype: t.dtype,
            },
        )
    }

    pub fn expand(&mut self, x: ValueId, shape: &[usize]) -> ValueId {
        if self.ty(x).shape == shape {
            return x;
        }
        let dtype = self.dtype(x);
        self.emit1(
            Op::Expand {
                size: shape.iter().map(|&s| s as i64).collect(),
            },
            vec![x],
            TensorType {
                shape: shape.to_vec(),
                dtype,
            },
        )
    }

    pub fn cat(&mut self, xs: Vec<ValueId>, d: usize) -> R<ValueId> {
        let first = self.ty(*xs.first().ok_or("cat of nothing")?).clone();
        if xs.len() == 1 {
            return Ok(xs[0]);
        }
        let mut shape = first.shape.clone();
        shape[d] = xs.iter().map(|&x| self.ty(x).shape[d]).sum();
        Ok(self.emit1(
            Op::Cat { dim: d as i64 },
            xs,
            TensorType {
                shape,
                dtype: first.dtype,
            },
        ))
    }

    pub fn full(&mut self, shape: &[usize], dtype: DType, value: f64) -> ValueId {
        self.emit1(
            Op::Full { value },
            vec![],
            TensorType {
                shape: shape.to_vec(),
                dtype,
            },
        )
    }

    // ---- reductions ----

    fn reduced(&self, x: ValueId, dims: &[usize], keepdim: bool) -> Vec<usize> {
        let s = &self.ty(x).shape;
        s.iter()
            .enumerate()
            .filter_map(|(i, &n)| match (dims.contains(&i), keepdim) {
                (false, _) => Some(n),
                (true, true) => Some(1),
                (true, false) => None,
            })
            .collect()
    }

    /// `mean(x, dims, keepdim)` (`sum` when `!mean`) over normalized dims.
    pub fn reduce(&mut self, x: ValueId, dims: &[usize], keepdim: bool, mean: bool) -> ValueId {
        let shape = self.reduced(x, dims, keepdim);
        let dtype = self.dtype(x);
        let dims = dims.iter().map(|&d| d as i64).collect();
        let op = if mean {
            Op::Mean { dims, keepdim }
        } else {
            Op::Sum { dims, keepdim }
        };
        self.emit1(op, vec![x], TensorType { shape, dtype })
    }

    pub fn mean(&mut self, x: ValueId, dims: &[usize], keepdim: bool) -> ValueId {
        self.reduce(x, dims, keepdim, true)
    }

    pub fn sum(&mut self, x: ValueId, dims: &[usize], keepdim: bool) -> ValueId {
        self.reduce(x, dims, keepdim, false)
    }

    pub fn min_max(&mut self, op: MinMax, x: ValueId, dims: &[usize], keepdim: bool) -> ValueId {
        let shape = self.reduced(x, dims, keepdim);
        let dtype = self.dtype(x);
        self.emit1(
            Op::ReduceMinMax {
                op,
                dims: dims.iter().map(|&d| d as i64).collect(),
                keepdim,
            },
            vec![x],
            TensorType { shape, dtype },
        )
    }

    // ---- linear algebra ----

    /// `a @ b` for operands of rank >= 2 whose batch dims broadcast.
    pub fn matmul(&mut self, a: ValueId, b: ValueId) -> R<ValueId> {
        let (sa, sb) = (self.shape(a), self.shape(b));
        if sa.len() < 2 || sb.len() < 2 || sa[sa.len() - 1] != sb[sb.len() - 2] {
            return Err(format!("matmul of {sa:?} and {sb:?}"));
        }
        let mut shape = broadcast(&sa[..sa.len() - 2], &sb[..sb.len() - 2])?;
        shape.extend([sa[sa.len() - 2], sb[sb.len() - 1]]);
        let dtype = promote(self.dtype(a), self.dtype(b));
        Ok(self.emit1(Op::Matmul, vec![a, b], TensorType { shape, dtype }))
    }
}
