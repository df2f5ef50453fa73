//! Reductions: logsumexp, var/std (+ mean), vector norms, cosine similarity. Statistics of
//! f16/bf16 (and integer) inputs are computed in f32, like ATen's opmath type, and rounded
//! once when bound to the output.

use super::emit::{dim, reduce_dims, Emitter, R};
use npu_ir::{BinaryOp, Composite, DType, MinMax, Moment, Op, TensorType, UnaryOp};

/// `m + log(sum(exp(x - m)))` with `m = amax(x)` clamped to the finite range: an all `-inf`
/// slice then gives `-inf` (not NaN), and a `+inf` entry gives `+inf`, as in ATen.
pub fn logsumexp(em: &mut Emitter) -> R<()> {
    let Composite::Logsumexp { dims, keepdim } = em.composite()? else {
        return Err("internal: not logsumexp".into());
    };
    let x = em.input(0)?;
    let xf = em.upcast(x);
    let d = reduce_dims(dims, em.ty(xf).rank())?;
    let big = if em.dtype(xf) == DType::F64 {
        f64::MAX
    } else {
        f32::MAX as f64
    };
    let m = em.min_max(MinMax::Max, xf, &d, true);
    let m = em.clamp(m, Some(-big), Some(big));
    let s = em.sub(xf, m)?;
    let e = em.unary(UnaryOp::Exp, s);
    let sum = em.sum(e, &d, *keepdim);
    let l = em.unary(UnaryOp::Log, sum);
    let ms = em.shape(l);
    let m = em.reshape(m, &ms);
    let r = em.add(l, m)?;
    em.bind(0, r)
}

/// var/std as `sum((x - mean)^2) / max(N - correction, 0)` (two passes, in f32 or f64).
pub fn moments(em: &mut Emitter) -> R<()> {
    let Composite::Moments {
        kind,
        dims,
        correction,
        keepdim,
    } = em.composite()?
    else {
        return Err("internal: not var/std".into());
    };
    let x = em.input(0)?;
    let xf = em.upcast(x);
    let shape = em.shape(xf);
    let d = reduce_dims(dims.as_deref().unwrap_or(&[]), shape.len())?;
    let n: usize = d.iter().map(|&i| shape[i]).product();
    let mu = em.mean(xf, &d, true);
    let dev = em.sub(xf, mu)?;
    let sq = em.mul(dev, dev)?;
    let ss = em.sum(sq, &d, *keepdim);
    let var = em.scalar(BinaryOp::Div, ss, (n as f64 - correction).max(0.0));
    let stat = match kind {
        Moment::Var | Moment::VarMean => var,
        Moment::Std | Moment::StdMean => em.unary(UnaryOp::Sqrt, var),
    };
    em.bind(0, stat)?;
    if matches!(kind, Moment::VarMean | Moment::StdMean) {
        let out_shape = em.shape(stat);
        let mu = em.reshape(mu, &out_shape);
        em.bind(1, mu)?;
    }
    Ok(())
}

/// `(sum |x|^p)^(1/p)`, with the special orders 2 (`sqrt(sum x*x)`), 1, +-inf (max/min of
/// |x|) and 0 (number of non-zeros).
pub fn vector_norm(em: &mut Emitter) -> R<()> {
    let &Composite::VectorNorm {
        ord,
        ref dims,
        keepdim,
    } = em.composite()?
    else {
        return Err("internal: not vector_norm".into());
    };
    let x = em.input(0)?;
    let xf = em.upcast(x);
    let d = reduce_dims(dims, em.ty(xf).rank())?;
    let r = if ord == 2.0 {
        let sq = em.mul(xf, xf)?;
        let s = em.sum(sq, &d, keepdim);
        em.unary(UnaryOp::Sqrt, s)
    } else if ord == 0.0 {
        let ty = em.ty(xf).clone();
        let nz = em.emit1(
            Op::BinaryScalar {
                op: BinaryOp::Ne,
                scalar: 0.0,
                scalar_lhs: false,
            },
            vec![xf],
            TensorType {
                shape: ty.shape,
                dtype: DType::Bool,
            },
        );
        let nz = em.cast(nz, ty.dtype);
        em.sum(nz, &d, keepdim)
    } else {
        let a = em.unary(UnaryOp::Abs, xf);
        if ord == 1.0 {
            em.sum(a, &d, keepdim)
        } else if ord == f64::INFINITY {
            em.min_max(MinMax::Max, a, &d, keepdim)
        } else if ord == f64::NEG_INFINITY {
            em.min_max(MinMax::Min, a, &d, keepdim)
        } else {
            let p = em.scalar(BinaryOp::Pow, a, ord);
            let s = em.sum(p, &d, keepdim);
            em.scalar(BinaryOp::Pow, s, 1.0 / ord)
        }
    };
    em.bind(0, r)
}

