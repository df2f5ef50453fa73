"""``CompiledProgram``: a compiled program (the reference's ``.npubin`` object) over the Rust ``Program``."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from npu import _native


@dataclass
class TensorSpec:
    """A program input, output or weight: name, shape, dtype (the user's), and how it is stored.

    ``alloc_shape`` is always ``None``: inputs and outputs are dense (channel padding is internal to
    the program). ``transform_steps`` says what the runtime does on upload (a cast to the storage
    dtype), for information only.
    """

    name: str
    shape: list[int]
    dtype: str = "float32"
    alloc_shape: list[int] | None = None
    transform_steps: list[dict[str, Any]] | None = None
    producer_node: str | None = None
    producer_output_idx: int = 0
    storage_dtype: str | None = None
    donates_input: str | None = None


class CompiledProgram:
    """A compiled program. ``save``/``load`` use the ``.npubin`` format (versioned, checksummed)."""

    def __init__(self, native: _native.Program, weight_name_mapping: dict[str, str] | None = None) -> None:
        self._native = native
        self._mapping = dict(weight_name_mapping) if weight_name_mapping else None

    # -- persistence
    def save(self, path: str | os.PathLike[str]) -> None:
        self._native.save(os.fspath(path))

    @staticmethod
    def load(path: str | os.PathLike[str]) -> CompiledProgram:
        return CompiledProgram(_native.Program.load(os.fspath(path)))

    # -- what it is
    @property
    def model_name(self) -> str:
        return self._native.model_name

    @property
    def compute_dtype(self) -> str:
        return self._native.compute_dtype

    @property
    def target(self) -> str:
        return self._native.target

    @cached_property
    def input_specs(self) -> list[TensorSpec]:
        return [self._spec(r) for r in self._native.inputs()]

    @cached_property
    def output_specs(self) -> list[TensorSpec]:
        names = [r[0] for r in self._native.inputs()]
        specs = []
        for r in self._native.outputs():
            s = self._spec(r)
            s.donates_input = None if r[4] is None else names[r[4]]
            specs.append(s)
        return specs

    @cached_property
    def weight_specs(self) -> list[TensorSpec]:
        """The checkpoint tensors the program reads, by state-dict key."""
        return [TensorSpec(name=k, shape=list(s), dtype=d) for k, s, d in self._native.sources()]

    @property
    def weight_name_mapping(self) -> dict[str, str]:
        """FX placeholder -> state-dict key (from the IR; a loaded program maps each key to itself)."""
        if self._mapping is not None:
            keys = {s.name for s in self.weight_specs}
            return {p: k for p, k in self._mapping.items() if k in keys}
        return {s.name: s.name for s in self.weight_specs}

    @cached_property
    def _described(self) -> dict[str, Any]:
        return json.loads(self._native.describe_json())

    @property
    def kernel_calls(self) -> list[dict[str, Any]]:
        """One dict per step: ``kernel_name``, ``params``, ``origin`` (IR nodes), buffers and bindings."""
        return [
            {
                "kernel_name": s["kernel"],
                "params": s["params"],
                "origin": s["origin"],
                "input_buffers": [b["slot"] for b in s["inputs"]],
                "output_buffers": [b["slot"] for b in s["outputs"]],
                "inputs": s["inputs"],
                "outputs": s["outputs"],
            }
            for s in self._described["steps"]
        ]

    @property
    def buffer_allocations(self) -> list[dict[str, Any]]:
        """Every device buffer the program needs: inputs, outputs, weights, constants and the arena
        that holds all intermediates (placed by live range)."""
        d = self._described

        def size(shape: list[int], dtype: str) -> int:
            n = 1
            for x in shape:
                n *= x
            return n * _ITEM_BYTES[dtype]

        out: list[dict[str, Any]] = []
        for kind, key, dt in (("input", "inputs", "storage"), ("output", "outputs", "storage")):
            for t in d[key]:
                if kind == "output" and t.get("donates_input"):
                    continue  # updates its input's buffer in place
                out.append(
                    {
                        "name": t["name"],
                        "kind": kind,
                        "shape": t["shape"],
                        "dtype": t[dt],
                        "alloc_shape": None,
                        "size_bytes": size(t["shape"], t[dt]),
                    }
                )
        for kind, key in (("weight", "weights"), ("constant", "constants")):
            for t in d[key]:
                out.append(
                    {
                        "name": t["name"],
                        "kind": kind,
                        "shape": t["shape"],
                        "dtype": t["dtype"],
                        "alloc_shape": None,
                        "size_bytes": size(t["shape"], t["dtype"]),
                    }
                )
        out.append(
            {
                "name": "arena",
                "kind": "arena",
                "shape": [d["arena_bytes"]],
                "dtype": "uint8",
                "alloc_shape": None,
                "size_bytes": d["arena_bytes"],
            }
        )
        return out

    def describe(self) -> str:
        """A readable listing: inputs, outputs, weights, steps and kernel totals."""
        return self._native.describe()

    def __repr__(self) -> str:
        return (
            f"CompiledProgram({self.model_name!r}, target={self.target!r}, "
            f"compute_dtype={self.compute_dtype!r}, steps={self._native.num_steps})"
        )

    def _spec(self, r: tuple[str, list[int], str, str, int | None]) -> TensorSpec:
        name, shape, dtype, storage, _ = r
        steps = [] if storage == dtype else [{"type": "cast", "to": storage}]
        return TensorSpec(
            name=name, shape=list(shape), dtype=dtype, transform_steps=steps, producer_node=name, storage_dtype=storage
        )


_ITEM_BYTES = {
    "float32": 4,
    "float64": 8,
    "float16": 2,
    "bfloat16": 2,
    "int8": 1,
    "int16": 2,
    "int32": 4,
    "int64": 8,
    "uint8": 1,
    "bool": 1,
}
