"""The exception classes every part of the package raises (the native module raises them by name).

Each class also derives from the builtin the reference system raised in the same situation, so code
written against it keeps working: compile errors are ``ValueError`` s, run errors ``RuntimeError`` s,
missing weights ``KeyError`` s (with a plain message).
"""

from __future__ import annotations

import builtins


class Error(Exception):
    """Base class of every npu error."""


class IRError(Error, ValueError):
    """The IR JSON is malformed or uses something the IR contract does not allow."""


class CompileError(Error, ValueError):
    """The graph cannot be compiled for the target (unsupported ops, constraints)."""


class NpubinError(Error, ValueError):
    """An ``.npubin`` file is not valid (magic, version, checksum, truncation)."""


class RuntimeError(Error, builtins.RuntimeError):
    """A run failed (a backend error, a kernel error, an invalid state)."""


class InputError(RuntimeError, ValueError):
    """A run was given a wrong, missing or unknown input (shape, dtype, name)."""


class WeightError(RuntimeError, KeyError):
    """A weight is missing, has another shape/dtype than the program needs, or its file is bad."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class BackendUnavailableError(RuntimeError):
    """The requested backend cannot start on this machine (e.g. no CUDA device)."""


__all__ = [
    "BackendUnavailableError",
    "CompileError",
    "Error",
    "IRError",
    "InputError",
    "NpubinError",
    "RuntimeError",
    "WeightError",
]
