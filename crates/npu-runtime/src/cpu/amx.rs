//! bf16 GEMM on Intel AMX tiles (Sapphire Rapids and later), for prefill-sized matmuls over
//! bf16 weights: `c[m, n] = sum_k a[m, k] * w[n, k]`.
//!
//! The weight is the tile multiplicand read straight from memory (16 rows of N, 32 bf16 of K
//! each); the activations, small next to the weight, are packed once per call into the
//! pair-interleaved ("VNNI") layout AMX wants for its second operand. Each task owns 32
//! weight rows and computes `c^T` tiles for them over every row of `a`, so the 32 x K weight
//! panel stays in L2 while it is reused. Accumulation is f32 in the tiles.
//!
//! Availability is checked once: CPUID (AMX-TILE, AMX-BF16), the OS enabling tile state
//! (XCR0 bits 17-18) and Linux granting the process tile data (`arch_prctl`). Without all
//! three the caller keeps its portable path; `NPU_DISABLE_AMX=1` forces that.

#![allow(clippy::missing_safety_doc)]

use super::view::SendPtr;
use rayon::prelude::*;
use std::sync::OnceLock;

/// Rows of `a` handled per tile pair, and weight rows per task.
const MB: usize = 32;
const NB: usize = 32;
/// K elements per tile row (64 bytes of bf16).
const KB: usize = 32;

/// True when the AMX path can run in this process.
pub fn available() -> bool {
    static OK: OnceLock<bool> = OnceLock::new();
    *OK.get_or_init(|| std::env::var("NPU_DISABLE_AMX").map_or(true, |v| v != "1") && detect())
}

