//! Per-node lowering: view ops compute metadata, compute ops emit kernel steps.

use super::views::{Base, View};
use super::Lowerer;
use crate::error::CompileError;
use crate::expr::{Expr, Instr};
use crate::graph::{is_view_op, norm_dim, CNode, FusedOp, Op};
use crate::program::{Kernel, PoolKind, ReduceOp, Slot};
use npu_ir::{Op as IrOp, ValueId};

/// True when the op computes into a buffer of its own (false for views and `index_copy`,
/// which updates its target).
pub(crate) fn writes_own_buffer(op: &Op) -> bool {
    !(is_view_op(op)
        || matches!(
            op,
            Op::Ir(IrOp::GetItem { .. } | IrOp::Dropout { .. } | IrOp::IndexCopy { .. })
        ))
}

fn perm_of_transpose(dim0: i64, dim1: i64, rank: usize) -> Option<Vec<usize>> {
    let (a, b) = (norm_dim(dim0, rank)?, norm_dim(dim1, rank)?);
    let mut p: Vec<usize> = (0..rank).collect();
    p.swap(a, b);
    Some(p)
}

/// A 0-d operand and result seen as 1-element vectors, so "dim 0 (or -1) of a 0-d tensor"
/// (what PyTorch accepts for softmax and reductions) is an ordinary dim.
fn scalar_as_vector(node: &CNode, x: View, out: View) -> Result<(View, View), CompileError> {
    if !x.shape.is_empty() {
        return Ok((x, out));
    }
    let one = |v: View| {
        v.reshape(&[v.shape.iter().product()])
            .ok_or_else(|| CompileError::node(node, "0-d operand layout"))
    };
    Ok((one(x)?, one(out)?))
}

impl Lowerer<'_> {
    /// The permutation a value's only reader applies, so its buffer can be laid out to make
    /// the permuted view dense (attention output -> transpose -> reshape stays copy-free).
    fn layout_hint(&self, v: ValueId) -> Option<Vec<usize>> {
        let g = &self.m.graph;
        let [user] = self.users[v.idx()][..] else {
            return None;
        };
        let user = &g.nodes[user];
        let rank = g.ty(v).rank();
        match &user.op {
            Op::Ir(IrOp::Transpose { dim0, dim1 }) => perm_of_transpose(*dim0, *dim1, rank),
            Op::Ir(IrOp::Permute { dims }) => dims.iter().map(|&d| norm_dim(d, rank)).collect(),
            _ => None,
        }
    }

    fn out(&mut self, node: &CNode, i: usize) -> View {
        let v = node.outputs[i];
        let hint = if self.laid.contains_key(&v) {
            None
        } else {
            self.layout_hint(v)
        };
        let view = self.alloc(v, hint.as_deref());
        self.views.insert(v, view.clone());
        view
    }

    /// A row-major output, for kernels whose output is re-viewed by a reshape (gemm).
    fn out_dense(&mut self, node: &CNode, i: usize) -> View {
        let v = node.outputs[i];
        let view = self.alloc(v, None);
        self.views.insert(v, view.clone());
        view
    }

    fn bcast(&mut self, node: &CNode, v: ValueId, shape: &[usize]) -> Result<View, CompileError> {
        let view = self.view(v)?;
        view.broadcast_to(shape).ok_or_else(|| {
            CompileError::node(
                node,
                format!("operand {:?} does not broadcast to {:?}", view.shape, shape),
            )
        })
    }

    fn set(&mut self, v: ValueId, view: View) {
        self.views.insert(v, view);
    }
}

