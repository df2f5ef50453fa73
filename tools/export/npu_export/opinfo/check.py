"""Run one exported case with the ``npu`` binary, compare with eager and classify the outcome.

Statuses, worst first: ``panic`` (exit 101 or a Rust panic message), ``wrong`` (ran, numbers differ),
``timeout``, ``unsupported`` (npu refused the graph; ``by`` says which stage: ``parse``, ``check``,
``fallback``), ``error`` (any other failure), ``pass``.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file

RTOL = 1e-3
ATOL = 1e-4
# one case is a single op on small tensors; anything near this is stuck
RUN_TIMEOUT_S = 60

# one thread per case: the suite runs cases in parallel
_ENV = {**os.environ, "RAYON_NUM_THREADS": "1", "RUST_BACKTRACE": "0"}

STATUS_ORDER = ("panic", "wrong", "timeout", "unsupported", "error", "pass")


@dataclass
class Outcome:
    status: str
    reason: str = ""
    by: str | None = None


def compare(got: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> str | None:
    """Why ``got`` does not match ``expected`` (both keyed by graph output name), or None when it does.

    Floats: same NaN positions, same infinities, ``|got - want| <= ATOL + RTOL * |want|`` elsewhere.
    Integers and bools: exact. Shapes and dtypes must be equal.
    """
    for name, want in expected.items():
        if name not in got:
            return f"output {name} missing"
        g = got[name]
        if g.dtype != want.dtype:
            return f"output {name}: dtype {g.dtype} vs {want.dtype}"
        if g.shape != want.shape:
            return f"output {name}: shape {list(g.shape)} vs {list(want.shape)}"
        if not want.is_floating_point():
            bad = int((g != want).sum())
            if bad:
                return f"output {name}: {bad} of {want.numel()} elements differ"
            continue
        g64, w64 = g.double(), want.double()
        if not torch.equal(g64.isnan(), w64.isnan()):
            return f"output {name}: NaN positions differ"
        finite = w64.isfinite() & g64.isfinite()
        if not torch.equal(g64[~finite].nan_to_num(0.0), w64[~finite].nan_to_num(0.0)):
            return f"output {name}: infinities differ"
        err = (g64[finite] - w64[finite]).abs()
        tol = ATOL + RTOL * w64[finite].abs()
        if bool((err > tol).any()):
            return f"output {name}: max abs diff {float(err.max()):.3g} (rtol {RTOL}, atol {ATOL})"
    return None


# npu's refusals by stage. Parse errors come from npu_ir::load, before the graph is partitioned.
_FALLBACK = re.compile(r"CPU fallback|fallback interpreter|cpu partition", re.IGNORECASE)
_CHECK = re.compile(
    r"constraint violation|has no NPU lowering|cannot (?:run|lower)|not supported", re.IGNORECASE
)


def _first_error_line(stderr: str) -> str:
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    for ln in lines:
        if ln.lower().startswith(("error", "thread")):
            return ln
    return lines[0] if lines else "(no message)"


def classify_failure(returncode: int, stdout: str, stderr: str) -> Outcome:
    """The outcome of an ``npu run`` that exited non-zero."""
    text = " ".join(ln.strip() for ln in stderr.splitlines() if ln.strip())
    reason = text if len(text) <= 300 else text[:297] + "..."
    if returncode == 101 or "panicked" in stderr:
        m = re.search(r"panicked at [^\n]*\n?([^\n]*)", stderr)
        return Outcome("panic", (m.group(0).replace("\n", " ") if m else reason)[:300])
    if "partitioned " not in stdout:
        return Outcome("unsupported", reason, "parse")
    if _FALLBACK.search(stderr):
        return Outcome("unsupported", reason, "fallback")
    if _CHECK.search(stderr):
        return Outcome("unsupported", reason, "check")
    return Outcome("error", reason)


def run_case(
    npu: Path, case_dir: Path, case_id: str, scratch: Path, timeout_s: int = RUN_TIMEOUT_S
) -> Outcome:
    """``npu run <id>.ir.json --dtype f32`` with the case's inputs, compared with its expected outputs."""
    io = case_dir / f"{case_id}.io.safetensors"
    out = scratch / f"{case_id}.out.safetensors"
    cmd = [str(npu), "run", str(case_dir / f"{case_id}.ir.json"), "--dtype", "f32"]
    cmd += ["--inputs", str(io), "--outputs", str(out)]
    weights = case_dir / f"{case_id}.weights.safetensors"
    if weights.exists():
        cmd += ["--weights", str(weights)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=_ENV)
    except subprocess.TimeoutExpired:
        return Outcome("timeout", f"npu run took longer than {timeout_s} s")
    if p.returncode != 0:
        o = classify_failure(p.returncode, p.stdout, p.stderr)
        # the cache's absolute path says nothing and differs between machines
        o.reason = o.reason.replace(f"{case_dir}/", "")
        return o
    try:
        tensors = load_file(io)
        expected = {k.removeprefix("expected."): v for k, v in tensors.items() if k.startswith("expected.")}
        got = load_file(out)
    except Exception as e:  # noqa: BLE001 - an unreadable output file is npu's failure
        return Outcome("error", f"cannot read outputs: {e}")
    finally:
        out.unlink(missing_ok=True)
    bad = compare(got, expected)
    if bad is not None and _ties_explain(case_dir / f"{case_id}.ir.json", tensors, got, expected):
        bad = None
    return Outcome("wrong", bad) if bad else Outcome("pass")


