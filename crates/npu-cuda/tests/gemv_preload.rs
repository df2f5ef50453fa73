//! A 16-bit GEMV over a weight slot copies each warp's first row bytes into shared memory
//! before its programmatic wait (the `k_gemv16p` kernels, kernels/gemm.cu `preload_gemv_row`;
//! `NPU_CUDA_GEMV_PRELOAD` sets the amount): the preloaded units are summed in the order the
//! streamed ones were, so every amount gives the bits of `k_gemv16` without the copies
//! (`NPU_CUDA_GEMV_PRELOAD=0`), and those are near the CPU's.
//! Its own test binary and one test: the switch is an environment variable read at prepare
//! time. Skips where there is no device.

// Each test binary uses a part of the shared helpers.
#[allow(dead_code)]
mod common;

use common::{bind, device_or_skip, io, loaded_weight, run, run_inputs, values, weights_of};
use npu_cuda::CudaBackend;
use npu_ir::DType;
use npu_program::program::{dense_strides, Kernel, Program, Slot, Step};
use npu_runtime::{CpuBackend, Executable, HostTensor};

/// out[1, n] = 0.75 * norm?(x) @ w^T (+ bias), w [n, k] a weight.
fn program(dt: DType, k: usize, n: usize, bias: bool, norm: bool) -> Program {
    let dense = |slot, shape: &[usize]| bind(slot, 0, shape, &dense_strides(shape), dt);
    let mut ios = vec![io("x", &[1, k], dt)];
    let mut ins = vec![
        dense(Slot::Input(0), &[1, k]),
        bind(Slot::Weight(0), 0, &[k, n], &[1, k], dt),
    ];
    if bias {
        ins.push(dense(Slot::Input(ios.len() as u32), &[1, n]));
        ios.push(io("bias", &[1, n], dt));
    }
    if norm {
        ins.push(dense(Slot::Input(ios.len() as u32), &[k]));
        ios.push(io("nw", &[k], dt));
    }
    let (sources, weights) = loaded_weight("w", &[n, k], dt);
    Program {
        model_name: format!("gemv preload {dt} {k}x{n}"),
        target: "gpu".into(),
        compute_dtype: dt,
        inputs: ios,
        outputs: vec![io("y", &[1, n], dt)],
        sources,
        weights,
        constants: Vec::new(),
        arena_bytes: 0,
        steps: vec![Step {
            kernel: Kernel::Gemm {
                alpha: 0.75,
                beta: 1.0,
                act: None,
                residual: false,
                norm: norm.then_some(1e-6),
            },
            inputs: ins,
            outputs: vec![dense(Slot::Output(0), &[1, n])],
            origin: "gemv preload test".into(),
        }],
    }
}

/// The second run's output (a graph replay) and the library kernels it launched.
fn cuda_run(
    cuda: &CudaBackend,
    p: &Program,
    ins: &[(&str, HostTensor)],
) -> (Vec<f32>, Vec<&'static str>) {
    let mut x = cuda.prepare_cuda(p, &weights_of(p, ins)).expect("prepare");
    let refs = run_inputs(p, ins);
    x.run_all(&refs).expect("run");
    let out = x.run_all(&refs).expect("run");
    (out[0].1.to_f32_vec(), x.library_kernels())
}

#[test]
fn preloaded_weight_rows_give_the_streamed_gemvs_bits() {
    let test = "gemv_preload preloaded_weight_rows_give_the_streamed_gemvs_bits";
    let Some(cuda) = device_or_skip(test) else {
        return;
    };
    // Qwen2.5-1.5B's q/k/v (bias), o, down (blocks of 12) and gate/up (norm prologue) shapes,
    // a row that is not a whole number of 512-byte rounds, and f16
    let cases = [
        (DType::BF16, 1536, 2048, true, false),
        (DType::BF16, 1536, 1536, false, false),
        (DType::BF16, 8960, 1536, false, false),
        (DType::BF16, 1536, 17920, false, true),
        (DType::BF16, 1032, 3000, true, false),
        (DType::F16, 4096, 1530, false, true),
    ];
    for (dt, k, n, bias, norm) in cases {
        let p = program(dt, k, n, bias, norm);
        // "w" goes to the program's weight slot (common::run, weights_of)
        let mut ins = vec![
            (
                "w",
                HostTensor::from_f32_as(dt, vec![n, k], &values(n * k, 12, 0.2)),
            ),
            (
                "x",
                HostTensor::from_f32_as(dt, vec![1, k], &values(k, 11, 2.0)),
            ),
        ];
        if bias {
            ins.push((
                "bias",
                HostTensor::from_f32_as(dt, vec![1, n], &values(n, 13, 4.0)),
            ));
        }
        if norm {
            ins.push((
                "nw",
                HostTensor::from_f32_as(dt, vec![k], &values(k, 14, 2.0)),
            ));
        }
        let what = format!("{dt} k {k} n {n}");
        std::env::set_var("NPU_CUDA_GEMV_PRELOAD", "0");
        let (want, kernels) = cuda_run(&cuda, &p, &ins);
        assert!(
            kernels.iter().all(|k| k.starts_with("k_gemv16_")),
            "{what}: {kernels:?}"
        );
        let cpu = run(&CpuBackend::new(), &p, &ins).remove(0);
        let scale = cpu.iter().fold(0f32, |s, v| s.max(v.abs()));
        let worst = want
            .iter()
            .zip(&cpu)
            .fold(0f32, |s, (x, y)| s.max((x - y).abs()));
        assert!(
            scale > 0.0 && worst <= 0.02 * scale,
            "{what}: off the CPU's by {worst} (largest {scale})"
        );
        // None: the planner's amount
        for spec in [
            None,
            Some("*:512"),
            Some("*:2048"),
            Some("*:65536"),
            Some("8960:16384"),
        ] {
            match spec {
                Some(s) => std::env::set_var("NPU_CUDA_GEMV_PRELOAD", s),
                None => std::env::remove_var("NPU_CUDA_GEMV_PRELOAD"),
            }
            let (got, kernels) = cuda_run(&cuda, &p, &ins);
            // every row takes the default and `*` amounts, 8960:16384 only the 8960-element
            // rows
            let preloads = spec.is_none_or(|s| s.starts_with('*') || k == 8960);
            assert_eq!(
                kernels.iter().all(|k| k.starts_with("k_gemv16p")),
                preloads,
                "{what}, {spec:?}: {kernels:?}"
            );
            let diff = got
                .iter()
                .zip(&want)
                .filter(|(g, w)| g.to_bits() != w.to_bits())
                .count();
            assert_eq!(diff, 0, "{what}, {spec:?}: {diff} elements differ");
        }
        std::env::remove_var("NPU_CUDA_GEMV_PRELOAD");
    }
}
