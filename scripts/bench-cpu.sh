#!/usr/bin/env bash
# CPU backend benchmark: ResNet-18/50 (batch 1, f32) through `npu run --repeat N`, against
# PyTorch eager on the same machine with the same thread count, in the same script.
# Optional: Qwen2.5-1.5B (bf16) prefill/decode through `npu generate` when QWEN_DIR points at
# an export with weights (`python -m npu_export qwen2.5-1.5b --out DIR`, ~3.5 GB).
#
# usage: scripts/bench-cpu.sh [REPEAT]     env: BENCH_DIR (default /tmp/npu-bench), THREADS
#        (default: all cores), QWEN_DIR, QWEN_TOKENS (decode tokens, default 16),
#        QWEN_TORCH=1 to also time PyTorch on Qwen (slow: ~25 s prefill + decode).
set -euo pipefail
cd "$(dirname "$0")/.."
REPEAT=${1:-20}
DIR=${BENCH_DIR:-/tmp/npu-bench}
THREADS=${THREADS:-$(nproc)}
PY=${PY:-.venv/bin/python}
export RAYON_NUM_THREADS=$THREADS
mkdir -p "$DIR"
cargo build --release -q -p npu-cli
NPU=target/release/npu

for m in resnet18 resnet50; do
  if [ ! -f "$DIR/$m/weights.safetensors" ]; then
    PYTHONPATH=tools/export "$PY" -m npu_export "$m" --out "$DIR/$m" > "$DIR/$m.export.log"
  fi
  "$NPU" compile "$DIR/$m/model.ir.json" -o "$DIR/$m/f32.npubin" --target cpu --dtype f32 > /dev/null
  npu_line=$("$NPU" run "$DIR/$m/f32.npubin" --weights "$DIR/$m/weights.safetensors" \
    --inputs "$DIR/$m/io.safetensors" --outputs "$DIR/$m/out.safetensors" --repeat "$REPEAT" | head -1)
  npu_ms=$(sed -E 's/.*median ([0-9.]+) ms.*/\1/' <<< "$npu_line")
  torch_ms=$("$PY" - "$m" "$REPEAT" "$THREADS" <<'PYEOF'
import sys, time, torch, torchvision
name, repeat, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(threads)
model = getattr(torchvision.models, name)(weights=None).eval()
x = torch.randn(1, 3, 224, 224)
with torch.no_grad():
    for _ in range(3):
        model(x)
    times = []
    for _ in range(repeat):
        t = time.perf_counter(); model(x); times.append((time.perf_counter() - t) * 1e3)
times.sort()
print(f"{times[len(times) // 2]:.3f}")
PYEOF
)
  printf '%-10s batch 1 f32  npu cpu median %8.2f ms   pytorch median %8.2f ms   ratio %.2fx\n' \
    "$m" "$npu_ms" "$torch_ms" "$(echo "$npu_ms / $torch_ms" | bc -l)"
done

if [ -n "${QWEN_DIR:-}" ]; then
  N=${QWEN_TOKENS:-16}
  for g in prefill decode; do
    [ -f "$QWEN_DIR/$g.npubin" ] || "$NPU" compile "$QWEN_DIR/$g.ir.json" -o "$QWEN_DIR/$g.npubin" --target cpu --dtype bf16 > /dev/null
  done
  ids=$(seq -s, 1 128)
  "$NPU" generate --prefill "$QWEN_DIR/prefill.npubin" --decode "$QWEN_DIR/decode.npubin" \
    --weights "$QWEN_DIR/weights.safetensors" --prompt-ids "$ids" --max-new-tokens "$((N + 1))" | grep -v '^generated'
  if [ "${QWEN_TORCH:-0}" = 1 ]; then
    "$PY" - "$QWEN_DIR" "$N" "$THREADS" <<'PYEOF'
import sys, json, time, torch
from transformers import Qwen2Config, Qwen2ForCausalLM
from safetensors.torch import load_file
d, n, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(threads)
cfg = json.load(open(f"{d}/meta.json"))["config"]
torch.set_default_dtype(torch.bfloat16)
model = Qwen2ForCausalLM(Qwen2Config(**{k: v for k, v in cfg.items() if k not in ("architectures",)}))
sd = {k.removeprefix("model."): v for k, v in load_file(f"{d}/weights.safetensors").items()}
missing, unexpected = model.load_state_dict(sd, strict=False)
assert not [m for m in missing if "rotary" not in m], missing
model = model.eval()
ids = torch.arange(1, 129).unsqueeze(0)
with torch.no_grad():
    t = time.perf_counter(); out = model(ids, use_cache=True); pre = time.perf_counter() - t
    past, tok = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
    t = time.perf_counter()
    for _ in range(n):
        out = model(tok, past_key_values=past, use_cache=True)
        past, tok = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
    dec = time.perf_counter() - t
print(f"pytorch qwen2.5-1.5b bf16: prefill 128 tokens {pre * 1e3:.1f} ms; decode {dec * 1e3 / n:.2f} ms/token")
PYEOF
  fi
fi
