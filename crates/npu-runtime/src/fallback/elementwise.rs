//! Elementwise ops with broadcasting: unary, binary (+ scalar forms), clamp and activations,
//! where/masked_fill, comparisons, logical and bitwise ops, casts.
//!
//! Float results compute in f64 and round once to the output dtype; integer and bool results
//! compute in i64.

use super::data::{broadcast_map, f64s, from_f64, from_i64, i64s, R};
use super::Args;
use crate::tensor::HostTensor;
use npu_ir::{BinaryOp, CompareOp, LogicOp, Op, TensorType, UnaryOp};

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

/// A tensor broadcast to `out`, as f64.
fn bcast_f64(t: &HostTensor, out: &TensorType) -> R<Vec<f64>> {
    bcast(f64s(t), t.shape(), out)
}

/// A tensor broadcast to `out`, as i64.
fn bcast_i64(t: &HostTensor, out: &TensorType) -> R<Vec<i64>> {
    bcast(i64s(t), t.shape(), out)
}

pub fn gelu(x: f64) -> f64 {
    0.5 * x
        * (1.0
            + f64::from(npu_compiler::expr::erf(
                (x / std::f64::consts::SQRT_2) as f32,
            )))
}

fn unary_f64(u: UnaryOp, x: f64) -> f64 {
    match u {
        UnaryOp::Relu => {
            if x.is_nan() {
                x
            } else {
                x.max(0.0)
            }
        }
        UnaryOp::Silu => x / (1.0 + (-x).exp()),
        UnaryOp::Gelu => gelu(x),
        UnaryOp::GeluTanh => {
            let c = (2.0 / std::f64::consts::PI).sqrt();
            0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
        }
        UnaryOp::Neg => -x,
        UnaryOp::Rsqrt => 1.0 / x.sqrt(),
        UnaryOp::Sqrt => x.sqrt(),
        UnaryOp::Recip => 1.0 / x,
        UnaryOp::Exp => x.exp(),
        UnaryOp::Log => x.ln(),
        UnaryOp::Cos => x.cos(),
        UnaryOp::Sin => x.sin(),
        UnaryOp::Tanh => x.tanh(),
        UnaryOp::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        UnaryOp::Abs => x.abs(),
    }
}

pub fn unary(a: &Args, u: UnaryOp) -> R<HostTensor> {
    a.count(1, 1)?;
    let (x, out) = (a.input(0)?, a.out(0)?);
    if !out.dtype.is_float() {
        let v = bcast_i64(x, out)?;
        let r: Vec<i64> = match u {
            UnaryOp::Neg => v.iter().map(|x| x.wrapping_neg()).collect(),
            UnaryOp::Abs => v.iter().map(|x| x.wrapping_abs()).collect(),
            UnaryOp::Relu => v.iter().map(|x| (*x).max(0)).collect(),
            other => return Err(format!("{} on integer output {}", other.name(), out.dtype)),
        };
        return Ok(from_i64(out, &r));
    }
    let v = bcast_f64(x, out)?;
    let r: Vec<f64> = v.iter().map(|&x| unary_f64(u, x)).collect();
    Ok(from_f64(out, &r))
}

fn bin_f64(op: BinaryOp, x: f64, y: f64) -> f64 {
    match op {
        BinaryOp::Add => x + y,
        BinaryOp::Sub => x - y,
        BinaryOp::Mul => x * y,
        BinaryOp::Div => x / y,
        BinaryOp::Pow => x.powf(y),
        BinaryOp::Max => {
            if x.is_nan() || y.is_nan() {
                f64::NAN
            } else {
                x.max(y)
            }
        }
        BinaryOp::Min => {
            if x.is_nan() || y.is_nan() {
                f64::NAN
            } else {
                x.min(y)
            }
        }
    }
}

fn bin_i64(op: BinaryOp, x: i64, y: i64) -> R<i64> {
    Ok(match op {
        BinaryOp::Add => x.wrapping_add(y),
        BinaryOp::Sub => x.wrapping_sub(y),
        BinaryOp::Mul => x.wrapping_mul(y),
        BinaryOp::Div => {
            if y == 0 {
                return Err("integer division by zero".into());
            }
            x.div_euclid(y)
        }
        BinaryOp::Pow => {
            if y < 0 {
                return Err("integer pow with a negative exponent".into());
            }
            x.wrapping_pow(y.min(u32::MAX as i64) as u32)
        }
        BinaryOp::Max => x.max(y),
        BinaryOp::Min => x.min(y),
    })
}

