//! f32 <-> f16 over whole slices with the CPU's F16C instructions, 32 elements a loop turn.
//!
//! `half`'s slice conversions (which use F16C too) went 4 elements at a time: a 224x224 f32
//! image (602 KB) took 39 us to convert on an AMD EPYC core, 13.5 us here; every CUDA
//! whole run converts its inputs so, on the host, before the graph can start. Results are
//! those of `half::f16::from_f32` / `to_f32` (round to nearest even, infinities kept), a NaN
//! stays a NaN. Without F16C (or with `NPU_CPU_LEVEL=base`), `half`'s conversions run.

use half::f16;
use half::slice::HalfFloatSliceExt;

/// `dst[i] = f16(src[i])` for the common length.
pub(crate) fn f32_to_f16(src: &[f32], dst: &mut [f16]) {
    to_f16(src, dst, false);
}

/// As [`f32_to_f16`], with non-temporal stores (past the few elements before the first
/// 16-byte boundary of `dst`), fenced before returning: for large destinations the CPU does
/// not read back, such as a GPU upload's staging. Such stores skip reading each destination
/// line before writing it, a quarter of a DRAM-bound conversion's memory traffic: ResNet-50
/// batch 64's 38.5 MB of f32 on two AMD EPYC threads took 10-37% less time in six runs
/// (medians of 30: 1.03-1.97 ms against 1.43-2.23; `examples/bench_upload_cast.rs`, a shared
/// and noisy machine). Destinations that fit in cache keep the plain stores: these send every
/// line to memory.
pub(crate) fn f32_to_f16_streaming(src: &[f32], dst: &mut [f16]) {
    to_f16(src, dst, true);
}

fn to_f16(src: &[f32], dst: &mut [f16], streaming: bool) {
    let n = src.len().min(dst.len());
    let (src, dst) = (&src[..n], &mut dst[..n]);
    #[cfg(target_arch = "x86_64")]
    if crate::cpu::simd::level() >= crate::cpu::simd::Level::V3 {
        // SAFETY: the CPU has AVX and F16C (level V3 and up, SSE2 with them); both slices
        // hold `n` elements.
        unsafe {
            if streaming {
                x86::f32_to_f16_streaming(src, dst)
            } else {
                x86::f32_to_f16(src, dst)
            }
        };
        return;
    }
    let _ = streaming; // off x86-64 (or below V3) the plain conversion serves both
    dst.convert_from_f32_slice(src);
}

