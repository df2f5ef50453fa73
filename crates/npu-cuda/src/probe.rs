//! A diagnostic for the GPU machine (`npu-cuda-bench gate-probe`): how long a host write to
//! page-locked memory takes to release blocks that poll it, and their answer to reach the host,
//! by the way they poll (system-scope acquire or volatile loads, with or without a sleep
//! between polls) and how many blocks poll at once. Written after the gated input copies
//! (docs/cuda.md, seventh session) came out ~60 us slower than predicted.

use crate::device::Device;
use crate::error::{CudaError, CudaResult};
use cudarc::driver::{result, sys};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// One configuration's round trip, microseconds (median and worst of the repetitions).
#[derive(Debug, Clone, PartialEq)]
pub struct GateProbe {
    pub blocks: u32,
    /// "acquire" (ld.acquire.sys) or "volatile" (ld.volatile).
    pub poll: &'static str,
    pub sleep_ns: i32,
    pub median_us: f64,
    pub worst_us: f64,
}

/// A page-locked, mapped buffer of `words` u32, freed on drop.
struct Words {
    ptr: *mut u32,
    words: usize,
}

impl Words {
    fn new(words: usize) -> CudaResult<Words> {
        // SAFETY: a plain page-locked allocation, zeroed before use.
        let ptr = unsafe { result::malloc_host(4 * words, sys::CU_MEMHOSTALLOC_DEVICEMAP) }
            .map_err(|e| CudaError::driver("allocating the probe's words", e))?
            as *mut u32;
        // SAFETY: `ptr` holds `words` u32.
        unsafe { std::ptr::write_bytes(ptr, 0, words) };
        Ok(Words { ptr, words })
    }

    fn word(&self, k: usize) -> &AtomicU32 {
        assert!(k < self.words);
        // SAFETY: inside the allocation, u32-aligned (page-aligned base).
        unsafe { AtomicU32::from_ptr(self.ptr.add(k)) }
    }

    fn mapped(&self) -> CudaResult<u64> {
        let mut d: sys::CUdeviceptr = 0;
        // SAFETY: allocated by `cuMemHostAlloc` with `DEVICEMAP`.
        unsafe { sys::cuMemHostGetDevicePointer_v2(&mut d, self.ptr.cast(), 0) }
            .result()
            .map_err(|e| CudaError::driver("mapping the probe's words", e))?;
        Ok(d)
    }
}

impl Drop for Words {
    fn drop(&mut self) {
        // SAFETY: allocated by `malloc_host`, freed once; nothing uses it any more.
        let _ = unsafe { result::free_host(self.ptr.cast()) };
    }
}

/// Runs every configuration `reps` times: the kernel is launched and given ~20 us to start
/// polling, the host stores the gate and spins until every block's answer arrives.
pub(crate) fn gate_probe(dev: &Device, reps: usize) -> CudaResult<Vec<GateProbe>> {
    dev.bind()?;
    let gate = Words::new(1)?;
    let acks = Words::new(128)?;
    let (gate_d, acks_d) = (gate.mapped()?, acks.mapped()?);
    let func = dev.func("k_gate_probe");
    let mut out = Vec::new();
    let mut want = 0u32;
    for blocks in [1u32, 16, 80] {
        for (mode, poll) in [(0i32, "acquire"), (1, "volatile")] {
            for sleep_ns in [0i32, 256] {
                let mut us = Vec::with_capacity(reps);
                for _ in 0..reps {
                    want += 1;
                    let (mut g, mut a, mut w, mut m, mut s) =
                        (gate_d, acks_d, want, mode, sleep_ns);
                    let mut params: Vec<*mut std::ffi::c_void> = vec![
                        (&mut g as *mut u64).cast(),
                        (&mut a as *mut u64).cast(),
                        (&mut w as *mut u32).cast(),
                        (&mut m as *mut i32).cast(),
                        (&mut s as *mut i32).cast(),
                    ];
                    // SAFETY: the arguments match k_gate_probe's signature; both buffers
                    // outlive the kernel (the stream is synchronized below).
                    unsafe {
                        result::launch_kernel(
                            func.0,
                            (blocks, 1, 1),
                            (32, 1, 1),
                            0,
                            dev.cu_stream(),
                            &mut params,
                        )
                    }
                    .map_err(|e| CudaError::driver("launching k_gate_probe", e))?;
                    let start = Instant::now();
                    while start.elapsed() < Duration::from_micros(20) {}
                    let t0 = Instant::now();
                    gate.word(0).store(want, Ordering::Release);
                    while (0..blocks as usize).any(|b| acks.word(b).load(Ordering::Acquire) != want)
                    {
                        if t0.elapsed() > Duration::from_secs(5) {
                            return Err(CudaError::driver("k_gate_probe", "no answer within 5 s"));
                        }
                    }
                    us.push(t0.elapsed().as_secs_f64() * 1e6);
                    dev.stream
                        .synchronize()
                        .map_err(|e| CudaError::driver("synchronizing", e))?;
                }
                us.sort_by(f64::total_cmp);
                out.push(GateProbe {
                    blocks,
                    poll,
                    sleep_ns,
                    median_us: us[us.len() / 2],
                    worst_us: us[us.len() - 1],
                });
            }
        }
    }
    Ok(out)
}
