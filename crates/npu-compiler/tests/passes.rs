//! Each pass on small hand-built graphs.

mod common;

use common::{kinds, Ir};
use npu_compiler::expr::Instr;
use npu_compiler::graph::{FusedOp, Module, Op};
use npu_compiler::passes::{bn_fold, canonicalize, check, dce};
use npu_compiler::program::{Kernel, Recipe, Slot};
use npu_compiler::target::{CPU, NPU};
use npu_compiler::{compile, CompileError, CompileOptions};
use npu_ir::{BinaryOp, DType, Op as IrOp, UnaryOp};
use serde_json::json;

#[test]
fn canonicalize_drops_noops_and_resolves_getitem() {
    let mut ir = Ir::new();
    let x = ir.input("x", &[2, 8], "float32");
    let a = ir.op(
        "alias",
        "aten.alias.default",
        &[&x],
        &[2, 8],
        "float32",
        json!({}),
    );
    ir.op_multi(
        "assert",
        "aten._assert_tensor_metadata.default",
        &[&a],
        &[],
        json!({"dtype": "torch.float32"}),
    );
    let d = ir.op(
        "dropout",
        "aten.dropout.default",
        &[&a],
        &[2, 8],
        "float32",
        json!({"p": 0.0, "train": false}),
    );
    let c = ir.op(
        "to",
        "aten.to.dtype",
        &[&d],
        &[2, 8],
        "float32",
        json!({"dtype": "torch.float32"}),
    );
    let parts = ir.op_multi(
        "chunk",
        "aten.chunk.default",
        &[&c],
        &[(&[2, 4], "float32"), (&[2, 4], "float32")],
        json!({"chunks": 2, "dim": 1}),
    );
    let gi = ir.op_multi(
        "getitem",
        "<built-in function getitem>",
        &[&parts[0], &parts[1]],
        &[(&[2, 4], "float32")],
        json!({"index": 1}),
    );
    let r = ir.op(
        "relu",
        "aten.relu.default",
        &[&gi[0]],
        &[2, 4],
        "float32",
        json!({}),
    );
    ir.output(&r);
    let mut m = Module::new(ir.graph());
    let stats = canonicalize::canonicalize(&mut m).unwrap();
    assert_eq!(stats.resolved_getitems, 1);
    assert_eq!(stats.removed_noops, 4);
    let ops: Vec<String> = m.graph.nodes.iter().map(|n| n.op.name()).collect();
    assert_eq!(ops, vec!["chunk", "relu"]);
    // relu now reads chunk's second output directly.
    assert_eq!(m.graph.nodes[1].inputs[0], m.graph.nodes[0].outputs[1]);
}

/// A permutation that keeps the type is not a no-op: `x.permute(1, 0)` of a square x is its
/// transpose (it was dropped, so the graph returned x). Moving only size-1 dims is a no-op.
#[test]
fn canonicalize_keeps_a_square_permute() {
    let mut ir = Ir::new();
    let x = ir.input("x", &[4, 4], "float32");
    let p = ir.op(
        "p",
        "aten.permute.default",
        &[&x],
        &[4, 4],
        "float32",
        json!({"dims": [1, 0]}),
    );
    let y = ir.input("y", &[1, 4, 1], "float32");
    let q = ir.op(
        "q",
        "aten.permute.default",
        &[&y],
        &[1, 4, 1],
        "float32",
        json!({"dims": [2, 1, 0]}),
    );
    ir.output(&p);
    ir.output(&q);
    let mut m = Module::new(ir.graph());
    let stats = canonicalize::canonicalize(&mut m).unwrap();
    assert_eq!(stats.removed_noops, 1);
    let ops: Vec<String> = m.graph.nodes.iter().map(|n| n.op.name()).collect();
    assert_eq!(ops, vec!["permute"]);
}

#[test]
fn inplace_ops_become_functional() {
    let mut ir = Ir::new();
    let x = ir.input("x", &[4], "float32");
    let y = ir.input("y", &[4], "float32");
    let a = ir.op(
        "add_",
        "aten.add_.Tensor",
        &[&x, &y],
        &[4],
        "float32",
        json!({}),
    );
    let r = ir.op(
        "relu_",
        "aten.relu_.default",
        &[&a],
        &[4],
        "float32",
        json!({}),
    );
    ir.output(&r);
    let mut m = Module::new(ir.graph());
    let stats = canonicalize::canonicalize(&mut m).unwrap();
    assert_eq!(stats.functionalized, 2);
    assert!(m.graph.nodes.iter().all(|n| !n.inplace));
}

