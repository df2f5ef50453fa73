//! Graph partitioning: which device runs each IR node, grouped into maximal same-device
//! runs over the data flow, with transfers exactly where a value crosses devices.
//!
//! The plan is built in two steps:
//! - [`place`]: every node gets a device. Nodes the target cannot run (or that the caller
//!   forces) go to the CPU; pure metadata ops (views, `getitem`, identity) follow their
//!   producer so that a view between two CPU ops does not bounce through the NPU.
//! - [`schedule`]: a topological order that stays on one device as long as any node of that
//!   device is ready, so an unsupported op whose neighbours do not depend on it never splits
//!   an NPU run in two. Consecutive same-device nodes of that order form a partition.
//!
//! Invariants of a [`PartitionPlan`]: every node is in exactly one partition; the
//! partitions, in plan order, are a topological order of the graph; adjacent partitions
//! run on different devices; a `Transfer` to device `d` precedes the first partition on
//! `d` that reads a value produced on the other device, and moves each value at most once.

mod subgraph;
mod text;

pub use subgraph::extract;

use crate::error::CompileError;
use crate::target::Target;
use npu_ir::{Graph, Node, Op, ValueId, ValueKind};
use serde::Serialize;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet};

/// Where a partition runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Device {
    /// The compiled-program backend (the NPU target).
    Npu,
    /// The CPU fallback interpreter.
    Cpu,
}

impl Device {
    pub fn name(self) -> &'static str {
        match self {
            Device::Npu => "npu",
            Device::Cpu => "cpu",
        }
    }

    fn other(self) -> Device {
        match self {
            Device::Npu => Device::Cpu,
            Device::Cpu => Device::Npu,
        }
    }
}

/// Why a node runs where it runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Placement {
    pub device: Device,
    /// For CPU nodes: why the NPU does not run it (unsupported, or forced by the caller).
    pub reason: Option<String>,
}

/// A maximal run of nodes on one device.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Partition {
    pub id: usize,
    pub device: Device,
    /// Positions in `graph.nodes`, in execution order.
    pub nodes: Vec<usize>,
    /// Values read here but produced elsewhere: graph inputs and other partitions' outputs
    /// (weights and embedded constants are not listed; each side loads its own).
    pub inputs: Vec<ValueId>,
    /// Values produced here that another partition reads or that are graph outputs.
    pub outputs: Vec<ValueId>,
}

/// One step of a plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum PlanStep {
    Run {
        partition: usize,
    },
    /// Moves values produced on the other device to `to`.
    Transfer {
        to: Device,
        values: Vec<ValueId>,
    },
}

/// The result of [`partition`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PartitionPlan {
    pub partitions: Vec<Partition>,
    pub steps: Vec<PlanStep>,
    /// Per node (indexed like `graph.nodes`): where it runs and why.
    pub placements: Vec<Placement>,
}

impl PartitionPlan {
    pub fn transfers(&self) -> impl Iterator<Item = (Device, &[ValueId])> {
        self.steps.iter().filter_map(|s| match s {
            PlanStep::Transfer { to, values } => Some((*to, values.as_slice())),
            PlanStep::Run { .. } => None,
        })
    }

    pub fn count(&self, device: Device) -> usize {
        self.partitions
            .iter()
            .filter(|p| p.device == device)
            .count()
    }
}

/// Nodes that only reinterpret their input's metadata, pick a multi-output result, or
/// convert a dtype: cheap on either device, so they run where their producer runs rather
/// than open a partition of their own.
fn follows_producer(op: &Op) -> bool {
    matches!(
        op,
        Op::Reshape
            | Op::Transpose { .. }
            | Op::Permute { .. }
            | Op::Expand { .. }
            | Op::Slice { .. }
            | Op::Identity
            | Op::Cast
            | Op::GetItem { .. }
            | Op::AssertMetadata
            | Op::Dropout { train: false, .. }
    )
}

/// `--force-cpu` matching: the full op type (`aten.softmax.int`) or its base name
/// (`softmax`, also matching the in-place `softmax_`).
pub fn op_matches(op_type: &str, pattern: &str) -> bool {
    if op_type == pattern {
        return true;
    }
    let base = op_type.strip_prefix("aten.").unwrap_or(op_type);
    let base = base.split('.').next().unwrap_or(base);
    base == pattern || base.strip_suffix('_') == Some(pattern)
}

