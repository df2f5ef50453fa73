//! One kernel conformance suite for every backend.
//!
//! Each case is a one-step program (every kernel kind, on the shapes and layouts that break
//! kernels) with its reference computed from the kernel's contract (`reference`), not from
//! another backend: a bug the CPU and CUDA backends share fails on both. [`suite!`] expands to
//! one `#[test]` per kernel family for a backend; a backend with no device here skips each
//! test with a `SKIP:` line that `scripts/test.sh` counts.
//!
//! ```text
//! npu_conformance::suite!("cpu", || Ok(Box::new(npu_runtime::CpuBackend::new())));
//! ```

pub mod bench;
pub mod case;
pub mod cases;
pub mod compare;
pub mod models;
pub mod reference;

pub use case::{Case, Rng};
pub use cases::{cases, Family};
pub use compare::{run_case, Outcome};
pub use models::{run_models, ModelOutcome};

use npu_runtime::Backend;

/// The seed the tests use (the check binaries take others).
pub const SEED: u64 = 1;

/// Runs every case of `family` on `backend`.
pub fn run_family(backend: &dyn Backend, family: Family, seed: u64, long: bool) -> Vec<Outcome> {
    cases(family, seed, long)
        .iter()
        .map(|c| run_case(c, backend))
        .collect()
}

/// Runs every case of every family on `backend`.
pub fn run_all(backend: &dyn Backend, seed: u64, long: bool) -> Vec<Outcome> {
    Family::ALL
        .iter()
        .flat_map(|&f| run_family(backend, f, seed, long))
        .collect()
}

/// One line per outcome: verdict, kind, dtype, error over allowance, name, and where it failed.
pub fn report_line(o: &Outcome) -> String {
    let verdict = if o.passed() { "ok  " } else { "FAIL" };
    match &o.error {
        Some(e) => format!(
            "{verdict} {:<12} {:<5} {:>9} {}: {e}",
            o.kind,
            o.dtype.to_string(),
            "error",
            o.name
        ),
        None => format!(
            "{verdict} {:<12} {:<5} {:>9.3} {} ({})",
            o.kind,
            o.dtype.to_string(),
            o.worst,
            o.name,
            o.detail
        ),
    }
}

/// The body of one generated test: `make` gives the backend, or why there is none here (the
/// test then prints `SKIP: <test>: <why>` and returns).
pub fn test_family(
    test: &str,
    family: Family,
    make: impl FnOnce() -> Result<Box<dyn Backend>, String>,
) {
    let backend = match make() {
        Ok(b) => b,
        Err(why) => {
            println!("SKIP: {test}: {why}");
            return;
        }
    };
    let outcomes = run_family(backend.as_ref(), family, SEED, false);
    assert_passed(test, backend.name(), &outcomes);
}

/// Fails `test` with the report line of every case that failed `on` (a backend's name and
/// setting), if any did.
pub fn assert_passed(test: &str, on: &str, outcomes: &[Outcome]) {
    let failed: Vec<String> = outcomes
        .iter()
        .filter(|o| !o.passed())
        .map(report_line)
        .collect();
    assert!(
        failed.is_empty(),
        "{test}: {} of {} cases failed on {on}:\n{}",
        failed.len(),
        outcomes.len(),
        failed.join("\n")
    );
}

/// The body of the generated `models` test: every fixture model through the DAG executor on
/// the backend `make` gives (skipping as [`test_family`] does).
pub fn test_models(test: &str, make: impl FnOnce() -> Result<Box<dyn Backend>, String>) {
    let backend = match make() {
        Ok(b) => b,
        Err(why) => {
            println!("SKIP: {test}: {why}");
            return;
        }
    };
    let outcomes = run_models(backend.as_ref());
    for o in &outcomes {
        println!("{}: {}", o.name, o.error.as_deref().unwrap_or(&o.measured));
    }
    let failed: Vec<String> = outcomes
        .iter()
        .filter_map(|o| o.error.as_ref().map(|e| format!("{}: {e}", o.name)))
        .collect();
    assert!(
        failed.is_empty(),
        "{test}: {} of {} models differ from PyTorch on {}:\n{}",
        failed.len(),
        outcomes.len(),
        backend.name(),
        failed.join("\n")
    );
    for o in &outcomes {
        if let Some(why) = &o.skipped {
            println!("SKIP: {test}: {}: {why}", o.name);
        }
    }
}

/// One `#[test]` per kernel family, and one for the fixture models, against the backend `$make` gives
/// (`Result<Box<dyn Backend>, String>`, the error saying why it cannot run here). `$label`
/// names the tests in skip lines (no colons).
#[macro_export]
macro_rules! suite {
    ($label:literal, $make:expr) => {
        $crate::suite!(@one $label, $make, gemm, Gemm);
        $crate::suite!(@one $label, $make, conv, Conv);
        $crate::suite!(@one $label, $make, pool, Pool);
        $crate::suite!(@one $label, $make, pointwise, Pointwise);
        $crate::suite!(@one $label, $make, rows, Rows);
        $crate::suite!(@one $label, $make, gather, Gather);
        $crate::suite!(@one $label, $make, attention, Attention);
        #[test]
        fn models() {
            $crate::test_models(concat!($label, " conformance models"), $make);
        }
    };
    (@one $label:literal, $make:expr, $name:ident, $family:ident) => {
        #[test]
        fn $name() {
            $crate::test_family(
                concat!($label, " conformance ", stringify!($name)),
                $crate::Family::$family,
                $make,
            );
        }
    };
}
