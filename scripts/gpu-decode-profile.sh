#!/usr/bin/env bash
# Where one decode step goes, kernel by kernel in launch order, for the GPU machine (builds
# nothing; stage with scripts/gpu-check.sh --stage): Nsight Compute's duration and DRAM bytes
# read of every launch of one step at a cache position (random weights), then the step's
# launches summed by kernel name. ncu serializes the kernels, flushes L2 between them and locks
# clocks: read shares and bytes, not the replayed graph's time (its step took 2.06 ms where
# these sum to ~3.6 on an H200 machine, eighth session of 2026-11-27).
#   scripts/gpu-decode-profile.sh DECODE.npubin [POSITION] [FIRST_N]
# DECODE.npubin: e.g. `.device/npu compile fixtures/qwen2.5-1.5b/decode.ir.json -o d.npubin
# --dtype bf16` run here. FIRST_N: launches printed in order (default 40, about a layer and a
# half of Qwen2.5). Writes $OUT/decode-profile.csv.
set -euo pipefail
cd "$(dirname "$0")/.."
prog=$1 pos=${2:-1000} first=${3:-40}
out=${OUT:-/tmp/npu-gpu-out}
mkdir -p "$out"
export NPU_CUDA_CACHE=${NPU_CUDA_CACHE:-/tmp/npu-cuda-cache}
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
bench=(.device/npu-cuda-bench decode-at --decode "$prog" --weights random --positions "$pos" --repeat 1)
# launches a step: the bench's own count (the run's in-graph input and output copies add a few
# more); skip preparation and the four timed runs before its eager profile runs
n=$("${bench[@]}" | python3 -c 'import json, sys; print(json.load(sys.stdin)["kernels"])')
"$ncu" --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv --launch-skip $((4 * n)) \
    --launch-count "$n" "${bench[@]}" >"$out/decode-profile.csv" 2>/dev/null || true
python3 - "$out/decode-profile.csv" "$first" "$n" <<'PY'
import collections
import csv
import sys

rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
rows = rows[next(i for i, r in enumerate(rows) if "Kernel Name" in r):]
h = rows[0]
ki, vi, mi, ii = (h.index(c) for c in ("Kernel Name", "Metric Value", "Metric Name", "ID"))
gi = h.index("Grid Size") if "Grid Size" in h else None
per: dict[str, dict] = {}
for r in rows[1:]:
    e = per.setdefault(r[ii], {"k": r[ki][:32], "g": r[gi] if gi is not None else ""})
    e[r[mi]] = float(r[vi].replace(",", ""))
seq = list(per.values())
us = lambda e: e.get("gpu__time_duration.sum", 0.0) / 1e3  # noqa: E731
mb = lambda e: e.get("dram__bytes_read.sum", 0.0) / 1e6  # noqa: E731
print(f"{'kernel':32s} {'grid':>14s} {'us':>8s} {'MB read':>9s}")
for e in seq[: int(sys.argv[2])]:
    print(f"{e['k']:32s} {e['g']:>14s} {us(e):8.2f} {mb(e):9.3f}")
tot = sum(us(e) for e in seq)
print(f"\n{len(seq)} of {sys.argv[3]} launches profiled, {tot / 1e3:.3f} ms serialized; by kernel:")
by = collections.defaultdict(lambda: [0, 0.0, 0.0])
for e in seq:
    b = by[e["k"]]
    b[0] += 1
    b[1] += us(e)
    b[2] += mb(e)
for k, (c, t, m) in sorted(by.items(), key=lambda kv: -kv[1][1]):
    print(f"{t / tot * 100:5.1f}%  {c:4d} x {t / c:7.2f} us  {m / max(t, 1e-9):6.2f} TB/s  {k}")
PY
