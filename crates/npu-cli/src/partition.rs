//! `npu partition`: show how a graph splits into NPU and CPU partitions.

use anyhow::Result;
use npu_compiler::partition::plan_for_target;
use npu_compiler::Target;
use npu_dag::dag::unrunnable;
use std::path::Path;
use std::process::ExitCode;

/// Prints the plan; fails (exit code 1) naming every node nobody can run.
pub fn show(model: &Path, target: &Target, force_cpu: &[String], json: bool) -> Result<ExitCode> {
    let graph = npu_ir::load(model)?;
    let (graph, plan) = plan_for_target(graph, target, force_cpu)?;
    let nowhere = unrunnable(&graph, &plan.placements);
    if json {
        say!(
            "{}",
            serde_json::to_string_pretty(&plan_json(&graph, &plan))?
        );
    } else {
        crate::out::write(format_args!("{}", plan.to_text(&graph)));
    }
    // with --json the list goes to stderr so stdout stays one JSON document
    if !nowhere.is_empty() {
        if json {
            for u in &nowhere {
                eprintln!("cannot run: {u}");
            }
        } else {
            crate::check::report_unrunnable(model, target, &nowhere);
        }
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

/// The plan with value and node names instead of ids.
fn plan_json(
    graph: &npu_ir::Graph,
    plan: &npu_compiler::partition::PartitionPlan,
) -> serde_json::Value {
    use npu_compiler::partition::PlanStep;
    use serde_json::json;
    let names = |vs: &[npu_ir::ValueId]| -> Vec<&str> {
        vs.iter().map(|&v| graph.value(v).name.as_str()).collect()
    };
    let steps: Vec<serde_json::Value> = plan
        .steps
        .iter()
        .map(|s| match s {
            PlanStep::Transfer { to, values } => {
                json!({"kind": "transfer", "to": to.name(), "values": names(values)})
            }
            PlanStep::Run { partition } => {
                let p = &plan.partitions[*partition];
                let nodes: Vec<serde_json::Value> = p
                    .nodes
                    .iter()
                    .map(|&n| {
                        let node = &graph.nodes[n];
                        json!({"name": node.name, "op_type": node.op_type,
                               "reason": plan.placements[n].reason})
                    })
                    .collect();
                json!({"kind": "run", "partition": p.id, "device": p.device.name(),
                       "inputs": names(&p.inputs), "outputs": names(&p.outputs), "nodes": nodes})
            }
        })
        .collect();
    json!({"model": graph.model_name, "nodes": graph.nodes.len(),
           "partitions": plan.partitions.len(), "steps": steps})
}
