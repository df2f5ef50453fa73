//! GEMM planning: M = 1 goes to the bandwidth-bound GEMV kernel, f16/bf16/f32 operands
//! whose layouts cuBLASLt can express go to cuBLASLt (f32 result in scratch, then a fused
//! bias/activation/rounding epilogue), everything else to the strided SIMT GEMM.

use crate::device::Device;
use crate::error::{CudaError, CudaResult};
use crate::launch::{grid_for, Arg, KernelLaunch, Launch, TdArg};
use crate::loc::Loc;
use crate::lt_call::LtCall;
use crate::lt_tune::Problem;
use cudarc::cublaslt::result as lt;
use cudarc::cublaslt::sys as ltsys;
use npu_ir::DType;
use std::ffi::c_void;

fn lt_type(d: DType) -> Option<ltsys::cudaDataType> {
    match d {
        DType::F32 => Some(ltsys::cudaDataType::CUDA_R_32F),
        DType::F16 => Some(ltsys::cudaDataType::CUDA_R_16F),
        DType::BF16 => Some(ltsys::cudaDataType::CUDA_R_16BF),
        _ => None,
    }
}

/// One batch stride for dims `0..nb` of `t` over the batch shape, if they collapse.
fn batch_stride(t: &TdArg, nb: usize) -> Option<i64> {
    let mut stride: Option<i64> = None;
    let mut expect: Option<i64> = None;
    for d in (0..nb).rev() {
        let (n, s) = (t.td.sh[d], t.td.st[d]);
        if n == 1 {
            continue;
        }
        match (stride, expect) {
            (None, _) => {
                stride = Some(s);
                expect = Some(s * n);
            }
            (Some(s0), Some(e)) => {
                if s0 == 0 && s == 0 {
                    continue;
                }
                if s != e {
                    return None;
                }
                expect = Some(s * n);
            }
            _ => return None,
        }
    }
    Some(stride.unwrap_or(0))
}

fn blas(what: &str) -> impl Fn(cudarc::cublaslt::result::CublasError) -> CudaError + '_ {
    move |e| CudaError::Blas {
        what: what.into(),
        message: format!("{e:?}"),
    }
}

/// A matrix operand for cuBLASLt: (rows, cols, ld, transposed).
fn lt_operand(
    unit_first: bool,
    r0: i64,
    r1: i64,
    s0: i64,
    s1: i64,
) -> Option<(u64, u64, i64, bool)> {
    // Element (i, j) of the logical r0 x r1 matrix at i * s0 + j * s1. Column-major
    // storage wants a unit stride on the first index.
    let _ = unit_first;
    if s0 == 1 || r0 == 1 {
        let ld = s1.max(r0).max(1);
        if r1 == 1 || s1 >= r0 {
            return Some((r0 as u64, r1 as u64, ld, false));
        }
    }
    if s1 == 1 || r1 == 1 {
        let ld = s0.max(r1).max(1);
        if r0 == 1 || s0 >= r1 {
            return Some((r1 as u64, r0 as u64, ld, true));
        }
    }
    None
}

/// Where a planned cuBLASLt matmul writes D.
// Built once per planned matmul at prepare time, so the size of `Out` costs nothing.
#[allow(clippy::large_enum_variant)]
pub(crate) enum LtDest {
    /// f32 in scratch at `off`, rows `ld` apart, batches `batch` apart (dense: `(n, m * n)`),
    /// for an epilogue kernel to finish.
    Scratch { off: u64, ld: i64, batch: i64 },
    /// Straight into the output in its dtype, with an optional bias vector along n (in the
    /// output's dtype) added by cuBLASLt's epilogue: D = round(alpha * a @ b + bias), what
    /// `k_epilogue` computes without an activation, minus one f32 round trip through memory.
    Out {
        out: TdArg,
        dtype: DType,
        bias: Option<TdArg>,
        /// cuBLASLt applies ReLU after the bias (`RELU_BIAS`), before the rounding store.
        relu: bool,
        /// A residual read as cuBLASLt's C operand, scaled by the f32: D = round(alpha * a @ b +
        /// beta * residual), one rounding where `k_epilogue`'s residual mode rounds the
        /// product first (`Kernel::Conv2d`'s contract allows either; `Kernel::Gemm`'s does
        /// not). It must lie exactly as the output does (C and D share one layout).
        residual: Option<(TdArg, f32)>,
    },
}

