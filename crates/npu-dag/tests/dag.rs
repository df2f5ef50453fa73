//! Mixed NPU + CPU execution through the DAG executor, against PyTorch and against the
//! single-program executor.

use npu_compiler::partition::{partition, place_for_target, Device, PartitionPlan};
use npu_compiler::{target, CompileOptions, Target};
use npu_dag::dag::DagExecutor;
use npu_ir::{DType, Graph};
use npu_runtime::{read_safetensors, Backend, CpuBackend, HostTensor, SafetensorsFile};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use npu_runtime::compare::{argmax, pearson, top5};

fn fixture(dir: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures")
        .join(dir)
}

fn io(path: &Path) -> HashMap<String, HostTensor> {
    read_safetensors(path).unwrap().into_iter().collect()
}

fn plan(graph: &Graph, tgt: &Target, force_cpu: &[&str]) -> PartitionPlan {
    let force: Vec<String> = force_cpu.iter().map(|s| s.to_string()).collect();
    partition(graph, place_for_target(graph, tgt, &force))
}

fn dag(
    ir: &Path,
    weights: &SafetensorsFile,
    tgt: &'static Target,
    dtype: DType,
    force_cpu: &[&str],
) -> DagExecutor {
    let graph = npu_ir::load(ir).unwrap();
    let plan = plan(&graph, tgt, force_cpu);
    let opts = CompileOptions {
        target: tgt,
        dtype: Some(dtype),
    };
    DagExecutor::new(graph, plan, &CpuBackend::new(), weights, &opts).unwrap()
}

fn devices(d: &DagExecutor) -> Vec<Device> {
    d.plan().partitions.iter().map(|p| p.device).collect()
}

#[test]
fn all_npu_graph_through_the_dag_equals_the_single_program() {
    let dir = fixture("small-cnn");
    let w = SafetensorsFile::open(&dir.join("weights.safetensors")).unwrap();
    let io = io(&dir.join("io.safetensors"));
    let x = &io["input.x"];
    let mut d = dag(
        &dir.join("model.ir.json"),
        &w,
        &target::NPU,
        DType::F16,
        &[],
    );
    assert_eq!(devices(&d), [Device::Npu]);
    assert_eq!(d.plan().transfers().count(), 0);
    let got = d.run_all(&[("x", x)]).unwrap();
    let graph = npu_ir::load(&dir.join("model.ir.json")).unwrap();
    let opts = CompileOptions {
        target: &target::NPU,
        dtype: Some(DType::F16),
    };
    let (p, _) = npu_compiler::compile(graph, &opts).unwrap();
    let want = CpuBackend::new()
        .prepare(&p, &w)
        .unwrap()
        .run_all(&[("x", x)])
        .unwrap();
    assert_eq!(got, want, "same program, same bits");
}

#[test]
fn resnet18_with_pools_forced_to_cpu_matches_pytorch() {
    let root = std::env::var_os("NPU_TEST_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/test-models")
        });
    let dir = root.join("resnet18");
    if !dir.join("weights.safetensors").exists() {
        let required = std::env::var("NPU_REQUIRE_MODELS").is_ok_and(|v| v == "1");
        assert!(!required, "{}: no export", dir.display());
        println!(
            "SKIP: resnet18_with_pools_forced_to_cpu_matches_pytorch: no export in {}",
            dir.display()
        );
        return;
    }
    let w = SafetensorsFile::open(&dir.join("weights.safetensors")).unwrap();
    let io = io(&dir.join("io.safetensors"));
    let x = &io["input.x"];
    let want = io.iter().find(|(k, _)| k.starts_with("output.")).unwrap().1;
    for force in ["max_pool2d", "adaptive_avg_pool2d"] {
        for (tgt, dt) in [(&target::NPU, DType::F16), (&target::CPU, DType::F32)] {
            let mut d = dag(&dir.join("model.ir.json"), &w, tgt, dt, &[force]);
            assert_eq!(
                devices(&d),
                [Device::Npu, Device::Cpu, Device::Npu],
                "{force}: {}",
                d.plan().to_text(d.graph())
            );
            assert_eq!(d.plan().transfers().count(), 2);
            let out = d.run_all(&[("x", x)]).unwrap();
            let (g, wv) = (out[0].1.to_f32_vec(), want.to_f32_vec());
            let r = pearson(&g, &wv);
            assert!(r > 0.99, "{force} {dt}: pearson {r}");
            assert_eq!(argmax(&g), argmax(&wv), "{force} {dt}: argmax");
            assert_eq!(top5(&g), top5(&wv), "{force} {dt}: top-5");
            eprintln!("resnet18, {force} on cpu, {dt}: pearson {r:.6}, argmax and top-5 equal");
        }
    }
}

