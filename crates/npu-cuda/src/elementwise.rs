//! CUDA C generation for fused elementwise expressions (`Kernel::Elementwise`): one kernel
//! per (expression, operand dtypes, rank, layout class), compiled by NVRTC. Inputs broadcast
//! through their strides; a fully dense step skips the index arithmetic. Each op's C
//! expression is the pointwise table's (`npu_ir::pointwise`), inlined into the kernel; the
//! GEMM/conv epilogue's `apply_unary` switch is generated from the same rows.

use crate::launch::dtype_code;
use npu_ir::pointwise::cuda_f32;
use npu_ir::{DType, TernaryOp, UnaryOp};
use npu_program::expr::{Expr, Instr};
use npu_program::iteration::coalesce_bindings;
use npu_program::program::Binding;
use std::fmt::Write;

/// The shared device header: `kernels/common.cuh` plus `apply_unary(code, x)`, the
/// epilogue activation selected by [`UnaryOp::act_code`], generated from the table.
pub(crate) fn common_source() -> String {
    let mut s = crate::timeline::defines();
    let defer = crate::plan::gemv_norm_deferred();
    let _ = writeln!(s, "#define NPU_GEMV_NORM_DEFER {}", u8::from(defer));
    s.push_str(include_str!("kernels/common.cuh"));
    s.push_str(
        "\n// Epilogue activations by UnaryOp::act_code (generated from the pointwise table).\n",
    );
    s.push_str(
        "__device__ __forceinline__ float apply_unary(int code, float a) {\n  switch (code) {\n",
    );
    for u in UnaryOp::all().into_iter().filter(UnaryOp::is_epilogue_act) {
        let _ = writeln!(s, "    case {}: return {};", u.act_code(), u.cuda(["a"]));
    }
    s.push_str("    default: return a;\n  }\n}\n");
    // the switch out of line, for epilogues whose activation is rare
    // (the decode GEMV's): its cases are code the kernel otherwise jumps over.
    s.push_str(
        "__device__ __noinline__ float apply_unary_cold(int code, float a) { return apply_unary(code, a); }\n",
    );
    s
}

fn dense_like(b: &Binding, out: &Binding) -> bool {
    b.strides == out.strides && out.is_contiguous()
}

/// How a step's generated kernel walks its coalesced bindings.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Walk {
    /// Eight elements per thread with 16-byte loads and stores (`ld8`/`st8`) at the output's
    /// flat position: every operand lies dense like the output.
    Dense8,
    /// Eight elements per thread, each operand's offset found from the index: every operand
    /// runs contiguous along the last dim in chunks of 8 that start 16 bytes aligned (a
    /// row-sliced operand, such as the halves of a fused gate/up projection).
    Rows8,
    /// One element per thread.
    One,
}

fn walk(inputs: &[Binding], out: &Binding) -> Walk {
    let wide = |b: &Binding| {
        matches!(b.dtype, DType::F32 | DType::F16 | DType::BF16) && b.byte_offset.is_multiple_of(16)
    };
    if !wide(out) || !inputs.iter().all(wide) || !out.numel().is_multiple_of(8) {
        return Walk::One;
    }
    if out.is_contiguous() && inputs.iter().all(|b| dense_like(b, out)) {
        return Walk::Dense8;
    }
    let Some(&last) = out.shape.last() else {
        return Walk::One;
    };
    let rows8 = |b: &Binding| {
        let r = b.strides.len();
        b.strides[r - 1] == 1 && b.strides[..r - 1].iter().all(|s| s.is_multiple_of(8))
    };
    if last.is_multiple_of(8) && rows8(out) && inputs.iter().all(rows8) {
        Walk::Rows8
    } else {
        Walk::One
    }
}

/// Elements per thread of a step's generated kernel over its coalesced bindings: 8 on the
/// 16-byte paths ([`Walk`]), else 1. The planner sizes the grid by it.
pub(crate) fn per_thread(inputs: &[Binding], out: &Binding) -> usize {
    if walk(inputs, out) == Walk::One {
        1
    } else {
        8
    }
}

