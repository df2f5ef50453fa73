use std::path::Path;

/// Everything that can be wrong with an IR file. Each variant names the thing at fault.
#[derive(Debug, thiserror::Error)]
pub enum IrError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    InFile {
        path: String,
        #[source]
        source: Box<IrError>,
    },
    #[error("malformed IR JSON at line {line}, column {column}: {message}")]
    Json {
        line: usize,
        column: usize,
        message: String,
    },
    #[error("tensor '{tensor}' has unknown dtype '{dtype}'")]
    UnknownDType { tensor: String, dtype: String },
    #[error(
        "tensor '{tensor}' has a dynamic or invalid shape {shape}: static shapes are required"
    )]
    DynamicShape { tensor: String, shape: String },
    #[error("node '{node}': input '{input}' refers to {what}")]
    UnresolvedInput {
        node: String,
        input: String,
        what: String,
    },
    #[error("node '{node}' ({op_type}): attribute '{attr}': {message}")]
    BadAttr {
        node: String,
        op_type: String,
        attr: String,
        message: String,
    },
    #[error("node '{node}' ({op_type}): {message}")]
    BadNode {
        node: String,
        op_type: String,
        message: String,
    },
    #[error("duplicate tensor name '{0}'")]
    DuplicateName(String),
    #[error("graph output '{0}' is not produced by any node or input")]
    UnknownOutput(String),
    #[error("graph output '{name}' is declared {declared} but is {actual}")]
    OutputMismatch {
        name: String,
        declared: String,
        actual: String,
    },
    #[error("constant '{name}': {message}")]
    BadConstant { name: String, message: String },
}

impl IrError {
    pub(crate) fn in_file(self, path: &Path) -> IrError {
        IrError::InFile {
            path: path.display().to_string(),
            source: Box::new(self),
        }
    }
}
