//! A gated MLP's three steps: `gu = x @ W_gu^T` (the gate and up projections in one GEMM,
//! its output the two halves side by side, RMSNorm of x optionally in the GEMM's prologue),
//! `h = silu(gu[.., :F]) * gu[.., F:]`, `out = h @ W_down^T` (plus a residual). In decode
//! each is a matrix-vector product or a few thousand elements, and a layer pays two kernel
//! boundaries between them; a backend may run the three as one launch.
//!
//! Such a launch never stores `gu`: each output of the gate half meets its partner of the up
//! half where they are computed. So the group requires that nothing reads `gu` after the
//! elementwise step (checked over the rest of the program), and for the launch's phases to
//! run concurrently across blocks: `h` shares no byte with what the first GEMM reads, `out`
//! none with `h` or the weights, and `out` is either the residual itself (each element read
//! where it is written) or apart from it.

use super::may_overlap;
use crate::expr::{Expr, Instr};
use crate::program::{Binding, Kernel, Slot, Step};
use npu_ir::{BinaryOp, UnaryOp};

/// The three steps of a gated MLP, in program order.
pub struct GatedMlp<'s> {
    /// The gate/up GEMM (no bias, no activation).
    pub gate_up: &'s Step,
    /// `silu(in0) * in1` over the two halves of `gate_up`'s output.
    pub gating: &'s Step,
    /// The down GEMM reading the gating's output, with or without a residual.
    pub down: &'s Step,
}

impl GatedMlp<'_> {
    /// Steps the group replaces.
    pub const LEN: usize = 3;
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

/// The same elements in the same order: one slot, offset and dtype, contiguous, equal shapes
/// but for dims of size 1.
fn same_elements(a: &Binding, b: &Binding) -> bool {
    a.slot == b.slot
        && a.byte_offset == b.byte_offset
        && a.dtype == b.dtype
        && a.is_contiguous()
        && b.is_contiguous()
        && squeezed(a).0 == squeezed(b).0
}

/// The byte range a contiguous binding covers whole (None for one with gaps).
fn covered(b: &Binding) -> Option<(u64, u64)> {
    b.is_contiguous().then(|| (b.byte_offset, b.end_byte()))
}

