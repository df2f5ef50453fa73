//! The pointwise table. Columns: variant {params = ATen default}, short name, ATen names,
//! dtype rule, `|operands| f32/f64 math`, optional `int |operands| i64 math`, `cuda` C
//! expression and `wgsl` expression (`{operand}` and `{param}` are substituted; `p_*` are the
//! WGSL helpers of `npu-wgpu`'s prelude, which also keeps NaN in, NaN out for unary ops).

use super::pointwise_ops;
use std::f64::consts::{FRAC_1_SQRT_2, FRAC_2_PI, PI};

const INF: f64 = f64::INFINITY;

pointwise_ops! {
    /// One-operand pointwise ops.
    UnaryOp[1] {
        /// NaN stays NaN.
        Relu "relu" ["relu"] Keep |x| if x < k(0.0) { k(0.0) } else { x };
            int |x| Ok(x.max(0));
            cuda "({x} < 0.0f ? 0.0f : {x})";
            wgsl "p_relu({x})";
        /// `hardtanh(x, 0, 6)`; NaN stays NaN. A row of its own (not a clamp) so that a conv or
        /// GEMM epilogue can apply it: MobileNets put it after every convolution.
        Relu6 "relu6" ["relu6"] Keep
            |x| if x.is_nan() { x } else if x < k(0.0) { k(0.0) } else if x > k(6.0) { k(6.0) } else { x };
            int |x| Ok(x.clamp(0, 6));
            cuda "({x} != {x} ? {x} : fminf(fmaxf({x}, 0.0f), 6.0f))";
            wgsl "min(max({x}, 0.0), 6.0)";
        Silu "silu" ["silu"] Float |x| x / (k::<F>(1.0) + (-x).exp());
            cuda "{x} / (1.0f + expf(-{x}))";
            wgsl "({x} / (1.0 + exp(-{x})))";
        /// Exact (erf) GELU; the `tanh` approximation is [`UnaryOp::GeluTanh`].
        Gelu "gelu" ["gelu"] Float |x| k::<F>(0.5) * x * (k::<F>(1.0) + (x * k(FRAC_1_SQRT_2)).erf());
            cuda "0.5f * {x} * (1.0f + erff({x} * 0.70710678118654752f))";
            wgsl "select(0.5 * {x} * p_erfc(-{x} * 0.70710678), {x}, p_isinf({x}) && {x} > 0.0)";
        GeluTanh "gelu_tanh" [] Float
            |x| k::<F>(0.5) * x * (k::<F>(1.0) + (k::<F>(FRAC_2_PI.sqrt()) * (x + k::<F>(0.044715) * x * x * x)).tanh());
            cuda "0.5f * {x} * (1.0f + tanhf(0.7978845608028654f * ({x} + 0.044715f * {x} * {x} * {x})))";
            wgsl "(0.5 * {x} * (1.0 + p_tanh(0.7978845608 * ({x} + 0.044715 * {x} * {x} * {x}))))";
        Neg "neg" ["neg", "negative"] Keep |x| -x;
            int |x| Ok(x.wrapping_neg());
            cuda "-{x}";
            wgsl "(-{x})";
        Rsqrt "rsqrt" ["rsqrt"] Float |x| x.sqrt().recip(); cuda "1.0f / sqrtf({x})";
            wgsl "(1.0 / sqrt({x}))";
        Sqrt "sqrt" ["sqrt"] Float |x| x.sqrt(); cuda "sqrtf({x})";
            wgsl "sqrt({x})";
        Recip "recip" ["reciprocal"] Float |x| x.recip(); cuda "1.0f / {x}";
            wgsl "p_div(1.0, {x})";
        Exp "exp" ["exp"] Float |x| x.exp(); cuda "expf({x})";
            wgsl "exp({x})";
        Log "log" ["log"] Float |x| x.ln(); cuda "logf({x})";
            wgsl "log({x})";
        Cos "cos" ["cos"] Float |x| x.cos(); cuda "cosf({x})";
            wgsl "p_cos({x})";
        Sin "sin" ["sin"] Float |x| x.sin(); cuda "sinf({x})";
            wgsl "p_sin({x})";
        Tanh "tanh" ["tanh"] Float |x| x.tanh(); cuda "tanhf({x})";
            wgsl "p_tanh({x})";
        Sigmoid "sigmoid" ["sigmoid"] Float |x| (k::<F>(1.0) + (-x).exp()).recip();
            cuda "1.0f / (1.0f + expf(-{x}))";
            wgsl "p_sigmoid({x})";
        Abs "abs" ["abs", "absolute"] Keep |x| x.abs();
            int |x| Ok(x.wrapping_abs());
            cuda "fabsf({x})";
            wgsl "abs({x})";
        Erf "erf" ["erf"] Float |x| x.erf(); cuda "erff({x})";
            wgsl "p_erf({x})";
        Erfc "erfc" ["erfc"] Float |x| x.erfc(); cuda "erfcf({x})";
            wgsl "p_erfc({x})";
        Erfinv "erfinv" ["erfinv"] Float |x| erfinv(x); cuda "erfinvf({x})";
            wgsl "p_erfinv({x})";
        Exp2 "exp2" ["exp2"] Float |x| x.exp2(); cuda "exp2f({x})";
            wgsl "exp2({x})";
        Expm1 "expm1" ["expm1"] Float |x| x.exp_m1(); cuda "expm1f({x})";
            wgsl "p_expm1({x})";
        Log1p "log1p" ["log1p"] Float |x| x.ln_1p(); cuda "log1pf({x})";
            wgsl "p_log1p({x})";
        Log2 "log2" ["log2"] Float |x| x.log2(); cuda "log2f({x})";
            wgsl "log2({x})";
        Log10 "log10" ["log10"] Float |x| x.log10(); cuda "log10f({x})";
            wgsl "(log2({x}) * 0.30102999566)";
        Floor "floor" ["floor"] Keep |x| x.floor(); int |x| Ok(x); cuda "floorf({x})";
            wgsl "floor({x})";
        Ceil "ceil" ["ceil"] Keep |x| x.ceil(); int |x| Ok(x); cuda "ceilf({x})";
            wgsl "ceil({x})";
        /// Half to even; `decimals` scales by 10^decimals first (`torch.round(x, decimals=d)`).
        Round { decimals = 0.0 } "round" ["round"] Keep |x| round_decimals(x, decimals);
            int |x| Ok(x);
            cuda "[&]{ float d = {decimals}; if (d == 0.0f) return rintf({x}); float p = (float)pow(10.0, (double)fabsf(d)); return d > 0.0f ? rintf({x} * p) / p : rintf({x} / p) * p; }()";
            wgsl "p_round({x}, {decimals})";
        Trunc "trunc" ["trunc", "fix"] Keep |x| x.trunc(); int |x| Ok(x); cuda "truncf({x})";
            wgsl "trunc({x})";
        Frac "frac" ["frac"] Keep |x| x - x.trunc(); cuda "{x} - truncf({x})";
            wgsl "({x} - trunc({x}))";
        /// -1, 0 or 1; 0 for NaN (ATen's `(0 < x) - (x < 0)`).
        Sign "sign" ["sign", "sgn"] Keep
            |x| if x > k(0.0) { k(1.0) } else if x < k(0.0) { k(-1.0) } else { k(0.0) };
            int |x| Ok(x.signum());
            cuda "({x} > 0.0f ? 1.0f : ({x} < 0.0f ? -1.0f : 0.0f))";
            wgsl "p_sign({x})";
        Signbit "signbit" ["signbit"] Bool |x| if x.is_sign_negative() { k(1.0) } else { k(0.0) };
            int |x| Ok(i64::from(x < 0));
            cuda "((__float_as_uint({x}) >> 31) ? 1.0f : 0.0f)";
            wgsl "p_b((bitcast<u32>({x}) >> 31u) == 1u)";
        Tan "tan" ["tan"] Float |x| x.tan(); cuda "tanf({x})";
            wgsl "p_div(p_sin({x}), p_cos({x}))";
        Asin "asin" ["asin", "arcsin"] Float |x| x.asin(); cuda "asinf({x})";
            wgsl "p_asin({x})";
        Acos "acos" ["acos", "arccos"] Float |x| x.acos(); cuda "acosf({x})";
            wgsl "p_acos({x})";
        Atan "atan" ["atan", "arctan"] Float |x| x.atan(); cuda "atanf({x})";
            wgsl "atan({x})";
        Sinh "sinh" ["sinh"] Float |x| x.sinh(); cuda "sinhf({x})";
            wgsl "sinh({x})";
        Cosh "cosh" ["cosh"] Float |x| x.cosh(); cuda "coshf({x})";
            wgsl "cosh({x})";
        Asinh "asinh" ["asinh", "arcsinh"] Float |x| x.asinh(); cuda "asinhf({x})";
            wgsl "asinh({x})";
        Acosh "acosh" ["acosh", "arccosh"] Float |x| x.acosh(); cuda "acoshf({x})";
            wgsl "acosh({x})";
        Atanh "atanh" ["atanh", "arctanh"] Float |x| x.atanh(); cuda "atanhf({x})";
            wgsl "atanh({x})";
        /// `log(z / (1 - z))`, z = x clamped to [eps, 1 - eps]; the default eps = -1 clamps
        /// to [-1, 2], which changes nothing (logit is NaN outside [0, 1]), as eps=None.
        Logit { eps = -1.0 } "logit" ["logit"] Float
            |x| { let z = clamp_nan(x, eps, k::<F>(1.0) - eps); (z / (k::<F>(1.0) - z)).ln() };
            cuda "[&]{ float z = {x} != {x} ? {x} : fminf(fmaxf({x}, {eps}), 1.0f - {eps}); return logf(z / (1.0f - z)); }()";
            wgsl "log(p_logit_z({x}, {eps}) / (1.0 - p_logit_z({x}, {eps})))";
        Square "square" ["square"] Keep |x| x * x; int |x| Ok(x.wrapping_mul(x)); cuda "{x} * {x}";
            wgsl "({x} * {x})";
        IsNan "isnan" ["isnan"] Bool |x| if x.is_nan() { k(1.0) } else { k(0.0) };
            int |x| { let _ = x; Ok(0) };
            cuda "({x} != {x} ? 1.0f : 0.0f)";
            wgsl "p_b(p_isnan({x}))";
        IsInf "isinf" ["isinf"] Bool |x| if x.is_infinite() { k(1.0) } else { k(0.0) };
            int |x| { let _ = x; Ok(0) };
            cuda "(fabsf({x}) == NPU_INF ? 1.0f : 0.0f)";
            wgsl "p_b(p_isinf({x}))";
        IsFinite "isfinite" ["isfinite"] Bool |x| if x.is_finite() { k(1.0) } else { k(0.0) };
            int |x| { let _ = x; Ok(1) };
            cuda "(fabsf({x}) < NPU_INF ? 1.0f : 0.0f)";
            wgsl "p_b(!p_isnan({x}) && !p_isinf({x}))";
        IsPosInf "isposinf" ["isposinf"] Bool |x| if x == F::infinity() { k(1.0) } else { k(0.0) };
            int |x| { let _ = x; Ok(0) };
            cuda "({x} == NPU_INF ? 1.0f : 0.0f)";
            wgsl "p_b(p_isinf({x}) && {x} > 0.0)";
        IsNegInf "isneginf" ["isneginf"] Bool |x| if x == F::neg_infinity() { k(1.0) } else { k(0.0) };
            int |x| { let _ = x; Ok(0) };
            cuda "({x} == -NPU_INF ? 1.0f : 0.0f)";
            wgsl "p_b(p_isinf({x}) && {x} < 0.0)";
        /// An infinite `posinf`/`neginf` means "the dtype's largest finite value" (ATen's
        /// default); [`UnaryOp::for_dtype`] resolves it before evaluation.
        NanToNum { nan = 0.0, posinf = INF, neginf = -INF } "nan_to_num" ["nan_to_num"] Keep
            |x| if x.is_nan() { nan } else if x == F::infinity() { posinf } else if x == F::neg_infinity() { neginf } else { x };
            int |x| Ok(x);
            cuda "({x} != {x} ? {nan} : ({x} == NPU_INF ? {posinf} : ({x} == -NPU_INF ? {neginf} : {x})))";
            wgsl "select(select(select({x}, {neginf}, p_isinf({x}) && {x} < 0.0), {posinf}, p_isinf({x}) && {x} > 0.0), {nan}, p_isnan({x}))";
        /// `log1p(exp(beta x)) / beta`, or x where `beta x > threshold`.
        Softplus { beta = 1.0, threshold = 20.0 } "softplus" ["softplus"] Float
            |x| if x * beta > threshold { x } else { (x * beta).exp().ln_1p() / beta };
            cuda "({x} * {beta} > {threshold} ? {x} : log1pf(expf({x} * {beta})) / {beta})";
            wgsl "select(p_log1p(exp({x} * {beta})) / {beta}, {x}, {x} * {beta} > {threshold})";
        Mish "mish" ["mish"] Float |x| x * x.exp().ln_1p().tanh(); cuda "{x} * tanhf(log1pf(expf({x})))";
            wgsl "({x} * p_tanh(p_log1p(exp({x}))))";
        /// `elu`, and `selu`/`celu` through their parameters.
        Elu { alpha = 1.0, scale = 1.0, input_scale = 1.0 } "elu" ["elu"] Float
            |x| if x <= k(0.0) { (x * input_scale).exp_m1() * alpha * scale } else { x * scale };
            cuda "({x} <= 0.0f ? expm1f({x} * {input_scale}) * {alpha} * {scale} : {x} * {scale})";
            wgsl "select({x} * {scale}, p_expm1({x} * {input_scale}) * {alpha} * {scale}, {x} <= 0.0)";
        Hardswish "hardswish" ["hardswish"] Float |x| x * clamp_nan(x + k(3.0), k(0.0), k(6.0)) / k(6.0);
            cuda "{x} * fminf(fmaxf({x} + 3.0f, 0.0f), 6.0f) / 6.0f";
            wgsl "({x} * p_clamp({x} + 3.0, 0.0, 6.0) / 6.0)";
        Hardsigmoid "hardsigmoid" ["hardsigmoid"] Float |x| clamp_nan(x + k(3.0), k(0.0), k(6.0)) / k(6.0);
            cuda "({x} != {x} ? {x} : fminf(fmaxf({x} + 3.0f, 0.0f), 6.0f) / 6.0f)";
            wgsl "(p_clamp({x} + 3.0, 0.0, 6.0) / 6.0)";
        LeakyRelu { negative_slope = 0.01 } "leaky_relu" ["leaky_relu"] Float
            |x| if x > k(0.0) { x } else { x * negative_slope };
            cuda "({x} > 0.0f ? {x} : {x} * {negative_slope})";
            wgsl "select({x} * {negative_slope}, {x}, {x} > 0.0 || p_isnan({x}))";
        Deg2rad "deg2rad" ["deg2rad"] Float |x| x * k(PI / 180.0); cuda "{x} * 0.017453292519943295f";
            wgsl "({x} * 0.017453292519943295)";
        Rad2deg "rad2deg" ["rad2deg"] Float |x| x * k(180.0 / PI); cuda "{x} * 57.29577951308232f";
            wgsl "({x} * 57.29577951308232)";
        Positive "positive" ["positive"] Keep |x| x; int |x| Ok(x); cuda "{x}";
            wgsl "{x}";
        /// `-softplus(-x)`, as `min(x, 0) - log1p(exp(-|x|))` (no overflow).
        LogSigmoid "log_sigmoid" ["log_sigmoid"] Float |x| x.min(k(0.0)) - (-x.abs()).exp().ln_1p();
            cuda "(fminf({x}, 0.0f) - log1pf(expf(-fabsf({x}))))";
            wgsl "(min({x}, 0.0) - p_log1p(exp(-abs({x}))))";
        /// NaN stays NaN (its comparisons are false).
        Hardshrink { lambd = 0.5 } "hardshrink" ["hardshrink"] Keep
            |x| if x >= -lambd && x <= lambd { k(0.0) } else { x };
            cuda "({x} >= -{lambd} && {x} <= {lambd} ? 0.0f : {x})";
            wgsl "select({x}, 0.0, {x} >= -{lambd} && {x} <= {lambd})";
        Softshrink { lambd = 0.5 } "softshrink" ["softshrink"] Keep
            |x| if x > lambd { x - lambd } else if x < -lambd { x + lambd } else { x * k(0.0) };
            cuda "({x} > {lambd} ? {x} - {lambd} : ({x} < -{lambd} ? {x} + {lambd} : {x} * 0.0f))";
            wgsl "select(select(select({x} * 0.0, {x} + {lambd}, {x} < -{lambd}), {x} - {lambd}, {x} > {lambd}), {x}, p_isnan({x}))";
        Threshold { threshold = 0.0, value = 0.0 } "threshold" ["threshold"] Keep
            |x| if x <= threshold { value } else { x };
            int |x| Ok(if x <= threshold as i64 { value as i64 } else { x });
            cuda "({x} <= {threshold} ? {value} : {x})";
            wgsl "select({x}, {value}, {x} <= {threshold})";
        /// The modified Bessel function of the first kind, order 0, by its power series
        /// `sum (x^2/4)^k / (k!)^2` (all terms positive: no cancellation). +-inf gives NaN,
        /// as ATen's `exp(x) * chbevl(..) / sqrt(x)` does.
        I0 "i0" ["i0", "special_i0"] Float |x| if x.is_infinite() { F::nan() } else { bessel_i0(x) };
            cuda "[&]{ if (fabsf({x}) == NPU_INF) return {x} - {x}; float q = 0.25f * {x} * {x}, t = 1.0f, s = 1.0f; for (int k = 1; k < 1000 && t > s * 1e-9f; ++k) { t *= q / (float)(k * k); s += t; } return s; }()";
            wgsl "p_i0({x})";
        /// `sin(pi x) / (pi x)`, 1 at 0.
        Sinc "sinc" ["sinc"] Float |x| if x == k(0.0) { k(1.0) } else { let p = x * k(PI); p.sin() / p };
            cuda "({x} == 0.0f ? 1.0f : sinf({x} * 3.14159265358979f) / ({x} * 3.14159265358979f))";
            wgsl "select(p_div(p_sin({x} * 3.14159265358979), {x} * 3.14159265358979), 1.0, {x} == 0.0)";
        /// NaN is true (non-zero).
        LogicalNot "logical_not" ["logical_not"] Bool |x| if x == k(0.0) { k(1.0) } else { k(0.0) };
            int |x| Ok(i64::from(x == 0));
            cuda "({x} == 0.0f ? 1.0f : 0.0f)";
            wgsl "p_b({x} == 0.0)";
    }
}

