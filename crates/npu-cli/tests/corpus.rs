//! The bad-input corpus: one case per class of bad input (malformed and truncated IR JSON,
//! absurd shapes, corrupt `.npubin` and safetensors files, wrong names, dtypes and token ids,
//! hostile arguments, outputs that alias inputs), generated here (large cases in memory).
//! Every case must give a non-zero exit, exactly one line on stderr that names the thing at
//! fault and says each cause once, no panic, and leave every input file unchanged.

use npu_runtime::{safetensors_bytes, HostTensor};
use serde_json::{json, Value as Json};
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Command;

fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures")
        .join(rel)
}

/// Named tensors, as a safetensors file holds them.
type Named = Vec<(String, HostTensor)>;

struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("npu-corpus-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }
    fn file(&self, name: &str, bytes: impl AsRef<[u8]>) -> String {
        let p = self.0.join(name);
        std::fs::write(&p, bytes).unwrap();
        p.display().to_string()
    }
    fn path(&self, name: &str) -> String {
        self.0.join(name).display().to_string()
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        std::fs::remove_dir_all(&self.0).ok();
    }
}

fn t(name: &str, shape: Json, dtype: &str) -> Json {
    json!({"name": name, "shape": shape, "dtype": dtype})
}

fn tp(name: &str, shape: Json, dtype: &str, producer: &str) -> Json {
    json!({"name": name, "shape": shape, "dtype": dtype, "producer_node": producer,
           "producer_output_idx": 0})
}

/// A one-input graph: `x` through `nodes`, returning `out`.
fn graph(x: Json, weights: Vec<Json>, nodes: Vec<Json>, out: Json) -> String {
    let mapping: serde_json::Map<String, Json> = weights
        .iter()
        .map(|w| (w["name"].as_str().unwrap().to_string(), w["name"].clone()))
        .collect();
    json!({"model_name": "corpus", "graph_inputs": [x], "graph_outputs": [out],
           "weights": weights, "weight_name_mapping": mapping, "nodes": nodes})
    .to_string()
}

fn node(name: &str, op: &str, inputs: Vec<Json>, outputs: Vec<Json>, attrs: Json) -> Json {
    json!({"name": name, "op_type": op, "inputs": inputs, "outputs": outputs, "attrs": attrs})
}

fn relu_graph(shape: Json) -> String {
    graph(
        t("x", shape.clone(), "float32"),
        vec![],
        vec![node(
            "relu",
            "aten.relu.default",
            vec![tp("x", shape.clone(), "float32", "x")],
            vec![t("relu", shape.clone(), "float32")],
            json!({}),
        )],
        t("relu", shape, "float32"),
    )
}

fn hash(path: &Path) -> Option<u64> {
    let b = std::fs::read(path).ok()?;
    let mut h = DefaultHasher::new();
    b.hash(&mut h);
    Some(h.finish())
}

/// True when some cause (a `: `-separated segment) appears twice.
fn repeats_a_cause(msg: &str) -> bool {
    let segs: Vec<&str> = msg.split(": ").map(str::trim).collect();
    segs.iter()
        .enumerate()
        .any(|(i, a)| a.len() > 6 && segs[i + 1..].contains(a))
}

