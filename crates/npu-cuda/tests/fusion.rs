//! Planning across steps gives what the steps give apart: a residual GEMM and the normalized
//! GEMM that reads its output in one launch (`k_epilogue_rms`), bit for bit against the switch
//! that turns the fusion off; attention layers sharing a mask's tile flags, against the CPU
//! backend. Its own test binary: the switch is an environment variable, read at prepare time,
//! so no other test may prepare concurrently. Skips where there is no device.

mod common;

use common::{assert_near_cpu, bind, device_or_skip, inputs, io, run, values};
use npu_ir::DType;
use npu_program::program::{dense_strides, Binding, Kernel, Program, Slot, Step};
use npu_runtime::{Backend, HostTensor, MemoryWeights};

/// h = round(x @ w0^T) + r, y = rms_norm(h) @ w1^T, as a prefill layer's down projection and
/// the next layer's QKV projection (weights stored [N, K], read transposed), in `dt`.
fn pair_program(dt: DType, m: usize, k0: usize, n0: usize, n1: usize) -> Program {
    let dense = |slot, shape: &[usize]| bind(slot, 0, shape, &dense_strides(shape), dt);
    let t = |slot, [n, k]: [usize; 2]| bind(slot, 0, &[k, n], &[1, k], dt);
    let io = |name, shape: &[usize]| io(name, shape, dt);
    let h = dense(Slot::Arena, &[m, n0]);
    let gemm = |residual, norm| Kernel::Gemm {
        alpha: 1.0,
        beta: 1.0,
        act: None,
        residual,
        norm,
    };
    let step = |kernel, inputs, outputs| Step {
        kernel,
        inputs,
        outputs,
        origin: "fusion test".into(),
    };
    Program {
        model_name: "epilogue + rms_norm".into(),
        target: "gpu".into(),
        compute_dtype: dt,
        inputs: vec![
            io("x", &[m, k0]),
            io("w0", &[n0, k0]),
            io("r", &[m, n0]),
            io("nw", &[n0]),
            io("w1", &[n1, n0]),
        ],
        outputs: vec![io("h", &[m, n0]), io("y", &[m, n1])],
        sources: Vec::new(),
        weights: Vec::new(),
        constants: Vec::new(),
        arena_bytes: (m * n0 * 2) as u64,
        steps: vec![
            step(
                gemm(true, None),
                vec![
                    dense(Slot::Input(0), &[m, k0]),
                    t(Slot::Input(1), [n0, k0]),
                    dense(Slot::Input(2), &[m, n0]),
                ],
                vec![h.clone()],
            ),
            step(
                gemm(false, Some(1e-6)),
                vec![
                    h.clone(),
                    t(Slot::Input(4), [n1, n0]),
                    dense(Slot::Input(3), &[n0]),
                ],
                vec![dense(Slot::Output(1), &[m, n1])],
            ),
            step(
                Kernel::Copy,
                vec![h],
                vec![dense(Slot::Output(0), &[m, n0])],
            ),
        ],
    }
}

#[test]
fn residual_epilogue_and_rms_norm_fuse_bit_for_bit() {
    let Some(gpu) = device_or_skip("residual_epilogue_and_rms_norm_fuse_bit_for_bit") else {
        return;
    };
    // cuBLASLt's first heuristic algorithm for both prepares (tuning times candidates, and
    // two timings may pick different ones)
    std::env::set_var("NPU_CUDA_LT_TUNE", "0");
    // bf16 and f16: each takes its own instance of k_epilogue_rms
    let shapes = [(128, 512, 1536, 640), (37, 256, 264, 96)];
    for (dt, (m, k0, n0, n1)) in [DType::BF16, DType::F16]
        .into_iter()
        .flat_map(|dt| shapes.map(|s| (dt, s)))
    {
        let p = pair_program(dt, m, k0, n0, n1);
        let ins = inputs(
            &p,
            [
                ("x", values(m * k0, 1, 2.0)),
                ("w0", values(n0 * k0, 2, 0.2)),
                ("r", values(m * n0, 3, 4.0)),
                ("nw", values(n0, 4, 2.0)),
                ("w1", values(n1 * n0, 5, 0.2)),
            ],
        );
        std::env::remove_var("NPU_CUDA_FUSE_NORM");
        let fused = run(&gpu, &p, &ins);
        std::env::set_var("NPU_CUDA_FUSE_NORM", "0");
        let apart = run(&gpu, &p, &ins);
        std::env::remove_var("NPU_CUDA_FUSE_NORM");
        for (o, (f, a)) in fused.iter().zip(&apart).enumerate() {
            let diff = f
                .iter()
                .zip(a)
                .filter(|(x, y)| x.to_bits() != y.to_bits())
                .count();
            assert_eq!(
                diff, 0,
                "{dt} {m}x{k0}x{n0}x{n1}: output {o} differs in {diff} elements"
            );
        }
        // and both agree with the CPU backend
        assert_near_cpu(&format!("{dt} {m}x{k0}x{n0}x{n1}"), &p, &ins, &fused);
    }
}

