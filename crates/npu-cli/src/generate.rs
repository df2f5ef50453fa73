//! `npu generate`: greedy decoding with a prefill and a decode program sharing a
//! device-resident KV cache.
//!
//! Inputs the programs take (the torch_ir export's convention): `input_ids` [1,S],
//! `attention_mask` [1,1,S,MAX] additive (0 attend, the dtype's lowest value masked),
//! `position_ids` [1,S], `cache_position` [S], and the caches. A prompt shorter than the
//! prefill length S is LEFT-padded: pad slots 0..S-P hold token 0 and are masked for every
//! query (now and in all decode steps), the real tokens take positions 0..P-1 (RoPE) in
//! cache slots S-P..S-1, so the prefill's last-position logits belong to the last prompt
//! token. Decode step i writes slot S+i with position P+i.

use crate::backends::backend_by_name;
use crate::run::open_weights;
use anyhow::{bail, Context, Result};
use npu_compiler::npubin;
use npu_compiler::program::IoTensor;
use npu_compiler::Program;
use npu_ir::DType;
use npu_runtime::HostTensor;
use std::path::{Path, PathBuf};
use std::time::Instant;

pub struct GenerateArgs {
    pub prefill: PathBuf,
    pub decode: PathBuf,
    pub weights: PathBuf,
    pub prompt_ids: Vec<i64>,
    pub max_new_tokens: usize,
    pub backend: String,
    pub profile: bool,
}

fn input<'a>(p: &'a Program, name: &str, file: &Path) -> Result<&'a IoTensor> {
    p.inputs
        .iter()
        .find(|i| i.name == name)
        .with_context(|| format!("{} has no input '{name}'", file.display()))
}

fn masked_value(dt: DType) -> f32 {
    match dt {
        DType::F16 => -65504.0,
        DType::BF16 => -3.389_531_4e38,
        _ => f32::MIN,
    }
}

/// An additive mask [1,1,rows,max]: row r attends to slots lo..=hi(r).
fn mask(
    io: &IoTensor,
    rows: usize,
    max: usize,
    allow: impl Fn(usize, usize) -> bool,
) -> HostTensor {
    let neg = masked_value(io.dtype);
    let mut v = vec![neg; rows * max];
    for r in 0..rows {
        for s in 0..max {
            if allow(r, s) {
                v[r * max + s] = 0.0;
            }
        }
    }
    HostTensor::from_f32_as(io.dtype, io.shape.clone(), &v)
}

fn argmax(v: &[f32]) -> i64 {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best as i64
}

