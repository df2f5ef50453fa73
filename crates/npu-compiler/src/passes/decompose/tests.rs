//! Graph before/after for each rule. Numbers are checked against PyTorch by the
//! `decomp_*` fixtures (crates/npu-dag/tests/fallback.rs).

use super::*;
use npu_ir::{DType, Moment, Padding1d, TensorType, ValueId, ValueKind};

const F: DType = DType::F32;

fn empty() -> Graph {
    Graph {
        model_name: "t".into(),
        pytorch_version: String::new(),
        values: Vec::new(),
        nodes: Vec::new(),
        inputs: Vec::new(),
        outputs: Vec::new(),
        weights: Vec::new(),
    }
}

fn input(g: &mut Graph, shape: &[usize], dtype: DType) -> ValueId {
    let index = g.inputs.len();
    let id = g.add_value(
        format!("in{index}"),
        TensorType {
            shape: shape.to_vec(),
            dtype,
        },
        ValueKind::Input { index },
    );
    g.inputs.push(id);
    id
}

/// Appends a node; its outputs become graph outputs.
fn node(g: &mut Graph, op: Op, inputs: &[ValueId], outs: &[(&[usize], DType)]) -> Vec<ValueId> {
    let n = g.nodes.len();
    let outputs: Vec<ValueId> = outs
        .iter()
        .enumerate()
        .map(|(index, (shape, dtype))| {
            g.add_value(
                format!("out{n}_{index}"),
                TensorType {
                    shape: shape.to_vec(),
                    dtype: *dtype,
                },
                ValueKind::NodeOutput {
                    node: NodeId(n as u32),
                    index,
                },
            )
        })
        .collect();
    g.nodes.push(Node {
        name: format!("n{n}"),
        op_type: format!("aten.{}.default", op.name()),
        op,
        inplace: false,
        inputs: inputs.to_vec(),
        outputs: outputs.clone(),
    });
    g.outputs.extend(&outputs);
    outputs
}

/// Decomposes and checks the structural invariants: no rule left, topological order, every
/// graph output produced exactly once with its original id, producers renumbered.
fn run(g: Graph) -> Graph {
    let outputs = g.outputs.clone();
    let d = decompose(g).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(d.outputs, outputs, "graph outputs keep their ids");
    let mut seen = vec![false; d.values.len()];
    for v in &d.inputs {
        seen[v.idx()] = true;
    }
    for (n, node) in d.nodes.iter().enumerate() {
        assert!(rule(node, &d).is_none(), "{} left undecomposed", node.name);
        for v in &node.inputs {
            let ok = seen[v.idx()]
                || matches!(
                    d.value(*v).kind,
                    ValueKind::Weight { .. } | ValueKind::Constant(_)
                );
            assert!(
                ok,
                "{} reads {} before it is made",
                node.name,
                d.value(*v).name
            );
        }
        for (i, v) in node.outputs.iter().enumerate() {
            assert!(!seen[v.idx()], "{} made twice", d.value(*v).name);
            seen[v.idx()] = true;
            assert_eq!(
                d.value(*v).kind,
                ValueKind::NodeOutput {
                    node: NodeId(n as u32),
                    index: i
                }
            );
        }
    }
    for v in &d.outputs {
        assert!(seen[v.idx()], "output {} is not produced", d.value(*v).name);
    }
    d
}

fn ops(g: &Graph) -> Vec<String> {
    g.nodes.iter().map(|n| n.op.name()).collect()
}

fn c(x: Composite) -> Op {
    Op::Composite(x)
}

#[test]
fn diff_with_prepend_is_cat_then_slices_and_sub() {
    let mut g = empty();
    let x = input(&mut g, &[1, 8], DType::I64);
    let p = input(&mut g, &[1, 1], DType::I64);
    let diff = c(Composite::Diff {
        n: 1,
        dim: -1,
        prepend: true,
        append: false,
    });
    let out = node(&mut g, diff, &[x, p], &[(&[1, 8], DType::I64)])[0];
    let d = run(g);
    assert_eq!(ops(&d), ["cat", "slice", "slice", "sub"]);
    let cat = &d.nodes[0];
    assert_eq!(cat.inputs, [p, x], "prepend comes first");
    assert_eq!(d.ty(cat.outputs[0]).shape, [1, 9]);
    let sub = &d.nodes[3];
    assert_eq!(sub.outputs, [out]);
    assert_eq!(d.value(out).name, "out0_0", "the output keeps its name");
    assert_eq!(
        sub.inputs,
        [d.nodes[1].outputs[0], d.nodes[2].outputs[0]],
        "t[1:] - t[:-1]"
    );
}

