//! The CPU fallback interpreter: executes IR ops directly on host tensors, with no compiled
//! program. It runs the parts of a graph that no target supports (the partition path) and is
//! a reference for whole graphs.
//!
//! Semantics follow PyTorch eager: floats compute in f32/f64 and are stored in the output's
//! dtype (bf16/f16 round on store, per op), integers compute as i64, bools as bool. In-place
//! ops are functional (the output is a new value). Every result is checked against the graph's
//! output metadata; unknown ops and mismatches are errors naming the node and op, never panics.

mod conv;
mod create;
mod data;
mod diag;
mod elementwise;
mod ext;
mod intops;
mod linalg;
mod nn;
mod norm;
mod pool;
mod reduce;
mod reduce_ext;
mod reorder;
mod resample;
mod scatter;
mod shape;
mod sort;
mod vals;

use data::R;
use npu_ir::{ConstData, Graph, Node, Op, TensorType, ValueId, ValueKind};
use npu_runtime::tensor::HostTensor;
use npu_runtime::weights::WeightSource;
use npu_runtime::{Result, RuntimeError};
use std::collections::HashMap;

/// Values by id during interpretation.
pub type ValueEnv = HashMap<ValueId, HostTensor>;

/// Evaluates one IR node. `inputs` are the node's tensor inputs in order; `outputs` are the
/// graph's metadata for the node's outputs (the result has exactly these shapes and dtypes).
pub fn eval_node(
    node: &Node,
    inputs: &[&HostTensor],
    outputs: &[&TensorType],
) -> Result<Vec<HostTensor>> {
    let fail = |message: String| RuntimeError::Fallback {
        node: node.name.clone(),
        op_type: node.op_type.clone(),
        message,
    };
    let res = dispatch(&node.op, inputs, outputs).map_err(fail)?;
    if res.len() != outputs.len() {
        return Err(fail(format!(
            "produced {} outputs, the graph declares {}",
            res.len(),
            outputs.len()
        )));
    }
    for (i, (t, ty)) in res.iter().zip(outputs).enumerate() {
        if t.shape() != ty.shape.as_slice() || t.dtype() != ty.dtype {
            return Err(fail(format!(
                "output {i} is {}{:?}, the graph declares {ty}",
                t.dtype(),
                t.shape()
            )));
        }
    }
    Ok(res)
}

/// A node's tensor inputs, checked for count.
pub(crate) struct Args<'a> {
    pub ins: &'a [&'a HostTensor],
    pub outs: &'a [&'a TensorType],
}

impl<'a> Args<'a> {
    pub fn input(&self, i: usize) -> R<&'a HostTensor> {
        self.ins
            .get(i)
            .copied()
            .ok_or_else(|| format!("expected at least {} inputs, got {}", i + 1, self.ins.len()))
    }
    pub fn out(&self, i: usize) -> R<&'a TensorType> {
        self.outs.get(i).copied().ok_or_else(|| {
            format!(
                "expected at least {} outputs, got {}",
                i + 1,
                self.outs.len()
            )
        })
    }
    pub fn count(&self, lo: usize, hi: usize) -> R<()> {
        let n = self.ins.len();
        if n < lo || n > hi {
            return Err(if lo == hi {
                format!("expected {lo} inputs, got {n}")
            } else {
                format!("expected {lo} to {hi} inputs, got {n}")
            });
        }
        Ok(())
    }
}

/// A resolved kernel: runs one op on a node's operands.
pub(crate) type Kernel<'o> = Box<dyn Fn(&Args) -> R<Vec<HostTensor>> + 'o>;

/// A kernel of one output.
pub(crate) fn one<'o>(f: impl Fn(&Args) -> R<HostTensor> + 'o) -> R<Kernel<'o>> {
    Ok(Box::new(move |a| f(a).map(|t| vec![t])))
}

/// A kernel of several outputs.
pub(crate) fn many<'o>(f: impl Fn(&Args) -> R<Vec<HostTensor>> + 'o) -> R<Kernel<'o>> {
    Ok(Box::new(f))
}

