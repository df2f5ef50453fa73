#!/usr/bin/env bash
# Fuzzes every target for SECONDS (default 1800) at once, at the lowest priority, from the
# committed seed corpora (fuzz/corpus/TARGET); crashes land in fuzz/artifacts/TARGET. Prints
# each target's closing line (executions, crashes); exits non-zero on any crash.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
SECONDS_PER_TARGET="${1:-1800}"
cargo build -q -p npu-fuzz
mkdir -p fuzz/artifacts
pids=()
for t in ir npubin safetensors input; do
    nice -n 19 target/debug/npu-fuzz "$t" --seconds "$SECONDS_PER_TARGET" \
        >"fuzz/artifacts/$t.out" 2>"fuzz/artifacts/$t.log" &
    pids+=($!)
done
status=0
for p in "${pids[@]}"; do wait "$p" || status=1; done
cat fuzz/artifacts/*.out
exit "$status"
