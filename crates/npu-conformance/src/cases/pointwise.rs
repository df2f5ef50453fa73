//! Fused elementwise expressions: broadcasting, mixed dtypes, casts inside the chain, and
//! every op of the pointwise table on NaN, +-Inf, +-0 and friends; PyTorch's own answers for
//! its NaN rules.

use crate::case::{Case, Rng, SPECIAL};
use npu_ir::pointwise::Rule;
use npu_ir::{BinaryOp, DType, TernaryOp, UnaryOp};
use npu_program::expr::{Expr, Instr};
use npu_program::program::Kernel;

fn ew(code: Vec<Instr>) -> Kernel {
    Kernel::Elementwise {
        expr: Expr { code },
    }
}

pub fn cases(rng: &mut Rng) -> Vec<Case> {
    use DType::{Bool, BF16, F16, F32};
    let mut v = Vec::new();
    // silu(a) * b + c clamped, b broadcast along rows in f32, c per batch in bf16.
    let chain = vec![
        Instr::Load(0),
        Instr::Unary(UnaryOp::Silu),
        Instr::Load(1),
        Instr::Binary(BinaryOp::Mul),
        Instr::Load(2),
        Instr::Binary(BinaryOp::Add),
        Instr::Clamp {
            min: Some(-0.5),
            max: Some(2.0),
        },
    ];
    v.push(
        Case::new("elementwise silu*b+c broadcast bf16", ew(chain))
            .input(rng, &[3, 17, 129], BF16)
            .view(rng, &[129], F32, &[3, 17, 129], &[0, 0, 1], 0)
            .view(rng, &[3, 1, 1], BF16, &[3, 17, 129], &[1, 0, 0], 0)
            .output(&[3, 17, 129], BF16),
    );
    // relu(x + r + b) over channels-last activations (a residual block's tail on the `gpu`
    // target): dense, padded, a channels-first residual, a per-channel bias.
    let residual = vec![
        Instr::Load(0),
        Instr::Load(1),
        Instr::Binary(BinaryOp::Add),
        Instr::Load(2),
        Instr::Binary(BinaryOp::Add),
        Instr::Unary(UnaryOp::Relu),
    ];
    for (dt, cp, nchw_r) in [(F16, 16, false), (BF16, 24, false), (F32, 16, true)] {
        let s = [2, 16, 5, 7];
        let case = Case::new(
            format!("elementwise relu(x+r+b) {dt} nhwc pitch {cp}, channels-first r {nchw_r}"),
            ew(residual.clone()),
        )
        .nhwc_input(rng, s, dt, cp);
        let case = if nchw_r {
            case.input(rng, &s, dt)
        } else {
            case.nhwc_input(rng, s, dt, cp)
        };
        v.push(
            case.view(rng, &[16], dt, &s, &[0, 1, 0, 0], 0)
                .nhwc_output(s, dt, cp),
        );
    }
    // Dense operands, a count divisible by 8: CUDA's 8-per-thread form (16-byte accesses).
    let add_relu = vec![
        Instr::Load(0),
        Instr::Load(1),
        Instr::Binary(BinaryOp::Add),
        Instr::Unary(UnaryOp::Relu),
    ];
    v.push(
        Case::new("elementwise relu(x+r) f16 nhwc dense", ew(add_relu.clone()))
            .nhwc_input(rng, [2, 16, 5, 8], F16, 16)
            .nhwc_input(rng, [2, 16, 5, 8], F16, 16)
            .nhwc_output([2, 16, 5, 8], F16, 16),
    );
    v.push(
        Case::new(
            "elementwise relu(x+r) bf16 + f32 -> bf16 dense, NaN and infinities",
            ew(add_relu),
        )
        .special_input(rng, &[3, 40, 8], BF16, 3)
        .input(rng, &[3, 40, 8], F32)
        .output(&[3, 40, 8], BF16),
    );
    // silu(gate) * up over the halves of a fused [37, 2 * 200] projection: rows 400 apart,
    // the second half 200 elements in (CUDA's 8-per-thread walk with per-operand offsets),
    // and halves of a [5, 2 * 36] one whose second half starts 8 bytes into a 16-byte line.
    let swiglu = vec![
        Instr::Load(0),
        Instr::Unary(UnaryOp::Silu),
        Instr::Load(1),
        Instr::Binary(BinaryOp::Mul),
    ];
    for (dt, rows, half) in [(BF16, 37, 200), (F32, 37, 200), (F16, 5, 36)] {
        v.push(
            Case::new(
                format!(
                    "elementwise silu(gate)*up {dt} over row halves of {}",
                    2 * half
                ),
                ew(swiglu.clone()),
            )
            .view(rng, &[rows, 2 * half], dt, &[rows, half], &[2 * half, 1], 0)
            .view(
                rng,
                &[rows, 2 * half],
                dt,
                &[rows, half],
                &[2 * half, 1],
                half,
            )
            .output(&[rows, half], dt),
        );
    }
    let gelu = vec![
        Instr::Load(0),
        Instr::Const(2.0),
        Instr::Binary(BinaryOp::Pow),
        Instr::Unary(UnaryOp::Gelu),
        Instr::Cast(F16),
        Instr::Load(1),
        Instr::Unary(UnaryOp::Exp),
        Instr::Binary(BinaryOp::Max),
    ];
    v.push(
        Case::new(
            "elementwise gelu(x^2) as f16, max exp(y), f32 dense",
            ew(gelu),
        )
        .input(rng, &[1001], F32)
        .input(rng, &[1001], F32)
        .output(&[1001], F32),
    );
    // relu((x + b) / 3) * y rounded to bf16, b broadcast along rows, y non-contiguous.
    let div = vec![
        Instr::Load(0),
        Instr::Load(1),
        Instr::Binary(BinaryOp::Add),
        Instr::Const(3.0),
        Instr::Binary(BinaryOp::Div),
        Instr::Unary(UnaryOp::Relu),
        Instr::Load(2),
        Instr::Binary(BinaryOp::Mul),
        Instr::Cast(BF16),
    ];
    for dt in [F32, BF16, F16] {
        let shape = [3, 5, 300];
        v.push(
            Case::new(
                format!("elementwise relu((x+b)/3)*y {dt} broadcast, strided"),
                ew(div.clone()),
            )
            .input(rng, &shape, dt)
            .view(rng, &[300], dt, &shape, &[0, 0, 1], 0)
            .view(rng, &[300, 15], dt, &shape, &[1, 3, 15], 0)
            .output(&shape, dt),
        );
    }
    pytorch_nan_rules(&mut v);
    let n = SPECIAL.len();
    let out_dt = |rule: Rule| if rule == Rule::Bool { Bool } else { F32 };
    for u in UnaryOp::all() {
        v.push(
            Case::new(
                format!("pointwise {} nan/inf", u.name()),
                ew(vec![Instr::Load(0), Instr::Unary(u)]),
            )
            .special_input(rng, &[n + 15], F32, 1)
            .output(&[n + 15], out_dt(u.rule())),
        );
    }
    for b in BinaryOp::all() {
        v.push(
            Case::new(
                format!("pointwise {} nan/inf pairs", b.name()),
                ew(vec![Instr::Load(0), Instr::Load(1), Instr::Binary(b)]),
            )
            .special_input(rng, &[n * n + 7], F32, n)
            .special_input(rng, &[n * n + 7], F32, 1)
            .output(&[n * n + 7], out_dt(b.rule())),
        );
    }
    for t in TernaryOp::all() {
        v.push(
            Case::new(
                format!("pointwise {} nan/inf triples", t.name()),
                ew(vec![
                    Instr::Load(0),
                    Instr::Load(1),
                    Instr::Load(2),
                    Instr::Ternary(t),
                ]),
            )
            .special_input(rng, &[n * n], F32, n)
            .special_input(rng, &[n * n], F32, 1)
            .special_input(rng, &[n * n], F32, 3)
            .output(&[n * n], F32),
        );
    }
    // The NaN-propagating ops in 16-bit storage, over every pair of special values.
    let nan_chain = vec![
        Instr::Load(0),
        Instr::Unary(UnaryOp::Relu),
        Instr::Load(1),
        Instr::Binary(BinaryOp::Max),
        Instr::Clamp {
            min: Some(-1.0),
            max: Some(1.0),
        },
        Instr::Load(0),
        Instr::Load(1),
        Instr::Binary(BinaryOp::Min),
        Instr::Binary(BinaryOp::Add),
        Instr::Load(0),
        Instr::Load(1),
        Instr::Binary(BinaryOp::Ne),
        Instr::Const(7.0),
        Instr::Ternary(TernaryOp::Where),
    ];
    for dt in [BF16, F16] {
        v.push(
            Case::new(
                format!("pointwise relu/max/clamp/min/ne/where {dt} nan/inf"),
                ew(nan_chain.clone()),
            )
            .special_input(rng, &[n * n], dt, n)
            .special_input(rng, &[n * n], dt, 1)
            .output(&[n * n], dt),
        );
    }
    v
}

