"""``Executor``: runs one compiled program on a device (the reference's single-program path)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from npu import _arrays, _native

from ._buffer import Device, NPUBuffer
from ._weights import LoadedWeights, load_weights


class Executor:
    """Prepares ``program`` on ``device`` when first run with a set of weights (allocation, weight
    upload, kernel setup happen once), then runs it. ``config`` and ``dispatch_strategy`` are
    accepted for source compatibility and unused (dispatch is the backend's business)."""

    def __init__(
        self, program: Any, device: Device | None = None, config: Any = None, dispatch_strategy: Any = None
    ) -> None:
        del config, dispatch_strategy
        self.program = program
        self.device = device if device is not None else Device()
        self._weights: LoadedWeights | None = None
        self._exe: _native.Executable | None = None
        self._specs = {s.name: s for s in program.input_specs}

    def prepared(self, weights: Mapping[str, Any]) -> _native.Executable:
        """The native executable for these weights (prepared on first use, again when they change)."""
        if self._exe is None or weights is not self._weights_arg:
            lw = weights if isinstance(weights, LoadedWeights) else load_weights(weights, self.program)
            self._exe = self.device._native.prepare(self.program._native, lw._native)
            self._weights = lw
            self._weights_arg = weights
        return self._exe

    _weights_arg: Any = None

    def named_inputs(self, inputs: Mapping[str, Any]) -> list[_arrays.NamedArray]:
        out = []
        for name, v in inputs.items():
            spec = self._specs.get(name)
            want = spec.dtype if spec is not None else None
            if isinstance(v, NPUBuffer):
                out.append(v._named(name, want))
            elif type(v).__module__.startswith("torch"):
                out.append(_arrays.convert(_arrays.from_torch(name, v), want))
            else:
                out.append(_arrays.from_numpy(name, v, want))
        return out

    def run(self, inputs: Mapping[str, Any], weights: Mapping[str, Any]) -> dict[str, NPUBuffer]:
        """Runs with ``inputs`` (NPUBuffers or arrays by input name) and returns every output by name.
        The GIL is released while the program runs."""
        exe = self.prepared(weights)
        outs = exe.run(self.named_inputs(inputs))
        result = {name: NPUBuffer(np.asarray(a), dt, self.device) for name, dt, a in outs}
        for spec in self.program.output_specs:
            if spec.donates_input is not None:  # updated in place on the device (KV cache)
                dt, a = exe.state.read(spec.donates_input)
                result[spec.name] = NPUBuffer(
                    _arrays.cast(a, dt, spec.dtype) if dt != spec.dtype else a, spec.dtype, self.device
                )
        return result
