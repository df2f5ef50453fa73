//! Runs with inputs and outputs in device memory the caller owns (a framework's CUDA
//! tensors): device-to-device copies into and out of the program's fixed buffers, so the
//! captured graph stays valid and nothing travels through the host.

use super::{io_bytes, CudaExecutable};
use crate::error::CudaError;
use crate::state::CudaState;
use cudarc::driver::result;
use npu_runtime::{downcast_state, DeviceState, Result, RuntimeError};

/// A caller-owned device allocation on this backend's device (primary context): its
/// address and size in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DevicePtr {
    pub ptr: u64,
    pub bytes: usize,
}

fn tensor_err(name: &str, message: String) -> RuntimeError {
    RuntimeError::Tensor {
        name: name.into(),
        message,
    }
}

impl CudaExecutable {
    /// Like [`npu_runtime::Executable::run`] with device pointers: `inputs[i]` holds program
    /// input `i` in its storage dtype (`None`: a state input that keeps its device content);
    /// `outputs` receive the outputs that are not state, in program order, in their storage
    /// dtype. The caller must have finished writing the inputs (its stream synchronized);
    /// the copies and the run are ordered on this backend's stream, synchronized before
    /// returning.
    pub fn run_device(
        &mut self,
        inputs: &[Option<DevicePtr>],
        outputs: &[DevicePtr],
        state: &mut dyn DeviceState,
    ) -> Result<()> {
        let state = downcast_state::<CudaState>(state)?;
        self.dev.bind()?;
        let n_in = self.program.inputs.len();
        if inputs.len() != n_in {
            return Err(RuntimeError::InvalidProgram(format!(
                "{} device inputs given, the program has {n_in}",
                inputs.len()
            )));
        }
        let stream = self.dev.cu_stream();
        let mut ptrs = Vec::with_capacity(n_in);
        for (i, given) in inputs.iter().enumerate() {
            let io = self.program.inputs[i].clone();
            let dst = match &self.inputs[i] {
                Some(b) => b.ptr,
                None => state.ensure(&io)?.buf.ptr,
            };
            match given {
                Some(p) => {
                    let need = io_bytes(&io);
                    if p.bytes != need {
                        return Err(tensor_err(
                            &io.name,
                            format!(
                                "the device tensor has {} bytes, {}{:?} needs {need}",
                                p.bytes, io.storage, io.shape
                            ),
                        ));
                    }
                    // SAFETY: both allocations hold `need` bytes (checked above and at
                    // prepare); the copy is ordered on the stream the run uses.
                    unsafe { result::memcpy_dtod_async(dst, p.ptr, need, stream) }
                        .map_err(|e| CudaError::driver(format!("copying input {}", io.name), e))?;
                }
                None if self.inputs[i].is_some() => {
                    return Err(RuntimeError::MissingInput {
                        name: io.name.clone(),
                        dtype: io.dtype,
                        shape: io.shape.clone(),
                    })
                }
                None => {}
            }
            ptrs.push(dst);
        }
        self.bind(ptrs);
        if let Err(e) = self.launch(false) {
            let _ = self.sync();
            return Err(e);
        }
        let plain: Vec<usize> = (0..self.outputs.len())
            .filter(|&o| self.outputs[o].is_some())
            .collect();
        if outputs.len() != plain.len() {
            return Err(RuntimeError::InvalidProgram(format!(
                "{} device outputs given, the program returns {}",
                outputs.len(),
                plain.len()
            )));
        }
        for (p, &oi) in outputs.iter().zip(&plain) {
            let o = &self.program.outputs[oi];
            let need = io_bytes(o);
            if p.bytes != need {
                return Err(tensor_err(
                    &o.name,
                    format!(
                        "the output tensor has {} bytes, {}{:?} needs {need}",
                        p.bytes, o.storage, o.shape
                    ),
                ));
            }
            if let Some(src) = &self.outputs[oi] {
                // SAFETY: both allocations hold `need` bytes; ordered after the run.
                unsafe { result::memcpy_dtod_async(p.ptr, src.ptr, need, stream) }
                    .map_err(|e| CudaError::driver(format!("copying output {}", o.name), e))?;
            }
        }
        self.finish()
    }
}
