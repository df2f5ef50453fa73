//! Planning across steps gives what the steps give apart: a residual GEMM and the normalized
//! GEMM that reads its output in one launch (`k_epilogue_rms`), bit for bit against the switch
//! that turns the fusion off; a decode layer's q/k/v GEMV with the RoPE / cache group in its
//! epilogue (`k_gemv16_rope`), likewise; attention layers sharing a mask's tile flags, against
//! the CPU backend; decode attention reading early what the cache group leaves, and merging its
//! splits in clusters (`k_attn_dec_mma_cl`) or by `k_attn_combine`. Its own test binary: the switch is an environment variable, read at prepare time,
//! so no other test may prepare concurrently. Skips where there is no device.

mod common;

use common::{
    assert_near_cpu, bind, device_or_skip, inputs, inputs_vec, io, loaded_weight, rope_cache_group,
    rope_cache_steps, run, run_inputs, values, weights_of, HEADS, HEAD_DIM, KV_HEADS,
};
use npu_cuda::CudaBackend;
use npu_ir::DType;
use npu_program::program::{dense_strides, Binding, Kernel, Program, Slot, Step};
use npu_runtime::{Backend, HostTensor};

/// The outputs of `p` prepared with the switch `var` set to `value` (unset for None), which
/// the planner reads at prepare time; unset again after.
fn run_switched(
    gpu: &CudaBackend,
    p: &Program,
    ins: &[(&str, HostTensor)],
    var: &str,
    value: Option<&str>,
) -> Vec<Vec<f32>> {
    match value {
        Some(v) => std::env::set_var(var, v),
        None => std::env::remove_var(var),
    }
    let out = run(gpu, p, ins);
    std::env::remove_var(var);
    out
}

/// Every output of `a` bit for bit equal to `b`'s.
fn assert_same_bits(what: &str, a: &[Vec<f32>], b: &[Vec<f32>]) {
    for (o, (x, y)) in a.iter().zip(b).enumerate() {
        let diff = x
            .iter()
            .zip(y)
            .filter(|(u, v)| u.to_bits() != v.to_bits())
            .count();
        assert_eq!(diff, 0, "{what}: output {o} differs in {diff} elements");
    }
}

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
        let fused = run_switched(&gpu, &p, &ins, "NPU_CUDA_FUSE_NORM", None);
        let apart = run_switched(&gpu, &p, &ins, "NPU_CUDA_FUSE_NORM", Some("0"));
        assert_same_bits(&format!("{dt} {m}x{k0}x{n0}x{n1}"), &fused, &apart);
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

/// The RoPE / cache group (copies of the caches in the arena, `rope(q)`, `rope(k)`, both
/// `index_copy`s at `pos`) and then decode attention over the written caches with a mask
/// admitting slots 0..=pos: the attention launch reads its mask and first K/V tile before its
/// programmatic wait and the written row after it.
fn rope_attention_program(dt: DType, t: usize) -> Program {
    let g = rope_cache_group(dt, 1, t, "fusion test");
    let (h, d) = (HEADS, HEAD_DIM);
    let step = |kernel, inputs: Vec<Binding>, outputs: Vec<Binding>| Step {
        kernel,
        inputs,
        outputs,
        origin: "fusion test".into(),
    };
    let q = [1, h, 1, d];
    let mut steps = g.steps;
    steps.extend([
        step(
            Kernel::Attention {
                scale: 1.0 / (d as f32).sqrt(),
                causal: false,
            },
            vec![
                g.q_rot.clone(),
                g.k_cache.clone(),
                g.v_cache.clone(),
                bind(Slot::Input(8), 0, &[1, h, 1, t], &[t, 0, t, 1], dt),
            ],
            vec![bind(Slot::Output(0), 0, &q, &dense_strides(&q), dt)],
        ),
        step(
            Kernel::Copy,
            vec![g.k_cache.clone()],
            vec![bind(
                Slot::Output(1),
                0,
                &g.k_cache.shape,
                &g.k_cache.strides,
                dt,
            )],
        ),
    ]);
    let mut inputs = g.inputs;
    inputs.push(io("mask", &[1, 1, 1, t], dt));
    Program {
        model_name: "rope + cache writes + decode attention".into(),
        target: "gpu".into(),
        compute_dtype: dt,
        inputs,
        outputs: vec![io("attn", &q, dt), io("k_cache_out", &g.k_cache.shape, dt)],
        sources: Vec::new(),
        weights: Vec::new(),
        constants: Vec::new(),
        arena_bytes: g.arena_bytes,
        steps,
    }
}

