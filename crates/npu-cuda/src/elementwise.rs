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
    let mut s = String::from(include_str!("kernels/common.cuh"));
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
    s
}

fn dense_like(b: &Binding, out: &Binding) -> bool {
    b.strides == out.strides && out.is_contiguous()
}

/// Elements per thread of a step's generated kernel over its coalesced bindings: 8 (16-byte
/// loads and stores, `ld8`/`st8`) when every operand lies dense like the output in f32, f16
/// or bf16 at a 16-byte aligned offset and the count is a multiple of 8; else 1. The
/// planner sizes the grid by it.
pub(crate) fn per_thread(inputs: &[Binding], out: &Binding) -> usize {
    let wide = |b: &Binding| {
        matches!(b.dtype, DType::F32 | DType::F16 | DType::BF16) && b.byte_offset.is_multiple_of(16)
    };
    let ok = out.is_contiguous()
        && out.numel().is_multiple_of(8)
        && wide(out)
        && inputs.iter().all(|b| dense_like(b, out) && wide(b));
    if ok {
        8
    } else {
        1
    }
}

/// The generated kernel (without the common header) and its name, over the step's
/// coalesced iteration space (`npu_program::iteration`; the launch binds the same).
pub(crate) fn generate(expr: &Expr, inputs: &[Binding], out: &Binding) -> (String, String) {
    let (out, inputs) = coalesce_bindings(out, inputs);
    let (out, inputs) = (&out, &inputs[..]);
    let vec8 = per_thread(inputs, out) == 8;
    let rank = out.shape.len();
    let dense = inputs.iter().all(|b| dense_like(b, out));
    let mut body = String::new();
    let n_in = inputs.len();
    let params: Vec<String> = (0..n_in)
        .map(|i| format!("TD i{i}"))
        .chain(["TD out".to_string(), "i64 n".to_string()])
        .collect();
    let _ = writeln!(body, "({}) {{\n  pdl_enter();", params.join(", "));
    let _ = writeln!(
        body,
        "  for (i64 e = blockIdx.x * (i64)blockDim.x + threadIdx.x; e < {}; e += (i64)gridDim.x * blockDim.x) {{",
        if vec8 { "(n >> 3)" } else { "n" }
    );
    if vec8 {
        for (i, b) in inputs.iter().enumerate() {
            let _ = writeln!(
                body,
                "    float v{i}[8]; ld8(i{i}.ptr, {}, e, v{i});",
                dtype_code(b.dtype)
            );
        }
        let _ = writeln!(
            body,
            "    float r[8];\n#pragma unroll\n    for (int u = 0; u < 8; ++u) {{"
        );
        for i in 0..n_in {
            let _ = writeln!(body, "    float a{i} = v{i}[u];");
        }
    } else if dense || rank == 0 {
        for i in 0..n_in {
            let _ = writeln!(body, "    i64 o{i} = e;");
        }
        let _ = writeln!(body, "    i64 oo = e;");
    } else if out.numel() < i32::MAX as usize {
        // Shapes as constants: 32-bit division by constants is a multiply and shift.
        let _ = writeln!(body, "    unsigned int rem = (unsigned int)e; i64 oo = 0;");
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
        let _ = writeln!(body, "    i64 rem = e, oo = 0;");
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
    if !vec8 {
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
        let _ = writeln!(body, "    st8(out.ptr, {}, e, r);", dtype_code(out.dtype));
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
}
