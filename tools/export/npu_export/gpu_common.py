"""Shared helpers of the GPU check and benchmark (run on the GPU machine)."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch


def sh(cmd: list[str], log: Path | None = None, env: dict[str, str] | None = None) -> str:
    """Runs a command (with ENV's settings over this process's environment); returns stdout,
    raising with its stderr on failure."""
    full_env = None if env is None else {**os.environ, **env}
    res = subprocess.run(cmd, capture_output=True, text=True, env=full_env)
    if log is not None:
        with log.open("a") as f:
            f.write(f"$ {' '.join(cmd)}\n{res.stdout}{res.stderr}\n")
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])}... failed ({res.returncode}): {res.stderr.strip()[-2000:]}")
    return res.stdout


def sh_json(cmd: list[str], log: Path | None = None, env: dict[str, str] | None = None) -> dict[str, Any]:
    out = sh(cmd, log, env).strip().splitlines()
    return dict(json.loads(out[-1]))


def export(model: str, out: Path, extra: list[str], log: Path | None = None) -> Path:
    """``python -m npu_export MODEL --out OUT`` unless OUT already holds it."""
    marker = out / "meta.json"
    if not marker.exists():
        sh([sys.executable, "-m", "npu_export", model, "--out", str(out), *extra], log)
    return out


def export_qwen_32k(work: Path, log: Path | None = None) -> Path:
    """Qwen2.5-1.5B's bf16 IR with a 32768-position cache (no weights), shared by the benchmark
    and the A/B timer: one directory, one set of export arguments."""
    return export(
        "qwen2.5-1.5b",
        work / "qwen2.5-1.5b-32k",
        ["--dtype", "bfloat16", "--ir-only", "--max-cache-len", "32768"],
        log,
    )


def compile_program(
    npu: str, ir: Path, out: Path, dtype: str, log: Path | None = None, target: str = "npu"
) -> Path:
    if not out.exists():
        sh([npu, "compile", str(ir), "-o", str(out), "--dtype", dtype, "--target", target], log)
    return out


def phases_text(ph: dict[str, dict[str, float]] | None) -> str:
    """``; us: host_us upload 12.0 ... | device_us upload ...``: a whole run's phases
    (``npu-cuda-bench time``'s "phases") for a line of a table; empty without them."""
    if not ph:
        return ""
    parts = [f"{side} " + " ".join(f"{k} {v:.1f}" for k, v in ph[side].items()) for side in ph]
    return "; us: " + " | ".join(parts)


def time_program(
    bin_dir: Path,
    prog: Path,
    export_dir: Path,
    repeat: int,
    log: Path | None = None,
    prefix: str | None = None,
    out: Path | None = None,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """``npu-cuda-bench time``: runs PROG on the export's weights and reference inputs (keys
    under PREFIX), returns its JSON timings; OUT receives the outputs; ENV adds settings."""
    cmd = [
        str(bin_dir / "npu-cuda-bench"),
        "time",
        "--program",
        str(prog),
        "--weights",
        str(export_dir / "weights.safetensors"),
        "--io",
        str(export_dir / "io.safetensors"),
        "--repeat",
        str(repeat),
    ]
    if prefix is not None:
        cmd += ["--prefix", prefix]
    if out is not None:
        cmd += ["--out", str(out)]
    return sh_json(cmd, log, env)


def cuda_ms(fn: Callable[[], Any], repeat: int, warmup: int = 3) -> float:
    """Median CUDA-event time of fn() in ms."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def pearson(a: torch.Tensor, b: torch.Tensor) -> float:
    x, y = a.double().flatten(), b.double().flatten()
    x, y = x - x.mean(), y - y.mean()
    return float((x * y).sum() / (x.norm() * y.norm()).clamp_min(1e-30))


def top5_overlap(a: torch.Tensor, b: torch.Tensor) -> int:
    ta = set(a.float().flatten().topk(5).indices.tolist())
    tb = set(b.float().flatten().topk(5).indices.tolist())
    return len(ta & tb)


def host_link_gbs() -> float:
    """Bytes / time of a 256 MiB copy from page-locked host memory to the device, median."""
    src = torch.ones(1 << 26, dtype=torch.float32).pin_memory()
    dst = torch.empty(src.shape, dtype=src.dtype, device="cuda")
    ms = cuda_ms(lambda: dst.copy_(src, non_blocking=True), repeat=10)
    return src.numel() * 4 / (ms / 1e3) / 1e9


def copy_bandwidth_gbs() -> float:
    """(bytes read + bytes written) / time of a 1 GiB device-to-device copy, median."""
    src = torch.ones(1 << 28, dtype=torch.float32, device="cuda")
    dst = torch.empty_like(src)
    ms = cuda_ms(lambda: dst.copy_(src), repeat=20)
    return 2 * src.numel() * 4 / (ms / 1e3) / 1e9
