//! The CPU backend: every buffer (inputs, outputs, weights, constants, arena) is allocated
//! and every weight built at prepare time; a run converts the inputs into their buffers,
//! executes the steps in order over strided views, and converts the outputs back.

pub(crate) mod activation;
pub(crate) mod amx;
pub(crate) mod attention;
#[cfg(target_arch = "x86_64")]
mod attention_avx2;
mod attention_decode;
pub(crate) mod conv;
pub(crate) mod conv_grouped;
pub(crate) mod copy;
pub(crate) mod dot;
pub(crate) mod elementwise;
pub(crate) mod embedding;
pub(crate) mod gemm;
pub(crate) mod gemm_packed;
#[cfg(target_arch = "x86_64")]
mod gemm_packed_avx2;
pub(crate) mod index_copy;
mod layout;
pub(crate) mod norm;
pub(crate) mod pool;
pub(crate) mod rope;
pub(crate) mod simd;
pub(crate) mod softmax;
pub mod view;
pub(crate) mod winograd;

use crate::backend::{
    check_shared_state, check_state_write, downcast_state, match_input, missing_state, Backend,
    DeviceState, Executable, StepTime, StepTimes,
};
use crate::error::{Result, RuntimeError};
use crate::prepare::{self, io_bytes, IoPlan};
use crate::tensor::{cast_bytes, HostTensor};
use crate::weights::{WeightBytes, WeightSource};
use npu_ir::DType;
use npu_program::program::{IoTensor, Kernel, Slot, Step};
use npu_program::Program;
use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use view::{View, MAX_RANK};

/// An 8-byte aligned byte buffer.
#[derive(Debug)]
enum Store {
    Words(Vec<u64>),
    /// A byte vector whose allocation happens to be 8-aligned (taken without a copy).
    Bytes(Vec<u8>),
}

#[derive(Debug)]
pub(crate) struct Buf {
    store: Store,
    len: usize,
}

impl Buf {
    fn zeros(len: usize) -> Buf {
        Buf {
            store: Store::Words(vec![0; len.div_ceil(8)]),
            len,
        }
    }
    /// A zeroed buffer, or an error when it exceeds the memory limit or the allocator
    /// refuses (never an abort); `what` names it.
    fn try_zeros(len: usize, what: &str) -> Result<Buf> {
        Ok(Buf {
            store: Store::Words(crate::limits::try_zeroed(len.div_ceil(8), what)?),
            len,
        })
    }
    /// Takes `v` without copying when it is 8-aligned (as the system allocator returns it).
    fn from_vec(v: Vec<u8>) -> Buf {
        if (v.as_ptr() as usize) & 7 == 0 {
            Buf {
                len: v.len(),
                store: Store::Bytes(v),
            }
        } else {
            let mut buf = Buf::zeros(v.len());
            buf.bytes_mut().copy_from_slice(&v);
            buf
        }
    }
    fn bytes(&self) -> &[u8] {
        match &self.store {
            // SAFETY: the words hold at least `len` initialized bytes.
            Store::Words(w) => unsafe {
                std::slice::from_raw_parts(w.as_ptr() as *const u8, self.len)
            },
            Store::Bytes(b) => b,
        }
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        match &mut self.store {
            // SAFETY: as above.
            Store::Words(w) => unsafe {
                std::slice::from_raw_parts_mut(w.as_mut_ptr() as *mut u8, self.len)
            },
            Store::Bytes(b) => b,
        }
    }
    fn ptr(&mut self) -> *mut u8 {
        self.bytes_mut().as_mut_ptr()
    }
    /// For read-only buffers (weights shared between executables): kernels never write
    /// through it.
    fn const_ptr(&self) -> *mut u8 {
        self.bytes().as_ptr() as *mut u8
    }
}

/// The CPU backend. Weights built by one `prepare` are shared (read-only) with every
/// later executable of the same backend that needs the same slot from the same source, so
/// a prefill and a decode program hold one copy of the model.
#[derive(Default)]
pub struct CpuBackend {
    weight_cache: Mutex<HashMap<String, Weak<Buf>>>,
}

