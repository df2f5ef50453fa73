//! The prepared program on the GPU: every buffer allocated and every weight uploaded at
//! prepare; a host run converts the inputs into page-locked staging and replays the captured
//! CUDA graph (after one eager warm-up run), which copies small inputs in and small outputs
//! and the error word out itself (`host_io`; larger ones are copied around it), then
//! synchronizes once.

use crate::device::{DevBuf, Device};
use crate::error::{CudaError, CudaResult};
use crate::graph::Graph;
use crate::launch::{Arg, KernelLaunch, Launch};
use crate::loc::{Bases, Loc};
use crate::lt_call::LT_WORKSPACE;
use crate::plan::{align, Persistent, Planner};
use crate::state::CudaState;
use cudarc::driver::{result, CudaEvent};
use npu_program::program::{IoTensor, Kernel, Slot};
use npu_program::Program;
use npu_runtime::prepare::{self, io_bytes, IoPlan};
use npu_runtime::tensor::cast_bytes;
use npu_runtime::weights::WeightSource;
use npu_runtime::{
    downcast_state, match_input, DeviceState, Executable, HostTensor, Result, RuntimeError,
    StepTime, StepTimes,
};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Arc, Weak};

mod device_io;
mod host_io;
mod phases;
mod staging;
pub use device_io::DevicePtr;
use host_io::HostIo;
pub use phases::{DevicePhases, RunPhases};
use phases::{Laps, Trace};
use staging::Pinned;

pub struct CudaExecutable {
    dev: Arc<Device>,
    program: Program,
    inputs: Vec<Option<DevBuf>>,
    outputs: Vec<Option<DevBuf>>,
    donates: Vec<Option<usize>>,
    weights: Vec<Arc<DevBuf>>,
    consts: Vec<DevBuf>,
    arena: DevBuf,
    scratch: DevBuf,
    /// Where in `scratch` the region kept across steps (`plan::persist`) starts.
    persist_off: u64,
    err: DevBuf,
    /// Page-locked staging per plain input and output (None: state, or no staging).
    in_stage: Vec<Option<Pinned>>,
    out_stage: Vec<Option<Pinned>>,
    err_stage: Pinned,
    /// Events around the run's kernels, made once.
    marks: (CudaEvent, CudaEvent),
    steps: Vec<Vec<Launch>>,
    clear: KernelLaunch,
    bound: Option<Vec<u64>>,
    /// The captured run: `[0]` without the copies of `host_io` (runs on caller-owned device
    /// memory), `[1]` with them (host runs).
    graphs: [Option<Graph>; 2],
    host_io: HostIo,
    warm: bool,
    use_graph: bool,
    step_ms: StepTimes,
    provided: Vec<bool>,
    last_gpu_ms: f32,
    /// The last host run's phases, and the events that trace its copies when on (only with
    /// `kernel_timing`: the trace reads `marks`).
    last_phases: RunPhases,
    trace: Option<Trace>,
    /// Whether runs record `marks` around their kernels (`set_kernel_timing`).
    kernel_timing: bool,
}

/// Every planned kernel launch asks for no more dynamic shared memory than the device lets
/// its kernel have (`Device::smem_cap`): a launch past it would fail at run time with the
/// driver's bare "invalid argument", so preparing fails here, naming the step instead.
fn check_shared_memory(dev: &Device, program: &Program, steps: &[Vec<Launch>]) -> Result<()> {
    for (i, launches) in steps.iter().enumerate() {
        for l in launches {
            let Launch::Kernel(k) = l else { continue };
            if k.smem == 0 {
                continue;
            }
            let cap = dev.smem_cap(k.func)?;
            if k.smem > cap {
                let s = &program.steps[i];
                let name = dev.func_name(k.func).unwrap_or("a generated kernel");
                return Err(RuntimeError::Step {
                    step: i,
                    origin: s.origin.clone(),
                    kernel: s.kernel.kind(),
                    message: format!(
                        "{name} needs {} bytes of shared memory a block; this GPU allows it {cap}",
                        k.smem
                    ),
                });
            }
        }
    }
    Ok(())
}

