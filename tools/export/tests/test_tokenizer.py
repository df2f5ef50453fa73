"""The test tokenizer and tokenizer copying (npu_export.tokenizer); run from the repo root:

.venv/bin/python -m pytest tools/export/tests/test_tokenizer.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from npu_export import cli, tokenizer  # noqa: E402


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tok")
    tokenizer.train_test_tokenizer(out)
    return out


def test_the_test_tokenizer_fits_qwen_tiny_and_round_trips(tok_dir: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tok_dir))
    assert len(tok) == 256
    assert tok.eos_token == "<|im_end|>"
    text = "Le café est très bon. 你好 🙂"
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    # some multi-byte characters stay split over byte tokens (what streaming must handle)
    assert any("\ufffd" in tok.decode([i]) for i in ids)
    chat = tok.apply_chat_template(
        [{"role": "user", "content": " Hi "}], tokenize=False, add_generation_prompt=True
    )
    assert chat.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json"):
        assert (tok_dir / name).is_file(), name


def test_copy_tokenizer_copies_what_is_there_and_refuses_half_a_tokenizer(
    tok_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "model"
    out.mkdir()
    copied = tokenizer.copy_tokenizer(tok_dir, out)
    assert set(copied) == {
        "tokenizer.json",
        "tokenizer_config.json",
        "chat_template.jinja",
        "generation_config.json",
    }
    half = tmp_path / "half"
    half.mkdir()
    (half / "tokenizer.json").write_text("{}")
    with pytest.raises(SystemExit, match="tokenizer_config.json"):
        tokenizer.copy_tokenizer(half, out)


def test_tokenizer_option_is_for_qwen_models_only(tok_dir: Path, tmp_path: Path) -> None:
    assert cli.main(["mlp", "--out", str(tmp_path / "m"), "--tokenizer", str(tok_dir)]) == 2


def test_qwen_exports_take_the_hf_dir_tokenizer_unless_told_otherwise(tok_dir: Path, tmp_path: Path) -> None:
    from types import SimpleNamespace

    from npu_export import qwen

    cfg = SimpleNamespace(vocab_size=256)
    out = tmp_path / "a"
    out.mkdir()
    # --hf-dir with a tokenizer: copied
    args = SimpleNamespace(tokenizer=None, hf_dir=tok_dir)
    assert "tokenizer.json" in qwen._copy_tokenizer(args, cfg, out)  # type: ignore[arg-type]
    # --hf-dir without one: no tokenizer, no error
    bare = tmp_path / "bare"
    bare.mkdir()
    assert qwen._copy_tokenizer(SimpleNamespace(tokenizer=None, hf_dir=bare), cfg, out) == []  # type: ignore[arg-type]
    # --tokenizer wins over --hf-dir; a vocabulary larger than the model's is refused
    small = SimpleNamespace(vocab_size=100)
    with pytest.raises(SystemExit, match="256 tokens"):
        qwen._copy_tokenizer(SimpleNamespace(tokenizer=tok_dir, hf_dir=bare), small, tmp_path / "a")  # type: ignore[arg-type]
