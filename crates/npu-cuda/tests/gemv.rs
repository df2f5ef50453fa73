//! One-row GEMMs over 16-bit weights (a decode step's projections): `k_gemv_bulk`, which
//! streams the weight through shared memory by the copy engine on compute capability 9.0 and
//! later, against the CPU backend and against `k_gemv16` (`NPU_CUDA_GEMV_BULK=0`, read when
//! a backend starts) element by element. Shapes cover a warp's pieces in one row (K % 256 ==
//! 0) or not, more chunks than stages, batches, bias, residual, RMSNorm prologue and an
//! activation. Its own test binary: the switch is an environment variable. Skips where there
//! is no device.

mod common;

use common::{assert_near_cpu, bind, device_or_skip, inputs, io, values};
use npu_cuda::CudaBackend;
use npu_ir::{DType, UnaryOp};
use npu_program::program::{dense_strides, Kernel, Program, Slot, Step};
use npu_runtime::{Executable, HostTensor, MemoryWeights};

/// One GEMV case: out[b, 1, n] = act(alpha * norm?(x[b]) @ w[b]^T (+ bias or residual)).
#[derive(Clone, Copy, Debug)]
struct Case {
    dt: DType,
    batch: usize,
    k: usize,
    n: usize,
    /// 0 none, 1 bias, 2 residual (beta 0.5)
    bias: u8,
    norm: bool,
    act: Option<UnaryOp>,
}

fn program(c: Case) -> Program {
    let Case {
        dt,
        batch,
        k,
        n,
        bias,
        norm,
        act,
    } = c;
    let dense = |slot, shape: &[usize]| bind(slot, 0, shape, &dense_strides(shape), dt);
    let mut ins = vec![io("x", &[batch, 1, k], dt), io("w", &[batch, n, k], dt)];
    // weights stored [N, K] per batch, read transposed
    let mut inputs = vec![
        dense(Slot::Input(0), &[batch, 1, k]),
        bind(Slot::Input(1), 0, &[batch, k, n], &[n * k, 1, k], dt),
    ];
    if bias > 0 {
        ins.push(io("bias", &[batch, 1, n], dt));
        inputs.push(dense(Slot::Input(2), &[batch, 1, n]));
    }
    if norm {
        let i = ins.len() as u32;
        ins.push(io("nw", &[k], dt));
        inputs.push(dense(Slot::Input(i), &[k]));
    }
    Program {
        model_name: format!("gemv {c:?}"),
        target: "gpu".into(),
        compute_dtype: dt,
        inputs: ins,
        outputs: vec![io("y", &[batch, 1, n], dt)],
        sources: Vec::new(),
        weights: Vec::new(),
        constants: Vec::new(),
        arena_bytes: 0,
        steps: vec![Step {
            kernel: Kernel::Gemm {
                alpha: 0.75,
                beta: if bias == 2 { 0.5 } else { 1.0 },
                act,
                residual: bias == 2,
                norm: norm.then_some(1e-6),
            },
            inputs,
            outputs: vec![dense(Slot::Output(0), &[batch, 1, n])],
            origin: "gemv test".into(),
        }],
    }
}

fn case_inputs(c: Case, p: &Program) -> Vec<(&'static str, HostTensor)> {
    let mut v = vec![
        ("x", values(c.batch * c.k, 11, 2.0)),
        ("w", values(c.batch * c.n * c.k, 12, 0.2)),
    ];
    if c.bias > 0 {
        v.push(("bias", values(c.batch * c.n, 13, 4.0)));
    }
    if c.norm {
        v.push(("nw", values(c.k, 14, 2.0)));
    }
    v.into_iter()
        .map(|(name, vals)| inputs(p, [(name, vals)]).into_iter().next().expect("one"))
        .collect()
}

/// The outputs of the second run (a graph replay) and the library kernels planned.
fn run_cuda(
    b: &CudaBackend,
    p: &Program,
    ins: &[(&str, HostTensor)],
) -> (Vec<f32>, Vec<&'static str>) {
    let refs: Vec<(&str, &HostTensor)> = ins.iter().map(|(n, t)| (*n, t)).collect();
    let mut x = b
        .prepare_cuda(p, &MemoryWeights::default())
        .expect("prepare");
    x.run_all(&refs).expect("run");
    let out = x.run_all(&refs).expect("run");
    (out[0].1.to_f32_vec(), x.library_kernels())
}

#[test]
fn bulk_gemv_matches_the_cpu_and_k_gemv16() {
    let Some(bulk) = device_or_skip("bulk_gemv_matches_the_cpu_and_k_gemv16") else {
        return;
    };
    std::env::set_var("NPU_CUDA_GEMV_BULK", "0");
    let plain = CudaBackend::new().expect("a second backend");
    std::env::remove_var("NPU_CUDA_GEMV_BULK");
    // compute capability 9.0 or later ("sm_90", "sm_100", ...)
    let d = bulk.describe();
    let hopper = d.contains("(sm_9") || d.contains("(sm_1");
    let c = |dt, batch, k, n, bias, norm, act| Case {
        dt,
        batch,
        k,
        n,
        bias,
        norm,
        act,
    };
    let cases = [
        // Qwen2.5-1.5B's q/k/v (bias), down (residual) and gate/up (RMSNorm prologue) shapes
        c(DType::BF16, 1, 1536, 2048, 1, false, None),
        c(DType::F16, 1, 8960, 1536, 2, false, None),
        c(DType::BF16, 1, 1536, 17920, 0, true, None),
        // more rows a block than 4 stages hold; K % 256 != 0 (per-thread sums)
        c(DType::BF16, 1, 1032, 20000, 1, false, Some(UnaryOp::Silu)),
        c(DType::F16, 1, 200, 37, 0, true, Some(UnaryOp::Relu)),
        // batched weights
        c(DType::BF16, 3, 512, 300, 2, false, None),
    ];
    for case in cases {
        let p = program(case);
        let ins = case_inputs(case, &p);
        let (got, kernels) = run_cuda(&bulk, &p, &ins);
        let (want, plain_kernels) = run_cuda(&plain, &p, &ins);
        assert!(
            plain_kernels.contains(&"k_gemv16") && !plain_kernels.contains(&"k_gemv_bulk"),
            "{case:?}: the switch off planned {plain_kernels:?}"
        );
        if hopper {
            assert!(
                kernels.contains(&"k_gemv_bulk"),
                "{case:?}: planned {kernels:?}"
            );
        }
        assert_near_cpu(&format!("{case:?}"), &p, &ins, &[got.clone()]);
        // Both sum in f32 in other orders: a 16-bit rounding (of the product, before a
        // residual is added, or of the output) may land one step apart, a step of a value
        // no larger than the outputs' largest (2^-7 relative for bf16, 2^-10 for f16).
        let ulp = if case.dt == DType::BF16 {
            1.0 / 128.0
        } else {
            1.0 / 1024.0
        };
        let scale = want.iter().fold(0f32, |s, v| s.max(v.abs()));
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                (g - w).abs() <= ulp * scale,
                "{case:?}: element {i} is {g}, k_gemv16 gives {w}"
            );
        }
    }
}
