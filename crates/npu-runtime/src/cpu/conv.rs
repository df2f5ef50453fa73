//! NCHW 2-D convolution (groups, stride, padding, dilation, bias, fused activation) as
//! im2col + GEMM; a 1x1/stride-1/no-padding conv over f32 reads the input directly; narrow
//! groups (depthwise) go to `conv_grouped`, 3x3 stride-1 ones with filters transformed at
//! prepare to `winograd`.

use super::activation::bias_act;
use super::conv_grouped;
use super::gemm::{epilogue, matmul, Epilogue, Mat};
use super::view::{with_scratch, SendPtr, View};
use super::winograd;
use npu_ir::UnaryOp;
use npu_program::program::{ConvDims, Kernel};
use rayon::prelude::*;

/// Output channels per weight conversion tile.
const CONV_W_TILE: usize = 128;

#[derive(Clone, Copy)]
pub struct ConvParams {
    pub stride: [usize; 2],
    pub padding: [usize; 2],
    pub dilation: [usize; 2],
    pub groups: usize,
    pub act: Option<UnaryOp>,
}

impl ConvParams {
    /// A `Kernel::Conv2d`'s parameters (None for any other kernel); `act` is the activation
    /// after the residual when the kernel has one (see [`conv2d`]).
    pub fn of(kernel: &Kernel) -> Option<ConvParams> {
        let Kernel::Conv2d {
            stride,
            padding,
            dilation,
            groups,
            act,
            ..
        } = kernel
        else {
            return None;
        };
        Some(ConvParams {
            stride: *stride,
            padding: *padding,
            dilation: *dilation,
            groups: *groups,
            act: *act,
        })
    }
}