pub(crate) fn emit_node(lw: &mut Lowerer, node: &CNode) -> Result<(), CompileError> {
    let g = &lw.m.graph;
    let name = node.name.as_str();
    let out_shape = |i: usize| g.ty(node.outputs[i]).shape.clone();
    match &node.op {
        Op::Ir(op) => match op {
            IrOp::Identity | IrOp::Dropout { .. } => {
                let v = lw.view(node.inputs[0])?;
                lw.set(node.outputs[0], v);
            }
            IrOp::Reshape => {
                let v = lw.view(node.inputs[0])?;
                let r = match v.reshape(&out_shape(0)) {
                    Some(r) => r,
                    None => {
                        // Not expressible over the input's strides: materialize once.
                        let dst = lw.alloc(node.outputs[0], None);
                        let as_input = dst
                            .reshape(&v.shape)
                            .expect("a dense view reshapes to any shape of the same size");
                        lw.push(Kernel::Copy, vec![v], vec![as_input], name);
                        dst
                    }
                };
                lw.set(node.outputs[0], r);
            }
            IrOp::Transpose { dim0, dim1 } => {
                let v = lw.view(node.inputs[0])?;
                let p = perm_of_transpose(*dim0, *dim1, v.shape.len())
                    .ok_or_else(|| CompileError::node(node, "transpose dim out of range"))?;
                lw.set(node.outputs[0], v.permute(&p));
            }
            IrOp::Permute { dims } => {
                let v = lw.view(node.inputs[0])?;
                let p: Option<Vec<usize>> =
                    dims.iter().map(|&d| norm_dim(d, v.shape.len())).collect();
                let p = p.ok_or_else(|| CompileError::node(node, "permute dim out of range"))?;
                lw.set(node.outputs[0], v.permute(&p));
            }
            IrOp::Slice {
                dim,
                start,
                end: _,
                step,
            } => {
                let v = lw.view(node.inputs[0])?;
                let d = norm_dim(*dim, v.shape.len())
                    .ok_or_else(|| CompileError::node(node, "slice dim out of range"))?;
                let n = v.shape[d] as i64;
                let s = if *start < 0 {
                    (*start + n).max(0)
                } else {
                    (*start).min(n)
                } as usize;
                let len = out_shape(0)[d];
                if s + (len.max(1) - 1) * (*step as usize) >= v.shape[d].max(1) && len > 0 {
                    return Err(CompileError::node(
                        node,
                        "slice reaches past the end of its input",
                    ));
                }
                lw.set(node.outputs[0], v.slice(d, s, len, *step as usize));
            }
            IrOp::Expand { .. } => {
                let v = lw.bcast(node, node.inputs[0], &out_shape(0))?;
                lw.set(node.outputs[0], v);
            }
            IrOp::Chunk { dim, .. } | IrOp::Split { dim, .. } => {
                let v = lw.view(node.inputs[0])?;
                let d = norm_dim(*dim, v.shape.len())
                    .ok_or_else(|| CompileError::node(node, "dim out of range"))?;
                let mut at = 0;
                for (i, &o) in node.outputs.iter().enumerate() {
                    let len = out_shape(i)[d];
                    lw.set(o, v.slice(d, at, len, 1));
                    at += len;
                }
            }
            IrOp::Cat { dim } => {
                let out = lw.out(node, 0);
                let d = norm_dim(*dim, out.shape.len())
                    .ok_or_else(|| CompileError::node(node, "cat dim out of range"))?;
                let mut at = 0;
                for &i in &node.inputs {
                    let src = lw.view(i)?;
                    let len = src.shape.get(d).copied().unwrap_or(0);
                    if src.shape.iter().product::<usize>() == 0 {
                        continue;
                    }
                    let dst = out.slice(d, at, len, 1);
                    lw.push(Kernel::Copy, vec![src], vec![dst], name);
                    at += len;
                }
            }
            IrOp::IndexCopy { dim } => emit_index_copy(lw, node, *dim)?,
            IrOp::Linear => emit_linear(lw, node, None)?,
            IrOp::Matmul => emit_matmul(lw, node)?,
            IrOp::Addmm { beta, alpha } => {
                let out = lw.out(node, 0);
                let a = lw.view(node.inputs[1])?;
                let b = lw.view(node.inputs[2])?;
                let bias = lw.bcast(node, node.inputs[0], &out.shape)?;
                lw.push(
                    Kernel::Gemm {
                        alpha: *alpha as f32,
                        beta: *beta as f32,
                        act: None,
                        residual: false,
                        norm: None,
                    },
                    vec![a, b, bias],
                    vec![out],
                    name,
                );
            }
            IrOp::Conv2d {
                stride,
                padding,
                dilation,
                groups,
            } => emit_conv(
                lw,
                node,
                Kernel::Conv2d {
                    stride: *stride,
                    padding: *padding,
                    dilation: *dilation,
                    groups: *groups,
                    act: None,
                    residual: false,
                },
            )?,
            IrOp::MaxPool2d(p) => {
                let x = lw.view(node.inputs[0])?;
                let out = lw.out(node, 0);
                let k = Kernel::Pool2d {
                    kind: PoolKind::Max,
                    kernel: p.kernel,
                    stride: p.stride,
                    padding: p.padding,
                    dilation: p.dilation,
                };
                lw.push(k, vec![x], vec![out], name);
            }
            IrOp::AvgPool2d {
                pool: p,
                count_include_pad,
                divisor_override,
            } => {
                let x = lw.view(node.inputs[0])?;
                let out = lw.out(node, 0);
                let kind = PoolKind::Avg {
                    count_include_pad: *count_include_pad,
                    divisor: divisor_override.map(|d| d.max(1) as u32),
                };
                lw.push(
                    Kernel::Pool2d {
                        kind,
                        kernel: p.kernel,
                        stride: p.stride,
                        padding: p.padding,
                        dilation: p.dilation,
                    },
                    vec![x],
                    vec![out],
                    name,
                );
            }
            IrOp::AdaptiveAvgPool2d { .. } => {
                let x = lw.view(node.inputs[0])?;
                let out = lw.out(node, 0);
                lw.push(Kernel::AdaptiveAvgPool2d, vec![x], vec![out], name);
            }
            IrOp::Softmax { dim, .. } => {
                let (x, out) = scalar_as_vector(node, lw.view(node.inputs[0])?, lw.out(node, 0))?;
                let rank = x.shape.len();
                let d = norm_dim(*dim, rank)
                    .ok_or_else(|| CompileError::node(node, "softmax dim out of range"))?;
                let mut p: Vec<usize> = (0..rank).filter(|&i| i != d).collect();
                p.push(d);
                lw.push(
                    Kernel::Softmax { scale: 1.0 },
                    vec![x.permute(&p)],
                    vec![out.permute(&p)],
                    name,
                );
            }
            IrOp::Mean { dims, .. } | IrOp::Sum { dims, .. } => {
                let op = if matches!(op, IrOp::Mean { .. }) {
                    ReduceOp::Mean
                } else {
                    ReduceOp::Sum
                };
                let (x, out) = scalar_as_vector(node, lw.view(node.inputs[0])?, lw.out(node, 0))?;
                let rank = x.shape.len();
                let mut red: Vec<usize> = if dims.is_empty() {
                    (0..rank).collect()
                } else {
                    dims.iter()
                        .map(|&d| norm_dim(d, rank))
                        .collect::<Option<_>>()
                        .ok_or_else(|| CompileError::node(node, "reduce dim out of range"))?
                };
                red.sort();
                red.dedup();
                let kept: Vec<usize> = (0..rank).filter(|i| !red.contains(i)).collect();
                let mut p = kept.clone();
                p.extend(&red);
                let kept_shape: Vec<usize> = kept.iter().map(|&i| x.shape[i]).collect();
                let out_v = out
                    .reshape(&kept_shape)
                    .ok_or_else(|| CompileError::node(node, "reduction output layout"))?;
                lw.push(
                    Kernel::Reduce {
                        op,
                        reduced: red.len(),
                    },
                    vec![x.permute(&p)],
                    vec![out_v],
                    name,
                );
            }
            IrOp::LayerNorm { eps, .. } => {
                let x = lw.view(node.inputs[0])?;
                let out = lw.out(node, 0);
                let mut ins = vec![x];
                for &w in &node.inputs[1..] {
                    ins.push(lw.view(w)?);
                }
                let k = Kernel::LayerNorm {
                    eps: *eps as f32,
                    has_weight: node.inputs.len() > 1,
                    has_bias: node.inputs.len() > 2,
                };
                lw.push(k, ins, vec![out], name);
            }
            IrOp::Embedding => {
                let table = lw.view(node.inputs[0])?;
                let ids = lw.view(node.inputs[1])?;
                if ids.dtype.is_float() {
                    return Err(CompileError::node(
                        node,
                        "embedding indices must be integers",
                    ));
                }
                let out = lw.out(node, 0);
                lw.push(Kernel::Embedding, vec![table, ids], vec![out], name);
            }
            IrOp::Full { value } => {
                let out = lw.out(node, 0);
                lw.push(Kernel::Fill { value: *value }, vec![], vec![out], name);
            }
            IrOp::Sdpa { .. } => {
                return Err(CompileError::node(
                    node,
                    "scaled_dot_product_attention with these shapes is not supported",
                ))
            }
            other => {
                return Err(CompileError::node(
                    node,
                    format!("no lowering for {}", other.name()),
                ))
            }
        },
        Op::Fused(f) => match f {
            FusedOp::Elementwise(expr) => {
                let out = lw.out(node, 0);
                let mut ins = Vec::with_capacity(node.inputs.len());
                for &v in &node.inputs {
                    ins.push(lw.bcast(node, v, &out.shape)?);
                }
                let code = expr
                    .code
                    .iter()
                    .map(|i| match i {
                        Instr::Cast(dt) => Instr::Cast(lw.storage(*dt)),
                        other => other.clone(),
                    })
                    .collect();
                lw.push(
                    Kernel::Elementwise {
                        expr: Expr { code },
                    },
                    ins,
                    vec![out],
                    name,
                );
            }
            FusedOp::Conv2d {
                stride,
                padding,
                dilation,
                groups,
                act,
                residual,
            } => emit_conv(
                lw,
                node,
                Kernel::Conv2d {
                    stride: *stride,
                    padding: *padding,
                    dilation: *dilation,
                    groups: *groups,
                    act: *act,
                    residual: *residual,
                },
            )?,
            FusedOp::Linear { act } => emit_linear(lw, node, Some(*act))?,
            FusedOp::LinearAdd => emit_linear_add(lw, node)?,
            FusedOp::NormLinear { eps, act } => {
                emit_gemm_of_linear(lw, node, *act, false, Some(*eps as f32))?
            }
            FusedOp::RmsNorm { eps } => {
                let x = lw.view(node.inputs[0])?;
                let w = lw.view(node.inputs[1])?;
                let out = lw.out(node, 0);
                lw.push(
                    Kernel::RmsNorm { eps: *eps as f32 },
                    vec![x, w],
                    vec![out],
                    name,
                );
            }
            FusedOp::MaskedSoftmax { scale } => {
                let x = lw.view(node.inputs[0])?;
                let mask = lw.bcast(node, node.inputs[1], &x.shape)?;
                let out = lw.out(node, 0);
                lw.push(
                    Kernel::Softmax {
                        scale: *scale as f32,
                    },
                    vec![x, mask],
                    vec![out],
                    name,
                );
            }
            FusedOp::Rope => {
                let x = lw.view(node.inputs[0])?;
                let cos = lw.bcast(node, node.inputs[1], &x.shape)?;
                let sin = lw.bcast(node, node.inputs[2], &x.shape)?;
                let out = lw.out(node, 0);
                lw.push(Kernel::Rope, vec![x, cos, sin], vec![out], name);
            }
            FusedOp::Attention { scale, causal } => {
                let q = lw.view(node.inputs[0])?;
                let k = lw.view(node.inputs[1])?;
                let v = lw.view(node.inputs[2])?;
                let scores = [q.shape[0], q.shape[1], q.shape[2], k.shape[2]];
                let mut ins = vec![q, k, v];
                if let Some(&m) = node.inputs.get(3) {
                    ins.push(lw.bcast(node, m, &scores)?);
                }
                let out = lw.out(node, 0);
                lw.push(
                    Kernel::Attention {
                        scale: *scale as f32,
                        causal: *causal,
                    },
                    ins,
                    vec![out],
                    name,
                );
            }
        },
    }
    Ok(())
}

