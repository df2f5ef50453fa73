"""Compares an `npu run` result with PyTorch on the same weights and input.

``python -m npu_export.report topk DIR OUTPUTS [--npu-ms X]``: prints PyTorch's and npu's top-5 classes
side by side with their agreement, and PyTorch's latency on this machine (the model rebuilt from
DIR/weights.safetensors, timed with the same thread count), next to npu's when given.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
from safetensors.torch import load_file

from .vision import MODELS


def torch_latency_ms(model_dir: Path, repeat: int) -> float:
    meta = json.loads((model_dir / "meta.json").read_text())
    build, _ = MODELS[meta["model"]]
    model = build().eval()
    model.load_state_dict(load_file(str(model_dir / "weights.safetensors")), strict=False)
    io = load_file(str(model_dir / "io.safetensors"))
    (x,) = (v for k, v in io.items() if k.startswith("input."))
    times = []
    with torch.inference_mode():
        for i in range(repeat + 3):
            t = time.perf_counter()
            model(x)
            if i >= 3:
                times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def topk_report(model_dir: Path, outputs: Path, npu_ms: float | None, repeat: int) -> int:
    io = load_file(str(model_dir / "io.safetensors"))
    ours = load_file(str(outputs))
    status = 0
    for key, ref in io.items():
        if not key.startswith("output."):
            continue
        name = key.removeprefix("output.")
        got = ours[name].float()
        ref = ref.float()
        r = torch.corrcoef(torch.stack([got.flatten(), ref.flatten()]))[0, 1].item()
        diff = (got - ref).abs().max().item()
        print(f"output '{name}' {list(ref.shape)}: Pearson r = {r:.6f}, max |diff| = {diff:.4g}")
        for b in range(ref.shape[0]):
            t_ref = torch.topk(ref[b], 5)
            t_got = torch.topk(got[b], 5)
            overlap = len(set(t_ref.indices.tolist()) & set(t_got.indices.tolist()))
            same_top1 = t_ref.indices[0].item() == t_got.indices[0].item()
            verdict = "equal" if same_top1 else "DIFFERENT"
            print(f"  sample {b}: top-5 agreement {overlap}/5, argmax {verdict}")
            print(f"    {'rank':<5} {'PyTorch class':>14} {'logit':>10}   {'npu class':>10} {'logit':>10}")
            for i in range(5):
                print(
                    f"    {i + 1:<5} {t_ref.indices[i].item():>14} {t_ref.values[i].item():>10.4f}   "
                    f"{t_got.indices[i].item():>10} {t_got.values[i].item():>10.4f}"
                )
            if overlap < 5 or not same_top1 or r <= 0.99:
                status = 1
    torch_ms = torch_latency_ms(model_dir, repeat)
    batch = next(iter(io.values())).shape[0]
    line = f"latency (batch {batch}, {torch.get_num_threads()} threads): PyTorch {torch_ms:.2f} ms"
    if npu_ms is not None:
        line += f", npu {npu_ms:.2f} ms ({npu_ms / torch_ms:.2f}x PyTorch's time)"
    print(line)
    return status


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m npu_export.report", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    pt = sub.add_parser("topk", help="compare npu outputs with the PyTorch reference")
    pt.add_argument("dir", type=Path)
    pt.add_argument("outputs", type=Path)
    pt.add_argument("--npu-ms", type=float, default=None)
    pt.add_argument("--repeat", type=int, default=10)
    a = p.parse_args(argv)
    return topk_report(a.dir, a.outputs, a.npu_ms, a.repeat)


if __name__ == "__main__":
    raise SystemExit(main())
