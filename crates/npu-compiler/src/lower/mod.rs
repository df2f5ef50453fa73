//! Lowering: the fused graph becomes a [`Program`] of kernel steps over strided bindings.
//!
//! Views are metadata (see [`views`]); computed values live in arena buffers whose offsets
//! [`memory::plan`] assigns from their live ranges; a graph output produced by a compute node
//! is written straight into its output slot; an `index_copy` whose target is a graph input
//! returned updated (the KV cache) works in place on that input (donation).

mod emit;
pub mod memory;
pub mod views;

use crate::error::CompileError;
use crate::graph::{storage_dtype, Module, Op};
use crate::program::{
    Binding, ConstSlot, ConstValues, IoTensor, Program, Recipe, Slot, SourceTensor, Step,
    WeightSlot,
};
use crate::target::Target;
use memory::Interval;
use npu_ir::{ConstData, DType, Op as IrOp, ValueId, ValueKind};
use std::collections::HashMap;
use views::{Base, View};

/// A step whose bindings still name unplaced buffers.
struct PendingStep {
    step: Step,
    inputs: Vec<View>,
    outputs: Vec<View>,
}

/// Lowering state for one module.
pub(crate) struct Lowerer<'m> {
    pub m: &'m Module,
    pub compute: DType,
    pub model_dtype: DType,
    pub views: HashMap<ValueId, View>,
    pub bufs: Vec<Interval>,
    steps: Vec<PendingStep>,
    /// Stored channel count of the values the layout pass laid out (`passes::layout`):
    /// channels padded, and channels-last when the target says so.
    pub laid: HashMap<ValueId, usize>,
    pub target: &'m Target,
    /// Node positions reading each value.
    pub users: Vec<Vec<usize>>,
    /// Graph outputs a compute node writes directly: value -> output index.
    pub direct_out: HashMap<ValueId, u32>,
    /// Output index -> donated input index.
    pub donated: HashMap<u32, u32>,
    sources: Vec<SourceTensor>,
    source_index: HashMap<String, u32>,
    weights: Vec<WeightSlot>,
    constants: Vec<ConstSlot>,
}

/// The dtype most float weights have (the model's dtype); f32 for a weightless graph.
fn model_dtype(m: &Module) -> DType {
    let mut count: HashMap<DType, usize> = HashMap::new();
    for v in &m.graph.values {
        if let ValueKind::Weight { .. } = v.kind {
            if v.ty.dtype.is_float() {
                *count.entry(v.ty.dtype).or_default() += v.ty.numel();
            }
        }
    }
    if count.is_empty() {
        for &i in &m.graph.inputs {
            let dt = m.graph.ty(i).dtype;
            if dt.is_float() {
                return dt;
            }
        }
    }
    count
        .into_iter()
        .max_by_key(|(dt, n)| (*n, *dt))
        .map_or(DType::F32, |(dt, _)| dt)
}

impl<'m> Lowerer<'m> {
    pub fn storage(&self, ir: DType) -> DType {
        storage_dtype(ir, self.model_dtype, self.compute)
    }

    /// A fresh arena buffer holding `v`, laid out as the layout pass and `perm` ask:
    /// `perm` (if any) is a permutation after which the buffer must read densely.
    pub fn alloc(&mut self, v: ValueId, perm: Option<&[usize]>) -> View {
        let ty = self.m.graph.ty(v);
        let dtype = self.storage(ty.dtype);
        let shape = ty.shape.clone();
        if let Some(&cp) = self.laid.get(&v) {
            let [n, _c, h, w] = shape[..] else {
                unreachable!("only 4-D values are laid out")
            };
            let b = self.new_buf((n * cp * h * w * dtype.size_bytes()) as u64);
            let strides = if self.target.channels_last {
                vec![h * w * cp, 1, w * cp, cp]
            } else {
                vec![cp * h * w, h * w, w, 1]
            };
            return View {
                base: Base::Buf(b),
                offset: 0,
                strides,
                shape,
                dtype,
            };
        }
        let base = match self.direct_out.get(&v) {
            Some(&o) => Base::Slot(Slot::Output(o)),
            None => Base::Buf(self.new_buf((ty.numel() * dtype.size_bytes()) as u64)),
        };
        match perm {
            Some(p) => {
                let permuted: Vec<usize> = p.iter().map(|&i| shape[i]).collect();
                let ds = crate::program::dense_strides(&permuted);
                let mut strides = vec![0; shape.len()];
                for (i, &pi) in p.iter().enumerate() {
                    strides[pi] = ds[i];
                }
                View {
                    base,
                    offset: 0,
                    shape,
                    strides,
                    dtype,
                }
            }
            None => View::dense(base, &shape, dtype),
        }
    }

    pub fn new_buf(&mut self, bytes: u64) -> usize {
        self.bufs.push(Interval {
            bytes,
            first: usize::MAX,
            last: 0,
        });
        self.bufs.len() - 1
    }

