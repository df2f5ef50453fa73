#!/usr/bin/env bash
# The kernel library's machine code, without a GPU: NVRTC compiles it for sm_90 (the
# kernels_compile_with_nvrtc test with NPU_CUDA_DUMP_DIR set), then ptxas's registers and spills
# and cuobjdump's SASS for the kernels matching a name pattern. The NVRTC, cuobjdump and nvdisasm
# wheels (CUDA 13, PyPI) go to $NPU_SASS_TOOLS (default /tmp/npu-sass-tools) once.
#   scripts/kernel-sass.sh KERNEL_REGEX      e.g. 'k_gemv16(_bf16)?'
# Prints, per kernel: registers, stack and spills; SASS instructions in all, before the first
# global load or copy of 16 bytes (the code a block runs before its first weight or tile load), the
# counts of global loads, shared loads and FFMAs. The SASS goes to $OUT (default
# /tmp/npu-sass)/KERNEL.sass. The GPU machine's NVRTC may allocate registers differently.
set -euo pipefail
cd "$(dirname "$0")/.."
pattern=${1:?usage: scripts/kernel-sass.sh KERNEL_REGEX}
tools=${NPU_SASS_TOOLS:-/tmp/npu-sass-tools}
out=${OUT:-/tmp/npu-sass}
mkdir -p "$out"
if [ ! -x "$tools/nvidia/cu13/bin/nvdisasm" ]; then
    python3 -m pip install -q --target "$tools" "nvidia-cuda-nvrtc>=13,<14" "nvidia-cuda-cuobjdump>=13,<14" \
        "nvidia-cuda-nvdisasm>=13,<14" >&2
fi
export PATH="$tools/nvidia/cu13/bin:$PATH"
LD_LIBRARY_PATH="$tools/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}" NPU_CUDA_DUMP_DIR="$out" \
    cargo test --release -q -p npu-cuda --lib kernels_compile_with_nvrtc >&2
names=$(grep -a -o "Compiling entry function '[A-Za-z0-9_]*'" "$out/ptxas.log" | cut -d"'" -f2 |
    grep -E "^(${pattern})\$" || true)
[ -n "$names" ] || { echo "no kernel matches '$pattern'" >&2; exit 1; }
for k in $names; do
    grep -a -A3 "entry function '$k'" "$out/ptxas.log" | grep -a -E "stack frame|Used" | sed 's/^ptxas[ a-z.:]*//' |
        tr -s ' ' | paste -sd ';' | sed "s/^/$k: /"
    cuobjdump -sass -fun "$k" "$out/library.cubin" | grep -E '^\s+/\*[0-9a-f]{4,}\*/' >"$out/$k.sass"
    awk -v k="$k" '
        /LDG\.E[A-Z.]*\.128|LDGSTS/ && !first { first = NR }
        /LDG/ { ldg++ } /LDS/ { lds++ } /FFMA/ { ffma++ }
        END { printf "%s: %d instructions, %d before the first 16-byte global load or copy; LDG %d, LDS %d, FFMA %d\n",
              k, NR, first - 1, ldg, lds, ffma }' "$out/$k.sass"
done
