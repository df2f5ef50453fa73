//! `npu-fuzz TARGET [--seconds N] [--seed N] [--corpus DIR] [--artifacts DIR]` fuzzes one
//! target; `npu-fuzz TARGET --replay PATH...` re-runs saved inputs (files or directories)
//! and fails on any panic. Targets: ir, npubin, safetensors, input.

use npu_fuzz::driver::{capture_panics, fuzz, read_dir, run_one};
use npu_fuzz::targets::{by_name, TARGETS};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

fn usage() -> ExitCode {
    let names: Vec<&str> = TARGETS.iter().map(|t| t.name).collect();
    eprintln!(
        "usage: npu-fuzz TARGET [--seconds N] [--seed N] [--corpus DIR] [--artifacts DIR]\n       npu-fuzz TARGET --replay PATH...\ntargets: {}",
        names.join(", ")
    );
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(t) = args.first().and_then(|n| by_name(n)) else {
        return usage();
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut seconds = 60u64;
    let mut seed = 0x5eed_u64;
    let mut corpus = root.join("corpus").join(t.name);
    let mut artifacts = root.join("artifacts").join(t.name);
    let mut replay: Option<Vec<PathBuf>> = None;
    let mut it = args[1..].iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--replay" => replay = Some(it.by_ref().map(PathBuf::from).collect()),
            "--seconds" | "--seed" | "--corpus" | "--artifacts" => {
                let Some(v) = it.next() else { return usage() };
                match a.as_str() {
                    "--seconds" => match v.parse() {
                        Ok(n) => seconds = n,
                        Err(_) => return usage(),
                    },
                    "--seed" => match v.parse() {
                        Ok(n) => seed = n,
                        Err(_) => return usage(),
                    },
                    "--corpus" => corpus = PathBuf::from(v),
                    _ => artifacts = PathBuf::from(v),
                }
            }
            _ => return usage(),
        }
    }
    capture_panics();
    if let Some(paths) = replay {
        let mut failed = 0;
        let mut n = 0;
        for p in paths {
            let files = if p.is_dir() {
                read_dir(&p)
            } else {
                std::fs::read(&p)
                    .map(|b| vec![(p.clone(), b)])
                    .unwrap_or_default()
            };
            for (path, data) in files {
                n += 1;
                if let Err(msg) = run_one(t, &data) {
                    failed += 1;
                    eprintln!("{}: {}: {msg}", t.name, path.display());
                }
            }
        }
        println!("{}: replayed {n} input(s), {failed} crash(es)", t.name);
        return if failed == 0 {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        };
    }
    let mut log = std::io::stderr();
    match fuzz(
        t,
        &corpus,
        &artifacts,
        Duration::from_secs(seconds),
        seed,
        &mut log,
    ) {
        Ok(s) => {
            println!(
                "{}: {} execs in {seconds} s ({:.0}/s), {} crashes, {} slow (> 2 s), {} outcome classes, corpus {}",
                t.name,
                s.execs,
                s.execs as f64 / seconds.max(1) as f64,
                s.crashes,
                s.slow,
                s.classes,
                s.corpus
            );
            if s.crashes == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}
