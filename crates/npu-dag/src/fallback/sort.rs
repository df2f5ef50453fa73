//! Order statistics along one dim: sort/argsort (stable), topk, kthvalue, median, mode,
//! and the running cummax/cummin/cumprod. NaN sorts above every number, as in PyTorch.

use super::data::{from_i64, reshaped, R};
use super::vals::{reduced_shape, want_shape, Elem, Lanes, Vals};
use super::Args;
use npu_ir::MinMax;
use npu_runtime::tensor::HostTensor;
use std::cmp::Ordering;

/// Positions of `lane` in sorted order (stable; descending keeps equal elements in order).
fn order<T: Elem>(lane: &[T], descending: bool) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..lane.len()).collect();
    idx.sort_by(|&a, &b| {
        let c = lane[a].key_cmp(&lane[b]);
        if descending {
            c.reverse()
        } else {
            c
        }
    });
    idx
}

/// For every lane along `dim`, picks `n_out` positions with `pick(lane)`; returns the
/// picked values and their int64 indices, lanes laid out like the input with `n_out` in
/// place of the dim's length.
fn pick_lanes<T: Elem>(
    v: &[T],
    lanes: Lanes,
    n_out: usize,
    pick: impl Fn(&[T]) -> Vec<usize>,
) -> (Vec<T>, Vec<i64>) {
    let out_lanes = Lanes {
        len: n_out,
        ..lanes
    };
    let n = lanes.count() * n_out;
    let (mut vals, mut idx) = (vec![T::zero(); n], vec![0i64; n]);
    for k in 0..lanes.count() {
        let lane = lanes.gather(v, k);
        for (i, p) in pick(&lane).into_iter().enumerate() {
            let o = out_lanes.at(k, i);
            vals[o] = lane[p];
            idx[o] = p as i64;
        }
    }
    (vals, idx)
}

fn picked(
    a: &Args,
    dim: i64,
    n_out: usize,
    pick_f: impl Fn(&[f64]) -> Vec<usize>,
    pick_i: impl Fn(&[i64]) -> Vec<usize>,
) -> R<(Vals, Vec<i64>, Lanes, usize)> {
    let x = a.input(0)?;
    let (lanes, d) = Lanes::new(x.shape(), dim)?;
    let (vals, idx) = match Vals::of(x) {
        Vals::F(v) => {
            let (v, i) = pick_lanes(&v, lanes, n_out, pick_f);
            (Vals::F(v), i)
        }
        Vals::I(v) => {
            let (v, i) = pick_lanes(&v, lanes, n_out, pick_i);
            (Vals::I(v), i)
        }
    };
    Ok((vals, idx, lanes, d))
}

/// `sort` (values, indices) or `argsort` (indices).
pub fn sort(a: &Args, dim: i64, descending: bool, indices_only: bool) -> R<Vec<HostTensor>> {
    a.count(1, 1)?;
    let x = a.input(0)?;
    let n = Lanes::new(x.shape(), dim)?.0.len;
    let (vals, idx, _, _) = picked(
        a,
        dim,
        n,
        |l| order(l, descending),
        |l| order(l, descending),
    )?;
    if indices_only {
        want_shape("argsort", x.shape(), a.out(0)?)?;
        return Ok(vec![from_i64(a.out(0)?, &idx)]);
    }
    want_shape("sort", x.shape(), a.out(0)?)?;
    if a.outs.len() == 1 {
        return Ok(vec![vals.store(a.out(0)?)]); // msort
    }
    want_shape("sort", x.shape(), a.out(1)?)?;
    Ok(vec![vals.store(a.out(0)?), from_i64(a.out(1)?, &idx)])
}

