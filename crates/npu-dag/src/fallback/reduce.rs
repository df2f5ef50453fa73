//! Reductions (sum/mean, max/min/amax/amin with indices, argmax/argmin), softmax and
//! log_softmax, cumsum. Reduced dims are moved last so every reduction runs over rows.

use super::data::{
    dims_last, f64s, from_f64, from_i64, i64s, inverse, norm_dim, permute, reshaped, R,
};
use super::Args;
use npu_ir::{MinMax, TensorType};
use npu_runtime::tensor::HostTensor;

pub(super) fn reduce_dims(dims: &[i64], rank: usize) -> R<Vec<usize>> {
    if dims.is_empty() {
        return Ok((0..rank).collect());
    }
    let mut d = dims
        .iter()
        .map(|&d| norm_dim(d, rank))
        .collect::<R<Vec<usize>>>()?;
    d.sort_unstable();
    d.dedup();
    Ok(d)
}

/// Rows of the input with `dims` last (a 0-d input is one row of one).
pub(super) fn rows(x: &HostTensor, dims: &[usize]) -> (HostTensor, Vec<usize>, usize, usize) {
    if x.shape().is_empty() {
        return (x.clone(), Vec::new(), 1, 1);
    }
    dims_last(x, dims)
}

pub(super) fn check_numel(out: &TensorType, n: usize) -> R<()> {
    if out.numel() != n {
        return Err(format!(
            "the reduction yields {n} elements, the output {out} has {}",
            out.numel()
        ));
    }
    Ok(())
}

/// sum (or mean) over `dims` (empty = all).
pub fn sum(a: &Args, dims: &[i64], mean: bool) -> R<HostTensor> {
    a.count(1, 1)?;
    let (x, out) = (a.input(0)?, a.out(0)?);
    let d = reduce_dims(dims, x.shape().len())?;
    let (p, _, nrows, inner) = rows(x, &d);
    check_numel(out, nrows)?;
    if !out.dtype.is_float() {
        if mean {
            return Err(format!("mean with an integer output {}", out.dtype));
        }
        let v = i64s(&p);
        let r: Vec<i64> = (0..nrows)
            .map(|r| v[r * inner..(r + 1) * inner].iter().sum())
            .collect();
        return Ok(from_i64(out, &r));
    }
    let v = f64s(&p);
    let r: Vec<f64> = (0..nrows)
        .map(|r| {
            let s: f64 = v[r * inner..(r + 1) * inner].iter().sum();
            if mean {
                s / inner as f64
            } else {
                s
            }
        })
        .collect();
    Ok(from_f64(out, &r))
}

/// Index of the first extreme of a row; NaN wins (PyTorch propagates NaN).
fn extreme(row: &[f64], op: MinMax) -> usize {
    let mut best = 0;
    for (i, &x) in row.iter().enumerate() {
        let b = row[best];
        if b.is_nan() {
            break;
        }
        let better = x.is_nan()
            || match op {
                MinMax::Max => x > b,
                MinMax::Min => x < b,
            };
        if better {
            best = i;
        }
    }
    best
}

pub fn reduce_min_max(a: &Args, op: MinMax, dims: &[i64]) -> R<HostTensor> {
    a.count(1, 1)?;
    let (x, out) = (a.input(0)?, a.out(0)?);
    let d = reduce_dims(dims, x.shape().len())?;
    let (p, _, nrows, inner) = rows(x, &d);
    check_numel(out, nrows)?;
    if inner == 0 {
        return Err("max/min over an empty dimension".into());
    }
    if !out.dtype.is_float() {
        let v = i64s(&p);
        let r: Vec<i64> = (0..nrows)
            .map(|r| {
                let row = &v[r * inner..(r + 1) * inner];
                match op {
                    MinMax::Max => *row.iter().max().expect("non-empty"),
                    MinMax::Min => *row.iter().min().expect("non-empty"),
                }
            })
            .collect();
        return Ok(from_i64(out, &r));
    }
    let v = f64s(&p);
    let r: Vec<f64> = (0..nrows)
        .map(|r| {
            let row = &v[r * inner..(r + 1) * inner];
            row[extreme(row, op)]
        })
        .collect();
    Ok(from_f64(out, &r))
}

fn arg_rows(x: &HostTensor, dim: Option<i64>, op: MinMax) -> R<Vec<i64>> {
    let flat;
    let (src, d) = match dim {
        Some(d) if !x.shape().is_empty() => (x, vec![norm_dim(d, x.shape().len())?]),
        _ => {
            flat = reshaped(x, &[x.numel()])?;
            (&flat, vec![0])
        }
    };
    let (p, _, nrows, inner) = rows(src, &d);
    if inner == 0 {
        return Err("argmax/argmin over an empty dimension".into());
    }
    if !x.dtype().is_float() {
        let v = i64s(&p);
        return Ok((0..nrows)
            .map(|r| {
                let row = &v[r * inner..(r + 1) * inner];
                let mut best = 0;
                for (i, &val) in row.iter().enumerate() {
                    let better = match op {
                        MinMax::Max => val > row[best],
                        MinMax::Min => val < row[best],
                    };
                    if better {
                        best = i;
                    }
                }
                best as i64
            })
            .collect());
    }
    let v = f64s(&p);
    Ok((0..nrows)
        .map(|r| extreme(&v[r * inner..(r + 1) * inner], op) as i64)
        .collect())
}

