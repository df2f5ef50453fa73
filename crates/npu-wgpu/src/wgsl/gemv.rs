//! Matrix-vector products (decode's GEMMs of a few rows) over weights whose rows run along K:
//! the weight is read 16 bytes a load (`wv{j}`, eight bf16/f16 or four f32), a workgroup of
//! 256 lanes computes 16 output columns with 16 lanes on each, every lane issuing up to 8
//! loads before it uses the first, the column's lanes summing in a tree; the activation rows
//! (after the RMSNorm prologue, if any) are staged once per workgroup in workgroup memory
//! where the adapter has room for them. A decode step's time is the time to stream its
//! weights once, so the weight loads are what matter.
//! Shapes, layouts or limits this does not fit take the general GEMM body in `kernels.rs`.

use super::kernels::{gemm_roles, gemm_store, numel};
use super::pointwise::lit;
use super::{offset, round_to, Body, Caps, Operand};
use npu_ir::DType;
use npu_program::program::{Kernel, Step};
use std::fmt::Write;

const LANES: u32 = 256;
/// Lanes on one output column. On the H100 (Vulkan, 2026-11-26), Qwen2.5-1.5B decode's
/// GEMMs but the LM head took 2.27 ms at 16 lanes, 2.42 at 32 and 2.28 at 8 (whose whole
/// runs were slower); spreading a column over up to 256 lanes, for more workgroups, was
/// slower than 32.
const GROUP: u32 = 16;
const COLS: u32 = LANES / GROUP;
/// The most 16-byte weight loads a lane issues before using the first (8: a Qwen2.5-1.5B
/// column of K = 1536 is 12 loads on a lane; 16 or 24 in flight measured no better).
const MAX_LOADS: usize = 8;
/// The most rows one workgroup carries (one accumulator each).
const MAX_ROWS: usize = 8;

/// Elements of `dt` in one 16-byte load, for the dtypes read that way.
pub(super) fn per_load(dt: DType) -> Option<usize> {
    match dt {
        DType::BF16 | DType::F16 => Some(8),
        DType::F32 => Some(4),
        _ => None,
    }
}

/// The 16 bytes `u: vec4<u32>` as `w0` (and `w1` for 16-bit dtypes): f32 vec4s of its
/// elements in order.
pub(super) fn unpack(dt: DType) -> &'static str {
    match dt {
        DType::BF16 => {
            "let w0 = vec4<f32>(bitcast<f32>(u.x << 16u), bitcast<f32>(u.x & 0xffff0000u), bitcast<f32>(u.y << 16u), bitcast<f32>(u.y & 0xffff0000u));
            let w1 = vec4<f32>(bitcast<f32>(u.z << 16u), bitcast<f32>(u.z & 0xffff0000u), bitcast<f32>(u.w << 16u), bitcast<f32>(u.w & 0xffff0000u));"
        }
        DType::F16 => {
            "let w0 = vec4<f32>(unpack2x16float(u.x), unpack2x16float(u.y));
            let w1 = vec4<f32>(unpack2x16float(u.z), unpack2x16float(u.w));"
        }
        _ => "let w0 = bitcast<vec4<f32>>(u);",
    }
}

