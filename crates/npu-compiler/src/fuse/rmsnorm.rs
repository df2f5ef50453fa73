//! RMSNorm: `w * cast(x32 * rsqrt(mean(x32^2, -1, keepdim) + eps))` with `x32 = cast(x)`.

use super::{Cx, Match};
use crate::graph::{FusedOp, Op};
use npu_ir::{BinaryOp, Op as IrOp, UnaryOp, ValueId};

pub fn match_rmsnorm(cx: &Cx, n: usize) -> Option<Match> {
    let root = cx.node(n);
    let Op::Ir(IrOp::Binary {
        op: BinaryOp::Mul, ..
    }) = root.op
    else {
        return None;
    };
    let [a, b] = root.inputs[..] else { return None };
    [(a, b), (b, a)]
        .into_iter()
        .find_map(|(w, y)| try_order(cx, n, w, y))
}

fn try_order(cx: &Cx, n: usize, w: ValueId, y: ValueId) -> Option<Match> {
    let out = cx.shape(cx.node(n).outputs[0]);
    let d = *out.last()?;
    if cx.shape(w) != [d] {
        return None;
    }
    let mut absorbed = Vec::new();
    let y = cx.strip_casts(y, &mut absorbed);
    let (
        mi,
        IrOp::Binary {
            op: BinaryOp::Mul, ..
        },
        mul,
    ) = cx.internal(y)?
    else {
        return None;
    };
    absorbed.push(mi);
    let [p, q] = mul.inputs[..] else { return None };
    let (h, r) = if matches!(cx.internal(q), Some((_, IrOp::Unary(UnaryOp::Rsqrt), _))) {
        (p, q)
    } else {
        (q, p)
    };
    let (ri, IrOp::Unary(UnaryOp::Rsqrt), rsqrt) = cx.internal(r)? else {
        return None;
    };
    let (
        ai,
        IrOp::BinaryScalar {
            op: BinaryOp::Add,
            scalar: eps,
            scalar_lhs: false,
        },
        add,
    ) = cx.internal(rsqrt.inputs[0])?
    else {
        return None;
    };
    let (
        mei,
        IrOp::Mean {
            dims,
            keepdim: true,
        },
        mean,
    ) = cx.internal(add.inputs[0])?
    else {
        return None;
    };
    let rank = cx.shape(mean.inputs[0]).len();
    if dims.len() != 1 || !cx.is_last(dims[0], rank) {
        return None;
    }
    let sq = mean.inputs[0];
    let (pi, sq_op, pow) = cx.internal(sq)?;
    let squares_h = match sq_op {
        IrOp::BinaryScalar {
            op: BinaryOp::Pow,
            scalar,
            scalar_lhs: false,
        } => *scalar == 2.0 && pow.inputs[0] == h,
        IrOp::Binary {
            op: BinaryOp::Mul, ..
        } => pow.inputs[..] == [h, h],
        _ => false,
    };
    if !squares_h || cx.shape(h) != out {
        return None;
    }
    absorbed.extend([ri, ai, mei, pi]);
    // Absorb the up-cast of x when only the norm reads it.
    let mut x = h;
    if let Some((ci, IrOp::Cast, cast)) = cx.producer(h) {
        let users = &cx.uses.users[h.idx()];
        if !cx.uses.is_output[h.idx()] && users.iter().all(|u| *u == pi || *u == mi) {
            absorbed.push(ci);
            x = cast.inputs[0];
        }
    }
    Some(Match {
        root: n,
        absorbed,
        op: FusedOp::RmsNorm { eps: *eps },
        inputs: vec![x, w],
    })
}
