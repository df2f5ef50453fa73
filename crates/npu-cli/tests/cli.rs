//! The `npu` binary: compile/describe/check, and one clear error (never a panic) on bad input.

use std::path::PathBuf;
use std::process::{Command, Output};

fn npu(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_npu"))
        .args(args)
        .output()
        .expect("npu runs")
}

fn fixture(rel: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures")
        .join(rel)
        .display()
        .to_string()
}

fn tmp(name: &str) -> String {
    let dir = std::env::temp_dir().join(format!("npu-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name).display().to_string()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn compile_then_describe_text_and_json() {
    let out = tmp("decode.npubin");
    let o = npu(&[
        "compile",
        &fixture("qwen2.5-tiny/decode.ir.json"),
        "-o",
        &out,
        "--dtype",
        "bf16",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains("compute bfloat16, target npu"));
    let d = npu(&["describe", &out]);
    let s = text(&d.stdout);
    assert!(d.status.success());
    for want in [
        "inputs (8):",
        "updates input 'past_key_0' in place",
        "arena:",
        "totals per kernel kind:",
        "attention",
        "total steps",
    ] {
        assert!(s.contains(want), "missing '{want}' in describe output");
    }
    let j = npu(&["describe", &out, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&j.stdout).unwrap();
    assert_eq!(v["totals"]["attention"], 2);
    assert_eq!(v["compute_dtype"], "bfloat16");
    assert_eq!(
        v["steps"].as_array().unwrap().len(),
        v["total_steps"].as_u64().unwrap() as usize
    );
}

#[test]
fn check_passes_real_models_and_lists_violations() {
    let o = npu(&["check", &fixture("resnet18/model.ir.json")]);
    assert!(o.status.success());
    assert!(text(&o.stdout).contains("nodes fit target 'npu'"));
    // an op nobody runs: exit 1, naming the node, the op and both reasons
    let bad = tmp("unsupported.ir.json");
    let ir = std::fs::read_to_string(fixture("mlp/model.ir.json"))
        .unwrap()
        .replace("aten.gelu.default", "aten.stft.default");
    std::fs::write(&bad, ir).unwrap();
    let o = npu(&["check", &bad]);
    assert_eq!(o.status.code(), Some(1));
    let s = text(&o.stdout);
    assert!(
        s.contains("1 node(s) can run neither on target 'npu' nor on the CPU fallback"),
        "{s}"
    );
    assert!(s.contains("node 'gelu' (aten.stft.default)"), "{s}");
    assert!(
        s.contains("op 'aten.stft.default' has no NPU lowering"),
        "{s}"
    );
    assert!(s.contains("not supported by the CPU fallback"), "{s}");
    // with --target cpu the reasons do not speak of an NPU
    let o = npu(&["check", &bad, "--target", "cpu"]);
    assert_eq!(o.status.code(), Some(1));
    let s = text(&o.stdout);
    assert!(!s.contains("NPU"), "{s}");
    assert!(s.contains("no compiled lowering for target 'cpu'"), "{s}");
    // and `npu partition` refuses the same graph, naming the node
    let o = npu(&["partition", &bad]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stdout).contains("node 'gelu' (aten.stft.default)"));
}

/// A graph with composite ops (llama-tiny builds its mask with aten.diff) is checked as
/// `npu partition`/`npu run` place it: decomposed first, so nothing is reported unrunnable.
#[test]
fn check_and_partition_decompose_composites_first() {
    let model = fixture("llama-tiny/model.ir.json");
    for cmd in ["check", "partition"] {
        let o = npu(&[cmd, &model]);
        assert!(
            o.status.success(),
            "npu {cmd}: {}{}",
            text(&o.stdout),
            text(&o.stderr)
        );
        assert!(!text(&o.stdout).contains("can run neither"), "npu {cmd}");
    }
}

#[test]
fn check_accepts_graphs_that_fall_back() {
    let o = npu(&["check", &fixture("bert-tiny/model.ir.json")]);
    assert!(o.status.success(), "{}", text(&o.stdout));
    let s = text(&o.stdout);
    assert!(s.contains("on the CPU fallback:"), "{s}");
    assert!(s.contains("node 'arange' (aten.arange.default)"), "{s}");
}

#[test]
fn bad_input_gives_one_clear_error_and_no_panic() {
    let garbage = tmp("garbage.ir.json");
    std::fs::write(&garbage, "{\"graph_inputs\": [").unwrap();
    let dynamic = tmp("dynamic.ir.json");
    let ir = std::fs::read_to_string(fixture("mlp/model.ir.json"))
        .unwrap()
        .replacen("\"shape\": [\n        2,", "\"shape\": [\n        -1,", 1);
    std::fs::write(&dynamic, ir).unwrap();
    let not_npubin = tmp("x.npubin");
    std::fs::write(&not_npubin, b"hello").unwrap();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec![
                "compile".into(),
                "nope.json".into(),
                "-o".into(),
                tmp("o.npubin"),
            ],
            "cannot read nope.json",
        ),
        (
            vec![
                "compile".into(),
                garbage.clone(),
                "-o".into(),
                tmp("o.npubin"),
            ],
            "malformed IR JSON at line 1",
        ),
        (
            vec![
                "compile".into(),
                dynamic.clone(),
                "-o".into(),
                tmp("o.npubin"),
            ],
            "dynamic or invalid shape",
        ),
        (
            vec![
                "compile".into(),
                fixture("mlp/model.ir.json"),
                "-o".into(),
                tmp("o.npubin"),
                "--target".into(),
                "tpu".into(),
            ],
            "unknown target 'tpu'",
        ),
        (
            vec!["describe".into(), not_npubin.clone()],
            "not an .npubin file",
        ),
        (vec!["describe".into(), tmp("absent.npubin")], "cannot read"),
    ];
    for (args, want) in cases {
        let args: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
        let o = npu(&args);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.starts_with("error: ") && err.contains(want),
            "{args:?}: expected '{want}' in '{err}'"
        );
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
        assert!(!err.contains("panicked") && !err.contains("backtrace"));
    }
}