/// Why the interpreter cannot run `node`, or `None` when it can. The answer comes from the
/// same resolution `eval_node` runs ([`kernel`]), so "can run" and "runs" never disagree.
pub fn unsupported(node: &Node) -> Option<String> {
    kernel(&node.op).err()
}

fn dispatch(op: &Op, ins: &[&HostTensor], outs: &[&TensorType]) -> R<Vec<HostTensor>> {
    kernel(op)?(&Args { ins, outs })
}

/// The kernel for `op`, or why there is none (decided from the op alone).
fn kernel(op: &Op) -> R<Kernel<'_>> {
    match op {
        Op::Unary(u) => one(move |a| elementwise::unary(a, *u)),
        Op::Binary { op, alpha } => one(move |a| elementwise::binary(a, *op, *alpha)),
        Op::BinaryScalar {
            op,
            scalar,
            scalar_lhs,
        } => one(move |a| elementwise::binary_scalar(a, *op, *scalar, *scalar_lhs)),
        Op::Clamp { min, max } => one(move |a| elementwise::clamp(a, *min, *max)),
        Op::Ternary { op, scalars } => one(move |a| elementwise::ternary(a, *op, scalars)),
        Op::MaskedFill { value } => one(move |a| elementwise::masked_fill(a, *value)),
        Op::BitwiseNot => one(elementwise::bitwise_not),
        Op::Bitwise { op, scalar } => one(move |a| elementwise::bitwise(a, *op, *scalar)),
        Op::Cast => one(elementwise::cast),
        Op::Identity => one(elementwise::identity),
        Op::Dropout { p, train } => {
            if *train && *p > 0.0 {
                return Err(format!("dropout in training mode (p={p}) is random"));
            }
            one(elementwise::identity)
        }
        Op::Conv2d {
            stride,
            padding,
            dilation,
            groups,
        } => one(move |a| conv::convolution(a, stride, padding, dilation, false, &[0, 0], *groups)),
        Op::MaxPool2d(p) => {
            let w = pool::window_of(p);
            one(move |a| Ok(pool::max_pool(a, &w, false)?.remove(0)))
        }
        Op::AvgPool2d {
            pool: p,
            count_include_pad,
            divisor_override,
        } => {
            let w = pool::window_of(p);
            one(move |a| pool::avg_pool(a, &w, *count_include_pad, *divisor_override))
        }
        Op::AdaptiveAvgPool2d { .. } => many(move |a| pool::adaptive_pool(a, 2, false)),
        Op::UpsampleNearest2d { scales } => {
            let scales = vec![scales.map(|s| s[0]), scales.map(|s| s[1])];
            one(move |a| resample::upsample(a, npu_ir::Interp::Nearest, false, &scales))
        }
        Op::Sdpa {
            is_causal,
            scale,
            enable_gqa,
        } => one(move |a| nn::sdpa(a, *is_causal, *scale, *enable_gqa)),
        Op::BatchNorm { eps, training } => {
            if *training {
                return Err("batch_norm in training mode is not supported".into());
            }
            one(move |a| norm::batch_norm(a, *eps))
        }
        Op::LayerNorm {
            normalized_shape,
            eps,
        } => one(move |a| norm::layer_norm(a, normalized_shape, *eps)),
        Op::GroupNorm { num_groups, eps } => one(move |a| norm::group_norm(a, *num_groups, *eps)),
        Op::Linear => one(linalg::linear),
        Op::Matmul => one(linalg::matmul),
        Op::Addmm { beta, alpha } => one(move |a| linalg::addmm(a, *beta, *alpha)),
        Op::Baddbmm { beta, alpha } => one(move |a| linalg::baddbmm(a, *beta, *alpha)),
        Op::Softmax { dim, .. } => one(move |a| reduce::softmax(a, *dim, false)),
        Op::LogSoftmax { dim, .. } => one(move |a| reduce::softmax(a, *dim, true)),
        Op::Mean { dims, .. } => one(move |a| reduce::sum(a, dims, true)),
        Op::Sum { dims, .. } => one(move |a| reduce::sum(a, dims, false)),
        Op::ReduceMinMax { op, dims, .. } => one(move |a| reduce::reduce_min_max(a, *op, dims)),
        Op::MinMaxDim { op, dim, .. } => many(move |a| reduce::min_max_dim(a, *op, *dim)),
        Op::ArgMinMax { op, dim, .. } => one(move |a| reduce::arg_min_max(a, *op, *dim)),
        Op::Cumsum { dim } => one(move |a| reduce::cumsum(a, *dim)),
        Op::Reshape => one(shape::reshape),
        Op::Transpose { dim0, dim1 } => one(move |a| shape::transpose(a, *dim0, *dim1)),
        Op::Permute { dims } => one(move |a| shape::permute(a, dims)),
        Op::Expand { .. } => one(shape::expand),
        Op::Slice {
            dim,
            start,
            end,
            step,
        } => one(move |a| shape::slice(a, *dim, *start, *end, *step)),
        Op::Cat { dim } => one(move |a| shape::cat(a, *dim)),
        Op::Stack { dim } => one(move |a| shape::stack(a, *dim)),
        Op::Chunk { dim, .. } | Op::Split { dim, .. } => many(move |a| shape::split(a, *dim)),
        Op::GetItem { index } => one(move |a| a.input(*index).cloned()),
        Op::IndexCopy { dim } => one(move |a| shape::index_copy(a, *dim)),
        Op::Gather { dim } => one(move |a| shape::gather(a, *dim)),
        Op::IndexSelect { dim } => one(move |a| shape::index_select(a, *dim)),
        Op::Index { indexed } => one(move |a| shape::index(a, indexed)),
        Op::Embedding => one(shape::embedding),
        Op::AssertMetadata => many(|_| Ok(Vec::new())),
        Op::Full { value } | Op::FullLike { value } => one(move |a| create::full(a, *value)),
        Op::Arange { start, end, step } => one(move |a| create::arange(a, *start, *end, *step)),
        Op::Ext(e) => ext::kernel(e),
        Op::Composite(c) => Err(format!(
            "composite op {} must be decomposed first (npu_compiler::passes::decompose)",
            c.name()
        )),
        Op::Unknown { op_type, .. } => {
            let base = npu_ir::base_name(op_type);
            if npu_ir::DATA_DEPENDENT.contains(&base) {
                return Err(format!(
                    "op '{op_type}': its output shape depends on the input values, which a static graph cannot hold"
                ));
            }
            Err(format!(
                "op '{op_type}' is not supported by the CPU fallback interpreter"
            ))
        }
    }
}

