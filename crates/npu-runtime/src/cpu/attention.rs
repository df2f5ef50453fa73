//! Scaled dot-product attention with grouped K/V heads, causal or masked, f32 softmax.
//! Parallel over (batch, head, query) rows; any T (no 2048 limit).

use super::dot::dot_f32;
use super::softmax::softmax_row;
use super::view::{with_scratch, View};
use rayon::prelude::*;

/// Additive mask values at or below this are treated as -inf.
pub const MASKED: f32 = -65504.0;

pub fn attention(
    scale: f32,
    causal: bool,
    q: &View,
    k: &View,
    v: &View,
    mask: Option<&View>,
    out: &View,
) -> Result<(), String> {
    if q.rank() != 4 || k.rank() != 4 || v.rank() != 4 || out.shape != q.shape {
        return Err(format!(
            "expects q [B,H,S,D], k/v [B,KVH,T,D], out as q; got q {:?}, k {:?}, v {:?}, out {:?}",
            q.shape, k.shape, v.shape, out.shape
        ));
    }
    let (b, h, s, d) = (q.shape[0], q.shape[1], q.shape[2], q.shape[3]);
    let (kvh, t) = (k.shape[1], k.shape[2]);
    if k.shape[0] != b || v.shape != k.shape || k.shape[3] != d || kvh == 0 || h % kvh != 0 {
        return Err(format!(
            "k {:?} / v {:?} do not fit q {:?} (heads must be a multiple of kv heads)",
            k.shape, v.shape, q.shape
        ));
    }
    if let Some(m) = mask {
        if m.shape != [b, h, s, t] {
            return Err(format!(
                "mask {:?} is not [B,H,S,T] = {:?}",
                m.shape,
                [b, h, s, t]
            ));
        }
    }
    let group = h / kvh;
    let rows = b * h * s;
    (0..rows).into_par_iter().for_each(|row| {
        let (bi, hi, si) = (row / (h * s), (row / s) % h, row % s);
        let kh = hi / group;
        with_scratch(1, 3 * d + t, |sc| {
            let (qv, rest) = sc.split_at_mut(d);
            let (kr, rest) = rest.split_at_mut(d);
            let (acc, sc) = rest.split_at_mut(d);
            q.gather(
                bi * q.strides[0] + hi * q.strides[1] + si * q.strides[2],
                q.strides[3],
                qv,
            );
            let kb = bi * k.strides[0] + kh * k.strides[1];
            let vb = bi * v.strides[0] + kh * v.strides[1];
            let tmax = if causal { t.min(si + 1) } else { t };
            for (ti, e) in sc.iter_mut().enumerate() {
                if ti >= tmax {
                    *e = f32::NEG_INFINITY;
                    continue;
                }
                // A masked slot (-inf, or any value at or below f16's lowest, -65504, which
                // is how every float dtype's `finfo.min` mask arrives) gets probability
                // exactly 0 after the softmax for any realistic score: skip its dot product.
                let mv = mask.map_or(0.0, |m| {
                    m.ld(bi * m.strides[0]
                        + hi * m.strides[1]
                        + si * m.strides[2]
                        + ti * m.strides[3])
                });
                if mv <= MASKED {
                    *e = f32::NEG_INFINITY;
                    continue;
                }
                k.gather(kb + ti * k.strides[2], k.strides[3], kr);
                *e = dot_f32(qv, kr) * scale + mv;
            }
            softmax_row(sc);
            acc.fill(0.0);
            for (ti, &p) in sc.iter().enumerate() {
                if p == 0.0 {
                    continue;
                }
                v.gather(vb + ti * v.strides[2], v.strides[3], kr);
                for (a, &x) in acc.iter_mut().zip(kr.iter()) {
                    *a += p * x;
                }
            }
            out.scatter(
                bi * out.strides[0] + hi * out.strides[1] + si * out.strides[2],
                out.strides[3],
                acc,
            );
        })
    });
    Ok(())
}