/// Runs one case and checks the corpus contract; `want` must appear in the message.
fn refuse(class: &str, args: &[&str], want: &str) {
    let inputs: Vec<(PathBuf, Option<u64>)> = args
        .iter()
        .map(PathBuf::from)
        .filter(|p| p.is_file())
        .map(|p| {
            let h = hash(&p);
            (p, h)
        })
        .collect();
    let o = Command::new(env!("CARGO_BIN_EXE_npu"))
        .args(args)
        .output()
        .expect("npu runs");
    let err = String::from_utf8_lossy(&o.stderr);
    let code = o.status.code();
    assert!(
        code.is_some_and(|c| c != 0 && c != 101),
        "{class}: exit {code:?}, stderr: {err}"
    );
    assert!(!err.contains("panicked"), "{class}: {err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "{class}: one line expected, got: {err}");
    assert!(lines[0].starts_with("error: "), "{class}: {err}");
    assert!(
        lines[0].contains(want),
        "{class}: expected '{want}' in: {err}"
    );
    assert!(
        !repeats_a_cause(lines[0]),
        "{class}: a cause repeats: {err}"
    );
    for (p, h) in inputs {
        assert_eq!(hash(&p), h, "{class}: {} changed", p.display());
    }
}

#[test]
fn ir_json_classes() {
    let d = Dir::new("ir");
    let mlp = std::fs::read_to_string(fixture("mlp/model.ir.json")).unwrap();
    let o = d.path("o.npubin");
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "garbage",
            "{\"graph_inputs\": [".into(),
            "malformed IR JSON at line 1",
        ),
        (
            "truncated",
            mlp[..mlp.len() / 2].into(),
            "malformed IR JSON",
        ),
        (
            "top-level array",
            "[1, 2]".into(),
            "expected an object at the top level",
        ),
        ("empty file", "".into(), "found nothing"),
        ("binary", "\u{0}\u{1}\u{2}".into(), "expected an object"),
        (
            "missing field",
            mlp.replace("\"weight_name_mapping\"", "\"weight_mapping\""),
            "unknown field `weight_mapping`",
        ),
        (
            "nan shape",
            mlp.replacen("\"shape\": [\n        2,", "\"shape\": [\n        NaN,", 1),
            "invalid type: NaN, expected i64",
        ),
        (
            "unknown dtype",
            mlp.replacen("\"float32\"", "\"complex64\"", 1),
            "unknown dtype 'complex64'",
        ),
        (
            "wrong producer",
            mlp.replacen(
                "\"producer_node\": \"x\"",
                "\"producer_node\": \"nowhere\"",
                1,
            ),
            "refers to producer 'nowhere'",
        ),
        (
            "shape wraps to zero",
            relu_graph(json!([4294967296u64, 4294967296u64])),
            "tensor 'x' float32[4294967296, 4294967296] is too large",
        ),
        (
            "dim i64::MAX",
            relu_graph(json!([i64::MAX])),
            "is too large: its size in bytes overflows",
        ),
        (
            "2^40 elements",
            relu_graph(json!([1u64 << 20, 1u64 << 20])),
            "more than the memory limit",
        ),
        (
            "rank 9",
            relu_graph(json!([1, 1, 1, 1, 1, 1, 1, 1, 2])),
            "node 'relu' (aten.relu.default): tensor 'x' has rank 9",
        ),
        (
            "unicode names",
            mlp.replacen(
                "\"producer_node\": \"x\"",
                "\"producer_node\": \"\u{202e}x\u{1F600}\"",
                1,
            ),
            "refers to producer",
        ),
    ];
    for (class, text, want) in cases {
        let model = d.file("model.ir.json", &text);
        refuse(class, &["compile", &model, "-o", &o], want);
        assert!(!Path::new(&o).exists(), "{class}: wrote an output");
    }
}

#[test]
fn check_and_compile_agree_and_name_the_node_at_fault() {
    let d = Dir::new("shapes");
    let o = d.path("o.npubin");
    // linear K 16 vs 17, then gelu: the linear is named, not the gelu the fusion keeps.
    let lin = graph(
        t("x", json!([2, 16]), "float32"),
        vec![t("w", json!([8, 17]), "float32")],
        vec![
            node(
                "linear",
                "aten.linear.default",
                vec![
                    tp("x", json!([2, 16]), "float32", "x"),
                    t("w", json!([8, 17]), "float32"),
                ],
                vec![t("linear", json!([2, 8]), "float32")],
                json!({}),
            ),
            node(
                "gelu",
                "aten.gelu.default",
                vec![tp("linear", json!([2, 8]), "float32", "linear")],
                vec![t("gelu", json!([2, 8]), "float32")],
                json!({}),
            ),
        ],
        t("gelu", json!([2, 8]), "float32"),
    );
    let softmax = graph(
        t("x", json!([2, 3]), "float32"),
        vec![],
        vec![node(
            "softmax",
            "aten._softmax.default",
            vec![tp("x", json!([2, 3]), "float32", "x")],
            vec![t("softmax", json!([2, 3]), "float32")],
            json!({"dim": 7, "half_to_float": false}),
        )],
        t("softmax", json!([2, 3]), "float32"),
    );
    for (class, text, want) in [
        ("linear K mismatch", lin, "node 'linear' (aten.linear.default): linear: x [2, 16] has K=16, weight [8, 17] has K=17"),
        ("softmax dim 7 of rank 2", softmax, "node 'softmax' (aten._softmax.default): softmax dim 7 is out of range for rank 2"),
    ] {
        let model = d.file("m.ir.json", &text);
        refuse(class, &["compile", &model, "-o", &o], want);
        let c = Command::new(env!("CARGO_BIN_EXE_npu"))
            .args(["check", &model])
            .output()
            .unwrap();
        assert_eq!(c.status.code(), Some(1), "{class}: check must refuse too");
        assert!(String::from_utf8_lossy(&c.stdout).contains(want), "{class}");
    }
}

