//! Each kernel's operand contract, stated once: how many operands it takes and which shapes
//! and dtypes they must have, as the variant docs of [`Kernel`] describe them.
//!
//! [`Program::validate`](crate::Program::validate) checks every step with [`Kernel::check`]
//! when a program is built or loaded, and every backend validates before it prepares, so
//! kernels and planners derive their loop bounds without re-checking. A backend adds only
//! its own limits (CUDA's rank 8 or head dim 256), never a copy of these rules.

use crate::program::{pool_axis_agrees, Binding, ConvDims, Kernel};
use npu_ir::DType;

/// What a contract check reads from an operand: a program's [`Binding`] at load, a
/// backend's view of a buffer when a kernel is called directly.
pub trait Operand {
    fn shape(&self) -> &[usize];
    fn dtype(&self) -> DType;
}

impl Operand for Binding {
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn dtype(&self) -> DType {
        self.dtype
    }
}

impl Kernel {
    /// Inputs the kernel takes: (fewest, most). Every kernel has one output.
    pub fn arity(&self) -> (usize, usize) {
        match self {
            Kernel::Gemm { norm, .. } => {
                let n = usize::from(norm.is_some());
                (2 + n, 3 + n)
            }
            Kernel::Conv2d { residual, .. } => {
                let n = usize::from(*residual);
                (2 + n, 3 + n)
            }
            Kernel::Pool2d { .. } | Kernel::AdaptiveAvgPool2d | Kernel::Reduce { .. } => (1, 1),
            Kernel::Elementwise { .. } => (0, usize::MAX),
            Kernel::Softmax { .. } => (1, 2),
            Kernel::RmsNorm { .. } | Kernel::Embedding | Kernel::IndexCopy { .. } => (2, 2),
            Kernel::LayerNorm {
                has_weight,
                has_bias,
                ..
            } => {
                let n = 1 + usize::from(*has_weight) + usize::from(*has_bias);
                (n, n)
            }
            Kernel::Rope => (3, 3),
            Kernel::Attention { .. } => (3, 4),
            Kernel::Copy => (1, 1),
            Kernel::Fill { .. } => (0, 0),
        }
    }

