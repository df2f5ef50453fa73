"""A/B timing of the CUDA backend on the GPU machine, in one call: Qwen2.5-1.5B bf16 prefill of
128 tokens, one decode step at 1000 of 2048 cached positions and (``--long``) at 32000 of 32768,
for two or more variants timed in alternating rounds so that clock and thermal drift fall on
every variant alike. A variant is a label, a directory of staged binaries and environment
settings: ``LABEL=DIR[,VAR=VALUE...]``, e.g. ``generic=.device,NPU_CUDA_DTYPE_KERNELS=0``.
Weights are random (``npu-cuda-bench decode-at --weights random``); the programs are compiled
once, by the first variant's ``npu``. Prints each round and the medians; writes JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import gpu_common as g


@dataclass(frozen=True)
class Variant:
    label: str
    bin_dir: Path
    env: dict[str, str] = field(default_factory=dict)


def parse_variant(spec: str) -> Variant:
    """``LABEL=DIR[,VAR=VALUE...]`` as a Variant; ValueError says what is malformed."""
    label, sep, rest = spec.partition("=")
    if not sep or not label or not rest:
        raise ValueError(f"variant {spec!r}: expected LABEL=DIR[,VAR=VALUE...]")
    bin_dir, *settings = rest.split(",")
    env: dict[str, str] = {}
    for s in settings:
        var, sep, value = s.partition("=")
        if not sep or not var:
            raise ValueError(f"variant {label!r}: setting {s!r} is not VAR=VALUE")
        env[var] = value
    return Variant(label, Path(bin_dir), env)


@dataclass(frozen=True)
class Case:
    name: str
    program: Path
    position: int
    repeat: int


def cases(npu: str, work: Path, long: bool, log: Path) -> list[Case]:
    """The Qwen programs (exported IR only, compiled for bf16), as gpu_bench lays them out."""
    d = g.export("qwen2.5-1.5b", work / "qwen2.5-1.5b-ir", ["--dtype", "bfloat16", "--ir-only"], log)
    pre = g.compile_program(npu, d / "prefill.ir.json", d / "prefill-bf16.npubin", "bf16", log)
    dec = g.compile_program(npu, d / "decode.ir.json", d / "decode-bf16.npubin", "bf16", log)
    out = [Case("prefill 128", pre, 0, 50), Case("decode at 1000 of 2048", dec, 1000, 100)]
    if long:
        d32 = g.export_qwen_32k(work, log)
        dec32 = g.compile_program(npu, d32 / "decode.ir.json", d32 / "decode-bf16.npubin", "bf16", log)
        out.append(Case("decode at 32000 of 32768", dec32, 32000, 50))
    return out


def time_case(v: Variant, c: Case, log: Path) -> float:
    """One ``decode-at`` run of the case under the variant: the replayed graph's GPU ms."""
    cmd = [
        str(v.bin_dir / "npu-cuda-bench"),
        "decode-at",
        "--decode",
        str(c.program),
        "--weights",
        "random",
        "--positions",
        str(c.position),
        "--repeat",
        str(c.repeat),
    ]
    res = g.sh_json(cmd, log, v.env)
    return float(res["points"][0]["gpu_ms"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m npu_export.gpu_ab", description=__doc__)
    p.add_argument("--variant", action="append", required=True, help="LABEL=DIR[,VAR=VALUE...]")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--long", action="store_true", help="also decode at 32000 of 32768")
    p.add_argument("--work", type=Path, default=Path("/tmp/npu-gpu"))
    p.add_argument("--json", type=Path, default=Path("/tmp/npu-gpu-out/gpu-ab.json"))
    a = p.parse_args(argv)
    try:
        variants = [parse_variant(s) for s in a.variant]
    except ValueError as e:
        p.error(str(e))
    a.work.mkdir(parents=True, exist_ok=True)
    log = a.work / "gpu_ab.log"
    todo = cases(str(variants[0].bin_dir / "npu"), a.work, a.long, log)
    times: dict[str, dict[str, list[float]]] = {c.name: {v.label: [] for v in variants} for c in todo}
    for r in range(a.rounds):
        for v in variants:
            for c in todo:
                ms = time_case(v, c, log)
                times[c.name][v.label].append(ms)
                print(f"round {r + 1} {v.label:>16} {c.name:<26} {ms:8.4f} ms", flush=True)
    base = variants[0].label
    header = "".join(f"{v.label:>18}" for v in variants)
    print(f"\n{'case':<26}{header}  (median ms; ratio to {base})")
    rows: list[dict[str, Any]] = []
    for c in todo:
        med = {v.label: statistics.median(times[c.name][v.label]) for v in variants}
        cells = "".join(f"{med[v.label]:>10.4f} ({med[v.label] / med[base]:.3f})" for v in variants)
        print(f"{c.name:<26}{cells}")
        rows.append({"case": c.name, "median_ms": med, "rounds_ms": times[c.name]})
    result = {
        "variants": [{"label": v.label, "bin": str(v.bin_dir), "env": v.env} for v in variants],
        "timing": "decode-at: median CUDA-event time of the replayed graph, random weights",
        "rows": rows,
    }
    a.json.parent.mkdir(parents=True, exist_ok=True)
    a.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
