//! Horizontal linear fusion: linears that read the same input with checkpoint weights (an
//! attention's q/k/v projections, an MLP's gate and up projections) become one linear over
//! the weights concatenated at load time ([`Recipe::Concat`]), and each original output a
//! slice (a view) of its result. One GEMM reads the input once and fills more of the machine
//! than three small ones; at decode (M = 1) it is one GEMV launch instead of three. The dot
//! products are the same, so results are bit-identical.
//!
//! Grouped: `linear(x, W_i, b_i?)` with the same `x`, plain checkpoint weights `W_i` [N_i, K]
//! of one dtype (not themselves derived by a recipe), and either every bias present (a
//! checkpoint tensor of the weight's dtype) or none. The fused linear takes the place of the
//! group's first member, which keeps the node order topological (`x` and every weight exist
//! there); the members become slices of its output along the last dim.

use crate::graph::{CNode, Module, Op};
use crate::program::Recipe;
use npu_ir::{NodeId, Op as IrOp, TensorType, ValueId, ValueKind};
use std::collections::HashMap;

/// A linear member of a group: node index, weight, bias.
struct Member {
    node: usize,
    weight: ValueId,
    bias: Option<ValueId>,
}

/// A plain checkpoint weight: not derived by a recipe (BN folding).
fn checkpoint(m: &Module, v: ValueId) -> bool {
    matches!(m.graph.value(v).kind, ValueKind::Weight { .. }) && !m.recipes.contains_key(&v)
}

fn member(m: &Module, n: usize, node: &CNode) -> Option<(ValueId, Member)> {
    if !matches!(node.op, Op::Ir(IrOp::Linear)) || node.outputs.len() != 1 {
        return None;
    }
    let (x, w) = (*node.inputs.first()?, *node.inputs.get(1)?);
    let bias = node.inputs.get(2).copied();
    let wt = m.graph.ty(w);
    if wt.rank() != 2 || !checkpoint(m, w) {
        return None;
    }
    if let Some(b) = bias {
        let bt = m.graph.ty(b);
        if !checkpoint(m, b) || bt.shape != [wt.shape[0]] || bt.dtype != wt.dtype {
            return None;
        }
    }
    Some((
        x,
        Member {
            node: n,
            weight: w,
            bias,
        },
    ))
}

/// Fuses every group of two or more linears over one input; returns how many linears were
/// absorbed into a concatenated one.
pub fn concat_linears(m: &mut Module) -> usize {
    let mut groups: HashMap<ValueId, Vec<Member>> = HashMap::new();
    for (n, node) in m.graph.nodes.iter().enumerate() {
        if let Some((x, mem)) = member(m, n, node) {
            groups.entry(x).or_default().push(mem);
        }
    }
    // fused linear to insert before node index -> its node; member node -> its slice
    let mut before: HashMap<usize, CNode> = HashMap::new();
    let mut replaced: HashMap<usize, CNode> = HashMap::new();
    let mut absorbed = 0;
    let mut keys: Vec<ValueId> = groups.keys().copied().collect();
    keys.sort_by_key(|v| v.idx());
    for x in keys {
        let g = &groups[&x];
        let wdt = m.graph.ty(g[0].weight).dtype;
        let k = m.graph.ty(g[0].weight).shape[1];
        let biased = g[0].bias.is_some();
        let group: Vec<&Member> = g
            .iter()
            .filter(|mem| {
                let t = m.graph.ty(mem.weight);
                t.dtype == wdt && t.shape[1] == k && mem.bias.is_some() == biased
            })
            .collect();
        if group.len() < 2 {
            continue;
        }
        let out_ty = |mem: &Member| m.graph.ty(m.graph.nodes[mem.node].outputs[0]).clone();
        let first_out = out_ty(group[0]);
        if group.iter().any(|mem| out_ty(mem).dtype != first_out.dtype) {
            continue;
        }
        let widths: Vec<usize> = group
            .iter()
            .map(|mem| m.graph.ty(mem.weight).shape[0])
            .collect();
        let total: usize = widths.iter().sum();
        let name = |vs: &dyn Fn(&Member) -> ValueId| {
            let names: Vec<String> = group
                .iter()
                .map(|mem| m.graph.value(vs(mem)).name.clone())
                .collect();
            format!("concat({})", names.join(","))
        };
        let (wname, bname) = (
            name(&|mem| mem.weight),
            name(&|mem| mem.bias.unwrap_or(mem.weight)),
        );
        let w = m.add_derived_weight(
            wname,
            TensorType {
                shape: vec![total, k],
                dtype: wdt,
            },
            Recipe::Concat {
                sources: group.iter().map(|mem| mem.weight).collect(),
            },
        );
        let mut inputs = vec![x, w];
        if biased {
            let b = m.add_derived_weight(
                bname,
                TensorType {
                    shape: vec![total],
                    dtype: wdt,
                },
                Recipe::Concat {
                    sources: group.iter().filter_map(|mem| mem.bias).collect(),
                },
            );
            inputs.push(b);
        }
        let mut shape = first_out.shape.clone();
        if let Some(last) = shape.last_mut() {
            *last = total;
        }
        let first = &m.graph.nodes[group[0].node];
        let (fname, ftype) = (format!("{}__concat", first.name), first.op_type.clone());
        let y = m.graph.add_value(
            fname.clone(),
            TensorType {
                shape,
                dtype: first_out.dtype,
            },
            ValueKind::NodeOutput {
                node: NodeId(u32::MAX), // producers are found from node outputs
                index: 0,
            },
        );
        before.insert(
            group[0].node,
            CNode {
                name: fname,
                op_type: ftype,
                op: Op::Ir(IrOp::Linear),
                inplace: false,
                inputs,
                outputs: vec![y],
            },
        );
        let mut at = 0;
        for (mem, width) in group.iter().zip(&widths) {
            let node = &m.graph.nodes[mem.node];
            replaced.insert(
                mem.node,
                CNode {
                    name: node.name.clone(),
                    op_type: node.op_type.clone(),
                    op: Op::Ir(IrOp::Slice {
                        dim: -1,
                        start: at as i64,
                        end: (at + width) as i64,
                        step: 1,
                    }),
                    inplace: false,
                    inputs: vec![y],
                    outputs: node.outputs.clone(),
                },
            );
            at += width;
        }
        absorbed += group.len();
    }
    if absorbed == 0 {
        return 0;
    }
    let old = std::mem::take(&mut m.graph.nodes);
    for (n, node) in old.into_iter().enumerate() {
        if let Some(f) = before.remove(&n) {
            m.graph.nodes.push(f);
        }
        m.graph.nodes.push(replaced.remove(&n).unwrap_or(node));
    }
    absorbed
}
