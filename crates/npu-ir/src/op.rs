//! ATen ops as a typed enum. Parsing fills ATen schema defaults for attrs that
//! `torch.export` dropped because they equalled their default.

use crate::attrs::{Attrs, Scalar};
use crate::composite::Composite;
use crate::ext::ExtOp;
use crate::pointwise::{BinaryOp, TernaryOp, UnaryOp};
use crate::{DType, IrError};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value as Json};

/// Two-operand logical/bitwise ops (`logical_and`, `bitwise_or`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum LogicOp {
    And,
    Or,
    Xor,
}

/// Which extreme a max/min-style reduction picks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum MinMax {
    Max,
    Min,
}

/// 2-D pooling window; `stride` is already defaulted to `kernel` when export left it empty.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pool2d {
    pub kernel: [usize; 2],
    pub stride: [usize; 2],
    pub padding: [usize; 2],
    pub dilation: [usize; 2],
    pub ceil_mode: bool,
}

/// A typed ATen op. View-like ops keep their attrs although the graph's output metadata
/// already fixes their result shape; the compiler uses the attrs to derive strides.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Op {
    Unary(UnaryOp),
    /// `a op (alpha * b)`, both tensors; alpha is 1 except for add/sub.
    Binary {
        op: BinaryOp,
        alpha: f64,
    },
    /// One tensor and a Python scalar: `x op s`, or `s op x` when `scalar_lhs`.
    BinaryScalar {
        op: BinaryOp,
        scalar: f64,
        scalar_lhs: bool,
    },
    Clamp {
        min: Option<f64>,
        max: Option<f64>,
    },
    Conv2d {
        stride: [usize; 2],
        padding: [usize; 2],
        dilation: [usize; 2],
        groups: usize,
    },
    BatchNorm {
        eps: f64,
        training: bool,
    },
    LayerNorm {
        normalized_shape: Vec<usize>,
        eps: f64,
    },
    MaxPool2d(Pool2d),
    AvgPool2d {
        pool: Pool2d,
        count_include_pad: bool,
        divisor_override: Option<i64>,
    },
    AdaptiveAvgPool2d {
        output_size: [usize; 2],
    },
    Linear,
    /// `torch.matmul` semantics (also mm/bmm): batch dims broadcast, 1-D operands promoted.
    Matmul,
    Addmm {
        beta: f64,
        alpha: f64,
    },
    Embedding,
    Softmax {
        dim: i64,
        dtype: Option<DType>,
    },
    Mean {
        dims: Vec<i64>,
        keepdim: bool,
    },
    Sum {
        dims: Vec<i64>,
        keepdim: bool,
    },
    /// view/reshape/flatten/unsqueeze/squeeze: the result shape is the output's.
    Reshape,
    Transpose {
        dim0: i64,
        dim1: i64,
    },
    Permute {
        dims: Vec<i64>,
    },
    Expand {
        size: Vec<i64>,
    },
    Slice {
        dim: i64,
        start: i64,
        end: i64,
        step: i64,
    },
    Cat {
        dim: i64,
    },
    Chunk {
        chunks: usize,
        dim: i64,
    },
    Split {
        split_size: usize,
        dim: i64,
    },
    IndexCopy {
        dim: i64,
    },
    /// Dtype conversion (`to.dtype`, `to.dtype_layout`, `_to_copy`); the target dtype is the output's.
    Cast,
    /// Value-preserving ops: alias, clone, contiguous, detach, lift_fresh_copy.
    Identity,
    Dropout {
        p: f64,
        train: bool,
    },
    GetItem {
        index: usize,
    },
    /// `_assert_tensor_metadata`: a pure check with no output.
    AssertMetadata,
    Full {
        value: f64,
    },
    Sdpa {
        is_causal: bool,
        scale: Option<f64>,
        enable_gqa: bool,
    },
    /// A three-operand pointwise op (`where`, `lerp`, `addcmul`, `clamp` with tensor bounds);
    /// `scalars[i]` is operand i when it is a Python scalar, and the tensor inputs fill the
    /// other slots in order.
    Ternary {
        op: TernaryOp,
        scalars: [Option<f64>; 3],
    },
    /// `masked_fill.Scalar` (value here) or `.Tensor` (value = 0-d input 2, `value` is None).
    MaskedFill {
        value: Option<f64>,
    },
    /// `bitwise_not`: logical not on bool, two's complement not on ints.
    BitwiseNot,
    /// `bitwise_and/or/xor` (`.Tensor`; `.Scalar` keeps the scalar).
    Bitwise {
        op: LogicOp,
        scalar: Option<i64>,
    },
    /// `amax`/`amin` (empty `dims` = all), `max.default`/`min.default` (all dims).
    ReduceMinMax {
        op: MinMax,
        dims: Vec<i64>,
        keepdim: bool,
    },
    /// `max.dim`/`min.dim`: two outputs, values and int64 indices.
    MinMaxDim {
        op: MinMax,
        dim: i64,
        keepdim: bool,
    },
    /// `argmax`/`argmin`; `dim` None = over the flattened input.
    ArgMinMax {
        op: MinMax,
        dim: Option<i64>,
        keepdim: bool,
    },
    /// `beta * input + alpha * (batch1 @ batch2)`.
    Baddbmm {
        beta: f64,
        alpha: f64,
    },
    Stack {
        dim: i64,
    },
    /// `gather(self, dim, index)`.
    Gather {
        dim: i64,
    },
    /// `index_select(self, dim, index)`.
    IndexSelect {
        dim: i64,
    },
    /// Inclusive prefix sum along `dim`; the accumulation dtype is the output's.
    Cumsum {
        dim: i64,
    },
    /// `arange` (all overloads): `start + i * step`; length and dtype are the output's.
    Arange {
        start: f64,
        end: f64,
        step: f64,
    },
    /// `zeros_like`/`ones_like`/`full_like`/`new_zeros`/`new_ones`/`new_full`: a constant
    /// with the output's shape and dtype; the tensor input is only a template.
    FullLike {
        value: f64,
    },
    /// `group_norm(x, num_groups, weight?, bias?, eps)`.
    GroupNorm {
        num_groups: usize,
        eps: f64,
    },
    LogSoftmax {
        dim: i64,
        dtype: Option<DType>,
    },
    /// `upsample_nearest2d(.vec)`: the output size is the output's; `scales` (h, w) are the
    /// scale factors when given (they decide the source index, as in ATen).
    UpsampleNearest2d {
        scales: Option<[f64; 2]>,
    },
    /// `index.Tensor`: advanced indexing; `indexed[d]` says whether dim d has an index tensor
    /// (the index tensors are inputs 1.., in dim order).
    Index {
        indexed: Vec<bool>,
    },
    /// The extended opset (sorting, scatter, N-d pooling, resampling, padding, ...): CPU
    /// fallback ops, typed in `ext.rs`.
    Ext(ExtOp),
    /// A composite op (see [`crate::composite`]): rewritten into primitives by the
    /// compiler's decomposition pass before placement, compilation or interpretation.
    Composite(Composite),
    /// Any op this crate does not type, kept by name for the partitioner.
    Unknown {
        op_type: String,
        attrs: Map<String, Json>,
    },
}

