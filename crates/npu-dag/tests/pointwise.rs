//! Every pointwise op of the table against PyTorch (fixtures/fallback/pointwise, written by
//! `python -m npu_export fallback-refs`): f32, bf16 and int64 cases with NaN, +-Inf, +-0,
//! negative values and rounding ties, through the CPU fallback interpreter and, where the NPU
//! target accepts the graph, compiled and run on the CPU backend. f32 within rtol 1e-3 /
//! atol 1e-4, bf16 within one bf16 ulp, ints and bools exact, NaN in the same places.

use npu_compiler::{target, CompileOptions};
use npu_dag::fallback::run_graph;
use npu_ir::{DType, Graph, Op};
use npu_runtime::{read_safetensors, Backend, CpuBackend, HostTensor, MemoryWeights};
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/fallback/pointwise")
}

fn refs() -> HashMap<String, HostTensor> {
    read_safetensors(&dir().join("refs.safetensors"))
        .unwrap()
        .into_iter()
        .collect()
}

fn cases() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir())
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.strip_suffix(".ir.json").map(str::to_string)
        })
        .collect();
    names.sort();
    names
}

fn close(dtype: DType, got: f32, want: f32) -> bool {
    if got.is_nan() || want.is_nan() {
        return got.is_nan() && want.is_nan();
    }
    if got == want {
        return true;
    }
    if got.is_infinite() || want.is_infinite() {
        return false;
    }
    let d = (got - want).abs();
    match dtype {
        DType::BF16 => d <= want.abs() / 128.0 + 1e-4,
        DType::F16 => d <= want.abs() / 1024.0 + 1e-4,
        _ => d <= 1e-4 + 1e-3 * want.abs(),
    }
}

/// Mismatches of `got` against PyTorch's `want`, one line each (at most 5 per output).
fn compare(
    what: &str,
    got: &[(String, HostTensor)],
    want: &HashMap<String, HostTensor>,
) -> Vec<String> {
    let mut bad = Vec::new();
    assert_eq!(got.len(), want.len(), "{what}: output count");
    for (name, g) in got {
        let w = &want[name];
        if g.shape() != w.shape() || g.dtype() != w.dtype() {
            bad.push(format!(
                "{what}/{name}: {}{:?}, PyTorch {}{:?}",
                g.dtype(),
                g.shape(),
                w.dtype(),
                w.shape()
            ));
            continue;
        }
        let mut n = 0;
        if w.dtype().is_float() {
            for (i, (a, b)) in g.to_f32_vec().iter().zip(w.to_f32_vec()).enumerate() {
                if !close(w.dtype(), *a, b) && n < 5 {
                    bad.push(format!("{what}/{name}[{i}]: got {a}, PyTorch {b}"));
                    n += 1;
                }
            }
        } else {
            for (i, (a, b)) in g.to_i64_vec().iter().zip(w.to_i64_vec()).enumerate() {
                if *a != b && n < 5 {
                    bad.push(format!("{what}/{name}[{i}]: got {a}, PyTorch {b}"));
                    n += 1;
                }
            }
        }
    }
    bad
}

fn inputs<'a>(
    graph: &Graph,
    case: &str,
    refs: &'a HashMap<String, HostTensor>,
) -> Vec<(String, &'a HostTensor)> {
    graph
        .inputs
        .iter()
        .map(|id| {
            let n = graph.value(*id).name.clone();
            let t = &refs[&format!("{case}.input.{n}")];
            (n, t)
        })
        .collect()
}

fn expected(case: &str, refs: &HashMap<String, HostTensor>) -> HashMap<String, HostTensor> {
    let prefix = format!("{case}.output.");
    refs.iter()
        .filter_map(|(k, v)| k.strip_prefix(&prefix).map(|n| (n.to_string(), v.clone())))
        .collect()
}