#[test]
fn decode_attention_reads_early_what_the_cache_group_leaves() {
    let Some(gpu) = device_or_skip("decode_attention_reads_early_what_the_cache_group_leaves")
    else {
        return;
    };
    let (h, kvh, d) = (HEADS, KV_HEADS, HEAD_DIM);
    // the written row first in its tile, inside one, and the last slot; a cache of 2048 in
    // clusters of 16 splits of two tiles (the written row in a split's second tile, and the
    // last slot)
    for (dt, t, pos) in [
        (DType::BF16, 256, 100),
        (DType::BF16, 256, 0),
        (DType::F16, 256, 255),
        (DType::BF16, 2048, 1000),
        (DType::F16, 2048, 2047),
    ] {
        let what = format!("{dt} cache {t} pos {pos}");
        let p = rope_attention_program(dt, t);
        let angle: Vec<f32> = (0..d)
            .map(|i| pos as f32 / 10f32.powf((i % (d / 2)) as f32 / 32.0))
            .collect();
        let mask: Vec<f32> = (0..t)
            .map(|i| if i <= pos { 0.0 } else { -65504.0 })
            .collect();
        let ins = inputs(
            &p,
            [
                ("q", values(h * d, 1, 2.0)),
                ("k", values(kvh * d, 2, 2.0)),
                ("v", values(kvh * d, 3, 2.0)),
                ("cos", angle.iter().map(|a| a.cos()).collect()),
                ("sin", angle.iter().map(|a| a.sin()).collect()),
                ("pos", vec![pos as f32]),
                ("k_cache", values(kvh * t * d, 4, 2.0)),
                ("v_cache", values(kvh * t * d, 5, 2.0)),
                ("mask", mask),
            ],
        );
        let early = run_switched(&gpu, &p, &ins, "NPU_CUDA_ATTN_PRE", None);
        let late = run_switched(&gpu, &p, &ins, "NPU_CUDA_ATTN_PRE", Some("0"));
        assert_same_bits(&what, &early, &late);
        assert_near_cpu(&what, &p, &ins, &early);
        // the splits merged in their cluster (compute capability 9.0 and later) or by
        // k_attn_combine, never both; the combine's path near the CPU as well
        let kernels = |cluster: Option<&str>| {
            match cluster {
                Some(v) => std::env::set_var("NPU_CUDA_ATTN_CLUSTER", v),
                None => std::env::remove_var("NPU_CUDA_ATTN_CLUSTER"),
            }
            let x = gpu.prepare_cuda(&p, &weights_of(&p, &ins));
            std::env::remove_var("NPU_CUDA_ATTN_CLUSTER");
            x.expect("prepare").library_kernels()
        };
        let on = kernels(None);
        let clustered = on.contains(&"k_attn_dec_mma_cl");
        assert_ne!(clustered, on.contains(&"k_attn_combine"), "{what}: {on:?}");
        let off = kernels(Some("0"));
        assert!(
            off.contains(&"k_attn_combine") && !off.contains(&"k_attn_dec_mma_cl"),
            "{what}: {off:?}"
        );
        let combined = run_switched(&gpu, &p, &ins, "NPU_CUDA_ATTN_CLUSTER", Some("0"));
        assert_near_cpu(&what, &p, &ins, &combined);
    }
}