/// Whether cuBLASLt's candidates are timed with L2 flushed: a replay finds the weights in
/// DRAM when they outgrow L2 (every run streams them through it), and a candidate timed
/// against a warm L2 is chosen for bandwidth the run will not have. `NPU_CUDA_LT_COLD=0|1`
/// overrides the rule, for comparisons.
fn lt_cold(program: &Program, l2_bytes: u64) -> bool {
    match std::env::var("NPU_CUDA_LT_COLD").as_deref() {
        Ok("0") => false,
        Ok("1") => true,
        _ => {
            let bytes: u64 = (0..program.weights.len() as u32)
                .filter_map(|i| program.slot_bytes(Slot::Weight(i)))
                .fold(0, u64::saturating_add);
            bytes > l2_bytes
        }
    }
}

impl CudaExecutable {
    pub(crate) fn new(
        dev: Arc<Device>,
        program: Program,
        weights: &dyn WeightSource,
        cache: &mut HashMap<String, Weak<DevBuf>>,
    ) -> Result<CudaExecutable> {
        let IoPlan {
            donates,
            state_input,
        } = prepare::check(&program, weights, crate::launch::MAXR)?;
        dev.bind()?;
        let io_buf =
            |t: &IoTensor| -> Result<DevBuf> { Ok(DevBuf::zeroed(&dev, io_bytes(t), &t.name)?) };
        let inputs = program
            .inputs
            .iter()
            .zip(&state_input)
            .map(|(t, &st)| (!st).then(|| io_buf(t)).transpose())
            .collect::<Result<Vec<_>>>()?;
        let outputs = program
            .outputs
            .iter()
            .zip(&donates)
            .map(|(t, d)| d.is_none().then(|| io_buf(t)).transpose())
            .collect::<Result<Vec<_>>>()?;
        let upload = |name: &str, host: &[u8]| -> Result<DevBuf> {
            let buf = DevBuf::zeroed(&dev, host.len(), name)?;
            buf.upload(host, name)?;
            Ok(buf)
        };
        let built = prepare::weights(&program, weights, cache, |name, host| {
            upload(name, host.bytes())
        })?;
        let consts = program
            .constants
            .iter()
            .map(|c| upload(&c.name, &prepare::constant_bytes(c)?))
            .collect::<Result<Vec<_>>>()?;
        let arena = DevBuf::zeroed(&dev, program.arena_bytes as usize, "the arena")?;
        // Generated elementwise kernels: one module for the whole program.
        let mut src = crate::elementwise::common_source();
        src.push_str("#undef NPU_KBIT\n#define NPU_KBIT 16\n");
        let mut names: Vec<String> = Vec::new();
        for s in &program.steps {
            let Some(out) = s.outputs.first().filter(|_| s.outputs.len() == 1) else {
                continue;
            };
            // A residual convolution may run as the convolution and then `act(out + r)`
            // in place (`plan::conv`'s split), so its expression is compiled too.
            let (expr, ins) = match (&s.kernel, s.kernel.split_residual_conv()) {
                (Kernel::Elementwise { expr }, _) => (expr.clone(), s.inputs.clone()),
                (_, Some((_, Kernel::Elementwise { expr }))) => {
                    let r = s.inputs.last().cloned().into_iter();
                    (expr, std::iter::once(out.clone()).chain(r).collect())
                }
                _ => continue,
            };
            let (code, name) = crate::elementwise::generate(&expr, &ins, out);
            if !names.contains(&name) {
                src.push('\n');
                src.push_str(&code);
                names.push(name);
            }
        }
        let ew = if names.is_empty() {
            HashMap::new()
        } else {
            dev.load_generated(&src, &names)?
        };
        let mut steps: Vec<Vec<Launch>> = Vec::with_capacity(program.steps.len());
        let mut scratch_need = 0u64;
        let lt_cold = lt_cold(&program, dev.l2_bytes);
        let persist = RefCell::new(Persistent::default());
        for (i, s) in program.steps.iter().enumerate() {
            if steps.len() > i {
                continue; // folded into an earlier step's launch
            }
            let planner = Planner {
                dev: &dev,
                ew: &ew,
                program: &program,
                persist: &persist,
                step: i,
                lt_cold,
            };
            // A group of steps in one launch: the first step holds it, the others none.
            let group = planner
                .gemv_rope(&program.steps[i..])
                .or_else(|| planner.rope_cache(&program.steps[i..]));
            if let Some((n, p)) = group {
                steps.push(p.launches);
                steps.extend((1..n).map(|_| Vec::new()));
                continue;
            }
            if let Some(pair) = planner.epilogue_norm(&program.steps[i..]) {
                for p in pair {
                    scratch_need = scratch_need.max(p.scratch);
                    steps.push(p.launches);
                }
                continue;
            }
            let p = planner.plan(s).map_err(|message| RuntimeError::Step {
                step: i,
                origin: s.origin.clone(),
                kernel: s.kernel.kind(),
                message,
            })?;
            scratch_need = scratch_need.max(p.scratch);
            steps.push(p.launches);
        }
        check_shared_memory(&dev, &program, &steps)?;
        // The steps' shared scratch, then the region kept across steps.
        let persist_off = align(LT_WORKSPACE + scratch_need);
        let scratch_bytes = persist_off + persist.into_inner().bytes;
        let scratch = DevBuf::zeroed(&dev, scratch_bytes as usize, "scratch")?;
        let err = DevBuf::zeroed(&dev, 16, "the error word")?;
        let clear = KernelLaunch {
            func: dev.func("k_clear_err"),
            grid: (1, 1, 1),
            block: (1, 1, 1),
            smem: 0,
            args: vec![Arg::Ptr(0, Loc::Err)],
        };
        let stage = |t: &IoTensor, on: bool| -> Result<Option<Pinned>> {
            Ok(if on {
                Some(Pinned::new(&dev, io_bytes(t), &t.name)?)
            } else {
                None
            })
        };
        let stages = |ts: &[IoTensor], bound: Vec<bool>| -> Result<Vec<Option<Pinned>>> {
            ts.iter().zip(bound).map(|(t, on)| stage(t, on)).collect()
        };
        let in_stage = stages(
            &program.inputs,
            inputs.iter().map(Option::is_some).collect(),
        )?;
        let out_stage = stages(
            &program.outputs,
            outputs.iter().map(Option::is_some).collect(),
        )?;
        let err_stage = Pinned::new(&dev, 4, "the error word")?;
        let host_io = HostIo::new(
            &dev,
            (&inputs, &in_stage),
            (&outputs, &out_stage),
            (&err, &err_stage),
        )?;
        let marks = (dev.timing_event()?, dev.timing_event()?);
        let n_in = program.inputs.len();
        let use_graph = std::env::var("NPU_CUDA_GRAPH").map_or(true, |v| v != "0");
        Ok(CudaExecutable {
            dev,
            program,
            inputs,
            outputs,
            donates,
            weights: built,
            consts,
            arena,
            scratch,
            persist_off,
            err,
            in_stage,
            out_stage,
            err_stage,
            marks,
            steps,
            clear,
            bound: None,
            graphs: [None, None],
            host_io,
            warm: false,
            use_graph,
            step_ms: StepTimes::default(),
            provided: vec![false; n_in],
            last_gpu_ms: 0.0,
            last_phases: RunPhases::default(),
            trace: None,
            kernel_timing: false,
        })
    }

