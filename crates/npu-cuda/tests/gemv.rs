//! One-row GEMMs over 16-bit weights (a decode step's projections): every `k_gemv16` instance
//! (`NPU_CUDA_GV_U` = 5..8 and `fit`: loads in flight per lane and pass, read at prepare time)
//! against the CPU backend and bit for bit against the default instance (U = 4). Shapes
//! cover one pass or several, a partial last pass, more column groups than resident blocks,
//! batches, bias, residual, RMSNorm prologue and an activation. Its own test binary: the switch
//! is an environment variable, so no other test may prepare concurrently. Skips where there is
//! no device.

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
fn every_gemv16_unroll_matches_the_cpu_and_the_default() {
    let Some(gpu) = device_or_skip("every_gemv16_unroll_matches_the_cpu_and_the_default") else {
        return;
    };
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
        // a partial last pass at every U, more groups than a wave of blocks
        c(DType::BF16, 1, 1032, 20000, 1, false, Some(UnaryOp::Silu)),
        c(DType::F16, 1, 200, 37, 0, true, Some(UnaryOp::Relu)),
        // batched weights
        c(DType::BF16, 3, 512, 300, 2, false, None),
    ];
    for case in cases {
        let p = program(case);
        let ins = case_inputs(case, &p);
        std::env::remove_var("NPU_CUDA_GV_U");
        let (want, kernels) = run_cuda(&gpu, &p, &ins);
        assert!(
            kernels.contains(&"k_gemv16"),
            "{case:?}: planned {kernels:?}"
        );
        assert_near_cpu(&format!("{case:?}"), &p, &ins, std::slice::from_ref(&want));
        for (u, name) in [
            ("5", "k_gemv16_u5"),
            ("6", "k_gemv16_u6"),
            ("7", "k_gemv16_u7"),
            ("8", "k_gemv16_u8"),
            ("fit", ""),
        ] {
            std::env::set_var("NPU_CUDA_GV_U", u);
            let (got, kernels) = run_cuda(&gpu, &p, &ins);
            std::env::remove_var("NPU_CUDA_GV_U");
            assert!(
                name.is_empty() || kernels.contains(&name),
                "{case:?} U={u}: planned {kernels:?}"
            );
            // Each lane walks its pieces in increasing order whatever U: bit for bit.
            let diff = got
                .iter()
                .zip(&want)
                .filter(|(g, w)| g.to_bits() != w.to_bits())
                .count();
            assert_eq!(diff, 0, "{case:?} U={u}: {diff} elements differ from U=4's");
        }
    }
}
