//! The decode step's q/k/v GEMV and the RoPE / KV-cache group that reads its output, in one
//! launch (`k_gemv16_rope`): the group's four steps run in the GEMV's epilogue, one launch
//! fewer a layer. A block computes four rotation pairs (column i of a row and its partner
//! i + d/2), so each pair is rotated where it is summed; the values stay in registers and
//! shared memory, never read back from the GEMV's output.

use super::persist::may_share;
use super::rope_cache::{dec_group, row_stride, DecGroup};
use super::{Planner, StepPlan};
use crate::launch::{dtype_code, Arg, Launch};
use crate::loc::Loc;
use npu_ir::DType;
use npu_program::groups::rope_cache;
use npu_program::program::{Binding, Kernel, Program, Step};

impl Planner<'_> {
    /// One launch for the GEMV at `steps[0]` and the decode RoPE / cache group right after it
    /// ([`fusable`]), and how many steps it replaces; None where they do not fuse, the GEMV does
    /// not plan to one `k_gemv16` launch, or with `NPU_CUDA_GEMV_ROPE=0`.
    pub(crate) fn gemv_rope(&self, steps: &[Step]) -> Option<(usize, StepPlan)> {
        if std::env::var("NPU_CUDA_GEMV_ROPE").is_ok_and(|v| v == "0") {
            return None;
        }
        let (steps_fused, dg) = fusable(self.program, steps)?;
        let plan = self.plan(&steps[0]).ok()?;
        let [Launch::Kernel(mut kern)] = <[Launch; 1]>::try_from(plan.launches).ok()? else {
            return None;
        };
        // k_gemv16's pairing of columns takes blocks of 8 warps
        let blocks_of_8 = kern.block.0 == 256;
        // k_gemv16p (its weights' first bytes before the wait) keeps that in the fused launch
        let preload = self.dev.is_func(kern.func, "k_gemv16p");
        if plan.scratch != 0
            || !(preload || self.dev.is_func(kern.func, "k_gemv16"))
            || kern.grid.1 != 1
            || !blocks_of_8
        {
            return None;
        }
        let code = dtype_code(dg.dt);
        let name = if preload {
            "k_gemv16p_rope"
        } else {
            "k_gemv16_rope"
        };
        kern.func = self.f_dt(name, &[code, code]);
        // the index_copy steps' own numbers, for the error word
        let step_k = self.step + 3;
        let (q, k) = (&dg.q, &dg.k);
        // GvRope's fields in order (kernels/gemm.cu): the pointers, then the row strides
        kern.args
            .extend([q.c, q.s, k.c, k.s, q.out, k.out].map(|a| a[0]));
        kern.args.extend([dg.k_dest[0], dg.v_dest[0]]);
        kern.args
            .extend([q.c, q.s, q.out, k.c, k.s, k.out].map(|a| a[1]));
        kern.args
            .extend([dg.k_dest[1], dg.k_dest[2], dg.v_dest[1], dg.v_dest[2]]);
        kern.args.extend([
            Arg::I64(dg.t as i64),
            Arg::ptr_of(dg.index),
            Arg::I32(i32::from(dg.index.dtype == DType::I64)),
            Arg::I32(q.rows as i32),
            Arg::I32(k.rows as i32),
            Arg::I32(step_k as i32),
            Arg::I32(step_k as i32 + 1),
            Arg::I32((dg.d / 2) as i32),
            Arg::Ptr(0, Loc::Err),
        ]);
        Some((steps_fused, vec![Launch::Kernel(kern)].into()))
    }
}

