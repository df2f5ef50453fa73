//! Runs of steps a backend may execute as one launch, found once for every backend.
//!
//! A decoder layer's program runs `rope(q)`, `rope(k)`, `index_copy(k_cache, pos, rope(k))`,
//! `index_copy(v_cache, pos, v)`: in decode, four launches of a few hundred elements each,
//! whose cost is the launch, not the work (Qwen2.5-1.5B: 112 of a step's ~320 kernels).
//! [`rope_cache`] finds them; CUDA's `k_rope_cache` and wgpu's fused dispatch run them as one.
//!
//! Equivalence with running the steps in order: one launch runs its parts concurrently, so no
//! output of the group may overlap another output or any input of the group, except the one
//! edge a kernel carries in registers (the second RoPE's output read by the first index_copy,
//! matched as the identical binding).

use crate::program::{Binding, Kernel, Slot, Step};

/// Whether a and b may share bytes: the same slot's overlapping ranges, or an input and an
/// output (an output may be donated an input's buffer; distinct inputs never share one).
fn may_overlap(a: &Binding, b: &Binding) -> bool {
    if a.slot != b.slot {
        return matches!(
            (a.slot, b.slot),
            (Slot::Input(_), Slot::Output(_)) | (Slot::Output(_), Slot::Input(_))
        );
    }
    a.byte_offset < b.end_byte() && b.byte_offset < a.end_byte()
}

/// A layer's RoPE and KV-cache steps, in program order.
pub struct RopeCache<'s> {
    pub q: &'s Step,
    pub k: &'s Step,
    /// index_copy of the second RoPE's output.
    pub k_write: Option<&'s Step>,
    /// index_copy of a tensor from outside the group.
    pub v_write: Option<&'s Step>,
}

impl RopeCache<'_> {
    /// Steps the group replaces.
    pub fn len(&self) -> usize {
        2 + usize::from(self.k_write.is_some()) + usize::from(self.v_write.is_some())
    }

    /// Never empty: a group holds both RoPEs.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// No part reads or writes what another part writes, but for the k -> k_write edge.
    fn independent(&self) -> bool {
        let mut outs: Vec<&Binding> = vec![&self.q.outputs[0], &self.k.outputs[0]];
        let mut ins: Vec<&Binding> = self.q.inputs.iter().chain(&self.k.inputs).collect();
        if let Some(s) = self.k_write {
            outs.push(&s.outputs[0]);
            ins.push(&s.inputs[0]);
        }
        if let Some(s) = self.v_write {
            outs.push(&s.outputs[0]);
            ins.extend(&s.inputs);
        }
        let disjoint_outs = outs
            .iter()
            .enumerate()
            .all(|(i, a)| outs[i + 1..].iter().all(|b| !may_overlap(a, b)));
        disjoint_outs && outs.iter().all(|o| ins.iter().all(|i| !may_overlap(o, i)))
    }
}

fn floats(s: &Step) -> bool {
    s.inputs
        .iter()
        .chain(&s.outputs)
        .skip(usize::from(matches!(s.kernel, Kernel::IndexCopy { .. })))
        .all(|b| b.dtype.is_float())
}

/// The group starting at `steps[0]`, if the steps there have its shape and are independent.
pub fn rope_cache(steps: &[Step]) -> Option<RopeCache<'_>> {
    let rope = |s: &Step| matches!(s.kernel, Kernel::Rope) && floats(s);
    let (q, k) = (steps.first()?, steps.get(1)?);
    if !rope(q) || !rope(k) {
        return None;
    }
    let index_copy = |s: &&Step| matches!(s.kernel, Kernel::IndexCopy { .. }) && floats(s);
    let mut rest = steps[2..].iter();
    let mut next = rest.next().filter(index_copy);
    let k_write = next.filter(|s| s.inputs[1] == k.outputs[0]);
    if k_write.is_some() {
        next = rest.next().filter(index_copy);
    }
    let v_write = next.filter(|s| s.inputs[1] != k.outputs[0]);
    let g = RopeCache {
        q,
        k,
        k_write,
        v_write,
    };
    g.independent().then_some(g)
}

/// The dim an index_copy step writes along (0 for other kernels).
pub fn index_copy_axis(s: &Step) -> usize {
    match s.kernel {
        Kernel::IndexCopy { axis } => axis,
        _ => 0,
    }
}

/// Fixtures for the backends' tests of their grouped launches.
pub mod fixtures {
    use crate::program::{Binding, Kernel, Slot, Step};
    use npu_ir::DType;

    fn b(slot: Slot, off: u64, shape: &[usize], dtype: DType) -> Binding {
        Binding {
            slot,
            byte_offset: off,
            shape: shape.to_vec(),
            strides: crate::program::dense_strides(shape),
            dtype,
        }
    }

    fn step(kernel: Kernel, inputs: Vec<Binding>, outputs: Vec<Binding>) -> Step {
        Step {
            kernel,
            inputs,
            outputs,
            origin: String::new(),
        }
    }

    /// A decoder layer's four steps as the compiler emits them (Qwen2.5 decode, bf16).
    pub fn decoder_layer() -> Vec<Step> {
        let a = |off, shape: &[usize]| b(Slot::Arena, off, shape, DType::BF16);
        let (cos, sin) = (a(56832, &[1, 1, 1, 128]), a(57088, &[1, 1, 1, 128]));
        let pos = b(Slot::Input(3), 0, &[1], DType::I64);
        let kc = b(Slot::Input(4), 0, &[1, 2, 2048, 128], DType::BF16);
        let vc = b(Slot::Input(5), 0, &[1, 2, 2048, 128], DType::BF16);
        let ic = Kernel::IndexCopy { axis: 2 };
        vec![
            step(
                Kernel::Rope,
                vec![a(0, &[1, 12, 1, 128]), cos.clone(), sin.clone()],
                vec![a(7168, &[1, 12, 1, 128])],
            ),
            step(
                Kernel::Rope,
                vec![a(3072, &[1, 2, 1, 128]), cos, sin],
                vec![a(10240, &[1, 2, 1, 128])],
            ),
            step(
                ic.clone(),
                vec![pos.clone(), a(10240, &[1, 2, 1, 128])],
                vec![kc],
            ),
            step(ic, vec![pos, a(3584, &[1, 2, 1, 128])], vec![vc]),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::decoder_layer as layer;
    use super::*;

    #[test]
    fn a_decoder_layer_is_one_group() {
        let steps = layer();
        let g = rope_cache(&steps).expect("a group");
        assert_eq!(g.len(), 4);
        assert!(rope_cache(&steps[1..]).is_none(), "one RoPE is no group");
    }

    #[test]
    fn overlapping_parts_are_not_grouped() {
        // The values written to the cache are read from where the keys' RoPE writes.
        let mut steps = layer();
        steps[3].inputs[1].byte_offset = 10240;
        let g = rope_cache(&steps).expect("the RoPEs and the key write still group");
        assert_eq!(g.len(), 3);
        assert!(g.v_write.is_none());
        // The queries' RoPE output overlaps the keys' input.
        let mut steps = layer();
        steps[0].outputs[0].byte_offset = 3072;
        assert!(rope_cache(&steps).is_none());
        // Both caches in the caller's buffers: an input read elsewhere may be an output's memory.
        let mut steps = layer();
        steps[1].inputs[0].slot = Slot::Output(7);
        assert!(rope_cache(&steps).is_none());
    }
}
