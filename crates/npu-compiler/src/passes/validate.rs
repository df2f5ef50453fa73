//! Shape and attribute validation of the ops the compiler lowers: one answer, used by both
//! `check` and `compile` (through [`crate::passes::check`]), so anything `check` accepts
//! lowers. It runs before fusion, so a problem names the IR node at fault (the `linear`,
//! not the `gelu` a fused `linear+gelu` later replaces).
//!
//! Invariant: when [`node_problem`] returns `None` for every node, lowering cannot fail on
//! a dim out of range, a mismatched contraction, an unbroadcastable operand, a slice past
//! the end or a rank beyond [`MAX_RANK`].

use crate::graph::norm_dim;
use crate::program::{conv_out_len, pool_axis_agrees, pool_out_len};
use npu_ir::{Graph, Node, Op as IrOp, TensorType};

/// The most dims a tensor may have: bindings and kernels index up to 8 dims.
pub const MAX_RANK: usize = 8;

/// The first problem with `node` (generic over the graph's op type; `op` is its IR op, or
/// `None` for a fused op, of which only ranks are checked), or `None`.
pub fn node_problem<O>(op: Option<&IrOp>, node: &Node<O>, g: &Graph<O>) -> Option<String> {
    for &v in node.inputs.iter().chain(&node.outputs) {
        let t = g.ty(v);
        if t.rank() > MAX_RANK {
            return Some(format!(
                "tensor '{}' has rank {} (at most {MAX_RANK} dims are supported)",
                g.value(v).name,
                t.rank()
            ));
        }
    }
    let op = op?;
    let ins: Vec<&TensorType> = node.inputs.iter().map(|&v| g.ty(v)).collect();
    let outs: Vec<&TensorType> = node.outputs.iter().map(|&v| g.ty(v)).collect();
    op_problem(op, &ins, &outs).err()
}

type Check = Result<(), String>;

fn need(ins: &[&TensorType], n: usize, what: &str) -> Check {
    if ins.len() < n {
        return Err(format!("{what} needs {n} operand(s), got {}", ins.len()));
    }
    Ok(())
}

fn out0<'a>(outs: &[&'a TensorType]) -> Result<&'a [usize], String> {
    outs.first()
        .map(|t| t.shape.as_slice())
        .ok_or_else(|| "has no output".to_string())
}

fn dim(d: i64, rank: usize, what: &str) -> Result<usize, String> {
    norm_dim(d, rank).ok_or_else(|| format!("{what} dim {d} is out of range for rank {rank}"))
}

/// True when `small` broadcasts to `big` (numpy rules, right-aligned).
fn broadcasts(small: &[usize], big: &[usize]) -> bool {
    small.len() <= big.len()
        && small
            .iter()
            .rev()
            .zip(big.iter().rev())
            .all(|(s, b)| *s == 1 || s == b)
}

fn same_shape(what: &str, got: &[usize], want: &[usize]) -> Check {
    if got != want {
        return Err(format!("{what} is {got:?}, expected {want:?}"));
    }
    Ok(())
}

fn numel(s: &[usize]) -> Option<usize> {
    s.iter().try_fold(1usize, |a, &d| a.checked_mul(d))
}

