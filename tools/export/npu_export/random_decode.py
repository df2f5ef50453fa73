"""Random weights and one decode step's inputs for a decoder's IR, to time a compiled decode
program without a checkpoint (the CPU counterpart of ``npu-cuda-bench decode-at --weights
random``): writes ``weights.safetensors`` (uniform in [-0.04, 0.04), each weight in its IR
dtype) and ``inputs.safetensors`` (token, mask admitting slots ``0..=position``, position ids,
cache position).

    python -m npu_export.random_decode --ir D/decode.ir.json --position 1000 --out DIR
    npu run decode.npubin --backend cpu --weights DIR/weights.safetensors \\
        --inputs DIR/inputs.safetensors --repeat 10 --profile
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from safetensors.torch import save_file


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m npu_export.random_decode", description=__doc__)
    p.add_argument("--ir", type=Path, required=True, help="a decode graph's IR JSON")
    p.add_argument("--position", type=int, default=1000)
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    ir = json.loads(a.ir.read_text())
    g = torch.Generator().manual_seed(1)
    weights = {
        w["name"]: ((torch.rand(w["shape"], generator=g) - 0.5) * 0.08).to(getattr(torch, w["dtype"]))
        for w in ir["weights"]
    }
    mask_spec = next(i for i in ir["graph_inputs"] if i["name"] == "attention_mask")
    slots = int(mask_spec["shape"][-1])
    if a.position >= slots:
        p.error(f"position {a.position} is outside the cache of {slots}")
    dtype = getattr(torch, str(mask_spec["dtype"]).removeprefix("torch."))
    mask = torch.full((1, 1, 1, slots), torch.finfo(dtype).min, dtype=dtype)
    mask[..., : a.position + 1] = 0
    pos = a.position
    inputs = {
        "input_ids": torch.tensor([[pos * 7919 % 151000]]),
        "attention_mask": mask,
        "position_ids": torch.tensor([[pos]]),
        "cache_position": torch.tensor([pos]),
    }
    a.out.mkdir(parents=True, exist_ok=True)
    save_file(weights, str(a.out / "weights.safetensors"))
    save_file(inputs, str(a.out / "inputs.safetensors"))
    print(f"wrote {len(weights)} weights and a decode step at {pos} of {slots} to {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
