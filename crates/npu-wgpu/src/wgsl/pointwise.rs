//! The pointwise ops in WGSL (f32), for fused elementwise expressions and activations: each
//! op's expression is the pointwise table's `wgsl` column (`npu_ir::pointwise`); this module
//! holds the helpers those expressions call (`PRELUDE`) and sequences an [`Expr`].
//!
//! NaN is tested on the bits (`p_isnan`) and min/max/clamp/comparisons are written out, because
//! WGSL leaves NaN behaviour of `min`, `max` and `!=` to the implementation; PyTorch's rules
//! (NaN propagates through relu/maximum/clamp, `ne` is true) must not depend on the driver.

use npu_ir::UnaryOp;
use npu_program::expr::{Expr, Instr};

/// WGSL helper functions the expressions call.
pub const PRELUDE: &str = r#"
fn p_isnan(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }
fn p_isinf(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) == 0x7f800000u; }
fn p_nan() -> f32 { return bitcast<f32>(0x7fc00000u); }
fn p_inf() -> f32 { return bitcast<f32>(0x7f800000u); }
fn p_b(c: bool) -> f32 { return select(0.0, 1.0, c); }
fn p_max(x: f32, y: f32) -> f32 { if (p_isnan(x) || p_isnan(y)) { return p_nan(); } return select(y, x, x > y); }
fn p_min(x: f32, y: f32) -> f32 { if (p_isnan(x) || p_isnan(y)) { return p_nan(); } return select(y, x, x < y); }
fn p_fmax(x: f32, y: f32) -> f32 { if (p_isnan(x)) { return y; } if (p_isnan(y)) { return x; } return select(y, x, x > y); }
fn p_fmin(x: f32, y: f32) -> f32 { if (p_isnan(x)) { return y; } if (p_isnan(y)) { return x; } return select(y, x, x < y); }
fn p_clamp(x: f32, lo: f32, hi: f32) -> f32 {
    if (p_isnan(x) || p_isnan(lo) || p_isnan(hi)) { return p_nan(); }
    return p_min(p_max(x, lo), hi);
}
fn p_relu(x: f32) -> f32 { return select(x, 0.0, x < 0.0); }
// erfc for z >= 0 (Numerical Recipes' Chebyshev fit, fractional error below 1.2e-7).
fn p_erfc_pos(z: f32) -> f32 {
    let t = 1.0 / (1.0 + 0.5 * z);
    let p = -1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (-0.18628806
        + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277))))))));
    return t * exp(p - z * z);
}
fn p_erfc(x: f32) -> f32 {
    if (p_isnan(x)) { return x; }
    let z = min(abs(x), 30.0);
    let e = p_erfc_pos(z);
    return select(e, 2.0 - e, x < 0.0);
}
fn p_erf(x: f32) -> f32 {
    if (p_isnan(x)) { return x; }
    let z = min(abs(x), 30.0);
    var r: f32;
    // Near 0 the series keeps the relative accuracy 1 - erfc would lose.
    if (z < 0.5) {
        let z2 = z * z;
        r = z * 1.1283791671 * (1.0 + z2 * (-0.3333333333 + z2 * (0.1 + z2 * (-0.0238095238 + z2 * 0.0046296296))));
    } else {
        r = 1.0 - p_erfc_pos(z);
    }
    return select(r, -r, x < 0.0);
}
// Giles' single-precision erfinv.
fn p_erfinv(x: f32) -> f32 {
    if (p_isnan(x) || abs(x) > 1.0) { return p_nan(); }
    if (abs(x) == 1.0) { return x * p_inf(); }
    var w = -log((1.0 - x) * (1.0 + x));
    var p: f32;
    if (w < 5.0) {
        w = w - 2.5;
        p = 2.81022636e-08;
        p = 3.43273939e-07 + p * w; p = -3.5233877e-06 + p * w; p = -4.39150654e-06 + p * w;
        p = 0.00021858087 + p * w; p = -0.00125372503 + p * w; p = -0.00417768164 + p * w;
        p = 0.246640727 + p * w; p = 1.50140941 + p * w;
    } else {
        w = sqrt(w) - 3.0;
        p = -0.000200214257;
        p = 0.000100950558 + p * w; p = 0.00134934322 + p * w; p = -0.00367342844 + p * w;
        p = 0.00573950773 + p * w; p = -0.0076224613 + p * w; p = 0.00943887047 + p * w;
        p = 1.00167406 + p * w; p = 2.83297682 + p * w;
    }
    return p * x;
}
fn p_expm1(x: f32) -> f32 {
    let u = exp(x);
    if (u == 1.0 || p_isnan(x)) { return x; }
    let um1 = u - 1.0;
    if (um1 == -1.0) { return -1.0; }
    if (p_isinf(u)) { return u; }
    return um1 * x / log(u);
}
fn p_log1p(x: f32) -> f32 {
    if (x < -1.0) { return p_nan(); }
    let u = 1.0 + x;
    if (u == 1.0 || p_isnan(x)) { return x; }
    if (u == 0.0) { return -p_inf(); }
    if (p_isinf(u)) { return u; }
    return log(u) * x / (u - 1.0);
}
fn p_sign(x: f32) -> f32 { if (x > 0.0) { return 1.0; } if (x < 0.0) { return -1.0; } return 0.0; }
fn p_copysign(x: f32, y: f32) -> f32 { return bitcast<f32>((bitcast<u32>(x) & 0x7fffffffu) | (bitcast<u32>(y) & 0x80000000u)); }
fn p_hypot(x: f32, y: f32) -> f32 {
    if (p_isinf(x) || p_isinf(y)) { return p_inf(); }
    if (p_isnan(x) || p_isnan(y)) { return p_nan(); }
    let a = abs(x); let b = abs(y);
    let m = max(a, b);
    if (m == 0.0) { return 0.0; }
    let r = min(a, b) / m;
    return m * sqrt(1.0 + r * r);
}
// Exact, as C's fmod: subtract the largest y * 2^k not above the rest, which Sterbenz's
// lemma makes exact (x - y * trunc(x / y) rounds wrong when x / y rounds up).
fn p_fmod(x: f32, y: f32) -> f32 {
    if (p_isnan(x) || p_isnan(y) || p_isinf(x) || y == 0.0) { return p_nan(); }
    if (p_isinf(y)) { return x; }
    let ay = abs(y);
    var r = abs(x);
    for (var i = 0; i < 300 && r >= ay; i++) {
        var t = ldexp(ay, frexp(r).exp - frexp(ay).exp);
        if (t > r) { t = t * 0.5; }
        r = r - t;
    }
    return p_copysign(r, x);
}
// atan2 with C's zeros (lavapipe gives 3pi/4 for atan2(0, 0)) and NaN.
fn p_atan2(y: f32, x: f32) -> f32 {
    if (p_isnan(x) || p_isnan(y)) { return p_nan(); }
    if (y == 0.0) {
        let neg_x = (bitcast<u32>(x) >> 31u) == 1u;
        return p_copysign(select(0.0, 3.14159265358979, neg_x), y);
    }
    return atan2(y, x);
}
// asin and acos through atan2: the drivers' own are as far off as 4e-4 (lavapipe).
fn p_asin(x: f32) -> f32 {
    if (p_isnan(x) || abs(x) > 1.0) { return p_nan(); }
    return atan2(x, sqrt((1.0 - x) * (1.0 + x)));
}
fn p_acos(x: f32) -> f32 {
    if (p_isnan(x) || abs(x) > 1.0) { return p_nan(); }
    return atan2(sqrt((1.0 - x) * (1.0 + x)), x);
}
// Correctly rounded division: WGSL allows `/` 2.5 ulp (NVIDIA's Vulkan driver multiplies by
// a reciprocal) and does not promise a fused `fma`, and one ulp decides f16/bf16 roundings and
// truncated quotients. The 24-bit significands are divided bit by bit in integers, then
// rounded to nearest even; zeros, infinities, NaN, subnormals and quotients near the ends of
// the range keep `/`'s answer.
fn p_div(x: f32, y: f32) -> f32 {
    let q = x / y;
    let bx = bitcast<u32>(x);
    let by = bitcast<u32>(y);
    let ex = (bx >> 23u) & 0xffu;
    let ey = (by >> 23u) & 0xffu;
    if (!(abs(q) < 1.0e37 && abs(q) > 1.0e-37) || ex == 0u || ey == 0u || ex == 255u || ey == 255u) {
        return q;
    }
    let my = (by & 0x7fffffu) | 0x800000u;
    var r = (bx & 0x7fffffu) | 0x800000u;
    var m = 0u;
    for (var i = 0; i < 26; i++) {
        m = m << 1u;
        if (r >= my) { r = r - my; m = m | 1u; }
        r = r << 1u;
    }
    var mant: u32;
    var rb: u32;
    var sticky = r != 0u;
    var e = i32(ex) - i32(ey) + 126;
    if (m >= 0x2000000u) {
        mant = m >> 2u; rb = (m >> 1u) & 1u; sticky = sticky || (m & 1u) == 1u; e = e + 1;
    } else {
        mant = m >> 1u; rb = m & 1u;
    }
    if (rb == 1u && (sticky || (mant & 1u) == 1u)) { mant = mant + 1u; }
    if (mant == 0x1000000u) { mant = 0x800000u; e = e + 1; }
    return bitcast<f32>(((bx ^ by) & 0x80000000u) | (u32(e) << 23u) | (mant & 0x7fffffu));
}
// sin and cos: Cody-Waite reduction by pi/2 in three parts and cephes' polynomials (about
// one ulp for |x| up to 1e5): WGSL bounds the built-ins only by an absolute 2^-11 on
// [-pi, pi], which NVIDIA's driver uses. Beyond 1e5 the built-ins answer.
fn p_sin_poly(r: f32) -> f32 {
    let z = r * r;
    return r + r * z * (-1.6666654611e-1 + z * (8.3321608736e-3 + z * -1.9515295891e-4));
}
fn p_cos_poly(r: f32) -> f32 {
    let z = r * r;
    return 1.0 - 0.5 * z + z * z * (4.166664568298827e-2 + z * (-1.388731625493765e-3 + z * 2.443315711809948e-5));
}
// sin(x) for quarter-turn shift 0, cos(x) for shift 1.
fn p_trig(x: f32, shift: u32) -> f32 {
    if (p_isnan(x) || p_isinf(x)) { return p_nan(); }
    if (abs(x) > 1.0e5) { return select(sin(x), cos(x), shift == 1u); }
    let k = round(x * 0.636619772367581);
    var r = fma(-k, 1.5707963705062866, x);
    r = fma(-k, -4.3711388286737929e-08, r);
    r = fma(-k, -1.7151245100059996e-15, r);
    let q = (bitcast<u32>(i32(k)) + shift) & 3u;
    let v = select(p_sin_poly(r), p_cos_poly(r), (q & 1u) == 1u);
    return select(v, -v, q >= 2u);
}
fn p_sin(x: f32) -> f32 { return p_trig(x, 0u); }
fn p_cos(x: f32) -> f32 { return p_trig(x, 1u); }
fn p_remainder(x: f32, y: f32) -> f32 {
    let m = p_fmod(x, y);
    if (m != 0.0 && ((m < 0.0) != (y < 0.0))) { return m + y; }
    return m;
}
fn p_div_floor(x: f32, y: f32) -> f32 {
    if (y == 0.0) { return x / y; }
    let m = p_fmod(x, y);
    var d = (x - m) / y;
    if (m != 0.0 && ((y < 0.0) != (m < 0.0))) { d = d - 1.0; }
    if (d == 0.0) { return p_copysign(0.0, x / y); }
    var f = floor(d);
    if (d - f > 0.5) { f = f + 1.0; }
    return f;
}
fn p_pow(x: f32, y: f32) -> f32 {
    if (y == 2.0) { return x * x; }
    if (y == 0.0 || x == 1.0) { return 1.0; }
    if (p_isnan(x) || p_isnan(y)) { return p_nan(); }
    let ay = abs(y);
    let y_int = trunc(y) == y && !p_isinf(y);
    let y_odd = y_int && ay < 16777216.0 && (u32(ay) & 1u) == 1u;
    if (x == 0.0) {
        if (y < 0.0) { return select(p_inf(), p_copysign(p_inf(), x), y_odd); }
        return select(0.0, x, y_odd);
    }
    if (p_isinf(y)) {
        if (abs(x) == 1.0) { return 1.0; }
        return select(0.0, p_inf(), (abs(x) > 1.0) == (y > 0.0));
    }
    if (p_isinf(x)) {
        if (x > 0.0) { return select(0.0, p_inf(), y > 0.0); }
        let mag = select(0.0, p_inf(), y > 0.0);
        return select(mag, -mag, y_odd);
    }
    if (x < 0.0) {
        if (!y_int) { return p_nan(); }
        let r = exp2(y * log2(-x));
        return select(r, -r, y_odd);
    }
    return exp2(y * log2(x));
}
fn p_i0(x: f32) -> f32 {
    if (p_isinf(x)) { return p_nan(); }
    if (p_isnan(x)) { return x; }
    let q = 0.25 * x * x;
    var t = 1.0;
    var s = 1.0;
    for (var k = 1; k < 1000 && t > s * 1e-9; k = k + 1) {
        t = t * q / f32(k * k);
        s = s + t;
    }
    return s;
}
fn p_round(x: f32, d: f32) -> f32 {
    if (d == 0.0) { return round(x); }
    let p = pow(10.0, abs(d));
    if (d > 0.0) { return round(x * p) / p; }
    return round(x / p) * p;
}
fn p_logit_z(x: f32, eps: f32) -> f32 { if (eps < 0.0) { return x; } return p_clamp(x, eps, 1.0 - eps); }
fn p_sigmoid(x: f32) -> f32 { return 1.0 / (1.0 + exp(-x)); }
fn p_tanh(x: f32) -> f32 {
    if (p_isnan(x)) { return x; }
    if (abs(x) > 15.0) { return sign(x); }
    return tanh(x);
}
"#;

