"""Errors: wrong shapes, dtypes, names and missing weights each raise one clear npu exception, with the
Rust error's one-line message; the reference's bugs are fixed (capacity check, div by scalar)."""

from __future__ import annotations

import json
from pathlib import Path

import npu
import npu_compiler
import npu_runtime
import numpy as np
import pytest
import torch
from torch import nn


class Affine(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x) / 2.0


@pytest.fixture(scope="module")
def model() -> nn.Module:
    torch.manual_seed(0)
    return Affine().eval()


@pytest.fixture(scope="module")
def compiled(model: nn.Module) -> npu.CompiledModel:
    return npu.compile(model, (torch.randn(2, 4),), backend="cpu")


def test_divide_by_scalar_divides(model: nn.Module, compiled: npu.CompiledModel) -> None:
    x = torch.randn(2, 4)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-6)


def test_wrong_shape(compiled: npu.CompiledModel) -> None:
    with pytest.raises(npu.InputError, match=r"compiled for float32\[2, 4\].*got float32\[3, 4\]"):
        compiled(torch.randn(3, 4))


def test_wrong_dtype(compiled: npu.CompiledModel) -> None:
    with pytest.raises(npu.InputError, match=r"got float64\[2, 4\]"):
        compiled(torch.randn(2, 4, dtype=torch.float64))


def test_wrong_count(compiled: npu.CompiledModel) -> None:
    with pytest.raises(npu.InputError, match="expected 1 input"):
        compiled(torch.randn(2, 4), torch.randn(2, 4))


def _program(model: nn.Module, tmp_path: Path) -> npu_compiler.CompiledProgram:
    return npu_compiler.compile(npu.export(model, (torch.randn(2, 4),), tmp_path))


def test_missing_weight(model: nn.Module, tmp_path: Path) -> None:
    program = _program(model, tmp_path)
    sd = {k: v.numpy() for k, v in model.state_dict().items() if k != "fc.bias"}
    with pytest.raises(npu.WeightError, match="fc.bias") as e:
        npu_runtime.load_weights(sd, program)
    assert isinstance(e.value, KeyError)
    assert str(e.value).startswith("1 weight(s)")  # not quoted like a plain KeyError


def test_mis_shaped_weight_from_the_runtime(model: nn.Module, tmp_path: Path) -> None:
    program = _program(model, tmp_path)
    sd = {k: v.numpy() for k, v in model.state_dict().items()}
    sd["fc.weight"] = np.zeros((3, 5), np.float32)
    ex = npu_runtime.Executor(program, npu_runtime.Device("cpu"))
    with pytest.raises(npu.WeightError, match=r"weight 'fc.weight'.*expected .*\[3, 4\], found float32\[3, 5\]"):
        ex.run({program.input_specs[0].name: np.zeros((2, 4), np.float32)}, npu_runtime.load_weights(sd, program))


def test_runtime_input_errors(model: nn.Module, tmp_path: Path) -> None:
    program = _program(model, tmp_path)
    ex = npu_runtime.Executor(program, npu_runtime.Device("cpu"))
    w = npu_runtime.load_weights(model.state_dict(), program)
    name = program.input_specs[0].name
    with pytest.raises(npu.InputError, match=rf"input '{name}': expected float32\[2, 4\], got float32\[2, 5\]"):
        ex.run({name: np.zeros((2, 5), np.float32)}, w)
    with pytest.raises(npu.InputError, match="unknown input 'nope'"):
        ex.run({"nope": np.zeros((2, 4), np.float32)}, w)
    with pytest.raises(npu.InputError, match=f"missing input '{name}'"):
        ex.run({}, w)
    with pytest.raises(npu.InputError, match=r"expected float32\[2, 4\], got int64\[2, 4\]"):
        ex.run({name: np.zeros((2, 4), np.int64)}, w)


def test_capacity_check() -> None:
    buf = npu_runtime.NPUBuffer.zeros([4], None, np.float16)
    buf.write_from_numpy(np.ones(4, np.float16))
    with pytest.raises(ValueError, match="capacity"):
        buf.write_from_numpy(np.ones(8, np.float16))
    with pytest.raises(ValueError, match="cannot convert int32 data to float16"):
        buf.write_from_numpy(np.ones(4, np.int32))