/// `filters`: the weight transformed at prepare for [`winograd`], when the step takes it.
/// `residual`: `Kernel::Conv2d { residual }`'s last operand, added before `p.act`. The GEMM
/// path adds it in its per-channel epilogue when the output and the residual are f32 planes
/// (the `cpu` target's layout: the rows are still in cache, and no second pass reads the
/// output); every other path runs without the activation and returns `false`, and the caller
/// finishes with `Kernel::split_residual_conv`'s in-place step. Returns whether the residual
/// and the activation were applied.
pub fn conv2d(
    p: &ConvParams,
    x: &View,
    w: &View,
    bias: Option<&View>,
    residual: Option<&View>,
    out: &View,
    filters: Option<&winograd::Filters>,
) -> Result<bool, String> {
    let act_after = p.act;
    let alone = ConvParams { act: None, ..*p };
    let p = if residual.is_some() { &alone } else { p };
    let dims = ConvDims::check(
        x.shape,
        w.shape,
        bias.map(|b| b.shape),
        out.shape,
        p.stride,
        p.padding,
        p.dilation,
        p.groups,
    )?;
    if let Some(f) = filters.filter(|_| winograd::suits(p, &dims)) {
        winograd::conv(p, &dims, x, f, bias, out);
        return Ok(false);
    }
    if conv_grouped::is_direct(&dims) {
        conv_grouped::conv_grouped(p, &dims, x, w, bias, out);
        return Ok(false);
    }
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
        groups: g,
        ..
    } = dims;
    let og = o / g;
    let kc = cg * kh * kw;
    let pix = oh * ow;
    let one_by_one = kh == 1
        && kw == 1
        && p.stride == [1, 1]
        && p.padding == [0, 0]
        && x.f32_ptr().is_some()
        && x.strides[3] == 1
        && (h == 1 || x.strides[2] == wd);
    let w_direct =
        w.f32_ptr().is_some() && w.strides[3] == 1 && w.strides[2] == kw && w.strides[1] == kh * kw;
    let out_direct =
        out.f32_ptr().is_some() && out.strides[3] == 1 && (oh == 1 || out.strides[2] == ow);
    // The residual in the epilogue, with the activation after it (see the doc above).
    let res = residual.filter(|r| {
        out_direct && r.f32_ptr().is_some() && r.strides[3] == 1 && (oh == 1 || r.strides[2] == ow)
    });
    let act = if res.is_some() { act_after } else { p.act };
    let epi = Epilogue {
        beta: 1.0,
        act,
        residual: false,
    };
    let bias_view: Option<View> = bias.copied();
    for ni in 0..n {
        for gi in 0..g {
            let xoff = ni * x.strides[0] + gi * cg * x.strides[1];
            with_scratch(1, if one_by_one { 0 } else { kc * pix }, |col| {
                let bmat = if one_by_one {
                    // SAFETY: the plane block lies in x.
                    Mat {
                        ptr: unsafe { (x.ptr as *const f32).add(xoff) },
                        rs: x.strides[1] as isize,
                        cs: 1,
                    }
                } else {
                    im2col(p, x, xoff, [cg, kh, kw], [oh, ow], col);
                    Mat {
                        ptr: col.as_ptr(),
                        rs: pix as isize,
                        cs: 1,
                    }
                };
                // f16/bf16 (or strided) weights are converted to f32 in tiles of output
                // channels, never whole.
                let tm = if w_direct { og } else { og.min(CONV_W_TILE) };
                with_scratch(2, if w_direct { 0 } else { tm * kc }, |wp| {
                    let woff = gi * og * w.strides[0];
                    let wtile = |m0: usize, rows: usize, wp: &mut [f32]| -> Mat {
                        if w_direct {
                            // SAFETY: the group's rows lie in w.
                            return Mat {
                                ptr: unsafe { (w.ptr as *const f32).add(woff + m0 * w.strides[0]) },
                                rs: w.strides[0] as isize,
                                cs: 1,
                            };
                        }
                        for r in 0..rows {
                            let oi = m0 + r;
                            for ci in 0..cg {
                                for i in 0..kh {
                                    let base = woff
                                        + oi * w.strides[0]
                                        + ci * w.strides[1]
                                        + i * w.strides[2];
                                    let d0 = r * kc + (ci * kh + i) * kw;
                                    w.gather(base, w.strides[3], &mut wp[d0..d0 + kw]);
                                }
                            }
                        }
                        Mat {
                            ptr: wp.as_ptr(),
                            rs: kc as isize,
                            cs: 1,
                        }
                    };
                    let ooff = ni * out.strides[0] + gi * og * out.strides[1];
                    with_scratch(3, if out_direct { 0 } else { og * pix }, |cbuf| {
                        let (dst, d_rs) = if out_direct {
                            // SAFETY: the output block lies in out.
                            (
                                unsafe { (out.ptr as *mut f32).add(ooff) },
                                out.strides[1] as isize,
                            )
                        } else {
                            (cbuf.as_mut_ptr(), pix as isize)
                        };
                        let mut m0 = 0;
                        while m0 < og {
                            let rows = tm.min(og - m0);
                            let amat = wtile(m0, rows, wp);
                            // SAFETY: sizes and strides describe the buffers above.
                            unsafe {
                                matmul(
                                    rows,
                                    pix,
                                    kc,
                                    dst.offset(m0 as isize * d_rs),
                                    d_rs,
                                    1,
                                    amat,
                                    bmat,
                                )
                            };
                            m0 += rows;
                        }
                        if out_direct {
                            if bias.is_some() || act.is_some() || res.is_some() {
                                let dp = SendPtr(dst);
                                (0..og).into_par_iter().for_each(|oi| {
                                    let bv = bias_view.map_or(0.0, |b| {
                                        b.ld((gi * og + oi) * b.strides[b.rank() - 1])
                                    });
                                    // SAFETY: row oi of the output block, written by one task.
                                    let row = unsafe {
                                        std::slice::from_raw_parts_mut(
                                            dp.get().offset(oi as isize * d_rs),
                                            pix,
                                        )
                                    };
                                    match res {
                                        Some(r) => {
                                            let at =
                                                ni * r.strides[0] + (gi * og + oi) * r.strides[1];
                                            // SAFETY: the residual's plane for this channel:
                                            // `pix` f32 values from `at` (strides checked above).
                                            let rrow = unsafe {
                                                std::slice::from_raw_parts(
                                                    (r.ptr as *const f32).add(at),
                                                    pix,
                                                )
                                            };
                                            bias_residual_act(row, bv, rrow, act);
                                        }
                                        None => bias_act(row, bv, act),
                                    }
                                });
                            }
                        } else {
                            // Output rows are channels, columns pixels.
                            let shape = [og, pix];
                            let strides = [out.strides[1], 1];
                            if out.strides[3] == 1 && (oh == 1 || out.strides[2] == ow) {
                                let ov = out.with(ooff, &shape, &strides);
                                let bstr = [1usize, 0];
                                let bshape = [og, pix];
                                let bv = bias_view.map(|b| {
                                    let bs = [b.strides[b.rank() - 1], 0];
                                    (
                                        b.with(gi * og * b.strides[b.rank() - 1], &bshape, &bstr),
                                        bs,
                                    )
                                });
                                match bv {
                                    Some((b, bs)) => {
                                        let bb = View { strides: &bs, ..b };
                                        epilogue(Some(cbuf), og, pix, &epi, Some((&bb, 0)), &ov, 0)
                                    }
                                    None => epilogue(Some(cbuf), og, pix, &epi, None, &ov, 0),
                                }
                            } else {
                                for oi in 0..og {
                                    let bv = bias_view.map_or(0.0, |b| {
                                        b.ld((gi * og + oi) * b.strides[b.rank() - 1])
                                    });
                                    let row = &mut cbuf[oi * pix..(oi + 1) * pix];
                                    bias_act(row, bv, act);
                                    for y in 0..oh {
                                        out.scatter(
                                            ooff + oi * out.strides[1] + y * out.strides[2],
                                            out.strides[3],
                                            &row[y * ow..(y + 1) * ow],
                                        );
                                    }
                                }
                            }
                        }
                    });
                });
            });
        }
    }
    Ok(res.is_some())
}