/// Prefill + 32 greedy decode steps of qwen2.5-tiny in f32 through DAG executors sharing
/// one device state; returns the generated tokens.
fn qwen_tiny_tokens(force_cpu: &[&str]) -> (Vec<i64>, usize) {
    let dir = fixture("qwen2.5-tiny");
    let w = SafetensorsFile::open(&dir.join("weights.safetensors")).unwrap();
    let io = io(&dir.join("io.safetensors"));
    let mut pre = dag(
        &dir.join("prefill.ir.json"),
        &w,
        &target::CPU,
        DType::F32,
        force_cpu,
    );
    let mut dec = dag(
        &dir.join("decode.ir.json"),
        &w,
        &target::CPU,
        DType::F32,
        force_cpu,
    );
    let cpu_parts = dec.plan().count(Device::Cpu);
    let mut state = pre.new_state();
    let names: Vec<String> = pre
        .graph()
        .inputs
        .iter()
        .map(|&v| pre.graph().value(v).name.clone())
        .filter(|n| !pre.state_inputs().contains(n))
        .collect();
    let args: Vec<(&str, &HostTensor)> = names
        .iter()
        .map(|n| (n.as_str(), &io[&format!("prefill.input.{n}")]))
        .collect();
    let out = pre.run(&args, state.as_mut()).unwrap();
    assert_eq!(out.len(), 1, "only the logits leave the device");
    let mut tok = argmax(&out[0].1.to_f32_vec()) as i64;
    let mut toks = Vec::new();
    for step in 0..32 {
        let get = |n: &str| &io[&format!("decode.{step}.input.{n}")];
        let ids = HostTensor::from_i64(vec![1, 1], &[tok]);
        let out = dec
            .run(
                &[
                    ("input_ids", &ids),
                    ("attention_mask", get("attention_mask")),
                    ("position_ids", get("position_ids")),
                    ("cache_position", get("cache_position")),
                ],
                state.as_mut(),
            )
            .unwrap();
        tok = argmax(&out[0].1.to_f32_vec()) as i64;
        toks.push(tok);
    }
    (toks, cpu_parts)
}

#[test]
fn qwen_tiny_with_softmax_on_cpu_generates_the_all_npu_tokens() {
    let (npu, none) = qwen_tiny_tokens(&[]);
    assert_eq!(none, 0);
    let (mixed, cpu_parts) = qwen_tiny_tokens(&["softmax"]);
    assert_eq!(cpu_parts, 2, "one CPU softmax per layer");
    assert_eq!(mixed, npu);
    let io = io(&fixture("qwen2.5-tiny").join("io.safetensors"));
    assert_eq!(mixed, io["greedy.tokens"].to_i64_vec(), "and PyTorch's");
}

#[test]
fn missing_and_unknown_inputs_are_named() {
    let dir = fixture("small-cnn");
    let w = SafetensorsFile::open(&dir.join("weights.safetensors")).unwrap();
    let mut d = dag(
        &dir.join("model.ir.json"),
        &w,
        &target::NPU,
        DType::F32,
        &["relu"],
    );
    let e = d.run_all(&[]).unwrap_err().to_string();
    assert!(e.contains("missing input 'x'"), "{e}");
    let t = HostTensor::from_f32(vec![1], &[1.0]);
    let e = d.run_all(&[("nope", &t)]).unwrap_err().to_string();
    assert!(e.contains("unknown input 'nope'"), "{e}");
}

