//! One-row 16-bit GEMMs through bulk copies (`k_gemv16_bulk`, `NPU_CUDA_GEMV_BULK=1`) give
//! `k_gemv16`'s results bit for bit: every lane sums its elements in the same order. Decode's
//! shapes (Qwen2.5-1.5B's q/k/v, o, down) and odd ones, with a bias and with the RMSNorm
//! prologue, bf16 and f16; both agree with the CPU backend. Its own test binary: the switch is
//! an environment variable read when the device opens. Skips where there is no device or it is
//! older than sm_90 (the bulk copies need Hopper).

// Each test binary uses a part of the shared helpers.
#[allow(dead_code)]
mod common;

use common::{bind, device_or_skip, inputs, io, values};
use npu_ir::DType;
use npu_program::program::{
    dense_strides, Kernel, Program, Recipe, Slot, SourceTensor, Step, WeightSlot,
};
use npu_runtime::{Backend, CpuBackend, HostTensor, MemoryWeights};

/// y = [rms_norm](x) @ w^T (+ bias): x [1, k], the weight w stored [n, k] and read transposed.
fn gemv_program(dt: DType, k: usize, n: usize, bias: bool, norm: bool) -> Program {
    let dense = |slot, shape: &[usize]| bind(slot, 0, shape, &dense_strides(shape), dt);
    let mut ins = vec![io("x", &[1, k], dt)];
    let mut operands = vec![
        dense(Slot::Input(0), &[1, k]),
        bind(Slot::Weight(0), 0, &[k, n], &[1, k], dt),
    ];
    if bias {
        ins.push(io("bias", &[n], dt));
        operands.push(dense(Slot::Input(ins.len() as u32 - 1), &[n]));
    }
    if norm {
        ins.push(io("nw", &[k], dt));
        operands.push(dense(Slot::Input(ins.len() as u32 - 1), &[k]));
    }
    Program {
        model_name: "gemv".into(),
        target: "gpu".into(),
        compute_dtype: dt,
        inputs: ins,
        outputs: vec![io("y", &[1, n], dt)],
        sources: vec![SourceTensor {
            key: "w".into(),
            shape: vec![n, k],
            dtype: DType::F32,
        }],
        weights: vec![WeightSlot {
            name: "w".into(),
            shape: vec![n, k],
            dtype: dt,
            recipe: Recipe::Load { source: 0 },
        }],
        constants: Vec::new(),
        arena_bytes: 0,
        steps: vec![Step {
            kernel: Kernel::Gemm {
                alpha: 1.0,
                beta: 1.0,
                act: None,
                residual: false,
                norm: norm.then_some(1e-6),
            },
            inputs: operands,
            outputs: vec![dense(Slot::Output(0), &[1, n])],
            origin: "gemv bulk test".into(),
        }],
    }
}

/// The outputs of `p`'s second run (the first is the warm-up; the second replays the graph).
fn run(b: &dyn Backend, p: &Program, w: &MemoryWeights, ins: &[(&str, HostTensor)]) -> Vec<f32> {
    let refs: Vec<(&str, &HostTensor)> = ins.iter().map(|(n, t)| (*n, t)).collect();
    let mut x = b.prepare(p, w).expect("prepare");
    x.run_all(&refs).expect("run");
    let out = x.run_all(&refs).expect("run");
    out[0].1.to_f32_vec()
}

#[test]
fn bulk_copies_give_the_register_gemv_bit_for_bit() {
    let test = "gemv_bulk bulk_copies_give_the_register_gemv_bit_for_bit";
    std::env::remove_var("NPU_CUDA_GEMV_BULK");
    let Some(plain) = device_or_skip(test) else {
        return;
    };
    if !plain.describe().contains("sm_9") && !plain.describe().contains("sm_1") {
        println!(
            "SKIP: {test}: bulk copies need sm_90 ({})",
            plain.describe()
        );
        return;
    }
    // 1: the ring filled after the programmatic wait; 2: a weight's first tiles before it
    let bulk: Vec<_> = ["1", "2"]
        .map(|mode| {
            std::env::set_var("NPU_CUDA_GEMV_BULK", mode);
            let b = device_or_skip(test).expect("the device opened a moment ago");
            std::env::remove_var("NPU_CUDA_GEMV_BULK");
            (mode, b)
        })
        .into();
    let cpu = CpuBackend::new();
    // (k, n, bias, norm): q/k/v with its bias, o, down (K = 8960: nine slices, the last
    // shorter), the norm prologue, an odd row count and a K below one slice
    let shapes = [
        (1536, 2048, true, false),
        (1536, 1536, false, false),
        (8960, 1536, false, false),
        (1536, 1000, false, true),
        (200, 37, true, true),
    ];
    for (dt, (k, n, bias, norm)) in [DType::BF16, DType::F16]
        .into_iter()
        .flat_map(|dt| shapes.map(|s| (dt, s)))
    {
        let what = format!("{dt} k {k} n {n}");
        let p = gemv_program(dt, k, n, bias, norm);
        let mut w = MemoryWeights::default();
        w.0.insert(
            "w".into(),
            HostTensor::from_f32_as(DType::F32, vec![n, k], &values(n * k, 2, 0.2)),
        );
        let mut vals = vec![("x", values(k, 1, 2.0))];
        if bias {
            vals.push(("bias", values(n, 3, 1.0)));
        }
        if norm {
            vals.push(("nw", values(k, 4, 2.0)));
        }
        let ins: Vec<_> = vals
            .into_iter()
            .map(|(name, v)| inputs(&p, [(name, v)]).into_iter().next().expect("one"))
            .collect();
        let want = run(&plain, &p, &w, &ins);
        for (mode, b) in &bulk {
            let got = run(b, &p, &w, &ins);
            let diff = got
                .iter()
                .zip(&want)
                .filter(|(x, y)| x.to_bits() != y.to_bits())
                .count();
            assert_eq!(diff, 0, "{what}, mode {mode}: {diff} of {n} outputs differ");
        }
        // and they agree with the CPU backend (which sums in another order)
        let c = run(&cpu, &p, &w, &ins);
        let scale = c.iter().fold(0f32, |s, v| s.max(v.abs()));
        let worst = want
            .iter()
            .zip(&c)
            .fold(0f32, |m, (g, c)| m.max((g - c).abs()));
        assert!(
            worst <= 0.02 * scale,
            "{what}: {worst} off the CPU backend (scale {scale})"
        );
    }
}
