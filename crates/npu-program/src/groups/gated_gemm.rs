//! A gated MLP's first two steps: `gu = x @ W_gu^T` (the gate and up projections in one
//! GEMM, its output the two halves side by side, RMSNorm of x optionally in the GEMM's
//! prologue), then `h = silu(gu[.., :F]) * gu[.., F:]`. In decode the second is a launch of
//! a few thousand elements; a backend may compute each gate value next to its up value and
//! store `h` from the GEMM.
//!
//! Such a launch never stores `gu`, so the group requires that nothing reads `gu` after the
//! gating step (checked over the rest of the program), and that `h` shares no byte with what
//! the GEMM reads (one part of the launch may store `h` before another has read its inputs).

use super::may_overlap;
use crate::expr::{Expr, Instr};
use crate::program::{Binding, Kernel, Slot, Step};
use npu_ir::{BinaryOp, UnaryOp};

/// The gate/up GEMM and its SiLU gating, in program order.
pub struct GatedGemm<'s> {
    /// The gate/up GEMM (no bias, no activation, no residual).
    pub gate_up: &'s Step,
    /// `silu(in0) * in1` over the two halves of `gate_up`'s output.
    pub gating: &'s Step,
}

impl GatedGemm<'_> {
    /// Steps the group replaces.
    pub const LEN: usize = 2;
}

/// `mul(silu(in0), in1)`: the expression the compiler emits for SiLU-gated MLPs.
pub fn is_silu_mul(e: &Expr) -> bool {
    e.code
        == [
            Instr::Load(0),
            Instr::Unary(UnaryOp::Silu),
            Instr::Load(1),
            Instr::Binary(BinaryOp::Mul),
        ]
}

/// Shape and strides without the dims of size 1 (which a view may add or drop).
fn squeezed(b: &Binding) -> (Vec<usize>, Vec<usize>) {
    b.shape
        .iter()
        .zip(&b.strides)
        .filter(|(&d, _)| d != 1)
        .map(|(&d, &s)| (d, s))
        .unzip()
}

/// `b`'s view of the last dim's elements `[from, from + len)` of `whole` (dims of size 1
/// aside).
fn is_half(b: &Binding, whole: &Binding, from: usize, len: usize) -> bool {
    let (mut shape, strides) = squeezed(whole);
    let Some(last) = shape.last_mut() else {
        return false;
    };
    *last = len;
    let step = whole.strides.last().copied().unwrap_or(1);
    b.slot == whole.slot
        && b.dtype == whole.dtype
        && squeezed(b) == (shape, strides)
        && b.byte_offset == whole.byte_offset + (from * step * whole.dtype.size_bytes()) as u64
}

/// Whether the bytes of `t` (an arena binding), once `written` has been stored over them,
/// are read by none of `later` before a step overwrites them: each step's reads are checked
/// against what is still live, then its contiguous outputs retire what they cover.
fn dead_after(t: &Binding, written: &Binding, later: &[Step]) -> bool {
    let mut live = vec![(t.byte_offset, t.end_byte())];
    let retire = |live: &mut Vec<(u64, u64)>, w: &Binding| {
        if w.slot != Slot::Arena || !w.is_contiguous() {
            return;
        }
        let (ws, we) = (w.byte_offset, w.end_byte());
        *live = live
            .iter()
            .flat_map(|&(s, e)| [(s, e.min(ws)), (s.max(we), e)])
            .filter(|(s, e)| s < e)
            .collect();
    };
    retire(&mut live, written);
    for s in later {
        if live.is_empty() {
            return true;
        }
        let reads_live = s.inputs.iter().any(|i| {
            i.slot == Slot::Arena
                && live
                    .iter()
                    .any(|&(ls, le)| i.byte_offset < le && ls < i.end_byte())
        });
        if reads_live {
            return false;
        }
        for o in &s.outputs {
            retire(&mut live, o);
        }
    }
    // what is left is arena memory nobody reads again
    true
}

/// The group starting at `steps[0]`, where `steps` runs to the program's end (to prove the
/// gate/up output dead), if the steps there have its shape and one launch equals them.
pub fn gated_gemm(steps: &[Step]) -> Option<GatedGemm<'_>> {
    let [gate_up, gating, ..] = steps else {
        return None;
    };
    let (
        Kernel::Gemm {
            act: None,
            residual: false,
            ..
        },
        Kernel::Elementwise { expr },
    ) = (&gate_up.kernel, &gating.kernel)
    else {
        return None;
    };
    let (x, w, None, nw) = gate_up.kernel.gemm_operands(&gate_up.inputs)? else {
        return None;
    };
    let ([gu], [g, u], [h]) = (
        &gate_up.outputs[..],
        &gating.inputs[..],
        &gating.outputs[..],
    ) else {
        return None;
    };
    let f2 = *gu.shape.last()?;
    let f = f2 / 2;
    let floats = [x, w, gu, h]
        .into_iter()
        .chain(nw)
        .all(|b| b.dtype.is_float());
    let shape_ok = is_silu_mul(expr)
        && f2 % 2 == 0
        && f > 1
        && gu.slot == Slot::Arena
        && is_half(g, gu, 0, f)
        && is_half(u, gu, f, f)
        && h.is_contiguous()
        && squeezed(h).0 == squeezed(g).0
        && floats;
    let independent = || {
        [x, w].into_iter().chain(nw).all(|i| !may_overlap(h, i))
            && dead_after(gu, h, &steps[GatedGemm::LEN..])
    };
    (shape_ok && independent()).then_some(GatedGemm { gate_up, gating })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::groups::fixtures::decoder_mlp as mlp;

    #[test]
    fn a_decoder_mlp_opens_with_a_group() {
        let steps = mlp();
        assert!(gated_gemm(&steps).is_some());
        assert!(gated_gemm(&steps[1..]).is_none());
    }

    #[test]
    fn the_gate_up_output_read_later_blocks_the_group() {
        let mut steps = mlp();
        // a later step reads the up half, which nothing overwrote
        let mut reader = steps[1].clone();
        reader.inputs = vec![steps[1].inputs[1].clone(), steps[1].inputs[1].clone()];
        reader.outputs[0].byte_offset = 1 << 20;
        steps.push(reader);
        assert!(gated_gemm(&steps).is_none());
        // the same read after a step overwrote the whole output
        let mut steps = mlp();
        let mut clobber = steps[1].clone();
        clobber.kernel = Kernel::Fill { value: 0.0 };
        clobber.inputs.clear();
        clobber.outputs = steps[0].outputs.clone();
        let mut reader = steps[1].clone();
        reader.outputs[0].byte_offset = 1 << 20;
        steps.extend([clobber, reader]);
        assert!(gated_gemm(&steps).is_some());
    }

    #[test]
    fn h_over_the_gemm_input_is_not_grouped() {
        // a block could store h before another has read x
        let mut steps = mlp();
        steps[1].outputs[0].byte_offset = steps[0].inputs[0].byte_offset;
        assert!(gated_gemm(&steps).is_none());
    }

    #[test]
    fn other_gatings_are_not_grouped() {
        let mut steps = mlp();
        steps[1].kernel = Kernel::Elementwise {
            expr: Expr {
                code: vec![Instr::Load(0), Instr::Load(1), Instr::Binary(BinaryOp::Mul)],
            },
        };
        assert!(gated_gemm(&steps).is_none());
        // halves swapped
        let mut steps = mlp();
        steps[1].inputs.swap(0, 1);
        assert!(gated_gemm(&steps).is_none());
    }
}
