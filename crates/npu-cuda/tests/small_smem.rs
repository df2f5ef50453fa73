//! The backend on GPUs with less shared memory a block than the one it was tuned on: with
//! `NPU_CUDA_SMEM_OPTIN` lowering what the device reports, it still starts (the large kernels
//! opt into what is there, not a fixed 160 KB), plans decode attention on the kernel whose
//! tiles fit, and gives the CPU backend's results. 99 KB a block is consumer Ampere and Ada,
//! 64 KB Turing. Its own test binary: the limit is read when the device opens, from the
//! process environment. Skips where there is no device.

// the RoPE / cache helpers are for the fusion tests
#[allow(dead_code)]
mod common;

use common::{
    assert_near_cpu, bind, device_or_skip, inputs, io, values, HEADS, HEAD_DIM, KV_HEADS,
};
use npu_cuda::CudaBackend;
use npu_ir::DType;
use npu_program::program::{dense_strides, Kernel, Program, Slot, Step};
use npu_runtime::{Executable, HostTensor, MemoryWeights};

/// Decode attention of one query row over a `t`-slot cache with a mask, then a normalized
/// GEMV with the longest row the GEMV kernels take (its staged row and norm weight fill 48 KB).
fn program(dt: DType, t: usize, k: usize, n: usize) -> Program {
    let (h, kvh, d) = (HEADS, KV_HEADS, HEAD_DIM);
    let dense = |slot, shape: &[usize]| bind(slot, 0, shape, &dense_strides(shape), dt);
    let (q, cache) = ([1, h, 1, d], [1, kvh, t, d]);
    let step = |kernel, inputs, outputs| Step {
        kernel,
        inputs,
        outputs,
        origin: "small shared memory test".into(),
    };
    Program {
        model_name: "decode attention and a long GEMV row".into(),
        target: "gpu".into(),
        compute_dtype: dt,
        inputs: vec![
            io("q", &q, dt),
            io("k_cache", &cache, dt),
            io("v_cache", &cache, dt),
            io("mask", &[1, 1, 1, t], dt),
            io("x", &[1, 1, k], dt),
            io("w", &[1, n, k], dt),
            io("nw", &[k], dt),
        ],
        outputs: vec![io("attn", &q, dt), io("y", &[1, 1, n], dt)],
        sources: Vec::new(),
        weights: Vec::new(),
        constants: Vec::new(),
        arena_bytes: 0,
        steps: vec![
            step(
                Kernel::Attention {
                    scale: 1.0 / (d as f32).sqrt(),
                    causal: false,
                },
                vec![
                    dense(Slot::Input(0), &q),
                    dense(Slot::Input(1), &cache),
                    dense(Slot::Input(2), &cache),
                    bind(Slot::Input(3), 0, &[1, h, 1, t], &[t, 0, t, 1], dt),
                ],
                vec![dense(Slot::Output(0), &q)],
            ),
            step(
                Kernel::Gemm {
                    alpha: 1.0,
                    beta: 1.0,
                    act: None,
                    residual: false,
                    norm: Some(1e-6),
                },
                vec![
                    dense(Slot::Input(4), &[1, 1, k]),
                    // weights stored [N, K], read transposed
                    bind(Slot::Input(5), 0, &[1, k, n], &[n * k, 1, k], dt),
                    dense(Slot::Input(6), &[k]),
                ],
                vec![dense(Slot::Output(1), &[1, 1, n])],
            ),
        ],
    }
}

/// The device opened with at most `optin` bytes of shared memory a block, or None after the
/// SKIP line.
fn open_limited(optin: usize, what: &str) -> Option<CudaBackend> {
    std::env::set_var("NPU_CUDA_SMEM_OPTIN", optin.to_string());
    let gpu = device_or_skip(what);
    std::env::remove_var("NPU_CUDA_SMEM_OPTIN");
    gpu
}

