//! `npu-cuda-bench`: drives compiled programs on the CUDA backend for the GPU check and
//! benchmark scripts; prints one JSON object on stdout.
//!
//!   npu-cuda-bench time --program P --weights W --io IO [--prefix input.] [--repeat N] [--out F]
//!   npu-cuda-bench teacher --prefill P --decode D --weights W --io IO --steps N --out F
//!   npu-cuda-bench decode-at --decode D --weights W|random --positions 128,1024 [--repeat N]
//!     (D may also be a prefill program: its S tokens then start at each position)
//!
//! `time` runs a program on the inputs named PREFIX<name> in IO (warm-up, then the median
//! CUDA-event time of the replayed graph's kernels, with kernel timing on, and the median
//! whole run, with it off, as a caller runs); `teacher` runs the prefill
//! and then decode step i on IO's `decode.<i>.input.*` (teacher forcing on the reference
//! tokens) and writes every step's logits; `decode-at` times one decode step at each cache
//! position (mask admitting slots 0..=p).

use npu_conformance::bench::{self, arg, median};
use npu_cuda::{CudaBackend, CudaExecutable, DevicePhases, RunPhases};
use npu_ir::DType;
use npu_program::npubin;
use npu_program::Program;
use npu_runtime::{
    read_safetensors, write_safetensors, Executable, HostTensor, SafetensorsFile, WeightSource,
};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

type Res<T> = Result<T, String>;
type Outs = Vec<(String, HostTensor)>;

fn load(p: &str) -> Res<Program> {
    npubin::load(&PathBuf::from(p)).map_err(|e| npu_ir::error_chain(&e))
}

fn prepare(b: &CudaBackend, p: &Program, w: &dyn WeightSource) -> Res<CudaExecutable> {
    b.prepare_cuda(p, w).map_err(|e| npu_ir::error_chain(&e))
}

fn inputs_with<'a>(
    p: &Program,
    io: &'a [(String, HostTensor)],
    prefix: &str,
    state_too: bool,
) -> Vec<(&'a str, &'a HostTensor)> {
    let mut v = Vec::new();
    for i in &p.inputs {
        let is_state = p.outputs.iter().any(|o| {
            o.donates_input
                .map(|x| p.inputs[x as usize].name == i.name)
                .unwrap_or(false)
        });
        if is_state && !state_too {
            continue;
        }
        let key = format!("{prefix}{}", i.name);
        if let Some((k, t)) = io.iter().find(|(k, _)| *k == key) {
            let name: &'a str = &k[prefix.len()..];
            v.push((name, t));
        }
    }
    v
}

fn run(
    x: &mut CudaExecutable,
    ins: &[(&str, &HostTensor)],
    st: &mut dyn npu_runtime::DeviceState,
) -> Res<(Outs, f64, f64)> {
    let t = Instant::now();
    let out = x.run(ins, st).map_err(|e| npu_ir::error_chain(&e))?;
    Ok((
        out,
        t.elapsed().as_secs_f64() * 1e3,
        f64::from(x.last_gpu_ms()),
    ))
}

/// `"kernels":N,"top_kernels":[..]`: launches per run, and the GPU time per step group
/// (kernel kind and output shape) over `runs` eager runs with device events between steps,
/// largest first. The profiled runs are eager, so the graph is recaptured afterwards.
fn profile_json(
    x: &mut CudaExecutable,
    ins: &[(&str, &HostTensor)],
    st: &mut dyn npu_runtime::DeviceState,
    runs: usize,
) -> Res<String> {
    x.set_profiling(true);
    for _ in 0..runs {
        run(x, ins, st)?;
    }
    let prof = x.profile();
    x.set_profiling(false);
    let groups = bench::step_groups(&prof, x.program());
    Ok(format!(
        "\"kernels\":{},{}",
        x.launches_per_run(),
        bench::groups_json(&groups, 12)
    ))
}

