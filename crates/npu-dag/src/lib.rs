//! Whole graphs, partitioned: the DAG executor (`dag`) compiles each NPU partition and
//! prepares it on a backend, and runs the rest with the CPU fallback interpreter
//! (`fallback`), which evaluates IR ops directly. It sits above both the compiler and the
//! runtime, so running a compiled `.npubin` needs neither this crate nor the compiler's
//! passes.

pub mod dag;
pub mod fallback;

use npu_runtime::RuntimeError;

/// A compiler error as the runtime's error type (which cannot name the compiler's).
pub(crate) fn compile_error(e: npu_compiler::CompileError) -> RuntimeError {
    RuntimeError::Compile(Box::new(e))
}
