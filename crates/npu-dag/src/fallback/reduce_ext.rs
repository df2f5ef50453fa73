//! Reductions of the extended set: prod, any/all, count_nonzero. Reduced dims are moved
//! last (see `reduce::rows`), so each output element reduces one contiguous row.

use super::data::{from_i64, R};
use super::reduce::{check_numel, reduce_dims, rows};
use super::vals::{map_vals, Elem, Vals};
use super::Args;
use npu_runtime::tensor::HostTensor;

/// Rows of `x` over `dims` (empty = all) and the row length.
fn row_vals(a: &Args, dims: &[i64], as_output: bool) -> R<(Vals, usize, usize)> {
    a.count(1, 1)?;
    let (x, out) = (a.input(0)?, a.out(0)?);
    let d = reduce_dims(dims, x.shape().len())?;
    let (p, _, nrows, inner) = rows(x, &d);
    check_numel(out, nrows)?;
    let v = if as_output {
        Vals::as_for(&p, out)
    } else {
        Vals::of(&p)
    };
    Ok((v, nrows, inner))
}

fn per_row<T: Elem, U>(v: &[T], nrows: usize, inner: usize, f: impl Fn(&[T]) -> U) -> Vec<U> {
    (0..nrows)
        .map(|r| f(&v[r * inner..(r + 1) * inner]))
        .collect()
}

/// `prod` over one dim (or all), in the output's arithmetic (ints wrap).
pub fn prod(a: &Args, dim: Option<i64>) -> R<HostTensor> {
    let dims: Vec<i64> = dim.into_iter().collect();
    let (v, nrows, inner) = row_vals(a, &dims, true)?;
    fn p<T: Elem>(row: &[T]) -> T {
        row.iter().fold(T::one(), |acc, &x| acc.mul(x))
    }
    let r = map_vals!(v, v => per_row(&v, nrows, inner, p));
    Ok(r.store(a.out(0)?))
}

/// `any`/`all`: truthiness (NaN is true), bool or uint8 result.
pub fn any_all(a: &Args, all: bool, dims: &[i64]) -> R<HostTensor> {
    let (v, nrows, inner) = row_vals(a, dims, false)?;
    let test = |t: Vec<bool>| -> Vec<i64> { t.into_iter().map(i64::from).collect() };
    fn f<T: Elem>(row: &[T], all: bool) -> bool {
        if all {
            row.iter().all(|x| x.truthy())
        } else {
            row.iter().any(|x| x.truthy())
        }
    }
    let r = match v {
        Vals::F(v) => test(per_row(&v, nrows, inner, |r| f(r, all))),
        Vals::I(v) => test(per_row(&v, nrows, inner, |r| f(r, all))),
    };
    Ok(from_i64(a.out(0)?, &r))
}

pub fn count_nonzero(a: &Args, dims: &[i64]) -> R<HostTensor> {
    let (v, nrows, inner) = row_vals(a, dims, false)?;
    fn f<T: Elem>(row: &[T]) -> i64 {
        row.iter().filter(|x| x.truthy()).count() as i64
    }
    let r = match v {
        Vals::F(v) => per_row(&v, nrows, inner, f),
        Vals::I(v) => per_row(&v, nrows, inner, f),
    };
    Ok(from_i64(a.out(0)?, &r))
}
