//! Runtime errors: every variant names the thing at fault (tensor, step, file). A variant
//! with a `source` does not repeat it in its message (see `npu_ir::error_chain`).

use npu_ir::DType;

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("cannot read {path}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write {path}")]
    Write {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// A tensor, arena or weight set larger than the memory limit, refused before allocation.
    #[error(
        "{what} needs {bytes} bytes, more than the memory limit of {limit} bytes (--max-memory)"
    )]
    TooLarge {
        what: String,
        bytes: u128,
        limit: u64,
    },
    #[error("{path}: not a valid safetensors file: {message}")]
    BadSafetensors { path: String, message: String },
    #[error("{path}: tensor '{name}' has unsupported dtype {dtype}")]
    UnsupportedFileDType {
        path: String,
        name: String,
        dtype: String,
    },
    #[error("weight '{key}' is missing from {file} (the program needs it{extra})")]
    MissingWeight {
        key: String,
        file: String,
        extra: String,
    },
    #[error("weight '{key}' in {file}: expected {expected_dtype}{expected_shape:?}, found {found_dtype}{found_shape:?}")]
    WeightMismatch {
        key: String,
        file: String,
        expected_shape: Vec<usize>,
        expected_dtype: DType,
        found_shape: Vec<usize>,
        found_dtype: DType,
    },
    #[error("weight slot '{slot}': {message}")]
    Recipe { slot: String, message: String },
    #[error("unknown input '{name}' (the program's inputs: {known})")]
    UnknownInput { name: String, known: String },
    #[error("missing input '{name}' {dtype}{shape:?}")]
    MissingInput {
        name: String,
        dtype: DType,
        shape: Vec<usize>,
    },
    #[error("input '{name}': expected {expected_dtype}{expected_shape:?}, got {found_dtype}{found_shape:?}")]
    InputMismatch {
        name: String,
        expected_shape: Vec<usize>,
        expected_dtype: DType,
        found_shape: Vec<usize>,
        found_dtype: DType,
    },
    #[error("state '{name}': {message}")]
    State { name: String, message: String },
    #[error("invalid program: {0}")]
    InvalidProgram(String),
    #[error("step {step} ({origin}, {kernel}): {message}")]
    Step {
        step: usize,
        origin: String,
        kernel: &'static str,
        message: String,
    },
    #[error("tensor '{name}': {message}")]
    Tensor { name: String, message: String },
    #[error("cannot convert {from} to {to}")]
    Conversion { from: DType, to: DType },
    #[error("fallback interpreter, node '{node}' ({op_type}): {message}")]
    Fallback {
        node: String,
        op_type: String,
        message: String,
    },
    #[error("{count} node(s) can run neither on the target nor on the CPU fallback: {nodes}")]
    Unrunnable { count: usize, nodes: String },
    /// Compiling or decomposing a partition failed (the DAG executor and the fallback
    /// compile; this crate only carries the error).
    #[error(transparent)]
    Compile(Box<dyn std::error::Error + Send + Sync>),
    #[error("partition {partition} ({device}): {message}")]
    Partition {
        partition: usize,
        device: &'static str,
        message: String,
    },
}

pub type Result<T, E = RuntimeError> = std::result::Result<T, E>;
