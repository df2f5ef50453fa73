#!/usr/bin/env bash
# Builds the CUDA backend's bench binary (npu-cuda-bench) at each given commit into
# .device/variants/NAME/, for `scripts/gpu-ab.sh --variant NAME=.device/variants/NAME`, without
# touching this checkout: one git worktree per commit, one shared cargo target directory (the
# dependencies build once).
#   scripts/gpu-variants.sh [--tests] NAME=COMMIT [NAME=COMMIT ...]
# --tests: also each commit's fusion and dtype-instance test binaries, as
#   .device/variants/NAME/{fusion,dtype_instances}-test (run them there with --test-threads 1),
#   and its kernel conformance suite, .device/variants/NAME/npu-cuda-check (there: `--no-long`
#   for the short cases, ~30 s; the kernels a variant changes may only be covered there).
# Cargo judges freshness by file times, and the workspace's packages share their artifacts
# across worktrees: a source edited before an earlier build of another worktree would look
# fresh. So the kernel sources of each worktree are touched before its build.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
tests=0
if [ "${1:-}" = "--tests" ]; then
    tests=1
    shift
fi
[ $# -gt 0 ] || { echo "usage: scripts/gpu-variants.sh [--tests] NAME=COMMIT ..." >&2; exit 2; }
export CARGO_TARGET_DIR=${NPU_VARIANTS_TARGET:-/tmp/npu-variants-target}
work=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$work/tree" 2>/dev/null || true; rm -rf "$work"' EXIT
for spec in "$@"; do
    name=${spec%%=*}
    commit=${spec#*=}
    [ -n "$name" ] && [ "$name" != "$spec" ] || { echo "not NAME=COMMIT: $spec" >&2; exit 2; }
    out="$root/.device/variants/$name"
    rm -rf "$out"
    mkdir -p "$out"
    git -C "$root" worktree remove --force "$work/tree" 2>/dev/null || true
    git -C "$root" worktree add -q --detach "$work/tree" "$commit"
    (
        cd "$work/tree"
        touch crates/npu-cuda/src/kernels/*
        cargo build --release -q -p npu-cuda --bin npu-cuda-bench
        cp "$CARGO_TARGET_DIR/release/npu-cuda-bench" "$out/"
        if [ "$tests" = 1 ]; then
            cargo build --release -q -p npu-cuda --bin npu-cuda-check
            cp "$CARGO_TARGET_DIR/release/npu-cuda-check" "$out/"
            for t in fusion dtype_instances; do
                exe=$(cargo test --release -q -p npu-cuda --test "$t" --no-run --message-format=json 2>/dev/null |
                    python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        print(m["executable"])' | tail -n 1)
                cp "$exe" "$out/$t-test"
            done
        fi
    )
    strip "$out"/*
    echo "$name: $(git -C "$root" rev-parse --short "$commit") -> .device/variants/$name ($(du -sh "$out" | cut -f1))"
done
