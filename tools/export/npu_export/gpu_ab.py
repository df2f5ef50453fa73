"""A/B timing of the CUDA backend on the GPU machine, in one call: Qwen2.5-1.5B bf16 prefill of
128 tokens, one decode step at 1000 of 2048 cached positions and (``--long``) at 32000 of 32768,
and (``--vision resnet50:64,...``) vision models in f16 for the ``gpu`` target, or (``--case
POSITION=PROGRAM``) decode programs compiled elsewhere at given positions, for two or more
variants timed in alternating rounds so that clock and thermal drift fall on
every variant alike. A variant is a label, a directory of staged binaries and environment
settings: ``LABEL=DIR[,VAR=VALUE...]``, e.g. ``generic=.device,NPU_CUDA_DTYPE_KERNELS=0``.
Qwen's weights are random (``npu-cuda-bench decode-at --weights random``), the vision models'
those of their export; the programs are compiled once, by the first variant's ``npu``. Prints
each round and the medians, and per vision case each variant's top step groups; writes JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
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
    # a vision case's export (weights and inputs); None for Qwen's decode-at cases
    export_dir: Path | None = None


def parse_given_cases(specs: list[str], repeat: int = 200) -> list[Case]:
    """``POSITION=PROGRAM`` decode programs compiled elsewhere (``npu compile ... --dtype bf16``)
    as decode-at cases at that position; ValueError says what is malformed."""
    out = []
    for spec in specs:
        pos, sep, prog = spec.partition("=")
        if not sep or not pos.isdigit() or not prog:
            raise ValueError(f"case {spec!r}: expected POSITION=PROGRAM")
        out.append(Case(f"decode at {pos} ({Path(prog).stem})", Path(prog), int(pos), repeat))
    return out


def parse_vision(spec: str) -> list[tuple[str, int]]:
    """``MODEL:BATCH[,MODEL:BATCH...]`` as (model, batch) pairs; ValueError says what is malformed."""
    out = []
    for item in filter(None, spec.split(",")):
        model, sep, batch = item.partition(":")
        if not sep or not model or not batch.isdigit() or int(batch) < 1:
            raise ValueError(f"vision case {item!r}: expected MODEL:BATCH")
        out.append((model, int(batch)))
    return out


def vision_cases(npu: str, work: Path, specs: list[tuple[str, int]], log: Path) -> list[Case]:
    """Vision models exported and compiled as gpu_bench does (f16, target gpu)."""
    from .gpu_bench import EXTRA_VISION, export_extra

    out = []
    for model, batch in specs:
        if model in EXTRA_VISION:
            d = export_extra(model, work / f"{model}-b{batch}")
        else:
            d = g.export(model, work / f"{model}-b{batch}", ["--batch", str(batch)], log)
        prog = g.compile_program(npu, d / "model.ir.json", d / "f16-gpu.npubin", "f16", log, target="gpu")
        out.append(Case(f"{model} f16 b{batch}", prog, 0, 50, d))
    return out


def cases(npu: str, work: Path, long: bool, log: Path, qwen_ir: Path | None = None) -> list[Case]:
    """The Qwen programs (exported IR only, compiled for bf16), as gpu_bench lays them out;
    from ``qwen_ir``'s prefill and decode graphs where given (no export on the machine)."""
    if qwen_ir is None:
        d = g.export("qwen2.5-1.5b", work / "qwen2.5-1.5b-ir", ["--dtype", "bfloat16", "--ir-only"], log)
        src = out = d
    else:
        src, out = qwen_ir, work / "qwen2.5-1.5b-given"
        out.mkdir(parents=True, exist_ok=True)
    pre = g.compile_program(npu, src / "prefill.ir.json", out / "prefill-bf16.npubin", "bf16", log)
    dec = g.compile_program(npu, src / "decode.ir.json", out / "decode-bf16.npubin", "bf16", log)
    out = [Case("prefill 128", pre, 0, 50), Case("decode at 1000 of 2048", dec, 1000, 100)]
    if long:
        d32 = g.export_qwen_32k(work, log)
        dec32 = g.compile_program(npu, d32 / "decode.ir.json", d32 / "decode-bf16.npubin", "bf16", log)
        out.append(Case("decode at 32000 of 32768", dec32, 32000, 50))
    return out


@dataclass(frozen=True)
class Timing:
    gpu_ms: float
    # a vision case's whole run (upload, graph, download), and its top step groups
    wall_ms: float | None = None
    top: list[Any] = field(default_factory=list)
    # where the whole run's time went (``npu-cuda-bench time``'s "phases", microseconds)
    phases: dict[str, dict[str, float]] | None = None


