"""IR JSON in any form the APIs accept (path, dict, torch_ir ``IR``, :class:`IRGraph`) as JSON text."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import _native

IRLike = "str | os.PathLike[str] | dict[str, Any] | IRGraph | Any"

# attr values json cannot write (dtypes, devices): stringified as torch_ir's users do ("torch.float32")
_NON_JSON = ("dtype", "device", "layout", "memory_format")


def _clean(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_clean(x) for x in v]
    if type(v).__name__ in _NON_JSON:
        return str(v)
    return v


def to_dict(ir: Any) -> dict[str, Any]:
    """The IR as a JSON-ready dict (attrs cleaned)."""
    if isinstance(ir, IRGraph):
        d = ir.to_dict()
    elif isinstance(ir, dict):
        d = ir
    elif isinstance(ir, str | os.PathLike):
        with open(ir) as f:
            return json.load(f)
    elif hasattr(ir, "to_dict"):  # torch_ir.IR
        d = ir.to_dict()
    else:
        raise TypeError(f"expected an IR path, dict, IRGraph or torch_ir IR, got {type(ir).__name__}")
    return {**d, "nodes": [{**n, "attrs": _clean(n.get("attrs", {}))} for n in d.get("nodes", [])]}


def to_json(ir: Any) -> str:
    if isinstance(ir, str | os.PathLike):
        return Path(ir).read_text()
    # allow_nan: Python's Infinity/NaN tokens are part of the IR contract
    return json.dumps(to_dict(ir))


@dataclass
class IRGraph:
    """A parsed IR (the reference's ``IRGraph``): the JSON's fields, nodes as dicts."""

    model_name: str = "unknown"
    graph_inputs: list[dict[str, Any]] = field(default_factory=list)
    graph_outputs: list[dict[str, Any]] = field(default_factory=list)
    weights: list[dict[str, Any]] = field(default_factory=list)
    weight_name_mapping: dict[str, str] = field(default_factory=dict)
    nodes: list[dict[str, Any]] = field(default_factory=list)
    constants: dict[str, Any] = field(default_factory=dict)
    pytorch_version: str = ""

    @staticmethod
    def from_dict(d: dict[str, Any]) -> IRGraph:
        _native.validate_ir(json.dumps(to_dict(d)))
        return IRGraph(
            model_name=d.get("model_name", "unknown"),
            graph_inputs=list(d.get("graph_inputs", [])),
            graph_outputs=list(d.get("graph_outputs", [])),
            weights=list(d.get("weights", [])),
            weight_name_mapping=dict(d.get("weight_name_mapping", {})),
            nodes=list(d.get("nodes", [])),
            constants=dict(d.get("constants") or {}),
            pytorch_version=d.get("pytorch_version", ""),
        )

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "model_name": self.model_name,
            "pytorch_version": self.pytorch_version,
            "graph_inputs": self.graph_inputs,
            "graph_outputs": self.graph_outputs,
            "weights": self.weights,
            "weight_name_mapping": self.weight_name_mapping,
            "nodes": self.nodes,
        }
        if self.constants:
            d["constants"] = self.constants
        return d

    def get_node_by_name(self, name: str) -> dict[str, Any] | None:
        return next((n for n in self.nodes if n["name"] == name), None)
