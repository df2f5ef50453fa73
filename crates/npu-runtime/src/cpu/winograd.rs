//! 3x3 stride-1 convolutions by Winograd's minimal filtering F(2x2, 3x3) (Lavin and Gray,
//! 2015): every 2x2 block of outputs takes 16 multiplies per input channel instead of 36, so
//! the 16 GEMMs that replace im2col + GEMM do 4/9 of its work. The filters are transformed
//! once at prepare ([`prepare`], U = G g Gᵀ computed in f64); per run the input is transformed
//! tile by tile (V = Bᵀ d B), multiplied (M = U V, one GEMM per tile position), and
//! transformed back (Y = Aᵀ M A) with the bias and activation of the one store.
//!
//! Accuracy: the transforms add and subtract a handful of products, so the result differs from
//! the direct sum by a few f32 roundings (relative 1e-6 on ResNet's layers against the f64
//! reference; see the tests), against the 2.25x fewer multiplies. Planes under
//! [`MIN_TILES`] tiles (ResNet's 7x7 last stage) keep im2col: their GEMMs would be too
//! narrow to win.

use super::activation::bias_act;
use super::conv::ConvParams;
use super::gemm::{matmul, Mat};
use super::view::{with_scratch, SendPtr, View};
use super::Buf;
use npu_program::program::{ConvDims, Slot};
use npu_program::Program;
use rayon::prelude::*;
use std::sync::Arc;

/// The fewest 2x2 output tiles per image for which a convolution runs here (14x14 outputs).
pub(crate) const MIN_TILES: usize = 49;

/// A convolution's filters after the transform: `u[xi][o][c]`, xi = 4 i + j over the 4x4
/// transformed tap grid.
pub(crate) struct Filters {
    u: Vec<f32>,
    o: usize,
    c: usize,
}

/// Whether a convolution takes this path (given transformed filters).
pub(crate) fn suits(p: &ConvParams, d: &ConvDims) -> bool {
    d.groups == 1
        && (d.kh, d.kw) == (3, 3)
        && p.stride == [1, 1]
        && p.dilation == [1, 1]
        && d.oh.div_ceil(2) * d.ow.div_ceil(2) >= MIN_TILES
}

/// U = G g Gᵀ for one 3x3 filter g (row-major), in f64.
fn filter_transform(g: [f64; 9]) -> [f64; 16] {
    // G = [[1, 0, 0], [1/2, 1/2, 1/2], [1/2, -1/2, 1/2], [0, 0, 1]]
    let col = |a: f64, b: f64, c: f64| [a, 0.5 * (a + b + c), 0.5 * (a - b + c), c];
    // t = G g: 4 rows x 3 columns
    let mut t = [[0f64; 3]; 4];
    for j in 0..3 {
        let v = col(g[j], g[3 + j], g[6 + j]);
        for i in 0..4 {
            t[i][j] = v[i];
        }
    }
    let mut u = [0f64; 16];
    for i in 0..4 {
        let v = col(t[i][0], t[i][1], t[i][2]);
        u[i * 4..i * 4 + 4].copy_from_slice(&v);
    }
    u
}

/// The transformed filters of a [O, C, 3, 3] weight view.
fn transform_filters(w: &View, o: usize, c: usize) -> Filters {
    let mut u = vec![0f32; 16 * o * c];
    for oi in 0..o {
        for ci in 0..c {
            let base = oi * w.strides[0] + ci * w.strides[1];
            let mut g = [0f64; 9];
            for (k, gk) in g.iter_mut().enumerate() {
                *gk = f64::from(w.ld(base + (k / 3) * w.strides[2] + (k % 3) * w.strides[3]));
            }
            for (xi, v) in filter_transform(g).into_iter().enumerate() {
                u[(xi * o + oi) * c + ci] = v as f32;
            }
        }
    }
    Filters { u, o, c }
}

/// Per step of `program`, the transformed filters of the convolutions that take this path.
pub(crate) fn prepare(program: &Program, weights: &[Arc<Buf>]) -> Vec<Option<Arc<Filters>>> {
    program
        .steps
        .iter()
        .map(|step| {
            let p = ConvParams::of(&step.kernel)?;
            let (x, wb, out) = (&step.inputs[0], &step.inputs[1], &step.outputs[0]);
            let Slot::Weight(wi) = wb.slot else {
                return None;
            };
            let d = ConvDims::check(
                &x.shape,
                &wb.shape,
                step.inputs.get(2).map(|b| &b.shape[..]),
                &out.shape,
                p.stride,
                p.padding,
                p.dilation,
                p.groups,
            )
            .ok()?;
            if !suits(&p, &d) {
                return None;
            }
            let buf = weights.get(wi as usize)?;
            let w = View {
                // read only: the view is used for loads
                ptr: buf.bytes().as_ptr().wrapping_add(wb.byte_offset as usize) as *mut u8,
                dtype: wb.dtype,
                shape: &wb.shape,
                strides: &wb.strides,
            };
            Some(Arc::new(transform_filters(&w, d.o, d.c)))
        })
        .collect()
}

