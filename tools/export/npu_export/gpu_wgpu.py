"""The wgpu backend on the GPU machine (NVIDIA's Vulkan driver) against our CUDA backend in the
same run: ResNet-50 f16 batch 1 and 64, and one Qwen2.5-1.5B bf16 decode step at position 1000
of a 2048-slot cache. Both backends run the same compiled program through `npu run --repeat`
(wall time of whole runs: upload, execute, download); outputs are compared with PyTorch's
(ResNet) or with each other (decode, same inputs and state). Prints a table and writes JSON.

    python -m npu_export.gpu_wgpu --bin DIR --work DIR [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from . import gpu_common as g

Row = dict[str, Any]
TIMING = re.compile(r"(\d+) run\(s\): median ([0-9.]+) ms, min ([0-9.]+) ms, first ([0-9.]+) ms")


def npu_run(
    npu: str, prog: Path, weights: Path, inputs: Path, out: Path, backend: str, repeat: int, log: Path
) -> tuple[float, float, dict[str, torch.Tensor]]:
    """(median ms, first ms, outputs) of `npu run --repeat` on `backend`."""
    cmd = [npu, "run", str(prog), "--backend", backend, "--weights", str(weights)]
    cmd += ["--inputs", str(inputs), "--outputs", str(out), "--repeat", str(repeat)]
    text = g.sh(cmd, log)
    m = TIMING.search(text)
    if m is None:
        raise RuntimeError(f"no timing line in: {text[-300:]}")
    return float(m.group(2)), float(m.group(4)), load_file(str(out))


def compare(
    name: str, prog: Path, d: Path, inputs: Path, ref: torch.Tensor | None, npu: str, repeat: int, log: Path
) -> Row:
    row: Row = {"name": name}
    outs: dict[str, torch.Tensor] = {}
    for backend in ("cuda", "wgpu"):
        t = time.perf_counter()
        try:
            med, first, o = npu_run(
                npu,
                prog,
                d / "weights.safetensors",
                inputs,
                d / f"out-{backend}.safetensors",
                backend,
                repeat,
                log,
            )
            outs[backend] = next(iter(o.values())).float()
            row[f"{backend}_ms"] = med
            row[f"{backend}_first_ms"] = first
        except Exception as e:  # noqa: BLE001 - report, keep going
            row[f"{backend}_error"] = str(e)[-400:]
        print(f"[{name} {backend}] {time.perf_counter() - t:.1f} s", flush=True)
    if ref is not None and "cuda" in outs:
        row["cuda_pearson"] = g.pearson(outs["cuda"], ref)
        row["cuda_top5"] = g.top5_overlap(outs["cuda"][-1], ref[-1])
    base = ref if ref is not None else outs.get("cuda")
    if base is not None and "wgpu" in outs:
        row["reference"] = "pytorch" if ref is not None else "cuda backend"
        row["wgpu_pearson"] = g.pearson(outs["wgpu"], base)
        row["wgpu_top5"] = g.top5_overlap(outs["wgpu"][-1], base[-1])
    if "cuda_ms" in row and "wgpu_ms" in row:
        row["wgpu_over_cuda"] = row["wgpu_ms"] / row["cuda_ms"]
    return row


def resnet50(npu: str, work: Path, batch: int, log: Path) -> Row:
    d = g.export("resnet50", work / f"resnet50-b{batch}", ["--batch", str(batch)], log)
    prog = g.compile_program(npu, d / "model.ir.json", d / "f16.npubin", "f16", log)
    io = load_file(str(d / "io.safetensors"))
    ref = next((v.float() for k, v in io.items() if k.startswith("output.")), None)
    return compare(
        f"resnet50 f16 batch {batch}", prog, d, d / "io.safetensors", ref, npu, 20 if batch == 1 else 5, log
    )


def qwen_decode(npu: str, work: Path, log: Path) -> Row:
    from . import qwen

    d = g.export(
        "qwen2.5-1.5b",
        work / "qwen2.5-1.5b-bf16",
        ["--dtype", "bfloat16", "--decode-steps", "32", "--no-hf-check"],
        log,
    )
    prog = g.compile_program(npu, d / "decode.ir.json", d / "decode-bf16.npubin", "bf16", log)
    ids = torch.tensor([1000 * 7919 % 151000], dtype=torch.int64)
    ins = qwen.step_inputs(ids, 1000, 2048, torch.bfloat16)
    path = d / "decode-at-1000.safetensors"
    save_file({k: v.clone().contiguous() for k, v in ins.items()}, str(path))
    row = compare("qwen2.5-1.5b decode at 1000, cache 2048", prog, d, path, None, npu, 20, log)
    # Where a wgpu decode step goes: per kernel kind, from timestamp queries.
    cmd = [npu, "run", str(prog), "--backend", "wgpu", "--weights", str(d / "weights.safetensors")]
    try:
        text = g.sh([*cmd, "--inputs", str(path), "--repeat", "3", "--profile"], log)
        lines = text.splitlines()
        at = next((i for i, ln in enumerate(lines) if ln.startswith("profile of")), len(lines))
        row["wgpu_profile"] = lines[at : at + 16]
    except Exception as e:  # noqa: BLE001 - the profile is optional
        row["wgpu_profile"] = [f"failed: {str(e)[-200:]}"]
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m npu_export.gpu_wgpu", description=__doc__)
    p.add_argument("--bin", type=Path, default=Path(".device"))
    p.add_argument("--work", type=Path, default=Path("/tmp/npu-gpu"))
    p.add_argument("--json", type=Path, default=Path("benchmarks/results/wgpu-h100.json"))
    a = p.parse_args(argv)
    a.work.mkdir(parents=True, exist_ok=True)
    log = a.work / "gpu_wgpu.log"
    npu = str(a.bin / "npu")
    rows: list[Row] = []
    for make in (
        lambda: resnet50(npu, a.work, 1, log),
        lambda: resnet50(npu, a.work, 64, log),
        lambda: qwen_decode(npu, a.work, log),
    ):
        try:
            rows.append(make())
        except Exception as e:  # noqa: BLE001 - one failure must not hide the rest
            rows.append({"name": "?", "error": str(e)[-400:]})
    result = {
        "device": torch.cuda.get_device_name(),
        "timing": "medians of whole runs (npu run --repeat): upload, execute, download",
        "rows": rows,
    }
    a.json.parent.mkdir(parents=True, exist_ok=True)
    a.json.write_text(json.dumps(result, indent=1) + "\n")
    print(
        f"\n{'benchmark':<44} {'cuda ms':>9} {'wgpu ms':>9} {'wgpu/cuda':>9} {'r':>9} {'top5':>5}  reference"
    )
    for r in rows:
        if "error" in r:
            print(f"{r['name']:<44} ERROR {r['error'][-300:]}")
            continue

        def f(k: str, fmt: str = ".3f", r: Row = r) -> str:
            return format(r[k], fmt) if k in r else "-"

        print(
            f"{r['name'][:44]:<44} {f('cuda_ms'):>9} {f('wgpu_ms'):>9} {f('wgpu_over_cuda', '.2f'):>9} "
            f"{f('wgpu_pearson', '.6f'):>9} {f('wgpu_top5', 'd'):>5}  {r.get('reference', '-')}"
        )
        for ln in r.get("wgpu_profile", []):
            print(f"    {ln}")
        if "cuda_pearson" in r:
            print(f"    cuda backend vs pytorch: r {r['cuda_pearson']:.6f}, top-5 {r['cuda_top5']}")
        for k in ("cuda_error", "wgpu_error"):
            if k in r:
                print(f"    {k}: {r[k][-300:]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
