//! `npu-cuda-check`: the conformance suite (`npu-conformance`: every kernel kind against its
//! reference, on odd sizes, broadcasts, strided operands, NaN/Inf and long contexts) on the
//! CUDA backend. Prints a table; exits 1 on any failure, 2 when there is no CUDA device.
//! usage: npu-cuda-check [--seed N] [--no-long] [--json FILE]

use npu_conformance::report_line;
use npu_cuda::CudaBackend;
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
    let results = npu_conformance::run_all(&gpu, seed, long);
    println!("verdict kind   dtype     error/allowance  case (worst element)");
    let mut fails = 0;
    let mut rows = Vec::new();
    for r in &results {
        let ok = r.passed();
        fails += usize::from(!ok);
        println!("{}", report_line(r));
        let worst = if r.worst.is_finite() {
            r.worst.to_string()
        } else {
            "null".into()
        };
        rows.push(format!(
            "{{\"case\":{:?},\"kind\":{:?},\"dtype\":\"{}\",\"error_over_allowance\":{worst},\"passed\":{ok},\"detail\":{:?}}}",
            r.name,
            r.kind,
            r.dtype,
            r.error.as_deref().unwrap_or(&r.detail),
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
