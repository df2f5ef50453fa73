"""What cuDNN gives for the convolutions of the benchmark's vision models (run on the GPU machine):
the time of every convolution layer alone through ``torch.nn.functional.conv2d`` in NCHW and in
channels_last (NHWC), f16, cudnn.benchmark on, summed per model. It answers the choice left open in
docs/cuda.md (cuDNN or our own implicit GEMM, and in which layout) before any of it is built.

    python -m npu_export.gpu_conv_probe [--json FILE]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import torch
import torchvision

from . import gpu_common as g


def conv_shapes(model: torch.nn.Module, x: torch.Tensor) -> list[tuple[torch.nn.Conv2d, tuple[int, ...]]]:
    """Every Conv2d with the input shape it sees in one forward pass."""
    seen: list[tuple[torch.nn.Conv2d, tuple[int, ...]]] = []

    def hook(m: torch.nn.Module, args: tuple[torch.Tensor, ...], _out: Any) -> None:
        assert isinstance(m, torch.nn.Conv2d)
        seen.append((m, tuple(args[0].shape)))

    hs = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    with torch.no_grad():
        model(x)
    for h in hs:
        h.remove()
    return seen


def layer_ms(conv: torch.nn.Conv2d, shape: tuple[int, ...], channels_last: bool) -> float:
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    x = torch.randn(shape, device="cuda", dtype=torch.float16).to(memory_format=fmt)
    w = conv.weight.detach().to(memory_format=fmt)
    b = None if conv.bias is None else conv.bias.detach()
    with torch.no_grad():
        args = (conv.stride, conv.padding, conv.dilation, conv.groups)
        return g.cuda_ms(lambda: torch.nn.functional.conv2d(x, w, b, *args), 50)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--json", type=Path, default=None)
    a = p.parse_args(argv)
    torch.backends.cudnn.benchmark = True
    from .gpu_bench import _mobilenet_v2

    models = [
        ("resnet18", torchvision.models.resnet18, 1, 224),
        ("resnet50", torchvision.models.resnet50, 1, 224),
        ("resnet50", torchvision.models.resnet50, 64, 224),
        ("mobilenet_v2", _mobilenet_v2, 1, 224),
    ]
    rows = []
    print(f"{'model':<14} {'batch':>5} {'convs':>5} {'NCHW ms':>9} {'NHWC ms':>9}", flush=True)
    for name, make, batch, px in models:
        torch.manual_seed(0)
        m = make().eval().half().cuda()
        convs = conv_shapes(m, torch.randn(batch, 3, px, px, device="cuda", dtype=torch.float16))
        nchw = [layer_ms(c, s, False) for c, s in convs]
        nhwc = [layer_ms(c, s, True) for c, s in convs]
        rows.append(
            {
                "model": name,
                "batch": batch,
                "convs": len(convs),
                "nchw_ms": sum(nchw),
                "nhwc_ms": sum(nhwc),
                "layers": [
                    {
                        "input": list(s),
                        "out": c.out_channels,
                        "k": list(c.kernel_size),
                        "groups": c.groups,
                        "nchw_ms": a_,
                        "nhwc_ms": b_,
                    }
                    for (c, s), a_, b_ in zip(convs, nchw, nhwc, strict=True)
                ],
            }
        )
        print(f"{name:<14} {batch:>5} {len(convs):>5} {sum(nchw):>9.3f} {sum(nhwc):>9.3f}", flush=True)
    if a.json is not None:
        a.json.write_text(json.dumps({"device": torch.cuda.get_device_name(), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
