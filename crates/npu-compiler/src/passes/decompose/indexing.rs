//! Indexed reductions onto the extended opset's scatter.

use super::emit::{dim, Emitter, R};
use npu_ir::{Composite, ExtOp, Op};

/// `index_reduce(self, dim, index [n], source)`: `scatter_reduce` with the index viewed as
/// `[1, .., n, .., 1]` along `dim` and broadcast over `source` (the two agree element by
/// element, `mean`'s count of `self` included).
pub fn index_reduce(em: &mut Emitter) -> R<()> {
    let &Composite::IndexReduce {
        dim: d,
        reduce,
        include_self,
    } = em.composite()?
    else {
        return Err("internal: not index_reduce".into());
    };
    let (x, index, src) = (em.input(0)?, em.input(1)?, em.input(2)?);
    let ss = em.shape(src);
    let n = em.ty(index).numel();
    let (src, ss) = if ss.is_empty() {
        (em.reshape(src, &[1]), vec![1])
    } else {
        (src, ss)
    };
    let d = dim(d, ss.len())?;
    if ss[d] != n {
        return Err(format!("{n} indices for dim {d} of a {ss:?} source"));
    }
    let mut view = vec![1; ss.len()];
    view[d] = n;
    let iv = em.reshape(index, &view);
    let ie = em.expand(iv, &ss);
    let xs = em.shape(x);
    let xv = if xs.is_empty() {
        em.reshape(x, &[1])
    } else {
        x
    };
    let ty = em.ty(xv).clone();
    let r = em.emit1(
        Op::Ext(ExtOp::Scatter {
            dim: d as i64,
            value: None,
            reduce: Some(reduce),
            include_self,
        }),
        vec![xv, ie, src],
        ty,
    );
    em.bind(0, r)
}
