"""``npu.compile``: an ``nn.Module`` in, a callable on torch tensors out."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from . import _arrays, _backends, _native
from ._errors import InputError
from ._export import as_tuple, export_ir


def _dtype_name(dtype: Any) -> str | None:
    if dtype is None:
        return None
    return str(dtype).removeprefix("torch.")


def _module_dtype(module: Any) -> str:
    """The compute dtype npu.compile picks by default: the module's floating-point dtype."""
    for p in module.parameters():
        if p.is_floating_point():
            return _dtype_name(p.dtype) or "float32"
    return "float32"


def _backend_name(backend: Any) -> str | None:
    if backend is None or isinstance(backend, str):
        return backend
    return str(backend.name)  # npu_runtime backends and native backends


@dataclass
class ProfileReport:
    """``npu.CompiledModel.profile``: mean wall ms per call and per-kernel totals of one profiled run."""

    mean_ms: float
    iterations: int
    kernels: dict[str, tuple[int, float]]  # kind -> (steps, ms)

    def __str__(self) -> str:
        lines = [f"mean {self.mean_ms:.3f} ms over {self.iterations} calls", "per kernel kind (one profiled run):"]
        for k, (n, ms) in sorted(self.kernels.items(), key=lambda kv: -kv[1][1]):
            lines.append(f"  {k:<20} {n:>5} steps {ms:>9.3f} ms")
        return "\n".join(lines)