/// NaN and Inf as PyTorch has them (values checked against torch 2.11): relu, maximum/minimum
/// and clamp propagate NaN, fmax/fmin ignore it, sign(NaN) = 0, comparisons with NaN are false
/// and `ne` true; in f32 and bf16 storage, bool results stored as bool.
fn pytorch_nan_rules(v: &mut Vec<Case>) {
    let (nan, inf) = (f32::NAN, f32::INFINITY);
    let x = [nan, inf, -inf, 0.0, -1.5, 2.0, nan, 1.0];
    let y = [1.0, nan, 3.0, nan, -inf, 2.0, nan, inf];
    let un = |u: UnaryOp| vec![Instr::Load(0), Instr::Unary(u)];
    let bin = |b: BinaryOp| vec![Instr::Load(0), Instr::Load(1), Instr::Binary(b)];
    let rules: Vec<(&str, Vec<Instr>, [f32; 8])> = vec![
        (
            "relu",
            un(UnaryOp::Relu),
            [nan, inf, 0.0, 0.0, 0.0, 2.0, nan, 1.0],
        ),
        (
            "sign",
            un(UnaryOp::Sign),
            [0.0, 1.0, -1.0, 0.0, -1.0, 1.0, 0.0, 1.0],
        ),
        (
            "isnan",
            un(UnaryOp::IsNan),
            [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0],
        ),
        (
            "isinf",
            un(UnaryOp::IsInf),
            [0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0],
        ),
        (
            "sigmoid",
            un(UnaryOp::Sigmoid),
            [
                nan,
                1.0,
                0.0,
                0.5,
                0.182_425_52,
                0.880_797_1,
                nan,
                0.731_058_6,
            ],
        ),
        (
            "maximum",
            bin(BinaryOp::Max),
            [nan, nan, 3.0, nan, -1.5, 2.0, nan, inf],
        ),
        (
            "minimum",
            bin(BinaryOp::Min),
            [nan, nan, -inf, nan, -inf, 2.0, nan, 1.0],
        ),
        (
            "fmax",
            bin(BinaryOp::Fmax),
            [1.0, inf, 3.0, 0.0, -1.5, 2.0, nan, inf],
        ),
        (
            "fmin",
            bin(BinaryOp::Fmin),
            [1.0, inf, -inf, 0.0, -inf, 2.0, nan, 1.0],
        ),
        (
            "eq",
            bin(BinaryOp::Eq),
            [0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0],
        ),
        (
            "ne",
            bin(BinaryOp::Ne),
            [1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0],
        ),
        (
            "lt",
            bin(BinaryOp::Lt),
            [0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0],
        ),
        (
            "ge",
            bin(BinaryOp::Ge),
            [0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0],
        ),
        (
            "clamp(-1, 1)",
            vec![
                Instr::Load(0),
                Instr::Clamp {
                    min: Some(-1.0),
                    max: Some(1.0),
                },
            ],
            [nan, 1.0, -1.0, 0.0, -1.0, 1.0, nan, 1.0],
        ),
        (
            "clamp(x, lo=y, hi=2)",
            vec![
                Instr::Load(0),
                Instr::Load(1),
                Instr::Const(2.0),
                Instr::Ternary(TernaryOp::Clamp),
            ],
            [nan, nan, 2.0, nan, -1.5, 2.0, nan, 2.0],
        ),
        (
            "where(x > 0, x, y)",
            vec![
                Instr::Load(0),
                Instr::Const(0.0),
                Instr::Binary(BinaryOp::Gt),
                Instr::Load(0),
                Instr::Load(1),
                Instr::Ternary(TernaryOp::Where),
            ],
            [1.0, inf, 3.0, nan, -inf, 2.0, nan, 1.0],
        ),
    ];
    for dt in [DType::F32, DType::BF16] {
        for (what, code, want) in &rules {
            let is_bool = matches!(*what, "isnan" | "isinf" | "eq" | "ne" | "lt" | "ge");
            let odt = if is_bool { DType::Bool } else { dt };
            let expr = Expr { code: code.clone() };
            let mut c = Case::new(
                format!("pointwise {what} {dt} (PyTorch's NaN rules)"),
                ew(expr.code.clone()),
            )
            .input_of(&[8], dt, &x);
            if expr.num_inputs() > 1 {
                c = c.input_of(&[8], dt, &y);
            }
            v.push(c.output(&[8], odt).expect(want));
        }
    }
}
