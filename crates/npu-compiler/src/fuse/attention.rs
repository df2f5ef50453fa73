//! Attention from `matmul(softmax(matmul(q, k^T) * scale + mask), v)` (eager attention) or
//! from `scaled_dot_product_attention`, with GQA's `unsqueeze -> expand -> reshape` of K/V
//! absorbed so the repeated heads are never materialized.

use super::{Cx, Match};
use crate::graph::{FusedOp, Op};
use npu_ir::{BinaryOp, DType, Op as IrOp, ValueId};

/// Resolves a `[B, H, T, D]` operand that repeats `[B, KVH, T, D]` heads back to the latter.
fn gqa_base(cx: &Cx, v: ValueId, absorbed: &mut Vec<usize>) -> ValueId {
    let try_base = || -> Option<(ValueId, [usize; 3])> {
        let (r, IrOp::Reshape, reshape) = cx.internal(v)? else {
            return None;
        };
        let (e, IrOp::Expand { .. }, expand) = cx.internal(reshape.inputs[0])? else {
            return None;
        };
        let (u, IrOp::Reshape, unsq) = cx.internal(expand.inputs[0])? else {
            return None;
        };
        let base = unsq.inputs[0];
        let (b, x, rep) = (cx.shape(base), cx.shape(expand.outputs[0]), cx.shape(v));
        // [B, KVH, T, D] -> [B, KVH, 1, T, D] -> [B, KVH, n, T, D] -> [B, KVH*n, T, D]
        let ok = b.len() == 4
            && x.len() == 5
            && rep.len() == 4
            && x[0] == b[0]
            && x[1] == b[1]
            && x[3] == b[2]
            && x[4] == b[3]
            && rep[1] == b[1] * x[2]
            && rep[2] == b[2]
            && rep[3] == b[3]
            && cx.shape(expand.inputs[0]) == [b[0], b[1], 1, b[2], b[3]];
        ok.then_some((base, [r, e, u]))
    };
    match try_base() {
        Some((base, nodes)) => {
            absorbed.extend(nodes);
            base
        }
        None => v,
    }
}

fn shapes_ok(cx: &Cx, q: ValueId, k: ValueId, v: ValueId, mask: Option<ValueId>) -> bool {
    let (qs, ks, vs) = (cx.shape(q), cx.shape(k), cx.shape(v));
    if qs.len() != 4 || ks.len() != 4 || vs.len() != 4 {
        return false;
    }
    let ok = qs[0] == ks[0] && ks == vs && ks[1] > 0 && qs[1] % ks[1] == 0 && qs[3] == ks[3];
    let scores = [qs[0], qs[1], qs[2], ks[2]];
    ok && mask.is_none_or(|m| cx.broadcasts(cx.shape(m), &scores) && cx.g.ty(m).dtype.is_float())
}

pub fn match_attention(cx: &Cx, n: usize) -> Option<Match> {
    let root = cx.node(n);
    match &root.op {
        Op::Ir(IrOp::Matmul) => match_eager(cx, n),
        Op::Ir(IrOp::Sdpa {
            is_causal,
            scale,
            enable_gqa: _,
        }) => {
            let mut absorbed = Vec::new();
            let q = root.inputs[0];
            let k = gqa_base(cx, root.inputs[1], &mut absorbed);
            let v = gqa_base(cx, root.inputs[2], &mut absorbed);
            let mask = root.inputs.get(3).copied();
            if !shapes_ok(cx, q, k, v, mask) {
                return None;
            }
            let d = cx.shape(q)[3] as f64;
            let mut inputs = vec![q, k, v];
            inputs.extend(mask);
            let op = FusedOp::Attention {
                scale: scale.unwrap_or(1.0 / d.sqrt()),
                causal: *is_causal,
            };
            Some(Match {
                root: n,
                absorbed,
                op,
                inputs,
            })
        }
        _ => None,
    }
}

fn match_eager(cx: &Cx, n: usize) -> Option<Match> {
    let root = cx.node(n);
    let (probs, v_rep) = (root.inputs[0], root.inputs[1]);
    let mut absorbed = Vec::new();
    let p = cx.strip_casts(probs, &mut absorbed);
    let (s, IrOp::Softmax { dim, dtype }, softmax) = cx.internal(p)? else {
        return None;
    };
    if !cx.is_last(*dim, cx.shape(p).len())
        || dtype.is_some_and(|d| d != DType::F32 && !d.is_float())
    {
        return None;
    }
    absorbed.push(s);
    let mut cur = cx.strip_casts(softmax.inputs[0], &mut absorbed);
    let mut mask = None;
    if let Some((
        a,
        IrOp::Binary {
            op: BinaryOp::Add,
            alpha,
        },
        add,
    )) = cx.internal(cur)
    {
        if *alpha != 1.0 {
            return None;
        }
        // The scores side is the one that leads back to a matmul.
        let leads_to_scores = |v: ValueId| {
            let mut tmp = Vec::new();
            let mut v = cx.strip_casts(v, &mut tmp);
            while let Some((
                _,
                IrOp::BinaryScalar {
                    op: BinaryOp::Mul | BinaryOp::Div,
                    scalar_lhs: false,
                    ..
                },
                nd,
            )) = cx.internal(v)
            {
                v = cx.strip_casts(nd.inputs[0], &mut tmp);
            }
            matches!(cx.internal(v), Some((_, IrOp::Matmul, _)))
        };
        let (scores, m) = if leads_to_scores(add.inputs[0]) {
            (add.inputs[0], add.inputs[1])
        } else if leads_to_scores(add.inputs[1]) {
            (add.inputs[1], add.inputs[0])
        } else {
            return None;
        };
        absorbed.push(a);
        mask = Some(m);
        cur = cx.strip_casts(scores, &mut absorbed);
    }
    let mut scale = 1.0;
    while let Some((
        i,
        IrOp::BinaryScalar {
            op,
            scalar,
            scalar_lhs: false,
        },
        node,
    )) = cx.internal(cur)
    {
        match op {
            BinaryOp::Mul => scale *= scalar,
            BinaryOp::Div => scale /= scalar,
            _ => return None,
        }
        absorbed.push(i);
        cur = cx.strip_casts(node.inputs[0], &mut absorbed);
    }
    let (qk_i, IrOp::Matmul, qk) = cx.internal(cur)? else {
        return None;
    };
    absorbed.push(qk_i);
    let (q, k_t) = (qk.inputs[0], qk.inputs[1]);
    let (t, IrOp::Transpose { dim0, dim1 }, tr) = cx.internal(k_t)? else {
        return None;
    };
    let rank = cx.shape(k_t).len();
    let mut dims = [*dim0, *dim1].map(|d| if d < 0 { d + rank as i64 } else { d });
    dims.sort();
    if rank != 4 || dims != [2, 3] {
        return None;
    }
    absorbed.push(t);
    let k = gqa_base(cx, tr.inputs[0], &mut absorbed);
    let v = gqa_base(cx, v_rep, &mut absorbed);
    if !shapes_ok(cx, q, k, v, mask) {
        return None;
    }
    let mut inputs = vec![q, k, v];
    inputs.extend(mask);
    Some(Match {
        root: n,
        absorbed,
        op: FusedOp::Attention {
            scale,
            causal: false,
        },
        inputs,
    })
}