/// ATen's form: each operand divided by its norm (clamped to `eps`) before the dot product,
/// which keeps the result in [-1, 1].
pub fn cosine_similarity(em: &mut Emitter) -> R<()> {
    let &Composite::CosineSimilarity { dim: dm, eps } = em.composite()? else {
        return Err("internal: not cosine_similarity".into());
    };
    let (mut a, mut b) = (em.input(0)?, em.input(1)?);
    let mut shape = super::emit::broadcast(&em.shape(a), &em.shape(b))?;
    if shape.is_empty() {
        // 0-d operands: ATen reduces over their one element
        shape = vec![1];
        a = em.reshape(a, &shape);
        b = em.reshape(b, &shape);
    }
    let d = dim(dm, shape.len())?;
    let mut unit = Vec::new();
    for v in [a, b] {
        let v = em.upcast(v);
        let v = em.expand(v, &shape);
        let sq = em.mul(v, v)?;
        let s = em.sum(sq, &[d], true);
        let n = em.unary(UnaryOp::Sqrt, s);
        let n = em.clamp(n, Some(eps), None);
        unit.push(em.div(v, n)?);
    }
    let p = em.mul(unit[0], unit[1])?;
    let r = em.sum(p, &[d], false);
    em.bind(0, r)
}

/// `aminmax`: `amin` and `amax` over `dim` (all dims when None).
pub fn aminmax(em: &mut Emitter) -> R<()> {
    let &Composite::Aminmax { dim: d, keepdim } = em.composite()? else {
        return Err("internal: not aminmax".into());
    };
    let x = em.input(0)?;
    let rank = em.ty(x).rank();
    let (x, dims, keepdim) = match d {
        // over a 0-d tensor's one element: shape [] either way
        _ if rank == 0 => (x, vec![], false),
        Some(d) => (x, vec![dim(d, rank)?], keepdim),
        None => (x, (0..rank).collect(), false),
    };
    for (i, op) in [MinMax::Min, MinMax::Max].into_iter().enumerate() {
        let r = if dims.is_empty() {
            x
        } else {
            em.min_max(op, x, &dims, keepdim)
        };
        em.bind(i, r)?;
    }
    Ok(())
}

/// `nansum`: NaN read as 0, then a sum (over all dims when none are given).
pub fn nansum(em: &mut Emitter) -> R<()> {
    let Composite::Nansum { dims, keepdim } = em.composite()? else {
        return Err("internal: not nansum".into());
    };
    let x = em.input(0)?;
    let rank = em.ty(x).rank();
    let d = reduce_dims(dims, rank)?;
    let x = if em.dtype(x).is_float() {
        let shape = em.shape(x);
        let nan = em.emit1(
            Op::Unary(UnaryOp::IsNan),
            vec![x],
            TensorType {
                shape,
                dtype: DType::Bool,
            },
        );
        let zero = em.full(&[], em.dtype(x), 0.0);
        em.select(nan, zero, x)?
    } else {
        x
    };
    let out = em.ty(em.output(0)?).clone();
    let x = em.cast(x, out.dtype);
    let r = if rank == 0 {
        x
    } else {
        em.sum(x, &d, *keepdim)
    };
    em.bind(0, r)
}
