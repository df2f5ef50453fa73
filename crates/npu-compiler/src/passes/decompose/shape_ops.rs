//! Shape composites that move or combine data: diff, repeat/tile, constant padding, the
//! `*stack` family, repeat_interleave.

use super::emit::{dim, Emitter, R};
use npu_ir::{BinaryOp, Composite, DType, Op, StackKind};

/// `diff(x, n, dim, prepend?, append?)`: `cat(prepend, x, append)` then `n` times
/// `t[1:] - t[:-1]` along `dim` (`xor` for bools, as ATen).
pub fn diff(em: &mut Emitter) -> R<()> {
    let &Composite::Diff {
        n,
        dim: d,
        prepend,
        append,
    } = em.composite()?
    else {
        return Err("internal: not diff".into());
    };
    let x = em.input(0)?;
    let d = dim(d, em.ty(x).rank())?;
    let mut parts = Vec::new();
    let mut next = 1;
    if prepend {
        parts.push(em.input(next)?);
        next += 1;
    }
    parts.push(x);
    if append {
        parts.push(em.input(next)?);
    }
    let mut t = em.cat(parts, d)?;
    for _ in 0..n {
        let len = em.shape(t)[d];
        if len == 0 {
            break;
        }
        let hi = em.slice(t, d, 1, len - 1);
        let lo = em.slice(t, d, 0, len - 1);
        t = if em.dtype(t) == DType::Bool {
            let ty = em.ty(hi).clone();
            em.emit1(
                Op::Binary {
                    op: BinaryOp::LogicalXor,
                    alpha: 1.0,
                },
                vec![hi, lo],
                ty,
            )
        } else {
            em.binary(BinaryOp::Sub, hi, lo)?
        };
    }
    em.bind(0, t)
}

/// `repeat(repeats)`: the input (left-padded with 1s to the repeats' length) is viewed as
/// `[1, s0, 1, s1, ..]`, expanded to `[r0, s0, r1, s1, ..]` and flattened pairwise.
pub fn repeat(em: &mut Emitter) -> R<()> {
    let Composite::Repeat { repeats } = em.composite()? else {
        return Err("internal: not repeat".into());
    };
    let x = em.input(0)?;
    let shape = em.shape(x);
    if repeats.len() < shape.len() {
        return Err(format!("{} repeats for a {shape:?} input", repeats.len()));
    }
    let mut padded = vec![1; repeats.len() - shape.len()];
    padded.extend(&shape);
    let (mut view, mut big, mut out) = (Vec::new(), Vec::new(), Vec::new());
    for (&r, &s) in repeats.iter().zip(&padded) {
        if r != 1 {
            view.push(1);
            big.push(r);
        }
        view.push(s);
        big.push(s);
        out.push(r * s);
    }
    let v = em.reshape(x, &view);
    let e = em.expand(v, &big);
    let r = em.reshape(e, &out);
    em.bind(0, r)
}

/// `constant_pad_nd(pad, value)`: per dim from the last, negative amounts crop (slices) and
/// positive ones concatenate blocks filled with `value`.
pub fn constant_pad(em: &mut Emitter) -> R<()> {
    let &Composite::ConstantPad { ref pad, value } = em.composite()? else {
        return Err("internal: not constant_pad".into());
    };
    let x = em.input(0)?;
    let rank = em.ty(x).rank();
    if pad.len() % 2 != 0 || pad.len() / 2 > rank {
        return Err(format!("padding {pad:?} for a rank-{rank} input"));
    }
    let mut t = x;
    for (j, pair) in pad.chunks(2).enumerate() {
        let d = rank - 1 - j;
        let (lo, hi) = (pair[0], pair[1]);
        let n = em.shape(t)[d] as i64;
        let (crop_lo, crop_hi) = ((-lo).max(0), (-hi).max(0));
        if crop_lo + crop_hi > n {
            return Err(format!(
                "padding {pad:?} crops dim {d} of size {n} below zero"
            ));
        }
        t = em.slice(t, d, crop_lo as usize, (n - crop_lo - crop_hi) as usize);
        let dtype = em.dtype(t);
        let block = |em: &mut Emitter, amount: i64| {
            let mut s = em.shape(t);
            s[d] = amount as usize;
            em.full(&s, dtype, value)
        };
        let mut all = Vec::new();
        if lo > 0 {
            all.push(block(em, lo));
        }
        all.push(t);
        if hi > 0 {
            all.push(block(em, hi));
        }
        t = em.cat(all, d)?;
    }
    em.bind(0, t)
}

/// `hstack`/`vstack`/`dstack`/`column_stack`: each input viewed with the kind's minimum
/// rank (ATen's `atleast_Nd`; columns for `column_stack`) and cast to the result dtype,
/// then concatenated.
pub fn stack(em: &mut Emitter) -> R<()> {
    let &Composite::Stack { kind } = em.composite()? else {
        return Err("internal: not a *stack".into());
    };
    let out = em.ty(em.output(0)?).clone();
    let mut parts = Vec::new();
    for i in 0..em.node.inputs.len() {
        let x = em.input(i)?;
        let s = em.shape(x);
        let shape = match (kind, s.as_slice()) {
            (StackKind::H, []) => vec![1],
            (StackKind::V, []) | (StackKind::Column, []) => vec![1, 1],
            (StackKind::V, [n]) => vec![1, *n],
            (StackKind::Column, [n]) => vec![*n, 1],
            (StackKind::D, []) => vec![1, 1, 1],
            (StackKind::D, [n]) => vec![1, *n, 1],
            (StackKind::D, [m, n]) => vec![*m, *n, 1],
            _ => s,
        };
        let v = em.reshape(x, &shape);
        parts.push(em.cast(v, out.dtype));
    }
    let rank = em.ty(*parts.first().ok_or("no inputs")?).rank();
    let d = match kind {
        StackKind::H if rank == 1 => 0,
        StackKind::H | StackKind::Column => 1,
        StackKind::V => 0,
        StackKind::D => 2,
    };
    let r = em.cat(parts, d)?;
    em.bind(0, r)
}

/// `repeat_interleave(x, r, dim)`: `x` viewed with a unit dim after `dim`, expanded to `r`
/// there and merged into `dim` (over the flattened input when no dim is given).
pub fn repeat_interleave(em: &mut Emitter) -> R<()> {
    let &Composite::RepeatInterleave { repeats, dim: d } = em.composite()? else {
        return Err("internal: not repeat_interleave".into());
    };
    let mut x = em.input(0)?;
    let d = match d {
        Some(d) => dim(d, em.ty(x).rank())?,
        None => {
            let n = em.ty(x).numel();
            x = em.reshape(x, &[n]);
            0
        }
    };
    let mut shape = em.shape(x);
    if shape.is_empty() {
        shape.push(1);
        x = em.reshape(x, &shape);
    }
    let mut unit = shape.clone();
    unit.insert(d + 1, 1);
    let mut big = shape.clone();
    big.insert(d + 1, repeats);
    let mut merged = shape;
    merged[d] *= repeats;
    let v = em.reshape(x, &unit);
    let e = em.expand(v, &big);
    let r = em.reshape(e, &merged);
    em.bind(0, r)
}
