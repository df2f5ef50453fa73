#!/usr/bin/env bash
# Prefill attention on the GPU machine (builds nothing). Here: scripts/gpu-check.sh --stage, then
#   PYTHONPATH=tools/export .venv/bin/python -m npu_export.attn_probe --out .attn --npu target/release/npu
# (a one-op, Qwen2.5-1.5B-shaped prefill attention over a 2048-slot cache; carry .device and .attn).
# There: the attention cases of the kernel suite, the probe timed by CUDA events, and Nsight
# Compute's time, instruction and tensor-core counts for its kernels. Logs go to $OUT.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/npu-gpu-out}
mkdir -p "$out"
export NPU_CUDA_CACHE=${NPU_CUDA_CACHE:-/tmp/npu-cuda-cache}
.device/npu-cuda-check 2>&1 | tee "$out/kernels.log" | grep -E "attention|checks|FAIL" || true
bench=(.device/npu-cuda-bench time --program .attn/attn-bf16.npubin --weights .attn/weights.safetensors
    --io .attn/io.safetensors --repeat 200)
"${bench[@]}" | tail -1
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
"$ncu" -k regex:k_attn --launch-count 4 --metrics \
    gpu__time_duration.sum,smsp__inst_executed.sum,sm__inst_executed_pipe_tensor_op_hmma.sum,lts__t_bytes.sum,dram__bytes_read.sum,launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active \
    "${bench[@]/200/1}" 2>&1 | grep -E "k_attn|duration|inst_executed|hmma|bytes|registers|warps_active" | tee "$out/attn-ncu.log"
"$ncu" -k k_attn_mma --launch-count 1 --section WarpStateStats --section SchedulerStats "${bench[@]/200/1}" 2>&1 \
    | grep -E "Warp Cycles|Stall|Issued|Eligible|Active Warps" | tee -a "$out/attn-ncu.log"