#[test]
fn mutation_through_a_shared_view_is_rejected() {
    // y = x.clone(); y[:, :2].mul_(2); return y + 1
    let mut ir = Ir::new();
    let x = ir.input("x", &[2, 4], "float32");
    let c = ir.op(
        "clone",
        "aten.clone.default",
        &[&x],
        &[2, 4],
        "float32",
        json!({}),
    );
    let s = ir.op(
        "slice_1",
        "aten.slice.Tensor",
        &[&c],
        &[2, 2],
        "float32",
        json!({"dim": 1, "start": 0, "end": 2}),
    );
    ir.op(
        "mul_",
        "aten.mul_.Tensor",
        &[&s],
        &[2, 2],
        "float32",
        json!({"other": 2}),
    );
    let a = ir.op(
        "add",
        "aten.add.Tensor",
        &[&c],
        &[2, 4],
        "float32",
        json!({"other": 1}),
    );
    ir.output(&a);
    let err = canonicalize::canonicalize(&mut Module::new(ir.graph()))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("node 'mul_'") && err.contains("mutation through views is not supported"),
        "{err}"
    );
}

#[test]
fn unreturned_state_mutation_is_rejected() {
    let mut ir = Ir::new();
    let pos = ir.input("pos", &[1], "int64");
    let new = ir.input("k", &[1, 2, 1, 4], "float32");
    let cache = ir.weight("cache", &[1, 2, 8, 4], "float32");
    let u = ir.op(
        "index_copy_",
        "aten.index_copy_.default",
        &[&cache, &pos, &new],
        &[1, 2, 8, 4],
        "float32",
        json!({"dim": 2}),
    );
    let s = ir.op(
        "sum",
        "aten.sum.dim_IntList",
        &[&u],
        &[1],
        "float32",
        json!({"dim": [1, 2, 3]}),
    );
    ir.output(&s);
    let err = canonicalize::canonicalize(&mut Module::new(ir.graph()))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("updates weight/buffer 'cache' in place"),
        "{err}"
    );
}

#[test]
fn check_reports_every_violation_naming_its_node() {
    let mut ir = Ir::new();
    let x = ir.input("x", &[4], "float32");
    let a = ir.op(
        "digamma",
        "aten.digamma.default",
        &[&x],
        &[4],
        "float32",
        json!({}),
    );
    let b = ir.op(
        "drop",
        "aten.dropout.default",
        &[&a],
        &[4],
        "float32",
        json!({"p": 0.1, "train": true}),
    );
    let c = ir.op(
        "cumsum",
        "aten.cumsum.default",
        &[&b],
        &[4],
        "float32",
        json!({"dim": 0}),
    );
    ir.output(&c);
    let v = npu_compiler::check(ir.graph(), &NPU).unwrap();
    let msgs: Vec<String> = v.iter().map(|v| v.to_string()).collect();
    assert_eq!(msgs.len(), 3, "{msgs:?}");
    assert!(msgs[0].starts_with(
        "node 'digamma' (aten.digamma.default): op 'aten.digamma.default' has no NPU lowering"
    ));
    assert!(msgs[1].contains("node 'drop'") && msgs[1].contains("dropout in training mode"));
    assert!(msgs[2].contains("node 'cumsum'"));
    let err = compile(ir.graph(), &CompileOptions::default()).unwrap_err();
    assert!(
        matches!(err, CompileError::Constraints { ref violations, .. } if violations.len() == 3)
    );
    assert!(err
        .to_string()
        .starts_with("3 constraint violation(s) for target 'npu'"));
}

fn conv_bn(ir: &mut Ir, with_bias: bool) -> (String, String) {
    let x = ir.input("x", &[2, 3, 8, 8], "float32");
    let w = ir.weight("conv.weight", &[5, 3, 3, 3], "float32");
    let mut ins = vec![x.clone(), w];
    if with_bias {
        ins.push(ir.weight("conv.bias", &[5], "float32"));
    }
    let ins_ref: Vec<&str> = ins.iter().map(|s| s.as_str()).collect();
    let c = ir.op(
        "conv2d",
        "aten.conv2d.default",
        &ins_ref,
        &[2, 5, 8, 8],
        "float32",
        json!({"padding": [1, 1]}),
    );
    let g = ir.weight("bn.weight", &[5], "float32");
    let b = ir.weight("bn.bias", &[5], "float32");
    let m = ir.weight("bn.running_mean", &[5], "float32");
    let v = ir.weight("bn.running_var", &[5], "float32");
    let bn = ir.op(
        "batch_norm",
        "aten.batch_norm.default",
        &[&c, &g, &b, &m, &v],
        &[2, 5, 8, 8],
        "float32",
        json!({"training": false, "momentum": 0.1, "eps": 1e-5, "cudnn_enabled": true}),
    );
    (c, bn)
}

