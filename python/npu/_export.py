"""Export an ``nn.Module`` through torch_ir: the IR dict and the tensors its weights name.

Like the project's export tool (tools/export/npu_export/common.py): the module is exported in eval
mode under ``no_grad`` (so HF rotary embeddings do not leave a ``wrap_with_set_grad_enabled``), and
its weights are collected by the IR's state-dict keys from ``named_parameters`` and ``named_buffers``
without de-duplication, so tied weights appear under every name and non-persistent buffers (RoPE's
``inv_freq``) are included. Export runs on the real tensors (``strict=False``), so lifted tensor
constants are carried with their values.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from ._errors import CompileError
from ._ir import to_dict
from ._torch_ir_compat import record_absent_tensors


@contextlib.contextmanager
def eval_mode(module: Any) -> Iterator[None]:
    was = [(m, m.training) for m in module.modules()]
    module.eval()
    try:
        yield
    finally:
        for m, t in was:
            m.training = t


@contextlib.contextmanager
def plain_attention() -> Iterator[None]:
    """In eval mode without grad, nn.MultiheadAttention and nn.TransformerEncoderLayer take a fused
    "fast path" (aten._transformer_encoder_layer_fwd, aten._native_multi_head_attention): one opaque
    op that neither the target nor the CPU fallback implements. Exports see the plain ops instead."""
    import torch

    was = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        yield
    finally:
        torch.backends.mha.set_fastpath_enabled(was)


def as_tuple(example_inputs: Any) -> tuple[Any, ...]:
    import torch

    if isinstance(example_inputs, torch.Tensor):
        return (example_inputs,)
    return tuple(example_inputs)


def export_ir(
    module: Any, example_inputs: Sequence[Any], model_name: str | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(ir dict, {state-dict key: tensor})`` for ``module`` at the example inputs' shapes."""
    import torch
    import torch_ir

    for i, x in enumerate(example_inputs):
        if not isinstance(x, torch.Tensor):
            raise CompileError(f"example input {i} is a {type(x).__name__}; npu.compile takes tensors only")
    cpu_inputs = tuple(x.detach().cpu() for x in example_inputs)
    name = model_name or type(module).__name__
    record_absent_tensors()
    with eval_mode(module), torch.no_grad(), plain_attention():
        try:
            ir = torch_ir.extract_ir(module, cpu_inputs, model_name=name, strict=False)
        except Exception as e:  # torch.export / torch_ir failures, one line
            msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise CompileError(f"torch_ir cannot export {name}: {msg}") from e
    d = to_dict(ir)
    tensors: dict[str, Any] = {}
    for k, p in module.named_parameters(remove_duplicate=False):
        tensors[k] = p.detach()
    for k, b in module.named_buffers(remove_duplicate=False):
        tensors[k] = b.detach()
    weights: dict[str, Any] = {}
    problems = []
    for w in d["weights"]:
        key = w["name"]
        if 0 in w["shape"]:
            continue
        t = tensors.get(key)
        if t is None:
            problems.append(f"missing '{key}'")
        elif list(t.shape) != list(w["shape"]):
            problems.append(f"'{key}': module {list(t.shape)} vs IR {w['shape']}")
        else:
            weights[key] = t.cpu()
    if problems:
        raise CompileError(f"the module's tensors do not match the exported IR: {'; '.join(problems)}")
    return d, weights


def export(module: Any, example_inputs: Any, out_dir: str | os.PathLike[str], model_name: str | None = None) -> Path:
    """Writes ``model.ir.json`` and ``weights.safetensors`` for ``module`` into ``out_dir`` (what the
    ``npu`` CLI and ``npu_compiler.compile`` read); returns the IR path."""
    from safetensors.torch import save_file

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    d, weights = export_ir(module, as_tuple(example_inputs), model_name)
    ir_path = out / "model.ir.json"
    ir_path.write_text(json.dumps(d, indent=1))
    save_file({k: v.contiguous().clone() for k, v in weights.items()}, str(out / "weights.safetensors"))
    return ir_path
