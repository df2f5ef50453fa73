"""Fallback cases of the extended opset (sorting, scatter, N-d pooling, resampling, transposed convolution,
padding modes, triangles/diagonals, native norms), written to ``refs-core.safetensors`` by ``fallback-refs``.

Kept apart from the base cases so that each suite's random stream, and so its committed reference file, does
not change when the other suite gains a case. Covers 0-d and unbatched inputs, negative dims, int64 and bf16
where the op allows them; plain scatters use distinct indices (PyTorch leaves the winner of duplicate writes
unspecified).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

if TYPE_CHECKING:
    from .fallback_refs import Case, Fn, _Gen

aten = torch.ops.aten


def _perm_index(r: _Gen, rows: int, n: int, k: int) -> torch.Tensor:
    """`rows` rows of `k` distinct indices in [0, n)."""
    return torch.stack([torch.randperm(n, generator=r.g)[:k] for _ in range(rows)])


def core_cases(r: _Gen) -> list[Case]:
    from .fallback_refs import Case, Lambda

    bf16 = torch.bfloat16
    cases: list[Case] = []

    def add(name: str, fn: Fn, *inputs: torch.Tensor) -> None:
        cases.append(Case(name, Lambda(fn, len(inputs)), inputs))

    # order statistics
    add(
        "sort",
        lambda x, i, z: (
            torch.sort(x, dim=-1, descending=True, stable=True),
            torch.argsort(x, dim=1),
            torch.sort(i, dim=0, stable=True),
            torch.sort(i, dim=-1, descending=True, stable=True),
            torch.sort(z, dim=0),
        ),
        r.randn(3, 5, 4),
        r.ints(-3, 3, 4, 6),
        r.randn(),
    )
    add("sort_bf16", lambda x: torch.sort(x, dim=-1, stable=True), r.randn(3, 7, dtype=bf16))
    add(
        "topk_kthvalue",
        lambda x, i: (
            torch.topk(x, 3, dim=-1),
            torch.topk(x, 2, dim=0, largest=False),
            torch.kthvalue(x, 2, dim=1),
            torch.kthvalue(x, 3, dim=-1, keepdim=True),
            torch.topk(i, 2, dim=-1),
        ),
        r.randn(3, 5, 6),
        torch.randperm(24, generator=r.g).reshape(4, 6),
    )
    add(
        "median_mode",
        lambda x, i: (
            torch.median(x, 1),
            torch.median(x, -1, keepdim=True),
            torch.mode(i, 0),
        ),
        r.randn(3, 5, 4),
        r.ints(0, 3, 7, 5),
    )
    # separate: torch_ir names median.default's output like median.dim's first one
    add("median_all", lambda x: torch.median(x) + 1, r.randn(3, 5))
    add(
        "cum",
        lambda x, i: (
            torch.cummax(x, 1),
            torch.cummin(x, -1),
            torch.cumprod(x, 2),
            torch.cummax(i, -1),
            torch.cummin(i, 0),
            torch.cumprod(i, 0),
        ),
        r.randn(2, 5, 4),
        r.ints(-3, 3, 4, 6),
    )
    add(
        "prod_any_all",
        lambda x, i, b: (
            torch.prod(x, 1),
            torch.prod(x),
            torch.prod(i, -1, keepdim=True),
            torch.any(x > 0.5, 1),
            torch.all(x > -1.5),
            torch.all(b, dim=-1),
            torch.any(b),
            torch.count_nonzero(i, 1),
            torch.count_nonzero(i),
        ),
        r.randn(3, 5, 4),
        r.ints(-2, 3, 4, 6),
        r.bools(4, 3),
    )
    # scatter family
    add(
        "scatter",
        lambda x, i, j, s, xi, si, k: (
            x.scatter(1, i, s),
            x.scatter(-1, i, 2.5),
            x.scatter(1, j, s, reduce="add"),
            x.scatter(1, j, s, reduce="multiply"),
            x.scatter_add(1, j, s),
            x.scatter_reduce(1, j, s, "sum", include_self=False),
            x.scatter_reduce(1, j, s, "prod"),
            x.scatter_reduce(1, j, s, "mean"),
            x.scatter_reduce(1, j, s, "mean", include_self=False),
            x.scatter_reduce(1, j, s, "amax"),
            x.scatter_reduce(1, j, s, "amin", include_self=False),
            xi.scatter_add(0, k, si),
            xi.scatter_reduce(0, k, si, "mean"),
        ),
        r.randn(4, 7),
        _perm_index(r, 4, 7, 3),
        r.ints(0, 7, 4, 3),
        r.randn(4, 3),
        r.ints(-9, 9, 6, 4),
        r.ints(-9, 9, 3, 4),
        r.ints(0, 6, 3, 4),
    )
    add(
        "index_put",
        lambda x, i, v, m, j, w, h: (
            aten.index_put(x, [i], v, True),
            aten.index_put(x, [None, j], w),
            x.masked_fill(m, 0.0).index_put((m,), h),
            x.index_add(0, i.abs(), v, alpha=2.0),
            x.index_fill(1, j, -1.0),
            x.index_fill(-1, j, h),
        ),
        r.randn(5, 6),
        torch.tensor([0, 3, 0, -1]),
        r.randn(4, 6),
        r.bools(5, 6),
        torch.tensor([1, 4, 2]),
        r.randn(3),
        r.randn(),
    )
    add(
        "view_scatters",
        lambda x, m, s, r3, r2, d: (
            x.masked_scatter(m, s),
            torch.select_scatter(x, r3, -2, -1),
            torch.slice_scatter(x, r2, 1, 0, 4, 2),
            torch.diagonal_scatter(x, d, 1, -2, -1),
            torch.diagonal_scatter(x, d, -1, 1, 2),
        ),
        r.randn(2, 5, 5),
        r.bools(5, 5),
        r.randn(40),
        r.randn(2, 5),
        r.randn(2, 2, 5),
        r.randn(2, 4),
    )
    add(
        "scatter_int",
        lambda x, i, s, j: (x.scatter(1, i, s), x.index_add(1, j, s)),
        r.ints(-9, 9, 3, 6),
        _perm_index(r, 3, 6, 2),
        r.ints(-9, 9, 3, 2),
        torch.tensor([5, 0]),
    )
    add(
        "take_along_dim",
        lambda x, i, j: (
            torch.take_along_dim(x, i, 1),
            torch.take_along_dim(x, j),
            torch.take_along_dim(x, i[:1], -1),
        ),
        r.randn(3, 5),
        r.ints(0, 5, 3, 4),
        r.ints(0, 15, 6),
    )
    add(
        "int_ops",
        lambda a, b, f, g: (
            torch.floor_divide(a, b),
            a // 3,
            torch.gcd(a, b),
            torch.lcm(a, b),
            a << 2,
            a >> b.abs(),
            torch.bitwise_left_shift(a, b.abs()),
            torch.floor_divide(f, g),
        ),
        r.ints(-20, 20, 3, 4),
        r.ints(1, 7, 4) * torch.tensor([1, -1, 1, -1]),
        r.randn(3, 4) * 5,
        r.pos(4),
    )
    # pooling
    add(
        "pool_nd",
        lambda x1, x3, xu: (
            F.max_pool1d(x1, 3, stride=2, padding=1),
            F.avg_pool1d(x1, 3, stride=2, padding=1, count_include_pad=False),
            F.avg_pool1d(x1, 2, ceil_mode=True),
            F.max_pool3d(x3, 2),
            F.avg_pool3d(x3, (2, 3, 2), stride=1, padding=(1, 1, 0)),
            F.adaptive_avg_pool1d(x1, 4),
            F.adaptive_avg_pool3d(x3, (2, 3, 1)),
            F.adaptive_max_pool1d(x1, 3, return_indices=True),
            F.max_pool1d(xu, 2),
        ),
        r.randn(2, 3, 9),
        r.randn(1, 2, 4, 5, 3),
        r.randn(3, 8),
    )
    add(
        "pool_indices",
        lambda x: (
            F.max_pool2d(x, 3, stride=2, padding=1, return_indices=True),
            F.adaptive_max_pool2d(x, (2, 3), return_indices=True),
        ),
        r.randn(2, 3, 7, 6),
    )
    add(
        "pool_unbatched",
        lambda x: (
            F.max_pool2d(x, 2),
            F.avg_pool2d(x, 3, stride=2, padding=1, divisor_override=5),
            F.adaptive_avg_pool2d(x, (2, 3)),
            F.avg_pool2d(x, 2, ceil_mode=True, count_include_pad=False),
        ),
        r.randn(3, 7, 6),
    )
    # resampling
    add(
        "upsample_modes",
        lambda x, y1, y3: (
            F.interpolate(x, scale_factor=2, mode="bilinear"),
            F.interpolate(x, size=(7, 9), mode="bilinear", align_corners=True),
            F.interpolate(x, scale_factor=1.5, mode="bicubic"),
            F.interpolate(x, size=(6, 11), mode="bicubic", align_corners=True),
            F.interpolate(x, scale_factor=1.7, mode="nearest-exact"),
            F.interpolate(y1, scale_factor=2, mode="linear"),
            F.interpolate(y1, size=11, mode="linear", align_corners=True),
            F.interpolate(y1, scale_factor=3, mode="nearest"),
            F.interpolate(y3, scale_factor=2, mode="nearest"),
            F.interpolate(y3, size=(3, 5, 4), mode="trilinear"),
        ),
        r.randn(1, 2, 4, 5),
        r.randn(2, 3, 5),
        r.randn(1, 2, 2, 3, 2),
    )
    add(
        "upsample_bf16",
        lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"),
        r.randn(1, 2, 3, 4, dtype=bf16),
    )
    add(
        "grid_sample",
        lambda x, g: (
            F.grid_sample(x, g, align_corners=False),
            F.grid_sample(x, g, mode="nearest", padding_mode="border", align_corners=True),
            F.grid_sample(x, g, padding_mode="reflection", align_corners=False),
            F.grid_sample(x, g, padding_mode="reflection", align_corners=True),
            F.grid_sample(x, g, padding_mode="border", align_corners=False),
        ),
        r.randn(2, 3, 5, 6),
        r.randn(2, 4, 3, 2) * 0.8,
    )
    add(
        "pixel_shuffle",
        lambda x, y: (F.pixel_shuffle(x, 2), F.pixel_unshuffle(y, 2)),
        r.randn(2, 8, 3, 2),
        r.randn(1, 2, 4, 6),
    )
    # convolution
    add(
        "conv_transpose",
        lambda x, w, b, x3, w1, wg, xu: (
            F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1),
            F.conv_transpose2d(x, wg, groups=3, dilation=2, padding=(1, 0)),
            F.conv_transpose1d(xu, w1, stride=3),
            F.conv_transpose2d(x3, w),
            F.conv2d(x3, w.transpose(0, 1), padding=1),
            aten.convolution(x, w, b, [1, 1], [1, 1], [1, 1], True, [0, 0], 1),
            aten.convolution(x, w.transpose(0, 1), None, [2, 1], [0, 1], [1, 2], False, [0, 0], 1),
        ),
        r.randn(2, 3, 5, 4),
        r.randn(3, 4, 3, 3),
        r.randn(4),
        r.randn(3, 5, 4),
        r.randn(5, 2, 3),
        r.randn(3, 2, 2, 3),
        r.randn(5, 6),
    )
    add(
        "conv3d",
        lambda x, w: (F.conv3d(x, w, padding=1), F.conv_transpose3d(x, w.transpose(0, 1), stride=2)),
        r.randn(1, 2, 3, 4, 3),
        r.randn(3, 2, 2, 3, 2),
    )
    # reordering and padding
    add(
        "reorder",
        lambda x, i: (
            torch.flip(x, (0, -1)),
            torch.roll(x, 2, -1),
            torch.roll(x, (1, -2), (0, 1)),
            torch.roll(x, 3),
            torch.rot90(x, 1, (1, 2)),
            torch.rot90(x, 2, (-1, 0)),
            torch.rot90(x, -1, (1, 2)),
            torch.flip(i, (1,)),
        ),
        r.randn(2, 3, 4),
        r.ints(-9, 9, 3, 4),
    )
    add(
        "pad_modes",
        lambda x, y, i: (
            F.pad(x, (1, 2), mode="reflect"),
            F.pad(y, (1, 2, 2, 1), mode="reflect"),
            F.pad(y, (2, 1, 0, 3), mode="replicate"),
            F.pad(x, (3, 1), mode="replicate"),
            F.pad(y, (1, 2, 2, 1), mode="circular"),
            F.pad(y, (1, -1, 2, 0), value=2.5),
            F.pad(i, (1, 1), value=7),
        ),
        r.randn(2, 3, 5),
        r.randn(1, 2, 4, 5),
        r.ints(-9, 9, 3, 4),
    )
    # triangles and diagonals, creation
    add(
        "diag",
        lambda x, v, i, m, i4: (
            torch.tril(x),
            torch.triu(x, 1),
            torch.tril(i, -1),
            torch.diag(v, 1),
            torch.diag(m, -1),
            torch.diagonal(x, 0, -2, -1),
            torch.diagonal(x, 1, 0, 2),
            torch.diag_embed(v),
            torch.diag_embed(x, -1, 0, 2),
            torch.eye(3) + v[:3],
            torch.eye(3, 4, dtype=torch.int64) + i4,
        ),
        r.randn(2, 4, 5),
        r.randn(5),
        r.ints(-9, 9, 4, 4),
        r.randn(4, 5),
        r.ints(-9, 9, 4),
    )
    add(
        "linspace_fill",
        lambda x: (
            torch.linspace(-1, 2, 7) + x,
            torch.logspace(0, 2, 7) * x,
            torch.logspace(-1, 3, 7, base=2) + x,
            torch.linspace(0, 1, 1) + x,
            torch.empty_like(x).fill_(1.5),
        ),
        r.randn(7),
    )
    # native norms (three outputs each)
    add(
        "native_norms",
        lambda x, w, b, m, v: (
            aten.native_batch_norm(x, w, b, m, v, False, 0.1, 1e-5),
            aten._native_batch_norm_legit_no_training(x, w, b, m, v, 0.1, 1e-3),
            aten.native_group_norm(x, w, b, 2, 3, 20, 3, 1e-5),
            aten.native_group_norm(x, None, None, 2, 3, 20, 1, 1e-4),
        ),
        r.randn(2, 3, 4, 5),
        r.randn(3),
        r.randn(3),
        r.randn(3),
        r.pos(3),
    )
    # batch_norm whose statistics are graph inputs (the NPU folds weights only: CPU fallback)
    add(
        "bn_stats_inputs",
        lambda x, m, v: F.batch_norm(x, m, v) + 1,
        r.randn(2, 3, 4, 4),
        r.randn(3),
        r.pos(3),
    )
    # 0-d tensors: softmax/log_softmax/sum/mean/cumsum over dim 0 and -1
    add(
        "zero_dim",
        lambda x: (
            F.softmax(x, 0),
            F.log_softmax(x, -1),
            x.sum(0),
            x.mean(-1),
            x.sum(0, keepdim=True),
            torch.cumsum(x, 0),
            torch.cumprod(x, -1),
            torch.argsort(x, 0),
        ),
        r.randn(),
    )
    # added with the OpInfo coverage work: running logaddexp over a wide range (a shift by
    # the maximum would underflow), triangle coordinates, strided views of the storage,
    # embedding max_norm (an in-place renorm through `detach` that the embedding then reads),
    # the max-pool gradient, tensor repeat counts
    wide = torch.tensor([[-200.0, 0.0, float("-inf"), 3.0, -1e3, 50.0]])
    add(
        "logcumsumexp",
        lambda x, w: (torch.logcumsumexp(x, 1), torch.logcumsumexp(x, 0), torch.logcumsumexp(w, -1)),
        r.randn(4, 6),
        wide,
    )
    add(
        "triangle_indices",
        lambda x: (x + 1, torch.tril_indices(5, 6, 1), torch.triu_indices(4, 7, -2)),
        r.randn(2),
    )
    add(
        "as_strided",
        lambda x: (torch.as_strided(x, (3, 3), (1, 3), 2), torch.as_strided(x, (2, 2, 2), (8, 1, 4))),
        r.randn(20),
    )
    add(
        "embedding_renorm",
        lambda i, w: F.embedding(i, w.clone(), max_norm=1.0),
        r.ints(0, 6, 2, 3),
        r.randn(6, 4) * 3,
    )
    add(
        "max_pool_backward",
        lambda x, g: aten.max_pool2d_with_indices_backward(
            g, x, [2, 2], [2, 2], [0, 0], [1, 1], False, aten.max_pool2d_with_indices(x, [2, 2], [2, 2])[1]
        ),
        r.randn(1, 2, 4, 6),
        r.randn(1, 2, 2, 3),
    )
    add(
        "repeat_interleave_tensor",
        lambda x, n: (
            torch.repeat_interleave(x, n, dim=1, output_size=4),
            torch.repeat_interleave(n, output_size=4),
        ),
        r.randn(2, 3),
        torch.tensor([1, 0, 3]),
    )
    return cases
