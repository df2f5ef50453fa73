//! The partitioner: placement, grouping over the data flow, boundaries and transfers.

mod common;

use common::Ir;
use npu_compiler::partition::{
    extract, op_matches, partition, place, place_for_target, Device, PartitionPlan, PlanStep,
};
use npu_compiler::{compile, target, CompileOptions};
use npu_ir::{DType, Graph, Node};
use serde_json::json;

const S: &[usize] = &[2, 8];

/// `x -> a -> b -> c -> out`, all relu-like unary ops named a, b, c.
fn chain(names: &[&str]) -> Ir {
    let mut ir = Ir::new();
    let mut prev = ir.input("x", S, "float32");
    for n in names {
        prev = ir.op(n, "aten.relu.default", &[&prev], S, "float32", json!({}));
    }
    ir.output(&prev);
    ir
}

/// Places nodes whose name is in `cpu` on the CPU.
fn plan_with(g: &Graph, cpu: &[&str]) -> PartitionPlan {
    let placements = place(g, |n: &Node| {
        cpu.contains(&n.name.as_str())
            .then(|| format!("test puts {} on the CPU", n.name))
    });
    partition(g, placements)
}

fn names(g: &Graph, p: &PartitionPlan, part: usize) -> Vec<String> {
    p.partitions[part]
        .nodes
        .iter()
        .map(|&n| g.nodes[n].name.clone())
        .collect()
}

fn value_names(g: &Graph, vs: &[npu_ir::ValueId]) -> Vec<String> {
    vs.iter().map(|&v| g.value(v).name.clone()).collect()
}

#[test]
fn all_npu_is_one_partition_without_transfers() {
    let g = chain(&["a", "b", "c"]).graph();
    let p = plan_with(&g, &[]);
    assert_eq!(p.partitions.len(), 1);
    assert_eq!(p.partitions[0].device, Device::Npu);
    assert_eq!(p.transfers().count(), 0);
    assert_eq!(p.steps, vec![PlanStep::Run { partition: 0 }]);
    assert_eq!(value_names(&g, &p.partitions[0].inputs), ["x"]);
    assert_eq!(value_names(&g, &p.partitions[0].outputs), ["c"]);
}

#[test]
fn all_cpu_is_one_partition_without_transfers() {
    let g = chain(&["a", "b", "c"]).graph();
    let p = plan_with(&g, &["a", "b", "c"]);
    assert_eq!(p.partitions.len(), 1);
    assert_eq!(p.partitions[0].device, Device::Cpu);
    assert_eq!(p.transfers().count(), 0);
    assert!(p.placements.iter().all(|pl| pl.reason.is_some()));
}

#[test]
fn npu_cpu_npu_has_exactly_two_transfers() {
    let g = chain(&["a", "b", "c"]).graph();
    let p = plan_with(&g, &["b"]);
    let devices: Vec<Device> = p.partitions.iter().map(|q| q.device).collect();
    assert_eq!(devices, [Device::Npu, Device::Cpu, Device::Npu]);
    let t: Vec<(Device, Vec<String>)> = p
        .transfers()
        .map(|(d, vs)| (d, value_names(&g, vs)))
        .collect();
    assert_eq!(
        t,
        [
            (Device::Cpu, vec!["a".to_string()]),
            (Device::Npu, vec!["b".to_string()])
        ]
    );
    // Steps alternate transfer / run in dependency order.
    assert_eq!(
        p.steps,
        vec![
            PlanStep::Run { partition: 0 },
            PlanStep::Transfer {
                to: Device::Cpu,
                values: p.partitions[1].inputs.clone()
            },
            PlanStep::Run { partition: 1 },
            PlanStep::Transfer {
                to: Device::Npu,
                values: p.partitions[2].inputs.clone()
            },
            PlanStep::Run { partition: 2 },
        ]
    );
}

#[test]
fn consecutive_unsupported_ops_are_grouped() {
    let g = chain(&["a", "b", "c", "d", "e"]).graph();
    let p = plan_with(&g, &["b", "c", "d"]);
    assert_eq!(p.partitions.len(), 3);
    assert_eq!(names(&g, &p, 1), ["b", "c", "d"]);
    assert_eq!(p.transfers().count(), 2);
}