#[test]
fn diff_of_order_two_and_bools() {
    let mut g = empty();
    let x = input(&mut g, &[3, 6], F);
    let diff = c(Composite::Diff {
        n: 2,
        dim: 1,
        prepend: false,
        append: false,
    });
    node(&mut g, diff, &[x], &[(&[3, 4], F)]);
    let b = input(&mut g, &[5], DType::Bool);
    let diff = c(Composite::Diff {
        n: 1,
        dim: -1,
        prepend: false,
        append: false,
    });
    node(&mut g, diff, &[b], &[(&[4], DType::Bool)]);
    let d = run(g);
    assert_eq!(
        ops(&d),
        [
            "slice",
            "slice",
            "sub",
            "slice",
            "slice",
            "sub",
            "slice",
            "slice",
            "logical_xor"
        ]
    );
}

#[test]
fn elementwise_rules_use_fusable_primitives_only() {
    let mut g = empty();
    let x = input(&mut g, &[2, 4], F);
    let y = input(&mut g, &[4], F);
    let t = &[(&[2usize, 4][..], F)];
    node(&mut g, c(Composite::Square), &[x], t);
    node(
        &mut g,
        c(Composite::Rsub {
            alpha: 2.0,
            scalar: None,
        }),
        &[x, y],
        t,
    );
    node(
        &mut g,
        c(Composite::Rsub {
            alpha: 3.0,
            scalar: Some(1.0),
        }),
        &[x],
        t,
    );
    node(&mut g, c(Composite::Addcmul { value: 0.5 }), &[x, x, y], t);
    node(&mut g, c(Composite::Addcdiv { value: 1.0 }), &[x, x, y], t);
    node(&mut g, c(Composite::Lerp { weight: Some(0.3) }), &[x, y], t);
    node(&mut g, c(Composite::Lerp { weight: Some(0.7) }), &[x, y], t);
    node(&mut g, c(Composite::Lerp { weight: None }), &[x, y, x], t);
    node(
        &mut g,
        c(Composite::Softplus {
            beta: 2.0,
            threshold: 20.0,
        }),
        &[x],
        t,
    );
    node(&mut g, c(Composite::Mish), &[x], t);
    node(
        &mut g,
        c(Composite::Elu {
            alpha: 1.0,
            scale: 1.0,
            input_scale: 1.0,
        }),
        &[x],
        t,
    );
    node(&mut g, c(Composite::Glu { dim: -1 }), &[x], &[(&[2, 2], F)]);
    let d = run(g);
    let target = crate::target::NPU;
    for n in &d.nodes {
        assert_eq!(
            target.ir_op_unsupported(&n.op),
            None,
            "{}: {}",
            n.name,
            n.op.name()
        );
        assert!(
            !matches!(
                n.op,
                Op::Ternary {
                    op: npu_ir::TernaryOp::Where,
                    ..
                } | Op::BinaryScalar {
                    op: npu_ir::BinaryOp::Gt | npu_ir::BinaryOp::Ne,
                    ..
                }
            ),
            "{} would split the fused expression",
            n.name
        );
    }
    let first = |name: &str| d.nodes.iter().find(|n| n.name.starts_with(name)).unwrap();
    assert_eq!(
        first("n0").op,
        Op::Binary {
            op: npu_ir::BinaryOp::Mul,
            alpha: 1.0
        }
    );
    // rsub.Tensor: other - alpha * x as one sub with alpha
    let rsub = first("n1");
    assert_eq!(
        rsub.op,
        Op::Binary {
            op: npu_ir::BinaryOp::Sub,
            alpha: 2.0
        }
    );
    assert_eq!(rsub.inputs, [y, x]);
}

