//! Attention for a few query rows over a long KV cache (decode): flash-decoding over the slot
//! axis. One task per (batch, KV head, query row, block of attended slots) reads each K and V
//! row it needs once (no f32 copy of the cache) for all the query heads that share the KV head
//! (GQA), and keeps per head the block's maximum score, sum of exponentials and unnormalized
//! output; the blocks merge at the end.
//!
//! A bf16 cache with unit-stride rows takes the AVX2 blocks of `attention_avx2.rs` (the
//! heads' partial sums in registers); others widen each row into a buffer and run one dot or
//! scaled add per head. On a 2-core AMD EPYC, Qwen2.5-1.5B decode at 1000 of 2048: 8-14 ms a
//! token in the per-row path before, ~8 with the row buffer, 4.3 with the AVX2 blocks.

use super::activation::fast_exp;
use super::attention::RowsOf;
#[cfg(target_arch = "x86_64")]
use super::attention_avx2;
use super::dot::axpy_f32;
use super::simd::multiversion;
use super::view::{with_scratch, View};
use npu_ir::DType;
use rayon::prelude::*;

/// The fewest attended slots a block gets (fewer blocks below that: each task's start-up
/// costs more than its rows).
const MIN_BLOCK: usize = 128;

multiversion! {
    /// `dst[i] = bf16(src[i])` widened to f32.
    fn widen_bf16(src: &[u16], dst: &mut [f32]) {
        for (d, &x) in dst.iter_mut().zip(src) {
            *d = f32::from_bits(u32::from(x) << 16);
        }
    }
}

multiversion! {
    /// `out[g] = (q[g] . kf) * scale + mv` for every head g of `q` (g rows of kf's length).
    fn heads_dot(q: &[f32], kf: &[f32], scale: f32, mv: f32, out: &mut [f32]) {
        let d = kf.len();
        for (o, qg) in out.iter_mut().zip(q.chunks_exact(d)) {
            let mut acc = [0f32; 16];
            let mut cq = qg.chunks_exact(16);
            let mut ck = kf.chunks_exact(16);
            for (x, y) in (&mut cq).zip(&mut ck) {
                for i in 0..16 {
                    acc[i] += x[i] * y[i];
                }
            }
            let mut sum: f32 = acc.iter().sum();
            for (x, y) in cq.remainder().iter().zip(ck.remainder()) {
                sum += x * y;
            }
            *o = sum * scale + mv;
        }
    }
}

multiversion! {
    /// `acc[g] += p[g] * vf` for every head g (`acc` holds g rows of vf's length).
    fn heads_axpy(acc: &mut [f32], p: &[f32], vf: &[f32]) {
        for (ag, &pg) in acc.chunks_exact_mut(vf.len()).zip(p) {
            for (a, &x) in ag.iter_mut().zip(vf) {
                *a += pg * x;
            }
        }
    }
}

/// Whether the AVX2 blocks run here.
fn avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    return attention_avx2::available();
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Row `off` of `x` (a [b, heads, t, d] K or V view) as f32 in `dst`.
#[inline]
fn row_f32(x: &View, off: usize, dst: &mut [f32]) {
    if x.dtype == DType::BF16 && (x.strides[3] == 1 || dst.len() == 1) {
        // SAFETY: the row's elements at unit stride lie in the view's buffer (view module doc).
        let src = unsafe { std::slice::from_raw_parts((x.ptr as *const u16).add(off), dst.len()) };
        widen_bf16(src, dst);
    } else {
        x.gather(off, x.strides[3], dst);
    }
}

