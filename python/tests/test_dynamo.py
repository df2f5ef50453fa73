"""torch.compile(model, backend="npu"): a small CNN and a tiny transformer, and the eager fallback."""

from __future__ import annotations

import subprocess
import sys
import warnings

import npu  # the package under test (dynamo finds the backend by its entry point)
import pytest
import torch
from conftest import assert_matches
from torch import nn


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(3, 16, 3, padding=1)
        self.bn = nn.BatchNorm2d(16)
        self.c2 = nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.fc = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn(self.c1(x)))
        y = torch.relu(self.c2(y))
        return self.fc(y.mean(dim=(2, 3)))


class TinyTransformer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(64, 32)
        self.layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
        self.head = nn.Linear(32, 64)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.layer(self.emb(ids)))


def _check(model: nn.Module, x: torch.Tensor, what: str) -> None:
    torch._dynamo.reset()
    model.eval()
    with torch.no_grad():
        want = model(x)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no eager fallback
            got = torch.compile(model, backend="npu")(x)
    assert_matches(got.numpy(), want.numpy(), what)


def test_small_cnn() -> None:
    torch.manual_seed(0)
    _check(SmallCNN(), torch.randn(2, 3, 16, 16), "torch.compile small CNN")


def test_tiny_transformer() -> None:
    """Dynamo traces the module itself: with the MHA fast path off it sees plain ops."""
    torch.manual_seed(0)
    was = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        _check(TinyTransformer(), torch.randint(0, 64, (1, 8)), "torch.compile tiny transformer")
    finally:
        torch.backends.mha.set_fastpath_enabled(was)


def test_tiny_transformer_fast_path_runs_eagerly_with_the_reason() -> None:
    """With the fast path on, dynamo's graph holds one fused op nobody implements: eager, said once."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    model, x = TinyTransformer().eval(), torch.randint(0, 64, (1, 8))
    with torch.no_grad():
        want = model(x)
        with pytest.warns(UserWarning, match="_transformer_encoder_layer_fwd") as rec:
            got = torch.compile(model, backend="npu")(x)
    assert len([w for w in rec if "npu" in str(w.message)]) == 1
    torch.testing.assert_close(got, want)


def test_npu_compile_exports_transformers_without_the_fast_path() -> None:
    """npu.compile exports with the fast path off, whatever the caller's setting."""
    torch.manual_seed(0)
    model, x = TinyTransformer().eval(), torch.randint(0, 64, (1, 8))
    with torch.no_grad():
        want = model(x)
        got = npu.compile(model, (x,))(x)
    assert torch.backends.mha.get_fastpath_enabled()
    assert_matches(got.numpy(), want.numpy(), "npu.compile tiny transformer")


class Unexportable(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.fft.fft(x).real  # complex values: no IR for them


def test_eager_fallback_warns_once_with_the_reason() -> None:
    torch._dynamo.reset()
    x = torch.randn(4, 8)
    with pytest.warns(UserWarning, match="runs eagerly") as rec:
        got = torch.compile(Unexportable(), backend="npu")(x)
    assert len([w for w in rec if "npu" in str(w.message)]) == 1
    torch.testing.assert_close(got, torch.fft.fft(x).real)


def test_entry_point_without_import() -> None:
    """The torch_dynamo_backends entry point makes backend="npu" work without `import npu`."""
    code = (
        "import torch\n"
        "m = torch.nn.Linear(4, 3).eval()\n"
        "x = torch.randn(2, 4)\n"
        "with torch.no_grad():\n"
        "    y = torch.compile(m, backend='npu')(x)\n"
        "    assert torch.allclose(y, m(x), atol=1e-5), (y, m(x))\n"
        "import sys\n"
        "assert 'npu._dynamo' in sys.modules\n"
        "print('ok')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-2000:]
