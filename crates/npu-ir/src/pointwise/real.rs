//! The float trait the pointwise table's math is written over: `f32` (compiled kernels, the
//! fallback for f32/bf16/f16 values, as PyTorch computes them) and `f64` (the fallback for
//! f64 values). `num_traits::Float` gives the libm surface; this adds what it lacks.

use num_traits::{Float, FloatConst};

/// A float type the pointwise math runs in.
pub trait Real: Float + FloatConst + std::fmt::Debug + Send + Sync + 'static {
    /// The error function.
    fn erf(self) -> Self;
    /// The complementary error function (accurate in the tail, unlike `1 - erf`).
    fn erfc(self) -> Self;
    /// Round half to even (`nearbyint` in the default rounding mode, as `torch.round`).
    fn round_even(self) -> Self;
    /// An `f64` constant in this type (rounded to nearest).
    fn c(v: f64) -> Self;
    /// This value as `f64` (exact).
    fn f64(self) -> f64;
}

impl Real for f32 {
    fn erf(self) -> f32 {
        libm::erff(self)
    }
    fn erfc(self) -> f32 {
        libm::erfcf(self)
    }
    fn round_even(self) -> f32 {
        self.round_ties_even()
    }
    fn c(v: f64) -> f32 {
        v as f32
    }
    fn f64(self) -> f64 {
        f64::from(self)
    }
}

impl Real for f64 {
    fn erf(self) -> f64 {
        libm::erf(self)
    }
    fn erfc(self) -> f64 {
        libm::erfc(self)
    }
    fn round_even(self) -> f64 {
        self.round_ties_even()
    }
    fn c(v: f64) -> f64 {
        v
    }
    fn f64(self) -> f64 {
        self
    }
}

/// `v` in `F`: shorthand for constants in the table's math.
#[inline(always)]
pub fn k<F: Real>(v: f64) -> F {
    F::c(v)
}

/// `I0(x)` by its power series (see the table's `I0` row): terms are added until they fall
/// below the sum's rounding (the ratio of consecutive terms is `x^2 / 4k^2`, so at most a few
/// hundred terms before f64 overflows).
/// Summed in f64 whatever `F` is, so f32 results are correctly rounded but for the last bit.
pub fn bessel_i0<F: Real>(x: F) -> F {
    let x = x.f64();
    let q = x * x * 0.25;
    let (mut t, mut s) = (1.0f64, 1.0f64);
    let mut k = 1.0;
    while k < 1000.0 && t > s * f64::EPSILON {
        t = t * q / (k * k);
        s += t;
        k += 1.0;
    }
    F::c(s)
}

/// `x` limited to `[lo, hi]`; NaN stays NaN (as ATen's `std::min(std::max(x, lo), hi)`).
#[inline(always)]
pub fn clamp_nan<F: Real>(x: F, lo: F, hi: F) -> F {
    if x.is_nan() {
        x
    } else {
        x.max(lo).min(hi)
    }
}

/// The inverse error function: a Giles (2010) single-precision start refined by two Newton
/// steps in f64, so it is accurate to f64 rounding over (-1, 1); +-1 give +-inf, outside NaN.
pub fn erfinv<F: Real>(x: F) -> F {
    let y = x.f64();
    if y.is_nan() || !(-1.0..=1.0).contains(&y) {
        return F::nan();
    }
    if y.abs() == 1.0 {
        return F::infinity() * F::c(y);
    }
    let w = -((1.0 - y) * (1.0 + y)).ln();
    let mut r = if w < 5.0 {
        let w = w - 2.5;
        let mut p = 2.810_226_36e-08;
        for c in [
            3.432_739_39e-07,
            -3.523_387_7e-06,
            -4.391_506_54e-06,
            0.000_218_580_87,
            -0.001_253_725_03,
            -0.004_177_681_64,
            0.246_640_727,
            1.501_409_41,
        ] {
            p = c + p * w;
        }
        p * y
    } else {
        let w = w.sqrt() - 3.0;
        let mut p = -0.000_200_214_257;
        for c in [
            0.000_100_950_558,
            0.001_349_343_22,
            -0.003_673_428_44,
            0.005_739_507_73,
            -0.007_622_461_3,
            0.009_438_870_47,
            1.001_674_06,
            2.832_976_82,
        ] {
            p = c + p * w;
        }
        p * y
    };
    // Newton on erf(r) = y: r -= (erf(r) - y) / (2/sqrt(pi) exp(-r^2)).
    for _ in 0..2 {
        let e = libm::erf(r) - y;
        r -= e / (std::f64::consts::FRAC_2_SQRT_PI * (-r * r).exp());
    }
    F::c(r)
}

