//! The reference of every kernel kind, written from the contract in
//! [`npu_program::program::Kernel`]'s documentation rather than from any backend: sums,
//! norms, softmax and attention in f64, with only the roundings the contract itself
//! prescribes (a residual GEMM's rounded product, the RMSNorm roundings); pointwise
//! expressions by the pointwise table in f32 (see `Kernel::Elementwise` below). The
//! comparison rounds the result once more to the output's dtype.

use crate::case::{Case, Operand};
use npu_ir::{DType, UnaryOp};
use npu_program::expr::round_to;
use npu_program::program::{Kernel, PoolKind, ReduceOp};

/// Additive mask values at or below this (f16's lowest, which is how every float dtype's
/// `finfo.min` mask arrives) mean "not attended"; a row attending to nothing gives zeros.
pub const MASKED: f64 = -65504.0;

/// Visits every index of `shape` in row-major order.
pub fn each(shape: &[usize], mut f: impl FnMut(&[usize])) {
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

/// An input's buffer as f64, read through its binding.
struct In<'a> {
    op: &'a Operand,
    vals: Vec<f64>,
}

impl In<'_> {
    fn at(&self, idx: &[usize]) -> f64 {
        self.vals[self.op.offset(idx)]
    }
    fn shape(&self) -> &[usize] {
        self.op.shape()
    }
}

fn round(dt: DType, v: f64) -> f64 {
    f64::from(round_to(dt, v as f32))
}

fn act(a: Option<UnaryOp>, v: f64) -> f64 {
    a.map_or(v, |u| u.eval([v]))
}