def test_compile_errors_name_the_node(tmp_path: Path) -> None:
    ir = {
        "model_name": "bad",
        "graph_inputs": [{"name": "x", "shape": [2], "dtype": "float32"}],
        "graph_outputs": [{"name": "y", "shape": [2], "dtype": "float32"}],
        "weights": [],
        "weight_name_mapping": {},
        "nodes": [
            {
                "name": "y",
                "op_type": "aten.frobnicate.default",
                "attrs": {},
                "inputs": [
                    {"name": "x", "shape": [2], "dtype": "float32", "producer_node": "x", "producer_output_idx": 0}
                ],
                "outputs": [{"name": "y", "shape": [2], "dtype": "float32"}],
            }
        ],
    }
    with pytest.raises(npu.CompileError, match="node 'y' \\(aten.frobnicate.default\\)") as e:
        npu_compiler.compile(ir)
    assert isinstance(e.value, ValueError)
    v = npu_compiler.check_constraints(ir)
    assert [(c.node_name, c.op_type) for c in v] == [("y", "aten.frobnicate.default")]
    assert not npu_compiler.is_op_supported("aten.frobnicate.default")
    # the partition path sends it to the CPU, where the fallback interpreter does not know it either
    plan = npu_compiler.partition(ir, npu_compiler.is_op_supported)
    assert [p.target for p in plan.partitions] == ["cpu"]
    with pytest.raises(npu.RuntimeError, match="frobnicate"):
        npu_runtime.DAGExecutor(plan, npu_runtime.CPUBackend()).execute({"x": np.zeros(2, np.float32)})
    with pytest.raises(npu.IRError):
        npu_compiler.compile(
            {**ir, "nodes": [{**ir["nodes"][0], "inputs": [{"name": "zz", "shape": [2], "dtype": "float32"}]}]}
        )


def test_npubin_errors(tmp_path: Path) -> None:
    p = tmp_path / "x.npubin"
    p.write_bytes(b"not an npubin at all")
    with pytest.raises(npu.NpubinError, match="bad magic"):
        npu_compiler.compiled_program.CompiledProgram.load(p)


def test_unknown_backend() -> None:
    with pytest.raises(npu.BackendUnavailableError, match="unknown backend 'tpu'"):
        npu_runtime.Device("tpu")


def test_supported_ops() -> None:
    ops = npu_compiler.get_supported_ops()
    assert {"aten.conv2d.default", "aten.linear.default", "aten.softmax.int"} <= ops
    assert npu_compiler.is_op_supported("aten.relu.default")


def test_execute_cpu_partition_and_partition_plan() -> None:
    ir = json.loads(
        json.dumps(
            {
                "model_name": "two",
                "graph_inputs": [{"name": "x", "shape": [2, 3], "dtype": "float32"}],
                "graph_outputs": [{"name": "neg", "shape": [2, 3], "dtype": "float32"}],
                "weights": [{"name": "w", "shape": [2, 3], "dtype": "float32"}],
                "weight_name_mapping": {"p_w": "w"},
                "nodes": [
                    {
                        "name": "add",
                        "op_type": "aten.add.Tensor",
                        "attrs": {},
                        "inputs": [
                            {
                                "name": "x",
                                "shape": [2, 3],
                                "dtype": "float32",
                                "producer_node": "x",
                                "producer_output_idx": 0,
                            },
                            {"name": "p_w", "shape": [2, 3], "dtype": "float32"},
                        ],
                        "outputs": [{"name": "add", "shape": [2, 3], "dtype": "float32"}],
                    },
                    {
                        "name": "neg",
                        "op_type": "aten.neg.default",
                        "attrs": {},
                        "inputs": [
                            {
                                "name": "add",
                                "shape": [2, 3],
                                "dtype": "float32",
                                "producer_node": "add",
                                "producer_output_idx": 0,
                            }
                        ],
                        "outputs": [{"name": "neg", "shape": [2, 3], "dtype": "float32"}],
                    },
                ],
            }
        )
    )
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    w = np.ones((2, 3), np.float32)
    out = npu_runtime.execute_cpu_partition(ir["nodes"], {"x": x}, {"w": w}, ir["weight_name_mapping"])
    np.testing.assert_array_equal(out["neg"], -(x + 1))
    plan = npu_compiler.partition(ir, lambda op, attrs: op != "aten.neg.default")
    assert [p.target for p in plan.partitions] == ["npu", "cpu"]
    assert [t.direction for t in plan.transfers] == ["to_cpu"]
    dag = npu_runtime.DAGExecutor(plan, npu_runtime.CPUBackend())
    dag.load_weights({"w": w})
    np.testing.assert_array_equal(dag.execute({"x": x})["neg"], -(x + 1))
