//! The DAG executor: runs a partitioned graph, NPU partitions as compiled programs on a
//! [`Backend`], CPU partitions on the [fallback interpreter](crate::fallback).
//!
//! Invariants:
//! - Every NPU partition is compiled and prepared once, at construction; a run only moves
//!   values and launches.
//! - Values cross partitions as host tensors in their IR dtype (bf16 stays bf16, integer
//!   ids stay integers); each backend converts to its storage dtype on the way in.
//! - A graph input that an NPU partition updates in place (a KV cache: the program
//!   donates it) lives in the caller's [`DeviceState`], shared with other executors of the
//!   same backend (prefill and decode). It is read back to the host only when a CPU
//!   partition or a later NPU partition needs the updated value.

mod state;
mod support;

pub use state::HostState;
pub use support::{unrunnable, Unrunnable};

use crate::fallback::{run_nodes, ValueEnv};
use npu_compiler::partition::{extract, plan_for_target, Device, PartitionPlan, PlanStep};
use npu_compiler::{CompileOptions, Program};
use npu_ir::{Graph, ValueId, ValueKind};
use npu_runtime::backend::{Backend, DeviceState, Executable};
use npu_runtime::tensor::HostTensor;
use npu_runtime::weights::{MemoryWeights, WeightSource};
use npu_runtime::{Result, RuntimeError};
use std::collections::{HashMap, HashSet};
use std::time::Instant;

/// A graph value and the name a program knows it by.
type NamedValue = (ValueId, String);

/// An output of an NPU partition's program, in program order.
struct PartOutput {
    value: ValueId,
    /// The state buffer it updates, for donated outputs (returned through the state).
    state: Option<String>,
    /// Another partition reads it (a donated output is then read back from the state).
    read_later: bool,
}

enum Part {
    Npu {
        exe: Box<dyn Executable>,
        /// Program inputs in program order: graph value and name.
        inputs: Vec<NamedValue>,
        outputs: Vec<PartOutput>,
    },
    Cpu {
        nodes: Vec<usize>,
        inputs: Vec<ValueId>,
    },
}

/// Time spent per partition and transfer volume, over the runs made so far.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DagStats {
    pub runs: usize,
    /// Per partition: accumulated milliseconds.
    pub partition_ms: Vec<f64>,
    /// Bytes crossing devices per run.
    pub transfer_bytes: usize,
}

/// A partitioned graph, prepared to run.
pub struct DagExecutor {
    graph: Graph,
    plan: PartitionPlan,
    parts: Vec<Part>,
    /// Weights of CPU partitions (converted to their IR dtype once) and, during a run, the
    /// values computed so far.
    env: ValueEnv,
    preloaded: HashSet<ValueId>,
    /// Graph outputs that live in device state: value -> state buffer name.
    state_outputs: HashMap<ValueId, String>,
    /// Names of graph inputs a run may omit because they live in device state.
    state_inputs: HashSet<String>,
    stats: DagStats,
}

fn part_err(partition: usize, device: Device, message: impl Into<String>) -> RuntimeError {
    RuntimeError::Partition {
        partition,
        device: device.name(),
        message: message.into(),
    }
}

impl DagExecutor {
    /// Decomposes `graph`, partitions it for `opts.target` (`force_cpu` as in
    /// [`npu_compiler::partition::place_for_target`]) and prepares it (see [`Self::new`]).
    pub fn for_graph(
        graph: Graph,
        force_cpu: &[String],
        backend: &dyn Backend,
        weights: &dyn WeightSource,
        opts: &CompileOptions,
    ) -> Result<DagExecutor> {
        let (graph, plan) =
            plan_for_target(graph, opts.target, force_cpu).map_err(crate::compile_error)?;
        DagExecutor::new(graph, plan, backend, weights, opts)
    }

