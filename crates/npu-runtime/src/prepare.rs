//! Preparing a program, the part every backend shares: validation against the kernel
//! contracts and the backend's limits, which outputs alias which state inputs, load-time
//! weights shared between executables through a cache, constants as bytes, and outputs back
//! as host tensors. A backend's executable keeps only allocation, upload and launch.
//!
//! Invariant: a program that passes [`check`] satisfies every kernel's contract
//! (`Kernel::check`), fits the memory limit, and names only source tensors the weight source
//! holds with the declared shapes, so backends allocate and launch without re-checking.

use crate::error::{Result, RuntimeError};
use crate::tensor::{cast_bytes, store_f32, store_i64, HostTensor};
use crate::weights::{check_sources, weight_bytes, WeightBytes, WeightSource};
use npu_program::program::{ConstSlot, ConstValues, IoTensor};
use npu_program::Program;
use std::collections::HashMap;
use std::sync::{Arc, Weak};

fn invalid(msg: String) -> RuntimeError {
    RuntimeError::InvalidProgram(msg)
}

/// How a program's inputs and outputs map to buffers: an output that donates an input
/// (the KV cache updated in place) has no buffer of its own, and that input is state,
/// kept by the backend between runs instead of uploaded.
#[derive(Clone, Debug)]
pub struct IoPlan {
    /// For each output, the input it aliases.
    pub donates: Vec<Option<usize>>,
    /// For each input, whether it is state (aliased by an output).
    pub state_input: Vec<bool>,
}

/// Checks `program` for a backend whose kernels take operands of at most `max_rank` dims,
/// before anything is allocated: the kernel contracts, the rank, offsets aligned to their
/// dtype, the memory limit, the donations, and the weight source's tensors.
pub fn check(program: &Program, weights: &dyn WeightSource, max_rank: usize) -> Result<IoPlan> {
    program.validate().map_err(invalid)?;
    for (i, s) in program.steps.iter().enumerate() {
        for b in s.inputs.iter().chain(&s.outputs) {
            if b.shape.len() > max_rank {
                return Err(invalid(format!(
                    "step {i} ({}): rank {} > {max_rank}",
                    s.origin,
                    b.shape.len()
                )));
            }
            if (b.byte_offset as usize).rem_euclid(b.dtype.size_bytes()) != 0 {
                return Err(invalid(format!(
                    "step {i} ({}): byte offset {} is not aligned to {}",
                    s.origin, b.byte_offset, b.dtype
                )));
            }
        }
    }
    let plan = io_plan(program)?;
    crate::limits::check_program(program)?;
    check_sources(program, weights)?;
    Ok(plan)
}

fn io_plan(program: &Program) -> Result<IoPlan> {
    let mut donates = vec![None; program.outputs.len()];
    let mut state_input = vec![false; program.inputs.len()];
    for (oi, o) in program.outputs.iter().enumerate() {
        let Some(i) = o.donates_input else { continue };
        let inp = program.inputs.get(i as usize).ok_or_else(|| {
            invalid(format!(
                "output '{}' donates input {i}, which does not exist",
                o.name
            ))
        })?;
        if inp.shape != o.shape || inp.storage != o.storage {
            return Err(invalid(format!(
                "output '{}' {}{:?} donates input '{}' {}{:?} of another shape or dtype",
                o.name, o.storage, o.shape, inp.name, inp.storage, inp.shape
            )));
        }
        donates[oi] = Some(i as usize);
        state_input[i as usize] = true;
    }
    Ok(IoPlan {
        donates,
        state_input,
    })
}

/// Bytes of an input or output in its storage dtype.
pub fn io_bytes(t: &IoTensor) -> usize {
    t.shape.iter().product::<usize>() * t.storage.size_bytes()
}

