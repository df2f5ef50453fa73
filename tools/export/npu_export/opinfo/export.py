"""OpInfo samples -> one-op modules -> torch_ir IR JSON plus an io file of inputs and eager outputs.

A case is one sample of one OpInfo in one dtype. Its tensor arguments (anywhere in the sample's args and
kwargs, lists included) become graph inputs; everything else is baked into the module. Each exported case
writes ``<id>.ir.json`` and ``<id>.io.safetensors`` (``input.<graph input>``, ``expected.<graph output>``),
plus ``<id>.weights.safetensors`` when the IR lifts constant tensors into weights.
Samples with a zero-element tensor are skipped: the compiler refuses zero-size tensors by design.
Samples whose graph draws random numbers (dropout in training mode) are skipped too.
"""

from __future__ import annotations

import contextlib
import re
import signal
import warnings
import zlib
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import torch
import torch.utils._pytree as pytree
import torch_ir
from torch import nn

from .. import common
from . import scope

# float32 samples per op, and int64/bool samples for ops defined on those dtypes (exact comparison)
FLOAT_SAMPLES = 6
INT_SAMPLES = 3
DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "int64": torch.int64, "bool": torch.bool}
# torch_ir exports one case in well under a second; a case that takes this long is stuck
EXPORT_TIMEOUT_S = 60


class OneOp(nn.Module):
    """Calls ``fn(*args, **kwargs)`` with the tensors among the flattened arguments replaced by inputs."""

    def __init__(
        self, fn: Callable[..., Any], spec: pytree.TreeSpec, leaves: list[Any], tensor_at: list[int]
    ) -> None:
        super().__init__()
        self.fn = fn
        self.spec = spec
        # tensor leaves are placeholders, replaced by forward's inputs
        self.leaves = [None if i in tensor_at else x for i, x in enumerate(leaves)]
        self.tensor_at = tensor_at

    def forward(self, *tensors: torch.Tensor) -> Any:
        leaves = list(self.leaves)
        for i, t in zip(self.tensor_at, tensors, strict=True):
            leaves[i] = t
        args, kwargs = pytree.tree_unflatten(leaves, self.spec)
        return self.fn(*args, **kwargs)


def wrap(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[OneOp, tuple[torch.Tensor, ...]]:
    """A one-op module over the call ``fn(*args, **kwargs)`` and its tensor inputs, in flattening order."""
    leaves, spec = pytree.tree_flatten((tuple(args), dict(kwargs)))
    tensor_at = [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)]
    inputs = tuple(leaves[i].detach().clone() for i in tensor_at)
    return OneOp(fn, spec, leaves, tensor_at), inputs


def describe(args: tuple[Any, ...], kwargs: dict[str, Any], limit: int = 120) -> str:
    """Short text of a call's arguments: tensors as ``f32[2,3]``, the rest as repr."""

    def one(x: Any) -> str:
        if isinstance(x, torch.Tensor):
            dt = {torch.float32: "f32", torch.int64: "i64", torch.bool: "bool"}.get(x.dtype, str(x.dtype)[6:])
            return f"{dt}[{','.join(map(str, x.shape))}]"
        if isinstance(x, list | tuple):
            inner = ", ".join(one(v) for v in x)
            return f"[{inner}]" if isinstance(x, list) else f"({inner})"
        return repr(x)

    parts = [one(a) for a in args] + [f"{k}={one(v)}" for k, v in kwargs.items()]
    text = ", ".join(parts)
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass
class CaseRecord:
    """One exported (or not) sample. ``error`` is set when torch_ir could not export it."""

    id: str
    dtype: str
    sample: str
    op_types: list[str] = field(default_factory=list)
    error: str | None = None


@dataclass
class OpRecord:
    """One OpInfo (``name`` plus ``variant``): whether it is in scope and its cases."""

    key: str
    name: str
    variant: str
    excluded: str | None = None
    cases: list[CaseRecord] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def op_key(name: str, variant: str) -> str:
    return f"{name}.{variant}" if variant else name


def _case_id(key: str, dtype: str, i: int) -> str:
    return f"{re.sub(r'[^A-Za-z0-9_.]', '_', key)}-{dtype}-{i}"


def _has_empty(x: Any) -> bool:
    return any(isinstance(t, torch.Tensor) and t.numel() == 0 for t in pytree.tree_leaves(x))


class _Timeout(Exception):
    pass


class ZeroElementOutput(Exception):
    """The sample's eager result has a zero-element tensor: skipped like zero-element inputs."""


class RandomSample(Exception):
    """The sample's graph draws random numbers (dropout in training mode, attention dropout):
    left out like the random OpInfos, since eager's draw cannot be reproduced."""


def _draws_random(nodes: list[dict[str, Any]]) -> bool:
    for n in nodes:
        base = n["op_type"].split(".")[1] if n["op_type"].startswith("aten.") else ""
        attrs = n["attrs"]
        if base in ("dropout", "dropout_", "native_dropout", "feature_dropout", "alpha_dropout"):
            if attrs.get("train", True) and attrs.get("p", 0.5) > 0:
                return True
        if base == "scaled_dot_product_attention" and attrs.get("dropout_p", 0.0) > 0:
            return True
        if base in ("bernoulli", "rand", "randn", "rand_like", "randn_like", "randint", "multinomial"):
            return True
    return False


