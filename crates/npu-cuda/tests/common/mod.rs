//! Helpers shared by the CUDA backend's integration tests: bindings and IO tensors of one
//! dtype, seeded values, a program's run, the device or a SKIP line, and agreement with the
//! CPU backend.

use npu_cuda::{CudaBackend, CudaError};
use npu_ir::DType;
use npu_program::program::{Binding, IoTensor, Program, Slot};
use npu_runtime::{Backend, CpuBackend, HostTensor, MemoryWeights};

pub fn bind(slot: Slot, off: u64, shape: &[usize], strides: &[usize], dtype: DType) -> Binding {
    Binding {
        slot,
        byte_offset: off,
        shape: shape.to_vec(),
        strides: strides.to_vec(),
        dtype,
    }
}

pub fn io(name: &str, shape: &[usize], dtype: DType) -> IoTensor {
    IoTensor {
        name: name.into(),
        shape: shape.to_vec(),
        dtype,
        storage: dtype,
        donates_input: None,
    }
}

/// `n` values in [-scale / 2, scale / 2), the same for the same seed.
pub fn values(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * scale
        })
        .collect()
}

/// The outputs of `p`'s second run (the first is the warm-up; the second replays the graph).
pub fn run(b: &dyn Backend, p: &Program, ins: &[(&str, HostTensor)]) -> Vec<Vec<f32>> {
    let refs: Vec<(&str, &HostTensor)> = ins.iter().map(|(n, t)| (*n, t)).collect();
    let mut x = b.prepare(p, &MemoryWeights::default()).expect("prepare");
    x.run_all(&refs).expect("run");
    let out = x.run_all(&refs).expect("run");
    out.iter().map(|(_, t)| t.to_f32_vec()).collect()
}

/// The CUDA backend, or None after printing the test's SKIP line where there is no device.
pub fn device_or_skip(test: &str) -> Option<CudaBackend> {
    match CudaBackend::new() {
        Ok(b) => Some(b),
        Err(CudaError::NoDevice(why)) => {
            println!("SKIP: {test}: no CUDA device ({why})");
            None
        }
        Err(e) => panic!("the CUDA backend failed to start: {e}"),
    }
}

/// `p`'s inputs by name from f32 values, as tensors of the dtypes and shapes `p` declares.
pub fn inputs<const N: usize>(
    p: &Program,
    values: [(&'static str, Vec<f32>); N],
) -> [(&'static str, HostTensor); N] {
    values.map(|(n, v)| {
        let t = p.inputs.iter().find(|t| t.name == n).expect("input");
        (n, HostTensor::from_f32_as(t.dtype, t.shape.clone(), &v))
    })
}

/// Every output within 2% of the largest value of the CPU backend's (five bf16 steps): the
/// backends sum in other orders, so roundings may differ by a step.
pub fn assert_near_cpu(what: &str, p: &Program, ins: &[(&str, HostTensor)], got: &[Vec<f32>]) {
    let cpu = run(&CpuBackend::new(), p, ins);
    for (o, (g, c)) in got.iter().zip(&cpu).enumerate() {
        let scale = c.iter().fold(0f32, |s, v| s.max(v.abs()));
        let worst = g.iter().zip(c).fold(0f32, |s, (x, y)| s.max((x - y).abs()));
        assert!(
            scale > 0.0 && worst <= 0.02 * scale,
            "{what}: output {o} off the CPU's by {worst} (largest {scale})"
        );
    }
}
