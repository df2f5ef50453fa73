//! The typed graph: values (graph inputs, weights, constants, node outputs) and nodes over them.

use crate::attrs::json_f64;
use crate::json::{RawConstant, RawIr, RawTensor};
use crate::op::Op;
use crate::{DType, IrError};
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;
use std::collections::HashMap;
use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ValueId(pub u32);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub u32);

impl ValueId {
    pub fn idx(self) -> usize {
        self.0 as usize
    }
}

impl NodeId {
    pub fn idx(self) -> usize {
        self.0 as usize
    }
}

/// A static shape and an element type.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TensorType {
    pub shape: Vec<usize>,
    pub dtype: DType,
}

impl TensorType {
    /// The element count. Parsing guarantees it (and the byte size) fits: see
    /// [`TensorType::checked_bytes`].
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// The element count, `None` on overflow.
    pub fn checked_numel(&self) -> Option<usize> {
        self.shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d))
    }

    /// The byte size, `None` when it overflows or exceeds `isize::MAX` (no allocation
    /// can hold it). Every tensor of a parsed graph has one.
    pub fn checked_bytes(&self) -> Option<usize> {
        self.checked_numel()?
            .checked_mul(self.dtype.size_bytes())
            .filter(|&b| isize::try_from(b).is_ok())
    }
    pub fn rank(&self) -> usize {
        self.shape.len()
    }
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{:?}", self.dtype, self.shape)
    }
}

/// Values of a lifted tensor constant that the IR carries inline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ConstData {
    Float(Vec<f64>),
    Int(Vec<i64>),
}

