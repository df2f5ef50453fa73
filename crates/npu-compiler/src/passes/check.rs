//! Constraint check: every reason the target cannot run the graph, all at once.

use crate::error::Violation;
use crate::graph::CGraph;
use crate::target::Target;

pub fn check(g: &CGraph, target: &Target) -> Vec<Violation> {
    let mut out = Vec::new();
    for node in &g.nodes {
        let mut report = |message: String| {
            out.push(Violation {
                node: node.name.clone(),
                op_type: node.op_type.clone(),
                message,
            });
        };
        if let Some(reason) = target.unsupported_reason(node) {
            report(reason);
        }
        if let Some(op) = node.op.ir() {
            let out_dtypes = node.outputs.iter().map(|v| g.ty(*v).dtype);
            if let Some(reason) = crate::target::integer_arithmetic(op, out_dtypes) {
                report(reason);
            }
        }
        for v in node.outputs.iter().chain(&node.inputs) {
            let val = g.value(*v);
            if val.ty.numel() == 0 {
                report(format!(
                    "tensor '{}' has zero elements {:?}",
                    val.name, val.ty.shape
                ));
                break;
            }
        }
    }
    out
}