    /// Compiles every NPU partition of `plan` with `opts`, prepares it on `backend`, and
    /// loads the weights the CPU partitions read. `graph` must be decomposed (the plan
    /// indexes its nodes): [`Self::for_graph`] or
    /// [`npu_compiler::partition::plan_for_target`] do it.
    pub fn new(
        graph: Graph,
        plan: PartitionPlan,
        backend: &dyn Backend,
        weights: &dyn WeightSource,
        opts: &CompileOptions,
    ) -> Result<DagExecutor> {
        if let Some(n) = graph
            .nodes
            .iter()
            .find(|n| matches!(n.op, npu_ir::Op::Composite(_)))
        {
            return Err(RuntimeError::InvalidProgram(format!(
                "node '{}' ({}) is a composite op: decompose the graph before partitioning \
                 (npu_compiler::partition::plan_for_target)",
                n.name, n.op_type
            )));
        }
        let nowhere = unrunnable(&graph, &plan.placements);
        if !nowhere.is_empty() {
            let nodes: Vec<String> = nowhere.iter().map(ToString::to_string).collect();
            return Err(RuntimeError::Unrunnable {
                count: nodes.len(),
                nodes: nodes.join("; "),
            });
        }
        let mut parts = Vec::with_capacity(plan.partitions.len());
        let mut env = ValueEnv::new();
        let mut preloaded = HashSet::new();
        let mut state_outputs = HashMap::new();
        let mut state_inputs = HashSet::new();
        // Values some partition reads from another one.
        let read_across: HashSet<ValueId> = plan
            .partitions
            .iter()
            .flat_map(|p| p.inputs.iter().copied())
            .collect();
        for p in &plan.partitions {
            match p.device {
                Device::Npu => {
                    let sub = extract(&graph, p);
                    let (program, _) = npu_compiler::compile(sub, opts)
                        .map_err(|e| part_err(p.id, p.device, format!("cannot compile: {e}")))?;
                    let exe = backend.prepare(&program, weights).map_err(|e| {
                        part_err(
                            p.id,
                            p.device,
                            format!("cannot prepare on {}: {e}", backend.name()),
                        )
                    })?;
                    let (inputs, outputs) =
                        bind_program(&graph, &read_across, p.id, &p.inputs, &p.outputs, &program)?;
                    for o in &outputs {
                        if let Some(s) = &o.state {
                            state_inputs.insert(s.clone());
                            if graph.outputs.contains(&o.value) {
                                state_outputs.insert(o.value, s.clone());
                            }
                        }
                    }
                    parts.push(Part::Npu {
                        exe,
                        inputs,
                        outputs,
                    });
                }
                Device::Cpu => {
                    for &n in &p.nodes {
                        for &v in &graph.nodes[n].inputs {
                            let val = graph.value(v);
                            if let ValueKind::Weight { key } = &val.kind {
                                if preloaded.insert(v) {
                                    env.insert(v, load_weight(weights, key, &val.ty)?);
                                }
                            }
                        }
                    }
                    parts.push(Part::Cpu {
                        nodes: p.nodes.clone(),
                        inputs: p.inputs.clone(),
                    });
                }
            }
        }
        let stats = DagStats {
            partition_ms: vec![0.0; parts.len()],
            transfer_bytes: plan
                .transfers()
                .flat_map(|(_, vs)| vs.iter())
                .map(|&v| graph.ty(v).numel() * graph.ty(v).dtype.size_bytes())
                .sum(),
            runs: 0,
        };
        Ok(DagExecutor {
            graph,
            plan,
            parts,
            env,
            preloaded,
            state_outputs,
            state_inputs,
            stats,
        })
    }

    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    pub fn plan(&self) -> &PartitionPlan {
        &self.plan
    }

    /// The compiled programs of the NPU partitions, by partition id.
    pub fn programs(&self) -> Vec<(usize, &Program)> {
        self.parts
            .iter()
            .enumerate()
            .filter_map(|(i, p)| match p {
                Part::Npu { exe, .. } => Some((i, exe.program())),
                Part::Cpu { .. } => None,
            })
            .collect()
    }

    pub fn stats(&self) -> &DagStats {
        &self.stats
    }

    /// Names of graph inputs kept in device state (a run may omit them).
    pub fn state_inputs(&self) -> &HashSet<String> {
        &self.state_inputs
    }

    /// Empty device state of the backend that runs the NPU partitions.
    pub fn new_state(&self) -> Box<dyn DeviceState> {
        self.parts
            .iter()
            .find_map(|p| match p {
                Part::Npu { exe, .. } => Some(exe.new_state()),
                Part::Cpu { .. } => None,
            })
            .unwrap_or_else(|| Box::new(HostState::default()))
    }

