//! Prints every conformance case's outcome on the CPU backend (the table the GPU check
//! binaries print for theirs): `cargo run -p npu-conformance --example cpu_report [seed]`.

fn main() {
    let seed = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(npu_conformance::SEED);
    let cpu = npu_runtime::CpuBackend::new();
    let outcomes = npu_conformance::run_all(&cpu, seed, false);
    for o in &outcomes {
        println!("{}", npu_conformance::report_line(o));
    }
    let passed = outcomes.iter().filter(|o| o.passed()).count();
    println!("{passed}/{} passed", outcomes.len());
    if passed != outcomes.len() {
        std::process::exit(1);
    }
}
