//! The q/k/v GEMV with its layer's RoPE and KV-cache writes in the epilogue
//! (`npu_program::groups::gemm_rope_cache` finds the five steps and states when one launch
//! equals running them in order): `k_gemv16_rope`, where the GEMM takes `k_gemv16`.
//!
//! H100, Qwen2.5-1.5B decode: the RoPE / cache launch cost ~4 us a layer in the replayed
//! graph (its launches dropped, docs/cuda.md), for ~7 KB of work.

use super::{td, Planner, StepPlan};
use crate::launch::{Arg, Launch};
use crate::loc::Loc;
use npu_program::groups::{gemm_rope_cache, index_copy_axis};
use npu_program::program::Step;

impl Planner<'_> {
    /// One launch for the GEMM + RoPE / KV-cache group starting at `steps[0]`, and how many
    /// steps it replaces; None where the steps there are not such a group, the GEMM does not
    /// take `k_gemv16`, a cache write covers more than one position, or
    /// `NPU_CUDA_FUSE_ROPE=0`.
    pub(crate) fn gemv_rope(&self, steps: &[Step]) -> Option<(usize, StepPlan)> {
        if std::env::var("NPU_CUDA_FUSE_ROPE").is_ok_and(|v| v == "0") {
            return None;
        }
        let g = gemm_rope_cache(steps)?;
        let mut plan = self.plan(g.gemm).ok()?;
        let [Launch::Kernel(kern)] = plan.launches.as_mut_slice() else {
            return None;
        };
        if !self.dev.is_func(kern.func, "k_gemv16") {
            return None;
        }
        let (q, k) = (g.rope.q, g.rope.k);
        let (kw, vw) = (g.rope.k_write?, g.rope.v_write?);
        // One position per write (the kernel loads the index once): the source's dim along
        // the write has one element, as in a decode step.
        let one_position = |s: &Step| s.inputs[1].shape.get(index_copy_axis(s)) == Some(&1);
        if !one_position(kw) || !one_position(vw) {
            return None;
        }
        let hd = q.inputs[0].shape[3];
        let (nqh, nkh) = (q.inputs[0].shape[1], k.inputs[0].shape[1]);
        // The grid stays k_gemv16's: q and k take hd / 8 units a head (hd % 8 == 0), v its
        // groups of 8, as many units as the row has groups of 8 columns.
        kern.func = self.f("k_gemv16_rope");
        let i32_of = |x: usize| Arg::I32(x as i32);
        kern.args.extend([
            i32_of(g.q_col),
            i32_of(g.k_col),
            i32_of(g.v_col),
            i32_of(hd),
            i32_of(nqh),
            i32_of(nkh),
        ]);
        kern.args
            .extend(q.inputs[1..].iter().chain(&q.outputs).map(td));
        kern.args
            .extend(k.inputs[1..].iter().chain(&k.outputs).map(td));
        kern.args.extend([td(&kw.inputs[0]), td(&kw.outputs[0])]);
        kern.args.push(i32_of(index_copy_axis(kw)));
        kern.args
            .extend([td(&vw.inputs[0]), td(&vw.inputs[1]), td(&vw.outputs[0])]);
        kern.args.push(i32_of(index_copy_axis(vw)));
        // The index_copy steps' own numbers, for the error word.
        kern.args.extend([
            Arg::Ptr(0, Loc::Err),
            i32_of(self.step + 3),
            i32_of(self.step + 4),
        ]);
        Some((g.len(), plan))
    }
}