/// Four prefill attention layers over one arena mask: the first copies mask `a` there, the
/// third overwrites it with mask `b` (other live key tiles), so the tile flags marked at the
/// first layer serve the second, must be marked again at the third, and serve the fourth.
fn shared_mask_program(s: usize, t: usize, d: usize) -> Program {
    let dt = DType::BF16;
    let dense = |slot, shape: &[usize]| bind(slot, 0, shape, &dense_strides(shape), dt);
    let io = |name: &str, shape: &[usize]| io(name, shape, dt);
    let (q, kv, m, o) = ([1, 2, s, d], [1, 1, t, d], [1, 1, s, t], [1, 2, s, d]);
    let attention = |out| Step {
        kernel: Kernel::Attention {
            scale: 0.125,
            causal: false,
        },
        inputs: vec![
            dense(Slot::Input(0), &q),
            dense(Slot::Input(1), &kv),
            dense(Slot::Input(2), &kv),
            // the one mask row broadcast over both heads
            bind(Slot::Arena, 0, &[1, 2, s, t], &[s * t, 0, t, 1], dt),
        ],
        outputs: vec![dense(Slot::Output(out), &o)],
        origin: "fusion test".into(),
    };
    let copy = |from| Step {
        kernel: Kernel::Copy,
        inputs: vec![dense(Slot::Input(from), &m)],
        outputs: vec![dense(Slot::Arena, &m)],
        origin: "fusion test".into(),
    };
    Program {
        model_name: "attention layers sharing a mask".into(),
        target: "gpu".into(),
        compute_dtype: dt,
        inputs: vec![
            io("q", &q),
            io("k", &kv),
            io("v", &kv),
            io("mask_a", &m),
            io("mask_b", &m),
        ],
        outputs: (0..4).map(|i| io(&format!("o{i}"), &o)).collect(),
        sources: Vec::new(),
        weights: Vec::new(),
        constants: Vec::new(),
        arena_bytes: (s * t * 2) as u64,
        steps: vec![
            copy(3),
            attention(0),
            attention(1),
            copy(4),
            attention(2),
            attention(3),
        ],
    }
}

#[test]
fn attention_layers_share_tile_flags_until_the_mask_changes() {
    let Some(gpu) = device_or_skip("attention_layers_share_tile_flags_until_the_mask_changes")
    else {
        return;
    };
    let (s, t, d) = (32, 192, 64);
    let p = shared_mask_program(s, t, d);
    // mask a attends the first 64-key tile only, mask b the second only
    let mask = |live: std::ops::Range<usize>| -> Vec<f32> {
        (0..s * t)
            .map(|i| if live.contains(&(i % t)) { 0.0 } else { -1e9 })
            .collect()
    };
    let ins = inputs(
        &p,
        [
            ("q", values(2 * s * d, 11, 2.0)),
            ("k", values(t * d, 12, 2.0)),
            ("v", values(t * d, 13, 2.0)),
            ("mask_a", mask(0..64)),
            ("mask_b", mask(64..128)),
        ],
    );
    let g = run(&gpu, &p, &ins);
    assert_near_cpu("attention layers", &p, &ins, &g);
    // the two masks give different layers
    assert_ne!(g[1], g[2]);
}

