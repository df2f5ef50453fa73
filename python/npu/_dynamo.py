"""The ``torch.compile`` backend: ``torch.compile(model, backend="npu")``.

Dynamo hands over an FX graph whose inputs include the module's parameters and buffers (inlined
nn.Modules); those become the compiled program's weights (captured once, at compile time: this
is an inference backend) and only the other inputs cross at each call. A graph that torch_ir
cannot export, or that the compiler rejects, runs eagerly, with one warning saying why.
"""

from __future__ import annotations

import re
import warnings
from typing import Any

from ._model import compile as npu_compile

# Dynamo's placeholder names for module state: L_self_modules_conv_parameters_weight_, ..._buffers_...
_STATE_NAME = re.compile(r"_(parameters|buffers)_")


def _is_state(node: Any, example: Any) -> bool:
    import torch

    return isinstance(example, torch.nn.Parameter) or bool(_STATE_NAME.search(str(node.target)))


def _lifted(gm: Any, example_inputs: list[Any]) -> tuple[Any, list[int]]:
    """A module holding the state inputs as buffers and taking the others; their positions."""
    import torch

    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(example_inputs):
        raise ValueError("the graph's placeholders do not match its example inputs")
    state = {i for i, (n, x) in enumerate(zip(placeholders, example_inputs, strict=True)) if _is_state(n, x)}
    runtime = [i for i in range(len(example_inputs)) if i not in state]

    class Lifted(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gm = gm
            self.order = list(state)
            for k, i in enumerate(self.order):
                self.register_buffer(f"s{k}", example_inputs[i].detach())

        def forward(self, *xs: Any) -> Any:
            full: list[Any] = [None] * len(example_inputs)
            for k, i in enumerate(self.order):
                full[i] = getattr(self, f"s{k}")
            for x, i in zip(xs, runtime, strict=True):
                full[i] = x
            return self.gm(*full)

    return Lifted(), runtime


def npu_backend(gm: Any, example_inputs: list[Any], **_: Any) -> Any:
    """The dynamo backend function (also the ``torch_dynamo_backends`` entry point ``npu``)."""
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    as_list = isinstance(out_node.args[0], list)
    try:
        module, runtime = _lifted(gm, example_inputs)
        compiled = npu_compile(module, tuple(example_inputs[i] for i in runtime))
    except Exception as e:
        why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        warnings.warn(f"npu: this torch.compile graph runs eagerly: {why}", stacklevel=2)
        return gm.forward

    def run(*args: Any) -> Any:
        outs = compiled(*(args[i] for i in runtime))
        outs = outs if isinstance(outs, tuple) else (outs,)
        return list(outs) if as_list else outs

    run.npu_compiled = compiled  # type: ignore[attr-defined]
    return run
