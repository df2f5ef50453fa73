//! End to end on a backend: the committed fixtures (graphs exported from PyTorch, with their
//! inputs and PyTorch's outputs, `fixtures/`) decomposed, partitioned and run through the DAG
//! executor, whose NPU partitions run on the backend under test and the rest on the CPU
//! fallback. Classifiers compare Pearson r, argmax and top-5 with PyTorch; the LMs generate
//! greedily (f32: the same tokens as PyTorch) or teacher-forced (bf16: each step's logits).

use npu_compiler::partition::Device;
use npu_compiler::{target, CompileOptions, Target};
use npu_dag::dag::DagExecutor;
use npu_ir::DType;
use npu_runtime::compare::{argmax, pearson, top5};
use npu_runtime::{read_safetensors, Backend, HostTensor, SafetensorsFile};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// What one model gave on one backend.
#[derive(Debug, Clone)]
pub struct ModelOutcome {
    pub name: String,
    /// Why the model did not run here (an export this machine does not have).
    pub skipped: Option<String>,
    /// The agreement measured, for the report.
    pub measured: String,
    pub error: Option<String>,
}

type Io = HashMap<String, HostTensor>;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")
}

/// The exports `scripts/make-test-models.sh` writes (too large to commit): `$NPU_TEST_MODELS`,
/// by default `target/test-models`.
fn test_models() -> PathBuf {
    std::env::var_os("NPU_TEST_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/test-models"))
}

fn load(d: &Path) -> Result<(SafetensorsFile, Io), String> {
    let w = SafetensorsFile::open(&d.join("weights.safetensors")).map_err(|e| e.to_string())?;
    let io = read_safetensors(&d.join("io.safetensors"))
        .map_err(|e| e.to_string())?
        .into_iter()
        .collect();
    Ok((w, io))
}

fn executor(
    backend: &dyn Backend,
    ir: &Path,
    weights: &SafetensorsFile,
    tgt: &'static Target,
    dtype: DType,
) -> Result<DagExecutor, String> {
    let graph = npu_ir::load(ir).map_err(|e| e.to_string())?;
    let opts = CompileOptions {
        target: tgt,
        dtype: Some(dtype),
    };
    DagExecutor::for_graph(graph, &[], backend, weights, &opts).map_err(|e| e.to_string())
}

/// The graph inputs that are not device state, fed from `io` under `prefix`.
fn feed<'a>(
    d: &DagExecutor,
    io: &'a Io,
    prefix: &str,
) -> Result<Vec<(String, &'a HostTensor)>, String> {
    let g = d.graph();
    g.inputs
        .iter()
        .map(|&v| g.value(v).name.clone())
        .filter(|n| !d.state_inputs().contains(n))
        .map(|n| {
            let key = format!("{prefix}{n}");
            let t = io.get(&key).ok_or(format!("fixture has no '{key}'"))?;
            Ok((n, t))
        })
        .collect()
}

/// A classifier (or any single-output graph): Pearson r over the output, and per row of the
/// last dim argmax and top-5 equal to PyTorch's.
fn classifier(
    backend: &dyn Backend,
    dir: &Path,
    tgt: &'static Target,
    dtype: DType,
    min_r: f64,
) -> Result<String, String> {
    let (w, io) = load(dir)?;
    let mut d = executor(backend, &dir.join("model.ir.json"), &w, tgt, dtype)?;
    let args = feed(&d, &io, "input.")?;
    let refs: Vec<(&str, &HostTensor)> = args.iter().map(|(n, t)| (n.as_str(), *t)).collect();
    let out = d.run_all(&refs).map_err(|e| e.to_string())?;
    let (name, got) = out.first().ok_or("no output")?;
    let want = io
        .get(&format!("output.{name}"))
        .ok_or(format!("fixture has no 'output.{name}'"))?;
    if got.shape() != want.shape() {
        return Err(format!(
            "shape {:?}, PyTorch {:?}",
            got.shape(),
            want.shape()
        ));
    }
    let (g, wv) = (got.to_f32_vec(), want.to_f32_vec());
    let r = pearson(&g, &wv);
    if r.is_nan() || r < min_r {
        return Err(format!("pearson r {r:.6} < {min_r}"));
    }
    let n = *want.shape().last().unwrap_or(&1);
    for (row, (a, b)) in g.chunks(n).zip(wv.chunks(n)).enumerate() {
        if argmax(a) != argmax(b) || (n >= 5 && top5(a) != top5(b)) {
            return Err(format!(
                "row {row}: argmax or top-5 differ from PyTorch (r {r:.6})"
            ));
        }
    }
    let (npu, cpu) = (d.plan().count(Device::Npu), d.plan().count(Device::Cpu));
    Ok(format!(
        "pearson r {r:.6}, argmax and top-5 equal ({npu} NPU + {cpu} CPU partitions)"
    ))
}

