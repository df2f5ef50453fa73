#!/usr/bin/env bash
# The project's test command (README): sets up everything on a fresh machine, then runs lint and
# every test. Rust tests need no torch (fixtures are committed); the Python venv serves the export
# tool's tests and the end-to-end models generated before the Rust tests.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

step() { printf '\n== %s\n' "$*"; }

step "python venv (pinned torch/torchvision/transformers/pytorch-ir)"
scripts/setup-python.sh

step "rust: format and lint"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --quiet -- -D warnings

if [ -x scripts/make-test-models.sh ]; then
    step "end-to-end models (export tool, cached under target/test-models)"
    scripts/make-test-models.sh
    export NPU_REQUIRE_MODELS=1
fi

step "python: export tool lint and tests"
(cd tools/export && ../../.venv/bin/ruff check . && ../../.venv/bin/ruff format --check .)
.venv/bin/python -m pytest -q tools/export/tests

step "rust: tests"
cargo test --workspace 2>&1 | tee target/cargo-test.log
passed=$(grep -Eo '^test result: ok\. [0-9]+ passed' target/cargo-test.log | awk '{s+=$4} END {print s+0}')
failed=$(grep -Eo '[0-9]+ failed' target/cargo-test.log | awk '{s+=$1} END {print s+0}')
echo
echo "rust: ${passed} passed, ${failed} failed"