/// Plans D[batch, m, n] = alpha * a @ b with cuBLASLt, D as `dest` says. `a`, `b` (and an
/// output) are aligned to the output's rank. None when cuBLASLt cannot take the layouts.
#[allow(clippy::too_many_arguments)]
pub(crate) fn plan_lt(
    dev: &Device,
    cold: bool,
    a: &TdArg,
    b: &TdArg,
    a_dtype: DType,
    b_dtype: DType,
    m: i64,
    n: i64,
    k: i64,
    batches: i64,
    alpha: f32,
    dest: LtDest,
) -> CudaResult<Option<LtCall>> {
    let (Some(ta), Some(tb)) = (lt_type(a_dtype), lt_type(b_dtype)) else {
        return Ok(None);
    };
    if a_dtype != b_dtype || k == 0 {
        return Ok(None);
    }
    let r = a.td.rank as usize;
    let nb = r - 2;
    let (Some(sa), Some(sb)) = (batch_stride(a, nb), batch_stride(b, nb)) else {
        return Ok(None);
    };
    // Lt A = our b as (n x k): element (n, k) at n * b_sn + k * b_sk.
    let Some(la) = lt_operand(true, n, k, b.td.st[r - 1], b.td.st[r - 2]) else {
        return Ok(None);
    };
    // Lt B = our a as (k x m): element (k, m) at k * a_sk + m * a_sm.
    let Some(lb) = lt_operand(true, k, m, a.td.st[r - 1], a.td.st[r - 2]) else {
        return Ok(None);
    };
    let aligned = TdArg::aligned16;
    if !aligned(a) || !aligned(b) {
        return Ok(None);
    }
    // D's type, rows and batches, its location, and the bias of a direct output.
    let (d_type, d_ld, d_batch, d_loc, bias, c) = match &dest {
        LtDest::Scratch { off, ld, batch } => (
            ltsys::cudaDataType::CUDA_R_32F,
            *ld,
            *batch,
            Loc::Scratch(*off),
            None,
            None,
        ),
        LtDest::Out {
            out,
            dtype,
            bias,
            residual,
            ..
        } => {
            let (Some(t), Some(bs)) = (lt_type(*dtype), batch_stride(out, nb)) else {
                return Ok(None);
            };
            let ld = out.td.st[r - 2];
            let vector = bias.is_none_or(|v| {
                v.td.st[r - 1] == 1 && (0..r - 1).all(|i| v.td.st[i] == 0 || v.td.sh[i] == 1)
            });
            if out.td.st[r - 1] != 1
                || (m > 1 && ld < n)
                || !aligned(out)
                || !vector
                || !bias.as_ref().is_none_or(aligned)
            {
                return Ok(None);
            }
            let same_layout = |c: &TdArg| {
                c.td.dt == out.td.dt
                    && aligned(c)
                    && (0..r).all(|i| out.td.sh[i] == 1 || c.td.st[i] == out.td.st[i])
            };
            if residual.as_ref().is_some_and(|(c, _)| !same_layout(c)) {
                return Ok(None);
            }
            (
                t,
                ld,
                bs,
                out.loc,
                bias.map(|v| (v.loc, t)),
                residual.map(|(c, beta)| (c.loc, beta)),
            )
        }
    };
    let handle = dev.lt()?;
    let f32t = ltsys::cudaDataType::CUDA_R_32F;
    let desc = lt::create_matmul_desc(ltsys::cublasComputeType_t::CUBLAS_COMPUTE_32F, f32t)
        .map_err(blas("matmul descriptor"))?;
    let set_desc = |attr, v: i32| {
        // SAFETY: a live descriptor and a 4-byte value.
        unsafe {
            lt::set_matmul_desc_attribute(
                desc,
                attr,
                &v as *const i32 as *const c_void,
                std::mem::size_of::<i32>(),
            )
        }
    };
    set_desc(
        ltsys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSA,
        i32::from(la.3),
    )
    .map_err(blas("transa"))?;
    set_desc(
        ltsys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSB,
        i32::from(lb.3),
    )
    .map_err(blas("transb"))?;
    let mk = |t, rows: u64, cols: u64, ld: i64, stride: i64| -> CudaResult<_> {
        let l = lt::create_matrix_layout(t, rows, cols, ld).map_err(blas("layout"))?;
        if batches > 1 {
            let cnt = batches as i32;
            // SAFETY: a live layout and values of the documented sizes.
            unsafe {
                lt::set_matrix_layout_attribute(
                    l,
                    ltsys::cublasLtMatrixLayoutAttribute_t::CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                    &cnt as *const i32 as *const c_void,
                    4,
                )
                .map_err(blas("batch count"))?;
                lt::set_matrix_layout_attribute(
                    l,
                    ltsys::cublasLtMatrixLayoutAttribute_t::CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                    &stride as *const i64 as *const c_void,
                    8,
                )
                .map_err(blas("batch stride"))?;
            }
        }
        Ok(l)
    };
    let l_a = mk(tb, la.0, la.1, la.2, sb)?;
    let l_b = mk(ta, lb.0, lb.1, lb.2, sa)?;
    let relu = matches!(dest, LtDest::Out { relu: true, .. });
    if relu && bias.is_none() {
        set_desc(
            ltsys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_EPILOGUE,
            ltsys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_RELU as i32,
        )
        .map_err(blas("relu epilogue"))?;
    }
    if let Some((_, bias_type)) = bias {
        let epi = if relu {
            ltsys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_RELU_BIAS as i32
        } else {
            ltsys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_BIAS as i32
        };
        set_desc(
            ltsys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_EPILOGUE,
            epi,
        )
        .map_err(blas("bias epilogue"))?;
        set_desc(
            ltsys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
            bias_type as i32,
        )
        .map_err(blas("bias type"))?;
    }
    let l_d = mk(d_type, n as u64, m as u64, d_ld, d_batch)?;
    let elem = |t: ltsys::cudaDataType| -> u64 {
        if t == ltsys::cudaDataType::CUDA_R_32F {
            4
        } else {
            2
        }
    };
    // Bytes a layout spans: its last column's end, then the other batches.
    let span = |t, rows: u64, cols: u64, ld: i64, stride: i64| -> u64 {
        let one = ld.max(0) as u64 * cols.saturating_sub(1) + rows;
        elem(t) * (one + (batches.max(1) - 1) as u64 * stride.max(0) as u64)
    };
    let epi_code = match (&dest, bias) {
        (LtDest::Scratch { .. }, _) => 0,
        (LtDest::Out { relu, .. }, b) => {
            1 + i64::from(*relu) + 2 * i64::from(b.is_some()) + 4 * i64::from(c.is_some())
        }
    };
    let key: Vec<i64> = vec![
        m,
        n,
        k,
        batches,
        ta as i64,
        tb as i64,
        d_type as i64,
        la.0 as i64,
        la.1 as i64,
        la.2,
        i64::from(la.3),
        lb.0 as i64,
        lb.1 as i64,
        lb.2,
        i64::from(lb.3),
        sa,
        sb,
        d_ld,
        d_batch,
        epi_code,
        i64::from(cold),
    ];
    let problem = Problem {
        handle,
        desc,
        layouts: [l_a, l_b, l_d],
        bytes: [
            span(tb, la.0, la.1, la.2, sb),
            span(ta, lb.0, lb.1, lb.2, sa),
            span(d_type, n as u64, m as u64, d_ld, d_batch),
            bias.map_or(0, |(_, t)| elem(t) * n as u64),
        ],
        alpha,
        beta: c.map_or(0.0, |(_, beta)| beta),
        cold,
    };
    let algo = crate::lt_tune::choose(dev, key, &problem);
    let mut call = LtCall {
        desc,
        layouts: [l_a, l_b, l_d],
        algo: ltsys::cublasLtMatmulAlgo_t { data: [0; 8] },
        locs: [
            b.loc,
            a.loc,
            c.map_or(d_loc, |c| c.0),
            d_loc,
            bias.map_or(Loc::Null, |b| b.0),
        ],
        ptrs: [0; 5],
        bias: bias.is_some(),
        alpha,
        beta: c.map_or(0.0, |c| c.1),
    };
    match algo? {
        Some(algo) => {
            call.algo = algo;
            Ok(Some(call))
        }
        // Unsupported layout: the caller falls back (dropping `call` frees the objects).
        None => Ok(None),
    }
}