#[test]
fn rms_norm_is_the_chain_the_fusion_matches() {
    for dtype in [F, DType::BF16] {
        let mut g = empty();
        let x = input(&mut g, &[1, 3, 8], dtype);
        let w = input(&mut g, &[8], dtype);
        let rms = c(Composite::RmsNorm {
            normalized_shape: vec![8],
            eps: Some(1e-6),
        });
        node(&mut g, rms, &[x, w], &[(&[1, 3, 8], dtype)]);
        let d = run(g);
        let expect: &[&str] = if dtype == F {
            &["pow_scalar", "mean", "add_scalar", "rsqrt", "mul", "mul"]
        } else {
            &[
                "cast",
                "pow_scalar",
                "mean",
                "add_scalar",
                "rsqrt",
                "mul",
                "cast",
                "mul",
            ]
        };
        assert_eq!(ops(&d), expect);
        let mut m = crate::Module::new(d);
        let fused = crate::fuse::fuse(&mut m);
        assert_eq!(fused.get("rms_norm"), Some(&1), "{fused:?}");
    }
}

#[test]
fn norms_use_the_layer_norm_kernel() {
    let mut g = empty();
    let x = input(&mut g, &[2, 4, 5], F);
    let w = input(&mut g, &[4], F);
    let b = input(&mut g, &[4], F);
    node(
        &mut g,
        Op::GroupNorm {
            num_groups: 2,
            eps: 1e-5,
        },
        &[x, w, b],
        &[(&[2, 4, 5], F)],
    );
    node(
        &mut g,
        c(Composite::InstanceNorm {
            use_input_stats: true,
            eps: 1e-5,
        }),
        &[x],
        &[(&[2, 4, 5], F)],
    );
    node(
        &mut g,
        Op::LayerNorm {
            normalized_shape: vec![4, 5],
            eps: 1e-5,
        },
        &[x],
        &[(&[2, 4, 5], F)],
    );
    let d = run(g);
    let lns: Vec<&Node> = d
        .nodes
        .iter()
        .filter(|n| matches!(n.op, Op::LayerNorm { .. }))
        .collect();
    assert_eq!(lns.len(), 3);
    assert_eq!(
        d.ty(lns[0].inputs[0]).shape,
        [2, 2, 10],
        "two groups of 2 x 5"
    );
    assert_eq!(
        d.ty(lns[1].inputs[0]).shape,
        [2, 4, 5],
        "one group per channel"
    );
    assert_eq!(d.ty(lns[2].inputs[0]).shape, [2, 20], "[4, 5] flattened");
    for n in &lns {
        assert!(
            matches!(&n.op, Op::LayerNorm { normalized_shape, .. } if normalized_shape.len() == 1)
        );
    }
}

#[test]
fn native_norms_bind_all_three_outputs() {
    let mut g = empty();
    let x = input(&mut g, &[2, 4, 5], F);
    let outs = node(
        &mut g,
        c(Composite::NativeLayerNorm {
            normalized_shape: vec![5],
            eps: 1e-5,
            bias_only: false,
        }),
        &[x],
        &[(&[2, 4, 5], F), (&[2, 4, 1], F), (&[2, 4, 1], F)],
    );
    let gouts = node(
        &mut g,
        c(Composite::NativeGroupNorm {
            groups: 2,
            eps: 1e-5,
            bias_only: false,
        }),
        &[x],
        &[(&[2, 4, 5], F), (&[2, 2], F), (&[2, 2], F)],
    );
    let d = run(g);
    for v in outs.iter().chain(&gouts) {
        assert_eq!(d.nodes.iter().filter(|n| n.outputs.contains(v)).count(), 1);
    }
}

#[test]
fn reductions_keep_statistics_in_f32() {
    let mut g = empty();
    let x = input(&mut g, &[3, 6], DType::BF16);
    node(
        &mut g,
        c(Composite::Moments {
            kind: Moment::StdMean,
            dims: Some(vec![1]),
            correction: 1.0,
            keepdim: false,
        }),
        &[x],
        &[(&[3], DType::BF16), (&[3], DType::BF16)],
    );
    node(
        &mut g,
        c(Composite::Logsumexp {
            dims: vec![1],
            keepdim: true,
        }),
        &[x],
        &[(&[3, 1], DType::BF16)],
    );
    for ord in [2.0, 1.0, 3.0, 0.0, f64::INFINITY] {
        node(
            &mut g,
            c(Composite::VectorNorm {
                ord,
                dims: vec![],
                keepdim: false,
            }),
            &[x],
            &[(&[], DType::BF16)],
        );
    }
    node(
        &mut g,
        c(Composite::CosineSimilarity { dim: 1, eps: 1e-8 }),
        &[x, x],
        &[(&[3], DType::BF16)],
    );
    let d = run(g);
    for n in &d.nodes {
        if matches!(
            n.op,
            Op::Mean { .. } | Op::Sum { .. } | Op::ReduceMinMax { .. }
        ) {
            assert_eq!(d.ty(n.inputs[0]).dtype, F, "{} reduces in f32", n.name);
        }
    }
    // var = sum((x - mean)^2) / (N - correction)
    let div = d
        .nodes
        .iter()
        .find(|n| {
            matches!(
                n.op,
                Op::BinaryScalar {
                    op: npu_ir::BinaryOp::Div,
                    ..
                }
            )
        })
        .unwrap();
    assert!(matches!(div.op, Op::BinaryScalar { scalar, .. } if scalar == 5.0));
}