/// A decode layer's q/k/v projection (RMSNorm prologue, bias) into one arena row of `k`-long
/// products, then the RoPE / cache group reading that row as Qwen's decode program does (its
/// query, key and value rows as views; the caches copied into the arena first), then copies of
/// everything the two wrote: rope(q), both caches and the row itself. `after_residual`: the
/// projection's input is the arena row a residual GEMV (`h` @ `wd` + `x`, the previous
/// layer's down projection) writes just before it, as in every layer but the first.
fn qkv_rope_program(dt: DType, k: usize, t: usize, after_residual: bool) -> Program {
    let (h, kvh, d) = (HEADS, KV_HEADS, HEAD_DIM);
    let n = (h + 2 * kvh) * d;
    let esz = dt.size_bytes();
    let dense = |slot, off: usize, shape: &[usize]| {
        bind(slot, off as u64, shape, &dense_strides(shape), dt)
    };
    let (q, kv, cache) = ([1, h, 1, d], [1, kvh, 1, d], [1, kvh, t, d]);
    // arena: the q/k/v row, the key and value caches, rope(q), rope(k)
    let cache_bytes = kvh * t * d * esz;
    let (kc, vc) = (n * esz, n * esz + cache_bytes);
    let (qo, ko) = (vc + cache_bytes, vc + cache_bytes + h * d * esz);
    // `heads` rows of the q/k/v row from row `first`
    let view = |first: usize, heads: usize| {
        let off = (first * d * esz) as u64;
        bind(Slot::Arena, off, &[1, heads, 1, d], &[n, d, n, 1], dt)
    };
    // the cos and sin rows broadcast over `heads`
    let tables = |heads: usize| {
        [2, 3].map(|i| bind(Slot::Input(i), 0, &[1, heads, 1, d], &[d, 0, d, 1], dt))
    };
    let ([qcos, qsin], [kcos, ksin]) = (tables(h), tables(kvh));
    let pos = bind(Slot::Input(5), 0, &[1], &[1], DType::I64);
    let step = |kernel, inputs, outputs| Step {
        kernel,
        inputs,
        outputs,
        origin: "fusion test".into(),
    };
    let copy = |from: Binding, to: Binding| step(Kernel::Copy, vec![from], vec![to]);
    // the residual GEMV's output row after rope(k), and its inner dim
    let (xo, kd) = (ko + kvh * d * esz, 256);
    let down = step(
        Kernel::Gemm {
            alpha: 1.0,
            beta: 1.0,
            act: None,
            residual: true,
            norm: None,
        },
        vec![
            dense(Slot::Input(8), 0, &[1, kd]),
            bind(Slot::Input(9), 0, &[kd, k], &[1, kd], dt),
            dense(Slot::Input(0), 0, &[1, k]),
        ],
        vec![dense(Slot::Arena, xo, &[1, k])],
    );
    let x = if after_residual {
        dense(Slot::Arena, xo, &[1, k])
    } else {
        dense(Slot::Input(0), 0, &[1, k])
    };
    // the projection's weight a weight slot, which the GEMV may read before its wait
    let (sources, weights) = loaded_weight("w", &[n, k], dt);
    let mut ios = vec![
        io("x", &[1, k], dt),
        io("bias", &[1, n], dt),
        io("cos", &[1, 1, 1, d], dt),
        io("sin", &[1, 1, 1, d], dt),
        io("nw", &[k], dt),
        io("pos", &[1], DType::I64),
        io("k_cache", &cache, dt),
        io("v_cache", &cache, dt),
    ];
    if after_residual {
        ios.extend([io("h", &[1, kd], dt), io("wd", &[k, kd], dt)]);
    }
    Program {
        model_name: "q/k/v projection + rope + cache writes".into(),
        target: "gpu".into(),
        compute_dtype: dt,
        inputs: ios,
        outputs: vec![
            io("q_rot", &q, dt),
            io("k_cache_out", &cache, dt),
            io("v_cache_out", &cache, dt),
            io("qkv", &[1, n], dt),
        ],
        sources,
        weights,
        constants: Vec::new(),
        arena_bytes: (xo + k * esz) as u64,
        steps: vec![
            copy(
                dense(Slot::Input(6), 0, &cache),
                dense(Slot::Arena, kc, &cache),
            ),
            copy(
                dense(Slot::Input(7), 0, &cache),
                dense(Slot::Arena, vc, &cache),
            ),
        ]
        .into_iter()
        .chain(after_residual.then_some(down))
        .chain([step(
            Kernel::Gemm {
                alpha: 1.0,
                beta: 1.0,
                act: None,
                residual: false,
                norm: Some(1e-6),
            },
            vec![
                x,
                bind(Slot::Weight(0), 0, &[k, n], &[1, k], dt),
                dense(Slot::Input(1), 0, &[1, n]),
                dense(Slot::Input(4), 0, &[k]),
            ],
            vec![dense(Slot::Arena, 0, &[1, n])],
        )])
        .chain(rope_cache_steps(
            [view(0, h), view(h, kvh), view(h + kvh, kvh)],
            [qcos, qsin, kcos, ksin],
            pos,
            [dense(Slot::Arena, qo, &q), dense(Slot::Arena, ko, &kv)],
            [
                dense(Slot::Arena, kc, &cache),
                dense(Slot::Arena, vc, &cache),
            ],
            "fusion test",
        ))
        .chain([
            copy(dense(Slot::Arena, qo, &q), dense(Slot::Output(0), 0, &q)),
            copy(
                dense(Slot::Arena, kc, &cache),
                dense(Slot::Output(1), 0, &cache),
            ),
            copy(
                dense(Slot::Arena, vc, &cache),
                dense(Slot::Output(2), 0, &cache),
            ),
            copy(
                dense(Slot::Arena, 0, &[1, n]),
                dense(Slot::Output(3), 0, &[1, n]),
            ),
        ])
        .collect(),
    }
}

