//! AVX2 blocks of decode attention over a bf16 KV cache (`attention_decode.rs`): up to 8 query
//! heads of a KV group at once, their partial sums in registers. Scores: each 8-element chunk
//! of a K row is widened once and multiplied into every head's accumulator. Outputs: for each
//! 8-dim chunk of the output, the slots' V chunks are widened once and added into every head's
//! accumulator with its probability. The portable path widened each row into a buffer and ran
//! one dot (or scaled add) per head, ~3x the multiply-adds' time.

use std::arch::x86_64::*;

/// The attended slots of one block: (slot, additive mask value).
type Slots<'a> = &'a [(u32, f32)];

/// Whether this CPU runs the blocks (AVX2 and FMA).
pub fn available() -> bool {
    use std::sync::OnceLock;
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"))
}

#[inline(always)]
unsafe fn widen8(p: *const u16) -> __m256 {
    _mm256_castsi256_ps(_mm256_slli_epi32(
        _mm256_cvtepu16_epi32(_mm_loadu_si128(p as *const __m128i)),
        16,
    ))
}

#[inline(always)]
unsafe fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)))
}

#[target_feature(enable = "avx2,fma")]
unsafe fn scores_g<const G: usize>(
    q: &[f32],
    k: *const u16,
    ks: usize,
    slots: Slots,
    scale: f32,
    p: &mut [f32],
    pstride: usize,
) {
    let d = q.len() / G;
    for (j, &(ti, mv)) in slots.iter().enumerate() {
        let kr = k.add(ti as usize * ks);
        let mut acc = [_mm256_setzero_ps(); G];
        for c in (0..d).step_by(8) {
            let w = widen8(kr.add(c));
            for (g, a) in acc.iter_mut().enumerate() {
                *a = _mm256_fmadd_ps(_mm256_loadu_ps(q.as_ptr().add(g * d + c)), w, *a);
            }
        }
        for (g, a) in acc.iter().enumerate() {
            p[j * pstride + g] = hsum(*a) * scale + mv;
        }
    }
}

#[target_feature(enable = "avx2,fma")]
unsafe fn outputs_g<const G: usize>(
    p: &[f32],
    pstride: usize,
    v: *const u16,
    vs: usize,
    slots: Slots,
    out: &mut [f32],
) {
    let d = out.len() / G;
    for c in (0..d).step_by(8) {
        let mut acc = [_mm256_setzero_ps(); G];
        for (j, &(ti, _)) in slots.iter().enumerate() {
            let w = widen8(v.add(ti as usize * vs + c));
            for (g, a) in acc.iter_mut().enumerate() {
                *a = _mm256_fmadd_ps(_mm256_set1_ps(p[j * pstride + g]), w, *a);
            }
        }
        for (g, a) in acc.iter().enumerate() {
            _mm256_storeu_ps(out.as_mut_ptr().add(g * d + c), *a);
        }
    }
}

/// `p[j * group + g] = (q_g . K[slot j]) * scale + mask_j` for the `group` heads in `q`
/// (group rows of d), K's rows at `k + slot * ks` (bf16, d contiguous elements each).
///
/// # Safety
/// [`available`]; d a multiple of 8; every listed slot's row lies in K's buffer; `p` holds
/// `slots.len() * group` values.
pub unsafe fn scores(
    q: &[f32],
    group: usize,
    k: *const u16,
    ks: usize,
    slots: Slots,
    scale: f32,
    p: &mut [f32],
) {
    let d = q.len() / group;
    let mut g0 = 0;
    while g0 < group {
        let hg = (group - g0).min(8);
        let (qg, pg) = (&q[g0 * d..(g0 + hg) * d], &mut p[g0..]);
        match hg {
            1 => scores_g::<1>(qg, k, ks, slots, scale, pg, group),
            2 => scores_g::<2>(qg, k, ks, slots, scale, pg, group),
            3 => scores_g::<3>(qg, k, ks, slots, scale, pg, group),
            4 => scores_g::<4>(qg, k, ks, slots, scale, pg, group),
            5 => scores_g::<5>(qg, k, ks, slots, scale, pg, group),
            6 => scores_g::<6>(qg, k, ks, slots, scale, pg, group),
            7 => scores_g::<7>(qg, k, ks, slots, scale, pg, group),
            _ => scores_g::<8>(qg, k, ks, slots, scale, pg, group),
        }
        g0 += hg;
    }
}

/// `out[g] = sum_j p[j * group + g] * V[slot j]` for the `group` heads (`out`: group rows of
/// d, overwritten), V's rows at `v + slot * vs` (bf16).
///
/// # Safety
/// As [`scores`], for V and `out`.
pub unsafe fn outputs(
    p: &[f32],
    group: usize,
    v: *const u16,
    vs: usize,
    slots: Slots,
    out: &mut [f32],
) {
    let d = out.len() / group;
    let mut g0 = 0;
    while g0 < group {
        let hg = (group - g0).min(8);
        let (pg, og) = (&p[g0..], &mut out[g0 * d..(g0 + hg) * d]);
        match hg {
            1 => outputs_g::<1>(pg, group, v, vs, slots, og),
            2 => outputs_g::<2>(pg, group, v, vs, slots, og),
            3 => outputs_g::<3>(pg, group, v, vs, slots, og),
            4 => outputs_g::<4>(pg, group, v, vs, slots, og),
            5 => outputs_g::<5>(pg, group, v, vs, slots, og),
            6 => outputs_g::<6>(pg, group, v, vs, slots, og),
            7 => outputs_g::<7>(pg, group, v, vs, slots, og),
            _ => outputs_g::<8>(pg, group, v, vs, slots, og),
        }
        g0 += hg;
    }
}
