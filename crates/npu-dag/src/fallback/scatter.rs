//! Writes into a copy of `self`: scatter (plain, `value`, reductions), index_put,
//! index_add, index_fill, masked_scatter and the view scatters (select/slice/diagonal).
//! Without a reduction the last write to a position wins, as PyTorch's CPU kernels do.

use super::data::{broadcast_map, i64s, norm_dim, strided_indices, strides_of, R};
use super::vals::{want_shape, Elem, Vals};
use super::Args;
use npu_ir::{DType, Reduction, TensorType};
use npu_runtime::tensor::HostTensor;

/// Integer index values; floats and bools are refused.
pub(super) fn int_index(t: &HostTensor, what: &str) -> R<Vec<i64>> {
    if t.dtype().is_float() || t.dtype() == DType::Bool {
        return Err(format!(
            "{what} indices must be integers, got {}",
            t.dtype()
        ));
    }
    Ok(i64s(t))
}

/// `i` in `[0, n)`, or `[-n, n)` when `negative` (wrapping), else an error.
pub(super) fn position(i: i64, n: usize, negative: bool, what: &str) -> R<usize> {
    let j = if i < 0 && negative { i + n as i64 } else { i };
    if j < 0 || j >= n as i64 {
        return Err(format!("{what} index {i} is out of bounds for size {n}"));
    }
    Ok(j as usize)
}

/// `src` converted to `ty`'s dtype, raw bytes.
fn cast_to(src: &HostTensor, ty: &TensorType) -> R<HostTensor> {
    src.cast(ty.dtype).map_err(|e| e.to_string())
}

/// A copy of `x` (as `out`'s dtype) with the elements at `offsets` replaced by `src`'s
/// elements (broadcast to `view_shape`).
fn write_view(
    x: &HostTensor,
    src: &HostTensor,
    offsets: &[usize],
    view_shape: &[usize],
    out: &TensorType,
) -> R<HostTensor> {
    want_shape("scatter", x.shape(), out)?;
    let src = cast_to(src, out)?;
    let map = broadcast_map(src.shape(), view_shape)?;
    let mut res = cast_to(x, out)?;
    let es = out.dtype.size_bytes();
    let sb = src.bytes();
    let rb = res.bytes_mut();
    for (&off, &s) in offsets.iter().zip(&map) {
        rb[off * es..(off + 1) * es].copy_from_slice(&sb[s * es..(s + 1) * es]);
    }
    Ok(res)
}

/// Combines `src` into `dst` at `targets[i]` (one per source element).
fn reduce_into<T: Elem>(
    dst: &mut [T],
    src: &[T],
    targets: &[usize],
    reduce: Option<Reduction>,
    include_self: bool,
) {
    let mut count = vec![usize::from(include_self); dst.len()];
    let mut touched = vec![include_self; dst.len()];
    for (&t, &s) in targets.iter().zip(src) {
        let first = !touched[t];
        touched[t] = true;
        count[t] += 1;
        dst[t] = match reduce {
            None => s,
            Some(_) if first => s,
            Some(Reduction::Sum | Reduction::Mean) => dst[t].add(s),
            Some(Reduction::Prod) => dst[t].mul(s),
            Some(Reduction::Amax) => dst[t].extreme(s, true),
            Some(Reduction::Amin) => dst[t].extreme(s, false),
        };
    }
    if reduce == Some(Reduction::Mean) {
        for (d, &c) in dst.iter_mut().zip(&count) {
            if c > 1 || (c == 1 && !include_self) {
                *d = d.div_count(c);
            }
        }
    }
}

fn combine(
    x: &HostTensor,
    src: Vals,
    targets: &[usize],
    reduce: Option<Reduction>,
    include_self: bool,
    out: &TensorType,
) -> R<HostTensor> {
    want_shape("scatter", x.shape(), out)?;
    let res = match (Vals::as_for(x, out), src) {
        (Vals::F(mut d), Vals::F(s)) => {
            reduce_into(&mut d, &s, targets, reduce, include_self);
            Vals::F(d)
        }
        (Vals::I(mut d), Vals::I(s)) => {
            reduce_into(&mut d, &s, targets, reduce, include_self);
            Vals::I(d)
        }
        _ => return Err("scatter source and output arithmetic differ".into()),
    };
    Ok(res.store(out))
}

