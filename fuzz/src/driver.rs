//! The fuzzing loop: pick a corpus entry, mutate it, run the target under `catch_unwind`,
//! keep inputs that reach a new outcome class, save every crash (panic) with its message.
//! The input being executed is also written to `<artifacts>/current` first, so a process
//! abort (stack overflow, allocator abort) leaves the culprit behind.

use crate::mutate::{mutate, Rng};
use crate::targets::Target;
use std::collections::HashSet;
use std::io::{Seek, Write};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What a fuzzing session did.
#[derive(Debug, Default)]
pub struct Stats {
    pub execs: u64,
    pub crashes: u64,
    pub slow: u64,
    pub classes: usize,
    pub corpus: usize,
}

/// Inputs slower than this are saved as `slow-*` (a hang is a bug too).
const SLOW: Duration = Duration::from_secs(2);
/// Feedback keeps at most this many inputs in memory.
const MAX_CORPUS: usize = 4000;

/// Files under `dir` (one level), sorted, as byte vectors.
pub fn read_dir(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .filter_map(|p| std::fs::read(&p).ok().map(|b| (p, b)))
        .collect();
    out.sort();
    out
}

fn fnv(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

thread_local! {
    static PANIC: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// Silences the default panic printout and keeps the message for the crash report.
pub fn capture_panics() {
    std::panic::set_hook(Box::new(|info| {
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        let at = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_default();
        PANIC.with(|p| *p.borrow_mut() = format!("{msg} at {at}"));
    }));
}

/// Runs one input; `Err(message)` on a panic.
pub fn run_one(t: &Target, data: &[u8]) -> Result<String, String> {
    catch_unwind(AssertUnwindSafe(|| (t.run)(data))).map_err(|_| PANIC.with(|p| p.borrow().clone()))
}

/// Fuzzes `t` for `duration` from the seeds in `corpus`, saving crashes under `artifacts`.
pub fn fuzz(
    t: &Target,
    corpus: &Path,
    artifacts: &Path,
    duration: Duration,
    seed: u64,
    log: &mut dyn Write,
) -> std::io::Result<Stats> {
    std::fs::create_dir_all(artifacts)?;
    let mut current = std::fs::File::create(artifacts.join("current"))?;
    let mut entries: Vec<Vec<u8>> = read_dir(corpus).into_iter().map(|(_, b)| b).collect();
    if entries.is_empty() {
        entries.push(Vec::new());
    }
    let mut classes = HashSet::new();
    let mut stats = Stats::default();
    let mut crash_seen = HashSet::new();
    for e in entries.clone() {
        if let Ok(c) = run_one(t, &e) {
            classes.insert(c);
        }
    }
    let mut rng = Rng::new(seed);
    let start = Instant::now();
    let mut last_report = Instant::now();
    while start.elapsed() < duration {
        let base = &entries[rng.below(entries.len())];
        let other = &entries[rng.below(entries.len())];
        let mut data = base.clone();
        mutate(&mut data, other, &mut rng, t.max_len);
        if let Some(fix) = t.fixup {
            if rng.chance(2) {
                fix(&mut data);
            }
        }
        current.set_len(0)?;
        current.rewind()?;
        current.write_all(&data)?;
        let t0 = Instant::now();
        let outcome = run_one(t, &data);
        let took = t0.elapsed();
        stats.execs += 1;
        if took > SLOW {
            stats.slow += 1;
            std::fs::write(artifacts.join(format!("slow-{:016x}", fnv(&data))), &data)?;
        }
        match outcome {
            Ok(class) => {
                if classes.insert(class) && entries.len() < MAX_CORPUS {
                    entries.push(data);
                }
            }
            Err(msg) => {
                stats.crashes += 1;
                let h = fnv(&data);
                if crash_seen.insert(h) {
                    std::fs::write(artifacts.join(format!("crash-{h:016x}")), &data)?;
                    std::fs::write(artifacts.join(format!("crash-{h:016x}.txt")), &msg)?;
                    writeln!(log, "{}: CRASH crash-{h:016x}: {msg}", t.name)?;
                }
            }
        }
        if last_report.elapsed() > Duration::from_secs(60) {
            last_report = Instant::now();
            writeln!(
                log,
                "{}: {} execs, {} crashes, {} classes, corpus {}, {:.0} s",
                t.name,
                stats.execs,
                stats.crashes,
                classes.len(),
                entries.len(),
                start.elapsed().as_secs_f64()
            )?;
        }
    }
    std::fs::remove_file(artifacts.join("current")).ok();
    stats.classes = classes.len();
    stats.corpus = entries.len();
    Ok(stats)
}
