//! A gated MLP's gate/up GEMV and the elementwise gating that reads its output, in one launch
//! (`k_gemv16_gated`): a block sums four gate columns on warps 0-3 and the matching up columns
//! on warps 4-7, and four threads store act(gate) * up, so the gating needs no launch of its
//! own. The GEMV's output row is still written (another step may read it).

use super::persist::may_share;
use super::rope_cache::ptr;
use super::{Planner, StepPlan};
use crate::launch::{dtype_code, Arg, Launch};
use npu_ir::{BinaryOp, DType, UnaryOp};
use npu_program::expr::Instr;
use npu_program::program::{Binding, Kernel, Program, Step};

/// The dynamic shared memory a launch may take without opting in (`k_gemv16_gated` is not
/// among the kernels `Device::new` raises the limit for).
const DEFAULT_SMEM: u32 = 48 * 1024;

impl Planner<'_> {
    /// One launch for the GEMV at `steps[0]` and the gating right after it ([`fusable`]), and
    /// how many steps it replaces; None where they do not fuse, the GEMV does not plan to one
    /// `k_gemv16` launch of blocks of 8 warps, or with `NPU_CUDA_GEMV_GATED=0`.
    pub(crate) fn gemv_gated(&self, steps: &[Step]) -> Option<(usize, StepPlan)> {
        if std::env::var("NPU_CUDA_GEMV_GATED").is_ok_and(|v| v == "0") {
            return None;
        }
        let g = fusable(self.program, steps)?;
        let plan = self.plan(&steps[0]).ok()?;
        let [Launch::Kernel(mut kern)] = <[Launch; 1]>::try_from(plan.launches).ok()? else {
            return None;
        };
        // the pairing of columns takes blocks of 8 warps
        if plan.scratch != 0
            || !self.dev.is_func(kern.func, "k_gemv16")
            || kern.grid.1 != 1
            || kern.block.0 != 256
            || kern.smem > DEFAULT_SMEM
        {
            return None;
        }
        let code = dtype_code(g.dt);
        kern.func = self.f_dt("k_gemv16_gated", &[code, code]);
        // GvGated's fields in order (kernels/gemm.cu)
        kern.args
            .extend([ptr(g.h), Arg::I32(g.act.act_code()), Arg::I32(g.hh as i32)]);
        Some((2, vec![Launch::Kernel(kern)].into()))
    }
}

/// What `k_gemv16_gated` needs from the two steps.
struct Gated<'s> {
    dt: DType,
    act: UnaryOp,
    /// columns of each half
    hh: usize,
    /// the gating's output
    h: &'s Binding,
}