/// `scatter`/`scatter_add`/`scatter_reduce`: inputs self, index[, src].
pub fn scatter(
    a: &Args,
    dim: i64,
    value: Option<f64>,
    reduce: Option<Reduction>,
    include_self: bool,
) -> R<HostTensor> {
    a.count(
        if value.is_some() { 2 } else { 3 },
        if value.is_some() { 2 } else { 3 },
    )?;
    let (x, index, out) = (a.input(0)?, a.input(1)?, a.out(0)?);
    let xs: Vec<usize> = if x.shape().is_empty() {
        vec![1]
    } else {
        x.shape().to_vec()
    };
    let is: Vec<usize> = if index.shape().is_empty() {
        vec![1]
    } else {
        index.shape().to_vec()
    };
    let rank = xs.len();
    let d = norm_dim(dim, rank)?;
    if is.len() != rank {
        return Err(format!(
            "scatter index {:?} and self {:?} differ in rank",
            index.shape(),
            x.shape()
        ));
    }
    let ids = int_index(index, "scatter")?;
    let src = a.ins.get(2);
    let ss: Vec<usize> = match src {
        Some(s) if s.shape().is_empty() => vec![1; rank],
        Some(s) => s.shape().to_vec(),
        None => is.clone(),
    };
    if ss.len() != rank || (0..rank).any(|k| is[k] > ss[k] || (k != d && is[k] > xs[k])) {
        return Err(format!(
            "scatter index {is:?} does not fit self {xs:?} and src {ss:?}"
        ));
    }
    let (xst, sst) = (strides_of(&xs), strides_of(&ss));
    let mut targets = Vec::with_capacity(ids.len());
    let mut sources = Vec::with_capacity(ids.len());
    let mut pos = vec![0usize; rank];
    for &i in &ids {
        let j = position(i, xs[d], false, "scatter")?;
        let (mut t, mut s) = (0, 0);
        for k in 0..rank {
            t += if k == d { j } else { pos[k] } * xst[k];
            s += pos[k] * sst[k];
        }
        targets.push(t);
        sources.push(s);
        for k in (0..rank).rev() {
            pos[k] += 1;
            if pos[k] < is[k] {
                break;
            }
            pos[k] = 0;
        }
    }
    let src_vals = match (src, value) {
        (Some(s), _) => match Vals::as_for(s, out) {
            Vals::F(v) => Vals::F(sources.iter().map(|&i| v[i]).collect()),
            Vals::I(v) => Vals::I(sources.iter().map(|&i| v[i]).collect()),
        },
        (None, Some(v)) if out.dtype.is_float() => Vals::F(vec![v; targets.len()]),
        (None, Some(v)) => Vals::I(vec![v as i64; targets.len()]),
        (None, None) => return Err("scatter needs a source tensor or a value".into()),
    };
    combine(x, src_vals, &targets, reduce, include_self, out)
}