pub fn arg_min_max(a: &Args, op: MinMax, dim: Option<i64>) -> R<HostTensor> {
    a.count(1, 1)?;
    let (x, out) = (a.input(0)?, a.out(0)?);
    let r = arg_rows(x, dim, op)?;
    check_numel(out, r.len())?;
    Ok(from_i64(out, &r))
}

/// `max.dim`/`min.dim`: values and indices.
pub fn min_max_dim(a: &Args, op: MinMax, dim: i64) -> R<Vec<HostTensor>> {
    a.count(1, 1)?;
    let x = a.input(0)?;
    let (vals_ty, idx_ty) = (a.out(0)?, a.out(1)?);
    let idx = arg_rows(x, Some(dim), op)?;
    check_numel(vals_ty, idx.len())?;
    let d = if x.shape().is_empty() {
        vec![]
    } else {
        vec![norm_dim(dim, x.shape().len())?]
    };
    let (p, _, _, inner) = rows(x, &d);
    let vals = if vals_ty.dtype.is_float() {
        let v = f64s(&p);
        let r: Vec<f64> = idx
            .iter()
            .enumerate()
            .map(|(r, &i)| v[r * inner + i as usize])
            .collect();
        from_f64(vals_ty, &r)
    } else {
        let v = i64s(&p);
        let r: Vec<i64> = idx
            .iter()
            .enumerate()
            .map(|(r, &i)| v[r * inner + i as usize])
            .collect();
        from_i64(vals_ty, &r)
    };
    Ok(vec![vals, from_i64(idx_ty, &idx)])
}

/// Applies `f` to every row along `dim` and puts the dim back; the output has `x`'s shape.
fn along_dim<T: Copy>(
    x: &HostTensor,
    dim: i64,
    load: impl Fn(&HostTensor) -> Vec<T>,
    f: impl Fn(&mut [T]),
) -> R<(Vec<T>, Vec<usize>, Vec<usize>)> {
    let rank = x.shape().len();
    let d = if rank == 0 {
        vec![]
    } else {
        vec![norm_dim(dim, rank)?]
    };
    let (p, perm, nrows, inner) = rows(x, &d);
    let mut v = load(&p);
    for r in 0..nrows {
        f(&mut v[r * inner..(r + 1) * inner]);
    }
    Ok((v, p.shape().to_vec(), perm))
}

/// Puts a permuted result back into the original dim order.
fn unpermute(t: HostTensor, perm: &[usize]) -> HostTensor {
    if perm.iter().enumerate().all(|(i, &p)| i == p) {
        t
    } else {
        permute(&t, &inverse(perm))
    }
}

pub fn softmax(a: &Args, dim: i64, log: bool) -> R<HostTensor> {
    a.count(1, 1)?;
    let (x, out) = (a.input(0)?, a.out(0)?);
    if !out.dtype.is_float() {
        return Err(format!("softmax with an integer output {}", out.dtype));
    }
    let (v, pshape, perm) = along_dim(x, dim, f64s, |row| {
        let m = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let m = if m.is_finite() { m } else { 0.0 };
        let s: f64 = row.iter().map(|&x| (x - m).exp()).sum();
        for x in row.iter_mut() {
            *x = if log {
                *x - m - s.ln()
            } else {
                (*x - m).exp() / s
            };
        }
    })?;
    let ty = TensorType {
        shape: pshape,
        dtype: out.dtype,
    };
    Ok(unpermute(from_f64(&ty, &v), &perm))
}

pub fn cumsum(a: &Args, dim: i64) -> R<HostTensor> {
    a.count(1, 1)?;
    let (x, out) = (a.input(0)?, a.out(0)?);
    if out.dtype.is_float() {
        let (v, pshape, perm) = along_dim(x, dim, f64s, |row| {
            let mut acc = 0.0;
            for x in row.iter_mut() {
                acc += *x;
                *x = acc;
            }
        })?;
        let ty = TensorType {
            shape: pshape,
            dtype: out.dtype,
        };
        return Ok(unpermute(from_f64(&ty, &v), &perm));
    }
    let (v, pshape, perm) = along_dim(x, dim, i64s, |row| {
        let mut acc = 0i64;
        for x in row.iter_mut() {
            acc = acc.wrapping_add(*x);
            *x = acc;
        }
    })?;
    let ty = TensorType {
        shape: pshape,
        dtype: out.dtype,
    };
    Ok(unpermute(from_i64(&ty, &v), &perm))
}
