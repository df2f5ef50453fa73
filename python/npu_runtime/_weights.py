"""Weights for a program: a safetensors file (memory-mapped by the runtime) or a state dict."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
from npu import _arrays, _native
from npu._errors import WeightError

from ._buffer import NPUBuffer


def _as_named(key: str, v: Any) -> _arrays.NamedArray:
    if isinstance(v, NPUBuffer):
        return v._named(key)
    if type(v).__module__.startswith("torch"):
        return _arrays.from_torch(key, v)
    return _arrays.from_numpy(key, v)


def native_from_state_dict(state_dict: Mapping[str, Any], keys: list[str] | None = None) -> _native.Weights:
    """Native weights from a state dict (numpy arrays, torch tensors or NPUBuffers); only ``keys`` when given."""
    wanted = state_dict.keys() if keys is None else [k for k in keys if k in state_dict]
    return _native.Weights.from_arrays([_as_named(k, state_dict[k]) for k in wanted])


class LoadedWeights(Mapping[str, NPUBuffer]):
    """What ``load_weights`` returns: the program's weights by state-dict key, ready for ``Executor.run``."""

    def __init__(
        self, native: _native.Weights, keys: list[str], state_dict: Mapping[str, Any] | None, path: str | None
    ) -> None:
        self._native = native
        self._keys = keys
        self._state_dict = state_dict
        self._path = path

    def __getitem__(self, key: str) -> NPUBuffer:
        if key not in self._keys:
            raise KeyError(key)
        if self._state_dict is not None:
            name, dt, arr = _as_named(key, self._state_dict[key])
            return NPUBuffer(arr, dt, None)
        from safetensors.numpy import load_file  # only for inspecting file weights from Python

        arr = load_file(str(self._path))[key]
        return NPUBuffer(np.ascontiguousarray(arr), _arrays.numpy_dtype_name(arr), None)

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def __repr__(self) -> str:
        return f"LoadedWeights({len(self._keys)} tensors from {self._native.describe()})"


def _check_present(available: set[str], program: Any, where: str) -> None:
    missing = [s for s in program.weight_specs if s.name not in available]
    if missing:
        listed = ", ".join(f"'{s.name}' ({s.dtype}{s.shape})" for s in missing[:8])
        more = f" and {len(missing) - 8} more" if len(missing) > 8 else ""
        raise WeightError(f"{len(missing)} weight(s) the program needs are missing from {where}: {listed}{more}")


def load_weights(
    state_dict: Mapping[str, Any] | str | os.PathLike[str], program: Any, device: Any = None
) -> LoadedWeights:
    """The program's weights from a safetensors path or a state dict (numpy arrays or torch tensors),
    keyed by state-dict key. A missing weight raises :class:`npu.WeightError` (a ``KeyError``) naming it;
    BN folding and dtype conversion happen in the runtime when the program is prepared."""
    del device
    keys = [s.name for s in program.weight_specs]
    if isinstance(state_dict, str | os.PathLike):
        path = os.fspath(state_dict)
        native = _native.Weights.from_safetensors(path)
        _check_present(set(native.keys()), program, path)
        return LoadedWeights(native, keys, None, path)
    if isinstance(state_dict, LoadedWeights):
        _check_present(set(state_dict._keys), program, "the loaded weights")
        return state_dict
    sd: dict[str, Any] = dict(state_dict)
    # a state dict keyed by FX placeholder names (p_conv1_weight) is accepted too
    for placeholder, key in program.weight_name_mapping.items():
        if key not in sd and placeholder in sd:
            sd[key] = sd[placeholder]
    _check_present(set(sd), program, "the state dict")
    return LoadedWeights(native_from_state_dict(sd, keys), keys, sd, None)


def load_weights_from_safetensors(path: str | os.PathLike[str], program: Any, device: Any = None) -> LoadedWeights:
    return load_weights(os.fspath(path), program, device)
