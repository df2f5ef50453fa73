//! A timeline of a run: per-block timestamps of every kernel of ours (a diagnostic).
//!
//! With `NPU_CUDA_TIMELINE=1`, `Device::open` allocates a record buffer before any kernel
//! source is compiled, and `common_source` gives the kernels its address (`NPU_TL_BUF`): each
//! block's first thread takes a record (an atomic counter at the buffer's start) and writes the
//! grid id, its block index and SM, `%globaltimer` at entry (t0) and after the programmatic
//! wait (t1), and each warp's exit by atomicMax (t2). [`reset`] before a run, [`take`] after
//! it; `npu-cuda-bench decode-at` writes three replays' records and the launch list
//! (`NPU_CUDA_TIMELINE_OUT`), and `python -m npu_export.gpu_timeline` prices each launch
//! kind's boundary, body and tail. Without the variable the kernels compile as before: no
//! buffer, no stamps (`pdl_enter` and `pdl_wait` are the plain instructions).
//!
//! The stamps cost: Qwen2.5-1.5B decode at 1000 of 2048 took 1.656 ms a step with them, 1.437
//! without (H200), so read shares and boundaries, not absolute times. A run that takes more
//! than [`CAP`] block records keeps the first ones.

use crate::error::CudaError;
use cudarc::driver::{result, sys};
use std::sync::OnceLock;

/// Records the buffer holds; a run past it keeps the first ones.
pub const CAP: usize = 1 << 20;
/// Bytes of one record (kernels/common.cuh, `NpuTlRec`, checked there by a static_assert) and
/// of the header (the record count) before them.
const REC: usize = 48;
const HEAD: usize = 64;

static BUF: OnceLock<u64> = OnceLock::new();

/// Whether `NPU_CUDA_TIMELINE=1`.
pub fn wanted() -> bool {
    std::env::var("NPU_CUDA_TIMELINE").is_ok_and(|v| v == "1")
}

/// Allocates the buffer (once, on the context the caller bound) where the timeline is wanted.
pub(crate) fn init() -> Result<(), CudaError> {
    if !wanted() || BUF.get().is_some() {
        return Ok(());
    }
    let bytes = HEAD + CAP * REC;
    let what = || format!("the timeline's {bytes}-byte record buffer");
    // SAFETY: a plain allocation and fill on the context bound by the caller.
    let ptr = unsafe {
        let p = result::malloc_sync(bytes).map_err(|e| CudaError::driver(what(), e))?;
        result::memset_d8_sync(p, 0, bytes).map_err(|e| CudaError::driver(what(), e))?;
        p
    };
    let _ = BUF.set(ptr);
    Ok(())
}

/// The defines that turn the kernels' timestamps on, or nothing. `NPU_CUDA_TIMELINE_COMPILE=1`
/// gives a dummy address, so that the instrumented source compiles without a GPU
/// (`scripts/kernel-sass.sh`).
pub(crate) fn defines() -> String {
    let dummy = std::env::var("NPU_CUDA_TIMELINE_COMPILE").is_ok_and(|v| v == "1");
    match BUF.get() {
        Some(p) => format!("#define NPU_TL_BUF 0x{p:x}ULL\n#define NPU_TL_CAP {CAP}u\n"),
        None if dummy => format!("#define NPU_TL_BUF 0x10000ULL\n#define NPU_TL_CAP {CAP}u\n"),
        None => String::new(),
    }
}

fn buffer() -> Result<u64, CudaError> {
    BUF.get().copied().ok_or(CudaError::NoTimeline)
}

/// Zeroes the record count (the stream must be idle).
pub fn reset() -> Result<(), CudaError> {
    let p = buffer()?;
    // SAFETY: the buffer lives for the process; four bytes of it.
    unsafe { result::memset_d8_sync(p as sys::CUdeviceptr, 0, 4) }
        .map_err(|e| CudaError::driver("resetting the timeline's record count", e))
}

/// One block's record: grid id, t0, t1, t2 (ns of `%globaltimer`; t1 = 0 where the kernel
/// recorded no wait), block index, SM, blocks in the grid.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TlRecord {
    pub grid: u64,
    pub t0: u64,
    pub t1: u64,
    pub t2: u64,
    pub block: u32,
    pub smid: u32,
    pub nblocks: u32,
}

/// The records written since [`reset`] (the stream must be idle).
pub fn take() -> Result<Vec<TlRecord>, CudaError> {
    let p = buffer()?;
    let what = "reading the timeline's records";
    let mut n = [0u32; 1];
    // SAFETY: reads within the buffer.
    unsafe { result::memcpy_dtoh_sync(&mut n, p) }.map_err(|e| CudaError::driver(what, e))?;
    let mut raw = vec![0u64; (n[0] as usize).min(CAP) * REC / 8];
    // SAFETY: as above.
    unsafe { result::memcpy_dtoh_sync(&mut raw, p + HEAD as u64) }
        .map_err(|e| CudaError::driver(what, e))?;
    Ok(decode(&raw))
}

/// Records from the buffer's 64-bit words (`NpuTlRec`'s layout).
fn decode(words: &[u64]) -> Vec<TlRecord> {
    words
        .chunks_exact(REC / 8)
        .map(|r| TlRecord {
            grid: r[0],
            t0: r[1],
            t1: r[2],
            t2: r[3],
            block: r[4] as u32,
            smid: (r[4] >> 32) as u32,
            nblocks: r[5] as u32,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_decode_in_the_kernels_layout() {
        // two records as common.cuh's NpuTlRec lays them out: four u64, then block, smid,
        // nblocks, pad as u32 (little-endian pairs in one u64 each)
        let words = [
            7,
            100,
            150,
            400,
            (3 << 32) | 5,
            256, //
            7,
            110,
            0,
            390,
            (9 << 32) | 6,
            256,
        ];
        let recs = decode(&words);
        assert_eq!(
            recs,
            [
                TlRecord {
                    grid: 7,
                    t0: 100,
                    t1: 150,
                    t2: 400,
                    block: 5,
                    smid: 3,
                    nblocks: 256
                },
                TlRecord {
                    grid: 7,
                    t0: 110,
                    t1: 0,
                    t2: 390,
                    block: 6,
                    smid: 9,
                    nblocks: 256
                },
            ]
        );
        // a partial record (a torn read) is dropped, not misread
        assert_eq!(decode(&words[..11]).len(), 1);
    }
}
