//! Canonicalization: drop no-ops, resolve `getitem`, skip empty `cat` operands, and turn
//! in-place ops into functional ones where that is sound.

use crate::error::CompileError;
use crate::graph::{is_view_op, norm_dim, remove_nodes, replace_uses_many, Module, Op, Uses};
use crate::passes::dce::eliminate_dead_code;
use npu_ir::{Op as IrOp, ValueKind};
use std::collections::HashMap;

/// Counts of what canonicalization did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CanonStats {
    pub removed_noops: usize,
    pub resolved_getitems: usize,
    pub functionalized: usize,
    pub dead: usize,
}

pub fn canonicalize(m: &mut Module) -> Result<CanonStats, CompileError> {
    let mut stats = CanonStats::default();
    functionalize(m, &mut stats)?;
    let g = &mut m.graph;
    let mut subst = HashMap::new();
    let mut dead = Vec::new();
    for (n, node) in g.nodes.iter_mut().enumerate() {
        let Op::Ir(op) = &node.op else { continue };
        let in_ty = node.inputs.first().map(|v| g.values[v.idx()].ty.clone());
        let out_ty = node.outputs.first().map(|v| g.values[v.idx()].ty.clone());
        let same = in_ty.is_some() && in_ty == out_ty;
        let passthrough = match op {
            IrOp::AssertMetadata => {
                dead.push(n);
                stats.removed_noops += 1;
                continue;
            }
            IrOp::Identity => true,
            IrOp::Dropout { p, train } => !*train || *p == 0.0,
            IrOp::Cast | IrOp::Reshape | IrOp::Expand { .. } | IrOp::Slice { .. } => same,
            // A square transpose keeps the type: only a permutation that keeps the order of
            // the dims larger than 1 is the identity.
            IrOp::Permute { dims } => same && keeps_order(dims, in_ty.as_ref()),
            IrOp::Transpose { dim0, dim1 } => {
                let rank = in_ty.as_ref().map_or(0, |t| t.rank());
                same && norm_dim(*dim0, rank) == norm_dim(*dim1, rank)
            }
            IrOp::GetItem { index } => {
                let src = *node.inputs.get(*index).ok_or_else(|| {
                    CompileError::node(
                        node,
                        format!(
                            "getitem index {index} but the producer has {} outputs",
                            node.inputs.len()
                        ),
                    )
                })?;
                subst.insert(node.outputs[0], src);
                dead.push(n);
                stats.resolved_getitems += 1;
                continue;
            }
            IrOp::Cat { dim } => {
                // A DynamicCache starts from a 0-element tensor: `cat([empty, new])`.
                let rank = out_ty.as_ref().map_or(0, |t| t.rank());
                let d = norm_dim(*dim, rank).unwrap_or(0);
                node.inputs.retain(|v| {
                    let t = &g.values[v.idx()].ty;
                    !(t.numel() == 0 && (t.rank() == 1 || t.shape.get(d) == Some(&0)))
                });
                node.inputs.len() == 1
                    && g.values[node.inputs[0].idx()].ty.shape
                        == out_ty.as_ref().map(|t| t.shape.clone()).unwrap_or_default()
            }
            _ => false,
        };
        if passthrough && node.outputs.len() == 1 && !node.inputs.is_empty() {
            subst.insert(node.outputs[0], node.inputs[0]);
            dead.push(n);
            stats.removed_noops += 1;
        }
    }
    replace_uses_many(g, &subst);
    remove_nodes(g, &dead);
    stats.dead = eliminate_dead_code(g);
    Ok(stats)
}

/// In the IR an in-place node already has its own output value and later readers use it, so
/// dropping the in-place flag is exact, except when the mutated tensor is a view of a tensor
/// that others still read, or persistent state that the graph never returns.
fn functionalize(m: &mut Module, stats: &mut CanonStats) -> Result<(), CompileError> {
    let uses = Uses::of(&m.graph);
    let g = &m.graph;
    let mut flip = Vec::new();
    for (n, node) in g.nodes.iter().enumerate() {
        if !node.inplace {
            continue;
        }
        if matches!(node.op, Op::Ir(IrOp::Identity)) {
            flip.push(n);
            continue;
        }
        let Some(&target) = node.inputs.first() else {
            continue;
        };
        if let ValueKind::Weight { key } = &g.value(target).kind {
            return Err(CompileError::node(
                node,
                format!(
                    "updates weight/buffer '{key}' in place, and the graph does not return the new state; export the state \
                     (e.g. a KV cache) as a graph input that the graph returns updated"
                ),
            ));
        }
        if let Some((_, p)) = uses.producer(g, target) {
            if is_view_op(&p.op) {
                let base = p.inputs[0];
                if uses.users[base.idx()].len() > 1 || uses.is_output[base.idx()] {
                    return Err(CompileError::node(
                        node,
                        format!(
                            "mutates '{}', a view of '{}' that other nodes also read; mutation through views is not supported",
                            g.value(target).name,
                            g.value(base).name
                        ),
                    ));
                }
            }
        }
        flip.push(n);
    }
    for n in flip {
        m.graph.nodes[n].inplace = false;
        stats.functionalized += 1;
    }
    Ok(())
}

/// Whether permuting by `dims` leaves the elements in place: the dims of size > 1 stay in
/// their order (size-1 dims may move anywhere).
fn keeps_order(dims: &[i64], ty: Option<&npu_ir::TensorType>) -> bool {
    let Some(ty) = ty else { return false };
    let rank = ty.rank();
    let mut last = None;
    for &d in dims {
        let Some(d) = norm_dim(d, rank) else {
            return false;
        };
        if ty.shape.get(d).copied().unwrap_or(0) == 1 {
            continue;
        }
        if last.is_some_and(|l| d < l) {
            return false;
        }
        last = Some(d);
    }
    true
}