/// `a op (alpha * b)` with broadcasting.
pub fn binary(a: &Args, op: BinaryOp, alpha: f64) -> R<HostTensor> {
    a.count(2, 2)?;
    let out = a.out(0)?;
    if out.dtype.is_float() {
        let x = bcast_f64(a.input(0)?, out)?;
        let y = bcast_f64(a.input(1)?, out)?;
        let r: Vec<f64> = x
            .iter()
            .zip(&y)
            .map(|(&x, &y)| bin_f64(op, x, if alpha == 1.0 { y } else { alpha * y }))
            .collect();
        return Ok(from_f64(out, &r));
    }
    let x = bcast_i64(a.input(0)?, out)?;
    let y = bcast_i64(a.input(1)?, out)?;
    let al = alpha as i64;
    let r = x
        .iter()
        .zip(&y)
        .map(|(&x, &y)| bin_i64(op, x, y.wrapping_mul(al)))
        .collect::<R<Vec<i64>>>()?;
    Ok(from_i64(out, &r))
}

pub fn binary_scalar(a: &Args, op: BinaryOp, s: f64, scalar_lhs: bool) -> R<HostTensor> {
    a.count(1, 1)?;
    let out = a.out(0)?;
    if out.dtype.is_float() {
        let x = bcast_f64(a.input(0)?, out)?;
        let r: Vec<f64> = x
            .iter()
            .map(|&x| {
                if scalar_lhs {
                    bin_f64(op, s, x)
                } else {
                    bin_f64(op, x, s)
                }
            })
            .collect();
        return Ok(from_f64(out, &r));
    }
    if s.fract() != 0.0 {
        return Err(format!("scalar {s} with an integer output {}", out.dtype));
    }
    let x = bcast_i64(a.input(0)?, out)?;
    let s = s as i64;
    let r = x
        .iter()
        .map(|&x| {
            if scalar_lhs {
                bin_i64(op, s, x)
            } else {
                bin_i64(op, x, s)
            }
        })
        .collect::<R<Vec<i64>>>()?;
    Ok(from_i64(out, &r))
}

pub fn clamp(a: &Args, min: Option<f64>, max: Option<f64>) -> R<HostTensor> {
    a.count(1, 1)?;
    let out = a.out(0)?;
    if out.dtype.is_float() {
        let v = bcast_f64(a.input(0)?, out)?;
        let r: Vec<f64> = v
            .iter()
            .map(|&x| {
                if x.is_nan() {
                    return x;
                }
                let x = min.map_or(x, |m| x.max(m));
                max.map_or(x, |m| x.min(m))
            })
            .collect();
        return Ok(from_f64(out, &r));
    }
    let v = bcast_i64(a.input(0)?, out)?;
    let r: Vec<i64> = v
        .iter()
        .map(|&x| {
            let x = min.map_or(x, |m| x.max(m.ceil() as i64));
            max.map_or(x, |m| x.min(m.floor() as i64))
        })
        .collect();
    Ok(from_i64(out, &r))
}

/// hardswish, hardsigmoid, leaky_relu.
pub fn activation(a: &Args, op: &Op) -> R<HostTensor> {
    a.count(1, 1)?;
    let out = a.out(0)?;
    let v = bcast_f64(a.input(0)?, out)?;
    let relu6 = |x: f64| (x + 3.0).clamp(0.0, 6.0);
    let r: Vec<f64> = match op {
        Op::Hardswish => v.iter().map(|&x| x * relu6(x) / 6.0).collect(),
        Op::Hardsigmoid => v.iter().map(|&x| relu6(x) / 6.0).collect(),
        Op::LeakyRelu { negative_slope } => v
            .iter()
            .map(|&x| if x > 0.0 { x } else { x * negative_slope })
            .collect(),
        other => return Err(format!("{} is not an activation", other.name())),
    };
    Ok(from_f64(out, &r))
}

/// Tensor input `next` or a scalar, broadcast to `out`.
fn operand_f64(a: &Args, scalar: Option<f64>, next: &mut usize, out: &TensorType) -> R<Vec<f64>> {
    match scalar {
        Some(s) => Ok(vec![s; out.numel()]),
        None => {
            let t = a.input(*next)?;
            *next += 1;
            bcast_f64(t, out)
        }
    }
}

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

pub fn where_(a: &Args, self_s: Option<f64>, other_s: Option<f64>) -> R<HostTensor> {
    let out = a.out(0)?;
    let cond: Vec<bool> = bcast_i64(a.input(0)?, out)?
        .iter()
        .map(|&c| c != 0)
        .collect();
    let mut next = 1;
    if out.dtype.is_float() {
        let x = operand_f64(a, self_s, &mut next, out)?;
        let y = operand_f64(a, other_s, &mut next, out)?;
        let r: Vec<f64> = (0..cond.len())
            .map(|i| if cond[i] { x[i] } else { y[i] })
            .collect();
        return Ok(from_f64(out, &r));
    }
    let x = operand_i64(a, self_s, &mut next, out)?;
    let y = operand_i64(a, other_s, &mut next, out)?;
    let r: Vec<i64> = (0..cond.len())
        .map(|i| if cond[i] { x[i] } else { y[i] })
        .collect();
    Ok(from_i64(out, &r))
}

