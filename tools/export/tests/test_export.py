"""Fast tests of the export tool (mlp, small-cnn, qwen2.5-tiny); run from the repo root:

.venv/bin/python -m pytest tools/export/tests
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from npu_export import cli, common  # noqa: E402


def _export(tmp_path_factory: pytest.TempPathFactory, *argv: str) -> Path:
    out = tmp_path_factory.mktemp(argv[0])
    assert cli.main([*argv, "--out", str(out)]) == 0
    return out


def _check_weights(ir: dict, weights: dict[str, torch.Tensor]) -> None:
    expected = {w["name"]: w for w in ir["weights"] if 0 not in w["shape"]}
    assert set(weights) == set(expected)
    for name, t in weights.items():
        assert list(t.shape) == expected[name]["shape"], name
        assert str(t.dtype).removeprefix("torch.") == expected[name]["dtype"], name
    # every weight used by a node is present
    used = {
        ir["weight_name_mapping"].get(i["name"], i["name"])
        for n in ir["nodes"]
        for i in n["inputs"]
        if "producer_node" not in i
    }
    assert used <= set(weights), used - set(weights)


def _run_saved_ir(out: Path, graph: str, prefix: str = "") -> tuple[list[torch.Tensor], dict]:
    ir_dict = json.loads((out / f"{graph}.ir.json").read_text())
    ir = common.load_ir_for_execution(out / f"{graph}.ir.json")
    weights = load_file(out / "weights.safetensors")
    io = load_file(out / "io.safetensors")
    inputs = [io[f"{prefix}input.{m['name']}"] for m in ir_dict["graph_inputs"]]
    return common.run_ir(ir, weights, inputs), io


@pytest.mark.parametrize(
    ("argv", "ops"),
    [
        (
            ("mlp", "--batch", "2"),
            {"aten.linear.default": 3, "aten.gelu.default": 1, "aten.relu.default": 1},
        ),
        (
            ("small-cnn", "--batch", "4"),
            {
                "aten.conv2d.default": 3,
                "aten.batch_norm.default": 3,
                "aten.relu.default": 3,
                "aten.max_pool2d.default": 1,
                "aten.add.Tensor": 1,
                "aten.adaptive_avg_pool2d.default": 1,
                "aten.flatten.using_ints": 1,
                "aten.linear.default": 1,
            },
        ),
    ],
)
def test_vision_export(tmp_path_factory: pytest.TempPathFactory, argv: tuple[str, ...], ops: dict) -> None:
    out = _export(tmp_path_factory, *argv)
    ir = json.loads((out / "model.ir.json").read_text())
    assert dict(Counter(n["op_type"] for n in ir["nodes"])) == ops
    weights = load_file(out / "weights.safetensors")
    _check_weights(ir, weights)
    if argv[0] == "small-cnn":
        assert "bn1.num_batches_tracked" in weights
        assert not torch.allclose(weights["bn1.running_mean"], torch.zeros(1))
        assert weights["bn1.running_var"].min() >= 0.5

    outs, io = _run_saved_ir(out, "model")
    x = io[f"input.{ir['graph_inputs'][0]['name']}"]
    assert x.shape[0] == int(argv[2]) and x.abs().sum() > 0
    ref = io[f"output.{ir['graph_outputs'][0]['name']}"]
    torch.testing.assert_close(outs[0], ref, rtol=1e-5, atol=1e-5)
    meta = json.loads((out / "meta.json").read_text())
    assert meta["versions"]["torch"].startswith("2.11.0")


@pytest.fixture(scope="module")
def qwen_tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _export(tmp_path_factory, "qwen2.5-tiny", "--decode-steps", "8")


def test_qwen_tiny_graphs(qwen_tiny: Path) -> None:
    pre = json.loads((qwen_tiny / "prefill.ir.json").read_text())
    dec = json.loads((qwen_tiny / "decode.ir.json").read_text())
    meta = json.loads((qwen_tiny / "meta.json").read_text())
    for ir in (pre, dec):
        ops = Counter(n["op_type"] for n in ir["nodes"])
        assert ops["aten.index_copy.default"] == 4
        assert "wrap_with_set_grad_enabled" not in ops
        assert "aten.index_copy_.default" not in ops
        assert ir["graph_outputs"][0]["shape"] == [1, 1, 256]
    pre_in = [m["name"] for m in pre["graph_inputs"]]
    dec_in = [m["name"] for m in dec["graph_inputs"]]
    assert pre_in == dec_in
    assert pre_in[:4] == ["input_ids", "attention_mask", "position_ids", "cache_position"]
    assert pre_in[4:] == ["past_key_0", "past_value_0", "past_key_1", "past_value_1"]
    for a, b in zip(pre["graph_inputs"][4:], dec["graph_inputs"][4:], strict=True):
        assert a["shape"] == b["shape"] == [1, 2, 64, 16]
    for m in meta["kv_mapping"]:
        assert m["prefill_key_output"] in {o["name"] for o in pre["graph_outputs"]}
        assert m["decode_value_output"] in {o["name"] for o in dec["graph_outputs"]}
    assert meta["config"]["rope_theta"] == 1e6
    assert meta["verify"]["hf_generate_match"] is True
    assert meta["prefill_logits_std"] > 1.0

    weights = load_file(qwen_tiny / "weights.safetensors")
    _check_weights(dec, weights)
    torch.testing.assert_close(weights["model.lm_head.weight"], weights["model.model.embed_tokens.weight"])
    inv_freq = weights["model.model.rotary_emb.inv_freq"]
    torch.testing.assert_close(inv_freq, 1.0 / (1e6 ** (torch.arange(0, 16, 2, dtype=torch.float32) / 16)))


def test_qwen_tiny_prefill_and_greedy_replay(qwen_tiny: Path) -> None:
    """Replay prefill + greedy decode with torch_ir's executor on the saved JSON IRs."""
    pre = json.loads((qwen_tiny / "prefill.ir.json").read_text())
    dec = json.loads((qwen_tiny / "decode.ir.json").read_text())
    outs, io = _run_saved_ir(qwen_tiny, "prefill", prefix="prefill.")
    for meta_out, t in zip(pre["graph_outputs"], outs, strict=True):
        torch.testing.assert_close(t, io[f"prefill.output.{meta_out['name']}"], rtol=1e-5, atol=1e-5)

    ir = common.load_ir_for_execution(qwen_tiny / "decode.ir.json")
    weights = load_file(qwen_tiny / "weights.safetensors")
    kv = outs[1:]
    tokens = io["greedy.tokens"]
    assert tokens.dtype == torch.int64 and io["greedy.logits"].shape == (tokens.shape[0], 256)
    for step in range(tokens.shape[0]):
        fixed = [io[f"decode.{step}.input.{m['name']}"] for m in dec["graph_inputs"][:4]]
        res = common.run_ir(ir, weights, [*fixed, *kv])
        kv = res[1:]
        torch.testing.assert_close(res[0][0, -1], io["greedy.logits"][step], rtol=1e-4, atol=1e-4)
        assert int(res[0][0, -1].argmax()) == int(tokens[step])


def test_ir_only_writes_no_weights(tmp_path_factory: pytest.TempPathFactory) -> None:
    out = _export(tmp_path_factory, "small-cnn", "--ir-only")
    assert sorted(p.name for p in out.iterdir()) == ["meta.json", "model.ir.json"]
    meta = json.loads((out / "meta.json").read_text())
    assert meta["ir_only"] is True
    assert meta["ir"]["model"]["inputs"][0]["shape"] == [1, 3, 16, 16]