    /// The view of an operand, creating weight/constant slots on first use.
    pub fn view(&mut self, v: ValueId) -> Result<View, CompileError> {
        if let Some(view) = self.views.get(&v) {
            return Ok(view.clone());
        }
        let val = self.m.graph.value(v);
        let view = match &val.kind {
            ValueKind::Weight { .. } => {
                let recipe = match self.m.recipes.get(&v) {
                    Some(r) => r.map(|s| self.source(s))?,
                    None => Recipe::Load {
                        source: self.source(v)?,
                    },
                };
                let dtype = self.storage(val.ty.dtype);
                self.weights.push(WeightSlot {
                    name: val.name.clone(),
                    shape: val.ty.shape.clone(),
                    dtype,
                    recipe,
                });
                View::dense(
                    Base::Slot(Slot::Weight(self.weights.len() as u32 - 1)),
                    &val.ty.shape,
                    dtype,
                )
            }
            ValueKind::Constant(data) => {
                let dtype = self.storage(val.ty.dtype);
                let values = match data {
                    ConstData::Float(f) if dtype.is_float() => {
                        ConstValues::Float(f.iter().map(|&x| x as f32).collect())
                    }
                    ConstData::Float(f) => ConstValues::Int(f.iter().map(|&x| x as i64).collect()),
                    ConstData::Int(i) if dtype.is_float() => {
                        ConstValues::Float(i.iter().map(|&x| x as f32).collect())
                    }
                    ConstData::Int(i) => ConstValues::Int(i.clone()),
                };
                self.constants.push(ConstSlot {
                    name: val.name.clone(),
                    shape: val.ty.shape.clone(),
                    dtype,
                    values,
                });
                View::dense(
                    Base::Slot(Slot::Const(self.constants.len() as u32 - 1)),
                    &val.ty.shape,
                    dtype,
                )
            }
            _ => {
                return Err(CompileError::Internal(format!(
                    "value '{}' is used before it is computed",
                    val.name
                )))
            }
        };
        self.views.insert(v, view.clone());
        Ok(view)
    }

    fn source(&mut self, v: ValueId) -> Result<u32, CompileError> {
        let val = self.m.graph.value(v);
        let ValueKind::Weight { key } = &val.kind else {
            return Err(CompileError::Internal(format!(
                "recipe source '{}' is not a weight",
                val.name
            )));
        };
        if let Some(&i) = self.source_index.get(key) {
            return Ok(i);
        }
        self.sources.push(SourceTensor {
            key: key.clone(),
            shape: val.ty.shape.clone(),
            dtype: val.ty.dtype,
        });
        let i = self.sources.len() as u32 - 1;
        self.source_index.insert(key.clone(), i);
        Ok(i)
    }

    /// Appends a step; records buffer live ranges.
    pub fn push(
        &mut self,
        kernel: crate::program::Kernel,
        inputs: Vec<View>,
        outputs: Vec<View>,
        origin: &str,
    ) {
        let at = self.steps.len();
        for v in inputs.iter().chain(&outputs) {
            if let Base::Buf(b) = v.base {
                let iv = &mut self.bufs[b];
                iv.first = iv.first.min(at);
                iv.last = iv.last.max(at);
            }
        }
        let step = Step {
            kernel,
            inputs: Vec::new(),
            outputs: Vec::new(),
            origin: origin.to_string(),
        };
        self.steps.push(PendingStep {
            step,
            inputs,
            outputs,
        });
    }

    /// `view` as a dense, row-major view of `shape`, copying when strides do not allow it.
    pub fn reshaped(&mut self, view: View, shape: &[usize], origin: &str) -> View {
        if let Some(r) = view.reshape(shape) {
            return r;
        }
        let b =
            self.new_buf((view.shape.iter().product::<usize>() * view.dtype.size_bytes()) as u64);
        let dense = View::dense(Base::Buf(b), &view.shape, view.dtype);
        self.push(
            crate::program::Kernel::Copy,
            vec![view],
            vec![dense.clone()],
            origin,
        );
        dense
            .reshape(shape)
            .expect("a dense view reshapes to any shape of the same size")
    }
}

