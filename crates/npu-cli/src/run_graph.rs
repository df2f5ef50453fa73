//! `npu run MODEL.json`: partition an IR graph for the target, compile its NPU partitions,
//! and run the mix (CPU partitions on the fallback interpreter) through the DAG executor.

use crate::backends::backend_by_name;
use crate::run::{find_input, open_weights, report, RunArgs};
use anyhow::{bail, Context, Result};
use npu_compiler::partition::{plan_for_target, Device};
use npu_compiler::{CompileOptions, Target};
use npu_dag::dag::DagExecutor;
use npu_ir::DType;
use npu_runtime::{read_safetensors, safetensors_bytes, HostTensor};
use std::time::Instant;

/// How to compile the graph's NPU partitions.
pub struct GraphArgs {
    pub target: &'static Target,
    pub dtype: Option<DType>,
    pub force_cpu: Vec<String>,
}

pub fn run(a: RunArgs, g: GraphArgs) -> Result<()> {
    let t = Instant::now();
    let graph = crate::load_graph(&a.program)?;
    let (graph, plan) = plan_for_target(graph, g.target, &g.force_cpu)?;
    say!(
        "partitioned {}: {} npu + {} cpu partition(s), {} transfer(s)",
        a.program.display(),
        plan.count(Device::Npu),
        plan.count(Device::Cpu),
        plan.transfers().count()
    );
    if a.weights.is_none() && !graph.weights.is_empty() {
        bail!(
            "{} reads {} weight tensors: pass --weights FILE.safetensors",
            a.program.display(),
            graph.weights.len()
        );
    }
    let weights = open_weights(a.weights.as_deref())?;
    let backend = backend_by_name(&a.backend)?;
    let opts = CompileOptions {
        target: g.target,
        dtype: g.dtype,
    };
    let mut dag = DagExecutor::new(graph, plan, backend.as_ref(), weights.as_ref(), &opts)
        .with_context(|| format!("cannot prepare {}", a.program.display()))?;
    let prepare_ms = t.elapsed().as_secs_f64() * 1e3;
    let file: Vec<(String, HostTensor)> = match &a.inputs {
        Some(p) => read_safetensors(p)?,
        None => Vec::new(),
    };
    let graph_inputs: Vec<(String, npu_ir::TensorType)> = dag
        .graph()
        .inputs
        .iter()
        .map(|&v| (dag.graph().value(v).name.clone(), dag.graph().ty(v).clone()))
        .collect();
    let mut inputs: Vec<(&str, &HostTensor)> = Vec::new();
    for (name, ty) in &graph_inputs {
        match find_input(&file, name) {
            Some(t) => inputs.push((name.as_str(), t)),
            None if dag.state_inputs().contains(name) => {}
            None => bail!(
                "input '{}' {} is not in {}",
                name,
                ty,
                a.inputs
                    .as_ref()
                    .map_or("the inputs (pass --inputs FILE)".into(), |p| p
                        .display()
                        .to_string())
            ),
        }
    }
    let mut state = dag.new_state();
    let mut times = Vec::new();
    for _ in 0..a.repeat.max(1) {
        let t = Instant::now();
        dag.run(&inputs, state.as_mut())?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    // One more run for the outputs, so state outputs come from a known starting state.
    let all = dag.run_all(&inputs)?;
    if let Some(p) = &a.outputs {
        crate::out::write_file(p, &safetensors_bytes(&all)?)?;
    }
    report(&a, " (+ cpu fallback)", prepare_ms, &times, &all);
    if a.profile {
        crate::profile::print_startup(backend.as_ref());
        let stats = dag.stats();
        let plan = dag.plan();
        say!(
            "per partition ({} runs; {:.3} MiB cross devices per run):",
            stats.runs,
            stats.transfer_bytes as f64 / 1048576.0
        );
        for (p, ms) in plan.partitions.iter().zip(&stats.partition_ms) {
            say!(
                "  [{}] {} {:>4} node(s) {:>10.3} ms/run",
                p.id,
                p.device.name(),
                p.nodes.len(),
                ms / stats.runs.max(1) as f64
            );
        }
    }
    Ok(())
}