impl CpuBackend {
    pub fn new() -> CpuBackend {
        CpuBackend::default()
    }
}

/// A named state buffer: storage dtype, shape, bytes.
struct StateBuf {
    dtype: DType,
    shape: Vec<usize>,
    buf: Buf,
}

/// The CPU backend's device state: named host buffers.
#[derive(Default)]
pub struct CpuState {
    bufs: HashMap<String, StateBuf>,
}

impl DeviceState for CpuState {
    fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = self.bufs.keys().cloned().collect();
        v.sort();
        v
    }
    fn read(&self, name: &str) -> Result<HostTensor> {
        let s = self.bufs.get(name).ok_or_else(|| missing_state(name))?;
        HostTensor::new(s.dtype, s.shape.clone(), s.buf.bytes().to_vec())
    }
    fn write(&mut self, name: &str, value: &HostTensor) -> Result<()> {
        let s = self.bufs.get_mut(name).ok_or_else(|| missing_state(name))?;
        check_state_write(name, &s.shape, value)?;
        cast_bytes(value.bytes(), value.dtype(), s.buf.bytes_mut(), s.dtype)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

pub struct CpuExecutable {
    program: Program,
    /// Own buffers of non-state inputs (None for state inputs).
    inputs: Vec<Option<Buf>>,
    /// Own buffers of outputs that do not donate (None for donating ones).
    outputs: Vec<Option<Buf>>,
    /// For each output, the input whose buffer it is.
    donates: Vec<Option<usize>>,
    weights: Vec<Arc<Buf>>,
    /// Per weight slot: its buffer holds [`gemm_packed`] panels, which only GEMMs (as their B)
    /// read (`layout::transpose_linear_weights`).
    packed_weights: Vec<bool>,
    /// Per step: a convolution's filters transformed for `winograd`, when it takes that path.
    filters: Vec<Option<Arc<winograd::Filters>>>,
    consts: Vec<Buf>,
    arena: Buf,
    /// Base pointers of the input slots for the current run (reused, no allocation).
    input_ptrs: Vec<usize>,
    /// Per-step (total ms, runs) while profiling; empty when off.
    step_ms: StepTimes,
    provided: Vec<bool>,
}

impl Backend for CpuBackend {
    fn name(&self) -> &'static str {
        "cpu"
    }

    fn prepare(
        &self,
        program: &Program,
        weights: &dyn WeightSource,
    ) -> Result<Box<dyn Executable>> {
        let mut cache = self.weight_cache.lock().unwrap_or_else(|e| e.into_inner());
        Ok(Box::new(CpuExecutable::with_cache(
            program.clone(),
            weights,
            &mut cache,
        )?))
    }
}

impl CpuExecutable {
    pub fn new(program: Program, weights: &dyn WeightSource) -> Result<CpuExecutable> {
        Self::with_cache(program, weights, &mut HashMap::new())
    }