/// V = Bᵀ d B for one 4x4 input tile d (row-major).
#[inline(always)]
fn input_transform(d: &[f32; 16]) -> [f32; 16] {
    // Bᵀ = [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]]
    let mut t = [0f32; 16];
    for j in 0..4 {
        let (d0, d1, d2, d3) = (d[j], d[4 + j], d[8 + j], d[12 + j]);
        t[j] = d0 - d2;
        t[4 + j] = d1 + d2;
        t[8 + j] = d2 - d1;
        t[12 + j] = d1 - d3;
    }
    let mut v = [0f32; 16];
    for i in 0..4 {
        let (t0, t1, t2, t3) = (t[i * 4], t[i * 4 + 1], t[i * 4 + 2], t[i * 4 + 3]);
        v[i * 4] = t0 - t2;
        v[i * 4 + 1] = t1 + t2;
        v[i * 4 + 2] = t2 - t1;
        v[i * 4 + 3] = t1 - t3;
    }
    v
}

/// Y = Aᵀ m A for one 4x4 product tile m: the 2x2 outputs, row-major.
#[inline(always)]
fn output_transform(m: &[f32; 16]) -> [f32; 4] {
    // Aᵀ = [[1, 1, 1, 0], [0, 1, -1, -1]]
    let mut t = [0f32; 8];
    for j in 0..4 {
        let (m0, m1, m2, m3) = (m[j], m[4 + j], m[8 + j], m[12 + j]);
        t[j] = m0 + m1 + m2;
        t[4 + j] = m1 - m2 - m3;
    }
    let mut y = [0f32; 4];
    for a in 0..2 {
        let (t0, t1, t2, t3) = (t[a * 4], t[a * 4 + 1], t[a * 4 + 2], t[a * 4 + 3]);
        y[a * 2] = t0 + t1 + t2;
        y[a * 2 + 1] = t1 - t2 - t3;
    }
    y
}

