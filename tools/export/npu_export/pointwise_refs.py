"""Reference cases for every pointwise op (the table in ``crates/npu-ir/src/pointwise``).

Written by ``python -m npu_export fallback-refs --out fixtures/fallback`` into ``<out>/pointwise``: one
compact IR JSON per case and one ``refs.safetensors`` (``<case>.input.<name>`` / ``<case>.output.<name>``,
PyTorch eager's results). Inputs hold NaN, +-Inf, +-0, negative values, halves (rounding ties) and domain
edges; binary and ternary operands are broadcast against each other so every pair of special values meets.
Cases run in float32, bfloat16 and int64 (integer semantics, and integer-to-float promotion). The Rust tests
run each case through the CPU fallback and, where the NPU target accepts the graph, compiled on the CPU
backend.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
import torch_ir
from torch import nn

from . import common

Fn = Callable[..., Any]
NAN, INF = math.nan, math.inf
SPECIAL = [
    NAN,
    INF,
    -INF,
    0.0,
    -0.0,
    1.0,
    -1.0,
    0.5,
    -0.5,
    1.5,
    -2.5,
    2.5,
    3.0,
    -3.0,
    1e-3,
    -1e-3,
    20.0,
    -20.0,
]
PAIRS = [NAN, INF, -INF, 0.0, -0.0, 1.0, -1.0, 2.5, -2.5, 0.5, 3.0, -7.0]
UNIT = [0.0, 1.0, -1.0, 0.25, 0.5, 0.75, 0.999, -0.999, 1e-4, NAN, 2.0, -0.3]


class Lambda(nn.Module):
    def __init__(self, fn: Fn) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *xs: torch.Tensor) -> Any:
        return self.fn(*xs)


def _inputs(dtype: torch.dtype, g: torch.Generator) -> dict[str, torch.Tensor]:
    """Named operands for a dtype: `x` (unary), `a`/`b` (binary, broadcast), `p`/`q`/`r` (ternary)."""
    if dtype == torch.int64:
        x = torch.tensor([0, 1, -1, 2, -2, 3, -3, 7, -7, 100, -100, 5], dtype=dtype)
        a = torch.tensor([0, 1, -1, 5, -5, 7, -7, 9, -9, 2, 12, -12], dtype=dtype).reshape(12, 1)
        b = torch.tensor([1, -1, 2, -2, 3, -3, 4, -4, 5, -5, 7, -7], dtype=dtype)
        return {
            "x": x,
            "a": a,
            "b": b,
            "c": torch.tensor([True, False, True]).reshape(3, 1, 1),
            "p": torch.tensor([-5, 0, 5], dtype=dtype).reshape(1, 3, 1),
            "q": torch.tensor([-2, 1, 3], dtype=dtype).reshape(1, 1, 3),
            "e": torch.tensor([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11], dtype=dtype),
        }
    rnd = torch.randn(30, generator=g) * 2
    x = torch.cat([torch.tensor(SPECIAL), rnd]).reshape(6, 8)
    a = torch.tensor(PAIRS).reshape(12, 1)
    b = torch.tensor(PAIRS)
    u = torch.cat([torch.tensor(UNIT), torch.rand(12, generator=g) * 2 - 1]).reshape(4, 6)
    t = [NAN, -1.0, 0.0, 0.3, 0.7, 2.0]
    return {
        "x": x.to(dtype),
        "a": a.to(dtype),
        "b": b.to(dtype),
        "u": u.to(dtype),
        "c": torch.tensor([True, False, True, False, True, False]).reshape(6, 1, 1),
        "p": torch.tensor([NAN, -INF, -1.0, 0.0, 1.0, 4.0]).reshape(6, 1, 1).to(dtype),
        "q": torch.tensor([NAN, INF, -2.0, 0.5, 1.0, 3.0]).reshape(1, 6, 1).to(dtype),
        "r": torch.tensor(t).reshape(1, 1, 6).to(dtype),
    }


def _float_cases() -> dict[str, tuple[str, Fn]]:
    """Case name -> (operand names, function); each output is one pointwise node."""
    return {
        "act": (
            "x",
            lambda x: (
                F.relu(x),
                F.silu(x),
                F.gelu(x),
                F.gelu(x, approximate="tanh"),
                torch.sigmoid(x),
                F.mish(x),
                F.softplus(x),
                F.softplus(x, beta=2.0, threshold=5.0),
            ),
        ),
        "act2": (
            "x",
            lambda x: (
                F.elu(x),
                F.elu(x, alpha=0.5),
                F.selu(x),
                F.celu(x, 0.7),
                F.hardswish(x),
                F.hardsigmoid(x),
                F.hardtanh(x, -0.5, 1.5),
                F.relu6(x),
                F.leaky_relu(x, 0.2),
            ),
        ),
        "basic": (
            "x",
            lambda x: (
                -x,
                torch.abs(x),
                torch.square(x),
                torch.sign(x),
                torch.sgn(x),
                torch.reciprocal(x),
                torch.sqrt(x),
                torch.rsqrt(x),
            ),
        ),
        "exp_log": (
            "x",
            lambda x: (
                torch.exp(x),
                torch.exp2(x),
                torch.expm1(x),
                torch.log(x),
                torch.log1p(x),
                torch.log2(x),
                torch.log10(x),
            ),
        ),
        "rounding": (
            "x",
            lambda x: (
                torch.floor(x),
                torch.ceil(x),
                torch.round(x),
                torch.round(x, decimals=2),
                torch.round(x * 100, decimals=-1),
                torch.trunc(x),
                torch.frac(x),
            ),
        ),
        "trig": (
            "x",
            lambda x: (
                torch.sin(x),
                torch.cos(x),
                torch.tan(x),
                torch.atan(x),
                torch.sinh(x / 4),
                torch.cosh(x / 4),
                torch.tanh(x),
                torch.asinh(x),
                torch.acosh(x),
            ),
        ),
        "unit": (
            "u",
            lambda u: (
                torch.asin(u),
                torch.acos(u),
                torch.atanh(u),
                torch.erfinv(u),
                torch.logit(u),
                torch.logit(u, eps=0.1),
            ),
        ),
        "special": (
            "x",
            lambda x: (
                torch.erf(x),
                torch.erfc(x),
                torch.nan_to_num(x),
                torch.nan_to_num(x, nan=1.0, posinf=2.0, neginf=-2.0),
            ),
        ),
        "predicates": (
            "x",
            lambda x: (
                torch.isnan(x),
                torch.isinf(x),
                torch.isfinite(x),
                torch.isposinf(x),
                torch.isneginf(x),
                torch.signbit(x),
                torch.logical_not(x),
            ),
        ),
        "clamp_scalar": (
            "x",
            lambda x: (
                torch.clamp(x, -0.5, 0.7),
                torch.clamp(x, min=0.1),
                torch.clamp_min(x, 0.2),
                torch.clamp_max(x, 0.3),
                torch.clamp(x, 1.0, -1.0),
            ),
        ),
        "arith": (
            "ab",
            lambda a, b: (a + b, torch.add(a, b, alpha=2), a - b, torch.sub(a, b, alpha=0.5), a * b, a / b),
        ),
        "division": (
            "ab",
            lambda a, b: (
                torch.div(a, b, rounding_mode="trunc"),
                torch.div(a, b, rounding_mode="floor"),
                torch.floor_divide(a, b),
                torch.remainder(a, b),
                torch.fmod(a, b),
            ),
        ),
        "minmax": (
            "ab",
            lambda a, b: (
                torch.maximum(a, b),
                torch.minimum(a, b),
                torch.fmax(a, b),
                torch.fmin(a, b),
                torch.clamp_min(a, b),
                torch.clamp_max(a, b),
            ),
        ),
        "math2": (
            "ab",
            lambda a, b: (
                torch.pow(a, b),
                torch.atan2(a, b),
                torch.hypot(a, b),
                torch.copysign(a, b),
                torch.xlogy(a, b),
            ),
        ),
        "compare": ("ab", lambda a, b: (a == b, a != b, a < b, a <= b, a > b, a >= b)),
        "more": (
            "x",
            lambda x: (
                torch.deg2rad(x),
                torch.rad2deg(x),
                torch.positive(x),
                F.logsigmoid(x),
                F.hardshrink(x, 0.75),
                F.softshrink(x, 0.75),
                F.threshold(x, 0.25, -3.0),
                torch.sinc(x),
            ),
        ),
        "more2": ("ab", lambda a, b: (torch.heaviside(a, b), torch.logaddexp(a, b))),
        "bessel": ("x", lambda x: (torch.i0(x), torch.i0(x * 20.0))),
        "logical": (
            "ab",
            lambda a, b: (torch.logical_and(a, b), torch.logical_or(a, b), torch.logical_xor(a, b)),
        ),
        "scalar": (
            "x",
            lambda x: (
                x + 2.5,
                x - 1,
                x * 0.5,
                x / 3,
                2 - x,
                x**2,
                x**0.5,
                torch.pow(2.0, x),
                x > 0.1,
                x == 1,
                x != 0.5,
                torch.remainder(x, 2.5),
                torch.fmod(x, -1.5),
                x // 2,
                torch.xlogy(2.0, x),
                torch.remainder(3.0, x),
            ),
        ),
        "ternary": (
            "cpqr",
            lambda c, p, q, r: (
                torch.where(c, q, r),
                torch.where(c, q, 1.5),
                torch.where(c, -2.0, r),
                torch.lerp(p, q, r),
                torch.lerp(p, q, 0.3),
                torch.lerp(p, q, 0.8),
                torch.addcmul(p, q, r, value=0.5),
                torch.addcdiv(p, q, r, value=2.0),
                torch.clamp(p, q, r),
                p.masked_fill(c, -1.5),
            ),
        ),
    }


def _int_cases() -> dict[str, tuple[str, Fn]]:
    return {
        "unary": (
            "x",
            lambda x: (
                -x,
                torch.abs(x),
                F.relu(x),
                torch.sign(x),
                torch.square(x),
                torch.floor(x),
                torch.ceil(x),
                torch.round(x),
                torch.trunc(x),
                torch.nan_to_num(x),
                torch.clamp(x, -2, 3),
            ),
        ),
        "predicates": (
            "x",
            lambda x: (
                torch.isnan(x),
                torch.isinf(x),
                torch.isfinite(x),
                torch.signbit(x),
                torch.logical_not(x),
                x > 2,
                x == 0,
            ),
        ),
        "binary": (
            "ab",
            lambda a, b: (
                a + b,
                torch.add(a, b, alpha=3),
                a - b,
                a * b,
                torch.floor_divide(a, b),
                torch.div(a, b, rounding_mode="trunc"),
                torch.div(a, b, rounding_mode="floor"),
                torch.remainder(a, b),
                torch.fmod(a, b),
                torch.maximum(a, b),
                torch.minimum(a, b),
                torch.fmax(a, b),
                torch.fmin(a, b),
            ),
        ),
        "compare": (
            "ab",
            lambda a, b: (
                a == b,
                a != b,
                a < b,
                a <= b,
                a > b,
                a >= b,
                torch.logical_and(a, b),
                torch.logical_or(a, b),
                torch.logical_xor(a, b),
            ),
        ),
        "scalar": (
            "x",
            lambda x: (
                x + 2,
                x * 3,
                2 - x,
                x // 3,
                torch.remainder(x, -3),
                torch.pow(x, 2),
                torch.fmod(x, 4),
                torch.clamp_min(x, 0),
            ),
        ),
        "pow": ("e", lambda e: (torch.pow(2, e), torch.pow(e, e % 4), torch.pow(-3, e))),
        # ATen's integer forms: negative powers truncate, Scalar parameters convert to int64
        "intforms": (
            "ab",
            lambda a, b: (
                torch.pow(a, b),
                F.threshold(a, 2.5, -9.0),
                F.hardtanh(a, -3.5, 4.5),
                torch.addcmul(a, a, b, value=3),
            ),
        ),
        "promote": (
            "ab",
            lambda a, b: (a / b, torch.sin(a), a * 0.5, torch.atan2(a, b), torch.sqrt(b), a + 0.25),
        ),
        "ternary": (
            "cpq",
            lambda c, p, q: (
                torch.where(c, p, q),
                torch.where(c, p, 2),
                torch.clamp(p, q, 2 * q.abs()),
                p.masked_fill(c, 9),
            ),
        ),
    }


def _bf16_cases() -> dict[str, tuple[str, Fn]]:
    return {
        "act": (
            "x",
            lambda x: (
                F.relu(x),
                F.gelu(x),
                F.silu(x),
                torch.sigmoid(x),
                F.softplus(x),
                F.hardswish(x),
                F.elu(x),
                F.leaky_relu(x, 0.2),
            ),
        ),
        "math": (
            "x",
            lambda x: (
                torch.exp(x),
                torch.log(x),
                torch.sin(x),
                torch.tanh(x),
                torch.erf(x),
                torch.floor(x),
                torch.round(x),
                torch.sign(x),
                torch.nan_to_num(x),
                torch.isnan(x),
            ),
        ),
        "binary": (
            "ab",
            lambda a, b: (
                a + b,
                a * b,
                a / b,
                torch.maximum(a, b),
                torch.fmax(a, b),
                torch.remainder(a, b),
                torch.pow(a, b),
                a < b,
                a != b,
            ),
        ),
        "ternary": (
            "cpqr",
            lambda c, p, q, r: (torch.where(c, q, r), torch.lerp(p, q, r), torch.clamp(p, q, r)),
        ),
    }


def export(out: Path, seed: int) -> dict[str, Any]:
    """Writes the cases to `out` (created); returns the per-case op histogram."""
    out.mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(seed)
    tensors: dict[str, torch.Tensor] = {}
    index: dict[str, Any] = {}
    groups = [
        ("f32", torch.float32, _float_cases()),
        ("bf16", torch.bfloat16, _bf16_cases()),
        ("i64", torch.int64, _int_cases()),
    ]
    for suffix, dtype, cases in groups:
        named = _inputs(dtype, g)
        for base, (operands, fn) in cases.items():
            name = f"{base}_{suffix}"
            inputs = tuple(named[o] for o in operands)
            module = Lambda(fn).eval()
            with torch.no_grad():
                ir = torch_ir.extract_ir(module, inputs, model_name=name, strict=False)
                expected = module(*inputs)
            d = common.ir_to_json_dict(ir)
            with open(out / f"{name}.ir.json", "w") as f:
                json.dump(d, f)  # compact; Infinity/NaN tokens are allowed by the contract
            if len(expected) != len(ir.graph_outputs):
                raise RuntimeError(f"{name}: {len(expected)} outputs, IR has {len(ir.graph_outputs)}")
            for meta, x in zip(ir.graph_inputs, inputs, strict=True):
                tensors[f"{name}.input.{meta.name}"] = x
            for meta, y in zip(ir.graph_outputs, expected, strict=True):
                tensors[f"{name}.output.{meta.name}"] = y
            index[name] = common.op_histogram(d)
    common.save_tensors(tensors, out / "refs.safetensors")
    common.write_json(
        {"versions": common.versions(), "seed": f"Generator({seed})", "cases": index}, out / "meta.json"
    )
    return index
