"""Native backends by name, opened once per process and shared (so weights uploaded for a prefill
program are reused by its decode program)."""

from __future__ import annotations

import functools

from . import _native
from ._errors import BackendUnavailableError

# best first: CUDA, a GPU through wgpu (Vulkan, Metal, DX12), then the reference CPU backend
PREFERENCE = ("cuda", "wgpu", "cpu")


@functools.cache
def native_backend(name: str) -> _native.Backend:
    return _native.Backend(name)


@functools.cache
def availability() -> dict[str, str | None]:
    """Backend name -> None when it can start here, else why not."""
    return dict(_native.Backend.available())


def best_name() -> str:
    avail = availability()
    for name in PREFERENCE:
        if avail.get(name) is None:
            return name
    raise BackendUnavailableError("no backend can start: " + "; ".join(f"{k}: {v}" for k, v in avail.items()))


def resolve(name: str | None) -> _native.Backend:
    """The native backend called ``name``, or the best available one for ``None``."""
    return native_backend(best_name() if name is None else name)
