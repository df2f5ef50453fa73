//! Batch-norm folding over the data flow: an eval-mode BN whose input is a conv used only by
//! it is folded into the conv's weight and bias (a bias is created when the conv had none, so
//! the BN shift is never lost). Any other BN becomes a per-channel scale-and-shift.

use crate::error::CompileError;
use crate::expr::{Expr, Instr};
use crate::graph::{remove_nodes, replace_uses, FusedOp, Module, Op, Uses};
use crate::program::Recipe;
use npu_ir::{BinaryOp, Op as IrOp, TensorType, ValueId, ValueKind};

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct BnStats {
    pub folded: usize,
    pub standalone: usize,
}

struct BnParams {
    x: ValueId,
    gamma: Option<ValueId>,
    beta: Option<ValueId>,
    mean: ValueId,
    var: ValueId,
}

pub fn fold_batch_norms(m: &mut Module) -> Result<BnStats, CompileError> {
    let mut stats = BnStats::default();
    let mut dead = Vec::new();
    let mut n = 0;
    while n < m.graph.nodes.len() {
        let node = &m.graph.nodes[n];
        let Op::Ir(IrOp::BatchNorm {
            eps,
            training: false,
        }) = node.op
        else {
            n += 1;
            continue;
        };
        let p = match node.inputs[..] {
            [x, gamma, beta, mean, var] => BnParams {
                x,
                gamma: Some(gamma),
                beta: Some(beta),
                mean,
                var,
            },
            [x, mean, var] => BnParams {
                x,
                gamma: None,
                beta: None,
                mean,
                var,
            },
            _ => {
                return Err(CompileError::node(
                    node,
                    format!("batch_norm with {} inputs is ambiguous", node.inputs.len()),
                ))
            }
        };
        for v in [Some(p.mean), Some(p.var), p.gamma, p.beta]
            .into_iter()
            .flatten()
        {
            if !matches!(m.graph.value(v).kind, ValueKind::Weight { .. }) {
                return Err(CompileError::node(
                    node,
                    format!(
                        "batch_norm parameter '{}' is not a weight",
                        m.graph.value(v).name
                    ),
                ));
            }
        }
        let bn_out = node.outputs[0];
        let uses = Uses::of(&m.graph);
        let conv = uses.producer(&m.graph, p.x).filter(|(_, c)| {
            let is_conv = matches!(
                c.op,
                Op::Ir(IrOp::Conv2d { .. })
                    | Op::Fused(FusedOp::Conv2d {
                        act: None,
                        residual: false,
                        ..
                    })
            );
            is_conv
                && uses.single_use(p.x)
                && c.inputs[1..]
                    .iter()
                    .all(|w| matches!(m.graph.value(*w).kind, ValueKind::Weight { .. }))
        });
        if let Some((ci, conv)) = conv {
            let (w, b) = (conv.inputs[1], conv.inputs.get(2).copied());
            let w_ty = m.graph.ty(w).clone();
            let cout = w_ty.shape[0];
            let base = m.graph.value(w).name.clone();
            let new_w = m.add_derived_weight(
                format!("{base}#bn_folded"),
                w_ty.clone(),
                Recipe::BnFoldWeight {
                    weight: w,
                    gamma: p.gamma,
                    var: p.var,
                    eps,
                },
            );
            let new_b = m.add_derived_weight(
                format!("{base}#bn_folded_bias"),
                TensorType {
                    shape: vec![cout],
                    dtype: w_ty.dtype,
                },
                Recipe::BnFoldBias {
                    bias: b,
                    gamma: p.gamma,
                    beta: p.beta,
                    mean: p.mean,
                    var: p.var,
                    eps,
                },
            );
            let conv = &mut m.graph.nodes[ci];
            conv.inputs.truncate(1);
            conv.inputs.extend([new_w, new_b]);
            replace_uses(&mut m.graph, bn_out, p.x);
            dead.push(n);
            stats.folded += 1;
        } else {
            let x_ty = m.graph.ty(p.x).clone();
            let mut shape = vec![1; x_ty.rank()];
            if x_ty.rank() < 2 {
                return Err(CompileError::node(
                    &m.graph.nodes[n],
                    "batch_norm input needs a channel dim",
                ));
            }
            shape[1] = x_ty.shape[1];
            let ty = TensorType {
                shape,
                dtype: m.graph.ty(p.var).dtype,
            };
            let name = m.graph.nodes[n].name.clone();
            let scale = m.add_derived_weight(
                format!("{name}#scale"),
                ty.clone(),
                Recipe::BnScale {
                    gamma: p.gamma,
                    var: p.var,
                    eps,
                },
            );
            let shift = m.add_derived_weight(
                format!("{name}#shift"),
                ty,
                Recipe::BnShift {
                    gamma: p.gamma,
                    beta: p.beta,
                    mean: p.mean,
                    var: p.var,
                    eps,
                },
            );
            let node = &mut m.graph.nodes[n];
            node.op = Op::Fused(FusedOp::Elementwise(Expr {
                code: vec![
                    Instr::Load(0),
                    Instr::Load(1),
                    Instr::Binary(BinaryOp::Mul),
                    Instr::Load(2),
                    Instr::Binary(BinaryOp::Add),
                ],
            }));
            node.inputs = vec![p.x, scale, shift];
            stats.standalone += 1;
        }
        n += 1;
    }
    remove_nodes(&mut m.graph, &dead);
    Ok(stats)
}
