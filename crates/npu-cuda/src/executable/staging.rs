//! Page-locked host buffers between the caller's tensors and the device: an input is
//! converted to its storage dtype straight into its staging buffer and copied to the device
//! asynchronously, chunk by chunk (the copy of one chunk overlaps the conversion of the
//! next, and large inputs convert on several threads); outputs and the error word come back
//! the same way, so a run synchronizes with the device once.

use crate::device::Device;
use crate::error::{CudaError, CudaResult};
use cudarc::driver::{result, sys};
use npu_ir::DType;
use npu_runtime::tensor::cast_bytes;
use npu_runtime::{Result, RuntimeError};
use std::sync::Arc;

/// Bytes converted and copied per chunk: large enough that a copy's fixed cost (a few
/// microseconds) is small against its transfer, small enough to overlap conversion.
pub(super) const CHUNK: usize = 4 << 20;
/// Inputs at least this large convert on several threads.
const PARALLEL_FROM: usize = 8 << 20;
/// Threads a large input converts on at most. Conversion is bound by the host's memory
/// bandwidth per thread (about 14 GB/s of f32 source on one AMD EPYC core), so matching the
/// host link (~55 GB/s on the H100 machine) takes several.
const MAX_THREADS: usize = 8;
/// The smallest chunk a parallel conversion splits into (so each thread gets a few).
const MIN_PARALLEL_CHUNK: usize = 1 << 20;

/// One chunk to convert and copy: its byte offset in the destination, its staging bytes and
/// its source bytes.
type Chunk<'a> = (usize, &'a mut [u8], &'a [u8]);

/// A page-locked host allocation, freed on drop.
pub(crate) struct Pinned {
    ptr: *mut u8,
    len: usize,
    dev: Arc<Device>,
}

// SAFETY: the allocation is owned by this value alone; access goes through `&self`/`&mut self`.
unsafe impl Send for Pinned {}

