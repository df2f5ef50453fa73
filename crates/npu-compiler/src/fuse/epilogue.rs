//! Epilogues folded into the producer: conv2d+act (conv+BN+ReLU once BN is folded), a
//! residual add (and the activation after it) into a conv2d, linear+act, and a residual add
//! into a bias-free linear (the GEMM's bias term).

use super::{Cx, Match};
use crate::graph::{CNode, FusedOp, Op};
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
            residual: false,
        },
        Op::Fused(FusedOp::Conv2d {
            stride,
            padding,
            dilation,
            groups,
            act: None,
            residual: false,
        }) => FusedOp::Conv2d {
            stride,
            padding,
            dilation,
            groups,
            act: Some(act),
            residual: false,
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

/// `a + b` with alpha 1: the add a residual fold can absorb.
fn is_plain_add(node: &CNode) -> bool {
    matches!(
        node.op,
        Op::Ir(IrOp::Binary {
            op: npu_ir::BinaryOp::Add,
            alpha,
        }) if alpha == 1.0
    ) && node.inputs.len() == 2
}

/// `act(add(conv(x), r))` or `add(conv(x), r)` (either operand order, alpha 1) with a
/// convolution without activation used only here and `r` of the output's shape and dtype:
/// the convolution adds `r` (ResNet's bottleneck end, MobileNetV2's projection). An add whose
/// only reader is an epilogue activation is left for that activation's match.
pub fn match_conv_residual(cx: &Cx, n: usize) -> Option<Match> {
    let root = cx.node(n);
    let (act, add_node, add_id) = match root.op {
        Op::Ir(IrOp::Unary(act)) if act.is_epilogue_act() => {
            let v = root.inputs[0];
            if !cx.uses.single_use(v) {
                return None;
            }
            let (a, add) = cx.uses.producer(cx.g, v)?;
            (Some(act), add, Some(a))
        }
        Op::Ir(IrOp::Binary { .. }) => {
            let users = &cx.uses.users[root.outputs[0].idx()];
            let feeds_act = users.len() == 1
                && matches!(cx.node(users[0]).op, Op::Ir(IrOp::Unary(a)) if a.is_epilogue_act());
            if feeds_act {
                return None;
            }
            (None, root, None)
        }
        _ => return None,
    };
    if !is_plain_add(add_node) {
        return None;
    }
    let out = cx.g.ty(add_node.outputs[0]);
    for (ci, ri) in [(0, 1), (1, 0)] {
        let (c, r) = (add_node.inputs[ci], add_node.inputs[ri]);
        if c == r || !cx.uses.single_use(c) || cx.g.ty(c) != out || cx.g.ty(r) != out {
            continue;
        }
        let Some((conv_id, conv)) = cx.uses.producer(cx.g, c) else {
            continue;
        };
        let (stride, padding, dilation, groups) = match conv.op {
            Op::Ir(IrOp::Conv2d {
                stride,
                padding,
                dilation,
                groups,
            })
            | Op::Fused(FusedOp::Conv2d {
                stride,
                padding,
                dilation,
                groups,
                act: None,
                residual: false,
            }) => (stride, padding, dilation, groups),
            _ => continue,
        };
        let mut inputs = conv.inputs.clone();
        inputs.push(r);
        return Some(Match {
            root: n,
            absorbed: add_id.into_iter().chain([conv_id]).collect(),
            op: FusedOp::Conv2d {
                stride,
                padding,
                dilation,
                groups,
                act,
                residual: true,
            },
            inputs,
        });
    }
    None
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
    if !is_plain_add(root) {
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
