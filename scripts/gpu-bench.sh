#!/usr/bin/env bash
# GPU benchmark of the CUDA backend against PyTorch eager and torch.compile on the same GPU, for
# the GPU machine (builds nothing; stage with scripts/gpu-check.sh --stage). Writes
# $OUT/cuda-bench.json (commit the reported run as benchmarks/results/cuda-<gpu>.json).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/gpu-python-env.sh
python3 -m npu_export.gpu_bench --bin .device --work /tmp/npu-gpu --json "$out/cuda-bench.json" "$@" \
    2>&1 | tee "$out/gpu-bench.log"
