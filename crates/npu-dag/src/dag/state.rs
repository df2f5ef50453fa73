//! Device state for graphs with no NPU partition: named host buffers.

use npu_runtime::backend::{missing_state, DeviceState};
use npu_runtime::tensor::HostTensor;
use npu_runtime::Result;
use std::any::Any;
use std::collections::HashMap;

/// Named host tensors standing in for device state.
#[derive(Default)]
pub struct HostState {
    bufs: HashMap<String, HostTensor>,
}

impl DeviceState for HostState {
    fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = self.bufs.keys().cloned().collect();
        v.sort();
        v
    }

    fn read(&self, name: &str) -> Result<HostTensor> {
        self.bufs
            .get(name)
            .cloned()
            .ok_or_else(|| missing_state(name))
    }

    fn write(&mut self, name: &str, value: &HostTensor) -> Result<()> {
        self.bufs.insert(name.to_string(), value.clone());
        Ok(())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}
