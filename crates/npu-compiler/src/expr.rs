//! Fused elementwise expressions: a postfix program over broadcast inputs, evaluated in f32.
//!
//! Invariant: a well-formed program leaves exactly one value on the stack, and every
//! `Load(i)` names an input of the step it belongs to. Backends evaluate it per element
//! (CPU), or compile it (CUDA C, WGSL).

use npu_ir::{BinaryOp, DType, UnaryOp};
use serde::{Deserialize, Serialize};
use std::fmt;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Instr {
    /// Push input `i` (read at the output element's broadcast position).
    Load(u16),
    /// Push a constant.
    Const(f32),
    Unary(UnaryOp),
    /// Pop b, pop a, push `a op b`.
    Binary(BinaryOp),
    Clamp {
        min: Option<f32>,
        max: Option<f32>,
    },
    /// Round the top of the stack to `dtype` (a cast inside the chain).
    Cast(DType),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Expr {
    pub code: Vec<Instr>,
}

impl Expr {
    pub fn num_inputs(&self) -> usize {
        self.code
            .iter()
            .filter_map(|i| match i {
                Instr::Load(k) => Some(*k as usize + 1),
                _ => None,
            })
            .max()
            .unwrap_or(0)
    }

    /// Checks the stack discipline; returns a message on malformed code.
    pub fn validate(&self, inputs: usize) -> Result<(), String> {
        let mut depth = 0usize;
        for ins in &self.code {
            match ins {
                Instr::Load(k) if *k as usize >= inputs => {
                    return Err(format!("loads input {k} of {inputs}"))
                }
                Instr::Load(_) | Instr::Const(_) => depth += 1,
                Instr::Binary(_) => {
                    if depth < 2 {
                        return Err("binary op on a short stack".into());
                    }
                    depth -= 1;
                }
                _ if depth == 0 => return Err("unary op on an empty stack".into()),
                _ => {}
            }
        }
        if depth == 1 {
            Ok(())
        } else {
            Err(format!("leaves {depth} values on the stack"))
        }
    }

    /// Reference evaluation of one element; `inputs[i]` is input i's value there.
    pub fn eval(&self, inputs: &[f32], stack: &mut Vec<f32>) -> f32 {
        stack.clear();
        for ins in &self.code {
            match *ins {
                Instr::Load(k) => stack.push(inputs[k as usize]),
                Instr::Const(c) => stack.push(c),
                Instr::Unary(u) => {
                    let a = stack.pop().unwrap_or(0.0);
                    stack.push(unary(u, a));
                }
                Instr::Binary(b) => {
                    let y = stack.pop().unwrap_or(0.0);
                    let x = stack.pop().unwrap_or(0.0);
                    stack.push(binary(b, x, y));
                }
                Instr::Clamp { min, max } => {
                    let a = stack.pop().unwrap_or(0.0);
                    stack.push(clamp(a, min, max));
                }
                Instr::Cast(dt) => {
                    let a = stack.pop().unwrap_or(0.0);
                    stack.push(round_to(dt, a));
                }
            }
        }
        stack.pop().unwrap_or(0.0)
    }
}

// PyTorch's relu, maximum, minimum and clamp propagate NaN; Rust's `f32::max/min` drop it
// (`NaN.max(0.0) == 0.0`). These are written as one compare and a select, so they vectorize.

/// `relu` with NaN kept.
#[inline]
pub fn relu(a: f32) -> f32 {
    if a < 0.0 {
        0.0
    } else {
        a
    }
}

/// `maximum`: NaN if either operand is NaN.
#[inline]
pub fn nan_max(x: f32, y: f32) -> f32 {
    if x > y || x.is_nan() {
        x
    } else {
        y
    }
}

/// `minimum`: NaN if either operand is NaN.
#[inline]
pub fn nan_min(x: f32, y: f32) -> f32 {
    if x < y || x.is_nan() {
        x
    } else {
        y
    }
}

/// `clamp` with NaN kept.
#[inline]
pub fn clamp(a: f32, min: Option<f32>, max: Option<f32>) -> f32 {
    let a = min.map_or(a, |m| nan_max(a, m));
    max.map_or(a, |m| nan_min(a, m))
}

pub fn unary(u: UnaryOp, a: f32) -> f32 {
    match u {
        UnaryOp::Relu => relu(a),
        UnaryOp::Silu => a / (1.0 + (-a).exp()),
        UnaryOp::Gelu => 0.5 * a * (1.0 + erf(a / std::f32::consts::SQRT_2)),
        UnaryOp::GeluTanh => {
            let c = (2.0 / std::f32::consts::PI).sqrt();
            0.5 * a * (1.0 + (c * (a + 0.044715 * a * a * a)).tanh())
        }
        UnaryOp::Neg => -a,
        UnaryOp::Rsqrt => 1.0 / a.sqrt(),
        UnaryOp::Sqrt => a.sqrt(),
        UnaryOp::Recip => 1.0 / a,
        UnaryOp::Exp => a.exp(),
        UnaryOp::Log => a.ln(),
        UnaryOp::Cos => a.cos(),
        UnaryOp::Sin => a.sin(),
        UnaryOp::Tanh => a.tanh(),
        UnaryOp::Sigmoid => 1.0 / (1.0 + (-a).exp()),
        UnaryOp::Abs => a.abs(),
    }
}

pub fn binary(b: BinaryOp, x: f32, y: f32) -> f32 {
    match b {
        BinaryOp::Add => x + y,
        BinaryOp::Sub => x - y,
        BinaryOp::Mul => x * y,
        BinaryOp::Div => x / y,
        BinaryOp::Pow => {
            if y == 2.0 {
                x * x
            } else {
                x.powf(y)
            }
        }
        BinaryOp::Max => nan_max(x, y),
        BinaryOp::Min => nan_min(x, y),
    }
}

/// Rounds an f32 to the nearest value representable in `dt` (round-to-nearest-even).
pub fn round_to(dt: DType, a: f32) -> f32 {
    match dt {
        DType::BF16 => {
            if a.is_nan() {
                return a;
            }
            let bits = a.to_bits();
            let rounded = bits.wrapping_add(0x7fff + ((bits >> 16) & 1)) & 0xffff_0000;
            f32::from_bits(rounded)
        }
        DType::F16 => f16_round(a),
        DType::I8 | DType::I16 | DType::I32 | DType::I64 | DType::U8 => a.trunc(),
        DType::Bool => f32::from(u8::from(a != 0.0)),
        DType::F32 | DType::F64 => a,
    }
}

fn f16_round(a: f32) -> f32 {
    if !a.is_finite() || a == 0.0 {
        return a;
    }
    let mag = a.abs();
    if mag >= 65520.0 {
        return f32::INFINITY.copysign(a);
    }
    // Spacing of f16 values near `mag`: 2^(e-10) for normals, 2^-24 for subnormals.
    let e = mag.log2().floor().max(-14.0);
    let ulp = (e - 10.0).exp2();
    let q = mag / ulp;
    let r = q.round();
    let r = if (q - q.floor() - 0.5).abs() < f32::EPSILON {
        2.0 * (q / 2.0).round()
    } else {
        r
    };
    (r * ulp).copysign(a)
}

/// Abramowitz-Stegun 7.1.26 is too coarse for gelu parity; this uses the erfc continued
/// rational approximation from Numerical Recipes (fractional error < 1.2e-7).
pub fn erf(x: f32) -> f32 {
    let z = f64::from(x).abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let r = t
        * (-z * z - 1.265_512_23
            + t * (1.000_023_68
                + t * (0.374_091_96
                    + t * (0.096_784_18
                        + t * (-0.186_288_06
                            + t * (0.278_868_07
                                + t * (-1.135_203_98
                                    + t * (1.488_515_87
                                        + t * (-0.822_152_23 + t * 0.170_872_77)))))))))
            .exp();
    let v = 1.0 - r;
    (if x >= 0.0 { v } else { -v }) as f32
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut stack: Vec<String> = Vec::new();
        for ins in &self.code {
            let s = match ins {
                Instr::Load(k) => format!("in{k}"),
                Instr::Const(c) => format!("{c}"),
                Instr::Unary(u) => format!("{}({})", u.name(), stack.pop().unwrap_or_default()),
                Instr::Binary(b) => {
                    let y = stack.pop().unwrap_or_default();
                    let x = stack.pop().unwrap_or_default();
                    format!("{}({x}, {y})", b.name())
                }
                Instr::Clamp { .. } => format!("clamp({})", stack.pop().unwrap_or_default()),
                Instr::Cast(dt) => format!("{}({})", dt, stack.pop().unwrap_or_default()),
            };
            stack.push(s);
        }
        f.write_str(&stack.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn silu_mul_evaluates_and_prints() {
        let e = Expr {
            code: vec![
                Instr::Load(0),
                Instr::Unary(UnaryOp::Silu),
                Instr::Load(1),
                Instr::Binary(BinaryOp::Mul),
            ],
        };
        assert_eq!(e.validate(2), Ok(()));
        assert_eq!(e.to_string(), "mul(silu(in0), in1)");
        let v = e.eval(&[1.0, 2.0], &mut Vec::new());
        assert!((v - 2.0 * (1.0 / (1.0 + (-1.0f32).exp()))).abs() < 1e-6);
    }

    #[test]
    fn malformed_code_is_rejected() {
        let e = Expr {
            code: vec![Instr::Load(0), Instr::Load(1)],
        };
        assert!(e.validate(2).is_err());
        let e = Expr {
            code: vec![Instr::Load(3)],
        };
        assert!(e.validate(2).is_err());
    }

    #[test]
    fn rounding_matches_known_values() {
        assert_eq!(round_to(DType::BF16, 1.0 + 1.0 / 256.0), 1.0); // tie to even
        assert_eq!(round_to(DType::BF16, 1.0 + 3.0 / 256.0), 1.0 + 4.0 / 256.0);
        assert_eq!(round_to(DType::F16, 1.0 + 1.0 / 4096.0), 1.0);
        assert_eq!(round_to(DType::F16, 70000.0), f32::INFINITY);
        assert!((erf(0.5) - 0.520_499_9).abs() < 1e-6);
    }
}