@contextlib.contextmanager
def _deadline(seconds: int) -> Iterator[None]:
    def on_alarm(signum: int, frame: FrameType | None) -> None:
        raise _Timeout(f"export took longer than {seconds} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _first_line(e: BaseException, limit: int = 200) -> str:
    text = f"{type(e).__name__}: {e}".strip().splitlines()[0]
    return text if len(text) <= limit else text[: limit - 3] + "..."


def export_case(module: OneOp, inputs: tuple[torch.Tensor, ...], out_dir: Path, case: CaseRecord) -> None:
    """Runs eager, exports with torch_ir and writes the case's files; sets ``case.error`` on failure.

    Raises `ZeroElementOutput` (nothing written) when eager returns a zero-element tensor.
    """
    try:
        with torch.no_grad():
            expected = pytree.tree_leaves(module(*(t.clone() for t in inputs)))
        if not expected or not all(isinstance(t, torch.Tensor) for t in expected):
            raise ValueError("the op returns no tensor or a non-tensor value")
        tensors = [*inputs, *expected]
        if any(t.is_complex() for t in tensors):
            raise ValueError("complex tensors")
        if any(t.numel() == 0 for t in expected):
            raise ZeroElementOutput
        with _deadline(EXPORT_TIMEOUT_S), torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ir = torch_ir.extract_ir(module, inputs, model_name=case.id, strict=False)
        if len(ir.graph_outputs) != len(expected):
            raise ValueError(f"IR has {len(ir.graph_outputs)} outputs, eager {len(expected)}")
        # lifted tensor constants are weights whose values the IR carries; a one-op module has no others
        stray = [w.name for w in ir.weights if w.name not in ir.constants]
        if stray:
            raise ValueError(f"IR reads weights {stray}; a one-op module has none")
        if _draws_random(common.ir_to_json_dict(ir)["nodes"]):
            raise RandomSample
        ir_dict = common.save_ir(ir, out_dir / f"{case.id}.ir.json")
        case.op_types = [n["op_type"] for n in ir_dict["nodes"]]
        io = {f"input.{m.name}": x for m, x in zip(ir.graph_inputs, inputs, strict=True)}
        io |= {f"expected.{m.name}": y for m, y in zip(ir.graph_outputs, expected, strict=True)}
        common.save_tensors(io, out_dir / f"{case.id}.io.safetensors")
        if ir.weights:  # the lifted constants (a mask, a window), keyed by the IR's weight names
            consts = {w.name: ir.constants[w.name] for w in ir.weights}
            common.save_tensors(consts, out_dir / f"{case.id}.weights.safetensors")
    except (ZeroElementOutput, RandomSample):
        raise
    except Exception as e:  # noqa: BLE001 - any failure of eager or torch_ir is this case's export error
        case.error = _first_line(e)


def _samples(op: Any, dtype: torch.dtype, seed: int) -> Iterator[Any]:
    torch.manual_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield from op.sample_inputs("cpu", dtype)


def export_op(op: Any, out_dir: Path) -> OpRecord:
    """Exports up to `FLOAT_SAMPLES` float32 (and `INT_SAMPLES` int64/bool) samples of one OpInfo.

    The first exported case decides the scope: when it uses an op that is neither Core ATen nor
    `scope.COMMON`, the OpInfo is excluded and no further sample is exported.
    """
    key = op_key(op.name, op.variant_test_name)
    rec = OpRecord(key=key, name=op.name, variant=op.variant_test_name)
    rec.excluded = scope.excluded_by_name(op.name)
    if rec.excluded:
        return rec
    try:
        supported = op.supported_dtypes("cpu")
    except Exception as e:  # noqa: BLE001
        rec.excluded = f"no dtypes: {_first_line(e)}"
        return rec
    decided = False
    for dname, dtype in DTYPES.items():
        if dtype not in supported:
            continue
        limit = FLOAT_SAMPLES if dtype == torch.float32 else INT_SAMPLES
        n = 0
        try:
            for sample in _samples(op, dtype, zlib.crc32(f"{key}-{dname}".encode())):
                if n == limit:
                    break
                args = (sample.input, *sample.args)
                if _has_empty((args, sample.kwargs)):
                    continue
                module, inputs = wrap(op.op, args, sample.kwargs)
                case = CaseRecord(
                    id=_case_id(key, dname, n), dtype=dname, sample=describe(args, sample.kwargs)
                )
                try:
                    export_case(module, inputs, out_dir, case)
                except (ZeroElementOutput, RandomSample):
                    continue
                n += 1
                if case.error is None and not decided:
                    decided = True
                    outside = scope.out_of_scope_ops(case.op_types)
                    if outside:
                        rec.excluded = "emits " + ", ".join(outside) + " (not Core ATen, not common)"
                        rec.cases = []
                        return rec
                rec.cases.append(case)
        except Exception as e:  # noqa: BLE001 - sample generation itself failed for this dtype
            rec.cases.append(
                CaseRecord(id=_case_id(key, dname, n), dtype=dname, sample="", error=_first_line(e))
            )
    if not decided and not scope.aten_op_in_scope(op.aten_name):
        rec.excluded = f"no exportable sample and aten.{op.aten_name} is not Core ATen or common"
        rec.cases = []
    return rec
