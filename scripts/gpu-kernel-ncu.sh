#!/usr/bin/env bash
# Why a decode step's kernels stream below the copy bandwidth, for the GPU machine (builds
# nothing; stage with scripts/gpu-check.sh --stage and compile the decode program here):
# Nsight Compute's throughput, occupancy and warp-stall sections for COUNT consecutive launches
# of one kernel in a decode step at a cache position, random weights (the GEMVs: q/k/v, o,
# gate/up, down are one layer's four k_gemv16 launches). ncu serializes the launches (no
# programmatic overlap) and flushes L2 between them: read the per-kernel limits, not the
# replayed graph's time.
#   scripts/gpu-kernel-ncu.sh [--source] DECODE.npubin [POSITION] [KERNEL_REGEX] [SKIP] [COUNT]
# --source: also where the warps stall, by SASS instruction: the pass saved as a report
# ($OUT/kernel-ncu.ncu-rep), its source page as $OUT/kernel-source.csv, and
# tools/export/npu_export/ncu_source.py's summary of the first of the COUNT launches (stall
# samples per region between barriers, top instructions, accesses over the ideal) as
# $OUT/kernel-source.txt.
# Defaults: position 1000, k_gemv16 and its dtype instances, skip 100 matching launches
# (preparation's and the first runs'; decode-at runs at least nine steps: 113 k_gemv16 or 28
# k_attn_dec_mma launches each), count 4 (a layer's q/k/v, o, gate/up and down GEMVs). Writes
# $OUT/kernel-ncu.txt (with the memory workload section: L2 hit rate, DRAM throughput); the
# stall reasons are the smsp__average_warps_issue_stalled_* rows (cycles per issued
# instruction).
set -euo pipefail
cd "$(dirname "$0")/.."
source=0
if [ "${1:-}" = "--source" ]; then
    source=1
    shift
fi
prog=$1 pos=${2:-1000} kernel=${3:-k_gemv16(_bf16|_f16)?} skip=${4:-100} count=${5:-4}
out=${OUT:-/tmp/npu-gpu-out}
mkdir -p "$out"
export NPU_CUDA_CACHE=${NPU_CUDA_CACHE:-/tmp/npu-cuda-cache}
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
bench=(.device/npu-cuda-bench decode-at --decode "$prog" --weights random --positions "$pos" --repeat 1)
profile() {
    "$ncu" --kernel-name "regex:^(${kernel})\$" --launch-skip "$skip" --launch-count "$count" \
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
        --section WarpStateStats --section LaunchStats --section ComputeWorkloadAnalysis \
        --section InstructionStats --section SchedulerStats --section SourceCounters \
        --metrics 'regex:^smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio$' \
        "$@" "${bench[@]}"
}
if [ "$source" = 1 ]; then
    # one profiling pass: the report gives both the text (its details page is what ncu prints
    # without -o) and the source page
    profile -f -o "$out/kernel-ncu" >"$out/kernel-source.log" 2>&1 || true
    "$ncu" --import "$out/kernel-ncu.ncu-rep" --page details >"$out/kernel-ncu.txt" 2>&1 || true
else
    profile >"$out/kernel-ncu.txt" 2>&1 || true
fi
grep -E "k_[a-z0-9_]+|Duration|DRAM Throughput|Memory Throughput|Mem Busy|Max Bandwidth|L1/TEX Hit Rate|L2 Hit Rate|Mem Pipes Busy|Achieved Occupancy|Registers Per|Block Limit|Stall|stalled|Warp Cycles Per Issued|Grid Size|Shared Memory Config|Executed Ipc|Issue Slots|Pipe" \
    "$out/kernel-ncu.txt" | head -150
if [ "$source" = 1 ]; then
    "$ncu" --import "$out/kernel-ncu.ncu-rep" --page source --print-source sass --csv \
        >"$out/kernel-source.csv" 2>>"$out/kernel-source.log" || true
    python3 tools/export/npu_export/ncu_source.py "$out/kernel-source.csv" | tee "$out/kernel-source.txt"
fi
