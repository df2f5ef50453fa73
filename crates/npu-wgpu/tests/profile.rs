//! `--profile` on the wgpu backend: timestamp queries at every step's pass give one time per
//! step, and profiling off costs nothing (no times).

use npu_conformance::{Case, Rng};
use npu_ir::DType;
use npu_program::program::Kernel;
use npu_runtime::{Backend, MemoryWeights};
use npu_wgpu::WgpuBackend;

#[test]
fn profiling_times_every_step() {
    let be = match WgpuBackend::new() {
        Ok(b) => b,
        Err(e) => {
            println!("SKIP: profiling_times_every_step: {e}");
            return;
        }
    };
    let mut rng = Rng::new(5);
    let case = Case::new("copy f32 -> f16", Kernel::Copy)
        .input(&mut rng, &[64, 33], DType::F32)
        .output(&[64, 33], DType::F16);
    let mut exe = be
        .prepare(&case.program(), &MemoryWeights::default())
        .unwrap();
    let input = [("in0", &case.values[0])];
    exe.run_all(&input).unwrap();
    assert!(exe.profile().iter().all(|s| s.runs == 0));
    exe.set_profiling(true);
    for _ in 0..3 {
        exe.run_all(&input).unwrap();
    }
    let times = exe.profile();
    if times.iter().all(|s| s.runs == 0) {
        println!("SKIP: profiling_times_every_step: the adapter has no timestamp queries");
        return;
    }
    assert_eq!(times.len(), 1);
    assert_eq!(times[0].runs, 3);
    assert!(times[0].total_ms > 0.0, "{times:?}");
}
