//! Every CPU kernel against a straightforward f64 reference, on random odd shapes, batch > 1,
//! non-contiguous and broadcast (stride 0) bindings, f32/f16/bf16 storage.
#![allow(clippy::too_many_arguments, clippy::manual_range_contains)]

use npu_compiler::expr::{round_to, Expr, Instr};
use npu_compiler::program::{dense_strides, Kernel, PoolKind, ReduceOp};
use npu_ir::{BinaryOp, DType, TernaryOp, UnaryOp};
use npu_runtime::cpu::exec_step;
use npu_runtime::cpu::view::View;
use npu_runtime::tensor::{load_f32, store_f32};

struct Rng(u64);
impl Rng {
    fn f(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

/// A tensor with arbitrary strides over its own buffer.
struct T {
    dtype: DType,
    shape: Vec<usize>,
    strides: Vec<usize>,
    data: Vec<u8>,
}

impl T {
    fn strided(dtype: DType, shape: &[usize], strides: &[usize], rng: &mut Rng) -> T {
        let span = 1 + shape
            .iter()
            .zip(strides)
            .map(|(d, s)| (d - 1) * s)
            .sum::<usize>();
        let mut data = vec![0u8; span * dtype.size_bytes()];
        for i in 0..span {
            store_f32(&mut data, dtype, i, rng.f());
        }
        T {
            dtype,
            shape: shape.to_vec(),
            strides: strides.to_vec(),
            data,
        }
    }
    /// A dense tensor holding `values`.
    fn of(dtype: DType, shape: &[usize], values: &[f32]) -> T {
        let mut data = vec![0u8; values.len() * dtype.size_bytes()];
        for (i, &v) in values.iter().enumerate() {
            store_f32(&mut data, dtype, i, v);
        }
        T {
            dtype,
            shape: shape.to_vec(),
            strides: dense_strides(shape),
            data,
        }
    }
    fn rand(dtype: DType, shape: &[usize], rng: &mut Rng) -> T {
        Self::strided(dtype, shape, &dense_strides(shape), rng)
    }
    /// Dense, but stored transposed in the last two dims (a stride swap).
    fn transposed(dtype: DType, shape: &[usize], rng: &mut Rng) -> T {
        let r = shape.len();
        let mut s = shape.to_vec();
        s.swap(r - 1, r - 2);
        let mut st = dense_strides(&s);
        st.swap(r - 1, r - 2);
        Self::strided(dtype, shape, &st, rng)
    }
    fn view(&mut self) -> View<'_> {
        View {
            ptr: self.data.as_mut_ptr(),
            dtype: self.dtype,
            shape: &self.shape,
            strides: &self.strides,
        }
    }
    fn off(&self, idx: &[usize]) -> usize {
        idx.iter().zip(&self.strides).map(|(a, b)| a * b).sum()
    }
    fn at(&self, idx: &[usize]) -> f64 {
        f64::from(load_f32(&self.data, self.dtype, self.off(idx)))
    }
    fn set_i(&mut self, idx: &[usize], v: i64) {
        let o = self.off(idx);
        npu_runtime::tensor::store_i64(&mut self.data, self.dtype, o, v);
    }
}

fn each(shape: &[usize], mut f: impl FnMut(&[usize])) {
    let n: usize = shape.iter().product();
    let mut idx = vec![0; shape.len()];
    for mut lin in 0..n {
        for d in (0..shape.len()).rev() {
            idx[d] = lin % shape[d];
            lin /= shape[d];
        }
        f(&idx);
    }
}

fn tol(dt: DType) -> f64 {
    match dt {
        DType::F16 => 4e-3,
        DType::BF16 => 2e-2,
        _ => 1e-4,
    }
}

/// Compares out against ref(idx) with a tolerance relative to the output's scale.
fn check(out: &T, mut reference: impl FnMut(&[usize]) -> f64, what: &str) {
    let mut want = Vec::new();
    each(&out.shape, |i| want.push(reference(i)));
    let scale = want.iter().fold(1e-6f64, |a, b| a.max(b.abs()));
    let t = tol(out.dtype) * scale.max(1.0);
    let mut n = 0;
    each(&out.shape, |i| {
        let (g, w) = (out.at(i), want[n]);
        n += 1;
        assert!(
            (g - w).abs() <= t,
            "{what}: at {i:?} got {g}, want {w} (tol {t})"
        );
    });
}

fn run(k: &Kernel, ins: &mut [&mut T], out: &mut T) {
    let views: Vec<View> = ins
        .iter_mut()
        .map(|t| View {
            ptr: t.data.as_mut_ptr(),
            dtype: t.dtype,
            shape: &t.shape,
            strides: &t.strides,
        })
        .collect();
    exec_step(k, &views, &[out.view()]).unwrap();
}

fn run_err(k: &Kernel, ins: &mut [&mut T], out: &mut T) -> String {
    let views: Vec<View> = ins
        .iter_mut()
        .map(|t| View {
            ptr: t.data.as_mut_ptr(),
            dtype: t.dtype,
            shape: &t.shape,
            strides: &t.strides,
        })
        .collect();
    exec_step(k, &views, &[out.view()]).unwrap_err()
}

#[test]
fn gemm_matches_reference_on_odd_shapes_strides_and_dtypes() {
    let mut rng = Rng(7);
    for &(b, m, k, n) in &[
        (1, 64, 1, 128),
        (1, 128, 1, 64),
        (1, 130, 257, 300),
        (1, 1, 37, 45),
        (3, 5, 33, 7),
        (2, 2, 130, 97),
        (1, 67, 19, 71),
        (1, 1, 16, 3),
    ] {
        for dt in [DType::F32, DType::F16, DType::BF16] {
            for trans_b in [false, true] {
                let mut a = T::rand(dt, &[b, m, k], &mut rng);
                let mut bm = if trans_b {
                    T::transposed(dt, &[b, k, n], &mut rng)
                } else {
                    T::rand(dt, &[b, k, n], &mut rng)
                };
                // Bias broadcast over batch and rows.
                let mut bias = T::strided(dt, &[b, m, n], &[0, 0, 1], &mut rng);
                let mut out = T::rand(dt, &[b, m, n], &mut rng);
                let (alpha, beta) = (0.5f32, 2.0f32);
                let kern = Kernel::Gemm {
                    alpha,
                    beta,
                    act: Some(UnaryOp::Relu),
                    residual: false,
                    norm: None,
                };
                run(&kern, &mut [&mut a, &mut bm, &mut bias], &mut out);
                check(
                    &out,
                    |i| {
                        let s: f64 = (0..k)
                            .map(|kk| a.at(&[i[0], i[1], kk]) * bm.at(&[i[0], kk, i[2]]))
                            .sum();
                        (f64::from(alpha) * s + f64::from(beta) * bias.at(i)).max(0.0)
                    },
                    &format!("gemm b{b} m{m} k{k} n{n} {dt} trans {trans_b}"),
                );
            }
        }
    }
    // Non-contiguous output, broadcast batch of B (stride 0), no bias.
    let mut a = T::rand(DType::F32, &[2, 3, 5], &mut rng);
    let mut bm = T::strided(DType::F32, &[2, 5, 4], &[0, 4, 1], &mut rng);
    let mut out = T::strided(DType::F32, &[2, 3, 4], &[4, 8, 1], &mut rng);
    run(
        &Kernel::Gemm {
            alpha: 1.0,
            beta: 0.0,
            act: None,
            residual: false,
            norm: None,
        },
        &mut [&mut a, &mut bm],
        &mut out,
    );
    check(
        &out,
        |i| {
            (0..5)
                .map(|kk| a.at(&[i[0], i[1], kk]) * bm.at(&[i[0], kk, i[2]]))
                .sum()
        },
        "gemm strided out",
    );
}

/// A residual bias is added to the product rounded to the output dtype (PyTorch's
/// `r + linear(x)` in bf16 rounds twice): 1.0078125^2 = 1.01568... rounds to 1.015625, plus
/// 0.00390625 is 1.01953125, which rounds (to even) to 1.015625; one rounding of the exact
/// sum would give 1.0234375 (values found with PyTorch, which gives 1.015625).
#[test]
fn gemm_residual_rounds_the_product_first() {
    let bf = DType::BF16;
    for (residual, want) in [(true, 1.015625f32), (false, 1.0234375)] {
        let mut x = T::of(bf, &[1, 1], &[1.0078125]);
        let mut w = T::of(bf, &[1, 1], &[1.0078125]);
        let mut r = T::of(bf, &[1, 1], &[0.00390625]);
        let mut out = T::of(bf, &[1, 1], &[0.0]);
        let kern = Kernel::Gemm {
            alpha: 1.0,
            beta: 1.0,
            act: None,
            residual,
            norm: None,
        };
        run(&kern, &mut [&mut x, &mut w, &mut r], &mut out);
        assert_eq!(out.at(&[0, 0]) as f32, want, "residual {residual}");
    }
}

/// `norm`: a's rows RMS-normalized (rounded to a's dtype, times the weight, rounded again)
/// before the product, as the RmsNorm kernel computes them.
#[test]
fn gemm_with_an_rms_norm_prologue_matches_norm_then_gemm() {
    let mut rng = Rng(3);
    for (m, k, n, dt) in [
        (1, 64, 24, DType::BF16),
        (5, 37, 9, DType::F32),
        (3, 128, 16, DType::F16),
    ] {
        let mut a = T::rand(dt, &[m, k], &mut rng);
        let mut w = T::transposed(dt, &[k, n], &mut rng);
        let mut g = T::rand(dt, &[k], &mut rng);
        let mut out = T::rand(dt, &[m, n], &mut rng);
        let kern = Kernel::Gemm {
            alpha: 1.0,
            beta: 1.0,
            act: None,
            residual: false,
            norm: Some(1e-5),
        };
        run(&kern, &mut [&mut a, &mut w, &mut g], &mut out);
        let round = |v: f64| f64::from(npu_compiler::expr::round_to(dt, v as f32));
        check(
            &out,
            |i| {
                let ss: f64 = (0..k).map(|kk| a.at(&[i[0], kk]).powi(2)).sum();
                let inv = 1.0 / (ss / k as f64 + 1e-5).sqrt();
                (0..k)
                    .map(|kk| {
                        round(round(a.at(&[i[0], kk]) * inv) * g.at(&[kk])) * w.at(&[kk, i[1]])
                    })
                    .sum()
            },
            &format!("norm gemm {m}x{k}x{n} {dt}"),
        );
    }
}

fn conv_ref(
    x: &T,
    w: &T,
    bias: Option<&T>,
    s: [usize; 2],
    p: [usize; 2],
    d: [usize; 2],
    g: usize,
    i: &[usize],
) -> f64 {
    let (c, h, wd) = (x.shape[1], x.shape[2] as isize, x.shape[3] as isize);
    let (o, cg, kh, kw) = (w.shape[0], w.shape[1], w.shape[2], w.shape[3]);
    let og = o / g;
    let gi = i[1] / og;
    let _ = c;
    let mut acc = bias.map_or(0.0, |b| b.at(&[i[1]]));
    for ci in 0..cg {
        for a in 0..kh {
            for bb in 0..kw {
                let y = (i[2] * s[0] + a * d[0]) as isize - p[0] as isize;
                let xx = (i[3] * s[1] + bb * d[1]) as isize - p[1] as isize;
                if y >= 0 && y < h && xx >= 0 && xx < wd {
                    acc += x.at(&[i[0], gi * cg + ci, y as usize, xx as usize])
                        * w.at(&[i[1], ci, a, bb]);
                }
            }
        }
    }
    acc
}

#[test]
fn conv2d_matches_reference_with_groups_stride_padding_dilation() {
    let mut rng = Rng(11);
    // (n, c, h, w, o, k, stride, pad, dil, groups)
    let cases = [
        (2, 3, 11, 9, 5, 3, 1, 1, 1, 1),
        (1, 6, 10, 13, 9, 3, 2, 1, 1, 3),
        (3, 4, 7, 7, 4, 1, 1, 0, 1, 1),
        (1, 5, 12, 12, 7, 3, 2, 2, 2, 1),
        (1, 33, 5, 6, 35, 1, 2, 0, 1, 1),
        (2, 4, 8, 8, 4, 3, 1, 1, 1, 4),
        (1, 6, 6, 6, 300, 3, 1, 1, 1, 2),
        // Direct grouped path: depthwise x2 with stride and dilation, a 7x7 depthwise.
        (1, 8, 9, 10, 16, 5, 2, 2, 2, 8),
        (2, 12, 14, 14, 12, 7, 1, 3, 1, 12),
        // Wide groups (32 channels each) stay on im2col + GEMM.
        (1, 64, 5, 5, 8, 3, 1, 1, 1, 2),
    ];
    for &(n, c, h, wd, o, k, s, p, d, g) in &cases {
        for dt in [DType::F32, DType::F16] {
            let oh = (h + 2 * p - d * (k - 1) - 1) / s + 1;
            let ow = (wd + 2 * p - d * (k - 1) - 1) / s + 1;
            let mut x = T::rand(dt, &[n, c, h, wd], &mut rng);
            let mut w = T::rand(dt, &[o, c / g, k, k], &mut rng);
            let mut b = T::rand(dt, &[o], &mut rng);
            // Output with padded row pitch (non-contiguous) for f16, dense for f32.
            let mut out = if dt == DType::F16 {
                T::strided(
                    dt,
                    &[n, o, oh, ow],
                    &[o * oh * (ow + 3), oh * (ow + 3), ow + 3, 1],
                    &mut rng,
                )
            } else {
                T::rand(dt, &[n, o, oh, ow], &mut rng)
            };
            let kern = Kernel::Conv2d {
                stride: [s, s],
                padding: [p, p],
                dilation: [d, d],
                groups: g,
                act: Some(UnaryOp::Relu),
            };
            run(&kern, &mut [&mut x, &mut w, &mut b], &mut out);
            check(
                &out,
                |i| conv_ref(&x, &w, Some(&b), [s, s], [p, p], [d, d], g, i).max(0.0),
                &format!("conv {:?} {dt}", (n, c, h, wd, o, k, s, p, d, g)),
            );
        }
    }
}

#[test]
fn pooling_matches_aten_semantics() {
    let mut rng = Rng(3);
    let mut x = T::rand(DType::F32, &[2, 3, 9, 7], &mut rng);
    for kind in [
        PoolKind::Max,
        PoolKind::Avg {
            count_include_pad: true,
            divisor: None,
        },
        PoolKind::Avg {
            count_include_pad: false,
            divisor: None,
        },
        PoolKind::Avg {
            count_include_pad: true,
            divisor: Some(5),
        },
    ] {
        let (k, s, p) = (3usize, 2usize, 1usize);
        let (oh, ow) = ((9 + 2 * p - k) / s + 1, (7 + 2 * p - k) / s + 1);
        let mut out = T::rand(DType::F32, &[2, 3, oh, ow], &mut rng);
        run(
            &Kernel::Pool2d {
                kind,
                kernel: [k, k],
                stride: [s, s],
                padding: [p, p],
                dilation: [1, 1],
            },
            &mut [&mut x],
            &mut out,
        );
        check(
            &out,
            |i| {
                let mut vals = Vec::new();
                for a in 0..k {
                    for b in 0..k {
                        let y = (i[2] * s + a) as isize - p as isize;
                        let xx = (i[3] * s + b) as isize - p as isize;
                        if y >= 0 && y < 9 && xx >= 0 && xx < 7 {
                            vals.push(x.at(&[i[0], i[1], y as usize, xx as usize]));
                        }
                    }
                }
                match kind {
                    PoolKind::Max => vals.iter().copied().fold(f64::MIN, f64::max),
                    PoolKind::Avg {
                        divisor: Some(dv), ..
                    } => vals.iter().sum::<f64>() / dv as f64,
                    PoolKind::Avg {
                        count_include_pad: true,
                        ..
                    } => {
                        let y0 = (i[2] * s) as isize - p as isize;
                        let x0 = (i[3] * s) as isize - p as isize;
                        let y1 = (y0 + k as isize).min(9 + p as isize);
                        let x1 = (x0 + k as isize).min(7 + p as isize);
                        vals.iter().sum::<f64>() / ((y1 - y0) * (x1 - x0)) as f64
                    }
                    PoolKind::Avg { .. } => vals.iter().sum::<f64>() / vals.len() as f64,
                }
            },
            &format!("pool {kind:?}"),
        );
    }
    let mut out = T::rand(DType::F32, &[2, 3, 4, 3], &mut rng);
    run(&Kernel::AdaptiveAvgPool2d, &mut [&mut x], &mut out);
    check(
        &out,
        |i| {
            let (h0, h1) = (i[2] * 9 / 4, ((i[2] + 1) * 9).div_ceil(4));
            let (w0, w1) = (i[3] * 7 / 3, ((i[3] + 1) * 7).div_ceil(3));
            let mut s = 0.0;
            for y in h0..h1 {
                for xx in w0..w1 {
                    s += x.at(&[i[0], i[1], y, xx]);
                }
            }
            s / ((h1 - h0) * (w1 - w0)) as f64
        },
        "adaptive avg pool 9x7 -> 4x3",
    );
}

#[test]
fn elementwise_broadcasts_and_divides_by_scalars() {
    let mut rng = Rng(5);
    // relu((x + b) / 3) * y, with b broadcast along rows (stride 0) and y non-contiguous.
    let expr = Expr {
        code: vec![
            Instr::Load(0),
            Instr::Load(1),
            Instr::Binary(BinaryOp::Add),
            Instr::Const(3.0),
            Instr::Binary(BinaryOp::Div),
            Instr::Unary(UnaryOp::Relu),
            Instr::Load(2),
            Instr::Binary(BinaryOp::Mul),
            Instr::Cast(DType::BF16),
        ],
    };
    for dt in [DType::F32, DType::BF16, DType::F16] {
        let shape = [3, 5, 300];
        let mut x = T::rand(dt, &shape, &mut rng);
        let mut b = T::strided(dt, &shape, &[0, 0, 1], &mut rng);
        let mut y = T::strided(dt, &shape, &[1, 3, 15], &mut rng);
        let mut out = T::rand(dt, &shape, &mut rng);
        run(
            &Kernel::Elementwise { expr: expr.clone() },
            &mut [&mut x, &mut b, &mut y],
            &mut out,
        );
        check(
            &out,
            |i| {
                f64::from(round_to(
                    DType::BF16,
                    (((x.at(i) + b.at(i)) / 3.0).max(0.0) * y.at(i)) as f32,
                ))
            },
            &format!("elementwise {dt}"),
        );
    }
}

/// NaN and Inf as PyTorch has them (values checked against torch 2.11): relu, maximum/minimum
/// and clamp propagate NaN, fmax/fmin ignore it, sign(NaN) = 0, comparisons with NaN are
/// false and `ne` true; in f32 and bf16 storage, with bool results stored as bool.
#[test]
fn elementwise_nan_and_inf_follow_pytorch() {
    let (nan, inf) = (f32::NAN, f32::INFINITY);
    let x = [nan, inf, -inf, 0.0, -1.5, 2.0, nan, 1.0];
    let y = [1.0, nan, 3.0, nan, -inf, 2.0, nan, inf];
    let un = |u: UnaryOp| vec![Instr::Load(0), Instr::Unary(u)];
    let bin = |b: BinaryOp| vec![Instr::Load(0), Instr::Load(1), Instr::Binary(b)];
    let cases: Vec<(&str, Vec<Instr>, [f32; 8])> = vec![
        (
            "relu",
            un(UnaryOp::Relu),
            [nan, inf, 0.0, 0.0, 0.0, 2.0, nan, 1.0],
        ),
        (
            "sign",
            un(UnaryOp::Sign),
            [0.0, 1.0, -1.0, 0.0, -1.0, 1.0, 0.0, 1.0],
        ),
        (
            "isnan",
            un(UnaryOp::IsNan),
            [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0],
        ),
        (
            "isinf",
            un(UnaryOp::IsInf),
            [0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0],
        ),
        (
            "sigmoid",
            un(UnaryOp::Sigmoid),
            [
                nan,
                1.0,
                0.0,
                0.5,
                0.182_425_52,
                0.880_797_1,
                nan,
                0.731_058_6,
            ],
        ),
        (
            "maximum",
            bin(BinaryOp::Max),
            [nan, nan, 3.0, nan, -1.5, 2.0, nan, inf],
        ),
        (
            "minimum",
            bin(BinaryOp::Min),
            [nan, nan, -inf, nan, -inf, 2.0, nan, 1.0],
        ),
        (
            "fmax",
            bin(BinaryOp::Fmax),
            [1.0, inf, 3.0, 0.0, -1.5, 2.0, nan, inf],
        ),
        (
            "fmin",
            bin(BinaryOp::Fmin),
            [1.0, inf, -inf, 0.0, -inf, 2.0, nan, 1.0],
        ),
        (
            "eq",
            bin(BinaryOp::Eq),
            [0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0],
        ),
        (
            "ne",
            bin(BinaryOp::Ne),
            [1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0],
        ),
        (
            "lt",
            bin(BinaryOp::Lt),
            [0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0],
        ),
        (
            "ge",
            bin(BinaryOp::Ge),
            [0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0],
        ),
        (
            "clamp(-1, 1)",
            vec![
                Instr::Load(0),
                Instr::Clamp {
                    min: Some(-1.0),
                    max: Some(1.0),
                },
            ],
            [nan, 1.0, -1.0, 0.0, -1.0, 1.0, nan, 1.0],
        ),
        (
            "clamp(x, lo=y, hi=2)",
            vec![
                Instr::Load(0),
                Instr::Load(1),
                Instr::Const(2.0),
                Instr::Ternary(TernaryOp::Clamp),
            ],
            [nan, nan, 2.0, nan, -1.5, 2.0, nan, 2.0],
        ),
        (
            "where(x > 0, x, y)",
            vec![
                Instr::Load(0),
                Instr::Const(0.0),
                Instr::Binary(BinaryOp::Gt),
                Instr::Load(0),
                Instr::Load(1),
                Instr::Ternary(TernaryOp::Where),
            ],
            [1.0, inf, 3.0, nan, -inf, 2.0, nan, 1.0],
        ),
    ];
    for dt in [DType::F32, DType::BF16] {
        for (what, code, want) in &cases {
            let bool_result = matches!(*what, "isnan" | "isinf" | "eq" | "ne" | "lt" | "ge");
            let odt = if bool_result { DType::Bool } else { dt };
            let mk = |dtype: DType, v: &[f32]| {
                let mut data = vec![0u8; v.len() * dtype.size_bytes()];
                for (i, &x) in v.iter().enumerate() {
                    store_f32(&mut data, dtype, i, x);
                }
                T {
                    dtype,
                    shape: vec![v.len()],
                    strides: vec![1],
                    data,
                }
            };
            let (mut a, mut b, mut out) = (mk(dt, &x), mk(dt, &y), mk(odt, &[0.0; 8]));
            let expr = Expr { code: code.clone() };
            let k = Kernel::Elementwise { expr };
            let n = k_inputs(&k);
            let mut ins: Vec<&mut T> = vec![&mut a, &mut b];
            ins.truncate(n);
            run(&k, &mut ins, &mut out);
            for (i, w) in want.iter().enumerate() {
                let g = out.at(&[i]) as f32;
                let w = round_to(odt, *w);
                let ok = (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= 1e-2 * w.abs();
                assert!(ok, "{what} {dt}: [{i}] {} -> got {g}, want {w}", x[i]);
            }
        }
    }
}

fn k_inputs(k: &Kernel) -> usize {
    match k {
        Kernel::Elementwise { expr } => expr.num_inputs(),
        _ => 0,
    }
}

#[test]
fn softmax_with_broadcast_mask_and_norms_and_reduce() {
    let mut rng = Rng(9);
    let shape = [2, 3, 4, 37];
    let mut x = T::rand(DType::F32, &shape, &mut rng);
    let mut mask = T::strided(DType::F32, &shape, &[37, 0, 0, 1], &mut rng);
    for t in 20..37 {
        mask.data[t * 4..t * 4 + 4].copy_from_slice(&f32::MIN.to_le_bytes());
    }
    let mut out = T::rand(DType::F32, &shape, &mut rng);
    run(
        &Kernel::Softmax { scale: 0.7 },
        &mut [&mut x, &mut mask],
        &mut out,
    );
    check(
        &out,
        |i| {
            let row = |t: usize| {
                let j = [i[0], i[1], i[2], t];
                0.7 * x.at(&j) + mask.at(&j)
            };
            let m = (0..37).map(row).fold(f64::MIN, f64::max);
            let s: f64 = (0..37).map(|t| (row(t) - m).exp()).sum();
            (row(i[3]) - m).exp() / s
        },
        "masked softmax",
    );

    let mut x = T::strided(DType::F32, &[3, 5, 33], &[1, 99, 3], &mut rng);
    let mut w = T::rand(DType::F32, &[33], &mut rng);
    let mut out = T::rand(DType::F32, &[3, 5, 33], &mut rng);
    run(
        &Kernel::RmsNorm { eps: 1e-6 },
        &mut [&mut x, &mut w],
        &mut out,
    );
    check(
        &out,
        |i| {
            let ms: f64 = (0..33).map(|d| x.at(&[i[0], i[1], d]).powi(2)).sum::<f64>() / 33.0;
            x.at(i) / (ms + 1e-6).sqrt() * w.at(&[i[2]])
        },
        "rms_norm strided",
    );

    let mut b = T::rand(DType::F32, &[33], &mut rng);
    let mut x2 = T::rand(DType::F32, &[3, 5, 33], &mut rng);
    run(
        &Kernel::LayerNorm {
            eps: 1e-5,
            has_weight: true,
            has_bias: true,
        },
        &mut [&mut x2, &mut w, &mut b],
        &mut out,
    );
    check(
        &out,
        |i| {
            let mean: f64 = (0..33).map(|d| x2.at(&[i[0], i[1], d])).sum::<f64>() / 33.0;
            let var: f64 = (0..33)
                .map(|d| (x2.at(&[i[0], i[1], d]) - mean).powi(2))
                .sum::<f64>()
                / 33.0;
            (x2.at(i) - mean) / (var + 1e-5).sqrt() * w.at(&[i[2]]) + b.at(&[i[2]])
        },
        "layer_norm",
    );

    let mut r = T::rand(DType::F32, &[3, 1], &mut rng);
    let mut x3 = T::rand(DType::F32, &[3, 5, 7], &mut rng);
    run(
        &Kernel::Reduce {
            op: ReduceOp::Mean,
            reduced: 2,
        },
        &mut [&mut x3],
        &mut r,
    );
    check(
        &r,
        |i| {
            let mut s = 0.0;
            each(&[5, 7], |j| s += x3.at(&[i[0], j[0], j[1]]));
            s / 35.0
        },
        "reduce mean",
    );
}

#[test]
fn embedding_index_copy_rope_copy_fill() {
    let mut rng = Rng(13);
    let mut table = T::rand(DType::BF16, &[11, 6], &mut rng);
    let mut ids = T::rand(DType::I64, &[2, 3], &mut rng);
    let id_vals = [3i64, 0, 10, 7, 7, 1];
    each(&[2, 3], |i| {
        let v = id_vals[i[0] * 3 + i[1]];
        ids.set_i(i, v)
    });
    let mut out = T::rand(DType::F32, &[2, 3, 6], &mut rng);
    run(&Kernel::Embedding, &mut [&mut table, &mut ids], &mut out);
    check(
        &out,
        |i| table.at(&[id_vals[i[0] * 3 + i[1]] as usize, i[2]]),
        "embedding",
    );
    ids.set_i(&[1, 2], 11);
    let e = run_err(&Kernel::Embedding, &mut [&mut table, &mut ids], &mut out);
    assert!(e.contains("11"), "{e}");

    let mut dest = T::rand(DType::F32, &[1, 2, 9, 4], &mut rng);
    let before = T {
        data: dest.data.clone(),
        ..T::rand(DType::F32, &[1, 2, 9, 4], &mut rng)
    };
    let mut src = T::strided(DType::F32, &[1, 2, 3, 4], &[0, 4, 8, 1], &mut rng);
    let mut index = T::rand(DType::I64, &[3], &mut rng);
    for (i, v) in [5i64, 0, 8].iter().enumerate() {
        index.set_i(&[i], *v);
    }
    run(
        &Kernel::IndexCopy { axis: 2 },
        &mut [&mut index, &mut src],
        &mut dest,
    );
    check(
        &dest,
        |i| match [5usize, 0, 8].iter().position(|&p| p == i[2]) {
            Some(j) => src.at(&[i[0], i[1], j, i[3]]),
            None => before.at(i),
        },
        "index_copy",
    );
    index.set_i(&[1], 9);
    assert!(run_err(
        &Kernel::IndexCopy { axis: 2 },
        &mut [&mut index, &mut src],
        &mut dest
    )
    .contains("9"));

    // Along the last axis, converting f32 rows into a bf16 destination.
    let mut dest = T::rand(DType::BF16, &[3, 7], &mut rng);
    let before = T {
        data: dest.data.clone(),
        ..T::rand(DType::BF16, &[3, 7], &mut rng)
    };
    let mut src = T::strided(DType::F32, &[3, 2], &[1, 3], &mut rng);
    let mut index = T::rand(DType::I64, &[2], &mut rng);
    index.set_i(&[0], 6);
    index.set_i(&[1], 2);
    run(
        &Kernel::IndexCopy { axis: 1 },
        &mut [&mut index, &mut src],
        &mut dest,
    );
    check(
        &dest,
        |i| match [6usize, 2].iter().position(|&p| p == i[1]) {
            Some(j) => src.at(&[i[0], j]),
            None => before.at(i),
        },
        "index_copy along the last axis",
    );

    let mut x = T::strided(DType::F32, &[1, 3, 5, 8], &[120, 8, 24, 1], &mut rng);
    let mut cos = T::strided(DType::F32, &[1, 3, 5, 8], &[40, 0, 8, 1], &mut rng);
    let mut sin = T::strided(DType::F32, &[1, 3, 5, 8], &[40, 0, 8, 1], &mut rng);
    let mut out = T::rand(DType::F32, &[1, 3, 5, 8], &mut rng);
    run(&Kernel::Rope, &mut [&mut x, &mut cos, &mut sin], &mut out);
    check(
        &out,
        |i| {
            let d = i[3];
            let mut j = i.to_vec();
            let rot = if d < 4 {
                j[3] = d + 4;
                -x.at(&j)
            } else {
                j[3] = d - 4;
                x.at(&j)
            };
            x.at(i) * cos.at(i) + rot * sin.at(i)
        },
        "rope",
    );

    let mut src = T::strided(DType::F32, &[4, 5], &[1, 4], &mut rng);
    let mut dst = T::rand(DType::F16, &[4, 5], &mut rng);
    run(&Kernel::Copy, &mut [&mut src], &mut dst);
    check(&dst, |i| src.at(i), "copy transpose + cast");
    run(&Kernel::Fill { value: -2.5 }, &mut [], &mut dst);
    check(&dst, |_| -2.5, "fill");
}

#[test]
fn integers_copy_exactly_beyond_f32_precision() {
    let mut rng = Rng(17);
    let mut src = T::rand(DType::I64, &[2], &mut rng);
    let big = (1i64 << 53) + 1;
    src.set_i(&[0], big);
    src.set_i(&[1], -big);
    let mut dst = T::rand(DType::I64, &[2], &mut rng);
    run(&Kernel::Copy, &mut [&mut src], &mut dst);
    let got: Vec<i64> = (0..2)
        .map(|i| i64::from_le_bytes(dst.data[i * 8..i * 8 + 8].try_into().unwrap()))
        .collect();
    assert_eq!(got, vec![big, -big]);
}

fn attention_case(
    b: usize,
    h: usize,
    kvh: usize,
    s: usize,
    t: usize,
    d: usize,
    causal: bool,
    dt: DType,
) {
    let mut rng = Rng(23 + t as u64);
    let mut q = T::strided(dt, &[b, h, s, d], &[h * s * d, d, h * d, 1], &mut rng);
    let mut k = T::rand(dt, &[b, kvh, t, d], &mut rng);
    let mut v = T::rand(dt, &[b, kvh, t, d], &mut rng);
    let mut mask = T::strided(DType::F32, &[b, h, s, t], &[s * t, 0, t, 1], &mut rng);
    let mut out = T::rand(dt, &[b, h, s, d], &mut rng);
    let scale = 1.0 / (d as f32).sqrt();
    run(
        &Kernel::Attention { scale, causal },
        &mut [&mut q, &mut k, &mut v, &mut mask],
        &mut out,
    );
    let g = h / kvh;
    let mut cache = std::collections::HashMap::new();
    check(
        &out,
        |i| {
            let (bi, hi, si) = (i[0], i[1], i[2]);
            let p = cache.entry((bi, hi, si)).or_insert_with(|| {
                let tmax = if causal { (si + 1).min(t) } else { t };
                let sc: Vec<f64> = (0..tmax)
                    .map(|ti| {
                        let dot: f64 = (0..d)
                            .map(|dd| q.at(&[bi, hi, si, dd]) * k.at(&[bi, hi / g, ti, dd]))
                            .sum();
                        dot * f64::from(scale) + mask.at(&[bi, hi, si, ti])
                    })
                    .collect();
                let m = sc.iter().copied().fold(f64::MIN, f64::max);
                let e: Vec<f64> = sc.iter().map(|x| (x - m).exp()).collect();
                let z: f64 = e.iter().sum();
                e.into_iter().map(|x| x / z).collect::<Vec<f64>>()
            });
            p.iter()
                .enumerate()
                .map(|(ti, w)| w * v.at(&[bi, hi / g, ti, i[3]]))
                .sum()
        },
        &format!("attention b{b} h{h}/{kvh} s{s} t{t} d{d} causal {causal} {dt}"),
    );
}

#[test]
fn attention_gqa_masked_causal_and_long_context() {
    attention_case(2, 4, 2, 3, 9, 16, false, DType::F32);
    attention_case(1, 6, 2, 7, 7, 8, true, DType::F32);
    attention_case(1, 4, 1, 2, 33, 12, false, DType::BF16);
    // Beyond 2048 positions: no length limit.
    attention_case(1, 4, 2, 2, 2500, 16, false, DType::F32);
}

/// relu, maximum, minimum and clamp keep NaN as PyTorch does (issue 11: the compiled relu
/// turned NaN into 0, so the answer depended on the partition); infinities clamp normally.
#[test]
fn elementwise_nan_pairs_in_every_float_dtype() {
    let specials = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -2.5, 0.0, 3.0];
    type Reference = fn(f32, f32) -> f32;
    let cases: [(Vec<Instr>, Reference); 4] = [
        (vec![Instr::Load(0), Instr::Unary(UnaryOp::Relu)], |x, _| {
            if x.is_nan() {
                f32::NAN
            } else {
                x.max(0.0)
            }
        }),
        (
            vec![Instr::Load(0), Instr::Load(1), Instr::Binary(BinaryOp::Max)],
            |x, y| {
                if x.is_nan() || y.is_nan() {
                    f32::NAN
                } else {
                    x.max(y)
                }
            },
        ),
        (
            vec![Instr::Load(0), Instr::Load(1), Instr::Binary(BinaryOp::Min)],
            |x, y| {
                if x.is_nan() || y.is_nan() {
                    f32::NAN
                } else {
                    x.min(y)
                }
            },
        ),
        (
            vec![
                Instr::Load(0),
                Instr::Clamp {
                    min: Some(-1.0),
                    max: Some(1.0),
                },
            ],
            |x, _| {
                if x.is_nan() {
                    f32::NAN
                } else {
                    x.clamp(-1.0, 1.0)
                }
            },
        ),
    ];
    let n = specials.len();
    for (code, want) in cases {
        for dt in [DType::F32, DType::F16, DType::BF16] {
            let mut rng = Rng(3);
            // every pair (specials[i], specials[j]) once
            let shape = [n, n];
            let mut x = T::rand(dt, &shape, &mut rng);
            let mut y = T::rand(dt, &shape, &mut rng);
            for i in 0..n {
                for j in 0..n {
                    store_f32(&mut x.data, dt, i * n + j, specials[i]);
                    store_f32(&mut y.data, dt, i * n + j, specials[j]);
                }
            }
            let mut out = T::rand(dt, &shape, &mut rng);
            let expr = Expr { code: code.clone() };
            let inputs = expr.num_inputs();
            let mut ins: Vec<&mut T> = vec![&mut x, &mut y];
            ins.truncate(inputs);
            run(&Kernel::Elementwise { expr }, &mut ins, &mut out);
            for i in 0..n {
                for j in 0..n {
                    let got = out.at(&[i, j]) as f32;
                    let w = want(specials[i], specials[j]);
                    assert!(
                        got == w || (got.is_nan() && w.is_nan()),
                        "{code:?} {dt} at ({}, {}): got {got}, PyTorch {w}",
                        specials[i],
                        specials[j]
                    );
                }
            }
        }
    }
}
