//! Activations over a row of f32, as the GEMM and convolution epilogues and fused elementwise
//! expressions apply them: vectorizable forms of the common ones (exp, SiLU, sigmoid, GELU,
//! ReLU), the pointwise table's math for the rest. An activation then costs the same wherever
//! fusion put it.
//!
//! Accuracy: [`fast_exp`] within 4e-7 relative; GELU within 1e-6 of GELU in f64 (erfc by a
//! Chebyshev fit, so the negative tail keeps its relative accuracy); NaN and infinities as the
//! table gives them.

use super::simd::multiversion;
use npu_ir::UnaryOp;
use npu_program::expr::relu;
use std::f32::consts::FRAC_1_SQRT_2;

multiversion! {
    /// `u` over `v` in place, vectorized at the CPU's widest level (plain loops: a closure
    /// passed to `for_each` is compiled apart, at the baseline level).
    pub fn apply(u: UnaryOp, v: &mut [f32]) {
        match u {
            UnaryOp::Relu => {
                for x in v.iter_mut() {
                    *x = relu(*x);
                }
            }
            UnaryOp::Silu => {
                for x in v.iter_mut() {
                    *x /= 1.0 + fast_exp(-*x);
                }
            }
            UnaryOp::Sigmoid => {
                for x in v.iter_mut() {
                    *x = 1.0 / (1.0 + fast_exp(-*x));
                }
            }
            UnaryOp::Exp => {
                for x in v.iter_mut() {
                    *x = fast_exp(*x);
                }
            }
            UnaryOp::Gelu => {
                for x in v.iter_mut() {
                    *x = gelu(*x);
                }
            }
            _ => u.eval_block(v, []),
        }
    }
}

multiversion! {
    /// `act(v + bias)` over `v` in place (a convolution's or GEMM's per-row epilogue).
    pub fn bias_act(v: &mut [f32], bias: f32, act: Option<UnaryOp>) {
        if bias != 0.0 {
            for x in v.iter_mut() {
                *x += bias;
            }
        }
        if let Some(a) = act {
            apply(a, v);
        }
    }
}

/// Exact (erf) GELU, `0.5 x (1 + erf(x / sqrt 2))`, branch-free. `1 + erf(x/sqrt 2)` is
/// `2 - erfc(z)` for x >= 0 and `erfc(z)` below, z = |x| / sqrt 2, with erfc from Numerical
/// Recipes' Chebyshev fit (fractional error below 1.2e-7 for every z >= 0), so the negative
/// tail keeps its relative accuracy where the table's f32 `1 + erf` cancels. Its polynomials
/// run as fused multiply-adds (`mul_add`: one rounding each, so every instruction-set level
/// gives the same bits): a third fewer instructions where the CPU has FMA, which is every
/// level [`apply`] vectorizes for (at the baseline level `mul_add` is a slow library call).
#[inline(always)]
pub fn gelu(x: f32) -> f32 {
    // erfc is 0 in f32 beyond |x| = 14; the bound keeps infinities out of the split below
    // (NaN stays NaN through the final product).
    let xa = x.abs().min(30.0);
    let z = xa * FRAC_1_SQRT_2;
    let t = 1.0 / 0.5f32.mul_add(z, 1.0);
    let mut p = 0.170_872_77f32;
    for c in [
        -0.822_152_2,
        1.488_515_9,
        -1.135_204,
        0.278_868_07,
        -0.186_288_06,
        0.096_784_18,
        0.374_091_96,
        1.000_023_7,
        -1.265_512_2,
    ] {
        p = p.mul_add(t, c);
    }
    // exp(p - z^2) with z^2 = x^2 / 2 split exactly (xh has 12 significant bits, so xh^2 is
    // exact): rounding z or z^2 would cost z^2 * 1e-7 of relative accuracy in the tail.
    let xh = f32::from_bits(xa.to_bits() & 0xffff_f000);
    let tail = (-0.5 * (xa - xh)).mul_add(xa + xh, p);
    let erfc = t * exp_with::<true>(-0.5 * xh * xh) * exp_with::<true>(tail);
    let one_plus_erf = if x >= 0.0 { 2.0 - erfc } else { erfc };
    0.5 * x * one_plus_erf
}

/// exp(x) in f32 within 4e-7 relative error over the whole range (0 below -87.3, inf above 88.72), written
/// so the compiler vectorizes it: round-to-nearest by the 1.5 * 2^23 trick, Cody-Waite
/// reduction by ln 2, a degree-6 polynomial, and the exponent placed with integer bits.
#[inline(always)]
pub fn fast_exp(x: f32) -> f32 {
    exp_with::<false>(x)
}

/// `a * b + c`, fused (one rounding) when `FMA`, else as two roundings that the compiler
/// vectorizes at any level.
#[inline(always)]
fn madd<const FMA: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FMA {
        a.mul_add(b, c)
    } else {
        a * b + c
    }
}

/// [`fast_exp`]'s arithmetic, its multiply-adds fused when `FMA` (for callers compiled where
/// the CPU has FMA: see [`gelu`]).
#[inline(always)]
fn exp_with<const FMA: bool>(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    const ROUND: f32 = 12_582_912.0;
    let xc = x.clamp(-87.3, 88.72);
    // Round to nearest by adding 1.5 * 2^23: the sum's low mantissa bits hold n itself, read
    // as an integer (a float-to-int conversion would keep the loop from vectorizing).
    let shifted = madd::<FMA>(xc, LOG2E, ROUND);
    let n = shifted - ROUND;
    let r = madd::<FMA>(-n, LN2_LO, madd::<FMA>(-n, LN2_HI, xc));
    let mut p = 0.001_388_889f32;
    for c in [0.008_333_334, 0.041_666_668, 0.166_666_67, 0.5, 1.0, 1.0] {
        p = madd::<FMA>(p, r, c);
    }
    // 2^n as two factors so n = 128 (x near 88.7) and n = -126 stay normal numbers.
    let ni = shifted.to_bits() as i32 - 0x4b40_0000;
    let h = ni >> 1;
    let y = p
        * f32::from_bits(((h + 127) << 23) as u32)
        * f32::from_bits(((ni - h + 127) << 23) as u32);
    let y = if x < -87.3 { 0.0 } else { y };
    if x > 88.72 {
        f32::INFINITY
    } else {
        y
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// Against GELU in f64 (`0.5 x erfc(-x / sqrt 2)`, accurate in both tails); the table's
    /// f32 `1 + erf` loses relative accuracy below about -5 and cancels to 0 below -11. Values
    /// under 1e-30 (x below -11.7) are not held to it.
    #[test]
    fn gelu_is_within_1e6_of_f64() {
        use npu_ir::pointwise::Real;
        let mut x = -14.0f32;
        while x < 12.0 {
            let xd = f64::from(x);
            let want = 0.5 * xd * Real::erfc(-xd * std::f64::consts::FRAC_1_SQRT_2);
            let got = f64::from(gelu(x));
            let rel = ((got - want) / want).abs();
            assert!(
                rel < 1e-6 || want.abs() < 1e-30,
                "gelu({x}) = {got}, want {want}"
            );
            x += 0.00731;
        }
        for x in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0, -0.0] {
            let (got, want) = (gelu(x), UnaryOp::Gelu.eval([x]));
            assert!(
                got == want || got.is_nan() && want.is_nan(),
                "gelu({x}) = {got}, want {want}"
            );
        }
    }
}
