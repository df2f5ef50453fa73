//! Backends by name for the CLI: `cpu` (the reference) and `cuda` (NVIDIA GPUs).

use anyhow::{bail, Context, Result};
use npu_runtime::Backend;

/// Names `backend_by_name` knows.
pub const KNOWN: &[&str] = &["cpu", "cuda"];

/// The backend called `name`.
pub fn backend_by_name(name: &str) -> Result<Box<dyn Backend>> {
    match name {
        "cpu" => Ok(Box::new(npu_runtime::CpuBackend::new())),
        "cuda" => {
            let b = npu_cuda::CudaBackend::new().context("the cuda backend cannot start")?;
            Ok(Box::new(b))
        }
        other => bail!("unknown backend '{other}' (known: {})", KNOWN.join(", ")),
    }
}
