//! CUDA C generation for fused elementwise expressions (`Kernel::Elementwise`): one kernel
//! per (expression, operand dtypes, rank, layout class), compiled by NVRTC. Inputs broadcast
//! through their strides; a fully dense step skips the index arithmetic.

use crate::launch::{dtype_code, unary_code};
use npu_compiler::expr::{Expr, Instr};
use npu_compiler::program::Binding;
use npu_ir::BinaryOp;
use std::fmt::Write;

fn dense_like(b: &Binding, out: &Binding) -> bool {
    b.strides == out.strides && out.is_contiguous()
}

/// The generated kernel (without the common header) and its name.
pub(crate) fn generate(expr: &Expr, inputs: &[Binding], out: &Binding) -> (String, String) {
    let rank = out.shape.len();
    let dense = inputs.iter().all(|b| dense_like(b, out));
    let mut body = String::new();
    let n_in = inputs.len();
    let params: Vec<String> = (0..n_in)
        .map(|i| format!("TD i{i}"))
        .chain(["TD out".to_string(), "i64 n".to_string()])
        .collect();
    let _ = writeln!(body, "({}) {{", params.join(", "));
    let _ = writeln!(
        body,
        "  for (i64 e = blockIdx.x * (i64)blockDim.x + threadIdx.x; e < n; e += (i64)gridDim.x * blockDim.x) {{"
    );
    if dense || rank == 0 {
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
    for (i, b) in inputs.iter().enumerate() {
        let _ = writeln!(
            body,
            "    float a{i} = ld_dt(i{i}.ptr, {}, o{i});",
            dtype_code(b.dtype)
        );
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
                push(
                    &mut body,
                    &mut stack,
                    format!("apply_unary({}, {x})", unary_code(Some(*u))),
                );
            }
            Instr::Binary(op) => {
                let y = stack.pop().unwrap_or_else(|| "0.0f".into());
                let x = stack.pop().unwrap_or_else(|| "0.0f".into());
                let e = match op {
                    BinaryOp::Add => format!("{x} + {y}"),
                    BinaryOp::Sub => format!("{x} - {y}"),
                    BinaryOp::Mul => format!("{x} * {y}"),
                    BinaryOp::Div => format!("{x} / {y}"),
                    BinaryOp::Pow => format!("({y} == 2.0f ? {x} * {x} : powf({x}, {y}))"),
                    // NaN propagates as in PyTorch (fmaxf/fminf would drop it)
                    BinaryOp::Max => format!("(({x}) > ({y}) || ({x}) != ({x}) ? ({x}) : ({y}))"),
                    BinaryOp::Min => format!("(({x}) < ({y}) || ({x}) != ({x}) ? ({x}) : ({y}))"),
                };
                push(&mut body, &mut stack, e);
            }
            Instr::Clamp { min, max } => {
                let mut x = stack.pop().unwrap_or_else(|| "0.0f".into());
                if let Some(m) = min {
                    // `x < m ? m : x` keeps NaN (fmaxf would not)
                    let m = format!("__int_as_float({})", m.to_bits() as i32);
                    x = format!("(({x}) < {m} ? {m} : ({x}))");
                }
                if let Some(m) = max {
                    let m = format!("__int_as_float({})", m.to_bits() as i32);
                    x = format!("(({x}) > {m} ? {m} : ({x}))");
                }
                push(&mut body, &mut stack, x);
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
    let _ = writeln!(
        body,
        "    st_dt(out.ptr, {}, oo, {result});",
        dtype_code(out.dtype)
    );
    let _ = writeln!(body, "  }}\n}}");
    let name = format!("ew_{:016x}", crate::nvrtc::fnv1a(body.as_bytes()));
    (format!("extern \"C\" __global__ void {name}{body}"), name)
}