impl ConstData {
    pub fn len(&self) -> usize {
        match self {
            ConstData::Float(v) => v.len(),
            ConstData::Int(v) => v.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum ValueKind {
    /// The `index`-th graph input.
    Input { index: usize },
    /// A weight or buffer, by its state-dict key (the name used in weight files).
    Weight { key: String },
    /// A lifted tensor constant whose values are in the IR.
    Constant(ConstData),
    /// Output `index` of node `node`.
    NodeOutput { node: NodeId, index: usize },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Value {
    pub name: String,
    pub ty: TensorType,
    pub kind: ValueKind,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Node<O = Op> {
    pub name: String,
    /// The original `op_type` string, kept for messages.
    pub op_type: String,
    pub op: O,
    /// The node was an in-place ATen variant (`relu_`, `index_copy_`).
    pub inplace: bool,
    pub inputs: Vec<ValueId>,
    pub outputs: Vec<ValueId>,
}

/// One entry of the IR's `weights` list.
#[derive(Debug, Clone, PartialEq)]
pub struct WeightInfo {
    pub key: String,
    pub ty: TensorType,
}

/// A parsed IR graph. Nodes are in the IR's topological order; values are never removed,
/// so a [`ValueId`] stays valid across rewrites of `nodes`.
#[derive(Debug, Clone)]
pub struct Graph<O = Op> {
    pub model_name: String,
    pub pytorch_version: String,
    pub values: Vec<Value>,
    pub nodes: Vec<Node<O>>,
    pub inputs: Vec<ValueId>,
    pub outputs: Vec<ValueId>,
    /// Every weight the IR lists, used or not.
    pub weights: Vec<WeightInfo>,
}

impl<O> Graph<O> {
    pub fn value(&self, id: ValueId) -> &Value {
        &self.values[id.idx()]
    }

    pub fn ty(&self, id: ValueId) -> &TensorType {
        &self.values[id.idx()].ty
    }

    pub fn add_value(&mut self, name: String, ty: TensorType, kind: ValueKind) -> ValueId {
        self.values.push(Value { name, ty, kind });
        ValueId(self.values.len() as u32 - 1)
    }

    /// For each value, the (node position in `nodes`, output index) that produces it.
    pub fn producers(&self) -> Vec<Option<(usize, usize)>> {
        let mut p = vec![None; self.values.len()];
        for (n, node) in self.nodes.iter().enumerate() {
            for (i, v) in node.outputs.iter().enumerate() {
                p[v.idx()] = Some((n, i));
            }
        }
        p
    }

    /// For each value, the positions in `nodes` of the nodes reading it (once per node).
    pub fn users(&self) -> Vec<Vec<usize>> {
        let mut u: Vec<Vec<usize>> = vec![Vec::new(); self.values.len()];
        for (n, node) in self.nodes.iter().enumerate() {
            for v in &node.inputs {
                let list = &mut u[v.idx()];
                if list.last() != Some(&n) {
                    list.push(n);
                }
            }
        }
        u
    }

    /// Rewrites every node with `f`, keeping values and I/O.
    pub fn map_ops<P>(self, mut f: impl FnMut(O) -> P) -> Graph<P> {
        Graph {
            model_name: self.model_name,
            pytorch_version: self.pytorch_version,
            values: self.values,
            nodes: self
                .nodes
                .into_iter()
                .map(|n| Node {
                    name: n.name,
                    op_type: n.op_type,
                    op: f(n.op),
                    inplace: n.inplace,
                    inputs: n.inputs,
                    outputs: n.outputs,
                })
                .collect(),
            inputs: self.inputs,
            outputs: self.outputs,
            weights: self.weights,
        }
    }
}

fn tensor_type(t: &RawTensor) -> Result<TensorType, IrError> {
    let dtype = DType::parse(&t.dtype).ok_or_else(|| IrError::UnknownDType {
        tensor: t.name.clone(),
        dtype: t.dtype.clone(),
    })?;
    let shape = t
        .shape
        .iter()
        .map(|&d| usize::try_from(d).ok())
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| IrError::DynamicShape {
            tensor: t.name.clone(),
            shape: format!("{:?}", t.shape),
        })?;
    let ty = TensorType { shape, dtype };
    if ty.checked_bytes().is_none() {
        return Err(IrError::TooLarge {
            tensor: t.name.clone(),
            ty: ty.to_string(),
        });
    }
    Ok(ty)
}

/// The scalars of a nested JSON array in row-major order (iterative: depth is the data's).
fn flatten_json(v: &Json, out: &mut Vec<Json>) {
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        match v {
            Json::Array(items) => stack.extend(items.iter().rev()),
            other => out.push(other.clone()),
        }
    }
}

fn json_shape(v: &Json) -> Vec<usize> {
    let mut shape = Vec::new();
    let mut cur = v;
    while let Json::Array(items) = cur {
        shape.push(items.len());
        match items.first() {
            Some(x) => cur = x,
            None => break,
        }
    }
    shape
}

fn constant(
    name: &str,
    raw: &RawConstant,
    listed: Option<&TensorType>,
) -> Result<(TensorType, ConstData), IrError> {
    let bad = |message: String| IrError::BadConstant {
        name: name.to_string(),
        message,
    };
    let dtype =
        DType::parse(&raw.dtype).ok_or_else(|| bad(format!("unknown dtype '{}'", raw.dtype)))?;
    let mut flat = Vec::new();
    flatten_json(&raw.data, &mut flat);
    let shape = listed
        .map(|t| t.shape.clone())
        .unwrap_or_else(|| json_shape(&raw.data));
    let ty = TensorType { shape, dtype };
    if ty.numel() != flat.len() {
        return Err(bad(format!(
            "{} values for shape {:?}",
            flat.len(),
            ty.shape
        )));
    }
    let data = if dtype.is_float() {
        ConstData::Float(
            flat.iter()
                .map(|x| json_f64(x).ok_or_else(|| bad(format!("not a number: {x}"))))
                .collect::<Result<_, _>>()?,
        )
    } else {
        ConstData::Int(
            flat.iter()
                .map(|x| match x {
                    Json::Bool(b) => Some(i64::from(*b)),
                    other => other.as_i64(),
                })
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| bad("expected integers".into()))?,
        )
    };
    Ok((ty, data))
}

/// For a norm op given one of its two affine tensors without [`crate::ABSENT_TENSORS`]
/// (torch_ir drops absent optional tensors without a trace), the attrs with that list
/// inferred from the tensor's state-dict key: `..bias` is the bias, `..weight` the weight.
/// `None` when nothing is inferred (the op parser then refuses the ambiguous case).
fn infer_absent_affine(
    g: &Graph<Op>,
    op_type: &str,
    attrs: &serde_json::Map<String, Json>,
    inputs: &[ValueId],
) -> Option<serde_json::Map<String, Json>> {
    let base = crate::ext::base_name(op_type);
    let norm = matches!(
        base,
        "layer_norm" | "native_layer_norm" | "group_norm" | "native_group_norm"
    );
    if !norm || inputs.len() != 2 || attrs.contains_key(crate::ABSENT_TENSORS) {
        return None;
    }
    let ValueKind::Weight { key } = &g.value(inputs[1]).kind else {
        return None;
    };
    let absent = if key.ends_with("bias") {
        "weight"
    } else if key.ends_with("weight") {
        "bias"
    } else {
        return None;
    };
    let mut m = attrs.clone();
    m.insert(crate::ABSENT_TENSORS.into(), Json::from(vec![absent]));
    Some(m)
}

impl Graph<Op> {
    pub(crate) fn from_raw(raw: RawIr) -> Result<Graph<Op>, IrError> {
        let mut g = Graph {
            model_name: raw.model_name,
            pytorch_version: raw.pytorch_version,
            values: Vec::new(),
            nodes: Vec::new(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            weights: Vec::new(),
        };
        // Every name a node input or graph output may refer to.
        let mut by_name: HashMap<String, ValueId> = HashMap::new();
        for (index, t) in raw.graph_inputs.iter().enumerate() {
            let id = g.add_value(t.name.clone(), tensor_type(t)?, ValueKind::Input { index });
            if by_name.insert(t.name.clone(), id).is_some() {
                return Err(IrError::DuplicateName(t.name.clone()));
            }
            g.inputs.push(id);
        }
        let mut weight_types: HashMap<&str, TensorType> = HashMap::new();
        for w in &raw.weights {
            let ty = tensor_type(w)?;
            weight_types.insert(&w.name, ty.clone());
            g.weights.push(WeightInfo {
                key: w.name.clone(),
                ty,
            });
        }
        // Weight and constant values are created on first use, one per state-dict key,
        // so tied weights (two placeholders, one key) share a value.
        let mut by_key: HashMap<String, ValueId> = HashMap::new();
        let mut node_outputs: HashMap<String, Vec<ValueId>> = HashMap::new();

        for (n, rn) in raw.nodes.iter().enumerate() {
            let node_id = NodeId(n as u32);
            let mut inputs = Vec::with_capacity(rn.inputs.len());
            for t in &rn.inputs {
                let unresolved = |what: String| IrError::UnresolvedInput {
                    node: rn.name.clone(),
                    input: t.name.clone(),
                    what,
                };
                let id = if let Some(p) = &t.producer_node {
                    let idx = t.producer_output_idx.unwrap_or(0);
                    if let Some(outs) = node_outputs.get(p) {
                        *outs.get(idx).ok_or_else(|| {
                            unresolved(format!(
                                "output {idx} of node '{p}', which has {} outputs",
                                outs.len()
                            ))
                        })?
                    } else if let Some(&id) = by_name
                        .get(p)
                        .filter(|id| matches!(g.value(**id).kind, ValueKind::Input { .. }))
                    {
                        id
                    } else {
                        return Err(unresolved(format!(
                            "producer '{p}', which is neither a graph input nor an earlier node"
                        )));
                    }
                } else {
                    let key = raw
                        .weight_name_mapping
                        .get(&t.name)
                        .cloned()
                        .unwrap_or_else(|| t.name.clone());
                    if let Some(&id) = by_key.get(&key) {
                        id
                    } else if let Some(c) = raw
                        .constants
                        .get(&key)
                        .or_else(|| raw.constants.get(&t.name))
                    {
                        let (ty, data) = constant(&key, c, weight_types.get(key.as_str()))?;
                        let id = g.add_value(key.clone(), ty, ValueKind::Constant(data));
                        by_key.insert(key, id);
                        id
                    } else if let Some(ty) = weight_types.get(key.as_str()) {
                        let id = g.add_value(
                            key.clone(),
                            ty.clone(),
                            ValueKind::Weight { key: key.clone() },
                        );
                        by_key.insert(key, id);
                        id
                    } else if let Some(&id) = by_name.get(&t.name) {
                        id
                    } else {
                        return Err(unresolved(
                            "no graph input, weight, constant or node output of that name".into(),
                        ));
                    }
                };
                let declared = tensor_type(t)?;
                let actual = g.ty(id);
                if declared.shape != actual.shape {
                    return Err(IrError::BadNode {
                        node: rn.name.clone(),
                        op_type: rn.op_type.clone(),
                        message: format!(
                            "input '{}' is declared {:?} but its source '{}' is {:?}",
                            t.name,
                            declared.shape,
                            g.value(id).name,
                            actual.shape
                        ),
                    });
                }
                inputs.push(id);
            }
            let mut outputs = Vec::with_capacity(rn.outputs.len());
            for (index, t) in rn.outputs.iter().enumerate() {
                let id = g.add_value(
                    t.name.clone(),
                    tensor_type(t)?,
                    ValueKind::NodeOutput {
                        node: node_id,
                        index,
                    },
                );
                if by_name.insert(t.name.clone(), id).is_some() {
                    return Err(IrError::DuplicateName(t.name.clone()));
                }
                outputs.push(id);
            }
            if node_outputs
                .insert(rn.name.clone(), outputs.clone())
                .is_some()
            {
                return Err(IrError::DuplicateName(rn.name.clone()));
            }
            let in_rank = inputs.first().map_or(0, |v| g.ty(*v).rank());
            let inferred = infer_absent_affine(&g, &rn.op_type, &rn.attrs, &inputs);
            let attrs = inferred.as_ref().unwrap_or(&rn.attrs);
            let (op, inplace) = Op::parse(&rn.name, &rn.op_type, attrs, inputs.len(), in_rank)?;
            g.nodes.push(Node {
                name: rn.name.clone(),
                op_type: rn.op_type.clone(),
                op,
                inplace,
                inputs,
                outputs,
            });
        }
        for t in &raw.graph_outputs {
            let id = by_name
                .get(&t.name)
                .or_else(|| by_key.get(&t.name))
                .copied()
                .ok_or_else(|| IrError::UnknownOutput(t.name.clone()))?;
            let declared = tensor_type(t)?;
            if declared.shape != g.ty(id).shape {
                return Err(IrError::OutputMismatch {
                    name: t.name.clone(),
                    declared: format!("{:?}", declared.shape),
                    actual: format!("{:?}", g.ty(id).shape),
                });
            }
            g.outputs.push(id);
        }
        crate::inplace::resolve_alias_mutations(&mut g);
        Ok(g)
    }
}