#[test]
fn bert_tiny_runs_partitioned_and_matches_pytorch() {
    let dir = fixture("bert-tiny");
    let w = SafetensorsFile::open(&dir.join("weights.safetensors")).unwrap();
    let io = io(&dir.join("io.safetensors"));
    let names = ["input_ids", "attention_mask", "token_type_ids"];
    let args: Vec<(&str, &HostTensor)> = names
        .iter()
        .map(|n| (*n, &io[&format!("input.{n}")]))
        .collect();
    for (tgt, dt) in [(&target::NPU, DType::F16), (&target::CPU, DType::F32)] {
        let mut d = dag(&dir.join("model.ir.json"), &w, tgt, dt, &[]);
        // The NPU set lacks arange, comparisons, boolean logic, index and SDPA with a
        // boolean mask: those run on the CPU fallback, the rest (embeddings, linears,
        // layer norms, GELU) on the NPU.
        let plan = d.plan();
        assert!(plan.count(Device::Cpu) >= 1 && plan.count(Device::Npu) >= 1);
        let (name, got) = d.run_all(&args).unwrap().remove(0);
        let want = &io[&format!("output.{name}")];
        assert_eq!(got.shape(), want.shape());
        let (g, wv) = (got.to_f32_vec(), want.to_f32_vec());
        let r = pearson(&g, &wv);
        assert!(r > 0.99, "bert-tiny {dt}: pearson {r}");
        let rows = *want.shape().last().unwrap();
        let agree = g
            .chunks(rows)
            .zip(wv.chunks(rows))
            .filter(|(a, b)| argmax(a) == argmax(b))
            .count();
        eprintln!(
            "bert-tiny {dt}: {} partitions, pearson {r:.6}, argmax equal at {agree}/{} positions",
            d.plan().partitions.len(),
            g.len() / rows
        );
        assert!(
            agree * 10 >= (g.len() / rows) * 9,
            "{dt}: argmax agreement {agree}"
        );
    }
}

/// A hand-written graph: x (bf16) -> relu [npu] -> neg [cpu] -> mul(., x) [npu], and
/// ids (int64) -> add 1 [cpu] -> mul 3 [npu]; the CPU-made values are outputs too.
fn mixed_dtype_graph() -> Graph {
    let t = |name: &str, shape: &[usize], dt: &str, prod: Option<&str>| {
        let mut m = serde_json::json!({"name": name, "shape": shape, "dtype": dt});
        if let Some(p) = prod {
            m["producer_node"] = p.into();
            m["producer_output_idx"] = 0.into();
        }
        m
    };
    let x = t("x", &[2, 8], "torch.bfloat16", Some("x"));
    let ids = t("ids", &[3], "torch.int64", Some("ids"));
    let relu = t("relu", &[2, 8], "torch.bfloat16", Some("relu"));
    let neg = t("neg", &[2, 8], "torch.bfloat16", Some("neg"));
    let mul = t("mul", &[2, 8], "torch.bfloat16", Some("mul"));
    let add = t("add", &[3], "torch.int64", Some("add"));
    let mul1 = t("mul_1", &[3], "torch.int64", Some("mul_1"));
    let node = |name: &str,
                op: &str,
                ins: Vec<&serde_json::Value>,
                out: &serde_json::Value,
                attrs| {
        serde_json::json!({"name": name, "op_type": op, "inputs": ins, "outputs": [out], "attrs": attrs})
    };
    let ir = serde_json::json!({
        "model_name": "mixed", "pytorch_version": "2.11.0",
        "graph_inputs": [x, ids], "graph_outputs": [mul, neg, mul1, add],
        "weights": [], "weight_name_mapping": {},
        "nodes": [
            node("relu", "aten.relu.default", vec![&x], &relu, serde_json::json!({})),
            node("neg", "aten.neg.default", vec![&relu], &neg, serde_json::json!({})),
            node("mul", "aten.mul.Tensor", vec![&neg, &x], &mul, serde_json::json!({})),
            node("add", "aten.add.Tensor", vec![&ids], &add, serde_json::json!({"other": 1})),
            node("mul_1", "aten.mul.Tensor", vec![&add], &mul1, serde_json::json!({"other": 3})),
        ],
    });
    npu_ir::parse_str(&ir.to_string()).unwrap()
}