/// Whether the GEMM at `steps[0]` and the elementwise step right after it run as one
/// `k_gemv16_gated` launch: the GEMM has no activation and no residual and writes one
/// contiguous row of 2 hh columns (hh a multiple of 4: a block's four pairs); the next step
/// computes `act(x0) * x1` with a parameterless epilogue activation, x0 the row's first hh
/// columns and x1 the rest, into a contiguous row of hh; a, b, the row and h share one 16-bit
/// dtype; h shares no bytes with what the GEMM reads or writes (the kernel's blocks store it
/// while others still load).
fn fusable<'s>(program: &Program, steps: &'s [Step]) -> Option<Gated<'s>> {
    let [gemm, gate, ..] = steps else {
        return None;
    };
    let Kernel::Gemm {
        act: None,
        residual: false,
        ..
    } = gemm.kernel
    else {
        return None;
    };
    let Kernel::Elementwise { expr } = &gate.kernel else {
        return None;
    };
    let act = match expr.code.as_slice() {
        [Instr::Load(0), Instr::Unary(u), Instr::Load(1), Instr::Binary(BinaryOp::Mul)]
            if u.is_epilogue_act() =>
        {
            *u
        }
        _ => return None,
    };
    let out = &gemm.outputs[0];
    let n = *out.shape.last()?;
    let hh = n / 2;
    let row = |b: &Binding, numel: usize| b.numel() == numel && b.is_contiguous();
    if !row(out, n) || n % 8 != 0 {
        return None;
    }
    let dt = out.dtype;
    let [x0, x1] = gate.inputs.as_slice() else {
        return None;
    };
    let h = gate.outputs.first()?;
    let sixteen = matches!(dt, DType::BF16 | DType::F16);
    let same_dt = [&gemm.inputs[0], &gemm.inputs[1], x0, x1, h]
        .iter()
        .all(|b| b.dtype == dt);
    if !sixteen || !same_dt || !row(h, hh) {
        return None;
    }
    // x0 and x1 the row's halves, in that order
    let half = |x: &Binding, first: usize| {
        x.slot == out.slot
            && x.byte_offset == out.byte_offset + (first * dt.size_bytes()) as u64
            && row(x, hh)
    };
    if !(half(x0, 0) && half(x1, hh)) {
        return None;
    }
    let clash = gemm
        .inputs
        .iter()
        .chain(&gemm.outputs)
        .any(|b| may_share(program, h, b));
    (!clash).then_some(Gated { dt, act, hh, h })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::steps_program;
    use npu_program::expr::Expr;
    use npu_program::program::{dense_strides, Slot};

    fn bf(slot: Slot, off: u64, shape: &[usize]) -> Binding {
        Binding {
            slot,
            byte_offset: off,
            shape: shape.to_vec(),
            strides: dense_strides(shape),
            dtype: DType::BF16,
        }
    }

    /// Qwen2.5-1.5B's decode MLP as compiled: the normalized gate/up GEMM into arena bytes
    /// 0..35840, the gating from its halves into 35840.., read by the down GEMM.
    fn mlp() -> Vec<Step> {
        let gemm = Step {
            kernel: Kernel::Gemm {
                alpha: 1.0,
                beta: 1.0,
                act: None,
                residual: false,
                norm: Some(1e-6),
            },
            inputs: vec![
                bf(Slot::Arena, 53760, &[1, 1536]),
                Binding {
                    strides: vec![1, 1536],
                    ..bf(Slot::Weight(0), 0, &[1536, 17920])
                },
                bf(Slot::Weight(1), 0, &[1536]),
            ],
            outputs: vec![bf(Slot::Arena, 0, &[1, 17920])],
            origin: String::new(),
        };
        let gate = Step {
            kernel: Kernel::Elementwise {
                expr: Expr {
                    code: vec![
                        Instr::Load(0),
                        Instr::Unary(UnaryOp::Silu),
                        Instr::Load(1),
                        Instr::Binary(BinaryOp::Mul),
                    ],
                },
            },
            inputs: vec![
                bf(Slot::Arena, 0, &[1, 1, 8960]),
                bf(Slot::Arena, 17920, &[1, 1, 8960]),
            ],
            outputs: vec![bf(Slot::Arena, 35840, &[1, 1, 8960])],
            origin: String::new(),
        };
        vec![gemm, gate]
    }

    fn fuses(steps: Vec<Step>) -> Option<usize> {
        let p = steps_program(steps);
        fusable(&p, &p.steps).map(|g| g.hh)
    }

    #[test]
    fn a_decode_mlps_gate_up_gemv_takes_its_gating() {
        assert_eq!(fuses(mlp()), Some(8960));
        // the gating alone, or a GEMM with an activation or a residual: no
        assert_eq!(fuses(mlp()[1..].to_vec()), None);
        let mut steps = mlp();
        if let Kernel::Gemm { act, .. } = &mut steps[0].kernel {
            *act = Some(UnaryOp::Relu);
        }
        assert_eq!(fuses(steps), None);
    }

    #[test]
    fn the_gating_must_read_the_halves_in_order_with_act_on_the_first() {
        // up first
        let mut steps = mlp();
        steps[1].inputs.swap(0, 1);
        assert_eq!(fuses(steps), None);
        // the activation on the second operand: x0 * act(x1)
        let mut steps = mlp();
        if let Kernel::Elementwise { expr } = &mut steps[1].kernel {
            expr.code = vec![
                Instr::Load(0),
                Instr::Load(1),
                Instr::Unary(UnaryOp::Silu),
                Instr::Binary(BinaryOp::Mul),
            ];
        }
        assert_eq!(fuses(steps), None);
        // a sum, not a product
        let mut steps = mlp();
        if let Kernel::Elementwise { expr } = &mut steps[1].kernel {
            expr.code[3] = Instr::Binary(BinaryOp::Add);
        }
        assert_eq!(fuses(steps), None);
        // halves of another row
        let mut steps = mlp();
        steps[1].inputs[1].byte_offset = 40000;
        assert_eq!(fuses(steps), None);
        // a row whose halves are not a whole number of a block's four pairs
        let mut steps = mlp();
        steps[0].outputs[0] = bf(Slot::Arena, 0, &[1, 17916]);
        steps[1].inputs[0] = bf(Slot::Arena, 0, &[1, 1, 8958]);
        steps[1].inputs[1] = bf(Slot::Arena, 17916, &[1, 1, 8958]);
        steps[1].outputs[0] = bf(Slot::Arena, 35840, &[1, 1, 8958]);
        assert_eq!(fuses(steps), None);
    }

    #[test]
    fn the_gatings_output_may_not_share_the_gemms_operands() {
        // h over the GEMM's a
        let mut steps = mlp();
        steps[1].outputs[0].byte_offset = 50000;
        assert_eq!(fuses(steps), None);
        // h over the GEMM's own row (the arena reusing it after the gating read it)
        let mut steps = mlp();
        steps[1].outputs[0].byte_offset = 4096;
        assert_eq!(fuses(steps), None);
        // f32 operands
        let mut steps = mlp();
        steps[1].outputs[0].dtype = DType::F32;
        assert_eq!(fuses(steps), None);
    }
}
