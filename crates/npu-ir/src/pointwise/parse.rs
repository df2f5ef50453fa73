//! ATen pointwise ops to [`Op`]: the table's ATen names with their parameters read from attrs
//! by name (defaults from the table), plus the overloads whose schema is not generic.

use super::{BinaryOp, TernaryOp, UnaryOp};
use crate::attrs::{Attrs, Scalar};
use crate::op::Op;
use crate::IrError;

/// ATen's `selu` constants (an `elu` with fixed parameters).
const SELU_ALPHA: f64 = 1.673_263_242_354_377_3;
const SELU_SCALE: f64 = 1.050_700_987_355_480_5;

/// The pointwise op for ATen `name.overload`, or `None` when it is not pointwise.
/// `n_inputs` counts tensor inputs; Python scalars in tensor slots are attrs.
pub(crate) fn parse(
    a: &Attrs,
    name: &str,
    overload: &str,
    n_inputs: usize,
) -> Result<Option<Op>, IrError> {
    let scalar =
        |key: &str| -> Result<Option<f64>, IrError> { Ok(a.scalar(key)?.map(Scalar::as_f64)) };
    let params = |key: &'static str, default: f64| scalar(key).map(|v| v.unwrap_or(default));
    let count = |want: usize| -> Result<(), IrError> {
        if n_inputs == want {
            Ok(())
        } else {
            Err(a.err(
                "inputs",
                format!("{name}.{overload} expects {want} tensor inputs, got {n_inputs}"),
            ))
        }
    };
    // ATen's pow with a scalar exponent computes 0.5 and -0.5 as sqrt and rsqrt, so
    // pow(-inf, 0.5) is NaN there (IEEE pow gives inf).
    let exponent = if (name, overload, n_inputs) == ("pow", "Tensor_Scalar", 1) {
        scalar("exponent")?
    } else {
        None
    };
    let op = match (name, overload) {
        ("pow", "Tensor_Scalar") if exponent == Some(0.5) => Op::Unary(UnaryOp::Sqrt),
        ("pow", "Tensor_Scalar") if exponent == Some(-0.5) => Op::Unary(UnaryOp::Rsqrt),
        ("gelu", _) => match a.string("approximate")?.as_deref() {
            None | Some("none") => Op::Unary(UnaryOp::Gelu),
            Some("tanh") => Op::Unary(UnaryOp::GeluTanh),
            Some(o) => {
                return Err(a.err("approximate", format!("unknown gelu approximation '{o}'")))
            }
        },
        ("celu", _) => {
            let alpha = params("alpha", 1.0)?;
            Op::Unary(UnaryOp::Elu {
                alpha,
                scale: 1.0,
                input_scale: 1.0 / alpha,
            })
        }
        ("selu", _) => Op::Unary(UnaryOp::Elu {
            alpha: SELU_ALPHA,
            scale: SELU_SCALE,
            input_scale: 1.0,
        }),
        ("relu6", _) => Op::Unary(UnaryOp::Relu6),
        ("hardtanh", _) => match (params("min_val", -1.0)?, params("max_val", 1.0)?) {
            (lo, hi) if lo == 0.0 && hi == 6.0 => Op::Unary(UnaryOp::Relu6),
            (lo, hi) => Op::Clamp {
                min: Some(lo),
                max: Some(hi),
            },
        },
        ("clamp" | "clip", "default" | "Scalar") => Op::Clamp {
            min: scalar("min")?,
            max: scalar("max")?,
        },
        ("clamp_min", "default" | "Scalar") => Op::Clamp {
            min: scalar("min")?,
            max: None,
        },
        ("clamp_max", "default" | "Scalar") => Op::Clamp {
            min: None,
            max: scalar("max")?,
        },
        // torch_ir drops an absent optional bound, so two inputs alone do not say which
        // it is (see `Attrs::optional_tensors`)
        ("clamp" | "clip", "Tensor") => {
            let bounds = n_inputs.saturating_sub(1);
            match a.optional_tensors(&["min", "max"], bounds)?.as_deref() {
                Some([true, true]) => Op::Ternary {
                    op: TernaryOp::Clamp,
                    scalars: [None; 3],
                },
                Some([true, false]) => binary(a, BinaryOp::Max, n_inputs)?,
                Some([false, true]) => binary(a, BinaryOp::Min, n_inputs)?,
                Some(_) => Op::Identity,
                None => {
                    return Err(a.err(
                        crate::ABSENT_TENSORS,
                        "one tensor bound is given and the IR does not say whether it is min \
                         or max (torch_ir drops absent optional tensors; export with npu's \
                         exporter, which records them)",
                    ))
                }
            }
        }
        ("clamp_min", "Tensor") => binary(a, BinaryOp::Max, n_inputs)?,
        ("clamp_max", "Tensor") => binary(a, BinaryOp::Min, n_inputs)?,
        ("max", "other") => binary(a, BinaryOp::Max, n_inputs)?,
        ("min", "other") => binary(a, BinaryOp::Min, n_inputs)?,
        ("rsub", "Scalar") => {
            if params("alpha", 1.0)? != 1.0 {
                return Ok(None);
            }
            Op::BinaryScalar {
                op: BinaryOp::Sub,
                scalar: scalar("other")?.ok_or_else(|| a.err("other", "missing"))?,
                scalar_lhs: true,
            }
        }
        ("div", "Tensor_mode" | "Scalar_mode") => {
            let op = match a.string("rounding_mode")?.as_deref() {
                None => BinaryOp::Div,
                Some("trunc") => BinaryOp::DivTrunc,
                Some("floor") => BinaryOp::DivFloor,
                Some(m) => {
                    return Err(a.err("rounding_mode", format!("unknown rounding mode '{m}'")))
                }
            };
            binary(a, op, n_inputs)?
        }
        ("where", "self" | "ScalarSelf" | "ScalarOther" | "Scalar") => {
            let scalars = [None, scalar("self")?, scalar("other")?];
            count(3 - scalars.iter().flatten().count())?;
            Op::Ternary {
                op: TernaryOp::Where,
                scalars,
            }
        }
        ("masked_fill", "Scalar" | "Tensor") => {
            let value = scalar("value")?;
            count(if value.is_some() { 2 } else { 3 })?;
            Op::MaskedFill { value }
        }
        ("lerp", "Scalar" | "Tensor") => {
            let scalars = [None, None, scalar("weight")?];
            count(3 - scalars.iter().flatten().count())?;
            Op::Ternary {
                op: TernaryOp::Lerp,
                scalars,
            }
        }
        (_, "out") => return Ok(None),
        _ => {
            if let Some(u) = UnaryOp::from_aten(name) {
                count(1)?;
                Op::Unary(u.with_params(params)?)
            } else if let Some(b) = BinaryOp::from_aten(name) {
                binary(a, b, n_inputs)?
            } else if let Some(t) = TernaryOp::from_aten(name) {
                count(3)?;
                Op::Ternary {
                    op: t.with_params(params)?,
                    scalars: [None; 3],
                }
            } else {
                return Ok(None);
            }
        }
    };
    Ok(Some(op))
}

/// A binary op from two tensors (`a op alpha * b`), or one tensor and a scalar: `other` /
/// `exponent` on the right, `self` on the left (`pow.Scalar`, `remainder.Scalar_Tensor`).
fn binary(a: &Attrs, op: BinaryOp, n_inputs: usize) -> Result<Op, IrError> {
    let alpha = if matches!(op, BinaryOp::Add | BinaryOp::Sub) {
        a.f64_or("alpha", 1.0)?
    } else {
        1.0
    };
    if n_inputs >= 2 {
        return Ok(Op::Binary { op, alpha });
    }
    if let Some(s) = a.scalar("self")? {
        return Ok(Op::BinaryScalar {
            op,
            scalar: s.as_f64(),
            scalar_lhs: true,
        });
    }
    let key = if a.has("exponent") {
        "exponent"
    } else {
        "other"
    };
    let scalar = a
        .scalar(key)?
        .ok_or_else(|| {
            a.err(
                key,
                "binary op with one tensor input needs a scalar operand",
            )
        })?
        .as_f64();
    Ok(Op::BinaryScalar {
        op,
        scalar: scalar * alpha,
        scalar_lhs: false,
    })
}