fn op_problem(op: &IrOp, ins: &[&TensorType], outs: &[&TensorType]) -> Check {
    match op {
        IrOp::Unary(_) | IrOp::BinaryScalar { .. } | IrOp::Clamp { .. } | IrOp::Cast => {
            need(ins, 1, &op.name())?;
            let out = out0(outs)?;
            if !broadcasts(&ins[0].shape, out) {
                return Err(format!(
                    "operand {:?} does not broadcast to the output {out:?}",
                    ins[0].shape
                ));
            }
        }
        IrOp::Binary { .. } => {
            let out = out0(outs)?;
            for t in ins {
                if !broadcasts(&t.shape, out) {
                    return Err(format!(
                        "operand {:?} does not broadcast to the output {out:?}",
                        t.shape
                    ));
                }
            }
        }
        IrOp::Linear => {
            need(ins, 2, "linear")?;
            let (x, w) = (&ins[0].shape, &ins[1].shape);
            let (Some(&k), &[n, wk]) = (x.last(), &w[..]) else {
                return Err(format!(
                    "linear needs x [.., K] and weight [N, K], got {x:?} and {w:?}"
                ));
            };
            if k != wk {
                return Err(format!(
                    "linear: x {x:?} has K={k}, weight {w:?} has K={wk}"
                ));
            }
            let mut want = x[..x.len() - 1].to_vec();
            want.push(n);
            same_shape("linear output", out0(outs)?, &want)?;
            if let Some(b) = ins.get(2) {
                if !broadcasts(&b.shape, &want) {
                    return Err(format!(
                        "linear bias {:?} does not broadcast to {want:?}",
                        b.shape
                    ));
                }
            }
        }
        IrOp::Matmul => {
            need(ins, 2, "matmul")?;
            let want = matmul_shape(&ins[0].shape, &ins[1].shape)?;
            same_shape("matmul output", out0(outs)?, &want)?;
        }
        IrOp::Addmm { .. } => {
            need(ins, 3, "addmm")?;
            let (a, b) = (&ins[1].shape, &ins[2].shape);
            if a.len() != 2 || b.len() != 2 || a[1] != b[0] {
                return Err(format!("addmm of {a:?} and {b:?}"));
            }
            let want = vec![a[0], b[1]];
            same_shape("addmm output", out0(outs)?, &want)?;
            if !broadcasts(&ins[0].shape, &want) {
                return Err(format!(
                    "addmm bias {:?} does not broadcast to {want:?}",
                    ins[0].shape
                ));
            }
        }
        IrOp::Softmax { dim: d, .. } => {
            need(ins, 1, "softmax")?;
            let x = &ins[0].shape;
            dim(*d, x.len().max(1), "softmax")?;
            same_shape("softmax output", out0(outs)?, x)?;
        }
        IrOp::Mean { dims, keepdim } | IrOp::Sum { dims, keepdim } => {
            need(ins, 1, &op.name())?;
            let x = &ins[0].shape;
            let rank = x.len();
            // A 0-d operand reduces as a 1-element vector (as lowering and PyTorch do).
            let mut reduced = vec![dims.is_empty(); rank.max(1)];
            for &d in dims {
                let i = dim(d, rank.max(1), &op.name())?;
                if std::mem::replace(&mut reduced[i], true) {
                    return Err(format!("{} reduces dim {d} twice", op.name()));
                }
            }
            let want: Vec<usize> = x
                .iter()
                .zip(&reduced)
                .filter_map(|(&n, &r)| match (r, *keepdim) {
                    (false, _) => Some(n),
                    (true, true) => Some(1),
                    (true, false) => None,
                })
                .collect();
            same_shape(&format!("{} output", op.name()), out0(outs)?, &want)?;
        }
        IrOp::Transpose { dim0, dim1 } => {
            need(ins, 1, "transpose")?;
            let x = &ins[0].shape;
            let (a, b) = (
                dim(*dim0, x.len(), "transpose")?,
                dim(*dim1, x.len(), "transpose")?,
            );
            let mut want = x.clone();
            want.swap(a, b);
            same_shape("transpose output", out0(outs)?, &want)?;
        }
        IrOp::Permute { dims } => {
            need(ins, 1, "permute")?;
            let x = &ins[0].shape;
            let p: Vec<usize> = dims
                .iter()
                .map(|&d| dim(d, x.len(), "permute"))
                .collect::<Result<_, _>>()?;
            let mut seen = vec![false; x.len()];
            if p.len() != x.len() || p.iter().any(|&i| std::mem::replace(&mut seen[i], true)) {
                return Err(format!(
                    "permute {dims:?} is not a permutation of {} dims",
                    x.len()
                ));
            }
            let want: Vec<usize> = p.iter().map(|&i| x[i]).collect();
            same_shape("permute output", out0(outs)?, &want)?;
        }
        IrOp::Reshape => {
            need(ins, 1, "reshape")?;
            let out = out0(outs)?;
            if numel(&ins[0].shape) != numel(out) {
                return Err(format!("reshape of {:?} to {out:?}", ins[0].shape));
            }
        }
        IrOp::Expand { .. } => {
            need(ins, 1, "expand")?;
            let out = out0(outs)?;
            if !broadcasts(&ins[0].shape, out) {
                return Err(format!("expand of {:?} to {out:?}", ins[0].shape));
            }
        }
        IrOp::Slice {
            dim: d,
            start,
            step,
            ..
        } => {
            need(ins, 1, "slice")?;
            let x = &ins[0].shape;
            let d = dim(*d, x.len(), "slice")?;
            if *step <= 0 {
                return Err(format!("slice step {step} (must be positive)"));
            }
            let out = out0(outs)?;
            if out.len() != x.len() {
                return Err(format!("slice of {x:?} to {out:?}"));
            }
            let n = x[d] as i128;
            let s = if *start < 0 {
                (*start as i128 + n).max(0)
            } else {
                (*start as i128).min(n)
            };
            let len = out[d] as i128;
            if len > 0 && s + (len - 1) * *step as i128 >= n {
                return Err(format!(
                    "slice of {len} elements from {s} by {step} reaches past the end of dim {d} ({n})"
                ));
            }
            for (i, (a, b)) in x.iter().zip(out).enumerate() {
                if i != d && a != b {
                    return Err(format!("slice of {x:?} to {out:?}"));
                }
            }
        }
        IrOp::Cat { dim: d } => {
            let out = out0(outs)?;
            let d = dim(*d, out.len(), "cat")?;
            let mut total = 0usize;
            for t in ins {
                if t.numel() == 0 {
                    continue;
                }
                let ok = t.rank() == out.len()
                    && t.shape
                        .iter()
                        .zip(out)
                        .enumerate()
                        .all(|(i, (a, b))| i == d || a == b);
                if !ok {
                    return Err(format!(
                        "cat operand {:?} does not fit the output {out:?}",
                        t.shape
                    ));
                }
                total = total.saturating_add(t.shape[d]);
            }
            if total != out[d] {
                return Err(format!(
                    "cat operands sum to {total} along dim {d}, the output has {}",
                    out[d]
                ));
            }
        }
        IrOp::Chunk { dim: d, .. } | IrOp::Split { dim: d, .. } => {
            need(ins, 1, &op.name())?;
            let x = &ins[0].shape;
            let d = dim(*d, x.len(), &op.name())?;
            let mut total = 0usize;
            for o in outs {
                if o.rank() != x.len() {
                    return Err(format!("{} of {x:?} into {:?}", op.name(), o.shape));
                }
                total = total.saturating_add(o.shape[d]);
            }
            if total > x[d] {
                return Err(format!(
                    "{} outputs take {total} of dim {d}, the input has {}",
                    op.name(),
                    x[d]
                ));
            }
        }
        IrOp::IndexCopy { dim: d } => {
            need(ins, 3, "index_copy")?;
            let (dest, index, src) = (&ins[0].shape, &ins[1].shape, &ins[2].shape);
            let a = dim(*d, dest.len(), "index_copy")?;
            if ins[1].dtype.is_float() {
                return Err("index_copy index must be integer".into());
            }
            // ATen: one index per source slice along dim, and slices of the same shape.
            if index.len() > 1
                || src.len() != dest.len()
                || numel(index) != Some(src[a])
                || (0..dest.len()).any(|i| i != a && src[i] != dest[i])
            {
                return Err(format!(
                    "index_copy along dim {d}: index {index:?} and source {src:?} do not fit destination {dest:?}"
                ));
            }
            same_shape("index_copy output", out0(outs)?, dest)?;
        }
        IrOp::Conv2d {
            groups,
            stride,
            padding,
            dilation,
        } => {
            need(ins, 2, "conv2d")?;
            let (x, w) = (&ins[0].shape, &ins[1].shape);
            if x.len() != 4 || w.len() != 4 {
                return Err(format!("conv2d of {x:?} with weight {w:?} (needs 4-D)"));
            }
            if *groups == 0 || x[1] != w[1] * groups || w[0] % groups != 0 {
                return Err(format!(
                    "conv2d: input {x:?}, weight {w:?} and groups {groups} disagree on channels"
                ));
            }
            let o = out0(outs)?;
            let want = (0..2)
                .map(|i| conv_out_len(x[2 + i], w[2 + i], stride[i], padding[i], dilation[i]));
            if stride.contains(&0)
                || dilation.contains(&0)
                || o.len() != 4
                || want.zip(&o[2..]).any(|(l, &got)| l != Some(got))
            {
                return Err(format!(
                    "conv2d of {x:?} with weight {w:?}, stride {stride:?}, padding {padding:?} \
                     and dilation {dilation:?} does not give {o:?}"
                ));
            }
        }
        IrOp::MaxPool2d(p) | IrOp::AvgPool2d { pool: p, .. } => {
            need(ins, 1, "pool2d")?;
            let (x, o) = (&ins[0].shape, out0(outs)?);
            if x.len() < 2 || o.len() != x.len() {
                return Err(format!("pool2d of {x:?} into {o:?}"));
            }
            let r = x.len();
            for i in 0..2 {
                let (n, on) = (x[r - 2 + i], o[r - 2 + i]);
                let (k, s, pd, d) = (p.kernel[i], p.stride[i], p.padding[i], p.dilation[i]);
                pool_axis_agrees(n, on, k, s, pd, d)
                    .map_err(|e| format!("pool2d of {x:?} into {o:?}: {e}"))?;
                if pool_out_len(n, k, s, pd, d, p.ceil_mode) != Some(on) {
                    return Err(format!(
                        "pool2d of {x:?} into {o:?}: the window gives another size (ceil_mode {})",
                        p.ceil_mode
                    ));
                }
            }
        }
        IrOp::LayerNorm {
            normalized_shape, ..
        } => {
            need(ins, 1, "layer_norm")?;
            let x = &ins[0].shape;
            if !x.ends_with(normalized_shape) {
                return Err(format!("layer_norm over {normalized_shape:?} of {x:?}"));
            }
        }
        IrOp::Embedding => {
            need(ins, 2, "embedding")?;
            if ins[0].rank() != 2 {
                return Err(format!("embedding table {:?} is not 2-D", ins[0].shape));
            }
            if ins[1].dtype.is_float() {
                return Err("embedding indices must be integers".into());
            }
        }
        _ => {}
    }
    Ok(())
}

