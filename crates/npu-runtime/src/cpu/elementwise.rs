//! Fused elementwise expressions, evaluated block-wise over rows of the output. Each
//! instruction runs over a block of up to 256 elements with the pointwise table's math
//! (`eval_block`); unary ops through [`activation::apply`] (vectorized exp, SiLU, sigmoid,
//! GELU).

use super::activation;
use super::view::{chunks_for, offset_in, with_scratch, View};
use npu_program::expr::{clamp, round_to, Expr, Instr};
use npu_program::iteration::coalesce;
use rayon::prelude::*;

const BLOCK: usize = 256;

fn max_depth(expr: &Expr) -> usize {
    let (mut d, mut m) = (0usize, 0usize);
    for i in &expr.code {
        match i {
            Instr::Load(_) | Instr::Const(_) => {
                d += 1;
                m = m.max(d);
            }
            Instr::Binary(_) => d = d.saturating_sub(1),
            Instr::Ternary(_) => d = d.saturating_sub(2),
            _ => {}
        }
    }
    m.max(1)
}

/// out = expr(ins...), every input bound with the output's shape.
pub fn elementwise(expr: &Expr, ins: &[View], out: &View) -> Result<(), String> {
    // Walk the coalesced space (`npu_program::iteration`): a channels-last activation is
    // one dense run instead of rows of channel-strided gathers.
    let all: Vec<&[usize]> = std::iter::once(out.strides)
        .chain(ins.iter().map(|v| v.strides))
        .collect();
    let (shape, st) = coalesce(out.shape, &all);
    let out = &View {
        shape: &shape,
        strides: &st[0],
        ..*out
    };
    let ins: Vec<View> = ins
        .iter()
        .zip(&st[1..])
        .map(|(v, s)| View {
            shape: &shape,
            strides: s,
            ..*v
        })
        .collect();
    let ins = &ins[..];
    let r = out.rank();
    let last = if r == 0 { 1 } else { out.shape[r - 1] };
    if out.numel() == 0 {
        return Ok(());
    }
    let lead = &out.shape[..r.saturating_sub(1)];
    let rows: usize = lead.iter().product();
    let nblk = last.div_ceil(BLOCK);
    let items = rows * nblk;
    let depth = max_depth(expr);
    let nin = ins.len();
    let last_stride = |v: &View| if r == 0 { 0 } else { v.strides[r - 1] };
    let nchunks = chunks_for(items * BLOCK.min(last), 4096);
    let per = items.div_ceil(nchunks);
    (0..nchunks).into_par_iter().for_each(|c| {
        with_scratch(0, (nin + depth) * BLOCK, |s| {
            let (inb, stack) = s.split_at_mut(nin * BLOCK);
            for item in c * per..((c + 1) * per).min(items) {
                let row = item / nblk;
                let b0 = (item % nblk) * BLOCK;
                let len = BLOCK.min(last - b0);
                for (k, v) in ins.iter().enumerate() {
                    let off = offset_in(lead, &v.strides[..lead.len()], row) + b0 * last_stride(v);
                    v.gather(off, last_stride(v), &mut inb[k * BLOCK..k * BLOCK + len]);
                }
                let mut sp = 0usize;
                for ins_ in &expr.code {
                    match *ins_ {
                        Instr::Load(k) => {
                            let k = k as usize;
                            let (dst, src) = (sp * BLOCK, k * BLOCK);
                            stack[dst..dst + len].copy_from_slice(&inb[src..src + len]);
                            sp += 1;
                        }
                        Instr::Const(v) => {
                            stack[sp * BLOCK..sp * BLOCK + len].fill(v);
                            sp += 1;
                        }
                        Instr::Unary(u) => activation::apply(
                            u,
                            &mut stack[(sp - 1) * BLOCK..(sp - 1) * BLOCK + len],
                        ),
                        Instr::Binary(op) => {
                            let (lo, hi) = stack.split_at_mut((sp - 1) * BLOCK);
                            let a = &mut lo[(sp - 2) * BLOCK..(sp - 2) * BLOCK + len];
                            op.eval_block(a, [&hi[..len]]);
                            sp -= 1;
                        }
                        Instr::Ternary(op) => {
                            let (lo, hi) = stack.split_at_mut((sp - 2) * BLOCK);
                            let a = &mut lo[(sp - 3) * BLOCK..(sp - 3) * BLOCK + len];
                            let (b, c) = hi.split_at(BLOCK);
                            op.eval_block(a, [&b[..len], &c[..len]]);
                            sp -= 2;
                        }
                        Instr::Clamp { min, max } => {
                            for x in &mut stack[(sp - 1) * BLOCK..(sp - 1) * BLOCK + len] {
                                *x = clamp(*x, min, max);
                            }
                        }
                        Instr::Cast(dt) => {
                            for x in &mut stack[(sp - 1) * BLOCK..(sp - 1) * BLOCK + len] {
                                *x = round_to(dt, *x);
                            }
                        }
                    }
                }
                let off = offset_in(lead, &out.strides[..lead.len()], row) + b0 * last_stride(out);
                out.scatter(off, last_stride(out), &stack[..len]);
            }
        })
    });
    Ok(())
}
