//! The CUDA backend: NVRTC-compiled kernels (f16/bf16 storage, f32 accumulation),
//! generated CUDA C for fused elementwise expressions, cuBLASLt for large GEMMs and
//! convolutions (im2col on the GPU), a bandwidth-bound GEMV for M = 1, split-K
//! (flash-decoding) attention with GQA, in-place KV-cache updates, and one CUDA graph
//! replay per run. CUDA is loaded dynamically: the crate builds and links without it, and
//! [`CudaBackend::new`] says "no CUDA device" where there is none.

mod device;
mod dnn;
mod elementwise;
mod error;
mod executable;
mod gemm;
mod graph;
mod launch;
mod loc;
mod lt_call;
mod lt_tune;
mod nvrtc;
mod plan;
mod state;
mod sync;
pub mod timeline;

pub use error::CudaError;
pub use executable::{CudaExecutable, DevicePhases, DevicePtr, RunPhases};
pub use state::CudaState;

use device::{DevBuf, Device};
use npu_program::Program;
use npu_runtime::{Backend, Executable, Result, WeightSource};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

/// The CUDA backend on device 0. Weights uploaded by one `prepare` are shared with later
/// executables that need the same slot from the same source (prefill and decode).
pub struct CudaBackend {
    dev: Arc<Device>,
    weight_cache: Mutex<HashMap<String, Weak<DevBuf>>>,
}

impl CudaBackend {
    /// Opens the first CUDA device and compiles (or loads from the disk cache) the kernel
    /// library; `CudaError::NoDevice` when there is no driver or device.
    pub fn new() -> std::result::Result<CudaBackend, CudaError> {
        Ok(CudaBackend {
            dev: Device::open()?,
            weight_cache: Mutex::new(HashMap::new()),
        })
    }

    /// The device's name and compute capability.
    pub fn describe(&self) -> String {
        format!(
            "{} (sm_{}{}, {} SMs)",
            self.dev.name, self.dev.arch.0, self.dev.arch.1, self.dev.sms
        )
    }

    /// Prepares a program and returns the concrete executable (for timing tools).
    pub fn prepare_cuda(
        &self,
        program: &Program,
        weights: &dyn WeightSource,
    ) -> Result<CudaExecutable> {
        let mut cache = self.weight_cache.lock().unwrap_or_else(|e| e.into_inner());
        CudaExecutable::new(self.dev.clone(), program.clone(), weights, &mut cache)
    }
}

impl Backend for CudaBackend {
    fn name(&self) -> &'static str {
        "cuda"
    }

    fn prepare(
        &self,
        program: &Program,
        weights: &dyn WeightSource,
    ) -> Result<Box<dyn Executable>> {
        Ok(Box::new(self.prepare_cuda(program, weights)?))
    }

    fn startup(&self) -> Vec<(&'static str, f64)> {
        self.dev.startup()
    }
}