/// A layer's q/k/v GEMV (normalized, with bias; weight stored [N, K]) into an arena row, then
/// `rope(q)`, `rope(k)` and both caches' `index_copy` at `pos` reading that row (the five steps
/// `k_gemv16_rope` runs as one launch), the caches copied into the arena first and everything
/// copied out: `heads` query and `kv` key/value heads of `hd` dims, `t` cache slots, in `dt`.
fn qkv_rope_program(dt: DType, k: usize, heads: usize, kv: usize, hd: usize, t: usize) -> Program {
    let n = (heads + 2 * kv) * hd;
    let (q, kvs, cache) = ([1, heads, 1, hd], [1, kv, 1, hd], [1, kv, t, hd]);
    let dense = |slot, off: usize, shape: &[usize]| {
        bind(slot, off as u64, shape, &dense_strides(shape), dt)
    };
    let bytes = |shape: &[usize]| shape.iter().product::<usize>() * dt.size_bytes();
    // arena: the key cache, the value cache, the q/k/v row, rope(q), rope(k)
    let (kc, vc, row) = (0, bytes(&cache), 2 * bytes(&cache));
    let (qo, ko) = (
        row + n * dt.size_bytes(),
        row + n * dt.size_bytes() + bytes(&q),
    );
    let arena = ko + bytes(&kvs);
    let step = |kernel, inputs: Vec<Binding>, outputs: Vec<Binding>| Step {
        kernel,
        inputs,
        outputs,
        origin: "fusion test".into(),
    };
    let copy = |from: Binding, to: Binding| step(Kernel::Copy, vec![from], vec![to]);
    let pos = bind(Slot::Input(6), 0, &[1], &[1], DType::I64);
    let tables = |x: &[usize]| {
        let t = |slot| bind(slot, 0, x, &[hd, 0, hd, 1], dt);
        [t(Slot::Input(4)), t(Slot::Input(5))]
    };
    let ([qcos, qsin], [kcos, ksin]) = (tables(&q), tables(&kvs));
    let (k_col, v_col) = (
        (heads * hd) * dt.size_bytes(),
        (heads + kv) * hd * dt.size_bytes(),
    );
    let index_copy = Kernel::IndexCopy { axis: 2 };
    Program {
        model_name: "qkv gemv + rope + cache writes".into(),
        target: "gpu".into(),
        compute_dtype: dt,
        inputs: vec![
            io("x", &[1, k], dt),
            io("w", &[n, k], dt),
            io("bias", &[1, n], dt),
            io("nw", &[k], dt),
            io("cos", &[1, 1, 1, hd], dt),
            io("sin", &[1, 1, 1, hd], dt),
            io("pos", &[1], DType::I64),
            io("k_cache", &cache, dt),
            io("v_cache", &cache, dt),
        ],
        outputs: vec![
            io("qkv", &[1, n], dt),
            io("q_rot", &q, dt),
            io("k_cache_out", &cache, dt),
            io("v_cache_out", &cache, dt),
        ],
        sources: Vec::new(),
        weights: Vec::new(),
        constants: Vec::new(),
        arena_bytes: arena as u64,
        steps: vec![
            copy(
                dense(Slot::Input(7), 0, &cache),
                dense(Slot::Arena, kc, &cache),
            ),
            copy(
                dense(Slot::Input(8), 0, &cache),
                dense(Slot::Arena, vc, &cache),
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
                    dense(Slot::Input(0), 0, &[1, k]),
                    bind(Slot::Input(1), 0, &[k, n], &[1, k], dt),
                    dense(Slot::Input(2), 0, &[1, n]),
                    dense(Slot::Input(3), 0, &[k]),
                ],
                vec![dense(Slot::Arena, row, &[1, n])],
            ),
            step(
                Kernel::Rope,
                vec![dense(Slot::Arena, row, &q), qcos, qsin],
                vec![dense(Slot::Arena, qo, &q)],
            ),
            step(
                Kernel::Rope,
                vec![dense(Slot::Arena, row + k_col, &kvs), kcos, ksin],
                vec![dense(Slot::Arena, ko, &kvs)],
            ),
            step(
                index_copy.clone(),
                vec![pos.clone(), dense(Slot::Arena, ko, &kvs)],
                vec![dense(Slot::Arena, kc, &cache)],
            ),
            step(
                index_copy,
                vec![pos, dense(Slot::Arena, row + v_col, &kvs)],
                vec![dense(Slot::Arena, vc, &cache)],
            ),
            copy(
                dense(Slot::Arena, row, &[1, n]),
                dense(Slot::Output(0), 0, &[1, n]),
            ),
            copy(dense(Slot::Arena, qo, &q), dense(Slot::Output(1), 0, &q)),
            copy(
                dense(Slot::Arena, kc, &cache),
                dense(Slot::Output(2), 0, &cache),
            ),
            copy(
                dense(Slot::Arena, vc, &cache),
                dense(Slot::Output(3), 0, &cache),
            ),
        ],
    }
}

