"""Non-LLM models: mlp, small-cnn, torchvision resnet18/resnet50 and `zoo`'s (graph name ``model``)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from . import common, zoo


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 32)
        self.fc3 = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.gelu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


class SmallCNN(nn.Module):
    """conv-BN-ReLU-maxpool, one residual block with 24 channels, global avg pool, linear."""

    def __init__(self, channels: int = 24, num_classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.pool = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.conv3 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn3 = nn.BatchNorm2d(channels)
        self.fc = nn.Linear(channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(F.relu(self.bn1(self.conv1(x))))
        identity = x
        y = F.relu(self.bn2(self.conv2(x)))
        y = self.bn3(self.conv3(y))
        x = F.relu(y + identity)
        x = F.adaptive_avg_pool2d(x, 1)
        x = torch.flatten(x, 1)
        return self.fc(x)


def _resnet(name: str) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        import torchvision

        return getattr(torchvision.models, name)(weights=None)

    return build


# name -> (constructor, input shape without batch)
MODELS: dict[str, tuple[Callable[[], nn.Module], tuple[int, ...]]] = {
    "mlp": (MLP, (16,)),
    "small-cnn": (SmallCNN, (3, 16, 16)),
    "resnet18": (_resnet("resnet18"), (3, 224, 224)),
    "resnet50": (_resnet("resnet50"), (3, 224, 224)),
    **zoo.MODELS,
}


def randomize_batchnorm(model: nn.Module, gen: torch.Generator) -> None:
    """Non-trivial BN statistics and affine parameters so BN's scale *and* shift matter."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                c = m.num_features
                assert m.running_mean is not None and m.running_var is not None
                m.weight.copy_(torch.empty(c).uniform_(0.5, 1.5, generator=gen))
                m.bias.copy_(torch.empty(c).uniform_(-0.5, 0.5, generator=gen))
                m.running_mean.copy_(torch.empty(c).uniform_(-0.5, 0.5, generator=gen))
                m.running_var.copy_(torch.empty(c).uniform_(0.5, 2.0, generator=gen))


def export(args: argparse.Namespace) -> dict[str, Any]:
    build, in_shape = MODELS[args.model]
    dtype = common.DTYPES[args.dtype or "float32"]
    out: Path = args.out
    batch = args.batch or 1
    shape = (batch, *in_shape)
    weight_seed, input_seed = args.seed, args.seed + 1

    with torch.device("meta"):
        meta_model = build().to(dtype)
    ir = common.extract(meta_model, (torch.empty(shape, dtype=dtype, device="meta"),), model_name=args.model)
    ir_dict = common.save_ir(ir, out / "model.ir.json")
    io = common.ir_io_specs(ir_dict)

    meta: dict[str, Any] = {
        "model": args.model,
        "graphs": ["model"],
        "dtype": str(dtype).removeprefix("torch."),
        "batch": batch,
        "ir_only": bool(args.ir_only),
        "seeds": {
            "weights": f"torch.manual_seed({weight_seed}) before construction; BN stats/affine from "
            f"torch.Generator().manual_seed({weight_seed})",
            "inputs": f"torch.Generator().manual_seed({input_seed}), randn",
        },
        "versions": common.versions(),
        "config": {"input_shape": list(shape)},
        "ir": {"model": {"file": "model.ir.json", **io, "op_histogram": common.op_histogram(ir_dict)}},
    }

    if not args.ir_only:
        torch.manual_seed(weight_seed)
        model = build()
        randomize_batchnorm(model, torch.Generator().manual_seed(weight_seed))
        model = model.to(dtype).eval()
        weights = common.collect_weights(ir, model)
        common.save_tensors(weights, out / "weights.safetensors")

        x = torch.randn(shape, generator=torch.Generator().manual_seed(input_seed)).to(dtype)
        with torch.no_grad():
            y = model(x)
        in_name = ir.graph_inputs[0].name
        out_name = ir.graph_outputs[0].name
        common.save_tensors({f"input.{in_name}": x, f"output.{out_name}": y}, out / "io.safetensors")

        # cross-check: torch_ir's executor on the in-memory IR reproduces the reference
        (y_ir,) = common.run_ir(ir, weights, (x,))
        diff = common.max_abs_diff(y_ir, y)
        meta["verify"] = {"torch_ir_executor_max_abs_diff": diff}
        tol = 1e-4 if dtype == torch.float32 else 5e-2
        if args.model in zoo.EXECUTOR_MISRUNS:
            meta["verify"]["not_checked"] = zoo.EXECUTOR_MISRUNS[args.model]
        elif diff > tol * max(1.0, float(y.abs().max())):
            raise RuntimeError(f"torch_ir executor disagrees with PyTorch: max abs diff {diff}")
        meta["files"] = ["model.ir.json", "weights.safetensors", "io.safetensors", "meta.json"]
    else:
        meta["files"] = ["model.ir.json", "meta.json"]

    common.write_json(meta, out / "meta.json")
    return meta
