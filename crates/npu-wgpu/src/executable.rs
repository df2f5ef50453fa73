//! Preparing and running a program on a wgpu device: one storage buffer per program slot
//! (inputs, outputs, weights, constants, the arena; in parts where one binding cannot hold
//! it), one compute pipeline per dispatch of a step (most have one; split attention two),
//! one command encoder per run and a single wait for the outputs' readback. The KV cache lives in
//! a [`WgpuState`] on the device from prefill through every decode step.

use crate::device::Gpu;
use crate::error::step_error;
use crate::wgsl::{self, WORKGROUP};
use npu_program::groups::rope_cache;
use npu_program::program::{Binding, IoTensor, Slot, Step};
use npu_program::Program;
use npu_runtime::backend::{
    check_shared_state, check_state_write, downcast_state, match_input, missing_state,
};
use npu_runtime::backend::{StepTime, StepTimes};
use npu_runtime::prepare::{self, io_bytes, IoPlan};
use npu_runtime::tensor::cast_bytes;
use npu_runtime::{DeviceState, Executable, HostTensor, Result, RuntimeError, WeightSource};
use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Weak};

/// The widest operand rank the generated shaders unroll.
const MAX_RANK: usize = 8;

fn gpu_error(what: &str, e: impl std::fmt::Display) -> RuntimeError {
    RuntimeError::InvalidProgram(format!("wgpu: {what}: {e}"))
}

/// A program buffer on the device: one storage buffer, or consecutive parts of `part_bytes`
/// each where it is larger than one binding may be (the shaders pick the part per word).
pub struct Store {
    parts: Vec<wgpu::Buffer>,
    part_bytes: u64,
}

impl Store {
    fn layout(&self) -> wgsl::Layout {
        if self.parts.len() == 1 {
            wgsl::Layout::WHOLE
        } else {
            wgsl::Layout {
                parts: self.parts.len() as u32,
                part_words: self.part_bytes / 4,
            }
        }
    }

    /// Bytes over all parts.
    fn size(&self) -> u64 {
        self.parts.iter().map(wgpu::Buffer::size).sum()
    }
}

/// A zeroed buffer of at least `bytes`, in parts of at most `gpu.max_binding` bytes.
/// Sizes are rounded up to 16 bytes so that a 16-byte view covers every element.
pub fn storage(gpu: &Gpu, bytes: usize, what: &str) -> Result<Store> {
    let size = (bytes.max(4) as u64).div_ceil(16) * 16;
    let part_bytes = gpu.max_binding;
    let parts = size.div_ceil(part_bytes);
    if parts > u64::from(u32::MAX) || size > u64::from(u32::MAX) * 4 {
        return Err(RuntimeError::TooLarge {
            what: format!("{what} (word offsets on {})", gpu.info.name),
            bytes: u128::from(size),
            limit: u64::from(u32::MAX) * 4,
        });
    }
    let parts = (0..parts)
        .map(|p| {
            gpu.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(what),
                size: (size - p * part_bytes).min(part_bytes),
                usage: wgpu::BufferUsages::STORAGE
                    | wgpu::BufferUsages::COPY_DST
                    | wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: false,
            })
        })
        .collect();
    Ok(Store { parts, part_bytes })
}

/// Writes `bytes` at the start of `store` (padded to 4), part by part.
fn upload(gpu: &Gpu, store: &Store, bytes: &[u8]) {
    let mut padded;
    let mut bytes = bytes;
    if !bytes.len().is_multiple_of(4) {
        padded = bytes.to_vec();
        padded.resize(bytes.len().div_ceil(4) * 4, 0);
        bytes = &padded;
    }
    for (p, buf) in store.parts.iter().enumerate() {
        let at = (p as u64 * store.part_bytes) as usize;
        if at >= bytes.len() {
            break;
        }
        let end = (at + store.part_bytes as usize).min(bytes.len());
        gpu.queue.write_buffer(buf, 0, &bytes[at..end]);
    }
}

