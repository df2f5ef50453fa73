//! Targets: what an NPU supports. One source of truth, queried per node.

use crate::graph::{CNode, FusedOp, Op};
use npu_ir::{DType, Op as IrOp};

/// A compilation target.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    pub name: &'static str,
    /// Channel padding of 4-D activations, in elements (1 = none).
    pub channel_tile: usize,
    /// Storage dtypes the target computes in.
    pub compute_dtypes: &'static [DType],
    /// Whether convolutions may be dilated.
    pub conv_dilation: bool,
}

/// The default NPU: 32-element channel tiles (64 bytes of f16/bf16).
pub const NPU: Target = Target {
    name: "npu",
    channel_tile: 32,
    compute_dtypes: &[DType::F16, DType::BF16, DType::F32],
    conv_dilation: true,
};

/// The host CPU as a target: no channel padding.
pub const CPU: Target = Target {
    name: "cpu",
    channel_tile: 1,
    compute_dtypes: &[DType::F16, DType::BF16, DType::F32],
    conv_dilation: true,
};

pub const TARGETS: [&Target; 2] = [&NPU, &CPU];

impl Target {
    pub fn by_name(name: &str) -> Option<&'static Target> {
        TARGETS.into_iter().find(|t| t.name == name)
    }

    /// Why this target cannot run `node`, or `None` when it can.
    pub fn unsupported_reason(&self, node: &CNode) -> Option<String> {
        match &node.op {
            Op::Fused(FusedOp::Conv2d { dilation, .. })
                if !self.conv_dilation && *dilation != [1, 1] =>
            {
                Some(format!("conv2d with dilation {dilation:?}"))
            }
            Op::Fused(_) => None,
            Op::Ir(op) => match op {
                IrOp::Unknown { op_type, .. } => {
                    Some(format!("op '{op_type}' has no NPU lowering"))
                }
                IrOp::Conv2d { dilation, .. } if !self.conv_dilation && *dilation != [1, 1] => {
                    Some(format!("conv2d with dilation {dilation:?}"))
                }
                IrOp::BatchNorm { training: true, .. } => {
                    Some("batch_norm in training mode".into())
                }
                IrOp::Dropout { train: true, p } if *p > 0.0 => {
                    Some(format!("dropout in training mode (p={p})"))
                }
                IrOp::LayerNorm {
                    normalized_shape, ..
                } if normalized_shape.len() != 1 => {
                    Some("layer_norm over more than one dim".into())
                }
                _ => None,
            },
        }
    }
}
