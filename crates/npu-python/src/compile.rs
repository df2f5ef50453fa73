//! The compiler side: `Program` (a compiled `.npubin` program) and the IR-level functions
//! (compile, constraint check, per-op support, partition). IR arrives as JSON text, the
//! contract every tool of the project shares.

use crate::error::{guard, guard_nogil, Fail, Res};
use npu_compiler::partition::{self, PlanStep};
use npu_compiler::{npubin, CompileOptions, Program, Target};
use npu_ir::{DType, Graph};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use serde_json::json;
use std::path::PathBuf;
use std::sync::Arc;

/// A tensor as `(name, shape, dtype, storage dtype, donated input index)`.
type IoRow = (String, Vec<usize>, &'static str, &'static str, Option<u32>);

/// A compiled program (immutable; shared by the executables prepared from it).
#[pyclass(module = "npu._native", name = "Program", frozen)]
pub struct PyProgram {
    pub inner: Arc<Program>,
}

pub fn target(name: &str) -> Res<&'static Target> {
    Target::by_name(name).ok_or_else(|| {
        Fail::new(
            "CompileError",
            format!(
                "unknown target '{name}' (known: {})",
                npu_compiler::target::Target::names()
            ),
        )
    })
}

pub fn dtype_opt(d: Option<&str>) -> Res<Option<DType>> {
    d.map(|s| {
        DType::parse(s).ok_or_else(|| Fail::new("CompileError", format!("unknown dtype '{s}'")))
    })
    .transpose()
}

fn io_rows(v: &[npu_compiler::program::IoTensor]) -> Vec<IoRow> {
    v.iter()
        .map(|t| {
            (
                t.name.clone(),
                t.shape.clone(),
                t.dtype.name(),
                t.storage.name(),
                t.donates_input,
            )
        })
        .collect()
}

#[pymethods]
impl PyProgram {
    /// Reads an `.npubin` file.
    #[staticmethod]
    fn load(path: PathBuf) -> PyResult<PyProgram> {
        guard(|| {
            let p = npubin::load(&path)?;
            Ok(PyProgram { inner: Arc::new(p) })
        })
    }

    #[staticmethod]
    fn from_bytes(data: &[u8]) -> PyResult<PyProgram> {
        guard(|| {
            let p = npubin::from_bytes(data)?;
            Ok(PyProgram { inner: Arc::new(p) })
        })
    }

    fn save(&self, path: PathBuf) -> PyResult<()> {
        guard(|| Ok(npubin::save(&self.inner, &path)?))
    }

    fn to_bytes<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &npubin::to_bytes(&self.inner))
    }

    #[getter]
    fn model_name(&self) -> String {
        self.inner.model_name.clone()
    }

    #[getter]
    fn target(&self) -> String {
        self.inner.target.clone()
    }

    #[getter]
    fn compute_dtype(&self) -> &'static str {
        self.inner.compute_dtype.name()
    }

    #[getter]
    fn arena_bytes(&self) -> u64 {
        self.inner.arena_bytes
    }

    #[getter]
    fn num_steps(&self) -> usize {
        self.inner.steps.len()
    }

    fn inputs(&self) -> Vec<IoRow> {
        io_rows(&self.inner.inputs)
    }

    fn outputs(&self) -> Vec<IoRow> {
        io_rows(&self.inner.outputs)
    }

    /// Checkpoint tensors the program reads: `(key, shape, dtype)`.
    fn sources(&self) -> Vec<(String, Vec<usize>, &'static str)> {
        self.inner
            .sources
            .iter()
            .map(|s| (s.key.clone(), s.shape.clone(), s.dtype.name()))
            .collect()
    }

    /// The readable listing of `npu describe`.
    fn describe(&self) -> String {
        npu_compiler::describe::describe_text(&self.inner)
    }

    /// The JSON of `npu describe --json` (steps, slots, weights), as text.
    fn describe_json(&self) -> String {
        npu_compiler::describe::describe_json(&self.inner).to_string()
    }
}

/// Compiles IR JSON text for `target` (`npu` or `cpu`), with the GIL released.
#[pyfunction]
#[pyo3(signature = (ir_json, target_name = "npu", dtype = None))]
fn compile_ir(
    py: Python<'_>,
    ir_json: String,
    target_name: &str,
    dtype: Option<&str>,
) -> PyResult<PyProgram> {
    let t = guard(|| target(target_name))?;
    let dtype = guard(|| dtype_opt(dtype))?;
    guard_nogil(py, move || {
        let graph = npu_ir::parse_str(&ir_json)?;
        let opts = CompileOptions { target: t, dtype };
        let (program, _) = npu_compiler::compile(graph, &opts)?;
        Ok(PyProgram {
            inner: Arc::new(program),
        })
    })
}

/// Parses IR JSON text (errors as `npu.IRError`); returns the node count.
#[pyfunction]
fn validate_ir(py: Python<'_>, ir_json: String) -> PyResult<usize> {
    guard_nogil(py, move || Ok(npu_ir::parse_str(&ir_json)?.nodes.len()))
}

/// Every constraint `target` would reject: `[(node, op_type, message)]`.
#[pyfunction]
#[pyo3(signature = (ir_json, target_name = "npu"))]
fn check_ir(
    py: Python<'_>,
    ir_json: String,
    target_name: &str,
) -> PyResult<Vec<(String, String, String)>> {
    let t = guard(|| target(target_name))?;
    guard_nogil(py, move || {
        let graph = npu_ir::parse_str(&ir_json)?;
        let v = npu_compiler::check(graph, t)?;
        Ok(v.into_iter()
            .map(|v| (v.node, v.op_type, v.message))
            .collect())
    })
}