fn cmd_time(a: &bench::Args) -> Res<String> {
    let b = CudaBackend::new().map_err(|e| npu_ir::error_chain(&e))?;
    let p = load(&arg(a, "program")?)?;
    let w = SafetensorsFile::open(&PathBuf::from(arg(a, "weights")?))
        .map_err(|e| npu_ir::error_chain(&e))?;
    let io =
        read_safetensors(&PathBuf::from(arg(a, "io")?)).map_err(|e| npu_ir::error_chain(&e))?;
    let prefix = a.get("prefix").cloned().unwrap_or_else(|| "input.".into());
    let repeat: usize = a.get("repeat").and_then(|s| s.parse().ok()).unwrap_or(50);
    let t = Instant::now();
    let mut x = prepare(&b, &p, &w)?;
    let prepare_ms = t.elapsed().as_secs_f64() * 1e3;
    let mut st = x.new_state();
    let first = inputs_with(&p, &io, &prefix, true);
    let (out, _, _) = run(&mut x, &first, st.as_mut())?;
    let ins = inputs_with(&p, &io, &prefix, false);
    for _ in 0..3 {
        run(&mut x, &ins, st.as_mut())?;
    }
    // The kernels' time with kernel timing on, then whole runs as a caller makes them
    // (timing off: its event records cost a host run a few microseconds).
    let (mut gpu, mut wall, mut host) = (Vec::new(), Vec::new(), Vec::new());
    x.set_kernel_timing(true);
    for k in 0..repeat + 2 {
        let (_, _, g_ms) = run(&mut x, &ins, st.as_mut())?;
        if k >= 2 {
            gpu.push(g_ms);
        }
    }
    x.set_kernel_timing(false);
    for k in 0..repeat + 2 {
        let (_, w_ms, _) = run(&mut x, &ins, st.as_mut())?;
        if k >= 2 {
            wall.push(w_ms);
            host.push(x.last_phases());
        }
    }
    if let Some(o) = a.get("out") {
        write_safetensors(&PathBuf::from(o), &out).map_err(|e| npu_ir::error_chain(&e))?;
    }
    let graph = x.graph_ready();
    let phases = phases_json(&mut x, &ins, st.as_mut(), &host, repeat)?;
    let prof = profile_json(&mut x, &ins, st.as_mut(), 5)?;
    Ok(format!(
        "{{\"device\":{:?},\"prepare_ms\":{prepare_ms:.1},\"gpu_ms\":{:.4},\"wall_ms\":{:.4},\"graph\":{graph},\"steps\":{},{phases},{prof}}}",
        b.describe(),
        median(&mut gpu),
        median(&mut wall),
        p.steps.len()
    ))
}

/// `"phases":{..}`: where a whole run's wall time goes, as medians in microseconds: the host
/// phases of the timed runs (`host`), and the device's (copies and kernels, between events)
/// over `runs` further runs with tracing on, whose event records would have lengthened the
/// timed runs.
fn phases_json(
    x: &mut CudaExecutable,
    ins: &[(&str, &HostTensor)],
    st: &mut dyn npu_runtime::DeviceState,
    host: &[RunPhases],
    runs: usize,
) -> Res<String> {
    let err = |e: npu_runtime::RuntimeError| npu_ir::error_chain(&e);
    x.set_tracing(true).map_err(err)?;
    let mut device = Vec::new();
    // the first run recaptures the graph with the trace's events
    for k in 0..=runs {
        run(x, ins, st)?;
        if k > 0 {
            device.extend(x.last_phases().device);
        }
    }
    x.set_tracing(false).map_err(err)?;
    let med = |f: &dyn Fn(&RunPhases) -> f64| median(&mut host.iter().map(f).collect::<Vec<_>>());
    let dmed =
        |f: &dyn Fn(&DevicePhases) -> f64| median(&mut device.iter().map(f).collect::<Vec<_>>());
    Ok(format!(
        "\"phases\":{{\"host_us\":{{\"upload\":{:.1},\"enqueue\":{:.1},\"wait\":{:.1},\"outputs\":{:.1}}},\"device_us\":{{\"upload\":{:.1},\"kernels\":{:.1},\"download\":{:.1}}}}}",
        med(&|p| p.upload_us),
        med(&|p| p.enqueue_us),
        med(&|p| p.wait_us),
        med(&|p| p.outputs_us),
        dmed(&|d| d.upload_us),
        dmed(&|d| d.kernels_us),
        dmed(&|d| d.download_us),
    ))
}

