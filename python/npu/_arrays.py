"""Arrays across the boundary: numpy and torch tensors to the native ``(name, dtype, array)`` form and back.

numpy has no bfloat16: such tensors cross as their uint16 bits with the dtype name ``bfloat16``
(``ml_dtypes.bfloat16`` arrays are accepted and returned when ml_dtypes is installed). torch CPU
tensors cross through DLPack, without a copy on the Python side.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch

NamedArray = tuple[str, str, np.ndarray]

_INTEGER = {"int8", "int16", "int32", "int64", "uint8"}
_FLOAT = {"float16", "bfloat16", "float32", "float64"}


def dtype_kind(name: str) -> str:
    """``float``, ``int`` or ``bool``: which dtypes a value may be converted between."""
    if name in _FLOAT:
        return "float"
    if name in _INTEGER:
        return "int"
    return name


def _ml_bfloat16() -> Any | None:
    try:
        import ml_dtypes  # type: ignore[import-not-found]
    except ImportError:
        return None
    return ml_dtypes.bfloat16


def numpy_dtype_name(a: np.ndarray) -> str:
    name = a.dtype.name
    if name == "bfloat16" or name in _FLOAT or name in _INTEGER or name == "bool":
        return name
    raise TypeError(f"arrays of dtype {a.dtype} are not supported (float16/32/64, bfloat16, int8-64, uint8, bool)")


def from_numpy(name: str, a: Any, dtype: str | None = None) -> NamedArray:
    """A numpy array (or array-like) as native input, converted to ``dtype`` when given."""
    a = np.asarray(a)
    have = numpy_dtype_name(a)
    if have == "bfloat16":
        a = a.view(np.uint16)
    return convert((name, have, np.ascontiguousarray(a)), dtype)


def convert(item: NamedArray, want: str | None) -> NamedArray:
    """Converts a native input to ``want`` within its kind (float to float, int to int). Across kinds
    it is left as is, so that the runtime reports the mismatch naming the input."""
    name, have, a = item
    if want is None or want == have or dtype_kind(have) != dtype_kind(want):
        return item
    b = cast(a, have, want)
    if want == "bfloat16":
        b = b.view(np.uint16)
    return (name, want, np.ascontiguousarray(b))


def cast(a: np.ndarray, have: str, want: str) -> np.ndarray:
    """Converts numpy data between dtype names (bfloat16 through its bits)."""
    if have == want:
        return a
    if want == "bfloat16":
        f = a.astype(np.float32) if have != "bfloat16" else a
        bits = np.ascontiguousarray(f).view(np.uint32)
        # round to nearest even, as torch does
        rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
        bf = _ml_bfloat16()
        return rounded.view(bf) if bf is not None else rounded
    if have == "bfloat16":
        bits = np.ascontiguousarray(a).view(np.uint16).astype(np.uint32) << 16
        return bits.view(np.float32).astype(want)
    return a.astype(want)


def to_numpy(dtype: str, a: np.ndarray, want: str | None = None) -> np.ndarray:
    """A native output as numpy: bfloat16 as ml_dtypes.bfloat16 when available, else float32."""
    if dtype == "bfloat16":
        bf = _ml_bfloat16()
        if want is None:
            return a.view(bf) if bf is not None else cast(a, "bfloat16", "float32")
        return cast(a, "bfloat16", want)
    if want is not None and want != dtype:
        return a.astype(want)
    return a


def torch_dtype_name(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


def from_torch(name: str, t: torch.Tensor) -> NamedArray:
    """A CPU tensor as native input through DLPack (no copy here; one copy into the runtime)."""
    import torch

    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    if not t.is_contiguous():
        t = t.contiguous()
    dt = torch_dtype_name(t)
    if t.dtype == torch.bfloat16:
        return (name, dt, np.from_dlpack(t.view(torch.int16)).view(np.uint16))
    if t.dtype == torch.bool:
        return (name, dt, t.numpy())
    return (name, dt, np.from_dlpack(t))


def to_torch(dtype: str, a: np.ndarray) -> torch.Tensor:
    """A native output as a torch tensor sharing the array's memory."""
    import torch

    if dtype == "bfloat16":
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    if dtype == "bool":
        return torch.from_numpy(a)
    return torch.from_dlpack(a)