pub fn topk(a: &Args, k: usize, dim: i64, largest: bool) -> R<Vec<HostTensor>> {
    a.count(1, 1)?;
    let x = a.input(0)?;
    let (lanes, d) = Lanes::new(x.shape(), dim)?;
    if k > lanes.len {
        return Err(format!("topk k={k} exceeds the dim's size {}", lanes.len));
    }
    let take = |mut o: Vec<usize>| {
        o.truncate(k);
        o
    };
    let (vals, idx, _, _) = picked(
        a,
        dim,
        k,
        |l| take(order(l, largest)),
        |l| take(order(l, largest)),
    )?;
    let mut shape = x.shape().to_vec();
    if !shape.is_empty() {
        shape[d] = k;
    }
    for i in 0..2 {
        want_shape("topk", &shape, a.out(i)?)?;
    }
    Ok(vec![vals.store(a.out(0)?), from_i64(a.out(1)?, &idx)])
}

/// One picked element per lane (kthvalue, median, mode), dim dropped unless keepdim.
fn select_one(
    a: &Args,
    what: &str,
    dim: i64,
    keepdim: bool,
    pick_f: impl Fn(&[f64]) -> usize,
    pick_i: impl Fn(&[i64]) -> usize,
) -> R<Vec<HostTensor>> {
    a.count(1, 1)?;
    let x = a.input(0)?;
    if x.numel() == 0 {
        return Err(format!("{what} of an empty tensor"));
    }
    let (vals, idx, _, d) = picked(a, dim, 1, |l| vec![pick_f(l)], |l| vec![pick_i(l)])?;
    let shape = reduced_shape(x.shape(), d, keepdim);
    for i in 0..a.outs.len() {
        want_shape(what, &shape, a.out(i)?)?;
    }
    let mut res = vec![vals.store(a.out(0)?)];
    if a.outs.len() > 1 {
        res.push(from_i64(a.out(1)?, &idx));
    }
    Ok(res)
}

pub fn kthvalue(a: &Args, k: usize, dim: i64, keepdim: bool) -> R<Vec<HostTensor>> {
    let n = Lanes::new(a.input(0)?.shape(), dim)?.0.len;
    if k == 0 || k > n {
        return Err(format!("kthvalue k={k} is out of range for size {n}"));
    }
    select_one(
        a,
        "kthvalue",
        dim,
        keepdim,
        |l| order(l, false)[k - 1],
        |l| order(l, false)[k - 1],
    )
}

/// The lower median; a lane holding NaN gives its first NaN (NaN propagates).
fn median_of<T: Elem>(l: &[T]) -> usize {
    if let Some(p) = l.iter().position(|x| x.is_nan()) {
        return p;
    }
    order(l, false)[(l.len() - 1) / 2]
}

pub fn median(a: &Args, dim: Option<i64>, keepdim: bool) -> R<Vec<HostTensor>> {
    match dim {
        Some(d) => select_one(a, "median", d, keepdim, median_of, median_of),
        None => {
            let x = a.input(0)?;
            let flat = reshaped(x, &[x.numel()])?;
            let ins = [&flat];
            let inner = Args {
                ins: &ins,
                outs: a.outs,
            };
            let res = select_one(&inner, "median", 0, false, median_of, median_of)?;
            Ok(res.into_iter().take(1).collect())
        }
    }
}

/// The most frequent value (the smallest among equally frequent ones) and the position of
/// its last occurrence, as PyTorch's CPU kernel returns.
fn mode_of<T: Elem>(l: &[T]) -> usize {
    let o = order(l, false);
    let (mut best, mut best_n, mut i) = (o[0], 0, 0);
    while i < o.len() {
        let mut j = i;
        while j + 1 < o.len() && l[o[j + 1]].key_cmp(&l[o[i]]) == Ordering::Equal {
            j += 1;
        }
        if j + 1 - i > best_n {
            best_n = j + 1 - i;
            best = *o[i..=j].iter().max().expect("non-empty run");
        }
        i = j + 1;
    }
    best
}

pub fn mode(a: &Args, dim: i64, keepdim: bool) -> R<Vec<HostTensor>> {
    select_one(a, "mode", dim, keepdim, mode_of, mode_of)
}