/// A WGSL f32 literal (infinities and NaN through their bits).
pub fn lit(v: f64) -> String {
    let f = v as f32;
    if f.is_nan() {
        "p_nan()".into()
    } else if f.is_infinite() {
        if f > 0.0 {
            "p_inf()".into()
        } else {
            "(-p_inf())".into()
        }
    } else {
        let s = format!("{f:?}");
        if s.contains('.') || s.contains('e') {
            format!("f32({s})")
        } else {
            format!("f32({s}.0)")
        }
    }
}

/// `u(x)` as a WGSL f32 expression; `x` is a name (evaluated once by the caller). NaN in
/// gives NaN out (drivers' builtins may not: lavapipe's `atan(NaN)` is 0) except for the ops
/// that map NaN elsewhere.
pub fn unary(u: UnaryOp, x: &str) -> String {
    use UnaryOp::*;
    let e = u.wgsl([x]);
    match u {
        IsNan
        | IsInf
        | IsFinite
        | IsPosInf
        | IsNegInf
        | NanToNum { .. }
        | Sign
        | Signbit
        | LogicalNot => e,
        _ => format!("select({e}, {x}, p_isnan({x}))"),
    }
}

/// The statements computing `expr` over the named inputs; returns them and the name of the
/// result. Every intermediate is a `let`, so each operand expression is evaluated once.
pub fn expr(
    e: &Expr,
    inputs: &[String],
    round: impl Fn(npu_ir::DType, &str) -> String,
) -> (String, String) {
    let mut code = String::new();
    let mut stack: Vec<String> = Vec::new();
    let mut n = 0;
    let mut push = |code: &mut String, stack: &mut Vec<String>, v: String| {
        let name = format!("e{n}");
        n += 1;
        code.push_str(&format!("    let {name} = {v};\n"));
        stack.push(name);
    };
    for ins in &e.code {
        match ins {
            Instr::Load(k) => {
                let v = inputs[*k as usize].clone();
                push(&mut code, &mut stack, v);
            }
            Instr::Const(c) => push(&mut code, &mut stack, lit(f64::from(*c))),
            Instr::Unary(u) => {
                let a = stack.pop().unwrap_or_default();
                push(&mut code, &mut stack, unary(*u, &a));
            }
            Instr::Binary(b) => {
                let y = stack.pop().unwrap_or_default();
                let x = stack.pop().unwrap_or_default();
                push(&mut code, &mut stack, b.wgsl([&x, &y]));
            }
            Instr::Ternary(t) => {
                let z = stack.pop().unwrap_or_default();
                let y = stack.pop().unwrap_or_default();
                let x = stack.pop().unwrap_or_default();
                push(&mut code, &mut stack, t.wgsl([&x, &y, &z]));
            }
            Instr::Clamp { min, max } => {
                let a = stack.pop().unwrap_or_default();
                let lo = min.map_or("(-p_inf())".to_string(), |v| lit(f64::from(v)));
                let hi = max.map_or("p_inf()".to_string(), |v| lit(f64::from(v)));
                push(&mut code, &mut stack, format!("p_clamp({a}, {lo}, {hi})"));
            }
            Instr::Cast(dt) => {
                let a = stack.pop().unwrap_or_default();
                push(&mut code, &mut stack, round(*dt, &a));
            }
        }
    }
    let result = stack.pop().unwrap_or_else(|| "0.0".into());
    (code, result)
}
