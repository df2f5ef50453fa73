//! Choosing a cuBLASLt algorithm by timing its candidates once per matmul shape.
//!
//! cuBLASLt's heuristic ranks algorithms by a model, and its first choice for skinny products
//! leaves most of the GPU idle: a 128-token prefill's [128, 1536] projection is 12 tiles of
//! 128 x 128 for 132 SMs unless the algorithm splits K. So the planner asks for up to
//! [`CANDIDATES`] algorithms, runs each a few times on scratch buffers of the operands' sizes,
//! and keeps the fastest, unless it beats the heuristic's first by less than [`MARGIN`] (timing
//! noise should not flip the choice from one process to the next). Results are cached on the
//! device by everything that describes the matmul, so the 28 layers of a decoder tune once.
//! Where the program's weights outgrow L2 (`Problem::cold`), each timed launch follows a
//! flush of L2: back-to-back launches would find a 27 MB weight in L2 and favour a tile
//! shape that cannot stream it from DRAM, which is where a run finds it.
//! `NPU_CUDA_LT_TUNE=0` keeps the heuristic's first choice.

use crate::device::Device;
use crate::error::{CudaError, CudaResult};
use crate::lt_call::LT_WORKSPACE;
use cudarc::cublaslt::sys as ltsys;
use cudarc::driver::result;
use std::ffi::c_void;

/// Algorithms asked of the heuristic.
const CANDIDATES: usize = 8;
/// Timed launches per candidate (after one untimed launch).
const REPEATS: usize = 5;
/// A candidate replaces the heuristic's first only when at least this much faster.
const MARGIN: f32 = 0.95;

/// What makes two planned matmuls interchangeable for tuning: the descriptor's settings and
/// the three layouts (rows, cols, ld, batches, batch stride, type), as plain numbers.
pub(crate) type TuneKey = Vec<i64>;

/// The matmul being planned: handle, descriptor, layouts of A, B and D, and the byte sizes
/// of A, B, D and the bias vector (0 without one) to allocate for timing.
pub(crate) struct Problem {
    pub handle: ltsys::cublasLtHandle_t,
    pub desc: ltsys::cublasLtMatmulDesc_t,
    pub layouts: [ltsys::cublasLtMatrixLayout_t; 3],
    pub bytes: [u64; 4],
    pub alpha: f32,
    /// The C operand's scale (C is timed as D itself, which has its layout).
    pub beta: f32,
    /// Each timed launch starts with L2 flushed, as a run that streams more weights than L2
    /// holds finds its operands.
    pub cold: bool,
}

fn blas(what: &str, s: ltsys::cublasStatus_t) -> CudaError {
    CudaError::Blas {
        what: what.into(),
        message: format!("{s:?}"),
    }
}

/// The heuristic's candidates, best first (empty when it supports none).
fn candidates(p: &Problem) -> CudaResult<Vec<ltsys::cublasLtMatmulAlgo_t>> {
    // SAFETY: live descriptor objects; the preference is created and destroyed here, and the
    // result array holds CANDIDATES entries as the count says.
    unsafe {
        let mut pref = std::ptr::null_mut();
        let s = ltsys::cublasLtMatmulPreferenceCreate(&mut pref);
        if s != ltsys::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
            return Err(blas("preference", s));
        }
        let ws = LT_WORKSPACE;
        ltsys::cublasLtMatmulPreferenceSetAttribute(
            pref,
            ltsys::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
            &ws as *const u64 as *const c_void,
            8,
        );
        let mut res: [ltsys::cublasLtMatmulHeuristicResult_t; CANDIDATES] = std::mem::zeroed();
        let mut found = 0i32;
        let [l_a, l_b, l_d] = p.layouts;
        let s = ltsys::cublasLtMatmulAlgoGetHeuristic(
            p.handle,
            p.desc,
            l_a,
            l_b,
            l_d,
            l_d,
            pref,
            CANDIDATES as i32,
            res.as_mut_ptr(),
            &mut found,
        );
        ltsys::cublasLtMatmulPreferenceDestroy(pref);
        if s != ltsys::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
            return Ok(Vec::new());
        }
        Ok(res[..found.clamp(0, CANDIDATES as i32) as usize]
            .iter()
            .filter(|r| r.state == ltsys::cublasStatus_t::CUBLAS_STATUS_SUCCESS)
            .map(|r| r.algo)
            .collect())
    }
}

/// Device memory for one tuning (or one trial launch), freed on drop.
pub(crate) struct Scratch(pub Vec<u64>);