/// A host-readable buffer for reading back `bytes` (rounded up to 16, as storage is).
fn staging(gpu: &Gpu, bytes: usize) -> wgpu::Buffer {
    gpu.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("readback"),
        size: (bytes.max(4) as u64).div_ceil(16) * 16,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    })
}

/// What `download` reads: a device buffer (its parts), the staging buffer it is copied to,
/// and how many bytes of it are wanted.
type Read<'a> = (Vec<&'a wgpu::Buffer>, &'a wgpu::Buffer, usize);

/// Copies the first `bytes` of each `(parts, staging buffer, bytes)` to the host, with one
/// submission and one blocking wait on that submission. The maps are requested before the
/// submit (`map_buffer_on_submit`), so the wait covers the kernels, the copies and the maps
/// at once and nothing waits in a second round trip.
fn download(gpu: &Gpu, bufs: &[Read], mut encoder: wgpu::CommandEncoder) -> Result<Vec<Vec<u8>>> {
    for (parts, s, _) in bufs {
        let mut at = 0;
        for b in parts {
            let n = b.size().min(s.size() - at);
            if n == 0 {
                break;
            }
            encoder.copy_buffer_to_buffer(b, 0, s, at, n);
            at += n;
        }
        encoder.map_buffer_on_submit(s, wgpu::MapMode::Read, .., |_| {});
    }
    let index = gpu.queue.submit([encoder.finish()]);
    gpu.device
        .poll(wgpu::PollType::Wait {
            submission_index: Some(index),
            timeout: None,
        })
        .map_err(|e| gpu_error("waiting for the device", e))?;
    bufs.iter()
        .map(|(_, s, n)| {
            let v = s
                .get_mapped_range(..)
                .map_err(|e| gpu_error("reading back", e))?[..*n]
                .to_vec();
            s.unmap();
            Ok(v)
        })
        .collect()
}

/// A named state buffer: storage dtype, shape, device buffer.
struct StateBuf {
    io: IoTensor,
    buf: Store,
}

/// The wgpu backend's device state: named device buffers (the KV cache).
pub struct WgpuState {
    gpu: Arc<Gpu>,
    bufs: HashMap<String, StateBuf>,
    /// Unique per state, and bumped whenever a buffer is added: an executable's bind groups
    /// made for one (id, generation) stay valid while it is unchanged.
    id: u64,
    generation: u64,
}

/// Ids of the states made so far.
static STATES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl WgpuState {
    fn ensure(&mut self, io: &IoTensor) -> Result<&Store> {
        if !self.bufs.contains_key(&io.name) {
            let buf = storage(&self.gpu, io_bytes(io), &format!("state '{}'", io.name))?;
            self.generation += 1;
            self.bufs.insert(
                io.name.clone(),
                StateBuf {
                    io: io.clone(),
                    buf,
                },
            );
        }
        let s = &self.bufs[&io.name];
        check_shared_state(io, s.io.storage, &s.io.shape)?;
        Ok(&s.buf)
    }
}

impl DeviceState for WgpuState {
    fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = self.bufs.keys().cloned().collect();
        v.sort();
        v
    }
    fn read(&self, name: &str) -> Result<HostTensor> {
        let s = self.bufs.get(name).ok_or_else(|| missing_state(name))?;
        let enc = self.gpu.device.create_command_encoder(&Default::default());
        let n = io_bytes(&s.io);
        let read = staging(&self.gpu, s.buf.size() as usize);
        let bytes =
            download(&self.gpu, &[(s.buf.parts.iter().collect(), &read, n)], enc)?.remove(0);
        HostTensor::new(s.io.storage, s.io.shape.clone(), bytes)
    }
    fn write(&mut self, name: &str, value: &HostTensor) -> Result<()> {
        let s = self.bufs.get(name).ok_or_else(|| missing_state(name))?;
        check_state_write(name, &s.io.shape, value)?;
        let mut bytes = vec![0u8; io_bytes(&s.io)];
        cast_bytes(value.bytes(), value.dtype(), &mut bytes, s.io.storage)?;
        upload(&self.gpu, &s.buf, &bytes);
        Ok(())
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// Which buffer a binding lives in. Outputs that donate an input are that input's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Buf {
    Input(usize),
    Output(usize),
    Weight(usize),
    Const(usize),
    Arena,
}

