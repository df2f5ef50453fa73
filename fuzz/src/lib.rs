//! Stable-toolchain fuzzing of npu's input surfaces (nightly-only cargo-fuzz/libFuzzer
//! cannot be installed here): a mutation loop over committed seed corpora with outcome-class
//! feedback, crash capture, and replay of saved cases. Targets: IR JSON parse + check +
//! compile, the `.npubin` loader (and a run of what loads), the safetensors reader, the
//! input matcher. Run `npu-fuzz TARGET --seconds N`; see `scripts/fuzz.sh`.

pub mod driver;
pub mod mutate;
pub mod targets;