/// Lowers a fused, laid-out module for `target` computing in `compute`.
pub fn lower<'m>(
    m: &'m Module,
    target: &'m Target,
    compute: DType,
    laid: HashMap<ValueId, usize>,
) -> Result<Program, CompileError> {
    let g = &m.graph;
    let mut lw = Lowerer {
        m,
        compute,
        model_dtype: model_dtype(m),
        views: HashMap::new(),
        bufs: Vec::new(),
        steps: Vec::new(),
        laid,
        target,
        users: g.users(),
        direct_out: HashMap::new(),
        donated: HashMap::new(),
        sources: Vec::new(),
        source_index: HashMap::new(),
        weights: Vec::new(),
        constants: Vec::new(),
    };
    let inputs: Vec<IoTensor> = g
        .inputs
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let ty = g.ty(v);
            let storage = lw.storage(ty.dtype);
            lw.views.insert(
                v,
                View::dense(Base::Slot(Slot::Input(i as u32)), &ty.shape, storage),
            );
            IoTensor {
                name: g.value(v).name.clone(),
                shape: ty.shape.clone(),
                dtype: ty.dtype,
                storage,
                donates_input: None,
            }
        })
        .collect();
    assign_direct_outputs(&mut lw);
    for node in &g.nodes {
        emit::emit_node(&mut lw, node)?;
    }
    let mut outputs = Vec::new();
    for (j, &v) in g.outputs.iter().enumerate() {
        let ty = g.ty(v);
        let storage = lw.storage(ty.dtype);
        let donates = lw.donated.get(&(j as u32)).copied();
        let view = lw.view(v)?;
        let in_out_slot = view.base == Base::Slot(Slot::Output(j as u32));
        if in_out_slot && !(view.offset == 0 && view.is_dense()) {
            return Err(CompileError::Internal(format!(
                "output '{}' would be copied onto itself",
                g.value(v).name
            )));
        }
        let in_place = in_out_slot || donates.is_some();
        if !in_place {
            let dst = View::dense(Base::Slot(Slot::Output(j as u32)), &ty.shape, storage);
            lw.push(
                crate::program::Kernel::Copy,
                vec![view],
                vec![dst],
                &format!("output {}", g.value(v).name),
            );
        }
        outputs.push(IoTensor {
            name: g.value(v).name.clone(),
            shape: ty.shape.clone(),
            dtype: ty.dtype,
            storage,
            donates_input: donates,
        });
    }
    for b in &mut lw.bufs {
        if b.first == usize::MAX {
            b.first = 0;
        }
    }
    let (offsets, arena_bytes) = memory::plan(&lw.bufs);
    let resolve = |v: &View| -> Binding {
        let size = v.dtype.size_bytes() as u64;
        let (slot, base) = match v.base {
            Base::Buf(b) => (Slot::Arena, offsets[b]),
            Base::Slot(s) => (s, 0),
        };
        Binding {
            slot,
            byte_offset: base + v.offset as u64 * size,
            shape: v.shape.clone(),
            strides: v.strides.clone(),
            dtype: v.dtype,
        }
    };
    let steps = lw
        .steps
        .iter()
        .map(|p| Step {
            inputs: p.inputs.iter().map(resolve).collect(),
            outputs: p.outputs.iter().map(resolve).collect(),
            ..p.step.clone()
        })
        .collect();
    let program = Program {
        model_name: g.model_name.clone(),
        target: target.name.to_string(),
        compute_dtype: compute,
        inputs,
        outputs,
        sources: lw.sources,
        weights: lw.weights,
        constants: lw.constants,
        arena_bytes,
        steps,
    };
    program.validate().map_err(CompileError::Internal)?;
    Ok(program)
}

/// Chooses the graph outputs that their producer writes straight into the output slot: a
/// compute node's result, looking through reshapes of a result only that reshape reads, and
/// reshapes that must copy anyway. Padded values stay in the arena (outputs are dense).
fn assign_direct_outputs(lw: &mut Lowerer) {
    let g = &lw.m.graph;
    let producers = g.producers();
    for (j, &out) in g.outputs.iter().enumerate() {
        let mut chain = vec![out];
        let mut v = out;
        // Step back through views so the value's producer writes the output's bytes. A
        // transpose is crossed only right above its compute producer, whose buffer then
        // takes the transposed layout (see `Lowerer::alloc`), so the chain stays dense.
        while let Some((n, _)) = producers[v.idx()] {
            let node = &g.nodes[n];
            let Some(&src) = node.inputs.first() else {
                break;
            };
            let src_prod = producers[src.idx()].map(|(p, _)| &g.nodes[p].op);
            let src_computed = src_prod.is_some_and(emit::writes_own_buffer);
            let ok = match &node.op {
                Op::Ir(IrOp::Reshape | IrOp::Identity) => src_prod.is_some(),
                Op::Ir(IrOp::Transpose { .. } | IrOp::Permute { .. }) => src_computed,
                _ => false,
            };
            if !ok
                || lw.users[src.idx()].len() != 1
                || g.outputs.contains(&src)
                || lw.laid.contains_key(&src)
            {
                break;
            }
            v = src;
            chain.push(v);
        }
        let writable = |v: &ValueId| {
            producers[v.idx()].is_some_and(|(n, _)| {
                let op = &g.nodes[n].op;
                emit::writes_own_buffer(op)
                    || matches!(op, Op::Ir(IrOp::Reshape | IrOp::IndexCopy { .. }))
            })
        };
        let Some(&v) = chain.iter().rev().find(|v| writable(v)) else {
            continue;
        };
        if !lw.direct_out.contains_key(&v) && !lw.laid.contains_key(&v) {
            lw.direct_out.insert(v, j as u32);
        }
    }
}