/// `torch.matmul`'s result shape (1-D operands promoted, batch dims broadcast).
fn matmul_shape(a: &[usize], b: &[usize]) -> Result<Vec<usize>, String> {
    if a.is_empty() || b.is_empty() {
        return Err("matmul of a 0-d tensor".into());
    }
    let (m, k) = if a.len() == 1 {
        (None, a[0])
    } else {
        (Some(a[a.len() - 2]), a[a.len() - 1])
    };
    let (kb, n) = if b.len() == 1 {
        (b[0], None)
    } else {
        (b[b.len() - 2], Some(b[b.len() - 1]))
    };
    if k != kb {
        return Err(format!(
            "matmul of {a:?} and {b:?}: inner dims differ ({k} vs {kb})"
        ));
    }
    let ba = &a[..a.len().saturating_sub(2)];
    let bb = &b[..b.len().saturating_sub(2)];
    let rank = ba.len().max(bb.len());
    let mut out = Vec::with_capacity(rank + 2);
    for i in 0..rank {
        let da = (i + ba.len()).checked_sub(rank).map_or(1, |j| ba[j]);
        let db = (i + bb.len()).checked_sub(rank).map_or(1, |j| bb[j]);
        out.push(match (da, db) {
            (1, d) | (d, 1) => d,
            (x, y) if x == y => x,
            _ => {
                return Err(format!(
                    "matmul batch dims {ba:?} and {bb:?} do not broadcast"
                ))
            }
        });
    }
    out.extend(m);
    out.extend(n);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use npu_ir::DType;

    fn t(shape: &[usize]) -> TensorType {
        TensorType {
            shape: shape.to_vec(),
            dtype: DType::F32,
        }
    }

    fn problem(op: IrOp, ins: &[&[usize]], outs: &[&[usize]]) -> Option<String> {
        let ins: Vec<TensorType> = ins.iter().map(|s| t(s)).collect();
        let outs: Vec<TensorType> = outs.iter().map(|s| t(s)).collect();
        op_problem(
            &op,
            &ins.iter().collect::<Vec<_>>(),
            &outs.iter().collect::<Vec<_>>(),
        )
        .err()
    }

    /// Found by the IR fuzzer: pool windows wider than the input and output sizes the window
    /// does not give passed `check` and failed `compile`.
    #[test]
    fn pool_and_conv_outputs_follow_their_windows() {
        let pool = |k: usize, s: usize| {
            IrOp::MaxPool2d(npu_ir::Pool2d {
                kernel: [k, k],
                stride: [s, s],
                padding: [0, 0],
                dilation: [1, 1],
                ceil_mode: false,
            })
        };
        let x: &[usize] = &[1, 24, 16, 16];
        assert_eq!(problem(pool(2, 2), &[x], &[&[1, 24, 8, 8]]), None);
        assert_eq!(problem(pool(3, 2), &[x], &[&[1, 24, 7, 7]]), None);
        assert!(problem(pool(3, 2), &[x], &[&[1, 24, 8, 8]]).is_some());
        let ceil = IrOp::MaxPool2d(npu_ir::Pool2d {
            kernel: [3, 3],
            stride: [2, 2],
            padding: [0, 0],
            dilation: [1, 1],
            ceil_mode: true,
        });
        assert_eq!(problem(ceil, &[x], &[&[1, 24, 8, 8]]), None, "ceil mode");
        assert!(problem(pool(17, 2), &[x], &[&[1, 24, 1, 1]]).is_some());
        assert!(problem(pool(2, 1), &[x], &[&[1, 24, 8, 8]]).is_some());
        let conv = IrOp::Conv2d {
            stride: [2, 2],
            padding: [1, 1],
            dilation: [1, 1],
            groups: 1,
        };
        let w: &[usize] = &[8, 24, 3, 3];
        assert_eq!(problem(conv.clone(), &[x, w], &[&[1, 8, 8, 8]]), None);
        assert!(problem(conv, &[x, w], &[&[1, 8, 16, 16]]).is_some());
    }

    #[test]
    fn linear_k_mismatch_and_softmax_dim_are_refused() {
        let e = problem(IrOp::Linear, &[&[2, 16], &[8, 17]], &[&[2, 8]]).unwrap();
        assert!(e.contains("K=16") && e.contains("K=17"), "{e}");
        assert_eq!(
            problem(IrOp::Linear, &[&[2, 16], &[8, 16]], &[&[2, 8]]),
            None
        );
        let sm = |dim| IrOp::Softmax { dim, dtype: None };
        let e = problem(sm(7), &[&[2, 3]], &[&[2, 3]]).unwrap();
        assert!(e.contains("dim 7"), "{e}");
        assert_eq!(problem(sm(-1), &[&[2, 3]], &[&[2, 3]]), None);
    }

    #[test]
    fn matmul_shapes_follow_torch() {
        assert_eq!(matmul_shape(&[4], &[4]).unwrap(), Vec::<usize>::new());
        assert_eq!(
            matmul_shape(&[2, 1, 3, 4], &[5, 4, 6]).unwrap(),
            vec![2, 5, 3, 6]
        );
        assert!(matmul_shape(&[3, 4], &[5, 6]).is_err());
        assert!(matmul_shape(&[2, 3, 4], &[3, 4, 6]).is_err());
    }

    #[test]
    fn views_are_checked() {
        let tr = IrOp::Transpose { dim0: 0, dim1: 5 };
        assert!(problem(tr, &[&[2, 3]], &[&[3, 2]]).is_some());
        let sl = IrOp::Slice {
            dim: 0,
            start: 2,
            end: 10,
            step: 1,
        };
        assert!(problem(sl, &[&[4]], &[&[3]])
            .unwrap()
            .contains("past the end"));
        let p = IrOp::Permute { dims: vec![0, 0] };
        assert!(problem(p, &[&[2, 2]], &[&[2, 2]]).is_some());
    }

    #[test]
    fn reduction_outputs_follow_dims_and_keepdim() {
        let mean = |dims: Vec<i64>, keepdim| IrOp::Mean { dims, keepdim };
        assert_eq!(
            problem(mean(vec![-1], true), &[&[1, 2, 64]], &[&[1, 2, 1]]),
            None
        );
        assert_eq!(
            problem(mean(vec![1], false), &[&[3, 2, 4]], &[&[3, 4]]),
            None
        );
        assert_eq!(problem(mean(vec![], true), &[&[3, 2]], &[&[1, 1]]), None);
        assert_eq!(problem(mean(vec![0], true), &[&[]], &[&[]]), None);
        // found by the IR fuzzer: a dim rewritten under an unchanged output
        let e = problem(mean(vec![-2], true), &[&[1, 1, 64]], &[&[1, 1, 1]]).unwrap();
        assert!(e.contains("expected [1, 1, 64]"), "{e}");
        let sum = IrOp::Sum {
            dims: vec![0, -2],
            keepdim: false,
        };
        assert!(problem(sum, &[&[2, 3]], &[&[3]]).unwrap().contains("twice"));
    }

    #[test]
    fn index_copy_source_must_fit_its_destination() {
        let ty = |shape: &[usize], dtype| TensorType {
            shape: shape.to_vec(),
            dtype,
        };
        let check = |d: i64, dest: &[usize], index: &[usize], src: &[usize]| {
            let ins = [
                ty(dest, DType::F32),
                ty(index, DType::I64),
                ty(src, DType::F32),
            ];
            let out = ty(dest, DType::F32);
            op_problem(
                &IrOp::IndexCopy { dim: d },
                &ins.iter().collect::<Vec<_>>(),
                &[&out],
            )
        };
        // the KV-cache update: one position along the sequence dim
        assert_eq!(check(2, &[1, 2, 64, 16], &[1], &[1, 2, 1, 16]), Ok(()));
        // found by the IR fuzzer: the same update with its dim rewritten to 0
        assert!(check(0, &[1, 2, 64, 16], &[1], &[1, 2, 1, 16]).is_err());
        assert!(check(2, &[1, 2, 64, 16], &[2], &[1, 2, 1, 16]).is_err());
    }
}