/// Splits `aten.add_.Tensor` into (`add`, `Tensor`, in_place = true).
pub(crate) fn split_op_type(op_type: &str) -> Option<(&str, &str, bool)> {
    let rest = op_type.strip_prefix("aten.")?;
    let (name, overload) = rest.split_once('.').unwrap_or((rest, "default"));
    match name.strip_suffix('_') {
        Some(base) if !base.is_empty() && !base.ends_with('_') => Some((base, overload, true)),
        _ => Some((name, overload, false)),
    }
}

fn usize_pair(a: &Attrs, key: &str, v: Vec<i64>) -> Result<[usize; 2], IrError> {
    match v.as_slice() {
        [x, y] if *x >= 0 && *y >= 0 => Ok([*x as usize, *y as usize]),
        _ => Err(a.err(
            key,
            format!("expected two non-negative integers, got {v:?}"),
        )),
    }
}

fn pool2d(a: &Attrs, stride_default_kernel: bool) -> Result<Pool2d, IrError> {
    let kernel = usize_pair(a, "kernel_size", a.ints_or("kernel_size", 2, &[])?)?;
    let stride = a.ints_or("stride", 2, &[])?;
    let stride = if stride.is_empty() && stride_default_kernel {
        kernel
    } else {
        usize_pair(a, "stride", stride)?
    };
    let dilation = usize_pair(a, "dilation", a.ints_or("dilation", 2, &[1, 1])?)?;
    // zero sizes have no window (ATen refuses them; found by the IR fuzzer, which got a
    // kernel of 0 past `check` and into a program `compile` then refused)
    for (key, v) in [
        ("kernel_size", kernel),
        ("stride", stride),
        ("dilation", dilation),
    ] {
        if v.contains(&0) {
            return Err(a.err(key, format!("must be positive, got {v:?}")));
        }
    }
    Ok(Pool2d {
        kernel,
        stride,
        padding: usize_pair(a, "padding", a.ints_or("padding", 2, &[0, 0])?)?,
        dilation,
        ceil_mode: a.bool_or("ceil_mode", false)?,
    })
}

