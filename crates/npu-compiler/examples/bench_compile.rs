//! Compile-time benchmark: parses and compiles each IR N times, prints a table (median
//! times, steps, arena) and writes JSON. Not a test: nothing here asserts a time.
//!
//! `cargo run --release -p npu-compiler --example bench_compile -- [--runs N] [--json OUT] [IR...]`
//! With no IR arguments it uses the committed fixtures, Qwen2.5-1.5B decode at cache 2048 first.

use npu_compiler::{compile, CompileOptions};
use std::path::PathBuf;
use std::time::Instant;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut runs = 20;
    let mut json_out: Option<PathBuf> = None;
    let mut irs: Vec<PathBuf> = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--runs" => runs = args.next().ok_or("--runs needs a number")?.parse()?,
            "--json" => json_out = Some(args.next().ok_or("--json needs a path")?.into()),
            _ => irs.push(a.into()),
        }
    }
    if irs.is_empty() {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures");
        for rel in [
            "qwen2.5-1.5b/decode.ir.json",
            "qwen2.5-1.5b/prefill.ir.json",
            "resnet50/model.ir.json",
            "resnet18/model.ir.json",
        ] {
            irs.push(root.join(rel));
        }
    }
    println!(
        "{:<36} {:>6} {:>6} {:>11} {:>10} {:>11} {:>10}",
        "graph", "nodes", "steps", "arena MiB", "parse ms", "compile ms", "total ms"
    );
    let mut rows = Vec::new();
    for ir in &irs {
        let text = std::fs::read_to_string(ir)?;
        let (mut parse, mut comp) = (Vec::new(), Vec::new());
        let mut last = None;
        for _ in 0..runs {
            let t = Instant::now();
            let g = npu_ir::parse_str(&text)?;
            parse.push(t.elapsed().as_secs_f64() * 1e3);
            let nodes = g.nodes.len();
            let t = Instant::now();
            let (p, _) = compile(g, &CompileOptions::default())?;
            comp.push(t.elapsed().as_secs_f64() * 1e3);
            last = Some((nodes, p));
        }
        let (nodes, p) = last.ok_or("--runs must be at least 1")?;
        let name = ir
            .iter()
            .rev()
            .take(2)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<PathBuf>()
            .display()
            .to_string();
        let (pm, cm) = (median(parse), median(comp));
        println!(
            "{:<36} {:>6} {:>6} {:>11.3} {:>10.2} {:>11.2} {:>10.2}",
            name,
            nodes,
            p.steps.len(),
            p.arena_bytes as f64 / 1048576.0,
            pm,
            cm,
            pm + cm
        );
        rows.push(serde_json::json!({
            "graph": name, "ir_nodes": nodes, "steps": p.steps.len(), "arena_bytes": p.arena_bytes,
            "parse_ms_median": pm, "compile_ms_median": cm, "total_ms_median": pm + cm, "runs": runs,
            "target": p.target, "compute_dtype": p.compute_dtype.name(),
        }));
    }
    if let Some(out) = json_out {
        if let Some(dir) = out.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(
            &out,
            serde_json::to_string_pretty(&serde_json::json!({ "results": rows }))?,
        )?;
        println!("wrote {}", out.display());
    }
    Ok(())
}
