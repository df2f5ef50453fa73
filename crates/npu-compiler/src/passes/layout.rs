//! The storage layout of 4-D activations produced by conv/pool (and elementwise ops over
//! them): channels rounded up to the target's tile, and channels-last where the target
//! asks for it. Kernels address them through strides, so this is a storage decision only;
//! graph inputs and outputs stay dense (the layout is invisible to the user).

use crate::graph::{CGraph, FusedOp, Op};
use crate::target::Target;
use npu_ir::{Op as IrOp, ValueId};
use std::collections::HashMap;

/// Value -> stored channel count (>= its channels), for every value stored in the target's
/// activation layout; values not listed are dense NCHW.
pub fn activation_layout(g: &CGraph, target: &Target) -> HashMap<ValueId, usize> {
    let mut laid = HashMap::new();
    let tile = target.channel_tile.max(1);
    if tile == 1 && !target.channels_last {
        return laid;
    }
    for node in &g.nodes {
        let [out] = node.outputs[..] else { continue };
        let ty = g.ty(out);
        if ty.rank() != 4
            || (!target.channels_last && ty.shape[1].is_multiple_of(tile))
            || g.outputs.contains(&out)
            || !ty.dtype.is_float()
        {
            continue;
        }
        let spatial = match &node.op {
            Op::Ir(
                IrOp::Conv2d { .. }
                | IrOp::MaxPool2d(_)
                | IrOp::AvgPool2d { .. }
                | IrOp::AdaptiveAvgPool2d { .. },
            ) => true,
            Op::Fused(FusedOp::Conv2d { .. }) => true,
            Op::Fused(FusedOp::Elementwise(_)) => node
                .inputs
                .iter()
                .any(|v| laid.contains_key(v) && g.ty(*v).shape == ty.shape),
            _ => false,
        };
        if spatial {
            laid.insert(out, ty.shape[1].div_ceil(tile) * tile);
        }
    }
    laid
}
