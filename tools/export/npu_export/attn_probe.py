"""A one-op prefill attention graph shaped like Qwen2.5-1.5B's (12 query heads over 2 KV heads,
head dim 128) over a static cache, with the model's additive causal mask: for timing the CUDA
backend's prefill attention alone (``scripts/gpu-attn.sh``) without the 3 GB model export.

    python -m npu_export.attn_probe --out DIR [--rows 128] [--cache 2048] [--start 0]

Writes DIR/model.ir.json, weights.safetensors (none), io.safetensors (``input.*`` and the
PyTorch output as ``output.0``, computed in float32 from the bf16 inputs) and
``attn-bf16.npubin`` when ``--npu`` names the binary.
"""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

import torch
from safetensors.torch import save_file
from torch import nn

from npu_export import qwen


class PrefillAttention(nn.Module):
    """Qwen2's eager attention after RoPE: repeat K/V over the group, scores + mask, softmax in
    float32, probabilities back to the model dtype, times V."""

    def __init__(self, group: int, scale: float) -> None:
        super().__init__()
        self.group = group
        self.scale = scale

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, kvh, t, d = k.shape
        k = k[:, :, None].expand(b, kvh, self.group, t, d).reshape(b, kvh * self.group, t, d)
        v = v[:, :, None].expand(b, kvh, self.group, t, d).reshape(b, kvh * self.group, t, d)
        w = torch.matmul(q, k.transpose(2, 3)) * self.scale + mask
        p = torch.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype)
        return torch.matmul(p, v)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--rows", type=int, default=128)
    p.add_argument("--cache", type=int, default=2048)
    p.add_argument("--start", type=int, default=0, help="position of the first query row")
    p.add_argument("--npu", default=None, help="npu binary: also compile attn-bf16.npubin")
    a = p.parse_args(argv)
    import npu

    h, kvh, d, dt = 12, 2, 128, torch.bfloat16
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, h, a.rows, d, generator=g).to(dt)
    k = torch.randn(1, kvh, a.cache, d, generator=g).to(dt)
    v = torch.randn(1, kvh, a.cache, d, generator=g).to(dt)
    pos = torch.arange(a.start, a.start + a.rows)
    mask = qwen.make_mask(pos, a.cache, dt)
    model = PrefillAttention(h // kvh, d**-0.5)
    npu.export(model, (q, k, v, mask), a.out, model_name="prefill_attention")
    with torch.no_grad():
        ref = model(q.float(), k.float(), v.float(), mask.float())
    save_file(
        {"input.q": q, "input.k": k, "input.v": v, "input.mask": mask, "output.0": ref.contiguous()},
        str(a.out / "io.safetensors"),
    )
    if a.npu:
        prog = a.out / "attn-bf16.npubin"
        ir = str(a.out / "model.ir.json")
        subprocess.run([a.npu, "compile", ir, "-o", str(prog), "--dtype", "bf16"], check=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
