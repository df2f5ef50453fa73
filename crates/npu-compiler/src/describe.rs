//! Human-readable and JSON dumps of a [`Program`].

use crate::program::{Binding, Kernel, Program, Recipe, Slot};
use serde_json::{json, Value as Json};
use std::collections::BTreeMap;
use std::fmt::Write;

fn mib(bytes: u64) -> String {
    format!("{:.2} MiB", bytes as f64 / (1024.0 * 1024.0))
}

fn slot_name(p: &Program, s: Slot) -> String {
    match s {
        Slot::Input(i) => format!("in:{}", p.inputs[i as usize].name),
        Slot::Output(i) => format!("out:{}", p.outputs[i as usize].name),
        Slot::Weight(i) => format!("w:{}", p.weights[i as usize].name),
        Slot::Const(i) => format!("const:{}", p.constants[i as usize].name),
        Slot::Arena => "arena".into(),
    }
}

fn binding(p: &Program, b: &Binding) -> String {
    let dense = b.is_contiguous();
    let off = if b.slot == Slot::Arena || b.byte_offset != 0 {
        format!("+{}", b.byte_offset)
    } else {
        String::new()
    };
    let strides = if dense {
        String::new()
    } else {
        format!(" strides {:?}", b.strides)
    };
    format!(
        "{}{off} {}{:?}{strides}",
        slot_name(p, b.slot),
        b.dtype,
        b.shape
    )
}

fn kernel_params(k: &Kernel) -> String {
    match k {
        Kernel::Elementwise { expr } => expr.to_string(),
        other => {
            let s = format!("{other:?}");
            match s.find('{') {
                Some(i) => s[i..].to_string(),
                None => String::new(),
            }
        }
    }
}

fn recipe(p: &Program, r: &Recipe) -> String {
    let src = |i: u32| p.sources[i as usize].key.clone();
    let opt = |i: Option<u32>| i.map_or("-".to_string(), src);
    match r {
        Recipe::Load { source } => format!("load {}", src(*source)),
        Recipe::Concat { sources } => format!(
            "concat({})",
            sources
                .iter()
                .map(|&s| src(s))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Recipe::BnFoldWeight {
            weight,
            gamma,
            var,
            eps,
        } => format!(
            "bn_fold_weight({}, gamma={}, var={}, eps={eps})",
            src(*weight),
            opt(*gamma),
            src(*var)
        ),
        Recipe::BnFoldBias {
            bias,
            gamma,
            beta,
            mean,
            var,
            eps,
        } => {
            format!(
                "bn_fold_bias(bias={}, gamma={}, beta={}, mean={}, var={}, eps={eps})",
                opt(*bias),
                opt(*gamma),
                opt(*beta),
                src(*mean),
                src(*var)
            )
        }
        Recipe::BnScale { gamma, var, eps } => format!(
            "bn_scale(gamma={}, var={}, eps={eps})",
            opt(*gamma),
            src(*var)
        ),
        Recipe::BnShift {
            gamma,
            beta,
            mean,
            var,
            eps,
        } => {
            format!(
                "bn_shift(gamma={}, beta={}, mean={}, var={}, eps={eps})",
                opt(*gamma),
                opt(*beta),
                src(*mean),
                src(*var)
            )
        }
    }
}

/// Steps per kernel kind.
pub fn kernel_totals(p: &Program) -> BTreeMap<&'static str, usize> {
    let mut t = BTreeMap::new();
    for s in &p.steps {
        *t.entry(s.kernel.kind()).or_default() += 1;
    }
    t
}

fn weight_bytes(p: &Program) -> u64 {
    p.weights
        .iter()
        .map(|w| (w.shape.iter().product::<usize>() * w.dtype.size_bytes()) as u64)
        .sum()
}

