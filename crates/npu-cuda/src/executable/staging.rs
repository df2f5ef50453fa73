//! Page-locked host buffers between the caller's tensors and the device: an input is
//! converted to its storage dtype straight into its staging buffer. A small one is then
//! copied inside the run (`host_io`); a large one is copied asynchronously chunk by chunk as
//! it converts (the copy of one chunk overlaps the conversion of the next; from
//! [`PARALLEL_FROM`] bytes several threads convert and this thread alone enqueues the copies,
//! in the order chunks finish). Outputs come back the same two ways, so a run synchronizes
//! with the device once.

use crate::device::Device;
use crate::error::{CudaError, CudaResult};
use cudarc::driver::{result, sys};
use npu_ir::DType;
use npu_runtime::tensor::{cast_bytes, cast_bytes_streaming};
use npu_runtime::{Result, RuntimeError};
use std::sync::{Arc, OnceLock};

/// Bytes converted and copied per chunk: large enough that a copy's fixed cost (a few
/// microseconds) is small against its transfer, small enough to overlap conversion.
pub(super) const CHUNK: usize = 4 << 20;
/// Inputs at least this large convert on several threads.
const PARALLEL_FROM: usize = 8 << 20;
/// Threads a large input converts on at most (`NPU_CUDA_UPLOAD_THREADS` asks another number,
/// for A/B runs). Conversion is bound by the host's memory bandwidth per thread (about 14 GB/s
/// of f32 source on one AMD EPYC core), so matching the host link (~55 GB/s on the H100
/// machine) takes several. The same code converted ResNet-50 batch 64's 38.5 MB at ~36 GB/s on
/// one H100 machine and ~22 GB/s on another (docs/cuda.md, twenty-seventh session).
const MAX_THREADS: usize = 8;

/// The most conversion threads: `NPU_CUDA_UPLOAD_THREADS` where it is a positive number, else
/// [`MAX_THREADS`]; read once.
fn max_threads() -> usize {
    static MAX: OnceLock<usize> = OnceLock::new();
    *MAX.get_or_init(|| parse_threads(std::env::var("NPU_CUDA_UPLOAD_THREADS").ok().as_deref()))
}

/// Whether a large input's conversion stores into its staging with non-temporal stores
/// (`NPU_CUDA_UPLOAD_NT=1`; off by default until an A/B of whole runs on a GPU machine says
/// so): they skip reading each staging line before writing it (ResNet-50 batch 64's 38.5 MB
/// converted in 10-37% less time on two AMD EPYC threads, npu-runtime's
/// `examples/bench_upload_cast.rs`), but leave the staging in DRAM rather than in the host's
/// caches when the copy engine reads it.
fn streaming_stores() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("NPU_CUDA_UPLOAD_NT").is_ok_and(|v| v == "1"))
}

fn parse_threads(asked: Option<&str>) -> usize {
    asked
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|&n| n >= 1)
        .unwrap_or(MAX_THREADS)
}
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

