"""The reference system's ``npu_runtime`` API over the Rust runtime (CPU and CUDA backends).

``Device``, ``NPUBuffer``, ``Executor``, ``load_weights``, ``load_weights_from_safetensors``,
``profile``, ``Backend`` (``CPUBackend``, ``CUDABackend``, ``MetalBackend``, ``best_backend``),
``DAGExecutor``, ``execute_cpu_partition``. Differences from the reference: docs/python.md.
"""

from __future__ import annotations

from ._buffer import Device, DeviceBuffer, NPUBuffer
from ._executor import Executor
from ._weights import LoadedWeights, load_weights, load_weights_from_safetensors
from .backend import Backend, CPUBackend, CUDABackend, MetalBackend, NativeBackend, best_backend
from .dag_executor import DAGExecutor, execute_cpu_partition
from .profiler import Profiler, ProfileResult, profile

__all__ = [
    "Backend",
    "CPUBackend",
    "CUDABackend",
    "DAGExecutor",
    "Device",
    "DeviceBuffer",
    "Executor",
    "LoadedWeights",
    "MetalBackend",
    "NPUBuffer",
    "NativeBackend",
    "ProfileResult",
    "Profiler",
    "best_backend",
    "execute_cpu_partition",
    "load_weights",
    "load_weights_from_safetensors",
    "profile",
]
