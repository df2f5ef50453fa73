"""What npu adds to torch_ir's export: the names of absent optional tensor arguments.

torch_ir (0.2.3) records a node's tensor arguments as a flat list of the tensors present, so
``native_layer_norm(x, shape, None, b, eps)`` and ``native_layer_norm(x, shape, w, None, eps)``
give the same IR, and ``clamp(x, None, t)`` reads as ``clamp(x, t)``. ``record_absent_tensors``
wraps torch_ir's attribute extraction so that every node with an absent optional ``Tensor?``
argument also gets the attr ``_absent_tensors`` (their schema names), which npu's IR parser reads
(``npu_ir::ABSENT_TENSORS``). Other readers ignore the extra attr.

This file is loaded by the ``npu`` package and, by path, by the export tool (which runs before
the package is built), so it imports nothing from either.
"""

from __future__ import annotations

from typing import Any

ABSENT_TENSORS = "_absent_tensors"


def _is_optional_tensor(arg: Any) -> bool:
    import torch

    t = arg.type
    return isinstance(t, torch.OptionalType) and isinstance(t.getElementType(), torch.TensorType)


def absent_tensor_args(node: Any) -> list[str]:
    """Schema names of the optional ``Tensor?`` arguments of an FX ``node`` that are None."""
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return []
    absent = []
    for i, arg in enumerate(schema.arguments):
        if not _is_optional_tensor(arg):
            continue
        if i < len(node.args):
            value = node.args[i]
        else:
            value = node.kwargs.get(arg.name)
        if value is None:
            absent.append(arg.name)
    return absent


def record_absent_tensors() -> None:
    """Makes torch_ir's exporter record ``_absent_tensors`` (idempotent)."""
    from torch_ir import analyzer

    original = analyzer._extract_op_attrs
    if getattr(original, "_npu_records_absent", False):
        return

    def extract(node: Any) -> dict[str, Any]:
        attrs = original(node)
        absent = absent_tensor_args(node)
        if absent:
            attrs[ABSENT_TENSORS] = absent
        return attrs

    extract._npu_records_absent = True  # type: ignore[attr-defined]
    analyzer._extract_op_attrs = extract
