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
    let bad = tmp("unsupported.ir.json");
    let ir = std::fs::read_to_string(fixture("mlp/model.ir.json"))
        .unwrap()
        .replace("aten.gelu.default", "aten.erfinv.default");
    std::fs::write(&bad, ir).unwrap();
    let o = npu(&["check", &bad]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stdout).contains("1 violation(s)"));
    assert!(text(&o.stdout).contains("op 'aten.erfinv.default' has no NPU lowering"));
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