impl Op {
    /// Types one node. `n_inputs` is the number of tensor inputs (an absent optional tensor
    /// or a Python scalar in a tensor slot removes one), `in_rank` the rank of input 0.
    /// Returns the op and whether the node was an in-place (`op_`) variant.
    pub(crate) fn parse(
        node: &str,
        op_type: &str,
        attrs: &Map<String, Json>,
        n_inputs: usize,
        in_rank: usize,
    ) -> Result<(Op, bool), IrError> {
        let a = Attrs {
            node,
            op_type,
            map: attrs,
        };
        let unknown = || Op::Unknown {
            op_type: op_type.to_string(),
            attrs: attrs.clone(),
        };
        if op_type == "<built-in function getitem>" {
            let index = a.i64_or("index", -1)?;
            if index < 0 {
                return Err(a.err("index", "getitem needs a non-negative index"));
            }
            return Ok((
                Op::GetItem {
                    index: index as usize,
                },
                false,
            ));
        }
        let Some((name, overload, inplace)) = split_op_type(op_type) else {
            return Ok((unknown(), false));
        };
        if let Some(op) = crate::pointwise::parse(&a, name, overload, n_inputs)? {
            return Ok((op, inplace));
        }
        let op = match (name, overload) {
            // `pointwise::parse` takes rsub with alpha 1; other alphas decompose.
            ("rsub", "Scalar") => Op::Composite(Composite::Rsub {
                alpha: a.f64_or("alpha", 1.0)?,
                scalar: Some(
                    a.scalar("other")?
                        .ok_or_else(|| a.err("other", "missing"))?
                        .as_f64(),
                ),
            }),
            ("conv2d", "default") => {
                if !(2..=3).contains(&n_inputs) {
                    return Err(bad(node, op_type, format!("conv2d takes input, weight and an optional bias, got {n_inputs} inputs")));
                }
                let groups = a.i64_or("groups", 1)?;
                if groups < 1 {
                    return Err(a.err("groups", "must be at least 1"));
                }
                Op::Conv2d {
                    stride: usize_pair(&a, "stride", a.ints_or("stride", 2, &[1, 1])?)?,
                    padding: usize_pair(&a, "padding", a.ints_or("padding", 2, &[0, 0])?)?,
                    dilation: usize_pair(&a, "dilation", a.ints_or("dilation", 2, &[1, 1])?)?,
                    groups: groups as usize,
                }
            }
            // training mode normalizes with batch statistics: a composite
            ("batch_norm", "default") if !a.bool_or("training", false)? => Op::BatchNorm {
                eps: a.f64_or("eps", 1e-5)?,
                training: a.bool_or("training", false)?,
            },
            ("layer_norm", "default") => {
                let normalized_shape: Vec<usize> = a
                    .ints("normalized_shape")?
                    .into_iter()
                    .map(|d| d.max(0) as usize)
                    .collect();
                let eps = a.f64_or("eps", 1e-5)?;
                if crate::composite::bias_only(&a, n_inputs)? {
                    Op::Composite(Composite::NativeLayerNorm {
                        normalized_shape,
                        eps,
                        bias_only: true,
                    })
                } else {
                    Op::LayerNorm {
                        normalized_shape,
                        eps,
                    }
                }
            }
            ("max_pool2d", "default") => Op::MaxPool2d(pool2d(&a, true)?),
            ("avg_pool2d", "default") => Op::AvgPool2d {
                pool: pool2d(&a, true)?,
                count_include_pad: a.bool_or("count_include_pad", true)?,
                divisor_override: a.scalar("divisor_override")?.map(|s| s.as_f64() as i64),
            },
            ("adaptive_avg_pool2d", "default") => Op::AdaptiveAvgPool2d {
                output_size: usize_pair(&a, "output_size", a.ints_or("output_size", 2, &[])?)?,
            },
            ("linear", "default") => Op::Linear,
            ("matmul" | "mm" | "bmm", "default") => Op::Matmul,
            ("addmm", "default") => Op::Addmm {
                beta: a.f64_or("beta", 1.0)?,
                alpha: a.f64_or("alpha", 1.0)?,
            },
            ("t", "default") => match in_rank {
                0 | 1 => Op::Identity,
                _ => Op::Transpose { dim0: 0, dim1: 1 },
            },
            ("embedding", "default") => Op::Embedding,
            ("softmax", "int") | ("_softmax", "default") => Op::Softmax {
                dim: a.i64_or("dim", -1)?,
                dtype: a.dtype("dtype")?,
            },
            ("mean", "dim") => Op::Mean {
                dims: a.ints_or("dim", 1, &[])?,
                keepdim: a.bool_or("keepdim", false)?,
            },
            ("sum", "dim_IntList") => Op::Sum {
                dims: a.ints_or("dim", 1, &[])?,
                keepdim: a.bool_or("keepdim", false)?,
            },
            ("view" | "reshape" | "_unsafe_view", _)
            | ("unsqueeze" | "squeeze", _)
            | ("flatten", "using_ints") => Op::Reshape,
            ("transpose", "int") => Op::Transpose {
                dim0: a.i64_or("dim0", 0)?,
                dim1: a.i64_or("dim1", 1)?,
            },
            ("permute", "default") => Op::Permute {
                dims: a.ints("dims")?,
            },
            ("expand", "default") => Op::Expand {
                size: a.ints("size")?,
            },
            ("slice", "Tensor") => {
                let step = a.i64_or("step", 1)?;
                if step < 1 {
                    return Err(a.err("step", format!("slice step must be positive, got {step}")));
                }
                Op::Slice {
                    dim: a.i64_or("dim", 0)?,
                    start: a.i64_or("start", 0)?,
                    end: a.i64_or("end", i64::MAX)?,
                    step,
                }
            }
            ("cat" | "concat", "default") => Op::Cat {
                dim: a.i64_or("dim", 0)?,
            },
            ("chunk" | "unsafe_chunk", "default") => {
                let chunks = a.i64_or("chunks", 0)?;
                if chunks < 1 {
                    return Err(a.err("chunks", "must be at least 1"));
                }
                Op::Chunk {
                    chunks: chunks as usize,
                    dim: a.i64_or("dim", 0)?,
                }
            }
            ("split" | "unsafe_split", "Tensor") => {
                let s = a.i64_or("split_size", 0)?;
                if s < 1 {
                    return Err(a.err("split_size", "must be at least 1"));
                }
                Op::Split {
                    split_size: s as usize,
                    dim: a.i64_or("dim", 0)?,
                }
            }
            ("index_copy", "default") => Op::IndexCopy {
                dim: a.i64_or("dim", 0)?,
            },
            ("to", "dtype" | "dtype_layout" | "other" | "device")
            | ("_to_copy", "default")
            | ("type_as", "default") => Op::Cast,
            ("alias" | "clone" | "contiguous" | "detach" | "lift_fresh_copy", _) => Op::Identity,
            ("dropout", "default") => Op::Dropout {
                p: a.f64_or("p", 0.5)?,
                train: a.bool_or("train", true)?,
            },
            ("_assert_tensor_metadata", _) => Op::AssertMetadata,
            ("full", "default") => Op::Full {
                value: a.f64_or("fill_value", 0.0)?,
            },
            ("zeros", "default") => Op::Full { value: 0.0 },
            ("ones", "default") => Op::Full { value: 1.0 },
            ("scaled_dot_product_attention", "default") if a.f64_or("dropout_p", 0.0)? != 0.0 => {
                return Err(a.err(
                    "dropout_p",
                    "attention dropout is random (a training-mode export): export in eval mode",
                ));
            }
            ("scaled_dot_product_attention", "default") => Op::Sdpa {
                is_causal: a.bool_or("is_causal", false)?,
                scale: a.scalar("scale")?.map(Scalar::as_f64),
                enable_gqa: a.bool_or("enable_gqa", false)?,
            },
            ("bitwise_not", "default") => Op::BitwiseNot,
            (
                "bitwise_and" | "bitwise_or" | "bitwise_xor" | "__and__" | "__or__" | "__xor__",
                "Tensor" | "Scalar",
            ) => {
                let scalar = if n_inputs >= 2 {
                    None
                } else {
                    match a.scalar("other")? {
                        Some(Scalar::Int(i)) => Some(i),
                        Some(Scalar::Bool(b)) => Some(i64::from(b)),
                        _ => {
                            return Err(a.err("other", "bitwise op needs an integer or bool scalar"))
                        }
                    }
                };
                Op::Bitwise {
                    op: logic_op(name),
                    scalar,
                }
            }
            ("amax" | "amin", "default") => Op::ReduceMinMax {
                op: min_max(name),
                dims: a.ints_or("dim", 1, &[])?,
                keepdim: a.bool_or("keepdim", false)?,
            },
            ("max" | "min", "default") => Op::ReduceMinMax {
                op: min_max(name),
                dims: Vec::new(),
                keepdim: false,
            },
            ("max" | "min", "dim") => Op::MinMaxDim {
                op: min_max(name),
                dim: a.i64_or("dim", 0)?,
                keepdim: a.bool_or("keepdim", false)?,
            },
            ("argmax" | "argmin", "default") => Op::ArgMinMax {
                op: min_max(&name[3..]),
                dim: a.has("dim").then(|| a.i64_or("dim", 0)).transpose()?,
                keepdim: a.bool_or("keepdim", false)?,
            },
            ("sum", "default") => Op::Sum {
                dims: Vec::new(),
                keepdim: false,
            },
            ("mean", "default") => Op::Mean {
                dims: Vec::new(),
                keepdim: false,
            },
            ("baddbmm", "default") => Op::Baddbmm {
                beta: a.f64_or("beta", 1.0)?,
                alpha: a.f64_or("alpha", 1.0)?,
            },
            ("stack", "default") => Op::Stack {
                dim: a.i64_or("dim", 0)?,
            },
            ("gather", "default") => Op::Gather {
                dim: a.i64_or("dim", 0)?,
            },
            ("index_select", "default") => Op::IndexSelect {
                dim: a.i64_or("dim", 0)?,
            },
            ("cumsum", "default") => Op::Cumsum {
                dim: a.i64_or("dim", 0)?,
            },
            ("arange", "default" | "start" | "start_step") => {
                let get = |k: &str| -> Result<Option<f64>, IrError> {
                    Ok(a.scalar(k)?.map(Scalar::as_f64))
                };
                let end = get("end")?.ok_or_else(|| a.err("end", "arange needs `end`"))?;
                let step = get("step")?.unwrap_or(1.0);
                if step == 0.0 {
                    return Err(a.err("step", "arange step must be non-zero"));
                }
                Op::Arange {
                    start: get("start")?.unwrap_or(0.0),
                    end,
                    step,
                }
            }
            ("zeros_like" | "new_zeros" | "empty_like" | "new_empty", _) => {
                Op::FullLike { value: 0.0 }
            }
            ("ones_like" | "new_ones", _) => Op::FullLike { value: 1.0 },
            ("full_like" | "new_full", "default") => Op::FullLike {
                value: a
                    .scalar("fill_value")?
                    .ok_or_else(|| a.err("fill_value", "required attribute is missing"))?
                    .as_f64(),
            },
            ("empty", "memory_format" | "default") => Op::Full { value: 0.0 },
            ("group_norm", "default") => {
                let g = a.i64_or("num_groups", 0)?;
                if g < 1 {
                    return Err(a.err("num_groups", "must be at least 1"));
                }
                let eps = a.f64_or("eps", 1e-5)?;
                if crate::composite::bias_only(&a, n_inputs)? {
                    Op::Composite(Composite::NativeGroupNorm {
                        groups: g as usize,
                        eps,
                        bias_only: true,
                    })
                } else {
                    Op::GroupNorm {
                        num_groups: g as usize,
                        eps,
                    }
                }
            }
            ("log_softmax", "int") | ("_log_softmax", "default") => Op::LogSoftmax {
                dim: a.i64_or("dim", -1)?,
                dtype: a.dtype("dtype")?,
            },
            ("upsample_nearest2d", "vec" | "default") => {
                let scales = if overload == "vec" {
                    match a.map.get("scale_factors") {
                        Some(Json::Array(v)) if !v.is_empty() => {
                            let f: Vec<f64> = v.iter().filter_map(crate::attrs::json_f64).collect();
                            match f.as_slice() {
                                [h, w] => Some([*h, *w]),
                                [s] => Some([*s, *s]),
                                _ => {
                                    return Err(a.err("scale_factors", "expected one or two floats"))
                                }
                            }
                        }
                        _ => None,
                    }
                } else {
                    match (a.scalar("scales_h")?, a.scalar("scales_w")?) {
                        (Some(h), Some(w)) => Some([h.as_f64(), w.as_f64()]),
                        _ => None,
                    }
                };
                Op::UpsampleNearest2d { scales }
            }
            ("index", "Tensor") => Op::Index {
                indexed: index_mask(&a, n_inputs.saturating_sub(1))?,
            },
            ("fill", "Scalar") => Op::FullLike {
                value: a
                    .scalar("value")?
                    .ok_or_else(|| a.err("value", "required attribute is missing"))?
                    .as_f64(),
            },
            _ => match crate::composite::parse(&a, name, overload, n_inputs, in_rank)? {
                Some(c) => c,
                None => match crate::ext::parse(&a, name, overload, n_inputs)? {
                    Some(e) => Op::Ext(e),
                    None => unknown(),
                },
            },
        };
        Ok((op, inplace))
    }