#[test]
fn linalg_rules_become_matmuls_and_views() {
    let mut g = empty();
    let m = input(&mut g, &[3, 4], F);
    let v = input(&mut g, &[4], F);
    let v3 = input(&mut g, &[3], F);
    let b = input(&mut g, &[2, 3, 4], F);
    let bt = input(&mut g, &[2, 4, 3], F);
    node(
        &mut g,
        c(Composite::Addmv {
            beta: 0.5,
            alpha: 2.0,
        }),
        &[v3, m, v],
        &[(&[3], F)],
    );
    node(
        &mut g,
        c(Composite::Addr {
            beta: 1.0,
            alpha: 1.0,
        }),
        &[m, v3, v],
        &[(&[3, 4], F)],
    );
    node(&mut g, c(Composite::Mv), &[m, v], &[(&[3], F)]);
    node(&mut g, c(Composite::Dot), &[v, v], &[(&[], F)]);
    node(&mut g, c(Composite::Outer), &[v3, v], &[(&[3, 4], F)]);
    node(
        &mut g,
        Op::Baddbmm {
            beta: 0.0,
            alpha: 1.0,
        },
        &[b, b, bt],
        &[(&[2, 3, 3], F)],
    );
    let d = run(g);
    assert!(d.nodes.iter().all(|n| !matches!(n.op, Op::Baddbmm { .. })));
    assert_eq!(d.nodes.iter().filter(|n| n.op == Op::Matmul).count(), 3);
}

#[test]
fn einsum_contracts_pairwise() {
    let mut g = empty();
    let a = input(&mut g, &[2, 3, 4], F);
    let b = input(&mut g, &[2, 4, 5], F);
    let e = |eq: &str| {
        c(Composite::Einsum {
            equation: eq.into(),
        })
    };
    node(&mut g, e("bij,bjk->bik"), &[a, b], &[(&[2, 3, 5], F)]);
    node(&mut g, e("bij,bjk->kib"), &[a, b], &[(&[5, 3, 2], F)]);
    node(&mut g, e("...ij->...ji"), &[a], &[(&[2, 4, 3], F)]);
    node(&mut g, e("bij->"), &[a], &[(&[], F)]);
    // implicit output: the labels seen once, sorted ("ik"); b is contracted too
    node(&mut g, e("bij,bjk"), &[a, b], &[(&[3, 5], F)]);
    let d = run(g);
    let mm: Vec<&Node> = d.nodes.iter().filter(|n| n.op == Op::Matmul).collect();
    assert_eq!(mm.len(), 3);
    for n in &mm[..2] {
        assert_eq!(d.ty(n.inputs[0]).shape, [2, 3, 4]);
        assert_eq!(d.ty(n.inputs[1]).shape, [2, 4, 5]);
    }
    assert_eq!(d.ty(mm[2].inputs[0]).shape, [1, 3, 8]);
    let mut g = empty();
    let a = input(&mut g, &[3, 3], F);
    node(&mut g, e("ii->i"), &[a], &[(&[3], F)]);
    let err = decompose(g).unwrap_err().to_string();
    assert!(err.contains("diagonal"), "{err}");
}