pub fn describe_text(p: &Program) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "program {} | target {} | compute {} | .npubin format v{}",
        p.model_name,
        p.target,
        p.compute_dtype,
        crate::npubin::FORMAT_VERSION
    );
    let _ = writeln!(s, "\ninputs ({}):", p.inputs.len());
    for (i, t) in p.inputs.iter().enumerate() {
        let _ = writeln!(
            s,
            "  {i:>3} {} {}{:?} (stored {})",
            t.name, t.dtype, t.shape, t.storage
        );
    }
    let _ = writeln!(s, "\noutputs ({}):", p.outputs.len());
    for (i, t) in p.outputs.iter().enumerate() {
        let don = t.donates_input.map_or(String::new(), |k| {
            format!(", updates input '{}' in place", p.inputs[k as usize].name)
        });
        let _ = writeln!(
            s,
            "  {i:>3} {} {}{:?} (stored {}{don})",
            t.name, t.dtype, t.shape, t.storage
        );
    }
    let _ = writeln!(
        s,
        "\nweights: {} slots, {} on device, from {} checkpoint tensors",
        p.weights.len(),
        mib(weight_bytes(p)),
        p.sources.len()
    );
    for (i, w) in p.weights.iter().enumerate() {
        let _ = writeln!(
            s,
            "  {i:>3} {} {}{:?} <- {}",
            w.name,
            w.dtype,
            w.shape,
            recipe(p, &w.recipe)
        );
    }
    if !p.constants.is_empty() {
        let _ = writeln!(s, "\nconstants ({}):", p.constants.len());
        for (i, c) in p.constants.iter().enumerate() {
            let _ = writeln!(s, "  {i:>3} {} {}{:?}", c.name, c.dtype, c.shape);
        }
    }
    let _ = writeln!(
        s,
        "\narena: {} ({} bytes) for intermediates",
        mib(p.arena_bytes),
        p.arena_bytes
    );
    let _ = writeln!(s, "\nsteps ({}):", p.steps.len());
    for (i, st) in p.steps.iter().enumerate() {
        let ins: Vec<String> = st.inputs.iter().map(|b| binding(p, b)).collect();
        let outs: Vec<String> = st.outputs.iter().map(|b| binding(p, b)).collect();
        let _ = writeln!(
            s,
            "  {i:>4} {:<19} {}  [{}]",
            st.kernel.kind(),
            kernel_params(&st.kernel),
            st.origin
        );
        let _ = writeln!(s, "       in:  {}", ins.join(", "));
        let _ = writeln!(s, "       out: {}", outs.join(", "));
    }
    let _ = writeln!(s, "\ntotals per kernel kind:");
    for (k, n) in kernel_totals(p) {
        let _ = writeln!(s, "  {k:<20} {n:>5}");
    }
    let _ = writeln!(s, "  {:<20} {:>5}", "total steps", p.steps.len());
    s
}

fn binding_json(p: &Program, b: &Binding) -> Json {
    json!({"slot": slot_name(p, b.slot), "byte_offset": b.byte_offset, "shape": b.shape, "strides": b.strides, "dtype": b.dtype.name()})
}

pub fn describe_json(p: &Program) -> Json {
    let io = |t: &crate::program::IoTensor| {
        json!({"name": t.name, "shape": t.shape, "dtype": t.dtype.name(), "storage": t.storage.name(),
               "donates_input": t.donates_input.map(|k| p.inputs[k as usize].name.clone())})
    };
    json!({
        "model_name": p.model_name,
        "target": p.target,
        "compute_dtype": p.compute_dtype.name(),
        "format_version": crate::npubin::FORMAT_VERSION,
        "inputs": p.inputs.iter().map(io).collect::<Vec<_>>(),
        "outputs": p.outputs.iter().map(io).collect::<Vec<_>>(),
        "weights": p.weights.iter().map(|w| json!({"name": w.name, "shape": w.shape, "dtype": w.dtype.name(), "recipe": recipe(p, &w.recipe)})).collect::<Vec<_>>(),
        "weight_bytes": weight_bytes(p),
        "constants": p.constants.iter().map(|c| json!({"name": c.name, "shape": c.shape, "dtype": c.dtype.name()})).collect::<Vec<_>>(),
        "arena_bytes": p.arena_bytes,
        "steps": p.steps.iter().map(|s| json!({
            "kernel": s.kernel.kind(),
            "params": kernel_params(&s.kernel),
            "origin": s.origin,
            "inputs": s.inputs.iter().map(|b| binding_json(p, b)).collect::<Vec<_>>(),
            "outputs": s.outputs.iter().map(|b| binding_json(p, b)).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "totals": kernel_totals(p),
        "total_steps": p.steps.len(),
    })
}
