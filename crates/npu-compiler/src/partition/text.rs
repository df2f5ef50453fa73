//! Human-readable rendering of a [`PartitionPlan`] (`npu partition`).

use super::{Device, Partition, PartitionPlan, PlanStep};
use npu_ir::{Graph, ValueId};
use std::collections::BTreeMap;
use std::fmt::Write;

fn op_name(op_type: &str) -> &str {
    let s = op_type.strip_prefix("aten.").unwrap_or(op_type);
    s.split('.').next().unwrap_or(s)
}

fn bytes_of(graph: &Graph, v: ValueId) -> usize {
    let t = graph.ty(v);
    t.numel() * t.dtype.size_bytes()
}

fn value_list(graph: &Graph, values: &[ValueId], limit: usize) -> String {
    let mut parts: Vec<String> = values
        .iter()
        .take(limit)
        .map(|&v| format!("{} {}", graph.value(v).name, graph.ty(v)))
        .collect();
    if values.len() > limit {
        parts.push(format!("... {} more", values.len() - limit));
    }
    parts.join(", ")
}

/// Op histogram of a partition, most frequent first: `conv2d x20, relu_ x17`.
fn op_summary(graph: &Graph, p: &Partition, limit: usize) -> String {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for &n in &p.nodes {
        *counts.entry(op_name(&graph.nodes[n].op_type)).or_default() += 1;
    }
    let mut v: Vec<(&str, usize)> = counts.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let mut parts: Vec<String> = v
        .iter()
        .take(limit)
        .map(|(op, c)| {
            if *c > 1 {
                format!("{op} x{c}")
            } else {
                (*op).to_string()
            }
        })
        .collect();
    if v.len() > limit {
        parts.push(format!("+{} more op kinds", v.len() - limit));
    }
    parts.join(", ")
}

impl PartitionPlan {
    /// A readable listing: partitions with their ops, boundary values and, for CPU
    /// partitions, why each op is there; transfers with their sizes.
    pub fn to_text(&self, graph: &Graph) -> String {
        let mut s = String::new();
        let moved: usize = self
            .transfers()
            .flat_map(|(_, vs)| vs.iter())
            .map(|&v| bytes_of(graph, v))
            .sum();
        let n_transfers: usize = self.transfers().count();
        let _ = writeln!(
            s,
            "{}: {} nodes in {} partition(s) ({} npu, {} cpu), {} transfer(s) moving {:.3} MiB per run",
            graph.model_name,
            graph.nodes.len(),
            self.partitions.len(),
            self.count(Device::Npu),
            self.count(Device::Cpu),
            n_transfers,
            moved as f64 / 1048576.0
        );
        for step in &self.steps {
            match step {
                PlanStep::Transfer { to, values } => {
                    let b: usize = values.iter().map(|&v| bytes_of(graph, v)).sum();
                    let _ = writeln!(
                        s,
                        "  -> {}: {} ({:.3} MiB)",
                        to.name(),
                        value_list(graph, values, 4),
                        b as f64 / 1048576.0
                    );
                }
                PlanStep::Run { partition } => {
                    let p = &self.partitions[*partition];
                    let _ = writeln!(
                        s,
                        "  [{}] {} {} node(s): {}",
                        p.id,
                        p.device.name(),
                        p.nodes.len(),
                        op_summary(graph, p, 8)
                    );
                    if !p.inputs.is_empty() {
                        let _ = writeln!(s, "      in:  {}", value_list(graph, &p.inputs, 4));
                    }
                    if !p.outputs.is_empty() {
                        let _ = writeln!(s, "      out: {}", value_list(graph, &p.outputs, 4));
                    }
                    if p.device == Device::Cpu {
                        let mut why: BTreeMap<&str, (&str, usize)> = BTreeMap::new();
                        for &n in &p.nodes {
                            if let Some(r) = &self.placements[n].reason {
                                why.entry(&graph.nodes[n].op_type)
                                    .or_insert((r.as_str(), 0))
                                    .1 += 1;
                            }
                        }
                        for (op, (reason, count)) in why {
                            let _ = writeln!(s, "      why: {op} (x{count}): {reason}");
                        }
                    }
                }
            }
        }
        s
    }
}
