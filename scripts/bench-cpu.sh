#!/usr/bin/env bash
# CPU benchmark (not a test): npu against PyTorch in the same run; prints a table and writes
# benchmarks/results/cpu.json. ResNet-18/50 always (exported to BENCH_DIR on first use);
# Qwen2.5-1.5B when QWEN_DIR holds a full export (python -m npu_export qwen2.5-1.5b --out DIR).
# usage: scripts/bench-cpu.sh [extra args for python -m npu_export.bench_cpu]
# env: BENCH_DIR (default /tmp/npu-bench), QWEN_DIR, THREADS (default: all cores)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p npu-cli
args=(--npu target/release/npu --work "${BENCH_DIR:-/tmp/npu-bench}")
[ -n "${QWEN_DIR:-}" ] && args+=(--qwen-dir "$QWEN_DIR")
PYTHONPATH=tools/export exec .venv/bin/python -m npu_export.bench_cpu "${args[@]}" "$@"