/// qwen2.5-tiny: prefill, then 32 decode steps sharing the device state (the KV cache). With
/// `teacher` each step is fed PyTorch's token and its logits compared (bf16); without, our own
/// argmax is fed and the tokens must be PyTorch's (f32).
fn qwen(backend: &dyn Backend, dtype: DType, teacher: bool) -> Result<String, String> {
    let dir = fixtures().join("qwen2.5-tiny");
    let (w, io) = load(&dir)?;
    let mut pre = executor(
        backend,
        &dir.join("prefill.ir.json"),
        &w,
        &target::CPU,
        dtype,
    )?;
    let mut dec = executor(
        backend,
        &dir.join("decode.ir.json"),
        &w,
        &target::CPU,
        dtype,
    )?;
    let mut state = pre.new_state();
    let args = feed(&pre, &io, "prefill.input.")?;
    let refs: Vec<(&str, &HostTensor)> = args.iter().map(|(n, t)| (n.as_str(), *t)).collect();
    let out = pre.run(&refs, state.as_mut()).map_err(|e| e.to_string())?;
    let mut tok = argmax(&out.first().ok_or("no prefill output")?.1.to_f32_vec()) as i64;
    let get = |k: String| io.get(&k).ok_or(format!("fixture has no '{k}'"));
    let want_logits = get("greedy.logits".into())?.to_f32_vec();
    let (mut toks, mut min_r, mut min_overlap) = (Vec::new(), 1f64, 5usize);
    for step in 0..32 {
        let ids = if teacher {
            get(format!("decode.{step}.input.input_ids"))?.clone()
        } else {
            HostTensor::from_i64(vec![1, 1], &[tok])
        };
        let mut args = vec![("input_ids".to_string(), &ids)];
        for n in ["attention_mask", "position_ids", "cache_position"] {
            args.push((n.to_string(), get(format!("decode.{step}.input.{n}"))?));
        }
        let refs: Vec<(&str, &HostTensor)> = args.iter().map(|(n, t)| (n.as_str(), *t)).collect();
        let out = dec.run(&refs, state.as_mut()).map_err(|e| e.to_string())?;
        let logits = out.first().ok_or("no decode output")?.1.to_f32_vec();
        tok = argmax(&logits) as i64;
        toks.push(tok);
        let v = logits.len();
        let want = want_logits
            .get(step * v..(step + 1) * v)
            .ok_or("fixture has too few logits")?;
        min_r = min_r.min(pearson(&logits, want));
        let (a, b) = (top5(&logits), top5(want));
        min_overlap = min_overlap.min(a.iter().filter(|x| b.contains(x)).count());
    }
    if teacher {
        if min_r.is_nan() || min_r < 0.99 || min_overlap < 4 {
            return Err(format!(
                "min per-step pearson r {min_r:.6}, min top-5 overlap {min_overlap}/5"
            ));
        }
        Ok(format!(
            "32 teacher-forced steps: min pearson r {min_r:.6}, min top-5 overlap {min_overlap}/5"
        ))
    } else {
        let want = get("greedy.tokens".into())?.to_i64_vec();
        if toks != want {
            return Err(format!("greedy tokens {toks:?}, PyTorch {want:?}"));
        }
        Ok(format!(
            "32 greedy tokens equal PyTorch's (min pearson r {min_r:.6})"
        ))
    }
}

