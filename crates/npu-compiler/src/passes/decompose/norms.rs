//! Normalizations. The NPU's layer_norm kernel (one normalized dim, optional affine) does the
//! statistics wherever it can: group/instance norm reshape onto it; rms_norm is written as the
//! `pow/mean/add/rsqrt/mul` chain the RMSNorm fusion matches.

use super::emit::{Emitter, R};
use npu_ir::{BinaryOp, Composite, DType, Op, TensorType, UnaryOp, ValueId};

/// `layer_norm(x, [last dim], eps)` without affine parameters, one kernel.
fn layer_norm_last(em: &mut Emitter, x: ValueId, eps: f64, affine: &[ValueId]) -> ValueId {
    let ty = em.ty(x).clone();
    let d = ty.shape.last().copied().unwrap_or(1);
    let mut inputs = vec![x];
    inputs.extend_from_slice(affine);
    em.emit1(
        Op::LayerNorm {
            normalized_shape: vec![d],
            eps,
        },
        inputs,
        ty,
    )
}

/// Mean and `rsqrt(var + eps)` over `dims` (kept), in f32/f64.
fn stats(em: &mut Emitter, x: ValueId, dims: &[usize], eps: f64) -> R<(ValueId, ValueId)> {
    let xf = em.upcast(x);
    let mu = em.mean(xf, dims, true);
    let dev = em.sub(xf, mu)?;
    let sq = em.mul(dev, dev)?;
    let var = em.mean(sq, dims, true);
    let ve = em.scalar(BinaryOp::Add, var, eps);
    Ok((mu, em.unary(UnaryOp::Rsqrt, ve)))
}

/// `[C]` per-channel parameters as `[C, 1, ..]` for an input of rank `rank`.
fn per_channel(em: &mut Emitter, p: ValueId, rank: usize) -> ValueId {
    let c = em.ty(p).numel();
    let mut shape = vec![c];
    shape.resize(rank.saturating_sub(1).max(1), 1);
    em.reshape(p, &shape)
}

/// `y * weight + bias` with per-channel parameters (either may be absent).
fn channel_affine(
    em: &mut Emitter,
    y: ValueId,
    weight: Option<ValueId>,
    bias: Option<ValueId>,
) -> R<ValueId> {
    let rank = em.ty(y).rank();
    let mut y = y;
    if let Some(w) = weight {
        let w = per_channel(em, w, rank);
        y = em.mul(y, w)?;
    }
    if let Some(b) = bias {
        let b = per_channel(em, b, rank);
        y = em.add(y, b)?;
    }
    Ok(y)
}

/// Normalizes each of `groups` groups of channels of `x` [N, C, *] over the group's
/// elements with the layer_norm kernel; the result has x's shape.
fn group_normalize(em: &mut Emitter, x: ValueId, groups: usize, eps: f64) -> R<ValueId> {
    let shape = em.shape(x);
    let (n, c) = match shape.as_slice() {
        [n, c, ..] => (*n, *c),
        _ => return Err(format!("group normalization of a {shape:?} input")),
    };
    if groups == 0 || c % groups != 0 {
        return Err(format!("{c} channels do not split into {groups} groups"));
    }
    let m = shape.iter().skip(1).product::<usize>() / groups;
    let xr = em.reshape(x, &[n, groups, m]);
    let y = layer_norm_last(em, xr, eps, &[]);
    Ok(em.reshape(y, &shape))
}

/// `group_norm(x, G, weight?, bias?, eps)`.
pub fn group_norm(em: &mut Emitter) -> R<()> {
    let node = em.node;
    let &Op::GroupNorm { num_groups, eps } = &node.op else {
        return Err("internal: not group_norm".into());
    };
    let x = em.input(0)?;
    let y = group_normalize(em, x, num_groups, eps)?;
    let (w, b) = (em.input(1).ok(), em.input(2).ok());
    let y = channel_affine(em, y, w, b)?;
    em.bind(0, y)
}

