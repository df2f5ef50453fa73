//! Batched GEMM with bias and activation epilogue. f32 operands go straight to the `gemm`
//! crate (any strides); f16/bf16 operands are converted to f32 in tiles (A whole, B in
//! column panels), so a bf16 weight is never converted whole. M <= 4 with B contiguous
//! along K takes a multi-threaded, bandwidth-bound GEMV that converts B on the fly. bf16 x
//! bf16 with M >= 16 runs on AMX tiles where the CPU has them ([`amx`]). An f32 weight B
//! packed at prepare runs on [`gemm_packed`]'s AVX2 kernel on CPUs with AVX2+FMA and without
//! AVX-512 ([`gemm_packed::enabled`]); AVX-512 machines keep the `gemm` crate, since the
//! packed kernel was measured only on an AVX2-only AMD EPYC.

use super::amx;
use super::dot::{dot_bf16, dot_f16, dot_f32};
use super::gemm_packed;
use super::view::{offset_in, with_scratch, SendPtr, View};
use half::f16;
use npu_ir::{DType, UnaryOp};
use npu_program::expr::round_to;
use rayon::prelude::*;

/// A dense or strided f32 matrix for the `gemm` crate.
#[derive(Clone, Copy)]
pub struct Mat {
    pub ptr: *const f32,
    pub rs: isize,
    pub cs: isize,
}

/// dst[m, n] = sum_k lhs[m, k] * rhs[k, n] (overwrites dst).
///
/// # Safety
/// Every pointer with its strides must address valid memory for the given sizes, and dst
/// must not overlap the operands.
#[allow(clippy::too_many_arguments)]
pub unsafe fn matmul(
    m: usize,
    n: usize,
    k: usize,
    dst: *mut f32,
    d_rs: isize,
    d_cs: isize,
    lhs: Mat,
    rhs: Mat,
) {
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        zero(m, n, dst, d_rs, d_cs);
        return;
    }
    let threads = rayon::current_num_threads();
    let par = if m * n * k >= 48 * 48 * 48 && threads > 1 {
        gemm::Parallelism::Rayon(threads)
    } else {
        gemm::Parallelism::None
    };
    gemm::gemm(
        m, n, k, dst, d_cs, d_rs, false, lhs.ptr, lhs.cs, lhs.rs, rhs.ptr, rhs.cs, rhs.rs, 0.0f32,
        1.0f32, false, false, false, par,
    );
}

/// dst[m, n] = 0: the product over an empty K.
///
/// # Safety
/// dst with its strides addresses m x n writable floats.
pub(super) unsafe fn zero(m: usize, n: usize, dst: *mut f32, d_rs: isize, d_cs: isize) {
    for i in 0..m {
        for j in 0..n {
            *dst.offset(i as isize * d_rs + j as isize * d_cs) = 0.0;
        }
    }
}

/// Offset of batch `lin` (over `ob`, the output's batch dims) in `x`, whose own batch dims
/// (all but its last `inner`) are right-aligned to `ob`; size-1 dims broadcast.
pub fn batch_off(x: &View, inner: usize, ob: &[usize], mut lin: usize) -> usize {
    let xb = x.rank().saturating_sub(inner);
    let mut off = 0;
    for d in (0..ob.len()).rev() {
        let i = lin % ob[d].max(1);
        lin /= ob[d].max(1);
        let shift = ob.len() as isize - xb as isize;
        let xd = d as isize - shift;
        if xd >= 0 && x.shape[xd as usize] != 1 {
            off += i * x.strides[xd as usize];
        }
    }
    off
}

/// Stride of `x`'s dim that aligns with the output's `from_end`-th last dim (0 if absent
/// or broadcast).
fn tail_stride(x: &View, from_end: usize) -> usize {
    let r = x.rank();
    if from_end > r || x.shape[r - from_end] == 1 {
        0
    } else {
        x.strides[r - from_end]
    }
}

/// What a GEMM (or conv) does to its f32 result before the one store: `beta * bias`
/// (after rounding to the output dtype first when `residual`, see `Kernel::Gemm`), then
/// `act`.
#[derive(Debug, Clone, Copy)]
pub struct Epilogue {
    pub beta: f32,
    pub act: Option<UnaryOp>,
    pub residual: bool,
}

/// Applies the epilogue, rounds and stores c [M, N] (dense) into `out`; `c` = None reads the
/// product from `out` itself (a GEMM that wrote its f32 result in place). One row per task,
/// the activation over the whole row at once (its dispatch hoisted out of the element loop).
#[allow(clippy::too_many_arguments)]
pub fn epilogue(
    c: Option<&[f32]>,
    m: usize,
    n: usize,
    epi: &Epilogue,
    bias: Option<(&View, usize)>,
    out: &View,
    out_off: usize,
) {
    let r = out.rank();
    let (osm, osn) = (out.strides[r - 2], out.strides[r - 1]);
    (0..m).into_par_iter().for_each(|i| {
        with_scratch(0, 2 * n, |buf| {
            let (row, bias_row) = buf.split_at_mut(n);
            match c {
                Some(c) => row.copy_from_slice(&c[i * n..(i + 1) * n]),
                None => out.gather(out_off + i * osm, osn, row),
            }
            if let Some((b, boff)) = bias {
                b.gather(boff + i * tail_stride(b, 2), tail_stride(b, 1), bias_row);
                for (v, x) in row.iter_mut().zip(bias_row.iter()) {
                    if epi.residual {
                        *v = round_to(out.dtype, *v);
                    }
                    *v += epi.beta * x;
                }
            }
            if let Some(a) = epi.act {
                super::activation::apply(a, row);
            }
            out.scatter(out_off + i * osm, osn, row);
        });
    });
}

