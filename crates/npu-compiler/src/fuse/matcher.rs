//! Small queries pattern matchers share.

use crate::graph::{norm_dim, CGraph, CNode, Op, Uses};
use npu_ir::{Op as IrOp, ValueId};

/// A read-only view of the graph and its def-use facts for matchers.
pub struct Cx<'a> {
    pub g: &'a CGraph,
    pub uses: &'a Uses,
}

impl<'a> Cx<'a> {
    pub fn node(&self, n: usize) -> &'a CNode {
        &self.g.nodes[n]
    }

    /// The IR op producing `v`, when `v` is used only by the pattern's next node.
    pub fn internal(&self, v: ValueId) -> Option<(usize, &'a IrOp, &'a CNode)> {
        if !self.uses.single_use(v) {
            return None;
        }
        self.producer(v)
    }

    /// The IR op producing `v`, whatever its other users.
    pub fn producer(&self, v: ValueId) -> Option<(usize, &'a IrOp, &'a CNode)> {
        let (n, node) = self.uses.producer(self.g, v)?;
        match &node.op {
            Op::Ir(op) => Some((n, op, node)),
            Op::Fused(_) => None,
        }
    }

    pub fn shape(&self, v: ValueId) -> &'a [usize] {
        &self.g.ty(v).shape
    }

    /// Follows single-use casts backwards; returns the first non-cast value and the casts.
    pub fn strip_casts(&self, mut v: ValueId, absorbed: &mut Vec<usize>) -> ValueId {
        while let Some((n, IrOp::Cast, node)) = self.internal(v) {
            absorbed.push(n);
            v = node.inputs[0];
        }
        v
    }

    /// True when `dim` of an op on `rank` dims names the last dim.
    pub fn is_last(&self, dim: i64, rank: usize) -> bool {
        rank > 0 && norm_dim(dim, rank) == Some(rank - 1)
    }

    /// True when `small` broadcasts to `big` (numpy rules, right-aligned).
    pub fn broadcasts(&self, small: &[usize], big: &[usize]) -> bool {
        small.len() <= big.len()
            && small
                .iter()
                .rev()
                .zip(big.iter().rev())
                .all(|(s, b)| *s == 1 || s == b)
    }
}
