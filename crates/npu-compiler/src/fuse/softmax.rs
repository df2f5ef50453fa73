//! softmax(scores + mask), optionally with a scalar scale before the add, as one kernel that
//! reads the mask with broadcast strides.

use super::{Cx, Match};
use crate::graph::{FusedOp, Op};
use npu_ir::{BinaryOp, Op as IrOp};

pub fn match_masked_softmax(cx: &Cx, n: usize) -> Option<Match> {
    let root = cx.node(n);
    let Op::Ir(IrOp::Softmax { dim, .. }) = root.op else {
        return None;
    };
    let x = root.inputs[0];
    let out_shape = cx.shape(root.outputs[0]);
    if !cx.is_last(dim, out_shape.len()) {
        return None;
    }
    let (
        a,
        IrOp::Binary {
            op: BinaryOp::Add,
            alpha,
        },
        add,
    ) = cx.internal(x)?
    else {
        return None;
    };
    if *alpha != 1.0 {
        return None;
    }
    let mut absorbed = vec![a];
    let (scores, mask) = if cx.shape(add.inputs[0]) == out_shape {
        (add.inputs[0], add.inputs[1])
    } else {
        (add.inputs[1], add.inputs[0])
    };
    if cx.shape(scores) != out_shape || !cx.broadcasts(cx.shape(mask), out_shape) {
        return None;
    }
    let mut scale = 1.0;
    let mut scores = scores;
    while let Some((
        s,
        IrOp::BinaryScalar {
            op,
            scalar,
            scalar_lhs: false,
        },
        node,
    )) = cx.internal(scores)
    {
        match op {
            BinaryOp::Mul => scale *= scalar,
            BinaryOp::Div => scale /= scalar,
            _ => break,
        }
        absorbed.push(s);
        scores = node.inputs[0];
    }
    Some(Match {
        root: n,
        absorbed,
        op: FusedOp::MaskedSoftmax { scale },
        inputs: vec![scores, mask],
    })
}
