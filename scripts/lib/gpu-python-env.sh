# Sourced (from the repository root) by the GPU machine's scripts that run npu_export: the
# output folder $out ($OUT, else /tmp/npu-gpu-out), the carried pytorch-ir wheel installed
# into /tmp/site (the machine has no network), the export tool on PYTHONPATH, and the CUDA
# kernel cache.
out=${OUT:-/tmp/npu-gpu-out}
mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/tools/export PYTHONUNBUFFERED=1
export NPU_CUDA_CACHE=${NPU_CUDA_CACHE:-/tmp/npu-cuda-cache}
# cuDNN for the convolutions (crates/npu-cuda/src/plan/conv_dnn.rs): the copy PyTorch's
# wheels installed, where there is one (without it, convolutions take the im2col path).
cudnn_lib=$(python3 -c '
import glob, os, site
dirs = site.getsitepackages() + [site.getusersitepackages()]
hits = [p for d in dirs for p in glob.glob(os.path.join(d, "nvidia", "*", "lib", "libcudnn.so.9"))]
print(os.path.dirname(hits[0]) if hits else "")' 2>/dev/null || true)
if [ -n "$cudnn_lib" ]; then
  export LD_LIBRARY_PATH=$cudnn_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
