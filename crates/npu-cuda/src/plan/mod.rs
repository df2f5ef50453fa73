//! Turns every program step into planned launches (see `launch.rs`): which kernel, grid,
//! arguments and scratch. All decisions (GEMV vs cuBLASLt vs SIMT GEMM, split counts) are
//! made here, once, at prepare time, one file per kernel family.
//!
//! Steps come from a validated program: every step satisfies its kernel's contract
//! (`Kernel::check`), so the planners derive sizes without re-checking shapes and add only
//! this backend's own limits (rank 8, head dim 256, grid sizes).

mod attention;
mod conv;
mod conv_cl;
mod conv_dnn;
mod epilogue_norm;
mod gather;
mod gemm;
mod gemv_rope;
mod persist;
mod pointwise;
mod pool;
mod rope_cache;
mod rows;

use crate::device::{Device, Func};
use crate::launch::{unary_code, Arg, KernelLaunch, Launch, TdArg};
use crate::loc::Loc;
use crate::lt_call::LT_WORKSPACE;
use conv::ConvP;
use npu_program::program::{Binding, Kernel, Program, Slot, Step};
use std::cell::RefCell;
use std::collections::HashMap;

pub(crate) use gemm::gemv_norm_deferred;
pub(crate) use persist::Persistent;

/// What one step needs: its launches and the scratch bytes past the cuBLASLt workspace.
pub(crate) struct StepPlan {
    pub launches: Vec<Launch>,
    pub scratch: u64,
}

impl From<Vec<Launch>> for StepPlan {
    /// Launches that need no scratch.
    fn from(launches: Vec<Launch>) -> Self {
        StepPlan {
            launches,
            scratch: 0,
        }
    }
}

pub(crate) struct Planner<'a> {
    pub dev: &'a Device,
    pub ew: &'a HashMap<String, Func>,
    pub program: &'a Program,
    /// The region kept across steps, laid out as the steps are planned in order.
    pub persist: &'a RefCell<Persistent>,
    pub step: usize,
    /// cuBLASLt candidates are timed with L2 flushed (`lt_tune`): the program's weights
    /// outgrow L2, so a run reads them from DRAM.
    pub lt_cold: bool,
}

/// Where a step's scratch starts: past the cuBLASLt workspace.
const SCRATCH0: u64 = LT_WORKSPACE;

/// `x` rounded up to 256 bytes, the alignment of every scratch region.
pub(crate) fn align(x: u64) -> u64 {
    x.div_ceil(256) * 256
}

/// The grid of the 32-bit 2-D kernels (`k_im2col2`, `k_conv_epilogue2`): x over `cols` in
/// blocks of 256 (grid-stride past 4096 blocks), y over `rows` (grid-stride past 65535).
fn grid2d(cols: usize, rows: usize) -> (u32, u32, u32) {
    (
        cols.div_ceil(256).min(4096) as u32,
        rows.min(65535) as u32,
        1,
    )
}

fn kl(func: Func, grid: (u32, u32, u32), block: u32, smem: u32, args: Vec<Arg>) -> Launch {
    Launch::Kernel(KernelLaunch {
        func,
        grid,
        block: (block, 1, 1),
        smem,
        args,
        cluster: 1,
    })
}

/// A binding as a kernel's tensor-descriptor argument.
fn td(b: &Binding) -> Arg {
    Arg::Td(TdArg::of(b))
}

/// A channels-last [N, C, H, W] binding (channel stride 1, more than one channel).
fn is_channels_last(b: &Binding) -> bool {
    b.shape.len() == 4 && b.strides[1] == 1 && b.shape[1] > 1
}

/// The kernels' `cl` flag: a channels-last output is walked with the channel fastest.
fn channels_last(o: &Binding) -> Arg {
    Arg::I32(i32::from(is_channels_last(o)))
}

/// Channels-last with every pixel's channels in 16-byte aligned runs of 8 (16-bit kernels
/// that move eight channels per access: C, the pixel strides and the offset line up).
fn channel_runs16(b: &Binding) -> bool {
    is_channels_last(b)
        && b.shape[1].is_multiple_of(8)
        && [0, 2, 3].iter().all(|&i| b.strides[i].is_multiple_of(8))
        && b.byte_offset.is_multiple_of(16)
}

/// (rows, last dim) of an operand of rank >= 1.
fn rows_last(b: &Binding) -> (usize, usize) {
    let d = b.shape[b.shape.len() - 1];
    (b.numel() / d.max(1), d)
}

