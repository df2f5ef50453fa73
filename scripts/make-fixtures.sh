#!/usr/bin/env bash
# Regenerates everything under fixtures/ (see fixtures/README.md) with the pinned toolchain.
# Usage: scripts/make-fixtures.sh   (after scripts/setup-python.sh). ~1 min on 2 CPU cores, no network.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PY:-$ROOT/.venv/bin/python}"
FIX="$ROOT/fixtures"
export PYTHONPATH="$ROOT/tools/export${PYTHONPATH:+:$PYTHONPATH}"

export_model() {
    local dir="$1"; shift
    rm -rf "${FIX:?}/$dir"
    echo "== $dir: npu_export $*"
    "$PY" -m npu_export "$@" --out "$FIX/$dir" >/dev/null
}

# complete fixtures: IR + weights + reference I/O
export_model mlp            mlp --batch 2 --seed 0
export_model small-cnn      small-cnn --batch 1 --seed 0
export_model small-cnn-b4   small-cnn --batch 4 --seed 0
export_model qwen2.5-tiny   qwen2.5-tiny --seq-len 8 --max-cache-len 64 --decode-steps 32 --dtype float32 --seed 0
export_model bert-tiny      bert-tiny --seq-len 16 --seed 0
# decoder LM called as model(input_ids): the mask is built in the graph (aten.diff, ...)
export_model llama-tiny     llama-tiny --seq-len 12 --seed 0

# per-op reference cases for the CPU fallback interpreter (crates/npu-dag/tests/fallback.rs)
export_model fallback       fallback-refs --seed 0

# IR only (meta device, no weights)
export_model resnet18       resnet18 --batch 1 --ir-only
export_model resnet50       resnet50 --batch 1 --ir-only
export_model qwen2.5-1.5b   qwen2.5-1.5b --seq-len 128 --max-cache-len 2048 --ir-only

du -ab "$FIX" | sort -k2
