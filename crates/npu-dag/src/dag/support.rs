//! The one support decision for a placed graph: a node runs on the target when placement
//! kept it there, on the CPU fallback when [`crate::fallback::unsupported`] accepts it, and
//! nowhere otherwise. `npu check`, `npu partition` and the DAG executor all ask this.

use crate::fallback;
use npu_compiler::partition::{Device, Placement};
use npu_ir::Graph;
use std::fmt;

/// A node that neither the target nor the CPU fallback can run.
#[derive(Debug, Clone, PartialEq)]
pub struct Unrunnable {
    /// Position in `graph.nodes`.
    pub node: usize,
    pub name: String,
    pub op_type: String,
    /// Why the target does not run it (or why it was forced to the CPU).
    pub target_reason: String,
    /// Why the CPU fallback cannot run it.
    pub cpu_reason: String,
}

impl fmt::Display for Unrunnable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "node '{}' ({}): {}; CPU fallback: {}",
            self.name, self.op_type, self.target_reason, self.cpu_reason
        )
    }
}

/// Every CPU-placed node the fallback interpreter cannot run, in graph order.
pub fn unrunnable(graph: &Graph, placements: &[Placement]) -> Vec<Unrunnable> {
    graph
        .nodes
        .iter()
        .zip(placements)
        .enumerate()
        .filter(|(_, (_, p))| p.device == Device::Cpu)
        .filter_map(|(i, (node, p))| {
            let cpu_reason = fallback::unsupported(node)?;
            Some(Unrunnable {
                node: i,
                name: node.name.clone(),
                op_type: node.op_type.clone(),
                target_reason: p
                    .reason
                    .clone()
                    .unwrap_or_else(|| "placed on the CPU".into()),
                cpu_reason,
            })
        })
        .collect()
}
