//! Decomposition: composite ATen ops become primitives, before placement, compilation or
//! interpretation, so the partitioner, the NPU compiler and the CPU fallback interpreter only
//! ever see primitives (like PyTorch's decomposition table).
//!
//! [`rule`] is the table: op -> rewrite. A rule reads the node's operands and writes
//! primitive nodes through an [`Emitter`], which gives each new node correct output
//! metadata; the rule's final values are bound to the node's original output values, so the
//! graph's output ids and names (and every reader) are unchanged. Ops the NPU lowers natively
//! (layer_norm, linear, addmm, softmax, chunk/split, ...) have no rule, and rules emit the
//! shapes the fusion patterns look for (rms_norm as pow/mean/add/rsqrt/mul).
//!
//! Invariants: the pass is iterative (a work stack, no recursion over the graph), so chains
//! of any length are safe; nodes without a rule pass through untouched; running it on its
//! own output changes nothing; node order stays topological.

mod conv;
mod elementwise;
pub mod emit;
mod indexing;
mod linalg;
mod norms;
mod reductions;
mod shape_ops;
mod views;

use crate::error::CompileError;
pub use emit::Emitter;
use emit::R;
use npu_ir::{Composite, Graph, Node, NodeId, Op, ValueKind};
use std::collections::HashSet;

/// A rewrite of one node into primitives.
pub type Rule = fn(&mut Emitter) -> R<()>;

/// The decomposition table: the rule for `node`, or `None` when it is already a primitive
/// (or a composite the NPU lowers natively for these operands).
pub fn rule(node: &Node, graph: &Graph) -> Option<Rule> {
    let rank0 = node.inputs.first().map_or(0, |v| graph.ty(*v).rank());
    Some(match &node.op {
        Op::Composite(c) => match c {
            Composite::Diff { .. } => shape_ops::diff,
            Composite::Rsub { .. } => elementwise::rsub,
            Composite::Square => elementwise::square,
            Composite::Addcmul { .. } | Composite::Addcdiv { .. } => elementwise::addcmul_addcdiv,
            Composite::Lerp { .. } => elementwise::lerp,
            Composite::Glu { .. } => elementwise::glu,
            Composite::Softplus { .. } => elementwise::softplus,
            Composite::Mish => elementwise::mish,
            Composite::Elu { .. } => elementwise::elu,
            Composite::Logsumexp { .. } => reductions::logsumexp,
            Composite::Moments { .. } => reductions::moments,
            Composite::VectorNorm { .. } => reductions::vector_norm,
            Composite::CosineSimilarity { .. } => reductions::cosine_similarity,
            Composite::NativeLayerNorm { .. } => norms::native_layer_norm,
            Composite::RmsNorm { .. } => norms::rms_norm,
            Composite::NativeGroupNorm { .. } => norms::native_group_norm,
            Composite::InstanceNorm { .. } => norms::instance_norm,
            Composite::Addmv { .. } => linalg::addmv,
            Composite::Addr { .. } => linalg::addr,
            Composite::Einsum { .. } => linalg::einsum,
            Composite::Conv1d { .. } => conv::conv1d,
            Composite::Mv => linalg::mv,
            Composite::Dot => linalg::dot,
            Composite::Outer => linalg::outer,
            Composite::ExpandAs => views::expand_as,
            Composite::ReshapeAs => views::reshape_as,
            Composite::Select { .. } => views::select,
            Composite::SplitWithSizes { .. } => views::split_with_sizes,
            Composite::Unbind { .. } => views::unbind,
            Composite::Repeat { .. } => shape_ops::repeat,
            Composite::ConstantPad { .. } => shape_ops::constant_pad,
            Composite::ViewEach { .. } => views::view_each,
            Composite::Stack { .. } => shape_ops::stack,
            Composite::Narrow { .. } => views::narrow,
            Composite::TensorSplit { .. } => views::tensor_split,
            Composite::Aminmax { .. } => reductions::aminmax,
            Composite::ChannelShuffle { .. } => views::channel_shuffle,
            Composite::Tensordot { .. } => linalg::tensordot,
            Composite::Prelu => elementwise::prelu,
            Composite::Nansum { .. } => reductions::nansum,
            Composite::FloatPower { .. } => elementwise::float_power,
            Composite::OneHot { .. } => elementwise::one_hot,
            Composite::RepeatInterleave { .. } => shape_ops::repeat_interleave,
            Composite::Addbmm { .. } => linalg::addbmm,
            Composite::IndexReduce { .. } => indexing::index_reduce,
            Composite::BatchNormTrain { .. } => norms::batch_norm_train,
            Composite::ConvStringPadding { .. } => conv::conv_string_padding,
        },
        Op::Baddbmm { .. } => linalg::baddbmm,
        Op::GroupNorm { .. } => norms::group_norm,
        // the layer_norm kernel normalizes one dim; more become one by a reshape
        Op::LayerNorm {
            normalized_shape, ..
        } if normalized_shape.len() > 1 => norms::layer_norm_multi,
        // conv2d of an unbatched [C, H, W] input
        Op::Conv2d { .. } if rank0 == 3 => conv::conv2d_unbatched,
        _ => return None,
    })
}

