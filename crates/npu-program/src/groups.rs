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

/// A one-row GEMM whose output row holds a decoder layer's q, k and v side by side, followed
/// by their [`RopeCache`] group with both cache writes: a backend may rotate and write them in
/// the GEMM's epilogue. The GEMM's output is still stored, so nothing is assumed about its
/// readers; what one launch needs is that the group reads the GEMM's output only through
/// `q`, `k` and `v` (each a dense `[1, heads, 1, d]` slice of the row, together covering it)
/// and that the group's outputs touch none of the GEMM's operands.
pub struct GemmRope<'s> {
    pub gemm: &'s Step,
    pub rope: RopeCache<'s>,
    /// First output column of the queries, the keys and the values in the GEMM's row.
    pub q_col: usize,
    pub k_col: usize,
    pub v_col: usize,
}

impl GemmRope<'_> {
    /// Steps the group replaces.
    pub fn len(&self) -> usize {
        1 + self.rope.len()
    }

    /// Never empty: a group holds the GEMM and both RoPEs.
    pub fn is_empty(&self) -> bool {
        false
    }
}

/// The GEMM + RoPE / KV-cache group starting at `steps[0]`, if the steps there have its shape.
pub fn gemm_rope_cache(steps: &[Step]) -> Option<GemmRope<'_>> {
    let gemm = steps.first()?;
    if !matches!(gemm.kernel, Kernel::Gemm { .. }) {
        return None;
    }
    let rope = rope_cache(&steps[1..])?;
    let (kw, vw) = (rope.k_write?, rope.v_write?);
    let out = &gemm.outputs[0];
    let r = out.shape.len();
    let n = *out.shape.last()?;
    if r < 2 || out.shape[..r - 1].iter().any(|&d| d != 1) || out.strides[r - 1] != 1 {
        return None;
    }
    let esize = out.dtype.size_bytes() as u64;
    // The column where a dense [1, heads, 1, d] slice of the output row starts.
    let col = |x: &Binding| -> Option<usize> {
        // strides of size-1 dims are whatever the layout left there
        let dense = x.shape.len() == 4
            && x.shape[0] == 1
            && x.shape[2] == 1
            && x.shape[1..]
                .iter()
                .zip(&x.strides[1..])
                .zip(crate::program::dense_strides(&x.shape)[1..].iter())
                .all(|((&d, &st), &want)| d == 1 || st == want);
        let inside = x.slot == out.slot
            && x.byte_offset >= out.byte_offset
            && x.end_byte() <= out.end_byte();
        (dense && inside && x.dtype == out.dtype)
            .then(|| ((x.byte_offset - out.byte_offset) / esize) as usize)
            .filter(|c| (*c as u64) * esize == x.byte_offset - out.byte_offset)
    };
    let (q, k, v) = (&rope.q.inputs[0], &rope.k.inputs[0], &vw.inputs[1]);
    let (q_col, k_col, v_col) = (col(q)?, col(k)?, col(v)?);
    let d = q.shape[3];
    let halves_of_4 = d == k.shape[3] && d % 8 == 0;
    if !halves_of_4 || q.numel() + k.numel() + v.numel() != n {
        return None;
    }
    // The three slices cover the row once.
    let mut spans = [(q_col, q.numel()), (k_col, k.numel()), (v_col, v.numel())];
    spans.sort();
    if spans[0].0 != 0
        || spans[0].0 + spans[0].1 != spans[1].0
        || spans[1].0 + spans[1].1 != spans[2].0
    {
        return None;
    }
    // The group's other reads (tables, indices) and every output apart from the GEMM's
    // operands and row.
    let outs = [
        &rope.q.outputs[0],
        &rope.k.outputs[0],
        &kw.outputs[0],
        &vw.outputs[0],
    ];
    let others = [
        &rope.q.inputs[1],
        &rope.q.inputs[2],
        &rope.k.inputs[1],
        &rope.k.inputs[2],
    ];
    let others = others.into_iter().chain([&kw.inputs[0], &vw.inputs[0]]);
    let gemm_side: Vec<&Binding> = gemm.inputs.iter().chain([out]).collect();
    let apart = outs
        .iter()
        .all(|o| gemm_side.iter().all(|g| !may_overlap(o, g)));
    let clean_reads = others.into_iter().all(|x| !may_overlap(x, out));
    (apart && clean_reads).then_some(GemmRope {
        gemm,
        rope,
        q_col,
        k_col,
        v_col,
    })
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

    /// The q/k/v GEMM (normalized, with bias) and the four steps of [`decoder_layer`].
    pub fn qkv_decoder_layer() -> Vec<Step> {
        let a = |off, shape: &[usize]| b(Slot::Arena, off, shape, DType::BF16);
        let w = |i, shape: &[usize]| b(Slot::Weight(i), 0, shape, DType::BF16);
        let mut steps = vec![step(
            Kernel::Gemm {
                alpha: 1.0,
                beta: 1.0,
                act: None,
                residual: false,
                norm: Some(1e-6),
            },
            vec![
                a(4096, &[1, 1536]),
                w(0, &[1536, 2048]),
                w(1, &[1, 2048]),
                w(2, &[1536]),
            ],
            vec![a(0, &[1, 2048])],
        )];
        steps.extend(decoder_layer());
        steps
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
    fn the_qkv_gemm_and_its_rope_cache_group_are_one() {
        let steps = super::fixtures::qkv_decoder_layer();
        let g = gemm_rope_cache(&steps).expect("a group");
        assert_eq!((g.len(), g.q_col, g.k_col, g.v_col), (5, 0, 1536, 1792));
        // the compiler's layouts: size-1 dims keep the strides of the transposes before them
        let mut steps = super::fixtures::qkv_decoder_layer();
        steps[1].inputs[0].strides = vec![1536, 128, 1536, 1];
        steps[2].inputs[0].strides = vec![256, 128, 256, 1];
        assert!(gemm_rope_cache(&steps).is_some());
        // heads not hd apart
        steps[2].inputs[0].strides = vec![256, 64, 256, 1];
        assert!(gemm_rope_cache(&steps).is_none());
        assert!(gemm_rope_cache(&steps[1..]).is_none(), "no GEMM");
        // The GEMM's row wider than q, k and v: something else reads the rest.
        let mut steps = super::fixtures::qkv_decoder_layer();
        steps[0].outputs[0].shape[1] = 2056;
        assert!(gemm_rope_cache(&steps).is_none());
        // The queries' RoPE writes over the GEMM's input.
        let mut steps = super::fixtures::qkv_decoder_layer();
        steps[1].outputs[0].byte_offset = 4096;
        assert!(gemm_rope_cache(&steps).is_none());
        // The values come from elsewhere.
        let mut steps = super::fixtures::qkv_decoder_layer();
        steps[4].inputs[1].byte_offset = 20480;
        assert!(gemm_rope_cache(&steps).is_none());
        // An index read from the GEMM's row.
        let mut steps = super::fixtures::qkv_decoder_layer();
        steps[3].inputs[0] = b_arena_i64(0);
        assert!(gemm_rope_cache(&steps).is_none());
    }

    fn b_arena_i64(off: u64) -> Binding {
        Binding {
            slot: Slot::Arena,
            byte_offset: off,
            shape: vec![1],
            strides: vec![1],
            dtype: npu_ir::DType::I64,
        }
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