#[test]
fn conv1d_is_conv2d_over_a_unit_height() {
    let mut g = empty();
    let x = input(&mut g, &[2, 3, 9], F);
    let w = input(&mut g, &[4, 3, 4], F);
    let conv = |padding| {
        c(Composite::Conv1d {
            stride: 1,
            padding,
            dilation: 1,
            groups: 1,
        })
    };
    node(&mut g, conv(Padding1d::Same), &[x, w], &[(&[2, 4, 9], F)]);
    node(
        &mut g,
        conv(Padding1d::Explicit(1)),
        &[x, w],
        &[(&[2, 4, 8], F)],
    );
    let d = run(g);
    let convs: Vec<&Node> = d
        .nodes
        .iter()
        .filter(|n| matches!(n.op, Op::Conv2d { .. }))
        .collect();
    assert_eq!(convs.len(), 2);
    // "same" with an even kernel pads 1 left and 2 right: one extra zero column first
    assert_eq!(d.ty(convs[0].inputs[0]).shape, [2, 3, 1, 10]);
    assert!(matches!(
        convs[0].op,
        Op::Conv2d {
            padding: [0, 1],
            ..
        }
    ));
    assert_eq!(d.ty(convs[1].inputs[1]).shape, [4, 3, 1, 4]);
}

#[test]
fn views_and_shape_ops() {
    let mut g = empty();
    let x = input(&mut g, &[3, 6], F);
    let t = input(&mut g, &[2, 3, 6], F);
    node(
        &mut g,
        c(Composite::Select { dim: 0, index: -1 }),
        &[x],
        &[(&[6], F)],
    );
    node(
        &mut g,
        c(Composite::SplitWithSizes {
            sizes: vec![2, 4],
            dim: 1,
        }),
        &[x],
        &[(&[3, 2], F), (&[3, 4], F)],
    );
    node(
        &mut g,
        c(Composite::Unbind { dim: 0 }),
        &[x],
        &[(&[6], F), (&[6], F), (&[6], F)],
    );
    node(&mut g, c(Composite::ExpandAs), &[x, t], &[(&[2, 3, 6], F)]);
    node(&mut g, c(Composite::ReshapeAs), &[x, x], &[(&[3, 6], F)]);
    node(
        &mut g,
        c(Composite::Repeat {
            repeats: vec![2, 1, 2],
        }),
        &[x],
        &[(&[2, 3, 12], F)],
    );
    node(
        &mut g,
        c(Composite::ConstantPad {
            pad: vec![1, -1, 2, 0],
            value: 3.0,
        }),
        &[x],
        &[(&[5, 6], F)],
    );
    let d = run(g);
    let sel = &d.nodes[0];
    assert!(matches!(
        sel.op,
        Op::Slice {
            start: 2,
            end: 3,
            ..
        }
    ));
    assert!(
        d.nodes.iter().all(|n| !n.inputs.contains(&t)),
        "the template is dropped"
    );
    let rep = d
        .nodes
        .iter()
        .find(|n| matches!(n.op, Op::Expand { .. }))
        .unwrap();
    assert_eq!(d.ty(rep.outputs[0]).shape, [2, 3, 6], "expand_as");
    let fulls: Vec<&Node> = d
        .nodes
        .iter()
        .filter(|n| matches!(n.op, Op::Full { .. }))
        .collect();
    assert_eq!(
        fulls.len(),
        2,
        "one block left of the last dim, one above the first"
    );
}

#[test]
fn primitive_graphs_are_unchanged_and_the_pass_is_idempotent() {
    let mut g = empty();
    let x = input(&mut g, &[3, 6], F);
    node(
        &mut g,
        Op::Unary(npu_ir::UnaryOp::Relu),
        &[x],
        &[(&[3, 6], F)],
    );
    let before = ops(&g);
    let d = run(g);
    assert_eq!(ops(&d), before);
    let mut g = empty();
    let x = input(&mut g, &[3, 6], F);
    node(&mut g, c(Composite::Mish), &[x], &[(&[3, 6], F)]);
    let once = run(g);
    let (twice, stats) = decompose_with_stats(once.clone()).unwrap();
    assert_eq!(ops(&twice), ops(&once));
    assert_eq!(stats, DecomposeStats::default());
}

#[test]
fn a_long_chain_of_composites_does_not_recurse() {
    let mut g = empty();
    let mut x = input(&mut g, &[4], F);
    for _ in 0..200_000 {
        x = node(&mut g, c(Composite::Square), &[x], &[(&[4], F)])[0];
    }
    let out = x;
    g.outputs = vec![out];
    let d = decompose(g).unwrap();
    assert_eq!(d.nodes.len(), 200_000);
    assert_eq!(d.nodes.last().unwrap().outputs, [out]);
}