/// The matrix-vector body of a GEMM step, or None where the general body must run it: more
/// than `MAX_ROWS` rows or any batch, a weight not contiguous along K or not 16-byte aligned
/// (base, row pitch and K), or K under 128.
pub fn body(step: &Step, ops: &[Operand], caps: Caps) -> Result<Option<Body>, String> {
    let Kernel::Gemm {
        alpha,
        beta,
        act: a,
        residual,
        norm,
    } = &step.kernel
    else {
        return Ok(None);
    };
    let n_in = step.inputs.len();
    let (x, w, out) = (&ops[0], &ops[1], &ops[n_in]);
    let o = n_in;
    let r = out.shape.len();
    if r < 2 || x.shape.len() != r || w.shape.len() != r || numel(&out.shape[..r - 2]) != 1 {
        return Ok(None);
    }
    let (m, k, n) = (out.shape[r - 2], x.shape[r - 1], out.shape[r - 1]);
    let Some(per) = per_load(w.dtype) else {
        return Ok(None);
    };
    let aligned = w.strides[r - 2] == 1
        && k % per == 0
        && w.base % per as u64 == 0
        && (n == 1 || w.strides[r - 1] % per == 0);
    if m == 0 || m > MAX_ROWS || k < 128 || !aligned {
        return Ok(None);
    }
    let (bias, nw) = gemm_roles(step, n_in)?;
    let k4 = k / 4;
    // Index expressions of row `row`, column `col` (the batch dims are all 1).
    let at = |row: &str, col: &str| -> Vec<String> {
        let mut v = vec!["0u".to_string(); r - 2];
        v.push(row.into());
        v.push(col.into());
        v
    };
    // Row `row`'s elements 4q..4q+3 as a vec4 (`xr{row}`), and after the RMSNorm prologue
    // with the same two roundings as the general body (`xn{row}`).
    let mut globals = String::new();
    for row in 0..m {
        let xo = |c: &str| offset(x, &at(&format!("{row}u"), c));
        let quad = |f: &dyn Fn(usize, &str) -> String| -> String {
            let v: Vec<String> = (0..4).map(|i| f(i, &format!("(4u * q + {i}u)"))).collect();
            format!("vec4<f32>({})", v.join(", "))
        };
        let _ = writeln!(
            globals,
            "fn xr{row}(q: u32) -> vec4<f32> {{ return {}; }}",
            quad(&|_, c| format!("ld0({})", xo(c)))
        );
        if let Some(nw) = nw {
            let xn = |v: &str| round_to(x.dtype, v);
            let _ = writeln!(
                globals,
                "fn xn{row}(q: u32, inv: f32) -> vec4<f32> {{ let v = xr{row}(q); return {}; }}",
                quad(&|i, c| xn(&format!(
                    "{} * ld{nw}({})",
                    xn(&format!("v[{i}] * inv")),
                    offset(&ops[nw], &[c.to_string()])
                )))
            );
        }
    }
    // The rows are staged in workgroup memory where they fit (on NVIDIA's 48 KiB, every
    // Qwen2.5-1.5B product), else each lane reads them where it needs them.
    let staged = 4 * (m * k + (m + 1) * LANES as usize) <= caps.workgroup_bytes as usize;
    let normed = norm.zip(nw);
    let mut b = String::new();
    for row in 0..m {
        if let Some((eps, _)) = normed {
            let _ = writeln!(
                b,
                "    var ss{row} = 0.0;
    for (var q = lane; q < {k4}u; q += {LANES}u) {{ let v = xr{row}(q); ss{row} += dot(v, v); }}
    let inv{row} = inverseSqrt(wg_sum(ss{row}, lane) / {k}.0 + {});",
                lit(f64::from(eps))
            );
        }
        if staged {
            let v = if normed.is_some() {
                format!("xn{row}(q, inv{row})")
            } else {
                format!("xr{row}(q)")
            };
            let _ = writeln!(
                b,
                "    for (var q = lane; q < {k4}u; q += {LANES}u) {{ xs[{}u + q] = {v}; }}",
                row * k4
            );
        }
    }
    if staged {
        b += "    workgroupBarrier();\n";
    }
    // Row `row`'s vec4 at index `qe`.
    let xv = |row: usize, qe: &str| -> String {
        if staged {
            format!("xs[{}u + {qe}]", row * k4)
        } else if normed.is_some() {
            format!("xn{row}({qe}, inv{row})")
        } else {
            format!("xr{row}({qe})")
        }
    };
    let (base, pitch) = (w.base / per as u64, w.strides[r - 1] / per);
    let pitch = if n == 1 { 0 } else { pitch };
    let wj = w.binding;
    let kq = k / per;
    let loads = (kq / GROUP as usize).clamp(1, MAX_LOADS) as u32;
    // Load `loads` 16-byte words of the column (vec4 indices `qe`, `qe` + GROUP, ...)
    // into `u0`.. first, then accumulate each into every row's sum: the loads are all in
    // flight before the first use.
    let batch = |qe: &str, loads: u32| -> String {
        let mut s = String::from("{");
        for l in 0..loads {
            let _ = write!(s, " let u{l} = wv{wj}(wb + {qe} + {}u);", l * GROUP);
        }
        for l in 0..loads {
            let qi = format!("{qe} + {}u", l * GROUP);
            let fma: String = (0..m)
                .map(|i| {
                    if per == 8 {
                        format!(
                            " acc{i} += dot({}, w0) + dot({}, w1);",
                            xv(i, &format!("(2u * ({qi}))")),
                            xv(i, &format!("(2u * ({qi}) + 1u)"))
                        )
                    } else {
                        format!(" acc{i} += dot({}, w0);", xv(i, &format!("({qi})")))
                    }
                })
                .collect();
            let _ = write!(
                s,
                "\n            {{ let u = u{l}; {}\n           {fma} }}",
                unpack(w.dtype)
            );
        }
        s + " }"
    };
    let decl: String = (0..m).map(|i| format!(" var acc{i} = 0.0;")).collect();
    let parts: String = (0..m)
        .map(|i| format!(" part[{}u + lane] = acc{i};", i as u32 * LANES))
        .collect();
    // The column's lanes sum their parts in a tree; lane g of each column then finishes
    // row g of it.
    let tree: String = (0..m)
        .map(|i| {
            let o = i as u32 * LANES;
            format!(" part[{o}u + lane] += part[{o}u + lane + s];")
        })
        .collect();
    let _ = writeln!(
        b,
        "    let col = lane / {GROUP}u; let g = lane % {GROUP}u; let n = t * {COLS}u + col;
   {decl}
    if (n < {n}u) {{
        let wb = {base}u + n * {pitch}u;
        var q = g;
        for (; q + {}u < {kq}u; q += {}u) {}
        for (; q < {kq}u; q += {GROUP}u) {}
    }}
   {parts}
    workgroupBarrier();
    for (var s = {}u; s > 0u; s = s >> 1u) {{
        if (g < s) {{{tree} }}
        workgroupBarrier();
    }}
    if (g >= {m}u || n >= {n}u) {{ return; }}
    var p = {} * part[g * {LANES}u + col * {GROUP}u];",
        (loads - 1) * GROUP,
        loads * GROUP,
        batch("q", loads),
        batch("q", 1),
        GROUP / 2,
        lit(f64::from(*alpha)),
    );
    b += &gemm_store(ops, bias, *residual, *beta, *a, o, &at("g", "n"));
    let mut body = Body::new(b, (n as u64).div_ceil(u64::from(COLS)), LANES);
    body.vec4 = vec![w.binding];
    if staged {
        let _ = writeln!(globals, "var<workgroup> xs: array<vec4<f32>, {}>;", m * k4);
    }
    let _ = writeln!(
        globals,
        "var<workgroup> part: array<f32, {}>;",
        m * LANES as usize
    );
    body.globals = globals;
    Ok(Some(body))
}