/// Whether the GEMM at `steps[0]` and the decode RoPE / cache group right after it
/// (`rope_cache::dec_group`) run as one `k_gemv16_rope` launch: the GEMM has no activation
/// and no residual; a, b and its output are of the group's dtype; the output is one
/// contiguous row holding exactly the group's query, key and value rows, in that order, as
/// the group reads them; nothing the group writes shares bytes with what the GEMM reads or
/// writes, nor do the group's other inputs share the GEMM's output (the kernel's blocks store
/// while others still load). The steps it replaces and the group's flattening.
fn fusable<'s>(program: &Program, steps: &'s [Step]) -> Option<(usize, DecGroup<'s>)> {
    let gemm = steps.first()?;
    let Kernel::Gemm {
        act: None,
        residual: false,
        ..
    } = gemm.kernel
    else {
        return None;
    };
    let g = rope_cache(&steps[1..])?;
    let dg = dec_group(&g)?;
    let (kw, vw) = (g.k_write?, g.v_write?);
    let out = &gemm.outputs[0];
    let (d, rows0, rows1) = (dg.d, dg.q.rows, dg.k.rows);
    let n = *out.shape.last()?;
    let one_row = out.numel() == n && out.strides.last() == Some(&1);
    // the kernel's instance fixes a's, b's and the output's dtype to the group's
    let same_dt = [&gemm.inputs[0], &gemm.inputs[1], out]
        .iter()
        .all(|b| b.dtype == dg.dt);
    if !same_dt || !one_row || n != (rows0 + rows1 + dg.v_rows) * d {
        return None;
    }
    // x of rows `rows` starting at row `first` of the output, d apart
    let esz = dg.dt.size_bytes() as u64;
    let at = |x: &Binding, first: usize, rows: usize| {
        x.slot == out.slot
            && x.byte_offset == out.byte_offset + (first * d) as u64 * esz
            && (rows == 1 || row_stride(x, None) == Some(d))
    };
    let (xq, xk, xv) = (&g.q.inputs[0], &g.k.inputs[0], &vw.inputs[1]);
    if !(at(xq, 0, rows0) && at(xk, rows0, rows1) && at(xv, rows0 + rows1, dg.v_rows)) {
        return None;
    }
    let written = [
        &g.q.outputs[0],
        &g.k.outputs[0],
        &kw.outputs[0],
        &vw.outputs[0],
    ];
    let gemm_io: Vec<&Binding> = gemm.inputs.iter().chain(&gemm.outputs).collect();
    let group_reads = g.q.inputs[1..]
        .iter()
        .chain(&g.k.inputs[1..])
        .chain([dg.index]);
    let clash = written
        .iter()
        .any(|w| gemm_io.iter().any(|b| may_share(program, w, b)))
        || group_reads.into_iter().any(|r| may_share(program, out, r));
    (!clash).then_some((1 + g.len(), dg))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::steps_program;
    use npu_program::groups::fixtures::decoder_layer;
    use npu_program::program::{dense_strides, Slot};

    /// Qwen2.5-1.5B's decode layer: the normalized q/k/v GEMM into arena bytes 0..4096, then
    /// the group (`decoder_layer`: q, k and v read from that row).
    fn layer() -> Vec<Step> {
        let bf = |slot, off, shape: &[usize], strides: &[usize]| Binding {
            slot,
            byte_offset: off,
            shape: shape.to_vec(),
            strides: strides.to_vec(),
            dtype: DType::BF16,
        };
        let dense = |slot, off, shape: &[usize]| bf(slot, off, shape, &dense_strides(shape));
        let gemm = Step {
            kernel: Kernel::Gemm {
                alpha: 1.0,
                beta: 1.0,
                act: None,
                residual: false,
                norm: Some(1e-6),
            },
            inputs: vec![
                dense(Slot::Arena, 60000, &[1, 1536]),
                bf(Slot::Weight(0), 0, &[1536, 2048], &[1, 1536]),
                dense(Slot::Weight(1), 0, &[1, 2048]),
                dense(Slot::Weight(2), 0, &[1536]),
            ],
            outputs: vec![dense(Slot::Arena, 0, &[1, 2048])],
            origin: String::new(),
        };
        [vec![gemm], decoder_layer()].concat()
    }

    fn fuses(steps: Vec<Step>) -> Option<usize> {
        let p = steps_program(steps);
        fusable(&p, &p.steps).map(|(n, _)| n)
    }

    /// Whether Qwen's layer still fuses after `edit`.
    fn fuses_after(edit: impl FnOnce(&mut [Step])) -> Option<usize> {
        let mut steps = layer();
        edit(&mut steps);
        fuses(steps)
    }

    #[test]
    fn a_decode_layers_qkv_gemv_takes_its_group() {
        assert_eq!(fuses(layer()), Some(5));
        // the group alone, or a GEMM with an activation: no
        assert_eq!(fuses(layer()[1..].to_vec()), None);
        let silu = |s: &mut [Step]| {
            if let Kernel::Gemm { act, .. } = &mut s[0].kernel {
                *act = Some(npu_ir::UnaryOp::Silu);
            }
        };
        assert_eq!(fuses_after(silu), None);
    }

    #[test]
    fn the_row_must_hold_the_groups_rows_in_order() {
        // a wider row: a column the group does not read
        let wider = |s: &mut [Step]| {
            s[0].outputs[0].shape = vec![1, 2056];
            s[0].outputs[0].strides = vec![2056, 1];
        };
        assert_eq!(fuses_after(wider), None);
        // the values read from another row
        assert_eq!(fuses_after(|s| s[4].inputs[1].byte_offset = 20000), None);
        // the keys read from the queries' rows
        assert_eq!(fuses_after(|s| s[2].inputs[0].byte_offset = 0), None);
    }

    #[test]
    fn nothing_the_group_writes_may_share_the_gemms_operands() {
        // rope(q) written over the GEMM's a
        assert_eq!(fuses_after(|s| s[1].outputs[0].byte_offset = 60000), None);
        // the sin table in the GEMM's output row: other blocks store there meanwhile
        assert_eq!(fuses_after(|s| s[1].inputs[2].byte_offset = 1024), None);
    }
}
