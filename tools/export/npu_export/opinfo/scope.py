"""Which OpInfos the suite runs: those whose exported graph uses only Core ATen or commonly emitted ops.

An OpInfo is in scope when every ATen op of its first exportable sample's graph is tagged
``torch.Tag.core`` (per overload) or is in `COMMON`: the non-core ops that torch_ir keeps for ordinary
model code (``torch.export`` preserves CompositeImplicit ops such as ``aten.linear``, ``aten.conv1d``,
``aten.unflatten``) and that issue 9 asks us to decompose or run. Random ops, ops whose values are
undefined (``empty``) and CUDA-only test ops are left out by name.
"""

from __future__ import annotations

import functools

import torch

# Sampling ops: their values cannot be compared with eager.
RANDOM = frozenset(
    {
        "bernoulli",
        "cauchy",
        "exponential",
        "geometric",
        "log_normal",
        "multinomial",
        "normal",
        "uniform",
        "rand_like",
        "randint",
        "randint_like",
        "randn",
        "randn_like",
        "svd_lowrank",
        "pca_lowrank",
        "nn.functional.dropout",
        "nn.functional.dropout2d",
        "nn.functional.dropout3d",
        "nn.functional.alpha_dropout",
        "nn.functional.feature_alpha_dropout",
        "nn.functional.rrelu",
        "nn.functional.fractional_max_pool2d",
        "nn.functional.fractional_max_pool3d",
    }
)
# Ops whose output values are unspecified (uninitialized memory) or that resize in place.
UNDEFINED = frozenset(
    {
        "empty",
        "empty_like",
        "empty_permuted",
        "empty_strided",
        "new_empty",
        "new_empty_strided",
        "resize_",
        "resize_as_",
    }
)
# Test-only OpInfos (CUDA jiterator) and sparse layouts: not ATen graphs of dense tensors.
SKIP_PREFIXES = ("jiterator_", "sparse.", "torch._scaled_mm")

# Non-core ATen ops (base names) that torch_ir emits for common model code; issue 9 lists most of them
# as decomposition targets (item 1) or CPU fallback work (item 3).
COMMON = frozenset(
    {
        # nn layers kept whole by torch.export
        "linear",
        "matmul",
        "conv1d",
        "conv2d",
        "conv3d",
        "conv_transpose1d",
        "conv_transpose2d",
        "conv_transpose3d",
        "layer_norm",
        "group_norm",
        "batch_norm",
        "instance_norm",
        "rms_norm",
        "scaled_dot_product_attention",
        "softmax",
        "log_softmax",
        "embedding",
        "one_hot",
        "prelu",
        "max_pool1d",
        "max_pool2d",
        "max_pool3d",
        "max_pool1d_with_indices",
        "avg_pool1d",
        "adaptive_avg_pool1d",
        "adaptive_avg_pool2d",
        "adaptive_avg_pool3d",
        "adaptive_max_pool1d",
        "adaptive_max_pool2d",
        "upsample_nearest1d",
        "upsample_nearest2d",
        "upsample_nearest3d",
        "upsample_linear1d",
        "upsample_bilinear2d",
        "upsample_bicubic2d",
        "upsample_trilinear3d",
        "pad",
        "pixel_shuffle",
        "pixel_unshuffle",
        "channel_shuffle",
        "cosine_similarity",
        # activations and pointwise composites
        "silu",
        "mish",
        "softplus",
        "hardswish",
        "hardsigmoid",
        "relu6",
        "selu",
        "celu",
        "glu",
        "logsigmoid",
        "softshrink",
        "hardshrink",
        "threshold",
        "rsub",
        "subtract",
        "multiply",
        "divide",
        "log_sigmoid",
        "square",
        "addcmul",
        "addcdiv",
        "lerp",
        "clamp_min",
        "clamp_max",
        "floor_divide",
        "true_divide",
        "frac",
        "erfc",
        "exp2",
        "sgn",
        "isfinite",
        "isneginf",
        "isposinf",
        "nan_to_num",
        "hypot",
        "copysign",
        "xlogy",
        "logit",
        "sinc",
        "deg2rad",
        "rad2deg",
        "gcd",
        "lcm",
        "bitwise_left_shift",
        "bitwise_right_shift",
        "__lshift__",
        "__rshift__",
        "fmax",
        "fmin",
        "heaviside",
        "logaddexp",
        "float_power",
        "positive",
        "signbit",
        # reductions
        "logsumexp",
        "std",
        "var_mean",
        "std_mean",
        "norm",
        "linalg_vector_norm",
        "all",
        "aminmax",
        "count_nonzero",
        "nansum",
        "cumprod",
        "cummax",
        "cummin",
        "logcumsumexp",
        "softmin",
        # linear algebra that lowers to matmul
        "addmv",
        "addr",
        "baddbmm",
        "addbmm",
        "einsum",
        "mv",
        "dot",
        "outer",
        "inner",
        "tensordot",
        # views and shape ops
        "reshape",
        "flatten",
        "unflatten",
        "ravel",
        "movedim",
        "moveaxis",
        "numpy_T",
        "t",
        "transpose",
        "mT",
        "expand_as",
        "reshape_as",
        "view_as",
        "broadcast_to",
        "broadcast_tensors",
        "split",
        "chunk",
        "unbind",
        "tensor_split",
        "unsafe_split",
        "unsafe_chunk",
        "narrow",
        "stack",
        "hstack",
        "vstack",
        "dstack",
        "column_stack",
        "atleast_1d",
        "atleast_2d",
        "atleast_3d",
        "tile",
        "repeat_interleave",
        "flip",
        "fliplr",
        "flipud",
        "roll",
        "rot90",
        "diff",
        "tril",
        "triu",
        "contiguous",
        "_unsafe_view",
        "lift_fresh_copy",
        "type_as",
        "to",
        # indexing and scatter/sort
        "argsort",
        "msort",
        "kthvalue",
        "take_along_dim",
        "index_add",
        "index_copy",
        "index_fill",
        "masked_fill",
        "scatter_reduce",
        "index_reduce",
        # creation
        "zeros",
        "ones",
        "zeros_like",
        "ones_like",
        "new_zeros",
        "new_ones",
        "new_full",
        "linspace",
        "logspace",
        "eye",
        "tril_indices",
        "triu_indices",
    }
)


