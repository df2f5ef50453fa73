//! The kernels instanced per 16-bit dtype give the generic kernels' bits: a decoder layer's
//! RoPE and KV-cache writes (one launch, `k_rope_cache` for a decode step's few elements and
//! `k_rope_cache8` for a prefill's) and one-row GEMMs over 16-bit weights (`k_gemv16`), in
//! bf16 and f16, on a device opened with `NPU_CUDA_DTYPE_KERNELS=0` against one opened without
//! it, and both against the CPU backend. Its own test binary, and one test: the switch is an
//! environment variable, read when a device opens, so no other test may open one
//! concurrently. The CPU half runs everywhere; the comparison skips where there is no device.

// Each test binary uses a part of the shared helpers.
#[allow(dead_code)]
mod common;

use common::{
    assert_near_cpu, bind, device_or_skip, inputs, io, rope_cache_group, run, values, HEADS,
    HEAD_DIM as D, KV_HEADS,
};
use npu_cuda::CudaBackend;
use npu_ir::{DType, UnaryOp};
use npu_program::program::{dense_strides, Binding, Kernel, Program, Slot, Step};
use npu_runtime::{Backend, CpuBackend, Executable, HostTensor, MemoryWeights};

/// Copies of the caches into the arena, `rope(q)`, `rope(k)`, the keys' and the values'
/// `index_copy` into the copies at `s` positions (the four steps the CUDA backend runs as one
/// launch), and the queries and both caches copied out; `t` cache slots, all in `dt`.
fn rope_cache_program(dt: DType, s: usize, t: usize) -> Program {
    let g = rope_cache_group(dt, s, t, "dtype instance test");
    let copy_out = |from: &Binding, slot| Step {
        kernel: Kernel::Copy,
        inputs: vec![from.clone()],
        outputs: vec![bind(slot, 0, &from.shape, &from.strides, dt)],
        origin: "dtype instance test".into(),
    };
    let mut steps = g.steps;
    steps.extend([
        copy_out(&g.q_rot, Slot::Output(0)),
        copy_out(&g.k_cache, Slot::Output(1)),
        copy_out(&g.v_cache, Slot::Output(2)),
    ]);
    Program {
        model_name: "rope + cache writes".into(),
        target: "gpu".into(),
        compute_dtype: dt,
        outputs: vec![
            io("q_rot", &g.q_rot.shape, dt),
            io("k_cache_out", &g.k_cache.shape, dt),
            io("v_cache_out", &g.v_cache.shape, dt),
        ],
        inputs: g.inputs,
        sources: Vec::new(),
        weights: Vec::new(),
        constants: Vec::new(),
        arena_bytes: g.arena_bytes,
        steps,
    }
}

/// A CUDA device opened with the dtype instances on or off, or None where there is none.
fn device(instances: bool) -> Option<npu_cuda::CudaBackend> {
    if instances {
        std::env::remove_var("NPU_CUDA_DTYPE_KERNELS");
    } else {
        std::env::set_var("NPU_CUDA_DTYPE_KERNELS", "0");
    }
    let d = device_or_skip("dtype_instances_match_the_generic_kernels");
    std::env::remove_var("NPU_CUDA_DTYPE_KERNELS");
    d
}

#[test]
fn dtype_instances_match_the_generic_kernels() {
    let devices = device(false).and_then(|g| device(true).map(|i| (g, i)));
    rope_and_cache_writes(devices.as_ref());
    if let Some((generic, instanced)) = &devices {
        gemvs(generic, instanced);
    }
}