pointwise_ops! {
    /// Two-operand pointwise ops.
    BinaryOp[2] {
        Add "add" ["add"] Keep |x, y| x + y; int |x, y| Ok(x.wrapping_add(y)); cuda "{x} + {y}";
            wgsl "({x} + {y})";
        Sub "sub" ["sub", "subtract"] Keep |x, y| x - y; int |x, y| Ok(x.wrapping_sub(y)); cuda "{x} - {y}";
            wgsl "({x} - {y})";
        Mul "mul" ["mul", "multiply"] Keep |x, y| x * y; int |x, y| Ok(x.wrapping_mul(y)); cuda "{x} * {y}";
            wgsl "({x} * {y})";
        /// True division (a float result also for integers).
        Div "div" ["div", "divide", "true_divide"] Float |x, y| x / y; cuda "{x} / {y}";
            wgsl "p_div({x}, {y})";
        Pow "pow" ["pow"] Keep |x, y| if y == k(2.0) { x * x } else { x.powf(y) };
            int |x, y| Ok(int_pow(x, y));
            cuda "({y} == 2.0f ? {x} * {x} : powf({x}, {y}))";
            wgsl "p_pow({x}, {y})";
        /// `maximum`: NaN if either is NaN.
        Max "max" ["maximum"] Keep |x, y| if x.is_nan() || y.is_nan() { x + y } else { x.max(y) };
            int |x, y| Ok(x.max(y));
            cuda "(({x} != {x}) || ({y} != {y}) ? {x} + {y} : fmaxf({x}, {y}))";
            wgsl "p_max({x}, {y})";
        /// `minimum`: NaN if either is NaN.
        Min "min" ["minimum"] Keep |x, y| if x.is_nan() || y.is_nan() { x + y } else { x.min(y) };
            int |x, y| Ok(x.min(y));
            cuda "(({x} != {x}) || ({y} != {y}) ? {x} + {y} : fminf({x}, {y}))";
            wgsl "p_min({x}, {y})";
        /// NaN only if both are NaN.
        Fmax "fmax" ["fmax"] Keep |x, y| x.max(y); int |x, y| Ok(x.max(y)); cuda "fmaxf({x}, {y})";
            wgsl "p_fmax({x}, {y})";
        Fmin "fmin" ["fmin"] Keep |x, y| x.min(y); int |x, y| Ok(x.min(y)); cuda "fminf({x}, {y})";
            wgsl "p_fmin({x}, {y})";
        /// `div(rounding_mode='trunc')`.
        DivTrunc "div_trunc" [] Keep |x, y| (x / y).trunc();
            int |x, y| if y == 0 { Err("integer division by zero") } else { Ok(x.wrapping_div(y)) };
            cuda "truncf({x} / {y})";
            wgsl "trunc(p_div({x}, {y}))";
        /// `div(rounding_mode='floor')`, `floor_divide`: Python's `//`.
        DivFloor "div_floor" ["floor_divide"] Keep |x, y| div_floor(x, y);
            int |x, y| int_div_floor(x, y).ok_or("integer division by zero");
            cuda "[&]{ if ({y} == 0.0f) return {x} / {y}; float m = fmodf({x}, {y}); float d = ({x} - m) / {y}; if (m != 0.0f && (({y} < 0.0f) != (m < 0.0f))) d -= 1.0f; if (d == 0.0f) return copysignf(0.0f, {x} / {y}); float f = floorf(d); if (d - f > 0.5f) f += 1.0f; return f; }()";
            wgsl "p_div_floor({x}, {y})";
        /// Python's `%`: the result takes the divisor's sign.
        Remainder "remainder" ["remainder"] Keep |x, y| remainder(x, y);
            int |x, y| int_remainder(x, y).ok_or("integer division by zero");
            cuda "[&]{ float m = fmodf({x}, {y}); return (m != 0.0f && ((m < 0.0f) != ({y} < 0.0f))) ? m + {y} : m; }()";
            wgsl "p_remainder({x}, {y})";
        /// C's `fmod`: the result takes the dividend's sign.
        Fmod "fmod" ["fmod"] Keep |x, y| x % y;
            int |x, y| if y == 0 { Err("integer division by zero") } else { Ok(x.wrapping_rem(y)) };
            cuda "fmodf({x}, {y})";
            wgsl "p_fmod({x}, {y})";
        Atan2 "atan2" ["atan2", "arctan2"] Float |x, y| x.atan2(y); cuda "atan2f({x}, {y})";
            wgsl "p_atan2({x}, {y})";
        Hypot "hypot" ["hypot"] Float |x, y| x.hypot(y); cuda "hypotf({x}, {y})";
            wgsl "p_hypot({x}, {y})";
        Copysign "copysign" ["copysign"] Float |x, y| x.copysign(y); cuda "copysignf({x}, {y})";
            wgsl "p_copysign({x}, {y})";
        /// `x * log(y)`; 0 where x == 0 (unless y is NaN).
        Xlogy "xlogy" ["xlogy"] Float
            |x, y| if y.is_nan() { y } else if x == k(0.0) { k(0.0) } else { x * y.ln() };
            cuda "({y} != {y} ? {y} : ({x} == 0.0f ? 0.0f : {x} * logf({y})))";
            wgsl "select(select({x} * log({y}), 0.0, {x} == 0.0), {y}, p_isnan({y}))";
        /// `y` where x is 0, else whether x > 0 (NaN gives 0).
        Heaviside "heaviside" ["heaviside"] Keep
            |x, y| if x == k(0.0) { y } else if x > k(0.0) { k(1.0) } else { k(0.0) };
            int |x, y| Ok(if x == 0 { y } else { i64::from(x > 0) });
            cuda "({x} == 0.0f ? {y} : ({x} > 0.0f ? 1.0f : 0.0f))";
            wgsl "select(p_b({x} > 0.0), {y}, {x} == 0.0)";
        /// `log(exp(x) + exp(y))` without overflow; equal infinities give themselves.
        Logaddexp "logaddexp" ["logaddexp"] Float
            |x, y| if x.is_infinite() && x == y { x } else { x.max(y) + (-(x - y).abs()).exp().ln_1p() };
            cuda "(fabsf({x}) == NPU_INF && {x} == {y} ? {x} : fmaxf({x}, {y}) + log1pf(expf(-fabsf({x} - {y}))))";
            wgsl "select(p_fmax({x}, {y}) + p_log1p(exp(-abs({x} - {y}))), {x}, p_isinf({x}) && {x} == {y})";
        Eq "eq" ["eq"] Bool |x, y| if x == y { k(1.0) } else { k(0.0) };
            int |x, y| Ok(i64::from(x == y)); cuda "({x} == {y} ? 1.0f : 0.0f)";
            wgsl "p_b({x} == {y} && !p_isnan({x}) && !p_isnan({y}))";
        /// True when either is NaN.
        Ne "ne" ["ne"] Bool |x, y| if x != y { k(1.0) } else { k(0.0) };
            int |x, y| Ok(i64::from(x != y)); cuda "({x} != {y} ? 1.0f : 0.0f)";
            wgsl "p_b(!({x} == {y}) || p_isnan({x}) || p_isnan({y}))";
        Lt "lt" ["lt"] Bool |x, y| if x < y { k(1.0) } else { k(0.0) };
            int |x, y| Ok(i64::from(x < y)); cuda "({x} < {y} ? 1.0f : 0.0f)";
            wgsl "p_b({x} < {y} && !p_isnan({x}) && !p_isnan({y}))";
        Le "le" ["le"] Bool |x, y| if x <= y { k(1.0) } else { k(0.0) };
            int |x, y| Ok(i64::from(x <= y)); cuda "({x} <= {y} ? 1.0f : 0.0f)";
            wgsl "p_b({x} <= {y} && !p_isnan({x}) && !p_isnan({y}))";
        Gt "gt" ["gt"] Bool |x, y| if x > y { k(1.0) } else { k(0.0) };
            int |x, y| Ok(i64::from(x > y)); cuda "({x} > {y} ? 1.0f : 0.0f)";
            wgsl "p_b({x} > {y} && !p_isnan({x}) && !p_isnan({y}))";
        Ge "ge" ["ge"] Bool |x, y| if x >= y { k(1.0) } else { k(0.0) };
            int |x, y| Ok(i64::from(x >= y)); cuda "({x} >= {y} ? 1.0f : 0.0f)";
            wgsl "p_b({x} >= {y} && !p_isnan({x}) && !p_isnan({y}))";
        /// Operands are truthiness (non-zero, NaN included).
        LogicalAnd "logical_and" ["logical_and"] Bool
            |x, y| if x != k(0.0) && y != k(0.0) { k(1.0) } else { k(0.0) };
            int |x, y| Ok(i64::from(x != 0 && y != 0));
            cuda "({x} != 0.0f && {y} != 0.0f ? 1.0f : 0.0f)";
            wgsl "p_b(!({x} == 0.0) && !({y} == 0.0))";
        LogicalOr "logical_or" ["logical_or"] Bool
            |x, y| if x != k(0.0) || y != k(0.0) { k(1.0) } else { k(0.0) };
            int |x, y| Ok(i64::from(x != 0 || y != 0));
            cuda "({x} != 0.0f || {y} != 0.0f ? 1.0f : 0.0f)";
            wgsl "p_b(!({x} == 0.0) || !({y} == 0.0))";
        LogicalXor "logical_xor" ["logical_xor"] Bool
            |x, y| if (x != k(0.0)) != (y != k(0.0)) { k(1.0) } else { k(0.0) };
            int |x, y| Ok(i64::from((x != 0) != (y != 0)));
            cuda "(({x} != 0.0f) != ({y} != 0.0f) ? 1.0f : 0.0f)";
            wgsl "p_b(({x} == 0.0) != ({y} == 0.0))";
    }
}

