//! The runtime side: weights, backends, prepared executables with their device state, the
//! DAG executor for partitioned graphs, and the CPU fallback interpreter.
//!
//! Every object is `Sync` (mutable parts behind a `Mutex`), so Python threads may share
//! them; a run holds its executable's lock with the GIL released.

use crate::compile::{dtype_opt, target, PyProgram};
use crate::convert::{outputs_to_py, to_host, to_host_all, to_numpy, NamedArray};
use crate::error::{guard, guard_nogil, Fail, Res};
use npu_compiler::partition::{self};
use npu_compiler::{CompileOptions, Program};
use npu_dag::dag::DagExecutor;
use npu_runtime::weights::TensorRef;
use npu_runtime::{
    Backend, CpuBackend, DeviceState, Executable, HostTensor, MemoryWeights, SafetensorsFile,
    WeightSource,
};
use pyo3::prelude::*;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while locked was turned into a Python error by `guard`; the data is still
    // consistent enough to report further errors, so poisoning is not fatal.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

enum WeightsInner {
    File(SafetensorsFile),
    Memory(MemoryWeights),
}

impl WeightSource for WeightsInner {
    fn describe(&self) -> String {
        match self {
            WeightsInner::File(f) => f.describe(),
            WeightsInner::Memory(m) => m.describe(),
        }
    }
    fn get(&self, key: &str) -> Option<TensorRef<'_>> {
        match self {
            WeightsInner::File(f) => f.get(key),
            WeightsInner::Memory(m) => m.get(key),
        }
    }
}

/// Checkpoint tensors by key: a memory-mapped safetensors file or arrays copied in.
#[pyclass(module = "npu._native", name = "Weights", frozen)]
pub struct PyWeights {
    inner: Arc<WeightsInner>,
}

#[pymethods]
impl PyWeights {
    #[staticmethod]
    fn from_safetensors(path: PathBuf) -> PyResult<PyWeights> {
        guard(|| {
            let f = SafetensorsFile::open(&path)?;
            Ok(PyWeights {
                inner: Arc::new(WeightsInner::File(f)),
            })
        })
    }

    /// `[(key, dtype name, C-contiguous array)]`.
    #[staticmethod]
    fn from_arrays(items: Vec<NamedArray<'_>>) -> PyResult<PyWeights> {
        guard(|| {
            let mut map = HashMap::with_capacity(items.len());
            for (key, dt, arr) in &items {
                map.insert(key.clone(), to_host(&format!("weight '{key}'"), dt, arr)?);
            }
            Ok(PyWeights {
                inner: Arc::new(WeightsInner::Memory(MemoryWeights(map))),
            })
        })
    }

    fn keys(&self) -> Vec<String> {
        let mut k: Vec<String> = match &*self.inner {
            WeightsInner::File(f) => f.keys().map(str::to_string).collect(),
            WeightsInner::Memory(m) => m.0.keys().cloned().collect(),
        };
        k.sort();
        k
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }
}

pub(crate) enum AnyBackend {
    Cpu(CpuBackend),
    Cuda(npu_cuda::CudaBackend),
    Wgpu(npu_wgpu::WgpuBackend),
}

impl AnyBackend {
    pub(crate) fn get(&self) -> &dyn Backend {
        match self {
            AnyBackend::Cpu(b) => b,
            AnyBackend::Cuda(b) => b,
            AnyBackend::Wgpu(b) => b,
        }
    }
}

pub(crate) fn open_backend(name: &str) -> Res<AnyBackend> {
    match name {
        "cpu" => Ok(AnyBackend::Cpu(CpuBackend::new())),
        "cuda" => npu_cuda::CudaBackend::new()
            .map(AnyBackend::Cuda)
            .map_err(|e| {
                Fail::new(
                    "BackendUnavailableError",
                    format!("the cuda backend cannot start: {e}"),
                )
            }),
        "wgpu" => npu_wgpu::WgpuBackend::new()
            .map(AnyBackend::Wgpu)
            .map_err(|e| {
                Fail::new(
                    "BackendUnavailableError",
                    format!("the wgpu backend cannot start: {e}"),
                )
            }),
        other => Err(Fail::new(
            "BackendUnavailableError",
            format!("unknown backend '{other}' (known: cpu, cuda, wgpu)"),
        )),
    }
}