    fn with_cache(
        program: Program,
        weights: &dyn WeightSource,
        cache: &mut HashMap<String, Weak<Buf>>,
    ) -> Result<CpuExecutable> {
        let IoPlan {
            donates,
            state_input,
        } = prepare::check(&program, weights, MAX_RANK)?;
        let io_buf = |t: &IoTensor| Buf::try_zeros(io_bytes(t), &format!("tensor '{}'", t.name));
        let inputs = program
            .inputs
            .iter()
            .zip(&state_input)
            .map(|(t, &st)| (!st).then(|| io_buf(t)).transpose())
            .collect::<Result<_>>()?;
        let outputs = program
            .outputs
            .iter()
            .zip(&donates)
            .map(|(t, d)| d.is_none().then(|| io_buf(t)).transpose())
            .collect::<Result<_>>()?;
        // Weights the file holds as they are come over by one copy into aligned anonymous
        // memory, and the file's pages are let go: read from the mapping itself, the 1.5B
        // model decoded 9% slower (173 -> 189 ms/token on the Xeon box).
        let mut program = program;
        let mut weights = prepare::weights(&program, weights, cache, |_, w| {
            Ok(match w {
                WeightBytes::Owned(t) => Buf::from_vec(t.into_bytes()),
                WeightBytes::Mapped(m) => {
                    let mut buf = Buf::try_zeros(m.bytes().len(), "a weight")?;
                    buf.bytes_mut().copy_from_slice(m.bytes());
                    m.release();
                    buf
                }
            })
        })?;
        let packed_weights = layout::transpose_linear_weights(&mut program, &mut weights)?;
        let filters = winograd::prepare(&program, &weights);
        let consts = program
            .constants
            .iter()
            .map(|c| prepare::constant_bytes(c).map(Buf::from_vec))
            .collect::<Result<_>>()?;
        let arena = Buf::try_zeros(
            usize::try_from(program.arena_bytes).unwrap_or(usize::MAX),
            "the arena",
        )?;
        let n_in = program.inputs.len();
        Ok(CpuExecutable {
            program,
            inputs,
            outputs,
            donates,
            weights,
            packed_weights,
            filters,
            consts,
            arena,
            input_ptrs: vec![0; n_in],
            step_ms: StepTimes::default(),
            provided: vec![false; n_in],
        })
    }

    fn is_state(&self, i: usize) -> bool {
        self.inputs[i].is_none()
    }

    fn bind_inputs(&mut self, inputs: &[(&str, &HostTensor)], state: &mut CpuState) -> Result<()> {
        self.provided.iter_mut().for_each(|p| *p = false);
        for (name, t) in inputs {
            let (i, io) = match_input(&self.program, name, t)?;
            let dst = if self.is_state(i) {
                &mut ensure_state(state, io)?.buf
            } else {
                self.inputs[i]
                    .as_mut()
                    .expect("non-state input has a buffer")
            };
            cast_bytes(t.bytes(), t.dtype(), dst.bytes_mut(), io.storage).map_err(|e| {
                RuntimeError::Tensor {
                    name: io.name.clone(),
                    message: e.to_string(),
                }
            })?;
            self.provided[i] = true;
        }
        for i in 0..self.program.inputs.len() {
            let io = &self.program.inputs[i];
            if self.is_state(i) {
                self.input_ptrs[i] = ensure_state(state, io)?.buf.ptr() as usize;
            } else if !self.provided[i] {
                return Err(RuntimeError::MissingInput {
                    name: io.name.clone(),
                    dtype: io.dtype,
                    shape: io.shape.clone(),
                });
            } else {
                self.input_ptrs[i] = self.inputs[i].as_mut().expect("buffer").ptr() as usize;
            }
        }
        Ok(())
    }

    fn base(&mut self, slot: Slot) -> *mut u8 {
        match slot {
            Slot::Input(i) => self.input_ptrs[i as usize] as *mut u8,
            Slot::Output(i) => match self.donates[i as usize] {
                Some(j) => self.input_ptrs[j] as *mut u8,
                None => self.outputs[i as usize].as_mut().expect("buffer").ptr(),
            },
            Slot::Weight(i) => self.weights[i as usize].const_ptr(),
            Slot::Const(i) => self.consts[i as usize].ptr(),
            Slot::Arena => self.arena.ptr(),
        }
    }
}

/// The state buffer for a state input, created zeroed on first use.
fn ensure_state<'a>(state: &'a mut CpuState, io: &IoTensor) -> Result<&'a mut StateBuf> {
    let s = match state.bufs.entry(io.name.clone()) {
        std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
        std::collections::hash_map::Entry::Vacant(e) => e.insert(StateBuf {
            dtype: io.storage,
            shape: io.shape.clone(),
            buf: Buf::try_zeros(io_bytes(io), &format!("state '{}'", io.name))?,
        }),
    };
    check_shared_state(io, s.dtype, &s.shape)?;
    Ok(s)
}

