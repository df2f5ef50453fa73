//! One launch for an attention layer's RoPE and KV-cache writes (`npu_program::groups`
//! finds the four steps and states when one launch equals running them in order):
//! `k_rope_cache`, or `k_rope_cache8` over 16-bit rows of enough elements.

use super::{kl, td, Planner, StepPlan};
use crate::launch::{dtype_code, grid_for, Arg, Launch};
use crate::loc::Loc;
use npu_program::groups::{index_copy_axis, rope_cache, RopeCache};
use npu_program::program::{Binding, Step};

/// `k_rope_cache8`'s layouts: every rotation over 16-bit rows of a length that splits into
/// halves of whole 16-byte chunks, the cache writes along a dim other than the last into
/// 16-bit rows of the same dtype.
fn vector_layouts(g: &RopeCache) -> bool {
    let rope = |s: &Step| {
        let d = s.outputs[0].shape.last().copied().unwrap_or(0);
        d.is_multiple_of(16) && s.inputs.iter().chain(&s.outputs).all(rows16)
    };
    let write = |s: &Step, src: &Binding| {
        let (dest, r) = (&s.outputs[0], s.outputs[0].shape.len());
        rows16(dest) && rows16(src) && src.dtype == dest.dtype && index_copy_axis(s) + 1 != r
    };
    rope(g.q)
        && rope(g.k)
        && g.k_write.is_none_or(|s| write(s, &g.k.outputs[0]))
        && g.v_write.is_none_or(|s| write(s, &s.inputs[1]))
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

impl Planner<'_> {
    /// One launch for the RoPE / KV-cache group starting at `steps[0]`, and how many steps
    /// it replaces; None where the steps there are not such a group.
    pub(crate) fn rope_cache(&self, steps: &[Step]) -> Option<(usize, StepPlan)> {
        let g = rope_cache(steps)?;
        let (q, k) = (g.q, g.k);
        let (nq, nk) = (q.outputs[0].numel(), k.outputs[0].numel());
        // Absent parts: bindings of the k step (never read: their element counts are 0).
        let (k_idx, k_dest, k_axis) = match g.k_write {
            Some(s) => (&s.inputs[0], &s.outputs[0], index_copy_axis(s) as i32),
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
        args.push(Arg::I32(g.v_write.map_or(0, |s| index_copy_axis(s) as i32)));
        // The index_copy steps' own numbers, for the error word.
        let k_step = self.step + 2;
        let v_step = k_step + usize::from(g.k_write.is_some());
        args.extend([
            Arg::I64(nv as i64),
            Arg::Ptr(0, Loc::Err),
            Arg::I32(k_step as i32),
            Arg::I32(v_step as i32),
        ]);
        args.extend(self.lookahead(self.step + g.len()));
        // A decode step's 2,048 elements are faster one per thread (its 144 vector items left
        // most of the GPU idle: 11.0 -> 14.3 us a step on the H100); a 128-token prefill's
        // 262,144 in vector items (16.3 -> 13.6 us).
        let (name, threads) = if nq + nk + nv >= VEC_MIN && vector_layouts(&g) {
            ("k_rope_cache8", nq / 16 + nk / 16 + nv / 8)
        } else {
            ("k_rope_cache", nq + nk + nv)
        };
        // Every operand but the indices, for the per-dtype instances.
        let values = q
            .inputs
            .iter()
            .chain(&q.outputs)
            .chain(&k.inputs)
            .chain(&k.outputs);
        let writes = [k_dest, v_src, v_dest];
        let dtypes: Vec<i32> = values.chain(writes).map(|b| dtype_code(b.dtype)).collect();
        let launch: Launch = kl(
            self.f_dt(name, &dtypes),
            (grid_for(threads), 1, 1),
            256,
            0,
            args,
        );
        Some((g.len(), vec![launch].into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use npu_ir::DType;
    use npu_program::groups::fixtures::decoder_layer as layer;

    #[test]
    fn sixteen_byte_rows_take_the_vector_path() {
        let steps = layer();
        assert!(vector_layouts(&rope_cache(&steps).expect("a group")));
        // the sin table 8 bytes into a 16-byte line
        let mut steps = layer();
        steps[1].inputs[2].byte_offset += 8;
        assert!(!vector_layouts(&rope_cache(&steps).expect("a group")));
        // a head dim whose halves are not whole 16-byte chunks
        let mut steps = layer();
        for st in &mut steps {
            for bd in st.inputs.iter_mut().chain(st.outputs.iter_mut()) {
                if bd.shape.len() == 4 {
                    bd.shape[3] = 72;
                }
            }
        }
        assert!(!vector_layouts(&rope_cache(&steps).expect("a group")));
        // f32 tables
        let mut steps = layer();
        steps[0].inputs[1].dtype = DType::F32;
        assert!(!vector_layouts(&rope_cache(&steps).expect("a group")));
    }
}
