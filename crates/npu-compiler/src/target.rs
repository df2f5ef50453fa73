//! Targets: what an NPU supports. One source of truth, queried per node.

use crate::graph::{CNode, FusedOp, Op};
use npu_ir::{DType, Graph, Node, Op as IrOp, ValueKind};

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
    /// 4-D activations stored channels-last (NHWC: the channel stride is 1), the layout
    /// tensor-core convolutions read as plain GEMM operands; else channels-first (NCHW).
    pub channels_last: bool,
}

/// The default NPU: 32-element channel tiles (64 bytes of f16/bf16).
pub const NPU: Target = Target {
    name: "npu",
    channel_tile: 32,
    compute_dtypes: &[DType::F16, DType::BF16, DType::F32],
    conv_dilation: true,
    channels_last: false,
};

/// The host CPU as a target: no channel padding.
pub const CPU: Target = Target {
    name: "cpu",
    channel_tile: 1,
    compute_dtypes: &[DType::F16, DType::BF16, DType::F32],
    conv_dilation: true,
    channels_last: false,
};

/// A tensor-core GPU as a target: activations channels-last with channels padded to 8 (16
/// bytes of f16/bf16, the alignment tensor-core GEMM operands want), so a 1x1 convolution
/// is a GEMM over the activation as it lies and im2col copies whole channel runs.
pub const GPU: Target = Target {
    name: "gpu",
    channel_tile: 8,
    compute_dtypes: &[DType::F16, DType::BF16, DType::F32],
    conv_dilation: true,
    channels_last: true,
};

pub const TARGETS: [&Target; 3] = [&NPU, &CPU, &GPU];

