#!/usr/bin/env bash
# The wgpu backend on the GPU machine, through NVIDIA's Vulkan driver (builds nothing there;
# stage here with scripts/gpu-check.sh --stage and carry .device, .whl and .gl): the conformance
# suite, then ResNet-50 batch 1/64 and a Qwen2.5-1.5B decode step on wgpu against our CUDA
# backend in the same run (python -m npu_export.gpu_wgpu). Writes $OUT/wgpu-bench.json and logs;
# reuses the exports of scripts/gpu-check.sh / gpu-bench.sh in /tmp/npu-gpu when they exist.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/gpu-python-env.sh
. scripts/lib/vulkan-env.sh
# The conformance tests skip where no adapter answers; here that would hide a broken setup.
.device/npu run --help >/dev/null
echo "Vulkan driver: ${VK_DRIVER_FILES:-none}; $(ldconfig -p | grep -c -E 'libvulkan|libGLX_nvidia') loader/ICD libraries"
src=$(cat .device/checkout-path)
if [ ! -e "$src/fixtures" ]; then mkdir -p "$(dirname "$src")" && ln -sfn "$PWD" "$src"; fi
rc=0
t0=$(date +%s)
NPU_REQUIRE_WGPU=1 .device/npu-wgpu-conformance --test-threads 1 2>&1 | tee "$out/wgpu-conformance.log" || rc=1
echo "wgpu conformance suite: $(( $(date +%s) - t0 )) s" | tee -a "$out/wgpu-conformance.log"
python3 -m npu_export.gpu_wgpu --bin .device --work /tmp/npu-gpu --json "$out/wgpu-bench.json" "$@" \
    2>&1 | tee "$out/wgpu-bench.log" || rc=1
cp /tmp/npu-gpu/gpu_wgpu.log "$out/" 2>/dev/null || true
exit $rc
