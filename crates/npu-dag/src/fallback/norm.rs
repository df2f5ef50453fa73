//! Normalizations: layer_norm, group_norm, batch_norm (eval). Statistics in f64.

use super::data::{f64s, from_f64, R};
use super::Args;
use npu_runtime::tensor::HostTensor;

/// Normalizes each of `groups` consecutive runs of `len` elements in place.
fn normalize(v: &mut [f64], len: usize, eps: f64) {
    if len == 0 {
        return;
    }
    for g in v.chunks_mut(len) {
        let mean = g.iter().sum::<f64>() / len as f64;
        let var = g.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / len as f64;
        let inv = 1.0 / (var + eps).sqrt();
        for x in g.iter_mut() {
            *x = (*x - mean) * inv;
        }
    }
}

pub fn layer_norm(a: &Args, normalized_shape: &[usize], eps: f64) -> R<HostTensor> {
    a.count(1, 3)?;
    let (x, out) = (a.input(0)?, a.out(0)?);
    let xs = x.shape();
    if normalized_shape.len() > xs.len() || !xs.ends_with(normalized_shape) {
        return Err(format!(
            "layer_norm over {normalized_shape:?} of an input {xs:?}"
        ));
    }
    let len: usize = normalized_shape.iter().product();
    let mut v = f64s(x);
    normalize(&mut v, len, eps);
    let w = a.ins.get(1).map(|t| f64s(t));
    let b = a.ins.get(2).map(|t| f64s(t));
    for t in [&w, &b].into_iter().flatten() {
        if t.len() != len {
            return Err(format!(
                "layer_norm weight/bias has {} elements, expected {len}",
                t.len()
            ));
        }
    }
    for (i, x) in v.iter_mut().enumerate() {
        let j = i % len.max(1);
        if let Some(w) = &w {
            *x *= w[j];
        }
        if let Some(b) = &b {
            *x += b[j];
        }
    }
    Ok(from_f64(out, &v))
}

/// x [N, C, *]: statistics per (n, group), affine per channel.
pub fn group_norm(a: &Args, groups: usize, eps: f64) -> R<HostTensor> {
    a.count(1, 3)?;
    let (x, out) = (a.input(0)?, a.out(0)?);
    let xs = x.shape();
    if xs.len() < 2 || xs[1] % groups != 0 {
        return Err(format!(
            "group_norm with {groups} groups of an input {xs:?}"
        ));
    }
    let c = xs[1];
    let spatial: usize = xs[2..].iter().product();
    let mut v = f64s(x);
    normalize(&mut v, c / groups * spatial, eps);
    let w = a.ins.get(1).map(|t| f64s(t));
    let b = a.ins.get(2).map(|t| f64s(t));
    for t in [&w, &b].into_iter().flatten() {
        if t.len() != c {
            return Err(format!(
                "group_norm weight/bias has {} elements, expected {c}",
                t.len()
            ));
        }
    }
    for (i, x) in v.iter_mut().enumerate() {
        let ch = (i / spatial.max(1)) % c;
        if let Some(w) = &w {
            *x *= w[ch];
        }
        if let Some(b) = &b {
            *x += b[ch];
        }
    }
    Ok(from_f64(out, &v))
}

/// Eval batch norm: inputs x, [weight, bias,] running_mean, running_var.
pub fn batch_norm(a: &Args, eps: f64) -> R<HostTensor> {
    let (x, out) = (a.input(0)?, a.out(0)?);
    let (w, b, mean, var) = match a.ins.len() {
        5 => (
            Some(f64s(a.ins[1])),
            Some(f64s(a.ins[2])),
            f64s(a.ins[3]),
            f64s(a.ins[4]),
        ),
        3 => (None, None, f64s(a.ins[1]), f64s(a.ins[2])),
        n => {
            return Err(format!(
                "eval batch_norm needs running_mean and running_var (3 or 5 inputs), got {n}"
            ))
        }
    };
    let xs = x.shape();
    if xs.len() < 2 {
        return Err(format!("batch_norm of an input {xs:?}"));
    }
    let c = xs[1];
    for t in [Some(&mean), Some(&var), w.as_ref(), b.as_ref()]
        .into_iter()
        .flatten()
    {
        if t.len() != c {
            return Err(format!(
                "batch_norm parameter has {} elements, expected {c}",
                t.len()
            ));
        }
    }
    let spatial: usize = xs[2..].iter().product();
    let mut v = f64s(x);
    for (i, x) in v.iter_mut().enumerate() {
        let ch = (i / spatial.max(1)) % c;
        let mut y = (*x - mean[ch]) / (var[ch] + eps).sqrt();
        if let Some(w) = &w {
            y *= w[ch];
        }
        if let Some(b) = &b {
            y += b[ch];
        }
        *x = y;
    }
    Ok(from_f64(out, &v))
}

/// Empty tensors of the graph's declared shapes (the saved statistics of an eval norm).
fn empties(a: &Args, from: usize) -> R<Vec<HostTensor>> {
    (from..a.outs.len())
        .map(|i| {
            let ty = a.out(i)?;
            if ty.numel() != 0 {
                return Err(format!(
                    "eval batch norm output {i} is {ty}, expected empty"
                ));
            }
            Ok(HostTensor::zeros(ty.dtype, ty.shape.clone()))
        })
        .collect()
}

/// `native_batch_norm`/`_native_batch_norm_legit_no_training` in eval: y plus the two
/// (empty) saved statistics.
pub fn native_batch_norm(a: &Args, eps: f64) -> R<Vec<HostTensor>> {
    let mut res = vec![batch_norm(a, eps)?];
    res.extend(empties(a, 1)?);
    Ok(res)
}

/// `native_group_norm(x, weight?, bias?, N, C, HxW, group, eps)`: y, mean and rstd [N, G].
pub fn native_group_norm(a: &Args, groups: usize, eps: f64) -> R<Vec<HostTensor>> {
    let y = group_norm(a, groups, eps)?;
    let x = a.input(0)?;
    let n = x.shape().first().copied().unwrap_or(1);
    let v = f64s(x);
    let len = v.len() / (n * groups).max(1);
    let (mut mean, mut rstd) = (Vec::new(), Vec::new());
    for g in v.chunks(len.max(1)).take(n * groups) {
        let m = g.iter().sum::<f64>() / len as f64;
        let var = g.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / len as f64;
        mean.push(m);
        rstd.push(1.0 / (var + eps).sqrt());
    }
    Ok(vec![
        y,
        from_f64(a.out(1)?, &mean),
        from_f64(a.out(2)?, &rstd),
    ])
}
