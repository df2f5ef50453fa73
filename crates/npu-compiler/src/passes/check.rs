//! Constraint check: every reason the target cannot run the graph, all at once.

use crate::error::Violation;
use crate::graph::CGraph;
use crate::passes::validate;
use crate::target::{operand_reason, Target};

pub fn check(g: &CGraph, target: &Target) -> Vec<Violation> {
    let mut out = Vec::new();
    for node in &g.nodes {
        // The op itself, else its operands: the same questions the partitioner asks, one
        // report per node.
        let reason = target
            .unsupported_reason(node)
            .or_else(|| node.op.ir().and_then(|op| operand_reason(op, node, g)))
            .or_else(|| validate::node_problem(node.op.ir(), node, g));
        let reason = reason.or_else(|| {
            node.outputs.iter().chain(&node.inputs).find_map(|v| {
                let val = g.value(*v);
                (val.ty.numel() == 0)
                    .then(|| format!("tensor '{}' has zero elements {:?}", val.name, val.ty.shape))
            })
        });
        if let Some(message) = reason {
            out.push(Violation {
                node: node.name.clone(),
                op_type: node.op_type.clone(),
                message,
            });
        }
    }
    out
}
