//! Elementwise composites: written with ops the NPU fuses into one expression (add, mul,
//! exp, log, tanh, sigmoid, clamp, ...), not with compare/where, so a chain of them stays
//! one fused NPU kernel (softplus with a small threshold is the one exception).

use super::emit::{dim, Emitter, R};
use npu_ir::{BinaryOp, Composite, DType, Op, TensorType, TernaryOp, UnaryOp, ValueId};

/// `other - alpha * x` (`rsub.Tensor`/`.Scalar`).
pub fn rsub(em: &mut Emitter) -> R<()> {
    let &Composite::Rsub { alpha, scalar } = em.composite()? else {
        return Err("internal: not rsub".into());
    };
    let x = em.input(0)?;
    let r = match scalar {
        Some(s) => {
            let ax = em.scale(x, alpha);
            em.rscalar(BinaryOp::Sub, s, ax)
        }
        None => {
            let other = em.input(1)?;
            em.binary_alpha(BinaryOp::Sub, other, x, alpha)?
        }
    };
    em.bind(0, r)
}

pub fn square(em: &mut Emitter) -> R<()> {
    let x = em.input(0)?;
    let r = em.mul(x, x)?;
    em.bind(0, r)
}

/// `x + value * t1 * t2` / `x + value * t1 / t2`.
pub fn addcmul_addcdiv(em: &mut Emitter) -> R<()> {
    let (value, op) = match em.composite()? {
        Composite::Addcmul { value } => (*value, BinaryOp::Mul),
        Composite::Addcdiv { value } => (*value, BinaryOp::Div),
        _ => return Err("internal: not addcmul/addcdiv".into()),
    };
    let (x, t1, t2) = (em.input(0)?, em.input(1)?, em.input(2)?);
    let p = em.binary(op, t1, t2)?;
    let p = em.scale(p, value);
    let r = em.add(x, p)?;
    em.bind(0, r)
}

/// `lerp(x, end, w)`. A scalar weight uses ATen's two-sided form (exact at w = 0 and 1);
/// a tensor weight uses `x + w * (end - x)`, which stays one fused expression.
pub fn lerp(em: &mut Emitter) -> R<()> {
    let &Composite::Lerp { weight } = em.composite()? else {
        return Err("internal: not lerp".into());
    };
    let (x, end) = (em.input(0)?, em.input(1)?);
    let diff = em.sub(end, x)?;
    let r = match weight {
        Some(w) if w.abs() < 0.5 => {
            let d = em.scale(diff, w);
            em.add(x, d)?
        }
        Some(w) => {
            let d = em.scale(diff, 1.0 - w);
            em.sub(end, d)?
        }
        None => {
            let w = em.input(2)?;
            let d = em.mul(w, diff)?;
            em.add(x, d)?
        }
    };
    em.bind(0, r)
}

/// `a * sigmoid(b)` with `a, b` the halves of `dim`.
pub fn glu(em: &mut Emitter) -> R<()> {
    let &Composite::Glu { dim: d } = em.composite()? else {
        return Err("internal: not glu".into());
    };
    let x = em.input(0)?;
    let shape = em.shape(x);
    let d = dim(d, shape.len())?;
    if !shape[d].is_multiple_of(2) {
        return Err(format!("glu halves dim {d} of size {}", shape[d]));
    }
    let h = shape[d] / 2;
    let a = em.slice(x, d, 0, h);
    let b = em.slice(x, d, h, h);
    let g = em.unary(UnaryOp::Sigmoid, b);
    let r = em.mul(a, g)?;
    em.bind(0, r)
}

/// `log(1 + exp(beta x)) / beta` as `(relu(y) + log(1 + exp(-|y|))) / beta`, `y = beta x`:
/// never overflows, and above the threshold it equals `x` to rounding (the `log` term is
/// below f32's resolution there), which is what ATen's threshold switch returns.
fn softplus_of(em: &mut Emitter, x: ValueId, beta: f64) -> R<ValueId> {
    let y = em.scale(x, beta);
    let pos = em.unary(UnaryOp::Relu, y);
    let a = em.unary(UnaryOp::Abs, y);
    let na = em.unary(UnaryOp::Neg, a);
    let e = em.unary(UnaryOp::Exp, na);
    let e1 = em.scalar(BinaryOp::Add, e, 1.0);
    let l = em.unary(UnaryOp::Log, e1);
    let s = em.add(pos, l)?;
    Ok(if beta == 1.0 {
        s
    } else {
        em.scalar(BinaryOp::Div, s, beta)
    })
}