/// What [`decompose`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DecomposeStats {
    /// Nodes rewritten (a composite emitted by a rule and rewritten again counts again).
    pub rewritten: usize,
    /// Primitive nodes added.
    pub added: usize,
}

/// True when some node of `graph` has a decomposition rule.
pub fn needs_decomposition(graph: &Graph) -> bool {
    graph.nodes.iter().any(|n| rule(n, graph).is_some())
}

/// Rewrites every node that has a rule into primitives (see the module doc).
pub fn decompose(graph: Graph) -> Result<Graph, CompileError> {
    decompose_with_stats(graph).map(|(g, _)| g)
}

/// [`decompose`], also returning what it did.
pub fn decompose_with_stats(mut graph: Graph) -> Result<(Graph, DecomposeStats), CompileError> {
    let mut stats = DecomposeStats::default();
    if !needs_decomposition(&graph) {
        return Ok((graph, stats));
    }
    let mut names: HashSet<String> = graph
        .values
        .iter()
        .map(|v| v.name.clone())
        .chain(graph.nodes.iter().map(|n| n.name.clone()))
        .collect();
    // A stack of nodes still to look at, next on top: rewritten nodes push their
    // replacements, which are looked at again (a rule may emit another composite).
    let mut todo: Vec<Node> = std::mem::take(&mut graph.nodes);
    todo.reverse();
    let mut done: Vec<Node> = Vec::with_capacity(todo.len());
    // Bounds the rewrites so that a rule emitting its own op cannot loop forever.
    let budget = 64 * (todo.len() + 16);
    while let Some(node) = todo.pop() {
        let Some(r) = rule(&node, &graph) else {
            done.push(node);
            continue;
        };
        stats.rewritten += 1;
        if stats.rewritten > budget {
            return Err(fail(&node, "decomposition does not terminate".into()));
        }
        let mut em = Emitter::new(&mut graph, &mut names, &node);
        r(&mut em).map_err(|m| fail(&node, m))?;
        let emitted = std::mem::take(&mut em.out);
        check_outputs_bound(&node, &emitted)?;
        stats.added += emitted.len();
        todo.extend(emitted.into_iter().rev());
    }
    for (n, node) in done.iter().enumerate() {
        for (index, v) in node.outputs.iter().enumerate() {
            graph.values[v.idx()].kind = ValueKind::NodeOutput {
                node: NodeId(n as u32),
                index,
            };
        }
    }
    graph.nodes = done;
    Ok((graph, stats))
}

fn fail(node: &Node, message: String) -> CompileError {
    CompileError::Node {
        node: node.name.clone(),
        op_type: node.op_type.clone(),
        message: format!("cannot decompose {}: {message}", node.op.name()),
    }
}

/// Every output of the rewritten node must be produced by exactly one emitted node.
fn check_outputs_bound(node: &Node, emitted: &[Node]) -> Result<(), CompileError> {
    for (i, v) in node.outputs.iter().enumerate() {
        let n = emitted.iter().filter(|e| e.outputs.contains(v)).count();
        if n != 1 {
            return Err(fail(
                node,
                format!("internal: output {i} is produced {n} times by the rewrite"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