/// `act(v + bias + r)` over one output channel's plane in place (an f32 output: the
/// convolution's rounding is exact).
fn bias_residual_act(v: &mut [f32], bias: f32, r: &[f32], act: Option<UnaryOp>) {
    for (x, r) in v.iter_mut().zip(r) {
        *x = (*x + bias) + r;
    }
    if let Some(a) = act {
        super::activation::apply(a, v);
    }
}

/// col[(c, i, j), (y, x)] = x[c, y*s - p + i*d, x*s - p + j*d] (0 outside), f32.
fn im2col(
    p: &ConvParams,
    x: &View,
    xoff: usize,
    [_cg, kh, kw]: [usize; 3],
    [oh, ow]: [usize; 2],
    col: &mut [f32],
) {
    let (h, w) = (x.shape[2] as isize, x.shape[3] as isize);
    let pix = oh * ow;
    col.par_chunks_mut(pix).enumerate().for_each(|(r, dst)| {
        let (ci, i, j) = (r / (kh * kw), (r / kw) % kh, r % kw);
        let cbase = xoff + ci * x.strides[1];
        let dx = (j * p.dilation[1]) as isize - p.padding[1] as isize;
        let sw = p.stride[1] as isize;
        // Output columns whose input column falls inside [0, w).
        let lo = if dx >= 0 { 0 } else { ((-dx) + sw - 1) / sw };
        let hi = if w - dx <= 0 {
            0
        } else {
            ((w - dx + sw - 1) / sw).min(ow as isize)
        };
        for y in 0..oh {
            let yy = (y * p.stride[0] + i * p.dilation[0]) as isize - p.padding[0] as isize;
            let row = &mut dst[y * ow..(y + 1) * ow];
            if yy < 0 || yy >= h || lo >= hi {
                row.fill(0.0);
                continue;
            }
            row[..lo as usize].fill(0.0);
            row[hi as usize..].fill(0.0);
            let start = (lo * sw + dx) as usize;
            x.gather(
                cbase + yy as usize * x.strides[2] + start * x.strides[3],
                p.stride[1] * x.strides[3],
                &mut row[lo as usize..hi as usize],
            );
        }
    });
}