pointwise_ops! {
    /// Three-operand pointwise ops.
    TernaryOp[3] {
        /// `where(cond, x, y)`; also `masked_fill` (cond = mask, x = value, y = input).
        Where "where" [] Keep |c, x, y| if c != k(0.0) { x } else { y };
            int |c, x, y| Ok(if c != 0 { x } else { y });
            cuda "({c} != 0.0f ? {x} : {y})";
            wgsl "select({y}, {x}, !({c} == 0.0))";
        /// ATen's two-sided formula (exact at both ends).
        Lerp "lerp" ["lerp"] Float
            |x, e, w| if w.abs() < k(0.5) { x + w * (e - x) } else { e - (e - x) * (k::<F>(1.0) - w) };
            cuda "(fabsf({w}) < 0.5f ? {x} + {w} * ({e} - {x}) : {e} - ({e} - {x}) * (1.0f - {w}))";
            wgsl "select({e} - ({e} - {x}) * (1.0 - {w}), {x} + {w} * ({e} - {x}), abs({w}) < 0.5)";
        Addcmul { value = 1.0 } "addcmul" ["addcmul"] Keep |x, a, b| x + value * a * b;
            int |x, a, b| Ok(x.wrapping_add((value as i64).wrapping_mul(a).wrapping_mul(b)));
            cuda "{x} + {value} * {a} * {b}";
            wgsl "({x} + {value} * {a} * {b})";
        Addcdiv { value = 1.0 } "addcdiv" ["addcdiv"] Float |x, a, b| x + value * (a / b);
            cuda "{x} + {value} * ({a} / {b})";
            wgsl "({x} + {value} * ({a} / {b}))";
        /// NaN if x or a bound is NaN; `hi` wins when lo > hi. An absent bound is -inf/+inf.
        Clamp "clamp" [] Keep
            |x, lo, hi| if x.is_nan() || lo.is_nan() || hi.is_nan() { x + lo + hi } else { x.max(lo).min(hi) };
            int |x, lo, hi| Ok(x.max(lo).min(hi));
            cuda "(({x} != {x}) || ({lo} != {lo}) || ({hi} != {hi}) ? {x} + {lo} + {hi} : fminf(fmaxf({x}, {lo}), {hi}))";
            wgsl "p_clamp({x}, {lo}, {hi})";
    }
}

