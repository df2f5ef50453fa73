# Sourced (from the repository root) by the GPU machine's scripts that run npu_export: the
# output folder $out ($OUT, else /tmp/npu-gpu-out), the carried pytorch-ir wheel installed
# into /tmp/site (the machine has no network), the export tool on PYTHONPATH, and the CUDA
# kernel cache.
out=${OUT:-/tmp/npu-gpu-out}
mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/tools/export PYTHONUNBUFFERED=1
export NPU_CUDA_CACHE=${NPU_CUDA_CACHE:-/tmp/npu-cuda-cache}