#[cfg(target_arch = "x86_64")]
fn detect() -> bool {
    use std::arch::x86_64::{__cpuid_count, _xgetbv};
    // SAFETY: cpuid is always available on x86-64; xgetbv only after the OSXSAVE check.
    unsafe {
        let leaf1 = __cpuid_count(1, 0);
        if leaf1.ecx & (1 << 27) == 0 {
            return false;
        }
        let l7 = __cpuid_count(7, 0);
        let (amx_bf16, amx_tile) = (l7.edx & (1 << 22) != 0, l7.edx & (1 << 24) != 0);
        if !(amx_bf16 && amx_tile) {
            return false;
        }
        let xcr0 = _xgetbv(0);
        if xcr0 & (0b11 << 17) != 0b11 << 17 {
            return false;
        }
        request_tile_permission()
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn detect() -> bool {
    false
}

/// Linux: `arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`, process-wide.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
unsafe fn request_tile_permission() -> bool {
    const SYS_ARCH_PRCTL: i64 = 158;
    const ARCH_REQ_XCOMP_PERM: i64 = 0x1023;
    const XFEATURE_XTILEDATA: i64 = 18;
    let ret: i64;
    std::arch::asm!(
        "syscall",
        inlateout("rax") SYS_ARCH_PRCTL => ret,
        in("rdi") ARCH_REQ_XCOMP_PERM,
        in("rsi") XFEATURE_XTILEDATA,
        lateout("rcx") _,
        lateout("r11") _,
        options(nostack)
    );
    ret == 0
}

#[cfg(all(target_arch = "x86_64", not(target_os = "linux")))]
unsafe fn request_tile_permission() -> bool {
    false
}

/// Whether [`gemm_bf16`] takes these sizes.
pub fn supports(m: usize, n: usize, k: usize) -> bool {
    m >= 16 && n.is_multiple_of(NB) && k.is_multiple_of(KB) && k > 0 && available()
}

/// Index of element (m, k) in the packed activations: per 16-row block and 32-wide K block,
/// a 16 x 32 tile whose row r holds, for each of 16 rows of `a`, the pair k = 2r, 2r + 1.
#[inline(always)]
fn packed_index(m: usize, k: usize, kblocks: usize) -> usize {
    let (mb, mm) = (m / 16, m % 16);
    let (kb, kk) = (k / KB, k % KB);
    ((mb * kblocks + kb) * 16 + kk / 2) * 32 + mm * 2 + kk % 2
}

/// Number of u16 elements [`gemm_bf16`] needs in `packed`.
pub fn packed_len(m: usize, k: usize) -> usize {
    m.div_ceil(MB) * MB * k
}

/// `c[i * n + j] = sum_k a[i * a_rs + k] * w[j * w_rs + k]` over bf16 bit patterns, c dense.
///
/// # Safety
/// `a` must address `m` rows of `k` bf16 with row stride `a_rs`, `w` `n` rows of `k` with
/// row stride `w_rs`; `c` holds `m * n`, `packed` at least [`packed_len`]; [`supports`] must
/// hold for (m, n, k).
#[allow(clippy::too_many_arguments)]
pub unsafe fn gemm_bf16(
    m: usize,
    n: usize,
    k: usize,
    a: *const u16,
    a_rs: usize,
    w: *const u16,
    w_rs: usize,
    c: &mut [f32],
    packed: &mut [u16],
) {
    let kblocks = k / KB;
    let mp = m.div_ceil(MB) * MB;
    let packed = &mut packed[..mp * k];
    let pp = SendPtr(packed.as_mut_ptr());
    let ap = SendPtr(a as *mut u16);
    (0..mp).into_par_iter().for_each(|i| {
        for kk in 0..k {
            let v = if i < m {
                *ap.get().add(i * a_rs + kk)
            } else {
                0
            };
            *pp.get().add(packed_index(i, kk, kblocks)) = v;
        }
    });
    let cp = SendPtr(c.as_mut_ptr());
    let wp = SendPtr(w as *mut u16);
    let packed_ptr = SendPtr(packed.as_mut_ptr());
    (0..n / NB).into_par_iter().for_each(|nb| {
        // f32 accumulators of this task's 32 weight rows x every row of `a`, one 32 x 32 block
        // per pair of 16-row activation blocks, n-major inside a block.
        super::view::with_scratch(0, NB * mp, |acc| {
            configure();
            let w0 = wp.get().add(nb * NB * w_rs);
            let w1 = w0.add(16 * w_rs);
            // K in chunks whose weight panel (32 x KCHUNK) and activation tiles stay in L2
            // while every activation block reuses them; partial sums wait in `acc`.
            let mut kc = 0;
            while kc < kblocks {
                let kn = KCHUNK.min(kblocks - kc);
                for mblk in 0..mp / MB {
                    let p0 = packed_ptr.get().add((mblk * 2 * kblocks + kc) * 512);
                    let p1 = p0.add(kblocks * 512);
                    let out = acc.as_mut_ptr().add(mblk * NB * MB);
                    block(
                        kn,
                        w0.add(kc * KB),
                        w1.add(kc * KB),
                        w_rs * 2,
                        p0,
                        p1,
                        out,
                        kc > 0,
                    );
                }
                kc += kn;
            }
            release();
            let n0 = nb * NB;
            for row in 0..m {
                let (mblk, mm) = (row / MB, row % MB);
                let blk = &acc[mblk * NB * MB..(mblk + 1) * NB * MB];
                let dst = cp.get().add(row * n + n0);
                for nn in 0..NB {
                    *dst.add(nn) = blk[nn * MB + mm];
                }
            }
        });
    });
}

/// K blocks (of 32) per chunk: a 32-row weight panel of 128 KiB.
const KCHUNK: usize = 64;

/// Tile palette 1: tmm0-3 accumulators (16 x 16 f32), tmm4-5 weight rows, tmm6-7 packed
/// activations (16 x 32 bf16 each). The configuration is per thread.
#[repr(C, align(64))]
struct TileConfig {
    palette: u8,
    start_row: u8,
    reserved: [u8; 14],
    colsb: [u16; 16],
    rows: [u8; 16],
}

unsafe fn configure() {
    let mut cfg = TileConfig {
        palette: 1,
        start_row: 0,
        reserved: [0; 14],
        colsb: [0; 16],
        rows: [0; 16],
    };
    for t in 0..8 {
        cfg.colsb[t] = 64;
        cfg.rows[t] = 16;
    }
    std::arch::asm!("ldtilecfg [{0}]", in(reg) &cfg as *const TileConfig, options(nostack));
}

unsafe fn release() {
    std::arch::asm!("tilerelease", options(nostack, nomem));
}

/// out[32 n x 32 m] (f32, n-major) (+)= W[32 rows, K] x packed[two 16-row blocks]: starts
/// from zero, or from `out` when `accumulate`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn block(
    kblocks: usize,
    w0: *const u16,
    w1: *const u16,
    w_stride_bytes: usize,
    p0: *const u16,
    p1: *const u16,
    out: *mut f32,
    accumulate: bool,
) {
    use std::arch::asm;
    let stride = MB * 4;
    if accumulate {
        asm!(
            "tileloadd tmm0, [{o0} + {s}*1]",
            "tileloadd tmm1, [{o1} + {s}*1]",
            "tileloadd tmm2, [{o2} + {s}*1]",
            "tileloadd tmm3, [{o3} + {s}*1]",
            o0 = in(reg) out,
            o1 = in(reg) out.add(16),
            o2 = in(reg) out.add(16 * MB),
            o3 = in(reg) out.add(16 * MB + 16),
            s = in(reg) stride,
            options(nostack, readonly)
        );
    } else {
        asm!(
            "tilezero tmm0",
            "tilezero tmm1",
            "tilezero tmm2",
            "tilezero tmm3",
            options(nostack, nomem)
        );
    }
    for kb in 0..kblocks {
        let (a0, a1) = (w0.add(kb * KB), w1.add(kb * KB));
        let (b0, b1) = (p0.add(kb * 512), p1.add(kb * 512));
        asm!(
            // Loads interleaved with the products that need them, so a tile register is
            // refilled while the others still compute (about +20% measured over grouping
            // the four loads first).
            "tileloadd tmm4, [{a0} + {s}*1]",
            "tileloadd tmm6, [{b0} + {bs}*1]",
            "tdpbf16ps tmm0, tmm4, tmm6",
            "tileloadd tmm7, [{b1} + {bs}*1]",
            "tdpbf16ps tmm1, tmm4, tmm7",
            "tileloadd tmm5, [{a1} + {s}*1]",
            "tdpbf16ps tmm2, tmm5, tmm6",
            "tdpbf16ps tmm3, tmm5, tmm7",
            a0 = in(reg) a0,
            a1 = in(reg) a1,
            b0 = in(reg) b0,
            b1 = in(reg) b1,
            s = in(reg) w_stride_bytes,
            bs = in(reg) 64usize,
            options(nostack, readonly)
        );
    }
    // tmm0: n 0-15 x m 0-15, tmm1: n 0-15 x m 16-31, tmm2: n 16-31 x m 0-15, tmm3: n 16-31 x m 16-31.
    asm!(
        "tilestored [{o0} + {s}*1], tmm0",
        "tilestored [{o1} + {s}*1], tmm1",
        "tilestored [{o2} + {s}*1], tmm2",
        "tilestored [{o3} + {s}*1], tmm3",
        o0 = in(reg) out,
        o1 = in(reg) out.add(16),
        o2 = in(reg) out.add(16 * MB),
        o3 = in(reg) out.add(16 * MB + 16),
        s = in(reg) stride,
        options(nostack)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bf16(x: f32) -> u16 {
        half::bf16::from_f32(x).to_bits()
    }

    #[test]
    fn matches_a_reference_on_odd_row_counts() {
        if !available() {
            // scripts/test.sh counts this line as a skip, not a pass.
            println!("SKIP: matches_a_reference_on_odd_row_counts: no AMX on this CPU");
            return;
        }
        // The last case spans two K chunks (64 blocks of 32), so partial sums are reloaded.
        for (m, n, k) in [(16, 32, 32), (37, 64, 96), (128, 96, 256), (48, 64, 2112)] {
            let mut seed = 7u32;
            let mut rnd = || {
                seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                (seed >> 9) as f32 / (1u32 << 23) as f32 - 0.5
            };
            let a_rs = k + 8;
            let a: Vec<u16> = (0..m * a_rs).map(|_| bf16(rnd())).collect();
            let w: Vec<u16> = (0..n * k).map(|_| bf16(rnd())).collect();
            let mut c = vec![0f32; m * n];
            let mut packed = vec![0u16; packed_len(m, k)];
            assert!(supports(m, n, k));
            unsafe {
                gemm_bf16(
                    m,
                    n,
                    k,
                    a.as_ptr(),
                    a_rs,
                    w.as_ptr(),
                    k,
                    &mut c,
                    &mut packed,
                )
            };
            let f = |b: u16| f32::from_bits(u32::from(b) << 16);
            for i in 0..m {
                for j in 0..n {
                    let want: f32 = (0..k)
                        .map(|kk| f(a[i * a_rs + kk]) * f(w[j * k + kk]))
                        .sum();
                    assert!(
                        (c[i * n + j] - want).abs() < 1e-3,
                        "({m},{n},{k}) c[{i},{j}] = {} vs {want}",
                        c[i * n + j]
                    );
                }
            }
        }
    }
}