    /// GPU time of the last run's kernels (device events around them), ms; 0 unless kernel
    /// timing is on ([`Self::set_kernel_timing`]).
    pub fn last_gpu_ms(&self) -> f32 {
        self.last_gpu_ms
    }

    /// Times later runs' kernels ([`Self::last_gpu_ms`]). Off by default: the two event
    /// records it adds to the captured graph cost a host run ~5 us (ResNet-18 b1 whole run
    /// 0.232 against 0.239 ms on an H200 machine; its `cuGraphLaunch` 1.6-2.8 us against 5).
    /// Turning it on or off recaptures the graph at the next run.
    /// Turning it off ends tracing too (the trace reads the same events).
    pub fn set_kernel_timing(&mut self, on: bool) {
        if on != self.kernel_timing {
            self.kernel_timing = on;
            self.graphs = [None, None];
        }
        if !on {
            self.trace = None;
        }
        self.last_gpu_ms = 0.0;
    }

    /// Where the last host run's wall time went (`run`; `run_device` leaves it).
    pub fn last_phases(&self) -> RunPhases {
        self.last_phases
    }

    /// Brackets later host runs' copies with device events too (each a driver call on the
    /// run's path, so off unless asked for), filling [`RunPhases::device`]; needs kernel
    /// timing, which it turns on.
    pub fn set_tracing(&mut self, on: bool) -> Result<()> {
        if on {
            self.set_kernel_timing(true);
        }
        self.trace = if on {
            Some(Trace::new(&self.dev)?)
        } else {
            None
        };
        Ok(())
    }

