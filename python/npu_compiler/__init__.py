"""The reference system's ``npu_compiler`` API over the Rust compiler.

``compile(path | dict)`` -> :class:`CompiledProgram`; ``load_ir``, ``check_constraints``,
``is_op_supported``, ``get_supported_ops``, ``partition(ir_dict, is_supported_fn)`` ->
:class:`PartitionPlan`. Differences from the reference are listed in docs/python.md.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from npu import _native
from npu._errors import CompileError
from npu._ir import IRGraph, to_dict, to_json

from .compiled_program import CompiledProgram, TensorSpec

LayoutProfile = Any  # accepted for source compatibility; layouts are chosen by the target


def load_ir(path: str | os.PathLike[str]) -> IRGraph:
    """Reads and validates an IR JSON file."""
    return IRGraph.from_dict(to_dict(path))


def load_ir_from_dict(d: dict[str, Any]) -> IRGraph:
    return IRGraph.from_dict(d)


def _mapping(ir: Any) -> dict[str, str] | None:
    if isinstance(ir, IRGraph):
        return ir.weight_name_mapping
    if isinstance(ir, dict):
        return dict(ir.get("weight_name_mapping", {}))
    return None


def compile(
    ir: str | os.PathLike[str] | dict[str, Any] | IRGraph,
    profile: LayoutProfile | None = None,
    *,
    target: str = "npu",
    dtype: str | None = None,
) -> CompiledProgram:
    """Compiles an IR (path, dict or IRGraph). ``dtype`` overrides the compute dtype (default: the
    model's; float32 models compute in float16 on the npu target, like the reference).
    Raises :class:`npu.CompileError` (a ``ValueError``) listing every constraint violation."""
    del profile
    mapping = _mapping(ir)
    if mapping is None:
        mapping = dict(json.loads(to_json(ir)).get("weight_name_mapping", {}))
    return CompiledProgram(_native.compile_ir(to_json(ir), target, dtype), mapping)


def compile_graph(graph: IRGraph, profile: LayoutProfile | None = None) -> CompiledProgram:
    return compile(graph, profile)


@dataclass
class ConstraintViolation:
    node_name: str
    message: str
    op_type: str = ""

    def __str__(self) -> str:
        return f"[{self.node_name}] {self.message}"


def check_constraints(
    graph: IRGraph | dict[str, Any] | str | os.PathLike[str], target: str = "npu"
) -> list[ConstraintViolation]:
    """Every reason the graph cannot be compiled for ``target`` (empty: it can)."""
    return [ConstraintViolation(n, m, op) for n, op, m in _native.check_ir(to_json(graph), target)]


def is_op_supported(op_type: str, _attrs: dict[str, Any] | None = None) -> bool:
    """Whether the NPU target runs ``op_type`` (with these attrs) whatever its operands."""
    return _native.op_unsupported(op_type, json.dumps(_attrs or {})) is None


# ATen op strings asked by get_supported_ops(); the answer comes from the compiler's own decision.
_CANDIDATE_OPS = (
    "aten.conv2d.default",
    "aten.relu.default",
    "aten.relu_.default",
    "aten.batch_norm.default",
    "aten.max_pool2d.default",
    "aten.avg_pool2d.default",
    "aten.adaptive_avg_pool2d.default",
    "aten.linear.default",
    "aten.matmul.default",
    "aten.mm.default",
    "aten.bmm.default",
    "aten.addmm.default",
    "aten.t.default",
    "aten.add.Tensor",
    "aten.add_.Tensor",
    "aten.sub.Tensor",
    "aten.mul.Tensor",
    "aten.mul_.Tensor",
    "aten.div.Tensor",
    "aten.silu.default",
    "aten.silu_.default",
    "aten.gelu.default",
    "aten.neg.default",
    "aten.rsqrt.default",
    "aten.sqrt.default",
    "aten.exp.default",
    "aten.log.default",
    "aten.cos.default",
    "aten.sin.default",
    "aten.tanh.default",
    "aten.sigmoid.default",
    "aten.pow.Tensor_Scalar",
    "aten.hardtanh.default",
    "aten.hardswish.default",
    "aten.hardsigmoid.default",
    "aten.clamp.default",
    "aten.layer_norm.default",
    "aten.embedding.default",
    "aten.transpose.int",
    "aten.permute.default",
    "aten.cat.default",
    "aten.slice.Tensor",
    "aten.expand.default",
    "aten.index_copy.default",
    "aten.softmax.int",
    "aten._softmax.default",
    "aten.mean.dim",
    "aten.sum.dim_IntList",
    "aten.full.default",
    "aten.reshape.default",
    "aten.view.default",
    "aten.flatten.using_ints",
    "aten.contiguous.default",
    "aten.unsqueeze.default",
    "aten.squeeze.dim",
    "aten.alias.default",
    "aten.detach_.default",
    "aten.clone.default",
    "aten.to.dtype",
    "aten.dropout.default",
    "aten._assert_tensor_metadata.default",
    "aten.scaled_dot_product_attention.default",
    "aten.chunk.default",
    "aten.split.Tensor",
    "<built-in function getitem>",
    "wrap_with_set_grad_enabled",
)


def get_supported_ops() -> frozenset[str]:
    """The op strings (of a fixed candidate list) that the NPU target supports."""
    attrs = {"<built-in function getitem>": {"index": 0}}
    return frozenset(op for op in _CANDIDATE_OPS if _native.op_unsupported(op, json.dumps(attrs.get(op, {}))) is None)


@dataclass
class Partition:
    partition_id: int
    target: str  # "npu" | "cpu"
    nodes: list[dict[str, Any]]
    input_names: list[str]
    output_names: list[str]
    reasons: dict[str, str] = field(default_factory=dict)


@dataclass
class TransferOp:
    tensor_names: list[str]
    direction: str  # "to_cpu" | "to_npu"


@dataclass
class PartitionPlan:
    """Partitions in execution order with the transfers between them."""

    steps: list[Partition | TransferOp]
    original_ir: dict[str, Any]
    cpu_nodes: list[str] = field(default_factory=list)
    text: str = ""

    @property
    def partitions(self) -> list[Partition]:
        return [s for s in self.steps if isinstance(s, Partition)]

    @property
    def transfers(self) -> list[TransferOp]:
        return [s for s in self.steps if isinstance(s, TransferOp)]

    def __str__(self) -> str:
        return self.text


def partition(
    ir_dict: dict[str, Any] | IRGraph, is_supported_fn: Callable[..., bool] = is_op_supported, target: str = "npu"
) -> PartitionPlan:
    """Splits the graph into NPU and CPU partitions. A node goes to the CPU when
    ``is_supported_fn(op_type, attrs)`` is false or when the target cannot run it with these
    operands; partitions follow the data flow (an unsupported op never splits an NPU run whose
    other nodes do not depend on it)."""
    d = to_dict(ir_dict)
    if is_supported_fn is is_op_supported:
        cpu_nodes: list[str] = []  # the compiler's operand-aware decision covers it
    else:
        cpu_nodes = [n["name"] for n in d["nodes"] if not is_supported_fn(n["op_type"], n.get("attrs", {}))]
    return _plan_from_json(d, cpu_nodes, _native.partition_ir(json.dumps(d), target, cpu_nodes))


def _plan_from_json(d: dict[str, Any], cpu_nodes: list[str], text: str) -> PartitionPlan:
    p = json.loads(text)
    by_name = {n["name"]: n for n in d["nodes"]}
    # The caller's node dicts where they exist; nodes made by decomposing a composite op (a
    # select into a slice and a view) come described by the compiler, without attrs.
    parts = {
        q["id"]: Partition(
            q["id"],
            q["device"],
            [by_name.get(n, info) for n, info in zip(q["nodes"], q["node_info"], strict=True)],
            q["inputs"],
            q["outputs"],
            q["reasons"],
        )
        for q in p["partitions"]
    }
    steps: list[Partition | TransferOp] = []
    for s in p["steps"]:
        if s["kind"] == "run":
            steps.append(parts[s["partition"]])
        else:
            steps.append(TransferOp(s["values"], "to_" + s["to"]))
    return PartitionPlan(steps, d if isinstance(d, dict) else {}, cpu_nodes, p["text"])


__all__ = [
    "CompileError",
    "CompiledProgram",
    "ConstraintViolation",
    "IRGraph",
    "Partition",
    "PartitionPlan",
    "TensorSpec",
    "TransferOp",
    "check_constraints",
    "compile",
    "compile_graph",
    "get_supported_ops",
    "is_op_supported",
    "load_ir",
    "load_ir_from_dict",
    "partition",
]