/// A prepared program; CUDA executables are kept concrete for device-pointer runs and GPU
/// timing.
enum Exe {
    Dyn(Box<dyn Executable>),
    Cuda(Box<npu_cuda::CudaExecutable>),
}

impl Exe {
    fn get(&mut self) -> &mut dyn Executable {
        match self {
            Exe::Dyn(e) => e.as_mut(),
            Exe::Cuda(e) => e.as_mut(),
        }
    }
    fn get_ref(&self) -> &dyn Executable {
        match self {
            Exe::Dyn(e) => e.as_ref(),
            Exe::Cuda(e) => e.as_ref(),
        }
    }
}

/// A device that runs compiled programs (`cpu` or `cuda`).
#[pyclass(module = "npu._native", name = "Backend", frozen)]
pub struct PyBackend {
    inner: Arc<Mutex<AnyBackend>>,
    name: &'static str,
}

#[pymethods]
impl PyBackend {
    #[new]
    fn new(name: &str) -> PyResult<PyBackend> {
        guard(|| {
            let b = open_backend(name)?;
            let name = b.get().name();
            Ok(PyBackend {
                inner: Arc::new(Mutex::new(b)),
                name,
            })
        })
    }

    /// `[(name, None | why it cannot start)]` for every backend this build knows. A wgpu
    /// backend on a software adapter (lavapipe) starts, but is reported with that reason so
    /// that "the best backend" never picks it over the CPU backend.
    #[staticmethod]
    fn available() -> PyResult<Vec<(String, Option<String>)>> {
        guard(|| {
            Ok(["cuda", "wgpu", "cpu"]
                .iter()
                .map(|n| {
                    let why = match open_backend(n) {
                        Ok(AnyBackend::Wgpu(b)) if b.is_software() => {
                            Some(format!("only a software adapter: {}", b.describe()))
                        }
                        Ok(_) => None,
                        Err(e) => Some(e.msg),
                    };
                    (n.to_string(), why)
                })
                .collect())
        })
    }

