#!/usr/bin/env bash
# The project's test command (README): sets up everything on a fresh machine, then runs lint and
# every test. Rust tests need no torch (fixtures are committed); the Python venv serves the export
# tool's tests and the end-to-end models generated before the Rust tests.
#
# Every step contributes to ONE closing line, `N passed, N failed, N skipped` (the runner-neutral
# line CI reads): a check (lint, a fuzz run) counts as one test; pytest and cargo test add their
# own counts. A skipped test is named with its reason (Rust tests print `SKIP: <test>: <reason>`).
# To add a step, call `check NAME CMD...` (one pass/fail) or `pytest_step NAME ARGS...` below.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
mkdir -p target
LOGS="$ROOT/target/test-logs"
rm -rf "$LOGS" && mkdir -p "$LOGS"

PASSED=0
FAILED=0
SKIPPED=0
FAILURES=()
SKIPS=()

step() { printf '\n== %s\n' "$*"; }

# Free disk and memory, printed at the start, the end and after a failed build: a full disk shows
# up as a compiler crash or "No usable temporary directory" far from its cause.
disk_report() { df -h "$ROOT" "${TMPDIR:-/tmp}" 2>/dev/null | uniq; free -g 2>/dev/null | head -2; }

# Disk: a clean checkout builds every crate twice (clippy's check, then the test build); without
# incremental state and with line tables only for debug info, target/ takes about a third of
# the space (CI machines have had little free disk). Either can be overridden from outside.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
export CARGO_PROFILE_DEV_DEBUG="${CARGO_PROFILE_DEV_DEBUG:-line-tables-only}"
# torch picks its compile cache from the user name and the temporary directory at import (the
# OpInfo suite imports torch._inductor); a CI user without a passwd entry has no name.
export TORCHINDUCTOR_CACHE_DIR="${TORCHINDUCTOR_CACHE_DIR:-$ROOT/target/torchinductor}"

# check NAME CMD...: runs CMD; one passed or failed test named NAME.
check() {
    local name="$1"; shift
    step "$name"
    if "$@"; then
        PASSED=$((PASSED + 1))
    else
        FAILED=$((FAILED + 1))
        FAILURES+=("$name")
    fi
}

# pytest_step NAME ARGS...: pytest's own counts; skipped tests listed with their reasons (-rs).
pytest_step() {
    local name="$1"; shift
    step "$name"
    local log="$LOGS/$name.log"
    .venv/bin/python -m pytest -q -rs "$@" 2>&1 | tee "$log"
    local rc=${PIPESTATUS[0]}
    local summary p f e s
    # The closing line, with or without -q's missing '=' rule: "3 passed, 1 skipped in 2.1s".
    summary=$(grep -E '(passed|failed|skipped|errors?|no tests ran).* in [0-9.]+s' "$log" | tail -1)
    p=$(grep -Eo '[0-9]+ passed' <<<"$summary" | awk '{s+=$1} END {print s+0}')
    f=$(grep -Eo '[0-9]+ failed' <<<"$summary" | awk '{s+=$1} END {print s+0}')
    e=$(grep -Eo '[0-9]+ errors?' <<<"$summary" | awk '{s+=$1} END {print s+0}')
    s=$(grep -Eo '[0-9]+ skipped' <<<"$summary" | awk '{s+=$1} END {print s+0}')
    PASSED=$((PASSED + p))
    FAILED=$((FAILED + f + e))
    SKIPPED=$((SKIPPED + s))
    if [ "$rc" -ne 0 ] && [ $((f + e)) -eq 0 ]; then
        FAILED=$((FAILED + 1)) # pytest failed without a test failing (collection, usage)
        FAILURES+=("$name (pytest exit $rc)")
    fi
    while IFS= read -r line; do
        SKIPS+=("$name: ${line#SKIPPED }")
    done < <(grep -E '^SKIPPED ' "$log")
    [ "$f" -gt 0 ] || [ "$e" -gt 0 ] && FAILURES+=("$name ($f failed, $e errors)")
    return 0
}

# cargo_test_step NAME ARGS...: `cargo test` counts; a test that prints `SKIP: <test>: <reason>`
# (it returned early: no model, device or environment) counts as skipped, not passed.
cargo_test_step() {
    local name="$1"; shift
    step "$name"
    local log="$LOGS/$name.log"
    cargo test "$@" -- --show-output >"$log" 2>&1
    local rc=$?
    grep -E '^(test result:|error(\[|:)|failures:|    [a-z_:]+$|test .* FAILED)' "$log" || true
    local p f s
    p=$(grep -Eo '^test result: [A-Za-z]+\. [0-9]+ passed' "$log" | awk '{s+=$4} END {print s+0}')
    f=$(grep -Eo '^test result: [A-Za-z]+\. [0-9]+ passed; [0-9]+ failed' "$log" | awk '{s+=$6} END {print s+0}')
    # One skip per test, however many SKIP lines it printed.
    s=$(grep -E '^SKIP: ' "$log" | cut -d: -f2 | sort -u | grep -c . || true)
    PASSED=$((PASSED + p - s))
    FAILED=$((FAILED + f))
    SKIPPED=$((SKIPPED + s))
    while IFS= read -r line; do
        SKIPS+=("$name: ${line#SKIP: }")
    done < <(grep -E '^SKIP: ' "$log")
    if [ "$rc" -ne 0 ]; then
        if [ "$f" -eq 0 ]; then
            FAILED=$((FAILED + 1)) # the build failed, or a test binary crashed
            echo "-- last 60 lines of $log:"
            tail -n 60 "$log"
            disk_report
            FAILURES+=("$name (cargo exit $rc, see $log)")
        else
            FAILURES+=("$name ($f failed, see $log)")
        fi
    fi
}

