//! View composites onto the primitive views (reshape, expand, slice): expand_as/reshape_as
//! (the template operand is dropped), select, split_with_sizes, unbind.

use super::emit::{dim, Emitter, R};
use npu_ir::Composite;

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