    #[getter]
    fn name(&self) -> &'static str {
        self.name
    }

    fn describe(&self) -> String {
        match &*lock(&self.inner) {
            AnyBackend::Cpu(_) => "cpu (the reference backend)".into(),
            AnyBackend::Cuda(b) => format!("cuda: {}", b.describe()),
            AnyBackend::Wgpu(b) => format!("wgpu: {}", b.describe()),
        }
    }

    /// Allocates, builds the weights and sets the program up; GIL released.
    fn prepare(
        &self,
        py: Python<'_>,
        program: &PyProgram,
        weights: &PyWeights,
    ) -> PyResult<PyExecutable> {
        let (b, p, w) = (
            self.inner.clone(),
            program.inner.clone(),
            weights.inner.clone(),
        );
        guard_nogil(py, move || {
            let exe = match &*lock(&b) {
                AnyBackend::Cuda(c) => {
                    let mut x = c.prepare_cuda(&p, w.as_ref())?;
                    // `last_gpu_ms` answers for every run: its few microseconds a run are
                    // small against a call from Python
                    x.set_kernel_timing(true);
                    Exe::Cuda(Box::new(x))
                }
                AnyBackend::Cpu(c) => Exe::Dyn(c.prepare(&p, w.as_ref())?),
                AnyBackend::Wgpu(c) => Exe::Dyn(c.prepare(&p, w.as_ref())?),
            };
            let state = exe.get_ref().new_state();
            Ok(PyExecutable {
                exe: Mutex::new(exe),
                state: Arc::new(Mutex::new(state)),
                program: p,
            })
        })
    }

    /// Partitions IR JSON (`cpu_nodes` forced to the CPU), compiles and prepares every NPU
    /// partition, loads the CPU partitions' weights; GIL released.
    #[pyo3(signature = (ir_json, weights, target_name = "npu", dtype = None, cpu_nodes = Vec::new()))]
    fn dag(
        &self,
        py: Python<'_>,
        ir_json: String,
        weights: &PyWeights,
        target_name: &str,
        dtype: Option<&str>,
        cpu_nodes: Vec<String>,
    ) -> PyResult<PyDag> {
        let t = guard(|| target(target_name))?;
        let dtype = guard(|| dtype_opt(dtype))?;
        let (b, w) = (self.inner.clone(), weights.inner.clone());
        guard_nogil(py, move || {
            // Composite ops become primitives first, as for `npu partition` and `npu run`.
            let g = npu_compiler::passes::decompose::decompose(npu_ir::parse_str(&ir_json)?)?;
            let placements = partition::place(&g, |node| {
                if cpu_nodes.contains(&node.name) {
                    return Some("not supported by the caller's is_supported_fn".into());
                }
                t.ir_node_unsupported(node, &g)
            });
            let plan = partition::partition(&g, placements);
            let opts = CompileOptions { target: t, dtype };
            let dag = DagExecutor::new(g, plan, lock(&b).get(), w.as_ref(), &opts)?;
            let state = dag.new_state();
            let programs = dag
                .programs()
                .into_iter()
                .map(|(i, p)| (i, Arc::new(p.clone())))
                .collect();
            Ok(PyDag {
                dag: Mutex::new(dag),
                state: Arc::new(Mutex::new(state)),
                programs,
            })
        })
    }
}

/// Named device buffers that persist across runs (the KV cache), shareable between the
/// executables of one backend (prefill and decode).
#[pyclass(module = "npu._native", name = "State", frozen)]
pub struct PyState {
    inner: Arc<Mutex<Box<dyn DeviceState>>>,
}

#[pymethods]
impl PyState {
    fn names(&self) -> Vec<String> {
        let mut n = lock(&self.inner).names();
        n.sort();
        n
    }

    /// A copy of one buffer on the host: `(dtype name, array)`.
    fn read<'py>(
        &self,
        py: Python<'py>,
        name: &str,
    ) -> PyResult<(&'static str, Bound<'py, PyAny>)> {
        let t = guard(|| Ok(lock(&self.inner).read(name)?))?;
        to_numpy(py, t)
    }

    fn write(
        &self,
        name: &str,
        dtype: &str,
        array: Bound<'_, numpy::PyUntypedArray>,
    ) -> PyResult<()> {
        guard(|| {
            let t = to_host(&format!("state '{name}'"), dtype, &array)?;
            Ok(lock(&self.inner).write(name, &t)?)
        })
    }
}

fn pick_state(
    own: &Arc<Mutex<Box<dyn DeviceState>>>,
    given: Option<&PyState>,
) -> Arc<Mutex<Box<dyn DeviceState>>> {
    given.map_or_else(|| own.clone(), |s| s.inner.clone())
}

fn refs(inputs: &[(String, HostTensor)]) -> Vec<(&str, &HostTensor)> {
    inputs.iter().map(|(n, t)| (n.as_str(), t)).collect()
}

type PyOutputs<'py> = Vec<(String, &'static str, Bound<'py, PyAny>)>;

/// A program prepared on a backend, with its own device state unless one is passed.
#[pyclass(module = "npu._native", name = "Executable", frozen)]
pub struct PyExecutable {
    exe: Mutex<Exe>,
    state: Arc<Mutex<Box<dyn DeviceState>>>,
    program: Arc<Program>,
}