step "machine"
uname -m; nproc; disk_report

# The wgpu backend's tests run on Mesa's software Vulkan (lavapipe) where no GPU is present.
# Installed from Debian's packages when missing and possible; without it those tests skip,
# each saying why. XDG_RUNTIME_DIR keeps the Vulkan loader from printing errors without one.
step "software Vulkan (lavapipe) for the wgpu backend"
if ! ls /usr/share/vulkan/icd.d/lvp_icd*.json >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        (timeout 300 apt-get update -qq && DEBIAN_FRONTEND=noninteractive timeout 300 apt-get install -y -qq --no-install-recommends mesa-vulkan-drivers libvulkan1) >"$LOGS/lavapipe.log" 2>&1 \
            || echo "lavapipe install failed (see $LOGS/lavapipe.log): the wgpu tests will skip"
    else
        echo "no lavapipe and no root apt-get: the wgpu tests will skip"
    fi
fi
ls /usr/share/vulkan/icd.d/ 2>/dev/null || true
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-$ROOT/target/xdg-runtime}"
mkdir -p "$XDG_RUNTIME_DIR" && chmod 700 "$XDG_RUNTIME_DIR"

step "python venv (pinned torch/torchvision/transformers/pytorch-ir)"
scripts/setup-python.sh || { echo "python setup failed"; echo "0 passed, 1 failed, 0 skipped"; exit 1; }

check "rust: format" cargo fmt --all -- --check
check "rust: clippy" cargo clippy --workspace --all-targets --quiet -- -D warnings

if [ -x scripts/make-test-models.sh ]; then
    check "end-to-end models (export tool, cached under target/test-models)" scripts/make-test-models.sh
    export NPU_REQUIRE_MODELS=1
fi

check "python: export tool lint" bash -c 'cd tools/export && ../../.venv/bin/ruff check . && ../../.venv/bin/ruff format --check .'
pytest_step "python: export tool tests" tools/export/tests
# The decode attention's tile logic on an emulation of the PTX fragment layouts (no GPU here).
check "tools: mma emulation lint" bash -c '.venv/bin/ruff check --config tools/export/pyproject.toml tools/mma-emu &&
    .venv/bin/ruff format --config tools/export/pyproject.toml --check tools/mma-emu'
check "tools: decode attention tile emulated against numpy" .venv/bin/python tools/mma-emu/attn_dec_mma_tile.py

# The Python package, installed as a user would (a release build of crates/npu-python).
check "python package: pip install ." .venv/bin/pip install --quiet .
check "python package: lint" bash -c 'cd python && ../.venv/bin/ruff check . && ../.venv/bin/ruff format --check .'
pytest_step "python package: tests" python/tests

# NVRTC from the CUDA wheels PyPI's torch installs into the venv: the CUDA kernel library and
# every pointwise row's generated code compile here with no GPU (kernels_compile_with_nvrtc).
nvrtc_dir=$(ls -d "$ROOT"/.venv/lib/python3*/site-packages/nvidia/cu13/lib 2>/dev/null | head -1)
if [ -n "$nvrtc_dir" ]; then
    export LD_LIBRARY_PATH="$nvrtc_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
cargo_test_step "rust: tests" --workspace

# PyTorch's OpInfo samples as one-op graphs through `npu run` (exports cached under target/opinfo):
# fails when an op that benchmarks/results/op-coverage.json lists as passing fails, or a new op
# gives wrong numbers or panics.
check "op coverage (OpInfo) against benchmarks/results/op-coverage.json" \
    bash -c 'cd tools/export && ../../.venv/bin/python -m npu_export.opinfo run --ci --npu ../../target/debug/npu'

# Fuzzing: each target for FUZZ_SECONDS (default 60) from its committed seed corpus, after
# replaying the regression cases of earlier crashes. A crash fails the step.
FUZZ_SECONDS="${FUZZ_SECONDS:-60}"
if cargo build -q -p npu-fuzz; then
    for t in ir npubin safetensors input; do
        if [ -d "fuzz/regressions/$t" ]; then
            check "fuzz: $t regressions" target/debug/npu-fuzz "$t" --replay "fuzz/regressions/$t"
        fi
        check "fuzz: $t (${FUZZ_SECONDS} s)" target/debug/npu-fuzz "$t" --seconds "$FUZZ_SECONDS"
    done
else
    FAILED=$((FAILED + 1))
    FAILURES+=("fuzz: build")
fi

step "summary"
disk_report
for s in "${SKIPS[@]+"${SKIPS[@]}"}"; do echo "skipped: $s"; done
for f in "${FAILURES[@]+"${FAILURES[@]}"}"; do echo "FAILED: $f"; done
echo "${PASSED} passed, ${FAILED} failed, ${SKIPPED} skipped"
[ "$FAILED" -eq 0 ]