/// Whether `src` holds the elements `stage` is sized for.
fn check_len(stage: &Pinned, src: &[u8], (from, to): (DType, DType), what: &str) -> Result<()> {
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

/// `src` converted into `dst`, with non-temporal stores where `streaming` (see
/// [`streaming_stores`]).
fn cast(
    streaming: bool,
    src: &[u8],
    dst: &mut [u8],
    (from, to): (DType, DType),
    what: &str,
) -> Result<()> {
    let done = if streaming {
        cast_bytes_streaming(src, from, dst, to)
    } else {
        cast_bytes(src, from, dst, to)
    };
    done.map_err(|e| RuntimeError::Tensor {
        name: what.into(),
        message: e.to_string(),
    })
}

/// Converts `src` (dtypes `(from, to)`) into `stage` (its whole length) on this thread.
pub(crate) fn convert(
    stage: &mut Pinned,
    src: &[u8],
    dtypes: (DType, DType),
    what: &str,
) -> Result<()> {
    check_len(stage, src, dtypes, what)?;
    cast(false, src, stage.bytes_mut(), dtypes, what)
}

/// Converts `src` into `stage` and enqueues the copy of each chunk to device address `dst`
/// as it is converted.
pub(crate) fn upload_async(
    dev: &Device,
    stage: &mut Pinned,
    src: &[u8],
    dtypes: (DType, DType),
    dst: u64,
    what: &str,
) -> Result<()> {
    check_len(stage, src, dtypes, what)?;
    let (fs, ts) = (dtypes.0.size_bytes().max(1), dtypes.1.size_bytes().max(1));
    let total = stage.len;
    // staging this large outgrows the host's caches anyway
    let streaming = total >= PARALLEL_FROM && streaming_stores();
    let threads = if total >= PARALLEL_FROM {
        std::thread::available_parallelism().map_or(1, |n| n.get().clamp(1, max_threads()))
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
    let base = stage.ptr as usize;
    let copy = |off: usize, len: usize| -> Result<()> {
        // SAFETY: `off..off + len` lies inside the staging buffer, whose converting thread has
        // finished with it; `dst + off` inside the destination (same size). The buffer
        // outlives the copy (the run synchronizes before returning).
        let bytes = unsafe { std::slice::from_raw_parts((base + off) as *const u8, len) };
        unsafe { result::memcpy_htod_async(dst + off as u64, bytes, dev.cu_stream()) }
            .map_err(|e| CudaError::driver(format!("uploading {what}"), e).into())
    };
    let chunks: Vec<Chunk> = stage
        .bytes_mut()
        .chunks_mut(per_chunk * ts)
        .zip(src.chunks(per_chunk * fs))
        .enumerate()
        .map(|(k, (d, s))| (k * per_chunk * ts, d, s))
        .collect();
    let threads = threads.min(chunks.len());
    if threads <= 1 {
        return chunks.into_iter().try_for_each(|(off, d, s)| {
            cast(streaming, s, d, dtypes, what)?;
            copy(off, d.len())
        });
    }
    // Converting threads make no driver call (several threads' calls on one stream contend):
    // each sends its finished chunks here, and this thread enqueues their copies.
    let mut lanes: Vec<Vec<Chunk>> = (0..threads).map(|_| Vec::new()).collect();
    for (k, c) in chunks.into_iter().enumerate() {
        lanes[k % threads].push(c);
    }
    std::thread::scope(|scope| {
        let (done, finished) = std::sync::mpsc::channel::<(usize, usize)>();
        let handles: Vec<_> = lanes
            .into_iter()
            .map(|lane| {
                let done = done.clone();
                scope.spawn(move || {
                    lane.into_iter().try_for_each(|(off, d, s)| {
                        cast(streaming, s, d, dtypes, what)?;
                        // The receiver lives until every sender is gone.
                        let _ = done.send((off, d.len()));
                        Ok(())
                    })
                })
            })
            .collect();
        drop(done);
        let mut copied = Ok(());
        for (off, len) in finished {
            if copied.is_ok() {
                copied = copy(off, len);
            }
        }
        handles.into_iter().try_for_each(|h| {
            h.join().unwrap_or_else(|_| {
                Err(RuntimeError::Tensor {
                    name: what.into(),
                    message: "a staging thread panicked".into(),
                })
            })
        })?;
        copied
    })
}

#[cfg(test)]
mod tests {
    use super::{parse_threads, MAX_THREADS};

    #[test]
    fn upload_threads_setting() {
        assert_eq!(parse_threads(None), MAX_THREADS);
        assert_eq!(parse_threads(Some("16")), 16);
        assert_eq!(parse_threads(Some(" 2 ")), 2);
        // nonsense and zero keep the default rather than converting on no thread
        assert_eq!(parse_threads(Some("0")), MAX_THREADS);
        assert_eq!(parse_threads(Some("many")), MAX_THREADS);
    }
}
