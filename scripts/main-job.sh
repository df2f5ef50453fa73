#!/usr/bin/env bash
# The main job (README): sets everything up on a fresh machine, exports ResNet-18 with the export
# tool (seeded random weights, non-trivial BN statistics), compiles it, runs it on the best
# available backend (the CPU here) and prints its top-5 classes next to PyTorch's, with the
# agreement and the latency of both, measured on this machine.
# Env: OUT (default out/resnet18), REPEAT (timed runs, default 20).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUT="${OUT:-out/resnet18}"
REPEAT="${REPEAT:-20}"
export PYTHONPATH="$ROOT/tools/export${PYTHONPATH:+:$PYTHONPATH}"

echo "== setup"
scripts/setup-python.sh
cargo build --release --quiet -p npu-cli
NPU=target/release/npu

echo "== export resnet18 (PyTorch + torch_ir) -> $OUT"
if [ ! -f "$OUT/weights.safetensors" ]; then
    .venv/bin/python -m npu_export resnet18 --out "$OUT" > /dev/null
fi

BACKEND=cpu
echo "== compile for the $BACKEND backend"
"$NPU" compile "$OUT/model.ir.json" -o "$OUT/model.npubin" --target cpu --dtype f32

echo "== run on $BACKEND ($REPEAT timed runs)"
run_line=$("$NPU" run "$OUT/model.npubin" --backend "$BACKEND" --weights "$OUT/weights.safetensors" \
    --inputs "$OUT/io.safetensors" --outputs "$OUT/outputs.safetensors" --repeat "$REPEAT" | head -1)
echo "$run_line"
npu_ms=$(sed -E 's/.*median ([0-9.]+) ms.*/\1/' <<< "$run_line")

echo "== npu vs PyTorch"
.venv/bin/python -m npu_export.report topk "$OUT" "$OUT/outputs.safetensors" --npu-ms "$npu_ms" --repeat "$REPEAT"
