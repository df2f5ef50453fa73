#!/usr/bin/env bash
# A/B timing of two wgpu builds on the GPU machine, with no export (random weights): the
# Qwen2.5-1.5B decode program compiled here (.device/exp/decode-bf16.npubin; see docs/wgpu.md),
# our CUDA backend first (its decode-at also ramps the GPU's clocks), then every
# .device/npu-wgpu-bench* build (e.g. npu-wgpu-bench-base and npu-wgpu-bench) in turn, ROUNDS
# times (default 3), each warming for 3 s before its timed runs. Prints a summary per run.
#   scripts/gpu-wgpu-ab.sh [ROUNDS] [POSITION]
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/vulkan-env.sh
export NPU_CUDA_CACHE=${NPU_CUDA_CACHE:-/tmp/npu-cuda-cache}
rounds=${1:-3}
pos=${2:-1000}
prog=.device/exp/decode-bf16.npubin
summ='import json, sys
d = json.load(sys.stdin)
pts = [(p["position"], p.get("gpu_ms"), p["wall_ms"], p.get("min_ms")) for p in d["points"]]
top = [(t["name"], t["count"], round(t["ms"], 3)) for t in d.get("top_kernels", [])[:10]]
print(sys.argv[1], pts, "profiled", d.get("profiled_ms"))
for t in top: print("   ", t)'
.device/npu-cuda-bench decode-at --decode $prog --weights random --positions "$pos" --repeat 200 \
    | python3 -c "$summ" cuda
for i in $(seq "$rounds"); do
    for b in $(cd .device && ls npu-wgpu-bench*); do
        .device/$b decode-at --decode $prog --weights random --positions "$pos" --repeat 50 \
            | python3 -c "$summ" "$b#$i"
    done
done