#[test]
fn qkv_gemv_rope_and_cache_writes_fuse_bit_for_bit() {
    let gpu = device_or_skip("qkv_gemv_rope_and_cache_writes_fuse_bit_for_bit");
    // Qwen2.5-1.5B's layer, and an odd one: three units a head, one partial group of values
    let shapes = [(1536, 12, 2, 128, 64, 37), (264, 3, 1, 24, 16, 15)];
    for (dt, (k, heads, kv, hd, t, pos)) in [DType::BF16, DType::F16]
        .into_iter()
        .flat_map(|dt| shapes.map(|s| (dt, s)))
    {
        let what = format!("{dt} k{k} h{heads} kv{kv} d{hd}");
        let p = qkv_rope_program(dt, k, heads, kv, hd, t);
        // the five steps after the cache copies are one group
        let g = npu_program::groups::gemm_rope_cache(&p.steps[2..]).expect("a group");
        assert_eq!(g.len(), 5, "{what}");
        let Some(gpu) = &gpu else {
            continue;
        };
        let n = (heads + 2 * kv) * hd;
        let angle: Vec<f32> = (0..hd)
            .map(|i| pos as f32 / 10f32.powf((i % (hd / 2)) as f32 / 32.0))
            .collect();
        let cache = kv * t * hd;
        let ins = inputs(
            &p,
            [
                ("x", values(k, 1, 2.0)),
                ("w", values(n * k, 2, 0.2)),
                ("bias", values(n, 3, 1.0)),
                ("nw", values(k, 4, 2.0)),
                ("cos", angle.iter().map(|a| a.cos()).collect()),
                ("sin", angle.iter().map(|a| a.sin()).collect()),
                ("pos", vec![pos as f32]),
                ("k_cache", values(cache, 5, 4.0)),
                ("v_cache", values(cache, 6, 4.0)),
            ],
        );
        std::env::remove_var("NPU_CUDA_FUSE_ROPE");
        let fused = run(gpu, &p, &ins);
        std::env::set_var("NPU_CUDA_FUSE_ROPE", "0");
        let apart = run(gpu, &p, &ins);
        std::env::remove_var("NPU_CUDA_FUSE_ROPE");
        for (o, (f, a)) in fused.iter().zip(&apart).enumerate() {
            let diff = f
                .iter()
                .zip(a)
                .filter(|(x, y)| x.to_bits() != y.to_bits())
                .count();
            assert_eq!(diff, 0, "{what}: output {o} differs in {diff} elements");
        }
        // the cache row at pos was written (the caches came in with other values)
        let kin = ins[7].1.to_f32_vec();
        assert_ne!(fused[2][pos * hd..][..hd], kin[pos * hd..][..hd], "{what}");
        assert_near_cpu(&what, &p, &ins, &fused);
        // a position past the cache: both report one of the group's cache writes (the
        // program's steps 5 and 6; the first to write the error word wins, in either launch)
        let mut bad = ins.clone();
        bad[6].1 = HostTensor::from_f32_as(DType::I64, vec![1], &[t as f32]);
        let refs: Vec<(&str, &HostTensor)> = bad.iter().map(|(n, t)| (*n, t)).collect();
        for fuse in ["1", "0"] {
            std::env::set_var("NPU_CUDA_FUSE_ROPE", fuse);
            let mut x = gpu.prepare(&p, &MemoryWeights::default()).expect("prepare");
            std::env::remove_var("NPU_CUDA_FUSE_ROPE");
            let e = x
                .run_all(&refs)
                .expect_err("an index past the cache")
                .to_string();
            let cache_write = e.starts_with("step 5 ") || e.starts_with("step 6 ");
            assert!(
                cache_write && e.contains("out of range"),
                "{what}, fuse {fuse}: {e}"
            );
        }
    }
}
