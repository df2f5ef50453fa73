//! The AVX2+FMA microkernel of [`super::gemm_packed`]: one 6 x 16 tile of C held in twelve
//! ymm accumulators (two per row) over a K block. Per k it loads the 16 floats of B's panel
//! row (two aligned loads), broadcasts one float of each of the six A rows and issues twelve
//! FMAs: 15 of the 16 ymm registers in use, and two FMA ports kept busy by twelve independent
//! chains (FMA latency 4, so at least 8 chains are needed to hide it).
//!
//! A is read in place (six rows `lda` apart, unit column stride): the driver does not pack it,
//! since A changes every call and is small beside the work (ViT's 197 x 768 A feeds 197 x 768 x
//! 3072 multiply-adds).

use std::arch::x86_64::*;

/// Rows of C per tile.
pub(super) const MR: usize = 6;
/// Columns of C per tile, the width of one packed B panel.
pub(super) const NR: usize = 16;

/// Where one tile's results go: `rows` x `cols` (at most MR x NR) elements of C from `c`,
/// `rs` / `cs` floats apart; `accumulate` adds them to what C holds (K blocks after the
/// first), otherwise they overwrite it.
pub(super) struct Tile {
    pub c: *mut f32,
    pub rs: isize,
    pub cs: isize,
    pub rows: usize,
    pub cols: usize,
    pub accumulate: bool,
}

/// C tile (+)= A[rows, kc] · B[kc, 16].
///
/// Rows past `rows` read row 0 again (their sums are computed and dropped), so a short last
/// row panel needs no separate kernel and never reads past A.
///
/// # Safety
/// The CPU has AVX2 and FMA. `a` addresses `t.rows` (1..=MR) rows `lda` floats apart, each
/// with `kc` readable floats; `b` is 32-byte aligned with `kc * NR` readable floats (16 per
/// k); the tile's `rows x cols` elements of C are valid for reads and writes, and no other
/// thread accesses them during the call.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn tile(kc: usize, a: *const f32, lda: usize, b: *const f32, t: &Tile) {
    debug_assert!((1..=MR).contains(&t.rows) && (1..=NR).contains(&t.cols));
    debug_assert!((b as usize).is_multiple_of(32));
    let row = |i: usize| if i < t.rows { a.add(i * lda) } else { a };
    let (a0, a1, a2, a3, a4, a5) = (row(0), row(1), row(2), row(3), row(4), row(5));
    let mut acc = [_mm256_setzero_ps(); 2 * MR];
    for kk in 0..kc {
        // SAFETY: kk < kc, so every read lies in the rows and the panel (the contract).
        let bp = b.add(kk * NR);
        let b0 = _mm256_load_ps(bp);
        let b1 = _mm256_load_ps(bp.add(8));
        // Written out per row (not a loop over an array of row pointers) so the accumulators
        // stay in registers.
        macro_rules! fma_row {
            ($r:expr, $p:expr) => {
                let x = _mm256_broadcast_ss(&*$p.add(kk));
                acc[2 * $r] = _mm256_fmadd_ps(x, b0, acc[2 * $r]);
                acc[2 * $r + 1] = _mm256_fmadd_ps(x, b1, acc[2 * $r + 1]);
            };
        }
        fma_row!(0, a0);
        fma_row!(1, a1);
        fma_row!(2, a2);
        fma_row!(3, a3);
        fma_row!(4, a4);
        fma_row!(5, a5);
    }
    if t.rows == MR && t.cols == NR && t.cs == 1 {
        // A whole tile over unit-stride rows: straight vector stores.
        for (r, pair) in acc.chunks_exact(2).enumerate() {
            let cp = t.c.offset(r as isize * t.rs);
            let (mut lo, mut hi) = (pair[0], pair[1]);
            if t.accumulate {
                lo = _mm256_add_ps(lo, _mm256_loadu_ps(cp));
                hi = _mm256_add_ps(hi, _mm256_loadu_ps(cp.add(8)));
            }
            _mm256_storeu_ps(cp, lo);
            _mm256_storeu_ps(cp.add(8), hi);
        }
        return;
    }
    // An edge tile or strided C: through a buffer, element by element.
    let mut buf = [0f32; MR * NR];
    for (r, pair) in acc.chunks_exact(2).enumerate() {
        _mm256_storeu_ps(buf.as_mut_ptr().add(r * NR), pair[0]);
        _mm256_storeu_ps(buf.as_mut_ptr().add(r * NR + 8), pair[1]);
    }
    for r in 0..t.rows {
        for j in 0..t.cols {
            let cp = t.c.offset(r as isize * t.rs + j as isize * t.cs);
            let v = buf[r * NR + j];
            *cp = if t.accumulate { *cp + v } else { v };
        }
    }
}

/// Asks for the cache line holding `p` (a hint: never faults, whatever `p` is).
#[inline(always)]
pub(super) fn prefetch(p: *const f32) {
    // SAFETY: a prefetch has no architectural effect (SSE, part of x86-64's baseline).
    unsafe { _mm_prefetch::<_MM_HINT_T0>(p as *const i8) };
}
