//! The conformance suite on the wgpu backend: on a GPU, or on a software Vulkan (Mesa's
//! lavapipe, `mesa-vulkan-drivers`) where there is none. Each test skips where no adapter
//! answers.

use npu_runtime::Backend;
use npu_wgpu::{WgpuBackend, WgpuError};

fn wgpu() -> Result<Box<dyn Backend>, String> {
    match WgpuBackend::new() {
        Ok(b) => Ok(Box::new(b)),
        Err(e @ WgpuError::NoAdapter(_)) => Err(e.to_string()),
        Err(e) => panic!("the wgpu backend failed to start: {e}"),
    }
}

npu_conformance::suite!("wgpu", wgpu);