# Ops whose index output orders equal elements as the implementation likes (PyTorch's unstable sort,
# topk and kthvalue pick any of equal candidates): their indices are right when they point at the
# values PyTorch's indices point at (and, for a sort, form a permutation of each lane).
_TIE_OPS = {
    "aten.sort.default": True,
    "aten.sort.stable": True,
    "aten.argsort.default": True,
    "aten.argsort.stable": True,
    "aten.topk.default": False,
    "aten.kthvalue.default": False,
}


def _ties_explain(
    ir_path: Path,
    tensors: dict[str, torch.Tensor],
    got: dict[str, torch.Tensor],
    expected: dict[str, torch.Tensor],
) -> bool:
    """Whether every difference is an index output of a tie-ordering op whose indices select the same
    values as PyTorch's (the value outputs themselves must match)."""
    import json

    ir = json.loads(ir_path.read_text())
    nodes = [n for n in ir["nodes"] if n["op_type"] in _TIE_OPS]
    if len(nodes) != 1 or len(ir["graph_inputs"]) != 1:
        return False
    node = nodes[0]
    x = tensors[f"input.{ir['graph_inputs'][0]['name']}"]
    rank = max(x.dim(), 1)
    dim = int(node["attrs"].get("dim", -1)) % rank
    keepdim = bool(node["attrs"].get("keepdim", False))
    x = x.reshape(1) if x.dim() == 0 else x
    for name, want in expected.items():
        g = got.get(name)
        if g is None:
            return False
        if compare({name: g}, {name: want}) is None:
            continue
        if want.dtype != torch.int64 or g.shape != want.shape:
            return False  # a value output differs: a real difference
        gi, wi = (
            g.reshape(x.shape[:dim] + (-1,) + x.shape[dim + 1 :])
            if g.dim() == 0 or (node["op_type"] == "aten.kthvalue.default" and not keepdim)
            else g,
            want,
        )
        if gi is not g:
            wi = want.reshape(gi.shape)
        if bool(((gi < 0) | (gi >= x.shape[dim])).any()):
            return False
        if not torch.equal(torch.gather(x, dim, gi), torch.gather(x, dim, wi)):
            return False
        if _TIE_OPS[node["op_type"]] and not torch.equal(gi.sort(dim).values, wi.sort(dim).values):
            return False  # a sort's indices must be a permutation of the lane
    return True
