//! Times parse + compile of 200k-node chain graphs (fusable relus, unfusable softmaxes)
//! and reports peak memory. Not a test: nothing asserts a time here.
//!
//! `cargo run --release -p npu-compiler --example large_graph -- [NODES] [relu|softmax]`
//! (one kind per run gives each its own peak RSS).

#[path = "../tests/large/chain.rs"]
mod chain;

use chain::{chain, Link};
use npu_compiler::{compile, CompileOptions};
use std::time::Instant;

/// Peak resident memory of this process so far (Linux), in MiB.
fn peak_rss_mib() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb: f64 = s
        .lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(kb / 1024.0)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: usize = match std::env::args().nth(1) {
        Some(a) => a.parse()?,
        None => 200_000,
    };
    let links = match std::env::args().nth(2).as_deref() {
        Some("relu") => vec![Link::Relu],
        Some("softmax") => vec![Link::Softmax],
        _ => vec![Link::Relu, Link::Softmax],
    };
    for link in links {
        let text = chain(n, link);
        let t = Instant::now();
        let g = npu_ir::parse_str(&text)?;
        let parsed = t.elapsed();
        let (p, report) = compile(g, &CompileOptions::default())?;
        let total = t.elapsed();
        println!(
            "{link:?} x {n}: {:.1} MB JSON, parse {:.2} s, parse+compile {:.2} s, {} steps, peak RSS {:.0} MiB",
            text.len() as f64 / 1e6,
            parsed.as_secs_f64(),
            total.as_secs_f64(),
            p.steps.len(),
            peak_rss_mib().unwrap_or(f64::NAN)
        );
        for (stage, d) in &report.timings {
            println!("  {stage:<20} {:>8.3} s", d.as_secs_f64());
        }
    }
    Ok(())
}