    /// A short human name (`conv2d`, `add`, `unknown:aten.foo.default`).
    pub fn name(&self) -> String {
        match self {
            Op::Unary(u) => u.name().to_string(),
            Op::Binary { op, .. } => op.name().to_string(),
            Op::BinaryScalar { op, .. } => format!("{}_scalar", op.name()),
            Op::Ternary { op, .. } => op.name().to_string(),
            Op::Unknown { op_type, .. } => op_type.clone(),
            Op::Ext(e) => e.name(),
            Op::Composite(c) => c.name().to_string(),
            other => {
                let dbg = format!("{other:?}");
                let head = dbg
                    .split(|c: char| !c.is_alphanumeric())
                    .next()
                    .unwrap_or("");
                to_snake(head)
            }
        }
    }
}

fn logic_op(name: &str) -> LogicOp {
    let name = name.trim_end_matches('_');
    if name.ends_with("and") {
        LogicOp::And
    } else if name.ends_with("xor") {
        LogicOp::Xor
    } else {
        LogicOp::Or
    }
}

fn min_max(name: &str) -> MinMax {
    if name.ends_with("max") {
        MinMax::Max
    } else {
        MinMax::Min
    }
}

pub(crate) fn to_snake(s: &str) -> String {
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

/// Which dims of an `index.Tensor`/`index_put` have an index tensor: torch_ir records
/// `True` in `_tensor_list_none_masks` for a `None` entry; without it, the `n_tensors`
/// index tensors index the leading dims.
pub(crate) fn index_mask(a: &Attrs, n_tensors: usize) -> Result<Vec<bool>, IrError> {
    let present: Vec<bool> = match a.map.get("_tensor_list_none_masks") {
        Some(Json::Array(lists)) if !lists.is_empty() => match &lists[0] {
            Json::Array(m) => m.iter().map(|b| b.as_bool() != Some(true)).collect(),
            _ => return Err(a.err("_tensor_list_none_masks", "expected a list of bools")),
        },
        _ => vec![true; n_tensors],
    };
    let n = present.iter().filter(|p| **p).count();
    if n != n_tensors {
        return Err(bad(
            a.node,
            a.op_type,
            format!("{n} index tensors declared, {n_tensors} given"),
        ));
    }
    Ok(present)
}

fn bad(node: &str, op_type: &str, message: String) -> IrError {
    IrError::BadNode {
        node: node.to_string(),
        op_type: op_type.to_string(),
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(op_type: &str, attrs: &str, n: usize) -> Result<(Op, bool), IrError> {
        let m: Map<String, Json> = serde_json::from_str(attrs).unwrap();
        Op::parse("n", op_type, &m, n, 4)
    }

    #[test]
    fn inplace_ops_are_flagged() {
        assert_eq!(
            split_op_type("aten.add_.Tensor"),
            Some(("add", "Tensor", true))
        );
        assert_eq!(
            split_op_type("aten._assert_tensor_metadata.default"),
            Some(("_assert_tensor_metadata", "default", false))
        );
        assert_eq!(
            parse("aten.relu_.default", "{}", 1).unwrap(),
            (Op::Unary(UnaryOp::Relu), true)
        );
        assert_eq!(
            parse("aten.index_copy_.default", r#"{"dim": 2}"#, 3).unwrap(),
            (Op::IndexCopy { dim: 2 }, true)
        );
    }

    #[test]
    fn conv_defaults_are_filled() {
        let (op, _) = parse("aten.conv2d.default", r#"{"stride": [2, 2]}"#, 2).unwrap();
        assert_eq!(
            op,
            Op::Conv2d {
                stride: [2, 2],
                padding: [0, 0],
                dilation: [1, 1],
                groups: 1
            }
        );
    }

    #[test]
    fn max_pool_stride_defaults_to_kernel() {
        let (op, _) = parse("aten.max_pool2d.default", r#"{"kernel_size": [3, 3]}"#, 1).unwrap();
        let Op::MaxPool2d(p) = op else { panic!() };
        assert_eq!(p.stride, [3, 3]);
        assert_eq!(p.dilation, [1, 1]);
        assert!(!p.ceil_mode);
    }

    #[test]
    fn scalar_in_tensor_slot_becomes_binary_scalar() {
        let (op, _) = parse("aten.mul.Tensor", r#"{"other": 0.5}"#, 1).unwrap();
        assert_eq!(
            op,
            Op::BinaryScalar {
                op: BinaryOp::Mul,
                scalar: 0.5,
                scalar_lhs: false
            }
        );
        let (op, _) = parse("aten.div.Tensor", r#"{"other": 4}"#, 1).unwrap();
        assert_eq!(
            op,
            Op::BinaryScalar {
                op: BinaryOp::Div,
                scalar: 4.0,
                scalar_lhs: false
            }
        );
        let (op, _) = parse("aten.pow.Tensor_Scalar", r#"{"exponent": 2}"#, 1).unwrap();
        assert_eq!(
            op,
            Op::BinaryScalar {
                op: BinaryOp::Pow,
                scalar: 2.0,
                scalar_lhs: false
            }
        );
    }

    #[test]
    fn slice_open_end_is_int64_max() {
        let (op, _) = parse(
            "aten.slice.Tensor",
            r#"{"dim": 3, "start": 64, "end": 9223372036854775807}"#,
            1,
        )
        .unwrap();
        assert_eq!(
            op,
            Op::Slice {
                dim: 3,
                start: 64,
                end: i64::MAX,
                step: 1
            }
        );
    }

    #[test]
    fn stringified_dtype_attr() {
        let (op, _) = parse(
            "aten.softmax.int",
            r#"{"dim": -1, "dtype": "torch.float32"}"#,
            1,
        )
        .unwrap();
        assert_eq!(
            op,
            Op::Softmax {
                dim: -1,
                dtype: Some(DType::F32)
            }
        );
        let err = parse(
            "aten.softmax.int",
            r#"{"dim": -1, "dtype": "torch.float8"}"#,
            1,
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("unknown dtype 'torch.float8'"),
            "{err}"
        );
    }

    #[test]
    fn unknown_ops_are_kept_by_name() {
        let (op, _) = parse("aten.special_zeta.default", "{}", 1).unwrap();
        assert_eq!(op.name(), "aten.special_zeta.default");
        let (op, _) = parse("wrap_with_set_grad_enabled", "{}", 2).unwrap();
        assert!(matches!(op, Op::Unknown { .. }));
    }

    #[test]
    fn names_are_snake_case() {
        assert_eq!(
            Op::AdaptiveAvgPool2d {
                output_size: [1, 1]
            }
            .name(),
            "adaptive_avg_pool2d"
        );
        assert_eq!(Op::IndexCopy { dim: 0 }.name(), "index_copy");
    }

    #[test]
    fn fallback_ops_are_typed_with_defaults() {
        let p = |t: &str, a: &str, n: usize| parse(t, a, n).unwrap().0;
        assert_eq!(
            p("aten.where.ScalarOther", r#"{"other": 0.5}"#, 2),
            Op::Ternary {
                op: TernaryOp::Where,
                scalars: [None, None, Some(0.5)]
            }
        );
        assert_eq!(
            p("aten.masked_fill.Scalar", r#"{"value": -1e4}"#, 2),
            Op::MaskedFill { value: Some(-1e4) }
        );
        assert_eq!(
            p("aten.masked_fill.Tensor", "{}", 3),
            Op::MaskedFill { value: None }
        );
        assert_eq!(
            p("aten.ge.Scalar", r#"{"other": 0}"#, 1),
            Op::BinaryScalar {
                op: BinaryOp::Ge,
                scalar: 0.0,
                scalar_lhs: false
            }
        );
        assert_eq!(
            p("aten.__and__.Tensor", "{}", 2),
            Op::Bitwise {
                op: LogicOp::And,
                scalar: None
            }
        );
        assert_eq!(
            p("aten.max.dim", r#"{"dim": -1}"#, 1),
            Op::MinMaxDim {
                op: MinMax::Max,
                dim: -1,
                keepdim: false
            }
        );
        assert_eq!(
            p("aten.amin.default", r#"{"dim": [0, 2]}"#, 1),
            Op::ReduceMinMax {
                op: MinMax::Min,
                dims: vec![0, 2],
                keepdim: false
            }
        );
        assert_eq!(
            p("aten.argmax.default", "{}", 1),
            Op::ArgMinMax {
                op: MinMax::Max,
                dim: None,
                keepdim: false
            }
        );
        assert_eq!(
            p("aten.sum.default", "{}", 1),
            Op::Sum {
                dims: vec![],
                keepdim: false
            }
        );
        assert_eq!(
            p("aten.arange.default", r#"{"end": 16, "device": "meta"}"#, 0),
            Op::Arange {
                start: 0.0,
                end: 16.0,
                step: 1.0
            }
        );
        assert_eq!(
            p(
                "aten.arange.start_step",
                r#"{"start": 1, "end": 22, "step": 3}"#,
                0
            ),
            Op::Arange {
                start: 1.0,
                end: 22.0,
                step: 3.0
            }
        );
        assert_eq!(
            p("aten.new_ones.default", r#"{"size": []}"#, 1),
            Op::FullLike { value: 1.0 }
        );
        assert_eq!(p("aten.relu6.default", "{}", 1), Op::Unary(UnaryOp::Relu6));
        assert_eq!(
            p(
                "aten.hardtanh.default",
                r#"{"min_val": 0.0, "max_val": 6.0}"#,
                1
            ),
            Op::Unary(UnaryOp::Relu6)
        );
        assert_eq!(
            p("aten.hardtanh.default", "{}", 1),
            Op::Clamp {
                min: Some(-1.0),
                max: Some(1.0)
            }
        );
        assert_eq!(
            p("aten.leaky_relu.default", "{}", 1),
            Op::Unary(UnaryOp::LeakyRelu {
                negative_slope: 0.01
            })
        );
        assert_eq!(
            p("aten.group_norm.default", r#"{"num_groups": 3}"#, 3),
            Op::GroupNorm {
                num_groups: 3,
                eps: 1e-5
            }
        );
        assert_eq!(
            p("aten.baddbmm.default", r#"{"beta": 0.5}"#, 3),
            Op::Baddbmm {
                beta: 0.5,
                alpha: 1.0
            }
        );
        assert_eq!(
            p(
                "aten.upsample_nearest2d.vec",
                r#"{"scale_factors": [2.0, 2.0]}"#,
                1
            ),
            Op::UpsampleNearest2d {
                scales: Some([2.0, 2.0])
            }
        );
        assert_eq!(
            p(
                "aten.upsample_nearest2d.vec",
                r#"{"output_size": [7, 11]}"#,
                1
            ),
            Op::UpsampleNearest2d { scales: None }
        );
        assert_eq!(
            p(
                "aten.index.Tensor",
                r#"{"_tensor_list_sizes": [2], "_tensor_list_none_masks": [[true, false, false]]}"#,
                3
            ),
            Op::Index {
                indexed: vec![false, true, true]
            }
        );
        assert_eq!(p("aten.max.other", "{}", 2).name(), "max");
        assert!(parse("aten.where.self", "{}", 2).is_err());
        assert!(parse("aten.arange.start_step", r#"{"end": 3, "step": 0}"#, 0).is_err());
    }
}
