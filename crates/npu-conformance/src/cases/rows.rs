//! Row kernels: softmax with a scale and a broadcast mask, RMSNorm, LayerNorm, reductions
//! over trailing dims.

use crate::case::{Case, Rng};
use npu_ir::DType;
use npu_program::program::{Kernel, ReduceOp};

pub fn cases(rng: &mut Rng) -> Vec<Case> {
    use DType::{BF16, F16, F32};
    let mut v = Vec::new();
    v.push(
        Case::new(
            "softmax bf16 scale + mask broadcast over rows",
            Kernel::Softmax { scale: 0.3 },
        )
        .input(rng, &[2, 3, 5, 77], BF16)
        .view(rng, &[77], BF16, &[2, 3, 5, 77], &[0, 0, 0, 1], 0)
        .output(&[2, 3, 5, 77], BF16),
    );
    // A mask per batch with f32::MIN over its last 17 positions, broadcast over heads and rows.
    let (b, h, s, t) = (2, 3, 4, 37);
    let mask: Vec<f32> = (0..b * t)
        .map(|i| if i % t >= 20 { f32::MIN } else { rng.f() })
        .collect();
    v.push(
        Case::new(
            "softmax f32 scale 0.7, f32::MIN mask",
            Kernel::Softmax { scale: 0.7 },
        )
        .input(rng, &[b, h, s, t], F32)
        .view_of(&[b, t], F32, &mask, &[b, h, s, t], &[t, 0, 0, 1], 0)
        .output(&[b, h, s, t], F32),
    );
    v.push(
        Case::new("softmax f16 one long row", Kernel::Softmax { scale: 1.0 })
            .input(rng, &[1, 4099], F16)
            .output(&[1, 4099], F16),
    );
    v.push(
        Case::new("rms_norm bf16 1536", Kernel::RmsNorm { eps: 1e-6 })
            .input(rng, &[7, 1536], BF16)
            .input(rng, &[1536], BF16)
            .output(&[7, 1536], BF16),
    );
    // 16-bit rows at the 16-byte path's limit (4 chunks of 8 a thread), over it (the
    // two-pass fallback), and rows starting 8 bytes into a 16-byte line (fallback).
    for (dt, rows, d) in [(F16, 3, 8192), (BF16, 2, 8200)] {
        v.push(
            Case::new(
                format!("rms_norm {dt} {rows}x{d}"),
                Kernel::RmsNorm { eps: 1e-5 },
            )
            .input(rng, &[rows, d], dt)
            .input(rng, &[d], dt)
            .output(&[rows, d], dt),
        );
    }
    v.push(
        Case::new(
            "rms_norm bf16 rows at odd offsets",
            Kernel::RmsNorm { eps: 1e-6 },
        )
        .view(rng, &[4, 1548], BF16, &[4, 1544], &[1548, 1], 4)
        .input(rng, &[1544], BF16)
        .output(&[4, 1544], BF16),
    );
    v.push(
        Case::new(
            "rms_norm f32 strided rows of 33",
            Kernel::RmsNorm { eps: 1e-6 },
        )
        .view(rng, &[5, 99, 3], F32, &[3, 5, 33], &[1, 99, 3], 0)
        .input(rng, &[33], F32)
        .output(&[3, 5, 33], F32),
    );
    for (dt, w, b) in [(F32, true, true), (BF16, true, false), (F16, false, false)] {
        let mut c = Case::new(
            format!("layer_norm {dt} 5x333 weight {w} bias {b}"),
            Kernel::LayerNorm {
                eps: 1e-5,
                has_weight: w,
                has_bias: b,
            },
        )
        .input(rng, &[5, 333], dt);
        if w {
            c = c.input(rng, &[333], dt);
        }
        if b {
            c = c.input(rng, &[333], dt);
        }
        v.push(c.output(&[5, 333], dt));
    }
    let reduce = |op, reduced| Kernel::Reduce { op, reduced };
    v.push(
        Case::new(
            "reduce mean f16 2 trailing dims (keepdim)",
            reduce(ReduceOp::Mean, 2),
        )
        .input(rng, &[4, 3, 7, 7], F16)
        .output(&[4, 3, 1, 1], F16),
    );
    v.push(
        Case::new("reduce sum f32 transposed view", reduce(ReduceOp::Sum, 1))
            .view(rng, &[9, 6], F32, &[6, 9], &[1, 6], 0)
            .output(&[6], F32),
    );
    v.push(
        Case::new("reduce mean f32 3x5x7 -> 3", reduce(ReduceOp::Mean, 2))
            .input(rng, &[3, 5, 7], F32)
            .output(&[3, 1], F32),
    );
    v
}
