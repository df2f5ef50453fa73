"""Shared fixtures: the repository paths, a tiny Qwen2.5 export (the export tool's), numerics checks."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools" / "export"))  # npu_export: the project's exporter


def reference_docs_dir() -> Path | None:
    """The reference system's docs (shared/seeds beside the repository), if present."""
    for p in (os.environ.get("NPU_REFERENCE_DOCS"), ROOT.parent / "shared" / "seeds", Path("/work/shared/seeds")):
        if p and Path(p).is_dir():
            return Path(p)
    return None


@pytest.fixture(scope="session")
def qwen_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """qwen2.5-tiny exported by the project's tool: prefill/decode IR, random weights, PyTorch I/O."""
    from npu_export import cli

    out = tmp_path_factory.mktemp("qwen2.5-tiny")
    cli.main(["qwen2.5-tiny", "--out", str(out), "--decode-steps", "6", "--no-hf-check", "--seed", "0"])
    return out


def pearson(a: Any, b: Any) -> float:
    x = np.asarray(a, dtype=np.float64).reshape(-1)
    y = np.asarray(b, dtype=np.float64).reshape(-1)
    return float(np.corrcoef(x, y)[0, 1])


def assert_matches(got: Any, want: Any, what: str) -> None:
    """The project's gate: Pearson r > 0.999, equal argmax and equal top-5 set of the last axis."""
    g = np.asarray(got, dtype=np.float64)
    w = np.asarray(want, dtype=np.float64)
    assert g.shape == w.shape, f"{what}: shape {g.shape} vs {w.shape}"
    r = pearson(g, w)
    assert r > 0.999, f"{what}: r = {r}"
    g2, w2 = g.reshape(-1, g.shape[-1]), w.reshape(-1, w.shape[-1])
    assert (g2.argmax(-1) == w2.argmax(-1)).all(), f"{what}: argmax differs"
    for gr, wr in zip(g2, w2, strict=True):
        assert set(np.argsort(-gr)[:5]) == set(np.argsort(-wr)[:5]), f"{what}: top-5 differs"
