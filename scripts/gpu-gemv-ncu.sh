#!/usr/bin/env bash
# Why a decode step's GEMVs stream below the copy bandwidth, for the GPU machine (builds nothing;
# stage with scripts/gpu-check.sh --stage and compile the decode program here): Nsight Compute's
# throughput, occupancy and warp-stall sections for one layer's GEMV launches (q/k/v, o,
# gate/up, down) of one decode step at a cache position, random weights. ncu serializes the
# launches (no programmatic overlap) and flushes L2 between them: read the per-kernel limits,
# not the replayed graph's time.
#   scripts/gpu-gemv-ncu.sh DECODE.npubin [POSITION] [KERNEL_REGEX]
# KERNEL_REGEX: default k_gemv16. Writes $OUT/gemv-ncu.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
prog=$1 pos=${2:-1000} kernel=${3:-k_gemv16}
out=${OUT:-/tmp/npu-gpu-out}
mkdir -p "$out"
export NPU_CUDA_CACHE=${NPU_CUDA_CACHE:-/tmp/npu-cuda-cache}
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
bench=(.device/npu-cuda-bench decode-at --decode "$prog" --weights random --positions "$pos" --repeat 1)
# skip the first runs' launches of the kernel (preparation's and the warm-up's) by skipping a
# whole step's worth several times over; 4 launches = one layer's GEMVs in order
"$ncu" --kernel-name "regex:^${kernel}\$" --launch-skip 400 --launch-count 4 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
    --section WarpStateStats --section LaunchStats "${bench[@]}" >"$out/gemv-ncu.txt" 2>&1 || true
grep -E "k_gemv|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Block Limit|Stall|Warp Cycles Per Issued|Grid Size|Dynamic Shared" \
    "$out/gemv-ncu.txt" | head -120
