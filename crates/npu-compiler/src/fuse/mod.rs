//! Fusion: named patterns matched over the data flow (never node adjacency), then generic
//! fusion of elementwise chains. A fused node takes the place of the pattern's last node,
//! which keeps the graph topologically ordered because every operand of the pattern is
//! computed before that node.

mod attention;
mod elementwise;
mod epilogue;
mod matcher;
mod rmsnorm;
mod rope;
mod softmax;

use crate::graph::{remove_nodes, FusedOp, Module, Op, Uses};
use npu_ir::ValueId;
use std::collections::BTreeMap;

pub use matcher::Cx;

/// One pattern instance: `root` becomes `op` over `inputs`, `absorbed` nodes disappear.
#[derive(Debug, Clone)]
pub struct Match {
    pub root: usize,
    pub absorbed: Vec<usize>,
    pub op: FusedOp,
    pub inputs: Vec<ValueId>,
}

type Matcher = fn(&Cx, usize) -> Option<Match>;

/// Patterns in priority order, by name.
const PATTERNS: [(&str, Matcher); 9] = [
    ("attention", attention::match_attention),
    ("rms_norm", rmsnorm::match_rmsnorm),
    ("rope", rope::match_rope),
    ("conv_act", epilogue::match_conv_act),
    ("conv_residual", epilogue::match_conv_residual),
    ("linear_act", epilogue::match_linear_act),
    ("linear_residual", epilogue::match_linear_residual),
    ("norm_linear", epilogue::match_norm_linear),
    ("masked_softmax", softmax::match_masked_softmax),
];

/// How many instances of each pattern fired.
pub type FuseStats = BTreeMap<String, usize>;

/// Runs every pattern, then elementwise chain fusion.
pub fn fuse(m: &mut Module) -> FuseStats {
    let mut stats = FuseStats::new();
    for (name, matcher) in PATTERNS {
        let n = apply_pattern(m, matcher);
        stats.insert(name.to_string(), n);
    }
    for (k, v) in elementwise::fuse_elementwise(m) {
        stats.insert(k, v);
    }
    stats
}

/// Finds non-overlapping matches of one pattern and rewrites them; returns how many.
pub fn apply_pattern(m: &mut Module, matcher: Matcher) -> usize {
    let uses = Uses::of(&m.graph);
    let cx = Cx {
        g: &m.graph,
        uses: &uses,
    };
    let mut claimed = vec![false; m.graph.nodes.len()];
    let mut found = Vec::new();
    for n in 0..m.graph.nodes.len() {
        if claimed[n] {
            continue;
        }
        if let Some(mt) = matcher(&cx, n) {
            if mt.absorbed.iter().any(|&a| claimed[a]) {
                continue;
            }
            claimed[mt.root] = true;
            for &a in &mt.absorbed {
                claimed[a] = true;
            }
            found.push(mt);
        }
    }
    let count = found.len();
    let mut dead = Vec::new();
    for mt in found {
        let node = &mut m.graph.nodes[mt.root];
        node.op = Op::Fused(mt.op);
        node.inputs = mt.inputs;
        dead.extend(mt.absorbed);
    }
    remove_nodes(&mut m.graph, &dead);
    count
}
