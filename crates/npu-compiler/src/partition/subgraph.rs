//! One partition as a graph of its own, ready for [`crate::compile`].

use super::Partition;
use npu_ir::{Graph, Node, ValueId, ValueKind, WeightInfo};
use std::collections::HashMap;

/// The graph of `part`: its nodes, its boundary inputs as graph inputs (same names, so
/// values are matched by name across partitions, and state inputs such as a KV cache keep
/// the name that device state is keyed by), the weights and constants it reads, and its
/// boundary outputs as graph outputs.
pub fn extract(graph: &Graph, part: &Partition) -> Graph {
    let mut sub = Graph {
        model_name: format!("{}.p{}", graph.model_name, part.id),
        pytorch_version: graph.pytorch_version.clone(),
        values: Vec::new(),
        nodes: Vec::with_capacity(part.nodes.len()),
        inputs: Vec::with_capacity(part.inputs.len()),
        outputs: Vec::with_capacity(part.outputs.len()),
        weights: Vec::new(),
    };
    let mut map: HashMap<ValueId, ValueId> = HashMap::new();
    for (index, &v) in part.inputs.iter().enumerate() {
        let val = graph.value(v);
        let id = sub.add_value(val.name.clone(), val.ty.clone(), ValueKind::Input { index });
        sub.inputs.push(id);
        map.insert(v, id);
    }
    for &n in &part.nodes {
        let node = &graph.nodes[n];
        let node_id = npu_ir::NodeId(sub.nodes.len() as u32);
        let mut inputs = Vec::with_capacity(node.inputs.len());
        for &v in &node.inputs {
            let id = match map.get(&v) {
                Some(&id) => id,
                None => {
                    let val = graph.value(v);
                    if let ValueKind::Weight { key } = &val.kind {
                        if !sub.weights.iter().any(|w| &w.key == key) {
                            sub.weights.push(WeightInfo {
                                key: key.clone(),
                                ty: graph
                                    .weights
                                    .iter()
                                    .find(|w| &w.key == key)
                                    .map_or_else(|| val.ty.clone(), |w| w.ty.clone()),
                            });
                        }
                    }
                    // Weights and constants keep their kind; anything else here would be
                    // a value produced outside the partition but missing from its inputs.
                    debug_assert!(
                        matches!(val.kind, ValueKind::Weight { .. } | ValueKind::Constant(_)),
                        "partition {} reads '{}' without declaring it",
                        part.id,
                        val.name
                    );
                    let id = sub.add_value(val.name.clone(), val.ty.clone(), val.kind.clone());
                    map.insert(v, id);
                    id
                }
            };
            inputs.push(id);
        }
        let mut outputs = Vec::with_capacity(node.outputs.len());
        for (index, &v) in node.outputs.iter().enumerate() {
            let val = graph.value(v);
            let id = sub.add_value(
                val.name.clone(),
                val.ty.clone(),
                ValueKind::NodeOutput {
                    node: node_id,
                    index,
                },
            );
            map.insert(v, id);
            outputs.push(id);
        }
        sub.nodes.push(Node {
            name: node.name.clone(),
            op_type: node.op_type.clone(),
            op: node.op.clone(),
            inplace: node.inplace,
            inputs,
            outputs,
        });
    }
    sub.outputs = part.outputs.iter().map(|v| map[v]).collect();
    sub
}
