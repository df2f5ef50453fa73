"""``Device`` and ``NPUBuffer``: the reference's device and buffer objects.

A buffer holds its data in host memory in the dtype the program takes; the backend uploads it
when a run needs it (the Rust runtime owns device memory: weights, the arena and the KV cache
stay on the device between runs).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
from npu import _arrays, _backends
from npu._errors import InputError


class Device:
    """A backend to run on: ``Device()`` picks the best available (CUDA, then CPU), ``Device("cpu")``
    names one."""

    def __init__(self, backend: str | None = None) -> None:
        self._native = _backends.resolve(backend)

    @property
    def name(self) -> str:
        return self._native.name

    def describe(self) -> str:
        return self._native.describe()

    def compile_metal_file(self, path: str, macros: dict[str, Any] | None = None) -> Any:
        raise NotImplementedError("compile_metal_file is Metal-only; programs here are compiled by the npu compiler")

    def __repr__(self) -> str:
        return f"Device({self.name!r})"


def _np_dtype(dtype: Any) -> str:
    if isinstance(dtype, str):
        return dtype
    return np.dtype(dtype).name


class NPUBuffer:
    """A tensor for a program input/output: shape, dtype (the program's), and its data."""

    def __init__(
        self, data: np.ndarray, dtype: str, device: Device | None, alloc_shape: list[int] | None = None
    ) -> None:
        self._data = data  # numpy, in ``dtype`` (bfloat16 as ml_dtypes or uint16 bits)
        self._dtype = dtype
        self._device = device
        self._capacity = int(data.nbytes)
        self._alloc_shape = list(alloc_shape) if alloc_shape is not None else None

    # -- construction
    @staticmethod
    def from_numpy(
        data: Any, device: Device | None = None, alloc_shape: list[int] | None = None, spec: Any = None
    ) -> NPUBuffer:
        """Wraps ``data``, converted to ``spec.dtype`` when a spec is given (else kept as is)."""
        arr = np.asarray(data)
        have = _arrays.numpy_dtype_name(arr)
        want = spec.dtype if spec is not None else have
        _check_kind(getattr(spec, "name", "buffer"), have, want)
        arr = np.ascontiguousarray(_arrays.cast(arr, have, want))
        if spec is not None and list(arr.shape) != list(spec.shape):
            raise InputError(f"'{spec.name}': expected shape {list(spec.shape)}, got {list(arr.shape)}")
        return NPUBuffer(arr, want, device, alloc_shape)

    @staticmethod
    def zeros(
        shape: list[int] | tuple[int, ...],
        device: Device | None = None,
        dtype: Any = np.float16,
        alloc_shape: list[int] | None = None,
    ) -> NPUBuffer:
        name = _np_dtype(dtype)
        store = np.uint16 if name == "bfloat16" else name
        return NPUBuffer(np.zeros(tuple(shape), dtype=store), name, device, alloc_shape)

    # -- data
    def write_from_numpy(self, data: Any, spec: Any = None) -> None:
        """Replaces the contents in place; the new data (in the buffer's dtype, or ``spec.dtype``) must
        fit in the buffer's capacity."""
        arr = np.asarray(data)
        have = _arrays.numpy_dtype_name(arr)
        want = spec.dtype if spec is not None else self._dtype
        _check_kind(getattr(spec, "name", "buffer"), have, want)
        arr = np.ascontiguousarray(_arrays.cast(arr, have, want))
        if arr.nbytes > self._capacity:
            raise ValueError(
                f"write_from_numpy: {arr.nbytes} bytes ({want}{list(arr.shape)}) exceed the buffer's capacity of "
                f"{self._capacity} bytes ({self._dtype}{list(self.shape)})"
            )
        self._data = arr
        self._dtype = want

    def to_numpy(self, dtype: Any = np.float32, spec: Any = None) -> np.ndarray:
        """The data as numpy in ``spec.dtype`` when a spec is given (bfloat16 becomes float32), else ``dtype``."""
        want = spec.dtype if spec is not None else _np_dtype(dtype)
        if want == "bfloat16" and _arrays._ml_bfloat16() is None:
            want = "float32"
        out = _arrays.cast(self._data, self._dtype, want)
        return out.copy() if out is self._data else out

    # -- metadata
    @property
    def shape(self) -> list[int]:
        return list(self._data.shape)

    @property
    def alloc_shape(self) -> list[int]:
        return self._alloc_shape if self._alloc_shape is not None else self.shape

    @property
    def dtype(self) -> str:
        return self._dtype

    @property
    def size_bytes(self) -> int:
        return self._capacity

    @property
    def native_handle(self) -> np.ndarray:
        return self._data

    def _named(self, name: str, dtype: str | None = None) -> _arrays.NamedArray:
        """The native ``(name, dtype, array)`` form, converted to ``dtype`` within its kind."""
        bits = self._data.view(np.uint16) if self._dtype == "bfloat16" else self._data
        return _arrays.convert((name, self._dtype, np.ascontiguousarray(bits)), dtype)

    def __repr__(self) -> str:
        return f"NPUBuffer({self._dtype}{self.shape})"


def _check_kind(name: str, have: str, want: str) -> None:
    if _arrays.dtype_kind(have) != _arrays.dtype_kind(want):
        raise InputError(f"'{name}': cannot convert {have} data to {want}")


DeviceBuffer = NPUBuffer


def warn_once(message: str) -> None:
    warnings.warn(message, stacklevel=3)
