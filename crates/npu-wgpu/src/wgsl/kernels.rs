//! The body of each kernel kind: one thread per output element, or per row where a row's
//! statistics are shared (softmax, norms, attention), or one workgroup per output element
//! where one long reduction makes each (matrix-vector products). Written for correctness on
//! every layout first; the contract of each kind is `npu_program::program::Kernel`'s.

use super::pointwise::{self, lit};
use super::{names, offset, round_to, unravel, Body, Caps, Operand};
use npu_program::program::{Kernel, PoolKind, ReduceOp, Step};
use std::fmt::Write;

pub(super) fn numel(shape: &[usize]) -> u64 {
    shape.iter().map(|&d| d as u64).product()
}

/// `act(v)` as an expression, or `v`.
pub(super) fn act(a: Option<npu_ir::UnaryOp>, v: &str) -> String {
    a.map_or(v.to_string(), |u| pointwise::unary(u, v))
}

/// The GEMM's finish over `p` (alpha applied) at output index `idx`: the bias, or the residual
/// added after rounding the product (see `Kernel::Gemm`), the activation, the store into
/// operand `o`.
pub(super) fn gemm_store(
    ops: &[Operand],
    bias: Option<usize>,
    residual: bool,
    beta: f32,
    a: Option<npu_ir::UnaryOp>,
    o: usize,
    idx: &[String],
) -> String {
    let mut b = String::new();
    if let Some(bi) = bias {
        let bo = offset(&ops[bi], idx);
        let beta = lit(f64::from(beta));
        if residual {
            let p = round_to(ops[o].dtype, "p");
            let _ = writeln!(b, "    p = {p} + {beta} * ld{bi}({bo});");
        } else {
            let _ = writeln!(b, "    p = p + {beta} * ld{bi}({bo});");
        }
    }
    let _ = writeln!(b, "    st{o}({}, {});", offset(&ops[o], idx), act(a, "p"));
    b
}

/// Which of a GEMM step's `n_in` inputs are the bias and the norm weight, by the contract's
/// own reading (`Kernel::gemm_operands`).
pub(super) fn gemm_roles(
    step: &Step,
    n_in: usize,
) -> Result<(Option<usize>, Option<usize>), String> {
    let positions: Vec<usize> = (0..n_in).collect();
    let (_, _, bias, nw) = step
        .kernel
        .gemm_operands(&positions)
        .ok_or("gemm with a wrong operand count")?;
    Ok((bias.copied(), nw.copied()))
}

/// An attention step's additive mask at (i0, i1, i2, key tt): operand 3 when the step has
/// four inputs (`n_in`; the output follows the inputs in `ops`), else 0.
/// Statements declaring `rv`, RoPE of operand `x` at index `i0..` of `shape` (its last dim
/// split in halves that rotate into each other) with operands `cos` and `sin`.
pub(super) fn rope_value(ops: &[Operand], [x, cos, sin]: [usize; 3], shape: &[usize]) -> String {
    let r = shape.len();
    let half = shape[r - 1] / 2;
    let idx = names("i", r);
    let mut lo = idx.clone();
    lo[r - 1] = format!("(i{} + {half}u)", r - 1);
    let mut hi = idx.clone();
    hi[r - 1] = format!("(i{} - {half}u)", r - 1);
    format!(
        "    var rot = 0.0;\n    if (i{l} < {half}u) {{ rot = -ld{x}({}); }} else {{ rot = ld{x}({}); }}\n    let rv = ld{x}({}) * ld{cos}({}) + rot * ld{sin}({});\n",
        offset(&ops[x], &lo),
        offset(&ops[x], &hi),
        offset(&ops[x], &idx),
        offset(&ops[cos], &idx),
        offset(&ops[sin], &idx),
        l = r - 1,
    )
}

