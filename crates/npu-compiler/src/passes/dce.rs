//! Dead-code elimination: drops nodes none of whose outputs reach a graph output.

use crate::graph::{remove_nodes, CGraph};

/// Returns the number of nodes removed.
pub fn eliminate_dead_code(g: &mut CGraph) -> usize {
    let mut live = vec![false; g.values.len()];
    for v in &g.outputs {
        live[v.idx()] = true;
    }
    let mut dead = Vec::new();
    for (n, node) in g.nodes.iter().enumerate().rev() {
        if node.outputs.iter().any(|v| live[v.idx()]) {
            for v in &node.inputs {
                live[v.idx()] = true;
            }
        } else {
            dead.push(n);
        }
    }
    remove_nodes(g, &dead);
    dead.len()
}
