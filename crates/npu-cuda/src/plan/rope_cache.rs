//! One launch for an attention layer's RoPE and KV-cache writes. A decoder layer's program runs
//! `rope(q)`, `rope(k)`, `index_copy(k_cache, pos, rope(k))`, `index_copy(v_cache, pos, v)`:
//! four launches of a few hundred elements each, whose cost is the launch, not the work
//! (Qwen2.5-1.5B decode: 112 of a step's ~320 kernels). `k_rope_cache` does all four.
//!
//! Equivalence with running the steps in order: the launch runs its parts concurrently, so
//! no output of the group may overlap another output or any input of the group, except the
//! one edge the kernel carries in registers (the second RoPE's output read by the first
//! index_copy, matched as the identical binding).

use super::{kl, td, Planner, StepPlan};
use crate::launch::{grid_for, Arg, Launch};
use crate::loc::Loc;
use npu_program::program::{Binding, Kernel, Slot, Step};

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

/// The steps a `k_rope_cache` launch replaces, in program order.
struct Group<'s> {
    q: &'s Step,
    k: &'s Step,
    /// index_copy of the second RoPE's output.
    k_write: Option<&'s Step>,
    /// index_copy of a tensor from outside the group.
    v_write: Option<&'s Step>,
}

impl Group<'_> {
    fn len(&self) -> usize {
        2 + usize::from(self.k_write.is_some()) + usize::from(self.v_write.is_some())
    }

    /// No part reads or writes what another part writes, but for the k -> k_write edge.
    /// `k_rope_cache8`'s layouts: every rotation over 16-bit rows of a length that splits
    /// into halves of whole 16-byte chunks, the cache writes along a dim other than the last
    /// into 16-bit rows of the same dtype.
    fn rows16(&self) -> bool {
        let rope = |s: &Step| {
            let d = s.outputs[0].shape.last().copied().unwrap_or(0);
            d.is_multiple_of(16) && s.inputs.iter().chain(&s.outputs).all(rows16)
        };
        let write = |s: &Step, src: &Binding| {
            let (dest, r) = (&s.outputs[0], s.outputs[0].shape.len());
            rows16(dest) && rows16(src) && src.dtype == dest.dtype && axis(s) as usize + 1 != r
        };
        rope(self.q)
            && rope(self.k)
            && self.k_write.is_none_or(|s| write(s, &self.k.outputs[0]))
            && self.v_write.is_none_or(|s| write(s, &s.inputs[1]))
    }

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

/// Elements from which the group takes `k_rope_cache8`'s vector items.
const VEC_MIN: usize = 1 << 16;

/// 16-bit with contiguous rows starting 16 bytes aligned: eight elements a 16-byte access.
fn rows16(b: &Binding) -> bool {
    let r = b.shape.len();
    b.dtype.size_bytes() == 2
        && b.dtype.is_float()
        && r >= 1
        && b.strides[r - 1] == 1
        && b.strides[..r - 1].iter().all(|s| s.is_multiple_of(8))
        && b.byte_offset.is_multiple_of(16)
        && b.shape[r - 1].is_multiple_of(8)
}

fn floats(s: &Step) -> bool {
    s.inputs
        .iter()
        .chain(&s.outputs)
        .skip(usize::from(matches!(s.kernel, Kernel::IndexCopy { .. })))
        .all(|b| b.dtype.is_float())
}

/// The group starting at `steps[0]`, if the steps there have its shape.
fn find(steps: &[Step]) -> Option<Group<'_>> {
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
    let g = Group {
        q,
        k,
        k_write,
        v_write,
    };
    g.independent().then_some(g)
}

fn axis(s: &Step) -> i32 {
    match s.kernel {
        Kernel::IndexCopy { axis } => axis as i32,
        _ => 0,
    }
}

