"""Shared helpers: IR extraction/saving, weight and I/O files, meta.json, IR execution."""

from __future__ import annotations

import json
import platform
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import torch
import torch_ir
from safetensors.torch import save_file
from torch import nn
from torch_ir import IR

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}

# attr values that json cannot write; stringified with str(v) as the reference project did
_NON_JSON_TYPES = (torch.dtype, torch.device, torch.layout, torch.memory_format)


def versions() -> dict[str, str]:
    import torchvision
    import transformers

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "transformers": transformers.__version__,
        "torch_ir": torch_ir.__version__,
    }


def extract(model: nn.Module, example_inputs: tuple[torch.Tensor, ...], model_name: str) -> IR:
    """Extract the IR of a meta-device model under no_grad (so no wrap_with_set_grad_enabled)."""
    model.eval()
    with torch.no_grad():
        return torch_ir.extract_ir(model, example_inputs, model_name=model_name, strict=True)


def _clean_value(v: Any) -> Any:
    if isinstance(v, _NON_JSON_TYPES):
        return str(v)
    if isinstance(v, list):
        return [_clean_value(x) for x in v]
    if isinstance(v, tuple):
        return [_clean_value(x) for x in v]
    if isinstance(v, dict):
        return {k: _clean_value(x) for k, x in v.items()}
    return v


def ir_to_json_dict(ir: IR) -> dict[str, Any]:
    """IR.to_dict() with non-JSON attr values stringified (``torch.bfloat16``, ``cpu``)."""
    d = ir.to_dict()
    for node in d["nodes"]:
        node["attrs"] = _clean_value(node["attrs"])
    return d


def save_ir(ir: IR, path: Path) -> dict[str, Any]:
    d = ir_to_json_dict(ir)
    with open(path, "w") as f:
        json.dump(d, f, indent=2)  # allow_nan: Infinity/NaN tokens are allowed by the contract
    return d


def _restore_value(key: str, v: Any) -> Any:
    if isinstance(v, str):
        if v.startswith("torch."):
            obj = getattr(torch, v[len("torch.") :], None)
            if isinstance(obj, _NON_JSON_TYPES):
                return obj
        if key == "device":
            return torch.device("cpu" if v == "meta" else v)
    if isinstance(v, list):
        return [_restore_value(key, x) for x in v]
    return v


def load_ir_for_execution(path: Path) -> IR:
    """Load a saved IR JSON and map the stringified attrs back so torch_ir's IRExecutor can run it."""
    with open(path) as f:
        d = json.load(f)
    for node in d["nodes"]:
        node["attrs"] = {k: _restore_value(k, v) for k, v in node["attrs"].items()}
    return IR.from_dict(d)


def op_histogram(ir_dict: Mapping[str, Any]) -> dict[str, int]:
    c = Counter(n["op_type"] for n in ir_dict["nodes"])
    return dict(sorted(c.items(), key=lambda kv: (-kv[1], kv[0])))


def collect_weights(ir: IR, real_model: nn.Module) -> dict[str, torch.Tensor]:
    """Tensors of the real model keyed by the IR weight names (state_dict-style keys).

    Tied weights are written under every name (cloned: safetensors refuses shared storage); non-persistent
    buffers are included; zero-element entries are skipped. Shapes and dtypes must match the IR.
    """
    tensors: dict[str, torch.Tensor] = {}
    for name, p in real_model.named_parameters(remove_duplicate=False):
        tensors[name] = p.detach()
    for name, b in real_model.named_buffers(remove_duplicate=False):
        tensors[name] = b.detach()
    out: dict[str, torch.Tensor] = {}
    problems: list[str] = []
    for w in ir.weights:
        if w.name not in tensors:
            problems.append(f"missing {w.name}")
            continue
        t = tensors[w.name]
        if list(t.shape) != list(w.shape) or _dtype_str(t.dtype) != w.dtype:
            problems.append(f"{w.name}: model {list(t.shape)} {t.dtype} vs IR {w.shape} {w.dtype}")
            continue
        if t.numel() == 0:
            continue
        out[w.name] = t.to("cpu").clone().contiguous()
    if problems:
        raise RuntimeError("weights do not match the IR: " + "; ".join(problems))
    return out


def _dtype_str(dt: torch.dtype) -> str:
    return str(dt).removeprefix("torch.")


def save_tensors(
    tensors: Mapping[str, torch.Tensor], path: Path, metadata: dict[str, str] | None = None
) -> None:
    save_file(
        {k: v.detach().cpu().clone().contiguous() for k, v in tensors.items()}, str(path), metadata=metadata
    )


def tensor_spec(name: str, t: torch.Tensor | Any) -> dict[str, Any]:
    return {"name": name, "shape": list(t.shape), "dtype": _dtype_str(t.dtype)}


def ir_io_specs(ir_dict: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    return {
        "inputs": [{k: m[k] for k in ("name", "shape", "dtype")} for m in ir_dict["graph_inputs"]],
        "outputs": [{k: m[k] for k in ("name", "shape", "dtype")} for m in ir_dict["graph_outputs"]],
    }


def write_json(obj: Any, path: Path) -> None:
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")


def run_ir(ir: IR, weights: Mapping[str, torch.Tensor], inputs: Iterable[torch.Tensor]) -> list[torch.Tensor]:
    """Execute an IR with torch_ir's own executor."""
    executor = torch_ir.IRExecutor(ir, weights=dict(weights))
    with torch.no_grad():
        outs = executor.execute(tuple(inputs))
    return list(outs)


def max_abs_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    if a.numel() == 0:
        return 0.0
    return float((a.double() - b.double()).abs().max())
