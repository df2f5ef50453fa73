//! Errors of the wgpu backend.

use npu_runtime::RuntimeError;

#[derive(Debug, thiserror::Error)]
pub enum WgpuError {
    /// No adapter (GPU, or a software Vulkan such as lavapipe) answered.
    #[error("no wgpu adapter ({0})")]
    NoAdapter(String),
    #[error("the wgpu device could not be opened on {adapter}: {message}")]
    Device { adapter: String, message: String },
    /// A setting of the backend (`NPU_WGPU_MAX_BINDING`, a constructor option) that cannot be used.
    #[error("wgpu backend setting: {0}")]
    Config(String),
}

impl From<WgpuError> for RuntimeError {
    fn from(e: WgpuError) -> RuntimeError {
        RuntimeError::InvalidProgram(e.to_string())
    }
}

/// A step this backend cannot run, with the reason (an op with no WGSL form, a dtype, a
/// tensor beyond the adapter's binding size).
pub fn step_error(
    step: usize,
    origin: &str,
    kernel: &'static str,
    message: impl Into<String>,
) -> RuntimeError {
    RuntimeError::Step {
        step,
        origin: origin.to_string(),
        kernel,
        message: message.into(),
    }
}
