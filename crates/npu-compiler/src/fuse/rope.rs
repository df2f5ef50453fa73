//! RoPE application: `x * cos + cat(-x[.., D/2:], x[.., :D/2]) * sin`.

use super::{Cx, Match};
use crate::graph::{FusedOp, Op};
use npu_ir::{BinaryOp, Op as IrOp, UnaryOp, ValueId};

pub fn match_rope(cx: &Cx, n: usize) -> Option<Match> {
    let root = cx.node(n);
    let Op::Ir(IrOp::Binary {
        op: BinaryOp::Add,
        alpha,
    }) = root.op
    else {
        return None;
    };
    if alpha != 1.0 {
        return None;
    }
    let [a, b] = root.inputs[..] else { return None };
    [(a, b), (b, a)]
        .into_iter()
        .find_map(|(direct, rotated)| try_order(cx, n, direct, rotated))
}

/// Matches `rotate_half(x)`; returns x and the absorbed nodes.
fn rotate_half(cx: &Cx, v: ValueId, absorbed: &mut Vec<usize>) -> Option<ValueId> {
    let (ci, IrOp::Cat { dim }, cat) = cx.internal(v)? else {
        return None;
    };
    let out = cx.shape(v);
    let rank = out.len();
    let d = *out.last()?;
    if !cx.is_last(*dim, rank) || d % 2 != 0 {
        return None;
    }
    let [neg_v, lo_v] = cat.inputs[..] else {
        return None;
    };
    let (ni, IrOp::Unary(UnaryOp::Neg), neg) = cx.internal(neg_v)? else {
        return None;
    };
    let (
        hi_i,
        IrOp::Slice {
            dim: hd,
            start: hs,
            end: he,
            step: 1,
        },
        hi,
    ) = cx.internal(neg.inputs[0])?
    else {
        return None;
    };
    let (
        lo_i,
        IrOp::Slice {
            dim: ld,
            start: ls,
            end: le,
            step: 1,
        },
        lo,
    ) = cx.internal(lo_v)?
    else {
        return None;
    };
    let x = hi.inputs[0];
    let half = (d / 2) as i64;
    let ok = lo.inputs[0] == x
        && cx.is_last(*hd, rank)
        && cx.is_last(*ld, rank)
        && *hs == half
        && *he >= d as i64
        && *ls == 0
        && *le == half
        && cx.shape(x) == out;
    ok.then(|| {
        absorbed.extend([ci, ni, hi_i, lo_i]);
        x
    })
}

fn try_order(cx: &Cx, n: usize, direct: ValueId, rotated: ValueId) -> Option<Match> {
    let mut absorbed = Vec::new();
    let (
        ri,
        IrOp::Binary {
            op: BinaryOp::Mul,
            alpha: _,
        },
        rmul,
    ) = cx.internal(rotated)?
    else {
        return None;
    };
    let (
        di,
        IrOp::Binary {
            op: BinaryOp::Mul,
            alpha: _,
        },
        dmul,
    ) = cx.internal(direct)?
    else {
        return None;
    };
    let [r0, r1] = rmul.inputs[..] else {
        return None;
    };
    let (x, sin) = match rotate_half(cx, r0, &mut absorbed) {
        Some(x) => (x, r1),
        None => (rotate_half(cx, r1, &mut absorbed)?, r0),
    };
    let cos = match dmul.inputs[..] {
        [p, c] if p == x => c,
        [c, p] if p == x => c,
        _ => return None,
    };
    let out = cx.shape(cx.node(n).outputs[0]);
    if cx.shape(x) != out
        || !cx.broadcasts(cx.shape(cos), out)
        || !cx.broadcasts(cx.shape(sin), out)
    {
        return None;
    }
    absorbed.extend([ri, di]);
    Some(Match {
        root: n,
        absorbed,
        op: FusedOp::Rope,
        inputs: vec![x, cos, sin],
    })
}
