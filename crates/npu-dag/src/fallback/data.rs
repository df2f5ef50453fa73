//! Element access, broadcasting and strided copies over contiguous row-major host tensors.

use npu_ir::{DType, TensorType};
use npu_runtime::tensor::{load_f64, load_i64, store_f64, store_i64, HostTensor};

/// Kernel results carry a plain message; `eval_node` adds the node and op.
pub type R<T> = std::result::Result<T, String>;

pub fn f64s(t: &HostTensor) -> Vec<f64> {
    let (b, dt) = (t.bytes(), t.dtype());
    (0..t.numel()).map(|i| load_f64(b, dt, i)).collect()
}

pub fn f32s(t: &HostTensor) -> Vec<f32> {
    t.to_f32_vec()
}

/// Every element as i64 (floats truncated, bools 0/1).
pub fn i64s(t: &HostTensor) -> Vec<i64> {
    let (b, dt) = (t.bytes(), t.dtype());
    (0..t.numel()).map(|i| load_i64(b, dt, i)).collect()
}

/// Stores f64 values as `ty.dtype` (floats round to nearest even, ints truncate, bool = != 0).
pub fn from_f64(ty: &TensorType, v: &[f64]) -> HostTensor {
    let mut t = HostTensor::zeros(ty.dtype, ty.shape.clone());
    let dt = ty.dtype;
    let b = t.bytes_mut();
    for (i, &x) in v.iter().enumerate() {
        match dt {
            DType::Bool => b[i] = u8::from(x != 0.0),
            d if d.is_float() => store_f64(b, d, i, x),
            d => store_i64(b, d, i, x as i64),
        }
    }
    t
}

pub fn from_f32(ty: &TensorType, v: &[f32]) -> HostTensor {
    HostTensor::from_f32_as(ty.dtype, ty.shape.clone(), v)
}

pub fn from_i64(ty: &TensorType, v: &[i64]) -> HostTensor {
    let mut t = HostTensor::zeros(ty.dtype, ty.shape.clone());
    let dt = ty.dtype;
    let b = t.bytes_mut();
    for (i, &x) in v.iter().enumerate() {
        if dt.is_float() {
            store_f64(b, dt, i, x as f64);
        } else {
            store_i64(b, dt, i, x);
        }
    }
    t
}

pub fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

pub fn strides_of(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1];
    }
    s
}

/// Normalizes a possibly negative dim against `rank`; a 0-d tensor takes dim 0 or -1, as
/// PyTorch's `maybe_wrap_dim` allows.
pub fn norm_dim(d: i64, rank: usize) -> R<usize> {
    let r = rank as i64;
    let n = if d < 0 { d + r.max(1) } else { d };
    if n < 0 || n >= r.max(1) {
        return Err(format!("dim {d} is out of range for rank {rank}"));
    }
    Ok(n as usize)
}

/// Flat source indices of a strided view (`strides` in elements, 0 = broadcast), in row-major
/// order of `shape`.
pub fn strided_indices(shape: &[usize], strides: &[usize], offset: usize) -> Vec<usize> {
    let n = numel(shape);
    let rank = shape.len();
    let mut out = Vec::with_capacity(n);
    let mut idx = vec![0usize; rank];
    let mut off = offset;
    for _ in 0..n {
        out.push(off);
        for d in (0..rank).rev() {
            idx[d] += 1;
            off += strides[d];
            if idx[d] < shape[d] {
                break;
            }
            off -= strides[d] * shape[d];
            idx[d] = 0;
        }
    }
    out
}

/// The broadcast of two shapes (numpy rules), or an error.
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> R<Vec<usize>> {
    let rank = a.len().max(b.len());
    let mut out = vec![0; rank];
    for i in 0..rank {
        let da = if i + a.len() >= rank {
            a[i + a.len() - rank]
        } else {
            1
        };
        let db = if i + b.len() >= rank {
            b[i + b.len() - rank]
        } else {
            1
        };
        out[i] = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => return Err(format!("shapes {a:?} and {b:?} do not broadcast")),
        };
    }
    Ok(out)
}

