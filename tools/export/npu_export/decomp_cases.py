"""Reference cases of the composite ops that ``npu_compiler::passes::decompose`` rewrites into
primitives (``decomp_*`` in fixtures/fallback, written by ``fallback_refs``). Each composite
appears with its ATen defaults and with non-default arguments; statistics also run in bfloat16.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

Add = Callable[..., None]


def _with_neg_inf_row(x: torch.Tensor) -> torch.Tensor:
    """Row 0 all -inf: logsumexp must give -inf there, not NaN."""
    rows = torch.arange(x.shape[0]).reshape(-1, *([1] * (x.dim() - 1)))
    return x.masked_fill(rows == 0, float("-inf"))


def add_cases(add: Add, r: Any) -> None:
    """Appends the decomposition cases through ``add(name, fn, *inputs, layers=...)``; ``r``
    is fallback_refs' seeded generator."""
    bf16 = torch.bfloat16
    add(
        "decomp_diff",
        lambda x, p, i, b: (
            torch.diff(x, n=2, dim=0),
            torch.diff(x, prepend=p),
            torch.diff(x, dim=-1, prepend=p, append=p * 2),
            torch.diff(i, prepend=i[:, :1] - 1),
            torch.diff(b),
        ),
        r.randn(5, 7),
        r.randn(5, 2),
        r.ints(-9, 9, 3, 8),
        r.bools(4, 6),
    )
    add(
        "decomp_arith",
        lambda x, y, z: (
            torch.rsub(x, y, alpha=2),
            torch.rsub(x, 2.5, alpha=3),
            1 - x,
            torch.square(x),
            torch.addcmul(x, y, z, value=0.5),
            torch.addcdiv(x, y, z.abs() + 0.5),
            torch.lerp(x, y, 0.3),
            torch.lerp(x, y, 0.8),
            torch.lerp(x, y, z.sigmoid()),
        ),
        r.randn(3, 5),
        r.randn(5),
        r.randn(3, 1),
    )
    add(
        "decomp_activations",
        lambda x: (
            F.glu(x, -1),
            F.glu(x, 0),
            F.softplus(x * 8),
            F.softplus(x * 8, beta=2.0, threshold=5.0),
            F.mish(x * 8),
            F.elu(x * 4),
            F.elu(x * 4, alpha=0.5),
            F.selu(x * 4),
            F.celu(x * 4, alpha=1.5),
            F.hardswish(x * 4),
            F.hardsigmoid(x * 4),
        ),
        r.randn(4, 6),
    )
    add(
        "decomp_logsumexp",
        lambda x: (
            torch.logsumexp(_with_neg_inf_row(x), 1),
            torch.logsumexp(x * 30, (0, 2), keepdim=True),
            torch.logsumexp(x, -1),
        ),
        r.randn(3, 5, 4),
    )
    add(
        "decomp_var_std",
        lambda x: (
            torch.var(x, 1),
            torch.std(x),
            torch.var(x, 1, unbiased=False, keepdim=True),
            torch.var_mean(x, 0, correction=0),
            torch.std_mean(x, (0, 2), keepdim=True),
            torch.std(x, -1, correction=2),
            torch.var(x + 1000.0, -1),
        ),
        r.randn(3, 5, 7),
    )
    add(
        "decomp_var_std_bf16",
        lambda x: (torch.var(x, 1), torch.std_mean(x, -1), torch.logsumexp(x, 0)),
        r.randn(4, 33, dtype=bf16),
    )
    add(
        "decomp_vector_norm",
        lambda x, y: (
            torch.linalg.vector_norm(x),
            torch.linalg.vector_norm(x, 1, dim=1),
            torch.linalg.vector_norm(x, 3, dim=(0, 2), keepdim=True),
            torch.linalg.vector_norm(x, float("inf"), dim=-1),
            torch.linalg.vector_norm(x, float("-inf"), dim=-1),
            torch.linalg.vector_norm(x.relu(), 0, dim=1),
            x.norm(),
            x.norm(p=1, dim=2),
            F.cosine_similarity(x, y),
            F.cosine_similarity(x, y, dim=-1, eps=1e-3),
        ),
        r.randn(3, 5, 4),
        r.randn(5, 1),
    )
    add(
        "decomp_norms",
        lambda m, x, w, b, g: (
            torch.native_layer_norm(x, [5], w, b, 1e-5),
            F.layer_norm(x, (4, 5), eps=1e-3),
            m["ln2"](x),
            F.rms_norm(x, (5,), w),
            F.rms_norm(x, (4, 5), eps=1e-3),
            F.group_norm(x, 2, g, g * 0.5, eps=1e-4),
            F.group_norm(x, 4),
            torch.native_group_norm(x, g, g, 2, 4, 5, 2, 1e-5),
            F.instance_norm(x),
            m["inorm"](x),
        ),
        r.randn(2, 4, 5),
        r.pos(5),
        r.randn(5),
        r.pos(4),
        layers={"ln2": nn.LayerNorm((4, 5)), "inorm": nn.InstanceNorm1d(4, affine=True)},
    )
    add(
        "decomp_rms_norm_bf16",
        lambda x, w: (F.rms_norm(x, (16,), w), F.rms_norm(x, (16,), w, eps=1e-6)),
        r.randn(3, 16, dtype=bf16),
        r.randn(16, dtype=bf16),
    )
    add(
        "decomp_linalg",
        lambda a, m, v, u: (
            torch.addmv(u, m, v, beta=0.5, alpha=2.0),
            torch.addr(m, u, v),
            torch.mv(m, v),
            torch.dot(v, v),
            torch.outer(u, v),
            torch.baddbmm(a[:, :, :3], a, a.transpose(1, 2), beta=0.0, alpha=0.5),
            torch.baddbmm(u, a, a.transpose(1, 2), beta=0.5),
            torch.einsum("ij,jk->ik", m, m.T),
            torch.einsum("bij,bkj->bki", a, a),
            torch.einsum("bij->j", a),
            torch.einsum("i,j->ij", u, v),
            torch.einsum("...ij,...jk", a, a.transpose(1, 2)),
            torch.einsum("bij,jk,k->bi", a, m.T, u),
            F.linear(v, m),
        ),
        r.randn(2, 3, 4),
        r.randn(3, 4),
        r.randn(4),
        r.randn(3),
    )
    add(
        "decomp_conv1d",
        lambda m, x, w: (
            m["c"](x),
            m["s"](x),
            F.conv1d(x, w, padding="same"),
            F.conv1d(x, w, stride=2, padding=1, dilation=2),
            F.conv1d(x[0], w),
            m["g"](x),
            F.conv2d(x, w[:, :2].unsqueeze(-1)),
        ),
        r.randn(2, 4, 11),
        r.randn(6, 4, 4),
        layers={
            "c": nn.Conv1d(4, 6, 3, padding=1),
            "s": nn.Conv1d(4, 6, 3, stride=2),
            "g": nn.Conv1d(4, 6, 3, groups=2, bias=False, padding="same"),
        },
    )
    add(
        "decomp_views",
        lambda x, t: (
            x.unflatten(1, (2, 3)),
            x.select(0, -1),
            x[:, 1],
            x.movedim(0, -1),
            t.movedim((0, 1), (2, 0)),
            t.mT,
            x.T,
            t.ravel(),
            x.expand_as(t),
            x.reshape_as(t[0].T),
            torch.broadcast_to(x, (2, 3, 6)),
            t.swapaxes(0, 2),
        ),
        r.randn(3, 6),
        r.randn(2, 3, 6),
    )
    add(
        "decomp_split_repeat_pad",
        lambda x, i: (
            *torch.split(x, [2, 4, 1], 1),
            *x.unbind(0),
            x.repeat(2, 1, 3),
            x.tile(2),
            i.repeat(2, 1),
            F.pad(x, (1, 2)),
            F.pad(x, (1, -1, 2, 0), value=3.0),
            F.pad(i, (0, 2), value=7),
            torch.constant_pad_nd(x, (0, 0, 1, 1), -1.5),
        ),
        r.randn(3, 7),
        r.ints(-9, 9, 2, 3),
    )
    # added with the OpInfo coverage work (appended: earlier cases keep their inputs)
    add(
        "decomp_combine",
        lambda x, t, n: (
            torch.hstack([x, x]),
            torch.vstack([x[0], x[1]]),
            torch.dstack([x, x]),
            torch.column_stack([x[:, 0], x]),
            x.narrow(1, -3, 2),
            *torch.tensor_split(x, 4, 1),
            *torch.tensor_split(x, [1, 5], 1),
            F.channel_shuffle(t, 2),
            *torch.broadcast_tensors(x[0], x),
            *torch.aminmax(x, dim=1),
            torch.nansum(n),
            torch.nansum(n, 0, keepdim=True),
            x.repeat_interleave(2, 0),
            torch.atleast_3d(x),
            torch.diff(x, dim=0, append=x[:1]),
        ),
        r.randn(3, 6),
        r.randn(1, 4, 2, 2),
        r.randn(4, 5).masked_fill(torch.eye(4, 5, dtype=torch.bool), float("nan")),
    )
    add(
        "decomp_linalg2",
        lambda a, b, m, b1, b2, x, w, cw, cb, bw, bb: (
            torch.tensordot(a, b, dims=([1, 2], [0, 1])),
            torch.inner(a, a),
            torch.addbmm(m, b1, b2, beta=0.5, alpha=2.0),
            F.prelu(x, w),
            F.conv2d(x, cw, cb, padding="same"),
            F.conv2d(x, cw[:, :, :, :3], padding="valid"),
            F.batch_norm(x, None, None, bw, bb, training=True, eps=1e-3),
            F.layer_norm(x, (5,), None, bb[:1].expand(5).contiguous()),
            torch.clamp(x, max=w.reshape(3, 1, 1)),
            torch.float_power(x, 2),
        ),
        r.randn(2, 3, 4),
        r.randn(3, 4, 5),
        r.randn(4, 6),
        r.randn(3, 4, 5),
        r.randn(3, 5, 6),
        r.randn(2, 3, 4, 5),
        r.randn(3),
        r.randn(4, 3, 3, 4),
        r.randn(4),
        r.randn(3),
        r.randn(3),
    )
