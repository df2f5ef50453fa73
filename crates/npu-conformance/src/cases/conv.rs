//! NCHW convolutions: im2col + GEMM, 1x1 as plain GEMMs, direct grouped and depthwise
//! kernels, padded outputs.

use crate::case::{Case, Rng};
use npu_ir::{DType, UnaryOp};
use npu_program::program::Kernel;

fn conv(s: usize, p: usize, d: usize, groups: usize, act: Option<UnaryOp>) -> Kernel {
    Kernel::Conv2d {
        stride: [s, s],
        padding: [p, p],
        dilation: [d, d],
        groups,
        act,
        residual: false,
    }
}

/// [`conv`] adding a residual (the last input) before the activation.
fn conv_res(s: usize, p: usize, groups: usize, act: Option<UnaryOp>) -> Kernel {
    Kernel::Conv2d {
        stride: [s, s],
        padding: [p, p],
        dilation: [1, 1],
        groups,
        act,
        residual: true,
    }
}

pub fn cases(rng: &mut Rng) -> Vec<Case> {
    use DType::{BF16, F16, F32};
    let mut v = Vec::new();
    // (n, c, h, w, o, k, stride, pad, dilation, groups) with a bias and relu, in f32 (dense
    // output) and f16 (output rows with a padded pitch).
    for (n, c, h, wd, o, k, s, p, d, g) in [
        (2, 3, 11, 9, 5, 3, 1, 1, 1, 1),
        (1, 6, 10, 13, 9, 3, 2, 1, 1, 3),
        (3, 4, 7, 7, 4, 1, 1, 0, 1, 1),
        (1, 5, 12, 12, 7, 3, 2, 2, 2, 1),
        (1, 33, 5, 6, 35, 1, 2, 0, 1, 1),
        (2, 4, 8, 8, 4, 3, 1, 1, 1, 4),
        (1, 6, 6, 6, 300, 3, 1, 1, 1, 2),
        // depthwise x2 with stride and dilation, a 7x7 depthwise
        (1, 8, 9, 10, 16, 5, 2, 2, 2, 8),
        (2, 12, 14, 14, 12, 7, 1, 3, 1, 12),
        // wide groups (32 channels each)
        (1, 64, 5, 5, 8, 3, 1, 1, 1, 2),
    ] {
        for dt in [F32, F16] {
            let oh = (h + 2 * p - d * (k - 1) - 1) / s + 1;
            let ow = (wd + 2 * p - d * (k - 1) - 1) / s + 1;
            let case = Case::new(
                format!("conv {dt} {n}x{c}x{h}x{wd} -> {o} k{k} s{s} p{p} d{d} g{g} bias relu"),
                conv(s, p, d, g, Some(UnaryOp::Relu)),
            )
            .input(rng, &[n, c, h, wd], dt)
            .input(rng, &[o, c / g, k, k], dt)
            .input(rng, &[o], dt);
            v.push(if dt == F16 {
                let pitch = ow + 3;
                case.output_view(
                    &[n, o, oh, pitch],
                    dt,
                    &[n, o, oh, ow],
                    &[o * oh * pitch, oh * pitch, pitch, 1],
                )
            } else {
                case.output(&[n, o, oh, ow], dt)
            });
        }
    }
    v.push(
        Case::new(
            "conv f16 2x5x13x11 k3 s2 p1 bias relu",
            conv(2, 1, 1, 1, Some(UnaryOp::Relu)),
        )
        .input(rng, &[2, 5, 13, 11], F16)
        .input(rng, &[7, 5, 3, 3], F16)
        .input(rng, &[7], F16)
        .output(&[2, 7, 7, 6], F16),
    );
    v.push(
        Case::new(
            "conv f16 depthwise 2x32x15x13 k3 s2 p1 bias relu",
            conv(2, 1, 1, 32, Some(UnaryOp::Relu)),
        )
        .input(rng, &[2, 32, 15, 13], F16)
        .input(rng, &[32, 1, 3, 3], F16)
        .input(rng, &[32], F16)
        .output(&[2, 32, 8, 7], F16),
    );
    v.push(
        Case::new(
            "conv bf16 depthwise x2 1x8x9x10 k5 p(2,4) dilation 2",
            Kernel::Conv2d {
                stride: [1, 1],
                padding: [2, 4],
                dilation: [2, 2],
                groups: 8,
                act: None,
                residual: false,
            },
        )
        .input(rng, &[1, 8, 9, 10], BF16)
        .input(rng, &[16, 1, 5, 5], BF16)
        .output(&[1, 16, 5, 10], BF16),
    );
    // 16-bit columns, eight per thread (columns a multiple of 8), and a converting im2col.
    v.push(
        Case::new(
            "conv f16 2x16x12x10 k3 p1 -> 24 (im2col8)",
            conv(1, 1, 1, 1, None),
        )
        .input(rng, &[2, 16, 12, 10], F16)
        .input(rng, &[24, 16, 3, 3], F16)
        .output(&[2, 24, 12, 10], F16),
    );
    v.push(
        Case::new(
            "conv f32 x, bf16 w 1x8x17x16 k3 s2 p1 (im2col8 converting)",
            conv(2, 1, 1, 1, Some(UnaryOp::Relu)),
        )
        .input(rng, &[1, 8, 17, 16], F32)
        .input(rng, &[12, 8, 3, 3], BF16)
        .output(&[1, 12, 9, 8], BF16),
    );
    // 1x1 convolutions: one GEMM batched over the images.
    v.push(
        Case::new(
            "conv f16 1x1 4x96x8x8 -> 72 bias relu (batched GEMM)",
            conv(1, 0, 1, 1, Some(UnaryOp::Relu)),
        )
        .input(rng, &[4, 96, 8, 8], F16)
        .input(rng, &[72, 96, 1, 1], F16)
        .input(rng, &[72], F16)
        .output(&[4, 72, 8, 8], F16),
    );
    v.push(
        Case::new(
            "conv f32 1x1 2x24x5x3 -> 8 (odd planes)",
            conv(1, 0, 1, 1, None),
        )
        .input(rng, &[2, 24, 5, 3], F32)
        .input(rng, &[8, 24, 1, 1], F32)
        .output(&[2, 8, 5, 3], F32),
    );
    v.push(
        Case::new(
            "conv f32 groups 2 of 128 channels k3 (im2col)",
            conv(1, 1, 1, 2, None),
        )
        .input(rng, &[1, 256, 6, 5], F32)
        .input(rng, &[8, 128, 3, 3], F32)
        .output(&[1, 8, 6, 5], F32),
    );
    // Channels-last activations (the `gpu` target): GEMMs over pixels (1x1 in place, 16-byte
    // im2col rows, a channels-first image in), activations in place or in the f32 epilogue,
    // padded channel pitches, depthwise with the channel fastest.
    for (name, nchw_in, (n, c, h, wd, o, k, s, p, g), cpi, cpo, act) in [
        (
            "1x1",
            false,
            (2, 16, 5, 7, 24, 1, 1, 0, 1),
            16,
            24,
            Some(UnaryOp::Relu),
        ),
        (
            "1x1 stride 2",
            false,
            (2, 16, 9, 7, 8, 1, 2, 0, 1),
            16,
            8,
            None,
        ),
        (
            "3x3",
            false,
            (2, 16, 6, 5, 32, 3, 1, 1, 1),
            24,
            40,
            Some(UnaryOp::Relu6),
        ),
        (
            "3x3 stride 2 silu",
            false,
            (1, 24, 9, 9, 16, 3, 2, 1, 1),
            24,
            16,
            Some(UnaryOp::Silu),
        ),
        (
            "3x3 odd channels",
            false,
            (1, 6, 7, 6, 10, 3, 1, 1, 1),
            8,
            16,
            Some(UnaryOp::Relu),
        ),
        (
            "7x7 stride 2 from NCHW",
            true,
            (2, 3, 15, 13, 16, 7, 2, 3, 1),
            3,
            16,
            Some(UnaryOp::Relu),
        ),
        (
            "depthwise 3x3",
            false,
            (2, 24, 7, 7, 24, 3, 1, 1, 24),
            24,
            32,
            Some(UnaryOp::Relu6),
        ),
        (
            "grouped 3x3 stride 2",
            false,
            (1, 32, 8, 8, 16, 3, 2, 1, 4),
            32,
            16,
            None,
        ),
    ] {
        for dt in [F16, BF16, F32] {
            let oh = (h + 2 * p - k) / s + 1;
            let ow = (wd + 2 * p - k) / s + 1;
            let case = Case::new(
                format!(
                    "conv {dt} nhwc {name} {n}x{c}x{h}x{wd} -> {o} k{k} s{s} p{p} g{g} {act:?}"
                ),
                conv(s, p, 1, g, act),
            );
            let case = if nchw_in {
                case.input(rng, &[n, c, h, wd], dt)
            } else {
                case.nhwc_input(rng, [n, c, h, wd], dt, cpi)
            };
            v.push(
                case.input(rng, &[o, c / g, k, k], dt)
                    .input(rng, &[o], dt)
                    .nhwc_output([n, o, oh, ow], dt, cpo),
            );
        }
    }
    // A stem-like 7x7 stride-2 convolution from an NCHW image, large enough (pixels x taps
    // >= 2^22) for CUDA to pad K = 147 to 152 with zero columns.
    v.push(
        Case::new(
            "conv f16 nhwc 7x7 stride 2 from NCHW 2x3x240x240 -> 8 (K padded on CUDA)",
            conv(2, 3, 1, 1, Some(UnaryOp::Relu)),
        )
        .input(rng, &[2, 3, 240, 240], F16)
        .input(rng, &[8, 3, 7, 7], F16)
        .input(rng, &[8], F16)
        .nhwc_output([2, 8, 120, 120], F16, 8),
    );
    // ReLU after NaN and infinities (cuBLASLt's RELU_BIAS epilogue on CUDA must keep NaN).
    for (k, p) in [(1, 0), (3, 1)] {
        for dt in [F16, BF16] {
            v.push(
                Case::new(
                    format!("conv {dt} nhwc k{k} relu over NaN and infinities"),
                    conv(1, p, 1, 1, Some(UnaryOp::Relu)),
                )
                .nhwc_special_input(rng, [2, 16, 6, 5], dt, 16)
                .input(rng, &[24, 16, k, k], dt)
                .input(rng, &[24], dt)
                .nhwc_output([2, 24, 6, 5], dt, 24),
            );
        }
    }
    // A residual added before the activation (ResNet's bottleneck end, MobileNetV2's
    // projection): channels-last 1x1 (cuBLASLt's C operand on CUDA), 3x3 without an
    // activation, a residual stored unlike the output (a split pass), NCHW im2col, depthwise.
    for (name, (n, c, h, wd, o, k, p, g), dt, act) in [
        ("1x1", (2, 32, 5, 7, 48, 1, 0, 1), F16, Some(UnaryOp::Relu)),
        ("3x3", (1, 16, 6, 5, 24, 3, 1, 1), BF16, None),
        (
            "1x1 f32",
            (2, 8, 4, 3, 16, 1, 0, 1),
            F32,
            Some(UnaryOp::Relu),
        ),
    ] {
        v.push(
            Case::new(
                format!("conv {dt} channels-last {name} {n}x{c}x{h}x{wd} -> {o} + residual"),
                conv_res(1, p, g, act),
            )
            .nhwc_input(rng, [n, c, h, wd], dt, c)
            .input(rng, &[o, c / g, k, k], dt)
            .input(rng, &[o], dt)
            .nhwc_input(rng, [n, o, h, wd], dt, o)
            .nhwc_output([n, o, h, wd], dt, o),
        );
    }
    v.push(
        Case::new(
            "conv f16 channels-last 1x1 + residual stored NCHW, relu",
            conv_res(1, 0, 1, Some(UnaryOp::Relu)),
        )
        .nhwc_input(rng, [2, 16, 4, 5], F16, 16)
        .input(rng, &[24, 16, 1, 1], F16)
        .input(rng, &[24], F16)
        .input(rng, &[2, 24, 4, 5], F16)
        .nhwc_output([2, 24, 4, 5], F16, 24),
    );
    for dt in [F32, F16] {
        v.push(
            Case::new(
                format!("conv {dt} 2x6x9x8 k3 p1 -> 10 bias + residual relu (im2col)"),
                conv_res(1, 1, 1, Some(UnaryOp::Relu)),
            )
            .input(rng, &[2, 6, 9, 8], dt)
            .input(rng, &[10, 6, 3, 3], dt)
            .input(rng, &[10], dt)
            .input(rng, &[2, 10, 9, 8], dt)
            .output(&[2, 10, 9, 8], dt),
        );
    }
    v.push(
        Case::new(
            "conv f32 depthwise 1x12x7x7 k3 p1 + residual, no bias",
            conv_res(1, 1, 12, None),
        )
        .input(rng, &[1, 12, 7, 7], F32)
        .input(rng, &[12, 1, 3, 3], F32)
        .input(rng, &[1, 12, 7, 7], F32)
        .output(&[1, 12, 7, 7], F32),
    );
    v.push(
        Case::new(
            "conv bf16 3x64x7x7 1x1 -> 40 (padded channels out)",
            conv(1, 0, 1, 1, None),
        )
        .input(rng, &[3, 64, 7, 7], BF16)
        .input(rng, &[40, 64, 1, 1], BF16)
        .output_view(&[3, 64, 7, 7], BF16, &[3, 40, 7, 7], &[64 * 49, 49, 7, 1]),
    );
    v
}
