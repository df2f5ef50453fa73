use std::path::Path;

/// Everything that can be wrong with an IR file. Each variant names the thing at fault.
/// A variant with a `source` does not repeat it in its message: printers walk the chain
/// (`{:#}` on an `anyhow::Error`, or [`crate::error_chain`]), so each cause appears once.
#[derive(Debug, thiserror::Error)]
pub enum IrError {
    #[error("cannot read {path}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}")]
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
    #[error("tensor '{tensor}' {ty} is too large: its size in bytes overflows")]
    TooLarge { tensor: String, ty: String },
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

/// An error and its causes on one line, `outer: cause: root`, each said once (what
/// `anyhow`'s `{:#}` prints), for code that turns errors into strings.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_file_says_its_cause_once() {
        let e = crate::load(Path::new("/nonexistent/x.ir.json")).unwrap_err();
        let s = error_chain(&e);
        assert_eq!(s.matches("No such file").count(), 1, "{s}");
        assert!(s.starts_with("cannot read /nonexistent/x.ir.json: "), "{s}");
    }
}
