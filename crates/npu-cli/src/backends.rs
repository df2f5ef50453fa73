//! Backends by name for the CLI: `cpu` (the reference), `cuda` (NVIDIA GPUs) and `wgpu` (any
//! Vulkan, Metal or DX12 adapter; `NPU_WGPU_ADAPTER` picks one by name).

use anyhow::{bail, Context, Result};
use npu_runtime::Backend;

/// Names `backend_by_name` knows.
pub const KNOWN: &[&str] = &["cpu", "cuda", "wgpu"];

/// The backend called `name`.
pub fn backend_by_name(name: &str) -> Result<Box<dyn Backend>> {
    match name {
        "cpu" => Ok(Box::new(npu_runtime::CpuBackend::new())),
        "cuda" => {
            let b = npu_cuda::CudaBackend::new().context("the cuda backend cannot start")?;
            Ok(Box::new(b))
        }
        "wgpu" => {
            let b = npu_wgpu::WgpuBackend::new().context("the wgpu backend cannot start")?;
            Ok(Box::new(b))
        }
        other => bail!("unknown backend '{other}' (known: {})", KNOWN.join(", ")),
    }
}