/// The generated kernel (without the common header) and its name, over the step's
/// coalesced iteration space (`npu_program::iteration`; the launch binds the same).
pub(crate) fn generate(expr: &Expr, inputs: &[Binding], out: &Binding) -> (String, String) {
    let (out, inputs) = coalesce_bindings(out, inputs);
    let (out, inputs) = (&out, &inputs[..]);
    let how = walk(inputs, out);
    let vec8 = how != Walk::One;
    let rank = out.shape.len();
    // Rows8 finds offsets as the one-element walk does, from the chunk's first element.
    let dense = how != Walk::Rows8 && inputs.iter().all(|b| dense_like(b, out));
    let mut body = String::new();
    let n_in = inputs.len();
    let params: Vec<String> = (0..n_in)
        .map(|i| format!("TD i{i}"))
        .chain(["TD out".to_string(), "i64 n".to_string()])
        .collect();
    // The trigger first (kernels/common.cuh, pdl_enter_early): its successor, often a GEMV,
    // is scheduled while this kernel still waits for the GEMV before it.
    let _ = writeln!(body, "({}) {{\n  pdl_enter_early();", params.join(", "));
    let _ = writeln!(
        body,
        "  for (i64 e = blockIdx.x * (i64)blockDim.x + threadIdx.x; e < {}; e += (i64)gridDim.x * blockDim.x) {{",
        if vec8 { "(n >> 3)" } else { "n" }
    );
    if how == Walk::Rows8 {
        let _ = writeln!(body, "    i64 ix0 = e * 8;");
    }
    if how == Walk::Dense8 {
        // offsets in chunks of 8 elements: the output's flat chunk index
        for i in 0..n_in {
            let _ = writeln!(body, "    i64 o{i} = e;");
        }
        let _ = writeln!(body, "    i64 oo = e;");
    } else if dense || rank == 0 {
        for i in 0..n_in {
            let _ = writeln!(body, "    i64 o{i} = e;");
        }
        let _ = writeln!(body, "    i64 oo = e;");
    } else if out.numel() < i32::MAX as usize {
        // Shapes as constants: 32-bit division by constants is a multiply and shift.
        let first = if how == Walk::Rows8 { "ix0" } else { "e" };
        let _ = writeln!(
            body,
            "    unsigned int rem = (unsigned int){first}; i64 oo = 0;"
        );
        for i in 0..n_in {
            let _ = writeln!(body, "    i64 o{i} = 0;");
        }
        for d in (0..rank).rev() {
            let n = out.shape[d];
            let _ = writeln!(
                body,
                "    {{ unsigned int ix = rem % {n}u; rem /= {n}u; oo += ix * out.st[{d}];"
            );
            for (i, b) in inputs.iter().enumerate() {
                if b.strides[d] != 0 {
                    let _ = write!(body, " o{i} += ix * i{i}.st[{d}];");
                }
            }
            let _ = writeln!(body, " }}");
        }
    } else {
        let first = if how == Walk::Rows8 { "ix0" } else { "e" };
        let _ = writeln!(body, "    i64 rem = {first}, oo = 0;");
        for i in 0..n_in {
            let _ = writeln!(body, "    i64 o{i} = 0;");
        }
        for d in (0..rank).rev() {
            let _ = writeln!(
                body,
                "    {{ i64 ix = rem % out.sh[{d}]; rem /= out.sh[{d}]; oo += ix * out.st[{d}];"
            );
            for i in 0..n_in {
                let _ = write!(body, " o{i} += ix * i{i}.st[{d}];");
            }
            let _ = writeln!(body, " }}");
        }
    }
    if vec8 {
        // every load issued before any is used; Rows8's offsets are multiples of 8
        let chunk = |o: &str| {
            if how == Walk::Rows8 {
                format!("({o} >> 3)")
            } else {
                o.to_string()
            }
        };
        for (i, b) in inputs.iter().enumerate() {
            let _ = writeln!(
                body,
                "    float v{i}[8]; ld8(i{i}.ptr, {}, {}, v{i});",
                dtype_code(b.dtype),
                chunk(&format!("o{i}"))
            );
        }
        let _ = writeln!(
            body,
            "    float r[8];\n#pragma unroll\n    for (int u = 0; u < 8; ++u) {{"
        );
        for i in 0..n_in {
            let _ = writeln!(body, "    float a{i} = v{i}[u];");
        }
    } else {
        for (i, b) in inputs.iter().enumerate() {
            let _ = writeln!(
                body,
                "    float a{i} = ld_dt(i{i}.ptr, {}, o{i});",
                dtype_code(b.dtype)
            );
        }
    }
    let mut stack: Vec<String> = Vec::new();
    let mut tmp = 0usize;
    let mut push = |body: &mut String, stack: &mut Vec<String>, e: String| {
        let _ = writeln!(body, "    float t{tmp} = {e};");
        stack.push(format!("t{tmp}"));
        tmp += 1;
    };
    for ins in &expr.code {
        match ins {
            Instr::Load(k) => stack.push(format!("a{k}")),
            Instr::Const(c) => stack.push(format!("__int_as_float({})", c.to_bits() as i32)),
            Instr::Unary(u) => {
                let x = stack.pop().unwrap_or_else(|| "0.0f".into());
                push(&mut body, &mut stack, u.cuda([&x]));
            }
            Instr::Binary(op) => {
                let y = stack.pop().unwrap_or_else(|| "0.0f".into());
                let x = stack.pop().unwrap_or_else(|| "0.0f".into());
                push(&mut body, &mut stack, op.cuda([&x, &y]));
            }
            Instr::Ternary(op) => {
                let z = stack.pop().unwrap_or_else(|| "0.0f".into());
                let y = stack.pop().unwrap_or_else(|| "0.0f".into());
                let x = stack.pop().unwrap_or_else(|| "0.0f".into());
                push(&mut body, &mut stack, op.cuda([&x, &y, &z]));
            }
            Instr::Clamp { min, max } => {
                let x = stack.pop().unwrap_or_else(|| "0.0f".into());
                let lo = cuda_f32(min.map_or(f64::NEG_INFINITY, f64::from));
                let hi = cuda_f32(max.map_or(f64::INFINITY, f64::from));
                push(&mut body, &mut stack, TernaryOp::Clamp.cuda([&x, &lo, &hi]));
            }
            Instr::Cast(dt) => {
                let x = stack.pop().unwrap_or_else(|| "0.0f".into());
                push(
                    &mut body,
                    &mut stack,
                    format!("round_dt({}, {x})", dtype_code(*dt)),
                );
            }
        }
    }
    let result = stack.pop().unwrap_or_else(|| "0.0f".into());
    if vec8 {
        let _ = writeln!(body, "    r[u] = {result};\n    }}");
        let oo = if how == Walk::Rows8 {
            "(oo >> 3)"
        } else {
            "oo"
        };
        let _ = writeln!(
            body,
            "    st8(out.ptr, {}, {oo}, r);",
            dtype_code(out.dtype)
        );
    } else {
        let _ = writeln!(
            body,
            "    st_dt(out.ptr, {}, oo, {result});",
            dtype_code(out.dtype)
        );
    }
    let _ = writeln!(body, "  }}\n}}");
    let name = format!("ew_{:016x}", crate::nvrtc::fnv1a(body.as_bytes()));
    (format!("extern \"C\" __global__ void {name}{body}"), name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use npu_ir::{BinaryOp, DType};
    use npu_program::program::Slot;

    fn dense(shape: Vec<usize>, dtype: DType) -> Binding {
        Binding {
            slot: Slot::Arena,
            byte_offset: 0,
            strides: npu_program::program::dense_strides(&shape),
            shape,
            dtype,
        }
    }

    /// The generated C carries each op's table text, with NaN-propagating forms.
    #[test]
    fn kernels_inline_the_table_text() {
        let expr = Expr {
            code: vec![
                Instr::Load(0),
                Instr::Load(1),
                Instr::Binary(BinaryOp::Lt),
                Instr::Load(0),
                Instr::Unary(UnaryOp::Relu),
                Instr::Load(1),
                Instr::Binary(BinaryOp::Max),
                Instr::Const(2.0),
                Instr::Ternary(TernaryOp::Where),
                Instr::Clamp {
                    min: Some(0.0),
                    max: None,
                },
            ],
        };
        let ins = [dense(vec![4], DType::F32), dense(vec![4], DType::BF16)];
        let (code, name) = generate(&expr, &ins, &dense(vec![4], DType::Bool));
        assert!(code.contains(&name));
        for want in [
            "float t0 = (a0 < a1 ? 1.0f : 0.0f);",
            "float t1 = (a0 < 0.0f ? 0.0f : a0);",
            "float t2 = ((t1 != t1) || (a1 != a1) ? t1 + a1 : fmaxf(t1, a1));",
            "float t3 = (t0 != 0.0f ? t2 : __int_as_float(1073741824));",
            "st_dt(out.ptr, 9, oo, t4);",
        ] {
            assert!(code.contains(want), "{want} not in\n{code}");
        }
        assert!(!code.contains("apply_unary"));
        for op in UnaryOp::all() {
            assert!(!op.cuda(["a0"]).is_empty());
        }
    }

    #[test]
    fn the_epilogue_switch_covers_every_activation() {
        let src = common_source();
        for u in [
            UnaryOp::Relu,
            UnaryOp::Silu,
            UnaryOp::Gelu,
            UnaryOp::GeluTanh,
            UnaryOp::Erf,
        ] {
            let case = format!("case {}: return {};", u.act_code(), u.cuda(["a"]));
            assert!(src.contains(&case), "{case}");
        }
        assert!(!src.contains("case -1"));
    }

    /// silu(gate) * up over the two halves of a fused [128, 17920] projection: rows of 8960
    /// contiguous elements 17920 apart, so the 16-byte walk with per-operand offsets.
    #[test]
    fn row_sliced_operands_take_the_16_byte_walk() {
        let expr = Expr {
            code: vec![
                Instr::Load(0),
                Instr::Unary(UnaryOp::Silu),
                Instr::Load(1),
                Instr::Binary(BinaryOp::Mul),
            ],
        };
        let half = |off: u64| Binding {
            slot: Slot::Arena,
            byte_offset: off,
            shape: vec![128, 8960],
            strides: vec![17920, 1],
            dtype: DType::BF16,
        };
        let out = dense(vec![128, 8960], DType::BF16);
        let ins = [half(0), half(8960 * 2)];
        assert_eq!(walk(&ins, &out), Walk::Rows8);
        assert_eq!(per_thread(&ins, &out), 8);
        let (code, _) = generate(&expr, &ins, &out);
        for want in [
            "i64 ix0 = e * 8;",
            "ld8(i1.ptr, 2, (o1 >> 3), v1);",
            "st8(out.ptr, 2, (oo >> 3), r);",
        ] {
            assert!(code.contains(want), "{want} not in\n{code}");
        }
        // a half starting 8 bytes into a 16-byte line, or rows of odd length: one per thread
        assert_eq!(walk(&[half(8), half(8960 * 2)], &out), Walk::One);
        let odd = Binding {
            shape: vec![128, 8959],
            ..half(0)
        };
        assert_eq!(
            walk(&[odd.clone(), odd], &dense(vec![128, 8959], DType::BF16)),
            Walk::One
        );
        assert_eq!(walk(&[out.clone(), out.clone()], &out), Walk::Dense8);
    }
}
