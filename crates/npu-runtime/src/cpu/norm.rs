//! RMSNorm, LayerNorm and trailing-dim reductions (f32 math, f64 sums).

use super::simd::multiversion;
use super::view::{offset_in, with_scratch, View};
use npu_program::expr::round_to;
use npu_program::program::ReduceOp;
use rayon::prelude::*;

/// sum f(v[i]) in f64 over eight interleaved partial sums: independent chains the compiler
/// vectorizes, where one running sum is a chain of dependent adds (ViT's 197 x 768
/// LayerNorm: 0.47 ms on one AMD EPYC core with one sum per pass).
#[inline(always)]
fn sum_f64(v: &[f32], f: impl Fn(f64) -> f64) -> f64 {
    let mut acc = [0f64; 8];
    let chunks = v.chunks_exact(8);
    let tail: f64 = chunks.remainder().iter().map(|&a| f(f64::from(a))).sum();
    for c in chunks {
        for (s, &a) in acc.iter_mut().zip(c) {
            *s += f(f64::from(a));
        }
    }
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail
}

/// The leading dims and the normalized (last) dim of x, whose rank the contract makes >= 1.
fn rows_of<'a>(x: &View<'a>) -> (&'a [usize], usize) {
    let r = x.rank();
    (&x.shape[..r - 1], x.shape[r - 1])
}

/// out = round(x * rsqrt(mean(x^2) + eps)) * w: the normalized value is rounded to the
/// storage dtype before the weight multiplies it, as PyTorch's Qwen2/Llama RMSNorm does.
pub fn rms_norm(eps: f32, x: &View, w: &View, out: &View) -> Result<(), String> {
    let (lead, d) = rows_of(x);
    let r = x.rank();
    let ws = *w.strides.last().unwrap_or(&1);
    let rows: usize = lead.iter().product();
    (0..rows).into_par_iter().for_each(|row| {
        with_scratch(0, 2 * d, |s| {
            let (v, wv) = s.split_at_mut(d);
            x.gather(
                offset_in(lead, &x.strides[..r - 1], row),
                x.strides[r - 1],
                v,
            );
            w.gather(0, ws, wv);
            let ss = sum_f64(v, |a| a * a);
            let inv = 1.0 / ((ss / d.max(1) as f64) as f32 + eps).sqrt();
            for (a, &g) in v.iter_mut().zip(wv.iter()) {
                *a = round_to(out.dtype, *a * inv) * g;
            }
            out.scatter(
                offset_in(lead, &out.strides[..r - 1], row),
                out.strides[r - 1],
                v,
            );
        })
    });
    Ok(())
}

pub fn layer_norm(
    eps: f32,
    x: &View,
    w: Option<&View>,
    b: Option<&View>,
    out: &View,
) -> Result<(), String> {
    let (lead, d) = rows_of(x);
    let r = x.rank();
    let rows: usize = lead.iter().product();
    // the weight and bias once, not once a row
    let dense = |p: Option<&View>| {
        p.map(|p| {
            let mut t = vec![0f32; d];
            p.gather(0, *p.strides.last().unwrap_or(&1), &mut t);
            t
        })
    };
    let (wv, bv) = (dense(w), dense(b));
    (0..rows).into_par_iter().for_each(|row| {
        with_scratch(0, d, |v| {
            x.gather(
                offset_in(lead, &x.strides[..r - 1], row),
                x.strides[r - 1],
                v,
            );
            layer_norm_row(v, eps, wv.as_deref(), bv.as_deref());
            out.scatter(
                offset_in(lead, &out.strides[..r - 1], row),
                out.strides[r - 1],
                v,
            );
        })
    });
    Ok(())
}

