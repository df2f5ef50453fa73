//! The portable GPU backend: compiled programs on any wgpu adapter (Vulkan, Metal, DX12, and
//! software Vulkan such as Mesa's lavapipe, which is how CI runs it).
//!
//! Every kernel kind is generated as WGSL per step (`wgsl/`), with f16 and bf16 stored packed
//! and converted in the shader and f32 arithmetic; the program's buffers, the KV cache state
//! and the single readback per run are in `executable.rs`. The kernels are written for
//! correctness on every layout first (one thread per output element or row); decode's
//! matrix-vector products (`wgsl/gemv.rs`) and attention (`wgsl/attention.rs`) have paths of
//! their own. Buffers beyond the adapter's binding size are bound in parts.

mod device;
mod error;
mod executable;
pub mod wgsl;

pub use error::WgpuError;
pub use executable::{WgpuExecutable, WgpuState};

use executable::WeightCache;
use npu_program::Program;
use npu_runtime::{Backend, Executable, Result, WeightSource};
use std::sync::{Arc, Mutex};

/// A wgpu device that prepares programs.
pub struct WgpuBackend {
    gpu: Arc<device::Gpu>,
    weight_cache: Mutex<WeightCache>,
}

impl WgpuBackend {
    /// Opens the best adapter (see `device.rs`; `NPU_WGPU_ADAPTER` picks one by name).
    pub fn new() -> std::result::Result<WgpuBackend, WgpuError> {
        Self::open(None)
    }

    /// As [`WgpuBackend::new`], with one binding holding at most `bytes` (rounded down to a
    /// multiple of 256): larger tensors bind in parts of that size, as those beyond the
    /// adapter's own limit do. Tests use it to exercise that on any adapter.
    pub fn with_max_binding(bytes: u64) -> std::result::Result<WgpuBackend, WgpuError> {
        Self::open(Some(bytes))
    }

    fn open(cap: Option<u64>) -> std::result::Result<WgpuBackend, WgpuError> {
        Ok(WgpuBackend {
            gpu: Arc::new(device::open(cap)?),
            weight_cache: Mutex::new(WeightCache::new()),
        })
    }

    /// Whether the adapter is a CPU (a software Vulkan such as lavapipe): correct, but no
    /// faster than the CPU backend.
    pub fn is_software(&self) -> bool {
        self.gpu.info.device_type == wgpu::DeviceType::Cpu
    }

    /// The adapter: name, type, driver and graphics API.
    pub fn describe(&self) -> String {
        let i = &self.gpu.info;
        format!(
            "{} ({:?}, {} {}, {:?})",
            i.name, i.device_type, i.driver, i.driver_info, i.backend
        )
    }
}

impl Backend for WgpuBackend {
    fn name(&self) -> &'static str {
        "wgpu"
    }

    fn prepare(
        &self,
        program: &Program,
        weights: &dyn WeightSource,
    ) -> Result<Box<dyn Executable>> {
        let mut cache = self.weight_cache.lock().unwrap_or_else(|e| e.into_inner());
        Ok(Box::new(executable::WgpuExecutable::new(
            self.gpu.clone(),
            program,
            weights,
            &mut cache,
        )?))
    }
}
