//! Helpers shared by the CUDA backend's integration tests: bindings and IO tensors of one
//! dtype, seeded values, a program's run, the device or a SKIP line, agreement with the CPU
//! backend, and a decoder layer's RoPE / KV-cache steps.

use npu_cuda::{CudaBackend, CudaError};
use npu_ir::DType;
use npu_program::program::{
    dense_strides, Binding, IoTensor, Kernel, Program, Recipe, Slot, SourceTensor, Step, WeightSlot,
};
use npu_runtime::{Backend, CpuBackend, HostTensor, MemoryWeights};

pub fn bind(slot: Slot, off: u64, shape: &[usize], strides: &[usize], dtype: DType) -> Binding {
    Binding {
        slot,
        byte_offset: off,
        shape: shape.to_vec(),
        strides: strides.to_vec(),
        dtype,
    }
}

pub fn io(name: &str, shape: &[usize], dtype: DType) -> IoTensor {
    IoTensor {
        name: name.into(),
        shape: shape.to_vec(),
        dtype,
        storage: dtype,
        donates_input: None,
    }
}

/// A program's one weight `name` of `shape`, loaded as it lies from the source of that name:
/// its `sources` and `weights` (slot `Slot::Weight(0)`). `run` loads the value of that name as
/// the weight.
pub fn loaded_weight(
    name: &str,
    shape: &[usize],
    dtype: DType,
) -> (Vec<SourceTensor>, Vec<WeightSlot>) {
    let source = SourceTensor {
        key: name.into(),
        shape: shape.to_vec(),
        dtype,
    };
    let slot = WeightSlot {
        name: name.into(),
        shape: shape.to_vec(),
        dtype,
        recipe: Recipe::Load { source: 0 },
    };
    (vec![source], vec![slot])
}

/// `n` values in [-scale / 2, scale / 2), the same for the same seed.
pub fn values(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * scale
        })
        .collect()
}

/// Whether `p` loads `name` as a weight (else it is a run input).
fn is_weight(p: &Program, name: &str) -> bool {
    p.weights.iter().any(|w| w.name == name)
}

/// The tensors of `ins` that `p` loads as weights (by name), the rest being run inputs.
pub fn weights_of(p: &Program, ins: &[(&str, HostTensor)]) -> MemoryWeights {
    MemoryWeights(
        ins.iter()
            .filter(|(n, _)| is_weight(p, n))
            .map(|(n, t)| (n.to_string(), t.clone()))
            .collect(),
    )
}

/// The tensors of `ins` that are `p`'s run inputs (not its weights).
pub fn run_inputs<'a>(
    p: &Program,
    ins: &'a [(&str, HostTensor)],
) -> Vec<(&'a str, &'a HostTensor)> {
    ins.iter()
        .filter(|(n, _)| !is_weight(p, n))
        .map(|(n, t)| (*n, t))
        .collect()
}

/// The outputs of `p`'s second run (the first is the warm-up; the second replays the graph),
/// the tensors of `ins` named as weights loaded as such.
pub fn run(b: &dyn Backend, p: &Program, ins: &[(&str, HostTensor)]) -> Vec<Vec<f32>> {
    let refs = run_inputs(p, ins);
    let mut x = b.prepare(p, &weights_of(p, ins)).expect("prepare");
    x.run_all(&refs).expect("run");
    let out = x.run_all(&refs).expect("run");
    out.iter().map(|(_, t)| t.to_f32_vec()).collect()
}

/// The CUDA backend, or None after printing the test's SKIP line where there is no device.
pub fn device_or_skip(test: &str) -> Option<CudaBackend> {
    match CudaBackend::new() {
        Ok(b) => Some(b),
        Err(CudaError::NoDevice(why)) => {
            println!("SKIP: {test}: no CUDA device ({why})");
            None
        }
        Err(e) => panic!("the CUDA backend failed to start: {e}"),
    }
}