#[test]
fn boundaries_list_graph_inputs_and_crossing_values_but_not_weights() {
    let mut ir = Ir::new();
    let x = ir.input("x", S, "float32");
    let w = ir.weight("fc.weight", &[8, 8], "float32");
    let a = ir.op(
        "a",
        "aten.linear.default",
        &[&x, &w],
        S,
        "float32",
        json!({}),
    );
    let b = ir.op("b", "aten.relu.default", &[&a], S, "float32", json!({}));
    let c = ir.op("c", "aten.add.Tensor", &[&b, &x], S, "float32", json!({}));
    let d = ir.op("d", "aten.mul.Tensor", &[&c, &a], S, "float32", json!({}));
    ir.output(&a);
    ir.output(&d);
    let g = ir.graph();
    let p = plan_with(&g, &["b"]);
    assert_eq!(p.partitions.len(), 3);
    // The NPU part that makes `a` exports it both as a graph output and to the CPU and to
    // the later NPU part; the weight stays internal.
    assert_eq!(value_names(&g, &p.partitions[0].inputs), ["x"]);
    assert_eq!(value_names(&g, &p.partitions[0].outputs), ["a"]);
    assert_eq!(value_names(&g, &p.partitions[1].inputs), ["a"]);
    assert_eq!(value_names(&g, &p.partitions[1].outputs), ["b"]);
    assert_eq!(value_names(&g, &p.partitions[2].inputs), ["b", "x", "a"]);
    assert_eq!(value_names(&g, &p.partitions[2].outputs), ["d"]);
    // `a` already lives on the NPU: only `b` comes back.
    let back: Vec<Vec<String>> = p
        .transfers()
        .filter(|(d, _)| *d == Device::Npu)
        .map(|(_, vs)| value_names(&g, vs))
        .collect();
    assert_eq!(back, [vec!["b".to_string()]]);
    // Each extracted partition is a graph of its own with the same names.
    let sub = extract(&g, &p.partitions[2]);
    assert_eq!(
        value_names(&sub, &sub.inputs),
        ["b".to_string(), "x".into(), "a".into()]
    );
    assert_eq!(sub.nodes.len(), 2);
    let sub0 = extract(&g, &p.partitions[0]);
    assert_eq!(sub0.weights.len(), 1);
    assert_eq!(sub0.weights[0].key, "fc.weight");
}

#[test]
fn multi_output_producer_consumed_across_a_boundary() {
    let mut ir = Ir::new();
    let x = ir.input("x", &[2, 8], "float32");
    let parts = ir.op_multi(
        "split",
        "aten.split.Tensor",
        &[&x],
        &[(&[2, 4], "float32"), (&[2, 4], "float32")],
        json!({"split_size": 4, "dim": 1}),
    );
    // torch_ir gives every getitem all results of its producer, and picks by index.
    let g0 = ir.op(
        "getitem",
        "<built-in function getitem>",
        &[&parts[0], &parts[1]],
        &[2, 4],
        "float32",
        json!({"index": 0}),
    );
    let g1 = ir.op(
        "getitem_1",
        "<built-in function getitem>",
        &[&parts[0], &parts[1]],
        &[2, 4],
        "float32",
        json!({"index": 1}),
    );
    let r = ir.op(
        "r",
        "aten.relu.default",
        &[&g1],
        &[2, 4],
        "float32",
        json!({}),
    );
    let s = ir.op(
        "s",
        "aten.add.Tensor",
        &[&g0, &r],
        &[2, 4],
        "float32",
        json!({}),
    );
    ir.output(&s);
    let g = ir.graph();
    let p = plan_with(&g, &["split"]);
    // getitem follows its (CPU) producer; both results cross once.
    assert_eq!(names(&g, &p, 0), ["split", "getitem", "getitem_1"]);
    assert_eq!(p.partitions[0].device, Device::Cpu);
    let t: Vec<Vec<String>> = p.transfers().map(|(_, vs)| value_names(&g, vs)).collect();
    assert_eq!(t, [vec!["getitem_1".to_string(), "getitem".to_string()]]);
    // The NPU side compiles on its own.
    let sub = extract(&g, &p.partitions[1]);
    let opts = CompileOptions {
        target: &target::CPU,
        dtype: Some(DType::F32),
    };
    let (prog, _) = compile(sub, &opts).expect("NPU partition compiles");
    assert_eq!(prog.inputs.len(), 2);
}

#[test]
fn an_independent_unsupported_op_does_not_split_an_npu_run() {
    // IR order: a, x (CPU, reads only the graph input), b, c. A node-order grouping would
    // give npu[a] cpu[x] npu[b c]; over the data flow it is npu[a b c] + cpu[x].
    let mut ir = Ir::new();
    let inp = ir.input("in", S, "float32");
    let a = ir.op("a", "aten.relu.default", &[&inp], S, "float32", json!({}));
    let x = ir.op("x", "aten.neg.default", &[&inp], S, "float32", json!({}));
    let b = ir.op("b", "aten.relu.default", &[&a], S, "float32", json!({}));
    let c = ir.op("c", "aten.relu.default", &[&b], S, "float32", json!({}));
    ir.output(&c);
    ir.output(&x);
    let g = ir.graph();
    let p = plan_with(&g, &["x"]);
    assert_eq!(p.partitions.len(), 2, "{}", p.to_text(&g));
    assert_eq!(p.count(Device::Npu), 1);
    let npu = p
        .partitions
        .iter()
        .position(|q| q.device == Device::Npu)
        .unwrap();
    assert_eq!(names(&g, &p, npu), ["a", "b", "c"]);
    assert_eq!(p.transfers().count(), 0);

    // The CPU result feeding the end of the NPU chain: running the CPU op first keeps the
    // NPU work in one partition (2 partitions, 1 transfer instead of 3 and 2).
    let mut ir = Ir::new();
    let inp = ir.input("in", S, "float32");
    let a = ir.op("a", "aten.relu.default", &[&inp], S, "float32", json!({}));
    let x = ir.op("x", "aten.neg.default", &[&inp], S, "float32", json!({}));
    let b = ir.op("b", "aten.relu.default", &[&a], S, "float32", json!({}));
    let c = ir.op("c", "aten.add.Tensor", &[&b, &x], S, "float32", json!({}));
    ir.output(&c);
    let g = ir.graph();
    let p = plan_with(&g, &["x"]);
    assert_eq!(p.partitions.len(), 2, "{}", p.to_text(&g));
    assert_eq!(p.partitions[0].device, Device::Cpu);
    assert_eq!(names(&g, &p, 1), ["a", "b", "c"]);
    assert_eq!(p.transfers().count(), 1);
}