fn cmd_teacher(a: &bench::Args) -> Res<String> {
    let b = CudaBackend::new().map_err(|e| npu_ir::error_chain(&e))?;
    let pre = load(&arg(a, "prefill")?)?;
    let dec = load(&arg(a, "decode")?)?;
    let w = SafetensorsFile::open(&PathBuf::from(arg(a, "weights")?))
        .map_err(|e| npu_ir::error_chain(&e))?;
    let io =
        read_safetensors(&PathBuf::from(arg(a, "io")?)).map_err(|e| npu_ir::error_chain(&e))?;
    let steps: usize = arg(a, "steps")?.parse().map_err(|_| "bad --steps")?;
    let mut px = prepare(&b, &pre, &w)?;
    let mut dx = prepare(&b, &dec, &w)?;
    px.set_kernel_timing(true);
    dx.set_kernel_timing(true);
    let mut st = px.new_state();
    let ins = inputs_with(&pre, &io, "prefill.input.", true);
    let (out, pre_wall, pre_gpu) = run(&mut px, &ins, st.as_mut())?;
    let mut result = vec![(
        "prefill.logits".to_string(),
        out[0]
            .1
            .cast(DType::F32)
            .map_err(|e| npu_ir::error_chain(&e))?,
    )];
    let mut rows: Vec<f32> = Vec::new();
    let (mut gpu, mut wall) = (Vec::new(), Vec::new());
    let mut vocab = 0;
    for i in 0..steps {
        let ins = inputs_with(&dec, &io, &format!("decode.{i}.input."), false);
        if ins.is_empty() {
            return Err(format!("IO has no decode.{i}.input.* tensors"));
        }
        let (out, w_ms, g_ms) = run(&mut dx, &ins, st.as_mut())?;
        let l = out[0].1.to_f32_vec();
        vocab = l.len();
        rows.extend(l);
        gpu.push(g_ms);
        wall.push(w_ms);
    }
    result.push((
        "decode.logits".into(),
        HostTensor::from_f32(vec![steps, vocab], &rows),
    ));
    write_safetensors(&PathBuf::from(arg(a, "out")?), &result)
        .map_err(|e| npu_ir::error_chain(&e))?;
    let (g, wl) = (median(&mut gpu.clone()), median(&mut wall.clone()));
    Ok(format!(
        "{{\"device\":{:?},\"prefill_wall_ms\":{pre_wall:.3},\"prefill_gpu_ms\":{pre_gpu:.3},\"decode_gpu_ms_median\":{g:.4},\"decode_wall_ms_median\":{wl:.4},\"steps\":{steps}}}",
        b.describe()
    ))
}

