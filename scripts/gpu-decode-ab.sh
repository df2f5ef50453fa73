#!/usr/bin/env bash
# Decode-only A/B of CUDA backend variants on the GPU machine (builds and exports nothing):
# decode programs compiled here (npu compile ... --dtype bf16 --target npu) and variants as
# binary directories plus environment settings, in alternating rounds. See
# tools/export/npu_export/gpu_decode_ab.py. Writes $OUT/gpu-decode-ab.json.
#   scripts/gpu-decode-ab.sh --case 1000=.device/progs/decode-bf16.npubin \
#       --variant base=.device,NPU_CUDA_ATTN_PRE=0 --variant new=.device [--rounds 2] [--deadline 470]
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 NPU_CUDA_CACHE=${NPU_CUDA_CACHE:-/tmp/npu-cuda-cache}
# run as a file: the package's __init__ needs the pytorch-ir wheel, this script does not
exec python3 tools/export/npu_export/gpu_decode_ab.py "$@"
