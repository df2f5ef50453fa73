"""bert-tiny: a small random BERT encoder with its masked-LM head (transformers ``BertForMaskedLM``).

One graph ``model`` with inputs ``input_ids``, ``attention_mask`` (int64, the last positions padded
with 0) and ``token_type_ids`` (int64, two segments), all [1, S], and one output, the MLM logits
[1, S, vocab]. SDPA attention (transformers' default), so the graph builds a boolean padding mask
(``arange``/``index.Tensor``/``__and__``) and calls ``scaled_dot_product_attention`` with it: the mask
ops are ones no NPU target lowers.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import BertConfig, BertForMaskedLM

from . import common

CONFIG: dict[str, Any] = {
    "vocab_size": 512,
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 128,
    "max_position_embeddings": 64,
    "type_vocab_size": 2,
    "hidden_act": "gelu",
    # larger than BERT's 0.02 so that the logits of a random model are not flat
    "initializer_range": 0.2,
}
SEQ_LEN = 16
PADDING = 4  # trailing positions with attention_mask 0
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")


class BertLogits(nn.Module):
    """Positional inputs in, MLM logits out (export needs a tensor, not a ModelOutput)."""

    def __init__(self, model: BertForMaskedLM) -> None:
        super().__init__()
        self.model = model

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor
    ) -> torch.Tensor:
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        return out.logits


def build(seq_len: int) -> BertLogits:
    if seq_len > CONFIG["max_position_embeddings"]:
        raise ValueError(f"--seq-len {seq_len} exceeds max_position_embeddings")
    cfg = BertConfig(**CONFIG, attn_implementation="sdpa")
    return BertLogits(BertForMaskedLM(cfg))


def make_inputs(seq_len: int, seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, CONFIG["vocab_size"], (1, seq_len), generator=gen)
    pad = min(PADDING, seq_len - 1)
    mask = torch.ones(1, seq_len, dtype=torch.int64)
    mask[:, seq_len - pad :] = 0
    types = torch.zeros(1, seq_len, dtype=torch.int64)
    types[:, seq_len // 2 :] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def export(args: argparse.Namespace) -> dict[str, Any]:
    out: Path = args.out
    if args.dtype not in (None, "float32") or args.batch not in (None, 1):
        raise ValueError("bert-tiny is exported in float32 with batch 1")
    seq_len = args.seq_len or SEQ_LEN
    weight_seed, input_seed = args.seed, args.seed + 1

    with torch.device("meta"):
        meta_model = build(seq_len)
    example = tuple(torch.zeros(1, seq_len, dtype=torch.int64, device="meta") for _ in INPUT_NAMES)
    ir = common.extract(meta_model, example, model_name="bert-tiny")
    ir_dict = common.save_ir(ir, out / "model.ir.json")
    io = common.ir_io_specs(ir_dict)
    meta: dict[str, Any] = {
        "model": "bert-tiny",
        "graphs": ["model"],
        "dtype": "float32",
        "batch": 1,
        "ir_only": bool(args.ir_only),
        "seeds": {
            "weights": f"torch.manual_seed({weight_seed}) before construction (HF init)",
            "inputs": f"input_ids: torch.Generator().manual_seed({input_seed}), randint(1, vocab); "
            f"attention_mask: last {PADDING} positions 0; token_type_ids: second half 1",
        },
        "versions": common.versions(),
        "config": {**CONFIG, "seq_len": seq_len, "attn_implementation": "sdpa", "head": "masked-LM logits"},
        "ir": {"model": {"file": "model.ir.json", **io, "op_histogram": common.op_histogram(ir_dict)}},
    }
    if args.ir_only:
        meta["files"] = ["model.ir.json", "meta.json"]
        common.write_json(meta, out / "meta.json")
        return meta

    torch.manual_seed(weight_seed)
    model = build(seq_len).eval()
    weights = common.collect_weights(ir, model)
    common.save_tensors(weights, out / "weights.safetensors")
    inputs = make_inputs(seq_len, input_seed)
    with torch.no_grad():
        logits = model(*(inputs[n] for n in INPUT_NAMES))
    out_name = ir.graph_outputs[0].name
    tensors = {f"input.{n}": t for n, t in inputs.items()}
    tensors[f"output.{out_name}"] = logits
    common.save_tensors(tensors, out / "io.safetensors")

    (y_ir,) = common.run_ir(ir, weights, [inputs[n] for n in INPUT_NAMES])
    diff = common.max_abs_diff(y_ir, logits)
    meta["verify"] = {"torch_ir_executor_max_abs_diff": diff}
    if diff > 1e-4 * max(1.0, float(logits.abs().max())):
        raise RuntimeError(f"torch_ir executor disagrees with PyTorch: max abs diff {diff}")
    meta["files"] = ["model.ir.json", "weights.safetensors", "io.safetensors", "meta.json"]
    common.write_json(meta, out / "meta.json")
    return meta