class CompiledModel:
    """A module compiled for one set of input shapes and dtypes. Call it with tensors of those
    shapes; it returns torch tensors (one tensor when the graph has one output, else a tuple)."""

    def __init__(
        self, ir: dict[str, Any], weights: _native.Weights, backend: _native.Backend, target: str, dtype: str | None
    ) -> None:
        from npu_compiler import CompiledProgram, _plan_from_json

        self._inputs = [(t["name"], list(t["shape"]), t["dtype"]) for t in ir["graph_inputs"]]
        self._n_outputs = len(ir["graph_outputs"])
        self.backend = backend
        text = json.dumps(ir)
        self.partition_plan = _plan_from_json(ir, [], _native.partition_ir(text, target))
        mapping = ir.get("weight_name_mapping", {})
        parts = self.partition_plan.partitions
        self._exe: _native.Executable | None = None
        self._dag: _native.Dag | None = None
        self._device_io: tuple[list[str], list[tuple[list[int], str, str]]] | None = None
        if len(parts) == 1 and parts[0].target == "npu":
            program = _native.compile_ir(text, target, dtype)
            self._exe = backend.prepare(program, weights)
            self.programs = [CompiledProgram(program, mapping)]
            has_state = any(r[4] is not None for r in program.outputs())
            self._run = self._exe.run_all if has_state else self._exe.run
            # CUDA tensors in and out without a host round trip (plain programs on the cuda backend)
            self._device_io = (
                None
                if has_state or backend.name != "cuda"
                else ([r[3] for r in program.inputs()], [(list(r[1]), r[2], r[3]) for r in program.outputs()])
            )
        else:
            self._dag = backend.dag(text, weights, target, dtype)
            self.programs = [CompiledProgram(p, mapping) for _, p in self._dag.programs()]
            self._run = self._dag.run_all if self._dag.state_inputs() else self._dag.run

    def _check(self, args: Sequence[Any]) -> list[_arrays.NamedArray]:
        self._check_shapes(args)
        return [_arrays.from_torch(name, x) for x, (name, _, _) in zip(args, self._inputs, strict=True)]

    def _check_shapes(self, args: Sequence[Any]) -> None:
        import torch

        if len(args) != len(self._inputs):
            raise InputError(f"expected {len(self._inputs)} input tensor(s) (as in the example), got {len(args)}")
        for i, (x, (name, shape, dtype)) in enumerate(zip(args, self._inputs, strict=True)):
            if not isinstance(x, torch.Tensor):
                raise InputError(f"input {i} ('{name}') must be a torch.Tensor, got {type(x).__name__}")
            got = _arrays.torch_dtype_name(x)
            if list(x.shape) != shape or got != dtype:
                raise InputError(
                    f"input {i} ('{name}'): compiled for {dtype}{shape} (the example's), got {got}{list(x.shape)}; "
                    "npu.compile specializes on the example's shapes and dtypes: compile again for these"
                )

    def _call_on_device(self, args: Sequence[Any]) -> list[Any]:
        """CUDA tensors straight to the program's device buffers and back (device-to-device copies)."""
        import torch

        assert self._exe is not None and self._device_io is not None
        storages, outs = self._device_io
        dev = args[0].device
        ins = []
        for x, storage in zip(args, storages, strict=True):
            x = x.detach()
            x = (x if str(x.dtype) == f"torch.{storage}" else x.to(getattr(torch, storage))).contiguous()
            ins.append(x)
        res = [torch.empty(shape, dtype=getattr(torch, storage), device=dev) for shape, _, storage in outs]
        torch.cuda.current_stream(dev).synchronize()  # the inputs are written
        self._exe.run_device(
            [(x.data_ptr(), x.numel() * x.element_size()) for x in ins],
            [(r.data_ptr(), r.numel() * r.element_size()) for r in res],
        )
        return [
            r if storage == dtype else r.to(getattr(torch, dtype))
            for r, (_, dtype, storage) in zip(res, outs, strict=True)
        ]

    def _on_cuda(self, args: Sequence[Any]) -> bool:
        return (
            self._device_io is not None
            and bool(args)
            and all(getattr(x, "is_cuda", False) and x.device.index in (None, 0) for x in args)
        )

    def last_gpu_ms(self) -> float | None:
        """GPU time of the last call's kernels on the cuda backend (the replayed graph), ms."""
        return self._exe.last_gpu_ms() if self._exe is not None else None

    def __call__(self, *args: Any) -> Any:
        if self._on_cuda(args):
            self._check_shapes(args)
            tensors = self._call_on_device(args)
            return tensors[0] if self._n_outputs == 1 else tuple(tensors)
        named = self._check(args)
        outs = self._run(named)
        device = args[0].device if args else None
        tensors = [_arrays.to_torch(dt, a) for _, dt, a in outs]
        if device is not None and device.type != "cpu":
            tensors = [t.to(device) for t in tensors]
        return tensors[0] if self._n_outputs == 1 else tuple(tensors)

    def describe(self) -> str:
        """The partition plan and every compiled program's listing."""
        parts = [self.partition_plan.text.rstrip()] if len(self.partition_plan.partitions) > 1 else []
        parts += [p.describe().rstrip() for p in self.programs]
        return "\n\n".join(parts) + "\n"

    def profile(self, *args: Any, warmup: int = 3, iterations: int = 10) -> ProfileReport:
        """Times ``iterations`` calls after ``warmup``; per-kernel totals from one profiled run."""
        for _ in range(warmup):
            self(*args)
        t = time.perf_counter()
        for _ in range(iterations):
            self(*args)
        mean = (time.perf_counter() - t) * 1e3 / max(iterations, 1)
        kernels: dict[str, tuple[int, float]] = {}
        if self._exe is not None:
            self._exe.set_profiling(True)
            try:
                self(*args)
                for _, kind, _, ms, runs in self._exe.profile():
                    n, tot = kernels.get(kind, (0, 0.0))
                    kernels[kind] = (n + 1, tot + ms / max(runs, 1))
            finally:
                self._exe.set_profiling(False)
        return ProfileReport(mean, iterations, kernels)


def compile(
    module: Any, example_inputs: Any, dtype: Any = None, target: str | None = None, backend: Any = None
) -> CompiledModel:
    """Exports ``module`` through torch_ir at the example inputs' shapes, compiles it for ``target``
    (ops the target cannot run go to the CPU fallback), and prepares it on ``backend`` (default: the
    best available). ``dtype`` is the compute dtype (default: the module's). ``target`` defaults to
    ``gpu`` (channels-last activations) on the CUDA backend and ``npu`` elsewhere, as ``npu run``."""
    examples = as_tuple(example_inputs)
    ir, tensors = export_ir(module, examples)
    weights = _native.Weights.from_arrays([_arrays.from_torch(k, v) for k, v in tensors.items()])
    dt = _dtype_name(dtype) or _module_dtype(module)
    name = _backend_name(backend) or _backends.best_name()
    if target is None:
        target = "gpu" if name == "cuda" else "npu"
    return CompiledModel(ir, weights, _backends.resolve(name), target, dt)