    /// Checks `ins` and `outs` against the kernel's contract; the message names the operands
    /// that disagree (the caller adds which step).
    pub fn check<O: Operand>(&self, ins: &[O], outs: &[O]) -> Result<(), String> {
        let (lo, hi) = self.arity();
        if ins.len() < lo || ins.len() > hi || outs.len() != 1 {
            let range = if hi == usize::MAX {
                format!("{lo} or more")
            } else if lo == hi {
                lo.to_string()
            } else {
                format!("{lo}..={hi}")
            };
            return Err(format!(
                "{} takes {range} inputs and 1 output, got {} and {}",
                self.kind(),
                ins.len(),
                outs.len()
            ));
        }
        let s = |i: usize| ins[i].shape();
        let out = outs[0].shape();
        match self {
            Kernel::Gemm { act, residual, .. } => {
                let (a, b, bias, nw) = self
                    .gemm_operands(ins)
                    .ok_or_else(|| format!("a gemm with {} inputs", ins.len()))?;
                check_gemm(a.shape(), b.shape(), bias.map(|b| b.shape()), out)?;
                if *residual && (bias.is_none() || act.is_some()) {
                    return Err("a residual gemm needs a bias and no activation".into());
                }
                if let Some(w) = nw {
                    let k = a.shape()[a.shape().len() - 1];
                    if numel(w.shape()) != Some(k) {
                        return Err(format!("norm weight {:?} is not [{k}]", w.shape()));
                    }
                }
                Ok(())
            }
            Kernel::Conv2d {
                stride,
                padding,
                dilation,
                groups,
                ..
            } => {
                let (x, w, bias, r) = self
                    .conv_operands(ins)
                    .ok_or_else(|| format!("a conv2d with {} inputs", ins.len()))?;
                ConvDims::check(
                    x.shape(),
                    w.shape(),
                    bias.map(|b| b.shape()),
                    out,
                    *stride,
                    *padding,
                    *dilation,
                    *groups,
                )?;
                match r {
                    Some(r) if r.shape() != out || r.dtype() != outs[0].dtype() => Err(format!(
                        "residual {:?} {} is not the output's {out:?} {}",
                        r.shape(),
                        r.dtype(),
                        outs[0].dtype()
                    )),
                    _ => Ok(()),
                }
            }
            Kernel::Pool2d {
                kernel,
                stride,
                padding,
                dilation,
                ..
            } => {
                nchw_pair(s(0), out)?;
                for i in 0..2 {
                    pool_axis_agrees(
                        s(0)[2 + i],
                        out[2 + i],
                        kernel[i],
                        stride[i],
                        padding[i],
                        dilation[i],
                    )
                    .map_err(|e| format!("pool2d output {out:?} for input {:?}: {e}", s(0)))?;
                }
                Ok(())
            }
            Kernel::AdaptiveAvgPool2d => nchw_pair(s(0), out),
            Kernel::Elementwise { expr } => {
                expr.validate(ins.len())?;
                match (0..ins.len()).find(|&i| s(i) != out) {
                    Some(i) => Err(format!(
                        "input {i} is bound as {:?}, the output as {out:?}",
                        s(i)
                    )),
                    None => Ok(()),
                }
            }
            Kernel::Softmax { .. } => {
                let x = s(0);
                if x.is_empty() || out != x || ins.get(1).is_some_and(|m| m.shape() != x) {
                    return Err(format!(
                        "x {x:?}, mask {:?} and output {out:?} must share one shape of rank >= 1",
                        ins.get(1).map(|m| m.shape())
                    ));
                }
                Ok(())
            }
            Kernel::RmsNorm { .. } => {
                let d = rows_of(s(0), out)?;
                vector_of(s(1), d, "weight")
            }
            Kernel::LayerNorm {
                has_weight,
                has_bias,
                ..
            } => {
                let d = rows_of(s(0), out)?;
                if *has_weight {
                    vector_of(s(1), d, "weight")?;
                }
                if *has_bias {
                    vector_of(s(ins.len() - 1), d, "bias")?;
                }
                Ok(())
            }
            Kernel::Reduce { reduced, .. } => {
                let x = s(0);
                if *reduced > x.len() {
                    return Err(format!(
                        "reduces {reduced} dims of a rank-{} input",
                        x.len()
                    ));
                }
                let lead = numel(&x[..x.len() - reduced]);
                if lead.is_none() || numel(out) != lead {
                    return Err(format!(
                        "output {out:?} does not hold the leading elements of {x:?}"
                    ));
                }
                Ok(())
            }
            Kernel::Embedding => {
                let (table, ids) = (s(0), s(1));
                let want: Option<Vec<usize>> = match table {
                    [_, d] => Some(ids.iter().copied().chain([*d]).collect()),
                    _ => None,
                };
                if want.as_deref() != Some(out) {
                    return Err(format!(
                        "expects table [V,D], ids [..] and out [.., D]; got {table:?}, {ids:?}, {out:?}"
                    ));
                }
                integers(ins[1].dtype(), "ids")
            }
            Kernel::IndexCopy { axis } => {
                let (idx, src) = (s(0), s(1));
                let r = src.len();
                if *axis >= r
                    || out.len() != r
                    || numel(idx) != Some(src[*axis])
                    || (0..r).any(|d| d != *axis && src[d] != out[d])
                {
                    return Err(format!(
                        "index {idx:?}, src {src:?} and dest {out:?} do not agree along axis {axis}"
                    ));
                }
                integers(ins[0].dtype(), "index")
            }
            Kernel::Rope => {
                let x = s(0);
                if x.is_empty() || s(1) != x || s(2) != x || out != x {
                    return Err(format!(
                        "x {x:?}, cos {:?}, sin {:?} and out {out:?} must share one shape",
                        s(1),
                        s(2)
                    ));
                }
                if x[x.len() - 1] % 2 == 1 {
                    return Err(format!("last dim {} is odd", x[x.len() - 1]));
                }
                Ok(())
            }
            Kernel::Attention { .. } => {
                check_attention(s(0), s(1), s(2), ins.get(3).map(|m| m.shape()), out)
            }
            Kernel::Copy => {
                if numel(s(0)).is_none() || numel(s(0)) != numel(out) {
                    return Err(format!(
                        "input {:?} and output {out:?} differ in size",
                        s(0)
                    ));
                }
                Ok(())
            }
            Kernel::Fill { .. } => Ok(()),
        }
    }
}

