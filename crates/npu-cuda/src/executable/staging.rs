//! Page-locked host buffers between the caller's tensors and the device: an input is
//! converted to its storage dtype straight into its staging buffer and copied to the device
//! asynchronously, chunk by chunk (the copy of one chunk overlaps the conversion of the
//! next, and large inputs convert on several threads); outputs and the error word come back
//! the same way, so a run synchronizes with the device once.

use crate::device::Device;
use crate::error::{CudaError, CudaResult};
use cudarc::driver::result;
use npu_ir::DType;
use npu_runtime::tensor::cast_bytes;
use npu_runtime::{Result, RuntimeError};
use std::sync::Arc;

/// Bytes converted and copied per chunk: large enough that a copy's fixed cost (a few
/// microseconds) is small against its transfer, small enough to overlap conversion.
const CHUNK: usize = 4 << 20;
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
        // SAFETY: a plain allocation; zeroed below before any read.
        let ptr = unsafe { result::malloc_host(n, 0) }.map_err(|e| {
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

/// Converts `src` (of dtype `from`) into `stage` (of dtype `to`, its whole length) and
/// enqueues the copy of `stage` to device address `dst`, chunk by chunk.
pub(crate) fn upload_async(
    dev: &Device,
    stage: &mut Pinned,
    src: &[u8],
    from: DType,
    to: DType,
    dst: u64,
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
    let total = stage.len;
    let threads = if total >= PARALLEL_FROM {
        std::thread::available_parallelism().map_or(1, |n| n.get().clamp(1, MAX_THREADS))
    } else {
        1
    };
    // About four chunks a thread, so a thread's last copy overlaps little conversion.
    let chunk = if threads > 1 {
        total.div_ceil(threads * 4).clamp(MIN_PARALLEL_CHUNK, CHUNK)
    } else {
        CHUNK
    };
    let per_chunk = (chunk / ts).max(1);
    let chunks: Vec<Chunk> = stage
        .bytes_mut()
        .chunks_mut(per_chunk * ts)
        .zip(src.chunks(per_chunk * fs))
        .enumerate()
        .map(|(k, (d, s))| (k * per_chunk * ts, d, s))
        .collect();
    let one = |(off, d, s): Chunk| -> Result<()> {
        cast_bytes(s, from, d, to).map_err(|e| RuntimeError::Tensor {
            name: what.into(),
            message: e.to_string(),
        })?;
        // SAFETY: `dst + off` lies inside the destination (same size as `stage`); the
        // staging buffer outlives the copy (the run synchronizes before returning).
        unsafe { result::memcpy_htod_async(dst + off as u64, d, dev.cu_stream()) }
            .map_err(|e| CudaError::driver(format!("uploading {what}"), e).into())
    };
    let threads = threads.min(chunks.len());
    if threads <= 1 {
        return chunks.into_iter().try_for_each(one);
    }
    let mut lanes: Vec<Vec<Chunk>> = (0..threads).map(|_| Vec::new()).collect();
    for (k, c) in chunks.into_iter().enumerate() {
        lanes[k % threads].push(c);
    }
    std::thread::scope(|scope| {
        let handles: Vec<_> = lanes
            .into_iter()
            .map(|lane| {
                scope.spawn(move || -> Result<()> {
                    dev.bind()?;
                    lane.into_iter().try_for_each(one)
                })
            })
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