#[pymethods]
impl PyExecutable {
    /// Runs with `[(name, dtype, array)]` inputs; returns the outputs that are not state
    /// (`[(name, dtype, array)]`, program order). GIL released during the run.
    #[pyo3(signature = (inputs, state = None))]
    fn run<'py>(
        &self,
        py: Python<'py>,
        inputs: Vec<NamedArray<'py>>,
        state: Option<&PyState>,
    ) -> PyResult<PyOutputs<'py>> {
        let host = guard(|| to_host_all(&inputs))?;
        let st = pick_state(&self.state, state);
        let outs = guard_nogil(py, || {
            let mut exe = lock(&self.exe);
            let mut st = lock(&st);
            Ok(exe.get().run(&refs(&host), &mut **st)?)
        })?;
        outputs_to_py(py, outs)
    }

    /// Runs with a fresh state and returns every output, state outputs included.
    fn run_all<'py>(
        &self,
        py: Python<'py>,
        inputs: Vec<NamedArray<'py>>,
    ) -> PyResult<PyOutputs<'py>> {
        let host = guard(|| to_host_all(&inputs))?;
        let outs = guard_nogil(py, || Ok(lock(&self.exe).get().run_all(&refs(&host))?))?;
        outputs_to_py(py, outs)
    }

    /// Mean seconds of `iterations` runs made in a Rust loop with inputs converted once: the
    /// baseline the Python call overhead is measured against.
    fn bench(
        &self,
        py: Python<'_>,
        inputs: Vec<NamedArray<'_>>,
        iterations: usize,
    ) -> PyResult<f64> {
        let host = guard(|| to_host_all(&inputs))?;
        guard_nogil(py, || {
            let mut exe = lock(&self.exe);
            let exe = exe.get();
            let mut st = lock(&self.state);
            let args = refs(&host);
            exe.run(&args, &mut **st)?;
            let t = std::time::Instant::now();
            for _ in 0..iterations.max(1) {
                exe.run(&args, &mut **st)?;
            }
            Ok(t.elapsed().as_secs_f64() / iterations.max(1) as f64)
        })
    }

    /// The executable's own state (the one `run` uses when none is passed).
    #[getter]
    fn state(&self) -> PyState {
        PyState {
            inner: self.state.clone(),
        }
    }

    fn new_state(&self) -> PyState {
        PyState {
            inner: Arc::new(Mutex::new(lock(&self.exe).get_ref().new_state())),
        }
    }

    #[getter]
    fn program(&self) -> PyProgram {
        PyProgram {
            inner: self.program.clone(),
        }
    }

    fn set_profiling(&self, on: bool) {
        lock(&self.exe).get().set_profiling(on);
    }

    /// CUDA only: runs with device pointers, `inputs[i]` = `(address, bytes)` of program
    /// input `i` in its storage dtype (`None`: a state input), `outputs` = the plain
    /// outputs' destinations. Device-to-device copies only; GIL released.
    #[pyo3(signature = (inputs, outputs, state = None))]
    fn run_device(
        &self,
        py: Python<'_>,
        inputs: Vec<Option<(u64, usize)>>,
        outputs: Vec<(u64, usize)>,
        state: Option<&PyState>,
    ) -> PyResult<()> {
        let st = pick_state(&self.state, state);
        let dp = |(ptr, bytes): (u64, usize)| npu_cuda::DevicePtr { ptr, bytes };
        let ins: Vec<_> = inputs.into_iter().map(|i| i.map(dp)).collect();
        let outs: Vec<_> = outputs.into_iter().map(dp).collect();
        guard_nogil(py, || {
            let mut exe = lock(&self.exe);
            let Exe::Cuda(c) = &mut *exe else {
                return Err(Fail::runtime(
                    "run_device needs an executable of the cuda backend",
                ));
            };
            let mut st = lock(&st);
            Ok(c.run_device(&ins, &outs, &mut **st)?)
        })
    }

    /// CUDA only: GPU milliseconds of the last run's kernels (the replayed graph); `None`
    /// on other backends.
    fn last_gpu_ms(&self) -> Option<f32> {
        match &*lock(&self.exe) {
            Exe::Cuda(c) => Some(c.last_gpu_ms()),
            Exe::Dyn(_) => None,
        }
    }

    /// `[(step, kernel kind, origin, total ms, runs)]` of the runs made while profiling.
    fn profile(&self) -> Vec<(usize, &'static str, String, f64, usize)> {
        lock(&self.exe)
            .get_ref()
            .profile()
            .into_iter()
            .map(|s| (s.step, s.kernel, s.origin, s.total_ms, s.runs))
            .collect()
    }
}

