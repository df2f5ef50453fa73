//! f32 GEMMs whose B is a whole constant weight, packed once at prepare (`layout.rs`) into
//! the panels the AVX2 microkernel reads ([`gemm_packed_avx2`](super::gemm_packed_avx2)).
//! The `gemm` crate packs B again on every call: for ViT's linears, 13% of the run on the
//! Xeon (perf), and it reached 60-70 GFLOP/s per core on an AVX2-only AMD EPYC.
//!
//! **Packed layout.** B [K, N] is cut into ceil(N / 16) column panels; panel p holds columns
//! 16 p .. 16 p + 15 as K rows of 16 floats (k-major), zero-filled past N, and the panels
//! follow each other: element (k, j) sits at `(j / 16) * 16 K + 16 k + j % 16`. Each panel
//! row is one 64-byte line when the panels start on a 64-byte boundary, which they do: they
//! begin at the first such boundary in their buffer ([`packed_len`] floats leave room for
//! that), and since a weight's buffer never moves, the run finds the same offset again.
//!
//! **Blocking.** K runs in blocks of at most [`KC`] (split evenly, so no short tail block):
//! one panel's block (KC x 16 floats, 16 KB at 256) stays in L1 while every 6-row tile of the
//! row block passes over it, and the row block's A (at most [`MC_PANELS`] x 6 rows x KC) and
//! its C stay in L2 (Zen 4: 1 MB per core) across the panels and the K blocks. Threads take
//! independent (row block, column chunk) pieces of C, each with the whole of K, so no two
//! write the same element and each weight column is read by one thread. While a panel's
//! block is in use, the next one and each tile's C rows are prefetched: B comes from L3 or
//! memory once per piece, and C of N = 3072 outgrows L2 (the probe below, one thread,
//! medians of 15 rounds on ViT's four shapes: 63-73 -> 68-79 GFLOP/s with B's prefetch; C's
//! added 0-5% where N >= 2304 and nothing measurable elsewhere).

use super::view::SendPtr;
use rayon::prelude::*;

#[cfg(target_arch = "x86_64")]
use super::gemm_packed_avx2::{prefetch, tile, Tile};

/// Columns per panel (the microkernel's tile width).
pub(crate) const NR: usize = 16;
/// Rows per tile.
const MR: usize = 6;
/// The longest K block.
const KC: usize = 256;
/// The most 6-row panels in one row block (A block 288 x KC floats, 288 KB at KC = 256).
const MC_PANELS: usize = 48;
/// The most floats of C one piece of work covers (128 KB), so that C stays in L2 across the
/// K blocks beside A's block.
const C_FLOATS: usize = 32 * 1024;
/// Floats of slack in front of the panels, to start them on a 64-byte boundary.
const ALIGN_SLACK: usize = 16;

#[cfg(target_arch = "x86_64")]
const _: () = assert!(
    NR == super::gemm_packed_avx2::NR && MR == super::gemm_packed_avx2::MR,
    "the driver's tile shape is the microkernel's"
);

/// Whether f32 weights are packed at prepare and their GEMMs run here: x86-64 at the AVX2+FMA
/// level without AVX-512 (`simd::level()`, detected once; `NPU_CPU_LEVEL=v3` selects it on
/// an AVX-512 machine too, `base` turns it off). CPUs with AVX-512 keep the `gemm` crate
/// (and its AVX-512 kernels): this kernel was only measured on an AVX2-only AMD EPYC.
pub(crate) fn enabled() -> bool {
    cfg!(target_arch = "x86_64") && super::simd::level() == super::simd::Level::V3
}

/// Floats a packed [k, n] B takes, alignment slack included.
pub(crate) fn packed_len(k: usize, n: usize) -> usize {
    n.div_ceil(NR) * NR * k + ALIGN_SLACK
}

/// Offset in floats from a packed buffer's start to its first panel (its first 64-byte
/// boundary).
fn panels_offset(buf: *const f32) -> usize {
    buf.align_offset(64)
}