/// For each element of `out_shape`, the flat index of the element of `in_shape` it reads
/// under broadcasting.
pub fn broadcast_map(in_shape: &[usize], out_shape: &[usize]) -> R<Vec<usize>> {
    if in_shape.len() > out_shape.len() {
        return Err(format!("cannot broadcast {in_shape:?} to {out_shape:?}"));
    }
    let lead = out_shape.len() - in_shape.len();
    let st = strides_of(in_shape);
    let mut strides = vec![0; out_shape.len()];
    for (i, &d) in in_shape.iter().enumerate() {
        if d == out_shape[lead + i] {
            strides[lead + i] = st[i];
        } else if d != 1 {
            return Err(format!("cannot broadcast {in_shape:?} to {out_shape:?}"));
        }
    }
    Ok(strided_indices(out_shape, &strides, 0))
}

/// Copies the elements at `indices` of `t` (raw bytes, dtype kept) into a new tensor of `shape`.
pub fn take(t: &HostTensor, indices: &[usize], shape: Vec<usize>) -> HostTensor {
    let es = t.dtype().size_bytes();
    let src = t.bytes();
    let mut data = Vec::with_capacity(indices.len() * es);
    for &i in indices {
        data.extend_from_slice(&src[i * es..i * es + es]);
    }
    HostTensor::new(t.dtype(), shape, data).expect("take: sizes agree")
}

/// A strided view of `t` materialized contiguously.
pub fn strided(t: &HostTensor, shape: &[usize], strides: &[usize], offset: usize) -> HostTensor {
    take(t, &strided_indices(shape, strides, offset), shape.to_vec())
}

/// `t.permute(perm)`, contiguous.
pub fn permute(t: &HostTensor, perm: &[usize]) -> HostTensor {
    let st = strides_of(t.shape());
    let shape: Vec<usize> = perm.iter().map(|&p| t.shape()[p]).collect();
    let strides: Vec<usize> = perm.iter().map(|&p| st[p]).collect();
    strided(t, &shape, &strides, 0)
}

/// The same bytes with a new shape of equal element count.
pub fn reshaped(t: &HostTensor, shape: &[usize]) -> R<HostTensor> {
    if numel(shape) != t.numel() {
        return Err(format!(
            "cannot view {:?} ({} elements) as {shape:?}",
            t.shape(),
            t.numel()
        ));
    }
    Ok(HostTensor::new(t.dtype(), shape.to_vec(), t.bytes().to_vec()).expect("same size"))
}

/// Moves `dims` (sorted, distinct) to the end: returns the permuted tensor, the permutation,
/// the number of rows (kept elements) and the row length (reduced elements).
pub fn dims_last(t: &HostTensor, dims: &[usize]) -> (HostTensor, Vec<usize>, usize, usize) {
    let rank = t.shape().len();
    let mut perm: Vec<usize> = (0..rank).filter(|d| !dims.contains(d)).collect();
    perm.extend_from_slice(dims);
    let inner: usize = dims.iter().map(|&d| t.shape()[d]).product();
    let rows = t.numel().checked_div(inner).unwrap_or(0);
    let p = if perm.iter().enumerate().all(|(i, &p)| i == p) {
        t.clone()
    } else {
        permute(t, &perm)
    };
    (p, perm, rows, inner)
}

/// The inverse of a permutation.
pub fn inverse(perm: &[usize]) -> Vec<usize> {
    let mut inv = vec![0; perm.len()];
    for (i, &p) in perm.iter().enumerate() {
        inv[p] = i;
    }
    inv
}

/// Checks a tensor's rank.
pub fn want_rank(what: &str, t: &HostTensor, rank: usize) -> R<()> {
    if t.shape().len() != rank {
        return Err(format!(
            "{what} must be {rank}-D, got shape {:?}",
            t.shape()
        ));
    }
    Ok(())
}

/// The one value of a 0-d (or one-element) tensor operand, as f64.
pub fn scalar_f64(t: &HostTensor) -> R<f64> {
    match f64s(t).as_slice() {
        [v] => Ok(*v),
        v => Err(format!(
            "expected a one-element tensor, got {} elements",
            v.len()
        )),
    }
}
