//! Each contract accepts what its kernel runs and refuses what would read or write past an
//! operand. (Operands are built per call, hence the clones.)
#![allow(clippy::cloned_ref_to_slice_refs)]

use super::*;
use crate::expr::{Expr, Instr};
use crate::program::{dense_strides, PoolKind, Slot};

fn b(shape: &[usize], dtype: DType) -> Binding {
    Binding {
        slot: Slot::Arena,
        byte_offset: 0,
        shape: shape.to_vec(),
        strides: dense_strides(shape),
        dtype,
    }
}

fn f(shape: &[usize]) -> Binding {
    b(shape, DType::F32)
}

fn gemm() -> Kernel {
    Kernel::Gemm {
        alpha: 1.0,
        beta: 1.0,
        act: None,
        residual: false,
        norm: None,
    }
}

#[test]
fn operand_counts_follow_the_arity() {
    let e = gemm().check(&[f(&[2, 3])], &[f(&[2, 4])]).unwrap_err();
    assert!(e.contains("gemm takes 2..=3 inputs"), "{e}");
    let e = Kernel::Rope
        .check(&[f(&[4]), f(&[4]), f(&[4])], &[])
        .unwrap_err();
    assert!(e.contains("got 3 and 0"), "{e}");
    let fill = Kernel::Fill { value: 0.0 };
    assert!(fill.check::<Binding>(&[], &[f(&[3])]).is_ok());
    let ew = Kernel::Elementwise {
        expr: Expr {
            code: vec![Instr::Load(0)],
        },
    };
    assert!(ew.check(&[f(&[2, 3])], &[f(&[2, 3])]).is_ok());
    assert!(ew.check(&[f(&[3, 2])], &[f(&[2, 3])]).is_err());
}

/// Batch dims broadcast (size 1) or match: a mismatch would walk past an operand.
#[test]
fn gemm_operands_chain_and_broadcast() {
    let ok =
        |a: &[usize], bm: &[usize], out: &[usize]| gemm().check(&[f(a), f(bm)], &[f(out)]).is_ok();
    assert!(ok(&[2, 5, 3], &[3, 4], &[2, 5, 4]));
    assert!(ok(&[1, 5, 3], &[2, 3, 4], &[2, 5, 4]));
    assert!(!ok(&[3, 5, 3], &[3, 4], &[2, 5, 4]), "batch 3 into 2");
    assert!(!ok(&[5, 3], &[4, 4], &[5, 4]), "k does not chain");
    let bias_ok = |bias: &[usize]| {
        gemm()
            .check(&[f(&[5, 3]), f(&[3, 4]), f(bias)], &[f(&[5, 4])])
            .is_ok()
    };
    assert!(bias_ok(&[4]) && bias_ok(&[5, 4]) && bias_ok(&[1, 4]));
    assert!(!bias_ok(&[5]) && !bias_ok(&[2, 5, 4]));
    let residual = Kernel::Gemm {
        alpha: 1.0,
        beta: 1.0,
        act: None,
        residual: true,
        norm: None,
    };
    assert!(residual
        .check(&[f(&[5, 3]), f(&[3, 4])], &[f(&[5, 4])])
        .is_err());
    let normed = Kernel::Gemm {
        alpha: 1.0,
        beta: 1.0,
        act: None,
        residual: false,
        norm: Some(1e-6),
    };
    assert!(normed
        .check(&[f(&[5, 3]), f(&[3, 4]), f(&[3])], &[f(&[5, 4])])
        .is_ok());
    assert!(normed
        .check(&[f(&[5, 3]), f(&[3, 4]), f(&[4])], &[f(&[5, 4])])
        .is_err());
}

/// An output of the right element count but the wrong row length would be written past.
#[test]
fn embedding_output_is_ids_then_the_row() {
    let t = f(&[10, 4]);
    let ids = b(&[2], DType::I64);
    assert!(Kernel::Embedding
        .check(&[t.clone(), ids.clone()], &[f(&[2, 4])])
        .is_ok());
    assert!(Kernel::Embedding
        .check(&[t.clone(), ids], &[f(&[4, 2])])
        .is_err());
    let e = Kernel::Embedding
        .check(&[t, f(&[2])], &[f(&[2, 4])])
        .unwrap_err();
    assert!(e.contains("ids must be integers"), "{e}");
}

#[test]
fn attention_heads_group_and_mask_is_full() {
    let k = Kernel::Attention {
        scale: 0.5,
        causal: false,
    };
    let (q, kv, o) = (f(&[1, 4, 3, 8]), f(&[1, 2, 5, 8]), f(&[1, 4, 3, 8]));
    assert!(k
        .check(&[q.clone(), kv.clone(), kv.clone()], &[o.clone()])
        .is_ok());
    let mask = f(&[1, 4, 3, 5]);
    assert!(k
        .check(&[q.clone(), kv.clone(), kv.clone(), mask], &[o.clone()])
        .is_ok());
    let bad_mask = f(&[1, 1, 3, 5]);
    assert!(k
        .check(&[q.clone(), kv.clone(), kv.clone(), bad_mask], &[o.clone()])
        .is_err());
    let three = f(&[1, 3, 5, 8]);
    assert!(k.check(&[q, three.clone(), three], &[o]).is_err());
}

#[test]
fn pools_follow_their_windows() {
    let pool = |k: usize| Kernel::Pool2d {
        kind: PoolKind::Max,
        kernel: [k, k],
        stride: [2, 2],
        padding: [0, 0],
        dilation: [1, 1],
    };
    let x = f(&[1, 3, 8, 8]);
    assert!(pool(2).check(&[x.clone()], &[f(&[1, 3, 4, 4])]).is_ok());
    assert!(pool(2).check(&[x.clone()], &[f(&[1, 3, 5, 5])]).is_err());
    assert!(pool(9).check(&[x.clone()], &[f(&[1, 3, 1, 1])]).is_err());
    assert!(pool(2).check(&[x], &[f(&[1, 4, 4, 4])]).is_err());
}

#[test]
fn index_copy_and_norms() {
    let ic = Kernel::IndexCopy { axis: 2 };
    let idx = b(&[1], DType::I64);
    let (src, dst) = (f(&[1, 2, 1, 8]), f(&[1, 2, 16, 8]));
    assert!(ic
        .check(&[idx.clone(), src.clone()], &[dst.clone()])
        .is_ok());
    assert!(ic
        .check(&[b(&[2], DType::I64), src.clone()], &[dst.clone()])
        .is_err());
    assert!(ic.check(&[f(&[1]), src], &[dst]).is_err());
    let ln = Kernel::LayerNorm {
        eps: 1e-5,
        has_weight: false,
        has_bias: true,
    };
    assert!(ln.check(&[f(&[2, 6]), f(&[6])], &[f(&[2, 6])]).is_ok());
    assert!(ln.check(&[f(&[2, 6]), f(&[5])], &[f(&[2, 6])]).is_err());
    let red = Kernel::Reduce {
        op: crate::program::ReduceOp::Mean,
        reduced: 2,
    };
    assert!(red.check(&[f(&[2, 3, 4])], &[f(&[2, 1, 1])]).is_ok());
    assert!(red.check(&[f(&[2, 3, 4])], &[f(&[3])]).is_err());
}
