//! The torch_ir IR JSON contract (PyPI `pytorch-ir` 0.2.x), read into a typed graph.
//!
//! [`parse_str`] / [`load`] turn IR JSON into a [`Graph`]: every node input resolved to a
//! [`ValueId`] (graph input, weight, embedded constant or node output), every op typed as an
//! [`Op`] with ATen schema defaults filled in where export dropped them, every shape static.
//! Ops this crate does not know are kept by name as [`Op::Unknown`] so a partitioner can
//! route them elsewhere. Nothing here knows about targets or kernels.

mod attrs;
mod composite;
mod dtype;
mod error;
mod ext;
mod graph;
mod inplace;
mod json;
mod op;
pub mod pointwise;

pub use attrs::{Scalar, ABSENT_TENSORS};
pub use composite::{Composite, Moment, Padding1d, SplitAt, StackKind};
pub use dtype::DType;
pub use error::{error_chain, IrError};
pub use ext::{
    base_name, ExtOp, GridPadding, IntOp, Interp, PadMode, Reduction, Window, DATA_DEPENDENT,
};
pub use graph::{
    ConstData, Graph, Node, NodeId, TensorType, Value, ValueId, ValueKind, WeightInfo,
};
pub use json::{RawIr, RawNode, RawTensor};
pub use op::{LogicOp, MinMax, Op, Pool2d};
pub use pointwise::{BinaryOp, TernaryOp, UnaryOp};

use std::path::Path;

/// Parses IR JSON text into a validated, typed graph.
pub fn parse_str(text: &str) -> Result<Graph, IrError> {
    let raw = json::parse_raw(text)?;
    Graph::from_raw(raw)
}

/// Types one op the way the graph reader does, for support queries that have no graph
/// (`n_inputs` tensor inputs, input 0 of rank `in_rank`). In-place variants type as their
/// functional op.
pub fn parse_op(
    op_type: &str,
    attrs: &serde_json::Map<String, serde_json::Value>,
    n_inputs: usize,
    in_rank: usize,
) -> Result<Op, IrError> {
    Op::parse(op_type, op_type, attrs, n_inputs, in_rank).map(|(op, _)| op)
}

/// Reads and parses an IR JSON file; errors name the file.
pub fn load(path: &Path) -> Result<Graph, IrError> {
    let text = std::fs::read_to_string(path).map_err(|e| IrError::Io {
        path: path.display().to_string(),
        source: e,
    })?;
    parse_str(&text).map_err(|e| e.in_file(path))
}