pub fn generate(a: GenerateArgs) -> Result<()> {
    let pre = npubin::load(&a.prefill)?;
    let dec = npubin::load(&a.decode)?;
    let ids_in = input(&pre, "input_ids", &a.prefill)?;
    let s = *ids_in.shape.last().context("input_ids has rank 0")?;
    let mask_in = input(&pre, "attention_mask", &a.prefill)?;
    let max = *mask_in.shape.last().context("attention_mask has rank 0")?;
    let p = a.prompt_ids.len();
    if p == 0 || p > s {
        bail!("the prompt has {p} tokens; the prefill program takes 1..={s} (left-padded)");
    }
    if a.max_new_tokens == 0 {
        bail!("--max-new-tokens must be at least 1");
    }
    // Checked: a huge --max-new-tokens must not wrap past the cache size.
    let last_slot = s.checked_add(a.max_new_tokens - 1);
    if !matches!(last_slot, Some(last) if last <= max) {
        bail!(
            "{} new tokens after a {s}-slot prefill exceed the cache of {max} slots",
            a.max_new_tokens
        );
    }
    let weights = open_weights(Some(&a.weights))?;
    let backend = backend_by_name(&a.backend)?;
    let t = Instant::now();
    let mut pre_x = backend
        .prepare(&pre, weights.as_ref())
        .with_context(|| format!("cannot prepare {}", a.prefill.display()))?;
    let mut dec_x = backend
        .prepare(&dec, weights.as_ref())
        .with_context(|| format!("cannot prepare {}", a.decode.display()))?;
    let prepare_s = t.elapsed().as_secs_f64();
    pre_x.set_profiling(a.profile);
    dec_x.set_profiling(a.profile);
    let pad = s - p;
    let mut ids = vec![0i64; pad];
    ids.extend(&a.prompt_ids);
    let pos: Vec<i64> = (0..s).map(|i| i.saturating_sub(pad) as i64).collect();
    let slots: Vec<i64> = (0..s as i64).collect();
    let i64_as = |io: &IoTensor, v: &[i64]| -> Result<HostTensor> {
        Ok(HostTensor::from_i64(io.shape.clone(), v).cast(io.dtype)?)
    };
    let pre_inputs = [
        ("input_ids", i64_as(ids_in, &ids)?),
        (
            "attention_mask",
            mask(mask_in, s, max, |r, slot| {
                slot <= r && (slot >= pad || slot == r)
            }),
        ),
        (
            "position_ids",
            i64_as(input(&pre, "position_ids", &a.prefill)?, &pos)?,
        ),
        (
            "cache_position",
            i64_as(input(&pre, "cache_position", &a.prefill)?, &slots)?,
        ),
    ];
    let refs: Vec<(&str, &HostTensor)> = pre_inputs.iter().map(|(n, t)| (*n, t)).collect();
    let mut state = pre_x.new_state();
    let t = Instant::now();
    let out = pre_x.run(&refs, state.as_mut())?;
    let prefill_s = t.elapsed().as_secs_f64();
    let logits = &out
        .first()
        .context("the prefill program has no plain output")?
        .1;
    let mut tok = argmax(&logits.to_f32_vec());
    let mut generated = vec![tok];
    let d_ids = input(&dec, "input_ids", &a.decode)?;
    let d_mask = input(&dec, "attention_mask", &a.decode)?;
    let d_pos = input(&dec, "position_ids", &a.decode)?;
    let d_cpos = input(&dec, "cache_position", &a.decode)?;
    let t = Instant::now();
    for i in 0..a.max_new_tokens - 1 {
        let slot = s + i;
        let inputs = [
            ("input_ids", i64_as(d_ids, &[tok])?),
            (
                "attention_mask",
                mask(d_mask, 1, max, |_, sl| sl >= pad && sl <= slot),
            ),
            ("position_ids", i64_as(d_pos, &[(p + i) as i64])?),
            ("cache_position", i64_as(d_cpos, &[slot as i64])?),
        ];
        let refs: Vec<(&str, &HostTensor)> = inputs.iter().map(|(n, t)| (*n, t)).collect();
        let out = dec_x
            .run(&refs, state.as_mut())
            .with_context(|| format!("decode step {i}"))?;
        tok = argmax(&out[0].1.to_f32_vec());
        generated.push(tok);
    }
    let decode_s = t.elapsed().as_secs_f64();
    let steps = a.max_new_tokens - 1;
    say!(
        "prompt: {p} tokens (prefill length {s}, {pad} left-padded), cache {max} slots, backend {}",
        a.backend
    );
    say!("prepare: {:.1} ms", prepare_s * 1e3);
    say!(
        "prefill: {:.1} ms ({:.1} tokens/s)",
        prefill_s * 1e3,
        p as f64 / prefill_s
    );
    if steps > 0 {
        say!(
            "decode: {steps} tokens in {:.1} ms ({:.2} ms/token, {:.1} tokens/s)",
            decode_s * 1e3,
            decode_s * 1e3 / steps as f64,
            steps as f64 / decode_s
        );
    }
    let text: Vec<String> = generated.iter().map(|t| t.to_string()).collect();
    say!("generated: {}", text.join(","));
    if a.profile {
        crate::profile::print("prefill", &pre_x.profile(), 10);
        crate::profile::print("decode", &dec_x.profile(), 10);
    }
    Ok(())
}
