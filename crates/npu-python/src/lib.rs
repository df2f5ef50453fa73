//! `npu._native`: the Rust compiler and runtime as a Python extension module (PyO3, abi3).
//!
//! This layer is thin on purpose: it converts arrays to [`npu_runtime::HostTensor`]s and
//! back, releases the GIL around every compile and run, and turns every Rust error into the
//! matching `npu` exception class (defined in Python, `npu/_errors.py`) with the same
//! one-line message. Every entry point runs under [`guard`], so a panic becomes an
//! `npu.RuntimeError` instead of crossing into Python. The Python packages `npu`,
//! `npu_compiler` and `npu_runtime` build the public APIs on top.

mod compile;
mod convert;
mod error;
mod runtime;
mod text;

use pyo3::prelude::*;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    compile::register(m)?;
    runtime::register(m)?;
    text::register(m)?;
    Ok(())
}
