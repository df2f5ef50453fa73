"""Decode-only A/B of CUDA backend variants on the GPU machine, from programs compiled here.

Lighter than gpu-ab.sh (no export, no prefill): each case is a compiled decode program and a
position, each variant a directory holding ``npu-cuda-bench`` plus environment settings; the
variants run in alternating rounds until ``--rounds`` or ``--deadline`` seconds, and the table
gives each (variant, case) median of the rounds' medians.

    scripts/gpu-decode-ab.sh --case 1000=.device/progs/decode-bf16.npubin \\
        --case 32000=.device/progs/decode32k-bf16.npubin \\
        --variant base=.device,NPU_CUDA_ATTN_PRE=0 --variant new=.device [--rounds 2]

Writes the rounds as JSON to ``--json`` (default $OUT/gpu-decode-ab.json).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time
from pathlib import Path


def parse_variant(spec: str) -> tuple[str, Path, dict[str, str]]:
    label, rest = spec.split("=", 1)
    parts = rest.split(",")
    env = dict(p.split("=", 1) for p in parts[1:])
    return label, Path(parts[0]), env


def run(bin_dir: Path, program: str, position: int, repeat: int, env: dict[str, str]) -> dict:
    cmd = [
        str(bin_dir / "npu-cuda-bench"),
        "decode-at",
        "--decode",
        program,
        "--weights",
        "random",
        "--positions",
        str(position),
        "--repeat",
        str(repeat),
    ]
    res = subprocess.run(cmd, env={**os.environ, **env}, capture_output=True, text=True, check=True)
    return json.loads(res.stdout)


def attention_ms(res: dict) -> float | None:
    for k in res.get("top_kernels", []):
        if str(k.get("name", "")).startswith("attention"):
            return float(k["ms"])
    return None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--variant", action="append", required=True, help="LABEL=DIR[,VAR=VALUE...]")
    p.add_argument("--case", action="append", required=True, help="POSITION=PROGRAM")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--repeat", type=int, default=200)
    p.add_argument("--deadline", type=float, default=540.0, help="start no run after this many seconds")
    p.add_argument("--json", type=Path, default=Path(os.environ.get("OUT", "/tmp")) / "gpu-decode-ab.json")
    a = p.parse_args()
    variants = [parse_variant(v) for v in a.variant]
    cases = [(int(c.split("=", 1)[0]), c.split("=", 1)[1]) for c in a.case]
    t0 = time.time()
    rows: list[dict] = []
    for r in range(a.rounds):
        order = variants if r % 2 == 0 else list(reversed(variants))
        for label, d, env in order:
            for pos, prog in cases:
                if time.time() - t0 > a.deadline:
                    break
                t = time.time()
                res = run(d, prog, pos, a.repeat, env)
                ms = float(res["points"][0]["gpu_ms"])
                att = attention_ms(res)
                rows.append(
                    {"round": r, "variant": label, "position": pos, "gpu_ms": ms, "attention_ms": att}
                )
                print(
                    f"round {r} {label:>10} at {pos:>6}: {ms:.4f} ms "
                    f"(attention profile {att}) [{time.time() - t:.0f} s]",
                    flush=True,
                )
    print(f"\n| variant | {' | '.join(f'decode at {pos}' for pos, _ in cases)} |")
    print(f"| --- | {' | '.join('---' for _ in cases)} |")
    for label, _, _ in variants:
        cells = []
        for pos, _ in cases:
            v = [x["gpu_ms"] for x in rows if x["variant"] == label and x["position"] == pos]
            cells.append(f"{statistics.median(v):.4f} ({len(v)})" if v else "-")
        print(f"| {label} | {' | '.join(cells)} |")
    a.json.write_text(json.dumps({"rows": rows, "elapsed_s": time.time() - t0}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
