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

/// A planned cuBLASLt matmul: D (col-major N x M) = alpha * op(A) op(B) + beta * C (+ bias);
/// C lies as D does (it is D itself when beta is 0).
pub(crate) struct LtCall {
    pub desc: ltsys::cublasLtMatmulDesc_t,
    pub layouts: [ltsys::cublasLtMatrixLayout_t; 3],
    pub algo: ltsys::cublasLtMatmulAlgo_t,
    /// A, B, C, D and the bias vector (`Loc::Null` without one).
    pub locs: [Loc; 5],
    pub ptrs: [u64; 5],
    /// The descriptor has a bias epilogue, whose pointer is set before each launch.
    pub bias: bool,
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
        if self.bias {
            // The bias pointer lives in the descriptor; cuBLASLt reads it when the matmul is
            // enqueued (or captured into a graph), so setting it per launch is enough.
            let p = self.ptrs[4];
            // SAFETY: a live descriptor and an 8-byte pointer value.
            unsafe {
                lt::set_matmul_desc_attribute(
                    self.desc,
                    ltsys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                    &p as *const u64 as *const c_void,
                    std::mem::size_of::<u64>(),
                )
            }
            .map_err(|e| CudaError::Blas {
                what: "bias pointer".into(),
                message: format!("{e:?}"),
            })?;
        }
        let handle = dev.lt()?;
        // SAFETY: pointers were resolved against live buffers; layouts match them.
        unsafe {
            lt::matmul(
                handle,
                self.desc,
                &self.alpha as *const f32 as *const c_void,
                &self.beta as *const f32 as *const c_void,
                self.ptrs[0] as *const c_void,
                self.layouts[0],
                self.ptrs[1] as *const c_void,
                self.layouts[1],
                self.ptrs[2] as *const c_void,
                self.layouts[2],
                self.ptrs[3] as *mut c_void,
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