/// Every weight slot of `program` as a backend buffer made by `make` from its bytes (the
/// mapped file's own where they already fit, see [`weight_bytes`]), reusing the buffers
/// `cache` still holds for the same source, recipe, dtype and shape (a prefill and a decode
/// program share one copy).
pub fn weights<B>(
    program: &Program,
    src: &dyn WeightSource,
    cache: &mut HashMap<String, Weak<B>>,
    mut make: impl FnMut(&str, WeightBytes) -> Result<B>,
) -> Result<Vec<Arc<B>>> {
    cache.retain(|_, w| w.strong_count() > 0);
    let source_name = src.describe();
    let mut built = Vec::with_capacity(program.weights.len());
    for (i, w) in program.weights.iter().enumerate() {
        let recipe = w
            .recipe
            .map(|s| Ok::<_, ()>(program.sources.get(s as usize).map(|t| t.key.clone())))
            .map_err(|_| invalid(format!("weight slot '{}': bad recipe", w.name)))?;
        let key = format!("{source_name}|{recipe:?}|{}|{:?}", w.dtype, w.shape);
        if let Some(buf) = cache.get(&key).and_then(Weak::upgrade) {
            built.push(buf);
            continue;
        }
        let buf = Arc::new(make(&w.name, weight_bytes(program, i, src)?)?);
        cache.insert(key, Arc::downgrade(&buf));
        built.push(buf);
    }
    Ok(built)
}

/// A constant's values stored in its dtype.
pub fn constant_bytes(c: &ConstSlot) -> Result<Vec<u8>> {
    let n: usize = c.shape.iter().product();
    let mut host =
        crate::limits::try_zeroed(n * c.dtype.size_bytes(), &format!("constant '{}'", c.name))?;
    match &c.values {
        ConstValues::Float(v) if v.len() == n => {
            for (i, &x) in v.iter().enumerate() {
                store_f32(&mut host, c.dtype, i, x);
            }
        }
        ConstValues::Int(v) if v.len() == n => {
            for (i, &x) in v.iter().enumerate() {
                store_i64(&mut host, c.dtype, i, x);
            }
        }
        _ => {
            return Err(invalid(format!(
                "constant '{}' {:?} carries the wrong number of values",
                c.name, c.shape
            )))
        }
    }
    Ok(host)
}

/// Output `o` as the caller sees it (its dtype) from its bytes in storage dtype.
pub fn output_tensor(o: &IoTensor, stored: &[u8]) -> Result<HostTensor> {
    let mut t = HostTensor::zeros(o.dtype, o.shape.clone());
    cast_bytes(stored, o.storage, t.bytes_mut(), o.dtype).map_err(|e| RuntimeError::Tensor {
        name: o.name.clone(),
        message: e.to_string(),
    })?;
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use npu_ir::DType;

    fn io(name: &str, shape: &[usize], donates: Option<u32>) -> IoTensor {
        IoTensor {
            name: name.into(),
            shape: shape.to_vec(),
            dtype: DType::F32,
            storage: DType::BF16,
            donates_input: donates,
        }
    }

    #[test]
    fn donations_make_state_and_must_match() {
        let mut p = Program {
            model_name: "m".into(),
            target: "npu".into(),
            compute_dtype: DType::BF16,
            inputs: vec![io("x", &[2], None), io("cache", &[4, 8], None)],
            outputs: vec![io("y", &[2], None), io("cache_out", &[4, 8], Some(1))],
            sources: vec![],
            weights: vec![],
            constants: vec![],
            arena_bytes: 0,
            steps: vec![],
        };
        let plan = io_plan(&p).unwrap();
        assert_eq!(plan.donates, vec![None, Some(1)]);
        assert_eq!(plan.state_input, vec![false, true]);
        p.outputs[1].shape = vec![4, 9];
        let e = io_plan(&p).unwrap_err().to_string();
        assert!(e.contains("another shape"), "{e}");
        p.outputs[1].donates_input = Some(7);
        assert!(io_plan(&p)
            .unwrap_err()
            .to_string()
            .contains("does not exist"));
    }

    #[test]
    fn constants_and_outputs_convert_once() {
        let c = ConstSlot {
            name: "c".into(),
            shape: vec![3],
            dtype: DType::BF16,
            values: ConstValues::Float(vec![1.0, -2.5, 0.5]),
        };
        let bytes = constant_bytes(&c).unwrap();
        let t = output_tensor(&io("c", &[3], None), &bytes).unwrap();
        assert_eq!(t.to_f32_vec(), vec![1.0, -2.5, 0.5]);
        let short = ConstSlot {
            values: ConstValues::Int(vec![1]),
            ..c
        };
        assert!(constant_bytes(&short).is_err());
    }
}