/// A partitioned graph prepared to run (NPU partitions on a backend, the rest on the CPU
/// fallback interpreter).
#[pyclass(module = "npu._native", name = "Dag", frozen)]
pub struct PyDag {
    dag: Mutex<DagExecutor>,
    state: Arc<Mutex<Box<dyn DeviceState>>>,
    programs: Vec<(usize, Arc<Program>)>,
}

#[pymethods]
impl PyDag {
    #[pyo3(signature = (inputs, state = None))]
    fn run<'py>(
        &self,
        py: Python<'py>,
        inputs: Vec<NamedArray<'py>>,
        state: Option<&PyState>,
    ) -> PyResult<PyOutputs<'py>> {
        let host = guard(|| to_host_all(&inputs))?;
        let st = pick_state(&self.state, state);
        let outs = guard_nogil(py, || {
            let mut dag = lock(&self.dag);
            let mut st = lock(&st);
            Ok(dag.run(&refs(&host), &mut **st)?)
        })?;
        outputs_to_py(py, outs)
    }

    fn run_all<'py>(
        &self,
        py: Python<'py>,
        inputs: Vec<NamedArray<'py>>,
    ) -> PyResult<PyOutputs<'py>> {
        let host = guard(|| to_host_all(&inputs))?;
        let outs = guard_nogil(py, || Ok(lock(&self.dag).run_all(&refs(&host))?))?;
        outputs_to_py(py, outs)
    }

    /// `[(partition id, program)]` of the NPU partitions.
    fn programs(&self) -> Vec<(usize, PyProgram)> {
        self.programs
            .iter()
            .map(|(i, p)| (*i, PyProgram { inner: p.clone() }))
            .collect()
    }

    /// Graph inputs kept in device state (a run may omit them).
    fn state_inputs(&self) -> Vec<String> {
        let mut v: Vec<String> = lock(&self.dag).state_inputs().iter().cloned().collect();
        v.sort();
        v
    }

    /// Milliseconds accumulated per partition and runs so far.
    fn stats(&self) -> (usize, Vec<f64>) {
        let d = lock(&self.dag);
        (d.stats().runs, d.stats().partition_ms.clone())
    }
}

/// Runs IR JSON on the CPU fallback interpreter (no compilation): graph outputs by name.
#[pyfunction]
fn run_fallback<'py>(
    py: Python<'py>,
    ir_json: String,
    inputs: Vec<NamedArray<'py>>,
    weights: &PyWeights,
) -> PyResult<PyOutputs<'py>> {
    let host = guard(|| to_host_all(&inputs))?;
    let w = weights.inner.clone();
    let outs = guard_nogil(py, move || {
        let g = npu_ir::parse_str(&ir_json)?;
        Ok(npu_dag::fallback::run_graph(&g, &refs(&host), w.as_ref())?)
    })?;
    outputs_to_py(py, outs)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyWeights>()?;
    m.add_class::<PyBackend>()?;
    m.add_class::<PyState>()?;
    m.add_class::<PyExecutable>()?;
    m.add_class::<PyDag>()?;
    m.add_function(wrap_pyfunction!(run_fallback, m)?)?;
    Ok(())
}