/// Element count, `None` on overflow.
fn numel(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d))
}

fn integers(d: DType, what: &str) -> Result<(), String> {
    if d.is_float() {
        return Err(format!("{what} must be integers, got {d}"));
    }
    Ok(())
}

/// x and out share one shape of rank >= 1; returns the normalized (last) dim.
fn rows_of(x: &[usize], out: &[usize]) -> Result<usize, String> {
    match x.last() {
        Some(&d) if out == x => Ok(d),
        _ => Err(format!(
            "input {x:?} and output {out:?} must share one shape of rank >= 1"
        )),
    }
}

fn vector_of(v: &[usize], d: usize, what: &str) -> Result<(), String> {
    if numel(v) != Some(d) {
        return Err(format!("{what} has shape {v:?}, expected [{d}]"));
    }
    Ok(())
}

fn nchw_pair(x: &[usize], out: &[usize]) -> Result<(), String> {
    if x.len() != 4 || out.len() != 4 || x[..2] != out[..2] {
        return Err(format!(
            "expects x [N,C,H,W] and out [N,C,OH,OW], got {x:?} and {out:?}"
        ));
    }
    Ok(())
}

/// `x` broadcasts to `to` when right-aligned: no more dims, each 1 or equal.
fn broadcasts(x: &[usize], to: &[usize]) -> bool {
    x.len() <= to.len()
        && x.iter()
            .rev()
            .zip(to.iter().rev())
            .all(|(&a, &b)| a == 1 || a == b)
}

/// a [.., m, k] @ b [.., k, n] -> out [.., m, n]; batch dims of a and b broadcast to out's,
/// and so does the bias.
fn check_gemm(
    a: &[usize],
    b: &[usize],
    bias: Option<&[usize]>,
    out: &[usize],
) -> Result<(), String> {
    let (ra, rb, r) = (a.len(), b.len(), out.len());
    if ra < 2 || rb < 2 || r < 2 || ra > r || rb > r {
        return Err(format!(
            "operands need rank >= 2 and no more batch dims than the output: a {a:?}, b {b:?}, out {out:?}"
        ));
    }
    let (m, n, k) = (out[r - 2], out[r - 1], a[ra - 1]);
    if a[ra - 2] != m || b[rb - 2] != k || b[rb - 1] != n {
        return Err(format!(
            "shapes do not chain: a {a:?} @ b {b:?} -> out {out:?}"
        ));
    }
    let batch = &out[..r - 2];
    if !broadcasts(&a[..ra - 2], batch) || !broadcasts(&b[..rb - 2], batch) {
        return Err(format!(
            "batch dims of a {a:?} and b {b:?} do not broadcast to out {out:?}"
        ));
    }
    if let Some(c) = bias {
        if !broadcasts(c, out) {
            return Err(format!("bias {c:?} does not broadcast to out {out:?}"));
        }
    }
    Ok(())
}

/// q [B,H,S,D], k and v [B,KVH,T,D] with H a multiple of KVH, mask [B,H,S,T], out as q.
fn check_attention(
    q: &[usize],
    k: &[usize],
    v: &[usize],
    mask: Option<&[usize]>,
    out: &[usize],
) -> Result<(), String> {
    let (&[b, h, s, d], &[kb, kvh, t, kd]) = (q, k) else {
        return Err(format!(
            "expects q [B,H,S,D] and k/v [B,KVH,T,D]; got q {q:?}, k {k:?}"
        ));
    };
    if out != q || v != k || kb != b || kd != d || kvh == 0 || h % kvh != 0 {
        return Err(format!(
            "q {q:?}, k {k:?}, v {v:?} and out {out:?} do not fit (out as q, v as k, heads a multiple of kv heads)"
        ));
    }
    if let Some(m) = mask {
        if m != [b, h, s, t] {
            return Err(format!("mask {m:?} is not [B,H,S,T] = {:?}", [b, h, s, t]));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