/// `native_group_norm`: group_norm plus the per-group mean and rstd [N, G].
pub fn native_group_norm(em: &mut Emitter) -> R<()> {
    let &Composite::NativeGroupNorm {
        groups,
        eps,
        bias_only,
    } = em.composite()?
    else {
        return Err("internal: not native_group_norm".into());
    };
    let x = em.input(0)?;
    let y = group_normalize(em, x, groups, eps)?;
    let (w, b) = if bias_only {
        (None, em.input(1).ok())
    } else {
        (em.input(1).ok(), em.input(2).ok())
    };
    let y = channel_affine(em, y, w, b)?;
    em.bind(0, y)?;
    if em.node.outputs.len() == 1 {
        return Ok(()); // group_norm
    }
    let shape = em.shape(x);
    let m = shape.iter().skip(1).product::<usize>() / groups;
    let xr = em.reshape(x, &[shape[0], groups, m]);
    let (mu, rstd) = stats(em, xr, &[2], eps)?;
    em.bind(1, mu)?;
    em.bind(2, rstd)
}

/// `instance_norm`: per-(sample, channel) statistics (group norm with G = C), or, without
/// input statistics, the running ones (an eval batch norm).
pub fn instance_norm(em: &mut Emitter) -> R<()> {
    let &Composite::InstanceNorm {
        use_input_stats,
        eps,
    } = em.composite()?
    else {
        return Err("internal: not instance_norm".into());
    };
    let x = em.input(0)?;
    let n = em.node.inputs.len();
    // Present tensors fill schema slots in order: weight, bias, running_mean, running_var;
    // without input statistics the last two are required.
    let (affine, running) = match (use_input_stats, n) {
        (true, 1) => (None, None),
        (true, 3 | 5) => (Some((em.input(1)?, em.input(2)?)), None),
        (false, 3) => (None, Some((em.input(1)?, em.input(2)?))),
        (false, 5) => (
            Some((em.input(1)?, em.input(2)?)),
            Some((em.input(3)?, em.input(4)?)),
        ),
        _ => return Err(format!("instance_norm with {n} tensor inputs")),
    };
    let y = match running {
        None => {
            let c = em.shape(x).get(1).copied().unwrap_or(1);
            group_normalize(em, x, c, eps)?
        }
        Some((rm, rv)) => {
            let rank = em.ty(x).rank();
            let rm = per_channel(em, rm, rank);
            let rv = per_channel(em, rv, rank);
            let ve = em.scalar(BinaryOp::Add, rv, eps);
            let rs = em.unary(UnaryOp::Rsqrt, ve);
            let d = em.sub(x, rm)?;
            em.mul(d, rs)?
        }
    };
    let y = channel_affine(em, y, affine.map(|a| a.0), affine.map(|a| a.1))?;
    em.bind(0, y)
}

/// Flattens the normalized dims (and the affine parameters) into one for the kernel.
fn layer_norm_flat(
    em: &mut Emitter,
    normalized: &[usize],
    eps: f64,
    affine: &[ValueId],
) -> R<ValueId> {
    let x = em.input(0)?;
    let shape = em.shape(x);
    let k = normalized.len();
    if k > shape.len() || shape[shape.len() - k..] != *normalized {
        return Err(format!(
            "normalized shape {normalized:?} is not the tail of {shape:?}"
        ));
    }
    let m: usize = normalized.iter().product();
    let mut flat = shape[..shape.len() - k].to_vec();
    flat.push(m);
    let xr = em.reshape(x, &flat);
    let aff: Vec<ValueId> = affine.iter().map(|&p| em.reshape(p, &[m])).collect();
    let y = layer_norm_last(em, xr, eps, &aff);
    Ok(em.reshape(y, &shape))
}

/// `layer_norm` over several trailing dims.
pub fn layer_norm_multi(em: &mut Emitter) -> R<()> {
    let node = em.node;
    let Op::LayerNorm {
        normalized_shape,
        eps,
    } = &node.op
    else {
        return Err("internal: not layer_norm".into());
    };
    let affine = node.inputs.get(1..).unwrap_or(&[]).to_vec();
    let y = layer_norm_flat(em, normalized_shape, *eps, &affine)?;
    em.bind(0, y)
}

