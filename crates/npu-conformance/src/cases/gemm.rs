//! GEMM: GEMV (decode), tensor-core and SIMT paths, residual and RMSNorm-prologue forms.

use crate::case::{Case, Rng};
use npu_ir::{DType, UnaryOp};
use npu_program::program::Kernel;

fn gemm(alpha: f32, beta: f32, act: Option<UnaryOp>) -> Kernel {
    Kernel::Gemm {
        alpha,
        beta,
        act,
        residual: false,
        norm: None,
    }
}

pub fn cases(rng: &mut Rng) -> Vec<Case> {
    use DType::{BF16, F16, F32};
    let mut v = Vec::new();
    // Odd shapes in every dtype, plain and transposed weights, a bias broadcast over batch
    // and rows, alpha, beta and an activation.
    for (b, m, k, n) in [
        (1, 64, 1, 128),
        (1, 130, 257, 300),
        (1, 1, 37, 45),
        (3, 5, 33, 7),
        (2, 2, 130, 97),
        (1, 67, 19, 71),
        (1, 1, 16, 3),
    ] {
        for dt in [F32, F16, BF16] {
            for trans in [false, true] {
                let c = Case::new(
                    format!(
                        "gemm {dt} {b}x{m}x{k}x{n}{} bias relu",
                        if trans { " wT" } else { "" }
                    ),
                    gemm(0.5, 2.0, Some(UnaryOp::Relu)),
                )
                .input(rng, &[b, m, k], dt);
                let c = if trans {
                    c.transposed(rng, &[b, k, n], dt)
                } else {
                    c.input(rng, &[b, k, n], dt)
                };
                v.push(
                    c.view(rng, &[n], dt, &[b, m, n], &[0, 0, 1], 0)
                        .output(&[b, m, n], dt),
                );
            }
        }
    }
    // GEMV (M = 1) on a transposed bf16 weight with bias, vectorized and odd K; a wide one
    // (more column groups than CUDA's k_gemv16 launches blocks: each block loops); K whose
    // 16-byte words do not split evenly over a column's 32 lanes (wgpu's GEMV: the last
    // loads on some lanes only).
    for (dt, k, n) in [
        (BF16, 1536, 1000),
        (BF16, 808, 300),
        (F32, 812, 77),
        (F16, 256, 9001),
        (F16, 64, 333),
        (F32, 37, 19),
        (BF16, 1533, 77),
    ] {
        v.push(
            Case::new(
                format!("gemv {dt} 1x{k}x{n} bias+silu"),
                gemm(1.0, 1.0, Some(UnaryOp::Silu)),
            )
            .input(rng, &[1, k], dt)
            .transposed(rng, &[k, n], dt)
            .view(rng, &[n], dt, &[1, n], &[0, 1], 0)
            .output(&[1, n], dt),
        );
    }
    // A residual stream as the bias (added to the rounded product): GEMV, tensor cores, SIMT.
    let residual = Kernel::Gemm {
        alpha: 1.0,
        beta: 1.0,
        act: None,
        residual: true,
        norm: None,
    };
    for (m, k, n) in [(1, 1536, 1536), (128, 1536, 256)] {
        v.push(
            Case::new(
                format!("gemm bf16 {m}x{k}x{n} wT + residual"),
                residual.clone(),
            )
            .input(rng, &[m, k], BF16)
            .transposed(rng, &[k, n], BF16)
            .input(rng, &[m, n], BF16)
            .output(&[m, n], BF16),
        );
    }
    v.push(
        Case::new(
            "gemm f16 strided a (SIMT) 5x7x3 + residual",
            residual.clone(),
        )
        .view(rng, &[10, 9], F16, &[5, 3], &[2 * 9, 2], 1)
        .input(rng, &[3, 7], F16)
        .input(rng, &[5, 7], F16)
        .output(&[5, 7], F16),
    );
    // PyTorch's `r + linear(x)` in bf16 rounds twice: 1.0078125^2 = 1.01568.. rounds to
    // 1.015625, plus 0.00390625 rounds (to even) to 1.015625; one rounding of the exact sum
    // gives 1.0234375, which a linear's own bias gets (values from PyTorch).
    for (kernel, want) in [(residual, 1.015625f32), (gemm(1.0, 1.0, None), 1.0234375)] {
        let what = if want < 1.02 { "residual" } else { "bias" };
        v.push(
            Case::new(format!("gemm bf16 1x1x1 {what} rounding (PyTorch)"), kernel)
                .input_of(&[1, 1], BF16, &[1.0078125])
                .input_of(&[1, 1], BF16, &[1.0078125])
                .input_of(&[1, 1], BF16, &[0.00390625])
                .output(&[1, 1], BF16)
                .expect(&[want]),
        );
    }
    // RMSNorm in the prologue: decode with a bias, prefill, small odd shapes.
    for (m, k, n, dt, bias) in [
        (1, 1536, 2048, BF16, true),
        (128, 1536, 256, BF16, false),
        (5, 64, 40, F16, true),
        (5, 37, 9, F32, false),
        (3, 128, 16, F16, false),
    ] {
        let kern = Kernel::Gemm {
            alpha: 1.0,
            beta: 1.0,
            act: None,
            residual: false,
            norm: Some(1e-6),
        };
        let mut c = Case::new(
            format!(
                "gemm {dt} {m}x{k}x{n} rms_norm prologue{}",
                if bias { " + bias" } else { "" }
            ),
            kern,
        )
        .input(rng, &[m, k], dt)
        .transposed(rng, &[k, n], dt);
        if bias {
            c = c.view(rng, &[n], dt, &[m, n], &[0, 1], 0);
        }
        v.push(c.input(rng, &[k], dt).output(&[m, n], dt));
    }
    // Prefill-like bf16 with a transposed weight; batched f32 with alpha; a broadcast B.
    v.push(
        Case::new("gemm bf16 128x1536x960 wT bias", gemm(1.0, 1.0, None))
            .input(rng, &[128, 1536], BF16)
            .transposed(rng, &[1536, 960], BF16)
            .view(rng, &[960], BF16, &[128, 960], &[0, 1], 0)
            .output(&[128, 960], BF16),
    );
    v.push(
        Case::new("gemm f32 batched 3x67x91x45 alpha", gemm(0.125, 0.0, None))
            .input(rng, &[3, 67, 91], F32)
            .input(rng, &[3, 91, 45], F32)
            .output(&[3, 67, 45], F32),
    );
    v.push(
        Case::new(
            "gemm f16 2x4x33x40x17 (b broadcast, relu)",
            gemm(1.0, 0.0, Some(UnaryOp::Relu)),
        )
        .input(rng, &[2, 4, 33, 40], F16)
        .view(rng, &[40, 17], F16, &[2, 4, 40, 17], &[0, 0, 17, 1], 0)
        .output(&[2, 4, 33, 17], F16),
    );
    // Strided A and a transposed output (SIMT); a batch of B broadcast with stride 0 into a
    // non-contiguous output.
    v.push(
        Case::new(
            "gemm f32 strided a (SIMT) 5x3x7, transposed out",
            gemm(1.0, 0.0, None),
        )
        .view(rng, &[10, 9], F32, &[5, 3], &[2 * 9, 2], 1)
        .input(rng, &[3, 7], F32)
        .output_view(&[7, 5], F32, &[5, 7], &[1, 5]),
    );
    v.push(
        Case::new(
            "gemm f32 2x3x5x4 b batch-broadcast, strided out",
            gemm(1.0, 0.0, None),
        )
        .input(rng, &[2, 3, 5], F32)
        .view(rng, &[5, 4], F32, &[2, 5, 4], &[0, 4, 1], 0)
        .output_view(&[3, 2, 4], F32, &[2, 3, 4], &[4, 8, 1]),
    );
    // Decode products whose activation rows outgrow a workgroup's memory on some adapters
    // (wgpu then reads them from the buffer): Qwen2.5-1.5B's down projection, and two rows
    // through the RMSNorm prologue.
    v.push(
        Case::new(
            "gemm bf16 1x8960x1536 wT + residual",
            Kernel::Gemm {
                alpha: 1.0,
                beta: 1.0,
                act: None,
                residual: true,
                norm: None,
            },
        )
        .input(rng, &[1, 8960], BF16)
        .transposed(rng, &[8960, 1536], BF16)
        .input(rng, &[1, 1536], BF16)
        .output(&[1, 1536], BF16),
    );
    v.push(
        Case::new(
            "gemm f16 2x4096x300 rms_norm prologue",
            Kernel::Gemm {
                alpha: 1.0,
                beta: 1.0,
                act: None,
                residual: false,
                norm: Some(1e-6),
            },
        )
        .input(rng, &[2, 4096], F16)
        .transposed(rng, &[4096, 300], F16)
        .input(rng, &[4096], F16)
        .output(&[2, 300], F16),
    );
    v
}
