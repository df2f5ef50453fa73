//! Fused elementwise expressions: a postfix program over broadcast inputs, evaluated in f32.
//!
//! Invariant: a well-formed program leaves exactly one value on the stack, and every
//! `Load(i)` names an input of the step it belongs to. Backends evaluate it per element
//! (CPU), or compile it (CUDA C). The ops' math is the pointwise table's
//! ([`npu_ir::pointwise`]): this module only sequences it. Bool values are 0 or 1.

use npu_ir::{BinaryOp, DType, TernaryOp, UnaryOp};
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
    /// Pop c, pop b, pop a, push `op(a, b, c)`.
    Ternary(TernaryOp),
    /// `clamp(x, min, max)` with constant bounds (an absent bound does nothing).
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
                Instr::Ternary(_) => {
                    if depth < 3 {
                        return Err("ternary op on a short stack".into());
                    }
                    depth -= 2;
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
                    stack.push(u.eval([a]));
                }
                Instr::Binary(b) => {
                    let y = stack.pop().unwrap_or(0.0);
                    let x = stack.pop().unwrap_or(0.0);
                    stack.push(b.eval([x, y]));
                }
                Instr::Ternary(t) => {
                    let z = stack.pop().unwrap_or(0.0);
                    let y = stack.pop().unwrap_or(0.0);
                    let x = stack.pop().unwrap_or(0.0);
                    stack.push(t.eval([x, y, z]));
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

/// `u` on one f32 (the table's math; epilogues of GEMM and conv use it).
#[inline]
pub fn unary(u: UnaryOp, a: f32) -> f32 {
    u.eval([a])
}

/// `clamp` with constant bounds, as the table's [`TernaryOp::Clamp`] (NaN stays NaN).
#[inline]
pub fn clamp(x: f32, min: Option<f32>, max: Option<f32>) -> f32 {
    TernaryOp::Clamp.eval([
        x,
        min.unwrap_or(f32::NEG_INFINITY),
        max.unwrap_or(f32::INFINITY),
    ])
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

/// The error function in f32 (the pointwise table's).
pub fn erf(x: f32) -> f32 {
    npu_ir::pointwise::Real::erf(x)
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
                Instr::Ternary(t) => {
                    let z = stack.pop().unwrap_or_default();
                    let y = stack.pop().unwrap_or_default();
                    let x = stack.pop().unwrap_or_default();
                    format!("{}({x}, {y}, {z})", t.name())
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

    #[test]
    fn nan_and_inf_follow_pytorch() {
        let run = |code: Vec<Instr>, ins: &[f32]| Expr { code }.eval(ins, &mut Vec::new());
        let relu = vec![Instr::Load(0), Instr::Unary(UnaryOp::Relu)];
        assert!(run(relu.clone(), &[f32::NAN]).is_nan());
        assert_eq!(run(relu, &[f32::NEG_INFINITY]), 0.0);
        let clamp = vec![
            Instr::Load(0),
            Instr::Clamp {
                min: Some(0.0),
                max: Some(1.0),
            },
        ];
        assert!(run(clamp, &[f32::NAN]).is_nan());
        let max = vec![Instr::Load(0), Instr::Load(1), Instr::Binary(BinaryOp::Max)];
        assert!(run(max, &[1.0, f32::NAN]).is_nan());
        let lt = vec![Instr::Load(0), Instr::Load(1), Instr::Binary(BinaryOp::Lt)];
        assert_eq!(run(lt, &[f32::NAN, 1.0]), 0.0);
        let sel = vec![
            Instr::Load(0),
            Instr::Load(1),
            Instr::Const(2.0),
            Instr::Ternary(TernaryOp::Where),
        ];
        assert_eq!(run(sel.clone(), &[1.0, 5.0]), 5.0);
        assert_eq!(run(sel, &[0.0, 5.0]), 2.0);
    }
}
