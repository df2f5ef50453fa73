//! `npu check`: can this graph run, and where? Every node goes to the target or, when the
//! target cannot run it, to the CPU fallback (the placement `npu partition` and `npu run`
//! use). Nodes that neither can run are listed, each with both reasons, and fail the check.

use anyhow::Result;
use npu_compiler::partition::{place_for_target, Device};
use npu_compiler::Target;
use npu_dag::dag::{unrunnable, Unrunnable};
use std::path::Path;
use std::process::ExitCode;

/// Prints the nodes nobody runs; returns whether there were any.
pub fn report_unrunnable(model: &Path, target: &Target, nowhere: &[Unrunnable]) -> bool {
    if nowhere.is_empty() {
        return false;
    }
    say!(
        "{}: {} node(s) can run neither on target '{}' nor on the CPU fallback:",
        model.display(),
        nowhere.len(),
        target.name
    );
    for u in nowhere {
        say!("  - {u}");
    }
    true
}

pub fn check(model: &Path, target: &Target) -> Result<ExitCode> {
    // placement sees the graph `npu partition` and `npu run` place: composites decomposed
    let graph = npu_compiler::passes::decompose::decompose(crate::load_graph(model)?)?;
    let nodes = graph.nodes.len();
    let placements = place_for_target(&graph, target, &[]);
    if report_unrunnable(model, target, &unrunnable(&graph, &placements)) {
        return Ok(ExitCode::from(1));
    }
    let on_cpu: Vec<(usize, &str)> = placements
        .iter()
        .enumerate()
        .filter(|(_, p)| p.device == Device::Cpu)
        .map(|(i, p)| (i, p.reason.as_deref().unwrap_or("")))
        .collect();
    if !on_cpu.is_empty() {
        say!(
            "{}: all {nodes} nodes run: {} on target '{}', {} on the CPU fallback:",
            model.display(),
            nodes - on_cpu.len(),
            target.name,
            on_cpu.len()
        );
        for (i, why) in on_cpu {
            let n = &graph.nodes[i];
            say!("  - node '{}' ({}): {why}", n.name, n.op_type);
        }
        return Ok(ExitCode::SUCCESS);
    }
    // Everything is placed on the target: the compiler's whole-graph constraints decide.
    let violations = npu_compiler::check(graph, target)?;
    if violations.is_empty() {
        say!(
            "{}: all {nodes} nodes fit target '{}'",
            model.display(),
            target.name
        );
        return Ok(ExitCode::SUCCESS);
    }
    say!(
        "{}: {} violation(s) for target '{}':",
        model.display(),
        violations.len(),
        target.name
    );
    for v in &violations {
        say!("  - {v}");
    }
    Ok(ExitCode::from(1))
}