impl Planner<'_> {
    /// One launch for the RoPE / KV-cache group starting at `steps[0]`, and how many steps
    /// it replaces; None where the steps there are not such a group.
    pub(crate) fn rope_cache(&self, steps: &[Step]) -> Option<(usize, StepPlan)> {
        let g = find(steps)?;
        let (q, k) = (g.q, g.k);
        let (nq, nk) = (q.outputs[0].numel(), k.outputs[0].numel());
        // Absent parts: bindings of the k step (never read: their element counts are 0).
        let (k_idx, k_dest, k_axis) = match g.k_write {
            Some(s) => (&s.inputs[0], &s.outputs[0], axis(s)),
            None => (&k.inputs[0], &k.outputs[0], 0),
        };
        let (v_idx, v_src, v_dest, nv) = match g.v_write {
            Some(s) => (
                &s.inputs[0],
                &s.inputs[1],
                &s.outputs[0],
                s.inputs[1].numel(),
            ),
            None => (&k.inputs[0], &k.inputs[0], &k.outputs[0], 0),
        };
        let mut args: Vec<Arg> = q.inputs.iter().map(td).collect();
        args.extend([td(&q.outputs[0]), Arg::I64(nq as i64)]);
        args.extend(k.inputs.iter().map(td));
        args.extend([td(&k.outputs[0]), Arg::I64(nk as i64)]);
        args.extend([
            Arg::I32(i32::from(g.k_write.is_some())),
            td(k_idx),
            td(k_dest),
            Arg::I32(k_axis),
        ]);
        args.extend([td(v_idx), td(v_src), td(v_dest)]);
        args.push(Arg::I32(g.v_write.map_or(0, axis)));
        // The index_copy steps' own numbers, for the error word.
        let k_step = self.step + 2;
        let v_step = k_step + usize::from(g.k_write.is_some());
        args.extend([
            Arg::I64(nv as i64),
            Arg::Ptr(0, Loc::Err),
            Arg::I32(k_step as i32),
            Arg::I32(v_step as i32),
        ]);
        // A decode step's 2,048 elements are faster one per thread (its 144 vector items left
        // most of the GPU idle: 11.0 -> 14.3 us a step on the H100); a 128-token prefill's
        // 262,144 in vector items (16.3 -> 13.6 us).
        let (name, threads) = if nq + nk + nv >= VEC_MIN && g.rows16() {
            ("k_rope_cache8", nq / 16 + nk / 16 + nv / 8)
        } else {
            ("k_rope_cache", nq + nk + nv)
        };
        let launch: Launch = kl(self.f(name), (grid_for(threads), 1, 1), 256, 0, args);
        Some((g.len(), vec![launch].into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use npu_ir::DType;

    fn b(slot: Slot, off: u64, shape: &[usize], dtype: DType) -> Binding {
        let mut strides = vec![1; shape.len()];
        for d in (0..shape.len().saturating_sub(1)).rev() {
            strides[d] = strides[d + 1] * shape[d + 1];
        }
        Binding {
            slot,
            byte_offset: off,
            shape: shape.to_vec(),
            strides,
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

    /// A decoder layer's four steps as the compiler emits them (Qwen2.5 decode).
    fn layer() -> Vec<Step> {
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

    #[test]
    fn a_decoder_layer_is_one_group() {
        let steps = layer();
        let g = find(&steps).expect("a group");
        assert_eq!(g.len(), 4);
        assert!(find(&steps[1..]).is_none(), "one RoPE is no group");
    }

    #[test]
    fn overlapping_parts_are_not_grouped() {
        // The values written to the cache are read from where the keys' RoPE writes.
        let mut steps = layer();
        steps[3].inputs[1].byte_offset = 10240;
        let g = find(&steps).expect("the RoPEs and the key write still group");
        assert_eq!(g.len(), 3);
        assert!(g.v_write.is_none());
        // The queries' RoPE output overlaps the keys' input.
        let mut steps = layer();
        steps[0].outputs[0].byte_offset = 3072;
        assert!(find(&steps).is_none());
        // Both caches in the caller's buffers: an input read elsewhere may be an output's memory.
        let mut steps = layer();
        steps[1].inputs[0].slot = Slot::Output(7);
        assert!(find(&steps).is_none());
    }

    #[test]
    fn sixteen_byte_rows_take_the_vector_path() {
        let steps = layer();
        assert!(find(&steps).expect("a group").rows16());
        // the sin table 8 bytes into a 16-byte line
        let mut steps = layer();
        steps[1].inputs[2].byte_offset += 8;
        assert!(!find(&steps).expect("a group").rows16());
        // a head dim whose halves are not whole 16-byte chunks
        let mut steps = layer();
        for st in &mut steps {
            for bd in st.inputs.iter_mut().chain(st.outputs.iter_mut()) {
                if bd.shape.len() == 4 {
                    bd.shape[3] = 72;
                }
            }
        }
        assert!(!find(&steps).expect("a group").rows16());
        // f32 tables
        let mut steps = layer();
        steps[0].inputs[1].dtype = DType::F32;
        assert!(!find(&steps).expect("a group").rows16());
    }
}
