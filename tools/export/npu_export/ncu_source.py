"""Where a kernel's warps stall, by SASS instruction, from Nsight Compute's source page.

Reads the CSV that ``ncu --import REPORT --page source --print-source sass --csv`` prints for a
report taken with ``--section SourceCounters`` (scripts/gpu-kernel-ncu.sh --source writes both)
and prints: the stall samples per region of the code (split at the kernel's barriers, so the
prologue, the loops and the epilogue of a block land in different rows), the instructions with
the most samples and their dominant stall reasons, and the memory instructions whose accesses
cost more L2 sectors or shared-memory wavefronts than ncu's ideal. Standard library only, and
run as a file (the package's import needs torch_ir), so it runs on the GPU machine as is:

    python3 tools/export/npu_export/ncu_source.py kernel-source.csv [--top 20]
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

STALL_PREFIX = "stall_"
NOT_ISSUED = " (Not Issued)"


@dataclass
class Instr:
    """One SASS instruction's row of the source page."""

    offset: int
    text: str
    samples: float
    executed: float
    stalls: Counter[str] = field(default_factory=Counter)
    l2_excess: float = 0.0
    l2_sectors: float = 0.0
    shared_excess: float = 0.0
    shared_wavefronts: float = 0.0


def _number(cell: str) -> float:
    cell = cell.replace(",", "").strip()
    if not cell:
        return 0.0
    try:
        return float(cell)
    except ValueError:
        return 0.0


def parse(lines: list[str]) -> list[Instr]:
    """The instructions of the first kernel in the CSV, offsets relative to its first one."""
    rows = list(csv.reader(lines))
    header_at = next((i for i, r in enumerate(rows) if r[:2] == ["Address", "Source"]), None)
    if header_at is None:
        raise ValueError("no 'Address,Source' header: not ncu's source page as CSV")
    header = rows[header_at]
    col = {name: i for i, name in enumerate(header)}

    def get(row: list[str], name: str) -> float:
        i = col.get(name)
        return _number(row[i]) if i is not None and i < len(row) else 0.0

    stall_cols = [h for h in header if h.startswith(STALL_PREFIX) and not h.endswith(NOT_ISSUED)]
    out: list[Instr] = []
    base: int | None = None
    for row in rows[header_at + 1 :]:
        if len(row) < 2 or not row[0].startswith("0x"):
            if out:
                break  # the next kernel's section
            continue
        addr = int(row[0], 16)
        base = addr if base is None else base
        ins = Instr(
            offset=addr - base,
            text=row[1].strip(),
            samples=get(row, "# Samples"),
            executed=get(row, "Instructions Executed"),
            l2_excess=get(row, "L2 Theoretical Sectors Global Excessive"),
            l2_sectors=get(row, "L2 Theoretical Sectors Global"),
            shared_excess=get(row, "L1 Wavefronts Shared Excessive"),
            shared_wavefronts=get(row, "L1 Wavefronts Shared"),
        )
        for name in stall_cols:
            n = get(row, name)
            if n:
                ins.stalls[name[len(STALL_PREFIX) :]] += int(n)
        out.append(ins)
    return out


def regions(instrs: list[Instr]) -> list[tuple[int, int, float, Counter[str]]]:
    """(first offset, last offset, samples, stalls) of the runs between block barriers."""
    out: list[tuple[int, int, float, Counter[str]]] = []
    start = 0
    samples = 0.0
    stalls: Counter[str] = Counter()
    for i, ins in enumerate(instrs):
        samples += ins.samples
        stalls.update(ins.stalls)
        if "BAR.SYNC" in ins.text or i == len(instrs) - 1:
            if samples:
                out.append((instrs[start].offset, ins.offset, samples, stalls))
            start, samples, stalls = i + 1, 0.0, Counter()
    return out


def _reasons(stalls: Counter[str], n: int = 3) -> str:
    return ", ".join(f"{k} {v}" for k, v in stalls.most_common(n))


def report(instrs: list[Instr], top: int) -> str:
    total = sum(i.samples for i in instrs) or 1.0
    lines = [f"{len(instrs)} instructions, {total:.0f} stall samples"]
    lines.append("regions between barriers (offsets; share of samples; top reasons):")
    for lo, hi, s, st in regions(instrs):
        if s / total >= 0.01:
            lines.append(f"  {lo:#07x}-{hi:#07x} {100 * s / total:5.1f}%  {_reasons(st)}")
    lines.append(f"top {top} instructions by samples:")
    for ins in sorted(instrs, key=lambda i: -i.samples)[:top]:
        if ins.samples:
            share = 100 * ins.samples / total
            lines.append(f"  {ins.offset:#07x} {share:5.1f}%  {ins.text[:60]:60s} {_reasons(ins.stalls)}")
    excess = [i for i in instrs if i.l2_excess or i.shared_excess]
    if excess:
        lines.append("memory instructions over the ideal (per execution: L2 sectors, shared wavefronts):")
        for ins in sorted(excess, key=lambda i: -(i.l2_excess + i.shared_excess))[:top]:
            per = max(ins.executed, 1.0)
            lines.append(
                f"  {ins.offset:#07x} {ins.text[:50]:50s} L2 {ins.l2_sectors / per:.1f} "
                f"(+{ins.l2_excess / per:.1f}) shared {ins.shared_wavefronts / per:.1f} "
                f"(+{ins.shared_excess / per:.1f})"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("csv", type=Path, help="ncu --page source --print-source sass --csv output")
    p.add_argument("--top", type=int, default=20)
    args = p.parse_args(argv)
    try:
        instrs = parse(args.csv.read_text().splitlines())
    except (OSError, ValueError) as e:
        print(f"{args.csv}: {e}", file=sys.stderr)
        return 1
    print(report(instrs, args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
