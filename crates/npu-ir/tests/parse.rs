//! The IR traps of shared/research/ir-format.md, each on a small hand-written IR, plus every
//! committed fixture.

use npu_ir::{parse_str, BinaryOp, ConstData, DType, Op, ValueKind};
use std::path::Path;

fn ir(
    inputs: &str,
    outputs: &str,
    weights: &str,
    mapping: &str,
    nodes: &str,
    extra: &str,
) -> String {
    format!(
        r#"{{"model_name": "t", "pytorch_version": "2.11.0", "graph_inputs": [{inputs}], "graph_outputs": [{outputs}],
            "weights": [{weights}], "weight_name_mapping": {{{mapping}}}, "nodes": [{nodes}]{extra}}}"#
    )
}

fn t(name: &str, shape: &str, dtype: &str) -> String {
    format!(r#"{{"name": "{name}", "shape": {shape}, "dtype": "{dtype}"}}"#)
}

fn tp(name: &str, shape: &str, dtype: &str, producer: &str, idx: usize) -> String {
    format!(
        r#"{{"name": "{name}", "shape": {shape}, "dtype": "{dtype}", "producer_node": "{producer}", "producer_output_idx": {idx}}}"#
    )
}

fn node(name: &str, op: &str, inputs: &[String], outputs: &[String], attrs: &str) -> String {
    format!(
        r#"{{"name": "{name}", "op_type": "{op}", "inputs": [{}], "outputs": [{}], "attrs": {attrs}}}"#,
        inputs.join(", "),
        outputs.join(", ")
    )
}

#[test]
fn multi_output_and_getitem_resolve_by_producer_index() {
    let text = ir(
        &t("x", "[4, 6]", "float32"),
        &t("getitem_1", "[4, 3]", "float32"),
        "",
        "",
        &[
            node(
                "chunk",
                "aten.chunk.default",
                &[tp("x", "[4, 6]", "float32", "x", 0)],
                &[
                    t("chunk_0", "[4, 3]", "float32"),
                    t("chunk_1", "[4, 3]", "float32"),
                ],
                r#"{"chunks": 2, "dim": 1}"#,
            ),
            node(
                "getitem_1",
                "<built-in function getitem>",
                &[
                    tp("chunk_0", "[4, 3]", "float32", "chunk", 0),
                    tp("chunk_1", "[4, 3]", "float32", "chunk", 1),
                ],
                &[t("getitem_1", "[4, 3]", "float32")],
                r#"{"index": 1}"#,
            ),
        ]
        .join(","),
        "",
    );
    let g = parse_str(&text).unwrap();
    assert_eq!(g.nodes[0].op, Op::Chunk { chunks: 2, dim: 1 });
    assert_eq!(g.nodes[1].op, Op::GetItem { index: 1 });
    assert_eq!(g.nodes[1].inputs, g.nodes[0].outputs);
    assert_eq!(g.outputs, vec![g.nodes[1].outputs[0]]);
}

#[test]
fn tensor_lists_scalars_stringified_dtypes_and_int64_max() {
    let text = ir(
        &t("x", "[2, 8]", "bfloat16"),
        &t("cat", "[2, 8]", "float32"),
        "",
        "",
        &[
            node(
                "slice_1",
                "aten.slice.Tensor",
                &[tp("x", "[2, 8]", "bfloat16", "x", 0)],
                &[t("slice_1", "[2, 4]", "bfloat16")],
                r#"{"dim": 1, "start": 4, "end": 9223372036854775807}"#,
            ),
            node(
                "mul",
                "aten.mul.Tensor",
                &[tp("x", "[2, 8]", "bfloat16", "x", 0)],
                &[t("mul", "[2, 8]", "bfloat16")],
                r#"{"other": 0.5}"#,
            ),
            node(
                "to",
                "aten.to.dtype",
                &[tp("mul", "[2, 8]", "bfloat16", "mul", 0)],
                &[t("to", "[2, 8]", "float32")],
                r#"{"dtype": "torch.float32"}"#,
            ),
            node(
                "softmax",
                "aten.softmax.int",
                &[tp("to", "[2, 8]", "float32", "to", 0)],
                &[t("softmax", "[2, 8]", "float32")],
                r#"{"dim": -1, "dtype": "torch.float32"}"#,
            ),
            node(
                "cat",
                "aten.cat.default",
                &[
                    tp("softmax", "[2, 8]", "float32", "softmax", 0),
                    tp("softmax", "[2, 8]", "float32", "softmax", 0),
                ],
                &[t("cat", "[2, 16]", "float32")],
                r#"{"_tensor_list_sizes": [2], "dim": 0}"#,
            ),
        ]
        .join(","),
        "",
    );
    let err = parse_str(&text).unwrap_err();
    assert!(
        err.to_string()
            .contains("graph output 'cat' is declared [2, 8] but is [2, 16]"),
        "{err}"
    );
    let text = text.replace(
        r#""graph_outputs": [{"name": "cat", "shape": [2, 8]"#,
        r#""graph_outputs": [{"name": "cat", "shape": [2, 16]"#,
    );
    let g = parse_str(&text).unwrap();
    assert_eq!(
        g.nodes[0].op,
        Op::Slice {
            dim: 1,
            start: 4,
            end: i64::MAX,
            step: 1
        }
    );
    assert_eq!(
        g.nodes[1].op,
        Op::BinaryScalar {
            op: BinaryOp::Mul,
            scalar: 0.5,
            scalar_lhs: false
        }
    );
    assert_eq!(g.nodes[1].inputs.len(), 1);
    assert_eq!(g.nodes[2].op, Op::Cast);
    assert_eq!(
        g.nodes[3].op,
        Op::Softmax {
            dim: -1,
            dtype: Some(DType::F32)
        }
    );
    assert_eq!(
        g.nodes[4].inputs.len(),
        2,
        "the same tensor twice in a list"
    );
    assert_eq!(g.nodes[4].inputs[0], g.nodes[4].inputs[1]);
}

#[test]
fn non_finite_json_tokens_are_accepted() {
    let text = ir(
        &t("x", "[3]", "float32"),
        &t("fill", "[3]", "float32"),
        "",
        "",
        &node(
            "fill",
            "aten.clamp.default",
            &[tp("x", "[3]", "float32", "x", 0)],
            &[t("fill", "[3]", "float32")],
            r#"{"min": -Infinity, "max": NaN}"#,
        ),
        "",
    );
    let g = parse_str(&text).unwrap();
    let Op::Clamp {
        min: Some(lo),
        max: Some(hi),
    } = g.nodes[0].op
    else {
        panic!("{:?}", g.nodes[0].op)
    };
    assert_eq!(lo, f64::NEG_INFINITY);
    assert!(hi.is_nan());
}

#[test]
fn weights_tied_weights_constants_and_unused_buffers() {
    let weights = [
        t("embed.weight", "[10, 4]", "float32"),
        t("lm_head.weight", "[10, 4]", "float32"),
        t("rotary.inv_freq", "[2]", "float32"),
        t("idx", "[2]", "int64"),
        t("bn.num_batches_tracked", "[]", "int64"),
    ]
    .join(",");
    let mapping = r#""p_lm_head_weight": "lm_head.weight", "p_embed_weight": "embed.weight", "b_rotary_inv_freq": "rotary.inv_freq", "c_idx": "idx""#;
    let nodes = [
        node(
            "embedding",
            "aten.embedding.default",
            &[
                t("p_lm_head_weight", "[10, 4]", "float32"),
                tp("ids", "[2]", "int64", "ids", 0),
            ],
            &[t("embedding", "[2, 4]", "float32")],
            "{}",
        ),
        node(
            "linear",
            "aten.linear.default",
            &[
                tp("embedding", "[2, 4]", "float32", "embedding", 0),
                t("p_lm_head_weight", "[10, 4]", "float32"),
            ],
            &[t("linear", "[2, 10]", "float32")],
            "{}",
        ),
        node(
            "index_select",
            "aten.stft.default",
            &[
                tp("linear", "[2, 10]", "float32", "linear", 0),
                t("c_idx", "[2]", "int64"),
            ],
            &[t("index_select", "[2, 2]", "float32")],
            r#"{"dim": 1}"#,
        ),
        node(
            "mul",
            "aten.mul.Tensor",
            &[
                tp("index_select", "[2, 2]", "float32", "index_select", 0),
                t("b_rotary_inv_freq", "[2]", "float32"),
            ],
            &[t("mul", "[2, 2]", "float32")],
            "{}",
        ),
    ]
    .join(",");
    let text = ir(
        &t("ids", "[2]", "int64"),
        &t("mul", "[2, 2]", "float32"),
        &weights,
        mapping,
        &nodes,
        r#", "constants": {"idx": {"data": [3, 7], "dtype": "int64"}}"#,
    );
    let g = parse_str(&text).unwrap();
    // Both readers of the tied weight see one value.
    assert_eq!(g.nodes[0].inputs[0], g.nodes[1].inputs[1]);
    assert_eq!(
        g.value(g.nodes[0].inputs[0]).kind,
        ValueKind::Weight {
            key: "lm_head.weight".into()
        }
    );
    assert_eq!(
        g.value(g.nodes[2].inputs[1]).kind,
        ValueKind::Constant(ConstData::Int(vec![3, 7]))
    );
    assert!(
        matches!(g.nodes[2].op, Op::Unknown { .. }),
        "unknown ops are kept by name"
    );
    assert_eq!(
        g.value(g.nodes[3].inputs[1]).kind,
        ValueKind::Weight {
            key: "rotary.inv_freq".into()
        }
    );
    assert_eq!(g.weights.len(), 5, "unused weights stay listed");
}

#[test]
fn bad_inputs_give_clear_errors() {
    let cases: [(String, &str); 9] = [
        (
            ir(
                &t("x", "[4294967296, 4294967296]", "float32"),
                "",
                "",
                "",
                "",
                "",
            ),
            "tensor 'x' float32[4294967296, 4294967296] is too large",
        ),
        (
            ir(
                &t("x", "[9223372036854775807]", "float32"),
                "",
                "",
                "",
                "",
                "",
            ),
            "is too large: its size in bytes overflows",
        ),
        (
            "[]".into(),
            "expected an object at the top level, found an array",
        ),
        ("{ not json".into(), "malformed IR JSON at line 1"),
        (
            r#"{"graph_inputs": []}"#.into(),
            "missing field `graph_outputs`",
        ),
        (
            ir(&t("x", "[-1, 3]", "float32"), "", "", "", "", ""),
            "tensor 'x' has a dynamic or invalid shape [-1, 3]",
        ),
        (
            ir(&t("x", "[2]", "complex64"), "", "", "", "", ""),
            "tensor 'x' has unknown dtype 'complex64'",
        ),
        (
            ir(
                &t("x", "[2]", "float32"),
                "",
                "",
                "",
                &node(
                    "relu",
                    "aten.relu.default",
                    &[tp("y", "[2]", "float32", "nowhere", 0)],
                    &[t("relu", "[2]", "float32")],
                    "{}",
                ),
                "",
            ),
            "node 'relu': input 'y' refers to producer 'nowhere'",
        ),
        (
            ir(
                &t("x", "[2]", "float32"),
                &t("nope", "[2]", "float32"),
                "",
                "",
                "",
                "",
            ),
            "graph output 'nope' is not produced",
        ),
    ];
    for (text, want) in cases {
        let err = parse_str(&text).unwrap_err().to_string();
        assert!(err.contains(want), "expected '{want}' in '{err}'");
    }
}

#[test]
fn every_committed_fixture_parses() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures");
    let mut seen = 0;
    for entry in std::fs::read_dir(&root).unwrap() {
        let dir = entry.unwrap().path();
        if !dir.is_dir() {
            continue;
        }
        for f in std::fs::read_dir(&dir).unwrap() {
            let f = f.unwrap().path();
            if f.to_string_lossy().ends_with(".ir.json") {
                let g = npu_ir::load(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
                assert!(!g.nodes.is_empty());
                let unknown: Vec<_> = g
                    .nodes
                    .iter()
                    .filter(|n| matches!(n.op, Op::Unknown { .. }))
                    .map(|n| n.op_type.clone())
                    .collect();
                assert!(
                    unknown.is_empty(),
                    "{}: untyped ops {unknown:?}",
                    f.display()
                );
                seen += 1;
            }
        }
    }
    assert!(seen >= 9, "found {seen} fixtures");
}
