//! What the backends' bench binaries share (`npu-cuda-bench`, `npu-wgpu-bench`): random
//! weights for timing without a checkpoint, the inputs of one decode step at a cache
//! position, and a profile grouped by kernel kind and output shape.

use crate::Rng;
use npu_program::Program;
use npu_runtime::tensor::store_f32;
use npu_runtime::{HostTensor, MemoryWeights, StepTime};
use rayon::prelude::*;
use std::collections::HashMap;
use std::process::ExitCode;

/// Options of a bench command: `--key value` pairs.
pub type Args = HashMap<String, String>;

/// Runs a bench binary's `main`: the first argument names the command, the rest are
/// `--key value` pairs handed to `run`, whose JSON goes to stdout and whose error to stderr
/// (exit status 1; 2 without a command).
pub fn main(usage: &str, run: impl FnOnce(&str, &Args) -> Result<String, String>) -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(cmd) = args.first() else {
        eprintln!("usage: {usage}");
        return ExitCode::from(2);
    };
    let mut map = Args::new();
    for kv in args[1..].chunks(2) {
        if let [k, v] = kv {
            map.insert(k.trim_start_matches("--").to_string(), v.clone());
        }
    }
    match run(cmd, &map) {
        Ok(json) => {
            println!("{json}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

/// The value of option `--k`.
pub fn arg(map: &Args, k: &str) -> Result<String, String> {
    map.get(k).cloned().ok_or_else(|| format!("missing --{k}"))
}

/// Uniform random weights in [-0.04, 0.04) for every source tensor (timing only). Chunks of
/// `RANDOM_CHUNK` elements are generated on every core, each from its own seed (source index,
/// chunk index), straight into the tensor's dtype: Qwen2.5-1.5B's 1.5 billion values took
/// 14.1 s on one core of a development machine (5.1 s on its two). The values do not depend
/// on the number of threads.
pub fn random_weights(p: &Program) -> MemoryWeights {
    let mut tensors: Vec<HostTensor> = p
        .sources
        .iter()
        .map(|s| HostTensor::zeros(s.dtype, s.shape.clone()))
        .collect();
    // every chunk of every tensor, as (its seed, dtype, bytes)
    let mut chunks = Vec::new();
    for (si, t) in tensors.iter_mut().enumerate() {
        let dt = t.dtype();
        let step = RANDOM_CHUNK * dt.size_bytes().max(1);
        for (ci, c) in t.bytes_mut().chunks_mut(step).enumerate() {
            let seed = 11 ^ ((si as u64) << 32) ^ (ci as u64).wrapping_mul(0x9E37_79B9);
            chunks.push((seed, dt, c));
        }
    }
    chunks.into_par_iter().for_each(|(seed, dt, bytes)| {
        let mut rng = Rng::new(seed);
        for i in 0..bytes.len() / dt.size_bytes().max(1) {
            store_f32(bytes, dt, i, rng.f() * 0.04);
        }
    });
    let m = p
        .sources
        .iter()
        .zip(tensors)
        .map(|(s, t)| (s.key.clone(), t))
        .collect();
    MemoryWeights(m)
}

/// Elements of a tensor one task of [`random_weights`] fills.
const RANDOM_CHUNK: usize = 1 << 20;

/// The inputs of a decode program's step whose S query tokens (1 for decode, the prompt
/// length for a prefill program) start at cache position `p`: token ids, the mask admitting
/// slots `0..=p + row`, position ids and cache positions. The KV cache is device state.
pub fn decode_inputs(dec: &Program, p: usize) -> Result<Vec<(String, HostTensor)>, String> {
    let find = |n: &str| {
        dec.inputs
            .iter()
            .find(|i| i.name == n)
            .ok_or(format!("decode program has no input {n}"))
    };
    let mask_io = find("attention_mask")?;
    let max = *mask_io.shape.last().unwrap_or(&0);
    let s = find("input_ids")?.shape.last().copied().unwrap_or(1);
    if p + s > max {
        return Err(format!(
            "positions {p}..{} are outside the cache of {max}",
            p + s
        ));
    }
    let at: Vec<i64> = (p..p + s).map(|t| t as i64).collect();
    let ids: Vec<i64> = at.iter().map(|t| t * 7919 % 151_000).collect();
    let mvals: Vec<f32> = (0..s * max)
        .map(|e| {
            if e % max <= p + e / max {
                0.0
            } else {
                f32::MIN
            }
        })
        .collect();
    Ok(vec![
        ("input_ids".into(), HostTensor::from_i64(vec![1, s], &ids)),
        (
            "attention_mask".into(),
            HostTensor::from_f32_as(mask_io.dtype, mask_io.shape.clone(), &mvals),
        ),
        ("position_ids".into(), HostTensor::from_i64(vec![1, s], &at)),
        ("cache_position".into(), HostTensor::from_i64(vec![s], &at)),
    ])
}

/// The cache length of a decode program (its mask's last dim).
pub fn cache_len(dec: &Program) -> usize {
    dec.inputs
        .iter()
        .find(|i| i.name == "attention_mask")
        .and_then(|i| i.shape.last().copied())
        .unwrap_or(0)
}

/// Per-run milliseconds per (kernel kind, first output shape) over a profile, largest first:
/// `(name, steps, ms)`.
pub fn step_groups(prof: &[StepTime], program: &Program) -> Vec<(String, usize, f64)> {
    let mut groups: Vec<(String, usize, f64)> = Vec::new();
    for (t, s) in prof.iter().zip(&program.steps) {
        let shape = s
            .outputs
            .first()
            .map(|o| format!("{:?}", o.shape))
            .unwrap_or_default();
        let key = format!("{} {shape}", t.kernel);
        let ms = t.total_ms / t.runs.max(1) as f64;
        match groups.iter_mut().find(|g| g.0 == key) {
            Some(g) => {
                g.1 += 1;
                g.2 += ms;
            }
            None => groups.push((key, 1, ms)),
        }
    }
    groups.sort_by(|a, b| b.2.total_cmp(&a.2));
    groups
}

/// `"profiled_ms":T,"top_kernels":[..]` of [`step_groups`]' first `top` groups.
pub fn groups_json(groups: &[(String, usize, f64)], top: usize) -> String {
    let total: f64 = groups.iter().map(|g| g.2).sum();
    let list: Vec<String> = groups
        .iter()
        .take(top)
        .map(|(k, n, ms)| format!("{{\"name\":{k:?},\"count\":{n},\"ms\":{ms:.4}}}"))
        .collect();
    format!(
        "\"profiled_ms\":{total:.4},\"top_kernels\":[{}]",
        list.join(",")
    )
}

/// The median of `v` (NaN when empty); sorts it.
pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        f64::NAN
    } else {
        v[v.len() / 2]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{cases, Family, SEED};
    use npu_ir::DType;
    use npu_program::program::SourceTensor;

    /// Values in range, in each source's dtype, differing across a chunk boundary and between
    /// tensors, the same on every call (chunks have their own seeds, not the thread's).
    #[test]
    fn random_weights_fill_every_chunk_of_every_source() {
        let mut p = cases(Family::ALL[0], SEED, false)[0].program();
        let src = |key: &str, shape: Vec<usize>, dtype| SourceTensor {
            key: key.into(),
            shape,
            dtype,
        };
        p.sources = vec![
            src("big", vec![RANDOM_CHUNK + 5], DType::BF16),
            src("small", vec![3, 7], DType::F32),
        ];
        let a = random_weights(&p);
        let b = random_weights(&p);
        assert_eq!(a.0["big"].bytes(), b.0["big"].bytes());
        for (key, dt) in [("big", DType::BF16), ("small", DType::F32)] {
            let t = &a.0[key];
            assert_eq!(t.dtype(), dt);
            let v = t.to_f32_vec();
            assert!(
                v.iter().all(|x| (-0.0401..0.0401).contains(x)),
                "{key} out of range"
            );
            let distinct = v
                .iter()
                .map(|x| x.to_bits())
                .collect::<std::collections::HashSet<_>>();
            assert!(distinct.len() > v.len().min(200) / 2, "{key} values repeat");
        }
        // the second chunk is not the first one again
        let big = a.0["big"].to_f32_vec();
        assert_ne!(&big[..5], &big[RANDOM_CHUNK..RANDOM_CHUNK + 5]);
        assert_ne!(&big[..21], &a.0["small"].to_f32_vec()[..]);
    }
}
