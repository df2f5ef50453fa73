//! A decode MLP's gate/up GEMV and its SiLU gating (`npu_program::groups::gated_gemm`) as one
//! `k_gemv16_gated` launch: each warp computes a gate value beside its up value and stores
//! the gated product, so the gating step's launch goes.
//!
//! The GEMM is planned as it would be alone, and the pair fuses only where that plan is one
//! `k_gemv16` launch (16-bit operands of one dtype, one row, no bias or activation), whose
//! operands the fused launch takes over. Its sums run in another order than `k_gemv16`'s
//! (half a warp a row), so outputs agree to f32 rounding, not bit for bit.
//! `NPU_CUDA_FUSE_GATING=0` turns it off, for comparisons.

use super::gemm::GEMV16_BLOCKS_PER_SM;
use super::{kl, Planner, StepPlan};
use crate::launch::{unary_code, Arg, Launch, TdArg};
use npu_ir::UnaryOp;
use npu_program::groups::{gated_gemm, GatedGemm};
use npu_program::program::Step;

impl Planner<'_> {
    /// The gated pair starting at `steps[0]` where this backend would fuse it: the switch on,
    /// the group's shape (`gated_gemm`), one row. Cheap: plans nothing.
    pub(crate) fn gated_group<'s>(&self, steps: &'s [Step]) -> Option<GatedGemm<'s>> {
        if !self.dev.fuse_gating {
            return None;
        }
        let g = gated_gemm(steps)?;
        let a = &g.gate_up.inputs[0];
        let rows = a.numel() / a.shape.last().copied().unwrap_or(1).max(1);
        (rows == 1).then_some(g)
    }

    /// One launch for the gated pair at `steps[0]` and how many steps it replaces; None
    /// where there is no such pair or its GEMM does not plan to one `k_gemv16` launch.
    pub(crate) fn gated_gemv(&self, steps: &[Step]) -> Option<(usize, StepPlan)> {
        let g = self.gated_group(steps)?;
        let plan = self.plan(g.gate_up).ok()?;
        let [Launch::Kernel(k)] = &plan.launches[..] else {
            return None;
        };
        if !self.dev.is_func(k.func, "k_gemv16") || k.grid.1 != 1 {
            return None;
        }
        let [Arg::Td(a), Arg::Td(b), _, Arg::I32(0), Arg::F32(alpha), _, Arg::I32(-1), Arg::Td(gu), Arg::Td(nw), Arg::I32(has_norm), Arg::F32(eps)] =
            k.args[..]
        else {
            return None;
        };
        let h = &g.gating.outputs[0];
        let pairs = h.numel();
        // a warp per pair, at most k_gemv16's resident blocks
        let blocks = pairs
            .div_ceil(8)
            .min(GEMV16_BLOCKS_PER_SM * self.dev.sms.max(1) as usize);
        let launch = kl(
            self.f("k_gemv16_gated"),
            (blocks as u32, 1, 1),
            256,
            k.smem,
            vec![
                Arg::Td(a),
                Arg::Td(b),
                Arg::F32(alpha),
                Arg::I32(gu.td.dt),
                Arg::Td(nw),
                Arg::I32(has_norm),
                Arg::F32(eps),
                Arg::I32(unary_code(Some(UnaryOp::Silu))),
                Arg::Td(TdArg::of(h)),
            ],
        );
        Some((GatedGemm::LEN, vec![launch].into()))
    }
}
