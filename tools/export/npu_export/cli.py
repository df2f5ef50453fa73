"""Command line: ``python -m npu_export MODEL --out DIR [options]``."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from . import vision

QWEN_MODELS = ("qwen2.5-tiny", "qwen2.5-1.5b")
BERT_MODELS = ("bert-tiny",)
LLAMA_MODELS = ("llama-tiny",)
# not a model: per-op reference cases for the CPU fallback interpreter (fallback_refs.py)
FALLBACK_REFS = "fallback-refs"
MODELS = (*vision.MODELS.keys(), *QWEN_MODELS, *BERT_MODELS, *LLAMA_MODELS, FALLBACK_REFS)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="npu_export", description=__doc__)
    p.add_argument("model", choices=MODELS)
    p.add_argument("--out", type=Path, required=True, help="output directory (created)")
    p.add_argument("--batch", type=int, default=None, help="batch size (non-LLM models; default 1)")
    p.add_argument(
        "--seq-len", type=int, default=None, help="prefill length (tiny 8, 1.5b 128; bert-tiny 16)"
    )
    p.add_argument(
        "--max-cache-len", type=int, default=None, help="static KV cache length (tiny 64, 1.5b 2048)"
    )
    p.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default=None)
    p.add_argument("--seed", type=int, default=0, help="weights seed; inputs use seed+1 (and seed+2)")
    p.add_argument("--ir-only", action="store_true", help="write only IR JSON + meta.json (meta device)")
    p.add_argument("--hf-dir", type=Path, default=None, help="local HF checkpoint dir (Qwen models only)")
    p.add_argument(
        "--tokenizer",
        type=Path,
        default=None,
        help="Qwen models: copy this tokenizer dir (tokenizer.json + tokenizer_config.json) into the export "
        "(default: the --hf-dir checkpoint's, when it has one)",
    )
    p.add_argument("--decode-steps", type=int, default=None, help="greedy decode steps (tiny 32, 1.5b 4)")
    p.add_argument(
        "--no-hf-check", action="store_true", help="skip the cross-check against HF generate (Qwen models)"
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.tokenizer is not None and args.model not in QWEN_MODELS:
        print("error: --tokenizer applies to Qwen models only", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    if args.model in QWEN_MODELS:
        from . import qwen

        meta = qwen.export(args)
    elif args.model in BERT_MODELS:
        from . import bert

        meta = bert.export(args)
    elif args.model in LLAMA_MODELS:
        from . import llama

        meta = llama.export(args)
    elif args.model == FALLBACK_REFS:
        from . import fallback_refs

        meta = fallback_refs.export(args)
    else:
        if args.hf_dir is not None or args.seq_len is not None or args.max_cache_len is not None:
            print("error: --hf-dir/--seq-len/--max-cache-len apply to Qwen models only", file=sys.stderr)
            return 2
        meta = vision.export(args)
    summary = {
        "model": meta["model"],
        "out": str(args.out),
        "files": meta["files"],
        "seconds": round(time.perf_counter() - t0, 1),
    }
    if "verify" in meta:
        summary["verify"] = meta["verify"]
    print(json.dumps(summary, indent=2))
    return 0
