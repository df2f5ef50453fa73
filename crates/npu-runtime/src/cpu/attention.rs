//! Scaled dot-product attention with grouped K/V heads, causal or masked, f32 softmax.
//! Any T (no 2048 limit). The mask is read once per mask row (not per head when broadcast)
//! into lists of attended positions; the K/V rows those positions need are converted to f32
//! once per KV head; then query rows run in parallel over their lists only.

use super::dot::dot_f32;
use super::softmax::softmax_row;
use super::view::{with_scratch, SendPtr, View};
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
    let (b, h, s, d) = (q.shape[0], q.shape[1], q.shape[2], q.shape[3]);
    let (kvh, t) = (k.shape[1], k.shape[2]);
    let group = h / kvh;
    // Mask rows depend on (b, h, s); when the mask is broadcast over heads (stride 0, the
    // usual case) one row serves every head.
    let mh = mask.map_or(1, |m| if m.strides[1] == 0 { 1 } else { h });
    let mask_rows = b * mh * s;
    // Phase 1: for every mask row, the positions that get a non-zero probability and their
    // additive mask values, as flat (t, value) pairs with per-row ranges.
    let mut ranges: Vec<(usize, usize)> = Vec::with_capacity(mask_rows);
    let mut pos: Vec<(u32, f32)> = Vec::new();
    let mut needed = vec![false; b * t];
    // one mask row at a time, converted in bulk (an element-wise load per slot cost a
    // Qwen2.5-1.5B prefill ~1 ms a layer: 128 rows of 2048 slots)
    let mut mrow = vec![0f32; if mask.is_some() { t } else { 0 }];
    for mr in 0..mask_rows {
        let (bi, hi, si) = (mr / (mh * s), (mr / s) % mh, mr % s);
        let start = pos.len();
        let tmax = if causal { t.min(si + 1) } else { t };
        if let Some(m) = mask {
            let off = bi * m.strides[0] + hi * m.strides[1] + si * m.strides[2];
            m.gather(off, m.strides[3], &mut mrow[..tmax]);
        }
        for ti in 0..tmax {
            // A masked slot (-inf, or any value at or below f16's lowest, -65504, which is how
            // every float dtype's `finfo.min` mask arrives) gets probability exactly 0 after the
            // softmax for any realistic score: it is skipped.
            let mv = if mask.is_some() { mrow[ti] } else { 0.0 };
            if mv > MASKED {
                pos.push((ti as u32, mv));
                needed[bi * t + ti] = true;
            }
        }
        ranges.push((start, pos.len()));
    }
    // Phase 2: K and V rows that some query reads, converted to f32 once per KV head (GQA
    // shares them between the `group` query heads).
    let kv_len = b * kvh * t * d;
    with_scratch(2, 2 * kv_len, |kv32| {
        let (k32, v32) = kv32.split_at_mut(kv_len);
        let (kp, vp) = (SendPtr(k32.as_mut_ptr()), SendPtr(v32.as_mut_ptr()));
        (0..b * kvh * t).into_par_iter().for_each(|r| {
            let (bi, kh, ti) = (r / (kvh * t), (r / t) % kvh, r % t);
            if !needed[bi * t + ti] {
                return;
            }
            // SAFETY: each task writes its own D-long row of k32 and v32.
            let (kr, vr) = unsafe {
                (
                    std::slice::from_raw_parts_mut(kp.get().add(r * d), d),
                    std::slice::from_raw_parts_mut(vp.get().add(r * d), d),
                )
            };
            k.gather(
                bi * k.strides[0] + kh * k.strides[1] + ti * k.strides[2],
                k.strides[3],
                kr,
            );
            v.gather(
                bi * v.strides[0] + kh * v.strides[1] + ti * v.strides[2],
                v.strides[3],
                vr,
            );
        });
        let (k32, v32) = (&*k32, &*v32);
        // Phase 3: one task per query row.
        (0..b * h * s).into_par_iter().for_each(|row| {
            let (bi, hi, si) = (row / (h * s), (row / s) % h, row % s);
            let kh = hi / group;
            let (lo, hi_end) = ranges[(bi * mh + if mh == 1 { 0 } else { hi }) * s + si];
            let slots = &pos[lo..hi_end];
            with_scratch(1, 2 * d + slots.len(), |sc| {
                let (qv, rest) = sc.split_at_mut(d);
                let (acc, probs) = rest.split_at_mut(d);
                q.gather(
                    bi * q.strides[0] + hi * q.strides[1] + si * q.strides[2],
                    q.strides[3],
                    qv,
                );
                let base = (bi * kvh + kh) * t;
                for (p, &(ti, mv)) in probs.iter_mut().zip(slots) {
                    let kr = &k32[(base + ti as usize) * d..][..d];
                    *p = dot_f32(qv, kr) * scale + mv;
                }
                softmax_row(probs, 0.0);
                acc.fill(0.0);
                for (&p, &(ti, _)) in probs.iter().zip(slots) {
                    let vr = &v32[(base + ti as usize) * d..][..d];
                    for (a, &x) in acc.iter_mut().zip(vr) {
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
    });
    Ok(())
}