/// Flat offsets into a tensor of shape `xs` selected by advanced indexing with `entries`
/// (None = a full dim; an integer tensor indexes one dim; a bool mask indexes as many dims
/// as it has, like its `nonzero()`), in the result's row-major order, and the result shape.
pub(super) fn index_offsets(
    xs: &[usize],
    entries: &[Option<&HostTensor>],
) -> R<(Vec<usize>, Vec<usize>)> {
    let rank = xs.len();
    let mut dims: Vec<usize> = Vec::new();
    let mut tensors: Vec<(Vec<i64>, Vec<usize>)> = Vec::new();
    let mut d = 0;
    for e in entries {
        match e {
            None => d += 1,
            Some(t) if t.dtype() == DType::Bool || t.dtype() == DType::U8 => {
                let m = t.shape().len();
                if d + m > rank || t.shape() != &xs[d..d + m] {
                    return Err(format!(
                        "mask {:?} does not match dims {d}.. of {xs:?}",
                        t.shape()
                    ));
                }
                let mv = i64s(t);
                let ms = strides_of(t.shape());
                let hits: Vec<usize> = (0..mv.len()).filter(|&i| mv[i] != 0).collect();
                for (k, (&stride, &len)) in ms.iter().zip(t.shape()).enumerate() {
                    let coord = hits.iter().map(|&i| ((i / stride) % len) as i64).collect();
                    tensors.push((coord, vec![hits.len()]));
                    dims.push(d + k);
                }
                d += m;
            }
            Some(t) => {
                tensors.push((int_index(t, "index")?, t.shape().to_vec()));
                dims.push(d);
                d += 1;
            }
        }
    }
    if d > rank {
        return Err(format!("{d} indexed dims for a rank-{rank} tensor"));
    }
    let mut bshape: Vec<usize> = Vec::new();
    for (_, s) in &tensors {
        bshape = super::data::broadcast_shapes(&bshape, s)?;
    }
    let vals: Vec<Vec<i64>> = tensors
        .iter()
        .map(|(v, s)| -> R<Vec<i64>> {
            Ok(broadcast_map(s, &bshape)?
                .into_iter()
                .map(|i| v[i])
                .collect())
        })
        .collect::<R<_>>()?;
    let rest: Vec<usize> = (0..rank).filter(|d| !dims.contains(d)).collect();
    let adjacent = dims.windows(2).all(|w| w[1] == w[0] + 1);
    let first = dims.first().copied().unwrap_or(0);
    // result dims: [before.., B.., after..] when the indexed dims are adjacent, else [B.., rest..]
    let (before, after): (Vec<usize>, Vec<usize>) = if adjacent {
        rest.iter().partition(|&&d| d < first)
    } else {
        (Vec::new(), rest.clone())
    };
    let bef: Vec<usize> = before.iter().map(|&d| xs[d]).collect();
    let aft: Vec<usize> = after.iter().map(|&d| xs[d]).collect();
    let mut shape = bef.clone();
    shape.extend(&bshape);
    shape.extend(&aft);
    let xst = strides_of(xs);
    let part = |shape: &[usize], dims: &[usize]| -> Vec<usize> {
        let st: Vec<usize> = dims.iter().map(|&d| xst[d]).collect();
        strided_indices(shape, &st, 0)
    };
    let (bo, ao) = (part(&bef, &before), part(&aft, &after));
    let nb: usize = bshape.iter().product();
    let mut offsets = Vec::with_capacity(bo.len() * nb * ao.len());
    for &b0 in &bo {
        for b in 0..nb {
            let mut base = b0;
            for (v, &d) in vals.iter().zip(&dims) {
                base += position(v[b], xs[d], true, "index")? * xst[d];
            }
            offsets.extend(ao.iter().map(|&a| base + a));
        }
    }
    Ok((offsets, shape))
}

/// `index_put(self, indices.., values, accumulate)`.
pub fn index_put(a: &Args, indexed: &[bool], accumulate: bool) -> R<HostTensor> {
    let (x, out) = (a.input(0)?, a.out(0)?);
    let n_idx = indexed.iter().filter(|p| **p).count();
    a.count(n_idx + 2, n_idx + 2)?;
    let mut it = a.ins[1..=n_idx].iter();
    let entries: Vec<Option<&HostTensor>> = indexed
        .iter()
        .map(|&p| if p { it.next().copied() } else { None })
        .collect();
    let (offsets, shape) = index_offsets(x.shape(), &entries)?;
    let values = a.input(n_idx + 1)?;
    let map = broadcast_map(values.shape(), &shape)?;
    let src = match Vals::as_for(values, out) {
        Vals::F(v) => Vals::F(map.iter().map(|&i| v[i]).collect()),
        Vals::I(v) => Vals::I(map.iter().map(|&i| v[i]).collect()),
    };
    combine(
        x,
        src,
        &offsets,
        accumulate.then_some(Reduction::Sum),
        true,
        out,
    )
}

/// Offsets of slices `index[k]` along `dim` (index_add/index_fill), per source slice.
/// `negative`: whether PyTorch wraps negative indices (index_fill) or raises (index_add).
fn slices(xs: &[usize], d: usize, ids: &[i64], negative: bool, what: &str) -> R<Vec<usize>> {
    let outer: usize = xs[..d].iter().product();
    let inner: usize = xs[d + 1..].iter().product();
    let mut t = Vec::with_capacity(outer * ids.len() * inner);
    for o in 0..outer {
        for &i in ids {
            let j = position(i, xs[d], negative, what)?;
            let base = (o * xs[d] + j) * inner;
            t.extend(base..base + inner);
        }
    }
    Ok(t)
}