/// A program of `steps` alone, for the planners' unit tests of cross-step facts (`may_share`
/// reads only the steps' bindings and the outputs' donations, none here).
#[cfg(test)]
fn steps_program(steps: Vec<Step>) -> Program {
    Program {
        model_name: String::new(),
        target: String::new(),
        compute_dtype: npu_ir::DType::BF16,
        inputs: Vec::new(),
        outputs: Vec::new(),
        sources: Vec::new(),
        weights: Vec::new(),
        constants: Vec::new(),
        arena_bytes: 1 << 16,
        steps,
    }
}

impl Planner<'_> {
    fn f(&self, name: &str) -> Func {
        self.dev.func(name)
    }

    /// Whether the operand lies in a weight or constant slot that no step of the program
    /// writes: no grid writes it (weights and constants are uploaded at prepare), so a kernel
    /// may read it before its programmatic wait. Inputs are not: a run copies small ones in
    /// with `k_copy_bytes` launches (executable/host_io.rs), programmatic like every other,
    /// so the first step's grid may start while the last copy still writes.
    fn read_only(&self, op: &TdArg) -> bool {
        let Loc::Slot(slot @ (Slot::Weight(_) | Slot::Const(_)), _) = op.loc else {
            return false;
        };
        !self
            .program
            .steps
            .iter()
            .any(|s| s.outputs.iter().any(|o| o.slot == slot))
    }

    /// `name`, or its instance for one 16-bit float dtype (`Device::func_dt`).
    fn f_dt(&self, name: &str, dtypes: &[i32]) -> Func {
        self.dev.func_dt(name, dtypes)
    }

    pub fn plan(&self, step: &Step) -> Result<StepPlan, String> {
        let (ins, outs) = (&step.inputs, &step.outputs);
        let out = &outs[0];
        match &step.kernel {
            Kernel::Gemm {
                alpha,
                beta,
                act,
                residual,
                norm,
            } => {
                let (a, b, bias, nw) = step
                    .kernel
                    .gemm_operands(ins)
                    .ok_or_else(|| format!("a gemm with {} inputs", ins.len()))?;
                self.gemm(
                    *alpha,
                    *beta,
                    unary_code(*act),
                    *residual,
                    a,
                    b,
                    bias,
                    norm.zip(nw),
                    out,
                )
            }
            Kernel::Conv2d {
                stride,
                padding,
                dilation,
                groups,
                act,
                ..
            } => {
                let p = ConvP {
                    stride: *stride,
                    padding: *padding,
                    dilation: *dilation,
                    groups: *groups,
                    act: unary_code(*act),
                    act_op: *act,
                };
                let (x, w, bias, r) = step
                    .kernel
                    .conv_operands(ins)
                    .ok_or_else(|| format!("a conv2d with {} inputs", ins.len()))?;
                match r {
                    Some(r) => self.conv_residual(&step.kernel, &p, x, w, bias, r, out),
                    None => self.conv(&p, x, w, bias, out),
                }
            }
            Kernel::Pool2d {
                kind,
                kernel,
                stride,
                padding,
                dilation,
            } => Ok(self
                .pool2d(*kind, [*kernel, *stride, *padding, *dilation], &ins[0], out)
                .into()),
            Kernel::AdaptiveAvgPool2d => Ok(self.adaptive_avg_pool2d(&ins[0], out).into()),
            Kernel::Elementwise { expr } => self.elementwise(expr, ins, out).map(Into::into),
            Kernel::Softmax { scale } => Ok(self.softmax(*scale, &ins[0], ins.get(1), out).into()),
            Kernel::RmsNorm { eps } => Ok(self.rms_norm(*eps, &ins[0], &ins[1], out).into()),
            Kernel::LayerNorm {
                eps,
                has_weight,
                has_bias,
            } => {
                let w = has_weight.then(|| &ins[1]);
                let b = has_bias.then(|| &ins[ins.len() - 1]);
                Ok(self.layer_norm(*eps, &ins[0], w, b, out).into())
            }
            Kernel::Reduce { op, reduced } => Ok(self.reduce(*op, *reduced, &ins[0], out).into()),
            Kernel::Embedding => Ok(self.embedding(&ins[0], &ins[1], out).into()),
            Kernel::IndexCopy { axis } => Ok(self.index_copy(*axis, &ins[0], &ins[1], out).into()),
            Kernel::Rope => Ok(self.rope(&ins[0], &ins[1], &ins[2], out).into()),
            Kernel::Attention { scale, causal } => self.attention(*scale, *causal, ins, out),
            Kernel::Copy => Ok(self.copy(&ins[0], out).into()),
            Kernel::Fill { value } => Ok(self.fill(*value, out).into()),
        }
    }
}
