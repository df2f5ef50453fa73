//! CUDA graph capture and replay of a whole run.

use crate::error::{CudaError, CudaResult};
use cudarc::driver::{result, sys};

pub(crate) struct Graph {
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
}

// SAFETY: graph handles are used by one thread at a time (the executable's owner).
unsafe impl Send for Graph {}

impl Graph {
    pub fn begin(stream: sys::CUstream) -> CudaResult<()> {
        // SAFETY: a valid stream of the bound context.
        unsafe {
            result::stream::begin_capture(
                stream,
                sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
            )
        }
        .map_err(|e| CudaError::driver("starting graph capture", e))
    }

    /// Ends the capture begun on `stream` (also after a failed launch, to leave the
    /// stream usable) and instantiates it.
    pub fn end(stream: sys::CUstream) -> CudaResult<Graph> {
        // SAFETY: ends the capture begun by `begin`.
        let graph = unsafe { result::stream::end_capture(stream) }
            .map_err(|e| CudaError::driver("ending graph capture", e))?;
        if graph.is_null() {
            return Err(CudaError::driver("ending graph capture", "empty graph"));
        }
        // SAFETY: a graph just captured.
        match unsafe { result::graph::instantiate(graph, sys::CUgraphInstantiate_flags(0)) } {
            Ok(exec) => Ok(Graph { graph, exec }),
            Err(e) => {
                // SAFETY: destroyed once.
                let _ = unsafe { result::graph::destroy(graph) };
                Err(CudaError::driver("instantiating the graph", e))
            }
        }
    }

    pub fn launch(&self, stream: sys::CUstream) -> CudaResult<()> {
        // SAFETY: an instantiated graph on a stream of its context.
        unsafe { result::graph::launch(self.exec, stream) }
            .map_err(|e| CudaError::driver("replaying the graph", e))
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        // SAFETY: created by `end`, destroyed once.
        unsafe {
            let _ = result::graph::exec_destroy(self.exec);
            let _ = result::graph::destroy(self.graph);
        }
    }
}
