use npu_ir::IrError;

/// One reason a graph cannot be compiled for a target, naming its node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub node: String,
    pub op_type: String,
    pub message: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "node '{}' ({}): {}",
            self.node, self.op_type, self.message
        )
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    #[error(transparent)]
    Ir(#[from] IrError),
    #[error("unknown target '{0}' (known: {known})", known = crate::target::Target::names())]
    UnknownTarget(String),
    #[error("target '{target}' cannot compute in {dtype}")]
    UnsupportedDType { target: String, dtype: String },
    /// One line: the first violation, and how many more (`npu check` lists them all).
    #[error("{} constraint violation(s) for target '{target}': {}", violations.len(), first_and_count(violations))]
    Constraints {
        target: String,
        violations: Vec<Violation>,
    },
    #[error("node '{node}' ({op_type}): {message}")]
    Node {
        node: String,
        op_type: String,
        message: String,
    },
    #[error("internal error: the lowered program is inconsistent: {0}")]
    Internal(String),
}

fn first_and_count(violations: &[Violation]) -> String {
    match violations {
        [] => String::new(),
        [one] => one.to_string(),
        [first, rest @ ..] => format!("{first}; and {} more (`npu check` lists them)", rest.len()),
    }
}

impl CompileError {
    pub fn node(node: &crate::graph::CNode, message: impl Into<String>) -> CompileError {
        CompileError::Node {
            node: node.name.clone(),
            op_type: node.op_type.clone(),
            message: message.into(),
        }
    }
}
