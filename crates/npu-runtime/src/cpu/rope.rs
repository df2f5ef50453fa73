//! Rotary position embedding: out = x * cos + rotate_half(x) * sin over the last dim.

use super::view::{offset_in, with_scratch, View};
use rayon::prelude::*;

pub fn rope(x: &View, cos: &View, sin: &View, out: &View) -> Result<(), String> {
    let r = x.rank();
    let d = x.shape[r - 1];
    let h = d / 2;
    let lead = &x.shape[..r - 1];
    let rows: usize = lead.iter().product();
    (0..rows).into_par_iter().for_each(|row| {
        with_scratch(0, 4 * d, |s| {
            let (xv, rest) = s.split_at_mut(d);
            let (cv, rest) = rest.split_at_mut(d);
            let (sv, ov) = rest.split_at_mut(d);
            let off = |v: &View| offset_in(lead, &v.strides[..r - 1], row);
            x.gather(off(x), x.strides[r - 1], xv);
            cos.gather(off(cos), cos.strides[r - 1], cv);
            sin.gather(off(sin), sin.strides[r - 1], sv);
            for i in 0..d {
                let rot = if i < h { -xv[i + h] } else { xv[i - h] };
                ov[i] = xv[i] * cv[i] + rot * sv[i];
            }
            out.scatter(off(out), out.strides[r - 1], ov);
        })
    });
    Ok(())
}