#[test]
fn values_keep_their_dtype_across_devices() {
    let graph = mixed_dtype_graph();
    let plan = plan(&graph, &target::CPU, &["neg", "add"]);
    assert!(plan.count(Device::Cpu) >= 1 && plan.count(Device::Npu) >= 1);
    assert!(plan.transfers().count() >= 2);
    let opts = CompileOptions {
        target: &target::CPU,
        dtype: Some(DType::BF16),
    };
    let w = npu_runtime::MemoryWeights::default();
    let mut d = DagExecutor::new(graph, plan, &CpuBackend::new(), &w, &opts).unwrap();
    let xs: Vec<f32> = (0..16).map(|i| (i as f32 - 7.5) * 0.37).collect();
    let x = HostTensor::from_f32_as(DType::BF16, vec![2, 8], &xs);
    let ids = HostTensor::from_i64(vec![3], &[5, 1 << 40, -2]);
    let out = d.run_all(&[("x", &x), ("ids", &ids)]).unwrap();
    let by: HashMap<&str, &HostTensor> = out.iter().map(|(n, t)| (n.as_str(), t)).collect();
    for n in ["mul", "neg"] {
        assert_eq!(by[n].dtype(), DType::BF16, "{n}");
    }
    for n in ["add", "mul_1"] {
        assert_eq!(by[n].dtype(), DType::I64, "{n}");
    }
    // Integers beyond 2^24 survive exactly (no float round trip).
    assert_eq!(by["mul_1"].to_i64_vec(), [18, ((1i64 << 40) + 1) * 3, -3]);
    let xv = x.to_f32_vec();
    let want: Vec<f32> = xv.iter().map(|&v| -v.max(0.0) * v).collect();
    let want = HostTensor::from_f32_as(DType::BF16, vec![2, 8], &want);
    assert_eq!(by["mul"].to_f32_vec(), want.to_f32_vec());
}

/// x [2, 8] -> split(4, dim 1) -> getitem 0, getitem 1 (each reading both split results, as
/// torch_ir writes them); neg(getitem 1); add(getitem 0, neg).
fn split_graph() -> Graph {
    let t = |name: &str, shape: &[usize], prod: Option<(&str, usize)>| {
        let mut m = serde_json::json!({"name": name, "shape": shape, "dtype": "torch.float32"});
        if let Some((p, i)) = prod {
            m["producer_node"] = p.into();
            m["producer_output_idx"] = i.into();
        }
        m
    };
    let x = t("x", &[2, 8], Some(("x", 0)));
    let (s0, s1) = (
        t("split_0", &[2, 4], Some(("split", 0))),
        t("split_1", &[2, 4], Some(("split", 1))),
    );
    let g0 = t("getitem", &[2, 4], Some(("getitem", 0)));
    let g1 = t("getitem_1", &[2, 4], Some(("getitem_1", 0)));
    let neg = t("neg", &[2, 4], Some(("neg", 0)));
    let add = t("add", &[2, 4], Some(("add", 0)));
    let ir = serde_json::json!({
        "model_name": "split", "pytorch_version": "2.11.0",
        "graph_inputs": [x], "graph_outputs": [add], "weights": [], "weight_name_mapping": {},
        "nodes": [
            {"name": "split", "op_type": "aten.split.Tensor", "inputs": [x], "outputs": [s0, s1],
             "attrs": {"split_size": 4, "dim": 1}},
            {"name": "getitem", "op_type": "<built-in function getitem>", "inputs": [s0, s1],
             "outputs": [g0], "attrs": {"index": 0}},
            {"name": "getitem_1", "op_type": "<built-in function getitem>", "inputs": [s0, s1],
             "outputs": [g1], "attrs": {"index": 1}},
            {"name": "neg", "op_type": "aten.neg.default", "inputs": [g1], "outputs": [neg], "attrs": {}},
            {"name": "add", "op_type": "aten.add.Tensor", "inputs": [g0, neg], "outputs": [add], "attrs": {}},
        ],
    });
    npu_ir::parse_str(&ir.to_string()).unwrap()
}

#[test]
fn second_output_of_a_multi_output_node_crosses_devices() {
    let xs: Vec<f32> = (0..16).map(|i| i as f32 * 0.5 - 3.0).collect();
    let x = HostTensor::from_f32(vec![2, 8], &xs);
    let want: Vec<f32> = (0..2)
        .flat_map(|r| (0..4).map(move |c| (r, c)))
        .map(|(r, c)| xs[r * 8 + c] - xs[r * 8 + 4 + c])
        .collect();
    // split on the NPU with its second result read on the CPU, and the other way round.
    for force in ["neg", "split"] {
        let graph = split_graph();
        let plan = plan(&graph, &target::CPU, &[force]);
        assert_eq!(plan.partitions.len(), if force == "neg" { 3 } else { 2 });
        let opts = CompileOptions {
            target: &target::CPU,
            dtype: Some(DType::F32),
        };
        let w = npu_runtime::MemoryWeights::default();
        let mut d = DagExecutor::new(graph, plan, &CpuBackend::new(), &w, &opts).unwrap();
        let out = d.run_all(&[("x", &x)]).unwrap();
        assert_eq!(out[0].1.to_f32_vec(), want, "{force} on the CPU");
    }
}