multiversion! {
    /// One row normalized in place: f64 mean and variance, `(x - mean) * inv` in f64 rounded
    /// to f32, then `* w` and `+ b` in f32 (two roundings, as two passes gave). Compiled per
    /// CPU level: at the baseline level the f64 sums and the normalization ran two lanes
    /// wide (ViT's nine 197 x 768 LayerNorms: 2.4-2.9 ms a run on one AMD EPYC core).
    fn layer_norm_row(v: &mut [f32], eps: f32, w: Option<&[f32]>, b: Option<&[f32]>) {
        let d = v.len().max(1) as f64;
        let mean = sum_f64(v, |a| a) / d;
        let var = sum_f64(v, |a| (a - mean) * (a - mean)) / d;
        let inv = 1.0 / (var + f64::from(eps)).sqrt();
        let norm = |a: f32| ((f64::from(a) - mean) * inv) as f32;
        match (w, b) {
            (Some(w), Some(b)) => {
                for ((a, &g), &c) in v.iter_mut().zip(w).zip(b) {
                    *a = norm(*a) * g + c;
                }
            }
            (Some(w), None) => {
                for (a, &g) in v.iter_mut().zip(w) {
                    *a = norm(*a) * g;
                }
            }
            (None, Some(b)) => {
                for (a, &c) in v.iter_mut().zip(b) {
                    *a = norm(*a) + c;
                }
            }
            (None, None) => {
                for a in v.iter_mut() {
                    *a = norm(*a);
                }
            }
        }
    }
}

/// Reduces the trailing `reduced` dims of x; out has x's leading dims' element count.
pub fn reduce(op: ReduceOp, reduced: usize, x: &View, out: &View) -> Result<(), String> {
    let r = x.rank();
    let (lead, tail) = x.shape.split_at(r - reduced);
    let (ls, ts) = x.strides.split_at(r - reduced);
    let rows: usize = lead.iter().product();
    let n: usize = tail.iter().product();
    (0..rows).into_par_iter().for_each(|row| {
        let base = offset_in(lead, ls, row);
        let mut s = 0.0f64;
        for i in 0..n {
            s += f64::from(x.ld(base + offset_in(tail, ts, i)));
        }
        if op == ReduceOp::Mean {
            s /= n.max(1) as f64;
        }
        out.st(offset_in(out.shape, out.strides, row), s as f32);
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The row as three plain passes compute it (the form before `layer_norm_row`): the
    /// vectorized row must give the same bits at this CPU's level.
    fn passes(v: &mut [f32], eps: f32, w: Option<&[f32]>, b: Option<&[f32]>) {
        let d = v.len().max(1) as f64;
        let mean = sum_f64(v, |a| a) / d;
        let var = sum_f64(v, |a| (a - mean) * (a - mean)) / d;
        let inv = 1.0 / (var + f64::from(eps)).sqrt();
        for a in v.iter_mut() {
            *a = ((f64::from(*a) - mean) * inv) as f32;
        }
        if let Some(w) = w {
            for (a, &g) in v.iter_mut().zip(w) {
                *a *= g;
            }
        }
        if let Some(b) = b {
            for (a, &c) in v.iter_mut().zip(b) {
                *a += c;
            }
        }
    }

    #[test]
    fn a_layer_norm_row_equals_its_three_passes_bit_for_bit() {
        let val = |i: usize, m: usize| ((i * 37 % m) as f32 - m as f32 / 2.0) * 0.173 + 3.0;
        for n in [1, 7, 8, 9, 64, 768, 771] {
            let x: Vec<f32> = (0..n).map(|i| val(i, 101)).collect();
            let w: Vec<f32> = (0..n).map(|i| val(i, 13) * 0.1).collect();
            let b: Vec<f32> = (0..n).map(|i| val(i, 29) * 0.01).collect();
            for (wo, bo) in [
                (Some(&w[..]), Some(&b[..])),
                (Some(&w[..]), None),
                (None, Some(&b[..])),
                (None, None),
            ] {
                let (mut got, mut want) = (x.clone(), x.clone());
                layer_norm_row(&mut got, 1e-5, wo, bo);
                passes(&mut want, 1e-5, wo, bo);
                let same = got
                    .iter()
                    .zip(&want)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(
                    same,
                    "n {n}, weight {}, bias {}",
                    wo.is_some(),
                    bo.is_some()
                );
            }
        }
    }
}