fn emit_conv(lw: &mut Lowerer, node: &CNode, kernel: Kernel) -> Result<(), CompileError> {
    let x = lw.view(node.inputs[0])?;
    if x.shape.len() != 4 {
        return Err(CompileError::node(
            node,
            format!("conv2d input must be 4-D, got {:?}", x.shape),
        ));
    }
    let mut ins = vec![x];
    for &w in &node.inputs[1..] {
        ins.push(lw.view(w)?);
    }
    let out = lw.out(node, 0);
    lw.push(kernel, ins, vec![out], &node.name);
    Ok(())
}

/// `r + x @ w^T` with the residual `r` (the output's shape) as the GEMM's bias.
fn emit_linear_add(lw: &mut Lowerer, node: &CNode) -> Result<(), CompileError> {
    emit_gemm_of_linear(lw, node, None, true, None)
}

fn emit_linear(
    lw: &mut Lowerer,
    node: &CNode,
    act: Option<npu_ir::UnaryOp>,
) -> Result<(), CompileError> {
    emit_gemm_of_linear(lw, node, act, false, None)
}

/// A linear's GEMM: x [.., K] viewed as [M, K], the weight [N, K] as its transpose, input 2
/// a bias broadcast to [M, N] or (`residual`) a tensor of the output's shape; with `norm`,
/// x is RMS-normalized first and the node's last input is the norm weight.
fn emit_gemm_of_linear(
    lw: &mut Lowerer,
    node: &CNode,
    act: Option<npu_ir::UnaryOp>,
    residual: bool,
    norm: Option<f32>,
) -> Result<(), CompileError> {
    let n_in = node.inputs.len() - usize::from(norm.is_some());
    let x = lw.view(node.inputs[0])?;
    let w = lw.view(node.inputs[1])?;
    let (Some(&k), &[n, wk]) = (x.shape.last(), &w.shape[..]) else {
        return Err(CompileError::node(
            node,
            "linear needs x [.., K] and weight [N, K]",
        ));
    };
    if k != wk {
        return Err(CompileError::node(
            node,
            format!("linear: x has K={k}, weight has K={wk}"),
        ));
    }
    let m: usize = x.shape[..x.shape.len() - 1].iter().product();
    let a = lw.reshaped(x, &[m, k], &node.name);
    let b = w.permute(&[1, 0]);
    let out = lw.out_dense(node, 0);
    let out2 = lw.reshaped(out.clone(), &[m, n], &node.name);
    if out2.base != out.base {
        return Err(CompileError::node(
            node,
            "linear output must be addressable as [M, N]",
        ));
    }
    let mut ins = vec![a, b];
    if let Some(&bias) = node.inputs[..n_in].get(2) {
        ins.push(if residual {
            let r = lw.view(bias)?;
            lw.reshaped(r, &[m, n], &node.name)
        } else {
            lw.bcast(node, bias, &[m, n])?
        });
    }
    if norm.is_some() {
        let nw = node.inputs[n_in];
        ins.push(lw.view(nw)?);
    }
    lw.push(
        Kernel::Gemm {
            alpha: 1.0,
            beta: 1.0,
            act,
            residual,
            norm,
        },
        ins,
        vec![out2],
        &node.name,
    );
    Ok(())
}