/// Attention of `q` [b, h, s, d] over `k`/`v` [b, kvh, t, d] when every head of a batch
/// shares its query rows' slot lists (`rows.mh == 1`). `needed[bi * t + ti]`: some row of
/// batch bi attends slot ti (the blocks split these evenly).
#[allow(clippy::too_many_arguments)]
pub(super) fn decode(
    scale: f32,
    q: &View,
    k: &View,
    v: &View,
    needed: &[bool],
    rows: &RowsOf,
    [b, h, kvh, t, d]: [usize; 5],
    out: &View,
) {
    let (s, group) = (rows.s, h / kvh);
    // Block boundaries (slot indices) per batch: equal shares of the attended slots.
    let threads = rayon::current_num_threads().max(1);
    let most = (0..b)
        .map(|bi| needed[bi * t..(bi + 1) * t].iter().filter(|&&n| n).count())
        .max()
        .unwrap_or(0);
    let blocks = (2 * threads)
        .div_ceil(b * kvh)
        .min(most.div_ceil(MIN_BLOCK))
        .max(1);
    let bounds: Vec<Vec<usize>> = (0..b)
        .map(|bi| {
            let u: Vec<usize> = (0..t).filter(|&ti| needed[bi * t + ti]).collect();
            let mut e: Vec<usize> = (0..blocks)
                .map(|c| u.get(c * u.len() / blocks).map_or(t, |&x| x))
                .collect();
            e[0] = 0;
            e.push(t);
            e
        })
        .collect();
    // bf16 K and V rows with unit stride: the AVX2 blocks (`attention_avx2.rs`).
    let bf16_rows = |x: &View| x.dtype == DType::BF16 && x.strides[3] == 1;
    let fast = avx2() && bf16_rows(k) && bf16_rows(v) && d % 8 == 0;
    // Per (batch, KV head, row, block, head of the group): max, sum, D outputs.
    let rec = d + 2;
    let mut part = vec![0f32; b * kvh * s * blocks * group * rec];
    // One task per (batch, KV head, query row, block): its group's records.
    part.par_chunks_mut(group * rec)
        .enumerate()
        .for_each(|(task, mine)| {
            let (c, si, bk) = (task % blocks, (task / blocks) % s, task / (blocks * s));
            let (bi, kh) = (bk / kvh, bk % kvh);
            let kbase = bi * k.strides[0] + kh * k.strides[1];
            let vbase = bi * v.strides[0] + kh * v.strides[1];
            // the group's heads share the row's slots (mh == 1)
            let all = rows.of(bi, 0, si);
            let (t0, t1) = (bounds[bi][c], bounds[bi][c + 1]);
            let lo = all.partition_point(|&(ti, _)| (ti as usize) < t0);
            let hi = all.partition_point(|&(ti, _)| (ti as usize) < t1);
            let slots = &all[lo..hi];
            let n = slots.len();
            with_scratch(1, 2 * group * d + group * n + d, |sc| {
                let (qv, rest) = sc.split_at_mut(group * d);
                let (acc, rest) = rest.split_at_mut(group * d);
                // p[j * group + g]: slot j's score, then probability, for head g
                let (p, row) = rest.split_at_mut(group * n);
                for g in 0..group {
                    let hi = kh * group + g;
                    q.gather(
                        bi * q.strides[0] + hi * q.strides[1] + si * q.strides[2],
                        q.strides[3],
                        &mut qv[g * d..(g + 1) * d],
                    );
                }
                if fast {
                    #[cfg(target_arch = "x86_64")]
                    // SAFETY: `fast` checked AVX2, bf16 rows with unit stride and d a
                    // multiple of 8; the listed slots' rows lie in K (view module doc).
                    unsafe {
                        let kp = (k.ptr as *const u16).add(kbase);
                        attention_avx2::scores(qv, group, kp, k.strides[2], slots, scale, p);
                    }
                } else {
                    for (j, &(ti, mv)) in slots.iter().enumerate() {
                        row_f32(k, kbase + ti as usize * k.strides[2], row);
                        heads_dot(qv, row, scale, mv, &mut p[j * group..(j + 1) * group]);
                    }
                }
                for g in 0..group {
                    let m = (0..n)
                        .map(|j| p[j * group + g])
                        .fold(f32::NEG_INFINITY, f32::max);
                    let mut l = 0.0;
                    if m > f32::NEG_INFINITY {
                        for j in 0..n {
                            let e = fast_exp(p[j * group + g] - m);
                            p[j * group + g] = e;
                            l += e;
                        }
                    }
                    let r = g * rec;
                    mine[r] = m;
                    mine[r + 1] = l;
                }
                if fast {
                    #[cfg(target_arch = "x86_64")]
                    // SAFETY: as the scores, for V.
                    unsafe {
                        let vp = (v.ptr as *const u16).add(vbase);
                        attention_avx2::outputs(p, group, vp, v.strides[2], slots, acc);
                    }
                } else {
                    acc.fill(0.0);
                    for (j, &(ti, _)) in slots.iter().enumerate() {
                        row_f32(v, vbase + ti as usize * v.strides[2], row);
                        heads_axpy(acc, &p[j * group..(j + 1) * group], row);
                    }
                }
                for g in 0..group {
                    let r = g * rec + 2;
                    mine[r..r + d].copy_from_slice(&acc[g * d..(g + 1) * d]);
                }
            });
        });
    // Merge each query row's blocks: weights exp(m_c - max) over the blocks with a sum.
    (0..b * h * s).into_par_iter().for_each(|row| {
        let (bi, hh, si) = (row / (h * s), (row / s) % h, row % s);
        let (kh, g) = (hh / group, hh % group);
        let recs: Vec<&[f32]> = (0..blocks)
            .map(|c| {
                let at = ((((bi * kvh + kh) * s + si) * blocks + c) * group + g) * rec;
                &part[at..at + rec]
            })
            .collect();
        let m = recs
            .iter()
            .filter(|r| r[1] > 0.0)
            .map(|r| r[0])
            .fold(f32::NEG_INFINITY, f32::max);
        with_scratch(0, d, |o| {
            o.fill(0.0);
            let mut l = 0.0;
            for r in recs.iter().filter(|r| r[1] > 0.0) {
                let w = fast_exp(r[0] - m);
                l += r[1] * w;
                axpy_f32(o, w, &r[2..]);
            }
            if l > 0.0 {
                let inv = 1.0 / l;
                for x in o.iter_mut() {
                    *x *= inv;
                }
            }
            out.scatter(
                bi * out.strides[0] + hh * out.strides[1] + si * out.strides[2],
                out.strides[3],
                o,
            );
        });
    });
}
