//! End to end through the `npu` binary on the CPU backend: compile + run (small-cnn) and
//! compile + generate (qwen2.5-tiny, f32) against the PyTorch fixtures.

use npu_runtime::read_safetensors;
use std::path::PathBuf;
use std::process::Command;

fn fixture(p: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures")
        .join(p)
}

fn npu(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_npu"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "npu {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("npu-e2e-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

#[test]
fn compile_and_run_small_cnn() {
    let prog = tmp("cnn.npubin");
    let outs = tmp("cnn-out.safetensors");
    let s = |p: &PathBuf| p.to_str().unwrap().to_string();
    npu(&[
        "compile",
        &s(&fixture("small-cnn/model.ir.json")),
        "-o",
        &s(&prog),
        "--target",
        "npu",
        "--dtype",
        "f16",
    ]);
    let io = fixture("small-cnn/io.safetensors");
    let w = fixture("small-cnn/weights.safetensors");
    let printed = npu(&[
        "run",
        &s(&prog),
        "--weights",
        &s(&w),
        "--inputs",
        &s(&io),
        "--outputs",
        &s(&outs),
        "--repeat",
        "3",
    ]);
    assert!(printed.contains("3 run(s)"), "{printed}");
    let got = read_safetensors(&outs).unwrap();
    let want = read_safetensors(&io).unwrap();
    let want = &want.iter().find(|(k, _)| k == "output.linear").unwrap().1;
    let got = &got.iter().find(|(k, _)| k == "linear").unwrap().1;
    let (g, w) = (got.to_f32_vec(), want.to_f32_vec());
    let am = |v: &[f32]| (0..v.len()).max_by(|&a, &b| v[a].total_cmp(&v[b])).unwrap();
    assert_eq!(am(&g), am(&w));
    let max = g
        .iter()
        .zip(&w)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f32::max);
    assert!(max < 0.05, "max abs diff {max}");

    // Wrong weights: one clear error naming the tensor.
    let out = Command::new(env!("CARGO_BIN_EXE_npu"))
        .args([
            "run",
            &s(&prog),
            "--weights",
            &s(&fixture("mlp/weights.safetensors")),
            "--inputs",
            &s(&io),
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("conv1.weight"), "{err}");
}

/// Compiles the qwen2.5-tiny prefill and decode graphs for the CPU in f32 through the CLI.
fn compile_tiny_f32(tag: &str) -> (PathBuf, PathBuf) {
    let (pre, dec) = (
        tmp(&format!("pre{tag}.npubin")),
        tmp(&format!("dec{tag}.npubin")),
    );
    for (graph, out) in [("prefill", &pre), ("decode", &dec)] {
        let ir = fixture(&format!("qwen2.5-tiny/{graph}.ir.json"));
        npu(&[
            "compile",
            ir.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
            "--target",
            "cpu",
            "--dtype",
            "f32",
        ]);
    }
    (pre, dec)
}

#[test]
fn compile_and_generate_qwen_tiny_f32_matches_pytorch_greedy() {
    let s = |p: &PathBuf| p.to_str().unwrap().to_string();
    let (pre, dec) = compile_tiny_f32("");
    let io = read_safetensors(&fixture("qwen2.5-tiny/io.safetensors")).unwrap();
    let get = |k: &str| io.iter().find(|(n, _)| n == k).unwrap().1.to_i64_vec();
    let prompt: Vec<String> = get("prefill.input.input_ids")
        .iter()
        .map(|t| t.to_string())
        .collect();
    let printed = npu(&[
        "generate",
        "--prefill",
        &s(&pre),
        "--decode",
        &s(&dec),
        "--weights",
        &s(&fixture("qwen2.5-tiny/weights.safetensors")),
        "--prompt-ids",
        &prompt.join(","),
        "--max-new-tokens",
        "33",
    ]);
    let line = printed
        .lines()
        .find_map(|l| l.strip_prefix("generated: "))
        .expect(&printed);
    let toks: Vec<i64> = line.split(',').map(|t| t.trim().parse().unwrap()).collect();
    assert_eq!(toks.len(), 33);
    assert_eq!(toks[1..], get("greedy.tokens")[..], "{printed}");
    assert!(printed.contains("tokens/s"));
}

/// A prompt shorter than the prefill length is left-padded and masked: `npu generate` must
/// produce the tokens of a padding-free reference that feeds the prompt one token at a time
/// through the decode program alone (slots 0.., positions 0..).
#[test]
fn generate_left_pads_short_prompts_correctly() {
    use npu_runtime::{Backend, CpuBackend, HostTensor, SafetensorsFile};
    let s = |p: &PathBuf| p.to_str().unwrap().to_string();
    let (pre, dec) = compile_tiny_f32("-pad");
    let weights = fixture("qwen2.5-tiny/weights.safetensors");
    let prompt = [17i64, 200, 3];
    let new = 6;
    let printed = npu(&[
        "generate",
        "--prefill",
        &s(&pre),
        "--decode",
        &s(&dec),
        "--weights",
        &s(&weights),
        "--prompt-ids",
        "17,200,3",
        "--max-new-tokens",
        &new.to_string(),
    ]);
    let line = printed
        .lines()
        .find_map(|l| l.strip_prefix("generated: "))
        .expect(&printed);
    let got: Vec<i64> = line.split(',').map(|t| t.trim().parse().unwrap()).collect();

    let program = npu_compiler::npubin::load(&dec).unwrap();
    let w = SafetensorsFile::open(&weights).unwrap();
    let mut exe = CpuBackend::new().prepare(&program, &w).unwrap();
    let mut state = exe.new_state();
    let max = 64;
    let mut want = Vec::new();
    let mut tok = prompt[0];
    for pos in 0..prompt.len() + new - 1 {
        if pos < prompt.len() {
            tok = prompt[pos];
        }
        let mask: Vec<f32> = (0..max)
            .map(|sl| if sl <= pos { 0.0 } else { f32::MIN })
            .collect();
        let ids = HostTensor::from_i64(vec![1, 1], &[tok]);
        let m = HostTensor::from_f32(vec![1, 1, 1, max], &mask);
        let p = HostTensor::from_i64(vec![1, 1], &[pos as i64]);
        let c = HostTensor::from_i64(vec![1], &[pos as i64]);
        let out = exe
            .run(
                &[
                    ("input_ids", &ids),
                    ("attention_mask", &m),
                    ("position_ids", &p),
                    ("cache_position", &c),
                ],
                state.as_mut(),
            )
            .unwrap();
        let l = out[0].1.to_f32_vec();
        if pos + 1 >= prompt.len() {
            tok = (0..l.len()).max_by(|&a, &b| l[a].total_cmp(&l[b])).unwrap() as i64;
            want.push(tok);
        }
    }
    assert_eq!(got, want, "{printed}");
}
