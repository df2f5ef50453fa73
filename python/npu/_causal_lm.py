"""``npu.load_causal_lm``: greedy generation over an export directory's prefill and decode programs.

The directory is what the export tool writes for a causal LM (``prefill.ir.json``,
``decode.ir.json``, ``weights.safetensors``). Both programs are prepared on one backend from the
same weights and share one device state, so the KV cache stays on the device: prefill fills it,
each decode step updates it in place. The convention is the CLI's (``npu generate``): a prompt
shorter than the prefill length S is left-padded, pad slots are masked for every query, real
tokens take positions 0..P-1 in cache slots S-P..S-1; decode step i writes slot S+i at position P+i.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from . import _backends, _native
from ._errors import InputError

_MASKED = {"float16": -65504.0, "bfloat16": -3.3895313892515355e38, "float32": float(np.finfo(np.float32).min)}


def _named(name: str, dtype: str, values: np.ndarray) -> tuple[str, str, np.ndarray]:
    from ._arrays import cast

    arr = values if dtype in ("int64", "float32") else cast(values, values.dtype.name, dtype)
    if dtype == "bfloat16":
        arr = arr.view(np.uint16)
    return (name, dtype, np.ascontiguousarray(arr))


class CausalLM:
    def __init__(self, export_dir: str | os.PathLike[str], backend: Any = None, dtype: str | None = None) -> None:
        d = Path(export_dir)
        weights = _native.Weights.from_safetensors(str(d / "weights.safetensors"))
        self.backend = _backends.resolve(backend if backend is None or isinstance(backend, str) else backend.name)
        pre = _native.compile_ir((d / "prefill.ir.json").read_text(), "npu", dtype)
        dec = _native.compile_ir((d / "decode.ir.json").read_text(), "npu", dtype)
        self.prefill = self.backend.prepare(pre, weights)
        self.decode = self.backend.prepare(dec, weights)
        self.state = self.prefill.new_state()  # shared: the KV cache lives here, on the device
        ins = {r[0]: r for r in pre.inputs()}
        dins = {r[0]: r for r in dec.inputs()}
        for need in ("input_ids", "attention_mask", "position_ids", "cache_position"):
            if need not in ins or need not in dins:
                raise InputError(f"{d}: the prefill and decode programs must both take '{need}'")
        self.seq_len = ins["input_ids"][1][-1]
        self.max_len = ins["attention_mask"][1][-1]
        self._dtypes = {k: v[2] for k, v in ins.items()}

    def _mask(self, rows: int, allow: Any) -> np.ndarray:
        r = np.arange(rows)[:, None]
        s = np.arange(self.max_len)[None, :]
        m = np.where(allow(r, s), 0.0, _MASKED[self._dtypes["attention_mask"]]).astype(np.float32)
        return m[None, None]

    def _inputs(self, ids: list[int], pos: list[int], slots: list[int], mask: np.ndarray) -> list[Any]:
        i64 = np.int64
        return [
            _named("input_ids", self._dtypes["input_ids"], np.array([ids], dtype=i64)),
            _named("attention_mask", self._dtypes["attention_mask"], mask),
            _named("position_ids", self._dtypes["position_ids"], np.array([pos], dtype=i64)),
            _named("cache_position", self._dtypes["cache_position"], np.array(slots, dtype=i64)),
        ]

    def generate(self, input_ids: Any, max_new_tokens: int = 16, eos_token_id: int | None = None) -> Any:
        """Greedy decoding. ``input_ids``: [P] or [1, P] (torch, numpy or a list). Returns the prompt
        followed by the new tokens, [1, P + n], in the input's kind (a torch tensor for torch input)."""
        is_torch = type(input_ids).__module__.startswith("torch")
        prompt = [int(x) for x in np.asarray(input_ids.cpu() if is_torch else input_ids).reshape(-1)]
        p, s, mx = len(prompt), self.seq_len, self.max_len
        if p == 0 or p > s:
            raise InputError(f"the prompt has {p} tokens; the prefill program takes 1..{s} (left-padded)")
        if max_new_tokens < 1:
            raise InputError("max_new_tokens must be at least 1")
        if s + max_new_tokens - 1 > mx:
            raise InputError(f"{max_new_tokens} new tokens after a {s}-slot prefill exceed the cache of {mx} slots")
        pad = s - p
        mask = self._mask(s, lambda r, sl: (sl <= r) & ((sl >= pad) | (sl == r)))
        out = self.prefill.run(
            self._inputs([0] * pad + prompt, [max(i - pad, 0) for i in range(s)], list(range(s)), mask), self.state
        )
        tok = int(np.argmax(_logits(out[0])))
        new = [tok]
        for i in range(max_new_tokens - 1):
            if eos_token_id is not None and tok == eos_token_id:
                break
            slot = s + i
            mask = self._mask(1, lambda r, sl, slot=slot: (sl >= pad) & (sl <= slot))
            out = self.decode.run(self._inputs([tok], [p + i], [slot], mask), self.state)
            tok = int(np.argmax(_logits(out[0])))
            new.append(tok)
        result = np.array([prompt + new], dtype=np.int64)
        if is_torch:
            import torch

            return torch.from_numpy(result)
        return result


def _logits(out: tuple[str, str, np.ndarray]) -> np.ndarray:
    from ._arrays import to_numpy

    _, dt, a = out
    return to_numpy(dt, a, "float32").reshape(-1)


def load_causal_lm(export_dir: str | os.PathLike[str], backend: Any = None, dtype: str | None = None) -> CausalLM:
    """Prefill + decode programs of an export directory, prepared on ``backend`` (default: best)."""
    return CausalLM(export_dir, backend, dtype)
