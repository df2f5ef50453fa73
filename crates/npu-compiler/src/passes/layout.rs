//! NPU channel padding: 4-D activations produced by conv/pool (and elementwise ops over
//! them) are stored with the channel dim rounded up to the target's tile. Kernels address
//! them through strides, so padding is a storage decision only; graph inputs and outputs
//! stay dense (padding is invisible to the user).

use crate::graph::{CGraph, FusedOp, Op};
use crate::target::Target;
use npu_ir::{Op as IrOp, ValueId};
use std::collections::HashMap;

/// Value -> padded channel count, for every value stored padded.
pub fn pad_channels(g: &CGraph, target: &Target) -> HashMap<ValueId, usize> {
    let mut padded = HashMap::new();
    let tile = target.channel_tile;
    if tile <= 1 {
        return padded;
    }
    for node in &g.nodes {
        let [out] = node.outputs[..] else { continue };
        let ty = g.ty(out);
        if ty.rank() != 4
            || ty.shape[1].is_multiple_of(tile)
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
                .any(|v| padded.contains_key(v) && g.ty(*v).shape == ty.shape),
            _ => false,
        };
        if spatial {
            padded.insert(out, ty.shape[1].div_ceil(tile) * tile);
        }
    }
    padded
}