# Bookkeeping nodes that the compiler's canonicalize pass drops.
GLUE = frozenset({"_assert_tensor_metadata", "detach_", "detach", "alias", "lift_fresh_copy"})


def excluded_by_name(name: str) -> str | None:
    """Why an OpInfo (by its ``name``) is left out before sampling, or None."""
    if name in RANDOM:
        return "random op"
    if name in UNDEFINED:
        return "output values undefined"
    if name.startswith(SKIP_PREFIXES):
        return "test-only or sparse op"
    return None


def base_name(op_type: str) -> str:
    """``aten.add.Tensor`` -> ``add``; anything else unchanged."""
    parts = op_type.split(".")
    return parts[1] if len(parts) >= 2 and parts[0] == "aten" else op_type


@functools.cache
def is_core(name: str) -> bool:
    """Whether any overload of ``aten.<name>`` is tagged Core ATen.

    By op, not by overload: torch_ir emits ``aten.sum.default`` and ``aten.max.other`` for ordinary code
    where the core overloads are ``sum.dim_IntList`` and ``max.dim``; they are the same op to run.
    """
    packet = getattr(torch.ops.aten, name, None)
    if packet is None or not hasattr(packet, "overloads"):
        return False
    return any(torch.Tag.core in getattr(packet, o).tags for o in packet.overloads())


def out_of_scope_ops(op_types: list[str]) -> list[str]:
    """The ATen ops of a graph that are neither Core ATen nor in `COMMON` (sorted, unique).

    Non-ATen node types (``getitem`` of a multi-output op) are glue and always in scope.
    """
    bad = {
        t
        for t in op_types
        if t.startswith("aten.")
        and not (is_core(base_name(t)) or base_name(t) in COMMON or base_name(t) in GLUE)
    }
    return sorted(bad)


def aten_op_in_scope(aten_name: str | None) -> bool:
    """For an OpInfo none of whose samples exported: is its named ATen op Core (any overload) or common."""
    if not aten_name:
        return False
    return aten_name in COMMON or is_core(aten_name)
