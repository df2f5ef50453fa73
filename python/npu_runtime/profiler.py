"""Timing: ``profile`` (mean wall time per run) and ``Profiler`` (per-kernel times of one run)."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass
class ProfileResult:
    """``total_ms`` is the mean wall time of one run, in ms (the reference's field name)."""

    total_ms: float
    iterations: int

    @property
    def mean_ms(self) -> float:
        return self.total_ms


def profile(
    executor: Any, inputs: Mapping[str, Any], weights: Mapping[str, Any], warmup: int = 3, iterations: int = 10
) -> ProfileResult:
    """Runs ``warmup`` times untimed, then ``iterations`` timed runs; returns the mean per run."""
    for _ in range(warmup):
        executor.run(inputs, weights)
    t = time.perf_counter()
    for _ in range(iterations):
        executor.run(inputs, weights)
    return ProfileResult((time.perf_counter() - t) * 1e3 / max(iterations, 1), iterations)


@dataclass
class KernelTime:
    kernel: str
    calls: int
    total_ms: float

    @property
    def avg_ms(self) -> float:
        return self.total_ms / max(self.calls, 1)


class Profiler:
    """Per-kernel timing of an Executor's runs (the backend times every step of a profiled run)."""

    def __init__(self, executor: Any) -> None:
        self.executor = executor
        self.steps: list[tuple[int, str, str, float, int]] = []
        self.wall_ms = 0.0

    def run(self, inputs: Mapping[str, Any], weights: Mapping[str, Any]) -> Any:
        exe = self.executor.prepared(weights)
        exe.set_profiling(True)
        try:
            t = time.perf_counter()
            out = self.executor.run(inputs, weights)
            self.wall_ms = (time.perf_counter() - t) * 1e3
            self.steps = exe.profile()
        finally:
            exe.set_profiling(False)
        return out

    def kernels(self) -> list[KernelTime]:
        """Totals per kernel kind, slowest first."""
        acc: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
        for _, kernel, _, ms, runs in self.steps:
            acc[kernel][0] += runs
            acc[kernel][1] += ms
        rows = [KernelTime(k, int(v[0]), v[1]) for k, v in acc.items()]
        return sorted(rows, key=lambda r: -r.total_ms)

    def print_summary(self) -> None:
        rows = self.kernels()
        print(f"{'kernel':<22} {'calls':>6} {'total ms':>10} {'avg ms':>9}")
        for r in rows:
            print(f"{r.kernel:<22} {r.calls:>6} {r.total_ms:>10.3f} {r.avg_ms:>9.4f}")
        print(f"{'steps total':<22} {sum(r.calls for r in rows):>6} {sum(r.total_ms for r in rows):>10.3f}")
        print(f"wall time of the run: {self.wall_ms:.3f} ms")
