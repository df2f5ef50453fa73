//! Elementwise ops with broadcasting: every pointwise op of the table
//! ([`npu_ir::pointwise`]: unary, binary and scalar forms, clamp, where/masked_fill,
//! comparisons, logical ops), bitwise ops and casts.
//!
//! Float results compute as PyTorch does: in f32 for f32/bf16/f16 values (bf16/f16 round once
//! on store), in f64 for f64 values; integer and bool results of integer operands compute
//! exactly in i64.

use super::data::{broadcast_map, f64s, from_f64, from_i64, i64s, R};
use super::Args;
use npu_ir::pointwise::{IntResult, Real, Rule};
use npu_ir::{BinaryOp, DType, LogicOp, TensorType, TernaryOp, UnaryOp};
use npu_runtime::tensor::HostTensor;

/// `v` (the values of a tensor of shape `from`) broadcast to `out`.
fn bcast<T: Copy>(v: Vec<T>, from: &[usize], out: &TensorType) -> R<Vec<T>> {
    if from == out.shape.as_slice() {
        return Ok(v);
    }
    Ok(broadcast_map(from, &out.shape)?
        .into_iter()
        .map(|i| v[i])
        .collect())
}

/// A tensor broadcast to `out`, as i64.
fn bcast_i64(t: &HostTensor, out: &TensorType) -> R<Vec<i64>> {
    bcast(i64s(t), t.shape(), out)
}

/// A pointwise op of the table, with `add`/`sub`'s alpha.
#[derive(Clone, Copy)]
enum Pw {
    U(UnaryOp),
    B(BinaryOp, f64),
    T(TernaryOp),
}

impl Pw {
    fn rule(self) -> Rule {
        match self {
            Pw::U(u) => u.rule(),
            Pw::B(b, _) => b.rule(),
            Pw::T(t) => t.rule(),
        }
    }
    fn name(self) -> &'static str {
        match self {
            Pw::U(u) => u.name(),
            Pw::B(b, _) => b.name(),
            Pw::T(t) => t.name(),
        }
    }
    fn eval<F: Real>(self, v: &[F]) -> F {
        match self {
            Pw::U(u) => u.eval([v[0]]),
            Pw::B(b, alpha) if alpha != 1.0 => b.eval([v[0], F::c(alpha) * v[1]]),
            Pw::B(b, _) => b.eval([v[0], v[1]]),
            Pw::T(t) => t.eval([v[0], v[1], v[2]]),
        }
    }
    fn eval_int(self, v: &[i64]) -> Option<IntResult> {
        match self {
            Pw::U(u) => u.eval_int([v[0]]),
            Pw::B(b, alpha) => b.eval_int([v[0], v[1].wrapping_mul(alpha as i64)]),
            Pw::T(t) => t.eval_int([v[0], v[1], v[2]]),
        }
    }
}

/// One operand: a tensor input or a Python scalar.
#[derive(Clone, Copy)]
enum Operand<'a> {
    Tensor(&'a HostTensor),
    Scalar(f64),
}

/// Operands in order: `scalars[i]` where given, else the next tensor input.
fn operands<'a>(a: &Args<'a>, scalars: &[Option<f64>]) -> R<Vec<Operand<'a>>> {
    let mut next = 0;
    let ops = scalars
        .iter()
        .map(|s| match s {
            Some(v) => Ok(Operand::Scalar(*v)),
            None => {
                next += 1;
                a.input(next - 1).map(Operand::Tensor)
            }
        })
        .collect::<R<Vec<_>>>()?;
    a.count(next, next)?;
    Ok(ops)
}

