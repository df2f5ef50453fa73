//! End to end against the committed PyTorch fixtures: compile with npu_compiler, run on the
//! CPU backend, compare with io.safetensors.

use npu_compiler::{target, CompileOptions, Program};
use npu_ir::DType;
use npu_runtime::{read_safetensors, Backend, CpuBackend, HostTensor, SafetensorsFile};
use std::collections::HashMap;
use std::path::PathBuf;

use npu_runtime::compare::{argmax, pearson, top5};

fn fixture(dir: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures")
        .join(dir)
}

fn compile(path: PathBuf, tgt: &'static npu_compiler::Target, dtype: DType) -> Program {
    let graph = npu_ir::load(&path).unwrap();
    npu_compiler::compile(
        graph,
        &CompileOptions {
            target: tgt,
            dtype: Some(dtype),
        },
    )
    .unwrap()
    .0
}

fn io(dir: &str) -> HashMap<String, HostTensor> {
    read_safetensors(&fixture(dir).join("io.safetensors"))
        .unwrap()
        .into_iter()
        .collect()
}

fn run_model(
    dir: &str,
    tgt: &'static npu_compiler::Target,
    dtype: DType,
) -> (Vec<f32>, Vec<f32>, usize) {
    let p = compile(fixture(dir).join("model.ir.json"), tgt, dtype);
    let w = SafetensorsFile::open(&fixture(dir).join("weights.safetensors")).unwrap();
    let mut exe = CpuBackend::new().prepare(&p, &w).unwrap();
    let io = io(dir);
    let inputs: Vec<(String, HostTensor)> = p
        .inputs
        .iter()
        .map(|i| (i.name.clone(), io[&format!("input.{}", i.name)].clone()))
        .collect();
    let refs: Vec<(&str, &HostTensor)> = inputs.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let out = exe.run_all(&refs).unwrap();
    let (name, got) = &out[0];
    let want = &io[&format!("output.{name}")];
    assert_eq!(got.shape(), want.shape());
    let classes = *want.shape().last().unwrap();
    (got.to_f32_vec(), want.to_f32_vec(), classes)
}

fn check_classifier(dir: &str, tgt: &'static npu_compiler::Target, dtype: DType) {
    let (got, want, classes) = run_model(dir, tgt, dtype);
    let r = pearson(&got, &want);
    assert!(r > 0.99, "{dir} {dtype}: pearson {r}");
    for (g, w) in got.chunks(classes).zip(want.chunks(classes)) {
        assert_eq!(argmax(g), argmax(w), "{dir} {dtype}: argmax");
        assert_eq!(top5(g), top5(w), "{dir} {dtype}: top-5");
    }
}

#[test]
fn mlp_matches_pytorch_f32() {
    let (got, want, _) = run_model("mlp", &target::CPU, DType::F32);
    let max = got
        .iter()
        .zip(&want)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f32::max);
    assert!(max < 1e-4, "max abs diff {max}");
}

#[test]
fn small_cnn_matches_pytorch_f16_and_f32_on_npu_target() {
    for dir in ["small-cnn", "small-cnn-b4"] {
        for dt in [DType::F16, DType::F32] {
            check_classifier(dir, &target::NPU, dt);
        }
        check_classifier(dir, &target::CPU, DType::F32);
        check_classifier(dir, &target::CPU, DType::BF16);
    }
}

/// Prefill with the fixture's inputs, then 32 greedy decode steps feeding our own argmax
/// (or, with `teacher`, the reference's tokens, so that each step's logits compare with
/// PyTorch's even after a near-tie flips one token); returns every decode step's logits.
fn qwen_greedy(
    dtype: DType,
    teacher: bool,
) -> (Vec<Vec<f32>>, Vec<i64>, HashMap<String, HostTensor>) {
    let dir = fixture("qwen2.5-tiny");
    let pre = compile(dir.join("prefill.ir.json"), &target::CPU, dtype);
    let dec = compile(dir.join("decode.ir.json"), &target::CPU, dtype);
    let w = SafetensorsFile::open(&dir.join("weights.safetensors")).unwrap();
    let be = CpuBackend::new();
    let mut pre_x = be.prepare(&pre, &w).unwrap();
    let mut dec_x = be.prepare(&dec, &w).unwrap();
    let io = io("qwen2.5-tiny");
    let mut state = pre_x.new_state();
    let inputs: Vec<(String, HostTensor)> = pre
        .inputs
        .iter()
        .map(|i| {
            (
                i.name.clone(),
                io[&format!("prefill.input.{}", i.name)].clone(),
            )
        })
        .collect();
    let refs: Vec<(&str, &HostTensor)> = inputs.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let out = pre_x.run(&refs, state.as_mut()).unwrap();
    assert_eq!(out.len(), 1, "only the logits leave the backend");
    let mut tok = argmax(&out[0].1.to_f32_vec()) as i64;
    let mut all = Vec::new();
    let mut toks = Vec::new();
    for step in 0..32 {
        let get = |n: &str| io[&format!("decode.{step}.input.{n}")].clone();
        let ids = if teacher {
            get("input_ids")
        } else {
            HostTensor::from_i64(vec![1, 1], &[tok])
        };
        let (mask, pos, cpos) = (
            get("attention_mask"),
            get("position_ids"),
            get("cache_position"),
        );
        let out = dec_x
            .run(
                &[
                    ("input_ids", &ids),
                    ("attention_mask", &mask),
                    ("position_ids", &pos),
                    ("cache_position", &cpos),
                ],
                state.as_mut(),
            )
            .unwrap();
        let logits = out[0].1.to_f32_vec();
        tok = argmax(&logits) as i64;
        toks.push(tok);
        all.push(logits);
    }
    (all, toks, io)
}

#[test]
fn qwen_tiny_f32_greedy_tokens_match_pytorch() {
    let (_, toks, io) = qwen_greedy(DType::F32, false);
    assert_eq!(toks, io["greedy.tokens"].to_i64_vec());
}

#[test]
fn qwen_tiny_bf16_logits_track_pytorch() {
    let (logits, _, io) = qwen_greedy(DType::BF16, true);
    let want = io["greedy.logits"].to_f32_vec();
    for (i, l) in logits.iter().enumerate() {
        let w = &want[i * 256..(i + 1) * 256];
        let r = pearson(l, w);
        assert!(r > 0.99, "step {i}: pearson {r}");
        let (a, b) = (top5(l), top5(w));
        let overlap = a.iter().filter(|x| b.contains(x)).count();
        assert!(overlap >= 4, "step {i}: top-5 overlap {overlap}");
    }
}