/// out[.., m, n] = alpha * a @ b, then the epilogue (bias, act).
///
/// `b_packed`: `b` is a whole f32 weight [K, N] (rank 2) whose buffer holds the panels
/// [`gemm_packed::pack_transposed`] wrote at prepare; its view's strides then say nothing
/// about where an element is, and only the packed kernel reads it.
pub fn gemm_kernel(
    alpha: f32,
    epi: &Epilogue,
    a: &View,
    b: &View,
    b_packed: bool,
    bias: Option<&View>,
    out: &View,
) -> Result<(), String> {
    let (ra, rb, r) = (a.rank(), b.rank(), out.rank());
    let (m, n) = (out.shape[r - 2], out.shape[r - 1]);
    let k = a.shape[ra - 1];
    let ob = &out.shape[..r - 2];
    let batches: usize = ob.iter().product();
    let (a_sm, a_sk) = (a.strides[ra - 2], a.strides[ra - 1]);
    let (b_sk, b_sn) = (b.strides[rb - 2], b.strides[rb - 1]);
    // A packed B reaches here only from a prepare that checked all of this; a kernel that
    // cannot read it must not fall back to reading the panels as a [K, N] matrix.
    if b_packed && !(gemm_packed::enabled() && b.f32_ptr().is_some() && b.shape == [k, n]) {
        return Err(format!(
            "a packed f32 weight B of shape {:?} that this CPU or GEMM cannot read",
            b.shape
        ));
    }
    for bi in 0..batches {
        let aoff = batch_off(a, 2, ob, bi);
        let boff = batch_off(b, 2, ob, bi);
        let ooff = offset_in(ob, &out.strides[..r - 2], bi);
        let bias_v = bias.map(|bv| (bv, batch_off(bv, 2.min(bv.rank()), ob, bi)));
        let needs_epi = bias.is_some() || epi.act.is_some();
        let amx_ok = alpha == 1.0
            && a.dtype == DType::BF16
            && b.dtype == DType::BF16
            && a_sk == 1
            && b_sk == 1
            && a_sm != 0
            && amx::supports(m, n, k);
        if amx_ok {
            let plen = amx::packed_len(m, k);
            with_scratch(3, m * n, |c| {
                with_scratch(1, plen.div_ceil(2), |pk| {
                    // SAFETY: the f32 scratch holds at least plen u16; operands are in
                    // bounds per the module invariants and contiguous along K.
                    unsafe {
                        let packed =
                            std::slice::from_raw_parts_mut(pk.as_mut_ptr() as *mut u16, plen);
                        amx::gemm_bf16(
                            m,
                            n,
                            k,
                            (a.ptr as *const u16).add(aoff),
                            a_sm,
                            (b.ptr as *const u16).add(boff),
                            b_sn,
                            c,
                            packed,
                        );
                    }
                });
                epilogue(Some(c), m, n, epi, bias_v, out, ooff);
            });
            continue;
        }
        let gemv = !b_packed
            && m <= 4
            && b_sk == 1
            && k >= 16
            && matches!(b.dtype, DType::F32 | DType::BF16 | DType::F16);
        with_scratch(1, m * k, |ap| {
            // A as dense f32 [M, K] (scaled by alpha). The packed kernel reads A's rows with
            // unit column stride.
            let a_direct = !gemv
                && alpha == 1.0
                && a.f32_ptr().is_some()
                && (m == 1 || a_sm != 0)
                && (k == 1 || a_sk != 0)
                && (!b_packed || k == 1 || a_sk == 1);
            let amat = if a_direct {
                // SAFETY: in bounds per the module invariants.
                Mat {
                    ptr: unsafe { (a.ptr as *const f32).add(aoff) },
                    rs: a_sm as isize,
                    cs: a_sk as isize,
                }
            } else {
                for i in 0..m {
                    a.gather(aoff + i * a_sm, a_sk, &mut ap[i * k..(i + 1) * k]);
                    if alpha != 1.0 {
                        for x in &mut ap[i * k..(i + 1) * k] {
                            *x *= alpha;
                        }
                    }
                }
                Mat {
                    ptr: ap.as_ptr(),
                    rs: k as isize,
                    cs: 1,
                }
            };
            let out_direct = !gemv
                && out.f32_ptr().is_some()
                && (m == 1 || out.strides[r - 2] != 0)
                && (n == 1 || out.strides[r - 1] != 0);
            let c_len = if out_direct { 0 } else { m * n };
            with_scratch(3, c_len, |c| {
                let (dst, d_rs, d_cs) = if out_direct {
                    // SAFETY: as above.
                    (
                        unsafe { (out.ptr as *mut f32).add(ooff) },
                        out.strides[r - 2] as isize,
                        out.strides[r - 1] as isize,
                    )
                } else {
                    (c.as_mut_ptr(), n as isize, 1)
                };
                if b_packed {
                    // SAFETY: A and dst as for `matmul` below; B checked packed above.
                    unsafe { packed_matmul(m, n, k, amat, b, dst, d_rs, d_cs) };
                } else if gemv {
                    gemv_kernel(&ap[..m * k], m, n, k, b, boff, b_sn, c);
                } else if b.f32_ptr().is_some() && (k == 1 || b_sk != 0) && (n == 1 || b_sn != 0) {
                    // SAFETY: as above.
                    let bmat = Mat {
                        ptr: unsafe { (b.ptr as *const f32).add(boff) },
                        rs: b_sk as isize,
                        cs: b_sn as isize,
                    };
                    unsafe { matmul(m, n, k, dst, d_rs, d_cs, amat, bmat) };
                } else {
                    let tn = ((1usize << 22) / k.max(1))
                        .clamp(16, n.max(16))
                        .min(n.max(1));
                    with_scratch(2, k * tn, |bp| {
                        let mut n0 = 0;
                        while n0 < n {
                            let w = tn.min(n - n0);
                            let bpp = SendPtr(bp.as_mut_ptr());
                            (0..w).into_par_iter().for_each(|j| {
                                // SAFETY: each j writes its own K-long column.
                                let col = unsafe {
                                    std::slice::from_raw_parts_mut(bpp.get().add(j * k), k)
                                };
                                b.gather(boff + (n0 + j) * b_sn, b_sk, col);
                            });
                            let bmat = Mat {
                                ptr: bp.as_ptr(),
                                rs: 1,
                                cs: k as isize,
                            };
                            // SAFETY: dst columns n0..n0+w are in bounds.
                            unsafe {
                                matmul(
                                    m,
                                    w,
                                    k,
                                    dst.offset(n0 as isize * d_cs),
                                    d_rs,
                                    d_cs,
                                    amat,
                                    bmat,
                                )
                            };
                            n0 += w;
                        }
                    });
                }
                if !out_direct {
                    epilogue(Some(c), m, n, epi, bias_v, out, ooff);
                } else if needs_epi {
                    // The product is already in the f32 output: finish it in place.
                    epilogue(None, m, n, epi, bias_v, out, ooff);
                }
            });
        });
    }
    Ok(())
}