/// Evaluates `pw` over `ops` broadcast to output 0, choosing the computation as PyTorch does.
fn run(a: &Args, pw: Pw, ops: &[Operand]) -> R<HostTensor> {
    let out = a.out(0)?;
    let pw = match pw {
        Pw::U(u) => Pw::U(u.for_dtype(out.dtype)),
        other => other,
    };
    let tensors = || {
        ops.iter().filter_map(|o| match o {
            Operand::Tensor(t) => Some(*t),
            Operand::Scalar(_) => None,
        })
    };
    let ints = match pw.rule() {
        Rule::Bool => {
            tensors().all(|t| !t.dtype().is_float())
                && ops.iter().all(|o| match o {
                    Operand::Scalar(s) => s.fract() == 0.0,
                    Operand::Tensor(_) => true,
                })
        }
        Rule::Float | Rule::Keep => !out.dtype.is_float(),
    };
    if ints {
        return run_int(pw, ops, out);
    }
    let wide = out.dtype == DType::F64
        || (pw.rule() == Rule::Bool && tensors().any(|t| t.dtype() == DType::F64));
    let r: Vec<f64> = if wide {
        run_float::<f64>(pw, ops, out)?
    } else {
        run_float::<f32>(pw, ops, out)?
            .into_iter()
            .map(f64::from)
            .collect()
    };
    Ok(from_f64(out, &r))
}

fn run_float<F: Real>(pw: Pw, ops: &[Operand], out: &TensorType) -> R<Vec<F>> {
    let n = out.numel();
    let cols = ops
        .iter()
        .map(|o| match o {
            Operand::Scalar(s) => Ok(vec![F::c(*s); n]),
            Operand::Tensor(t) => Ok(bcast(f64s(t), t.shape(), out)?
                .into_iter()
                .map(F::c)
                .collect()),
        })
        .collect::<R<Vec<Vec<F>>>>()?;
    let mut args = vec![F::zero(); cols.len()];
    Ok((0..n)
        .map(|i| {
            for (a, c) in args.iter_mut().zip(&cols) {
                *a = c[i];
            }
            pw.eval(&args)
        })
        .collect())
}

fn run_int(pw: Pw, ops: &[Operand], out: &TensorType) -> R<HostTensor> {
    let n = out.numel();
    let cols = ops
        .iter()
        .map(|o| match o {
            // An integer result with a fractional scalar is an op that converts its Scalar
            // to the tensor's type (hardtanh, threshold, addcmul's value): ATen truncates it
            // (otherwise type promotion would have made the result float). An absent clamp
            // bound is an infinite scalar: `as` saturates it. NaN has no integer value.
            Operand::Scalar(s) if !s.is_nan() => Ok(vec![*s as i64; n]),
            Operand::Scalar(s) => Err(format!(
                "{}: scalar {s} with an integer result {}",
                pw.name(),
                out.dtype
            )),
            Operand::Tensor(t) => bcast_i64(t, out),
        })
        .collect::<R<Vec<Vec<i64>>>>()?;
    let mut args = vec![0i64; cols.len()];
    let r = (0..n)
        .map(|i| {
            for (a, c) in args.iter_mut().zip(&cols) {
                *a = c[i];
            }
            match pw.eval_int(&args) {
                Some(r) => r.map_err(|e| format!("{}: {e}", pw.name())),
                None => Err(format!(
                    "{} has no integer form (result {})",
                    pw.name(),
                    out.dtype
                )),
            }
        })
        .collect::<R<Vec<i64>>>()?;
    Ok(from_i64(out, &r))
}

pub fn unary(a: &Args, u: UnaryOp) -> R<HostTensor> {
    run(a, Pw::U(u), &operands(a, &[None])?)
}

/// `a op (alpha * b)` with broadcasting.
pub fn binary(a: &Args, op: BinaryOp, alpha: f64) -> R<HostTensor> {
    run(a, Pw::B(op, alpha), &operands(a, &[None, None])?)
}

/// `x op s`, or `s op x` when `scalar_lhs`.
pub fn binary_scalar(a: &Args, op: BinaryOp, s: f64, scalar_lhs: bool) -> R<HostTensor> {
    let scalars = if scalar_lhs {
        [Some(s), None]
    } else {
        [None, Some(s)]
    };
    run(a, Pw::B(op, 1.0), &operands(a, &scalars)?)
}