impl UnaryOp {
    /// Resolves dtype-dependent defaults for values of `dtype`: `nan_to_num`'s infinite
    /// `posinf`/`neginf` become the dtype's largest finite values (f32's for integers).
    pub fn for_dtype(self, dtype: crate::DType) -> UnaryOp {
        match self {
            UnaryOp::NanToNum {
                nan,
                posinf,
                neginf,
            } => {
                let max = max_finite(dtype);
                let fix = |v: f64| if v.is_infinite() { max.copysign(v) } else { v };
                UnaryOp::NanToNum {
                    nan,
                    posinf: fix(posinf),
                    neginf: fix(neginf),
                }
            }
            other => other,
        }
    }

    /// Whether a GEMM/conv epilogue may apply this op: a float result and no parameters
    /// (the CUDA epilogue selects it by [`UnaryOp::act_code`]).
    pub fn is_epilogue_act(&self) -> bool {
        !self.has_params() && self.rule() != super::Rule::Bool
    }

    /// A stable small integer naming a parameterless op (its row index).
    pub fn act_code(&self) -> i32 {
        UnaryOp::all()
            .iter()
            .position(|u| u.name() == self.name())
            .map_or(-1, |i| i as i32)
    }
}

/// The largest finite value of `dtype` (as f64).
pub fn max_finite(dtype: crate::DType) -> f64 {
    use crate::DType;
    match dtype {
        DType::BF16 => f64::from(f32::from_bits(0x7f7f_0000)),
        DType::F16 => 65504.0,
        DType::F64 => f64::MAX,
        _ => f64::from(f32::MAX),
    }
}

