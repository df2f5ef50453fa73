#!/usr/bin/env bash
# Text generation on the CUDA backend, for the GPU machine (builds nothing; stage with
# scripts/gpu-check.sh --stage): trains a Qwen-sized BPE tokenizer on local Python sources,
# exports Qwen2.5-1.5B with random weights and that tokenizer as a model directory, then runs
# `npu generate MODEL_DIR --backend cuda` (first use compiles into the directory's cache) and
# `npu chat`, printing tokens/s. Random weights make the text meaningless; the numbers are
# what matters. Writes $OUT/generate-cuda.json (the --json result) and logs.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/gpu-python-env.sh
work=${WORK:-/tmp/npu-gen}
mkdir -p "$work"
corpus=$(python3 -c 'import os, transformers; print(os.path.dirname(transformers.__file__))')
[ -f "$work/tok/tokenizer.json" ] || python3 -m npu_export.tokenizer --out "$work/tok" \
    --vocab-size 151665 --corpus "$corpus" 2>&1 | tail -2
[ -f "$work/q15/weights.safetensors" ] || python3 -m npu_export qwen2.5-1.5b --out "$work/q15" \
    --tokenizer "$work/tok" --no-hf-check --decode-steps 0 >"$out/generate-export.log" 2>&1
prompt='def generate(model, prompt, max_new_tokens=32):'
.device/npu generate "$work/q15" --backend cuda --prompt "$prompt" --max-new-tokens 8 >/dev/null
.device/npu generate "$work/q15" --backend cuda --prompt "$prompt" --max-new-tokens 512 --json \
    | tee "$out/generate-cuda.json" | python3 -c 'import json,sys; d=json.load(sys.stdin); print({k: v for k, v in d.items() if k not in ("text", "tokens")})'
.device/npu generate "$work/q15" --backend cuda --prompt "$prompt" --max-new-tokens 64 2>&1 | tail -3
printf 'Hi!\nAnd then?\n/exit\n' | .device/npu chat "$work/q15" --backend cuda --max-new-tokens 32 2>&1 | tail -4