/// The entry point for a parsed IR graph: decomposes it (composite ops become primitives,
/// see [`crate::passes::decompose`]), places every node for `target` (`force_cpu` as in
/// [`place_for_target`]) and partitions it. The plan indexes the returned graph's nodes.
pub fn plan_for_target(
    graph: Graph,
    target: &Target,
    force_cpu: &[String],
) -> Result<(Graph, PartitionPlan), CompileError> {
    let graph = crate::passes::decompose::decompose(graph)?;
    let plan = partition(&graph, place_for_target(&graph, target, force_cpu));
    Ok((graph, plan))
}

/// Where each node runs for `target`, with the ops in `force_cpu` sent to the CPU. The graph
/// should be decomposed ([`plan_for_target`] does it); a composite left in it goes to the CPU,
/// which refuses it.
pub fn place_for_target(graph: &Graph, target: &Target, force_cpu: &[String]) -> Vec<Placement> {
    place(graph, |node| {
        if let Some(p) = force_cpu.iter().find(|p| op_matches(&node.op_type, p)) {
            return Some(format!("forced to CPU (--force-cpu {p})"));
        }
        target.ir_node_unsupported(node, graph)
    })
}

/// Places every node: `cpu_reason(node)` is `Some(why)` for nodes the NPU must not run.
/// Metadata-only nodes that the NPU could run follow their producer's device.
pub fn place(graph: &Graph, cpu_reason: impl Fn(&Node) -> Option<String>) -> Vec<Placement> {
    let producers = graph.producers();
    let users = graph.users();
    let mut out: Vec<Option<Placement>> = vec![None; graph.nodes.len()];
    let mut followers = Vec::new();
    for (n, node) in graph.nodes.iter().enumerate() {
        if let Some(reason) = cpu_reason(node) {
            out[n] = Some(Placement {
                device: Device::Cpu,
                reason: Some(reason),
            });
        } else if follows_producer(&node.op) {
            let from = node.inputs.first().and_then(|v| producers[v.idx()]);
            match from.and_then(|(p, _)| out[p].as_ref()) {
                Some(p) => {
                    out[n] = Some(Placement {
                        device: p.device,
                        reason: None,
                    })
                }
                None => followers.push(n),
            }
        } else {
            out[n] = Some(Placement {
                device: Device::Npu,
                reason: None,
            });
        }
    }
    // Metadata ops of graph inputs/weights (or of other undecided ones) go where their
    // first reader runs; resolved from the back so chains of them settle in one pass.
    for &n in followers.iter().rev() {
        let first_user = graph.nodes[n]
            .outputs
            .iter()
            .flat_map(|v| users[v.idx()].iter().copied())
            .min();
        let device = first_user
            .and_then(|u| out[u].as_ref())
            .map_or(Device::Npu, |p| p.device);
        out[n] = Some(Placement {
            device,
            reason: None,
        });
    }
    // Every node is placed by now (followers resolve back to front).
    out.into_iter()
        .map(|p| {
            p.unwrap_or(Placement {
                device: Device::Npu,
                reason: None,
            })
        })
        .collect()
}

