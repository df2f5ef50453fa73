#!/usr/bin/env bash
# A/B timing of CUDA backend variants on the GPU machine (builds nothing; stage with
# scripts/gpu-check.sh --stage, and a second build's binaries in their own directory if the
# variants differ by build): Qwen2.5-1.5B prefill and decode, and vision models (--vision),
# variants in alternating rounds.
#   scripts/gpu-ab.sh --variant generic=.device,NPU_CUDA_DTYPE_KERNELS=0 --variant new=.device [--rounds 3] [--long]
#   scripts/gpu-ab.sh --variant im2col=.device,NPU_CUDA_CUDNN=0 --variant cudnn=.device --vision resnet50:64 --no-qwen
#   scripts/gpu-ab.sh --variant late=.device,NPU_CUDA_ATTN_PRE=0 --variant early=.device \
#       --case 1000=.device/progs/decode-bf16.npubin --case 32000=.device/progs/decode32k-bf16.npubin --deadline 470
# --case POSITION=PROGRAM times decode programs compiled here and carried (npu compile ... --dtype
# bf16 --target npu) instead of exporting Qwen there: several variants fit one call; --deadline
# starts no run after that many seconds.
# --qwen-ir fixtures/qwen2.5-1.5b compiles the repository's Qwen graphs instead of exporting them
# there (~2.5 minutes of a fresh machine's device time; the 32k graph of --long is still exported).
# Writes $OUT/gpu-ab.json.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/gpu-python-env.sh
python3 -m npu_export.gpu_ab --work /tmp/npu-gpu --json "$out/gpu-ab.json" "$@" 2>&1 | tee "$out/gpu-ab.log"
