"""Per-op reference cases for the CPU fallback interpreter: ``python -m npu_export fallback-refs --out DIR``.

Each case is a tiny module exported with torch_ir (real tensors, ``strict=False``) to ``<case>.ir.json``; one
``refs.safetensors`` holds, per case, ``<case>.input.<graph input>``, ``<case>.weight.<IR weight key>`` and
``<case>.output.<graph output>`` (PyTorch eager's result). Inputs are random and never all zeros, sizes are
odd, dims negative where ATen allows, operands broadcast; a few cases run in bfloat16. Every pointwise op,
with NaN/Inf inputs, is in ``<out>/pointwise`` (``pointwise_refs.py``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
import torch_ir
from torch import nn

from . import common, decomp_cases, pointwise_refs

Fn = Callable[..., Any]


class Lambda(nn.Module):
    """Wraps a function of the inputs; `layers` holds any parameterized submodules it uses."""

    def __init__(self, fn: Fn, n_inputs: int, layers: dict[str, nn.Module] | None = None) -> None:
        super().__init__()
        self.fn = fn
        self.n_inputs = n_inputs
        self.layers = nn.ModuleDict(layers or {})

    def forward(self, *xs: torch.Tensor) -> Any:
        if self.layers:
            return self.fn(self.layers, *xs)
        return self.fn(*xs)


@dataclass
class Case:
    name: str
    module: nn.Module
    inputs: tuple[torch.Tensor, ...]


class _Gen:
    def __init__(self, seed: int) -> None:
        self.g = torch.Generator().manual_seed(seed)

    def randn(self, *shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.randn(shape, generator=self.g).to(dtype)

    def pos(self, *shape: int) -> torch.Tensor:
        return torch.rand(shape, generator=self.g) * 2 + 0.25

    def ints(self, lo: int, hi: int, *shape: int) -> torch.Tensor:
        return torch.randint(lo, hi, shape, generator=self.g)

    def bools(self, *shape: int) -> torch.Tensor:
        return torch.rand(shape, generator=self.g) > 0.5


def _inplace(x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """In-place ATen ops (add_, relu_, mul_) that later nodes read through the in-place node."""
    y = x * 2
    y.add_(z)
    y.relu_()
    return y.mul_(3)


def _cases(r: _Gen) -> list[Case]:
    bf16 = torch.bfloat16
    cases: list[Case] = []

    def add(name: str, fn: Fn, *inputs: torch.Tensor, layers: dict[str, nn.Module] | None = None) -> None:
        cases.append(Case(name, Lambda(fn, len(inputs), layers), inputs))

    # elementwise
    add(
        "unary",
        lambda x, p: (
            F.gelu(x),
            F.gelu(x, approximate="tanh"),
            torch.tanh(x),
            torch.sigmoid(x),
            torch.exp(x),
            torch.log(p),
            torch.sqrt(p),
            torch.rsqrt(p),
            torch.abs(x),
            -x,
            F.silu(x),
            F.relu(x),
            torch.sin(x),
            torch.cos(x),
            torch.reciprocal(p),
        ),
        r.randn(3, 7),
        r.pos(3, 7),
    )
    add("unary_bf16", lambda x: (F.gelu(x), torch.exp(x), torch.tanh(x)), r.randn(5, 9, dtype=bf16))
    add(
        "activations",
        lambda x: (F.hardtanh(x, -0.5, 1.5), F.relu6(x * 4), F.hardswish(x * 4), F.hardsigmoid(x * 4)),
        r.randn(2, 3, 5),
    )
    add("leaky_relu", lambda x: F.leaky_relu(x, 0.2), r.randn(4, 7))
    add(
        "binary",
        lambda x, y, p: (
            torch.sub(x, y, alpha=2),
            torch.add(x, y, alpha=0.5),
            x * y,
            x / p,
            torch.pow(p, y),
            torch.maximum(x, y),
            torch.minimum(x, y),
            1 - x,
            x * 0.5 + 3,
            x**2,
        ),
        r.randn(2, 3, 5),
        r.randn(3, 1),
        r.pos(5),
    )
    add("binary_bf16", lambda x, y: (x + y, x * y, x - y), r.randn(3, 5, dtype=bf16), r.randn(5, dtype=bf16))
    add("binary_int", lambda a, b: (a + b, a * b, a - 3 * b), r.ints(-9, 9, 3, 4), r.ints(-9, 9, 4))
    add("clamp", lambda x: (torch.clamp(x, -0.5, 0.7), torch.clamp(x, min=0.1)), r.randn(4, 5))
    add(
        "where",
        lambda c, x, y: (torch.where(c, x, y), torch.where(c, x, 0.25)),
        r.bools(3, 1, 5),
        r.randn(4, 5),
        r.randn(3, 4, 1),
    )
    add(
        "masked_fill",
        lambda x, m, v: (x.masked_fill(m, -1e4), x.masked_fill(m, v)),
        r.randn(3, 4, 5),
        r.bools(4, 1),
        r.randn(),
    )
    add(
        "compare",
        lambda x, y: (x == y, x != y, x < y, x <= y, x > y, x >= y, x > 0.1, x <= -0.2, x.eq(x)),
        r.randn(3, 5).round(),
        r.randn(5).round(),
    )
    add(
        "compare_int",
        lambda a, b: (a == b, a < b, a >= 2, a != 0),
        r.ints(-3, 4, 4, 5),
        r.ints(-3, 4, 5),
    )
    add(
        "logical",
        lambda a, b: (
            torch.logical_not(a),
            torch.logical_and(a, b),
            torch.logical_or(a, b),
            torch.bitwise_not(a),
            torch.bitwise_and(a, b),
            torch.bitwise_or(a, b),
            a & b,
            a | b,
        ),
        r.bools(3, 5),
        r.bools(5),
    )
    add(
        "cast",
        lambda x, i: (x.to(torch.int64), i.to(torch.float32), x.to(torch.bool), x.to(bf16), i.to(torch.bool)),
        r.randn(3, 5) * 4,
        r.ints(-5, 5, 7),
    )
    # reductions
    add(
        "reduce_max_min",
        lambda x: (
            torch.max(x, dim=-1),
            torch.min(x, dim=1, keepdim=True),
            torch.amax(x, dim=(0, 2)),
            torch.amin(x, dim=-2, keepdim=True),
            x.max(),
            x.min(),
        ),
        r.randn(3, 5, 7),
    )
    add(
        "argmax",
        lambda x: (torch.argmax(x, dim=-1), torch.argmin(x, dim=0, keepdim=True), torch.argmax(x)),
        r.randn(4, 7),
    )
    add(
        "sum_mean",
        lambda x: (x.sum(dim=-1), x.sum(dim=(0, 2), keepdim=True), x.sum(), x.mean(dim=1), x.mean()),
        r.randn(3, 5, 7),
    )
    add("sum_int", lambda a: (a.sum(dim=0), a.cumsum(dim=-1)), r.ints(-9, 9, 3, 5))
    add("cumsum", lambda x: (torch.cumsum(x, dim=1), torch.cumsum(x, dim=-1)), r.randn(3, 5, 4))
    add(
        "softmax",
        lambda x: (F.softmax(x, dim=0), F.log_softmax(x, dim=-1), F.softmax(x, dim=-1, dtype=torch.float32)),
        r.randn(3, 7),
    )
    add(
        "softmax_bf16",
        lambda x: (F.softmax(x, dim=-1), F.softmax(x, dim=-1, dtype=torch.float32)),
        r.randn(3, 9, dtype=bf16),
    )
    # linear algebra
    add("bmm", lambda a, b: torch.bmm(a, b), r.randn(3, 5, 7), r.randn(3, 7, 4))
    add(
        "baddbmm",
        lambda c, a, b: (torch.baddbmm(c, a, b, beta=0.5, alpha=2.0), torch.baddbmm(c, a, b)),
        r.randn(5, 4),
        r.randn(3, 5, 7),
        r.randn(3, 7, 4),
    )
    add(
        "addmm",
        lambda c, a, b: torch.addmm(c, a, b, beta=0.7, alpha=1.3),
        r.randn(4),
        r.randn(5, 7),
        r.randn(7, 4),
    )
    add(
        "matmul",
        lambda a, b, v: (a @ b, v @ a.transpose(-1, -2), a @ v),
        r.randn(2, 3, 5, 7),
        r.randn(3, 7, 4),
        r.randn(7),
    )
    add("matmul_bf16", lambda a, b: a @ b, r.randn(5, 9, dtype=bf16), r.randn(9, 3, dtype=bf16))
    add(
        "linear",
        lambda m, x: (m["a"](x), m["b"](x)),
        r.randn(2, 3, 7),
        layers={"a": nn.Linear(7, 5), "b": nn.Linear(7, 3, bias=False)},
    )
    # shapes and indexing
    add(
        "views",
        lambda x: (
            x.permute(2, 0, -1, 1),
            x.transpose(-1, 1),
            x.reshape(6, -1),
            x.unsqueeze(-2).squeeze(-2),
            x.flatten(1),
            x.unsqueeze(1).expand(2, 4, 3, 5, 7),
            x[:, 1:, ::2, -3:],
            x[..., 2:9:3],
        ),
        r.randn(2, 3, 5, 7),
    )
    add(
        "split_chunk_cat_stack",
        lambda x, y: (
            *torch.split(x, 2, dim=-1),
            *torch.chunk(x, 3, dim=1),
            torch.cat([x, y], dim=-1),
            torch.stack([x, x * 2], dim=-1),
            torch.stack([y, y], dim=0),
        ),
        r.randn(3, 7, 5),
        r.randn(3, 7, 2),
    )
    add(
        "gather_index_select",
        lambda x, i, j: (torch.gather(x, -1, i), torch.index_select(x, 1, j), torch.index_select(x, -1, j)),
        r.randn(3, 5, 7),
        r.ints(0, 7, 3, 5, 4),
        r.ints(0, 5, 4),
    )
    add(
        "index_tensor",
        lambda x, i, j: (x[i], x[:, i, j], x[i, :, j]),
        r.randn(5, 6, 7),
        r.ints(-5, 5, 2, 3),
        r.ints(0, 6, 3),
    )
    add(
        "index_copy",
        lambda x, i, s: x.index_copy(1, i, s),
        r.randn(3, 6, 4),
        torch.tensor([4, 0, 2]),
        r.randn(3, 3, 4),
    )
    add(
        "embedding",
        lambda m, i: m["e"](i),
        r.ints(0, 11, 3, 5),
        layers={"e": nn.Embedding(11, 6)},
    )
    # creation
    add(
        "arange",
        lambda x: (
            x + torch.arange(7),
            x * torch.arange(2, 9),
            torch.arange(1, 22, 3) + 0.5 * x,
            x + torch.arange(0.5, 3.9, 0.5),
        ),
        r.randn(3, 7),
    )
    add(
        "full",
        lambda x: (
            x + torch.zeros(3, 5),
            x * torch.ones(5),
            x - torch.full((3, 5), 2.5),
            torch.zeros_like(x) + 1,
            torch.ones_like(x) * x,
            torch.full_like(x, -3.0) + x,
            x.new_zeros(2, 5) + 2,
            x.new_ones(5) * x,
        ),
        r.randn(3, 5),
    )
    # nn
    add(
        "conv2d",
        lambda m, x: (m["a"](x), m["b"](x), m["c"](x)),
        r.randn(2, 4, 11, 9),
        layers={
            "a": nn.Conv2d(4, 6, 3, stride=2, padding=1),
            "b": nn.Conv2d(4, 6, (3, 2), padding=(2, 1), dilation=(2, 3), groups=2),
            "c": nn.Conv2d(4, 4, 3, padding=1, groups=4, bias=False),
        },
    )
    add(
        "pool",
        lambda x: (
            F.max_pool2d(x, 3, stride=2, padding=1),
            F.max_pool2d(x, 2, ceil_mode=True),
            F.max_pool2d(x, 3, stride=1, dilation=2),
            F.avg_pool2d(x, 3, stride=2, padding=1),
            F.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=False, ceil_mode=True),
            F.avg_pool2d(x, 2),
            F.adaptive_avg_pool2d(x, (3, 2)),
            F.adaptive_avg_pool2d(x, 1),
        ),
        r.randn(2, 3, 11, 9),
    )
    add(
        "upsample",
        lambda x: (
            F.interpolate(x, scale_factor=2, mode="nearest"),
            F.interpolate(x, size=(7, 11), mode="nearest"),
        ),
        r.randn(1, 3, 5, 4),
    )
    add(
        "norms",
        lambda m, x, y: (m["bn"](x), m["gn"](x), m["ln"](y), F.layer_norm(y, (7,))),
        r.randn(2, 6, 5, 3),
        r.randn(3, 5, 7),
        layers={"bn": nn.BatchNorm2d(6), "gn": nn.GroupNorm(3, 6), "ln": nn.LayerNorm((5, 7))},
    )
    add("layer_norm_bf16", lambda m, x: m["ln"](x), r.randn(3, 9, dtype=bf16), layers={"ln": nn.LayerNorm(9)})
    add(
        "sdpa",
        lambda q, k, v, fm, bm: (
            F.scaled_dot_product_attention(q, k, v),
            F.scaled_dot_product_attention(q, k, v, attn_mask=fm),
            F.scaled_dot_product_attention(q, k, v, attn_mask=bm),
            F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3),
        ),
        r.randn(2, 3, 5, 8),
        r.randn(2, 3, 7, 8),
        r.randn(2, 3, 7, 6),
        r.randn(5, 7),
        r.bools(2, 1, 1, 7) | torch.tensor([True] + [False] * 6),
    )
    add(
        "sdpa_gqa",
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True, is_causal=True),
        r.randn(1, 4, 6, 8),
        r.randn(1, 2, 6, 8),
        r.randn(1, 2, 6, 8),
    )
    add(
        "sdpa_bf16",
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
        r.randn(1, 2, 5, 16, dtype=bf16),
        r.randn(1, 2, 5, 16, dtype=bf16),
        r.randn(1, 2, 5, 16, dtype=bf16),
    )
    add("dropout_eval", lambda m, x: m["d"](x) + 1, r.randn(3, 5), layers={"d": nn.Dropout(0.3)})
    add("inplace", _inplace, r.randn(3, 5), r.randn(5))
    decomp_cases.add_cases(add, r)
    return cases


def _flatten(out: Any) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    flat: list[torch.Tensor] = []
    for o in out:
        flat.extend(_flatten(o))
    return flat


def _randomize(module: nn.Module, gen: torch.Generator) -> None:
    """Non-trivial affine parameters and BN statistics."""
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.BatchNorm2d):
                assert m.running_mean is not None and m.running_var is not None
                m.running_mean.copy_(torch.randn(m.num_features, generator=gen) * 0.5)
                m.running_var.copy_(torch.rand(m.num_features, generator=gen) + 0.5)
            if isinstance(m, nn.BatchNorm2d | nn.GroupNorm | nn.LayerNorm):
                m.weight.copy_(torch.rand(m.weight.shape, generator=gen) + 0.5)
                m.bias.copy_(torch.randn(m.bias.shape, generator=gen) * 0.5)


def _export_suite(
    cases: list[Case], out: Path, seed: int, refs: str, meta_name: str, inputs_seed: str
) -> dict[str, Any]:
    tensors: dict[str, torch.Tensor] = {}
    files: list[str] = []
    index: dict[str, Any] = {}
    for case in cases:
        module = case.module.eval()
        _randomize(module, torch.Generator().manual_seed(seed))
        if any(x.dtype == torch.bfloat16 for x in case.inputs):
            module = module.to(torch.bfloat16)
        with torch.no_grad():
            ir = torch_ir.extract_ir(module, case.inputs, model_name=case.name, strict=False)
            expected = _flatten(module(*case.inputs))
        ir_dict = common.save_ir(ir, out / f"{case.name}.ir.json")
        files.append(f"{case.name}.ir.json")
        if len(expected) != len(ir.graph_outputs):
            raise RuntimeError(f"{case.name}: {len(expected)} outputs, IR has {len(ir.graph_outputs)}")
        for meta, x in zip(ir.graph_inputs, case.inputs, strict=True):
            tensors[f"{case.name}.input.{meta.name}"] = x
        for key, w in common.collect_weights(ir, module).items():
            tensors[f"{case.name}.weight.{key}"] = w
        for meta, y in zip(ir.graph_outputs, expected, strict=True):
            tensors[f"{case.name}.output.{meta.name}"] = y
        index[case.name] = common.op_histogram(ir_dict)
    common.save_tensors(tensors, out / refs)
    files += [refs, meta_name]
    meta = {
        "model": "fallback-refs",
        "versions": common.versions(),
        "seeds": {"modules": f"torch.manual_seed({seed})", "inputs": inputs_seed},
        "cases": index,
        "files": files,
    }
    common.write_json(meta, out / meta_name)
    return meta


def export(args: argparse.Namespace) -> dict[str, Any]:
    """The base suite (``refs.safetensors``, ``meta.json``) and the extended-opset suite
    (``refs-core.safetensors``, ``meta-core.json``), each from its own random stream."""
    from .fallback_core_cases import core_cases

    out: Path = args.out
    torch.manual_seed(args.seed)
    meta = _export_suite(
        _cases(_Gen(args.seed + 1)),
        out,
        args.seed,
        "refs.safetensors",
        "meta.json",
        f"Generator({args.seed + 1})",
    )
    torch.manual_seed(args.seed)
    core = _export_suite(
        core_cases(_Gen(args.seed + 2)),
        out,
        args.seed,
        "refs-core.safetensors",
        "meta-core.json",
        f"Generator({args.seed + 2})",
    )
    meta["files"] = meta["files"] + core["files"] + ["pointwise/"]
    # The pointwise table's cases (dtypes, NaN/Inf, integer semantics): their own files and stream.
    meta["pointwise"] = pointwise_refs.export(out / "pointwise", args.seed + 2)
    common.write_json(meta, out / "meta.json")
    return meta