impl Executable for CpuExecutable {
    fn program(&self) -> &Program {
        &self.program
    }

    fn new_state(&self) -> Box<dyn DeviceState> {
        Box::new(CpuState::default())
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
        let state = downcast_state::<CpuState>(state)?;
        self.bind_inputs(inputs, state)?;
        // The steps run on a worker of the thread pool: a parallel loop started from outside
        // the pool injects its job, wakes a worker and blocks the caller on a latch (two
        // context switches per loop, some hundred loops per run); from inside, the caller
        // takes part in the loop and at most the other workers wake.
        rayon::scope(|_| self.run_steps())?;
        let mut result = Vec::new();
        for (oi, o) in self.program.outputs.iter().enumerate() {
            if let Some(buf) = &self.outputs[oi] {
                result.push((o.name.clone(), prepare::output_tensor(o, buf.bytes())?));
            }
        }
        Ok(result)
    }
}

impl CpuExecutable {
    /// Every step in order, over the bound buffers.
    fn run_steps(&mut self) -> Result<()> {
        let n_steps = self.program.steps.len();
        let mut ins: Vec<View> = Vec::with_capacity(8);
        let mut outs: Vec<View> = Vec::with_capacity(2);
        for si in 0..n_steps {
            ins.clear();
            outs.clear();
            // SAFETY of the views: every binding lies inside its slot (validated at
            // prepare); the buffers live in self/state for the whole run.
            let step: &Step = &self.program.steps[si];
            let step_ptr = step as *const Step;
            // SAFETY: `self.program` is not modified during the run; `base` only reads
            // the buffer pointers.
            let step: &Step = unsafe { &*step_ptr };
            for b in &step.inputs {
                let p = unsafe { self.base(b.slot).add(b.byte_offset as usize) };
                ins.push(View {
                    ptr: p,
                    dtype: b.dtype,
                    shape: &b.shape,
                    strides: &b.strides,
                });
            }
            for b in &step.outputs {
                let p = unsafe { self.base(b.slot).add(b.byte_offset as usize) };
                outs.push(View {
                    ptr: p,
                    dtype: b.dtype,
                    shape: &b.shape,
                    strides: &b.strides,
                });
            }
            let started = self.step_ms.is_on().then(std::time::Instant::now);
            let filters = self.filters[si].as_deref();
            let b_packed = matches!(step.kernel, Kernel::Gemm { .. })
                && matches!(step.inputs.get(1).map(|b| b.slot),
                    Some(Slot::Weight(w)) if self.packed_weights[w as usize]);
            run_kernel(&step.kernel, &ins, &outs, filters, b_packed).map_err(|message| {
                RuntimeError::Step {
                    step: si,
                    origin: step.origin.clone(),
                    kernel: step.kernel.kind(),
                    message,
                }
            })?;
            if let Some(t) = started {
                self.step_ms.add(si, t.elapsed().as_secs_f64() * 1e3);
            }
        }
        Ok(())
    }
}

/// Runs one kernel over its views, after checking them against the kernel's contract
/// ([`Kernel::check`]): the entry for callers that did not come through a validated program.
pub fn exec_step(kernel: &Kernel, ins: &[View], outs: &[View]) -> Result<(), String> {
    kernel.check(ins, outs)?;
    run_kernel(kernel, ins, outs, None, false)
}

