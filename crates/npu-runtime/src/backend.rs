//! The backend interface: a [`Backend`] prepares a [`Program`] once (allocation, weight
//! upload, kernel setup); the resulting [`Executable`] runs it many times.
//!
//! Device-resident state: an input that a program output donates (`donates_input`, the KV
//! cache) lives in a [`DeviceState`], a set of named device buffers owned by the caller and
//! passed to every run. Two executables (prefill and decode) that name the same state
//! inputs share those buffers by passing the same `DeviceState`; the program updates them
//! in place and they never travel to the host unless read with [`DeviceState::read`].

use crate::error::{Result, RuntimeError};
use crate::tensor::HostTensor;
use crate::weights::WeightSource;
use npu_program::program::IoTensor;
use npu_program::Program;
use std::any::Any;

/// Named device buffers that persist between runs (the KV cache).
pub trait DeviceState: Any + Send {
    /// Names of the buffers allocated so far.
    fn names(&self) -> Vec<String>;
    /// A copy of a buffer on the host, in its storage dtype.
    fn read(&self, name: &str) -> Result<HostTensor>;
    /// Replaces a buffer's content (same shape; converts the dtype).
    fn write(&mut self, name: &str, value: &HostTensor) -> Result<()>;
    fn as_any(&self) -> &dyn Any;
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

/// The error for reading or writing a state buffer no run has created yet.
pub fn missing_state(name: &str) -> RuntimeError {
    RuntimeError::State {
        name: name.into(),
        message: "no such state buffer (run a program that creates it first)".into(),
    }
}

/// Checks that a state buffer shared between executables, stored as `dtype` with `shape`, is
/// the one program input `io` declares (a prefill and a decode program must agree on it).
pub fn check_shared_state(io: &IoTensor, dtype: npu_ir::DType, shape: &[usize]) -> Result<()> {
    if dtype != io.storage || shape != io.shape.as_slice() {
        return Err(RuntimeError::State {
            name: io.name.clone(),
            message: format!(
                "the shared buffer is {dtype}{shape:?}, this program needs {}{:?}",
                io.storage, io.shape
            ),
        });
    }
    Ok(())
}

/// Checks a value written into the state buffer `name` of `shape` ([`DeviceState::write`]).
pub fn check_state_write(name: &str, shape: &[usize], value: &HostTensor) -> Result<()> {
    if value.shape() != shape {
        return Err(RuntimeError::State {
            name: name.into(),
            message: format!("expected shape {shape:?}, got {:?}", value.shape()),
        });
    }
    Ok(())
}

/// Accumulated wall time of one program step over the profiled runs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepTime {
    pub step: usize,
    pub kernel: &'static str,
    pub origin: String,
    pub total_ms: f64,
    pub runs: usize,
}

/// Per-step times accumulated while profiling is on: what every backend's
/// [`Executable::set_profiling`] / [`Executable::profile`] keep. Empty (and free) when off.
#[derive(Debug, Clone, Default)]
pub struct StepTimes {
    per_step: Vec<(f64, usize)>,
}

impl StepTimes {
    /// Starts timing `steps` steps from zero, or stops.
    pub fn set(&mut self, on: bool, steps: usize) {
        self.per_step = if on {
            vec![(0.0, 0); steps]
        } else {
            Vec::new()
        };
    }

    pub fn is_on(&self) -> bool {
        !self.per_step.is_empty()
    }

    /// Adds one run of `step` (ignored when off).
    pub fn add(&mut self, step: usize, ms: f64) {
        if let Some(e) = self.per_step.get_mut(step) {
            e.0 += ms;
            e.1 += 1;
        }
    }

    /// The accumulated times, one entry per step of `program`.
    pub fn report(&self, program: &Program) -> Vec<StepTime> {
        self.per_step
            .iter()
            .zip(&program.steps)
            .enumerate()
            .map(|(i, (&(total_ms, runs), s))| StepTime {
                step: i,
                kernel: s.kernel.kind(),
                origin: s.origin.clone(),
                total_ms,
                runs,
            })
            .collect()
    }
}

/// The backend's own state type behind `state`, or an error when the state was made by
/// another backend.
pub fn downcast_state<T: DeviceState>(state: &mut dyn DeviceState) -> Result<&mut T> {
    state
        .as_any_mut()
        .downcast_mut::<T>()
        .ok_or_else(|| RuntimeError::State {
            name: String::new(),
            message: "the state belongs to another backend".into(),
        })
}

/// Finds the program input called `name` and checks `t` against it: same shape, and the
/// input's dtype or its storage dtype. Returns the input's index.
pub fn match_input<'p>(
    program: &'p Program,
    name: &str,
    t: &HostTensor,
) -> Result<(usize, &'p IoTensor)> {
    let i = program
        .inputs
        .iter()
        .position(|x| x.name == name)
        .ok_or_else(|| RuntimeError::UnknownInput {
            name: name.to_string(),
            known: program
                .inputs
                .iter()
                .map(|x| x.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        })?;
    let io = &program.inputs[i];
    let dtype_ok = t.dtype() == io.dtype || t.dtype() == io.storage;
    if t.shape() != io.shape.as_slice() || !dtype_ok {
        return Err(RuntimeError::InputMismatch {
            name: io.name.clone(),
            expected_shape: io.shape.clone(),
            expected_dtype: io.dtype,
            found_shape: t.shape().to_vec(),
            found_dtype: t.dtype(),
        });
    }
    Ok((i, io))
}

/// A prepared program.
pub trait Executable: Send {
    fn program(&self) -> &Program;

    /// Starts (or stops) timing every step of later runs; off by default, so the hot path
    /// pays nothing. Backends without step timing ignore it.
    fn set_profiling(&mut self, _on: bool) {}

    /// Per-step times of the runs made while profiling was on (empty if never on).
    fn profile(&self) -> Vec<StepTime> {
        Vec::new()
    }

    /// Empty state for this backend; buffers are created (zeroed) by the first run that
    /// needs them, or by an explicit state input.
    fn new_state(&self) -> Box<dyn DeviceState>;

    /// Runs the program. `inputs` are keyed by graph input name, in the input's dtype (or
    /// its storage dtype). State inputs may be omitted (they keep their device content) or
    /// given (uploaded first). Returns every output that is not state, in program order, in
    /// the output's dtype.
    fn run(
        &mut self,
        inputs: &[(&str, &HostTensor)],
        state: &mut dyn DeviceState,
    ) -> Result<Vec<(String, HostTensor)>>;

    /// Runs with a fresh state and returns every output, state outputs included.
    fn run_all(&mut self, inputs: &[(&str, &HostTensor)]) -> Result<Vec<(String, HostTensor)>> {
        let mut state = self.new_state();
        let plain = self.run(inputs, state.as_mut())?;
        let p = self.program();
        let mut plain = plain.into_iter();
        let mut out = Vec::with_capacity(p.outputs.len());
        for o in &p.outputs {
            match o.donates_input {
                Some(i) => {
                    let name = &p.inputs[i as usize].name;
                    let t = state.read(name)?.cast(o.dtype)?;
                    out.push((o.name.clone(), t));
                }
                None => out.extend(plain.next()),
            }
        }
        Ok(out)
    }
}

/// A device that runs programs.
pub trait Backend {
    fn name(&self) -> &'static str;
    fn prepare(&self, program: &Program, weights: &dyn WeightSource)
        -> Result<Box<dyn Executable>>;
    /// Wall time of the backend's start-up phases so far (name, ms), in order; empty for a
    /// backend with nothing worth reporting.
    fn startup(&self) -> Vec<(&'static str, f64)> {
        Vec::new()
    }
}
