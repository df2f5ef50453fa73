//! Pooling over the last 1 to 3 dims, batched or not: max (with flat per-plane indices),
//! average (padding, ceil_mode, count_include_pad, divisor_override) and adaptive max/avg.
//! The 2-D ops of the NPU set (`max_pool2d`, `avg_pool2d`, `adaptive_avg_pool2d`) run here
//! too, so unbatched `[C, H, W]` inputs work for every pooling op.

use super::data::{f64s, from_f64, from_i64, R};
use super::Args;
use npu_ir::{Pool2d, Window};
use npu_runtime::tensor::HostTensor;

/// A 2-D [`Pool2d`] as an N-d window.
pub fn window_of(p: &Pool2d) -> Window {
    Window {
        kernel: p.kernel.to_vec(),
        stride: p.stride.to_vec(),
        padding: p.padding.to_vec(),
        dilation: p.dilation.to_vec(),
        ceil_mode: p.ceil_mode,
    }
}

/// Per spatial dim and output index: the valid input positions of the window and the
/// window's size counting padding (what `count_include_pad` divides by).
type Taps = Vec<Vec<(Vec<usize>, usize)>>;

/// Leading (plane) count and spatial input/output sizes; checks the output's leading dims.
fn geometry(a: &Args, n: usize) -> R<(usize, Vec<usize>, Vec<usize>)> {
    let (x, out) = (a.input(0)?, a.out(0)?);
    let xs = x.shape();
    if xs.len() != n + 1 && xs.len() != n + 2 {
        return Err(format!(
            "{n}-D pooling needs a {}-D or {}-D input, got {xs:?}",
            n + 1,
            n + 2
        ));
    }
    let lead = xs.len() - n;
    if out.shape.len() != xs.len() || out.shape[..lead] != xs[..lead] {
        return Err(format!("pooling output {:?} for input {xs:?}", out.shape));
    }
    Ok((
        xs[..lead].iter().product(),
        xs[lead..].to_vec(),
        out.shape[lead..].to_vec(),
    ))
}

/// PyTorch's pooling output length (`pooling_output_shape`).
fn out_len(i: usize, k: usize, s: usize, p: usize, d: usize, ceil: bool) -> Option<usize> {
    let span = (d * (k - 1) + 1) as i64;
    let num = i as i64 + 2 * p as i64 - span + if ceil { s as i64 - 1 } else { 0 };
    if num < 0 {
        return None;
    }
    let mut o = num / s as i64 + 1;
    if ceil && (o - 1) * s as i64 >= i as i64 + p as i64 {
        o -= 1;
    }
    Some(o as usize)
}

fn window_taps(w: &Window, ins: &[usize], outs: &[usize]) -> R<Taps> {
    let mut taps = Vec::with_capacity(ins.len());
    for d in 0..ins.len() {
        let (k, s, p, dl) = (w.kernel[d], w.stride[d], w.padding[d], w.dilation[d]);
        let want = out_len(ins[d], k, s, p, dl, w.ceil_mode);
        if want != Some(outs[d]) {
            return Err(format!(
                "pooling output size {} at spatial dim {d}, expected {want:?}",
                outs[d]
            ));
        }
        let (i, pi) = (ins[d] as isize, p as isize);
        let per: Vec<(Vec<usize>, usize)> = (0..outs[d])
            .map(|o| {
                let start = (o * s) as isize - pi;
                let pos = (0..k)
                    .map(|t| start + (t * dl) as isize)
                    .filter(|&x| x >= 0 && x < i)
                    .map(|x| x as usize)
                    .collect();
                let padded_end = (start + k as isize).min(i + pi);
                (pos, (padded_end - start) as usize)
            })
            .collect();
        taps.push(per);
    }
    Ok(taps)
}

fn adaptive_taps(ins: &[usize], outs: &[usize]) -> Taps {
    ins.iter()
        .zip(outs)
        .map(|(&i, &o)| {
            (0..o)
                .map(|j| {
                    let (s, e) = (j * i / o, ((j + 1) * i).div_ceil(o));
                    ((s..e).collect(), e - s)
                })
                .collect()
        })
        .collect()
}

/// For every plane and output position, `f(values, flat positions, padded size)` of the
/// window; returns results in output order.
fn run(
    x: &HostTensor,
    planes: usize,
    ins: &[usize],
    taps: &Taps,
    f: impl Fn(&[f64], &[usize], usize) -> (f64, i64),
) -> (Vec<f64>, Vec<i64>) {
    let v = f64s(x);
    let plane_len: usize = ins.iter().product();
    let outs: Vec<usize> = taps.iter().map(Vec::len).collect();
    let n_out: usize = outs.iter().product();
    let mut strides = vec![1usize; ins.len()];
    for d in (0..ins.len().saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * ins[d + 1];
    }
    let (mut vals, mut idx) = (
        Vec::with_capacity(planes * n_out),
        Vec::with_capacity(planes * n_out),
    );
    let mut window_vals = Vec::new();
    let mut window_pos = Vec::new();
    for p in 0..planes {
        let plane = &v[p * plane_len..(p + 1) * plane_len];
        for o in 0..n_out {
            // output multi-index, then the cartesian product of the per-dim taps
            let mut rem = o;
            let mut per_dim = Vec::with_capacity(ins.len());
            for d in (0..ins.len()).rev() {
                per_dim.push(&taps[d][rem % outs[d]]);
                rem /= outs[d];
            }
            per_dim.reverse();
            window_vals.clear();
            window_pos.clear();
            window_pos.push(0usize);
            for (d, (pos, _)) in per_dim.iter().enumerate() {
                let prev = std::mem::take(&mut window_pos);
                for base in prev {
                    window_pos.extend(pos.iter().map(|&q| base + q * strides[d]));
                }
            }
            window_vals.extend(window_pos.iter().map(|&q| plane[q]));
            let padded: usize = per_dim.iter().map(|(_, s)| *s).product();
            let (r, i) = f(&window_vals, &window_pos, padded);
            vals.push(r);
            idx.push(i);
        }
    }
    (vals, idx)
}

