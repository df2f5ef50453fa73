"""``python -m npu.bench``: what the Python layer adds to a run.

Times one tiny program (Linear 16->16, batch 1, CPU backend) four ways: the Rust run in a Rust loop
(inputs converted once), the native call from Python (numpy in, numpy out), ``npu.compile``'s
callable (torch in, torch out, shape/dtype checks, DLPack), and the reference API's
``Executor.run`` (NPUBuffers). Prints a table and writes a JSON file (default
benchmarks/results/python-overhead.json). ``--gpu`` adds ResNet-50 batch 64 with CUDA tensors in
and out through ``npu.compile`` against the CUDA backend's own GPU time of the replayed graph.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path
from typing import Any


def _mean_us(fn: Any, iterations: int, repeats: int = 5) -> float:
    """The best of ``repeats`` means (the least disturbed by the other tenants of the machine)."""
    for _ in range(max(iterations // 10, 10)):
        fn()
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(iterations):
            fn()
        best = min(best, (time.perf_counter() - t) * 1e6 / iterations)
    return best


def cpu_overhead(iterations: int) -> dict[str, Any]:
    import npu_compiler
    import npu_runtime
    import numpy as np
    import torch

    import npu
    from npu import _arrays

    torch.manual_seed(0)
    model = torch.nn.Linear(16, 16).eval()
    x = torch.randn(1, 16)
    compiled = npu.compile(model, (x,), backend="cpu")
    exe = compiled._exe
    assert exe is not None
    named = [_arrays.from_torch(compiled._inputs[0][0], x)]
    rust_us = exe.bench(named, iterations * 5) * 1e6
    native_us = _mean_us(lambda: exe.run(named), iterations)
    compiled_us = _mean_us(lambda: compiled(x), iterations)
    program = npu_compiler.CompiledProgram(compiled.programs[0]._native)
    ex = npu_runtime.Executor(program, npu_runtime.Device("cpu"))
    w = npu_runtime.load_weights(model.state_dict(), program)
    inputs = {program.input_specs[0].name: npu_runtime.NPUBuffer.from_numpy(np.asarray(x), spec=program.input_specs[0])}
    executor_us = _mean_us(lambda: ex.run(inputs, w), iterations)
    rows = {
        "rust run (Rust loop)": rust_us,
        "native call (numpy)": native_us,
        "npu.compile callable (torch)": compiled_us,
        "npu_runtime.Executor.run": executor_us,
    }
    return {
        "program": "Linear(16, 16), batch 1, float32, cpu backend",
        "iterations": iterations,
        "us_per_call": {k: round(v, 2) for k, v in rows.items()},
        "added_over_rust_us": {k: round(v - rust_us, 2) for k, v in rows.items()},
        "target_added_us": 30,
    }


def gpu_resnet50(iterations: int) -> dict[str, Any]:
    import torch
    import torchvision

    import npu

    torch.manual_seed(0)
    model = torchvision.models.resnet50(weights=None).eval()
    x = torch.randn(64, 3, 224, 224)
    compiled = npu.compile(model, (x,), backend="cuda")
    xc = x.cuda()
    for _ in range(3):
        y = compiled(xc)
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(iterations):
        y = compiled(xc)
    torch.cuda.synchronize()
    call_ms = (time.perf_counter() - t) * 1e3 / iterations
    graph_ms = compiled.last_gpu_ms()
    with torch.no_grad():
        ref = model.cuda()(xc)
    err = float((y.float() - ref).abs().max() / ref.abs().max())
    return {
        "program": "ResNet-50, batch 64, float32, cuda backend, torch CUDA tensors in and out",
        "iterations": iterations,
        "npu_compile_call_ms": round(call_ms, 3),
        "replayed_graph_gpu_ms": round(graph_ms, 3) if graph_ms is not None else None,
        "ratio": round(call_ms / graph_ms, 3) if graph_ms else None,
        "output_device": str(y.device),
        "max_rel_err_vs_torch": err,
        "target_ratio": 1.10,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m npu.bench", description=__doc__)
    p.add_argument("--iterations", type=int, default=2000)
    p.add_argument("--gpu", action="store_true", help="also ResNet-50 batch 64 on CUDA")
    p.add_argument("--out", type=Path, default=Path("benchmarks/results/python-overhead.json"))
    a = p.parse_args(argv)
    result: dict[str, Any] = {
        "command": "python -m npu.bench" + (" --gpu" if a.gpu else ""),
        "machine": platform.processor() or platform.machine(),
        "cpu": _cpu_name(),
        "tiny": cpu_overhead(a.iterations),
    }
    t = result["tiny"]
    print(f"{'path (' + t['program'] + ')':<60} {'us/call':>9} {'added':>8}")
    for k, v in t["us_per_call"].items():
        print(f"  {k:<58} {v:>9.2f} {t['added_over_rust_us'][k]:>8.2f}")
    if a.gpu:
        g = gpu_resnet50(20)
        result["gpu"] = g
        print(
            f"ResNet-50 b64 cuda: npu.compile call {g['npu_compile_call_ms']} ms, replayed graph "
            f"{g['replayed_graph_gpu_ms']} ms, ratio {g['ratio']}"
        )
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {a.out}")
    return 0


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


if __name__ == "__main__":
    raise SystemExit(main())
