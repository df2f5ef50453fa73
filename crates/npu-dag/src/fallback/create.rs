//! Tensors from nothing: full/zeros/ones (and the `_like`/`new_` forms), arange.

use super::data::{from_f64, from_i64, R};
use super::Args;
use npu_runtime::tensor::HostTensor;

pub fn full(a: &Args, value: f64) -> R<HostTensor> {
    let out = a.out(0)?;
    let n = out.numel();
    Ok(if out.dtype.is_float() {
        from_f64(out, &vec![value; n])
    } else {
        if value.fract() != 0.0 && out.dtype != npu_ir::DType::Bool {
            return Err(format!(
                "fill value {value} for an integer output {}",
                out.dtype
            ));
        }
        let v = if out.dtype == npu_ir::DType::Bool {
            i64::from(value != 0.0)
        } else {
            value as i64
        };
        from_i64(out, &vec![v; n])
    })
}

/// `start + i * step` for the output's length, checked against `ceil((end - start) / step)`.
pub fn arange(a: &Args, start: f64, end: f64, step: f64) -> R<HostTensor> {
    let out = a.out(0)?;
    if out.shape.len() != 1 {
        return Err(format!("arange output must be 1-D, got {out}"));
    }
    let n = out.shape[0];
    let want = ((end - start) / step).ceil().max(0.0) as usize;
    if want != n {
        return Err(format!(
            "arange({start}, {end}, {step}) has {want} elements, the output has {n}"
        ));
    }
    Ok(if out.dtype.is_float() {
        let v: Vec<f64> = (0..n).map(|i| start + i as f64 * step).collect();
        from_f64(out, &v)
    } else {
        let (s, st) = (start as i64, step as i64);
        if start.fract() != 0.0 || step.fract() != 0.0 {
            return Err(format!(
                "fractional arange into an integer output {}",
                out.dtype
            ));
        }
        let v: Vec<i64> = (0..n as i64).map(|i| s + i * st).collect();
        from_i64(out, &v)
    })
}

/// `linspace(start, end, steps)` (or `base ** linspace` for logspace) with the output's
/// length; like ATen, the second half counts back from `end` so both ends are exact.
pub fn linspace(a: &Args, start: f64, end: f64, base: Option<f64>) -> R<HostTensor> {
    let out = a.out(0)?;
    if out.shape.len() != 1 {
        return Err(format!("linspace output must be 1-D, got {out}"));
    }
    let n = out.shape[0];
    let step = if n > 1 {
        (end - start) / (n - 1) as f64
    } else {
        0.0
    };
    let v: Vec<f64> = (0..n)
        .map(|i| {
            // one step is `start` (ATen fills it)
            let x = if i < n / 2 || n == 1 {
                start + step * i as f64
            } else {
                end - step * (n - 1 - i) as f64
            };
            base.map_or(x, |b| b.powf(x))
        })
        .collect();
    Ok(from_f64(out, &v))
}
