"""npu: a compiler and runtime for PyTorch graphs (Rust core, Python front).

- ``npu.compile(module, example_inputs)``: any ``nn.Module`` in, a callable on torch tensors out.
- ``npu.export(module, example_inputs, out_dir)``: IR JSON + weights for the CLI.
- ``torch.compile(model, backend="npu")``: the dynamo backend, found by dynamo through the
  ``torch_dynamo_backends`` entry point (registering it here as well made dynamo's own lookup
  fail with "duplicate name").
- ``npu.load_causal_lm(export_dir).generate(input_ids, max_new_tokens)``: prefill + decode with the
  KV cache on the backend.
- ``npu.TextModel(model_dir).generate("prompt", temperature=..., top_p=...)``: text in, text out with
  ``npu generate``'s tokenizer, chat template and sampling.
- ``npu_compiler`` / ``npu_runtime``: the reference system's API.
"""

from __future__ import annotations

from . import _native
from ._backends import availability, best_name
from ._causal_lm import CausalLM, load_causal_lm
from ._errors import (
    BackendUnavailableError,
    CompileError,
    Error,
    InputError,
    IRError,
    NpubinError,
    RuntimeError,
    WeightError,
)
from ._export import export
from ._model import CompiledModel, ProfileReport, compile
from ._text import TextModel

__version__: str = _native.__version__


def backends() -> dict[str, str | None]:
    """Every backend this build knows: None when it can start here, else why not."""
    return dict(availability())


__all__ = [
    "BackendUnavailableError",
    "CausalLM",
    "CompileError",
    "CompiledModel",
    "Error",
    "IRError",
    "InputError",
    "NpubinError",
    "ProfileReport",
    "RuntimeError",
    "TextModel",
    "WeightError",
    "backends",
    "best_name",
    "compile",
    "export",
    "load_causal_lm",
]