#[test]
fn partition_shows_the_plan_in_text_and_json() {
    let model = fixture("bert-tiny/model.ir.json");
    let o = npu(&["partition", &model]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let s = text(&o.stdout);
    for want in [
        "partition(s)",
        "npu",
        "cpu",
        "why:",
        "arange has no NPU lowering",
        "-> cpu:",
    ] {
        assert!(s.contains(want), "missing '{want}' in:\n{s}");
    }
    let j = npu(&["partition", &model, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&j.stdout).unwrap();
    let steps = v["steps"].as_array().unwrap();
    assert!(steps.iter().any(|s| s["kind"] == "transfer"));
    assert!(steps.iter().any(|s| s["device"] == "cpu"));
    // Forcing an op the NPU runs moves it, and only it.
    let o = npu(&[
        "partition",
        &fixture("small-cnn/model.ir.json"),
        "--force-cpu",
        "max_pool2d",
    ]);
    let s = text(&o.stdout);
    assert!(
        s.contains("3 partition(s) (2 npu, 1 cpu), 2 transfer(s)"),
        "{s}"
    );
    assert!(s.contains("forced to CPU (--force-cpu max_pool2d)"), "{s}");
}

#[test]
fn run_takes_an_ir_json_and_partitions_it() {
    let out = tmp("bert-out.safetensors");
    let o = npu(&[
        "run",
        &fixture("bert-tiny/model.ir.json"),
        "--weights",
        &fixture("bert-tiny/weights.safetensors"),
        "--inputs",
        &fixture("bert-tiny/io.safetensors"),
        "--outputs",
        &out,
        "--repeat",
        "2",
        "--profile",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let s = text(&o.stdout);
    assert!(s.contains("npu +") && s.contains("cpu partition(s)"), "{s}");
    assert!(s.contains("per partition"), "{s}");
    assert!(std::path::Path::new(&out).exists());
    // A compiled program has no partitions to force.
    let o = npu(&["run", "x.npubin", "--force-cpu", "relu"]);
    assert!(!o.status.success());
    assert!(text(&o.stderr).contains("--force-cpu applies to IR JSON"));
}