/// Statements storing `value` (the source element at index `i0..i{rank-1}`) into operand
/// `out` at that index with dim `axis` replaced by the slot operand `index` holds for it;
/// slots outside the dim write nothing.
pub(super) fn index_copy_store(
    ops: &[Operand],
    [index, out]: [usize; 2],
    axis: usize,
    rank: usize,
    value: &str,
) -> String {
    let mut di = names("i", rank);
    di[axis] = "u32(slot)".into();
    format!(
        "    let slot = ldi{index}({});\n    if (slot >= 0 && slot < {}) {{ st{out}({}, {value}); }}\n",
        offset(&ops[index], &[format!("i{axis}")]),
        ops[out].shape[axis],
        offset(&ops[out], &di),
    )
}

pub(super) fn mask_at(ops: &[Operand], n_in: usize) -> String {
    if n_in == 4 {
        format!(
            "ld3({})",
            offset(
                &ops[3],
                &["i0".into(), "i1".into(), "i2".into(), "tt".into()]
            )
        )
    } else {
        "0.0".into()
    }
}

/// `acc += term(c)` for c in 0..n, eight terms per iteration: Mesa's llvmpipe (lavapipe)
/// stops a shader invocation after 65535 loop iterations, and attention's dot products over
/// long contexts would pass that one term at a time.
pub(super) fn dot_loop(acc: &str, n: usize, term: &dyn Fn(&str) -> String) -> String {
    let mut s = String::new();
    let body: Vec<String> = (0..8).map(|j| term(&format!("(c + {j}u)"))).collect();
    let _ = writeln!(s, "            var c = 0u;");
    let _ = writeln!(
        s,
        "            for (; c + 8u <= {n}u; c += 8u) {{ {acc} += {}; }}",
        body.join(" + ")
    );
    let _ = writeln!(
        s,
        "            for (; c < {n}u; c++) {{ {acc} += {}; }}",
        term("c")
    );
    s
}

/// A row kernel's preamble over the output's last dim: declares the row index `i..` from work
/// item `t`; returns the row length, the row count, the index expressions with the column as
/// `c`, and x's offset there.
fn rows(b: &mut String, oshape: &[usize], x: &Operand) -> (usize, u64, Vec<String>, String) {
    let r = oshape.len();
    *b += &unravel("i", "t", &oshape[..r - 1]);
    let mut idx = names("i", r - 1);
    idx.push("c".into());
    let xo = offset(x, &idx);
    (oshape[r - 1], numel(&oshape[..r - 1]), idx, xo)
}

/// Lanes of a cooperative matrix-vector item: K split 64 ways, two adjacent elements (one
/// 32-bit word of 16-bit weights) per lane and step.
const GEMV_LANES: u32 = 64;
/// Lanes of an attention item: a decode row's keys split 256 ways, so that no lane walks a
/// long chain of keys.
const ATTN_LANES: u32 = 256;