impl Target {
    pub fn by_name(name: &str) -> Option<&'static Target> {
        TARGETS.into_iter().find(|t| t.name == name)
    }

    /// The known targets' names, comma-separated (for messages).
    pub fn names() -> String {
        TARGETS.map(|t| t.name).join(", ")
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
            Op::Ir(op) => self.ir_op_unsupported(op),
        }
    }

    /// The op-level decision: why this target cannot run `op` whatever its operands, or
    /// `None`. Exhaustive over [`IrOp`], so every new op needs a decision here.
    pub fn ir_op_unsupported(&self, op: &IrOp) -> Option<String> {
        match op {
            IrOp::Unknown { op_type, .. } => Some(self.no_lowering(&format!("op '{op_type}'"))),
            // only seen when a caller skipped `passes::decompose`
            IrOp::Composite(c) => Some(format!(
                "composite op {} was not decomposed (passes::decompose runs before placement)",
                c.name()
            )),
            IrOp::Conv2d { dilation, .. } if !self.conv_dilation && *dilation != [1, 1] => {
                Some(format!("conv2d with dilation {dilation:?}"))
            }
            IrOp::BatchNorm { training: true, .. } => Some("batch_norm in training mode".into()),
            IrOp::Dropout { train: true, p } if *p > 0.0 => {
                Some(format!("dropout in training mode (p={p})"))
            }
            IrOp::LayerNorm {
                normalized_shape, ..
            } if normalized_shape.len() != 1 => Some("layer_norm over more than one dim".into()),
            // lowered by the compiler (elementwise fusion, kernels, views)
            IrOp::Unary(_)
            | IrOp::Binary { .. }
            | IrOp::BinaryScalar { .. }
            | IrOp::Clamp { .. }
            | IrOp::Ternary { .. }
            | IrOp::MaskedFill { .. }
            | IrOp::Conv2d { .. }
            | IrOp::BatchNorm { .. }
            | IrOp::LayerNorm { .. }
            | IrOp::MaxPool2d(_)
            | IrOp::AvgPool2d { .. }
            | IrOp::AdaptiveAvgPool2d { .. }
            | IrOp::Linear
            | IrOp::Matmul
            | IrOp::Addmm { .. }
            | IrOp::Embedding
            | IrOp::Softmax { .. }
            | IrOp::Mean { .. }
            | IrOp::Sum { .. }
            | IrOp::Reshape
            | IrOp::Transpose { .. }
            | IrOp::Permute { .. }
            | IrOp::Expand { .. }
            | IrOp::Slice { .. }
            | IrOp::Cat { .. }
            | IrOp::Chunk { .. }
            | IrOp::Split { .. }
            | IrOp::IndexCopy { .. }
            | IrOp::Cast
            | IrOp::Identity
            | IrOp::Dropout { .. }
            | IrOp::GetItem { .. }
            | IrOp::AssertMetadata
            | IrOp::Full { .. }
            | IrOp::Sdpa { .. } => None,
            // typed for the CPU fallback interpreter; the compiler has no lowering for them
            IrOp::BitwiseNot
            | IrOp::Bitwise { .. }
            | IrOp::ReduceMinMax { .. }
            | IrOp::MinMaxDim { .. }
            | IrOp::ArgMinMax { .. }
            | IrOp::Baddbmm { .. }
            | IrOp::Stack { .. }
            | IrOp::Gather { .. }
            | IrOp::IndexSelect { .. }
            | IrOp::Cumsum { .. }
            | IrOp::Arange { .. }
            | IrOp::FullLike { .. }
            | IrOp::GroupNorm { .. }
            | IrOp::LogSoftmax { .. }
            | IrOp::UpsampleNearest2d { .. }
            | IrOp::Index { .. }
            | IrOp::Ext(_) => Some(self.no_lowering(&op.name())),
        }
    }

    /// "`what` has no NPU lowering", worded for this target (the CPU target compiles too,
    /// so its messages do not speak of an NPU).
    fn no_lowering(&self, what: &str) -> String {
        if self.name == NPU.name {
            format!("{what} has no NPU lowering")
        } else {
            format!("{what} has no compiled lowering for target '{}'", self.name)
        }
    }

    /// Why this target cannot run the IR node `node` of `graph` (before compilation), or
    /// `None`: the op-level decision plus what lowering rejects for these operands (SDPA
    /// shapes and boolean masks, non-4-D conv/pool inputs, 1-D-or-less linear weights,
    /// float indices, zero-element results).
    pub fn ir_node_unsupported(&self, node: &Node, graph: &Graph) -> Option<String> {
        if let Some(r) = self.ir_op_unsupported(&node.op) {
            return Some(r);
        }
        operand_reason(&node.op, node, graph)
    }
}