/// A compiled step: its bind group layout, what each binding is (a part of a program buffer,
/// or the step's scratch), and its dispatches (pipeline and workgroup grid), in order.
/// Makes a step's shader from its operands, their buffers and layouts, and the adapter's caps.
type ShaderFn<'a> = dyn Fn(
        &[wgsl::Operand],
        &[(usize, bool)],
        &dyn Fn(usize) -> wgsl::Layout,
        wgsl::Caps,
    ) -> std::result::Result<wgsl::Shader, String>
    + 'a;

/// Per step, its bind group (None where a group launched at an earlier step runs it).
type BindGroups = Vec<Option<wgpu::BindGroup>>;

struct StepPipe {
    layout: wgpu::BindGroupLayout,
    bindings: Vec<(Option<Buf>, u32)>,
    scratch: Option<wgpu::Buffer>,
    passes: Vec<(wgpu::ComputePipeline, (u32, u32))>,
}

pub struct WgpuExecutable {
    gpu: Arc<Gpu>,
    program: Program,
    plan: IoPlan,
    inputs: Vec<Option<Store>>,
    outputs: Vec<Option<Store>>,
    /// Where each non-donating output is read back (made once, reused every run).
    readback: Vec<Option<wgpu::Buffer>>,
    weights: Vec<Arc<Store>>,
    consts: Vec<Store>,
    arena: Store,
    /// Per program step: its pipeline, or None for a step a group launched at an earlier
    /// step runs.
    steps: Vec<Option<StepPipe>>,
    /// While profiling: timestamps at every step's pass boundaries, where they resolve, and
    /// where that is read back.
    queries: Option<(wgpu::QuerySet, wgpu::Buffer, wgpu::Buffer)>,
    /// The bind groups of the last run and the state (id, generation) they were made for.
    groups: Option<((u64, u64), BindGroups)>,
    step_ms: StepTimes,
}

/// At most this many steps are timed (two timestamps each, one query set).
const MAX_TIMED_STEPS: usize = 2048;

