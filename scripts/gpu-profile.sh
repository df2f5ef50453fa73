#!/usr/bin/env bash
# Where a compiled program's GPU time goes, for the GPU machine (builds nothing): Nsight Compute's
# gpu__time_duration per kernel over one run of `npu-cuda-bench time`, summed by kernel name.
# ncu serializes kernels and locks clocks: read the shares, not absolute times.
#   scripts/gpu-profile.sh PROGRAM.npubin DIR_WITH_weights_AND_io [TOP] [IO_PREFIX]
# IO_PREFIX: the io file's key prefix for the program's inputs (default input.; an exported
# LM's prefill reads prefill.input.).
set -euo pipefail
cd "$(dirname "$0")/.."
prog=$1 dir=$2 top=${3:-15} prefix=${4:-input.}
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
csv=$(mktemp)
"$ncu" --metrics gpu__time_duration.sum --csv --print-units base \
    .device/npu-cuda-bench time --program "$prog" --weights "$dir/weights.safetensors" \
    --io "$dir/io.safetensors" --prefix "$prefix" --repeat 1 >"$csv" 2>/dev/null || true
python3 - "$csv" "$top" <<'PY'
import csv, sys, collections
# the bench's own JSON line comes first in the stream: the table starts at its header row
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
rows = rows[next(i for i, r in enumerate(rows) if "Kernel Name" in r):]
head = rows[0]; ki = head.index("Kernel Name"); vi = head.index("Metric Value"); ii = head.index("ID")
per = collections.defaultdict(lambda: [0, 0.0]); seen = set()
for r in rows[1:]:
    try: v = float(r[vi].replace(",", ""))
    except ValueError: continue
    per[r[ki][:70]][0] += 1; per[r[ki][:70]][1] += v; seen.add(r[ii])
tot = sum(v for _, v in per.values())
print(f"{len(seen)} kernels, {tot/1e6:.3f} ms serialized")
for k, (n, v) in sorted(per.items(), key=lambda kv: -kv[1][1])[: int(sys.argv[2])]:
    print(f"{v/tot*100:5.1f}%  {n:4d} x {v/n/1e3:8.1f} us  {k}")
PY