/// ATen's integer `pow`: a negative exponent gives 1 for base 1, +-1 for base -1 (by the
/// exponent's parity) and 0 otherwise (truncated 1/x^n); non-negative ones wrap.
fn int_pow(x: i64, y: i64) -> i64 {
    if y < 0 {
        return match x {
            1 => 1,
            -1 if y % 2 != 0 => -1,
            -1 => 1,
            _ => 0,
        };
    }
    x.wrapping_pow(y.min(u32::MAX as i64) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pointwise::Rule;

    #[test]
    fn names_and_aten_names_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for n in UnaryOp::all().iter().map(|u| u.name()) {
            assert!(seen.insert(n), "{n}");
        }
        let mut aten = std::collections::HashSet::new();
        for a in UnaryOp::all()
            .iter()
            .flat_map(|u| u.aten_names())
            .chain(BinaryOp::all().iter().flat_map(|b| b.aten_names()))
            .chain(TernaryOp::all().iter().flat_map(|t| t.aten_names()))
        {
            assert!(aten.insert(*a), "{a}");
        }
    }

    #[test]
    fn rows_evaluate_in_f32_f64_and_i64() {
        assert!(UnaryOp::Relu.eval([f32::NAN]).is_nan());
        assert_eq!(UnaryOp::Relu.eval([-2.0f64]), 0.0);
        assert_eq!(UnaryOp::Sign.eval([f32::NAN]), 0.0);
        assert!(BinaryOp::Max.eval([1.0f32, f32::NAN]).is_nan());
        assert_eq!(BinaryOp::Fmax.eval([1.0f32, f32::NAN]), 1.0);
        assert_eq!(BinaryOp::Ne.eval([f32::NAN, f32::NAN]), 1.0);
        assert_eq!(BinaryOp::DivFloor.eval_int([-7, 2]), Some(Ok(-4)));
        assert!(BinaryOp::Remainder.eval_int([1, 0]).unwrap().is_err());
        assert_eq!(UnaryOp::Sin.eval_int([1]), None);
        assert_eq!(UnaryOp::Sin.rule(), Rule::Float);
        let sp = UnaryOp::from_aten("softplus").unwrap();
        assert_eq!(
            sp,
            UnaryOp::Softplus {
                beta: 1.0,
                threshold: 20.0
            }
        );
        assert_eq!(sp.eval([30.0f32]), 30.0);
        let mut v = [1.0f32, -1.0, f32::NAN];
        UnaryOp::Relu.eval_block(&mut v, []);
        assert_eq!(&v[..2], &[1.0, 0.0]);
        assert!(v[2].is_nan());
        let mut a = [1.0f32, 5.0];
        TernaryOp::Clamp.eval_block(&mut a, [&[2.0, 2.0], &[3.0, 3.0]]);
        assert_eq!(a, [2.0, 3.0]);
    }

    #[test]
    fn cuda_text_substitutes_operands_and_params() {
        assert_eq!(BinaryOp::Add.cuda(["a0", "t1"]), "a0 + t1");
        let s = UnaryOp::LeakyRelu {
            negative_slope: 0.5,
        }
        .cuda(["a0"]);
        assert_eq!(s, "(a0 > 0.0f ? a0 : a0 * __int_as_float(1056964608))");
        for u in UnaryOp::all() {
            assert!(!u.cuda(["a0"]).contains('{') || u.cuda(["a0"]).contains("[&]"));
        }
    }

    #[test]
    fn nan_to_num_defaults_follow_the_dtype() {
        let u = UnaryOp::from_aten("nan_to_num")
            .unwrap()
            .for_dtype(crate::DType::BF16);
        assert_eq!(u.eval([f32::INFINITY]), f32::from_bits(0x7f7f_0000));
        assert_eq!(u.eval([f32::NEG_INFINITY]), -f32::from_bits(0x7f7f_0000));
        assert_eq!(u.eval([f32::NAN]), 0.0);
    }
}
