"""Where a replayed decode step's time goes between and inside launches, from the per-block
timestamps ``npu-cuda-bench decode-at`` writes with ``NPU_CUDA_TIMELINE=1``
(``crates/npu-cuda/src/timeline.rs``). Per grid (ordered by its first block's entry, which
programmatic launch keeps in launch order): ``pre`` = first wait return - first entry (how
early its blocks were resident), ``release`` = its first wait return - the previous grid's
last block exit (the boundary: completion, flush and the wait's release), ``body`` = last exit
- first wait return, ``late`` = last wait return - first (blocks not resident at the release),
``tail`` = last exit - median exit. Per launch kind (name and blocks) the mean over its
occurrences and replays, and the step's sum of ``release`` and ``body``.

    python -m npu_export.gpu_timeline /tmp/npu-timeline.json [--json OUT]

``%globaltimer`` may tick coarser than a nanosecond (about 32 ns to 1 us by GPU), so single
values are rough; the means over 28 layers and three replays are what to read.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class Grid:
    grid: int
    blocks: int
    records: int
    t0: int
    t1: int
    t1_last: int
    t2: int
    t2_median: float


def grids_of(records: list[list[int]]) -> list[Grid]:
    """The run's grids from its block records, ordered by first entry."""
    by_grid: dict[int, list[list[int]]] = defaultdict(list)
    for r in records:
        by_grid[r[0]].append(r)
    out = []
    for gid, rs in by_grid.items():
        t1s = [r[2] for r in rs if r[2] > 0] or [min(r[1] for r in rs)]
        t2s = [r[3] for r in rs]
        out.append(
            Grid(
                grid=gid,
                blocks=rs[0][6],
                records=len(rs),
                t0=min(r[1] for r in rs),
                t1=min(t1s),
                t1_last=max(t1s),
                t2=max(t2s),
                t2_median=statistics.median(t2s),
            )
        )
    return sorted(out, key=lambda g: g.t0)


def align(grids: list[Grid], launches: list[tuple[str, int]]) -> int:
    """The offset of the steps' first launch among the grids (the graph may start with kernels
    of its own), chosen where the most block counts agree."""
    best, best_hits = 0, -1
    for off in range(16):
        hits = sum(
            1 for i, (_, b) in enumerate(launches) if off + i < len(grids) and grids[off + i].blocks == b
        )
        if hits > best_hits:
            best, best_hits = off, hits
    return best


def summarize(doc: dict[str, Any]) -> dict[str, Any]:
    launches = [(str(n), int(b)) for n, b in doc["launches"]]
    kinds: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    steps = []
    for run in doc["runs"]:
        grids = grids_of(run)
        off = align(grids, launches)
        mism = 0
        prev: Grid | None = grids[off - 1] if off > 0 else None
        for i, (name, blocks) in enumerate(launches):
            if off + i >= len(grids):
                break
            g = grids[off + i]
            if g.blocks != blocks:
                mism += 1
            k = kinds[f"{name} x{blocks}"]
            k["pre"].append((g.t1 - g.t0) / 1e3)
            k["release"].append((g.t1 - prev.t2) / 1e3 if prev else 0.0)
            k["body"].append((g.t2 - g.t1) / 1e3)
            k["late"].append((g.t1_last - g.t1) / 1e3)
            k["tail"].append((g.t2 - g.t2_median) / 1e3)
            prev = g
        last = grids[min(len(grids), off + len(launches)) - 1]
        steps.append(
            {
                "span_us": (last.t2 - grids[off].t1) / 1e3,
                "grids": len(grids),
                "offset": off,
                "block_count_mismatches": mism,
            }
        )
    runs = len(doc["runs"])
    rows = []
    for kind, m in kinds.items():
        n = len(m["body"])
        mean = {f: statistics.fmean(v) for f, v in m.items()}
        rows.append(
            {
                "kind": kind,
                "per_step": n / runs,
                **{f"{f}_us": round(v, 3) for f, v in mean.items()},
                "step_us": round((mean["release"] + mean["body"]) * n / runs, 1),
            }
        )
    rows.sort(key=lambda r: -r["step_us"])
    return {"graph": doc.get("graph"), "steps": steps, "kinds": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("timeline", type=Path)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    s = summarize(json.loads(a.timeline.read_text()))
    for st in s["steps"]:
        print(
            f"step span {st['span_us']:.1f} us, {st['grids']} grids, steps' launches from grid "
            f"{st['offset']}, {st['block_count_mismatches']} block-count mismatches"
        )
    cols = ["pre_us", "release_us", "body_us", "late_us", "tail_us"]
    print(f"{'kind':44} {'n':>5} " + " ".join(f"{c[:-3]:>8}" for c in cols) + f" {'step':>8}")
    for r in s["kinds"]:
        vals = " ".join(f"{r[c]:8.2f}" for c in cols)
        print(f"{r['kind'][:44]:44} {r['per_step']:5.0f} {vals} {r['step_us']:8.1f}")
    total = sum(r["step_us"] for r in s["kinds"])
    rel = sum(r["release_us"] * r["per_step"] for r in s["kinds"])
    print(f"sum {total:.1f} us a step, of which release (boundaries) {rel:.1f} us")
    if a.json:
        a.json.write_text(json.dumps(s, indent=1) + "\n")


if __name__ == "__main__":
    main()
