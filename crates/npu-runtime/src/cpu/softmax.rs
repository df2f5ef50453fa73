//! Softmax over the last dim with scale and optional additive mask, in f32.

use super::activation::fast_exp;
use super::simd::multiversion;
use super::view::{offset_in, with_scratch, View};
use rayon::prelude::*;

multiversion! {
    /// In-place softmax of a row already scaled and masked. A row whose every entry is -inf
    /// (fully masked) becomes `all_masked`: NaN for `softmax`, as ATen's (exp(-inf - -inf)),
    /// zeros for attention, as ATen's scaled_dot_product_attention (its "safe softmax").
    pub fn softmax_row(row: &mut [f32], all_masked: f32) {
        let m = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        if m == f32::NEG_INFINITY {
            row.fill(all_masked);
            return;
        }
        // exponentials first (a plain loop vectorizes), then their sum in order
        for x in row.iter_mut() {
            *x = fast_exp(*x - m);
        }
        let mut sum = 0.0f32;
        for x in row.iter() {
            sum += *x;
        }
        let inv = 1.0 / sum;
        for x in row.iter_mut() {
            *x *= inv;
        }
    }
}

pub fn softmax(scale: f32, x: &View, mask: Option<&View>, out: &View) -> Result<(), String> {
    let r = x.rank();
    let d = x.shape[r - 1];
    let lead = &x.shape[..r - 1];
    let rows: usize = lead.iter().product();
    (0..rows).into_par_iter().for_each(|row| {
        with_scratch(0, 2 * d, |s| {
            let (v, mv) = s.split_at_mut(d);
            x.gather(
                offset_in(lead, &x.strides[..r - 1], row),
                x.strides[r - 1],
                v,
            );
            for e in v.iter_mut() {
                *e *= scale;
            }
            if let Some(m) = mask {
                m.gather(
                    offset_in(lead, &m.strides[..r - 1], row),
                    m.strides[r - 1],
                    mv,
                );
                for (e, &a) in v.iter_mut().zip(mv.iter()) {
                    *e += a;
                }
            }
            softmax_row(v, f32::NAN);
            out.scatter(
                offset_in(lead, &out.strides[..r - 1], row),
                out.strides[r - 1],
                v,
            );
        })
    });
    Ok(())
}
