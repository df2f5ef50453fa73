//! `npu-cuda-check`: every kernel kind on the CUDA backend against the CPU reference, on
//! random shapes (odd sizes, broadcasts, strided operands, long contexts). Prints a table;
//! exits 1 on any failure, 2 when there is no CUDA device.
//! usage: npu-cuda-check [--seed N] [--no-long] [--json FILE]

use npu_cuda::{conformance, CudaBackend};
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let mut seed = 1u64;
    let mut long = true;
    let mut json: Option<String> = None;
    let mut i = 1;
    while i < args.len() {
        match args[i].as_str() {
            "--seed" => {
                seed = args.get(i + 1).and_then(|s| s.parse().ok()).unwrap_or(1);
                i += 1;
            }
            "--no-long" => long = false,
            "--json" => {
                json = args.get(i + 1).cloned();
                i += 1;
            }
            other => {
                eprintln!("unknown argument '{other}'");
                return ExitCode::from(2);
            }
        }
        i += 1;
    }
    let gpu = match CudaBackend::new() {
        Ok(b) => b,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    println!("device: {}", gpu.describe());
    let results = conformance::run_all(&gpu, seed, long);
    println!(
        "{:<58} {:<20} {:<5} {:>10} {:>9}  result",
        "case", "kind", "dtype", "rel err", "tol"
    );
    let mut fails = 0;
    let mut rows = Vec::new();
    for r in &results {
        let ok = r.passed();
        fails += usize::from(!ok);
        let verdict = match &r.error {
            Some(e) => format!("ERROR {e}"),
            None if ok => "ok".into(),
            None => "FAIL".into(),
        };
        println!(
            "{:<58} {:<20} {:<5} {:>10.2e} {:>9.1e}  {verdict}",
            r.name,
            r.kind,
            r.dtype.to_string(),
            r.rel_err,
            r.tol
        );
        rows.push(format!(
            "{{\"case\":{:?},\"kind\":{:?},\"dtype\":\"{}\",\"rel_err\":{},\"tol\":{},\"passed\":{}}}",
            r.name,
            r.kind,
            r.dtype,
            if r.rel_err.is_finite() { r.rel_err.to_string() } else { "null".into() },
            r.tol,
            ok
        ));
    }
    println!(
        "{} of {} cases passed",
        results.len() - fails,
        results.len()
    );
    if let Some(p) = json {
        let _ = std::fs::write(p, format!("[{}]\n", rows.join(",\n")));
    }
    if fails > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
