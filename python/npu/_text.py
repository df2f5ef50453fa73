"""``npu.TextModel``: text in, text out over a model directory, as ``npu generate`` does it.

The directory is what the export tool writes for a causal LM with a tokenizer (``prefill.ir.json``,
``decode.ir.json``, ``weights.safetensors``, ``tokenizer.json``, ``tokenizer_config.json``). The
session, tokenizer, chat template and sampling are the Rust ones the CLI runs (the ``npu-text``
crate), so the same options give the same tokens here and from ``npu generate``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from . import _backends, _native


class TextModel:
    """A causal LM directory prepared on a backend (the best available one by default)."""

    def __init__(
        self,
        model_dir: str | os.PathLike[str],
        backend: str | None = None,
        target: str = "npu",
        dtype: str | None = None,
    ) -> None:
        name = _backends.best_name() if backend is None else backend
        self.backend = name
        self._m = _native.TextModel(os.fspath(model_dir), name, target, dtype)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of ``text`` (a rendered chat prompt already holds its special tokens: pass
        ``add_special_tokens=False``)."""
        return self._m.encode(text, add_special_tokens)

    def decode(self, ids: Sequence[int]) -> str:
        """The text of ``ids``, special tokens skipped."""
        return self._m.decode(list(ids))

    def chat_prompt(self, messages: Sequence[tuple[str, str]] | Sequence[dict[str, str]]) -> str:
        """The chat template over ``[(role, content)]`` (or ``[{"role", "content"}]``), ready for
        the assistant's turn."""
        pairs = [(m["role"], m["content"]) if isinstance(m, dict) else (m[0], m[1]) for m in messages]
        return self._m.chat_prompt(pairs)

    def generate(
        self,
        prompt: str | Sequence[int],
        max_new_tokens: int | None = None,
        temperature: float = 0.0,
        top_k: int = 0,
        top_p: float = 1.0,
        min_p: float = 0.0,
        repetition_penalty: float = 1.0,
        seed: int = 0,
        stop: Sequence[str] = (),
        on_text: Callable[[str], Any] | None = None,
    ) -> dict[str, Any]:
        """Generates from ``prompt`` (text, or token ids) with ``npu generate``'s options: greedy when
        ``temperature`` is 0, else Hugging Face's order (repetition penalty, temperature, top-k,
        top-p, min-p) from a seeded generator. ``on_text`` receives the text as it becomes final.
        Returns ``{"text", "tokens", "finish", "prompt_tokens", "prefill_s", "decode_s",
        "decode_model_s", "decode_tokens_per_s"}`` (``decode_model_s``: the part of ``decode_s``
        in the model's runs); ``finish`` is "eos", "stop", "length" or "cache_full"."""
        p = prompt if isinstance(prompt, str) else [int(t) for t in prompt]
        return self._m.generate(
            p,
            max_new_tokens,
            temperature,
            top_k,
            top_p,
            min_p,
            repetition_penalty,
            seed,
            list(stop),
            on_text,
        )

    def chat(self, messages: Sequence[tuple[str, str]] | Sequence[dict[str, str]], **options: Any) -> dict[str, Any]:
        """``generate`` over the chat template's rendering of ``messages`` (as ``npu generate
        --chat``); ``options`` as for ``generate``."""
        return self.generate(self.encode(self.chat_prompt(messages), add_special_tokens=False), **options)