    /// Kernel launches (and cuBLASLt calls) in one run.
    pub fn launches_per_run(&self) -> usize {
        1 + self.steps.iter().map(Vec::len).sum::<usize>()
    }

    /// The library kernels a run launches, in order (cuBLASLt and cuDNN calls and generated
    /// pointwise kernels left out): which path the planner took, for tests and diagnostics.
    pub fn library_kernels(&self) -> Vec<&'static str> {
        self.steps
            .iter()
            .flatten()
            .filter_map(|l| match l {
                Launch::Kernel(k) => self.dev.func_name(k.func),
                _ => None,
            })
            .collect()
    }

    /// Every launch of the steps in order, as (library kernel name or launch kind, blocks): the
    /// timeline's key to its grids (`npu_cuda::timeline`).
    pub fn launch_list(&self) -> Vec<(String, u32)> {
        self.steps
            .iter()
            .flatten()
            .map(|l| match l {
                Launch::Kernel(k) => (
                    self.dev
                        .func_name(k.func)
                        .unwrap_or("generated")
                        .to_string(),
                    k.grid.0 * k.grid.1 * k.grid.2,
                ),
                Launch::Lt(_) => ("cublasLt".to_string(), 0),
                Launch::Dnn(_) => ("cudnn".to_string(), 0),
            })
            .collect()
    }

    /// Whether the last run replayed a captured graph.
    pub fn graph_ready(&self) -> bool {
        self.graphs.iter().any(Option::is_some)
    }

    /// Converts every given input into its staging, enqueuing its copy unless the run copies
    /// it inside (`host_io`), uploads state inputs synchronously into the state, and returns
    /// the input addresses.
    fn upload_inputs(
        &mut self,
        inputs: &[(&str, &HostTensor)],
        state: &mut CudaState,
    ) -> Result<Vec<u64>> {
        self.provided.iter_mut().for_each(|p| *p = false);
        for (name, t) in inputs {
            let (i, io) = match_input(&self.program, name, t)?;
            let dtypes = (t.dtype(), io.storage);
            match (&self.inputs[i], &mut self.in_stage[i]) {
                (Some(_), Some(stage)) if self.host_io.ins[i] => {
                    staging::convert(stage, t.bytes(), dtypes, &io.name)?
                }
                (Some(buf), Some(stage)) => {
                    staging::upload_async(&self.dev, stage, t.bytes(), dtypes, buf.ptr, &io.name)?
                }
                (buf, _) => {
                    let mut host = vec![0u8; io_bytes(io)];
                    cast_bytes(t.bytes(), t.dtype(), &mut host, io.storage).map_err(|e| {
                        RuntimeError::Tensor {
                            name: io.name.clone(),
                            message: e.to_string(),
                        }
                    })?;
                    match buf {
                        Some(buf) => buf.upload(&host, &io.name)?,
                        None => state.ensure(io)?.buf.upload(&host, &io.name)?,
                    }
                }
            }
            self.provided[i] = true;
        }
        let mut ptrs = Vec::with_capacity(self.program.inputs.len());
        for i in 0..self.program.inputs.len() {
            let io = &self.program.inputs[i];
            match &self.inputs[i] {
                None => ptrs.push(state.ensure(io)?.buf.ptr),
                Some(_) if !self.provided[i] => {
                    return Err(RuntimeError::MissingInput {
                        name: io.name.clone(),
                        dtype: io.dtype,
                        shape: io.shape.clone(),
                    })
                }
                Some(b) => ptrs.push(b.ptr),
            }
        }
        Ok(ptrs)
    }

    fn relocate(&mut self, input_ptrs: &[u64]) {
        let outputs: Vec<u64> = self
            .outputs
            .iter()
            .zip(&self.donates)
            .map(|(o, d)| match (o, d) {
                (Some(b), _) => b.ptr,
                (None, Some(j)) => input_ptrs[*j],
                (None, None) => 0,
            })
            .collect();
        let weights: Vec<u64> = self.weights.iter().map(|w| w.ptr).collect();
        let consts: Vec<u64> = self.consts.iter().map(|c| c.ptr).collect();
        let bases = Bases {
            inputs: input_ptrs,
            outputs: &outputs,
            weights: &weights,
            consts: &consts,
            arena: self.arena.ptr,
            scratch: self.scratch.ptr,
            persist: self.scratch.ptr + self.persist_off,
            err: self.err.ptr,
        };
        self.clear.relocate(&bases);
        for step in &mut self.steps {
            for l in step {
                match l {
                    Launch::Kernel(k) => k.relocate(&bases),
                    Launch::Lt(c) => {
                        for (p, &l) in c.ptrs.iter_mut().zip(&c.locs) {
                            *p = bases.resolve(l);
                        }
                    }
                    Launch::Dnn(c) => {
                        for (p, &l) in c.ptrs.iter_mut().zip(&c.locs) {
                            *p = bases.resolve(l);
                        }
                    }
                }
            }
        }
    }

    fn launch_kernel(dev: &Device, k: &mut KernelLaunch) -> CudaResult<()> {
        let mut params = k.params();
        if !dev.pdl {
            // SAFETY: arguments match the kernel's signature (planned from the same source);
            // every address was resolved against live buffers.
            return unsafe {
                result::launch_kernel(
                    k.func.0,
                    k.grid,
                    k.block,
                    k.smem,
                    dev.cu_stream(),
                    &mut params,
                )
            }
            .map_err(|e| CudaError::driver("launching a kernel", e));
        }
        use cudarc::driver::sys;
        // SAFETY: a zeroed attribute value is a valid union state; one field is set below.
        let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
        attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attr.value.programmaticStreamSerializationAllowed = 1;
        let config = sys::CUlaunchConfig {
            gridDimX: k.grid.0,
            gridDimY: k.grid.1,
            gridDimZ: k.grid.2,
            blockDimX: k.block.0,
            blockDimY: k.block.1,
            blockDimZ: k.block.2,
            sharedMemBytes: k.smem,
            hStream: dev.cu_stream(),
            attrs: &mut attr,
            numAttrs: 1,
        };
        // SAFETY: as above; `config` and `attr` outlive the call, and every kernel of ours
        // waits for its predecessor in `pdl_enter()` before any memory access (checked by
        // `device::tests::every_kernel_enters_through_pdl`).
        unsafe {
            sys::cuLaunchKernelEx(&config, k.func.0, params.as_mut_ptr(), std::ptr::null_mut())
        }
        .result()
        .map_err(|e| CudaError::driver("launching a kernel", e))
    }

    fn launch_step(&mut self, si: usize) -> CudaResult<()> {
        let ws = self.scratch.ptr;
        for l in &mut self.steps[si] {
            match l {
                Launch::Kernel(k) => Self::launch_kernel(&self.dev, k)?,
                Launch::Lt(c) => c.launch(&self.dev, ws)?,
                Launch::Dnn(c) => c.launch(&self.dev)?,
            }
        }
        Ok(())
    }

    fn step_err(&self, si: usize, e: CudaError) -> RuntimeError {
        let s = &self.program.steps[si];
        RuntimeError::Step {
            step: si,
            origin: s.origin.clone(),
            kernel: s.kernel.kind(),
            message: e.to_string(),
        }
    }

    /// Enqueues `k_clear_err`, unless this is a host run whose input copies clear the error
    /// word themselves (`io`).
    fn clear_err(&mut self, io: bool) -> CudaResult<()> {
        if io && self.host_io.clears_err() {
            return Ok(());
        }
        Self::launch_kernel(&self.dev, &mut self.clear)
    }

    /// The run: the copies inside the graph for a host run (`io`), the marks around the
    /// kernels, and the kernels; `capturing` into a graph or not.
    fn launch_all(&mut self, io: bool, capturing: bool) -> Result<()> {
        if io {
            self.host_io.enqueue_inputs(&self.dev)?;
        }
        if self.kernel_timing {
            self.dev.record_event(&self.marks.0, capturing)?;
        }
        self.clear_err(io)?;
        for si in 0..self.steps.len() {
            self.launch_step(si).map_err(|e| self.step_err(si, e))?;
        }
        if self.kernel_timing {
            self.dev.record_event(&self.marks.1, capturing)?;
        }
        if io {
            self.host_io.enqueue_outputs(&self.dev)?;
        }
        Ok(())
    }

    fn sync(&self) -> CudaResult<()> {
        self.dev
            .stream
            .synchronize()
            .map_err(|e| CudaError::driver("synchronizing", e))
    }

    /// Enqueues the run (the captured graph once warm; `io`: with the copies of `host_io`);
    /// with profiling on, runs eagerly with a device event between steps and waits for them.
    fn execute(&mut self, io: bool) -> Result<()> {
        let stream = self.dev.cu_stream();
        if self.step_ms.is_on() {
            // Eager, with a device event between steps: each step's GPU time without host
            // synchronization in between (the events add well under a microsecond each).
            if io {
                self.host_io.enqueue_inputs(&self.dev)?;
            }
            self.clear_err(io)?;
            let marks = (0..=self.steps.len())
                .map(|_| self.dev.timing_event())
                .collect::<CudaResult<Vec<_>>>()?;
            for (si, mark) in marks.iter().enumerate().take(self.steps.len()) {
                self.dev.record_event(mark, false)?;
                self.launch_step(si).map_err(|e| self.step_err(si, e))?;
            }
            self.dev.record_event(&marks[self.steps.len()], false)?;
            if io {
                self.host_io.enqueue_outputs(&self.dev)?;
            }
            self.sync()?;
            for (si, pair) in marks.windows(2).enumerate() {
                let ms = pair[0].elapsed_ms(&pair[1]).unwrap_or(0.0);
                self.step_ms.add(si, f64::from(ms));
            }
            return Ok(());
        }
        let slot = usize::from(io);
        if self.graphs[slot].is_none() && self.warm && self.use_graph {
            Graph::begin(stream)?;
            let launched = self.launch_all(io, true);
            let captured = Graph::end(stream);
            launched?;
            self.graphs[slot] = Some(captured?);
        }
        match &self.graphs[slot] {
            Some(g) => g.launch(stream)?,
            None => {
                self.launch_all(io, false)?;
                self.warm = true;
            }
        }
        Ok(())
    }

    /// Binds the input buffers at `ptrs`, relocating the launches and dropping the captured
    /// graphs when they moved.
    fn bind(&mut self, ptrs: Vec<u64>) {
        if self.bound.as_ref() != Some(&ptrs) {
            self.relocate(&ptrs);
            self.bound = Some(ptrs);
            self.graphs = [None, None];
            self.warm = false;
        }
    }

    /// Enqueues the run and, unless the run copies it inside (`io`), the error word's download.
    fn launch(&mut self, io: bool) -> Result<()> {
        self.execute(io)?;
        if !io {
            self.err_stage
                .download_async(self.err.ptr, "the error word")?;
        }
        Ok(())
    }

    /// Waits for everything enqueued, then takes the kernels' time and checks the error word.
    fn finish(&mut self) -> Result<()> {
        self.sync()?;
        if !self.step_ms.is_on() && self.kernel_timing {
            self.last_gpu_ms = self.marks.0.elapsed_ms(&self.marks.1).unwrap_or(0.0);
        }
        let mut word = [0u8; 4];
        word.copy_from_slice(&self.err_stage.bytes()[..4]);
        let code = i32::from_le_bytes(word);
        if code > 0 {
            let si = (code - 1) as usize;
            let s = &self.program.steps[si.min(self.program.steps.len() - 1)];
            return Err(RuntimeError::Step {
                step: si,
                origin: s.origin.clone(),
                kernel: s.kernel.kind(),
                message: "an index (embedding id or index_copy index) is out of range".into(),
            });
        }
        Ok(())
    }

    /// Enqueues the uploads, the run and the outputs' downloads, and takes the host phases
    /// of the uploads and the enqueuing.
    fn enqueue_run(
        &mut self,
        inputs: &[(&str, &HostTensor)],
        state: &mut CudaState,
        laps: &mut Laps,
    ) -> Result<()> {
        if let Some(t) = &self.trace {
            t.mark_upload(&self.dev)?;
        }
        let ptrs = self.upload_inputs(inputs, state)?;
        self.last_phases.upload_us = laps.lap();
        self.bind(ptrs);
        self.launch(self.host_io.on())?;
        for (oi, o) in self.program.outputs.iter().enumerate() {
            if self.host_io.outs[oi] {
                continue;
            }
            if let (Some(buf), Some(stage)) = (&self.outputs[oi], &mut self.out_stage[oi]) {
                stage.download_async(buf.ptr, &o.name)?;
            }
        }
        if let Some(t) = &self.trace {
            t.mark_download(&self.dev)?;
        }
        self.last_phases.enqueue_us = laps.lap();
        Ok(())
    }
}