/// `p`'s inputs (or weights) by name from f32 values, as tensors of the dtypes and shapes `p`
/// declares.
pub fn inputs<const N: usize>(
    p: &Program,
    values: [(&'static str, Vec<f32>); N],
) -> [(&'static str, HostTensor); N] {
    values.map(|(n, v)| input(p, n, &v))
}

/// `inputs` for a list whose length varies by case.
pub fn inputs_vec(
    p: &Program,
    values: Vec<(&'static str, Vec<f32>)>,
) -> Vec<(&'static str, HostTensor)> {
    values.into_iter().map(|(n, v)| input(p, n, &v)).collect()
}

fn input(p: &Program, name: &'static str, v: &[f32]) -> (&'static str, HostTensor) {
    let (dtype, shape) = match p.inputs.iter().find(|t| t.name == name) {
        Some(t) => (t.dtype, t.shape.clone()),
        None => {
            let w = p
                .weights
                .iter()
                .find(|w| w.name == name)
                .unwrap_or_else(|| panic!("{name}: neither an input nor a weight of the program"));
            (w.dtype, w.shape.clone())
        }
    };
    (name, HostTensor::from_f32_as(dtype, shape, v))
}

/// Every output within 2% of the largest value of the CPU backend's (five bf16 steps): the
/// backends sum in other orders, so roundings may differ by a step.
pub fn assert_near_cpu(what: &str, p: &Program, ins: &[(&str, HostTensor)], got: &[Vec<f32>]) {
    let cpu = run(&CpuBackend::new(), p, ins);
    for (o, (g, c)) in got.iter().zip(&cpu).enumerate() {
        let scale = c.iter().fold(0f32, |s, v| s.max(v.abs()));
        let worst = g.iter().zip(c).fold(0f32, |s, (x, y)| s.max((x - y).abs()));
        assert!(
            scale > 0.0 && worst <= 0.02 * scale,
            "{what}: output {o} off the CPU's by {worst} (largest {scale})"
        );
    }
}

/// Heads, KV heads and head dim of the RoPE / cache programs (Qwen2.5-1.5B's).
pub const HEADS: usize = 12;
pub const KV_HEADS: usize = 2;
pub const HEAD_DIM: usize = 128;

/// A decoder layer's RoPE / KV-cache group over `s` positions of a `t`-slot cache, all in
/// `dt` (the four steps the CUDA backend runs as one launch), with the copies of the caches
/// into the arena before it: its inputs (0 q, 1 k, 2 v, 3 cos, 4 sin, 5 pos, 6 k_cache,
/// 7 v_cache), steps, arena bytes, and where rope(q) and the written caches lie.
pub struct RopeCache {
    pub inputs: Vec<IoTensor>,
    pub steps: Vec<Step>,
    pub arena_bytes: u64,
    pub q_rot: Binding,
    pub k_cache: Binding,
    pub v_cache: Binding,
}

pub fn rope_cache_group(dt: DType, s: usize, t: usize, origin: &str) -> RopeCache {
    let d = HEAD_DIM;
    let (q, kv, table, cache) = (
        [1, HEADS, s, d],
        [1, KV_HEADS, s, d],
        [1, 1, s, d],
        [1, KV_HEADS, t, d],
    );
    let dense = |slot, off: usize, shape: &[usize]| {
        bind(slot, off as u64, shape, &dense_strides(shape), dt)
    };
    let bytes = |shape: &[usize]| shape.iter().product::<usize>() * dt.size_bytes();
    // arena: the key cache, the value cache, rope(q), rope(k)
    let (kc, vc) = (0, bytes(&cache));
    let (qo, ko) = (2 * bytes(&cache), 2 * bytes(&cache) + bytes(&q));
    let step = |kernel, inputs: Vec<Binding>, outputs: Vec<Binding>| Step {
        kernel,
        inputs,
        outputs,
        origin: origin.into(),
    };
    let pos = bind(Slot::Input(5), 0, &[s], &[1], DType::I64);
    // the tables broadcast over the heads of x (the kernel's contract: one shape)
    let tables = |x: &[usize]| {
        let t = |slot| bind(slot, 0, x, &[s * d, 0, d, 1], dt);
        [t(Slot::Input(3)), t(Slot::Input(4))]
    };
    let ([qcos, qsin], [kcos, ksin]) = (tables(&q), tables(&kv));
    RopeCache {
        inputs: vec![
            io("q", &q, dt),
            io("k", &kv, dt),
            io("v", &kv, dt),
            io("cos", &table, dt),
            io("sin", &table, dt),
            io("pos", &[s], DType::I64),
            io("k_cache", &cache, dt),
            io("v_cache", &cache, dt),
        ],
        steps: [
            vec![
                step(
                    Kernel::Copy,
                    vec![dense(Slot::Input(6), 0, &cache)],
                    vec![dense(Slot::Arena, kc, &cache)],
                ),
                step(
                    Kernel::Copy,
                    vec![dense(Slot::Input(7), 0, &cache)],
                    vec![dense(Slot::Arena, vc, &cache)],
                ),
            ],
            rope_cache_steps(
                [
                    dense(Slot::Input(0), 0, &q),
                    dense(Slot::Input(1), 0, &kv),
                    dense(Slot::Input(2), 0, &kv),
                ],
                [qcos, qsin, kcos, ksin],
                pos,
                [dense(Slot::Arena, qo, &q), dense(Slot::Arena, ko, &kv)],
                [
                    dense(Slot::Arena, kc, &cache),
                    dense(Slot::Arena, vc, &cache),
                ],
                origin,
            ),
        ]
        .concat(),
        arena_bytes: (ko + bytes(&kv)) as u64,
        q_rot: dense(Slot::Arena, qo, &q),
        k_cache: dense(Slot::Arena, kc, &cache),
        v_cache: dense(Slot::Arena, vc, &cache),
    }
}

/// A decoder layer's four RoPE / KV-cache steps as the compiler emits them: rope(q) and
/// rope(k) from `x` = [q, k, v] with `tables` = [q's cos, q's sin, k's cos, k's sin] into
/// `rot` = [q_out, k_out], then rope(k) and v written into `caches` at `pos` (axis 2).
pub fn rope_cache_steps(
    x: [Binding; 3],
    tables: [Binding; 4],
    pos: Binding,
    rot: [Binding; 2],
    caches: [Binding; 2],
    origin: &str,
) -> Vec<Step> {
    let [xq, xk, xv] = x;
    let [qcos, qsin, kcos, ksin] = tables;
    let [qo, ko] = rot;
    let [kc, vc] = caches;
    let step = |kernel, inputs: Vec<Binding>, outputs: Vec<Binding>| Step {
        kernel,
        inputs,
        outputs,
        origin: origin.into(),
    };
    let index_copy = Kernel::IndexCopy { axis: 2 };
    vec![
        step(Kernel::Rope, vec![xq, qcos, qsin], vec![qo]),
        step(Kernel::Rope, vec![xk, kcos, ksin], vec![ko.clone()]),
        step(index_copy.clone(), vec![pos.clone(), ko], vec![kc]),
        step(index_copy, vec![pos, xv], vec![vc]),
    ]
}
