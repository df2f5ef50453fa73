//! Helpers of the extended kernels: element values as f64 (float dtypes) or i64 (integer
//! and bool dtypes) behind one trait, and lanes along one dim of a contiguous tensor.
//!
//! Integer arithmetic wraps like PyTorch's int64; floats order NaN above everything (the
//! order `torch.sort` uses) and extremes propagate NaN.

use super::data::{f64s, from_f64, from_i64, i64s, norm_dim, R};
use npu_ir::TensorType;
use npu_runtime::tensor::HostTensor;
use std::cmp::Ordering;

/// An element of a float (f64) or integer (i64) computation.
pub trait Elem: Copy + PartialEq + std::fmt::Debug {
    fn zero() -> Self;
    fn one() -> Self;
    fn add(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    /// `self / n` (integers floor, as PyTorch's integer mean of scatter_reduce).
    fn div_count(self, n: usize) -> Self;
    fn is_nan(self) -> bool;
    /// Total order with NaN greatest.
    fn key_cmp(&self, o: &Self) -> Ordering;
    fn truthy(self) -> bool;
    /// max/min that propagate NaN.
    fn extreme(self, o: Self, max: bool) -> Self {
        if self.is_nan() {
            return self;
        }
        if o.is_nan() {
            return o;
        }
        let o_wins = if max {
            o.key_cmp(&self) == Ordering::Greater
        } else {
            o.key_cmp(&self) == Ordering::Less
        };
        if o_wins {
            o
        } else {
            self
        }
    }
}

impl Elem for f64 {
    fn zero() -> f64 {
        0.0
    }
    fn one() -> f64 {
        1.0
    }
    fn add(self, o: f64) -> f64 {
        self + o
    }
    fn mul(self, o: f64) -> f64 {
        self * o
    }
    fn div_count(self, n: usize) -> f64 {
        self / n as f64
    }
    fn is_nan(self) -> bool {
        f64::is_nan(self)
    }
    fn key_cmp(&self, o: &f64) -> Ordering {
        match (self.is_nan(), o.is_nan()) {
            (true, true) => Ordering::Equal,
            (true, false) => Ordering::Greater,
            (false, true) => Ordering::Less,
            _ => self.partial_cmp(o).unwrap_or(Ordering::Equal),
        }
    }
    fn truthy(self) -> bool {
        self != 0.0
    }
}

impl Elem for i64 {
    fn zero() -> i64 {
        0
    }
    fn one() -> i64 {
        1
    }
    fn add(self, o: i64) -> i64 {
        self.wrapping_add(o)
    }
    fn mul(self, o: i64) -> i64 {
        self.wrapping_mul(o)
    }
    fn div_count(self, n: usize) -> i64 {
        self.div_euclid((n as i64).max(1))
    }
    fn is_nan(self) -> bool {
        false
    }
    fn key_cmp(&self, o: &i64) -> Ordering {
        self.cmp(o)
    }
    fn truthy(self) -> bool {
        self != 0
    }
}

/// A tensor's values: f64 for float dtypes, i64 for integers and bool.
#[derive(Debug, Clone)]
pub enum Vals {
    F(Vec<f64>),
    I(Vec<i64>),
}

impl Vals {
    pub fn of(t: &HostTensor) -> Vals {
        if t.dtype().is_float() {
            Vals::F(f64s(t))
        } else {
            Vals::I(i64s(t))
        }
    }

    /// Values of `t` in the arithmetic of `ty` (a float output computes in f64).
    pub fn as_for(t: &HostTensor, ty: &TensorType) -> Vals {
        if ty.dtype.is_float() {
            Vals::F(f64s(t))
        } else {
            Vals::I(i64s(t))
        }
    }

    pub fn store(&self, ty: &TensorType) -> HostTensor {
        match self {
            Vals::F(v) => from_f64(ty, v),
            Vals::I(v) => from_i64(ty, v),
        }
    }
}

/// Runs a generic body over the `Vals` variant, rebuilding the same variant.
macro_rules! map_vals {
    ($vals:expr, $v:ident => $body:expr) => {
        match $vals {
            $crate::fallback::vals::Vals::F($v) => $crate::fallback::vals::Vals::F($body),
            $crate::fallback::vals::Vals::I($v) => $crate::fallback::vals::Vals::I($body),
        }
    };
}
pub(crate) use map_vals;

/// The lanes along dim `d` of a contiguous shape: element (o, i, j) of lane (o, j) is at
/// `(o * len + i) * inner + j`. A 0-d tensor is one lane of length one along dim 0 or -1.
#[derive(Debug, Clone, Copy)]
pub struct Lanes {
    pub outer: usize,
    pub len: usize,
    pub inner: usize,
}

impl Lanes {
    pub fn new(shape: &[usize], dim: i64) -> R<(Lanes, usize)> {
        if shape.is_empty() {
            norm_dim(dim, 0)?;
            return Ok((
                Lanes {
                    outer: 1,
                    len: 1,
                    inner: 1,
                },
                0,
            ));
        }
        let d = norm_dim(dim, shape.len())?;
        Ok((
            Lanes {
                outer: shape[..d].iter().product(),
                len: shape[d],
                inner: shape[d + 1..].iter().product(),
            },
            d,
        ))
    }

    pub fn count(&self) -> usize {
        self.outer * self.inner
    }

    /// Flat index of element `i` of lane `k` (lanes numbered `o * inner + j`).
    pub fn at(&self, k: usize, i: usize) -> usize {
        let (o, j) = (k / self.inner.max(1), k % self.inner.max(1));
        (o * self.len + i) * self.inner + j
    }

    /// The elements of lane `k`.
    pub fn gather<T: Copy>(&self, v: &[T], k: usize) -> Vec<T> {
        (0..self.len).map(|i| v[self.at(k, i)]).collect()
    }
}

/// The shape of a reduction over dim `d` (kept as 1 with keepdim, dropped otherwise).
pub fn reduced_shape(shape: &[usize], d: usize, keepdim: bool) -> Vec<usize> {
    let mut s = shape.to_vec();
    if s.is_empty() {
        return s;
    }
    if keepdim {
        s[d] = 1;
    } else {
        s.remove(d);
    }
    s
}

/// Checks that the graph's output has the shape the kernel computed.
pub fn want_shape(what: &str, got: &[usize], out: &TensorType) -> R<()> {
    if got != out.shape.as_slice() {
        return Err(format!(
            "{what} gives shape {got:?}, the graph declares {:?}",
            out.shape
        ));
    }
    Ok(())
}