/// What the NPU cannot do with these operands of an otherwise supported op (see
/// [`Target::ir_node_unsupported`]). Generic over the graph's op type so the compiler's
/// constraint check asks the same question after canonicalization.
pub fn operand_reason<O>(op: &IrOp, node: &Node<O>, graph: &Graph<O>) -> Option<String> {
    let out_dtypes = node.outputs.iter().map(|v| graph.ty(*v).dtype);
    if let Some(r) = integer_arithmetic(op, out_dtypes) {
        return Some(r);
    }
    let in_dtypes = node.inputs.iter().map(|v| graph.ty(*v).dtype);
    if let Some(r) = integer_operands(op, in_dtypes) {
        return Some(r);
    }
    let ty = |i: usize| node.inputs.get(i).map(|v| graph.ty(*v));
    let shape = |i: usize| ty(i).map_or(&[][..], |t| t.shape.as_slice());
    for v in &node.outputs {
        let t = graph.ty(*v);
        if t.numel() == 0 {
            return Some(format!(
                "output '{}' has zero elements {:?}",
                graph.value(*v).name,
                t.shape
            ));
        }
    }
    match op {
        // The NPU kernel divides by a positive count; PyTorch allows any non-zero divisor.
        IrOp::AvgPool2d {
            divisor_override: Some(d),
            ..
        } if *d <= 0 => Some(format!("avg_pool2d with divisor_override {d}")),
        IrOp::Sdpa { .. } => {
            let (q, k, v) = (shape(0), shape(1), shape(2));
            if q.len() != 4 || k.len() != 4 || v.len() != 4 {
                return Some(format!(
                    "scaled_dot_product_attention needs 4-D q/k/v, got {q:?} {k:?} {v:?}"
                ));
            }
            if q[0] != k[0] || k != v || k[1] == 0 || q[1] % k[1] != 0 || q[3] != k[3] {
                return Some(format!(
                    "scaled_dot_product_attention with q {q:?}, k {k:?}, v {v:?}"
                ));
            }
            if let Some(m) = ty(3) {
                if !m.dtype.is_float() {
                    return Some(format!(
                        "scaled_dot_product_attention with a {} mask",
                        m.dtype
                    ));
                }
                let scores = [q[0], q[1], q[2], k[2]];
                let ok = m.shape.len() <= 4
                    && m.shape
                        .iter()
                        .rev()
                        .zip(scores.iter().rev())
                        .all(|(a, b)| a == b || *a == 1);
                if !ok {
                    return Some(format!(
                        "scaled_dot_product_attention mask {:?} does not broadcast to {scores:?}",
                        m.shape
                    ));
                }
            }
            None
        }
        IrOp::Conv2d { .. }
        | IrOp::MaxPool2d(_)
        | IrOp::AvgPool2d { .. }
        | IrOp::AdaptiveAvgPool2d { .. }
            if shape(0).len() != 4 =>
        {
            Some(format!(
                "{} of a {:?} input (needs NCHW)",
                op.name(),
                shape(0)
            ))
        }
        // BN folds its statistics into weights at load time: they must be weights
        IrOp::BatchNorm { .. } => node.inputs.iter().skip(1).find_map(|v| {
            let val = graph.value(*v);
            (!matches!(val.kind, ValueKind::Weight { .. } | ValueKind::Constant(_))).then(|| {
                format!(
                    "batch_norm whose parameter '{}' is computed, not a weight",
                    val.name
                )
            })
        }),
        IrOp::Linear if shape(1).len() != 2 => Some(format!("linear with a {:?} weight", shape(1))),
        IrOp::Matmul if shape(0).is_empty() || shape(1).is_empty() => {
            Some("matmul of a 0-d tensor".into())
        }
        IrOp::Embedding if ty(1).is_some_and(|t| t.dtype.is_float()) => {
            Some("embedding with float indices".into())
        }
        IrOp::IndexCopy { .. } if ty(1).is_some_and(|t| t.dtype.is_float()) => {
            Some("index_copy with float indices".into())
        }
        IrOp::IndexCopy { .. } if shape(0).is_empty() => {
            Some("index_copy into a 0-d tensor".into())
        }
        _ => None,
    }
}

/// The NPU's arithmetic units are floating point: integer arithmetic there would round
/// values beyond 2^24 (f32) or 2^11 (f16), so integer-valued math is not an NPU op. Data
/// movement of integers (views, cat, embedding ids, index_copy positions) is exact and stays.
pub fn integer_arithmetic(
    op: &IrOp,
    mut out_dtypes: impl Iterator<Item = DType>,
) -> Option<String> {
    let arithmetic = is_pointwise(op) || matches!(op, IrOp::Sum { .. } | IrOp::Mean { .. });
    // a bool result of a pointwise op is 0 or 1, exact in floating point
    let exact = |d: DType| d.is_float() || (d == DType::Bool && is_pointwise(op));
    if arithmetic && out_dtypes.any(|d| !exact(d)) {
        return Some(format!(
            "integer {} (the NPU computes in floating point)",
            op.name()
        ));
    }
    None
}

/// The pointwise ops, which the NPU runs as elementwise expressions in f32.
fn is_pointwise(op: &IrOp) -> bool {
    matches!(
        op,
        IrOp::Unary(_)
            | IrOp::Binary { .. }
            | IrOp::BinaryScalar { .. }
            | IrOp::Clamp { .. }
            | IrOp::Ternary { .. }
            | IrOp::MaskedFill { .. }
    )
}