/// Runs one kernel over views that satisfy its contract: a validated program's steps (prepare
/// checked every binding against its buffer), or [`exec_step`] after its check. `filters`:
/// the step's convolution filters transformed at prepare ([`winograd::prepare`]); `b_packed`:
/// the GEMM's B view addresses a weight packed at prepare ([`gemm_packed`]), not the [K, N]
/// matrix its shape and strides describe.
fn run_kernel(
    kernel: &Kernel,
    ins: &[View],
    outs: &[View],
    filters: Option<&winograd::Filters>,
    b_packed: bool,
) -> Result<(), String> {
    match kernel {
        Kernel::Gemm {
            alpha,
            beta,
            act,
            residual,
            norm,
        } => {
            let (a, b, bias, nw) = kernel
                .gemm_operands(ins)
                .ok_or_else(|| format!("a gemm with {} inputs", ins.len()))?;
            let epi = gemm::Epilogue {
                beta: *beta,
                act: *act,
                residual: *residual,
            };
            match (norm, nw) {
                (Some(eps), Some(nw)) => {
                    // the normalized rows, in a's dtype, then the GEMM over them
                    let strides = npu_program::program::dense_strides(a.shape);
                    let mut buf = vec![0u8; a.numel() * a.dtype.size_bytes()];
                    let normed = View {
                        ptr: buf.as_mut_ptr(),
                        dtype: a.dtype,
                        shape: a.shape,
                        strides: &strides,
                    };
                    norm::rms_norm(*eps, a, nw, &normed)?;
                    gemm::gemm_kernel(*alpha, &epi, &normed, b, b_packed, bias, &outs[0])
                }
                _ => gemm::gemm_kernel(*alpha, &epi, a, b, b_packed, bias, &outs[0]),
            }
        }
        Kernel::Conv2d { .. } => {
            let (x, w, bias, r) = kernel.conv_operands(ins).ok_or("conv2d operands")?;
            let p = conv::ConvParams::of(kernel).ok_or("not a convolution")?;
            let applied = conv::conv2d(&p, x, w, bias, r, &outs[0], filters)?;
            // A residual the convolution's path did not add runs as its own in-place pass,
            // rounding the convolution first as PyTorch's two ops do.
            let Some(r) = r.filter(|_| !applied) else {
                return Ok(());
            };
            match kernel.split_residual_conv() {
                Some((_, Kernel::Elementwise { expr })) => {
                    elementwise::elementwise(&expr, &[outs[0], *r], &outs[0])
                }
                _ => Err("a residual convolution without its split".into()),
            }
        }
        Kernel::Pool2d {
            kind,
            kernel,
            stride,
            padding,
            dilation,
        } => pool::pool2d(
            *kind, *kernel, *stride, *padding, *dilation, &ins[0], &outs[0],
        ),
        Kernel::AdaptiveAvgPool2d => pool::adaptive_avg_pool2d(&ins[0], &outs[0]),
        Kernel::Elementwise { expr } => elementwise::elementwise(expr, ins, &outs[0]),
        Kernel::Softmax { scale } => softmax::softmax(*scale, &ins[0], ins.get(1), &outs[0]),
        Kernel::RmsNorm { eps } => norm::rms_norm(*eps, &ins[0], &ins[1], &outs[0]),
        Kernel::LayerNorm {
            eps,
            has_weight,
            has_bias,
        } => {
            let n = ins.len();
            let w = has_weight.then(|| &ins[1]);
            let b = has_bias.then(|| &ins[n - 1]);
            norm::layer_norm(*eps, &ins[0], w, b, &outs[0])
        }
        Kernel::Reduce { op, reduced } => norm::reduce(*op, *reduced, &ins[0], &outs[0]),
        Kernel::Embedding => embedding::embedding(&ins[0], &ins[1], &outs[0]),
        Kernel::IndexCopy { axis } => index_copy::index_copy(*axis, &ins[0], &ins[1], &outs[0]),
        Kernel::Rope => rope::rope(&ins[0], &ins[1], &ins[2], &outs[0]),
        Kernel::Attention { scale, causal } => attention::attention(
            *scale,
            *causal,
            &ins[0],
            &ins[1],
            &ins[2],
            ins.get(3),
            &outs[0],
        ),
        Kernel::Copy => copy::copy(&ins[0], &outs[0]),
        Kernel::Fill { value } => copy::fill(*value, &outs[0]),
    }
}
