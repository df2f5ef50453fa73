#!/usr/bin/env bash
# Exports the end-to-end test models that are too large to commit (ResNet-18/50 with weights and
# PyTorch reference I/O, batch 1 and 4) into target/test-models/. Skips a model whose export is
# already there for the same pinned requirements. Rust tests read them from NPU_TEST_MODELS
# (default target/test-models) and, with NPU_REQUIRE_MODELS=1 (set by scripts/test.sh), fail
# instead of skipping when they are missing.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PY:-$ROOT/.venv/bin/python}"
OUT="${NPU_TEST_MODELS:-$ROOT/target/test-models}"
export PYTHONPATH="$ROOT/tools/export${PYTHONPATH:+:$PYTHONPATH}"
stamp="$(sha256sum "$ROOT/tools/export/requirements.txt" "$ROOT"/tools/export/npu_export/*.py | sha256sum | cut -d' ' -f1)"

export_model() {
    local dir="$1"; shift
    if [ "$(cat "$OUT/$dir/.stamp" 2>/dev/null || true)" = "$stamp" ]; then
        echo "$dir: up to date"
        return
    fi
    rm -rf "${OUT:?}/$dir"
    echo "$dir: npu_export $*"
    "$PY" -m npu_export "$@" --out "$OUT/$dir" >/dev/null
    echo "$stamp" > "$OUT/$dir/.stamp"
}

mkdir -p "$OUT"
export_model resnet18     resnet18 --batch 1 --seed 0
export_model resnet18-b4  resnet18 --batch 4 --seed 0
export_model resnet50     resnet50 --batch 1 --seed 0
export_model resnet50-b4  resnet50 --batch 4 --seed 0
# Architectures the project had never seen (issue 9): ViT (nn.MultiheadAttention), a Whisper-style
# encoder (conv1d stem), a UNet (conv_transpose2d, bilinear upsampling), MobileNetV3 (hardswish, SE).
for m in vit-tiny whisper-encoder-tiny unet-tiny mobilenet-v3-small; do
    export_model "$m" "$m" --seed 0
done
# Text in, text out (issue 15): a small byte-level BPE trained here with the `tokenizers` library (256
# tokens, Qwen's pre-tokenizer and special tokens, a Qwen2.5-style chat template; nothing is downloaded),
# attached to a qwen2.5-tiny export with a 128-slot cache. The export writes text_reference.json: the
# encodings, chat prompts, greedy generations and sampling distributions of transformers on that model.
if [ "$(cat "$OUT/test-tokenizer/.stamp" 2>/dev/null || true)" != "$stamp" ]; then
    rm -rf "${OUT:?}/test-tokenizer"
    echo "test-tokenizer: npu_export.tokenizer"
    "$PY" -m npu_export.tokenizer --out "$OUT/test-tokenizer" >/dev/null
    echo "$stamp" > "$OUT/test-tokenizer/.stamp"
else
    echo "test-tokenizer: up to date"
fi
export_model qwen2.5-tiny-text qwen2.5-tiny --seed 0 --max-cache-len 128 --tokenizer "$OUT/test-tokenizer"