/// Max of a window and its flat position (the first maximum; NaN wins).
fn max_of(vals: &[f64], pos: &[usize]) -> (f64, i64) {
    let mut best = (f64::NEG_INFINITY, pos.first().map_or(-1, |&p| p as i64));
    for (&v, &p) in vals.iter().zip(pos) {
        if v > best.0 || v.is_nan() {
            best = (v, p as i64);
            if v.is_nan() {
                break;
            }
        }
    }
    best
}

fn outputs(a: &Args, vals: &[f64], idx: &[i64], with_indices: bool) -> R<Vec<HostTensor>> {
    let mut res = vec![from_f64(a.out(0)?, vals)];
    if with_indices {
        let it = a.out(1)?;
        if it.shape != a.out(0)?.shape {
            return Err(format!(
                "pooling indices {:?} differ from values {:?}",
                it.shape,
                a.out(0)?.shape
            ));
        }
        res.push(from_i64(it, idx));
    }
    Ok(res)
}

pub fn max_pool(a: &Args, w: &Window, with_indices: bool) -> R<Vec<HostTensor>> {
    a.count(1, 1)?;
    let (planes, ins, outs) = geometry(a, w.kernel.len())?;
    let taps = window_taps(w, &ins, &outs)?;
    let (vals, idx) = run(a.input(0)?, planes, &ins, &taps, |v, p, _| max_of(v, p));
    outputs(a, &vals, &idx, with_indices)
}

pub fn avg_pool(
    a: &Args,
    w: &Window,
    count_include_pad: bool,
    divisor_override: Option<i64>,
) -> R<HostTensor> {
    a.count(1, 1)?;
    let (planes, ins, outs) = geometry(a, w.kernel.len())?;
    let taps = window_taps(w, &ins, &outs)?;
    let (vals, _) = run(a.input(0)?, planes, &ins, &taps, |v, _, padded| {
        let s: f64 = v.iter().sum();
        let div = match divisor_override {
            Some(d) if d != 0 => d as f64,
            _ if count_include_pad => padded as f64,
            _ => v.len() as f64,
        };
        (s / div, 0)
    });
    Ok(from_f64(a.out(0)?, &vals))
}

pub fn adaptive_pool(a: &Args, n: usize, max: bool) -> R<Vec<HostTensor>> {
    a.count(1, 1)?;
    let (planes, ins, outs) = geometry(a, n)?;
    let taps = adaptive_taps(&ins, &outs);
    let (vals, idx) = run(a.input(0)?, planes, &ins, &taps, |v, p, _| {
        if max {
            max_of(v, p)
        } else {
            (v.iter().sum::<f64>() / v.len().max(1) as f64, 0)
        }
    });
    outputs(a, &vals, &idx, max && a.outs.len() > 1)
}

/// `max_pool*_with_indices_backward(grad, self, indices)`: per plane (the leading dims), each
/// gradient element added at its flat window-argmax index into zeros shaped like `self`.
pub fn max_pool_backward(a: &Args, dims: usize) -> R<HostTensor> {
    a.count(3, 3)?;
    let (grad, x, indices, out) = (a.input(0)?, a.input(1)?, a.input(2)?, a.out(0)?);
    let xs = x.shape();
    if xs.len() < dims || grad.shape() != indices.shape() || grad.shape().len() != xs.len() {
        return Err(format!(
            "grad {:?} and indices {:?} do not fit an input {xs:?} pooled over {dims} dims",
            grad.shape(),
            indices.shape()
        ));
    }
    let lead = xs.len() - dims;
    if grad.shape()[..lead] != xs[..lead] {
        return Err(format!("grad {:?} for input {xs:?}", grad.shape()));
    }
    let plane_in: usize = xs[lead..].iter().product();
    let plane_out: usize = grad.shape()[lead..].iter().product();
    let (g, ids) = (f64s(grad), super::data::i64s(indices));
    let mut res = vec![0.0; x.numel()];
    for (k, (&gv, &i)) in g.iter().zip(&ids).enumerate() {
        let p = k / plane_out.max(1);
        let i = usize::try_from(i)
            .ok()
            .filter(|&i| i < plane_in)
            .ok_or_else(|| format!("pooling index {i} outside a plane of {plane_in}"))?;
        res[p * plane_in + i] += gv;
    }
    Ok(from_f64(out, &res))
}
