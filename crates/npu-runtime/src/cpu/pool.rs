//! NCHW max/average pooling and adaptive average pooling (ATen window semantics).

use super::view::{with_scratch, View};
use npu_program::program::PoolKind;
use rayon::prelude::*;

/// The taps `i` of a window starting at `start` (dilation `d`, `k` taps) that land in
/// `0..len`: the loop runs over these alone, so a huge padded window costs what it reads.
fn in_bounds(start: isize, k: usize, d: usize, len: isize) -> std::ops::Range<usize> {
    let d = d.max(1) as isize;
    let lo = if start < 0 { (-start + d - 1) / d } else { 0 };
    let hi = if start >= len {
        0
    } else {
        (len - 1 - start) / d + 1
    };
    let (lo, hi) = (lo.max(0) as usize, (hi.max(0) as usize).min(k));
    lo..hi.max(lo)
}

pub fn pool2d(
    kind: PoolKind,
    k: [usize; 2],
    s: [usize; 2],
    p: [usize; 2],
    d: [usize; 2],
    x: &View,
    out: &View,
) -> Result<(), String> {
    let (n, c, h, w) = (
        x.shape[0],
        x.shape[1],
        x.shape[2] as isize,
        x.shape[3] as isize,
    );
    let (oh, ow) = (out.shape[2], out.shape[3]);
    let (hu, wu) = (h as usize, w as usize);
    (0..n * c).into_par_iter().for_each(|plane| {
        let (ni, ci) = (plane / c, plane % c);
        let xb = ni * x.strides[0] + ci * x.strides[1];
        let ob = ni * out.strides[0] + ci * out.strides[1];
        // The plane once in f32, then windows over plain slices.
        // max pooling also keeps every input row's window maxima ([h, ow])
        // and the even and odd elements of a row (stride-2 windows)
        let (hmax_len, parity_len) = if kind == PoolKind::Max {
            (hu * ow, wu + 2)
        } else {
            (0, 0)
        };
        with_scratch(0, hu * wu + ow + hmax_len + parity_len, |buf| {
            let (img, rest) = buf.split_at_mut(hu * wu);
            let (orow, rest) = rest.split_at_mut(ow);
            let (hmax, parity) = rest.split_at_mut(hmax_len);
            for yy in 0..hu {
                x.gather(
                    xb + yy * x.strides[2],
                    x.strides[3],
                    &mut img[yy * wu..(yy + 1) * wu],
                );
            }
            let PoolKind::Avg {
                count_include_pad,
                divisor,
            } = kind
            else {
                max_pool_plane(
                    img,
                    [hu, wu],
                    hmax,
                    parity,
                    orow,
                    [oh, ow],
                    k,
                    s,
                    p,
                    d,
                    |oy, row| out.scatter(ob + oy * out.strides[2], out.strides[3], row),
                );
                return;
            };
            for oy in 0..oh {
                let hs = (oy * s[0]) as isize - p[0] as isize;
                for (ox, o) in orow.iter_mut().enumerate() {
                    let ws = (ox * s[1]) as isize - p[1] as isize;
                    let he = (hs + k[0] as isize).min(h + p[0] as isize);
                    let we = (ws + k[1] as isize).min(w + p[1] as isize);
                    let pool = (he - hs) * (we - ws);
                    let (h0, w0) = (hs.max(0), ws.max(0));
                    let (h1, w1) = (he.min(h), we.min(w));
                    let mut sum = 0.0f32;
                    for yy in h0..h1 {
                        let row = &img[yy as usize * wu..(yy as usize + 1) * wu];
                        for xx in w0..w1 {
                            sum += row[xx as usize];
                        }
                    }
                    let div = match divisor {
                        Some(dv) => dv as f32,
                        None if count_include_pad => pool as f32,
                        None => ((h1 - h0).max(0) * (w1 - w0).max(0)) as f32,
                    };
                    *o = sum / div;
                }
                out.scatter(ob + oy * out.strides[2], out.strides[3], orow);
            }
        });
    });
    Ok(())
}

/// NaN-propagating max (ATen's max pooling: a NaN in the window is the result), written as a
/// select so that loops over it vectorize.
#[inline(always)]
fn nan_max(a: f32, b: f32) -> f32 {
    if b > a || b.is_nan() {
        b
    } else {
        a
    }
}