pub fn masked_fill(a: &Args, value: Option<f64>) -> R<HostTensor> {
    let out = a.out(0)?;
    let x = a.input(0)?;
    let mask: Vec<bool> = bcast_i64(a.input(1)?, out)?
        .iter()
        .map(|&m| m != 0)
        .collect();
    let value = match value {
        Some(v) => v,
        None => {
            let t = a.input(2)?;
            if t.numel() != 1 {
                return Err(format!(
                    "masked_fill value must be a 0-d tensor, got {:?}",
                    t.shape()
                ));
            }
            f64s(t)[0]
        }
    };
    if out.dtype.is_float() {
        let v = bcast_f64(x, out)?;
        let r: Vec<f64> = v
            .iter()
            .zip(&mask)
            .map(|(&x, &m)| if m { value } else { x })
            .collect();
        return Ok(from_f64(out, &r));
    }
    let v = bcast_i64(x, out)?;
    let r: Vec<i64> = v
        .iter()
        .zip(&mask)
        .map(|(&x, &m)| if m { value as i64 } else { x })
        .collect();
    Ok(from_i64(out, &r))
}

fn cmp<T: PartialOrd>(op: CompareOp, x: T, y: T) -> bool {
    match op {
        CompareOp::Eq => x == y,
        CompareOp::Ne => x != y,
        CompareOp::Lt => x < y,
        CompareOp::Le => x <= y,
        CompareOp::Gt => x > y,
        CompareOp::Ge => x >= y,
    }
}

pub fn compare(a: &Args, op: CompareOp, scalar: Option<f64>) -> R<HostTensor> {
    a.count(if scalar.is_some() { 1 } else { 2 }, 2)?;
    let out = a.out(0)?;
    let x = a.input(0)?;
    let ints = !x.dtype().is_float()
        && match scalar {
            Some(s) => s.fract() == 0.0,
            None => !a.input(1)?.dtype().is_float(),
        };
    let r: Vec<i64> = if ints {
        let xv = bcast_i64(x, out)?;
        let mut next = 1;
        let yv = operand_i64(a, scalar, &mut next, out)?;
        xv.iter()
            .zip(&yv)
            .map(|(&x, &y)| i64::from(cmp(op, x, y)))
            .collect()
    } else {
        let xv = bcast_f64(x, out)?;
        let mut next = 1;
        let yv = operand_f64(a, scalar, &mut next, out)?;
        xv.iter()
            .zip(&yv)
            .map(|(&x, &y)| i64::from(cmp(op, x, y)))
            .collect()
    };
    Ok(from_i64(out, &r))
}

fn truth(t: &HostTensor, out: &TensorType) -> R<Vec<bool>> {
    Ok(bcast_f64(t, out)?.iter().map(|&x| x != 0.0).collect())
}

pub fn logical_not(a: &Args) -> R<HostTensor> {
    a.count(1, 1)?;
    let out = a.out(0)?;
    let r: Vec<i64> = truth(a.input(0)?, out)?
        .iter()
        .map(|&b| i64::from(!b))
        .collect();
    Ok(from_i64(out, &r))
}

fn logic(op: LogicOp, x: bool, y: bool) -> bool {
    match op {
        LogicOp::And => x && y,
        LogicOp::Or => x || y,
        LogicOp::Xor => x != y,
    }
}

pub fn logical(a: &Args, op: LogicOp) -> R<HostTensor> {
    a.count(2, 2)?;
    let out = a.out(0)?;
    let x = truth(a.input(0)?, out)?;
    let y = truth(a.input(1)?, out)?;
    let r: Vec<i64> = x
        .iter()
        .zip(&y)
        .map(|(&x, &y)| i64::from(logic(op, x, y)))
        .collect();
    Ok(from_i64(out, &r))
}

pub fn bitwise_not(a: &Args) -> R<HostTensor> {
    a.count(1, 1)?;
    let out = a.out(0)?;
    let x = a.input(0)?;
    if x.dtype().is_float() {
        return Err("bitwise_not on a float tensor".into());
    }
    let v = bcast_i64(x, out)?;
    let r: Vec<i64> = if out.dtype == npu_ir::DType::Bool {
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