#[test]
fn fallback_matches_pytorch_for_every_pointwise_op() {
    let refs = refs();
    let names = cases();
    assert!(names.len() >= 30, "{names:?}");
    let mut bad = Vec::new();
    let mut seen = BTreeSet::new();
    for case in &names {
        let graph = npu_ir::load(&dir().join(format!("{case}.ir.json"))).unwrap();
        for n in &graph.nodes {
            assert!(
                !matches!(n.op, Op::Unknown { .. }),
                "{case}: {} is not typed",
                n.op_type
            );
            seen.insert(n.op.name());
        }
        let ins = inputs(&graph, case, &refs);
        let named: Vec<(&str, &HostTensor)> = ins.iter().map(|(n, t)| (n.as_str(), *t)).collect();
        match run_graph(&graph, &named, &MemoryWeights::default()) {
            Ok(outs) => bad.extend(compare(
                &format!("fallback {case}"),
                &outs,
                &expected(case, &refs),
            )),
            Err(e) => bad.push(format!("fallback {case}: {e}")),
        }
    }
    assert!(
        bad.is_empty(),
        "{} mismatches:\n{}",
        bad.len(),
        bad.join("\n")
    );
    // every row of the table has a PyTorch case
    let rows = npu_ir::UnaryOp::all()
        .iter()
        .map(|u| u.name())
        .chain(npu_ir::BinaryOp::all().iter().map(|b| b.name()))
        .chain(npu_ir::TernaryOp::all().iter().map(|t| t.name()))
        .map(str::to_string)
        .collect::<Vec<_>>();
    let covered = |r: &str| seen.contains(r) || seen.contains(&format!("{r}_scalar"));
    let missing: Vec<&String> = rows.iter().filter(|r| !covered(r)).collect();
    assert!(
        missing.is_empty(),
        "no PyTorch case for {missing:?}; seen {seen:?}"
    );
}

#[test]
fn compiled_npu_kernels_match_pytorch_for_every_pointwise_op() {
    let refs = refs();
    let mut bad = Vec::new();
    let mut compiled = 0;
    for case in cases() {
        let graph = npu_ir::load(&dir().join(format!("{case}.ir.json"))).unwrap();
        let refused: Vec<String> = graph
            .nodes
            .iter()
            .filter_map(|n| {
                target::NPU
                    .ir_node_unsupported(n, &graph)
                    .map(|r| format!("{}: {r}", n.name))
            })
            .collect();
        if case.ends_with("_i64") {
            // integer math would round in f32: every node goes to the exact CPU fallback
            assert!(
                !refused.is_empty(),
                "{case}: integer graph accepted by the NPU target"
            );
            for r in &refused {
                assert!(r.contains("integer"), "{case}: {r}");
            }
            continue;
        }
        assert!(refused.is_empty(), "{case}: {refused:?}");
        // The compute dtype is the graph's float dtype (a `where` mask input comes first).
        let dtype = graph
            .inputs
            .iter()
            .map(|&v| graph.ty(v).dtype)
            .find(|d| d.is_float())
            .unwrap_or(DType::F32);
        let opts = CompileOptions {
            target: &target::NPU,
            dtype: Some(dtype),
        };
        let (program, _) =
            npu_compiler::compile(graph.clone(), &opts).unwrap_or_else(|e| panic!("{case}: {e}"));
        let ins = inputs(&graph, &case, &refs);
        let named: Vec<(&str, &HostTensor)> = ins.iter().map(|(n, t)| (n.as_str(), *t)).collect();
        let outs = CpuBackend::new()
            .prepare(&program, &MemoryWeights::default())
            .unwrap()
            .run_all(&named)
            .unwrap_or_else(|e| panic!("{case}: {e}"));
        bad.extend(compare(
            &format!("compiled {case}"),
            &outs,
            &expected(&case, &refs),
        ));
        compiled += 1;
    }
    assert!(compiled >= 20, "{compiled} cases compiled");
    assert!(
        bad.is_empty(),
        "{} mismatches:\n{}",
        bad.len(),
        bad.join("\n")
    );
}