/// `torch.round(x, decimals=d)`: scale by 10^|d|, round half to even, scale back, in `F`.
pub fn round_decimals<F: Real>(x: F, decimals: F) -> F {
    if decimals == F::zero() {
        return x.round_even();
    }
    let ten_pow = F::c(10f64.powi(decimals.f64().abs() as i32));
    if decimals > F::zero() {
        (x * ten_pow).round_even() / ten_pow
    } else {
        (x / ten_pow).round_even() * ten_pow
    }
}

/// Python's `//` on floats, as ATen's `div_floor_floating`.
pub fn div_floor<F: Real>(a: F, b: F) -> F {
    if b == F::zero() {
        return a / b;
    }
    let m = a % b;
    let mut div = (a - m) / b;
    if m != F::zero() && (b < F::zero()) != (m < F::zero()) {
        div = div - F::one();
    }
    if div == F::zero() {
        return F::zero().copysign(a / b);
    }
    let mut f = div.floor();
    if div - f > k(0.5) {
        f = f + F::one();
    }
    f
}

/// Python's `%` on floats (the result takes the divisor's sign), as ATen's `remainder`.
pub fn remainder<F: Real>(a: F, b: F) -> F {
    let m = a % b;
    if m != F::zero() && (b < F::zero()) != (m < F::zero()) {
        m + b
    } else {
        m
    }
}

/// Python's `//` on integers; `None` for a zero divisor.
pub fn int_div_floor(a: i64, b: i64) -> Option<i64> {
    if b == 0 {
        return None;
    }
    let q = a.wrapping_div(b);
    Some(if (a % b != 0) && ((a < 0) != (b < 0)) {
        q - 1
    } else {
        q
    })
}

/// Python's `%` on integers; `None` for a zero divisor.
pub fn int_remainder(a: i64, b: i64) -> Option<i64> {
    if b == 0 {
        return None;
    }
    let m = a.wrapping_rem(b);
    Some(if m != 0 && ((m < 0) != (b < 0)) {
        m + b
    } else {
        m
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erfinv_inverts_erf() {
        for &x in &[
            -0.999_999,
            -0.9,
            -0.5,
            -1e-8,
            0.0,
            0.3,
            0.7,
            0.99,
            0.999_999_9,
        ] {
            let r: f64 = erfinv(x);
            assert!((libm::erf(r) - x).abs() < 1e-15, "erfinv({x}) = {r}");
        }
        assert_eq!(erfinv(1.0f32), f32::INFINITY);
        assert!(erfinv(1.5f32).is_nan());
    }

    #[test]
    fn python_division_semantics() {
        assert_eq!(div_floor(5.0f32, -3.0), -2.0);
        assert_eq!(div_floor(-5.0f64, -3.0), 1.0);
        assert_eq!(remainder(-5.0f32, 3.0), 1.0);
        assert_eq!(remainder(5.0f32, -3.0), -1.0);
        assert_eq!(int_div_floor(-5, 3), Some(-2));
        assert_eq!(int_remainder(-5, 3), Some(1));
        assert_eq!(int_remainder(5, 0), None);
        assert_eq!(round_decimals(1.2345f32, 2.0), 1.23);
        assert_eq!(round_decimals(1234.5f64, -2.0), 1200.0);
    }
}
