//! A host run's inputs, outputs and error word cross the host link inside the replayed graph
//! (inputs copied chunk by chunk as the host publishes them, or after the whole conversion
//! with `NPU_CUDA_GATED_IO=0`; small outputs written into their staging) or around it
//! (`NPU_CUDA_GRAPH_IO=0`; large inputs and outputs always): every run of a series with new
//! inputs gives the CPU backend's outputs, all three ways; an out-of-range id fails its run by
//! name and the next run is right again, as after a run missing its gated input.
//! Its own test binary: the switches are environment variables read at prepare time. Skips
//! where there is no device.

// Each test binary uses a part of the shared helpers.
#[allow(dead_code)]
mod common;

use common::{bind, device_or_skip, io, values};
use npu_ir::DType;
use npu_program::program::{dense_strides, Kernel, Program, Slot, Step};
use npu_runtime::{Backend, CpuBackend, HostTensor, MemoryWeights};

/// Elements of the large input: 10 MiB in f16, converted on several threads, each publishing
/// its chunks; as an output, too large to be written inside the graph.
const LARGE: usize = 5 << 20;
/// Elements of the medium input: ten gated chunks and a partial one, given as f32 and
/// converted to its f16 storage.
const MEDIUM: usize = 333_333;

/// out0 = table[ids] (the error word's path), out1 = small + small, out2 = large copied,
/// out3 = medium + medium.
fn program() -> Program {
    let dt = DType::F16;
    let dense = |slot, shape: &[usize], dt| bind(slot, 0, shape, &dense_strides(shape), dt);
    let step = |kernel, inputs, outputs| Step {
        kernel,
        inputs,
        outputs,
        origin: "host io test".into(),
    };
    let add = npu_program::expr::Expr {
        code: vec![
            npu_program::expr::Instr::Load(0),
            npu_program::expr::Instr::Load(0),
            npu_program::expr::Instr::Binary(npu_ir::BinaryOp::Add),
        ],
    };
    Program {
        model_name: "host io".into(),
        target: "gpu".into(),
        compute_dtype: dt,
        inputs: vec![
            io("table", &[16, 24], dt),
            io("ids", &[5], DType::I64),
            io("small", &[3, 40], dt),
            io("large", &[LARGE], dt),
            npu_program::program::IoTensor {
                storage: dt,
                ..io("medium", &[MEDIUM], DType::F32)
            },
        ],
        outputs: vec![
            io("rows", &[5, 24], dt),
            io("twice", &[3, 40], dt),
            io("copied", &[LARGE], dt),
            io("medium2", &[MEDIUM], dt),
        ],
        sources: Vec::new(),
        weights: Vec::new(),
        constants: Vec::new(),
        arena_bytes: 0,
        steps: vec![
            step(
                Kernel::Embedding,
                vec![
                    dense(Slot::Input(0), &[16, 24], dt),
                    dense(Slot::Input(1), &[5], DType::I64),
                ],
                vec![dense(Slot::Output(0), &[5, 24], dt)],
            ),
            step(
                Kernel::Elementwise { expr: add.clone() },
                vec![dense(Slot::Input(2), &[3, 40], dt)],
                vec![dense(Slot::Output(1), &[3, 40], dt)],
            ),
            step(
                Kernel::Copy,
                vec![dense(Slot::Input(3), &[LARGE], dt)],
                vec![dense(Slot::Output(2), &[LARGE], dt)],
            ),
            step(
                Kernel::Elementwise { expr: add.clone() },
                vec![dense(Slot::Input(4), &[MEDIUM], dt)],
                vec![dense(Slot::Output(3), &[MEDIUM], dt)],
            ),
        ],
    }
}

