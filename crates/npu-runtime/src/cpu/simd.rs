//! The widest vector instruction set for the CPU kernels' auto-vectorized loops, chosen at
//! run time. The crate is built for baseline x86-64 (SSE2, 4 lanes), so a loop the compiler
//! vectorizes runs at a quarter of an AVX-512 core's width unless it is also compiled with
//! the wider features; [`multiversion!`] compiles a function's body three times (AVX-512,
//! AVX2+FMA, baseline) and calls the one the CPU supports. Results are bit-identical across
//! the three: Rust never contracts `a * b + c` into an FMA, so only the vector width changes.

use std::sync::OnceLock;

/// The instruction-set level a multiversioned function runs at, narrowest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Level {
    /// Whatever the build targets.
    Base,
    /// AVX2, FMA, F16C (x86-64-v3).
    V3,
    /// AVX-512 F/VL/BW/DQ with AVX2, FMA, F16C (x86-64-v4).
    V4,
}

/// This CPU's level, detected once. `NPU_CPU_LEVEL=v3` or `base` caps it (to compare, or to
/// run as a CPU without AVX-512 would).
pub(crate) fn level() -> Level {
    static LEVEL: OnceLock<Level> = OnceLock::new();
    *LEVEL.get_or_init(|| {
        let cap = match std::env::var("NPU_CPU_LEVEL").as_deref() {
            Ok("base") => Level::Base,
            Ok("v3") => Level::V3,
            _ => Level::V4,
        };
        detect().min(cap)
    })
}

#[cfg(target_arch = "x86_64")]
fn detect() -> Level {
    let v3 = is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("fma")
        && is_x86_feature_detected!("f16c");
    let v4 = v3
        && is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512vl")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512dq");
    if v4 {
        Level::V4
    } else if v3 {
        Level::V3
    } else {
        Level::Base
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn detect() -> Level {
    Level::Base
}

/// `multiversion! { pub(crate) fn name(arg: Type, ..) -> Ret { body } }`: `name` runs `body`
/// compiled for the CPU's [`level`]. The body is inlined into each variant, so everything it
/// calls that should vectorize must be `#[inline(always)]` (or small enough to inline).
macro_rules! multiversion {
    ($(#[$m:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block) => {
        $(#[$m])*
        $vis fn $name($($arg: $ty),*) $(-> $ret)? {
            #[inline(always)]
            fn body($($arg: $ty),*) $(-> $ret)? $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512dq,avx2,fma,f16c")]
                unsafe fn v4($($arg: $ty),*) $(-> $ret)? {
                    body($($arg),*)
                }
                #[target_feature(enable = "avx2,fma,f16c")]
                unsafe fn v3($($arg: $ty),*) $(-> $ret)? {
                    body($($arg),*)
                }
                match $crate::cpu::simd::level() {
                    // SAFETY: the CPU has every feature of the variant (detected at run time).
                    $crate::cpu::simd::Level::V4 => return unsafe { v4($($arg),*) },
                    // SAFETY: as above.
                    $crate::cpu::simd::Level::V3 => return unsafe { v3($($arg),*) },
                    $crate::cpu::simd::Level::Base => {}
                }
            }
            body($($arg),*)
        }
    };
}
pub(crate) use multiversion;

#[cfg(test)]
mod tests {
    use super::*;

    multiversion! {
        fn scaled_sum(a: &[f32], s: f32) -> f32 {
            a.iter().map(|x| x * s).sum()
        }
    }

    #[test]
    fn every_level_computes_the_same() {
        let a: Vec<f32> = (0..1000).map(|i| (i as f32).sin()).collect();
        let want: f32 = a.iter().map(|x| x * 0.5).sum();
        assert_eq!(scaled_sum(&a, 0.5), want);
        assert!(level() <= detect());
    }
}
