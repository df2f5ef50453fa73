"""``npu.TextModel`` against Hugging Face: the qwen2.5-tiny-text export of scripts/make-test-models.sh
(a 256-token BPE trained in the tests, a chat template) and its ``text_reference.json`` (transformers'
greedy generations, chat prompts and encodings on the same files)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import npu
import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def text_dir() -> Path:
    base = Path(os.environ.get("NPU_TEST_MODELS", ROOT / "target" / "test-models"))
    d = base / "qwen2.5-tiny-text"
    if not (d / "text_reference.json").is_file():
        pytest.skip(f"{d} is not exported (scripts/make-test-models.sh)")
    return d


@pytest.fixture(scope="module")
def ref(text_dir: Path) -> dict[str, Any]:
    return json.loads((text_dir / "text_reference.json").read_text())


@pytest.fixture(scope="module")
def model(text_dir: Path) -> npu.TextModel:
    # f32 on the CPU target: the reference generations are transformers' f32 ones
    return npu.TextModel(text_dir, backend="cpu", target="cpu", dtype="float32")


def test_encode_and_decode_match_the_tokenizers_library(model: npu.TextModel, ref: dict[str, Any]) -> None:
    for case in ref["encode"]:
        assert model.encode(case["text"]) == case["ids"], case["text"]
        assert model.decode(case["ids"]) == case["decoded_skip_special"], case["text"]


def test_greedy_text_equals_hugging_face_generate(model: npu.TextModel, ref: dict[str, Any]) -> None:
    for case in ref["greedy"]:
        pieces: list[str] = []
        g = model.generate(case["ids"], max_new_tokens=case["max_new_tokens"], on_text=pieces.append)
        assert g["tokens"] == case["tokens"], case["name"]
        assert g["text"] == "".join(pieces), "streamed text is the returned text"
        assert g["finish"] in ("length", "eos")


def test_chat_prompt_equals_apply_chat_template(model: npu.TextModel, ref: dict[str, Any]) -> None:
    for case in ref["chat"]:
        if not case["add_generation_prompt"]:
            continue  # chat_prompt renders the assistant's turn to come
        messages = [(m["role"], m["content"]) for m in case["messages"]]
        assert model.chat_prompt(messages) == case["text"]
        assert model.encode(case["text"], add_special_tokens=False) == case["ids"]


def test_sampling_is_reproducible_and_options_are_checked(model: npu.TextModel) -> None:
    a = model.generate("Hi!", max_new_tokens=12, temperature=0.8, top_p=0.9, seed=7)
    b = model.generate("Hi!", max_new_tokens=12, temperature=0.8, top_p=0.9, seed=7)
    assert a["tokens"] == b["tokens"] and a["text"] == b["text"]
    with pytest.raises(npu.InputError, match="top-p"):
        model.generate("Hi!", top_p=0.0)