/// Groups placed nodes into partitions and inserts the transfers.
pub fn partition(graph: &Graph, placements: Vec<Placement>) -> PartitionPlan {
    assert_eq!(
        placements.len(),
        graph.nodes.len(),
        "one placement per node"
    );
    let producers = graph.producers();
    let users = graph.users();
    let runs = schedule(graph, &producers, &placements);
    let mut part_of = vec![usize::MAX; graph.nodes.len()];
    for (pid, (_, nodes)) in runs.iter().enumerate() {
        for &n in nodes {
            part_of[n] = pid;
        }
    }
    let graph_outputs: HashSet<ValueId> = graph.outputs.iter().copied().collect();
    let mut partitions = Vec::with_capacity(runs.len());
    for (pid, (device, nodes)) in runs.into_iter().enumerate() {
        let mut inputs = Vec::new();
        let mut seen = HashSet::new();
        for &n in &nodes {
            for &v in &graph.nodes[n].inputs {
                let external = match &graph.value(v).kind {
                    ValueKind::Input { .. } => true,
                    ValueKind::NodeOutput { .. } => {
                        producers[v.idx()].is_some_and(|(p, _)| part_of[p] != pid)
                    }
                    ValueKind::Weight { .. } | ValueKind::Constant(_) => false,
                };
                if external && seen.insert(v) {
                    inputs.push(v);
                }
            }
        }
        let mut outputs = Vec::new();
        for &n in &nodes {
            for &v in &graph.nodes[n].outputs {
                let read_elsewhere = users[v.idx()].iter().any(|&u| part_of[u] != pid);
                if read_elsewhere || graph_outputs.contains(&v) {
                    outputs.push(v);
                }
            }
        }
        partitions.push(Partition {
            id: pid,
            device,
            nodes,
            inputs,
            outputs,
        });
    }
    let mut steps = Vec::new();
    // Where each value currently has a copy (graph inputs are fed to whichever side reads
    // them, like weights, so they never appear in transfers).
    let mut resident: Vec<[bool; 2]> = vec![[false; 2]; graph.values.len()];
    let slot = |d: Device| d as usize;
    for p in &partitions {
        let moved: Vec<ValueId> = p
            .inputs
            .iter()
            .copied()
            .filter(|v| matches!(graph.value(*v).kind, ValueKind::NodeOutput { .. }))
            .filter(|v| !resident[v.idx()][slot(p.device)])
            .collect();
        for v in &moved {
            resident[v.idx()][slot(p.device)] = true;
        }
        if !moved.is_empty() {
            steps.push(PlanStep::Transfer {
                to: p.device,
                values: moved,
            });
        }
        steps.push(PlanStep::Run { partition: p.id });
        for v in &p.outputs {
            resident[v.idx()][slot(p.device)] = true;
        }
    }
    PartitionPlan {
        partitions,
        steps,
        placements,
    }
}

/// The better of the two greedy schedules (starting on either device): fewest runs, then
/// the NPU start.
fn schedule(
    graph: &Graph,
    producers: &[Option<(usize, usize)>],
    placements: &[Placement],
) -> Vec<(Device, Vec<usize>)> {
    // Node-level dependencies: how many distinct producers each node waits for, and who
    // waits for each node.
    let n = graph.nodes.len();
    let mut waiting = vec![0usize; n];
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (j, node) in graph.nodes.iter().enumerate() {
        let mut deps: Vec<usize> = node
            .inputs
            .iter()
            .filter_map(|v| producers[v.idx()].map(|(p, _)| p))
            .collect();
        deps.sort_unstable();
        deps.dedup();
        waiting[j] = deps.len();
        for d in deps {
            dependents[d].push(j);
        }
    }
    let npu_first = schedule_from(placements, &dependents, waiting.clone(), Device::Npu);
    let cpu_first = schedule_from(placements, &dependents, waiting, Device::Cpu);
    if cpu_first.len() < npu_first.len() {
        cpu_first
    } else {
        npu_first
    }
}

/// A topological order that starts on `start` and switches device only when the current
/// device has no ready node; returns its same-device runs. Among ready nodes the IR order
/// decides.
fn schedule_from(
    placements: &[Placement],
    dependents: &[Vec<usize>],
    mut waiting: Vec<usize>,
    start: Device,
) -> Vec<(Device, Vec<usize>)> {
    let n = waiting.len();
    let mut ready: [BinaryHeap<Reverse<usize>>; 2] = [BinaryHeap::new(), BinaryHeap::new()];
    for j in 0..n {
        if waiting[j] == 0 {
            ready[placements[j].device as usize].push(Reverse(j));
        }
    }
    let mut runs: Vec<(Device, Vec<usize>)> = Vec::new();
    let mut device = start;
    let mut done = 0;
    let mut idle_switches = 0;
    while done < n && idle_switches < 2 {
        let mut run = Vec::new();
        while let Some(Reverse(j)) = ready[device as usize].pop() {
            run.push(j);
            done += 1;
            for &k in &dependents[j] {
                waiting[k] -= 1;
                if waiting[k] == 0 {
                    ready[placements[k].device as usize].push(Reverse(k));
                }
            }
        }
        if run.is_empty() {
            // Only a malformed (cyclic) graph leaves nodes that never become ready.
            idle_switches += 1;
        } else {
            idle_switches = 0;
            runs.push((device, run));
        }
        device = device.other();
    }
    runs
}
