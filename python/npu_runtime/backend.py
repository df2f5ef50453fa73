"""Backends: the reference's ``Backend`` interface over the native backends (cpu, cuda, wgpu).

``MetalBackend()`` is the portable GPU backend, wgpu (Metal on Apple Silicon, Vulkan or DX12
elsewhere). Where no GPU adapter answers it runs on the best available backend and says so in
one warning, so the reference's snippets run unchanged on any machine.
"""

from __future__ import annotations

import warnings
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

import numpy as np
from npu import _backends
from npu._errors import BackendUnavailableError

from ._buffer import Device, NPUBuffer
from ._executor import Executor


class Backend(ABC):
    """A device that runs compiled programs."""

    @property
    @abstractmethod
    def name(self) -> str: ...

    @property
    @abstractmethod
    def device(self) -> Device: ...

    def allocate_buffer(self, data: Any, alloc_shape: list[int] | None = None, spec: Any = None) -> NPUBuffer:
        return NPUBuffer.from_numpy(data, self.device, alloc_shape, spec)

    def allocate_zeros(
        self, shape: list[int], dtype: Any = np.float16, alloc_shape: list[int] | None = None
    ) -> NPUBuffer:
        return NPUBuffer.zeros(shape, self.device, dtype, alloc_shape)

    def create_executor(self, program: Any) -> Executor:
        return Executor(program, self.device)

    def execute(self, program: Any, inputs: Mapping[str, Any], weights: Mapping[str, Any]) -> dict[str, NPUBuffer]:
        return self.create_executor(program).run(inputs, weights)

    def synchronize(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Runs are synchronous: nothing to wait for."""


class NativeBackend(Backend):
    """A backend of the Rust runtime, by name."""

    def __init__(self, name: str | None = None) -> None:
        self._device = Device(name)

    @property
    def name(self) -> str:
        return self._device.name

    @property
    def device(self) -> Device:
        return self._device

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class CPUBackend(NativeBackend):
    def __init__(self) -> None:
        super().__init__("cpu")


class CUDABackend(NativeBackend):
    def __init__(self, device_id: int = 0) -> None:
        if device_id != 0:
            raise BackendUnavailableError(f"CUDA device {device_id}: only device 0 is supported")
        super().__init__("cuda")


class MetalBackend(NativeBackend):
    """The reference's GPU backend: wgpu on a GPU adapter, else the best available backend."""

    def __init__(self, config: Any = None) -> None:
        del config
        why = _backends.availability().get("wgpu")
        if why is None:
            super().__init__("wgpu")
            return
        name = _backends.best_name()
        msg = f"npu: no GPU adapter for wgpu ({why}); MetalBackend() runs on the '{name}' backend"
        warnings.warn(msg, stacklevel=2)
        super().__init__(name)


def best_backend() -> NativeBackend:
    """The best backend that can start here: CUDA, then a wgpu GPU adapter, then CPU."""
    return NativeBackend(_backends.best_name())
