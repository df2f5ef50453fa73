//! A decode layer's RoPE / KV-cache group and the attention after it in one launch
//! (`k_attn_dec_rope`): the attention's blocks rotate their own heads' queries and the written
//! key row, and split 0's block stores everything the group's steps store, so the group's
//! launch, one link of a step's dependent chain, goes (`NPU_CUDA_ROPE_ATTN=0` keeps it).

use super::persist::may_share;
use super::{td, Planner, StepPlan};
use crate::launch::{Arg, Launch};
use crate::loc::Loc;
use npu_program::groups::{index_copy_axis, rope_cache, RopeCache};
use npu_program::program::{Kernel, Step};

/// `k_attn_dec_rope`'s dynamic shared memory (kernels/attention.cu: DM_ROPE_SMEM_BYTES):
/// `k_attn_dec_mma`'s, then the rotated queries of up to 8 heads and the written K and V row.
const DM_ROPE_SMEM_BYTES: u32 = super::attention::DM_SMEM_BYTES + ((8 + 2) * 128 * 2) as u32;

/// Steps before the group whose outputs the early reads must not see: the launch just before
/// the group belongs to one of them. A step folded into an earlier one launches nothing, and
/// the longest fold is this one, five steps (a group of four and its attention).
const LOOKBACK: usize = 5;

impl Planner<'_> {
    /// One launch for the RoPE / cache group starting at `steps[0]` and the attention step
    /// right after it (then `k_attn_combine`), and how many steps that covers; None where the
    /// steps there are not such a pair. Where the attention does not take `k_attn_dec_mma`
    /// after all (no tensor cores), the group's own launch and the attention's.
    pub(crate) fn rope_cache_attention(&self, steps: &[Step]) -> Option<(usize, StepPlan)> {
        if std::env::var("NPU_CUDA_ROPE_ATTN").is_ok_and(|v| v == "0") {
            return None;
        }
        let g = rope_cache(steps)?;
        let n = g.len();
        let att = steps.get(n)?;
        if !matches!(att.kernel, Kernel::Attention { .. }) || !self.takes_over(&g, att) {
            return None;
        }
        let after = Planner {
            step: self.step + n,
            ..*self
        };
        let mut plan = after.plan(att).ok()?;
        let fused = match plan.launches.first_mut() {
            Some(Launch::Kernel(k)) if self.dev.is_func(k.func, "k_attn_dec_mma") => k,
            _ => {
                let (_, group) = self.rope_cache(steps)?;
                let mut launches = group.launches;
                launches.append(&mut plan.launches);
                return Some((
                    n + 1,
                    StepPlan {
                        launches,
                        scratch: plan.scratch,
                    },
                ));
            }
        };
        let (kw, vw) = (g.k_write?, g.v_write?);
        fused.func = self.f("k_attn_dec_rope");
        fused.smem = DM_ROPE_SMEM_BYTES;
        // k_attn_dec_mma's arguments end with (pos, pre)
        let at = fused.args.len().checked_sub(2)?;
        fused.args.truncate(at);
        fused.args.extend([
            td(&kw.inputs[0]),
            Arg::I32(i32::from(self.early_reads(att))),
        ]);
        fused.args.extend(g.q.inputs.iter().map(td));
        fused.args.extend(g.k.inputs.iter().map(td));
        fused.args.extend([td(&g.k.outputs[0]), td(&vw.inputs[1])]);
        // the index_copy steps' own numbers, for the error word (as `rope_cache`)
        let k_step = self.step + 2;
        fused.args.extend([
            Arg::Ptr(0, Loc::Err),
            Arg::I32(k_step as i32),
            Arg::I32((k_step + 1) as i32),
        ]);
        Some((n + 1, plan))
    }

    /// Whether `k_attn_dec_rope` can stand for the group `g` and the attention `att`: the
    /// attention reads the group's rotated queries (one row per head) and the two caches it
    /// writes at one position along dim 2 from one index; every value operand 16-bit in the
    /// queries' dtype, the tables and rows as the kernel indexes them; the mask apart from
    /// what the group writes.
    fn takes_over(&self, g: &RopeCache, att: &Step) -> bool {
        let (Some(kw), Some(vw)) = (g.k_write, g.v_write) else {
            return false;
        };
        let ins = &att.inputs;
        let (q, k_rot) = (&g.q.outputs[0], &g.k.outputs[0]);
        let one_row = |s: &[usize]| s.len() == 4 && s[2] == 1;
        let one = |st: &Step| index_copy_axis(st) == 2 && st.inputs[1].shape.get(2) == Some(&1);
        let reads = ins.len() >= 3
            && ins[0] == *q
            && kw.outputs[0] == ins[1]
            && vw.outputs[0] == ins[2]
            && kw.inputs[0] == vw.inputs[0]
            && kw.inputs[1] == *k_rot
            && one(kw)
            && one(vw)
            && one_row(&q.shape)
            && one_row(&k_rot.shape);
        let dt = q.dtype;
        let mut values =
            g.q.inputs
                .iter()
                .chain(&g.k.inputs)
                .chain([k_rot, &vw.inputs[1], &ins[1], &ins[2]]);
        let dtypes = dt.size_bytes() == 2 && dt.is_float() && values.all(|b| b.dtype == dt);
        let outs = [q, k_rot, &kw.outputs[0], &vw.outputs[0]];
        let mask_apart = ins
            .get(3)
            .is_none_or(|m| !outs.iter().any(|o| may_share(self.program, o, m)));
        reads && dtypes && mask_apart
    }

    /// Whether `k_attn_dec_rope` may read the mask and its first K/V tile before its
    /// programmatic wait: none of the steps whose launch may run just before it (the
    /// `LOOKBACK` steps before the group) writes them. Off with `NPU_CUDA_ATTN_PRE=0`.
    fn early_reads(&self, att: &Step) -> bool {
        if std::env::var("NPU_CUDA_ATTN_PRE").is_ok_and(|v| v == "0") || self.step == 0 {
            return false;
        }
        let before = &self.program.steps[self.step.saturating_sub(LOOKBACK)..self.step];
        let read = att.inputs.iter().skip(1);
        !before
            .iter()
            .flat_map(|s| &s.outputs)
            .any(|o| read.clone().any(|r| may_share(self.program, o, r)))
    }
}
