"""The A/B timer's variant syntax (the timing itself needs the GPU machine); run from the repo
root: .venv/bin/python -m pytest tools/export/tests/test_gpu_ab.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from npu_export.gpu_ab import Variant, parse_variant, parse_vision  # noqa: E402


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