impl WgpuExecutable {
    pub fn new(
        gpu: Arc<Gpu>,
        program: &Program,
        weights: &dyn WeightSource,
        cache: &mut WeightCache,
    ) -> Result<WgpuExecutable> {
        let plan = prepare::check(program, weights, MAX_RANK)?;
        let program = program.clone();
        let inputs = program
            .inputs
            .iter()
            .zip(&plan.state_input)
            .map(|(io, &state)| {
                (!state)
                    .then(|| storage(&gpu, io_bytes(io), &format!("input '{}'", io.name)))
                    .transpose()
            })
            .collect::<Result<_>>()?;
        let outputs = program
            .outputs
            .iter()
            .zip(&plan.donates)
            .map(|(io, d)| {
                d.is_none()
                    .then(|| storage(&gpu, io_bytes(io), &format!("output '{}'", io.name)))
                    .transpose()
            })
            .collect::<Result<_>>()?;
        let readback = program
            .outputs
            .iter()
            .zip(&plan.donates)
            .zip(&outputs)
            .map(|((io, d), buf): (_, &Option<Store>)| {
                d.is_none().then(|| {
                    staging(
                        &gpu,
                        buf.as_ref().map_or(io_bytes(io), |b| b.size() as usize),
                    )
                })
            })
            .collect();
        let weights = prepare::weights(&program, weights, cache, |name, host| {
            let buf = storage(&gpu, host.bytes().len(), &format!("weight '{name}'"))?;
            upload(&gpu, &buf, host.bytes());
            Ok(buf)
        })?;
        let consts = program
            .constants
            .iter()
            .map(|c| {
                let bytes = prepare::constant_bytes(c)?;
                let buf = storage(&gpu, bytes.len(), &format!("constant '{}'", c.name))?;
                upload(&gpu, &buf, &bytes);
                Ok(buf)
            })
            .collect::<Result<_>>()?;
        let arena = storage(
            &gpu,
            usize::try_from(program.arena_bytes).unwrap_or(usize::MAX),
            "the arena",
        )?;
        let mut exe = WgpuExecutable {
            gpu,
            program,
            plan,
            inputs,
            outputs,
            readback,
            weights,
            consts,
            arena,
            steps: Vec::new(),
            queries: None,
            groups: None,
            step_ms: StepTimes::default(),
        };
        // A layer's RoPE and KV-cache steps run as one dispatch at the group's first step;
        // the others hold none.
        let n = exe.program.steps.len();
        let mut i = 0;
        while i < n {
            let steps = &exe.program.steps;
            match rope_cache(&steps[i..]) {
                Some(g) => {
                    let step = wgsl::rope_cache::combined(&g);
                    let pipe = exe.compile_step(i, &step, &|ops, bufs, lay, _| {
                        wgsl::rope_cache_shader(&g, ops, bufs, lay)
                    })?;
                    exe.steps.push(Some(pipe));
                    exe.steps.extend((1..g.len()).map(|_| None));
                    i += g.len();
                }
                None => {
                    let pipe = exe.compile_step(i, &steps[i], &|ops, bufs, lay, caps| {
                        wgsl::shader(&steps[i], ops, bufs, lay, caps)
                    })?;
                    exe.steps.push(Some(pipe));
                    i += 1;
                }
            }
        }
        Ok(exe)
    }

    fn buf_of(&self, b: &Binding) -> Buf {
        match b.slot {
            Slot::Input(i) => Buf::Input(i as usize),
            Slot::Output(o) => match self.plan.donates[o as usize] {
                Some(i) => Buf::Input(i),
                None => Buf::Output(o as usize),
            },
            Slot::Weight(w) => Buf::Weight(w as usize),
            Slot::Const(c) => Buf::Const(c as usize),
            Slot::Arena => Buf::Arena,
        }
    }