/// The fused epilogue after a cuBLASLt matmul: out = act(d + beta * bias), rounded; the bias
/// comes with its mode (1 a bias, 2 a residual: see `k_epilogue`). (Eight elements a thread
/// with 16-byte accesses was measured slower for a prefill's [128, 1536] residual add on the
/// H100, 19.2 -> 20.0 us a step: 96 blocks whose threads' eight-fold arithmetic is exposed.)
#[allow(clippy::too_many_arguments)]
pub(crate) fn epilogue(
    dev: &Device,
    d_off: u64,
    mn: i64,
    bias: Option<(TdArg, i32)>,
    beta: f32,
    act: i32,
    out: TdArg,
    total: usize,
) -> Launch {
    Launch::Kernel(KernelLaunch {
        func: dev.func("k_epilogue"),
        grid: (grid_for(total), 1, 1),
        block: (256, 1, 1),
        smem: 0,
        cluster: 1,
        args: vec![
            Arg::Ptr(0, Loc::Scratch(d_off)),
            Arg::I64(mn),
            Arg::Td(bias.map_or_else(TdArg::null, |b| b.0)),
            Arg::I32(bias.map_or(0, |b| b.1)),
            Arg::F32(beta),
            Arg::I32(act),
            Arg::Td(out),
            Arg::I64(total as i64),
        ],
    })
}
