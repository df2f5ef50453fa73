use super::*;
use crate::op::Op;
use serde_json::{Map, Value as Json};

fn p(op_type: &str, attrs: &str, n: usize, rank: usize) -> Op {
    let m: Map<String, Json> = serde_json::from_str(attrs).unwrap();
    Op::parse("n", op_type, &m, n, rank).unwrap().0
}

#[test]
fn composites_are_typed_with_aten_defaults() {
    assert_eq!(
        p("aten.diff.default", r#"{"n": 1, "dim": -1}"#, 2, 2),
        Op::Composite(Composite::Diff {
            n: 1,
            dim: -1,
            prepend: true,
            append: false
        })
    );
    assert_eq!(
        p("aten.var.dim", r#"{"dim": [1]}"#, 1, 2),
        Op::Composite(Composite::Moments {
            kind: Moment::Var,
            dims: Some(vec![1]),
            correction: 1.0,
            keepdim: false
        })
    );
    assert_eq!(
        p("aten.var_mean.correction", r#"{"correction": 0}"#, 1, 2),
        Op::Composite(Composite::Moments {
            kind: Moment::VarMean,
            dims: None,
            correction: 0.0,
            keepdim: false
        })
    );
    assert_eq!(
        p("aten.celu.default", r#"{"alpha": 0.5}"#, 1, 2),
        // a pointwise table op now (one kernel on the NPU), not a composite
        Op::Unary(crate::UnaryOp::Elu {
            alpha: 0.5,
            scale: 1.0,
            input_scale: 2.0
        })
    );
    assert_eq!(
        p("aten.conv1d.padding", r#"{"padding": "same"}"#, 2, 3),
        Op::Composite(Composite::Conv1d {
            stride: 1,
            padding: Padding1d::Same,
            dilation: 1,
            groups: 1
        })
    );
    assert_eq!(
        p("aten.tile.default", r#"{"dims": [2]}"#, 1, 3),
        Op::Composite(Composite::Repeat {
            repeats: vec![1, 1, 2]
        })
    );
    assert_eq!(
        p("aten.rsub.Scalar", r#"{"other": 2.0, "alpha": 3}"#, 1, 2),
        Op::Composite(Composite::Rsub {
            alpha: 3.0,
            scalar: Some(2.0)
        })
    );
    assert!(matches!(
        p(
            "aten.pad.default",
            r#"{"pad": [1, 1], "mode": "reflect"}"#,
            1,
            2
        ),
        Op::Ext(_)
    ));
}

#[test]
fn view_aliases_become_primitive_views() {
    assert_eq!(
        p(
            "aten.movedim.int",
            r#"{"source": 0, "destination": 2}"#,
            1,
            4
        ),
        Op::Permute {
            dims: vec![1, 2, 0, 3]
        }
    );
    assert_eq!(
        p(
            "aten.movedim.intlist",
            r#"{"source": [0, 1], "destination": [-1, 0]}"#,
            1,
            3
        ),
        Op::Permute {
            dims: vec![1, 2, 0]
        }
    );
    assert_eq!(
        p("aten.numpy_T.default", "{}", 1, 3),
        Op::Permute {
            dims: vec![2, 1, 0]
        }
    );
    assert_eq!(
        p("aten.mT.default", "{}", 1, 3),
        Op::Transpose { dim0: -2, dim1: -1 }
    );
    assert_eq!(p("aten.unflatten.int", r#"{"dim": 1}"#, 1, 2), Op::Reshape);
}
