"""``DAGExecutor`` (a partitioned graph: NPU partitions on a backend, the rest on the CPU fallback
interpreter) and ``execute_cpu_partition``."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from npu import _arrays, _native
from npu_compiler import CompiledProgram, PartitionPlan

from ._buffer import NPUBuffer
from ._weights import native_from_state_dict
from .backend import Backend, best_backend


def _named_input(name: str, v: Any, want: str | None) -> _arrays.NamedArray:
    if isinstance(v, NPUBuffer):
        return v._named(name, want)
    if type(v).__module__.startswith("torch"):
        return _arrays.convert(_arrays.from_torch(name, v), want)
    return _arrays.from_numpy(name, v, want)


class DAGExecutor:
    """Runs a :class:`PartitionPlan`. Every NPU partition is compiled and prepared when the weights
    are loaded; ``execute`` then only moves values and runs. ``compile_fn`` is accepted for source
    compatibility (partitions are compiled by the npu compiler for the backend)."""

    def __init__(
        self, plan: PartitionPlan, backend: Backend | None = None, compile_fn: Callable[..., Any] | None = None
    ) -> None:
        del compile_fn
        self.plan = plan
        self.backend = backend if backend is not None else best_backend()
        self._ir_json = json.dumps(plan.original_ir)
        self._input_dtypes = {t["name"]: t["dtype"] for t in plan.original_ir.get("graph_inputs", [])}
        self._dag: _native.Dag | None = None
        self.npu_programs: dict[int, CompiledProgram] = {}

    def load_weights(self, weights: Mapping[str, Any]) -> None:
        """Compiles and prepares the partitions with these weights (a state dict by key)."""
        self._dag = self.backend.device._native.dag(
            self._ir_json, native_from_state_dict(weights), cpu_nodes=self.plan.cpu_nodes
        )
        mapping = self.plan.original_ir.get("weight_name_mapping", {})
        self.npu_programs = {pid: CompiledProgram(p, mapping) for pid, p in self._dag.programs()}

    def execute(self, inputs: Mapping[str, Any], weights: Mapping[str, Any] | None = None) -> dict[str, np.ndarray]:
        """Runs the graph; returns every graph output by name as numpy. Passing ``weights`` (re)loads them."""
        if weights is not None:
            self.load_weights(weights)
        elif self._dag is None:
            self.load_weights({})
        assert self._dag is not None
        named = [_named_input(k, v, self._input_dtypes.get(k)) for k, v in inputs.items()]
        return {name: _arrays.to_numpy(dt, a) for name, dt, a in self._dag.run_all(named)}


def execute_cpu_partition(
    partition_nodes: list[dict[str, Any]],
    tensor_pool: Mapping[str, Any],
    weights: Mapping[str, Any],
    weight_name_mapping: Mapping[str, str] | None = None,
) -> dict[str, np.ndarray]:
    """Runs IR nodes on the CPU fallback interpreter. Inputs come from ``tensor_pool`` by name;
    weights by placeholder name, or by the state-dict key ``weight_name_mapping`` gives. Returns every
    output of every node."""
    mapping = dict(weight_name_mapping or {})
    produced = {o["name"] for n in partition_nodes for o in n.get("outputs", [])}
    graph_inputs: list[dict[str, Any]] = []
    ir_weights: list[dict[str, Any]] = []
    sub_mapping: dict[str, str] = {}
    used_weights: dict[str, Any] = {}
    nodes = []
    for n in partition_nodes:
        ins = []
        for t in n.get("inputs", []):
            name = t["name"]
            meta = {"name": name, "shape": t["shape"], "dtype": t["dtype"]}
            if name in produced:
                ins.append(t)
                continue
            key = name if name in weights else mapping.get(name)
            if key is not None and key in weights:
                if key not in used_weights:
                    used_weights[key] = weights[key]
                    ir_weights.append({**meta, "name": key})
                sub_mapping[name] = key
                ins.append(meta)
            else:
                if all(g["name"] != name for g in graph_inputs):
                    graph_inputs.append(meta)
                ins.append({**meta, "producer_node": name, "producer_output_idx": 0})
        nodes.append({**n, "inputs": ins})
    outputs = [{"name": o["name"], "shape": o["shape"], "dtype": o["dtype"]} for n in nodes for o in n["outputs"]]
    ir = {
        "model_name": "cpu_partition",
        "graph_inputs": graph_inputs,
        "graph_outputs": outputs,
        "weights": ir_weights,
        "weight_name_mapping": sub_mapping,
        "nodes": nodes,
    }
    named = [_named_input(g["name"], tensor_pool[g["name"]], g["dtype"]) for g in graph_inputs]
    outs = _native.run_fallback(json.dumps(ir), named, native_from_state_dict(used_weights))
    return {name: _arrays.to_numpy(dt, a) for name, dt, a in outs}