fn shape_or_1(t: &HostTensor) -> Vec<usize> {
    if t.shape().is_empty() {
        vec![1]
    } else {
        t.shape().to_vec()
    }
}

/// `index_add(self, dim, index, source, alpha)`.
pub fn index_add(a: &Args, dim: i64, alpha: f64) -> R<HostTensor> {
    a.count(3, 3)?;
    let (x, index, src, out) = (a.input(0)?, a.input(1)?, a.input(2)?, a.out(0)?);
    let xs = shape_or_1(x);
    let d = norm_dim(dim, xs.len())?;
    let ids = int_index(index, "index_add")?;
    let targets = slices(&xs, d, &ids, false, "index_add")?;
    if src.numel() != targets.len() {
        return Err(format!(
            "index_add source {:?} for {} indices of self {xs:?}",
            src.shape(),
            ids.len()
        ));
    }
    let s = match Vals::as_for(src, out) {
        Vals::F(v) => Vals::F(v.into_iter().map(|x| x * alpha).collect()),
        Vals::I(v) => Vals::I(
            v.into_iter()
                .map(|x| x.wrapping_mul(alpha as i64))
                .collect(),
        ),
    };
    combine(x, s, &targets, Some(Reduction::Sum), true, out)
}

/// `index_fill(self, dim, index, value)`; a tensor value is input 2.
pub fn index_fill(a: &Args, dim: i64, value: Option<f64>) -> R<HostTensor> {
    let (x, index, out) = (a.input(0)?, a.input(1)?, a.out(0)?);
    let v = match value {
        // the Scalar in the output's dtype, as ATen converts it
        Some(v) => super::data::from_f64(
            &TensorType {
                shape: vec![],
                dtype: out.dtype,
            },
            &[v],
        ),
        None => a.input(2)?.clone(),
    };
    let xs = shape_or_1(x);
    let d = norm_dim(dim, xs.len())?;
    let ids = int_index(index, "index_fill")?;
    let targets = slices(&xs, d, &ids, true, "index_fill")?;
    write_view(x, &v, &targets, &[targets.len()], out)
}

/// `masked_scatter(self, mask, source)`: true positions (mask broadcast to self) take
/// source's elements in row-major order.
pub fn masked_scatter(a: &Args) -> R<HostTensor> {
    a.count(3, 3)?;
    let (x, mask, src, out) = (a.input(0)?, a.input(1)?, a.input(2)?, a.out(0)?);
    // self and mask broadcast together (the result has the common shape)
    let x = &super::data::take(x, &broadcast_map(x.shape(), &out.shape)?, out.shape.clone());
    let mv = i64s(mask);
    let map = broadcast_map(mask.shape(), x.shape())?;
    let targets: Vec<usize> = (0..x.numel()).filter(|&i| mv[map[i]] != 0).collect();
    if targets.len() > src.numel() {
        return Err(format!(
            "masked_scatter needs {} source elements, got {}",
            targets.len(),
            src.numel()
        ));
    }
    let flat = super::data::take(
        src,
        &(0..targets.len()).collect::<Vec<_>>(),
        vec![targets.len()],
    );
    write_view(x, &flat, &targets, &[targets.len()], out)
}

/// Offsets of `x.select(d, index)` (shape without d).
pub(super) fn select_view(xs: &[usize], d: usize, index: i64) -> R<(Vec<usize>, Vec<usize>)> {
    let st = strides_of(xs);
    let j = position(index, xs[d], true, "select")?;
    let mut shape = xs.to_vec();
    let mut strides = st.clone();
    shape.remove(d);
    strides.remove(d);
    Ok((strided_indices(&shape, &strides, j * st[d]), shape))
}

