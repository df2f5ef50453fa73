"""The suite driver: export every OpInfo once (cached), run every case with ``npu``, report.

Exports are cached under ``target/opinfo/<key>/`` where the key names the torch and torch_ir versions
and hashes the export code, so CI exports once per toolchain and afterwards only runs ``npu``. Each
OpInfo's record is written as soon as it is exported (``ops/*.json``), so an interrupted export resumes.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing as mp
import re
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
import torch_ir

from .. import common
from . import check, export, report

ROOT = Path(__file__).resolve().parents[4]
COVERAGE_JSON = ROOT / "benchmarks" / "results" / "op-coverage.json"
COVERAGE_MD = ROOT / "docs" / "op-coverage.md"
_EXPORT_SOURCES = ("opinfo/export.py", "opinfo/scope.py", "common.py", "__init__.py")


def cache_dir(base: Path) -> Path:
    """``base/torch-<version>-ir-<version>-<hash of the export code>``."""
    h = hashlib.sha256()
    pkg = Path(__file__).resolve().parents[1]
    for rel in _EXPORT_SOURCES:
        h.update((pkg / rel).read_bytes())
    h.update((ROOT / "python" / "npu" / "_torch_ir_compat.py").read_bytes())
    return base / f"torch-{torch.__version__}-ir-{torch_ir.__version__}-{h.hexdigest()[:12]}"


def _record_path(cache: Path, key: str) -> Path:
    return cache / "ops" / (re.sub(r"[^A-Za-z0-9_.]", "_", key) + ".json")


_OPS: list[Any] = []


def _worker_init() -> None:
    global _OPS
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    from torch.testing._internal.common_methods_invocations import op_db

    _OPS = op_db


def _export_one(job: tuple[int, str]) -> str:
    i, cache = job
    rec = export.export_op(_OPS[i], Path(cache) / "cases")
    common.write_json(rec.to_json(), _record_path(Path(cache), rec.key))
    return rec.key


def export_all(cache: Path, workers: int, only: re.Pattern[str] | None) -> list[export.OpRecord]:
    """Exports every selected OpInfo not yet in the cache; returns all selected records."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torch.testing._internal.common_methods_invocations import op_db
    (cache / "cases").mkdir(parents=True, exist_ok=True)
    (cache / "ops").mkdir(exist_ok=True)
    selected = [
        (i, export.op_key(op.name, op.variant_test_name))
        for i, op in enumerate(op_db)
        if only is None or only.search(export.op_key(op.name, op.variant_test_name))
    ]
    todo = [(i, str(cache)) for i, key in selected if not _record_path(cache, key).exists()]
    if todo:
        t0 = time.perf_counter()
        print(f"exporting {len(todo)} OpInfo(s) into {cache} with {workers} worker(s)", flush=True)
        with mp.get_context("spawn").Pool(workers, initializer=_worker_init) as pool:
            for n, _ in enumerate(pool.imap_unordered(_export_one, todo), 1):
                if n % 50 == 0 or n == len(todo):
                    print(f"  exported {n}/{len(todo)} ({time.perf_counter() - t0:.0f} s)", flush=True)
    return [load_record(_record_path(cache, key)) for _, key in selected]


def load_record(path: Path) -> export.OpRecord:
    d = json.loads(path.read_text())
    cases = [export.CaseRecord(**c) for c in d.pop("cases")]
    return export.OpRecord(**d, cases=cases)


def run_all(
    npu: Path, cache: Path, records: Iterable[export.OpRecord], workers: int
) -> dict[str, check.Outcome]:
    """Runs every exported case of the in-scope records, ``workers`` ``npu`` processes at a time."""
    ids = [c.id for r in records if not r.excluded for c in r.cases if c.error is None]
    t0 = time.perf_counter()
    print(f"running {len(ids)} case(s) with {npu} ({workers} at a time)", flush=True)
    outcomes: dict[str, check.Outcome] = {}
    with tempfile.TemporaryDirectory(prefix="npu-opinfo-") as scratch, ThreadPoolExecutor(workers) as pool:
        futures = {i: pool.submit(check.run_case, npu, cache / "cases", i, Path(scratch)) for i in ids}
        for n, (i, f) in enumerate(futures.items(), 1):
            outcomes[i] = f.result()
            if n % 500 == 0 or n == len(ids):
                print(f"  ran {n}/{len(ids)} ({time.perf_counter() - t0:.0f} s)", flush=True)
    return outcomes


def _git_commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        )
        return out.stdout.strip() or "?"
    except OSError:
        return "?"


def build_doc(records: list[export.OpRecord], outcomes: dict[str, check.Outcome]) -> dict[str, Any]:
    ops = {r.key: report.op_result(r, outcomes) for r in records if not r.excluded}
    excluded = {r.key: r.excluded for r in records if r.excluded}
    versions = {"torch": torch.__version__, "torch_ir": torch_ir.__version__, "npu_commit": _git_commit()}
    return report.summarize(ops, excluded, versions)


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m npu_export.opinfo", description=__doc__)
    p.add_argument("command", choices=("export", "run"))
    p.add_argument("--npu", type=Path, default=ROOT / "target" / "debug" / "npu", help="the npu binary")
    p.add_argument("--cache", type=Path, default=ROOT / "target" / "opinfo", help="export cache base dir")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--only", type=re.compile, default=None, help="regex over op keys (name.variant)")
    p.add_argument("--write", action="store_true", help=f"write {COVERAGE_JSON.name} and {COVERAGE_MD.name}")
    p.add_argument("--status-file", type=Path, default=None, help="also write the result JSON here")
    p.add_argument(
        "--ci",
        action="store_true",
        help="exit 1 on a regression against the committed op-coverage.json, a panic or wrong numbers",
    )
    a = p.parse_args(argv)
    cache = cache_dir(a.cache)
    records = export_all(cache, a.workers, a.only)
    if a.command == "export":
        return 0
    if not a.npu.exists():
        print(f"error: {a.npu} not found (cargo build -p npu-cli)", file=sys.stderr)
        return 2
    doc = build_doc(records, run_all(a.npu, cache, records, a.workers))
    print(report.summary_line(doc))
    if a.status_file:
        common.write_json(doc, a.status_file)
    if a.write:
        common.write_json(doc, COVERAGE_JSON)
        COVERAGE_MD.write_text(report.markdown(doc))
        print(f"wrote {COVERAGE_JSON} and {COVERAGE_MD}")
    if not a.ci:
        return 0
    baseline = json.loads(COVERAGE_JSON.read_text()) if COVERAGE_JSON.exists() else {}
    if a.only is not None:
        baseline["ops"] = {k: v for k, v in baseline.get("ops", {}).items() if a.only.search(k)}
    problems = report.ci_failures(doc, baseline)
    better = report.improvements(doc, baseline)
    if better:
        print(
            f"{len(better)} op(s) pass that {COVERAGE_JSON.name} lists as failing (refresh it with --write):"
        )
        print("  " + ", ".join(better))
    for line in problems:
        print(f"FAIL {line}")
    print(f"op coverage CI: {len(problems)} problem(s)")
    return 1 if problems else 0
