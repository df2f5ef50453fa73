//! Activations folded into the producer's epilogue: conv2d+act (conv+BN+ReLU once BN is
//! folded) and linear+act.

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
