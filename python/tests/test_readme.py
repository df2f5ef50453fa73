"""The README's Python quick start runs as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import ROOT


def test_python_quick_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Python", 1)[1].split("\n## ", 1)[0]
    (code,) = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README.md", "exec"), {})  # noqa: S102 - the README's own code
    out = capsys.readouterr().out
    diff = float(re.search(r"max \|npu - torch\|: (\S+)", out).group(1))  # type: ignore[union-attr]
    assert diff < 1e-3
    assert "top-1:" in out