    /// The pipeline of program step `i` (or of the group starting there, `step` being the
    /// group's combined step), its shader from `make`.
    fn compile_step(&self, i: usize, step: &Step, make: &ShaderFn) -> Result<StepPipe> {
        let kind = self.program.steps[i].kernel.kind();
        let mut ids: Vec<Buf> = Vec::new();
        let (ops, buffers) = wgsl::operands(step, |b| {
            let buf = self.buf_of(b);
            match ids.iter().position(|x| *x == buf) {
                Some(p) => p,
                None => {
                    ids.push(buf);
                    ids.len() - 1
                }
            }
        });
        let layout_of = |id: usize| self.layout_of(ids[id]);
        let caps = wgsl::Caps {
            workgroup_bytes: self.gpu.limits.max_compute_workgroup_storage_size,
        };
        let shader = make(&ops, &buffers, &layout_of, caps)
            .map_err(|m| step_error(i, &step.origin, kind, m))?;
        let max_bindings = self.gpu.limits.max_storage_buffers_per_shader_stage as usize;
        if shader.bindings.len() > max_bindings {
            return Err(step_error(
                i,
                &step.origin,
                kind,
                format!(
                    "{} storage bindings (large tensors bind in parts of {} bytes), more than the {} {} allows",
                    shader.bindings.len(),
                    self.gpu.max_binding,
                    max_bindings,
                    self.gpu.info.name
                ),
            ));
        }
        let device = &self.gpu.device;
        let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some(&step.origin),
            source: wgpu::ShaderSource::Wgsl(shader.source.as_str().into()),
        });
        let entries: Vec<wgpu::BindGroupLayoutEntry> = (0..shader.bindings.len() as u32)
            .map(|b| wgpu::BindGroupLayoutEntry {
                binding: b,
                visibility: wgpu::ShaderStages::COMPUTE,
                ty: wgpu::BindingType::Buffer {
                    ty: wgpu::BufferBindingType::Storage { read_only: false },
                    has_dynamic_offset: false,
                    min_binding_size: None,
                },
                count: None,
            })
            .collect();
        let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: None,
            entries: &entries,
        });
        let pl = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: None,
            bind_group_layouts: &[Some(&layout)],
            immediate_size: 0,
        });
        let pipelines: Vec<wgpu::ComputePipeline> = shader
            .passes
            .iter()
            .map(|p| {
                device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                    label: Some(&step.origin),
                    layout: Some(&pl),
                    module: &module,
                    entry_point: Some(p.entry),
                    compilation_options: Default::default(),
                    cache: None,
                })
            })
            .collect();
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(step_error(
                i,
                &step.origin,
                kind,
                format!("the generated WGSL was refused: {e}"),
            ));
        }
        let mut passes = Vec::new();
        for (pipeline, pass) in pipelines.into_iter().zip(&shader.passes) {
            let groups = if pass.lanes > 1 {
                pass.items.max(1)
            } else {
                pass.items.div_ceil(u64::from(WORKGROUP)).max(1)
            };
            let max = u64::from(self.gpu.limits.max_compute_workgroups_per_dimension);
            let x = groups.min(max);
            let y = groups.div_ceil(x);
            if y > max {
                return Err(step_error(
                    i,
                    &step.origin,
                    kind,
                    format!("{} work items do not fit one dispatch", pass.items),
                ));
            }
            passes.push((pipeline, (x as u32, y as u32)));
        }
        let scratch = (shader.scratch_bytes > 0)
            .then(|| {
                storage(
                    &self.gpu,
                    shader.scratch_bytes as usize,
                    "attention scratch",
                )
            })
            .transpose()?;
        if scratch.as_ref().is_some_and(|s| s.parts.len() > 1) {
            return Err(step_error(
                i,
                &step.origin,
                kind,
                format!(
                    "{} bytes of scratch, more than one binding",
                    shader.scratch_bytes
                ),
            ));
        }
        let bindings = shader
            .bindings
            .iter()
            .map(|b| match b {
                wgsl::Bind::Part { buffer, part } => (Some(ids[buffers[*buffer].0]), *part),
                wgsl::Bind::Scratch => (None, 0),
            })
            .collect();
        Ok(StepPipe {
            layout,
            bindings,
            scratch: scratch.and_then(|s| s.parts.into_iter().next()),
            passes,
        })
    }

    /// How `b`'s buffer is laid out in parts. State buffers are made at the first run; their
    /// size is known from the program, so their layout is too.
    fn layout_of(&self, b: Buf) -> wgsl::Layout {
        let bytes = match b {
            Buf::Input(i) => match &self.inputs[i] {
                Some(s) => return s.layout(),
                None => io_bytes(&self.program.inputs[i]),
            },
            Buf::Output(o) => {
                return self.outputs[o]
                    .as_ref()
                    .map_or(wgsl::Layout::WHOLE, Store::layout)
            }
            Buf::Weight(w) => return self.weights[w].layout(),
            Buf::Const(c) => return self.consts[c].layout(),
            Buf::Arena => return self.arena.layout(),
        };
        let size = (bytes.max(4) as u64).div_ceil(16) * 16;
        if size <= self.gpu.max_binding {
            wgsl::Layout::WHOLE
        } else {
            wgsl::Layout {
                parts: size.div_ceil(self.gpu.max_binding) as u32,
                part_words: self.gpu.max_binding / 4,
            }
        }
    }

    /// Every step's bind group over this executable's buffers and `state`'s.
    fn bind_groups(&self, state: &WgpuState) -> BindGroups {
        self.steps
            .iter()
            .map(|s| {
                let s = s.as_ref()?;
                let entries: Vec<wgpu::BindGroupEntry> = s
                    .bindings
                    .iter()
                    .enumerate()
                    .map(|(j, (b, part))| {
                        let buf = match b {
                            Some(b) => &self.buffer(*b, state).parts[*part as usize],
                            None => s.scratch.as_ref().expect("a step with scratch made it"),
                        };
                        wgpu::BindGroupEntry {
                            binding: j as u32,
                            resource: buf.as_entire_binding(),
                        }
                    })
                    .collect();
                Some(
                    self.gpu
                        .device
                        .create_bind_group(&wgpu::BindGroupDescriptor {
                            label: None,
                            layout: &s.layout,
                            entries: &entries,
                        }),
                )
            })
            .collect()
    }

    fn buffer<'a>(&'a self, b: Buf, state: &'a WgpuState) -> &'a Store {
        match b {
            Buf::Input(i) => match &self.inputs[i] {
                Some(buf) => buf,
                None => &state.bufs[&self.program.inputs[i].name].buf,
            },
            Buf::Output(o) => self.outputs[o]
                .as_ref()
                .expect("a non-donating output has a buffer"),
            Buf::Weight(w) => &self.weights[w],
            Buf::Const(c) => &self.consts[c],
            Buf::Arena => &self.arena,
        }
    }
}

