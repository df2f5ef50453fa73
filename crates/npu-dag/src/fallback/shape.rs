//! Data movement: views (reshape/transpose/permute/expand/slice) materialized contiguously,
//! cat/stack/split, indexing (embedding, gather, index_select, index.Tensor, index_copy).
//! Everything copies raw elements, so every dtype works unchanged.

use super::data::{
    broadcast_map, i64s, norm_dim, numel, permute as permute_t, reshaped, strided, strides_of,
    take, R,
};
use super::Args;
use npu_runtime::tensor::HostTensor;

pub fn reshape(a: &Args) -> R<HostTensor> {
    a.count(1, 1)?;
    reshaped(a.input(0)?, &a.out(0)?.shape)
}

pub fn transpose(a: &Args, d0: i64, d1: i64) -> R<HostTensor> {
    a.count(1, 1)?;
    let x = a.input(0)?;
    let rank = x.shape().len();
    if rank == 0 {
        return Ok(x.clone());
    }
    let mut perm: Vec<usize> = (0..rank).collect();
    perm.swap(norm_dim(d0, rank)?, norm_dim(d1, rank)?);
    Ok(permute_t(x, &perm))
}

pub fn permute(a: &Args, dims: &[i64]) -> R<HostTensor> {
    a.count(1, 1)?;
    let x = a.input(0)?;
    let rank = x.shape().len();
    let perm = dims
        .iter()
        .map(|&d| norm_dim(d, rank))
        .collect::<R<Vec<usize>>>()?;
    let mut seen = perm.clone();
    seen.sort_unstable();
    if seen != (0..rank).collect::<Vec<_>>() {
        return Err(format!("{dims:?} is not a permutation of {rank} dims"));
    }
    Ok(permute_t(x, &perm))
}

pub fn expand(a: &Args) -> R<HostTensor> {
    a.count(1, 1)?;
    let (x, out) = (a.input(0)?, a.out(0)?);
    Ok(take(
        x,
        &broadcast_map(x.shape(), &out.shape)?,
        out.shape.clone(),
    ))
}

fn clamp_index(i: i64, n: usize) -> usize {
    let n = n as i64;
    let i = if i < 0 { i.saturating_add(n) } else { i };
    i.clamp(0, n) as usize
}

pub fn slice(a: &Args, dim: i64, start: i64, end: i64, step: i64) -> R<HostTensor> {
    a.count(1, 1)?;
    let (x, out) = (a.input(0)?, a.out(0)?);
    let rank = x.shape().len();
    let d = norm_dim(dim, rank)?;
    if step < 1 {
        return Err(format!("slice step must be positive, got {step}"));
    }
    let n = x.shape()[d];
    let s = clamp_index(start, n);
    let e = clamp_index(end, n).max(s);
    let len = (e - s).div_ceil(step as usize);
    let mut shape = x.shape().to_vec();
    shape[d] = len;
    if shape != out.shape {
        return Err(format!(
            "slice [{start}:{end}:{step}] of dim {d} gives {shape:?}, the output is {:?}",
            out.shape
        ));
    }
    let mut st = strides_of(x.shape());
    let offset = s * st[d];
    st[d] *= step as usize;
    Ok(strided(x, &shape, &st, offset))
}

/// Concatenates along `d` (all inputs have the same shape except at `d`).
fn concat(parts: &[&HostTensor], d: usize, out_shape: &[usize]) -> R<HostTensor> {
    let dtype = parts
        .first()
        .map(|t| t.dtype())
        .ok_or("cat of no tensors")?;
    let outer: usize = out_shape[..d].iter().product();
    let es = dtype.size_bytes();
    let mut data = Vec::with_capacity(numel(out_shape) * es);
    for o in 0..outer {
        for t in parts {
            if t.dtype() != dtype {
                return Err(format!("cat of {} and {}", dtype, t.dtype()));
            }
            let block = t.numel() / outer.max(1);
            data.extend_from_slice(&t.bytes()[o * block * es..(o + 1) * block * es]);
        }
    }
    HostTensor::new(dtype, out_shape.to_vec(), data).map_err(|e| format!("cat: {e}"))
}

pub fn cat(a: &Args, dim: i64) -> R<HostTensor> {
    let out = a.out(0)?;
    // legacy 0-element 1-D operands (an empty DynamicCache) are skipped, as torch does
    let parts: Vec<&HostTensor> = a
        .ins
        .iter()
        .copied()
        .filter(|t| !(t.numel() == 0 && t.shape().len() == 1))
        .collect();
    let rank = out.shape.len();
    let d = norm_dim(dim, rank)?;
    let mut total = 0;
    for t in &parts {
        let s = t.shape();
        if s.len() != rank
            || s.iter()
                .zip(&out.shape)
                .enumerate()
                .any(|(i, (a, b))| i != d && a != b)
        {
            return Err(format!(
                "cat operand {:?} does not fit the output {:?} at dim {d}",
                s, out.shape
            ));
        }
        total += s[d];
    }
    if total != out.shape[d] {
        return Err(format!(
            "cat sizes sum to {total} at dim {d}, the output has {}",
            out.shape[d]
        ));
    }
    let parts: Vec<HostTensor> = parts
        .into_iter()
        .map(|t| t.cast(out.dtype).map_err(|e| e.to_string()))
        .collect::<R<_>>()?;
    let refs: Vec<&HostTensor> = parts.iter().collect();
    concat(&refs, d, &out.shape)
}

