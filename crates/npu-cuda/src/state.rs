//! Device-resident state (the KV cache): named device buffers shared by the executables
//! that are given the same state.

use crate::device::{DevBuf, Device};
use npu_ir::DType;
use npu_program::program::IoTensor;
use npu_runtime::backend::{check_shared_state, check_state_write, missing_state};
use npu_runtime::tensor::cast_bytes;
use npu_runtime::{DeviceState, HostTensor, Result, RuntimeError};
use std::any::Any;
use std::collections::HashMap;
use std::sync::Arc;

pub(crate) struct StateBuf {
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub buf: DevBuf,
}

pub struct CudaState {
    pub(crate) dev: Arc<Device>,
    pub(crate) bufs: HashMap<String, StateBuf>,
}

fn state_err(name: &str, message: String) -> RuntimeError {
    RuntimeError::State {
        name: name.into(),
        message,
    }
}

impl CudaState {
    /// The buffer for a state input, created zeroed on first use.
    pub(crate) fn ensure(&mut self, io: &IoTensor) -> Result<&mut StateBuf> {
        if !self.bufs.contains_key(&io.name) {
            let bytes = io.shape.iter().product::<usize>() * io.storage.size_bytes();
            let buf = DevBuf::zeroed(&self.dev, bytes, &io.name)?;
            self.bufs.insert(
                io.name.clone(),
                StateBuf {
                    dtype: io.storage,
                    shape: io.shape.clone(),
                    buf,
                },
            );
        }
        let s = self
            .bufs
            .get_mut(&io.name)
            .ok_or_else(|| state_err(&io.name, "missing".into()))?;
        check_shared_state(io, s.dtype, &s.shape)?;
        Ok(s)
    }
}

impl DeviceState for CudaState {
    fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = self.bufs.keys().cloned().collect();
        v.sort();
        v
    }

    fn read(&self, name: &str) -> Result<HostTensor> {
        let s = self.bufs.get(name).ok_or_else(|| missing_state(name))?;
        let mut t = HostTensor::zeros(s.dtype, s.shape.clone());
        s.buf.download(t.bytes_mut(), name)?;
        Ok(t)
    }

    fn write(&mut self, name: &str, value: &HostTensor) -> Result<()> {
        let s = self.bufs.get(name).ok_or_else(|| missing_state(name))?;
        check_state_write(name, &s.shape, value)?;
        let mut bytes = vec![0u8; s.buf.len];
        cast_bytes(value.bytes(), value.dtype(), &mut bytes, s.dtype)?;
        self.dev.bind()?;
        s.buf.upload(&bytes, name)?;
        Ok(())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}