/// Output 0's logical values (row-major over its binding's shape), in f64. Every kernel kind
/// has one output.
pub fn reference(case: &Case) -> Vec<f64> {
    let ins: Vec<In> = case
        .step_inputs()
        .iter()
        .zip(&case.values)
        .map(|(op, v)| In {
            op,
            vals: v.to_f32_vec().into_iter().map(f64::from).collect(),
        })
        .collect();
    let out = &case.outs[0];
    let oshape = out.shape().to_vec();
    let mut want = Vec::with_capacity(oshape.iter().product());
    let mut push = |f: &mut dyn FnMut(&[usize]) -> f64| each(&oshape, |i| want.push(f(i)));
    match &case.kernel {
        Kernel::Gemm {
            alpha,
            beta,
            act: a,
            residual,
            norm,
        } => {
            let (x, w, bias, nw) = case
                .kernel
                .gemm_operands(&ins)
                .expect("a gemm case binds 2 to 4 inputs");
            let r = x.shape().len();
            let k = x.shape()[r - 1];
            let xdt = x.op.dtype;
            push(&mut |i: &[usize]| {
                let (m, n) = (i[r - 2], i[r - 1]);
                let mut xi = i.to_vec();
                let mut wi = i.to_vec();
                // RMS-normalized rows: round(x * rsqrt(mean(x^2) + eps)) * w, rounded again.
                let inv = norm.map(|eps| {
                    let ss: f64 = (0..k)
                        .map(|kk| {
                            xi[r - 2] = m;
                            xi[r - 1] = kk;
                            x.at(&xi).powi(2)
                        })
                        .sum();
                    1.0 / (ss / k as f64 + f64::from(eps)).sqrt()
                });
                let mut acc = 0.0;
                for kk in 0..k {
                    xi[r - 2] = m;
                    xi[r - 1] = kk;
                    wi[r - 2] = kk;
                    wi[r - 1] = n;
                    let mut a = x.at(&xi);
                    if let (Some(inv), Some(g)) = (inv, nw) {
                        a = round(xdt, round(xdt, a * inv) * g.at(&[kk]));
                    }
                    acc += a * w.at(&wi);
                }
                let p = f64::from(*alpha) * acc;
                let b = bias.map_or(0.0, |b| f64::from(*beta) * b.at(i));
                if *residual {
                    round(out.dtype, p) + b
                } else {
                    act(*a, p + b)
                }
            });
        }
        Kernel::Conv2d {
            stride,
            padding,
            dilation,
            groups,
            act: a,
            residual,
        } => {
            let (x, w, bias, r) = case
                .kernel
                .conv_operands(&ins)
                .expect("a conv2d case binds 2 to 4 inputs");
            let (h, wd) = (x.shape()[2] as isize, x.shape()[3] as isize);
            let (o, cg, kh, kw) = (w.shape()[0], w.shape()[1], w.shape()[2], w.shape()[3]);
            let og = o / groups;
            push(&mut |i: &[usize]| {
                let g = i[1] / og;
                let mut acc = bias.map_or(0.0, |b| b.at(&[i[1]]));
                for ci in 0..cg {
                    for ky in 0..kh {
                        for kx in 0..kw {
                            let y = (i[2] * stride[0] + ky * dilation[0]) as isize
                                - padding[0] as isize;
                            let xx = (i[3] * stride[1] + kx * dilation[1]) as isize
                                - padding[1] as isize;
                            if y >= 0 && y < h && xx >= 0 && xx < wd {
                                acc += x.at(&[i[0], g * cg + ci, y as usize, xx as usize])
                                    * w.at(&[i[1], ci, ky, kx]);
                            }
                        }
                    }
                }
                match r {
                    // PyTorch's `act(conv(x) + r)` rounds the convolution first.
                    Some(r) if *residual => act(*a, round(out.dtype, acc) + r.at(i)),
                    _ => act(*a, acc),
                }
            });
        }
        Kernel::Pool2d {
            kind,
            kernel,
            stride,
            padding,
            dilation,
        } => {
            let x = &ins[0];
            let (h, wd) = (x.shape()[2] as isize, x.shape()[3] as isize);
            push(&mut |i: &[usize]| {
                let y0 = (i[2] * stride[0]) as isize - padding[0] as isize;
                let x0 = (i[3] * stride[1]) as isize - padding[1] as isize;
                let (mut vals, mut max) = (Vec::new(), f64::NEG_INFINITY);
                for ky in 0..kernel[0] {
                    for kx in 0..kernel[1] {
                        let y = y0 + (ky * dilation[0]) as isize;
                        let xx = x0 + (kx * dilation[1]) as isize;
                        if y >= 0 && y < h && xx >= 0 && xx < wd {
                            let v = x.at(&[i[0], i[1], y as usize, xx as usize]);
                            max = if v.is_nan() || v > max { v } else { max };
                            vals.push(v);
                        }
                    }
                }
                let sum: f64 = vals.iter().sum();
                match *kind {
                    PoolKind::Max => max,
                    PoolKind::Avg {
                        divisor: Some(d), ..
                    } => sum / f64::from(d),
                    // ATen: the window clipped to the padded input counts its padding.
                    PoolKind::Avg {
                        count_include_pad: true,
                        ..
                    } => {
                        let y1 = (y0 + kernel[0] as isize).min(h + padding[0] as isize);
                        let x1 = (x0 + kernel[1] as isize).min(wd + padding[1] as isize);
                        sum / ((y1 - y0) * (x1 - x0)) as f64
                    }
                    PoolKind::Avg { .. } => sum / vals.len() as f64,
                }
            });
        }
        Kernel::AdaptiveAvgPool2d => {
            let x = &ins[0];
            let (h, wd) = (x.shape()[2], x.shape()[3]);
            let (oh, ow) = (oshape[2], oshape[3]);
            push(&mut |i: &[usize]| {
                let (h0, h1) = (i[2] * h / oh, ((i[2] + 1) * h).div_ceil(oh));
                let (w0, w1) = (i[3] * wd / ow, ((i[3] + 1) * wd).div_ceil(ow));
                let mut s = 0.0;
                for y in h0..h1 {
                    for xx in w0..w1 {
                        s += x.at(&[i[0], i[1], y, xx]);
                    }
                }
                s / ((h1 - h0) * (w1 - w0)) as f64
            });
        }
        // Pointwise math is the table's, in f32 as PyTorch computes it: in f64, ops that are
        // discontinuous (floor, remainder, comparisons) would disagree with PyTorch wherever
        // f32 rounding crosses a step. The table itself is checked against PyTorch by the
        // OpInfo suite; here every backend's broadcasting, strides and dtypes are.
        Kernel::Elementwise { expr } => {
            let mut stack = Vec::new();
            let mut args = vec![0f32; ins.len()];
            push(&mut |i: &[usize]| {
                for (a, x) in args.iter_mut().zip(&ins) {
                    *a = x.at(i) as f32;
                }
                f64::from(expr.eval(&args, &mut stack))
            });
        }
        Kernel::Softmax { scale } => {
            let (x, mask) = (&ins[0], ins.get(1));
            let d = *oshape.last().unwrap_or(&1);
            push(&mut |i: &[usize]| {
                let mut j = i.to_vec();
                let row: Vec<f64> = (0..d)
                    .map(|t| {
                        *j.last_mut().expect("rank >= 1") = t;
                        f64::from(*scale) * x.at(&j) + mask.map_or(0.0, |m| m.at(&j))
                    })
                    .collect();
                let m = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let z: f64 = row.iter().map(|v| (v - m).exp()).sum();
                (row[i[i.len() - 1]] - m).exp() / z
            });
        }
        Kernel::RmsNorm { eps } => {
            let (x, w) = (&ins[0], &ins[1]);
            let d = *oshape.last().unwrap_or(&1);
            push(&mut |i: &[usize]| {
                let mut j = i.to_vec();
                let ms = (0..d)
                    .map(|t| {
                        *j.last_mut().expect("rank >= 1") = t;
                        x.at(&j).powi(2)
                    })
                    .sum::<f64>()
                    / d as f64;
                let v = round(out.dtype, x.at(i) / (ms + f64::from(*eps)).sqrt());
                v * w.at(&[i[i.len() - 1]])
            });
        }
        Kernel::LayerNorm {
            eps,
            has_weight,
            has_bias,
        } => {
            let x = &ins[0];
            let w = has_weight.then(|| &ins[1]);
            let b = has_bias.then(|| &ins[1 + usize::from(*has_weight)]);
            let d = *oshape.last().unwrap_or(&1);
            push(&mut |i: &[usize]| {
                let mut j = i.to_vec();
                let row: Vec<f64> = (0..d)
                    .map(|t| {
                        *j.last_mut().expect("rank >= 1") = t;
                        x.at(&j)
                    })
                    .collect();
                let mean = row.iter().sum::<f64>() / d as f64;
                let var = row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / d as f64;
                let c = i[i.len() - 1];
                (row[c] - mean) / (var + f64::from(*eps)).sqrt() * w.map_or(1.0, |w| w.at(&[c]))
                    + b.map_or(0.0, |b| b.at(&[c]))
            });
        }
        Kernel::Reduce { op, reduced } => {
            let x = &ins[0];
            let r = x.shape().len();
            let lead = x.shape()[..r - reduced].to_vec();
            let tail = x.shape()[r - reduced..].to_vec();
            let count: usize = tail.iter().product();
            // The output has the leading dims' elements, whatever its shape says of them.
            let mut sums = Vec::new();
            each(&lead, |l| {
                let mut s = 0.0;
                each(&tail, |t| {
                    let idx: Vec<usize> = l.iter().chain(t).copied().collect();
                    s += x.at(&idx);
                });
                sums.push(match op {
                    ReduceOp::Sum => s,
                    ReduceOp::Mean => s / count as f64,
                });
            });
            let mut k = 0;
            push(&mut |_| {
                k += 1;
                sums[k - 1]
            });
        }
        Kernel::Embedding => {
            let (table, ids) = (&ins[0], &ins[1]);
            push(&mut |i: &[usize]| {
                let (lead, d) = i.split_at(i.len() - 1);
                table.at(&[ids.at(lead) as usize, d[0]])
            });
        }
        Kernel::IndexCopy { axis } => {
            let (index, src) = (&ins[0], &ins[1]);
            let dest = In {
                op: &case.ins[case.donate[0].map_or(0, |d| d as usize)],
                vals: case.values[case.donate[0].map_or(0, |d| d as usize)]
                    .to_f32_vec()
                    .into_iter()
                    .map(f64::from)
                    .collect(),
            };
            let slots: Vec<usize> = (0..index.shape()[0])
                .map(|k| index.at(&[k]) as usize)
                .collect();
            push(
                &mut |i: &[usize]| match slots.iter().rposition(|&p| p == i[*axis]) {
                    Some(k) => {
                        let mut j = i.to_vec();
                        j[*axis] = k;
                        src.at(&j)
                    }
                    None => dest.at(i),
                },
            );
        }
        Kernel::Rope => {
            let (x, cos, sin) = (&ins[0], &ins[1], &ins[2]);
            let half = oshape[oshape.len() - 1] / 2;
            push(&mut |i: &[usize]| {
                let mut j = i.to_vec();
                let d = i[i.len() - 1];
                let rot = if d < half {
                    j[i.len() - 1] = d + half;
                    -x.at(&j)
                } else {
                    j[i.len() - 1] = d - half;
                    x.at(&j)
                };
                x.at(i) * cos.at(i) + rot * sin.at(i)
            });
        }
        Kernel::Attention { scale, causal } => {
            let (q, k, v, mask) = (&ins[0], &ins[1], &ins[2], ins.get(3));
            let (h, d) = (q.shape()[1], q.shape()[3]);
            let (kvh, t) = (k.shape()[1], k.shape()[2]);
            let g = h / kvh;
            let mut probs = std::collections::HashMap::new();
            push(&mut |i: &[usize]| {
                let (b, hi, s) = (i[0], i[1], i[2]);
                let p = probs.entry((b, hi, s)).or_insert_with(|| {
                    let tmax = if *causal { (s + 1).min(t) } else { t };
                    let sc: Vec<(usize, f64)> = (0..tmax)
                        .filter_map(|ti| {
                            let m = mask.map_or(0.0, |m| m.at(&[b, hi, s, ti]));
                            (m > MASKED).then(|| {
                                let dot: f64 = (0..d)
                                    .map(|dd| q.at(&[b, hi, s, dd]) * k.at(&[b, hi / g, ti, dd]))
                                    .sum();
                                (ti, dot * f64::from(*scale) + m)
                            })
                        })
                        .collect();
                    let mx = sc.iter().map(|x| x.1).fold(f64::NEG_INFINITY, f64::max);
                    let z: f64 = sc.iter().map(|x| (x.1 - mx).exp()).sum();
                    sc.into_iter()
                        .map(|(ti, x)| (ti, (x - mx).exp() / z))
                        .collect::<Vec<_>>()
                });
                p.iter()
                    .map(|&(ti, w)| w * v.at(&[b, hi / g, ti, i[3]]))
                    .sum()
            });
        }
        Kernel::Copy => {
            let x = &ins[0];
            push(&mut |i: &[usize]| x.at(i));
        }
        Kernel::Fill { value } => push(&mut |_| *value),
    }
    want
}