/// The convolution of x by the transformed filters f, plus bias and activation, into out.
pub(crate) fn conv(
    p: &ConvParams,
    d: &ConvDims,
    x: &View,
    f: &Filters,
    bias: Option<&View>,
    out: &View,
) {
    let (o, c) = (f.o, f.c);
    let (ty, tx) = (d.oh.div_ceil(2), d.ow.div_ceil(2));
    let tiles = ty * tx;
    // the padded plane covering every tile: rows 2 ty + 2, columns 2 tx + 2
    let (ph, pw) = (p.padding[0], p.padding[1]);
    let (hp, wp) = (2 * ty + 2, 2 * tx + 2);
    // V and M hold 16 matrices each, one per tile position xi, read and written as 16
    // streams; 32 floats between the matrices keep the streams off one cache set (ResNet's
    // 64 x 784 matrices are exactly 49 pages apart: the input transform ran 4x slower)
    let (vs, ms) = (c * tiles + 32, o * tiles + 32);
    for ni in 0..d.n {
        with_scratch(1, 16 * vs, |v| {
            with_scratch(2, 16 * ms, |m| {
                // V[xi][ci][t]
                let vp = SendPtr(v.as_mut_ptr());
                (0..c).into_par_iter().for_each(|ci| {
                    with_scratch(0, hp * wp, |pad| {
                        pad.fill(0.0);
                        let xb = ni * x.strides[0] + ci * x.strides[1];
                        for y in 0..d.h.min(hp.saturating_sub(ph)) {
                            let row = &mut pad[(y + ph) * wp..(y + ph + 1) * wp];
                            let n = d.w.min(wp.saturating_sub(pw));
                            x.gather(xb + y * x.strides[2], x.strides[3], &mut row[pw..pw + n]);
                        }
                        for t in 0..tiles {
                            let (r0, c0) = (2 * (t / tx), 2 * (t % tx));
                            let mut dt = [0f32; 16];
                            for i in 0..4 {
                                let src = &pad[(r0 + i) * wp + c0..][..4];
                                dt[i * 4..i * 4 + 4].copy_from_slice(src);
                            }
                            let vt = input_transform(&dt);
                            for (xi, val) in vt.into_iter().enumerate() {
                                // SAFETY: (xi, ci, t) is written by this task only.
                                unsafe { *vp.get().add(xi * vs + ci * tiles + t) = val };
                            }
                        }
                    });
                });
                // M[xi] = U[xi] [o, c] x V[xi] [c, tiles]
                let mp = SendPtr(m.as_mut_ptr());
                let (up, vr) = (SendPtr(f.u.as_ptr() as *mut f32), SendPtr(vp.get()));
                (0..16).into_par_iter().for_each(|xi| {
                    // SAFETY: each xi reads its own U and V blocks and writes its own M block.
                    unsafe {
                        matmul(
                            o,
                            tiles,
                            c,
                            mp.get().add(xi * ms),
                            tiles as isize,
                            1,
                            Mat {
                                ptr: up.get().add(xi * o * c),
                                rs: c as isize,
                                cs: 1,
                            },
                            Mat {
                                ptr: vr.get().add(xi * vs),
                                rs: tiles as isize,
                                cs: 1,
                            },
                        )
                    };
                });
                let m = &*m;
                (0..o).into_par_iter().for_each(|oi| {
                    with_scratch(0, d.oh * d.ow, |plane| {
                        for t in 0..tiles {
                            let (r0, c0) = (2 * (t / tx), 2 * (t % tx));
                            let mut mt = [0f32; 16];
                            for (xi, mv) in mt.iter_mut().enumerate() {
                                *mv = m[xi * ms + oi * tiles + t];
                            }
                            let y = output_transform(&mt);
                            for a in 0..2 {
                                for b in 0..2 {
                                    let (r, cc) = (r0 + a, c0 + b);
                                    if r < d.oh && cc < d.ow {
                                        plane[r * d.ow + cc] = y[a * 2 + b];
                                    }
                                }
                            }
                        }
                        let bv = bias.map_or(0.0, |b| b.ld(oi * b.strides[b.rank() - 1]));
                        bias_act(plane, bv, p.act);
                        let ob = ni * out.strides[0] + oi * out.strides[1];
                        // Every output element is written by exactly one task.
                        for r in 0..d.oh {
                            let row = &plane[r * d.ow..(r + 1) * d.ow];
                            out.scatter(ob + r * out.strides[2], out.strides[3], row);
                        }
                    });
                });
            });
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use npu_ir::DType;

    fn view<'a>(v: &'a mut [f32], shape: &'a [usize], strides: &'a [usize]) -> View<'a> {
        View {
            ptr: v.as_mut_ptr() as *mut u8,
            dtype: DType::F32,
            shape,
            strides,
        }
    }

    /// Against the direct sum in f64, on a ResNet-like layer with odd sizes (a partial last
    /// tile) and padding 1, and a plane without padding.
    #[test]
    fn matches_the_direct_sum() {
        for (n, c, h, w, o, pad) in [(2, 5, 15, 17, 4, 1), (1, 3, 16, 16, 2, 0)] {
            let (oh, ow) = (h + 2 * pad - 2, w + 2 * pad - 2);
            let mut seed = 7u64;
            let mut rnd = || {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            };
            let mut xv: Vec<f32> = (0..n * c * h * w).map(|_| rnd()).collect();
            let mut wv: Vec<f32> = (0..o * c * 9).map(|_| rnd()).collect();
            let mut bv: Vec<f32> = (0..o).map(|_| rnd()).collect();
            let mut yv = vec![0f32; n * o * oh * ow];
            let (xs, ws, bs, ys) = ([n, c, h, w], [o, c, 3, 3], [o], [n, o, oh, ow]);
            let st = |s: &[usize]| npu_program::program::dense_strides(s);
            let (xst, wst, bst, yst) = (st(&xs), st(&ws), st(&bs), st(&ys));
            let p = ConvParams {
                stride: [1, 1],
                padding: [pad, pad],
                dilation: [1, 1],
                groups: 1,
                act: None,
            };
            let d = ConvDims::check(&xs, &ws, Some(&bs), &ys, [1, 1], [pad, pad], [1, 1], 1)
                .expect("dims");
            let f = transform_filters(&view(&mut wv, &ws, &wst), o, c);
            let (x, b) = (view(&mut xv, &xs, &xst), view(&mut bv, &bs, &bst));
            conv(&p, &d, &x, &f, Some(&b), &view(&mut yv, &ys, &yst));
            let at = |v: &[f32], s: &[usize], i: [usize; 4]| {
                f64::from(v[((i[0] * s[1] + i[1]) * s[2] + i[2]) * s[3] + i[3]])
            };
            let mut worst = 0f64;
            for ni in 0..n {
                for (oi, &bias) in bv.iter().enumerate() {
                    for y in 0..oh {
                        for xx in 0..ow {
                            let mut want = f64::from(bias);
                            for ci in 0..c {
                                for i in 0..3 {
                                    for j in 0..3 {
                                        let (yy, xw) = (y + i, xx + j);
                                        if yy < pad || xw < pad || yy - pad >= h || xw - pad >= w {
                                            continue;
                                        }
                                        want += at(&xv, &xs, [ni, ci, yy - pad, xw - pad])
                                            * at(&wv, &ws, [oi, ci, i, j]);
                                    }
                                }
                            }
                            let got = at(&yv, &ys, [ni, oi, y, xx]);
                            worst = worst.max((got - want).abs());
                        }
                    }
                }
            }
            assert!(worst < 1e-5, "worst error {worst}");
        }
    }
}
