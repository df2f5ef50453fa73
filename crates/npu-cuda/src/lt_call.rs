//! A planned cuBLASLt matmul. It owns its descriptors (destroyed on drop) and launches
//! against pointers resolved from its `locs` by the executable before each run.

use crate::device::Device;
use crate::error::{CudaError, CudaResult};
use crate::loc::Loc;
use cudarc::cublaslt::result as lt;
use cudarc::cublaslt::sys as ltsys;
use std::ffi::c_void;

/// Scratch bytes cuBLASLt may use.
pub(crate) const LT_WORKSPACE: u64 = 32 << 20;

/// A planned cuBLASLt matmul: D (col-major N x M, f32) = alpha * op(A) op(B).
pub(crate) struct LtCall {
    pub desc: ltsys::cublasLtMatmulDesc_t,
    pub layouts: [ltsys::cublasLtMatrixLayout_t; 3],
    pub algo: ltsys::cublasLtMatmulAlgo_t,
    pub locs: [Loc; 3],
    pub ptrs: [u64; 3],
    pub alpha: f32,
    pub beta: f32,
}

// SAFETY: descriptors are plain host objects used by one thread at a time.
unsafe impl Send for LtCall {}

impl Drop for LtCall {
    fn drop(&mut self) {
        // SAFETY: created in `gemm::plan_lt`, destroyed once.
        unsafe {
            let _ = lt::destroy_matmul_desc(self.desc);
            for l in self.layouts {
                let _ = lt::destroy_matrix_layout(l);
            }
        }
    }
}

impl LtCall {
    pub fn launch(&self, dev: &Device, workspace: u64) -> CudaResult<()> {
        // SAFETY: pointers were resolved against live buffers; layouts match them.
        unsafe {
            lt::matmul(
                dev.lt.0,
                self.desc,
                &self.alpha as *const f32 as *const c_void,
                &self.beta as *const f32 as *const c_void,
                self.ptrs[0] as *const c_void,
                self.layouts[0],
                self.ptrs[1] as *const c_void,
                self.layouts[1],
                self.ptrs[2] as *const c_void,
                self.layouts[2],
                self.ptrs[2] as *mut c_void,
                self.layouts[2],
                &self.algo,
                workspace as *mut c_void,
                LT_WORKSPACE as usize,
                dev.cu_stream() as _,
            )
        }
        .map_err(|e| CudaError::Blas {
            what: "matmul".into(),
            message: format!("{e:?}"),
        })
    }
}
