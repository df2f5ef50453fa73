//! Grouped and depthwise convolutions computed directly, one (image, output channel) plane per
//! task. The im2col + GEMM path runs one small GEMM per group: a 960-channel depthwise conv
//! cost 960 GEMMs of one row each (about 20 us per channel whatever the plane's size). Here each
//! task copies its input planes once into a zero-padded f32 buffer (so the tap loops need no
//! bounds checks and any dtype or stride is read the same way), then adds weight x shifted row
//! for every tap; with stride 1 the innermost loop is a contiguous axpy the compiler vectorizes.

use super::activation::bias_act;
use super::conv::ConvParams;
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
    (0..n * o).into_par_iter().for_each(|task| {
        let (ni, oi) = (task / o, task % o);
        let gi = oi / og;
        with_scratch(0, hp * wp + pix, |buf| {
            let (pad, acc) = buf.split_at_mut(hp * wp);
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
                        let wv = w.ld(wbase + i * w.strides[2] + j * w.strides[3]);
                        for y in 0..oh {
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
