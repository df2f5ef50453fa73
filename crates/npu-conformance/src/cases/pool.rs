//! Max and average pooling with ATen's padding and divisor rules; adaptive average pooling
//! with its floor/ceil windows, including windows of 32 or more (a warp per output).

use crate::case::{Case, Rng};
use npu_ir::DType;
use npu_program::program::{Kernel, PoolKind};

fn pool(kind: PoolKind, k: usize, s: usize, p: usize) -> Kernel {
    Kernel::Pool2d {
        kind,
        kernel: [k, k],
        stride: [s, s],
        padding: [p, p],
        dilation: [1, 1],
    }
}

pub fn cases(rng: &mut Rng) -> Vec<Case> {
    use DType::{BF16, F16, F32};
    let mut v = Vec::new();
    let avg = |count_include_pad, divisor| PoolKind::Avg {
        count_include_pad,
        divisor,
    };
    for (kind, what) in [
        (PoolKind::Max, "max"),
        (avg(true, None), "avg with pad"),
        (avg(false, None), "avg without pad"),
        (avg(true, Some(5)), "avg divisor 5"),
    ] {
        v.push(
            Case::new(
                format!("pool {what} f32 2x3x9x7 k3 s2 p1"),
                pool(kind, 3, 2, 1),
            )
            .input(rng, &[2, 3, 9, 7], F32)
            .output(&[2, 3, 5, 4], F32),
        );
    }
    v.push(
        Case::new("maxpool f16 k3 s2 p1", pool(PoolKind::Max, 3, 2, 1))
            .input(rng, &[2, 3, 15, 14], F16)
            .output(&[2, 3, 8, 7], F16),
    );
    v.push(
        Case::new(
            "maxpool f32 k3 s2 p1 over NaN and infinities",
            pool(PoolKind::Max, 3, 2, 1),
        )
        .special_input(rng, &[1, 4, 11, 13], F32, 5)
        .output(&[1, 4, 6, 7], F32),
    );
    // 16-bit 3x3 windows take CUDA's k_max_pool3_16
    v.push(
        Case::new(
            "maxpool bf16 k3 s2 p1 over NaN and infinities",
            pool(PoolKind::Max, 3, 2, 1),
        )
        .special_input(rng, &[2, 3, 11, 13], BF16, 5)
        .output(&[2, 3, 6, 7], BF16),
    );
    v.push(
        Case::new("maxpool f16 k3 s1 p1", pool(PoolKind::Max, 3, 1, 1))
            .input(rng, &[1, 5, 9, 10], F16)
            .output(&[1, 5, 9, 10], F16),
    );
    v.push(
        Case::new(
            "maxpool f32 k3 s1 p1 dilation 2",
            Kernel::Pool2d {
                kind: PoolKind::Max,
                kernel: [3, 3],
                stride: [1, 1],
                padding: [1, 1],
                dilation: [2, 2],
            },
        )
        .input(rng, &[1, 2, 8, 9], F32)
        .output(&[1, 2, 6, 7], F32),
    );
    for (dt, [n, c, h, w], [oh, ow]) in [
        (BF16, [2, 3, 7, 5], [3, 2]),
        (F32, [2, 3, 9, 7], [4, 3]),
        (F16, [2, 24, 40, 33], [1, 1]),
        (F32, [1, 5, 20, 17], [2, 3]),
    ] {
        v.push(
            Case::new(
                format!("adaptive avgpool {dt} {h}x{w} -> {oh}x{ow}"),
                Kernel::AdaptiveAvgPool2d,
            )
            .input(rng, &[n, c, h, w], dt)
            .output(&[n, c, oh, ow], dt),
        );
    }
    // Channels-last inputs and outputs (the `gpu` target): every kernel walks them with the
    // channel fastest; padded pitches in and out.
    for (kind, what, dt) in [
        (PoolKind::Max, "max", BF16),
        (PoolKind::Max, "max", F32),
        (avg(false, None), "avg without pad", F16),
    ] {
        v.push(
            Case::new(
                format!("pool {what} {dt} nhwc 2x12x9x7 k3 s2 p1"),
                pool(kind, 3, 2, 1),
            )
            .nhwc_input(rng, [2, 12, 9, 7], dt, 16)
            .nhwc_output([2, 12, 5, 4], dt, 16),
        );
    }
    // eight channels per thread on CUDA (k_max_pool3_nhwc8)
    v.push(
        Case::new(
            "pool max f16 nhwc 2x16x10x7 k3 s2 p1, pitch 24",
            pool(PoolKind::Max, 3, 2, 1),
        )
        .nhwc_input(rng, [2, 16, 10, 7], F16, 24)
        .nhwc_output([2, 16, 5, 4], F16, 16),
    );
    // global pooling of a wide channels-last batch: a thread per output on CUDA
    v.push(
        Case::new(
            "adaptive avgpool f16 nhwc 2x4096x6x6 -> 1x1",
            Kernel::AdaptiveAvgPool2d,
        )
        .nhwc_input(rng, [2, 4096, 6, 6], F16, 4096)
        .nhwc_output([2, 4096, 1, 1], F16, 4096),
    );
    for (dt, [h, w], [oh, ow]) in [(F16, [7, 7], [1, 1]), (F32, [9, 6], [2, 3])] {
        v.push(
            Case::new(
                format!("adaptive avgpool {dt} nhwc {h}x{w} -> {oh}x{ow}"),
                Kernel::AdaptiveAvgPool2d,
            )
            .nhwc_input(rng, [2, 40, h, w], dt, 40)
            .nhwc_output([2, 40, oh, ow], dt, 48),
        );
    }
    // stride-2 windows of other sizes and paddings (the CPU's even/odd split): an even
    // window without padding over an odd width, an even window with padding, a 5-tap one
    for (k, p, [h, w], [oh, ow]) in [
        (2, 0, [7, 9], [3, 4]),
        (4, 1, [9, 12], [4, 6]),
        (5, 2, [10, 11], [5, 6]),
    ] {
        v.push(
            Case::new(
                format!("maxpool f32 k{k} s2 p{p} over NaN and infinities"),
                pool(PoolKind::Max, k, 2, p),
            )
            .special_input(rng, &[1, 3, h, w], F32, 5)
            .output(&[1, 3, oh, ow], F32),
        );
    }
    v
}