    /// Runs the graph. `inputs` by graph input name; inputs kept in device state may be
    /// omitted (they keep their content) or given (they replace it). Returns the graph
    /// outputs in order, except those that live in device state (see [`Self::run_all`]).
    pub fn run(
        &mut self,
        inputs: &[(&str, &HostTensor)],
        state: &mut dyn DeviceState,
    ) -> Result<Vec<(String, HostTensor)>> {
        let given = self.bind_inputs(inputs)?;
        let result = self.run_steps(&given, state);
        let outputs = result.and_then(|()| self.collect_outputs(&given));
        // Drop this run's activations whatever happened; keep the preloaded weights.
        let keep = &self.preloaded;
        self.env.retain(|v, _| keep.contains(v));
        self.stats.runs += 1;
        outputs
    }

    /// Runs with a fresh state and returns every graph output, state outputs included.
    pub fn run_all(&mut self, inputs: &[(&str, &HostTensor)]) -> Result<Vec<(String, HostTensor)>> {
        let mut state = self.new_state();
        let plain = self.run(inputs, state.as_mut())?;
        let mut plain = plain.into_iter();
        let mut out = Vec::with_capacity(self.graph.outputs.len());
        for &v in &self.graph.outputs {
            match self.state_outputs.get(&v) {
                Some(name) => {
                    let t = state.read(name)?.cast(self.graph.ty(v).dtype)?;
                    out.push((self.graph.value(v).name.clone(), t));
                }
                None => out.extend(plain.next()),
            }
        }
        Ok(out)
    }

    /// Matches named inputs to graph inputs: `given[i]` is the tensor for graph input i.
    fn bind_inputs<'t>(
        &self,
        inputs: &[(&str, &'t HostTensor)],
    ) -> Result<Vec<Option<&'t HostTensor>>> {
        let g = &self.graph;
        let mut given: Vec<Option<&HostTensor>> = vec![None; g.inputs.len()];
        for (name, t) in inputs {
            let i = g
                .inputs
                .iter()
                .position(|&v| g.value(v).name == *name)
                .ok_or_else(|| RuntimeError::UnknownInput {
                    name: (*name).to_string(),
                    known: g
                        .inputs
                        .iter()
                        .map(|&v| g.value(v).name.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                })?;
            let ty = g.ty(g.inputs[i]);
            let dtype_ok = t.dtype() == ty.dtype || (t.dtype().is_float() && ty.dtype.is_float());
            if t.shape() != ty.shape.as_slice() || !dtype_ok {
                return Err(RuntimeError::InputMismatch {
                    name: (*name).to_string(),
                    expected_shape: ty.shape.clone(),
                    expected_dtype: ty.dtype,
                    found_shape: t.shape().to_vec(),
                    found_dtype: t.dtype(),
                });
            }
            given[i] = Some(*t);
        }
        for (i, &v) in g.inputs.iter().enumerate() {
            let val = g.value(v);
            if given[i].is_none() && !self.state_inputs.contains(&val.name) {
                return Err(RuntimeError::MissingInput {
                    name: val.name.clone(),
                    dtype: val.ty.dtype,
                    shape: val.ty.shape.clone(),
                });
            }
        }
        Ok(given)
    }

    fn run_steps(
        &mut self,
        given: &[Option<&HostTensor>],
        state: &mut dyn DeviceState,
    ) -> Result<()> {
        for step in 0..self.plan.steps.len() {
            let PlanStep::Run { partition } = self.plan.steps[step] else {
                // Values cross as host tensors: the backend uploads what a program reads
                // and returns what it writes, so a transfer needs no work of its own.
                continue;
            };
            let t = Instant::now();
            match &mut self.parts[partition] {
                Part::Npu {
                    exe,
                    inputs,
                    outputs,
                } => {
                    let mut args: Vec<(&str, &HostTensor)> = Vec::with_capacity(inputs.len());
                    for (v, name) in inputs.iter() {
                        match lookup(&self.graph, &self.env, given, *v) {
                            Some(t) => args.push((name.as_str(), t)),
                            None if self.state_inputs.contains(name) => {}
                            None => {
                                return Err(part_err(
                                    partition,
                                    Device::Npu,
                                    format!("value '{name}' was not computed before it is read"),
                                ))
                            }
                        }
                    }
                    let produced = exe.run(&args, state)?;
                    let mut produced = produced.into_iter();
                    for o in outputs.iter() {
                        match &o.state {
                            None => {
                                let (_, t) = produced.next().ok_or_else(|| {
                                    part_err(
                                        partition,
                                        Device::Npu,
                                        "the program returned too few outputs",
                                    )
                                })?;
                                self.env.insert(o.value, t);
                            }
                            Some(name) => {
                                if o.read_later {
                                    let t = state.read(name)?.cast(self.graph.ty(o.value).dtype)?;
                                    self.env.insert(o.value, t);
                                }
                            }
                        }
                    }
                }
                Part::Cpu { nodes, inputs } => {
                    for &v in inputs.iter() {
                        if self.env.contains_key(&v) {
                            continue;
                        }
                        let val = self.graph.value(v);
                        let t = match lookup(&self.graph, &self.env, given, v) {
                            Some(t) => t.clone(),
                            None if self.state_inputs.contains(&val.name) => {
                                state.read(&val.name)?.cast(val.ty.dtype)?
                            }
                            None => {
                                return Err(part_err(
                                    partition,
                                    Device::Cpu,
                                    format!(
                                        "value '{}' was not computed before it is read",
                                        val.name
                                    ),
                                ))
                            }
                        };
                        self.env.insert(v, t);
                    }
                    run_nodes(&self.graph, nodes, &mut self.env, &MemoryWeights::default())?;
                }
            }
            self.stats.partition_ms[partition] += t.elapsed().as_secs_f64() * 1e3;
        }
        Ok(())
    }

    fn collect_outputs(
        &mut self,
        given: &[Option<&HostTensor>],
    ) -> Result<Vec<(String, HostTensor)>> {
        let g = &self.graph;
        let mut out = Vec::with_capacity(g.outputs.len());
        for &v in &g.outputs {
            if self.state_outputs.contains_key(&v) {
                continue;
            }
            let t =
                lookup(g, &self.env, given, v)
                    .cloned()
                    .ok_or_else(|| RuntimeError::Tensor {
                        name: g.value(v).name.clone(),
                        message: "graph output was not computed".into(),
                    })?;
            out.push((g.value(v).name.clone(), t));
        }
        Ok(out)
    }
}

/// A computed value, or a graph input the caller gave.
fn lookup<'a>(
    g: &Graph,
    env: &'a ValueEnv,
    given: &[Option<&'a HostTensor>],
    v: ValueId,
) -> Option<&'a HostTensor> {
    if let Some(t) = env.get(&v) {
        return Some(t);
    }
    match g.value(v).kind {
        ValueKind::Input { index } => given.get(index).copied().flatten(),
        _ => None,
    }
}

