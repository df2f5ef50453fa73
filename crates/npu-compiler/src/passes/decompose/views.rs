//! View composites onto the primitive views (reshape, expand, slice): expand_as/reshape_as
//! (the template operand is dropped), select, split_with_sizes, unbind.

use super::emit::{dim, Emitter, R};
use npu_ir::{Composite, SplitAt};

pub fn expand_as(em: &mut Emitter) -> R<()> {
    let x = em.input(0)?;
    let out = em.shape(em.output(0)?);
    let r = em.expand(x, &out);
    em.bind(0, r)
}

pub fn reshape_as(em: &mut Emitter) -> R<()> {
    let x = em.input(0)?;
    let out = em.shape(em.output(0)?);
    let r = em.reshape(x, &out);
    em.bind(0, r)
}

/// `x.select(dim, index)`: a one-wide slice, then the dim dropped.
pub fn select(em: &mut Emitter) -> R<()> {
    let &Composite::Select { dim: d, index } = em.composite()? else {
        return Err("internal: not select".into());
    };
    let x = em.input(0)?;
    let shape = em.shape(x);
    let d = dim(d, shape.len())?;
    let n = shape[d] as i64;
    let i = if index < 0 { index + n } else { index };
    if !(0..n).contains(&i) {
        return Err(format!(
            "index {index} out of range for dim {d} of size {n}"
        ));
    }
    let s = em.slice(x, d, i as usize, 1);
    let mut out = shape;
    out.remove(d);
    let r = em.reshape(s, &out);
    em.bind(0, r)
}

pub fn split_with_sizes(em: &mut Emitter) -> R<()> {
    let Composite::SplitWithSizes { sizes, dim: d } = em.composite()? else {
        return Err("internal: not split_with_sizes".into());
    };
    let x = em.input(0)?;
    let shape = em.shape(x);
    let d = dim(*d, shape.len())?;
    if sizes.iter().sum::<usize>() != shape[d] || sizes.len() != em.node.outputs.len() {
        return Err(format!(
            "split sizes {sizes:?} for dim {d} of size {} into {} outputs",
            shape[d],
            em.node.outputs.len()
        ));
    }
    let mut at = 0;
    for (i, &s) in sizes.iter().enumerate() {
        let v = em.slice(x, d, at, s);
        em.bind(i, v)?;
        at += s;
    }
    Ok(())
}

pub fn unbind(em: &mut Emitter) -> R<()> {
    let &Composite::Unbind { dim: d } = em.composite()? else {
        return Err("internal: not unbind".into());
    };
    let x = em.input(0)?;
    let shape = em.shape(x);
    let d = dim(d, shape.len())?;
    if em.node.outputs.len() != shape[d] {
        return Err(format!(
            "unbind of dim {d} of size {} into {} outputs",
            shape[d],
            em.node.outputs.len()
        ));
    }
    let mut out = shape.clone();
    out.remove(d);
    for i in 0..shape[d] {
        let s = em.slice(x, d, i, 1);
        let v = em.reshape(s, &out);
        em.bind(i, v)?;
    }
    Ok(())
}

/// Output i is input i reshaped (`atleast_Nd` of a sequence) or broadcast
/// (`broadcast_tensors`) to output i's shape.
pub fn view_each(em: &mut Emitter) -> R<()> {
    let &Composite::ViewEach { expand } = em.composite()? else {
        return Err("internal: not view_each".into());
    };
    if em.node.inputs.len() != em.node.outputs.len() {
        return Err(format!(
            "{} inputs for {} outputs",
            em.node.inputs.len(),
            em.node.outputs.len()
        ));
    }
    for i in 0..em.node.outputs.len() {
        let x = em.input(i)?;
        let out = em.shape(em.output(i)?);
        let v = if expand {
            let mut src = em.shape(x);
            if src.len() > out.len() {
                return Err(format!("cannot broadcast {src:?} to {out:?}"));
            }
            // left-pad with 1s, as broadcasting does
            let mut padded = vec![1; out.len() - src.len()];
            padded.append(&mut src);
            let x = em.reshape(x, &padded);
            em.expand(x, &out)
        } else {
            em.reshape(x, &out)
        };
        em.bind(i, v)?;
    }
    Ok(())
}

/// `narrow(dim, start, length)`: a slice.
pub fn narrow(em: &mut Emitter) -> R<()> {
    let &Composite::Narrow {
        dim: d,
        start,
        length,
    } = em.composite()?
    else {
        return Err("internal: not narrow".into());
    };
    let x = em.input(0)?;
    let shape = em.shape(x);
    let d = dim(d, shape.len())?;
    let n = shape[d] as i64;
    let s = if start < 0 { start + n } else { start };
    if s < 0 || s + length as i64 > n {
        return Err(format!(
            "start {start} and length {length} do not fit dim {d} of size {n}"
        ));
    }
    let v = em.slice(x, d, s as usize, length);
    em.bind(0, v)
}

/// `tensor_split`: slices between cut points (clamped to the dim, as ATen does), or
/// `sections` parts whose first `size % sections` are one longer.
pub fn tensor_split(em: &mut Emitter) -> R<()> {
    let Composite::TensorSplit { dim: d, split } = em.composite()? else {
        return Err("internal: not tensor_split".into());
    };
    let x = em.input(0)?;
    let shape = em.shape(x);
    let d = dim(*d, shape.len())?;
    let n = shape[d];
    let bounds: Vec<(usize, usize)> = match split {
        SplitAt::Indices(idx) => {
            let norm = |i: i64| -> usize {
                let i = if i < 0 { i + n as i64 } else { i };
                i.clamp(0, n as i64) as usize
            };
            let mut cuts = vec![0];
            cuts.extend(idx.iter().map(|&i| norm(i)));
            cuts.push(n);
            cuts.windows(2).map(|w| (w[0], w[1].max(w[0]))).collect()
        }
        SplitAt::Sections(k) => {
            let (q, r) = (n / k, n % k);
            let mut at = 0;
            (0..*k)
                .map(|i| {
                    let len = q + usize::from(i < r);
                    at += len;
                    (at - len, at)
                })
                .collect()
        }
    };
    if bounds.len() != em.node.outputs.len() {
        return Err(format!(
            "{} parts for {} outputs",
            bounds.len(),
            em.node.outputs.len()
        ));
    }
    for (i, (lo, hi)) in bounds.into_iter().enumerate() {
        let v = em.slice(x, d, lo, hi - lo);
        em.bind(i, v)?;
    }
    Ok(())
}

/// `channel_shuffle(x [N, C, *], g)`: `[N, g, C/g, *]` transposed to `[N, C/g, g, *]`.
pub fn channel_shuffle(em: &mut Emitter) -> R<()> {
    let &Composite::ChannelShuffle { groups } = em.composite()? else {
        return Err("internal: not channel_shuffle".into());
    };
    let x = em.input(0)?;
    let shape = em.shape(x);
    if shape.len() < 3 || !shape[1].is_multiple_of(groups) {
        return Err(format!("channel_shuffle of {shape:?} into {groups} groups"));
    }
    let mut split = vec![shape[0], groups, shape[1] / groups];
    split.extend(&shape[2..]);
    let v = em.reshape(x, &split);
    let t = em.transpose(v, 1, 2);
    let r = em.reshape(t, &shape);
    em.bind(0, r)
}
