//! Architectures the project had never seen (tools/export/npu_export/zoo.py): torchvision ViT
//! (nn.MultiheadAttention: unflatten, select), a Whisper-style encoder (conv1d stem, GELU,
//! sinusoidal positions), a UNet (conv_transpose2d, bilinear upsampling, skip concatenations)
//! and MobileNetV3-small (hardswish, hardsigmoid, squeeze-excitation). Each runs through
//! `npu run MODEL.ir.json` (partitioned, ops the target lacks on the CPU fallback) in f32 and in
//! the NPU's default f16 and must match PyTorch. The exports come from
//! `scripts/make-test-models.sh` (`$NPU_TEST_MODELS`, default `target/test-models`); a missing
//! one is reported and skipped, or fails with `NPU_REQUIRE_MODELS=1` (scripts/test.sh sets it).

use npu_runtime::read_safetensors;
use std::path::{Path, PathBuf};
use std::process::Command;

const MODELS: [&str; 4] = [
    "vit-tiny",
    "whisper-encoder-tiny",
    "unet-tiny",
    "mobilenet-v3-small",
];

fn models_root() -> PathBuf {
    std::env::var_os("NPU_TEST_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/test-models")
        })
}

/// max |got - want| / max |want| over the graph's outputs, running `npu run` with `extra` args.
fn relative_error(dir: &Path, tag: &str, extra: &[&str]) -> f64 {
    let out =
        std::env::temp_dir().join(format!("npu-zoo-{tag}-{}.safetensors", std::process::id()));
    let s = |p: &str| dir.join(p).to_str().unwrap().to_string();
    let mut args = vec![
        "run".to_string(),
        s("model.ir.json"),
        "--weights".into(),
        s("weights.safetensors"),
        "--inputs".into(),
        s("io.safetensors"),
        "--outputs".into(),
        out.to_str().unwrap().into(),
    ];
    args.extend(extra.iter().map(|a| a.to_string()));
    let o = Command::new(env!("CARGO_BIN_EXE_npu"))
        .args(&args)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{tag}: npu run failed: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let got = read_safetensors(&out).unwrap();
    let _ = std::fs::remove_file(&out);
    let io = read_safetensors(&dir.join("io.safetensors")).unwrap();
    let mut worst = 0.0f64;
    let mut outputs = 0;
    for (name, want) in io
        .iter()
        .filter_map(|(k, t)| k.strip_prefix("output.").map(|n| (n, t)))
    {
        let g = &got
            .iter()
            .find(|(k, _)| k == name)
            .unwrap_or_else(|| panic!("{tag}: no output {name}"))
            .1;
        assert_eq!(g.shape(), want.shape(), "{tag}: {name}");
        let (g, w) = (g.to_f32_vec(), want.to_f32_vec());
        let scale = w
            .iter()
            .fold(0.0f64, |m, &x| m.max(f64::from(x).abs()))
            .max(1e-6);
        let d = g
            .iter()
            .zip(&w)
            .fold(0.0f64, |m, (&a, &b)| m.max(f64::from(a - b).abs()));
        assert!(
            g.iter().all(|x| x.is_finite()),
            "{tag}: {name} has non-finite values"
        );
        worst = worst.max(d / scale);
        outputs += 1;
    }
    assert!(outputs > 0, "{tag}: io.safetensors has no outputs");
    worst
}

#[test]
fn unseen_architectures_run_and_match_pytorch_in_f32_and_f16() {
    let root = models_root();
    let required = std::env::var("NPU_REQUIRE_MODELS").is_ok_and(|v| v == "1");
    for model in MODELS {
        let dir = root.join(model);
        if !dir.join("weights.safetensors").exists() {
            assert!(
                !required,
                "{}: no export; run scripts/make-test-models.sh",
                dir.display()
            );
            // scripts/test.sh counts this line as a skip.
            println!(
                "SKIP: unseen_architectures_run_and_match_pytorch_in_f32_and_f16: no export in {} (scripts/make-test-models.sh makes it)",
                dir.display()
            );
            continue;
        }
        // f32 compute: measured 1.7e-7 to 5.5e-7 on AMD EPYC.
        let e32 = relative_error(&dir, &format!("{model}-f32"), &["--dtype", "f32"]);
        assert!(e32 <= 1e-5, "{model} f32: max|d|/max|ref| = {e32}");
        // the NPU's default f16 compute: measured 5e-4 to 9e-4.
        let e16 = relative_error(&dir, &format!("{model}-f16"), &[]);
        assert!(e16 <= 1e-2, "{model} f16: max|d|/max|ref| = {e16}");
    }
}
