//! One-row 16-bit GEMMs through bulk copies (`k_gemv16_bulk`, `NPU_CUDA_GEMV_BULK=1`) give
//! `k_gemv16`'s results bit for bit: every lane sums its elements in the same order. Decode's
//! shapes (Qwen2.5-1.5B's q/k/v, o, down) and odd ones, with a bias and with the RMSNorm
//! prologue, bf16 and f16; both agree with the CPU backend. Its own test binary: the switch is
//! an environment variable read when the device opens. Skips where there is no device or it is
//! older than sm_90 (the bulk copies need Hopper).

// Each test binary uses a part of the shared helpers.
#[allow(dead_code)]
mod common;

use common::{assert_near_cpu, bind, device_or_skip, inputs, io, run, values};
use npu_ir::DType;
use npu_program::program::{dense_strides, Kernel, Program, Slot, Step};

/// y = [rms_norm](x) @ w^T (+ bias): x [1, k], w stored [n, k] and read transposed.
fn gemv_program(dt: DType, k: usize, n: usize, bias: bool, norm: bool) -> Program {
    let dense = |slot, shape: &[usize]| bind(slot, 0, shape, &dense_strides(shape), dt);
    let mut ins = vec![io("x", &[1, k], dt), io("w", &[n, k], dt)];
    let mut operands = vec![
        dense(Slot::Input(0), &[1, k]),
        bind(Slot::Input(1), 0, &[k, n], &[1, k], dt),
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
        sources: Vec::new(),
        weights: Vec::new(),
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
    std::env::set_var("NPU_CUDA_GEMV_BULK", "1");
    let bulk = device_or_skip(test).expect("the device opened a moment ago");
    std::env::remove_var("NPU_CUDA_GEMV_BULK");
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
        let p = gemv_program(dt, k, n, bias, norm);
        let mut vals = vec![("x", values(k, 1, 2.0)), ("w", values(n * k, 2, 0.2))];
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
        let want = run(&plain, &p, &ins);
        let got = run(&bulk, &p, &ins);
        let diff = got[0]
            .iter()
            .zip(&want[0])
            .filter(|(x, y)| x.to_bits() != y.to_bits())
            .count();
        assert_eq!(diff, 0, "{dt} k {k} n {n}: {diff} of {n} outputs differ");
        assert_near_cpu(&format!("{dt} k {k} n {n}"), &p, &ins, &got);
    }
}
