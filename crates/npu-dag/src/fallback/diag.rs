//! Triangles and diagonals: tril/triu, diag, diagonal, diag_embed, eye.

use super::data::R;
use super::reorder::{remap, take_or_fill};
use super::scatter::diagonal_view;
use super::vals::want_shape;
use super::Args;
use npu_runtime::tensor::HostTensor;

/// `tril`/`triu` over the last two dims; the rest is zero.
pub fn triangle(a: &Args, upper: bool, diagonal: i64) -> R<HostTensor> {
    a.count(1, 1)?;
    let (x, out) = (a.input(0)?, a.out(0)?);
    let xs = x.shape();
    if xs.len() < 2 {
        return Err(format!("tril/triu needs at least 2 dims, got {xs:?}"));
    }
    want_shape("tril/triu", xs, out)?;
    let r = xs.len();
    let mut flat = 0;
    let map = remap(xs, |i| {
        let k = i[r - 1] as i64 - i[r - 2] as i64;
        let keep = if upper { k >= diagonal } else { k <= diagonal };
        let at = flat;
        flat += 1;
        keep.then_some(at)
    });
    take_or_fill(x, &map, 0.0, out)
}

/// `diagonal(x, offset, dim1, dim2)`, copied.
pub fn diagonal(a: &Args, offset: i64, dim1: i64, dim2: i64) -> R<HostTensor> {
    a.count(1, 1)?;
    let (x, out) = (a.input(0)?, a.out(0)?);
    let (offsets, shape) = diagonal_view(x.shape(), offset, dim1, dim2)?;
    want_shape("diagonal", &shape, out)?;
    let map: Vec<Option<usize>> = offsets.into_iter().map(Some).collect();
    take_or_fill(x, &map, 0.0, out)
}

/// Places the last dim of `x` on the diagonal (`offset`, `dim1`, `dim2`) of a zero tensor
/// of the output's shape.
fn embed(
    x: &HostTensor,
    out_shape: &[usize],
    offset: i64,
    dim1: i64,
    dim2: i64,
) -> R<Vec<Option<usize>>> {
    let (offsets, shape) = diagonal_view(out_shape, offset, dim1, dim2)?;
    if shape != x.shape() {
        return Err(format!(
            "diagonal {shape:?} of {out_shape:?} does not hold {:?}",
            x.shape()
        ));
    }
    let mut map = vec![None; out_shape.iter().product()];
    for (k, o) in offsets.into_iter().enumerate() {
        map[o] = Some(k);
    }
    Ok(map)
}

pub fn diag_embed(a: &Args, offset: i64, dim1: i64, dim2: i64) -> R<HostTensor> {
    a.count(1, 1)?;
    let (x, out) = (a.input(0)?, a.out(0)?);
    let map = embed(x, &out.shape, offset, dim1, dim2)?;
    take_or_fill(x, &map, 0.0, out)
}

/// `diag`: a vector becomes a square matrix with it on diagonal `d`; a matrix gives its
/// diagonal `d`.
pub fn diag(a: &Args, d: i64) -> R<HostTensor> {
    a.count(1, 1)?;
    let (x, out) = (a.input(0)?, a.out(0)?);
    match x.shape().len() {
        1 => {
            let map = embed(x, &out.shape, d, 0, 1)?;
            take_or_fill(x, &map, 0.0, out)
        }
        2 => diagonal(a, d, 0, 1),
        _ => Err(format!(
            "diag needs a 1-D or 2-D input, got {:?}",
            x.shape()
        )),
    }
}

/// `eye(n[, m])`: the output's shape.
pub fn eye(a: &Args) -> R<HostTensor> {
    let out = a.out(0)?;
    let [n, m] = out.shape[..] else {
        return Err(format!("eye output must be 2-D, got {out}"));
    };
    let v: Vec<i64> = (0..n * m).map(|i| i64::from(i / m == i % m)).collect();
    Ok(super::data::from_i64(out, &v))
}

/// `tril_indices`/`triu_indices(row, col, offset)`: `[2, n]` int64 row and column
/// coordinates of the triangle's elements in row-major order.
pub fn triangle_indices(
    a: &Args,
    row: usize,
    col: usize,
    offset: i64,
    upper: bool,
) -> R<HostTensor> {
    let out = a.out(0)?;
    let (mut rows, mut cols) = (Vec::new(), Vec::new());
    for r in 0..row {
        for c in 0..col {
            let k = c as i64 - r as i64;
            if (upper && k >= offset) || (!upper && k <= offset) {
                rows.push(r as i64);
                cols.push(c as i64);
            }
        }
    }
    if out.shape != [2, rows.len()] {
        return Err(format!(
            "the triangle has {} elements, the output is {:?}",
            rows.len(),
            out.shape
        ));
    }
    rows.extend(cols);
    Ok(super::data::from_i64(out, &rows))
}