#[test]
fn qkv_gemv_runs_the_rope_cache_group_in_its_epilogue_bit_for_bit() {
    let Some(gpu) =
        device_or_skip("qkv_gemv_runs_the_rope_cache_group_in_its_epilogue_bit_for_bit")
    else {
        return;
    };
    let (h, kvh, d, t) = (HEADS, KV_HEADS, HEAD_DIM, 256);
    let n = (h + 2 * kvh) * d;
    // the first slot, one inside the cache and the last; the longest row the GEMV takes (its
    // staged row and norm weight fill 48 KB: past the default shared-memory limit with the
    // epilogue's static bytes)
    // and after a residual GEMV, as in every decoder layer but the first (an earlier planner
    // took the residual GEMV and the normalized one as a pair, unfused, and so never offered
    // the second to this fusion)
    for (dt, pos, k, after_residual) in [
        (DType::BF16, 100, 1536, false),
        (DType::BF16, 0, 1536, false),
        (DType::F16, 255, 1536, false),
        (DType::BF16, 7, 12288, false),
        (DType::BF16, 100, 1536, true),
        (DType::F16, 31, 1536, true),
    ] {
        let what = format!("{dt} pos {pos} k {k} after a residual GEMV {after_residual}");
        let p = qkv_rope_program(dt, k, t, after_residual);
        let angle: Vec<f32> = (0..d)
            .map(|i| pos as f32 / 10f32.powf((i % (d / 2)) as f32 / 32.0))
            .collect();
        let mut vals = vec![
            ("x", values(k, 1, 4.0)),
            ("w", values(n * k, 2, 0.2)),
            ("bias", values(n, 3, 2.0)),
            ("cos", angle.iter().map(|a| a.cos()).collect()),
            ("sin", angle.iter().map(|a| a.sin()).collect()),
            ("nw", values(k, 4, 2.0)),
            ("pos", vec![pos as f32]),
            ("k_cache", values(kvh * t * d, 5, 2.0)),
            ("v_cache", values(kvh * t * d, 6, 2.0)),
        ];
        if after_residual {
            vals.extend([("h", values(256, 7, 2.0)), ("wd", values(k * 256, 8, 0.2))]);
        }
        let ins = inputs_vec(&p, vals);
        // the planner took the fused kernel, and only without the switch
        let kernels = |fuse: Option<&str>| {
            match fuse {
                Some(v) => std::env::set_var("NPU_CUDA_GEMV_ROPE", v),
                None => std::env::remove_var("NPU_CUDA_GEMV_ROPE"),
            }
            let x = gpu.prepare_cuda(&p, &weights_of(&p, &ins));
            std::env::remove_var("NPU_CUDA_GEMV_ROPE");
            x.expect("prepare").library_kernels()
        };
        let fused_in = |ks: &[&str], name: &str| ks.iter().any(|k| k.starts_with(name));
        // k_gemv16p_rope where the weight rows' first bytes are copied before the wait (every
        // row's, whatever its length), k_gemv16_rope without the copies
        let mut fused = Vec::new();
        for (preload, name) in [("*:65536", "k_gemv16p_rope"), ("0", "k_gemv16_rope")] {
            std::env::set_var("NPU_CUDA_GEMV_PRELOAD", preload);
            let on = kernels(None);
            let off = kernels(Some("0"));
            assert!(fused_in(&on, name), "{what}: {on:?}");
            assert!(
                !fused_in(&off, "k_gemv16_rope") && !fused_in(&off, "k_gemv16p_rope"),
                "{what}: {off:?}"
            );
            fused.push(run_switched(&gpu, &p, &ins, "NPU_CUDA_GEMV_ROPE", None));
            std::env::remove_var("NPU_CUDA_GEMV_PRELOAD");
        }
        let apart = run_switched(&gpu, &p, &ins, "NPU_CUDA_GEMV_ROPE", Some("0"));
        for f in &fused {
            assert_same_bits(&what, f, &apart);
        }
        let fused = &fused[0];
        assert_near_cpu(&what, &p, &ins, fused);
    }
    // a position past the cache or before it: the fused launch refuses the run, as the
    // index_copy steps do
    let k = 1536;
    let p = qkv_rope_program(DType::BF16, k, t, false);
    for pos in [t as f32, -1.0] {
        let ins = inputs(
            &p,
            [
                ("x", values(k, 1, 4.0)),
                ("w", values(n * k, 2, 0.2)),
                ("bias", values(n, 3, 2.0)),
                ("cos", vec![1.0; d]),
                ("sin", vec![0.0; d]),
                ("nw", values(k, 4, 2.0)),
                ("pos", vec![pos]),
                ("k_cache", values(kvh * t * d, 5, 2.0)),
                ("v_cache", values(kvh * t * d, 6, 2.0)),
            ],
        );
        let refs = run_inputs(&p, &ins);
        let mut x = gpu.prepare(&p, &weights_of(&p, &ins)).expect("prepare");
        let err = x
            .run_all(&refs)
            .map(|_| ())
            .expect_err("a position outside the cache");
        let err = err.to_string();
        assert!(
            err.contains("index") || err.contains("range"),
            "pos {pos}: {err}"
        );
    }
}