/// Max pooling of one f32 plane, separably: every input row's window maxima along x into
/// `hmax` (`[h, ow]`), then each output row as the max of its window's rows of `hmax`, one
/// vectorizable pass per tap. Taps outside the plane are skipped (a window with none is
/// -inf). `emit(oy, row)` stores an output row. Along x, stride-2 windows without dilation
/// (ResNet's stem pooling) split the row into its even and odd elements (`parity`, w + 2
/// long) so that each tap of the unclipped outputs is one contiguous vectorizable pass too
/// (ResNet-18's stem pooling on one AMD EPYC core: 2.2-2.5 ms with the strided scalar loop,
/// 1.1-1.4 ms so).
#[allow(clippy::too_many_arguments)]
fn max_pool_plane(
    img: &[f32],
    [h, w]: [usize; 2],
    hmax: &mut [f32],
    parity: &mut [f32],
    orow: &mut [f32],
    [oh, ow]: [usize; 2],
    k: [usize; 2],
    s: [usize; 2],
    p: [usize; 2],
    d: [usize; 2],
    mut emit: impl FnMut(usize, &[f32]),
) {
    // Outputs lo..hi have every tap inside the row (no bounds per tap); the rest clip.
    let (kw, sw, pw, dw) = (k[1].max(1), s[1].max(1), p[1], d[1].max(1));
    let lo = pw.div_ceil(sw).min(ow);
    let span = (kw - 1) * dw;
    let hi = if w + pw > span {
        ((w + pw - span - 1) / sw + 1).clamp(lo, ow)
    } else {
        lo
    };
    for yy in 0..h {
        let row = &img[yy * w..(yy + 1) * w];
        let hr = &mut hmax[yy * ow..(yy + 1) * ow];
        for ox in (0..lo).chain(hi..ow) {
            let ws = (ox * sw) as isize - pw as isize;
            let mut m = f32::NEG_INFINITY;
            for j in in_bounds(ws, kw, dw, w as isize) {
                m = nan_max(m, row[(ws + (j * dw) as isize) as usize]);
            }
            hr[ox] = m;
        }
        if sw == 2 && dw == 1 && hi > lo {
            // tap j of output ox reads 2 ox - pw + j: even[ox + q / 2] for even q = j - pw,
            // odd[ox + (q - 1) / 2] for odd q (q >= -pw; lo's windows start in the row)
            let (even, odd) = parity.split_at_mut(w.div_ceil(2) + 1);
            let pairs = row.chunks_exact(2);
            if let [last] = pairs.remainder() {
                even[w / 2] = *last;
            }
            for ((pair, e), o) in pairs.zip(even.iter_mut()).zip(odd.iter_mut()) {
                *e = pair[0];
                *o = pair[1];
            }
            let dst = &mut hr[lo..hi];
            dst.fill(f32::NEG_INFINITY);
            for j in 0..kw {
                let q = j as isize - pw as isize;
                let (src, shift) = if q.rem_euclid(2) == 0 {
                    (&even[..], q.div_euclid(2))
                } else {
                    (&odd[..], (q - 1).div_euclid(2))
                };
                let start = (lo as isize + shift) as usize;
                for (o, &v) in dst.iter_mut().zip(&src[start..start + (hi - lo)]) {
                    *o = nan_max(*o, v);
                }
            }
        } else {
            for (ox, o) in hr.iter_mut().enumerate().take(hi).skip(lo) {
                let ws = ox * sw - pw;
                let mut m = row[ws];
                for j in 1..kw {
                    m = nan_max(m, row[ws + j * dw]);
                }
                *o = m;
            }
        }
    }
    for oy in 0..oh {
        let hs = (oy * s[0]) as isize - p[0] as isize;
        orow.fill(f32::NEG_INFINITY);
        for i in in_bounds(hs, k[0], d[0], h as isize) {
            let yy = (hs + (i * d[0]) as isize) as usize;
            let hr = &hmax[yy * ow..(yy + 1) * ow];
            for (o, &v) in orow.iter_mut().zip(hr) {
                *o = nan_max(*o, v);
            }
        }
        emit(oy, orow);
    }
}

pub fn adaptive_avg_pool2d(x: &View, out: &View) -> Result<(), String> {
    let (n, c, h, w) = (x.shape[0], x.shape[1], x.shape[2], x.shape[3]);
    let (oh, ow) = (out.shape[2], out.shape[3]);
    (0..n * c).into_par_iter().for_each(|plane| {
        let (ni, ci) = (plane / c, plane % c);
        let xb = ni * x.strides[0] + ci * x.strides[1];
        let ob = ni * out.strides[0] + ci * out.strides[1];
        for oy in 0..oh {
            let (h0, h1) = (oy * h / oh, ((oy + 1) * h).div_ceil(oh));
            for ox in 0..ow {
                let (w0, w1) = (ox * w / ow, ((ox + 1) * w).div_ceil(ow));
                let mut sum = 0.0f32;
                for yy in h0..h1 {
                    for xx in w0..w1 {
                        sum += x.ld(xb + yy * x.strides[2] + xx * x.strides[3]);
                    }
                }
                let cnt = ((h1 - h0) * (w1 - w0)).max(1) as f32;
                out.st(ob + oy * out.strides[2] + ox * out.strides[3], sum / cnt);
            }
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::in_bounds;

    #[test]
    fn window_taps_clip_to_the_plane() {
        // start -3, dilation 2: taps 0, 1 land at -3, -1 (out), 2..=4 at 1, 3, 5 (in, len 6)
        assert_eq!(in_bounds(-3, 8, 2, 6), 2..5);
        assert_eq!(in_bounds(0, 3, 1, 8), 0..3);
        assert_eq!(in_bounds(7, 3, 1, 8), 0..1);
        assert_eq!(in_bounds(9, 3, 1, 8), 0..0);
        // a huge padded window: only the plane's taps
        assert_eq!(
            in_bounds(-(1 << 29), 1 << 30, 1, 8),
            (1 << 29)..((1 << 29) + 8)
        );
    }
}