fn constant_tensor(ty: &TensorType, data: &ConstData) -> HostTensor {
    match data {
        ConstData::Float(v) => data::from_f64(ty, v),
        ConstData::Int(v) => data::from_i64(ty, v),
    }
}

/// Loads a weight or constant input (converted to the value's dtype).
fn load_source(graph: &Graph, id: ValueId, weights: &dyn WeightSource) -> Result<HostTensor> {
    let v = graph.value(id);
    match &v.kind {
        ValueKind::Weight { key } => {
            let t = weights
                .get(key)
                .ok_or_else(|| RuntimeError::MissingWeight {
                    key: key.clone(),
                    file: weights.describe(),
                    extra: format!(" as {}", v.ty),
                })?;
            if t.shape != v.ty.shape.as_slice() {
                return Err(RuntimeError::WeightMismatch {
                    key: key.clone(),
                    file: weights.describe(),
                    expected_shape: v.ty.shape.clone(),
                    expected_dtype: v.ty.dtype,
                    found_shape: t.shape.to_vec(),
                    found_dtype: t.dtype,
                });
            }
            let host = HostTensor::new(t.dtype, t.shape.to_vec(), t.bytes.to_vec())?;
            host.cast(v.ty.dtype)
        }
        ValueKind::Constant(data) => Ok(constant_tensor(&v.ty, data)),
        ValueKind::Input { .. } => Err(RuntimeError::MissingInput {
            name: v.name.clone(),
            dtype: v.ty.dtype,
            shape: v.ty.shape.clone(),
        }),
        ValueKind::NodeOutput { .. } => Err(RuntimeError::Tensor {
            name: v.name.clone(),
            message: "read before the node producing it ran".into(),
        }),
    }
}

