//! Epilogues folded into the producer: conv2d+act (conv+BN+ReLU once BN is folded),
//! linear+act, and a residual add into a bias-free linear (the GEMM's bias term).

use super::{Cx, Match};
use crate::graph::{FusedOp, Op};
use npu_ir::Op as IrOp;

pub fn match_conv_act(cx: &Cx, n: usize) -> Option<Match> {
    let root = cx.node(n);
    let Op::Ir(IrOp::Unary(act)) = root.op else {
        return None;
    };
    if !act.is_epilogue_act() {
        return None;
    }
    let x = root.inputs[0];
    if !cx.uses.single_use(x) {
        return None;
    }
    let (c, conv) = cx.uses.producer(cx.g, x)?;
    let op = match conv.op {
        Op::Ir(IrOp::Conv2d {
            stride,
            padding,
            dilation,
            groups,
        }) => FusedOp::Conv2d {
            stride,
            padding,
            dilation,
            groups,
            act: Some(act),
        },
        Op::Fused(FusedOp::Conv2d {
            stride,
            padding,
            dilation,
            groups,
            act: None,
        }) => FusedOp::Conv2d {
            stride,
            padding,
            dilation,
            groups,
            act: Some(act),
        },
        _ => return None,
    };
    Some(Match {
        root: n,
        absorbed: vec![c],
        op,
        inputs: conv.inputs.clone(),
    })
}

/// Not for SiLU feeding a multiply: that pair fuses into one `silu(gate) * up` kernel.
pub fn match_linear_act(cx: &Cx, n: usize) -> Option<Match> {
    let root = cx.node(n);
    let Op::Ir(IrOp::Unary(act)) = root.op else {
        return None;
    };
    if !act.is_epilogue_act() {
        return None;
    }
    if act == npu_ir::UnaryOp::Silu {
        let users = &cx.uses.users[root.outputs[0].idx()];
        let feeds_mul = users.len() == 1
            && matches!(
                cx.node(users[0]).op,
                Op::Ir(IrOp::Binary {
                    op: npu_ir::BinaryOp::Mul,
                    ..
                })
            );
        if feeds_mul {
            return None;
        }
    }
    let (c, IrOp::Linear, lin) = cx.internal(root.inputs[0])? else {
        return None;
    };
    Some(Match {
        root: n,
        absorbed: vec![c],
        op: FusedOp::Linear { act },
        inputs: lin.inputs.clone(),
    })
}

/// `add(r, linear(x, w))` (either operand order, alpha 1) with a bias-free linear used only
/// here and `r` of the output's shape and dtype: the GEMM adds `r` as its bias (beta 1).
pub fn match_linear_residual(cx: &Cx, n: usize) -> Option<Match> {
    let root = cx.node(n);
    let Op::Ir(IrOp::Binary {
        op: npu_ir::BinaryOp::Add,
        alpha,
    }) = root.op
    else {
        return None;
    };
    if alpha != 1.0 || root.inputs.len() != 2 {
        return None;
    }
    let out = cx.g.ty(root.outputs[0]);
    for (li, ri) in [(0, 1), (1, 0)] {
        let (l, r) = (root.inputs[li], root.inputs[ri]);
        let Some((c, IrOp::Linear, lin)) = cx.internal(l) else {
            continue;
        };
        if lin.inputs.len() != 2 || cx.g.ty(l) != out || cx.g.ty(r) != out {
            continue;
        }
        return Some(Match {
            root: n,
            absorbed: vec![c],
            op: FusedOp::LinearAdd,
            inputs: vec![lin.inputs[0], lin.inputs[1], r],
        });
    }
    None
}

/// `linear(rms_norm(x), w, b?)` (plain, or with an activation epilogue) whose norm output is
/// read by nothing else: the GEMM normalizes its input rows itself (one launch, and the
/// normalized rows never go to memory).
pub fn match_norm_linear(cx: &Cx, n: usize) -> Option<Match> {
    let root = cx.node(n);
    let act = match root.op {
        Op::Ir(IrOp::Linear) => None,
        Op::Fused(FusedOp::Linear { act }) => Some(act),
        _ => return None,
    };
    let x = root.inputs[0];
    if !cx.uses.single_use(x) {
        return None;
    }
    let (c, norm) = cx.uses.producer(cx.g, x)?;
    let Op::Fused(FusedOp::RmsNorm { eps }) = norm.op else {
        return None;
    };
    let [nx, nw] = norm.inputs[..] else {
        return None;
    };
    // the norm's row is the linear's K (a norm over another dim does not fold), and the
    // normalized rows round to the dtype they had (the GEMM rounds them to its input's)
    if cx.shape(nx) != cx.shape(x)
        || cx.shape(nw).last() != cx.shape(x).last()
        || cx.g.ty(nx).dtype != cx.g.ty(x).dtype
    {
        return None;
    }
    let mut inputs = vec![nx];
    inputs.extend(&root.inputs[1..]);
    inputs.push(nw);
    Some(Match {
        root: n,
        absorbed: vec![c],
        op: FusedOp::NormLinear { eps, act },
        inputs,
    })
}