/// Integer operands of a pointwise op would round in f32 (an int64 compared, selected or
/// converted); bool operands (0/1) are exact.
pub fn integer_operands(op: &IrOp, mut in_dtypes: impl Iterator<Item = DType>) -> Option<String> {
    if is_pointwise(op) && in_dtypes.any(|d| !d.is_float() && d != DType::Bool) {
        return Some(format!(
            "{} of integer operands (the NPU computes in floating point)",
            op.name()
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn bert() -> Graph {
        let p =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/bert-tiny/model.ir.json");
        npu_ir::load(&p).unwrap()
    }

    #[test]
    fn new_typed_ops_are_unsupported_and_lowered_ops_supported() {
        let g = bert();
        let reason = |name: &str| {
            let n = g.nodes.iter().find(|n| n.name == name).unwrap();
            NPU.ir_node_unsupported(n, &g)
        };
        for name in ["arange", "new_ones", "and_1", "index"] {
            let r = reason(name).unwrap_or_else(|| panic!("{name} should be unsupported"));
            assert!(r.contains("no NPU lowering"), "{name}: {r}");
        }
        // comparisons are elementwise, but not of integers (they would round in f32)
        let r = reason("ge").unwrap();
        assert!(r.contains("integer operands"), "{r}");
        let r = reason("scaled_dot_product_attention").unwrap();
        assert!(r.contains("bool mask"), "{r}");
        for name in [
            "linear",
            "layer_norm",
            "gelu",
            "embedding",
            "view",
            "transpose",
            "add",
            "add_1",
        ] {
            assert_eq!(reason(name), None, "{name}");
        }
        // position ids: integer arithmetic runs exactly on the CPU
        for name in ["add_2", "add_3"] {
            let r = reason(name).unwrap_or_else(|| panic!("{name} should be unsupported"));
            assert!(r.contains("integer add"), "{name}: {r}");
        }
    }

    #[test]
    fn batch_norm_with_computed_statistics_falls_back() {
        let p = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fixtures/fallback/bn_stats_inputs.ir.json");
        let g = npu_ir::load(&p).unwrap();
        let bn = g
            .nodes
            .iter()
            .find(|n| matches!(n.op, IrOp::BatchNorm { .. }))
            .unwrap();
        let r = NPU.ir_node_unsupported(bn, &g).unwrap();
        assert!(r.contains("computed, not a weight"), "{r}");
    }

    #[test]
    fn cpu_target_messages_do_not_speak_of_an_npu() {
        let g = bert();
        let n = g.nodes.iter().find(|n| n.name == "arange").unwrap();
        let r = CPU.ir_node_unsupported(n, &g).unwrap();
        assert!(!r.contains("NPU") && r.contains("target 'cpu'"), "{r}");
    }

    #[test]
    fn operand_constraints() {
        let mut g = bert();
        // a float mask is fine
        let n = g
            .nodes
            .iter()
            .position(|n| n.name == "scaled_dot_product_attention")
            .unwrap();
        let m = g.nodes[n].inputs[3];
        g.values[m.idx()].ty.dtype = DType::F32;
        assert_eq!(NPU.ir_node_unsupported(&g.nodes[n], &g), None);
        // 3-D q is not
        let q = g.nodes[n].inputs[0];
        g.values[q.idx()].ty.shape = vec![2, 16, 32];
        assert!(NPU
            .ir_node_unsupported(&g.nodes[n], &g)
            .unwrap()
            .contains("4-D"));
        // dilation on a target without it
        let no_dil = Target {
            conv_dilation: false,
            ..NPU
        };
        let conv = IrOp::Conv2d {
            stride: [1, 1],
            padding: [0, 0],
            dilation: [2, 2],
            groups: 1,
        };
        assert!(no_dil
            .ir_op_unsupported(&conv)
            .unwrap()
            .contains("dilation"));
        assert_eq!(NPU.ir_op_unsupported(&conv), None);
    }
}
