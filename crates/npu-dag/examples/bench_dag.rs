//! The DAG executor's overhead: one graph run as a single compiled program and through the
//! DAG executor (all-NPU plan, so the same program plus the DAG's bookkeeping), interleaved
//! on the CPU backend; then with max_pool2d forced onto the CPU fallback. Prints a table
//! and writes JSON.
//!
//! usage: cargo run --release -p npu-dag --example bench_dag -- [MODEL_DIR] [--runs N]
//!        [--json benchmarks/results/dag.json]
//! MODEL_DIR holds model.ir.json, weights.safetensors, io.safetensors (the export tool's
//! layout; default target/test-models/resnet18, made by scripts/make-test-models.sh).

use npu_compiler::partition::plan_for_target;
use npu_compiler::{target, CompileOptions};
use npu_dag::dag::DagExecutor;
use npu_ir::DType;
use npu_runtime::{read_safetensors, Backend, CpuBackend, HostTensor, SafetensorsFile};
use std::path::PathBuf;
use std::time::Instant;

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut dir = PathBuf::from("target/test-models/resnet18");
    let mut runs = 30usize;
    let mut json_out: Option<PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--runs" => runs = args.next().ok_or("--runs needs a value")?.parse()?,
            "--json" => json_out = Some(args.next().ok_or("--json needs a path")?.into()),
            other => dir = PathBuf::from(other),
        }
    }
    let ir = dir.join("model.ir.json");
    let w = SafetensorsFile::open(&dir.join("weights.safetensors"))?;
    let io = read_safetensors(&dir.join("io.safetensors"))?;
    let x: &HostTensor = &io
        .iter()
        .find(|(k, _)| k == "input.x")
        .ok_or("io.safetensors has no input.x")?
        .1;
    let opts = CompileOptions {
        target: &target::CPU,
        dtype: Some(DType::F32),
    };
    let backend = CpuBackend::new();
    let (program, _) = npu_compiler::compile(npu_ir::load(&ir)?, &opts)?;
    let mut single = backend.prepare(&program, &w)?;
    let make_dag = |force: &[String]| -> Result<DagExecutor, Box<dyn std::error::Error>> {
        let graph = npu_ir::load(&ir)?;
        let (graph, plan) = plan_for_target(graph, opts.target, force)?;
        Ok(DagExecutor::new(graph, plan, &backend, &w, &opts)?)
    };
    let mut all_npu = make_dag(&[])?;
    let mut mixed = make_dag(&["max_pool2d".to_string()])?;
    let inputs = [("x", x)];
    let (mut t_single, mut t_dag, mut t_mixed) = (Vec::new(), Vec::new(), Vec::new());
    let mut s1 = single.new_state();
    let mut s2 = all_npu.new_state();
    let mut s3 = mixed.new_state();
    for i in 0..runs + 3 {
        let t = Instant::now();
        single.run(&inputs, s1.as_mut())?;
        let a = t.elapsed().as_secs_f64() * 1e3;
        let t = Instant::now();
        all_npu.run(&inputs, s2.as_mut())?;
        let b = t.elapsed().as_secs_f64() * 1e3;
        let t = Instant::now();
        mixed.run(&inputs, s3.as_mut())?;
        let c = t.elapsed().as_secs_f64() * 1e3;
        if i >= 3 {
            t_single.push(a);
            t_dag.push(b);
            t_mixed.push(c);
        }
    }
    let (ms, md, mm) = (
        median(&mut t_single),
        median(&mut t_dag),
        median(&mut t_mixed),
    );
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "{} on the CPU backend, f32, {runs} interleaved runs each, {threads} threads",
        dir.display()
    );
    println!("| executor | partitions | median ms | vs single program |");
    println!("|---|---|---|---|");
    println!("| single program | 1 | {ms:.3} | 1.000x |");
    println!(
        "| DAG, all NPU | {} | {md:.3} | {:.3}x |",
        all_npu.plan().partitions.len(),
        md / ms
    );
    println!(
        "| DAG, max_pool2d on CPU fallback | {} | {mm:.3} | {:.3}x |",
        mixed.plan().partitions.len(),
        mm / ms
    );
    if let Some(p) = json_out {
        let j = format!(
            concat!(
                "{{\n  \"model\": \"{}\",\n  \"backend\": \"cpu\",\n  \"dtype\": \"f32\",\n",
                "  \"threads\": {},\n  \"runs\": {},\n  \"single_program_ms\": {:.4},\n",
                "  \"dag_all_npu_ms\": {:.4},\n  \"dag_overhead_ratio\": {:.4},\n",
                "  \"dag_maxpool_on_cpu_ms\": {:.4}\n}}\n"
            ),
            dir.display(),
            threads,
            runs,
            ms,
            md,
            md / ms,
            mm
        );
        std::fs::write(&p, j)?;
        println!("wrote {}", p.display());
    }
    Ok(())
}
