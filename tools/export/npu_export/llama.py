"""llama-tiny: a small random transformers-5 Llama decoder LM called as ``model(input_ids)``.

One graph ``model`` with input ``input_ids`` int64 [1, S] and one output, the logits [1, S, vocab].
Called the way users call it, without an attention mask or cache, transformers builds the causal
mask inside the graph from the position ids (``aten.diff`` for packed-sequence detection, then
``arange``/``le``/``index.Tensor``/``__and__``): the ops that issue 9 found nobody ran.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM

from . import common

CONFIG: dict[str, Any] = {
    "vocab_size": 256,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
    "rms_norm_eps": 1e-6,
    # larger than Llama's 0.02 so that the logits of a random model are not flat
    "initializer_range": 0.2,
    "tie_word_embeddings": False,
}
SEQ_LEN = 12


class LlamaLogits(nn.Module):
    """``model(input_ids).logits`` (export needs a tensor, not a ModelOutput)."""

    def __init__(self, model: LlamaForCausalLM) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids, use_cache=False).logits


def build() -> LlamaLogits:
    cfg = LlamaConfig(**CONFIG, attn_implementation="sdpa")
    return LlamaLogits(LlamaForCausalLM(cfg))


def export(args: argparse.Namespace) -> dict[str, Any]:
    out: Path = args.out
    if args.dtype not in (None, "float32") or args.batch not in (None, 1):
        raise ValueError("llama-tiny is exported in float32 with batch 1")
    seq_len = args.seq_len or SEQ_LEN
    if seq_len > CONFIG["max_position_embeddings"]:
        raise ValueError(f"--seq-len {seq_len} exceeds max_position_embeddings")
    weight_seed, input_seed = args.seed, args.seed + 1
    with torch.device("meta"):
        meta_model = build()
    example = (torch.zeros(1, seq_len, dtype=torch.int64, device="meta"),)
    ir = common.extract(meta_model, example, model_name="llama-tiny")
    torch.manual_seed(weight_seed)
    model = build().eval()
    gen = torch.Generator().manual_seed(input_seed)
    ids = torch.randint(0, CONFIG["vocab_size"], (1, seq_len), generator=gen)
    ir_dict = common.save_ir(ir, out / "model.ir.json")
    weights = common.collect_weights(ir, model)
    common.save_tensors(weights, out / "weights.safetensors")
    with torch.no_grad():
        logits = model(ids)
    out_name = ir.graph_outputs[0].name
    in_name = ir.graph_inputs[0].name
    common.save_tensors({f"input.{in_name}": ids, f"output.{out_name}": logits}, out / "io.safetensors")
    (y_ir,) = common.run_ir(ir, weights, [ids])
    diff = common.max_abs_diff(y_ir, logits)
    if diff > 1e-4 * max(1.0, float(logits.abs().max())):
        raise RuntimeError(f"torch_ir executor disagrees with PyTorch: max abs diff {diff}")
    meta: dict[str, Any] = {
        "model": "llama-tiny",
        "graphs": ["model"],
        "dtype": "float32",
        "batch": 1,
        "seeds": {
            "weights": f"torch.manual_seed({weight_seed}) before construction (HF init)",
            "inputs": f"input_ids: torch.Generator().manual_seed({input_seed}), randint(0, vocab)",
        },
        "versions": common.versions(),
        "config": {**CONFIG, "seq_len": seq_len, "attn_implementation": "sdpa", "call": "model(input_ids)"},
        "ir": {
            "model": {
                "file": "model.ir.json",
                **common.ir_io_specs(ir_dict),
                "op_histogram": common.op_histogram(ir_dict),
            }
        },
        "verify": {"torch_ir_executor_max_abs_diff": diff},
        "files": ["model.ir.json", "weights.safetensors", "io.safetensors", "meta.json"],
    }
    common.write_json(meta, out / "meta.json")
    return meta