impl Executable for WgpuExecutable {
    fn program(&self) -> &Program {
        &self.program
    }

    /// Step times come from timestamp queries at each step's compute pass (each step then runs
    /// in a pass of its own); an adapter without them reports none.
    fn set_profiling(&mut self, on: bool) {
        let n = self.steps.len().min(MAX_TIMED_STEPS);
        self.queries = (on && self.gpu.timestamps && n > 0).then(|| {
            let set = self.gpu.device.create_query_set(&wgpu::QuerySetDescriptor {
                label: Some("step times"),
                ty: wgpu::QueryType::Timestamp,
                count: 2 * n as u32,
            });
            let resolve = self.gpu.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("step times"),
                size: 16 * n as u64,
                usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: false,
            });
            let read = staging(&self.gpu, resolve.size() as usize);
            (set, resolve, read)
        });
        self.step_ms
            .set(self.queries.is_some(), self.program.steps.len());
    }

    fn profile(&self) -> Vec<StepTime> {
        self.step_ms.report(&self.program)
    }

    fn new_state(&self) -> Box<dyn DeviceState> {
        Box::new(WgpuState {
            gpu: self.gpu.clone(),
            bufs: HashMap::new(),
            id: STATES.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            generation: 0,
        })
    }

    fn run(
        &mut self,
        inputs: &[(&str, &HostTensor)],
        state: &mut dyn DeviceState,
    ) -> Result<Vec<(String, HostTensor)>> {
        let state = downcast_state::<WgpuState>(state)?;
        let mut provided = vec![false; self.program.inputs.len()];
        for (name, t) in inputs {
            let (i, io) = match_input(&self.program, name, t)?;
            let mut bytes = vec![0u8; io_bytes(io)];
            cast_bytes(t.bytes(), t.dtype(), &mut bytes, io.storage).map_err(|e| {
                RuntimeError::Tensor {
                    name: io.name.clone(),
                    message: e.to_string(),
                }
            })?;
            let buf = match &self.inputs[i] {
                Some(b) => b,
                None => state.ensure(io)?,
            };
            upload(&self.gpu, buf, &bytes);
            provided[i] = true;
        }
        for (i, io) in self.program.inputs.iter().enumerate() {
            if self.plan.state_input[i] {
                state.ensure(io)?;
            } else if !provided[i] {
                return Err(RuntimeError::MissingInput {
                    name: io.name.clone(),
                    dtype: io.dtype,
                    shape: io.shape.clone(),
                });
            }
        }
        let device = &self.gpu.device;
        let key = (state.id, state.generation);
        if self.groups.as_ref().is_none_or(|(k, _)| *k != key) {
            let groups = self.bind_groups(state);
            self.groups = Some((key, groups));
        }
        let groups = &self.groups.as_ref().expect("made above").1;
        let mut encoder = device.create_command_encoder(&Default::default());
        match &self.queries {
            None => {
                // The first eighth of the steps goes to the GPU while the rest is recorded
                // (a decode step's ~230 dispatches take a fraction of a millisecond to record).
                let n = self.steps.len();
                let split = n / 8;
                let record = |encoder: &mut wgpu::CommandEncoder, range: std::ops::Range<usize>| {
                    let mut pass = encoder.begin_compute_pass(&Default::default());
                    for (s, g) in self.steps[range.clone()].iter().zip(&groups[range]) {
                        let (Some(s), Some(g)) = (s, g) else { continue };
                        pass.set_bind_group(0, g, &[]);
                        for (pipeline, (x, y)) in &s.passes {
                            pass.set_pipeline(pipeline);
                            pass.dispatch_workgroups(*x, *y, 1);
                        }
                    }
                };
                if split > 0 {
                    let mut head = device.create_command_encoder(&Default::default());
                    record(&mut head, 0..split);
                    self.gpu.queue.submit([head.finish()]);
                }
                record(&mut encoder, split..n);
            }
            Some((set, resolve, _)) => {
                let timed = self.steps.len().min(MAX_TIMED_STEPS);
                for (i, (s, g)) in self.steps.iter().zip(groups).enumerate() {
                    let writes = (i < timed).then(|| wgpu::ComputePassTimestampWrites {
                        query_set: set,
                        beginning_of_pass_write_index: Some(2 * i as u32),
                        end_of_pass_write_index: Some(2 * i as u32 + 1),
                    });
                    let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                        label: None,
                        timestamp_writes: writes,
                    });
                    let (Some(s), Some(g)) = (s, g) else { continue };
                    pass.set_bind_group(0, g, &[]);
                    for (pipeline, (x, y)) in &s.passes {
                        pass.set_pipeline(pipeline);
                        pass.dispatch_workgroups(*x, *y, 1);
                    }
                }
                encoder.resolve_query_set(set, 0..2 * timed as u32, resolve, 0);
            }
        }
        let plain: Vec<(usize, &Store, &wgpu::Buffer)> = self
            .outputs
            .iter()
            .zip(&self.readback)
            .enumerate()
            .filter_map(|(o, (b, r))| Some((o, b.as_ref()?, r.as_ref()?)))
            .collect();
        let mut reads: Vec<Read> = plain
            .iter()
            .map(|(o, b, r)| {
                (
                    b.parts.iter().collect(),
                    *r,
                    io_bytes(&self.program.outputs[*o]),
                )
            })
            .collect();
        if let Some((_, resolve, read)) = &self.queries {
            reads.push((vec![resolve], read, resolve.size() as usize));
        }
        let mut bytes = download(&self.gpu, &reads, encoder)?;
        if self.queries.is_some() {
            let ticks = bytes.pop().unwrap_or_default();
            let period_ns = f64::from(self.gpu.queue.get_timestamp_period());
            for (i, pair) in ticks.chunks_exact(16).enumerate() {
                let at = |k: usize| u64::from_le_bytes(pair[k..k + 8].try_into().unwrap_or([0; 8]));
                let ms = at(8).saturating_sub(at(0)) as f64 * period_ns / 1e6;
                self.step_ms.add(i, ms);
            }
        }
        plain
            .iter()
            .zip(bytes)
            .map(|((o, _, _), b)| {
                let io = &self.program.outputs[*o];
                Ok((io.name.clone(), prepare::output_tensor(io, &b)?))
            })
            .collect()
    }
}

/// Prepared executables share weight buffers through this cache.
pub type WeightCache = HashMap<String, Weak<Store>>;
