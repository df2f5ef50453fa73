//! Integer-semantics binary ops with broadcasting: floor_divide (floats too), gcd, lcm and
//! shifts. Integers follow PyTorch: floor division rounds toward -inf, shifts by 64 or
//! more (or negative) give 0 (left) or the sign fill (right), gcd is non-negative.

use super::data::{broadcast_map, f64s, from_f64, from_i64, i64s, R};
use super::Args;
use npu_ir::IntOp;
use npu_runtime::tensor::HostTensor;

fn gcd(a: i64, b: i64) -> i64 {
    let (mut a, mut b) = (a.unsigned_abs(), b.unsigned_abs());
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a as i64
}

fn int(op: IntOp, a: i64, b: i64) -> R<i64> {
    Ok(match op {
        IntOp::FloorDivide => {
            if b == 0 {
                return Err("integer floor_divide by zero".into());
            }
            let q = a.wrapping_div(b);
            if (a % b != 0) && ((a < 0) != (b < 0)) {
                q - 1
            } else {
                q
            }
        }
        IntOp::Gcd => gcd(a, b),
        IntOp::Lcm => {
            let g = gcd(a, b);
            if g == 0 {
                0
            } else {
                (a / g).wrapping_mul(b).abs()
            }
        }
        IntOp::Shl => {
            if (0..64).contains(&b) {
                a.wrapping_shl(b as u32)
            } else {
                0
            }
        }
        IntOp::Shr => {
            if (0..64).contains(&b) {
                a >> b
            } else if a < 0 {
                -1
            } else {
                0
            }
        }
    })
}

pub fn int_binary(a: &Args, op: IntOp, scalar: Option<f64>) -> R<HostTensor> {
    let out = a.out(0)?;
    let x = a.input(0)?;
    let y_owned;
    let y = match scalar {
        Some(s) => {
            y_owned = HostTensor::new(npu_ir::DType::F64, vec![], s.to_le_bytes().to_vec())
                .map_err(|e| e.to_string())?;
            &y_owned
        }
        None => a.input(1)?,
    };
    let (mx, my) = (
        broadcast_map(x.shape(), &out.shape)?,
        broadcast_map(y.shape(), &out.shape)?,
    );
    if out.dtype.is_float() {
        if op != IntOp::FloorDivide {
            return Err(format!("{op:?} of floats"));
        }
        let (xv, yv) = (f64s(x), f64s(y));
        let r: Vec<f64> = mx
            .iter()
            .zip(&my)
            .map(|(&i, &j)| (xv[i] / yv[j]).floor())
            .collect();
        return Ok(from_f64(out, &r));
    }
    let (xv, yv) = (i64s(x), i64s(y));
    let r = mx
        .iter()
        .zip(&my)
        .map(|(&i, &j)| int(op, xv[i], yv[j]))
        .collect::<R<Vec<i64>>>()?;
    Ok(from_i64(out, &r))
}