fn emit_matmul(lw: &mut Lowerer, node: &CNode) -> Result<(), CompileError> {
    let mut a = lw.view(node.inputs[0])?;
    let mut b = lw.view(node.inputs[1])?;
    let (ra, rb) = (a.shape.len(), b.shape.len());
    if ra == 0 || rb == 0 {
        return Err(CompileError::node(node, "matmul of a scalar"));
    }
    if ra == 1 {
        a = a.reshape(&[1, a.shape[0]]).expect("1-D to row");
    }
    if rb == 1 {
        b = b.reshape(&[b.shape[0], 1]).expect("1-D to column");
    }
    let (m, k) = (a.shape[a.shape.len() - 2], a.shape[a.shape.len() - 1]);
    let (kb, n) = (b.shape[b.shape.len() - 2], b.shape[b.shape.len() - 1]);
    if k != kb {
        return Err(CompileError::node(
            node,
            format!("matmul inner dims differ: {k} vs {kb}"),
        ));
    }
    let ba = &a.shape[..a.shape.len() - 2];
    let bb = &b.shape[..b.shape.len() - 2];
    let rank = ba.len().max(bb.len());
    let mut batch = vec![1; rank];
    for i in 0..rank {
        let da = if i + ba.len() >= rank {
            ba[i + ba.len() - rank]
        } else {
            1
        };
        let db = if i + bb.len() >= rank {
            bb[i + bb.len() - rank]
        } else {
            1
        };
        batch[i] = if da == 1 {
            db
        } else if db == 1 || db == da {
            da
        } else {
            return Err(CompileError::node(
                node,
                format!("matmul batch dims {ba:?} and {bb:?} do not broadcast"),
            ));
        };
    }
    let full = |mut s: Vec<usize>, x: usize, y: usize| {
        s.extend([x, y]);
        s
    };
    let a = a
        .broadcast_to(&full(batch.clone(), m, k))
        .ok_or_else(|| CompileError::node(node, "matmul lhs broadcast"))?;
    let b = b
        .broadcast_to(&full(batch.clone(), k, n))
        .ok_or_else(|| CompileError::node(node, "matmul rhs broadcast"))?;
    let out = lw.out(node, 0);
    let out_full = out
        .reshape(&full(batch, m, n))
        .ok_or_else(|| CompileError::node(node, "matmul output layout"))?;
    lw.push(
        Kernel::Gemm {
            alpha: 1.0,
            beta: 0.0,
            act: None,
            residual: false,
            norm: None,
        },
        vec![a, b],
        vec![out_full],
        &node.name,
    );
    Ok(())
}

