//! Copy (materialize a strided view, converting dtypes) and fill.

use super::view::{chunks_for, offset_in, View};
use rayon::prelude::*;

/// out = in, any strides, any dtypes (integers copy by value).
pub fn copy(x: &View, out: &View) -> Result<(), String> {
    let n = out.numel();
    let ints = !x.dtype.is_float() && !out.dtype.is_float();
    let nchunks = chunks_for(n, 16384);
    let per = n.div_ceil(nchunks);
    (0..nchunks).into_par_iter().for_each(|c| {
        for i in c * per..((c + 1) * per).min(n) {
            let si = offset_in(x.shape, x.strides, i);
            let di = offset_in(out.shape, out.strides, i);
            if ints {
                out.st_i64(di, x.ld_i64(si));
            } else {
                out.st(di, x.ld(si));
            }
        }
    });
    Ok(())
}

/// out = value.
pub fn fill(value: f64, out: &View) -> Result<(), String> {
    let n = out.numel();
    for i in 0..n {
        let di = offset_in(out.shape, out.strides, i);
        if out.dtype.is_float() {
            out.st(di, value as f32);
        } else {
            out.st_i64(di, value as i64);
        }
    }
    Ok(())
}