/// Offsets of the diagonal view (`torch.diagonal`): other dims, then the diagonal.
pub(super) fn diagonal_view(
    xs: &[usize],
    offset: i64,
    dim1: i64,
    dim2: i64,
) -> R<(Vec<usize>, Vec<usize>)> {
    let (d1, d2) = (norm_dim(dim1, xs.len())?, norm_dim(dim2, xs.len())?);
    if d1 == d2 {
        return Err(format!("diagonal dims {dim1} and {dim2} are the same"));
    }
    let st = strides_of(xs);
    let (n1, n2) = (xs[d1] as i64, xs[d2] as i64);
    let len = (if offset >= 0 {
        n1.min(n2 - offset)
    } else {
        (n1 + offset).min(n2)
    })
    .max(0) as usize;
    let base = if len == 0 {
        0
    } else if offset >= 0 {
        offset as usize * st[d2]
    } else {
        (-offset) as usize * st[d1]
    };
    let mut shape = Vec::new();
    let mut strides = Vec::new();
    for k in (0..xs.len()).filter(|&k| k != d1 && k != d2) {
        shape.push(xs[k]);
        strides.push(st[k]);
    }
    shape.push(len);
    strides.push(st[d1] + st[d2]);
    Ok((strided_indices(&shape, &strides, base), shape))
}

pub fn select_scatter(a: &Args, dim: i64, index: i64) -> R<HostTensor> {
    a.count(2, 2)?;
    let x = a.input(0)?;
    let d = norm_dim(dim, x.shape().len())?;
    let (offsets, shape) = select_view(x.shape(), d, index)?;
    write_view(x, a.input(1)?, &offsets, &shape, a.out(0)?)
}

pub fn slice_scatter(a: &Args, dim: i64, start: i64, end: i64, step: i64) -> R<HostTensor> {
    a.count(2, 2)?;
    let x = a.input(0)?;
    let xs = x.shape();
    let d = norm_dim(dim, xs.len())?;
    let n = xs[d] as i64;
    let clamp = |i: i64| (if i < 0 { i.saturating_add(n) } else { i }).clamp(0, n) as usize;
    let (s, e) = (clamp(start), clamp(end).max(clamp(start)));
    let mut shape = xs.to_vec();
    shape[d] = (e - s).div_ceil(step.max(1) as usize);
    let mut st = strides_of(xs);
    let base = s * st[d];
    st[d] *= step.max(1) as usize;
    let offsets = strided_indices(&shape, &st, base);
    write_view(x, a.input(1)?, &offsets, &shape, a.out(0)?)
}

pub fn diagonal_scatter(a: &Args, offset: i64, dim1: i64, dim2: i64) -> R<HostTensor> {
    a.count(2, 2)?;
    let x = a.input(0)?;
    let (offsets, shape) = diagonal_view(x.shape(), offset, dim1, dim2)?;
    write_view(x, a.input(1)?, &offsets, &shape, a.out(0)?)
}

/// `take_along_dim(self, indices, dim)`: indices and self broadcast on every dim but
/// `dim`, then a gather; without `dim`, a gather from the flattened self.
pub fn take_along_dim(a: &Args, dim: Option<i64>) -> R<HostTensor> {
    a.count(2, 2)?;
    let (x, index, out) = (a.input(0)?, a.input(1)?, a.out(0)?);
    let ids = int_index(index, "take_along_dim")?;
    let Some(dim) = dim else {
        let n = x.numel();
        let m = ids
            .iter()
            .map(|&i| position(i, n, true, "take_along_dim"))
            .collect::<R<Vec<usize>>>()?;
        return Ok(super::data::take(x, &m, out.shape.clone()));
    };
    let (xs, is) = (x.shape(), index.shape());
    let d = norm_dim(dim, xs.len())?;
    if is.len() != xs.len() || out.shape.len() != xs.len() || out.shape[d] != is[d] {
        return Err(format!(
            "take_along_dim of {xs:?} with indices {is:?} into {:?}",
            out.shape
        ));
    }
    let (xst, ist) = (strides_of(xs), strides_of(is));
    let map = super::reorder::remap(&out.shape, |p| {
        let (mut xo, mut io) = (0, 0);
        for k in 0..p.len() {
            io += if is[k] == 1 { 0 } else { p[k] } * ist[k];
            if k != d {
                xo += if xs[k] == 1 { 0 } else { p[k] } * xst[k];
            }
        }
        position(ids[io], xs[d], true, "take_along_dim").map(|j| xo + j * xst[d])
    })
    .into_iter()
    .collect::<R<Vec<usize>>>()?;
    Ok(super::data::take(x, &map, out.shape.clone()))
}