/// Packs B = Wᵀ, W [n, k] row-major (a linear's weight as stored), into `dst` in the layout
/// of the module docs. `dst` must be at least [`packed_len`] long; the floats it holds in
/// front of the panels or past them are left as they are.
pub(crate) fn pack_transposed(w: &[f32], k: usize, n: usize, dst: &mut [f32]) {
    assert!(w.len() >= n * k && dst.len() >= packed_len(k, n));
    let start = panels_offset(dst.as_ptr());
    let panels = &mut dst[start..start + n.div_ceil(NR) * NR * k];
    for (p, panel) in panels.chunks_exact_mut(NR * k).enumerate() {
        let cols = NR.min(n - p * NR);
        for jj in 0..cols {
            let col = &w[(p * NR + jj) * k..(p * NR + jj + 1) * k];
            for (kk, &v) in col.iter().enumerate() {
                panel[kk * NR + jj] = v;
            }
        }
        // the last panel's columns past N: zeros, so its tiles sum nothing there
        for row in panel.chunks_exact_mut(NR) {
            row[cols..].fill(0.0);
        }
    }
}

/// A packed B at run time: the panels' start and the logical shape [k, n].
#[derive(Clone, Copy)]
pub(crate) struct PackedB {
    panels: *const f32,
    k: usize,
    n: usize,
}

impl PackedB {
    /// The packed B [k, n] in the buffer starting at `buf`.
    ///
    /// # Safety
    /// `buf` is the start of a buffer (at the same address) that [`pack_transposed`] filled
    /// for this `k` and `n`, and it outlives every use of the result.
    pub(crate) unsafe fn at(buf: *const f32, k: usize, n: usize) -> PackedB {
        PackedB {
            panels: buf.add(panels_offset(buf)),
            k,
            n,
        }
    }
}

/// How a product is cut up (the constants above; the tests and the timing probe vary them).
#[derive(Clone, Copy, Debug)]
struct Blocking {
    kc: usize,
    mc_panels: usize,
    /// The most floats of C one piece covers.
    c_floats: usize,
}

const BLOCKING: Blocking = Blocking {
    kc: KC,
    mc_panels: MC_PANELS,
    c_floats: C_FLOATS,
};

/// C[m, n] = A[m, k] · B (overwrites C). A's rows are `lda` floats apart with unit column
/// stride; C's elements are `rs` and `cs` floats apart (a unit `cs` takes the vector stores).
///
/// # Safety
/// The CPU has AVX2 and FMA (true wherever [`enabled`] is); `b` is valid with `b.k == k`
/// and `b.n == n`; A addresses m rows of k readable floats; C's m x n elements are valid for
/// writes, distinct, and overlap neither operand.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn matmul(
    m: usize,
    n: usize,
    k: usize,
    a: *const f32,
    lda: usize,
    b: PackedB,
    c: *mut f32,
    rs: isize,
    cs: isize,
) {
    matmul_with(BLOCKING, m, n, k, a, lda, b, c, rs, cs)
}