/// Matches a compiled partition's program I/O (by name) to the graph's values.
fn bind_program(
    graph: &Graph,
    read_across: &HashSet<ValueId>,
    partition: usize,
    inputs: &[ValueId],
    outputs: &[ValueId],
    program: &Program,
) -> Result<(Vec<NamedValue>, Vec<PartOutput>)> {
    let find = |set: &[ValueId], name: &str, what: &str| {
        set.iter()
            .copied()
            .find(|&v| graph.value(v).name == name)
            .ok_or_else(|| {
                part_err(
                    partition,
                    Device::Npu,
                    format!("program {what} '{name}' is not a boundary value"),
                )
            })
    };
    let ins = program
        .inputs
        .iter()
        .map(|i| Ok((find(inputs, &i.name, "input")?, i.name.clone())))
        .collect::<Result<Vec<_>>>()?;
    let outs = program
        .outputs
        .iter()
        .map(|o| {
            let value = find(outputs, &o.name, "output")?;
            Ok(PartOutput {
                value,
                state: o
                    .donates_input
                    .map(|i| program.inputs[i as usize].name.clone()),
                read_later: read_across.contains(&value),
            })
        })
        .collect::<Result<Vec<PartOutput>>>()?;
    Ok((ins, outs))
}

/// A weight as a host tensor in the value's IR dtype.
fn load_weight(src: &dyn WeightSource, key: &str, ty: &npu_ir::TensorType) -> Result<HostTensor> {
    let t = src.get(key).ok_or_else(|| RuntimeError::MissingWeight {
        key: key.to_string(),
        file: src.describe(),
        extra: format!(" as {ty} for the CPU fallback"),
    })?;
    if t.shape != ty.shape.as_slice() {
        return Err(RuntimeError::WeightMismatch {
            key: key.to_string(),
            file: src.describe(),
            expected_shape: ty.shape.clone(),
            expected_dtype: ty.dtype,
            found_shape: t.shape.to_vec(),
            found_dtype: t.dtype,
        });
    }
    HostTensor::new(t.dtype, t.shape.to_vec(), t.bytes.to_vec())?.cast(ty.dtype)
}