pub fn stack(a: &Args, dim: i64) -> R<HostTensor> {
    let out = a.out(0)?;
    let d = norm_dim(dim, out.shape.len())?;
    let parts = a
        .ins
        .iter()
        .map(|t| {
            let mut s = t.shape().to_vec();
            if d > s.len() {
                return Err(format!("stack dim {dim} for operand {s:?}"));
            }
            s.insert(d, 1);
            reshaped(t, &s)
        })
        .collect::<R<Vec<_>>>()?;
    let refs: Vec<&HostTensor> = parts.iter().collect();
    if parts.len() != out.shape[d] {
        return Err(format!(
            "stack of {} tensors, output dim {d} is {}",
            parts.len(),
            out.shape[d]
        ));
    }
    concat(&refs, d, &out.shape)
}

/// chunk/split: consecutive slices along `dim`, sized by the outputs.
pub fn split(a: &Args, dim: i64) -> R<Vec<HostTensor>> {
    a.count(1, 1)?;
    let x = a.input(0)?;
    let d = norm_dim(dim, x.shape().len())?;
    let st = strides_of(x.shape());
    let mut off = 0;
    let mut res = Vec::new();
    for out in a.outs {
        let len = out.shape.get(d).copied().unwrap_or(0);
        let mut shape = x.shape().to_vec();
        shape[d] = len;
        if shape != out.shape || off + len > x.shape()[d] {
            return Err(format!(
                "split piece {:?} does not fit input {:?} at offset {off}",
                out.shape,
                x.shape()
            ));
        }
        res.push(strided(x, &shape, &st, off * st[d]));
        off += len;
    }
    Ok(res)
}

fn checked_index(i: i64, n: usize, what: &str) -> R<usize> {
    let j = if i < 0 { i + n as i64 } else { i };
    if j < 0 || j >= n as i64 {
        return Err(format!("{what} index {i} is out of range for size {n}"));
    }
    Ok(j as usize)
}

fn int_index(t: &HostTensor, what: &str) -> R<Vec<i64>> {
    if t.dtype().is_float() || t.dtype() == npu_ir::DType::Bool {
        return Err(format!(
            "{what} indices must be integers, got {}",
            t.dtype()
        ));
    }
    Ok(i64s(t))
}

pub fn embedding(a: &Args) -> R<HostTensor> {
    a.count(2, 2)?;
    let (w, ids, out) = (a.input(0)?, a.input(1)?, a.out(0)?);
    super::data::want_rank("embedding weight", w, 2)?;
    let (v, dim) = (w.shape()[0], w.shape()[1]);
    let mut idx = Vec::with_capacity(ids.numel() * dim);
    for i in int_index(ids, "embedding")? {
        // PyTorch raises on a negative id (it does not wrap like indexing)
        let row = super::scatter::position(i, v, false, "embedding")?;
        idx.extend(row * dim..(row + 1) * dim);
    }
    let t = take(w, &idx, out.shape.clone());
    Ok(if t.dtype() != out.dtype {
        t.cast(out.dtype).map_err(|e| e.to_string())?
    } else {
        t
    })
}

/// `embedding_renorm_(weight, ids, max_norm, norm_type)` as a function: each distinct row
/// `ids` names whose `norm_type`-norm exceeds `max_norm` is scaled by
/// `max_norm / (norm + 1e-7)`, as ATen does; the result is the whole weight.
pub fn embedding_renorm(a: &Args, max_norm: f64, norm_type: f64) -> R<HostTensor> {
    a.count(2, 2)?;
    let (w, ids, out) = (a.input(0)?, a.input(1)?, a.out(0)?);
    super::data::want_rank("embedding weight", w, 2)?;
    let (v, dim) = (w.shape()[0], w.shape()[1]);
    let mut rows: Vec<usize> = int_index(ids, "embedding_renorm")?
        .into_iter()
        .map(|i| super::scatter::position(i, v, false, "embedding_renorm"))
        .collect::<R<_>>()?;
    rows.sort_unstable();
    rows.dedup();
    let mut x = super::data::f64s(w);
    for r in rows {
        let row = &mut x[r * dim..(r + 1) * dim];
        let norm = if norm_type == f64::INFINITY {
            row.iter().fold(0.0f64, |m, &e| m.max(e.abs()))
        } else if norm_type == 1.0 {
            row.iter().map(|e| e.abs()).sum()
        } else {
            row.iter()
                .map(|e| e.abs().powf(norm_type))
                .sum::<f64>()
                .powf(1.0 / norm_type)
        };
        if norm > max_norm {
            let scale = max_norm / (norm + 1e-7);
            row.iter_mut().for_each(|e| *e *= scale);
        }
    }
    Ok(super::data::from_f64(out, &x))
}

