//! The kernels instanced per 16-bit dtype give the generic kernels' bits: a decoder layer's
//! RoPE and KV-cache writes (one launch, `k_rope_cache` for a decode step's few elements and
//! `k_rope_cache8` for a prefill's), in bf16 and f16, on a device opened with
//! `NPU_CUDA_DTYPE_KERNELS=0` against one opened without it, and both against the CPU backend.
//! Its own test binary: the switch is an environment variable, read when a device opens, so no
//! other test may open one concurrently. The CPU half runs everywhere; the comparison skips
//! where there is no device.

mod common;

use common::{
    assert_near_cpu, bind, device_or_skip, inputs, io, rope_cache_group, run, values, HEADS,
    HEAD_DIM as D, KV_HEADS,
};
use npu_ir::DType;
use npu_program::program::{Binding, Kernel, Program, Slot, Step};
use npu_runtime::CpuBackend;

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
    let d = device_or_skip("rope_and_cache_writes_match_the_generic_kernels");
    std::env::remove_var("NPU_CUDA_DTYPE_KERNELS");
    d
}

#[test]
fn rope_and_cache_writes_match_the_generic_kernels() {
    let devices = device(false).and_then(|g| device(true).map(|i| (g, i)));
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

            let Some((generic, instanced)) = &devices else {
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
    }
}