fn rope_and_cache_writes(devices: Option<&(CudaBackend, CudaBackend)>) {
    // a decode step (2,048 elements: the one-element kernel) and a 128-token prefill (the
    // vector kernel), each at positions inside the cache
    for dt in [DType::BF16, DType::F16] {
        for (s, t, first) in [(1, 64, 37), (128, 256, 100)] {
            let what = format!("{dt} s{s} t{t}");
            let p = rope_cache_program(dt, s, t);
            let angle: Vec<f32> = (0..s * D)
                .map(|i| (first + i / D) as f32 / 10f32.powf((i % (D / 2)) as f32 / 32.0))
                .collect();
            let (q, kv, cache) = (HEADS * s * D, KV_HEADS * s * D, KV_HEADS * t * D);
            let ins = inputs(
                &p,
                [
                    ("q", values(q, 1, 4.0)),
                    ("k", values(kv, 2, 4.0)),
                    ("v", values(kv, 3, 4.0)),
                    ("cos", angle.iter().map(|a| a.cos()).collect()),
                    ("sin", angle.iter().map(|a| a.sin()).collect()),
                    ("pos", (first..first + s).map(|i| i as f32).collect()),
                    ("k_cache", values(cache, 4, 4.0)),
                    ("v_cache", values(cache, 5, 4.0)),
                ],
            );
            // the program itself, on the CPU: the written rows hold the rotated keys and the
            // values, the others what the caches held
            let cpu = run(&CpuBackend::new(), &p, &ins);
            let slot = |h: usize, i: usize| (h * t + first + i) * D;
            let k_rot = &cpu[1][slot(1, s - 1)..slot(1, s - 1) + D];
            assert_ne!(
                k_rot,
                &ins[6].1.to_f32_vec()[slot(1, s - 1)..][..D],
                "{what}"
            );
            let v_in = ins[2].1.to_f32_vec();
            assert_eq!(&cpu[2][slot(1, 0)..][..D], &v_in[s * D..][..D], "{what}");
            assert_eq!(cpu[2][..D], ins[7].1.to_f32_vec()[..D], "{what}");

            let Some((generic, instanced)) = devices else {
                continue;
            };
            let g = run(generic, &p, &ins);
            let i = run(instanced, &p, &ins);
            for (o, (a, b)) in g.iter().zip(&i).enumerate() {
                let diff = a.iter().zip(b).filter(|(x, y)| x.to_bits() != y.to_bits());
                assert_eq!(diff.count(), 0, "{what}: output {o}");
            }
            assert_near_cpu(&what, &p, &ins, &i);
        }
        // a position past the cache: every backend refuses the run, naming the index_copy
        let p = rope_cache_program(dt, 1, 64);
        let mut ins = inputs(
            &p,
            [
                ("q", values(HEADS * D, 1, 4.0)),
                ("k", values(KV_HEADS * D, 2, 4.0)),
                ("v", values(KV_HEADS * D, 3, 4.0)),
                ("cos", vec![1.0; D]),
                ("sin", vec![0.0; D]),
                ("pos", vec![64.0]),
                ("k_cache", values(KV_HEADS * 64 * D, 4, 4.0)),
                ("v_cache", values(KV_HEADS * 64 * D, 5, 4.0)),
            ],
        );
        let refused = |b: &dyn Backend, ins: &[(&str, HostTensor)]| {
            let refs: Vec<(&str, &HostTensor)> = ins.iter().map(|(n, t)| (*n, t)).collect();
            let mut x = b.prepare(&p, &MemoryWeights::default()).expect("prepare");
            x.run_all(&refs)
                .map(|_| ())
                .expect_err("a position past the cache")
        };
        let cpu = CpuBackend::new();
        let mut backends: Vec<&dyn Backend> = vec![&cpu];
        if let Some((generic, instanced)) = devices {
            backends.extend([generic as &dyn Backend, instanced]);
        }
        for b in backends {
            let err = refused(b, &ins).to_string();
            assert!(
                err.contains("index") || err.contains("range"),
                "{dt}: {err}"
            );
        }
        // and a negative one
        ins[5].1 = HostTensor::from_f32_as(DType::I64, vec![1], &[-1.0]);
        if let Some((_, instanced)) = devices {
            refused(instanced, &ins);
        }
    }
}

/// One GEMV case: out[b, 1, n] = act(0.75 * norm?(x[b]) @ w[b]^T (+ bias or 0.5 * residual)).
#[derive(Clone, Copy, Debug)]
struct Gemv {
    dt: DType,
    batch: usize,
    k: usize,
    n: usize,
    /// 0 none, 1 bias, 2 residual
    bias: u8,
    norm: bool,
    act: Option<UnaryOp>,
}