/// The program's library kernels on `gpu`, after checking its outputs against the CPU's.
fn kernels_near_cpu(gpu: &CudaBackend, what: &str) -> Vec<&'static str> {
    let (t, k, n) = (1000, 12288, 96);
    let p = program(DType::BF16, t, k, n);
    let mask: Vec<f32> = (0..t)
        .map(|i| if i % 7 == 3 { -65504.0 } else { 0.0 })
        .collect();
    let ins = inputs(
        &p,
        [
            ("q", values(HEADS * HEAD_DIM, 1, 2.0)),
            ("k_cache", values(KV_HEADS * t * HEAD_DIM, 2, 2.0)),
            ("v_cache", values(KV_HEADS * t * HEAD_DIM, 3, 2.0)),
            ("mask", mask),
            ("x", values(k, 4, 2.0)),
            ("w", values(n * k, 5, 0.1)),
            ("nw", values(k, 6, 2.0)),
        ],
    );
    let refs: Vec<(&str, &HostTensor)> = ins.iter().map(|(n, t)| (*n, t)).collect();
    let mut x = gpu
        .prepare_cuda(&p, &MemoryWeights::default())
        .unwrap_or_else(|e| panic!("{what}: prepare: {e}"));
    x.run_all(&refs).expect("run");
    let out = x.run_all(&refs).expect("run");
    let got: Vec<Vec<f32>> = out.iter().map(|(_, t)| t.to_f32_vec()).collect();
    assert_near_cpu(what, &p, &ins, &got);
    x.library_kernels()
}

/// One decode attention step with head dim `d` in f32, eight query heads on one KV head: the
/// generic `k_attn` with a warp a head, whose tiles grow with d (74,880 bytes at 256).
fn wide_head_attention(d: usize) -> Program {
    let dt = DType::F32;
    let (q, cache) = ([1, 8, 1, d], [1, 1, 64, d]);
    let dense = |slot, shape: &[usize]| bind(slot, 0, shape, &dense_strides(shape), dt);
    Program {
        model_name: format!("attention with head dim {d}"),
        target: "gpu".into(),
        compute_dtype: dt,
        inputs: vec![io("q", &q, dt), io("k", &cache, dt), io("v", &cache, dt)],
        outputs: vec![io("o", &q, dt)],
        sources: Vec::new(),
        weights: Vec::new(),
        constants: Vec::new(),
        arena_bytes: 0,
        steps: vec![Step {
            kernel: Kernel::Attention {
                scale: 0.1,
                causal: false,
            },
            inputs: vec![
                dense(Slot::Input(0), &q),
                dense(Slot::Input(1), &cache),
                dense(Slot::Input(2), &cache),
            ],
            outputs: vec![dense(Slot::Output(0), &q)],
            origin: "wide head".into(),
        }],
    }
}

#[test]
fn less_shared_memory_a_block_plans_kernels_that_fit_and_agrees_with_the_cpu() {
    let ada = "99 KB a block (consumer Ampere / Ada)";
    let Some(gpu) = open_limited(99 * 1024, ada) else {
        return;
    };
    let kernels = kernels_near_cpu(&gpu, ada);
    assert!(
        kernels.iter().any(|k| k.starts_with("k_attn_dec_mma")),
        "{ada}: the tensor-core decode attention fits (69,760 bytes) but {kernels:?}"
    );
    let turing = "64 KB a block (Turing)";
    let gpu = open_limited(64 * 1024, turing).expect("the device opened before");
    let kernels = kernels_near_cpu(&gpu, turing);
    assert!(
        !kernels.iter().any(|k| k.starts_with("k_attn_dec_mma"))
            && kernels.iter().any(|k| k.starts_with("k_attn_dec")),
        "{turing}: decode attention falls back to k_attn_dec, but {kernels:?}"
    );
    assert!(
        kernels.iter().any(|k| k.starts_with("k_gemv16")),
        "{turing}: the 48 KB GEMV still fits, but {kernels:?}"
    );
    // a launch past the limit with no other kernel for it: preparing fails and names the step
    let err = gpu
        .prepare_cuda(&wide_head_attention(256), &MemoryWeights::default())
        .err()
        .expect("k_attn at head dim 256 does not fit 64 KB")
        .to_string();
    assert!(
        err.contains("wide head") && err.contains("74880 bytes of shared memory"),
        "{turing}: {err}"
    );
}
