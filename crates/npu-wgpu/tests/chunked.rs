//! Tensors larger than one binding: with the binding size capped far below the adapter's,
//! the conformance cases whose operands exceed it bind them in parts and must still match
//! their references (the suite's own cases and judgement).

use npu_conformance::{assert_passed, cases, report_line, run_case, Family, SEED};
use npu_wgpu::{WgpuBackend, WgpuError};

/// Small enough that the decode-size GEMVs' weights (1536 x 2048 bf16: 6 MiB) and the long
/// caches of the attention cases span several parts; the gathers' tables are smaller, so
/// their cap is too.
const CAP: u64 = 1 << 20;
const GATHER_CAP: u64 = 64 << 10;

fn capped(test: &str, cap: u64) -> Option<WgpuBackend> {
    match WgpuBackend::with_max_binding(cap) {
        Ok(b) => Some(b),
        Err(e @ WgpuError::NoAdapter(_)) if std::env::var_os("NPU_REQUIRE_WGPU").is_none() => {
            println!("SKIP: {test}: {e}");
            None
        }
        Err(e) => panic!("the wgpu backend failed to start: {e}"),
    }
}

fn run(test: &str, family: Family, cap: u64, min_large: usize) {
    let Some(be) = capped(test, cap) else { return };
    let all = cases(family, SEED, false);
    let large: Vec<_> = all
        .iter()
        .filter(|c| c.values.iter().any(|v| v.bytes().len() as u64 > cap))
        .collect();
    assert!(
        large.len() >= min_large,
        "{test}: only {} cases exceed {cap} bytes",
        large.len()
    );
    let outcomes: Vec<_> = large.iter().map(|c| run_case(c, &be)).collect();
    for o in &outcomes {
        println!("{}", report_line(o));
    }
    assert_passed(
        test,
        &format!("wgpu with bindings capped at {cap} bytes"),
        &outcomes,
    );
}

#[test]
fn gemm_in_parts() {
    run("gemm_in_parts", Family::Gemm, CAP, 5);
}

#[test]
fn attention_in_parts() {
    run("attention_in_parts", Family::Attention, CAP, 2);
}

#[test]
fn gather_in_parts() {
    run("gather_in_parts", Family::Gather, GATHER_CAP, 2);
}
