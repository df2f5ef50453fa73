//! Rust errors as `npu` exceptions, and the panic guard of every entry point.
//!
//! Errors are carried as [`Fail`] (an exception class name and the Rust error's one-line
//! message) until the GIL is held again; then [`PyErr::from`] looks the class up in
//! `npu._errors`, so the class hierarchy lives in one place, in Python.

use npu_compiler::{CompileError, NpubinError};
use npu_ir::IrError;
use npu_runtime::RuntimeError;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// An error on its way to Python: the `npu._errors` class name and the message.
#[derive(Debug)]
pub struct Fail {
    pub kind: &'static str,
    pub msg: String,
}

pub type Res<T> = Result<T, Fail>;

impl Fail {
    pub fn new(kind: &'static str, msg: impl Into<String>) -> Fail {
        Fail {
            kind,
            msg: msg.into(),
        }
    }
    pub fn runtime(msg: impl Into<String>) -> Fail {
        Fail::new("RuntimeError", msg)
    }
    pub fn input(msg: impl Into<String>) -> Fail {
        Fail::new("InputError", msg)
    }
}

impl From<Fail> for PyErr {
    fn from(f: Fail) -> PyErr {
        Python::with_gil(|py| {
            let class = py
                .import("npu._errors")
                .and_then(|m| m.getattr(f.kind))
                .and_then(|c| {
                    c.downcast_into::<pyo3::types::PyType>()
                        .map_err(PyErr::from)
                });
            match class {
                Ok(c) => PyErr::from_type(c, (f.msg,)),
                // The package is broken if its error module is missing; still say why.
                Err(_) => PyRuntimeError::new_err(f.msg),
            }
        })
    }
}

/// The error and its causes, each said once: "cannot read X: bad magic".
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut msg = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let s = c.to_string();
        if !msg.ends_with(&s) {
            msg.push_str(": ");
            msg.push_str(&s);
        }
        cause = c.source();
    }
    msg
}

impl From<IrError> for Fail {
    fn from(e: IrError) -> Fail {
        Fail::new("IRError", chain(&e))
    }
}

impl From<CompileError> for Fail {
    fn from(e: CompileError) -> Fail {
        match e {
            CompileError::Ir(e) => e.into(),
            e => Fail::new("CompileError", chain(&e)),
        }
    }
}

impl From<NpubinError> for Fail {
    fn from(e: NpubinError) -> Fail {
        Fail::new("NpubinError", chain(&e))
    }
}

impl From<RuntimeError> for Fail {
    fn from(e: RuntimeError) -> Fail {
        let kind = match &e {
            RuntimeError::MissingWeight { .. }
            | RuntimeError::WeightMismatch { .. }
            | RuntimeError::BadSafetensors { .. }
            | RuntimeError::UnsupportedFileDType { .. } => "WeightError",
            RuntimeError::UnknownInput { .. }
            | RuntimeError::MissingInput { .. }
            | RuntimeError::InputMismatch { .. } => "InputError",
            _ => "RuntimeError",
        };
        Fail::new(kind, chain(&e))
    }
}

impl From<PyErr> for Fail {
    fn from(e: PyErr) -> Fail {
        Fail::runtime(e.to_string())
    }
}

/// Runs `f`, turning a panic into `npu.RuntimeError` ("internal error ...") so that no
/// panic unwinds into the interpreter.
pub fn guard<T>(f: impl FnOnce() -> Res<T>) -> PyResult<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r.map_err(PyErr::from),
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            Err(Fail::runtime(format!("internal error in npu (please report): {what}")).into())
        }
    }
}

/// [`guard`] with the GIL released while `f` runs (compiles and runs).
pub fn guard_nogil<T: Send>(py: Python<'_>, f: impl FnOnce() -> Res<T> + Send) -> PyResult<T> {
    let r = py.allow_threads(|| catch_unwind(AssertUnwindSafe(f)));
    guard(|| match r {
        Ok(r) => r,
        Err(p) => std::panic::resume_unwind(p),
    })
}
