//! `--profile`: where a program's time goes, per kernel kind and per step.

use npu_runtime::StepTime;
use std::collections::BTreeMap;

/// Prints totals per kernel kind and the `top` slowest steps, averaged per run.
pub fn print(title: &str, steps: &[StepTime], top: usize) {
    let runs = steps.iter().map(|s| s.runs).max().unwrap_or(0).max(1);
    let total: f64 = steps.iter().map(|s| s.total_ms).sum::<f64>() / runs as f64;
    say!("profile of {title}: {total:.2} ms per run in kernels, {runs} run(s)");
    let mut kinds: BTreeMap<&str, (f64, usize)> = BTreeMap::new();
    for s in steps {
        let e = kinds.entry(s.kernel).or_default();
        e.0 += s.total_ms / runs as f64;
        e.1 += 1;
    }
    let mut kinds: Vec<_> = kinds.into_iter().collect();
    kinds.sort_by(|a, b| b.1 .0.total_cmp(&a.1 .0));
    say!(
        "  {:<20} {:>6} {:>11} {:>7}",
        "kernel",
        "steps",
        "ms/run",
        "share"
    );
    for (k, (ms, n)) in kinds {
        say!(
            "  {k:<20} {n:>6} {ms:>11.3} {:>6.1}%",
            100.0 * ms / total.max(f64::MIN_POSITIVE)
        );
    }
    let mut slow: Vec<&StepTime> = steps.iter().collect();
    slow.sort_by(|a, b| b.total_ms.total_cmp(&a.total_ms));
    say!("  slowest steps:");
    for s in slow.into_iter().take(top) {
        say!(
            "  {:>6} {:<16} {:>9.3} ms  [{}]",
            s.step,
            s.kernel,
            s.total_ms / runs as f64,
            s.origin
        );
    }
}

/// Prints where the backend's start-up time went, when it reports phases.
pub fn print_startup(backend: &dyn npu_runtime::Backend) {
    let phases = backend.startup();
    if phases.is_empty() {
        return;
    }
    let total: f64 = phases.iter().map(|p| p.1).sum();
    let parts: Vec<String> = phases
        .iter()
        .map(|(what, ms)| format!("{what} {ms:.1} ms"))
        .collect();
    say!(
        "start-up of the {} backend: {total:.1} ms ({})",
        backend.name(),
        parts.join(", ")
    );
}