/// Compiles the MLP fixture for the CPU into `d`.
fn mlp_program(d: &Dir) -> String {
    let p = d.path("mlp.npubin");
    let o = Command::new(env!("CARGO_BIN_EXE_npu"))
        .args([
            "compile",
            &fixture("mlp/model.ir.json").display().to_string(),
            "-o",
            &p,
            "--target",
            "cpu",
            "--dtype",
            "f32",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    p
}

#[test]
fn npubin_and_safetensors_classes() {
    let d = Dir::new("files");
    let prog = mlp_program(&d);
    let good = std::fs::read(&prog).unwrap();
    let weights = fixture("mlp/weights.safetensors").display().to_string();
    let io = fixture("mlp/io.safetensors").display().to_string();
    let mut long_dtype = good[..14].to_vec(); // magic, version, target length
    long_dtype.truncate(12);
    long_dtype.extend(3u16.to_le_bytes());
    long_dtype.extend(b"cpu");
    long_dtype.push(255);
    long_dtype.extend((0..255u8).map(|i| i | 0x80));
    long_dtype.extend([0; 12]);
    let mut flipped = good.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 0x40;
    let npubins: Vec<(&str, Vec<u8>, &str)> = vec![
        ("not an npubin", b"hello".to_vec(), "not an .npubin file"),
        (
            "truncated npubin",
            good[..good.len() / 2].to_vec(),
            "truncated .npubin",
        ),
        ("flipped payload byte", flipped, "payload checksum mismatch"),
        (
            "raw bytes in the header",
            long_dtype,
            "unknown compute dtype (hex 8081",
        ),
    ];
    for (class, bytes, want) in npubins {
        let p = d.file("bad.npubin", bytes);
        refuse(class, &["describe", &p], want);
        refuse(
            class,
            &["run", &p, "--weights", &weights, "--inputs", &io],
            want,
        );
    }
    let st_good = std::fs::read(fixture("mlp/weights.safetensors")).unwrap();
    let x = HostTensor::from_f32(vec![2, 16], &[0.5; 32]);
    let sts: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "safetensors garbage",
            b"\xff\xff\xff\xff\xff\xff\xff\xff{".to_vec(),
            "not a valid safetensors file",
        ),
        (
            "safetensors truncated",
            st_good[..st_good.len() - 100].to_vec(),
            "not a valid safetensors file",
        ),
        (
            "wrong weight name",
            safetensors_bytes(&[("fc9.weight".into(), x.clone())]).unwrap(),
            "is missing from",
        ),
        (
            "wrong weight dtype",
            {
                let mut all =
                    npu_runtime::read_safetensors(&fixture("mlp/weights.safetensors")).unwrap();
                for (k, t) in &mut all {
                    if k == "fc1.weight" {
                        *t = HostTensor::from_i64(vec![32, 16], &[1; 512]);
                    }
                }
                safetensors_bytes(&all).unwrap()
            },
            "weight 'fc1.weight' in",
        ),
    ];
    for (class, bytes, want) in sts {
        let w = d.file("bad.safetensors", bytes);
        refuse(
            class,
            &["run", &prog, "--weights", &w, "--inputs", &io],
            want,
        );
    }
    let ins: Vec<(&str, Named, &str)> = vec![
        (
            "wrong input name",
            vec![("y".into(), x.clone())],
            "input 'x' float32[2, 16] is not in",
        ),
        (
            "wrong input dtype",
            vec![("x".into(), HostTensor::from_i64(vec![2, 16], &[1; 32]))],
            "input 'x': expected float32[2, 16], got int64[2, 16]",
        ),
        (
            "wrong input shape",
            vec![("x".into(), HostTensor::from_f32(vec![16, 2], &[0.0; 32]))],
            "input 'x': expected float32[2, 16], got float32[16, 2]",
        ),
    ];
    for (class, tensors, want) in ins {
        let i = d.file("in.safetensors", safetensors_bytes(&tensors).unwrap());
        refuse(
            class,
            &["run", &prog, "--weights", &weights, "--inputs", &i],
            want,
        );
    }
}

