//! Convolutions onto the conv2d kernel: conv1d (a unit height), unbatched conv2d (a batch
//! of one), and the string paddings of conv2d/conv3d (`"same"`: explicit padding, plus one
//! extra zero at the end of a dim whose total padding is odd, as ATen pads).

use super::emit::{Emitter, R};
use npu_ir::{Composite, ExtOp, Op, Padding1d, TensorType};

/// conv1d as conv2d over `[N, C, 1, L]`; an unbatched `[C, L]` input gets a batch of one;
/// `padding="same"` with an odd total pads the extra column on the right, as ATen does.
pub fn conv1d(em: &mut Emitter) -> R<()> {
    let &Composite::Conv1d {
        stride,
        padding,
        dilation,
        groups,
    } = em.composite()?
    else {
        return Err("internal: not conv1d".into());
    };
    let (x, w) = (em.input(0)?, em.input(1)?);
    let (xs, ws) = (em.shape(x), em.shape(w));
    let (n, c, l) = match xs.as_slice() {
        [n, c, l] => (*n, *c, *l),
        [c, l] => (1, *c, *l),
        _ => return Err(format!("conv1d of a {xs:?} input")),
    };
    let [o, ci, k] = ws[..] else {
        return Err(format!("conv1d with a {ws:?} weight"));
    };
    let mut x4 = em.reshape(x, &[n, c, 1, l]);
    let pad = match padding {
        Padding1d::Explicit(p) => p,
        Padding1d::Valid => 0,
        Padding1d::Same => {
            let total = dilation * (k.max(1) - 1);
            let left = total / 2;
            if total - left > left {
                let dtype = em.dtype(x4);
                let z = em.full(&[n, c, 1, total - 2 * left], dtype, 0.0);
                x4 = em.cat(vec![x4, z], 3)?;
            }
            left
        }
    };
    let w4 = em.reshape(w, &[o, ci, 1, k]);
    let mut inputs = vec![x4, w4];
    inputs.extend(em.input(2).ok());
    let out = em.shape(em.output(0)?);
    let lout = *out.last().ok_or("conv1d output of rank 0")?;
    let ty = TensorType {
        shape: vec![n, o, 1, lout],
        dtype: em.dtype(em.output(0)?),
    };
    let y = em.emit1(
        Op::Conv2d {
            stride: [1, stride],
            padding: [0, pad],
            dilation: [1, dilation],
            groups,
        },
        inputs,
        ty,
    );
    em.bind(0, y)
}

/// conv2d of an unbatched `[C, H, W]` input: a batch of one.
pub fn conv2d_unbatched(em: &mut Emitter) -> R<()> {
    let op = em.node.op.clone();
    let x = em.input(0)?;
    let mut s = vec![1];
    s.extend(em.shape(x));
    let x4 = em.reshape(x, &s);
    let mut inputs = vec![x4];
    inputs.extend(em.node.inputs.get(1..).unwrap_or(&[]).iter().copied());
    let out = em.ty(em.output(0)?).clone();
    let mut shape = vec![1];
    shape.extend(&out.shape);
    let y = em.emit1(
        op,
        inputs,
        TensorType {
            shape,
            dtype: out.dtype,
        },
    );
    em.bind(0, y)
}

/// `conv2d/conv3d(x, w, b?, stride, padding="same"|"valid", dilation, groups)`.
pub fn conv_string_padding(em: &mut Emitter) -> R<()> {
    let Composite::ConvStringPadding {
        same,
        stride,
        dilation,
        groups,
    } = em.composite()?
    else {
        return Err("internal: not a string-padded convolution".into());
    };
    let (x, w) = (em.input(0)?, em.input(1)?);
    let ws = em.shape(w);
    let n = stride.len();
    if ws.len() != n + 2 {
        return Err(format!("a {ws:?} weight for {n} spatial dims"));
    }
    let mut x = x;
    let mut padding = vec![0; n];
    if *same {
        if stride.iter().any(|&s| s != 1) {
            return Err("padding='same' needs stride 1".into());
        }
        let rank = em.ty(x).rank();
        for i in 0..n {
            let total = dilation[i] * (ws[2 + i].max(1) - 1);
            padding[i] = total / 2;
            let extra = total - 2 * padding[i];
            if extra > 0 {
                let d = rank - n + i;
                let mut zs = em.shape(x);
                zs[d] = extra;
                let dtype = em.dtype(x);
                let z = em.full(&zs, dtype, 0.0);
                x = em.cat(vec![x, z], d)?;
            }
        }
    }
    let mut inputs = vec![x, w];
    inputs.extend(em.input(2).ok());
    let ty = em.ty(em.output(0)?).clone();
    let op = if n == 2 {
        Op::Conv2d {
            stride: [stride[0], stride[1]],
            padding: [padding[0], padding[1]],
            dilation: [dilation[0], dilation[1]],
            groups: *groups,
        }
    } else {
        Op::Ext(ExtOp::Convolution {
            stride: stride.clone(),
            padding,
            dilation: dilation.clone(),
            transposed: false,
            output_padding: vec![0; n],
            groups: *groups,
        })
    };
    let y = em.emit1(op, inputs, ty);
    em.bind(0, y)
}