/// PyTorch's reference values of one fallback case (fixtures/fallback/refs-core.safetensors).
fn core_case(case: &str) -> (Graph, HashMap<String, HostTensor>) {
    let graph = npu_ir::load(&fixture(&format!("fallback/{case}.ir.json"))).unwrap();
    let prefix = format!("{case}.");
    let refs = io(&fixture("fallback/refs-core.safetensors"))
        .into_iter()
        .filter_map(|(k, v)| k.strip_prefix(&prefix).map(|k| (k.to_string(), v)))
        .collect();
    (graph, refs)
}

/// Softmax/log_softmax/sum/mean over dim 0 or -1 of a 0-d tensor compile for the NPU (they
/// panicked in `lower/views.rs` or failed "reduce dim out of range"), next to CPU nodes.
#[test]
fn zero_dim_softmax_and_reductions_compile_and_match_pytorch() {
    let (graph, refs) = core_case("zero_dim");
    let plan = plan(&graph, &target::NPU, &[]);
    for (node, p) in graph.nodes.iter().zip(&plan.placements) {
        if matches!(node.op, npu_ir::Op::Softmax { .. } | npu_ir::Op::Sum { .. }) {
            assert_eq!(p.device, Device::Npu, "{}", node.name);
        }
    }
    let opts = CompileOptions {
        target: &target::NPU,
        dtype: Some(DType::F32),
    };
    let mut d = DagExecutor::new(
        graph,
        plan,
        &CpuBackend::new(),
        &npu_runtime::MemoryWeights::default(),
        &opts,
    )
    .unwrap();
    let x = &refs["input.xs_0"];
    let mut state = d.new_state();
    let outs = d.run(&[("xs_0", x)], state.as_mut()).unwrap();
    for (name, got) in &outs {
        let want = &refs[&format!("output.{name}")];
        assert_eq!(got.shape(), want.shape(), "{name}");
        for (a, b) in got.to_f32_vec().iter().zip(want.to_f32_vec()) {
            assert!(
                (a - b).abs() <= 1e-6 * b.abs().max(1.0),
                "{name}: {a} vs {b}"
            );
        }
    }
}

/// A batch_norm whose statistics are graph inputs runs on the CPU fallback, not the NPU.
#[test]
fn batch_norm_with_input_statistics_falls_back_and_matches_pytorch() {
    let (graph, refs) = core_case("bn_stats_inputs");
    let plan = plan(&graph, &target::NPU, &[]);
    let bn = graph
        .nodes
        .iter()
        .position(|n| matches!(n.op, npu_ir::Op::BatchNorm { .. }))
        .unwrap();
    assert_eq!(plan.placements[bn].device, Device::Cpu);
    let opts = CompileOptions {
        target: &target::NPU,
        dtype: Some(DType::F32),
    };
    let names: Vec<String> = graph
        .inputs
        .iter()
        .map(|v| graph.value(*v).name.clone())
        .collect();
    let mut d = DagExecutor::new(
        graph,
        plan,
        &CpuBackend::new(),
        &npu_runtime::MemoryWeights::default(),
        &opts,
    )
    .unwrap();
    let inputs: Vec<(&str, &HostTensor)> = names
        .iter()
        .map(|n| (n.as_str(), &refs[&format!("input.{n}")]))
        .collect();
    let mut state = d.new_state();
    let outs = d.run(&inputs, state.as_mut()).unwrap();
    let want = refs[&format!("output.{}", outs[0].0)].to_f32_vec();
    for (a, b) in outs[0].1.to_f32_vec().iter().zip(want) {
        assert!((a - b).abs() <= 1e-5 * b.abs().max(1.0), "{a} vs {b}");
    }
}
