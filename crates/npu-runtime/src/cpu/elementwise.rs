//! Fused elementwise expressions, evaluated block-wise over rows of the output. Each
//! instruction runs over a block of up to 256 elements with the pointwise table's math
//! (`eval_block`); SiLU and exp use the vectorizable [`fast_exp`].

use super::view::{chunks_for, offset_in, with_scratch, View};
use npu_ir::UnaryOp;
use npu_program::expr::{clamp, round_to, Expr, Instr};
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
                        Instr::Unary(u) => {
                            let v = &mut stack[(sp - 1) * BLOCK..(sp - 1) * BLOCK + len];
                            match u {
                                UnaryOp::Silu => {
                                    v.iter_mut().for_each(|x| *x /= 1.0 + fast_exp(-*x))
                                }
                                UnaryOp::Exp => v.iter_mut().for_each(|x| *x = fast_exp(*x)),
                                _ => u.eval_block(v, []),
                            }
                        }
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

/// exp(x) in f32 within 4e-7 relative error over the whole range (0 below -87.3, inf above 88.72), written
/// so the compiler vectorizes it: round-to-nearest by the 1.5 * 2^23 trick, Cody-Waite
/// reduction by ln 2, a degree-6 polynomial, and the exponent placed with integer bits.
#[inline(always)]
pub fn fast_exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    const ROUND: f32 = 12_582_912.0;
    let xc = x.clamp(-87.3, 88.72);
    let n = (xc * LOG2E + ROUND) - ROUND;
    let r = xc - n * LN2_HI - n * LN2_LO;
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (0.166_666_67
                    + r * (0.041_666_668 + r * (0.008_333_334 + r * 0.001_388_889)))));
    // 2^n as two factors so n = 128 (x near 88.7) and n = -126 stay normal numbers.
    let (n, h) = (n as i32, (n as i32) >> 1);
    let y =
        p * f32::from_bits(((h + 127) << 23) as u32) * f32::from_bits(((n - h + 127) << 23) as u32);
    if x < -87.3 {
        0.0
    } else if x > 88.72 {
        f32::INFINITY
    } else {
        y
    }
}

#[cfg(test)]
mod tests {
    use super::fast_exp;

    #[test]
    fn fast_exp_is_within_a_few_ulp() {
        let mut x = -90.0f32;
        while x < 90.0 {
            let (got, want) = (fast_exp(x), x.exp());
            if want.is_finite() && x > -87.0 {
                let rel = ((got - want) / want).abs();
                assert!(rel < 4e-7, "exp({x}) = {got}, want {want} (rel {rel})");
            } else if x <= -87.0 {
                assert!(got < 2e-38, "exp({x}) = {got}");
            }
            x += 0.0137;
        }
        assert_eq!(fast_exp(100.0), f32::INFINITY);
        assert_eq!(fast_exp(-100.0), 0.0);
    }
}
