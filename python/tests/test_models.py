"""Real models through both APIs against PyTorch: ResNet-18, qwen2.5-tiny, and torchvision models the
export tool does not know, through npu.compile."""

from __future__ import annotations

import json
from pathlib import Path

import npu
import npu_compiler
import npu_runtime
import numpy as np
import pytest
import torch
import torchvision.models as tvm
from conftest import assert_matches, pearson


def _random_bn(model: torch.nn.Module) -> torch.nn.Module:
    torch.manual_seed(0)
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.2, 0.2)
            m.running_var.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.2, 0.2)
    return model.eval()


@pytest.fixture(scope="module")
def resnet18() -> torch.nn.Module:
    torch.manual_seed(0)
    return _random_bn(tvm.resnet18(weights=None))


def test_resnet18_npu_compile(resnet18: torch.nn.Module) -> None:
    x = torch.randn(1, 3, 96, 96)
    compiled = npu.compile(resnet18, (x,), backend="cpu")
    with torch.no_grad():
        want = resnet18(x)
    got = compiled(x)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.float32
    assert_matches(got.numpy(), want.numpy(), "resnet18 npu.compile")
    assert len(compiled.partition_plan.partitions) == 1
    assert "conv2d" in compiled.describe()
    report = compiled.profile(x, warmup=1, iterations=2)
    assert report.mean_ms > 0 and "conv2d" in report.kernels


def test_resnet18_reference_api(resnet18: torch.nn.Module, tmp_path: Path) -> None:
    x = torch.randn(1, 3, 96, 96)
    path = npu.export(resnet18, (x,), tmp_path)
    program = npu_compiler.compile(path)
    assert program.compute_dtype == "float16"  # an f32 model computes in f16 on the npu target, as before
    program.save(tmp_path / "r18.npubin")
    program = npu_compiler.compiled_program.CompiledProgram.load(tmp_path / "r18.npubin")
    device = npu_runtime.Device("cpu")
    ex = npu_runtime.Executor(program, device)
    weights = npu_runtime.load_weights(resnet18.state_dict(), program, device)
    spec = program.input_specs[0]
    out = ex.run({spec.name: npu_runtime.NPUBuffer.from_numpy(x.numpy(), device, spec=spec)}, weights)
    got = out[program.output_specs[0].name].to_numpy(spec=program.output_specs[0])
    with torch.no_grad():
        assert_matches(got, resnet18(x).numpy(), "resnet18 Executor")
    # the same through the file weights and the DAG
    weights_file = npu_runtime.load_weights_from_safetensors(tmp_path / "weights.safetensors", program, device)
    got2 = ex.run({spec.name: x.numpy()}, weights_file)[program.output_specs[0].name].to_numpy()
    np.testing.assert_allclose(got2, got, rtol=0, atol=0)
    plan = npu_compiler.partition(json.loads(path.read_text()), npu_compiler.is_op_supported)
    dag = npu_runtime.DAGExecutor(plan, npu_runtime.CPUBackend())
    dag.load_weights({k: v.numpy() for k, v in resnet18.state_dict().items()})
    (got3,) = dag.execute({spec.name: x.numpy()}).values()
    with torch.no_grad():
        assert_matches(got3, resnet18(x).numpy(), "resnet18 DAGExecutor")


@pytest.mark.parametrize(
    ("name", "size"),
    [("mobilenet_v2", 64), ("squeezenet1_0", 64), ("shufflenet_v2_x0_5", 64)],
)
def test_torchvision_models_unknown_to_the_export_tool(name: str, size: int) -> None:
    torch.manual_seed(0)
    model = _random_bn(getattr(tvm, name)(weights=None))
    x = torch.randn(1, 3, size, size)
    compiled = npu.compile(model, (x,), backend="cpu")
    with torch.no_grad():
        want = model(x)
    assert_matches(compiled(x).numpy(), want.numpy(), name)


def _qwen_io(qwen_dir: Path) -> tuple[dict, dict]:
    from safetensors.numpy import load_file

    return json.loads((qwen_dir / "meta.json").read_text()), load_file(str(qwen_dir / "io.safetensors"))


def test_qwen_tiny_reference_api(qwen_dir: Path) -> None:
    meta, io = _qwen_io(qwen_dir)
    program = npu_compiler.compile(qwen_dir / "prefill.ir.json", dtype="float32")
    device = npu_runtime.Device("cpu")
    ex = npu_runtime.Executor(program, device)
    weights = npu_runtime.load_weights(str(qwen_dir / "weights.safetensors"), program, device)
    inputs = {s.name: io[f"prefill.input.{s.name}"] for s in program.input_specs}
    out = ex.run(inputs, weights)
    for s in program.output_specs:
        want = io[f"prefill.output.{s.name}"]
        got = out[s.name].to_numpy()
        if s.name == meta["logits_output"]["prefill"]:
            assert_matches(got, want, "qwen prefill logits")
        else:  # the updated KV cache (donated, read back from the device state)
            assert pearson(got, want) > 0.999, s.name


def test_qwen_tiny_generate_matches_pytorch_greedy(qwen_dir: Path) -> None:
    meta, io = _qwen_io(qwen_dir)
    lm = npu.load_causal_lm(qwen_dir, backend="cpu")
    prompt = torch.from_numpy(io["prefill.input.input_ids"])
    steps = len(io["greedy.tokens"])
    out = lm.generate(prompt, max_new_tokens=steps + 1)
    assert isinstance(out, torch.Tensor) and out.shape == (1, prompt.shape[1] + steps + 1)
    logits_name = meta["logits_output"]["prefill"]
    first = int(io[f"prefill.output.{logits_name}"][0, -1].argmax())
    new = out[0, prompt.shape[1] :].tolist()
    assert new == [first, *io["greedy.tokens"].tolist()]
    # a shorter prompt is left-padded; generation still runs and is deterministic
    a = lm.generate([1, 2, 3], max_new_tokens=4)
    b = lm.generate(np.array([1, 2, 3]), max_new_tokens=4)
    assert a.tolist() == b.tolist()


def test_qwen_tiny_npu_compile(qwen_dir: Path) -> None:
    from npu_export import qwen

    meta, io = _qwen_io(qwen_dir)
    cfg = qwen.build_config("qwen2.5-tiny", None)
    torch.manual_seed(0)
    model = qwen.build_model(cfg, torch.float32, None, meta=False)
    wrapper = qwen.make_wrapper(model).eval()
    names = meta["ir"]["prefill"]["inputs"]
    args = tuple(torch.from_numpy(io[f"prefill.input.{t['name']}"]) for t in names)
    compiled = npu.compile(wrapper, args, backend="cpu")
    with torch.no_grad():
        want = wrapper(*args)
    got = compiled(*args)
    assert len(got) == len(want)
    assert_matches(got[0].numpy(), want[0].numpy(), "qwen npu.compile logits")
    for g, w in zip(got[1:], want[1:], strict=True):
        assert pearson(g.numpy(), w.numpy()) > 0.999
