//! exp-tl (diagnostic, not for main): per-block timestamps of every kernel of ours in a run.
//! With `NPU_CUDA_X_TL=1`, `Device::open` allocates a record buffer before any kernel source is
//! compiled, and `common_source` gives the kernels its address (`NPU_TL_BUF`): each block's
//! first thread takes a record (an atomic counter at the buffer's start) and writes the grid
//! id, its block index and SM, `%globaltimer` at entry (t0), after the programmatic wait (t1),
//! and each warp's exit by atomicMax (t2). `reset` before a replay, `take` after it.
//! The stamps cost: Qwen2.5-1.5B decode at 1000 took 1.656 ms a step with them, 1.437 without
//! (H200), so read shares and boundaries, not absolute times. Its first run read records of
//! 56 bytes as 48 (fixed: the struct is 48 bytes, checked by a static_assert), and past the
//! count of one replay the warm-up runs had filled the buffer beyond its end: decode at 32000
//! then died of an illegal instruction. Now every run before `reset` stops at CAP records.

use cudarc::driver::{result, sys};
use std::sync::OnceLock;

/// Records the buffer holds; a run past it keeps the first ones.
const CAP: usize = 1 << 20;
/// Bytes of one record (kernels/common.cuh, NpuTlRec) and of the header before them.
const REC: usize = 48;
const HEAD: usize = 64;

static BUF: OnceLock<Option<u64>> = OnceLock::new();

/// Whether `NPU_CUDA_X_TL=1`.
fn wanted() -> bool {
    std::env::var("NPU_CUDA_X_TL").is_ok_and(|v| v == "1")
}

/// Allocates the buffer (once, on the bound context) where the timeline is wanted.
pub(crate) fn init() -> Result<(), String> {
    if !wanted() || BUF.get().is_some() {
        return Ok(());
    }
    let bytes = HEAD + CAP * REC;
    // SAFETY: a plain allocation and fill on the context bound by the caller.
    let ptr = unsafe {
        let p = result::malloc_sync(bytes).map_err(|e| format!("timeline buffer: {e:?}"))?;
        result::memset_d8_sync(p, 0, bytes).map_err(|e| format!("timeline buffer: {e:?}"))?;
        p
    };
    let _ = BUF.set(Some(ptr));
    Ok(())
}

/// The defines that turn the kernels' timestamps on, or nothing.
/// (`NPU_CUDA_X_TL_COMPILE=1`: with a dummy address, for scripts/kernel-sass.sh without a GPU.)
pub(crate) fn defines() -> String {
    let dummy = std::env::var("NPU_CUDA_X_TL_COMPILE").is_ok_and(|v| v == "1");
    match BUF.get() {
        Some(Some(p)) => format!("#define NPU_TL_BUF 0x{p:x}ULL\n#define NPU_TL_CAP {CAP}u\n"),
        _ if dummy => format!("#define NPU_TL_BUF 0x10000ULL\n#define NPU_TL_CAP {CAP}u\n"),
        _ => String::new(),
    }
}

/// Zeroes the record count (the stream must be idle).
pub fn reset() -> Result<(), String> {
    let Some(Some(p)) = BUF.get() else {
        return Err("NPU_CUDA_X_TL=1 was not set when the device opened".into());
    };
    // SAFETY: the buffer lives for the process; four bytes of it.
    unsafe { result::memset_d8_sync(*p as sys::CUdeviceptr, 0, 4) }
        .map_err(|e| format!("timeline reset: {e:?}"))
}

/// One block's record: grid id, t0, t1, t2 (ns), block index, SM, blocks in the grid.
#[derive(Clone, Copy, Debug, Default)]
pub struct TlRecord {
    pub grid: u64,
    pub t0: u64,
    pub t1: u64,
    pub t2: u64,
    pub block: u32,
    pub smid: u32,
    pub nblocks: u32,
}

/// The records written since `reset` (the stream must be idle).
pub fn take() -> Result<Vec<TlRecord>, String> {
    let Some(Some(p)) = BUF.get() else {
        return Err("NPU_CUDA_X_TL=1 was not set when the device opened".into());
    };
    let mut n = [0u32; 1];
    // SAFETY: reads within the buffer.
    unsafe { result::memcpy_dtoh_sync(&mut n, *p) }.map_err(|e| format!("timeline: {e:?}"))?;
    let n = (n[0] as usize).min(CAP);
    let mut raw = vec![0u64; n * REC / 8];
    // SAFETY: as above.
    unsafe { result::memcpy_dtoh_sync(&mut raw, *p + HEAD as u64) }
        .map_err(|e| format!("timeline: {e:?}"))?;
    Ok(raw
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
        .collect())
}