/// dst[m, n] = A · B for a packed weight B (see [`gemm_kernel`]'s `b_packed`), A with unit
/// column stride (or K = 1).
///
/// # Safety
/// As [`matmul`], and `b` is packed for [K, N] = [k, n] with [`gemm_packed::enabled`] true.
#[allow(clippy::too_many_arguments)]
unsafe fn packed_matmul(
    m: usize,
    n: usize,
    k: usize,
    a: Mat,
    b: &View,
    dst: *mut f32,
    d_rs: isize,
    d_cs: isize,
) {
    #[cfg(target_arch = "x86_64")]
    {
        let pb = gemm_packed::PackedB::at(b.ptr as *const f32, k, n);
        gemm_packed::matmul(m, n, k, a.ptr, a.rs as usize, pb, dst, d_rs, d_cs);
    }
    // Never packed elsewhere (`gemm_packed::enabled` is false).
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (m, n, k, a, b, dst, d_rs, d_cs);
}

/// c[m, n] = sum_k a[m, k] * b[k, n] for small M, B contiguous along K (a transposed
/// weight), parallel over N; bf16/f16 converted on the fly.
#[allow(clippy::too_many_arguments)]
fn gemv_kernel(
    a: &[f32],
    m: usize,
    n: usize,
    k: usize,
    b: &View,
    boff: usize,
    b_sn: usize,
    c: &mut [f32],
) {
    let cp = SendPtr(c.as_mut_ptr());
    let chunk = 32;
    (0..n.div_ceil(chunk)).into_par_iter().for_each(|ci| {
        for j in ci * chunk..((ci + 1) * chunk).min(n) {
            let off = boff + j * b_sn;
            for i in 0..m {
                let ar = &a[i * k..(i + 1) * k];
                // SAFETY: the row lies in the B binding (contiguous along K); c has M*N.
                let v = unsafe {
                    match b.dtype {
                        DType::F32 => dot_f32(
                            ar,
                            std::slice::from_raw_parts((b.ptr as *const f32).add(off), k),
                        ),
                        DType::BF16 => dot_bf16(
                            ar,
                            std::slice::from_raw_parts((b.ptr as *const u16).add(off), k),
                        ),
                        _ => dot_f16(
                            ar,
                            std::slice::from_raw_parts((b.ptr as *const f16).add(off), k),
                        ),
                    }
                };
                // SAFETY: each (i, j) is written by one task.
                unsafe { *cp.get().add(i * n + j) = v };
            }
        }
    });
}
