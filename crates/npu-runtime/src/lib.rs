//! Backends and executors for compiled NPU programs: host tensors, weight loading with
//! load-time recipes, the [`Backend`] / [`Executable`] interface with device-resident
//! state, and the CPU backend (the reference implementation of every kernel kind).

pub mod backend;
pub mod compare;
pub mod cpu;
mod error;
pub mod limits;
pub mod prepare;
pub mod safetensors_file;
pub mod tensor;
pub mod weights;

pub use backend::{
    downcast_state, match_input, Backend, DeviceState, Executable, StepTime, StepTimes,
};
pub use cpu::CpuBackend;
pub use error::{Result, RuntimeError};
pub use safetensors_file::{read_safetensors, safetensors_bytes, write_safetensors};
pub use tensor::HostTensor;
pub use weights::{MemoryWeights, SafetensorsFile, SharedBytes, WeightBytes, WeightSource};