fn inputs(p: &Program, seed: u64, ids: [i64; 5]) -> Vec<(&'static str, HostTensor)> {
    let t = |name: &'static str, v: Vec<f32>| {
        let io = p.inputs.iter().find(|t| t.name == name).expect("input");
        (
            name,
            HostTensor::from_f32_as(io.dtype, io.shape.clone(), &v),
        )
    };
    vec![
        t("table", values(16 * 24, seed, 4.0)),
        ("ids", HostTensor::from_i64(vec![5], &ids)),
        t("small", values(3 * 40, seed + 1, 4.0)),
        t("large", values(LARGE, seed + 2, 4.0)),
        (
            "medium",
            HostTensor::from_f32(vec![MEDIUM], &values(MEDIUM, seed + 3, 4.0)),
        ),
    ]
}

fn outputs(out: Vec<(String, HostTensor)>) -> Vec<Vec<f32>> {
    out.iter().map(|(_, t)| t.to_f32_vec()).collect()
}

#[test]
fn every_run_of_a_series_gets_its_own_inputs_and_outputs() {
    let test = "host_io every_run_of_a_series_gets_its_own_inputs_and_outputs";
    let Some(cuda) = device_or_skip(test) else {
        return;
    };
    let p = program();
    let w = MemoryWeights::default();
    let cpu = CpuBackend::new();
    for (mode, gated) in [("1", "1"), ("1", "0"), ("0", "1")] {
        std::env::set_var("NPU_CUDA_GRAPH_IO", mode);
        std::env::set_var("NPU_CUDA_GATED_IO", gated);
        let mode = format!("graph io {mode}, gated {gated}");
        let mut x = cuda.prepare(&p, &w).expect("prepare");
        let mut c = cpu.prepare(&p, &w).expect("prepare on the CPU");
        // The first run is eager, the second captures the graph, later ones replay it.
        for (k, ids) in [
            [0, 3, 15, 7, 7],
            [1, 2, 3, 4, 5],
            [15, 0, 9, 9, 2],
            [6, 6, 6, 6, 6],
        ]
        .into_iter()
        .enumerate()
        {
            let ins = inputs(&p, 10 * k as u64, ids);
            let refs: Vec<(&str, &HostTensor)> = ins.iter().map(|(n, t)| (*n, t)).collect();
            let got = outputs(x.run_all(&refs).expect("run"));
            let want = outputs(c.run_all(&refs).expect("run on the CPU"));
            assert_eq!(got, want, "mode {mode}, run {k}");
        }
        let bad = inputs(&p, 99, [0, 1, 16, 2, 3]);
        let refs: Vec<(&str, &HostTensor)> = bad.iter().map(|(n, t)| (*n, t)).collect();
        let err = x
            .run_all(&refs)
            .expect_err("id 16 of a 16-row table")
            .to_string();
        assert!(err.contains("out of range"), "mode {mode}: {err}");
        let ins = inputs(&p, 5, [2, 2, 1, 0, 15]);
        let refs: Vec<(&str, &HostTensor)> = ins.iter().map(|(n, t)| (*n, t)).collect();
        let got = outputs(x.run_all(&refs).expect("run after the failed one"));
        let want = outputs(c.run_all(&refs).expect("run on the CPU"));
        assert_eq!(got, want, "mode {mode}, the run after the failed one");
        // a run without its gated input fails by name, and the next run is right again
        let mut partial = inputs(&p, 7, [1, 1, 1, 1, 1]);
        partial.pop();
        let refs: Vec<(&str, &HostTensor)> = partial.iter().map(|(n, t)| (*n, t)).collect();
        let err = x.run_all(&refs).expect_err("no medium").to_string();
        assert!(err.contains("medium"), "mode {mode}: {err}");
        let ins = inputs(&p, 6, [3, 3, 1, 0, 15]);
        let refs: Vec<(&str, &HostTensor)> = ins.iter().map(|(n, t)| (*n, t)).collect();
        let got = outputs(x.run_all(&refs).expect("run after the incomplete one"));
        let want = outputs(c.run_all(&refs).expect("run on the CPU"));
        assert_eq!(got, want, "mode {mode}, the run after the incomplete one");
    }
    std::env::remove_var("NPU_CUDA_GRAPH_IO");
    std::env::remove_var("NPU_CUDA_GATED_IO");
}