/// Running scan along lanes, in place; `f(acc_value, acc_index, x, i)` gives the new state.
fn scan<T: Elem>(v: &mut [T], idx: &mut [i64], lanes: Lanes, f: impl Fn(T, T) -> bool) {
    for k in 0..lanes.count() {
        let (mut acc, mut at) = (T::zero(), 0i64);
        for i in 0..lanes.len {
            let p = lanes.at(k, i);
            if i == 0 || f(acc, v[p]) {
                acc = v[p];
                at = i as i64;
            }
            v[p] = acc;
            idx[p] = at;
        }
    }
}

/// `cummax`/`cummin`: a new extreme (or an equal one, or NaN) moves the index, as ATen does.
pub fn cum_extreme(a: &Args, op: MinMax, dim: i64) -> R<Vec<HostTensor>> {
    a.count(1, 1)?;
    let x = a.input(0)?;
    let (lanes, _) = Lanes::new(x.shape(), dim)?;
    let mut idx = vec![0i64; x.numel()];
    let max = op == MinMax::Max;
    fn takes<T: Elem>(acc: T, x: T, max: bool) -> bool {
        if x.is_nan() {
            return true;
        }
        if acc.is_nan() {
            return false;
        }
        let c = x.key_cmp(&acc);
        c == Ordering::Equal || (c == Ordering::Greater) == max
    }
    let vals = match Vals::of(x) {
        Vals::F(mut v) => {
            scan(&mut v, &mut idx, lanes, |acc, x| takes(acc, x, max));
            Vals::F(v)
        }
        Vals::I(mut v) => {
            scan(&mut v, &mut idx, lanes, |acc, x| takes(acc, x, max));
            Vals::I(v)
        }
    };
    for i in 0..2 {
        want_shape("cummax/cummin", x.shape(), a.out(i)?)?;
    }
    Ok(vec![vals.store(a.out(0)?), from_i64(a.out(1)?, &idx)])
}

/// Inclusive running product in the output's arithmetic.
pub fn cumprod(a: &Args, dim: i64) -> R<HostTensor> {
    a.count(1, 1)?;
    let (x, out) = (a.input(0)?, a.out(0)?);
    want_shape("cumprod", x.shape(), out)?;
    let (lanes, _) = Lanes::new(x.shape(), dim)?;
    fn run<T: Elem>(mut v: Vec<T>, lanes: Lanes) -> Vec<T> {
        for k in 0..lanes.count() {
            let mut acc = T::one();
            for i in 0..lanes.len {
                let p = lanes.at(k, i);
                acc = acc.mul(v[p]);
                v[p] = acc;
            }
        }
        v
    }
    let vals = super::vals::map_vals!(Vals::as_for(x, out), v => run(v, lanes));
    Ok(vals.store(out))
}

/// `logcumsumexp` along `dim` as a running `logaddexp`: `acc = max + log1p(exp(-|acc - x|))`,
/// exact over any range of magnitudes (a global shift by the maximum underflows), `-inf`
/// entries skipped, NaN propagated.
pub fn logcumsumexp(a: &Args, dim: i64) -> R<HostTensor> {
    a.count(1, 1)?;
    let (x, out) = (a.input(0)?, a.out(0)?);
    want_shape("logcumsumexp", x.shape(), out)?;
    let (lanes, _) = Lanes::new(x.shape(), dim)?;
    let mut v = super::data::f64s(x);
    for k in 0..lanes.count() {
        let mut acc = f64::NEG_INFINITY;
        for i in 0..lanes.len {
            let p = lanes.at(k, i);
            let y = v[p];
            acc = if acc.is_nan() || y.is_nan() {
                f64::NAN
            } else if y == f64::NEG_INFINITY {
                acc
            } else if acc == f64::NEG_INFINITY || (acc == y && y.is_infinite()) {
                y
            } else {
                let m = acc.max(y);
                m + (-(acc - y).abs()).exp().ln_1p()
            };
            v[p] = acc;
        }
    }
    Ok(super::data::from_f64(out, &v))
}
