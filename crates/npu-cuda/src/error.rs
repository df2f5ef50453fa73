//! Errors of the CUDA backend. They name the operation at fault; at the `Backend` boundary
//! they become `npu_runtime::RuntimeError`s, so no CUDA type leaks upward.

use npu_runtime::RuntimeError;

#[derive(Debug, thiserror::Error)]
pub enum CudaError {
    /// No driver library, no device, or the driver refused to start.
    #[error("no CUDA device: {0}")]
    NoDevice(String),
    #[error("CUDA driver error in {what}: {message}")]
    Driver { what: String, message: String },
    #[error("NVRTC could not compile {what}: {message}")]
    Compile { what: String, message: String },
    /// A library needed only by some programs (NVRTC on a kernel-cache miss, cuBLASLt for
    /// GEMMs) is not installed.
    #[error("{0} is not installed (it is loaded when a program first needs it)")]
    MissingLibrary(String),
    #[error("cuBLASLt error in {what}: {message}")]
    Blas { what: String, message: String },
    #[error("cuDNN error in {what}: {message}")]
    Dnn { what: String, message: String },
    /// `timeline::reset` / `take` without `NPU_CUDA_TIMELINE=1` when the device opened.
    #[error("no timeline: NPU_CUDA_TIMELINE=1 was not set when the device opened")]
    NoTimeline,
}

impl CudaError {
    pub(crate) fn driver(what: impl Into<String>, e: impl std::fmt::Debug) -> CudaError {
        CudaError::Driver {
            what: what.into(),
            message: format!("{e:?}"),
        }
    }
}

impl From<CudaError> for RuntimeError {
    fn from(e: CudaError) -> RuntimeError {
        RuntimeError::Tensor {
            name: "cuda".into(),
            message: e.to_string(),
        }
    }
}

pub type CudaResult<T> = Result<T, CudaError>;
