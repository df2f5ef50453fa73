//! The NPU compiler: torch_ir graph in, [`Program`] (`.npubin`) out.
//!
//! Pipeline: decompose -> canonicalize -> BN fold -> check(target) -> fuse -> layout -> lower
//! (views, memory plan). Each stage is a module under [`passes`], [`fuse`] or [`lower`].

pub mod describe;
mod error;
pub mod fuse;
pub mod graph;
pub mod lower;
pub mod partition;
pub mod passes;
pub mod target;

// The program contract lives below the compiler (backends load programs without it); these
// paths keep `npu_compiler::program::...` and the compiler's own `crate::program` working.
pub use npu_program::{contract, expr, npubin, program};

pub use error::{CompileError, Violation};
pub use graph::Module;
pub use npubin::NpubinError;
pub use program::{Binding, Kernel, Program, Slot, Step};
pub use target::Target;

use npu_ir::{DType, Graph};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// What to compile for.
#[derive(Debug, Clone)]
pub struct CompileOptions {
    pub target: &'static Target,
    /// Compute dtype; `None` picks the model's dtype, or f16 for an f32 model on a padded
    /// NPU target and f32 elsewhere.
    pub dtype: Option<DType>,
}

impl Default for CompileOptions {
    fn default() -> Self {
        CompileOptions {
            target: &target::NPU,
            dtype: None,
        }
    }
}

/// What the passes did, for reports and tests.
#[derive(Debug, Clone, Default)]
pub struct CompileReport {
    pub ir_nodes: usize,
    pub decomposed: passes::decompose::DecomposeStats,
    pub canonical: passes::canonicalize::CanonStats,
    pub bn: passes::bn_fold::BnStats,
    /// Linears absorbed into concatenated ones (one GEMM per group sharing an input).
    pub concat_linears: usize,
    pub fusions: BTreeMap<String, usize>,
    pub padded_values: usize,
    pub timings: Vec<(&'static str, Duration)>,
}

/// Decomposes, canonicalizes and folds BN, the part of the pipeline `check` shares with `compile`.
fn prepare(graph: Graph, report: &mut CompileReport) -> Result<Module, CompileError> {
    report.ir_nodes = graph.nodes.len();
    let t = Instant::now();
    let (graph, stats) = passes::decompose::decompose_with_stats(graph)?;
    report.decomposed = stats;
    report.timings.push(("decompose", t.elapsed()));
    let mut m = Module::new(graph);
    let t = Instant::now();
    report.canonical = passes::canonicalize::canonicalize(&mut m)?;
    report.timings.push(("canonicalize", t.elapsed()));
    let t = Instant::now();
    report.bn = passes::bn_fold::fold_batch_norms(&mut m)?;
    passes::dce::eliminate_dead_code(&mut m.graph);
    report.timings.push(("bn_fold+dce", t.elapsed()));
    Ok(m)
}

/// Every constraint the target would reject, all at once (empty = compilable).
pub fn check(graph: Graph, target: &Target) -> Result<Vec<Violation>, CompileError> {
    let m = prepare(graph, &mut CompileReport::default())?;
    Ok(passes::check::check(&m.graph, target))
}

fn pick_dtype(m: &Module, opts: &CompileOptions) -> DType {
    if let Some(d) = opts.dtype {
        return d;
    }
    let has = |d: DType| {
        m.graph
            .values
            .iter()
            .any(|v| matches!(v.kind, npu_ir::ValueKind::Weight { .. }) && v.ty.dtype == d)
    };
    if has(DType::BF16) {
        DType::BF16
    } else if has(DType::F16) || opts.target.channel_tile > 1 {
        DType::F16
    } else {
        DType::F32
    }
}

/// Compiles a parsed graph into a program.
pub fn compile(
    graph: Graph,
    opts: &CompileOptions,
) -> Result<(Program, CompileReport), CompileError> {
    let mut report = CompileReport::default();
    // Passes substitute values (a no-op's output by its input, BN's by the conv's), graph
    // outputs included; the program keeps the names the caller knows them by.
    let output_names: Vec<String> = graph
        .outputs
        .iter()
        .map(|&v| graph.value(v).name.clone())
        .collect();
    let mut m = prepare(graph, &mut report)?;
    let violations = passes::check::check(&m.graph, opts.target);
    if !violations.is_empty() {
        return Err(CompileError::Constraints {
            target: opts.target.name.to_string(),
            violations,
        });
    }
    let compute = pick_dtype(&m, opts);
    if !opts.target.compute_dtypes.contains(&compute) {
        return Err(CompileError::UnsupportedDType {
            target: opts.target.name.into(),
            dtype: compute.name().into(),
        });
    }
    let t = Instant::now();
    report.concat_linears = passes::concat_linear::concat_linears(&mut m);
    passes::dce::eliminate_dead_code(&mut m.graph);
    report.fusions = fuse::fuse(&mut m);
    report.timings.push(("fuse", t.elapsed()));
    let t = Instant::now();
    let laid = passes::layout::activation_layout(&m.graph, opts.target);
    report.padded_values = laid
        .iter()
        .filter(|(v, &c)| c != m.graph.ty(**v).shape[1])
        .count();
    let mut program = lower::lower(&m, opts.target, compute, laid)?;
    for (o, name) in program.outputs.iter_mut().zip(output_names) {
        o.name = name;
    }
    report.timings.push(("layout+lower+plan", t.elapsed()));
    Ok((program, report))
}
