//! Grouped and depthwise convolutions computed directly, one (image, output channel) plane per
//! task. The im2col + GEMM path runs one small GEMM per group: a 960-channel depthwise conv
//! cost 960 GEMMs of one row each (about 20 us per channel whatever the plane's size). Here each
//! task copies its input planes once into a zero-padded f32 buffer (so the tap loops need no
//! bounds checks and any dtype or stride is read the same way), then adds weight x shifted row
//! for every tap; with stride 1 the innermost loop is a contiguous axpy the compiler vectorizes.

use super::activation::bias_act;
use super::conv::ConvParams;
use super::simd::multiversion;
use super::view::{with_scratch, View};
use npu_program::program::ConvDims;
use rayon::prelude::*;

/// Groups with at most this many input channels run here; wider groups amortize im2col and
/// a GEMM per group better.
pub const DIRECT_MAX_GROUP_CHANNELS: usize = 16;

/// Whether `conv2d` should take the direct path for these dimensions.
pub fn is_direct(d: &ConvDims) -> bool {
    d.groups > 1 && d.cg <= DIRECT_MAX_GROUP_CHANNELS
}

pub fn conv_grouped(
    p: &ConvParams,
    d: &ConvDims,
    x: &View,
    w: &View,
    bias: Option<&View>,
    out: &View,
) {
    let ConvDims {
        n,
        h,
        w: wd,
        o,
        cg,
        kh,
        kw,
        oh,
        ow,
        groups,
        ..
    } = *d;
    let og = o / groups;
    let [sh, sw] = p.stride;
    let [dh, dw] = p.dilation;
    let [ph, pw] = p.padding;
    let (hp, wp) = (h + 2 * ph, wd + 2 * pw);
    let pix = oh * ow;
    let geom = Taps {
        kh,
        kw,
        oh,
        ow,
        wp,
        stride: [sh, sw],
        dilation: [dh, dw],
    };
    (0..n * o).into_par_iter().for_each(|task| {
        let (ni, oi) = (task / o, task % o);
        let gi = oi / og;
        // the padded plane, plus a tail the wide rows of `add_taps` may read past its end;
        // the accumulator: oh rows wp wide at stride 1 (see `add_taps`), else oh x ow
        let pad_len = hp * wp + (kw - 1) * dw;
        let acc_len = if sh == 1 && sw == 1 { oh * wp } else { pix };
        with_scratch(0, pad_len + acc_len + kh * kw, |buf| {
            let (pad, rest) = buf.split_at_mut(pad_len);
            let (acc, taps) = rest.split_at_mut(acc_len);
            acc.fill(0.0);
            for ci in 0..cg {
                let c = gi * cg + ci;
                pad.fill(0.0);
                let xbase = ni * x.strides[0] + c * x.strides[1];
                for y in 0..h {
                    let dst = (y + ph) * wp + pw;
                    x.gather(
                        xbase + y * x.strides[2],
                        x.strides[3],
                        &mut pad[dst..dst + wd],
                    );
                }
                let wbase = oi * w.strides[0] + ci * w.strides[1];
                for i in 0..kh {
                    for j in 0..kw {
                        taps[i * kw + j] = w.ld(wbase + i * w.strides[2] + j * w.strides[3]);
                    }
                }
                add_taps(pad, acc, taps, geom);
            }
            if acc_len != pix {
                // the wide rows' first ow columns are the outputs
                for y in 1..oh {
                    acc.copy_within(y * wp..y * wp + ow, y * ow);
                }
            }
            let acc = &mut acc[..pix];
            let bv = bias.map_or(0.0, |b| b.ld(oi * b.strides[b.rank() - 1]));
            bias_act(acc, bv, p.act);
            let obase = ni * out.strides[0] + oi * out.strides[1];
            // Every output element is written by exactly one task, the one of its plane.
            for y in 0..oh {
                let row = &acc[y * ow..(y + 1) * ow];
                out.scatter(obase + y * out.strides[2], out.strides[3], row);
            }
        });
    });
}

/// Where one input plane's taps land: a kh x kw kernel over a zero-padded plane `wp` wide,
/// producing oh x ow outputs.
#[derive(Clone, Copy)]
struct Taps {
    kh: usize,
    kw: usize,
    oh: usize,
    ow: usize,
    wp: usize,
    stride: [usize; 2],
    dilation: [usize; 2],
}

multiversion! {
    /// acc[y, x] += taps[i, j] * pad[y * sh + i * dh, x * sw + j * dw] for every tap (i, j).
    /// With stride 1 every tap is one shift of the whole plane, so `acc` holds rows `wp` wide
    /// (the columns past `ow` are junk the caller drops) and each tap is one axpy of oh * wp
    /// elements instead of oh of ow (ConvNeXt's 7x7 taps over 16-wide planes: 49 loops
    /// instead of 784). Per output, the taps add in the same order either way.
    fn add_taps(pad: &[f32], acc: &mut [f32], taps: &[f32], t: Taps) {
        let ([sh, sw], [dh, dw], ow, wp) = (t.stride, t.dilation, t.ow, t.wp);
        for i in 0..t.kh {
            for j in 0..t.kw {
                let wv = taps[i * t.kw + j];
                if sh == 1 && sw == 1 {
                    let len = t.oh * wp;
                    let src = &pad[i * dh * wp + j * dw..][..len];
                    for (a, s) in acc[..len].iter_mut().zip(src) {
                        *a += wv * s;
                    }
                    continue;
                }
                for y in 0..t.oh {
                    let src = &pad[(y * sh + i * dh) * wp + j * dw..];
                    let dst = &mut acc[y * ow..(y + 1) * ow];
                    if sw == 1 {
                        for (a, s) in dst.iter_mut().zip(&src[..ow]) {
                            *a += wv * s;
                        }
                    } else {
                        for (xx, a) in dst.iter_mut().enumerate() {
                            *a += wv * src[xx * sw];
                        }
                    }
                }
            }
        }
    }
}