/// `softplus(x)`, and `x` itself where `beta * x > threshold` (ATen's linear branch).
///
/// Above `y = beta * x > 17` the log term `log1p(exp(-y)) / beta` is below half an ulp of
/// `x` in f32, so the select-free form already equals `x` there; only a smaller threshold
/// (which changes results) needs the compare/where, which splits the fused chain.
pub fn softplus(em: &mut Emitter) -> R<()> {
    let &Composite::Softplus { beta, threshold } = em.composite()? else {
        return Err("internal: not softplus".into());
    };
    let x = em.input(0)?;
    let mut r = softplus_of(em, x, beta)?;
    if threshold < 17.0 {
        let y = em.scale(x, beta);
        let shape = em.shape(y);
        let above = em.emit1(
            Op::BinaryScalar {
                op: BinaryOp::Gt,
                scalar: threshold,
                scalar_lhs: false,
            },
            vec![y],
            TensorType {
                shape,
                dtype: DType::Bool,
            },
        );
        let ty = em.ty(r).clone();
        r = em.emit1(
            Op::Ternary {
                op: TernaryOp::Where,
                scalars: [None; 3],
            },
            vec![above, x, r],
            ty,
        );
    }
    em.bind(0, r)
}

/// `x * tanh(softplus(x))`.
pub fn mish(em: &mut Emitter) -> R<()> {
    let x = em.input(0)?;
    let sp = softplus_of(em, x, 1.0)?;
    let t = em.unary(UnaryOp::Tanh, sp);
    let r = em.mul(x, t)?;
    em.bind(0, r)
}

/// `scale * (max(x, 0) + alpha * (exp(min(x, 0) * input_scale) - 1))`: one of the two terms
/// is exactly 0 for every x, so this is ATen's branch without a select.
pub fn elu(em: &mut Emitter) -> R<()> {
    let &Composite::Elu {
        alpha,
        scale,
        input_scale,
    } = em.composite()?
    else {
        return Err("internal: not elu".into());
    };
    let x = em.input(0)?;
    let pos = em.clamp(x, Some(0.0), None);
    let neg = em.clamp(x, None, Some(0.0));
    let neg = em.scale(neg, input_scale);
    let e = em.unary(UnaryOp::Exp, neg);
    let e = em.scalar(BinaryOp::Sub, e, 1.0);
    let e = em.scale(e, alpha);
    let s = em.add(pos, e)?;
    let r = em.scale(s, scale);
    em.bind(0, r)
}

/// `prelu(x, w)`: `x > 0 ? x : w * x`, `w` per channel (dim 1) or a single value.
pub fn prelu(em: &mut Emitter) -> R<()> {
    let (x, w) = (em.input(0)?, em.input(1)?);
    let xs = em.shape(x);
    let c = em.ty(w).numel();
    let w = if c == 1 {
        em.reshape(w, &[])
    } else {
        let d = usize::from(xs.len() >= 2);
        if xs.get(d) != Some(&c) {
            return Err(format!("{c} prelu weights for a {xs:?} input"));
        }
        let mut shape = vec![c];
        shape.resize(xs.len() - d, 1);
        em.reshape(w, &shape)
    };
    let pos = em.compare_scalar(BinaryOp::Gt, x, 0.0);
    let neg = em.mul(w, x)?;
    let r = em.select(pos, x, neg)?;
    em.bind(0, r)
}

/// `float_power`: both operands in float64, then `pow`.
pub fn float_power(em: &mut Emitter) -> R<()> {
    let &Composite::FloatPower { scalar, scalar_lhs } = em.composite()? else {
        return Err("internal: not float_power".into());
    };
    let x = em.input(0)?;
    let x = em.cast(x, DType::F64);
    let r = match scalar {
        Some(s) if scalar_lhs => em.rscalar(BinaryOp::Pow, s, x),
        Some(s) => em.scalar(BinaryOp::Pow, x, s),
        None => {
            let y = em.input(1)?;
            let y = em.cast(y, DType::F64);
            em.binary(BinaryOp::Pow, x, y)?
        }
    };
    em.bind(0, r)
}

/// `one_hot(x, C)`: `x[..., None] == arange(C)` as int64.
pub fn one_hot(em: &mut Emitter) -> R<()> {
    let &Composite::OneHot { num_classes } = em.composite()? else {
        return Err("internal: not one_hot".into());
    };
    let x = em.input(0)?;
    let mut shape = em.shape(x);
    shape.push(1);
    let col = em.reshape(x, &shape);
    let classes = em.arange(num_classes, em.dtype(x));
    let hot = em.compare(BinaryOp::Eq, col, classes)?;
    let r = em.cast(hot, DType::I64);
    em.bind(0, r)
}