#[test]
fn views_between_cpu_ops_stay_on_the_cpu() {
    let mut ir = Ir::new();
    let x = ir.input("x", &[2, 8], "float32");
    let a = ir.op(
        "a",
        "aten.neg.default",
        &[&x],
        &[2, 8],
        "float32",
        json!({}),
    );
    let v = ir.op(
        "v",
        "aten.view.default",
        &[&a],
        &[16],
        "float32",
        json!({"size": [16]}),
    );
    let b = ir.op("b", "aten.neg.default", &[&v], &[16], "float32", json!({}));
    ir.output(&b);
    let g = ir.graph();
    let p = plan_with(&g, &["a", "b"]);
    assert_eq!(p.partitions.len(), 1, "{}", p.to_text(&g));
    assert_eq!(p.partitions[0].device, Device::Cpu);
}

#[test]
fn force_cpu_matches_full_and_short_op_names() {
    assert!(op_matches("aten.softmax.int", "softmax"));
    assert!(op_matches("aten.softmax.int", "aten.softmax.int"));
    assert!(op_matches("aten.relu_.default", "relu"));
    assert!(!op_matches("aten.relu.default", "relu6"));
    let g = chain(&["a", "b"]).graph();
    let pl = place_for_target(&g, &target::NPU, &["relu".to_string()]);
    assert!(pl.iter().all(|p| p.device == Device::Cpu));
    assert!(pl[0]
        .reason
        .as_deref()
        .unwrap()
        .contains("--force-cpu relu"));
}

#[test]
fn unknown_ops_go_to_the_cpu_with_a_reason() {
    let mut ir = Ir::new();
    let x = ir.input("x", &[1, 4, 2, 2], "float32");
    let y = ir.op(
        "ps",
        "aten.pixel_shuffle.default",
        &[&x],
        &[1, 1, 4, 4],
        "float32",
        json!({"upscale_factor": 2}),
    );
    ir.output(&y);
    let g = ir.graph();
    let p = partition(&g, place_for_target(&g, &target::NPU, &[]));
    assert_eq!(p.partitions.len(), 1);
    assert_eq!(p.partitions[0].device, Device::Cpu);
    let text = p.to_text(&g);
    assert!(text.contains("pixel_shuffle"), "{text}");
}

#[test]
fn check_and_partition_ask_the_same_question() {
    // Every live node the partitioner sends to the CPU for a reason of the target is a
    // violation of `check`, with the same message, and no other node is.
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/bert-tiny/model.ir.json");
    let g = npu_ir::load(&path).unwrap();
    let placements = place_for_target(&g, &target::NPU, &[]);
    let violations = npu_compiler::check(g.clone(), &target::NPU).unwrap();
    let mut cpu: Vec<(String, String)> = g
        .nodes
        .iter()
        .zip(&placements)
        .filter_map(|(n, p)| p.reason.clone().map(|r| (n.name.clone(), r)))
        // canonicalize removes these before check sees them
        .filter(|(n, _)| !n.starts_with("_assert"))
        .collect();
    let mut seen: Vec<(String, String)> = violations
        .iter()
        .map(|v| (v.node.clone(), v.message.clone()))
        .collect();
    cpu.sort();
    seen.sort();
    // check runs after dead-code elimination: a dead CPU node is not a violation.
    let producers = g.producers();
    let mut live = vec![false; g.nodes.len()];
    let mut stack: Vec<usize> = g
        .outputs
        .iter()
        .filter_map(|v| producers[v.idx()].map(|p| p.0))
        .collect();
    while let Some(n) = stack.pop() {
        if !std::mem::replace(&mut live[n], true) {
            stack.extend(
                g.nodes[n]
                    .inputs
                    .iter()
                    .filter_map(|v| producers[v.idx()].map(|p| p.0)),
            );
        }
    }
    cpu.retain(|(name, _)| live[g.nodes.iter().position(|n| &n.name == name).unwrap()]);
    assert_eq!(seen, cpu);
    assert!(seen.iter().any(|(_, m)| m.contains("bool mask")));
    assert!(seen.iter().any(|(_, m)| m.contains("integer add")));
}