/// What `exported` returns (as its measurement) for an export that is not there.
const SKIPPED: &str = "skipped: ";

/// A classifier from `test_models()` (ResNet-18, ImageNet-sized: the one export every backend
/// runs, software Vulkan included). Missing: skipped, or an error where `NPU_REQUIRE_MODELS=1`
/// (as CI sets it).
fn exported(
    backend: &dyn Backend,
    model: &str,
    tgt: &'static Target,
    dtype: DType,
) -> Result<String, String> {
    let dir = test_models().join(model);
    if !dir.join("weights.safetensors").exists() {
        let why = format!(
            "no export in {} (scripts/make-test-models.sh makes it)",
            dir.display()
        );
        if std::env::var("NPU_REQUIRE_MODELS").is_ok_and(|v| v == "1") {
            return Err(why);
        }
        return Ok(format!("{SKIPPED}{why}"));
    }
    classifier(backend, &dir, tgt, dtype, 0.99)
}

/// Every fixture model, and ResNet-18 from its export, on `backend`.
pub fn run_models(backend: &dyn Backend) -> Vec<ModelOutcome> {
    use DType::{BF16, F16, F32};
    type Run<'a> = Box<dyn Fn() -> Result<String, String> + 'a>;
    let b = backend;
    let runs: Vec<(&str, Run)> = vec![
        (
            "mlp f32",
            Box::new(move || classifier(b, &fixtures().join("mlp"), &target::CPU, F32, 0.999_999)),
        ),
        (
            "small-cnn npu f16",
            Box::new(move || {
                classifier(b, &fixtures().join("small-cnn"), &target::NPU, F16, 0.999)
            }),
        ),
        (
            "small-cnn gpu f16 (channels-last)",
            Box::new(move || {
                classifier(b, &fixtures().join("small-cnn"), &target::GPU, F16, 0.999)
            }),
        ),
        (
            "small-cnn npu f32",
            Box::new(move || {
                classifier(
                    b,
                    &fixtures().join("small-cnn"),
                    &target::NPU,
                    F32,
                    0.999_99,
                )
            }),
        ),
        (
            "small-cnn cpu f32",
            Box::new(move || {
                classifier(
                    b,
                    &fixtures().join("small-cnn"),
                    &target::CPU,
                    F32,
                    0.999_99,
                )
            }),
        ),
        (
            "small-cnn-b4 cpu bf16",
            Box::new(move || {
                classifier(
                    b,
                    &fixtures().join("small-cnn-b4"),
                    &target::CPU,
                    BF16,
                    0.99,
                )
            }),
        ),
        (
            "bert-tiny npu f32 (partitioned)",
            Box::new(move || {
                classifier(b, &fixtures().join("bert-tiny"), &target::NPU, F32, 0.999_9)
            }),
        ),
        (
            "llama-tiny cpu f32 (composite mask)",
            Box::new(move || {
                classifier(b, &fixtures().join("llama-tiny"), &target::CPU, F32, 0.999)
            }),
        ),
        (
            "resnet18 npu f16 (export)",
            Box::new(move || exported(b, "resnet18", &target::NPU, F16)),
        ),
        (
            "resnet18 gpu f16 (export, channels-last)",
            Box::new(move || exported(b, "resnet18", &target::GPU, F16)),
        ),
        (
            "resnet18 cpu f32 (export)",
            Box::new(move || exported(b, "resnet18", &target::CPU, F32)),
        ),
        (
            "qwen2.5-tiny f32 greedy",
            Box::new(move || qwen(b, F32, false)),
        ),
        (
            "qwen2.5-tiny bf16 teacher-forced",
            Box::new(move || qwen(b, BF16, true)),
        ),
    ];
    runs.into_iter()
        .map(|(name, run)| {
            let (measured, error) = match run() {
                Ok(m) => (m, None),
                Err(e) => (String::new(), Some(e)),
            };
            ModelOutcome {
                name: name.to_string(),
                skipped: measured
                    .starts_with(SKIPPED)
                    .then(|| measured[SKIPPED.len()..].to_string()),
                measured,
                error,
            }
        })
        .collect()
}