/// [`matmul`] with the given blocking.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
unsafe fn matmul_with(
    bl: Blocking,
    m: usize,
    n: usize,
    k: usize,
    a: *const f32,
    lda: usize,
    b: PackedB,
    c: *mut f32,
    rs: isize,
    cs: isize,
) {
    debug_assert!(b.k == k && b.n == n);
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        super::gemm::zero(m, n, c, rs, cs);
        return;
    }
    let kc = k.div_ceil(k.div_ceil(bl.kc));
    let m_panels = m.div_ceil(MR);
    let mut block_panels = m_panels.div_ceil(m_panels.div_ceil(bl.mc_panels.max(1)));
    let n_panels = n.div_ceil(NR);
    let threads = rayon::current_num_threads().max(1);
    let parallel = threads > 1 && m * n * k >= 48 * 48 * 48;
    // Column chunks: as many panels as keep a piece's C within budget; in parallel, about
    // four pieces per thread (rayon balances them), of at least two panels each, and more row
    // blocks where the columns alone do not make that many pieces.
    let mut chunk = (bl.c_floats / (block_panels * MR * NR)).clamp(1, n_panels);
    if parallel {
        let pieces = 4 * threads;
        let m_blocks = m_panels.div_ceil(block_panels);
        chunk = chunk.min(n_panels.div_ceil(pieces.div_ceil(m_blocks)).max(2));
        let n_chunks = n_panels.div_ceil(chunk);
        if m_blocks * n_chunks < pieces {
            block_panels = m_panels.div_ceil(pieces.div_ceil(n_chunks).min(m_panels));
        }
    }
    let m_blocks = m_panels.div_ceil(block_panels);
    let n_chunks = n_panels.div_ceil(chunk);
    let (ap, bp, cp) = (
        SendPtr(a as *mut f32),
        SendPtr(b.panels as *mut f32),
        SendPtr(c),
    );
    let piece = |pi: usize| {
        let (mb, nb) = (pi / n_chunks, pi % n_chunks);
        let panels_m = mb * block_panels..((mb + 1) * block_panels).min(m_panels);
        let panels_n = nb * chunk..((nb + 1) * chunk).min(n_panels);
        let mut k0 = 0;
        while k0 < k {
            let kl = kc.min(k - k0);
            for p in panels_n.clone() {
                // SAFETY: panel p's rows k0..k0 + kl lie in the packed panels (p < n_panels),
                // 64-byte aligned as every panel row is.
                let bpanel = bp.get().add(p * NR * k + k0 * NR);
                // The block of B this piece reads next, fetched a few lines per tile (one
                // line per k) while this one is in use. Only over eight or more tiles: over
                // fewer, the bursts cost more than they save (M = 4 and 16 on ConvNeXt's
                // shapes), and B is read as a plain stream anyway.
                let next = if panels_m.len() < 8 {
                    None
                } else if p + 1 < panels_n.end {
                    Some((bpanel.add(NR * k), kl))
                } else if k0 + kl < k {
                    let nk = kc.min(k - k0 - kl);
                    Some((bp.get().add(panels_n.start * NR * k + (k0 + kl) * NR), nk))
                } else {
                    None
                };
                let per_tile = next.map_or(0, |(_, nk)| nk.div_ceil(panels_m.len()));
                for (ti, ip) in panels_m.clone().enumerate() {
                    if let Some((nb, nk)) = next {
                        for line in (ti * per_tile)..((ti + 1) * per_tile).min(nk) {
                            prefetch(nb.add(line * NR));
                        }
                    }
                    let r0 = ip * MR;
                    // C's rows too (two lines each unless 64-byte aligned): the tile
                    // stores them after its whole K block, and most are not in cache.
                    if cs == 1 {
                        for r in r0..(r0 + MR).min(m) {
                            let row = cp.get().offset(r as isize * rs + (p * NR) as isize);
                            prefetch(row);
                            // past C's end in a narrow last panel: wrapping, never read
                            prefetch(row.wrapping_add(NR - 1));
                        }
                    }
                    let tile_c = Tile {
                        c: cp.get().offset(r0 as isize * rs + (p * NR) as isize * cs),
                        rs,
                        cs,
                        rows: MR.min(m - r0),
                        cols: NR.min(n - p * NR),
                        accumulate: k0 > 0,
                    };
                    // SAFETY: rows r0.. of A hold k0 + kl floats; the tile lies in C and
                    // only this piece writes it; the CPU has AVX2+FMA (the contract).
                    tile(kl, ap.get().add(r0 * lda + k0), lda, bpanel, &tile_c);
                }
            }
            k0 += kl;
        }
    };
    let pieces = m_blocks * n_chunks;
    if parallel && pieces > 1 {
        (0..pieces).into_par_iter().for_each(piece);
    } else {
        (0..pieces).for_each(piece);
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    /// Deterministic values in [-1, 1) (a small LCG), so failures reproduce.
    fn values(len: usize, seed: u64) -> Vec<f32> {
        let mut s = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (0..len)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    fn packed(w: &[f32], k: usize, n: usize) -> Vec<f32> {
        let mut buf = vec![f32::NAN; packed_len(k, n)];
        pack_transposed(w, k, n, &mut buf);
        buf
    }

    /// The kernel runs wherever the CPU has AVX2 and FMA, dispatched there or not (an
    /// AVX-512 machine keeps the `gemm` crate but still tests this kernel).
    fn skip() -> bool {
        let runs = is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma");
        if !runs {
            eprintln!("skipped: this CPU lacks AVX2 or FMA, which the packed GEMM needs");
        }
        !runs
    }

    /// C = A · Wᵀ over awkward shapes, against sums in f64. Bound: the f32 result of a k-term
    /// dot product accumulated with FMAs (one rounding per term; K blocks only regroup the
    /// sum) lies within gamma_k = k u / (1 - k u) of sum |a_i b_i|, u = 2^-24 (Higham,
    /// Accuracy and Stability, 3.1); the test allows (k + 1) u of it.
    #[test]
    fn matches_f64_reference_on_awkward_shapes() {
        if skip() {
            return;
        }
        let small = Blocking {
            kc: 64,
            mc_panels: 2,
            c_floats: 1,
        };
        for &m in &[1, 2, 5, 6, 7, 13, 197] {
            for &n in &[1, 15, 16, 17, 33, 768 + 5] {
                for &k in &[1, 7, 64, 255, 768] {
                    let lda = k + 3; // rows of A not contiguous with each other
                    let a = values(m * lda, (m * 31 + k) as u64);
                    let w = values(n * k, (n * 17 + k) as u64);
                    let buf = packed(&w, k, n);
                    // the f64 sums and sum |a_i b_i| per element
                    let mut want = vec![(0f64, 0f64); m * n];
                    for i in 0..m {
                        for j in 0..n {
                            for kk in 0..k {
                                let p = f64::from(a[i * lda + kk]) * f64::from(w[j * k + kk]);
                                want[i * n + j].0 += p;
                                want[i * n + j].1 += p.abs();
                            }
                        }
                    }
                    for bl in [BLOCKING, small] {
                        let mut c = vec![f32::NAN; m * n];
                        // SAFETY: the buffers are sized for these shapes; AVX2 checked.
                        unsafe {
                            let b = PackedB::at(buf.as_ptr(), k, n);
                            let cp = c.as_mut_ptr();
                            matmul_with(bl, m, n, k, a.as_ptr(), lda, b, cp, n as isize, 1);
                        }
                        for (e, (&got, &(want, mag))) in c.iter().zip(&want).enumerate() {
                            let tol = (k as f64 + 1.0) * 2f64.powi(-24) * mag;
                            assert!(
                                (f64::from(got) - want).abs() <= tol,
                                "{m}x{n}x{k} {bl:?} ({}, {}): {got} vs {want} (tol {tol})",
                                e / n,
                                e % n
                            );
                        }
                    }
                }
            }
        }
    }

    /// A column-strided C (the transposed store) and a single thread get the same values as
    /// the dense, threaded run: each element's sum is the same sequence of operations.
    #[test]
    fn strided_c_and_threads_give_identical_values() {
        if skip() {
            return;
        }
        let (m, n, k) = (61, 50, 300);
        let a = values(m * k, 1);
        let w = values(n * k, 2);
        let buf = packed(&w, k, n);
        let mut dense = vec![0f32; m * n];
        let mut transposed = vec![0f32; m * n];
        // SAFETY: as above.
        unsafe {
            let b = PackedB::at(buf.as_ptr(), k, n);
            matmul(m, n, k, a.as_ptr(), k, b, dense.as_mut_ptr(), n as isize, 1);
            let one = rayon::ThreadPoolBuilder::new()
                .num_threads(1)
                .build()
                .expect("pool");
            let tp = SendPtr(transposed.as_mut_ptr());
            let (a, buf) = (&a, &buf);
            one.install(|| {
                let b = PackedB::at(buf.as_ptr(), k, n);
                matmul(m, n, k, a.as_ptr(), k, b, tp.get(), 1, m as isize)
            });
        }
        for i in 0..m {
            for j in 0..n {
                assert_eq!(dense[i * n + j], transposed[j * m + i], "({i}, {j})");
            }
        }
    }

    /// Timing probe against the `gemm` crate (B row-major, as the transposed weights were) on
    /// ViT-B's linear shapes; not a check. 15 rounds alternate the two (this VM's speed
    /// drifts), each prints the median and best round's GFLOP/s:
    /// `RAYON_NUM_THREADS=1 cargo test --release -p npu-runtime probe_vit -- --ignored
    /// --nocapture`. `PROBE_SHAPES="m,k,n;.."` times other shapes, `PROBE_BLOCKINGS="kc,
    /// mc_panels,c_floats;.."` other blockings beside the default.
    #[test]
    #[ignore]
    fn probe_vit_shapes() {
        if skip() {
            return;
        }
        let parse = |v: &str| -> Vec<usize> {
            v.split(',')
                .map(|x| x.trim().parse().expect("a number"))
                .collect()
        };
        let shapes: Vec<Vec<usize>> = match std::env::var("PROBE_SHAPES") {
            Ok(v) => v.split(';').map(parse).collect(),
            Err(_) => vec![
                vec![197, 768, 2304],
                vec![197, 768, 768],
                vec![197, 768, 3072],
                vec![197, 3072, 768],
            ],
        };
        let mut blockings = vec![BLOCKING];
        if let Ok(v) = std::env::var("PROBE_BLOCKINGS") {
            for b in v.split(';') {
                let x = parse(b);
                blockings.push(Blocking {
                    kc: x[0],
                    mc_panels: x[1],
                    c_floats: x[2],
                });
            }
        }
        let (reps, rounds) = (10, 15);
        for sh in &shapes {
            let (m, k, n) = (sh[0], sh[1], sh[2]);
            let a = values(m * k, 3);
            let w = values(n * k, 4);
            let buf = packed(&w, k, n);
            let mut row_major = vec![0f32; k * n];
            for j in 0..n {
                for kk in 0..k {
                    row_major[kk * n + j] = w[j * k + kk];
                }
            }
            let mut c = vec![0f32; m * n];
            let cp = c.as_mut_ptr();
            let flop = 2.0 * (m * n * k) as f64 * reps as f64;
            let time = |f: &mut dyn FnMut()| {
                f();
                let t = std::time::Instant::now();
                for _ in 0..reps {
                    f();
                }
                flop / t.elapsed().as_secs_f64() / 1e9
            };
            let lhs = crate::cpu::gemm::Mat {
                ptr: a.as_ptr(),
                rs: k as isize,
                cs: 1,
            };
            let rhs = crate::cpu::gemm::Mat {
                ptr: row_major.as_ptr(),
                rs: n as isize,
                cs: 1,
            };
            let mut gf = vec![vec![]; blockings.len() + 1];
            for _ in 0..rounds {
                // SAFETY: as above.
                gf[0].push(time(&mut || unsafe {
                    crate::cpu::gemm::matmul(m, n, k, cp, n as isize, 1, lhs, rhs)
                }));
                for (bi, &bl) in blockings.iter().enumerate() {
                    // SAFETY: as above.
                    gf[bi + 1].push(time(&mut || unsafe {
                        let b = PackedB::at(buf.as_ptr(), k, n);
                        matmul_with(bl, m, n, k, a.as_ptr(), k, b, cp, n as isize, 1)
                    }));
                }
            }
            let median = |v: &mut Vec<f64>| {
                v.sort_by(f64::total_cmp);
                format!("{:.1} (best {:.1})", v[v.len() / 2], v[v.len() - 1])
            };
            let mut line = format!(
                "{m}x{k}x{n}, {} threads: gemm crate {}",
                rayon::current_num_threads(),
                median(&mut gf[0])
            );
            for (bi, bl) in blockings.iter().enumerate() {
                line += &format!(
                    ", packed {}/{}/{} {}",
                    bl.kc,
                    bl.mc_panels,
                    bl.c_floats,
                    median(&mut gf[bi + 1])
                );
            }
            eprintln!("{line} GFLOP/s");
        }
    }
}