impl Executable for CudaExecutable {
    fn program(&self) -> &Program {
        &self.program
    }

    fn new_state(&self) -> Box<dyn DeviceState> {
        Box::new(CudaState {
            dev: self.dev.clone(),
            bufs: HashMap::new(),
        })
    }

    fn set_profiling(&mut self, on: bool) {
        self.step_ms.set(on, self.program.steps.len());
    }

    fn profile(&self) -> Vec<StepTime> {
        self.step_ms.report(&self.program)
    }

    fn run(
        &mut self,
        inputs: &[(&str, &HostTensor)],
        state: &mut dyn DeviceState,
    ) -> Result<Vec<(String, HostTensor)>> {
        let mut laps = Laps::start();
        let state = downcast_state::<CudaState>(state)?;
        self.dev.bind()?;
        if let Err(e) = self.enqueue_run(inputs, state, &mut laps) {
            // Nothing may still copy from or into the staging buffers when the next run
            // writes them.
            let _ = self.sync();
            return Err(e);
        }
        self.finish()?;
        let wait_us = laps.lap();
        let mut out = Vec::new();
        for (oi, o) in self.program.outputs.iter().enumerate() {
            if let Some(stage) = &self.out_stage[oi] {
                out.push((o.name.clone(), prepare::output_tensor(o, stage.bytes())?));
            }
        }
        self.last_phases.wait_us = wait_us;
        self.last_phases.outputs_us = laps.lap();
        self.last_phases.device = self.trace.as_ref().map(|t| t.device_phases(&self.marks));
        Ok(out)
    }
}
