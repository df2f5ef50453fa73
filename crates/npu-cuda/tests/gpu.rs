//! The conformance suite on the CUDA backend. Each test skips in milliseconds where there is
//! no CUDA driver or device, as on CI.

use npu_cuda::{CudaBackend, CudaError};
use npu_runtime::Backend;

fn cuda() -> Result<Box<dyn Backend>, String> {
    match CudaBackend::new() {
        Ok(b) => Ok(Box::new(b)),
        Err(CudaError::NoDevice(why)) => Err(format!("no CUDA device ({why})")),
        Err(e) => panic!("the CUDA backend failed to start: {e}"),
    }
}

npu_conformance::suite!("cuda", cuda);
