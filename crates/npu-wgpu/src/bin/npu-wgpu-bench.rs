//! `npu-wgpu-bench`: times one decode step of a compiled program on the wgpu backend without
//! a checkpoint or an export (for A/B runs of two builds on the GPU machine); prints one JSON
//! object on stdout.
//!
//!   npu-wgpu-bench decode-at --decode D --weights W|random --positions 1000 [--repeat N] [--warm-s S]
//!     (D may also be a prefill program: its S tokens then start at each position)
//!
//! Before timing, the step runs for `--warm-s` seconds (default 3): a GPU's clocks ramp up
//! under load, and a cold start times the ramp instead of the kernels. Reports the median
//! and minimum of whole runs (upload, execute, readback) and the per-kernel-group time of
//! three profiled runs (timestamp queries, each step in its own pass).

use npu_conformance::bench::{self, arg, median};
use npu_program::{npubin, Program};
use npu_runtime::{Backend, HostTensor, SafetensorsFile, WeightSource};
use npu_wgpu::WgpuBackend;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

type Res<T> = Result<T, String>;

fn cmd_decode_at(a: &bench::Args) -> Res<String> {
    let chain = |e: &dyn std::error::Error| npu_ir::error_chain(e);
    let b = WgpuBackend::new().map_err(|e| chain(&e))?;
    let dec: Program = npubin::load(&PathBuf::from(arg(a, "decode")?)).map_err(|e| chain(&e))?;
    let wpath = arg(a, "weights")?;
    let w: Box<dyn WeightSource> = if wpath == "random" {
        Box::new(bench::random_weights(&dec))
    } else {
        Box::new(SafetensorsFile::open(&PathBuf::from(wpath)).map_err(|e| chain(&e))?)
    };
    let repeat: usize = a.get("repeat").and_then(|s| s.parse().ok()).unwrap_or(30);
    let warm_s: f64 = a.get("warm-s").and_then(|s| s.parse().ok()).unwrap_or(3.0);
    let positions: Vec<usize> = arg(a, "positions")?
        .split(',')
        .filter_map(|s| s.parse().ok())
        .collect();
    let t = Instant::now();
    let mut x = b.prepare(&dec, w.as_ref()).map_err(|e| chain(&e))?;
    let prepare_ms = t.elapsed().as_secs_f64() * 1e3;
    let mut st = x.new_state();
    let mut out = Vec::new();
    let mut last = None;
    for &p in &positions {
        let io = bench::decode_inputs(&dec, p)?;
        let ins: Vec<(&str, &HostTensor)> = io.iter().map(|(k, t)| (k.as_str(), t)).collect();
        let warm = Instant::now();
        while warm.elapsed().as_secs_f64() < warm_s {
            x.run(&ins, st.as_mut()).map_err(|e| chain(&e))?;
        }
        let mut wall = Vec::new();
        for _ in 0..repeat {
            let t = Instant::now();
            x.run(&ins, st.as_mut()).map_err(|e| chain(&e))?;
            wall.push(t.elapsed().as_secs_f64() * 1e3);
        }
        let min = wall.iter().copied().fold(f64::INFINITY, f64::min);
        out.push(format!(
            "{{\"position\":{p},\"wall_ms\":{:.4},\"min_ms\":{min:.4}}}",
            median(&mut wall)
        ));
        last = Some(io);
    }
    let prof = match &last {
        Some(io) => {
            let ins: Vec<(&str, &HostTensor)> = io.iter().map(|(k, t)| (k.as_str(), t)).collect();
            x.set_profiling(true);
            for _ in 0..3 {
                x.run(&ins, st.as_mut()).map_err(|e| chain(&e))?;
            }
            let groups = bench::step_groups(&x.profile(), &dec);
            x.set_profiling(false);
            format!(",{}", bench::groups_json(&groups, 16))
        }
        None => String::new(),
    };
    Ok(format!(
        "{{\"device\":{:?},\"cache\":{},\"prepare_ms\":{prepare_ms:.1},\"points\":[{}]{prof}}}",
        b.describe(),
        bench::cache_len(&dec),
        out.join(",")
    ))
}

fn main() -> ExitCode {
    bench::main(
        "npu-wgpu-bench decode-at --key value ...",
        |cmd, a| match cmd {
            "decode-at" => cmd_decode_at(a),
            other => Err(format!("unknown command '{other}'")),
        },
    )
}
