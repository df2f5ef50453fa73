//! In-place ops through aliases. torch_ir records an in-place node with an output value of
//! its own, and later readers of the mutated tensor usually read that output. But when the
//! mutated tensor is an alias (`detach`, `alias`) of another value, later readers of the
//! other value read the old name, while in PyTorch they see the mutation (storage is
//! shared): `F.embedding(w, ids, max_norm=1)` renormalizes `w.detach()` in place and then
//! reads `w`. [`resolve_alias_mutations`] points such readers at the in-place output.

use crate::ext::base_name;
use crate::graph::{Graph, ValueKind};
use crate::op::Op;

/// Ops whose output shares its input's storage and shape (so a mutation of one is the
/// same mutation of the other).
fn is_alias(op_type: &str) -> bool {
    matches!(base_name(op_type), "detach" | "alias")
}

/// For every in-place node whose mutated input (input 0) is reached through aliases, makes
/// every later reader of any tensor of that alias chain read the node's output instead.
pub fn resolve_alias_mutations(g: &mut Graph<Op>) {
    for n in 0..g.nodes.len() {
        let node = &g.nodes[n];
        if !node.inplace || node.outputs.is_empty() {
            continue;
        }
        let Some(&target) = node.inputs.first() else {
            continue;
        };
        // the chain of aliases from the mutated value back to its root
        let mut chain = vec![target];
        let mut v = target;
        while let ValueKind::NodeOutput { node: p, .. } = g.value(v).kind {
            let producer = &g.nodes[p.idx()];
            if !is_alias(&producer.op_type) || producer.inputs.is_empty() {
                break;
            }
            v = producer.inputs[0];
            chain.push(v);
        }
        if chain.len() == 1 {
            continue; // no alias: later readers already read the output
        }
        let out = node.outputs[0];
        if g.ty(out) != g.ty(target) {
            continue;
        }
        for later in &mut g.nodes[n + 1..] {
            for i in later.inputs.iter_mut() {
                if chain.contains(i) {
                    *i = out;
                }
            }
        }
        for o in g.outputs.iter_mut() {
            if chain.contains(o) {
                *o = out;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::parse_str;

    #[test]
    fn readers_after_a_mutation_through_detach_see_it() {
        let ir = r#"{
          "model_name": "m", "graph_inputs": [
            {"name": "w", "shape": [5, 3], "dtype": "float32"},
            {"name": "ids", "shape": [2], "dtype": "int64"}],
          "graph_outputs": [{"name": "embedding", "shape": [2, 3], "dtype": "float32"}],
          "weights": [], "weight_name_mapping": {},
          "nodes": [
            {"name": "detach", "op_type": "aten.detach.default",
             "inputs": [{"name": "w", "shape": [5, 3], "dtype": "float32", "producer_node": "w", "producer_output_idx": 0}],
             "outputs": [{"name": "detach", "shape": [5, 3], "dtype": "float32"}], "attrs": {}},
            {"name": "renorm", "op_type": "aten.embedding_renorm_.default",
             "inputs": [{"name": "detach", "shape": [5, 3], "dtype": "float32", "producer_node": "detach", "producer_output_idx": 0},
                        {"name": "ids", "shape": [2], "dtype": "int64", "producer_node": "ids", "producer_output_idx": 0}],
             "outputs": [{"name": "renorm", "shape": [5, 3], "dtype": "float32"}], "attrs": {"max_norm": 1.0}},
            {"name": "embedding", "op_type": "aten.embedding.default",
             "inputs": [{"name": "w", "shape": [5, 3], "dtype": "float32", "producer_node": "w", "producer_output_idx": 0},
                        {"name": "ids", "shape": [2], "dtype": "int64", "producer_node": "ids", "producer_output_idx": 0}],
             "outputs": [{"name": "embedding", "shape": [2, 3], "dtype": "float32"}], "attrs": {}}]
        }"#;
        let g = parse_str(ir).unwrap();
        let renorm = g.nodes[1].outputs[0];
        assert_eq!(
            g.nodes[2].inputs[0], renorm,
            "embedding reads the renormalized weight"
        );
    }
}
