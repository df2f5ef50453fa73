#!/usr/bin/env bash
# GPU correctness check of the CUDA backend, for the GPU machine: builds nothing there.
# Here (once per change): scripts/gpu-check.sh --stage   (release build of npu, npu-cuda-check and
#   npu-cuda-bench into .device/, plus the pytorch-ir wheel into .whl/; both ignored via
#   .git/info/exclude and carried to the device).
# There: scripts/gpu-check.sh [--bench] [gpu_check args]: installs the wheel, runs every kernel kind
#   against the CPU backend, ResNet-18/50 f16 and Qwen2.5 (tiny f32/bf16, 1.5B bf16) against
#   PyTorch on the same GPU, prints a table; with --bench also runs the benchmark
#   (python -m npu_export.gpu_bench). Logs and JSON go to $OUT (or /tmp/npu-gpu-out).
# On an H100 the check takes ~4-5 min and the benchmark ~4 min once the exports exist: from a fresh
# machine, run them as two calls (check, then scripts/gpu-bench.sh while the machine is warm: the
# exports in /tmp/npu-gpu are reused) to stay inside one call's 10 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--stage" ]; then
    export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target}
    cargo build --release -q -p npu-cli -p npu-cuda
    mkdir -p .device .whl
    for b in npu npu-cuda-check npu-cuda-bench; do cp "$CARGO_TARGET_DIR/release/$b" .device/; done
    if ldd .device/npu | grep -Eq 'libcuda|libnvrtc|libcublas'; then
        echo "error: npu links CUDA libraries at load time" >&2; exit 1
    fi
    ls .whl/pytorch_ir-*.whl >/dev/null 2>&1 || python3 -m pip download --no-deps --only-binary=:all: \
        --python-version 3.12 --implementation cp --platform any -d .whl pytorch-ir==0.2.3
    exit 0
fi
bench=0
if [ "${1:-}" = "--bench" ]; then bench=1; shift; fi
out=${OUT:-/tmp/npu-gpu-out}
mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/tools/export PYTHONUNBUFFERED=1
export NPU_CUDA_CACHE=${NPU_CUDA_CACHE:-/tmp/npu-cuda-cache}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
rc=0
python3 -m npu_export.gpu_check --bin .device --work /tmp/npu-gpu --json "$out/gpu-check.json" "$@" \
    2>&1 | tee "$out/gpu-check.log" || rc=$?
if [ "$bench" = 1 ]; then
    python3 -m npu_export.gpu_bench --bin .device --work /tmp/npu-gpu --json "$out/cuda-bench.json" \
        2>&1 | tee "$out/gpu-bench.log" || rc=$?
fi
cp /tmp/npu-gpu/*.log "$out/" 2>/dev/null || true
exit $rc