/// Why `target` cannot run an op whatever its operands (`None`: it can). `attrs_json` is the
/// node's attrs as JSON text; `n_inputs`/`in_rank` describe its tensor inputs. Without
/// `n_inputs` (the reference's `is_op_supported(op_type, attrs)` knows no operands) the op is
/// supported when it is with one, two or three tensor inputs; otherwise the first reason.
#[pyfunction]
#[pyo3(signature = (op_type, attrs_json = "{}", n_inputs = None, in_rank = 4, target_name = "npu"))]
fn op_unsupported(
    op_type: &str,
    attrs_json: &str,
    n_inputs: Option<usize>,
    in_rank: usize,
    target_name: &str,
) -> PyResult<Option<String>> {
    guard(|| {
        let t = target(target_name)?;
        let attrs: serde_json::Map<String, serde_json::Value> = serde_json::from_str(attrs_json)
            .map_err(|e| Fail::new("IRError", format!("attrs are not a JSON object: {e}")))?;
        let why = |n: usize| match npu_ir::parse_op(op_type, &attrs, n, in_rank) {
            Ok(op) => t.ir_op_unsupported(&op),
            Err(e) => Some(crate::error::chain(&e)),
        };
        let counts = match n_inputs {
            Some(n) => vec![n],
            None => vec![1, 2, 3],
        };
        let mut first = None;
        for n in counts {
            match why(n) {
                None => return Ok(None),
                Some(r) => {
                    first.get_or_insert(r);
                }
            }
        }
        Ok(first)
    })
}

/// A node as the IR JSON writes it (name, op_type, inputs and outputs with shape and dtype).
fn node_json(g: &Graph, node: &npu_ir::Node) -> serde_json::Value {
    let tensor = |&v: &npu_ir::ValueId| {
        let val = g.value(v);
        json!({"name": val.name, "shape": val.ty.shape, "dtype": val.ty.dtype.name()})
    };
    json!({
        "name": node.name,
        "op_type": node.op_type,
        "attrs": {},
        "inputs": node.inputs.iter().map(tensor).collect::<Vec<_>>(),
        "outputs": node.outputs.iter().map(tensor).collect::<Vec<_>>(),
    })
}

fn names(g: &Graph, vs: &[npu_ir::ValueId]) -> Vec<String> {
    vs.iter().map(|&v| g.value(v).name.clone()).collect()
}

/// Partitions IR JSON: nodes `target` cannot run, and the nodes named in `cpu_nodes`, go to
/// the CPU. Returns the plan as JSON text (names, not ids) with its readable listing.
pub fn partition_json(ir_json: &str, t: &Target, cpu_nodes: &[String]) -> Res<String> {
    // Composite ops become primitives first, as for `npu partition` and `npu run`.
    let g = npu_compiler::passes::decompose::decompose(npu_ir::parse_str(ir_json)?)?;
    let placements = partition::place(&g, |node| {
        if cpu_nodes.contains(&node.name) {
            return Some("not supported by the caller's is_supported_fn".into());
        }
        t.ir_node_unsupported(node, &g)
    });
    let plan = partition::partition(&g, placements);
    let parts: Vec<_> = plan
        .partitions
        .iter()
        .map(|p| {
            let reasons: serde_json::Map<String, serde_json::Value> = p
                .nodes
                .iter()
                .filter_map(|&n| {
                    plan.placements[n]
                        .reason
                        .as_ref()
                        .map(|r| (g.nodes[n].name.clone(), json!(r)))
                })
                .collect();
            json!({
                "id": p.id,
                "device": p.device.name(),
                "nodes": p.nodes.iter().map(|&n| g.nodes[n].name.clone()).collect::<Vec<_>>(),
                // Decomposition adds nodes the caller's IR lacks: described here in IR terms.
                "node_info": p.nodes.iter().map(|&n| node_json(&g, &g.nodes[n])).collect::<Vec<_>>(),
                "inputs": names(&g, &p.inputs),
                "outputs": names(&g, &p.outputs),
                "reasons": reasons,
            })
        })
        .collect();
    let steps: Vec<_> = plan
        .steps
        .iter()
        .map(|s| match s {
            PlanStep::Run { partition } => json!({"kind": "run", "partition": partition}),
            PlanStep::Transfer { to, values } => {
                json!({"kind": "transfer", "to": to.name(), "values": names(&g, values)})
            }
        })
        .collect();
    Ok(json!({"partitions": parts, "steps": steps, "text": plan.to_text(&g)}).to_string())
}

#[pyfunction]
#[pyo3(signature = (ir_json, target_name = "npu", cpu_nodes = Vec::new()))]
fn partition_ir(
    py: Python<'_>,
    ir_json: String,
    target_name: &str,
    cpu_nodes: Vec<String>,
) -> PyResult<String> {
    let t = guard(|| target(target_name))?;
    guard_nogil(py, move || partition_json(&ir_json, t, &cpu_nodes))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyProgram>()?;
    m.add_function(wrap_pyfunction!(compile_ir, m)?)?;
    m.add_function(wrap_pyfunction!(validate_ir, m)?)?;
    m.add_function(wrap_pyfunction!(check_ir, m)?)?;
    m.add_function(wrap_pyfunction!(op_unsupported, m)?)?;
    m.add_function(wrap_pyfunction!(partition_ir, m)?)?;
    Ok(())
}