fn emit_index_copy(lw: &mut Lowerer, node: &CNode, dim: i64) -> Result<(), CompileError> {
    let g = &lw.m.graph;
    let [target, index, source] = node.inputs[..] else {
        return Err(CompileError::node(
            node,
            "index_copy takes self, index and source",
        ));
    };
    let tv = lw.view(target)?;
    let axis = norm_dim(dim, tv.shape.len())
        .ok_or_else(|| CompileError::node(node, "index_copy dim out of range"))?;
    let out_v = node.outputs[0];
    let only_reader = lw.users[target.idx()].len() == 1 && !g.outputs.contains(&target);
    let returned = g.outputs.iter().position(|&o| o == out_v);
    let donate = match (tv.base, returned) {
        (Base::Slot(Slot::Input(k)), Some(j)) if only_reader && tv.is_dense() && tv.offset == 0 => {
            Some((j as u32, k))
        }
        _ => None,
    };
    let dest = match donate {
        Some((j, k)) => {
            lw.donated.insert(j, k);
            tv
        }
        None => {
            let dest = lw.alloc(out_v, None);
            lw.push(Kernel::Copy, vec![tv], vec![dest.clone()], &node.name);
            dest
        }
    };
    lw.set(out_v, dest.clone());
    let idx = lw.view(index)?;
    let src = lw.view(source)?;
    if idx.dtype.is_float() {
        return Err(CompileError::node(node, "index_copy index must be integer"));
    }
    lw.push(
        Kernel::IndexCopy { axis },
        vec![idx, src],
        vec![dest],
        &node.name,
    );
    Ok(())
}
