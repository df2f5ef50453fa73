//! A decoder's gated MLP in decode (`npu_program::groups::gated_mlp`: gate/up GEMV, SiLU
//! gating, down GEMV) as one `k_mlp16` launch: the gating happens where the gate and up
//! values are computed, and a grid barrier replaces the two kernel boundaries, the down
//! weights' first bytes fetched while the gate/up product finishes (kernels/gemm.cu).
//!
//! Both GEMMs are planned as they would be alone, and the group fuses only where both are one
//! `k_gemv16` launch (16-bit operands of one dtype, one row), whose arguments the fused
//! launch takes over: it sums in their order, so its outputs equal theirs bit for bit.
//! `NPU_CUDA_FUSE_MLP=0` turns it off, for comparisons.

use super::gemm::GEMV16_BLOCKS_PER_SM;
use super::{kl, Planner, StepPlan};
use crate::launch::{unary_code, Arg, Launch, TdArg};
use crate::loc::Loc;
use npu_ir::UnaryOp;
use npu_program::groups::{gated_mlp, GatedMlp};
use npu_program::program::{Binding, Step};

/// Rows of a GEMM's `a` operand.
fn rows(a: &Binding) -> usize {
    a.numel() / a.shape.last().copied().unwrap_or(1).max(1)
}

/// `k_gemv16`'s arguments: a, b, bias, bias mode, alpha, beta, act, out, norm weight, has
/// norm, eps (plan/gemm.rs).
struct Gemv16 {
    a: TdArg,
    b: TdArg,
    bias: TdArg,
    bias_mode: i32,
    alpha: f32,
    beta: f32,
    act: i32,
    out: TdArg,
    nw: TdArg,
    has_norm: i32,
    eps: f32,
    smem: u32,
}

impl Planner<'_> {
    /// The MLP group starting at `steps[0]` where this backend would fuse it: the switch on,
    /// the group's shape (`gated_mlp`), one row through both GEMMs. Cheap: plans nothing.
    pub(crate) fn mlp_group<'s>(&self, steps: &'s [Step]) -> Option<GatedMlp<'s>> {
        if !self.dev.fuse_mlp {
            return None;
        }
        let g = gated_mlp(steps)?;
        (rows(&g.gate_up.inputs[0]) == 1 && rows(&g.down.inputs[0]) == 1).then_some(g)
    }

    /// One launch for the MLP group at `steps[0]` and how many steps it replaces; None where
    /// there is no such group or either GEMM does not plan to one `k_gemv16` launch.
    pub(crate) fn gated_mlp(&self, steps: &[Step]) -> Option<(usize, StepPlan)> {
        let g = self.mlp_group(steps)?;
        let first = self.gemv16(g.gate_up, self.step)?;
        let down = self.gemv16(g.down, self.step + 2)?;
        let same_rank =
            first.out.td.rank == down.out.td.rank && first.a.td.rank == down.out.td.rank;
        if first.bias_mode != 0 || first.act >= 0 || down.act >= 0 || !same_rank {
            return None;
        }
        let func = self.f("k_mlp16");
        let smem = first.smem.max(down.smem);
        let resident = self.dev.resident_blocks(func, 256, smem).ok()?;
        let f = g.gating.outputs[0].shape.last().copied()?;
        // every block resident at once: the grid barrier waits for all of them
        let blocks =
            (resident.min(GEMV16_BLOCKS_PER_SM) * self.dev.sms.max(0) as usize).min(f.div_ceil(4));
        if blocks == 0 {
            return None;
        }
        let bar = self.persist.borrow_mut().barrier();
        let launch: Launch = kl(
            func,
            (blocks as u32, 1, 1),
            256,
            smem,
            vec![
                Arg::Td(first.a),
                Arg::Td(first.b),
                Arg::F32(first.alpha),
                Arg::I32(first.out.td.dt),
                Arg::Td(first.nw),
                Arg::I32(first.has_norm),
                Arg::F32(first.eps),
                Arg::I32(unary_code(Some(UnaryOp::Silu))),
                Arg::Td(down.a),
                Arg::Td(down.b),
                Arg::Td(down.bias),
                Arg::I32(down.bias_mode),
                Arg::F32(down.alpha),
                Arg::F32(down.beta),
                Arg::Td(down.out),
                Arg::Ptr(0, Loc::Persist(bar)),
            ],
        );
        Some((GatedMlp::LEN, vec![launch].into()))
    }

    /// The GEMM step `s` (program step `at`) where it plans to one `k_gemv16` launch over one
    /// batch, with that launch's arguments.
    fn gemv16(&self, s: &Step, at: usize) -> Option<Gemv16> {
        let planner = Planner { step: at, ..*self };
        let plan = planner.plan(s).ok()?;
        let [Launch::Kernel(k)] = &plan.launches[..] else {
            return None;
        };
        if !self.dev.is_func(k.func, "k_gemv16") || k.grid.1 != 1 {
            return None;
        }
        let [Arg::Td(a), Arg::Td(b), Arg::Td(bias), Arg::I32(bias_mode), Arg::F32(alpha), Arg::F32(beta), Arg::I32(act), Arg::Td(out), Arg::Td(nw), Arg::I32(has_norm), Arg::F32(eps)] =
            k.args[..]
        else {
            return None;
        };
        Some(Gemv16 {
            a,
            b,
            bias,
            bias_mode,
            alpha,
            beta,
            act,
            out,
            nw,
            has_norm,
            eps,
            smem: k.smem,
        })
    }
}