/// Whether the bytes of `t` (an arena binding), once `written` has been stored over them,
/// are read by none of `later` before a step overwrites them: each step's reads are checked
/// against what is still live, then its contiguous outputs retire what they cover.
fn dead_after(t: &Binding, written: &Binding, later: &[Step]) -> bool {
    let mut live = vec![(t.byte_offset, t.end_byte())];
    let retire = |live: &mut Vec<(u64, u64)>, w: &Binding| {
        let Some((ws, we)) = covered(w).filter(|_| w.slot == Slot::Arena) else {
            return;
        };
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
/// gate/up output dead), if the steps there have its shape and its launch equals them.
pub fn gated_mlp(steps: &[Step]) -> Option<GatedMlp<'_>> {
    let [gate_up, gating, down, ..] = steps else {
        return None;
    };
    let (
        Kernel::Gemm {
            act: None,
            residual: false,
            ..
        },
        Kernel::Elementwise { expr },
        Kernel::Gemm {
            act: None,
            norm: None,
            ..
        },
    ) = (&gate_up.kernel, &gating.kernel, &down.kernel)
    else {
        return None;
    };
    let (x, w_gu, None, nw) = gate_up.kernel.gemm_operands(&gate_up.inputs)? else {
        return None;
    };
    let (h_in, w_down, res, _) = down.kernel.gemm_operands(&down.inputs)?;
    let ([gu], [g, u], [h], [out]) = (
        &gate_up.outputs[..],
        &gating.inputs[..],
        &gating.outputs[..],
        &down.outputs[..],
    ) else {
        return None;
    };
    let f2 = *gu.shape.last()?;
    if f2 == 1 {
        return None; // squeezed views would lose the split dim
    }
    let f = f2 / 2;
    let floats = [x, w_gu, gu, h, w_down, out]
        .into_iter()
        .chain(nw)
        .chain(res)
        .all(|b| b.dtype.is_float());
    let shape_ok = is_silu_mul(expr)
        && f2 % 2 == 0
        && f > 0
        && gu.slot == Slot::Arena
        && is_half(g, gu, 0, f)
        && is_half(u, gu, f, f)
        && h.is_contiguous()
        && squeezed(h).0 == squeezed(g).0
        && same_elements(h_in, h)
        && floats;
    if !shape_ok {
        return None;
    }
    let apart = |a: &Binding, b: &Binding| !may_overlap(a, b);
    let first_reads = [x, w_gu].into_iter().chain(nw);
    let independent = first_reads.clone().all(|i| apart(h, i))
        && apart(out, h)
        && apart(out, w_down)
        && apart(h, w_down)
        && res.is_none_or(|r| apart(h, r) && (r == out || apart(out, r)))
        && dead_after(gu, h, &steps[GatedMlp::LEN - 1..]);
    independent.then_some(GatedMlp {
        gate_up,
        gating,
        down,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::groups::fixtures::decoder_mlp as mlp;

    #[test]
    fn a_decoder_mlp_is_one_group() {
        let steps = mlp();
        assert!(gated_mlp(&steps).is_some());
        assert!(gated_mlp(&steps[1..]).is_none());
    }

    #[test]
    fn the_gate_up_output_read_later_blocks_the_group() {
        let mut steps = mlp();
        // a later step reads the up half, which nothing overwrote
        let mut reader = steps[1].clone();
        reader.inputs = vec![steps[1].inputs[1].clone(), steps[1].inputs[1].clone()];
        reader.outputs[0].byte_offset = 1 << 20;
        steps.push(reader);
        assert!(gated_mlp(&steps).is_none());
        // the same read after a step overwrote the whole output
        let mut steps = mlp();
        let mut clobber = steps[1].clone();
        clobber.kernel = Kernel::Fill { value: 0.0 };
        clobber.inputs.clear();
        clobber.outputs = steps[0].outputs.clone();
        let mut reader = steps[1].clone();
        reader.outputs[0].byte_offset = 1 << 20;
        steps.extend([clobber, reader]);
        assert!(gated_mlp(&steps).is_some());
    }

    #[test]
    fn overlapping_phases_are_not_grouped() {
        // h where x lies: a block could store h before another has read x
        let mut steps = mlp();
        steps[1].outputs[0].byte_offset = steps[0].inputs[0].byte_offset;
        steps[2].inputs[0].byte_offset = steps[0].inputs[0].byte_offset;
        assert!(gated_mlp(&steps).is_none());
        // out over h
        let mut steps = mlp();
        steps[2].outputs[0].byte_offset = steps[1].outputs[0].byte_offset;
        assert!(gated_mlp(&steps).is_none());
        // out shifted against the residual
        let mut steps = mlp();
        steps[2].outputs[0].byte_offset = steps[2].inputs[2].byte_offset + 16;
        assert!(gated_mlp(&steps).is_none());
        // out the residual itself (in place, element by element) groups
        let mut steps = mlp();
        steps[2].outputs[0] = steps[2].inputs[2].clone();
        assert!(gated_mlp(&steps).is_some());
    }

    #[test]
    fn other_gatings_are_not_grouped() {
        let mut steps = mlp();
        steps[1].kernel = Kernel::Elementwise {
            expr: Expr {
                code: vec![Instr::Load(0), Instr::Load(1), Instr::Binary(BinaryOp::Mul)],
            },
        };
        assert!(gated_mlp(&steps).is_none());
        // halves swapped
        let mut steps = mlp();
        steps[1].inputs.swap(0, 1);
        assert!(gated_mlp(&steps).is_none());
    }
}
