//! A decoder layer's RoPE and KV-cache steps (`npu_program::groups::rope_cache`) as one
//! dispatch: in decode each is a few hundred elements, so four dispatches cost four
//! dispatch gaps for almost no work. One thread per element of q, then k, then the written
//! v; a k element's rotated value goes to k's output and, through registers, to the cache
//! (the group's rule: no other part reads what a part writes).

use super::kernels::{index_copy_store, numel, rope_value};
use super::{names, offset, round_to, unravel, Body, Operand};
use npu_program::groups::{index_copy_axis, RopeCache};
use npu_program::program::{Kernel, Step};
use std::fmt::Write;

/// The group as one step for `wgsl::operands`. Inputs: q's (x, cos, sin), k's (x, cos, sin),
/// the k write's index, the v write's (index, source); outputs: q's, k's, the k write's, the
/// v write's. The k write's source, k's output, is no operand of its own.
pub fn combined(g: &RopeCache) -> Step {
    let mut inputs = Vec::new();
    inputs.extend(g.q.inputs.iter().cloned());
    inputs.extend(g.k.inputs.iter().cloned());
    let mut outputs = vec![g.q.outputs[0].clone(), g.k.outputs[0].clone()];
    if let Some(w) = g.k_write {
        inputs.push(w.inputs[0].clone());
        outputs.push(w.outputs[0].clone());
    }
    if let Some(w) = g.v_write {
        inputs.extend(w.inputs.iter().cloned());
        outputs.push(w.outputs[0].clone());
    }
    Step {
        kernel: Kernel::Rope,
        inputs,
        outputs,
        origin: format!("{} + {} steps", g.q.origin, g.len() - 1),
    }
}

/// Inputs of [`combined`].
pub fn n_inputs(g: &RopeCache) -> usize {
    6 + usize::from(g.k_write.is_some()) + 2 * usize::from(g.v_write.is_some())
}

/// The body over [`combined`]'s operands.
pub fn body(g: &RopeCache, ops: &[Operand]) -> Body {
    let n_in = n_inputs(g);
    let (qo, ko) = (n_in, n_in + 1);
    let kw = g.k_write.map(|w| (6, n_in + 2, index_copy_axis(w)));
    let vw = g.v_write.map(|w| {
        let i = 6 + usize::from(kw.is_some());
        (
            i,
            i + 1,
            n_in + 2 + usize::from(kw.is_some()),
            index_copy_axis(w),
        )
    });
    let (qs, ks) = (&ops[qo].shape, &ops[ko].shape);
    let (nq, nk) = (numel(qs), numel(ks));
    let mut b = format!("    if (t < {nq}u) {{\n");
    b += &unravel("i", "t", qs);
    b += &rope_value(ops, [0, 1, 2], qs);
    let _ = writeln!(
        b,
        "    st{qo}({}, rv);",
        offset(&ops[qo], &names("i", qs.len()))
    );
    let _ = writeln!(b, "    }} else if (t < {}u) {{", nq + nk);
    b += &unravel("i", &format!("(t - {nq}u)"), ks);
    b += &rope_value(ops, [3, 4, 5], ks);
    let _ = writeln!(
        b,
        "    st{ko}({}, rv);",
        offset(&ops[ko], &names("i", ks.len()))
    );
    if let Some((index, out, axis)) = kw {
        // The cache receives k's output as stored (rounded to its dtype).
        let v = round_to(ops[ko].dtype, "rv");
        b += &index_copy_store(ops, [index, out], axis, ks.len(), &v);
    }
    let mut items = nq + nk;
    if let Some((index, src, out, axis)) = vw {
        let vs = &ops[src].shape;
        let _ = writeln!(b, "    }} else {{");
        b += &unravel("i", &format!("(t - {items}u)"), vs);
        let v = format!("ld{src}({})", offset(&ops[src], &names("i", vs.len())));
        b += &index_copy_store(ops, [index, out], axis, vs.len(), &v);
        items += numel(vs);
    }
    b += "    }\n";
    Body::new(b, items, 1)
}