/// `native_layer_norm`: layer_norm plus mean and rstd over the normalized dims (kept).
pub fn native_layer_norm(em: &mut Emitter) -> R<()> {
    let Composite::NativeLayerNorm {
        normalized_shape,
        eps,
        bias_only,
    } = em.composite()?
    else {
        return Err("internal: not native_layer_norm".into());
    };
    let y = if *bias_only {
        let y = layer_norm_flat(em, normalized_shape, *eps, &[])?;
        let b = em.input(1)?;
        em.add(y, b)?
    } else {
        let affine = em.node.inputs.get(1..).unwrap_or(&[]).to_vec();
        layer_norm_flat(em, normalized_shape, *eps, &affine)?
    };
    em.bind(0, y)?;
    if em.node.outputs.len() == 1 {
        return Ok(()); // layer_norm
    }
    let x = em.input(0)?;
    let rank = em.ty(x).rank();
    let dims: Vec<usize> = (rank - normalized_shape.len()..rank).collect();
    let (mu, rstd) = stats(em, x, &dims, *eps)?;
    em.bind(1, mu)?;
    em.bind(2, rstd)
}

/// `rms_norm(x, shape, weight?, eps)`: `cast(x32 * rsqrt(mean(x32^2) + eps)) * weight` with
/// `x32` the f32 up-cast of a half input and eps defaulting to the compute type's epsilon,
/// as ATen computes it; the chain is the one the RMSNorm fusion matches.
pub fn rms_norm(em: &mut Emitter) -> R<()> {
    let Composite::RmsNorm {
        normalized_shape,
        eps,
    } = em.composite()?
    else {
        return Err("internal: not rms_norm".into());
    };
    let x = em.input(0)?;
    let ty: TensorType = em.ty(x).clone();
    let k = normalized_shape.len();
    if k > ty.rank() || ty.shape[ty.rank() - k..] != normalized_shape[..] {
        return Err(format!(
            "normalized shape {normalized_shape:?} is not the tail of {:?}",
            ty.shape
        ));
    }
    let xf = em.upcast(x);
    let eps = eps.unwrap_or(if em.dtype(xf) == DType::F64 {
        f64::EPSILON
    } else {
        f32::EPSILON as f64
    });
    let dims: Vec<usize> = (ty.rank() - k..ty.rank()).collect();
    let sq = em.scalar(BinaryOp::Pow, xf, 2.0);
    let ms = em.mean(sq, &dims, true);
    let a = em.scalar(BinaryOp::Add, ms, eps);
    let r = em.unary(UnaryOp::Rsqrt, a);
    let y = em.mul(xf, r)?;
    let y = em.cast(y, ty.dtype);
    let y = match em.input(1).ok() {
        Some(w) => em.mul(y, w)?,
        None => y,
    };
    em.bind(0, y)
}

/// Batch norm in training mode: each channel (dim 1) normalized with the batch's mean and
/// biased variance over every other dim; the native forms also return that mean and the
/// rstd, as [C].
pub fn batch_norm_train(em: &mut Emitter) -> R<()> {
    let &Composite::BatchNormTrain { eps, present } = em.composite()? else {
        return Err("internal: not a training batch_norm".into());
    };
    let x = em.input(0)?;
    let shape = em.shape(x);
    if shape.len() < 2 {
        return Err(format!("batch_norm of a {shape:?} input"));
    }
    let mut next = 1;
    let mut slot = |p: bool| -> R<Option<ValueId>> {
        if !p {
            return Ok(None);
        }
        next += 1;
        em.input(next - 1).map(Some)
    };
    let (w, b) = (slot(present[0])?, slot(present[1])?);
    let dims: Vec<usize> = (0..shape.len()).filter(|&d| d != 1).collect();
    let (mu, rstd) = stats(em, x, &dims, eps)?;
    let xf = em.upcast(x);
    let d = em.sub(xf, mu)?;
    let y = em.mul(d, rstd)?;
    let y = channel_affine(em, y, w, b)?;
    let y = em.cast(y, em.dtype(x));
    em.bind(0, y)?;
    if em.node.outputs.len() == 3 {
        let c = shape[1];
        let m = em.reshape(mu, &[c]);
        em.bind(1, m)?;
        let r = em.reshape(rstd, &[c]);
        em.bind(2, r)?;
    }
    Ok(())
}