/// `dst[i] = f32(src[i])` for the common length.
pub(crate) fn f16_to_f32(src: &[f16], dst: &mut [f32]) {
    let n = src.len().min(dst.len());
    let (src, dst) = (&src[..n], &mut dst[..n]);
    #[cfg(target_arch = "x86_64")]
    if crate::cpu::simd::level() >= crate::cpu::simd::Level::V3 {
        // SAFETY: as above.
        unsafe { x86::f16_to_f32(src, dst) };
        return;
    }
    src.convert_to_f32_slice(dst);
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use half::f16;
    use half::slice::HalfFloatSliceExt;
    use std::arch::x86_64::*;

    /// Elements a loop turn: four independent conversions in flight.
    const TURN: usize = 32;

    /// # Safety
    /// The CPU has AVX and F16C; `src` and `dst` have one length.
    #[target_feature(enable = "avx,f16c")]
    pub(super) unsafe fn f32_to_f16(src: &[f32], dst: &mut [f16]) {
        let n = src.len();
        let body = n / TURN * TURN;
        let (s, d) = (src.as_ptr(), dst.as_mut_ptr() as *mut __m128i);
        let mut i = 0;
        while i < body {
            // elements i..i + TURN lie inside both slices (i + TURN <= body <= n)
            for u in 0..TURN / 8 {
                let v = _mm256_loadu_ps(s.add(i + 8 * u));
                let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v);
                _mm_storeu_si128(d.add(i / 8 + u), h);
            }
            i += TURN;
        }
        dst[body..].convert_from_f32_slice(&src[body..]);
    }

    /// # Safety
    /// As [`f32_to_f16`].
    #[target_feature(enable = "avx,f16c")]
    pub(super) unsafe fn f32_to_f16_streaming(src: &[f32], dst: &mut [f16]) {
        let n = src.len();
        // elements before dst's first 16-byte boundary (f16 is 2-byte aligned: at most 7)
        let head = ((16 - (dst.as_ptr() as usize & 15)) & 15) / 2;
        let head = head.min(n);
        f32_to_f16(&src[..head], &mut dst[..head]);
        let body = head + (n - head) / TURN * TURN;
        let (s, d) = (src.as_ptr(), dst.as_mut_ptr());
        let mut i = head;
        while i < body {
            // elements i..i + TURN lie inside both slices, and dst + i is 16-byte aligned
            for u in 0..TURN / 8 {
                let v = _mm256_loadu_ps(s.add(i + 8 * u));
                let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v);
                _mm_stream_si128(d.add(i + 8 * u) as *mut __m128i, h);
            }
            i += TURN;
        }
        // the streamed stores visible before anything this thread stores or publishes next
        _mm_sfence();
        f32_to_f16(&src[body..], &mut dst[body..]);
    }

    /// # Safety
    /// As [`f32_to_f16`].
    #[target_feature(enable = "avx,f16c")]
    pub(super) unsafe fn f16_to_f32(src: &[f16], dst: &mut [f32]) {
        let n = src.len();
        let body = n / TURN * TURN;
        let (s, d) = (src.as_ptr() as *const __m128i, dst.as_mut_ptr());
        let mut i = 0;
        while i < body {
            // elements i..i + TURN lie inside both slices
            for u in 0..TURN / 8 {
                let h = _mm_loadu_si128(s.add(i / 8 + u));
                _mm256_storeu_ps(d.add(i + 8 * u), _mm256_cvtph_ps(h));
            }
            i += TURN;
        }
        src[body..].convert_to_f32_slice(&mut dst[body..]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bit patterns covering every exponent, ties, subnormals, infinities and NaNs.
    fn patterns() -> Vec<f32> {
        let mut v: Vec<f32> = (0..200_000u32)
            .map(|i| f32::from_bits(i.wrapping_mul(2_654_435_761)))
            .collect();
        v.extend([
            0.0,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            65504.0,
            65520.0,
            1.0 + 1.0 / 2048.0,
            1.0 + 3.0 / 2048.0,
            5.960_464_5e-8,
            2.980_232_2e-8,
        ]);
        v
    }

    #[test]
    fn f32_to_f16_matches_half_bit_for_bit() {
        let src = patterns();
        // lengths around the loop turn, so the scalar tail runs too
        for n in [src.len(), 31, 32, 33, 100] {
            let mut ours = vec![f16::ZERO; n];
            f32_to_f16(&src[..n], &mut ours);
            for (i, (&o, &x)) in ours.iter().zip(&src[..n]).enumerate() {
                let want = f16::from_f32(x);
                if x.is_nan() {
                    assert!(o.is_nan(), "element {i}: NaN became {o:?}");
                } else {
                    assert_eq!(o.to_bits(), want.to_bits(), "element {i}: {x:e}");
                }
            }
        }
    }

    #[test]
    fn streaming_f32_to_f16_matches_the_plain_conversion() {
        let src = patterns();
        let mut want = vec![f16::ZERO; src.len()];
        f32_to_f16(&src, &mut want);
        // destinations at every 2-byte offset from a 16-byte boundary, lengths around the
        // head and the loop turn
        let mut buf = vec![f16::ZERO; src.len() + 16];
        for off in 0..8 {
            for n in [0, 1, 5, 7, 8, 31, 32, 33, 39, 40, 1000, src.len()] {
                let dst = &mut buf[off..off + n];
                dst.fill(f16::from_bits(0x7e01));
                f32_to_f16_streaming(&src[..n], dst);
                let got: Vec<u16> = dst.iter().map(|h| h.to_bits()).collect();
                let exp: Vec<u16> = want[..n].iter().map(|h| h.to_bits()).collect();
                assert_eq!(got, exp, "offset {off}, {n} elements");
            }
        }
    }

    #[test]
    fn f16_to_f32_matches_half_for_every_f16() {
        let src: Vec<f16> = (0..=u16::MAX).map(f16::from_bits).collect();
        let mut ours = vec![0.0f32; src.len()];
        f16_to_f32(&src, &mut ours);
        for (&h, &o) in src.iter().zip(&ours) {
            if h.is_nan() {
                assert!(o.is_nan());
            } else {
                assert_eq!(o.to_bits(), h.to_f32().to_bits(), "{:#06x}", h.to_bits());
            }
        }
    }
}