pub fn index_select(a: &Args, dim: i64) -> R<HostTensor> {
    a.count(2, 2)?;
    let (x, index, out) = (a.input(0)?, a.input(1)?, a.out(0)?);
    let rank = x.shape().len().max(1);
    let d = norm_dim(dim, rank)?;
    let shape = if x.shape().is_empty() {
        vec![1]
    } else {
        x.shape().to_vec()
    };
    let ids = int_index(index, "index_select")?;
    let outer: usize = shape[..d].iter().product();
    let inner: usize = shape[d + 1..].iter().product();
    let mut idx = Vec::with_capacity(outer * ids.len() * inner);
    for o in 0..outer {
        for &i in &ids {
            let j = checked_index(i, shape[d], "index_select")?;
            let base = (o * shape[d] + j) * inner;
            idx.extend(base..base + inner);
        }
    }
    if idx.len() != out.numel() {
        return Err(format!(
            "index_select gives {} elements, output {:?}",
            idx.len(),
            out.shape
        ));
    }
    Ok(take(x, &idx, out.shape.clone()))
}

pub fn gather(a: &Args, dim: i64) -> R<HostTensor> {
    a.count(2, 2)?;
    let (x, index, out) = (a.input(0)?, a.input(1)?, a.out(0)?);
    // a 0-d input gathers like a one-element vector (ATen allows a 1-D index there)
    let x1;
    let x = if x.shape().is_empty() && index.shape().len() == 1 {
        x1 = reshaped(x, &[1])?;
        &x1
    } else {
        x
    };
    let rank = x.shape().len();
    let d = norm_dim(dim, rank.max(1))?;
    if index.shape().len() != rank {
        return Err(format!(
            "gather index rank {} differs from input rank {rank}",
            index.shape().len()
        ));
    }
    let ids = int_index(index, "gather")?;
    let ishape = index.shape();
    let xs = strides_of(x.shape());
    let mut pos = vec![0usize; rank];
    let mut idx = Vec::with_capacity(ids.len());
    for &i in &ids {
        let mut off = 0;
        for k in 0..rank {
            let c = if k == d {
                super::scatter::position(i, x.shape()[d], false, "gather")?
            } else {
                if pos[k] >= x.shape()[k] {
                    return Err(format!(
                        "gather index shape {ishape:?} exceeds input {:?} at dim {k}",
                        x.shape()
                    ));
                }
                pos[k]
            };
            off += c * xs[k];
        }
        idx.push(off);
        for k in (0..rank).rev() {
            pos[k] += 1;
            if pos[k] < ishape[k] {
                break;
            }
            pos[k] = 0;
        }
    }
    Ok(take(x, &idx, out.shape.clone()))
}

/// `index.Tensor`: advanced indexing with the index tensors on the dims in `indexed`.
pub fn index(a: &Args, indexed: &[bool]) -> R<HostTensor> {
    let (x, out) = (a.input(0)?, a.out(0)?);
    let n_idx = indexed.iter().filter(|p| **p).count();
    a.count(n_idx + 1, n_idx + 1)?;
    let mut it = a.ins[1..].iter();
    let entries: Vec<Option<&HostTensor>> = indexed
        .iter()
        .map(|&p| if p { it.next().copied() } else { None })
        .collect();
    let (idx, shape) = super::scatter::index_offsets(x.shape(), &entries)?;
    if shape != out.shape {
        return Err(format!(
            "indexing gives {shape:?}, the output is {:?}",
            out.shape
        ));
    }
    Ok(take(x, &idx, out.shape.clone()))
}

/// `index_copy(self, dim, index, source)`: a copy of self with slices replaced.
pub fn index_copy(a: &Args, dim: i64) -> R<HostTensor> {
    a.count(3, 3)?;
    let (x, index, src, out) = (a.input(0)?, a.input(1)?, a.input(2)?, a.out(0)?);
    let rank = x.shape().len();
    let d = norm_dim(dim, rank.max(1))?;
    let ids = int_index(index, "index_copy")?;
    let src = src.cast(x.dtype()).map_err(|e| e.to_string())?;
    // a 0-d tensor indexes like a one-element vector
    let xs: &[usize] = if rank == 0 { &[1] } else { x.shape() };
    let outer: usize = xs[..d].iter().product();
    let inner: usize = xs[d + 1..].iter().product();
    let mut want = xs.to_vec();
    want[d] = ids.len();
    if src.shape() != want.as_slice() && src.numel() != numel(&want) {
        return Err(format!(
            "index_copy source {:?}, expected {want:?}",
            src.shape()
        ));
    }
    let es = x.dtype().size_bytes();
    let mut data = x.bytes().to_vec();
    for (k, &i) in ids.iter().enumerate() {
        let j = checked_index(i, xs[d], "index_copy")?;
        for o in 0..outer {
            let dst = (o * xs[d] + j) * inner * es;
            let s = (o * ids.len() + k) * inner * es;
            data[dst..dst + inner * es].copy_from_slice(&src.bytes()[s..s + inner * es]);
        }
    }
    let t = HostTensor::new(x.dtype(), out.shape.clone(), data).map_err(|e| e.to_string())?;
    Ok(t)
}
