//! The conformance suite on the CPU backend (the reference backend, always present).

npu_conformance::suite!("cpu", || Ok(Box::new(npu_runtime::CpuBackend::new())));