fn cmd_decode_at(a: &bench::Args) -> Res<String> {
    let b = CudaBackend::new().map_err(|e| npu_ir::error_chain(&e))?;
    let dec = load(&arg(a, "decode")?)?;
    let wpath = arg(a, "weights")?;
    let w: Box<dyn WeightSource> = if wpath == "random" {
        Box::new(bench::random_weights(&dec))
    } else {
        Box::new(SafetensorsFile::open(&PathBuf::from(wpath)).map_err(|e| npu_ir::error_chain(&e))?)
    };
    let w = w.as_ref();
    let repeat: usize = a.get("repeat").and_then(|s| s.parse().ok()).unwrap_or(30);
    let positions: Vec<usize> = arg(a, "positions")?
        .split(',')
        .filter_map(|s| s.parse().ok())
        .collect();
    let mut x = prepare(&b, &dec, w)?;
    x.set_kernel_timing(true);
    let mut st = x.new_state();
    let max = bench::cache_len(&dec);
    let mut out = Vec::new();
    let mut last = None;
    for &p in &positions {
        let io = bench::decode_inputs(&dec, p)?;
        let ins: Vec<(&str, &HostTensor)> = io.iter().map(|(k, t)| (k.as_str(), t)).collect();
        for _ in 0..3 {
            run(&mut x, &ins, st.as_mut())?;
        }
        let (mut gpu, mut wall) = (Vec::new(), Vec::new());
        for _ in 0..repeat {
            let (_, w_ms, g_ms) = run(&mut x, &ins, st.as_mut())?;
            gpu.push(g_ms);
            wall.push(w_ms);
        }
        out.push(format!(
            "{{\"position\":{p},\"gpu_ms\":{:.4},\"wall_ms\":{:.4}}}",
            median(&mut gpu),
            median(&mut wall)
        ));
        last = Some(io);
    }
    if npu_cuda::timeline::wanted() {
        if let Some(io) = &last {
            let ins: Vec<(&str, &HostTensor)> = io.iter().map(|(k, t)| (k.as_str(), t)).collect();
            write_timeline(&mut x, &ins, st.as_mut())?;
        }
    }
    let graph = x.graph_ready();
    let prof = match &last {
        Some(io) => {
            let ins: Vec<(&str, &HostTensor)> = io.iter().map(|(k, t)| (k.as_str(), t)).collect();
            format!(",{}", profile_json(&mut x, &ins, st.as_mut(), 5)?)
        }
        None => String::new(),
    };
    Ok(format!(
        "{{\"device\":{:?},\"cache\":{max},\"graph\":{graph},\"points\":[{}]{prof}}}",
        b.describe(),
        out.join(",")
    ))
}

/// The per-block timestamps of three runs of the last position's step (`NPU_CUDA_TIMELINE=1`
/// when the device opened; `npu_cuda::timeline`) as JSON into `NPU_CUDA_TIMELINE_OUT` (default
/// /tmp/npu-timeline.json), for `python -m npu_export.gpu_timeline`: whether a graph replayed,
/// the steps' launches in order (name, blocks), then per run its records [grid, t0, t1, t2,
/// block, smid, blocks].
fn write_timeline(
    x: &mut CudaExecutable,
    ins: &[(&str, &HostTensor)],
    st: &mut dyn npu_runtime::DeviceState,
) -> Res<()> {
    let path =
        std::env::var("NPU_CUDA_TIMELINE_OUT").unwrap_or_else(|_| "/tmp/npu-timeline.json".into());
    x.set_kernel_timing(false);
    for _ in 0..3 {
        run(x, ins, st)?;
    }
    let mut runs = Vec::new();
    for _ in 0..3 {
        npu_cuda::timeline::reset().map_err(|e| e.to_string())?;
        run(x, ins, st)?;
        let recs = npu_cuda::timeline::take().map_err(|e| e.to_string())?;
        let rows: Vec<String> = recs
            .iter()
            .map(|r| {
                format!(
                    "[{},{},{},{},{},{},{}]",
                    r.grid, r.t0, r.t1, r.t2, r.block, r.smid, r.nblocks
                )
            })
            .collect();
        runs.push(format!("[{}]", rows.join(",")));
    }
    let launches: Vec<String> = x
        .launch_list()
        .iter()
        .map(|(n, b)| format!("[{n:?},{b}]"))
        .collect();
    let json = format!(
        "{{\"graph\":{},\"launches\":[{}],\"runs\":[{}]}}\n",
        x.graph_ready(),
        launches.join(","),
        runs.join(",")
    );
    std::fs::write(&path, json).map_err(|e| format!("{path}: {e}"))
}

fn main() -> ExitCode {
    bench::main(
        "npu-cuda-bench (time|teacher|decode-at) --key value ...",
        |cmd, a| match cmd {
            "time" => cmd_time(a),
            "teacher" => cmd_teacher(a),
            "decode-at" => cmd_decode_at(a),
            other => Err(format!("unknown command '{other}'")),
        },
    )
}