fn gemv_program(c: Gemv) -> Program {
    let Gemv {
        dt, batch, k, n, ..
    } = c;
    let dense = |slot, shape: &[usize]| bind(slot, 0, shape, &dense_strides(shape), dt);
    let mut ios = vec![io("x", &[batch, 1, k], dt), io("w", &[batch, n, k], dt)];
    // weights stored [N, K] per batch, read transposed
    let mut ins = vec![
        dense(Slot::Input(0), &[batch, 1, k]),
        bind(Slot::Input(1), 0, &[batch, k, n], &[n * k, 1, k], dt),
    ];
    if c.bias > 0 {
        ios.push(io("bias", &[batch, 1, n], dt));
        ins.push(dense(Slot::Input(2), &[batch, 1, n]));
    }
    if c.norm {
        ins.push(dense(Slot::Input(ios.len() as u32), &[k]));
        ios.push(io("nw", &[k], dt));
    }
    Program {
        model_name: format!("gemv {c:?}"),
        target: "gpu".into(),
        compute_dtype: dt,
        inputs: ios,
        outputs: vec![io("y", &[batch, 1, n], dt)],
        sources: Vec::new(),
        weights: Vec::new(),
        constants: Vec::new(),
        arena_bytes: 0,
        steps: vec![Step {
            kernel: Kernel::Gemm {
                alpha: 0.75,
                beta: if c.bias == 2 { 0.5 } else { 1.0 },
                act: c.act,
                residual: c.bias == 2,
                norm: c.norm.then_some(1e-6),
            },
            inputs: ins,
            outputs: vec![dense(Slot::Output(0), &[batch, 1, n])],
            origin: "dtype instance test".into(),
        }],
    }
}

/// The output of the second run (a graph replay) and the library kernels it launches.
fn run_gemv(
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

fn gemvs(generic: &CudaBackend, instanced: &CudaBackend) {
    let c = |dt, batch, k, n, bias, norm, act| Gemv {
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
        c(DType::F16, 1, 1536, 17920, 0, true, None),
        // a partial last pass, more column groups than a wave of blocks, an activation
        c(DType::BF16, 1, 1032, 20000, 1, false, Some(UnaryOp::Silu)),
        c(DType::F16, 1, 200, 37, 0, true, Some(UnaryOp::Relu)),
        // batched weights
        c(DType::BF16, 3, 512, 300, 2, false, None),
        // blocks of 12 warps on a 132-SM GPU (plan/gemm.rs, gemv16_warps: rows of at least
        // 4096), the last one partial, with the RMSNorm prologue's block sums over 12 warps
        c(DType::BF16, 1, 4096, 1530, 0, true, None),
    ];
    for case in cases {
        let what = format!("{case:?}");
        let p = gemv_program(case);
        let mut vals = vec![
            ("x", values(case.batch * case.k, 11, 2.0)),
            ("w", values(case.batch * case.n * case.k, 12, 0.2)),
        ];
        if case.bias > 0 {
            vals.push(("bias", values(case.batch * case.n, 13, 4.0)));
        }
        if case.norm {
            vals.push(("nw", values(case.k, 14, 2.0)));
        }
        let ins: Vec<_> = vals
            .into_iter()
            .map(|(name, v)| inputs(&p, [(name, v)]).into_iter().next().expect("one"))
            .collect();
        let (want, kernels) = run_gemv(generic, &p, &ins);
        assert_eq!(kernels, ["k_gemv16"], "{what}");
        let (got, kernels) = run_gemv(instanced, &p, &ins);
        let instance = if case.dt == DType::BF16 {
            "k_gemv16_bf16"
        } else {
            "k_gemv16_f16"
        };
        assert_eq!(kernels, [instance], "{what}");
        let diff = got
            .iter()
            .zip(&want)
            .filter(|(g, w)| g.to_bits() != w.to_bits())
            .count();
        assert_eq!(
            diff, 0,
            "{what}: {diff} elements differ from the generic kernel's"
        );
        assert_near_cpu(&what, &p, &ins, std::slice::from_ref(&got));
    }
}