#[test]
fn bn_folds_into_a_biasless_conv_keeping_the_shift() {
    let mut ir = Ir::new();
    let (_, bn) = conv_bn(&mut ir, false);
    let r = ir.op(
        "relu",
        "aten.relu_.default",
        &[&bn],
        &[2, 5, 8, 8],
        "float32",
        json!({}),
    );
    ir.output(&r);
    let p = ir.compile(&NPU, DType::F16);
    assert_eq!(kinds(&p), vec!["conv2d"], "conv+BN+ReLU is one step");
    let step = &p.steps[0];
    assert!(matches!(
        step.kernel,
        Kernel::Conv2d {
            act: Some(UnaryOp::Relu),
            padding: [1, 1],
            ..
        }
    ));
    assert_eq!(step.inputs.len(), 3, "the folded bias is bound");
    let Slot::Weight(b) = step.inputs[2].slot else {
        panic!()
    };
    let key = |i: u32| p.sources[i as usize].key.as_str();
    match &p.weights[b as usize].recipe {
        Recipe::BnFoldBias {
            bias: None,
            beta: Some(beta),
            mean,
            ..
        } => {
            assert_eq!((key(*beta), key(*mean)), ("bn.bias", "bn.running_mean"));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn bn_whose_conv_has_other_readers_stays_a_scale_and_shift() {
    let mut ir = Ir::new();
    let (c, bn) = conv_bn(&mut ir, true);
    let a = ir.op(
        "add",
        "aten.add.Tensor",
        &[&bn, &c],
        &[2, 5, 8, 8],
        "float32",
        json!({}),
    );
    ir.output(&a);
    let mut m = Module::new(ir.graph());
    let stats = bn_fold::fold_batch_norms(&mut m).unwrap();
    assert_eq!((stats.folded, stats.standalone), (0, 1));
    let recipes: Vec<_> = m.recipes.values().collect();
    assert!(recipes.iter().any(|r| matches!(r, Recipe::BnScale { .. })));
    assert!(recipes.iter().any(|r| matches!(r, Recipe::BnShift { .. })));
    let p = ir.compile(&CPU, DType::F32);
    // conv, then scale-shift fused with the residual add into one expression.
    assert_eq!(kinds(&p), vec!["conv2d", "elementwise"]);
    let Kernel::Elementwise { expr } = &p.steps[1].kernel else {
        panic!()
    };
    assert_eq!(expr.to_string(), "add(add(mul(in0, in1), in2), in0)");
    assert_eq!(
        p.steps[1].inputs[1].strides,
        vec![0, 1, 0, 0],
        "per-channel scale broadcast"
    );
}

#[test]
fn a_residual_add_and_its_relu_fold_into_the_conv() {
    for (relu, skip_first) in [(true, false), (false, true)] {
        let mut ir = Ir::new();
        let (_, bn) = conv_bn(&mut ir, false);
        let skip = ir.input("skip", &[2, 5, 8, 8], "float32");
        let ins: [&str; 2] = if skip_first {
            [&skip, &bn]
        } else {
            [&bn, &skip]
        };
        let mut y = ir.op(
            "add",
            "aten.add.Tensor",
            &ins,
            &[2, 5, 8, 8],
            "float32",
            json!({}),
        );
        if relu {
            y = ir.op(
                "relu",
                "aten.relu.default",
                &[&y],
                &[2, 5, 8, 8],
                "float32",
                json!({}),
            );
        }
        ir.output(&y);
        let p = ir.compile(&CPU, DType::F32);
        assert_eq!(kinds(&p), vec!["conv2d"], "relu {relu}");
        let step = &p.steps[0];
        let Kernel::Conv2d { act, residual, .. } = step.kernel else {
            panic!()
        };
        assert!(residual);
        assert_eq!(act, relu.then_some(UnaryOp::Relu));
        assert_eq!(
            step.inputs.len(),
            4,
            "x, the folded weight and bias, the residual"
        );
        assert_eq!(
            step.inputs[3].slot,
            Slot::Input(1),
            "the residual is `skip`"
        );
    }
}

#[test]
fn a_conv_read_twice_or_a_broadcast_addend_keeps_its_add() {
    for shared in [true, false] {
        let mut ir = Ir::new();
        let (_, bn) = conv_bn(&mut ir, false);
        let skip = if shared {
            ir.input("skip", &[2, 5, 8, 8], "float32")
        } else {
            ir.input("skip", &[1, 5, 1, 1], "float32")
        };
        let y = ir.op(
            "add",
            "aten.add.Tensor",
            &[&bn, &skip],
            &[2, 5, 8, 8],
            "float32",
            json!({}),
        );
        ir.output(&y);
        if shared {
            ir.output(&bn);
        }
        let p = ir.compile(&CPU, DType::F32);
        assert_eq!(kinds(&p), vec!["conv2d", "elementwise"], "shared {shared}");
        assert!(matches!(
            p.steps[0].kernel,
            Kernel::Conv2d {
                residual: false,
                ..
            }
        ));
    }
}

#[test]
fn dead_code_is_removed() {
    let mut ir = Ir::new();
    let x = ir.input("x", &[4], "float32");
    let a = ir.op("neg", "aten.neg.default", &[&x], &[4], "float32", json!({}));
    ir.op("exp", "aten.exp.default", &[&a], &[4], "float32", json!({}));
    let r = ir.op(
        "relu",
        "aten.relu.default",
        &[&x],
        &[4],
        "float32",
        json!({}),
    );
    ir.output(&r);
    let mut m = Module::new(ir.graph());
    assert_eq!(dce::eliminate_dead_code(&mut m.graph), 2);
    assert_eq!(m.graph.nodes.len(), 1);
}

#[test]
fn silu_mul_fuses_when_up_proj_comes_after_silu() {
    let mut ir = Ir::new();
    let x = ir.input("x", &[1, 3, 8], "bfloat16");
    let wg = ir.weight("gate.weight", &[16, 8], "bfloat16");
    let wu = ir.weight("up.weight", &[16, 8], "bfloat16");
    let wd = ir.weight("down.weight", &[8, 16], "bfloat16");
    let g = ir.op(
        "gate",
        "aten.linear.default",
        &[&x, &wg],
        &[1, 3, 16],
        "bfloat16",
        json!({}),
    );
    let s = ir.op(
        "silu",
        "aten.silu.default",
        &[&g],
        &[1, 3, 16],
        "bfloat16",
        json!({}),
    );
    let u = ir.op(
        "up",
        "aten.linear.default",
        &[&x, &wu],
        &[1, 3, 16],
        "bfloat16",
        json!({}),
    );
    let m = ir.op(
        "mul",
        "aten.mul.Tensor",
        &[&s, &u],
        &[1, 3, 16],
        "bfloat16",
        json!({}),
    );
    let d = ir.op(
        "down",
        "aten.linear.default",
        &[&m, &wd],
        &[1, 3, 8],
        "bfloat16",
        json!({}),
    );
    ir.output(&d);
    let p = ir.compile(&NPU, DType::BF16);
    // gate and up read the same x: one GEMM over their concatenated weights, whose two
    // halves the silu * mul kernel reads as views
    assert_eq!(kinds(&p), vec!["gemm", "elementwise", "gemm"]);
    let Kernel::Elementwise { expr } = &p.steps[1].kernel else {
        panic!()
    };
    assert_eq!(expr.to_string(), "mul(silu(in0), in1)");
    let (gate, up) = (&p.steps[1].inputs[0], &p.steps[1].inputs[1]);
    assert_eq!(gate.slot, up.slot, "both halves of one GEMM output");
    assert_eq!(
        up.byte_offset - gate.byte_offset,
        16 * 2,
        "up starts after gate's 16 bf16 columns"
    );
}

#[test]
fn qkv_linears_become_one_gemm_and_residual_adds_its_bias() {
    let mut ir = Ir::new();
    let x = ir.input("x", &[1, 2, 8], "float32");
    let mut outs = Vec::new();
    for (name, n) in [("q", 8), ("k", 4), ("v", 4)] {
        let w = ir.weight(&format!("{name}.weight"), &[n, 8], "float32");
        let b = ir.weight(&format!("{name}.bias"), &[n], "float32");
        outs.push(ir.op(
            name,
            "aten.linear.default",
            &[&x, &w, &b],
            &[1, 2, n],
            "float32",
            json!({}),
        ));
    }
    let wo = ir.weight("o.weight", &[8, 8], "float32");
    let o = ir.op(
        "o",
        "aten.linear.default",
        &[&outs[0], &wo],
        &[1, 2, 8],
        "float32",
        json!({}),
    );
    let r = ir.op(
        "res",
        "aten.add.Tensor",
        &[&x, &o],
        &[1, 2, 8],
        "float32",
        json!({}),
    );
    ir.output(&r);
    ir.output(&outs[1]);
    ir.output(&outs[2]);
    let p = ir.compile(&NPU, DType::F32);
    // one GEMM for q/k/v (k and v are views of its output), one for o with x as its bias
    assert_eq!(kinds(&p), vec!["gemm", "gemm", "copy", "copy"]);
    let qkv = &p.steps[0];
    assert_eq!(
        qkv.inputs[1].shape,
        [8, 16],
        "the concatenated weight, transposed"
    );
    assert_eq!(
        p.weights
            .iter()
            .filter(|w| w.name.starts_with("concat("))
            .count(),
        2
    );
    let o = &p.steps[1];
    assert!(matches!(o.kernel, Kernel::Gemm { beta, .. } if beta == 1.0));
    assert_eq!(o.inputs.len(), 3, "x bound as the bias term");
}

#[test]
fn fused_chains_broadcast_operands_and_divide_by_scalars() {
    let mut ir = Ir::new();
    let x = ir.input("x", &[2, 3, 4], "float32");
    let b = ir.input("b", &[4], "float32");
    let c = ir.input("c", &[3, 1], "float32");
    let a = ir.op(
        "add",
        "aten.add.Tensor",
        &[&x, &b],
        &[2, 3, 4],
        "float32",
        json!({}),
    );
    let r = ir.op(
        "relu",
        "aten.relu.default",
        &[&a],
        &[2, 3, 4],
        "float32",
        json!({}),
    );
    let m = ir.op(
        "mul",
        "aten.mul.Tensor",
        &[&r, &c],
        &[2, 3, 4],
        "float32",
        json!({}),
    );
    let d = ir.op(
        "div",
        "aten.div.Tensor",
        &[&m],
        &[2, 3, 4],
        "float32",
        json!({"other": 4}),
    );
    ir.output(&d);
    let p = ir.compile(&CPU, DType::F32);
    assert_eq!(kinds(&p), vec!["elementwise"]);
    let step = &p.steps[0];
    let Kernel::Elementwise { expr } = &step.kernel else {
        panic!()
    };
    assert_eq!(expr.to_string(), "div(mul(relu(add(in0, in1)), in2), 4)");
    assert!(
        expr.code.contains(&Instr::Binary(BinaryOp::Div)),
        "x / 4 is a division"
    );
    assert_eq!(step.inputs[1].strides, vec![0, 0, 1]);
    assert_eq!(step.inputs[2].strides, vec![0, 1, 0]);
    assert_eq!(
        step.outputs[0].slot,
        Slot::Output(0),
        "written straight into the output"
    );
}

#[test]
fn masked_softmax_reads_a_broadcast_mask() {
    let mut ir = Ir::new();
    let s = ir.input("scores", &[1, 4, 3, 5], "float32");
    let mask = ir.input("mask", &[1, 1, 3, 5], "float32");
    let a = ir.op(
        "add",
        "aten.add.Tensor",
        &[&s, &mask],
        &[1, 4, 3, 5],
        "float32",
        json!({}),
    );
    let sm = ir.op(
        "softmax",
        "aten.softmax.int",
        &[&a],
        &[1, 4, 3, 5],
        "float32",
        json!({"dim": -1}),
    );
    ir.output(&sm);
    let p = ir.compile(&CPU, DType::F32);
    assert_eq!(kinds(&p), vec!["softmax"]);
    assert_eq!(p.steps[0].inputs[1].strides, vec![15, 0, 5, 1]);
}

/// Eager GQA attention as transformers writes it: q [1,H,S,D], k/v [1,KVH,T,D].
fn eager_attention(ir: &mut Ir, h: usize, kvh: usize, s: usize, t: usize, d: usize) -> String {
    let q = ir.input("q", &[1, h, s, d], "bfloat16");
    let k = ir.input("k", &[1, kvh, t, d], "bfloat16");
    let v = ir.input("v", &[1, kvh, t, d], "bfloat16");
    let mask = ir.input("mask", &[1, 1, s, t], "bfloat16");
    let n = h / kvh;
    let mut rep = |name: &str, x: &str| {
        let u = ir.op(
            &format!("{name}_unsq"),
            "aten.unsqueeze.default",
            &[x],
            &[1, kvh, 1, t, d],
            "bfloat16",
            json!({"dim": 2}),
        );
        let e = ir.op(
            &format!("{name}_exp"),
            "aten.expand.default",
            &[&u],
            &[1, kvh, n, t, d],
            "bfloat16",
            json!({"size": [1, kvh, n, t, d]}),
        );
        ir.op(
            &format!("{name}_rs"),
            "aten.reshape.default",
            &[&e],
            &[1, h, t, d],
            "bfloat16",
            json!({"shape": [1, h, t, d]}),
        )
    };
    let kr = rep("k", &k);
    let vr = rep("v", &v);
    let kt = ir.op(
        "kt",
        "aten.transpose.int",
        &[&kr],
        &[1, h, d, t],
        "bfloat16",
        json!({"dim0": 2, "dim1": 3}),
    );
    let sc = ir.op(
        "qk",
        "aten.matmul.default",
        &[&q, &kt],
        &[1, h, s, t],
        "bfloat16",
        json!({}),
    );
    let sc = ir.op(
        "scale",
        "aten.mul.Tensor",
        &[&sc],
        &[1, h, s, t],
        "bfloat16",
        json!({"other": 0.125}),
    );
    let sc = ir.op(
        "masked",
        "aten.add.Tensor",
        &[&sc, &mask],
        &[1, h, s, t],
        "bfloat16",
        json!({}),
    );
    let p = ir.op(
        "softmax",
        "aten.softmax.int",
        &[&sc],
        &[1, h, s, t],
        "float32",
        json!({"dim": -1, "dtype": "torch.float32"}),
    );
    let p = ir.op(
        "to",
        "aten.to.dtype",
        &[&p],
        &[1, h, s, t],
        "bfloat16",
        json!({"dtype": "torch.bfloat16"}),
    );
    let p = ir.op(
        "dropout",
        "aten.dropout.default",
        &[&p],
        &[1, h, s, t],
        "bfloat16",
        json!({"p": 0.0, "train": false}),
    );
    let o = ir.op(
        "pv",
        "aten.matmul.default",
        &[&p, &vr],
        &[1, h, s, d],
        "bfloat16",
        json!({}),
    );
    let o = ir.op(
        "ot",
        "aten.transpose.int",
        &[&o],
        &[1, s, h, d],
        "bfloat16",
        json!({"dim0": 1, "dim1": 2}),
    );
    ir.op(
        "merge",
        "aten.reshape.default",
        &[&o],
        &[1, s, h * d],
        "bfloat16",
        json!({"shape": [1, s, h * d]}),
    )
}

#[test]
fn gqa_attention_fuses_without_materializing_expand() {
    let mut ir = Ir::new();
    let out = eager_attention(&mut ir, 6, 2, 3, 4100, 16);
    ir.output(&out);
    let p = ir.compile(&NPU, DType::BF16);
    assert_eq!(
        kinds(&p),
        vec!["attention"],
        "writes the merged-heads output directly"
    );
    let st = &p.steps[0];
    let Kernel::Attention {
        scale,
        causal: false,
    } = st.kernel
    else {
        panic!()
    };
    assert_eq!(scale, 0.125);
    assert_eq!(
        st.inputs[1].shape,
        vec![1, 2, 4100, 16],
        "K keeps its 2 KV heads"
    );
    assert_eq!(
        st.inputs[3].strides,
        vec![3 * 4100, 0, 4100, 1],
        "mask broadcast over heads"
    );
    // The attention output is laid out so transpose+reshape is a view: [1,H,S,D] stored as [1,S,H,D].
    assert_eq!(st.outputs[0].slot, Slot::Output(0));
    assert_eq!(st.outputs[0].strides, vec![3 * 6 * 16, 16, 6 * 16, 1]);
}

#[test]
fn rope_and_rmsnorm_fuse() {
    let mut ir = Ir::new();
    let x = ir.input("x", &[1, 2, 3, 8], "bfloat16");
    let cos = ir.input("cos", &[1, 1, 3, 8], "bfloat16");
    let sin = ir.input("sin", &[1, 1, 3, 8], "bfloat16");
    let xc = ir.op(
        "xc",
        "aten.mul.Tensor",
        &[&x, &cos],
        &[1, 2, 3, 8],
        "bfloat16",
        json!({}),
    );
    let lo = ir.op(
        "lo",
        "aten.slice.Tensor",
        &[&x],
        &[1, 2, 3, 4],
        "bfloat16",
        json!({"dim": 3, "start": 0, "end": 4}),
    );
    let hi = ir.op(
        "hi",
        "aten.slice.Tensor",
        &[&x],
        &[1, 2, 3, 4],
        "bfloat16",
        json!({"dim": 3, "start": 4, "end": i64::MAX}),
    );
    let ng = ir.op(
        "neg",
        "aten.neg.default",
        &[&hi],
        &[1, 2, 3, 4],
        "bfloat16",
        json!({}),
    );
    let rot = ir.op(
        "cat",
        "aten.cat.default",
        &[&ng, &lo],
        &[1, 2, 3, 8],
        "bfloat16",
        json!({"dim": -1}),
    );
    let rs = ir.op(
        "rs",
        "aten.mul.Tensor",
        &[&rot, &sin],
        &[1, 2, 3, 8],
        "bfloat16",
        json!({}),
    );
    let y = ir.op(
        "rope",
        "aten.add.Tensor",
        &[&xc, &rs],
        &[1, 2, 3, 8],
        "bfloat16",
        json!({}),
    );
    // RMSNorm over the rotated values, as transformers writes it.
    let w = ir.weight("norm.weight", &[8], "bfloat16");
    let h = ir.op(
        "h",
        "aten.to.dtype",
        &[&y],
        &[1, 2, 3, 8],
        "float32",
        json!({"dtype": "torch.float32"}),
    );
    let sq = ir.op(
        "pow",
        "aten.pow.Tensor_Scalar",
        &[&h],
        &[1, 2, 3, 8],
        "float32",
        json!({"exponent": 2}),
    );
    let mean = ir.op(
        "mean",
        "aten.mean.dim",
        &[&sq],
        &[1, 2, 3, 1],
        "float32",
        json!({"dim": [-1], "keepdim": true}),
    );
    let eps = ir.op(
        "eps",
        "aten.add.Tensor",
        &[&mean],
        &[1, 2, 3, 1],
        "float32",
        json!({"other": 1e-6}),
    );
    let r = ir.op(
        "rsqrt",
        "aten.rsqrt.default",
        &[&eps],
        &[1, 2, 3, 1],
        "float32",
        json!({}),
    );
    let n = ir.op(
        "norm",
        "aten.mul.Tensor",
        &[&h, &r],
        &[1, 2, 3, 8],
        "float32",
        json!({}),
    );
    let n = ir.op(
        "back",
        "aten.to.dtype",
        &[&n],
        &[1, 2, 3, 8],
        "bfloat16",
        json!({"dtype": "torch.bfloat16"}),
    );
    let out = ir.op(
        "scaled",
        "aten.mul.Tensor",
        &[&w, &n],
        &[1, 2, 3, 8],
        "bfloat16",
        json!({}),
    );
    ir.output(&out);
    let p = ir.compile(&NPU, DType::BF16);
    assert_eq!(kinds(&p), vec!["rope", "rms_norm"]);
    assert_eq!(
        p.steps[0].inputs[1].strides,
        vec![24, 0, 8, 1],
        "cos broadcast over heads"
    );
    let Kernel::RmsNorm { eps } = p.steps[1].kernel else {
        panic!()
    };
    assert!((eps - 1e-6).abs() < 1e-12);
}

#[test]
fn npu_pads_channels_invisibly() {
    let mut ir = Ir::new();
    let x = ir.input("x", &[2, 3, 8, 8], "float32");
    let w = ir.weight("w", &[20, 3, 3, 3], "float32");
    let c = ir.op(
        "conv",
        "aten.conv2d.default",
        &[&x, &w],
        &[2, 20, 6, 6],
        "float32",
        json!({}),
    );
    let r = ir.op(
        "relu",
        "aten.relu.default",
        &[&c],
        &[2, 20, 6, 6],
        "float32",
        json!({}),
    );
    let pool = ir.op(
        "pool",
        "aten.max_pool2d.default",
        &[&r],
        &[2, 20, 3, 3],
        "float32",
        json!({"kernel_size": [2, 2]}),
    );
    let f = ir.op(
        "flat",
        "aten.flatten.using_ints",
        &[&pool],
        &[2, 180],
        "float32",
        json!({"start_dim": 1}),
    );
    ir.output(&f);
    let p = ir.compile(&NPU, DType::F16);
    assert_eq!(kinds(&p), vec!["conv2d", "max_pool2d", "copy"]);
    assert_eq!(
        p.steps[0].outputs[0].strides,
        vec![32 * 36, 36, 6, 1],
        "20 channels stored as 32"
    );
    assert_eq!(p.steps[1].outputs[0].strides, vec![32 * 9, 9, 3, 1]);
    assert_eq!(p.steps[2].outputs[0].slot, Slot::Output(0));
    assert!(
        p.steps[2].outputs[0].is_contiguous(),
        "the program output is dense"
    );
    let q = ir.compile(&CPU, DType::F16);
    assert_eq!(
        kinds(&q),
        vec!["conv2d", "max_pool2d"],
        "no padding on the CPU target, flatten is a view"
    );
}

#[test]
fn views_copy_only_when_strides_cannot_express_them() {
    let mut ir = Ir::new();
    let x = ir.input("x", &[4, 6], "float32");
    let w = ir.input("w", &[4, 5], "float32");
    let t = ir.op(
        "t",
        "aten.transpose.int",
        &[&x],
        &[6, 4],
        "float32",
        json!({"dim0": 0, "dim1": 1}),
    );
    let mm = ir.op(
        "mm",
        "aten.matmul.default",
        &[&t, &w],
        &[6, 5],
        "float32",
        json!({}),
    );
    let e = ir.op(
        "exp",
        "aten.exp.default",
        &[&x],
        &[4, 6],
        "float32",
        json!({}),
    );
    let et = ir.op(
        "et",
        "aten.transpose.int",
        &[&e],
        &[6, 4],
        "float32",
        json!({"dim0": 0, "dim1": 1}),
    );
    let r = ir.op(
        "flat",
        "aten.reshape.default",
        &[&et],
        &[24],
        "float32",
        json!({"shape": [24]}),
    );
    let s = ir.op(
        "sl",
        "aten.slice.Tensor",
        &[&x],
        &[4, 3],
        "float32",
        json!({"dim": 1, "start": 1, "end": 4}),
    );
    let rs = ir.op(
        "rs",
        "aten.reshape.default",
        &[&s],
        &[12],
        "float32",
        json!({"shape": [12]}),
    );
    ir.output(&mm);
    ir.output(&r);
    ir.output(&rs);
    let p = ir.compile(&CPU, DType::F32);
    // transpose into matmul: strides; exp laid out transposed so the reshape is free;
    // the sliced rows cannot merge, so one copy, straight into the output.
    assert_eq!(kinds(&p), vec!["gemm", "elementwise", "copy"]);
    assert_eq!(p.steps[0].inputs[0].strides, vec![1, 6]);
    let sl = &p.steps[2].inputs[0];
    assert_eq!((sl.byte_offset, sl.strides.clone()), (4, vec![6, 1]));
    assert_eq!(p.steps[2].outputs[0].slot, Slot::Output(2));

    // A strided slice whose rows continue one another is still a view.
    let mut ir = Ir::new();
    let x = ir.input("x", &[4, 6], "float32");
    let s = ir.op(
        "sl",
        "aten.slice.Tensor",
        &[&x],
        &[4, 3],
        "float32",
        json!({"dim": 1, "start": 1, "end": 6, "step": 2}),
    );
    let rs = ir.op(
        "rs",
        "aten.reshape.default",
        &[&s],
        &[12],
        "float32",
        json!({"shape": [12]}),
    );
    let e = ir.op(
        "exp",
        "aten.exp.default",
        &[&rs],
        &[12],
        "float32",
        json!({}),
    );
    ir.output(&e);
    let p = ir.compile(&CPU, DType::F32);
    assert_eq!(kinds(&p), vec!["elementwise"]);
    assert_eq!(p.steps[0].inputs[0].strides, vec![2]);
}

#[test]
fn arena_reuses_dead_buffers() {
    let mut ir = Ir::new();
    let mut cur = ir.input("x", &[1024], "float32");
    let w = ir.input("w", &[1024, 1024], "float32");
    for i in 0..10 {
        // matmuls do not fuse, so each result is a fresh intermediate
        cur = ir.op(
            &format!("mm{i}"),
            "aten.matmul.default",
            &[&cur, &w],
            &[1024],
            "float32",
            json!({}),
        );
    }
    ir.output(&cur);
    let p = ir.compile(&CPU, DType::F32);
    assert_eq!(p.steps.len(), 10);
    assert!(
        p.arena_bytes <= 2 * 4096,
        "ping-pong between two buffers, got {}",
        p.arena_bytes
    );
}

/// A cache input updated by `index_copy` and returned; returns (ir, old cache, updated cache).
fn cache_update() -> (Ir, String, String) {
    let mut ir = Ir::new();
    let pos = ir.input("cache_position", &[1], "int64");
    let cache = ir.input("past_key_0", &[1, 2, 16, 4], "float32");
    let new = ir.input("k", &[1, 2, 1, 4], "float32");
    let u = ir.op(
        "index_copy",
        "aten.index_copy.default",
        &[&cache, &pos, &new],
        &[1, 2, 16, 4],
        "float32",
        json!({"dim": 2}),
    );
    (ir, cache, u)
}

#[test]
fn kv_cache_update_is_donated_in_place() {
    let (mut ir, _, u) = cache_update();
    let s = ir.op(
        "mean",
        "aten.mean.dim",
        &[&u],
        &[1, 2, 1, 4],
        "float32",
        json!({"dim": [2], "keepdim": true}),
    );
    ir.output(&s);
    ir.output(&u);
    let p = ir.compile(&CPU, DType::F32);
    assert_eq!(
        kinds(&p),
        vec!["index_copy", "reduce"],
        "no copy of the cache"
    );
    assert_eq!(p.steps[0].outputs[0].slot, Slot::Input(1));
    assert_eq!(p.outputs[1].donates_input, Some(1));

    // When the old cache is read again, the update must not clobber it.
    let (mut ir, cache, u) = cache_update();
    let d = ir.op(
        "sub",
        "aten.sub.Tensor",
        &[&u, &cache],
        &[1, 2, 16, 4],
        "float32",
        json!({}),
    );
    ir.output(&d);
    ir.output(&u);
    let p = ir.compile(&CPU, DType::F32);
    assert_eq!(kinds(&p), vec!["copy", "index_copy", "elementwise"]);
    assert_eq!(
        p.steps[0].outputs[0].slot,
        Slot::Output(1),
        "the updated copy is the output"
    );
    assert_eq!(p.outputs[1].donates_input, None);
}

#[test]
fn integer_inputs_keep_their_dtype() {
    let mut ir = Ir::new();
    let ids = ir.input("input_ids", &[1, 5], "int64");
    let table = ir.weight("embed.weight", &[100, 8], "float32");
    let e = ir.op(
        "embedding",
        "aten.embedding.default",
        &[&table, &ids],
        &[1, 5, 8],
        "float32",
        json!({}),
    );
    ir.output(&e);
    let p = ir.compile(&NPU, DType::F16);
    assert_eq!(
        (p.inputs[0].dtype, p.inputs[0].storage),
        (DType::I64, DType::I64)
    );
    assert_eq!(p.steps[0].inputs[1].dtype, DType::I64);
    assert_eq!(p.outputs[0].storage, DType::F16);
    assert_eq!(p.weights[0].dtype, DType::F16);
}

#[test]
fn fused_ops_report_names() {
    assert_eq!(Op::Fused(FusedOp::RmsNorm { eps: 1e-6 }).name(), "rms_norm");
    assert_eq!(Op::Ir(IrOp::Linear).name(), "linear");
    assert!(check::check(&Module::new(Ir::new().graph()).graph, &NPU).is_empty());
}

#[test]
fn program_outputs_keep_their_graph_names_through_substitutions() {
    // BN folding replaces the batch_norm value by the conv's, and a no-op clone by its
    // input; the program must still call the outputs what the graph calls them.
    let mut ir = Ir::new();
    let (_, bn) = conv_bn(&mut ir, false);
    let c = ir.op(
        "clone",
        "aten.clone.default",
        &[&bn],
        &[2, 5, 8, 8],
        "float32",
        json!({}),
    );
    ir.output(&bn);
    ir.output(&c);
    let p = ir.compile(&NPU, DType::F32);
    let names: Vec<&str> = p.outputs.iter().map(|o| o.name.as_str()).collect();
    assert_eq!(names, ["batch_norm", "clone"]);
}
