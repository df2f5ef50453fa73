//! The conformance suite on the wgpu backend: on a GPU, or on a software Vulkan (Mesa's
//! lavapipe, `mesa-vulkan-drivers`) where there is none. Each test skips where no adapter
//! answers, unless `NPU_REQUIRE_WGPU` is set.

use npu_runtime::Backend;
use npu_wgpu::{WgpuBackend, WgpuError};

fn wgpu() -> Result<Box<dyn Backend>, String> {
    match WgpuBackend::new() {
        Ok(b) => Ok(Box::new(b)),
        // NPU_REQUIRE_WGPU=1 (the GPU machine's script): a missing adapter is a failure there.
        Err(e @ WgpuError::NoAdapter(_)) if std::env::var_os("NPU_REQUIRE_WGPU").is_none() => {
            Err(e.to_string())
        }
        Err(e) => panic!("the wgpu backend failed to start: {e}"),
    }
}

npu_conformance::suite!("wgpu", wgpu);