/// Runs `nodes` (indices into graph.nodes, in a topological order) over `env`. Inputs of each
/// node come from `env`, or from `weights` (ValueKind::Weight{key}: looked up by key, converted
/// to the value's dtype), or from the graph's embedded constants (ValueKind::Constant).
/// Outputs are inserted into `env`.
pub fn run_nodes(
    graph: &Graph,
    nodes: &[usize],
    env: &mut ValueEnv,
    weights: &dyn WeightSource,
) -> Result<()> {
    // Weights and constants are loaded once per call and not added to `env`.
    let mut loaded: HashMap<ValueId, HostTensor> = HashMap::new();
    for &n in nodes {
        let node = graph.nodes.get(n).ok_or_else(|| {
            RuntimeError::InvalidProgram(format!(
                "node index {n} out of range ({} nodes)",
                graph.nodes.len()
            ))
        })?;
        for &v in &node.inputs {
            if !env.contains_key(&v) && !loaded.contains_key(&v) {
                let t = load_source(graph, v, weights).map_err(|e| RuntimeError::Fallback {
                    node: node.name.clone(),
                    op_type: node.op_type.clone(),
                    message: format!("input '{}': {e}", graph.value(v).name),
                })?;
                loaded.insert(v, t);
            }
        }
        let ins: Vec<&HostTensor> = node
            .inputs
            .iter()
            .map(|v| env.get(v).or_else(|| loaded.get(v)).expect("loaded above"))
            .collect();
        let outs: Vec<&TensorType> = node.outputs.iter().map(|v| graph.ty(*v)).collect();
        let res = eval_node(node, &ins, &outs)?;
        for (v, t) in node.outputs.iter().zip(res) {
            env.insert(*v, t);
        }
    }
    Ok(())
}

/// Convenience: a whole graph from named inputs; returns the graph outputs by name, in order.
/// Composite ops are decomposed first (on a copy), so any parsed IR graph runs.
pub fn run_graph(
    graph: &Graph,
    inputs: &[(&str, &HostTensor)],
    weights: &dyn WeightSource,
) -> Result<Vec<(String, HostTensor)>> {
    let decomposed;
    let graph = if npu_compiler::passes::decompose::needs_decomposition(graph) {
        decomposed = npu_compiler::passes::decompose::decompose(graph.clone())
            .map_err(crate::compile_error)?;
        &decomposed
    } else {
        graph
    };
    let mut env = ValueEnv::new();
    for (name, t) in inputs {
        let Some(&id) = graph
            .inputs
            .iter()
            .find(|id| graph.value(**id).name == *name)
        else {
            let known: Vec<&str> = graph
                .inputs
                .iter()
                .map(|id| graph.value(*id).name.as_str())
                .collect();
            return Err(RuntimeError::UnknownInput {
                name: name.to_string(),
                known: known.join(", "),
            });
        };
        let ty = graph.ty(id);
        if t.shape() != ty.shape.as_slice() || t.dtype() != ty.dtype {
            return Err(RuntimeError::InputMismatch {
                name: name.to_string(),
                expected_shape: ty.shape.clone(),
                expected_dtype: ty.dtype,
                found_shape: t.shape().to_vec(),
                found_dtype: t.dtype(),
            });
        }
        env.insert(id, (*t).clone());
    }
    for id in &graph.inputs {
        if !env.contains_key(id) {
            let v = graph.value(*id);
            return Err(RuntimeError::MissingInput {
                name: v.name.clone(),
                dtype: v.ty.dtype,
                shape: v.ty.shape.clone(),
            });
        }
    }
    let all: Vec<usize> = (0..graph.nodes.len()).collect();
    run_nodes(graph, &all, &mut env, weights)?;
    let mut out = Vec::with_capacity(graph.outputs.len());
    let mut cache: HashMap<ValueId, HostTensor> = HashMap::new();
    for id in &graph.outputs {
        let v = graph.value(*id);
        let t = match env.get(id) {
            Some(t) => t.clone(),
            // a graph output may be a weight or constant directly
            None => match cache.get(id) {
                Some(t) => t.clone(),
                None => {
                    let t = load_source(graph, *id, weights)?;
                    cache.insert(*id, t.clone());
                    t
                }
            },
        };
        out.push((v.name.clone(), t));
    }
    Ok(out)
}
