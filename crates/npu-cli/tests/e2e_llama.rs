//! A transformers-5 Llama decoder LM called as `model(input_ids)` (fixtures/llama-tiny): its
//! graph builds the causal mask with composite ops (`aten.diff`), which the decomposition
//! pass rewrites before partitioning. `npu run MODEL.ir.json` must match PyTorch.

use npu_runtime::compare::pearson;
use npu_runtime::read_safetensors;
use std::path::PathBuf;
use std::process::Command;

fn fixture(p: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/llama-tiny")
        .join(p)
        .to_str()
        .unwrap()
        .to_string()
}

/// Argmax of each row of `v` (rows of `n`).
fn argmax_rows(v: &[f32], n: usize) -> Vec<usize> {
    v.chunks(n)
        .map(|r| (0..n).max_by(|&a, &b| r[a].total_cmp(&r[b])).unwrap())
        .collect()
}

#[test]
fn llama_called_with_input_ids_runs_through_npu_run_and_matches_pytorch() {
    let out = std::env::temp_dir().join(format!("npu-llama-{}.safetensors", std::process::id()));
    let o = Command::new(env!("CARGO_BIN_EXE_npu"))
        .args([
            "run",
            &fixture("model.ir.json"),
            "--weights",
            &fixture("weights.safetensors"),
            "--inputs",
            &fixture("io.safetensors"),
            "--outputs",
            out.to_str().unwrap(),
            "--dtype",
            "f32",
        ])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "npu run failed: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let got = read_safetensors(&out).unwrap();
    let want = read_safetensors(std::path::Path::new(&fixture("io.safetensors"))).unwrap();
    let want = &want
        .iter()
        .find(|(k, _)| k == "output.linear_14")
        .unwrap()
        .1;
    let got = &got.iter().find(|(k, _)| k == "linear_14").unwrap().1;
    assert_eq!(got.shape(), want.shape());
    let (g, w) = (got.to_f32_vec(), want.to_f32_vec());
    let r = pearson(&g, &w);
    assert!(r > 0.999, "pearson r = {r}");
    let vocab = *want.shape().last().unwrap();
    assert_eq!(argmax_rows(&g, vocab), argmax_rows(&w, vocab));
    let max = g
        .iter()
        .zip(&w)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f32::max);
    assert!(max < 1e-3, "max abs diff {max}");
    let _ = std::fs::remove_file(out);
}
