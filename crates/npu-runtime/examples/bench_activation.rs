//! Activations on one thread, ns per element over 1M f32 in [-5, 5): the CPU backend's fused
//! elementwise kernel (`Kernel::Elementwise`, vectorized forms of exp, SiLU, sigmoid, GELU)
//! against the pointwise table's scalar math (`eval_block`, what the kernel used before).
//! `cargo run --release -p npu-runtime --example bench_activation`

use npu_ir::{DType, UnaryOp};
use npu_program::expr::{Expr, Instr};
use npu_program::program::Kernel;
use npu_runtime::cpu::exec_step;
use npu_runtime::cpu::view::View;
use std::time::Instant;

fn main() {
    rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build_global()
        .expect("the first pool");
    let n = 1 << 20;
    let xs: Vec<f32> = (0..n)
        .map(|i| ((i * 7919) % 20000) as f32 / 2000.0 - 5.0)
        .collect();
    let shape = [n];
    let strides = [1usize];
    println!(
        "{:<10} {:>12} {:>12} {:>8}",
        "op", "table ns/el", "kernel ns/el", "speedup"
    );
    for op in [UnaryOp::Exp, UnaryOp::Silu, UnaryOp::Sigmoid, UnaryOp::Gelu] {
        let reps = 20;
        let mut v = xs.clone();
        let t = Instant::now();
        for _ in 0..reps {
            v.copy_from_slice(&xs);
            op.eval_block(&mut v, []);
        }
        let table = t.elapsed().as_nanos() as f64 / (reps * n) as f64;
        let kernel = Kernel::Elementwise {
            expr: Expr {
                code: vec![Instr::Load(0), Instr::Unary(op)],
            },
        };
        let mut input: Vec<u8> = xs.iter().flat_map(|x| x.to_le_bytes()).collect();
        let mut out = vec![0u8; 4 * n];
        let t = Instant::now();
        for _ in 0..reps {
            let view = |p: &mut Vec<u8>| View {
                ptr: p.as_mut_ptr(),
                dtype: DType::F32,
                shape: &shape,
                strides: &strides,
            };
            let ins = [view(&mut input)];
            exec_step(&kernel, &ins, &[view(&mut out)]).expect("a valid step");
        }
        let fused = t.elapsed().as_nanos() as f64 / (reps * n) as f64;
        println!(
            "{:<10} {table:>12.2} {fused:>12.2} {:>7.2}x",
            op.name(),
            table / fused
        );
    }
}
