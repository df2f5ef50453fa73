//! `npu run`: execute a compiled program on a backend with safetensors inputs/outputs.

use crate::backends::backend_by_name;
use anyhow::{bail, Context, Result};
use npu_compiler::npubin;
use npu_runtime::{
    read_safetensors, safetensors_bytes, HostTensor, MemoryWeights, SafetensorsFile, WeightSource,
};
use std::path::{Path, PathBuf};
use std::time::Instant;

pub struct RunArgs {
    pub program: PathBuf,
    pub weights: Option<PathBuf>,
    pub inputs: Option<PathBuf>,
    pub outputs: Option<PathBuf>,
    pub backend: String,
    pub repeat: usize,
    pub profile: bool,
}

/// Opens the weight file, or an empty source for programs that read none.
pub fn open_weights(path: Option<&Path>) -> Result<Box<dyn WeightSource>> {
    Ok(match path {
        Some(p) => Box::new(SafetensorsFile::open(p)?),
        None => Box::new(MemoryWeights::default()),
    })
}

pub fn run(a: RunArgs) -> Result<()> {
    let program = npubin::load(&a.program)?;
    if a.weights.is_none() && !program.sources.is_empty() {
        bail!(
            "{} reads {} weight tensors: pass --weights FILE.safetensors",
            a.program.display(),
            program.sources.len()
        );
    }
    let weights = open_weights(a.weights.as_deref())?;
    let backend = backend_by_name(&a.backend)?;
    let t = Instant::now();
    let mut exe = backend
        .prepare(&program, weights.as_ref())
        .with_context(|| format!("cannot prepare {}", a.program.display()))?;
    let prepare_ms = t.elapsed().as_secs_f64() * 1e3;
    exe.set_profiling(a.profile);
    let file: Vec<(String, HostTensor)> = match &a.inputs {
        Some(p) => read_safetensors(p)?,
        None => Vec::new(),
    };
    let mut inputs: Vec<(&str, &HostTensor)> = Vec::new();
    for i in &program.inputs {
        match find_input(&file, &i.name) {
            Some(t) => inputs.push((i.name.as_str(), t)),
            None if i.donates_input.is_none() && !is_state(&program, &i.name) => {
                let have: Vec<&str> = file.iter().map(|(k, _)| k.as_str()).collect();
                bail!(
                    "input '{}' {}{:?} is not in {} (it holds: {})",
                    i.name,
                    i.dtype,
                    i.shape,
                    a.inputs
                        .as_ref()
                        .map_or("the inputs".into(), |p| p.display().to_string()),
                    if have.is_empty() {
                        "nothing".into()
                    } else {
                        have.join(", ")
                    }
                );
            }
            None => {}
        }
    }
    let mut state = exe.new_state();
    let mut times = Vec::new();
    let mut outs = Vec::new();
    for _ in 0..a.repeat.max(1) {
        let t = Instant::now();
        outs = exe.run(&inputs, state.as_mut())?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    // State outputs come from the device state (read once, at the end).
    let mut all = Vec::new();
    let mut plain = outs.into_iter();
    for o in &program.outputs {
        match o.donates_input {
            Some(i) => {
                let name = &program.inputs[i as usize].name;
                all.push((o.name.clone(), state.read(name)?.cast(o.dtype)?));
            }
            None => all.extend(plain.next()),
        }
    }
    if let Some(p) = &a.outputs {
        crate::out::write_file(p, &safetensors_bytes(&all)?)?;
    }
    report(&a, "", prepare_ms, &times, &all);
    if a.profile {
        crate::profile::print_startup(backend.as_ref());
        crate::profile::print(&a.program.display().to_string(), &exe.profile(), 10);
    }
    Ok(())
}

/// Prints the timing line (median, min and first of `times`), the outputs and where they went.
pub fn report(
    a: &RunArgs,
    what: &str,
    prepare_ms: f64,
    times: &[f64],
    outputs: &[(String, HostTensor)],
) {
    let mut sorted = times.to_vec();
    sorted.sort_by(|a, b| a.total_cmp(b));
    say!(
        "ran {} on {}{what}: prepare {:.1} ms; {} run(s): median {:.3} ms, min {:.3} ms, first {:.3} ms",
        a.program.display(),
        a.backend,
        prepare_ms,
        times.len(),
        sorted[sorted.len() / 2],
        sorted[0],
        times[0]
    );
    for (n, t) in outputs {
        say!("  output {n} {}{:?}", t.dtype(), t.shape());
    }
    if let Some(p) = &a.outputs {
        say!("wrote {}", p.display());
    }
}

/// The tensor for input `name` in an inputs file (also accepted as `input.NAME`, the
/// export tool's reference-file spelling).
pub fn find_input<'a>(file: &'a [(String, HostTensor)], name: &str) -> Option<&'a HostTensor> {
    let alt = format!("input.{name}");
    file.iter()
        .find(|(k, _)| k == name)
        .or_else(|| file.iter().find(|(k, _)| *k == alt))
        .map(|(_, t)| t)
}

fn is_state(p: &npu_compiler::Program, name: &str) -> bool {
    p.outputs
        .iter()
        .filter_map(|o| o.donates_input)
        .any(|i| p.inputs[i as usize].name == name)
}