def time_case(v: Variant, c: Case, log: Path) -> Timing:
    """One run of the case under the variant: the replayed graph's GPU ms; for vision cases
    also the whole run's wall ms and the top step groups by GPU time."""
    if c.export_dir is not None:
        t = g.time_program(v.bin_dir, c.program, c.export_dir, c.repeat, log, env=v.env)
        top = list(t.get("top_kernels", []))
        return Timing(float(t["gpu_ms"]), float(t["wall_ms"]), top, t.get("phases"))
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
    return Timing(float(res["points"][0]["gpu_ms"]), top=list(res.get("top_kernels", [])))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m npu_export.gpu_ab", description=__doc__)
    p.add_argument("--variant", action="append", required=True, help="LABEL=DIR[,VAR=VALUE...]")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--long", action="store_true", help="also decode at 32000 of 32768")
    p.add_argument("--vision", default="", help="vision cases MODEL:BATCH,... (e.g. resnet50:64)")
    p.add_argument("--no-qwen", action="store_true", help="only the --vision cases")
    p.add_argument(
        "--qwen-ir",
        type=Path,
        help="Qwen2.5-1.5B's 2048-position prefill.ir.json and decode.ir.json from this directory "
        "(e.g. fixtures/qwen2.5-1.5b, exported with the same arguments by the pinned venv) instead "
        "of exporting them on the machine (minutes of a fresh machine's time); the machine's own "
        "export may differ where its transformers does, so compare variants within one call only",
    )
    p.add_argument(
        "--case",
        action="append",
        default=[],
        help="POSITION=PROGRAM: a decode program compiled here and carried, timed at that position "
        "instead of the exported Qwen cases (no export, no prefill; "
        "e.g. 1000=.device/progs/decode-bf16.npubin)",
    )
    p.add_argument(
        "--deadline",
        type=float,
        default=None,
        help="start no run after this many seconds (medians over the rounds that ran), to fit one call",
    )
    p.add_argument("--work", type=Path, default=Path("/tmp/npu-gpu"))
    p.add_argument("--json", type=Path, default=Path("/tmp/npu-gpu-out/gpu-ab.json"))
    a = p.parse_args(argv)
    try:
        variants = [parse_variant(s) for s in a.variant]
        vision = parse_vision(a.vision)
        given = parse_given_cases(a.case)
    except ValueError as e:
        p.error(str(e))
    a.work.mkdir(parents=True, exist_ok=True)
    log = a.work / "gpu_ab.log"
    npu = str(variants[0].bin_dir / "npu")
    todo = given or ([] if a.no_qwen else cases(npu, a.work, a.long, log, a.qwen_ir))
    todo += vision_cases(npu, a.work, vision, log)
    start = time.monotonic()
    times: dict[str, dict[str, list[float]]] = {c.name: {v.label: [] for v in variants} for c in todo}
    walls: dict[str, dict[str, list[float]]] = {c.name: {v.label: [] for v in variants} for c in todo}
    tops: dict[str, dict[str, list[Any]]] = {c.name: {} for c in todo}
    for r in range(a.rounds):
        for v in variants:
            for c in todo:
                if a.deadline is not None and time.monotonic() - start > a.deadline:
                    break
                t = time_case(v, c, log)
                times[c.name][v.label].append(t.gpu_ms)
                if t.wall_ms is not None:
                    walls[c.name][v.label].append(t.wall_ms)
                tops[c.name][v.label] = t.top
                ph = g.phases_text(t.phases)
                wall = "" if t.wall_ms is None else f" (whole run {t.wall_ms:.4f} ms{ph})"
                print(f"round {r + 1} {v.label:>16} {c.name:<26} {t.gpu_ms:8.4f} ms{wall}", flush=True)
    base = variants[0].label
    header = "".join(f"{v.label:>18}" for v in variants)
    print(f"\n{'case':<26}{header}  (median ms; ratio to {base})")
    rows: list[dict[str, Any]] = []
    for c in todo:
        # a deadline may leave a variant without runs of a case
        med = {
            v.label: statistics.median(ts) if (ts := times[c.name][v.label]) else float("nan")
            for v in variants
        }
        cells = "".join(f"{med[v.label]:>10.4f} ({med[v.label] / med[base]:.3f})" for v in variants)
        print(f"{c.name:<26}{cells}")
        row = {"case": c.name, "median_ms": med, "rounds_ms": times[c.name], "top_kernels": tops[c.name]}
        if all(walls[c.name].values()):
            row["median_wall_ms"] = {v.label: statistics.median(walls[c.name][v.label]) for v in variants}
            row["rounds_wall_ms"] = walls[c.name]
        rows.append(row)
    for row in rows:
        if "median_wall_ms" in row:
            wm = row["median_wall_ms"]
            cells = "".join(f"{wm[v.label]:>10.4f} ({wm[v.label] / wm[base]:.3f})" for v in variants)
            print(f"{row['case'] + ' whole run':<26}{cells}")
    for c in todo:
        for v in variants:
            top = tops[c.name].get(v.label, [])[:6]
            if top:
                groups = "; ".join(f"{t['name']} x{t['count']} {t['ms']:.3f}" for t in top)
                print(f"{c.name} {v.label}: {groups}")
    result = {
        "variants": [{"label": v.label, "bin": str(v.bin_dir), "env": v.env} for v in variants],
        "timing": "median CUDA-event time of the replayed graph (Qwen: decode-at, random weights); "
        "vision cases also the whole run's wall time (upload, graph, download)",
        "rows": rows,
    }
    a.json.parent.mkdir(parents=True, exist_ok=True)
    a.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
