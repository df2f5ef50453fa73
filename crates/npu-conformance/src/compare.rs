//! Running a case on a backend and judging its output against the reference.
//!
//! Output values are compared after rounding the reference to the output's dtype. NaN must
//! be NaN and an infinity the same infinity. Finite values: pointwise kernels per element
//! (`|got - want| <= rtol * |want| + atol`: one rounding of the dtype, and libm-level error in
//! f32); every other kernel against the output's scale (`|got - want| <= tol * max |want|`:
//! sums over K or T in f32 or on tensor cores differ from f64 by more than an ulp of a
//! small element).

use crate::case::Case;
use crate::reference::{each, reference};
use npu_ir::DType;
use npu_program::expr::round_to;
use npu_program::program::Kernel;
use npu_runtime::{Backend, HostTensor, MemoryWeights};

/// What one case gave on one backend.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub name: String,
    pub kind: &'static str,
    pub dtype: DType,
    /// The worst element's error over its allowance (pass when at most 1).
    pub worst: f64,
    /// Where the worst element is and what it held, for the report.
    pub detail: String,
    /// The backend refused or failed the case.
    pub error: Option<String>,
}

impl Outcome {
    pub fn passed(&self) -> bool {
        self.error.is_none() && self.worst <= 1.0
    }
}

/// Tolerance against the output's scale, for kernels that sum.
fn scale_tol(dt: DType) -> f64 {
    match dt {
        DType::BF16 => 1.6e-2,
        DType::F16 => 4e-3,
        _ => 2e-4,
    }
}

/// Per-element relative tolerance for pointwise kernels: one ulp of the dtype (the f32
/// result rounded once more can land one ulp off the f64 result rounded once).
fn elem_tol(dt: DType) -> (f64, f64) {
    match dt {
        DType::BF16 => (8e-3, 1e-6),
        DType::F16 => (1e-3, 1e-7),
        _ => (1e-5, 1e-6),
    }
}

/// The logical elements of output 0 as f64 (read through its binding).
fn read_output(case: &Case, t: &HostTensor) -> Vec<f64> {
    let out = &case.outs[0];
    let vals = t.to_f32_vec();
    let mut got = Vec::new();
    each(out.shape(), |i| got.push(f64::from(vals[out.offset(i)])));
    got
}

/// Judges `got` against `want` (unrounded): the worst element's error over its allowance,
/// and where it is.
pub fn judge(case: &Case, got: &[f64], want: &[f64]) -> (f64, String) {
    if got.len() != want.len() {
        let msg = format!("{} elements, want {}", got.len(), want.len());
        return (f64::INFINITY, msg);
    }
    let dt = case.dtype();
    let want: Vec<f64> = want
        .iter()
        .map(|&w| {
            if dt.is_float() || dt == DType::Bool {
                f64::from(round_to(dt, w as f32))
            } else {
                w.trunc()
            }
        })
        .collect();
    // PyTorch's own values: exact but for f32's last bits.
    let (rtol, atol) = if case.expected.is_some() {
        (1e-6, 0.0)
    } else {
        elem_tol(dt)
    };
    let per_element = case.expected.is_some()
        || matches!(
            case.kernel,
            Kernel::Elementwise { .. } | Kernel::Copy | Kernel::Fill { .. }
        );
    let scale = want
        .iter()
        .filter(|w| w.is_finite())
        .fold(1e-6f64, |a, w| a.max(w.abs()));
    let (mut worst, mut at) = (0f64, 0usize);
    for (k, (&g, &w)) in got.iter().zip(&want).enumerate() {
        let bad = if !(w.is_finite() && g.is_finite()) {
            let same = (w.is_nan() && g.is_nan()) || w == g;
            if same {
                0.0
            } else {
                f64::INFINITY
            }
        } else if !dt.is_float() {
            if g == w {
                0.0
            } else {
                f64::INFINITY
            }
        } else if per_element {
            let d = (g - w).abs();
            if d == 0.0 {
                0.0
            } else {
                d / (rtol * w.abs() + atol)
            }
        } else {
            (g - w).abs() / (scale_tol(dt) * scale)
        };
        if bad > worst {
            (worst, at) = (bad, k);
        }
    }
    let detail = match got.get(at) {
        Some(g) => format!("element {at}: got {g}, want {}", want[at]),
        None => "no elements".into(),
    };
    (worst, detail)
}

/// Runs `case` on `backend` (twice: a second run replays what the first captured, as the
/// CUDA backend's graphs) and judges output 0.
pub fn run_case(case: &Case, backend: &dyn Backend) -> Outcome {
    let mut res = Outcome {
        name: case.name.clone(),
        kind: case.kernel.kind(),
        dtype: case.dtype(),
        worst: f64::INFINITY,
        detail: String::new(),
        error: None,
    };
    let names: Vec<String> = (0..case.values.len()).map(|k| format!("in{k}")).collect();
    let inputs: Vec<(&str, &HostTensor)> =
        names.iter().map(String::as_str).zip(&case.values).collect();
    let program = case.program();
    let weights = MemoryWeights::default();
    let run = || -> Result<Vec<(String, HostTensor)>, String> {
        let mut x = backend
            .prepare(&program, &weights)
            .map_err(|e| e.to_string())?;
        x.run_all(&inputs).map_err(|e| e.to_string())?;
        x.run_all(&inputs).map_err(|e| e.to_string())
    };
    let outs = match run() {
        Ok(o) => o,
        Err(e) => {
            res.error = Some(e);
            return res;
        }
    };
    let Some((_, t)) = outs.first() else {
        res.error = Some("no output".into());
        return res;
    };
    let got = read_output(case, t);
    let want = match &case.expected {
        Some(v) => v.iter().map(|&x| f64::from(x)).collect(),
        None => reference(case),
    };
    (res.worst, res.detail) = judge(case, &got, &want);
    res
}