/// The kernel body over work item `t` and the item count.
pub fn body(step: &Step, ops: &[Operand], caps: Caps) -> Result<Body, String> {
    let n_in = step.inputs.len();
    let out = &ops[n_in];
    let o = n_in; // the output operand's index
    let oshape = &out.shape;
    let r = oshape.len();
    let mut b = String::new();
    let mut lanes = 1u32;
    let items = match &step.kernel {
        Kernel::Fill { value } => {
            b += &unravel("i", "t", oshape);
            let _ = writeln!(
                b,
                "    st{o}({}, {});",
                offset(out, &names("i", r)),
                lit(*value)
            );
            numel(oshape)
        }
        Kernel::Copy => {
            b += &unravel("i", "t", oshape);
            let idx = names("i", r);
            let (src, dst) = (&ops[0], out);
            let (so, d) = (offset(src, &idx), offset(dst, &idx));
            // Integers through i32 (the low word of an i64).
            if !src.dtype.is_float() && !dst.dtype.is_float() {
                let _ = writeln!(b, "    st{o}({d}, f32(ldi0({so})));");
            } else {
                let _ = writeln!(b, "    st{o}({d}, ld0({so}));");
            }
            numel(oshape)
        }
        Kernel::Elementwise { expr } => {
            b += &unravel("i", "t", oshape);
            let idx = names("i", r);
            let mut inputs = Vec::new();
            for (k, op) in ops[..n_in].iter().enumerate() {
                let _ = writeln!(b, "    let x{k} = ld{k}({});", offset(op, &idx));
                inputs.push(format!("x{k}"));
            }
            let (code, res) = pointwise::expr(expr, &inputs, round_to);
            b += &code;
            let _ = writeln!(b, "    st{o}({}, {res});", offset(out, &idx));
            numel(oshape)
        }
        Kernel::Gemm {
            alpha,
            beta,
            act: a,
            residual,
            norm,
        } => {
            if let Some(body) = super::gemv::body(step, ops, caps)? {
                return Ok(body);
            }
            let (x, w) = (&ops[0], &ops[1]);
            let (bias, nw) = gemm_roles(step, n_in)?;
            let k = x.shape[x.shape.len() - 1];
            b += &unravel("i", "t", oshape);
            let idx = names("i", r);
            // x's and w's offsets at reduction index `e`.
            let xo = |e: &str| {
                let mut xi = idx.clone();
                xi[r - 1] = e.into();
                offset(x, &xi)
            };
            let wo = |e: &str| {
                let mut wi = idx.clone();
                wi[r - 2] = e.into();
                offset(w, &wi)
            };
            // A few rows over a long K that `gemv.rs` does not take (a weight along N, an odd
            // K, a batch): the 64 lanes of a workgroup split K, so consecutive lanes read
            // consecutive weights; otherwise one thread per output element.
            let cooperative = numel(&oshape[..r - 1]) <= 8 && k >= 128;
            if cooperative {
                lanes = GEMV_LANES;
            }
            // `acc += term(kk)` over kk in 0..K: one thread walks all of K; cooperative lanes
            // take kk = 2 * lane + 2 * lanes * i and kk + 1, four pairs in flight per step.
            let sweep = |acc: &str, t: &dyn Fn(&str) -> String| -> String {
                if !cooperative {
                    return format!(
                        "    for (var kk = 0u; kk < {k}u; kk++) {{ {acc} += {}; }}\n",
                        t("kk")
                    );
                }
                let w = 2 * GEMV_LANES;
                let quad: Vec<String> = (0..4)
                    .flat_map(|q| {
                        [
                            format!("(kk + {}u)", q * w),
                            format!("(kk + {}u)", q * w + 1),
                        ]
                    })
                    .map(|e| t(&e))
                    .collect();
                format!(
                    "    {{
    var kk = 2u * lane;
    for (; kk + {}u < {k}u; kk += {}u) {{ {acc} += {}; }}
    for (; kk + 1u < {k}u; kk += {w}u) {{ {acc} += {} + {}; }}
    if (kk < {k}u) {{ {acc} += {}; }}
    }}\n",
                    3 * w + 1,
                    4 * w,
                    quad.join(" + "),
                    t("kk"),
                    t("(kk + 1u)"),
                    t("kk"),
                )
            };
            if let (Some(eps), Some(nw)) = (norm, nw) {
                let _ = writeln!(b, "    var ss = 0.0;");
                b += &sweep("ss", &|e| format!("ld0({0}) * ld0({0})", xo(e)));
                let total = if cooperative {
                    "wg_sum(ss, lane)"
                } else {
                    "ss"
                };
                let _ = writeln!(
                    b,
                    "    let inv = inverseSqrt({total} / {}.0 + {});",
                    k,
                    lit(f64::from(*eps))
                );
                let _ = writeln!(b, "    var acc = 0.0;");
                let xn = |v: &str| round_to(x.dtype, v);
                b += &sweep("acc", &|e| {
                    format!(
                        "{} * ld1({})",
                        xn(&format!(
                            "{} * ld{nw}({})",
                            xn(&format!("ld0({}) * inv", xo(e))),
                            offset(&ops[nw], &[e.to_string()])
                        )),
                        wo(e)
                    )
                });
            } else {
                let _ = writeln!(b, "    var acc = 0.0;");
                b += &sweep("acc", &|e| format!("ld0({}) * ld1({})", xo(e), wo(e)));
            }
            if cooperative {
                // After the last barrier: lane 0 alone finishes the item.
                let _ = writeln!(b, "    acc = wg_sum(acc, lane);");
                let _ = writeln!(b, "    if (lane != 0u) {{ return; }}");
            }
            let _ = writeln!(b, "    var p = {} * acc;", lit(f64::from(*alpha)));
            b += &gemm_store(ops, bias, *residual, *beta, *a, o, &idx);
            numel(oshape)
        }
        Kernel::Conv2d {
            stride,
            padding,
            dilation,
            groups,
            act: a,
            residual,
        } => {
            let (x, w) = (&ops[0], &ops[1]);
            let (h, wd) = (x.shape[2], x.shape[3]);
            let (cout, cg, kh, kw) = (w.shape[0], w.shape[1], w.shape[2], w.shape[3]);
            let og = cout / groups.max(&1);
            b += &unravel("i", "t", oshape);
            let _ = writeln!(b, "    let g = i1 / {og}u;");
            let _ = writeln!(b, "    var acc = 0.0;");
            let xo = offset(
                x,
                &[
                    "i0".into(),
                    "(g * {cg}u + ci)".replace("{cg}", &cg.to_string()),
                    "u32(y)".into(),
                    "u32(xx)".into(),
                ],
            );
            let wo = offset(w, &["i1".into(), "ci".into(), "ky".into(), "kx".into()]);
            let _ = writeln!(
                b,
                "    for (var ci = 0u; ci < {cg}u; ci++) {{ for (var ky = 0u; ky < {kh}u; ky++) {{ for (var kx = 0u; kx < {kw}u; kx++) {{
        let y = i32(i2 * {s0}u + ky * {d0}u) - {p0}; let xx = i32(i3 * {s1}u + kx * {d1}u) - {p1};
        if (y >= 0 && y < {h} && xx >= 0 && xx < {wd}) {{ acc += ld0({xo}) * ld1({wo}); }}
    }} }} }}",
                s0 = stride[0],
                s1 = stride[1],
                d0 = dilation[0],
                d1 = dilation[1],
                p0 = padding[0],
                p1 = padding[1],
            );
            if n_in == 3 + usize::from(*residual) {
                let _ = writeln!(b, "    acc += ld2({});", offset(&ops[2], &["i1".into()]));
            }
            if *residual {
                // The convolution rounds first, as PyTorch's two ops do.
                let r = n_in - 1;
                let _ = writeln!(
                    b,
                    "    acc = {} + ld{r}({});",
                    round_to(out.dtype, "acc"),
                    offset(&ops[r], &names("i", 4))
                );
            }
            let _ = writeln!(
                b,
                "    st{o}({}, {});",
                offset(out, &names("i", 4)),
                act(*a, "acc")
            );
            numel(oshape)
        }
        Kernel::Pool2d {
            kind,
            kernel,
            stride,
            padding,
            dilation,
        } => {
            let x = &ops[0];
            let (h, wd) = (x.shape[2], x.shape[3]);
            b += &unravel("i", "t", oshape);
            let xo = offset(
                x,
                &["i0".into(), "i1".into(), "u32(y)".into(), "u32(xx)".into()],
            );
            let _ = writeln!(
                b,
                "    let y0 = i32(i2 * {s0}u) - {p0}; let x0 = i32(i3 * {s1}u) - {p1};
    var mx = -p_inf(); var sum = 0.0; var cnt = 0.0;
    for (var ky = 0; ky < {k0}; ky++) {{ for (var kx = 0; kx < {k1}; kx++) {{
        let y = y0 + ky * {d0}; let xx = x0 + kx * {d1};
        if (y >= 0 && y < {h} && xx >= 0 && xx < {wd}) {{ let v = ld0({xo}); if (p_isnan(v) || v > mx) {{ mx = v; }} sum += v; cnt += 1.0; }}
    }} }}",
                s0 = stride[0],
                s1 = stride[1],
                p0 = padding[0],
                p1 = padding[1],
                k0 = kernel[0],
                k1 = kernel[1],
                d0 = dilation[0],
                d1 = dilation[1],
            );
            let v = match kind {
                PoolKind::Max => "mx".to_string(),
                PoolKind::Avg {
                    divisor: Some(d), ..
                } => format!("sum / {}.0", d),
                PoolKind::Avg {
                    count_include_pad: true,
                    ..
                } => {
                    let _ = writeln!(
                        b,
                        "    let area = f32((min(y0 + {k0}, {hp}) - y0) * (min(x0 + {k1}, {wp}) - x0));",
                        k0 = kernel[0],
                        k1 = kernel[1],
                        hp = h + padding[0],
                        wp = wd + padding[1]
                    );
                    "sum / area".to_string()
                }
                PoolKind::Avg { .. } => "sum / cnt".to_string(),
            };
            let _ = writeln!(b, "    st{o}({}, {v});", offset(out, &names("i", 4)));
            numel(oshape)
        }
        Kernel::AdaptiveAvgPool2d => {
            let x = &ops[0];
            let (h, wd) = (x.shape[2], x.shape[3]);
            let (oh, ow) = (oshape[2], oshape[3]);
            b += &unravel("i", "t", oshape);
            let xo = offset(x, &["i0".into(), "i1".into(), "y".into(), "xx".into()]);
            let _ = writeln!(
                b,
                "    let h0 = i2 * {h}u / {oh}u; let h1 = ((i2 + 1u) * {h}u + {oh}u - 1u) / {oh}u;
    let w0 = i3 * {wd}u / {ow}u; let w1 = ((i3 + 1u) * {wd}u + {ow}u - 1u) / {ow}u;
    var sum = 0.0;
    for (var y = h0; y < h1; y++) {{ for (var xx = w0; xx < w1; xx++) {{ sum += ld0({xo}); }} }}
    st{o}({}, sum / f32((h1 - h0) * (w1 - w0)));",
                offset(out, &names("i", 4))
            );
            numel(oshape)
        }
        Kernel::Softmax { scale } => {
            let (d, lead, idx, xo) = rows(&mut b, oshape, &ops[0]);
            let mask = if n_in == 2 {
                format!(" + ld1({})", offset(&ops[1], &idx))
            } else {
                String::new()
            };
            let _ = writeln!(
                b,
                "    var m = -p_inf(); var nan = false;
    for (var c = 0u; c < {d}u; c++) {{ let v = {sc} * ld0({xo}){mask}; if (p_isnan(v)) {{ nan = true; }} if (v > m) {{ m = v; }} }}
    var z = 0.0;
    for (var c = 0u; c < {d}u; c++) {{ z += exp({sc} * ld0({xo}){mask} - m); }}
    for (var c = 0u; c < {d}u; c++) {{
        var p = exp({sc} * ld0({xo}){mask} - m) / z;
        if (nan || m == -p_inf()) {{ p = p_nan(); }}
        st{o}({}, p);
    }}",
                offset(out, &idx),
                sc = lit(f64::from(*scale)),
            );
            lead
        }
        Kernel::RmsNorm { eps } => {
            let (d, lead, idx, xo) = rows(&mut b, oshape, &ops[0]);
            let wo = offset(&ops[1], &["c".to_string()]);
            let _ = writeln!(
                b,
                "    var ss = 0.0;
    for (var c = 0u; c < {d}u; c++) {{ let v = ld0({xo}); ss += v * v; }}
    let inv = inverseSqrt(ss / {d}.0 + {e});
    for (var c = 0u; c < {d}u; c++) {{ let v = ld0({xo}) * inv; st{o}({}, {} * ld1({wo})); }}",
                offset(out, &idx),
                round_to(out.dtype, "v"),
                e = lit(f64::from(*eps)),
            );
            lead
        }
        Kernel::LayerNorm {
            eps,
            has_weight,
            has_bias,
        } => {
            let (d, lead, idx, xo) = rows(&mut b, oshape, &ops[0]);
            let c = ["c".to_string()];
            let w = if *has_weight {
                format!(" * ld1({})", offset(&ops[1], &c))
            } else {
                String::new()
            };
            let bk = 1 + usize::from(*has_weight);
            let bias = if *has_bias {
                format!(" + ld{bk}({})", offset(&ops[bk], &c))
            } else {
                String::new()
            };
            let _ = writeln!(
                b,
                "    var s = 0.0;
    for (var c = 0u; c < {d}u; c++) {{ s += ld0({xo}); }}
    let mean = s / {d}.0;
    var q = 0.0;
    for (var c = 0u; c < {d}u; c++) {{ let v = ld0({xo}) - mean; q += v * v; }}
    let inv = inverseSqrt(q / {d}.0 + {e});
    for (var c = 0u; c < {d}u; c++) {{ st{o}({}, (ld0({xo}) - mean) * inv{w}{bias}); }}",
                offset(out, &idx),
                e = lit(f64::from(*eps)),
            );
            lead
        }
        Kernel::Reduce { op, reduced } => {
            let x = &ops[0];
            let xr = x.shape.len();
            let lead = &x.shape[..xr - reduced];
            let tail = &x.shape[xr - reduced..];
            let count = numel(tail);
            b += &unravel("i", "t", lead);
            let mut idx = names("i", lead.len());
            idx.extend(names("j", tail.len()));
            let _ = writeln!(
                b,
                "    var s = 0.0;\n    for (var u = 0u; u < {count}u; u++) {{"
            );
            b += &unravel("j", "u", tail);
            let _ = writeln!(b, "    s += ld0({}); }}", offset(x, &idx));
            // The output has the leading dims' elements, whatever its shape says of them.
            b += &unravel("k", "t", oshape);
            let v = match op {
                ReduceOp::Sum => "s".to_string(),
                ReduceOp::Mean => format!("s / {count}.0"),
            };
            let _ = writeln!(b, "    st{o}({}, {v});", offset(out, &names("k", r)));
            numel(lead)
        }
        Kernel::Embedding => {
            let (table, ids) = (&ops[0], &ops[1]);
            let v = table.shape[0];
            b += &unravel("i", "t", oshape);
            let idx = names("i", r);
            let io = offset(ids, &idx[..r - 1]);
            let to = offset(table, &["u32(id)".into(), format!("i{}", r - 1)]);
            // An id outside the table writes NaN (the shader cannot refuse): visible, never
            // a silent read of another row.
            let _ = writeln!(
                b,
                "    let id = ldi1({io});\n    var v = p_nan();\n    if (id >= 0 && id < {v}) {{ v = ld0({to}); }}\n    st{o}({}, v);",
                offset(out, &idx)
            );
            numel(oshape)
        }
        Kernel::IndexCopy { axis } => {
            let src = &ops[1];
            b += &unravel("i", "t", &src.shape);
            let value = format!("ld1({})", offset(src, &names("i", src.shape.len())));
            b += &index_copy_store(ops, [0, o], *axis, src.shape.len(), &value);
            numel(&src.shape)
        }
        Kernel::Rope => {
            b += &unravel("i", "t", oshape);
            b += &rope_value(ops, [0, 1, 2], oshape);
            let _ = writeln!(b, "    st{o}({}, rv);", offset(out, &names("i", r)));
            numel(oshape)
        }
        Kernel::Attention { scale, causal } => {
            if let Some(body) = super::attention::split(ops, n_in, *scale, *causal) {
                return Ok(body);
            }
            // Many query rows (decode's few take `attention.rs`'s split body): one workgroup
            // per (query row, chunk of DC output dims): each lane runs an online softmax over
            // its own keys (t = lane, lane + 256, ...) with DC accumulators, and the lanes'
            // partial results merge at the end (flash-decoding inside a workgroup). Every chunk
            // of a row recomputes the row's scores; in exchange no lane walks more than T / 256
            // keys. (One thread per row with a private array of D accumulators gave zeros on
            // lavapipe, Mesa 22.3.)
            const DC: usize = 8;
            lanes = ATTN_LANES;
            let (q, k) = (&ops[0], &ops[1]);
            let h = q.shape[1];
            let (kvh, tlen, d) = (k.shape[1], k.shape[2], q.shape[3]);
            let g = h / kvh.max(1);
            let chunks = d.div_ceil(DC);
            let mut items_shape = oshape[..3].to_vec();
            items_shape.push(chunks);
            b += &unravel("i", "t", &items_shape);
            let kv = |op: &Operand, c: &str| {
                offset(
                    op,
                    &["i0".into(), format!("(i1 / {g}u)"), "tt".into(), c.into()],
                )
            };
            let mo = mask_at(ops, n_in);
            let tmax = if *causal {
                format!("min(i2 + 1u, {tlen}u)")
            } else {
                format!("{tlen}u")
            };
            let dims: Vec<(usize, String)> = (0..DC.min(d))
                .map(|j| (j, format!("(i3 * {DC}u + {j}u)")))
                .collect();
            let guard = |dj: &str| {
                if d % DC == 0 {
                    "true".to_string()
                } else {
                    format!("{dj} < {d}u")
                }
            };
            let decl: String = dims
                .iter()
                .map(|(j, _)| format!(" var a{j} = 0.0;"))
                .collect();
            let rescale: String = dims
                .iter()
                .map(|(j, _)| format!(" a{j} = a{j} * corr;"))
                .collect();
            let accumulate: String = dims
                .iter()
                .map(|(j, dj)| {
                    format!(
                        "\n            if ({}) {{ a{j} = a{j} + p * ld2({}); }}",
                        guard(dj),
                        kv(&ops[2], dj)
                    )
                })
                .collect();
            let mut oidx = names("i", 3);
            oidx.push("dj".into());
            let finish: String = dims
                .iter()
                .map(|(j, dj)| {
                    format!(
                        "\n    {{ let s = wg_sum(a{j} * f, lane); let dj = {dj}; if (lane == 0u && {}) {{ st{o}({}, select(s / lsum, 0.0, lsum == 0.0)); }} }}",
                        guard(dj),
                        offset(out, &oidx)
                    )
                })
                .collect();
            let _ = writeln!(
                b,
                "    var m = -3.0e38; var l = 0.0;{decl}
    for (var tt = lane; tt < {tmax}; tt += {ATTN_LANES}u) {{
        let mv = {mo};
        if (mv > -65504.0) {{
            var dot = 0.0;
{dot}
            let sc = dot * {sc} + mv;
            // Online softmax, rescaled only when the lane's maximum moves.
            if (sc > m) {{ let corr = exp(m - sc); l = l * corr;{rescale} m = sc; }}
            let p = exp(sc - m);
            l = l + p;{accumulate}
        }}
    }}
    // Merge the lanes: rescale each to the row's maximum (a lane that saw no live key has
    // l = 0 and weighs nothing).
    let mall = wg_max(m, lane);
    let f = select(exp(m - mall), 0.0, l == 0.0);
    let lsum = wg_sum(l * f, lane);{finish}",
                dot = dot_loop("dot", d, &|c: &str| format!(
                    "ld0({}) * ld1({})",
                    offset(q, &["i0".into(), "i1".into(), "i2".into(), c.into()]),
                    kv(k, c)
                )),
                sc = lit(f64::from(*scale)),
            );
            numel(&items_shape)
        }
    };
    Ok(Body::new(b, items, lanes))
}
