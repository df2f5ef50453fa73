//! Scaled dot-product attention with grouped K/V heads, causal or masked, f32 softmax.
//! Any T (no 2048 limit). The mask is read once per mask row (not per head when broadcast)
//! into lists of attended positions; the K/V rows those positions need are converted to f32
//! once per KV head; then query rows run in parallel over their lists only. A few query rows
//! whose heads share a mask row (decode) take `attention_decode.rs` instead, which reads the
//! cache in place.

use super::dot::dot_f32;
use super::gemm::{matmul, Mat};
use super::softmax::softmax_row;
use super::view::{with_scratch, SendPtr, View};
use rayon::prelude::*;

/// Additive mask values at or below this are treated as -inf.
pub const MASKED: f32 = -65504.0;

/// The fewest query rows for which a head's scores and output are two GEMMs ([`by_gemm`])
/// instead of a dot product per (row, slot): ViT-B/16's 197 rows over 197 slots took 5 ms a
/// layer one dot at a time (24 GFLOP/s).
const GEMM_MIN_ROWS: usize = 16;

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
    let rows = RowsOf {
        ranges: &ranges,
        pos: &pos,
        mh,
        s,
    };
    if mh == 1 && s < GEMM_MIN_ROWS {
        // A few query rows whose heads share their slots (decode): the cache read in place.
        super::attention_decode::decode(scale, q, k, v, &needed, &rows, [b, h, kvh, t, d], out);
        return Ok(());
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
        if s >= GEMM_MIN_ROWS {
            by_gemm(scale, q, k32, v32, &needed, &rows, [b, h, kvh, t, d], out);
            return;
        }
        // Phase 3: one task per query row.
        (0..b * h * s).into_par_iter().for_each(|row| {
            let (bi, hi, si) = (row / (h * s), (row / s) % h, row % s);
            let kh = hi / group;
            let slots = rows.of(bi, hi, si);
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

/// Phase 1's attended slots: for mask row `mr`, `pos[ranges[mr].0..ranges[mr].1]` as (slot,
/// additive mask value); `mh` mask rows per batch and query row (1: shared by the heads).
pub(super) struct RowsOf<'a> {
    ranges: &'a [(usize, usize)],
    pos: &'a [(u32, f32)],
    mh: usize,
    pub(super) s: usize,
}

impl RowsOf<'_> {
    /// The slots query row `si` of head `hi` in batch `bi` attends, ascending.
    pub(super) fn of(&self, bi: usize, hi: usize, si: usize) -> &[(u32, f32)] {
        let head = if self.mh == 1 { 0 } else { hi };
        let (lo, end) = self.ranges[(bi * self.mh + head) * self.s + si];
        &self.pos[lo..end]
    }
}

/// Phase 3 for many query rows, one task per (batch, head): the slots any row of the batch
/// attends (`needed`; a slot no row attends, such as a stale cache slot that may hold NaN or
/// inf, is left out entirely), S = Q Kᵀ over them, each row's scores scaled and masked (slots
/// it does not attend get -inf, so probability exactly 0), softmax, O = P V. `k32` / `v32` hold
/// the needed K/V rows in f32 at their [batch][kv head][slot] positions.
#[allow(clippy::too_many_arguments)]
fn by_gemm(
    scale: f32,
    q: &View,
    k32: &[f32],
    v32: &[f32],
    needed: &[bool],
    rows: &RowsOf,
    [b, h, kvh, t, d]: [usize; 5],
    out: &View,
) {
    let (s, group) = (rows.s, h / kvh);
    let slots: Vec<Vec<usize>> = (0..b)
        .map(|bi| (0..t).filter(|&ti| needed[bi * t + ti]).collect())
        .collect();
    (0..b * h).into_par_iter().for_each(|bh| {
        let (bi, hi) = (bh / h, bh % h);
        let kv_base = (bi * kvh + hi / group) * t;
        let u = &slots[bi];
        let nu = u.len();
        let mut index_of = vec![u32::MAX; t];
        for (i, &ti) in u.iter().enumerate() {
            index_of[ti] = i as u32;
        }
        with_scratch(1, 2 * s * d + 2 * nu * d + s * nu, |sc| {
            let (qm, rest) = sc.split_at_mut(s * d);
            let (kc, rest) = rest.split_at_mut(nu * d);
            let (vc, rest) = rest.split_at_mut(nu * d);
            let (sm, om) = rest.split_at_mut(s * nu);
            let qb = bi * q.strides[0] + hi * q.strides[1];
            for si in 0..s {
                q.gather(
                    qb + si * q.strides[2],
                    q.strides[3],
                    &mut qm[si * d..(si + 1) * d],
                );
            }
            for (i, &ti) in u.iter().enumerate() {
                let src = (kv_base + ti) * d;
                kc[i * d..(i + 1) * d].copy_from_slice(&k32[src..src + d]);
                vc[i * d..(i + 1) * d].copy_from_slice(&v32[src..src + d]);
            }
            // dst [m, n] (dense) = a [m, k] (row stride k) x b [k, n] (strides bs)
            let product =
                |dst: &mut [f32], [m, n, k]: [usize; 3], a: &[f32], b: &[f32], bs: [usize; 2]| {
                    let a = Mat {
                        ptr: a.as_ptr(),
                        rs: k as isize,
                        cs: 1,
                    };
                    let b = Mat {
                        ptr: b.as_ptr(),
                        rs: bs[0] as isize,
                        cs: bs[1] as isize,
                    };
                    // SAFETY: every matrix lies in its scratch slice with the strides given.
                    unsafe { matmul(m, n, k, dst.as_mut_ptr(), n as isize, 1, a, b) };
                };
            product(sm, [s, nu, d], qm, kc, [1, d]);
            for si in 0..s {
                let own = rows.of(bi, hi, si);
                let row = &mut sm[si * nu..(si + 1) * nu];
                if own.len() == nu {
                    // The row attends every needed slot (both lists are in slot order):
                    // no -inf to place, one pass that vectorizes (ViT: every row).
                    for (x, &(_, mv)) in row.iter_mut().zip(own) {
                        *x = *x * scale + mv;
                    }
                } else {
                    // the row's own slots scaled and masked, every other slot -inf
                    for &(ti, mv) in own {
                        let i = index_of[ti as usize] as usize;
                        row[i] = row[i] * scale + mv;
                    }
                    let mut next = own.iter().peekable();
                    for (i, x) in row.iter_mut().enumerate() {
                        if next.next_if(|&&(ti, _)| ti as usize == u[i]).is_none() {
                            *x = f32::NEG_INFINITY;
                        }
                    }
                }
                softmax_row(row, 0.0);
            }
            product(om, [s, d, nu], sm, vc, [d, 1]);
            let ob = bi * out.strides[0] + hi * out.strides[1];
            for si in 0..s {
                out.scatter(
                    ob + si * out.strides[2],
                    out.strides[3],
                    &om[si * d..(si + 1) * d],
                );
            }
        });
    });
}
