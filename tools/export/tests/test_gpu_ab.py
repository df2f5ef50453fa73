"""The A/B timer's variant syntax and case layout (the timing itself needs the GPU machine); run from the repo
root: .venv/bin/python -m pytest tools/export/tests/test_gpu_ab.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from npu_export import gpu_ab  # noqa: E402
from npu_export.gpu_ab import Case, Variant, parse_given_cases, parse_variant, parse_vision  # noqa: E402


def test_a_variant_is_a_label_a_directory_and_settings() -> None:
    assert parse_variant("new=.device") == Variant("new", Path(".device"), {})
    v = parse_variant("generic=.device,NPU_CUDA_DTYPE_KERNELS=0,NPU_CUDA_PDL=0")
    assert v == Variant("generic", Path(".device"), {"NPU_CUDA_DTYPE_KERNELS": "0", "NPU_CUDA_PDL": "0"})
    # a value may hold '=' and may be empty
    assert parse_variant("x=d,A=b=c,B=").env == {"A": "b=c", "B": ""}


@pytest.mark.parametrize("spec", ["", "new", "=.device", "new=", "new=.device,PDL", "new=.device,=0"])
def test_malformed_variants_say_so(spec: str) -> None:
    with pytest.raises(ValueError, match="variant"):
        parse_variant(spec)


def test_vision_cases_are_models_and_batches() -> None:
    assert parse_vision("resnet50:64,resnet18:1") == [("resnet50", 64), ("resnet18", 1)]
    assert parse_vision("") == []


@pytest.mark.parametrize("spec", ["resnet50", "resnet50:", ":4", "resnet50:0", "resnet50:x"])
def test_malformed_vision_cases_say_so(spec: str) -> None:
    with pytest.raises(ValueError, match="vision case"):
        parse_vision(spec)


def test_given_decode_programs_are_cases_at_their_positions() -> None:
    got = parse_given_cases(["1000=p/decode-bf16.npubin", "32000=p/decode32k-bf16.npubin"])
    assert got == [
        Case("decode at 1000 (decode-bf16)", Path("p/decode-bf16.npubin"), 1000, 200),
        Case("decode at 32000 (decode32k-bf16)", Path("p/decode32k-bf16.npubin"), 32000, 200),
    ]


@pytest.mark.parametrize("spec", ["1000", "=p.npubin", "x=p.npubin", "1000="])
def test_malformed_given_cases_say_so(spec: str) -> None:
    with pytest.raises(ValueError, match="case"):
        parse_given_cases([spec])


def test_given_qwen_ir_is_compiled_without_an_export(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    compiled: list[tuple[Path, Path]] = []

    def no_export(*args: object, **kwargs: object) -> Path:
        raise AssertionError("exported although the IR was given")

    def compile_program(npu: str, ir: Path, out: Path, dtype: str, log: Path | None = None) -> Path:
        compiled.append((ir, out))
        return out

    monkeypatch.setattr(gpu_ab.g, "export", no_export)
    monkeypatch.setattr(gpu_ab.g, "compile_program", compile_program)
    given = tmp_path / "fixture"
    todo = gpu_ab.cases("npu", tmp_path / "work", False, tmp_path / "log", given)
    assert [c.name for c in todo] == ["prefill 128", "decode at 1000 of 2048"]
    # read from the given directory, compiled into the work directory (never into the tree)
    assert [ir for ir, _ in compiled] == [given / "prefill.ir.json", given / "decode.ir.json"]
    assert all(out.parent == tmp_path / "work" / "qwen2.5-1.5b-given" for _, out in compiled)
    assert [c.program for c in todo] == [out for _, out in compiled]


def test_a_whole_runs_phases_read_as_one_line_part() -> None:
    from npu_export import gpu_common

    assert gpu_common.phases_text(None) == ""
    ph = {"host_us": {"upload": 16.2, "wait": 212.0}, "device_us": {"kernels": 188.7}}
    assert gpu_common.phases_text(ph) == "; us: host_us upload 16.2 wait 212.0 | device_us kernels 188.7"
