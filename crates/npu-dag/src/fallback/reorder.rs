//! Element reordering: flip, roll, rot90, and the padding modes of `F.pad` (constant,
//! reflect, replicate, circular). Each builds, per output element, the flat position it
//! reads, so every dtype moves unchanged.

use super::data::{norm_dim, strides_of, take, R};
use super::vals::{want_shape, Vals};
use super::Args;
use npu_ir::{PadMode, TensorType};
use npu_runtime::tensor::HostTensor;

/// For every element of `out_shape` (row-major), `src(multi_index)`.
pub(super) fn remap<T>(out_shape: &[usize], mut src: impl FnMut(&[usize]) -> T) -> Vec<T> {
    let n: usize = out_shape.iter().product();
    let mut idx = vec![0usize; out_shape.len()];
    let mut res = Vec::with_capacity(n);
    for _ in 0..n {
        res.push(src(&idx));
        for d in (0..idx.len()).rev() {
            idx[d] += 1;
            if idx[d] < out_shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    res
}

fn flat(idx: &[usize], strides: &[usize]) -> usize {
    idx.iter().zip(strides).map(|(i, s)| i * s).sum()
}

fn dims_of(dims: &[i64], rank: usize) -> R<Vec<usize>> {
    dims.iter().map(|&d| norm_dim(d, rank)).collect()
}

pub fn flip(a: &Args, dims: &[i64]) -> R<HostTensor> {
    a.count(1, 1)?;
    let (x, out) = (a.input(0)?, a.out(0)?);
    want_shape("flip", x.shape(), out)?;
    let xs = x.shape();
    let d = dims_of(dims, xs.len())?;
    let st = strides_of(xs);
    let map = remap(xs, |i| {
        let mut j = i.to_vec();
        for &k in &d {
            j[k] = xs[k] - 1 - j[k];
        }
        flat(&j, &st)
    });
    Ok(take(x, &map, out.shape.clone()))
}

pub fn roll(a: &Args, shifts: &[i64], dims: &[i64]) -> R<HostTensor> {
    a.count(1, 1)?;
    let (x, out) = (a.input(0)?, a.out(0)?);
    want_shape("roll", x.shape(), out)?;
    if dims.is_empty() {
        let n = x.numel() as i64;
        let s = shifts.first().copied().unwrap_or(0);
        let map: Vec<usize> = (0..n)
            .map(|i| (i - s).rem_euclid(n.max(1)) as usize)
            .collect();
        return Ok(take(x, &map, out.shape.clone()));
    }
    let xs = x.shape();
    let d = dims_of(dims, xs.len())?;
    let st = strides_of(xs);
    let map = remap(xs, |i| {
        let mut j = i.to_vec();
        for (&k, &s) in d.iter().zip(shifts) {
            let n = xs[k] as i64;
            j[k] = (j[k] as i64 - s).rem_euclid(n.max(1)) as usize;
        }
        flat(&j, &st)
    });
    Ok(take(x, &map, out.shape.clone()))
}

pub fn rot90(a: &Args, k: i64, dims: [i64; 2]) -> R<HostTensor> {
    a.count(1, 1)?;
    let (x, out) = (a.input(0)?, a.out(0)?);
    let xs = x.shape();
    let (d0, d1) = (norm_dim(dims[0], xs.len())?, norm_dim(dims[1], xs.len())?);
    if d0 == d1 {
        return Err(format!("rot90 dims {dims:?} are the same"));
    }
    let k = k.rem_euclid(4);
    let mut shape = xs.to_vec();
    if k % 2 == 1 {
        shape.swap(d0, d1);
    }
    want_shape("rot90", &shape, out)?;
    let st = strides_of(xs);
    let (n0, n1) = (xs[d0], xs[d1]);
    let map = remap(&shape, |i| {
        let mut j = i.to_vec();
        let (a0, a1) = (i[d0], i[d1]);
        match k {
            1 => (j[d0], j[d1]) = (a1, n1 - 1 - a0),
            2 => (j[d0], j[d1]) = (n0 - 1 - a0, n1 - 1 - a1),
            3 => (j[d0], j[d1]) = (n0 - 1 - a1, a0),
            _ => {}
        }
        flat(&j, &st)
    });
    Ok(take(x, &map, out.shape.clone()))
}

/// Elements at `map` (None = `fill`), in `out`'s dtype.
pub(super) fn take_or_fill(
    x: &HostTensor,
    map: &[Option<usize>],
    fill: f64,
    out: &TensorType,
) -> R<HostTensor> {
    if let Some(m) = map.iter().copied().collect::<Option<Vec<usize>>>() {
        let t = take(x, &m, out.shape.clone());
        return t.cast(out.dtype).map_err(|e| e.to_string());
    }
    let v = match Vals::as_for(x, out) {
        Vals::F(v) => Vals::F(map.iter().map(|m| m.map_or(fill, |i| v[i])).collect()),
        Vals::I(v) => Vals::I(
            map.iter()
                .map(|m| m.map_or(fill as i64, |i| v[i]))
                .collect(),
        ),
    };
    Ok(v.store(out))
}

pub fn pad(a: &Args, mode: PadMode, pad: &[i64], value: f64) -> R<HostTensor> {
    a.count(1, 1)?;
    let (x, out) = (a.input(0)?, a.out(0)?);
    let xs = x.shape();
    if !pad.len().is_multiple_of(2) || pad.len() / 2 > xs.len() {
        return Err(format!("pad {pad:?} for an input {xs:?}"));
    }
    let rank = xs.len();
    // before[d] for every dim (0 for unpadded ones)
    let mut before = vec![0i64; rank];
    let mut after = vec![0i64; rank];
    let mut shape = xs.to_vec();
    for (p, pair) in pad.chunks(2).enumerate() {
        let d = rank - 1 - p;
        before[d] = pair[0];
        after[d] = pair[1];
        let len = xs[d] as i64 + pair[0] + pair[1];
        if len < 0 {
            return Err(format!("pad {pad:?} makes dim {d} of {xs:?} negative"));
        }
        if mode == PadMode::Reflect && (pair[0] >= xs[d] as i64 || pair[1] >= xs[d] as i64) {
            return Err(format!(
                "reflect pad {pair:?} must be smaller than dim {d} ({})",
                xs[d]
            ));
        }
        if mode != PadMode::Constant && xs[d] == 0 {
            return Err(format!("{mode:?} pad of an empty dim {d}"));
        }
        if mode == PadMode::Circular && xs[d] as i64 + pair[0].min(0) + pair[1].min(0) <= 0 {
            return Err(format!(
                "circular pad {pair:?} crops all of dim {d} ({})",
                xs[d]
            ));
        }
        shape[d] = len as usize;
    }
    want_shape("pad", &shape, out)?;
    let st = strides_of(xs);
    let map = remap(&shape, |o| {
        let mut off = 0;
        for d in 0..rank {
            let n = xs[d] as i64;
            let i = o[d] as i64 - before[d];
            let j = match mode {
                _ if (0..n).contains(&i) => i,
                PadMode::Constant => return None,
                PadMode::Reflect => {
                    let period = 2 * (n - 1).max(1);
                    let m = i.rem_euclid(period);
                    if m < n {
                        m
                    } else {
                        period - m
                    }
                }
                PadMode::Replicate => i.clamp(0, n - 1),
                // ATen crops first (negative pads), then wraps around what is left.
                PadMode::Circular => {
                    let (lo, hi) = ((-before[d]).max(0), (-after[d]).max(0));
                    lo + (o[d] as i64 - before[d].max(0)).rem_euclid(n - lo - hi)
                }
            };
            off += j as usize * st[d];
        }
        Some(off)
    });
    take_or_fill(x, &map, value, out)
}

/// `as_strided(x, size, stride, offset)`: element `i` of the output (row-major over its
/// shape) reads x's contiguous storage at `offset + sum(i_d * stride_d)`.
pub fn as_strided(a: &Args, stride: &[usize], offset: usize) -> R<HostTensor> {
    a.count(1, 1)?;
    let (x, out) = (a.input(0)?, a.out(0)?);
    if stride.len() != out.shape.len() {
        return Err(format!(
            "{} strides for a {:?} result",
            stride.len(),
            out.shape
        ));
    }
    let n = x.numel();
    let map = remap(&out.shape, |i| offset + flat(i, stride));
    if let Some(&far) = map.iter().max() {
        if far >= n {
            return Err(format!(
                "size {:?}, stride {stride:?} and offset {offset} reach element {far} of a \
                 storage of {n}",
                out.shape
            ));
        }
    }
    Ok(take(x, &map, out.shape.clone()))
}

/// `repeat_interleave` with a tensor of repeats: along `dim` (the flattened input when
/// None), element `i` appears `repeats[i]` times (one repeat count broadcasts); with
/// `indices`, the input is the repeats and the indices `0..n` are repeated.
pub fn repeat_interleave(a: &Args, dim: Option<i64>, indices: bool) -> R<HostTensor> {
    let out = a.out(0)?;
    let reps = super::data::i64s(a.input(usize::from(!indices))?);
    if let Some(r) = reps.iter().find(|&&r| r < 0) {
        return Err(format!("repeats must be non-negative, got {r}"));
    }
    if indices {
        a.count(1, 1)?;
        let v: Vec<i64> = reps
            .iter()
            .enumerate()
            .flat_map(|(i, &r)| std::iter::repeat_n(i as i64, r as usize))
            .collect();
        if v.len() != out.numel() {
            return Err(format!(
                "{} repeated indices, output {:?}",
                v.len(),
                out.shape
            ));
        }
        return Ok(super::data::from_i64(out, &v));
    }
    a.count(2, 2)?;
    let x = a.input(0)?;
    let (shape, d) = match dim {
        Some(d) if !x.shape().is_empty() => (x.shape().to_vec(), norm_dim(d, x.shape().len())?),
        _ => (vec![x.numel()], 0),
    };
    let len = shape[d];
    let reps = match reps.len() {
        1 => vec![reps[0]; len],
        n if n == len => reps,
        n => return Err(format!("{n} repeat counts for dim {d} of size {len}")),
    };
    let outer: usize = shape[..d].iter().product();
    let inner: usize = shape[d + 1..].iter().product();
    let mut map = Vec::new();
    for o in 0..outer {
        for (i, &r) in reps.iter().enumerate() {
            for _ in 0..r {
                let base = (o * len + i) * inner;
                map.extend(base..base + inner);
            }
        }
    }
    if map.len() != out.numel() {
        return Err(format!(
            "the repeats give {} elements, the output (output_size) has {}",
            map.len(),
            out.numel()
        ));
    }
    Ok(take(x, &map, out.shape.clone()))
}