/// `clamp` with scalar bounds (an absent bound is infinite).
pub fn clamp(a: &Args, min: Option<f64>, max: Option<f64>) -> R<HostTensor> {
    let bounds = [
        None,
        Some(min.unwrap_or(f64::NEG_INFINITY)),
        Some(max.unwrap_or(f64::INFINITY)),
    ];
    run(a, Pw::T(TernaryOp::Clamp), &operands(a, &bounds)?)
}

pub fn ternary(a: &Args, op: TernaryOp, scalars: &[Option<f64>; 3]) -> R<HostTensor> {
    run(a, Pw::T(op), &operands(a, scalars)?)
}

/// `masked_fill(x, mask, value)` = `where(mask, value, x)`.
pub fn masked_fill(a: &Args, value: Option<f64>) -> R<HostTensor> {
    a.count(if value.is_some() { 2 } else { 3 }, 3)?;
    let value = match value {
        Some(v) => Operand::Scalar(v),
        None => {
            let t = a.input(2)?;
            if t.numel() != 1 {
                return Err(format!(
                    "masked_fill value must be a 0-d tensor, got {:?}",
                    t.shape()
                ));
            }
            Operand::Tensor(t)
        }
    };
    let ops = [
        Operand::Tensor(a.input(1)?),
        value,
        Operand::Tensor(a.input(0)?),
    ];
    run(a, Pw::T(TernaryOp::Where), &ops)
}

/// Tensor input `next` or a scalar, broadcast to `out`, as i64.
fn operand_i64(a: &Args, scalar: Option<f64>, next: &mut usize, out: &TensorType) -> R<Vec<i64>> {
    match scalar {
        Some(s) => Ok(vec![s as i64; out.numel()]),
        None => {
            let t = a.input(*next)?;
            *next += 1;
            bcast_i64(t, out)
        }
    }
}

pub fn bitwise_not(a: &Args) -> R<HostTensor> {
    a.count(1, 1)?;
    let out = a.out(0)?;
    let x = a.input(0)?;
    if x.dtype().is_float() {
        return Err("bitwise_not on a float tensor".into());
    }
    let v = bcast_i64(x, out)?;
    let r: Vec<i64> = if out.dtype == DType::Bool {
        v.iter().map(|&b| i64::from(b == 0)).collect()
    } else {
        v.iter().map(|&b| !b).collect()
    };
    Ok(from_i64(out, &r))
}

pub fn bitwise(a: &Args, op: LogicOp, scalar: Option<i64>) -> R<HostTensor> {
    a.count(if scalar.is_some() { 1 } else { 2 }, 2)?;
    let out = a.out(0)?;
    for t in a.ins {
        if t.dtype().is_float() {
            return Err("bitwise op on a float tensor".into());
        }
    }
    let x = bcast_i64(a.input(0)?, out)?;
    let mut next = 1;
    let y = operand_i64(a, scalar.map(|s| s as f64), &mut next, out)?;
    let r: Vec<i64> = x
        .iter()
        .zip(&y)
        .map(|(&x, &y)| match op {
            LogicOp::And => x & y,
            LogicOp::Or => x | y,
            LogicOp::Xor => x ^ y,
        })
        .collect();
    Ok(from_i64(out, &r))
}

/// Dtype conversion as `Tensor.to`: floats truncate toward zero into ints, bool = != 0.
pub fn cast(a: &Args) -> R<HostTensor> {
    let (x, out) = (a.input(0)?, a.out(0)?);
    if x.numel() != out.numel() {
        return Err(format!("cast of {:?} to {out}", x.shape()));
    }
    let ty = TensorType {
        shape: out.shape.clone(),
        dtype: out.dtype,
    };
    if x.dtype() == out.dtype {
        return super::data::reshaped(x, &out.shape);
    }
    Ok(if x.dtype().is_float() {
        from_f64(&ty, &f64s(x))
    } else {
        from_i64(&ty, &i64s(x))
    })
}

pub fn identity(a: &Args) -> R<HostTensor> {
    let (x, out) = (a.input(0)?, a.out(0)?);
    if x.dtype() != out.dtype {
        return cast(a);
    }
    super::data::reshaped(x, &out.shape)
}