impl Pinned {
    /// `len` bytes (at least one) of page-locked memory, zeroed.
    pub fn new(dev: &Arc<Device>, len: usize, what: &str) -> CudaResult<Pinned> {
        dev.bind()?;
        let n = len.max(1);
        // SAFETY: a plain allocation, mapped into the device's address space (the copies
        // inside the graph read and write it through `mapped`); zeroed below before any read.
        let flags = sys::CU_MEMHOSTALLOC_DEVICEMAP;
        let ptr = unsafe { result::malloc_host(n, flags) }.map_err(|e| {
            CudaError::driver(format!("allocating {n} page-locked bytes for {what}"), e)
        })? as *mut u8;
        // SAFETY: `ptr` holds `n` writable bytes.
        unsafe { std::ptr::write_bytes(ptr, 0, n) };
        Ok(Pinned {
            ptr,
            len,
            dev: dev.clone(),
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// The device address the buffer is mapped at.
    pub fn mapped(&self) -> CudaResult<u64> {
        let mut d: sys::CUdeviceptr = 0;
        // SAFETY: `ptr` came from `cuMemHostAlloc` with `DEVICEMAP` in the current context.
        unsafe { sys::cuMemHostGetDevicePointer_v2(&mut d, self.ptr.cast(), 0) }
            .result()
            .map_err(|e| CudaError::driver("mapping page-locked staging", e))?;
        Ok(d)
    }

    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `len` initialized bytes owned by `self`.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: `len` initialized bytes owned by `self`, borrowed mutably once.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    /// Enqueues the copy of device memory at `src` into this buffer on the device's stream;
    /// the bytes are valid once the stream is synchronized.
    pub fn download_async(&mut self, src: u64, what: &str) -> CudaResult<()> {
        let stream = self.dev.cu_stream();
        let dst = self.bytes_mut();
        // SAFETY: `src` holds at least `len` bytes (allocated from the same tensor's size);
        // this buffer outlives the copy (the run synchronizes before returning).
        unsafe { result::memcpy_dtoh_async(dst, src, stream) }
            .map_err(|e| CudaError::driver(format!("downloading {what}"), e))
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        let _ = self.dev.bind();
        // SAFETY: allocated by `malloc_host`, freed once; no copy is in flight (runs
        // synchronize before returning).
        let _ = unsafe { result::free_host(self.ptr.cast()) };
    }
}

/// How a staging buffer of `len` bytes is converted: in chunks of `bytes` (the last may be
/// shorter), on up to `threads` threads. Fixed per buffer at prepare, so the copies inside a
/// captured graph can wait for each chunk by index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ChunkPlan {
    pub bytes: usize,
    pub threads: usize,
}

impl ChunkPlan {
    /// Small buffers in chunks of `small` bytes on this thread (each chunk's copy overlaps
    /// the next one's conversion); from [`PARALLEL_FROM`], about four chunks a thread.
    pub fn for_len(len: usize, small: usize) -> ChunkPlan {
        let threads = if len >= PARALLEL_FROM {
            std::thread::available_parallelism().map_or(1, |n| n.get().clamp(1, MAX_THREADS))
        } else {
            1
        };
        let bytes = if threads > 1 {
            len.div_ceil(threads * 4).clamp(MIN_PARALLEL_CHUNK, CHUNK)
        } else {
            small
        };
        // Whole 16-byte units, so a chunk's copy never shares a unit with the next.
        ChunkPlan {
            bytes: bytes.next_multiple_of(16).max(16),
            threads,
        }
    }

    pub fn count(&self, len: usize) -> usize {
        len.div_ceil(self.bytes).max(1)
    }
}

/// Whether `src` holds the elements `stage` is sized for.
pub(crate) fn check_len(
    stage: &Pinned,
    src: &[u8],
    from: DType,
    to: DType,
    what: &str,
) -> Result<()> {
    let (fs, ts) = (from.size_bytes().max(1), to.size_bytes().max(1));
    let elems = stage.len / ts;
    if src.len() < elems * fs {
        return Err(RuntimeError::Tensor {
            name: what.into(),
            message: format!("{} bytes given, {} needed", src.len(), elems * fs),
        });
    }
    Ok(())
}

/// Called after a chunk is converted: its index, its byte offset, its staging bytes.
pub(crate) type ChunkDone<'a> = dyn Fn(usize, usize, &[u8]) -> Result<()> + Sync + 'a;

/// Converts `src` (of dtype `from`) into `stage` (of dtype `to`, its whole length) chunk by
/// chunk as `plan` says, calling `done(k, offset, bytes)` after chunk `k` (on the thread that
/// converted it, chunks of one thread in order).
pub(crate) fn convert_chunks(
    stage: &mut Pinned,
    src: &[u8],
    (from, to): (DType, DType),
    plan: ChunkPlan,
    what: &str,
    done: &ChunkDone<'_>,
) -> Result<()> {
    check_len(stage, src, from, to, what)?;
    let (fs, ts) = (from.size_bytes().max(1), to.size_bytes().max(1));
    // Chunks hold whole elements: a plan's chunk is a multiple of 16 bytes, and so of `ts`.
    let per_chunk = (plan.bytes / ts).max(1);
    let chunks: Vec<Chunk> = stage
        .bytes_mut()
        .chunks_mut(per_chunk * ts)
        .zip(src.chunks(per_chunk * fs))
        .enumerate()
        .map(|(k, (d, s))| (k * per_chunk * ts, d, s))
        .collect();
    let one = |k: usize, (off, d, s): Chunk| -> Result<()> {
        cast_bytes(s, from, d, to).map_err(|e| RuntimeError::Tensor {
            name: what.into(),
            message: e.to_string(),
        })?;
        done(k, off, d)
    };
    let threads = plan.threads.min(chunks.len());
    if threads <= 1 {
        return chunks
            .into_iter()
            .enumerate()
            .try_for_each(|(k, c)| one(k, c));
    }
    let mut lanes: Vec<Vec<(usize, Chunk)>> = (0..threads).map(|_| Vec::new()).collect();
    for (k, c) in chunks.into_iter().enumerate() {
        lanes[k % threads].push((k, c));
    }
    std::thread::scope(|scope| {
        let handles: Vec<_> = lanes
            .into_iter()
            .map(|lane| scope.spawn(move || lane.into_iter().try_for_each(|(k, c)| one(k, c))))
            .collect();
        handles.into_iter().try_for_each(|h| {
            h.join().unwrap_or_else(|_| {
                Err(RuntimeError::Tensor {
                    name: what.into(),
                    message: "a staging thread panicked".into(),
                })
            })
        })
    })
}

/// Converts `src` into `stage` and enqueues the copy of each chunk to device address `dst`
/// as it is converted (a run without the copies inside the graph).
pub(crate) fn upload_async(
    dev: &Device,
    stage: &mut Pinned,
    src: &[u8],
    dtypes: (DType, DType),
    dst: u64,
    what: &str,
) -> Result<()> {
    let plan = ChunkPlan::for_len(stage.len, CHUNK);
    let copy = |_: usize, off: usize, d: &[u8]| -> Result<()> {
        // The driver's calls need the context current on the converting thread.
        dev.bind()?;
        // SAFETY: `dst + off` lies inside the destination (same size as `stage`); the
        // staging buffer outlives the copy (the run synchronizes before returning).
        unsafe { result::memcpy_htod_async(dst + off as u64, d, dev.cu_stream()) }
            .map_err(|e| CudaError::driver(format!("uploading {what}"), e).into())
    };
    convert_chunks(stage, src, dtypes, plan, what, &copy)
}