#[test]
fn token_ids_and_hostile_arguments() {
    let d = Dir::new("args");
    let compile = |ir: &str, out: &str| {
        let o = Command::new(env!("CARGO_BIN_EXE_npu"))
            .args([
                "compile",
                &fixture(ir).display().to_string(),
                "-o",
                out,
                "--target",
                "cpu",
                "--dtype",
                "f32",
            ])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    let (pre, dec) = (d.path("prefill.npubin"), d.path("decode.npubin"));
    compile("qwen2.5-tiny/prefill.ir.json", &pre);
    compile("qwen2.5-tiny/decode.ir.json", &dec);
    let w = fixture("qwen2.5-tiny/weights.safetensors")
        .display()
        .to_string();
    let gen = |extra: &[&str]| {
        let mut a = vec![
            "generate",
            "--prefill",
            &pre,
            "--decode",
            &dec,
            "--weights",
            &w,
        ];
        a.extend_from_slice(extra);
        a.iter().map(|s| s.to_string()).collect::<Vec<_>>()
    };
    let cases: Vec<(&str, Vec<String>, &str)> = vec![
        (
            "max-new-tokens u64::MAX",
            gen(&[
                "--prompt-ids",
                "1,2",
                "--max-new-tokens",
                "18446744073709551615",
            ]),
            "exceed the cache of 64 slots",
        ),
        (
            "token id past the vocabulary",
            gen(&["--prompt-ids", "1,99999999"]),
            "99999999",
        ),
        ("negative token id", gen(&["--prompt-ids", "1,-5"]), "-5"),
        (
            "a non-number token id",
            gen(&["--prompt-ids", "1,x"]),
            "invalid value 'x'",
        ),
        (
            "max-memory too small",
            {
                let mut a = gen(&["--prompt-ids", "1"]);
                a.extend(["--max-memory".into(), "1K".into()]);
                a
            },
            "more than the memory limit of 1024 bytes",
        ),
        (
            "max-memory nonsense",
            gen(&["--prompt-ids", "1", "--max-memory", "lots"]),
            "'lots' is not a size",
        ),
        (
            "unknown target",
            vec![
                "check".into(),
                fixture("mlp/model.ir.json").display().to_string(),
                "--target".into(),
                "../../etc/passwd".into(),
            ],
            "unknown target '../../etc/passwd'",
        ),
        (
            "unknown backend",
            vec![
                "run".into(),
                pre.clone(),
                "--weights".into(),
                w.clone(),
                "--backend".into(),
                "tpu".into(),
            ],
            "unknown backend 'tpu'",
        ),
        (
            "missing file",
            vec!["describe".into(), d.path("absent.npubin")],
            "cannot read",
        ),
        (
            "unknown subcommand",
            vec!["explode".into()],
            "unrecognized subcommand 'explode'",
        ),
    ];
    for (class, args, want) in cases {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        refuse(class, &a, want);
    }
}

#[test]
fn outputs_never_replace_inputs() {
    let d = Dir::new("alias");
    let model = d.file(
        "m.ir.json",
        std::fs::read(fixture("mlp/model.ir.json")).unwrap(),
    );
    let prog = mlp_program(&d);
    let weights = d.file(
        "w.safetensors",
        std::fs::read(fixture("mlp/weights.safetensors")).unwrap(),
    );
    let io = d.file(
        "io.safetensors",
        std::fs::read(fixture("mlp/io.safetensors")).unwrap(),
    );
    #[cfg(unix)]
    let link = {
        let l = d.path("link.safetensors");
        std::fs::hard_link(&weights, &l).unwrap();
        l
    };
    #[cfg(not(unix))]
    let link = weights.clone();
    let run = |out: &str| -> Vec<String> {
        [
            "run",
            &prog,
            "--weights",
            &weights,
            "--inputs",
            &io,
            "--outputs",
            out,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let dotted = format!("{}/./m.ir.json", d.0.display());
    let cases: Vec<(&str, Vec<String>, &str)> = vec![
        (
            "compile onto its model",
            vec!["compile".into(), model.clone(), "-o".into(), model.clone()],
            "is the model",
        ),
        (
            "compile onto its model, another spelling",
            vec!["compile".into(), model.clone(), "-o".into(), dotted],
            "is the model",
        ),
        ("outputs onto the inputs", run(&io), "is the inputs"),
        ("outputs onto the weights", run(&weights), "is the weights"),
        ("outputs onto the program", run(&prog), "is the program"),
        (
            "outputs onto a hard link of the weights",
            run(&link),
            "is the weights",
        ),
        (
            "outputs onto the IR",
            {
                let mut a = run(&model);
                a[1] = model.clone();
                a
            },
            "is the program",
        ),
        (
            "an unwritable output",
            vec![
                "compile".into(),
                model.clone(),
                "-o".into(),
                d.path("no/such/dir/x.npubin"),
            ],
            "cannot write",
        ),
    ];
    for (class, args, want) in cases {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        refuse(class, &a, want);
    }
    // A failed write names the real path (never the temporary) and the cause once.
    let o = Command::new(env!("CARGO_BIN_EXE_npu"))
        .args(["compile", &model, "-o", &d.path("no/such/dir/x.npubin")])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("no/such/dir/x.npubin: No such file or directory"),
        "{err}"
    );
    assert!(!err.contains(".tmp"), "{err}");
    // And a good write replaces an old output atomically.
    let out = d.file("out.npubin", b"old");
    let o = Command::new(env!("CARGO_BIN_EXE_npu"))
        .args(["compile", &model, "-o", &out, "--target", "cpu"])
        .output()
        .unwrap();
    assert!(o.status.success());
    assert!(std::fs::read(&out).unwrap().starts_with(b"NPUBIN"));
    let leftovers = std::fs::read_dir(&d.0)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .contains(".tmp")
        })
        .count();
    assert_eq!(leftovers, 0);
}
