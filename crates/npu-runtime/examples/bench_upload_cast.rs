//! f32 -> f16 conversion of a large input into a buffer the CPU does not read back (a CUDA
//! upload's staging), plain stores (`cast_bytes`) against non-temporal ones
//! (`cast_bytes_streaming`), on one thread and on every thread this machine gives, each
//! thread a contiguous share as the CUDA backend's staging splits it. Medians of 30, ms and GB/s
//! of f32 source. Default size: ResNet-50 batch 64's input (64 x 3 x 224 x 224).
//! `cargo run --release -p npu-runtime --example bench_upload_cast [ELEMENTS]`

use npu_ir::DType;
use npu_runtime::tensor::{cast_bytes, cast_bytes_streaming};
use std::time::Instant;

type Cast = fn(&[u8], DType, &mut [u8], DType) -> npu_runtime::Result<()>;

/// Median seconds of `reps` conversions of `src` into `dst` over `threads` threads.
fn time(cast: Cast, src: &[u8], dst: &mut [u8], threads: usize, reps: usize) -> f64 {
    let elems = src.len() / 4;
    let share = elems.div_ceil(threads).div_ceil(64) * 64;
    let mut t: Vec<f64> = (0..reps)
        .map(|_| {
            let start = Instant::now();
            std::thread::scope(|s| {
                for (a, b) in src.chunks(share * 4).zip(dst.chunks_mut(share * 2)) {
                    s.spawn(move || cast(a, DType::F32, b, DType::F16).expect("f32 -> f16"));
                }
            });
            start.elapsed().as_secs_f64()
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[reps / 2]
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(64 * 3 * 224 * 224);
    let src: Vec<u8> = (0..n)
        .flat_map(|i| (((i * 7919) % 2003) as f32 * 0.37 - 300.0).to_le_bytes())
        .collect();
    let mut dst = vec![0u8; n * 2];
    let all = std::thread::available_parallelism().map_or(1, |p| p.get());
    println!("{n} elements ({:.1} MB of f32)", (n * 4) as f64 / 1e6);
    println!(
        "{:<8} {:>12} {:>12} {:>10} {:>10}",
        "threads", "plain ms", "streamed ms", "plain GB/s", "stream GB/s"
    );
    for threads in [1, all] {
        let plain = time(cast_bytes, &src, &mut dst, threads, 30);
        let streamed = time(cast_bytes_streaming, &src, &mut dst, threads, 30);
        let gbs = |s: f64| (n * 4) as f64 / s / 1e9;
        println!(
            "{threads:<8} {:>12.3} {:>12.3} {:>10.1} {:>10.1}",
            plain * 1e3,
            streamed * 1e3,
            gbs(plain),
            gbs(streamed)
        );
    }
}