impl Scratch {
    /// Zeroed allocations of `sizes` bytes (at least 256 each), in order.
    pub(crate) fn zeroed(sizes: &[u64], what: &str) -> CudaResult<Scratch> {
        let mut bufs = Scratch(Vec::with_capacity(sizes.len()));
        for (i, &n) in sizes.iter().enumerate() {
            let len = (n as usize).max(256);
            // SAFETY: plain allocation and memset of the new block.
            let ptr = unsafe { result::malloc_sync(len) }
                .map_err(|e| CudaError::driver(format!("allocating {what} operand {i}"), e))?;
            bufs.0.push(ptr);
            // SAFETY: the block just allocated, `len` bytes.
            unsafe { result::memset_d8_sync(ptr, 0, len) }
                .map_err(|e| CudaError::driver(format!("zeroing {what} operand {i}"), e))?;
        }
        Ok(bufs)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        for &p in &self.0 {
            // SAFETY: allocated by `malloc_sync` below, freed once.
            let _ = unsafe { result::free_sync(p) };
        }
    }
}

/// The algorithm to plan `p` with, or `None` when cuBLASLt supports none.
pub(crate) fn choose(
    dev: &Device,
    key: TuneKey,
    p: &Problem,
) -> CudaResult<Option<ltsys::cublasLtMatmulAlgo_t>> {
    if let Some(hit) = dev
        .lt_algos
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&key)
    {
        return Ok(*hit);
    }
    let cands = candidates(p)?;
    let pick = match cands.len() {
        0 => None,
        1 => Some(cands[0]),
        _ if !dev.lt_tune => Some(cands[0]),
        _ => Some(fastest(dev, p, &cands)?),
    };
    dev.lt_algos
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key, pick);
    Ok(pick)
}

/// Times every candidate on zeroed operands and returns the fastest (see [`MARGIN`]).
fn fastest(
    dev: &Device,
    p: &Problem,
    cands: &[ltsys::cublasLtMatmulAlgo_t],
) -> CudaResult<ltsys::cublasLtMatmulAlgo_t> {
    dev.bind()?;
    // A, B, D, the bias vector, the workspace and (cold) a buffer twice L2 to flush it
    let flush = if p.cold { 2 * dev.l2_bytes } else { 0 };
    let sizes = [
        p.bytes[0],
        p.bytes[1],
        p.bytes[2],
        p.bytes[3],
        LT_WORKSPACE,
        flush,
    ];
    let bufs = Scratch::zeroed(&sizes, "tuning")?;
    let [a, b, d, bias, ws, flush_buf] = bufs.0[..] else {
        unreachable!("six sizes, six buffers")
    };
    if p.bytes[3] > 0 {
        // SAFETY: a live descriptor and an 8-byte pointer value (reset before each real run).
        unsafe {
            ltsys::cublasLtMatmulDescSetAttribute(
                p.desc,
                ltsys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                &bias as *const u64 as *const c_void,
                8,
            );
        }
    }
    let stream = dev.cu_stream();
    let beta = p.beta;
    let launch = |algo: &ltsys::cublasLtMatmulAlgo_t| {
        // SAFETY: buffers of the layouts' sizes, live descriptors.
        unsafe {
            ltsys::cublasLtMatmul(
                p.handle,
                p.desc,
                &p.alpha as *const f32 as *const c_void,
                a as *const c_void,
                p.layouts[0],
                b as *const c_void,
                p.layouts[1],
                &beta as *const f32 as *const c_void,
                d as *const c_void,
                p.layouts[2],
                d as *mut c_void,
                p.layouts[2],
                algo,
                ws as *mut c_void,
                LT_WORKSPACE as usize,
                stream as _,
            )
        }
    };
    let (e0, e1) = (dev.timing_event()?, dev.timing_event()?);
    let mut times = Vec::with_capacity(cands.len());
    for algo in cands {
        if launch(algo) != ltsys::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
            times.push(f32::INFINITY);
            continue;
        }
        let mut t = 0.0f32;
        // Warm: the launches back to back, timed together. Cold: each after a flush.
        let (rounds, per_round) = if p.cold { (REPEATS, 1) } else { (1, REPEATS) };
        for _ in 0..rounds {
            if p.cold {
                // SAFETY: an allocation of `flush` bytes made above, written on our stream.
                unsafe { result::memset_d8_async(flush_buf, 1, flush as usize, stream) }
                    .map_err(|e| CudaError::driver("flushing L2", e))?;
            }
            e0.record(&dev.stream)
                .map_err(|e| CudaError::driver("recording an event", e))?;
            for _ in 0..per_round {
                launch(algo);
            }
            e1.record(&dev.stream)
                .map_err(|e| CudaError::driver("recording an event", e))?;
            e1.synchronize()
                .map_err(|e| CudaError::driver("timing a matmul candidate", e))?;
            t += e0.elapsed_ms(&e1).unwrap_or(f32::INFINITY);
        }
        times.push(t);
    }
    let (best, &t) = times
        .iter()
        .enumerate()
        .min_by(|x, y| x.1.total_cmp(y.1))
        .unwrap_or((0, &f32::INFINITY));
    Ok(if t < times[0] * MARGIN {
        cands[best]
    } else {
        cands[0]
    })
}
