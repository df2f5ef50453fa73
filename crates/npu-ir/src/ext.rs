//! The extended opset: Core ATen ops beyond the NPU set (sorting, scatter, N-d pooling and
//! resampling, transposed convolution, padding modes, triangular/diagonal ops, ...), typed
//! with their ATen defaults for the CPU fallback interpreter. `Op::Ext` wraps them, so a
//! target gives one decision for the family and the fallback one dispatch.
//!
//! Every variant keeps dims as given (possibly negative); kernels normalize them against
//! the input rank, which is only known with the operands.

use crate::attrs::{Attrs, Scalar};
use crate::op::MinMax;
use crate::IrError;
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;

/// How `scatter_reduce`/`scatter(reduce=)`/`index_put(accumulate)` combine values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Reduction {
    Sum,
    Prod,
    Mean,
    Amax,
    Amin,
}

/// Integer-semantics binary ops (`floor_divide` also takes floats).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum IntOp {
    FloorDivide,
    Gcd,
    Lcm,
    Shl,
    Shr,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PadMode {
    Constant,
    Reflect,
    Replicate,
    Circular,
}

/// Interpolation of `upsample_*` and `grid_sampler_2d`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Interp {
    Nearest,
    /// `nearest-exact`: the source of `d` is `floor((d + 0.5) * scale)`.
    NearestExact,
    /// linear, bilinear, trilinear: separable per spatial dim.
    Linear,
    /// bicubic (A = -0.75), borders clamped.
    Cubic,
}

/// Out-of-range handling of `grid_sampler_2d`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum GridPadding {
    Zeros,
    Border,
    Reflection,
}

/// N-d window pooling (1 to 3 spatial dims, the last of the input). `stride` is already
/// defaulted to `kernel`; every list has one entry per spatial dim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Window {
    pub kernel: Vec<usize>,
    pub stride: Vec<usize>,
    pub padding: Vec<usize>,
    pub dilation: Vec<usize>,
    pub ceil_mode: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ExtOp {
    /// `sort` (values and int64 indices; always stable) or `argsort` (indices only).
    Sort {
        dim: i64,
        descending: bool,
        indices_only: bool,
    },
    TopK {
        k: usize,
        dim: i64,
        largest: bool,
    },
    KthValue {
        k: usize,
        dim: i64,
        keepdim: bool,
    },
    /// `median.default` (dim None: the lower median of all, one output) or `median.dim`.
    Median {
        dim: Option<i64>,
        keepdim: bool,
    },
    /// The most frequent value (smallest on ties) and an index of it.
    Mode {
        dim: i64,
        keepdim: bool,
    },
    /// `cummax`/`cummin`: running extreme and the index where it was reached.
    CumExtreme {
        op: MinMax,
        dim: i64,
    },
    Cumprod {
        dim: i64,
    },
    /// `prod.default` (dim None) or `prod.dim_int`.
    Prod {
        dim: Option<i64>,
        keepdim: bool,
    },
    /// `any`/`all` over `dims` (empty = all); bool result.
    AnyAll {
        all: bool,
        dims: Vec<i64>,
        keepdim: bool,
    },
    /// Number of non-zero elements over `dims` (empty = all); int64 result.
    CountNonzero {
        dims: Vec<i64>,
    },
    /// `scatter` (`src` tensor, or `value`), `scatter_add`, `scatter_reduce`: a copy of
    /// self where `out[.. index[i] ..] (op)= src[i]`; without `reduce` the last write wins.
    Scatter {
        dim: i64,
        value: Option<f64>,
        reduce: Option<Reduction>,
        include_self: bool,
    },
    /// `take_along_dim(self, indices, dim)`: gather after broadcasting all other dims;
    /// without a dim, over the flattened input.
    TakeAlongDim {
        dim: Option<i64>,
    },
    /// `floor_divide`, `gcd`, `lcm`, `bitwise_left_shift`/`__lshift__`, right shifts, with
    /// broadcasting; `scalar` is the right operand of the `.Scalar` forms.
    IntBinary {
        op: IntOp,
        scalar: Option<f64>,
    },
    /// `index_put(self, indices, values, accumulate)`; `indexed[d]` as for `index.Tensor`.
    IndexPut {
        indexed: Vec<bool>,
        accumulate: bool,
    },
    /// `index_add(self, dim, index, source, alpha)`.
    IndexAdd {
        dim: i64,
        alpha: f64,
    },
    /// `index_fill(self, dim, index, value)`; value None = 0-d tensor input 2.
    IndexFill {
        dim: i64,
        value: Option<f64>,
    },
    /// `masked_scatter(self, mask, source)`: masked positions take source's elements in order.
    MaskedScatter,
    SelectScatter {
        dim: i64,
        index: i64,
    },
    SliceScatter {
        dim: i64,
        start: i64,
        end: i64,
        step: i64,
    },
    DiagonalScatter {
        offset: i64,
        dim1: i64,
        dim2: i64,
    },
    /// `max_pool{1,3}d`, `max_pool{2,3}d_with_indices` (second output: flat int64 indices
    /// into each input plane).
    MaxPool {
        window: Window,
        with_indices: bool,
    },
    /// `avg_pool{1,3}d` (2-D keeps `Op::AvgPool2d`).
    AvgPool {
        window: Window,
        count_include_pad: bool,
        divisor_override: Option<i64>,
    },
    /// `adaptive_{max,avg}_pool{1,2,3}d` not typed elsewhere; max also returns indices.
    AdaptivePool {
        max: bool,
        output_size: Vec<usize>,
    },
    /// `upsample_{nearest,linear,bilinear,bicubic,trilinear}Nd(.vec)` and the
    /// `_upsample_nearest_exact` forms. `scales[d]` is the scale factor of spatial dim d
    /// when export recorded one (it decides source coordinates, as in ATen).
    Upsample {
        interp: Interp,
        align_corners: bool,
        scales: Vec<Option<f64>>,
    },
    GridSample {
        interp: Interp,
        padding: GridPadding,
        align_corners: bool,
    },
    /// `convolution`, `conv_transpose{1,2,3}d`, `conv{1,3}d`: N-d (1 to 3 spatial dims),
    /// batched or not; lists have one entry per spatial dim.
    Convolution {
        stride: Vec<usize>,
        padding: Vec<usize>,
        dilation: Vec<usize>,
        transposed: bool,
        output_padding: Vec<usize>,
        groups: usize,
    },
    /// `pixel_shuffle` (`inverse` false) or `pixel_unshuffle`.
    PixelShuffle {
        factor: usize,
        inverse: bool,
    },
    Flip {
        dims: Vec<i64>,
    },
    /// `roll`; empty `dims` rolls the flattened tensor.
    Roll {
        shifts: Vec<i64>,
        dims: Vec<i64>,
    },
    Rot90 {
        k: i64,
        dims: [i64; 2],
    },
    /// `pad`, `reflection_padNd`, `replication_padNd`, `_pad_circular`: `pad` pairs
    /// (before, after) from the last dim backwards, as `F.pad` takes them.
    Pad {
        mode: PadMode,
        pad: Vec<i64>,
        value: f64,
    },
    /// `tril` (`upper` false) / `triu` over the last two dims.
    Triangle {
        upper: bool,
        diagonal: i64,
    },
    /// `diag`: 1-D -> matrix with the vector on `diagonal`, 2-D -> that diagonal.
    Diag {
        diagonal: i64,
    },
    /// `diagonal` (a view, copied).
    Diagonal {
        offset: i64,
        dim1: i64,
        dim2: i64,
    },
    DiagEmbed {
        offset: i64,
        dim1: i64,
        dim2: i64,
    },
    /// `linspace` (`base` None) or `logspace`; the length is the output's. A `start` or
    /// `end` of None is a 0-d tensor input (the `Tensor_*` overloads), in that order.
    Linspace {
        start: Option<f64>,
        end: Option<f64>,
        base: Option<f64>,
    },
    /// `eye`; the shape is the output's.
    Eye,
    /// `native_batch_norm`, `_native_batch_norm_legit_no_training`: three outputs
    /// (y, saved mean, saved invstd; the saved ones are empty in eval).
    NativeBatchNorm {
        eps: f64,
        training: bool,
    },
    /// `native_group_norm`: y, mean [N, G], rstd [N, G].
    NativeGroupNorm {
        groups: usize,
        eps: f64,
    },
    /// `logcumsumexp` along `dim`: a running `logaddexp` (exact where a global shift by the
    /// maximum would underflow).
    LogCumSumExp {
        dim: i64,
    },
    /// `tril_indices`/`triu_indices(row, col, offset)`: the [2, n] int64 coordinates of the
    /// lower (upper) triangle, row-major.
    TriangleIndices {
        row: usize,
        col: usize,
        offset: i64,
        upper: bool,
    },
    /// `as_strided(x, size, stride, storage_offset)` over x's contiguous storage; the size is
    /// the output's.
    AsStrided {
        stride: Vec<usize>,
        offset: usize,
    },
    /// `embedding_renorm_(weight, indices, max_norm, norm_type)` as a function: the weight
    /// with every row that `indices` names scaled to `max_norm` where its norm exceeds it.
    EmbeddingRenorm {
        max_norm: f64,
        norm_type: f64,
    },
    /// `max_pool{2,3}d_with_indices_backward(grad, self, indices)` over `dims` spatial
    /// dims: `grad` added into a zero tensor shaped like `self` at each window's argmax.
    MaxPoolBackward {
        dims: usize,
    },
    /// `repeat_interleave(x, repeats: Tensor, dim?, output_size)` (inputs x, repeats) or
    /// `repeat_interleave(repeats, output_size)` (input repeats: the indices each repeated).
    RepeatInterleave {
        dim: Option<i64>,
        indices: bool,
    },
}

impl ExtOp {
    pub fn name(&self) -> String {
        let dbg = format!("{self:?}");
        let head = dbg
            .split(|c: char| !c.is_alphanumeric())
            .next()
            .unwrap_or("");
        crate::op::to_snake(head)
    }
}

/// Ops whose output shape depends on input values: a static-shape graph cannot hold them,
/// so every executor refuses them by name.
pub const DATA_DEPENDENT: &[&str] = &[
    "nonzero",
    "nonzero_static",
    "unique",
    "_unique",
    "_unique2",
    "unique_dim",
    "unique_consecutive",
    "masked_select",
    "argwhere",
    "bincount",
    "histc",
];

/// The ATen base name of an op type: `aten.nonzero.default` -> `nonzero`.
pub fn base_name(op_type: &str) -> &str {
    crate::op::split_op_type(op_type).map_or(op_type, |(name, _, _)| name)
}

fn usizes(a: &Attrs, key: &str, v: Vec<i64>) -> Result<Vec<usize>, IrError> {
    v.iter()
        .map(|&x| usize::try_from(x).ok())
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| a.err(key, format!("expected non-negative integers, got {v:?}")))
}

fn window(a: &Attrs, n: usize, max: bool) -> Result<Window, IrError> {
    let kernel = usizes(a, "kernel_size", a.ints_or("kernel_size", n, &[])?)?;
    if kernel.len() != n || kernel.contains(&0) {
        return Err(a.err(
            "kernel_size",
            format!("expected {n} positive sizes, got {kernel:?}"),
        ));
    }
    let stride = usizes(a, "stride", a.ints_or("stride", n, &[])?)?;
    let stride = if stride.is_empty() {
        kernel.clone()
    } else {
        stride
    };
    let dilation = if max {
        usizes(a, "dilation", a.ints_or("dilation", n, &vec![1; n])?)?
    } else {
        vec![1; n]
    };
    let padding = usizes(a, "padding", a.ints_or("padding", n, &vec![0; n])?)?;
    for (key, v) in [
        ("stride", &stride),
        ("padding", &padding),
        ("dilation", &dilation),
    ] {
        if v.len() != n {
            return Err(a.err(key, format!("expected {n} values, got {v:?}")));
        }
    }
    if stride.contains(&0) || dilation.contains(&0) {
        return Err(a.err("stride", "stride and dilation must be positive"));
    }
    Ok(Window {
        kernel,
        stride,
        padding,
        dilation,
        ceil_mode: a.bool_or("ceil_mode", false)?,
    })
}

pub(crate) fn reduction(a: &Attrs, key: &str) -> Result<Reduction, IrError> {
    match a.string(key)?.as_deref() {
        Some("sum" | "add") => Ok(Reduction::Sum),
        Some("prod" | "multiply") => Ok(Reduction::Prod),
        Some("mean") => Ok(Reduction::Mean),
        Some("amax") => Ok(Reduction::Amax),
        Some("amin") => Ok(Reduction::Amin),
        other => Err(a.err(key, format!("unknown reduction {other:?}"))),
    }
}

/// Upsample scales: `.vec` has `scale_factors` (one or per dim), the sized overloads
/// `scales`/`scales_h`/`scales_w`/`scales_d`.
fn upsample_scales(a: &Attrs, overload: &str, n: usize) -> Result<Vec<Option<f64>>, IrError> {
    if overload == "vec" {
        return match a.map.get("scale_factors") {
            Some(Json::Array(v)) if !v.is_empty() => {
                let f: Vec<f64> = v.iter().filter_map(crate::attrs::json_f64).collect();
                match f.len() {
                    1 => Ok(vec![Some(f[0]); n]),
                    k if k == n => Ok(f.into_iter().map(Some).collect()),
                    _ => Err(a.err("scale_factors", format!("expected {n} scale factors"))),
                }
            }
            _ => Ok(vec![None; n]),
        };
    }
    let keys: &[&str] = match n {
        1 => &["scales"],
        2 => &["scales_h", "scales_w"],
        _ => &["scales_d", "scales_h", "scales_w"],
    };
    keys.iter()
        .map(|k| Ok(a.scalar(k)?.map(Scalar::as_f64)))
        .collect()
}

/// Types an op of the extended set, or `None` when `name.overload` is not one.
pub(crate) fn parse(
    a: &Attrs,
    name: &str,
    overload: &str,
    n_inputs: usize,
) -> Result<Option<ExtOp>, IrError> {
    let dim = |d: i64| a.i64_or("dim", d);
    let keepdim = || a.bool_or("keepdim", false);
    let positive = |key: &str| -> Result<usize, IrError> {
        let v = a.i64_or(key, 0)?;
        usize::try_from(v)
            .ok()
            .filter(|v| *v > 0)
            .ok_or_else(|| a.err(key, format!("must be positive, got {v}")))
    };
    let op = match (name, overload) {
        ("sort", "default" | "stable") => ExtOp::Sort {
            dim: dim(-1)?,
            descending: a.bool_or("descending", false)?,
            indices_only: false,
        },
        // one output: the values
        ("msort", "default") => ExtOp::Sort {
            dim: 0,
            descending: false,
            indices_only: false,
        },
        ("argsort", "default" | "stable") => ExtOp::Sort {
            dim: dim(-1)?,
            descending: a.bool_or("descending", false)?,
            indices_only: true,
        },
        ("topk", "default") => ExtOp::TopK {
            k: usize::try_from(a.i64_or("k", -1)?)
                .map_err(|_| a.err("k", "missing or negative"))?,
            dim: dim(-1)?,
            largest: a.bool_or("largest", true)?,
        },
        ("kthvalue", "default") => ExtOp::KthValue {
            k: positive("k")?,
            dim: dim(-1)?,
            keepdim: keepdim()?,
        },
        ("median", "default") => ExtOp::Median {
            dim: None,
            keepdim: false,
        },
        ("median", "dim") => ExtOp::Median {
            dim: Some(dim(0)?),
            keepdim: keepdim()?,
        },
        ("mode", "default") => ExtOp::Mode {
            dim: dim(-1)?,
            keepdim: keepdim()?,
        },
        ("cummax" | "cummin", "default") => ExtOp::CumExtreme {
            op: if name == "cummax" {
                MinMax::Max
            } else {
                MinMax::Min
            },
            dim: dim(0)?,
        },
        ("cumprod", "default") => ExtOp::Cumprod { dim: dim(0)? },
        ("prod", "default") => ExtOp::Prod {
            dim: None,
            keepdim: false,
        },
        ("prod", "dim_int") => ExtOp::Prod {
            dim: Some(dim(0)?),
            keepdim: keepdim()?,
        },
        ("any" | "all", "default" | "dim" | "dims") => ExtOp::AnyAll {
            all: name == "all",
            dims: if overload == "default" {
                Vec::new()
            } else {
                a.ints_or("dim", 1, &[])?
            },
            keepdim: keepdim()?,
        },
        ("count_nonzero", "default" | "dim_IntList") => ExtOp::CountNonzero {
            dims: a.ints_or("dim", 1, &[])?,
        },
        ("scatter", "src" | "value" | "reduce" | "value_reduce") => ExtOp::Scatter {
            dim: dim(0)?,
            value: if overload.starts_with("value") {
                Some(
                    a.scalar("value")?
                        .ok_or_else(|| a.err("value", "required attribute is missing"))?
                        .as_f64(),
                )
            } else {
                None
            },
            reduce: if overload.ends_with("reduce") {
                Some(reduction(a, "reduce")?)
            } else {
                None
            },
            include_self: true,
        },
        ("scatter_add", "default") => ExtOp::Scatter {
            dim: dim(0)?,
            value: None,
            reduce: Some(Reduction::Sum),
            include_self: true,
        },
        ("scatter_reduce", "two") => ExtOp::Scatter {
            dim: dim(0)?,
            value: None,
            reduce: Some(reduction(a, "reduce")?),
            include_self: a.bool_or("include_self", true)?,
        },
        ("take_along_dim", "default") => ExtOp::TakeAlongDim {
            dim: a.has("dim").then(|| dim(0)).transpose()?,
        },
        (
            "floor_divide"
            | "gcd"
            | "lcm"
            | "bitwise_left_shift"
            | "bitwise_right_shift"
            | "__lshift__"
            | "__rshift__",
            "default" | "Tensor" | "Scalar" | "Tensor_Scalar",
        ) => ExtOp::IntBinary {
            op: match name {
                "floor_divide" => IntOp::FloorDivide,
                "gcd" => IntOp::Gcd,
                "lcm" => IntOp::Lcm,
                "bitwise_left_shift" | "__lshift__" => IntOp::Shl,
                _ => IntOp::Shr,
            },
            scalar: if n_inputs >= 2 {
                None
            } else {
                Some(
                    a.scalar("other")?
                        .ok_or_else(|| a.err("other", "needs a second tensor or a scalar"))?
                        .as_f64(),
                )
            },
        },
        ("index_put", "default") => ExtOp::IndexPut {
            indexed: crate::op::index_mask(a, n_inputs.saturating_sub(2))?,
            accumulate: a.bool_or("accumulate", false)?,
        },
        ("index_add", "default") => ExtOp::IndexAdd {
            dim: dim(0)?,
            alpha: a.f64_or("alpha", 1.0)?,
        },
        ("index_fill", "int_Scalar" | "int_Tensor") => ExtOp::IndexFill {
            dim: dim(0)?,
            value: a.scalar("value")?.map(Scalar::as_f64),
        },
        ("masked_scatter", "default") => ExtOp::MaskedScatter,
        ("select_scatter", "default") => ExtOp::SelectScatter {
            dim: dim(0)?,
            index: a.i64_or("index", 0)?,
        },
        ("slice_scatter", "default") => {
            let step = a.i64_or("step", 1)?;
            if step < 1 {
                return Err(a.err("step", format!("must be positive, got {step}")));
            }
            ExtOp::SliceScatter {
                dim: dim(0)?,
                start: a.i64_or("start", 0)?,
                end: a.i64_or("end", i64::MAX)?,
                step,
            }
        }
        ("diagonal_scatter", "default") => ExtOp::DiagonalScatter {
            offset: a.i64_or("offset", 0)?,
            dim1: a.i64_or("dim1", 0)?,
            dim2: a.i64_or("dim2", 1)?,
        },
        ("max_pool1d" | "max_pool3d", "default") => ExtOp::MaxPool {
            window: window(a, if name == "max_pool1d" { 1 } else { 3 }, true)?,
            with_indices: false,
        },
        (
            "max_pool1d_with_indices" | "max_pool2d_with_indices" | "max_pool3d_with_indices",
            "default",
        ) => ExtOp::MaxPool {
            window: window(a, usize::from(name.as_bytes()[8] - b'0'), true)?,
            with_indices: true,
        },
        ("avg_pool1d" | "avg_pool3d", "default") => ExtOp::AvgPool {
            window: window(a, if name == "avg_pool1d" { 1 } else { 3 }, false)?,
            count_include_pad: a.bool_or("count_include_pad", true)?,
            divisor_override: a.scalar("divisor_override")?.map(|s| s.as_f64() as i64),
        },
        (
            "adaptive_max_pool1d"
            | "adaptive_max_pool2d"
            | "adaptive_max_pool3d"
            | "adaptive_avg_pool1d"
            | "adaptive_avg_pool3d"
            | "_adaptive_avg_pool3d",
            "default",
        ) => {
            let n = name.as_bytes()[name.len() - 2] - b'0';
            ExtOp::AdaptivePool {
                max: name.contains("max"),
                output_size: usizes(a, "output_size", a.ints_or("output_size", n as usize, &[])?)?,
            }
        }
        (
            "upsample_nearest1d"
            | "upsample_nearest3d"
            | "_upsample_nearest_exact1d"
            | "_upsample_nearest_exact2d"
            | "_upsample_nearest_exact3d"
            | "upsample_linear1d"
            | "upsample_bilinear2d"
            | "upsample_trilinear3d"
            | "upsample_bicubic2d",
            "default" | "vec",
        ) => {
            let n = usize::from(name.as_bytes()[name.len() - 2] - b'0');
            let interp = if name.contains("exact") {
                Interp::NearestExact
            } else if name.contains("nearest") {
                Interp::Nearest
            } else if name.contains("cubic") {
                Interp::Cubic
            } else {
                Interp::Linear
            };
            ExtOp::Upsample {
                interp,
                align_corners: a.bool_or("align_corners", false)?,
                scales: upsample_scales(a, overload, n)?,
            }
        }
        ("grid_sampler_2d" | "grid_sampler", "default") => ExtOp::GridSample {
            interp: match a.i64_or("interpolation_mode", 0)? {
                0 => Interp::Linear,
                1 => Interp::Nearest,
                2 => Interp::Cubic,
                m => return Err(a.err("interpolation_mode", format!("unknown mode {m}"))),
            },
            padding: match a.i64_or("padding_mode", 0)? {
                0 => GridPadding::Zeros,
                1 => GridPadding::Border,
                2 => GridPadding::Reflection,
                m => return Err(a.err("padding_mode", format!("unknown mode {m}"))),
            },
            align_corners: a.bool_or("align_corners", false)?,
        },
        ("convolution", "default")
        | ("conv_transpose1d" | "conv_transpose3d", "default")
        | ("conv_transpose2d" | "conv_transpose3d", "input")
        | ("conv3d", "default") => {
            let transposed = if name == "convolution" {
                a.bool_or("transposed", false)?
            } else {
                name.starts_with("conv_transpose")
            };
            let n = match name.as_bytes()[name.len() - 2] {
                b @ b'1'..=b'3' => usize::from(b - b'0'),
                // `convolution`: the stride list says how many spatial dims
                _ => a.ints_or("stride", 1, &[1])?.len(),
            };
            let list = |key: &str, d: i64| -> Result<Vec<usize>, IrError> {
                let v = usizes(a, key, a.ints_or(key, n, &vec![d; n])?)?;
                if v.len() != n {
                    return Err(a.err(key, format!("expected {n} values, got {v:?}")));
                }
                Ok(v)
            };
            let stride = list("stride", 1)?;
            let dilation = list("dilation", 1)?;
            if stride.contains(&0) || dilation.contains(&0) {
                return Err(a.err("stride", "stride and dilation must be positive"));
            }
            let groups = a.i64_or("groups", 1)?;
            if groups < 1 {
                return Err(a.err("groups", "must be at least 1"));
            }
            ExtOp::Convolution {
                stride,
                padding: list("padding", 0)?,
                dilation,
                transposed,
                output_padding: list("output_padding", 0)?,
                groups: groups as usize,
            }
        }
        ("pixel_shuffle", "default") => ExtOp::PixelShuffle {
            factor: positive("upscale_factor")?,
            inverse: false,
        },
        ("pixel_unshuffle", "default") => ExtOp::PixelShuffle {
            factor: positive("downscale_factor")?,
            inverse: true,
        },
        ("flip", "default") => ExtOp::Flip {
            dims: a.ints("dims")?,
        },
        ("flipud", "default") => ExtOp::Flip { dims: vec![0] },
        ("fliplr", "default") => ExtOp::Flip { dims: vec![1] },
        ("roll", "default") => {
            let shifts = a.ints("shifts")?;
            let dims = a.ints_or("dims", 1, &[])?;
            if (dims.is_empty() && shifts.len() != 1)
                || (!dims.is_empty() && dims.len() != shifts.len())
            {
                return Err(a.err(
                    "shifts",
                    format!("{shifts:?} do not pair with dims {dims:?}"),
                ));
            }
            ExtOp::Roll { shifts, dims }
        }
        ("rot90", "default") => {
            let dims = a.ints_or("dims", 2, &[0, 1])?;
            let [d0, d1] = dims[..] else {
                return Err(a.err("dims", format!("expected two dims, got {dims:?}")));
            };
            ExtOp::Rot90 {
                k: a.i64_or("k", 1)?,
                dims: [d0, d1],
            }
        }
        ("pad", "default") => ExtOp::Pad {
            mode: match a.string("mode")?.as_deref() {
                None | Some("constant") => PadMode::Constant,
                Some("reflect") => PadMode::Reflect,
                Some("replicate") => PadMode::Replicate,
                Some("circular") => PadMode::Circular,
                Some(m) => return Err(a.err("mode", format!("unknown pad mode '{m}'"))),
            },
            pad: a.ints("pad")?,
            value: a.f64_or("value", 0.0)?,
        },
        (
            "reflection_pad1d" | "reflection_pad2d" | "reflection_pad3d" | "replication_pad1d"
            | "replication_pad2d" | "replication_pad3d" | "_pad_circular",
            "default",
        ) => ExtOp::Pad {
            mode: if name.starts_with("reflection") {
                PadMode::Reflect
            } else if name.starts_with("replication") {
                PadMode::Replicate
            } else {
                PadMode::Circular
            },
            pad: a.ints(if a.has("padding") { "padding" } else { "pad" })?,
            value: 0.0,
        },
        ("tril" | "triu", "default") => ExtOp::Triangle {
            upper: name == "triu",
            diagonal: a.i64_or("diagonal", 0)?,
        },
        ("diag", "default") => ExtOp::Diag {
            diagonal: a.i64_or("diagonal", 0)?,
        },
        ("diagonal", "default") => ExtOp::Diagonal {
            offset: a.i64_or("offset", 0)?,
            dim1: a.i64_or("dim1", 0)?,
            dim2: a.i64_or("dim2", 1)?,
        },
        ("diag_embed", "default") => ExtOp::DiagEmbed {
            offset: a.i64_or("offset", 0)?,
            dim1: a.i64_or("dim1", -2)?,
            dim2: a.i64_or("dim2", -1)?,
        },
        (
            "linspace" | "logspace",
            "default" | "Tensor_Tensor" | "Tensor_Scalar" | "Scalar_Tensor",
        ) => {
            let get = |k: &str, tensor: bool| -> Result<Option<f64>, IrError> {
                if tensor {
                    return Ok(None);
                }
                Ok(Some(
                    a.scalar(k)?
                        .ok_or_else(|| a.err(k, "required attribute is missing"))?
                        .as_f64(),
                ))
            };
            ExtOp::Linspace {
                start: get("start", overload.starts_with("Tensor"))?,
                end: get("end", overload.ends_with("_Tensor"))?,
                base: if name == "logspace" {
                    Some(a.f64_or("base", 10.0)?)
                } else {
                    None
                },
            }
        }
        ("eye", "default" | "m") => ExtOp::Eye,
        ("native_batch_norm", "default") => ExtOp::NativeBatchNorm {
            eps: a.f64_or("eps", 1e-5)?,
            training: a.bool_or("training", false)?,
        },
        ("_native_batch_norm_legit_no_training", "default") => ExtOp::NativeBatchNorm {
            eps: a.f64_or("eps", 1e-5)?,
            training: false,
        },
        ("_native_batch_norm_legit", "default" | "no_stats") => ExtOp::NativeBatchNorm {
            eps: a.f64_or("eps", 1e-5)?,
            training: a.bool_or("training", true)?,
        },
        ("logcumsumexp", "default") => ExtOp::LogCumSumExp { dim: dim(0)? },
        ("tril_indices" | "triu_indices", "default") => {
            let size = |k: &str| -> Result<usize, IrError> {
                usize::try_from(a.i64_or(k, 0)?).map_err(|_| a.err(k, "must be non-negative"))
            };
            ExtOp::TriangleIndices {
                row: size("row")?,
                col: size("col")?,
                offset: a.i64_or("offset", 0)?,
                upper: name == "triu_indices",
            }
        }
        ("as_strided" | "as_strided_copy", "default") => ExtOp::AsStrided {
            stride: usizes(a, "stride", a.ints("stride")?)?,
            offset: usize::try_from(a.i64_or("storage_offset", 0)?)
                .map_err(|_| a.err("storage_offset", "must be non-negative"))?,
        },
        ("embedding_renorm", "default") => ExtOp::EmbeddingRenorm {
            max_norm: a.f64_or("max_norm", 0.0)?,
            norm_type: a.f64_or("norm_type", 2.0)?,
        },
        ("max_pool2d_with_indices_backward" | "max_pool3d_with_indices_backward", "default") => {
            ExtOp::MaxPoolBackward {
                dims: usize::from(name.as_bytes()[8] - b'0'),
            }
        }
        ("repeat_interleave", "self_Tensor") => ExtOp::RepeatInterleave {
            dim: a.has("dim").then(|| a.i64_or("dim", 0)).transpose()?,
            indices: false,
        },
        ("repeat_interleave", "Tensor") => ExtOp::RepeatInterleave {
            dim: None,
            indices: true,
        },
        ("native_group_norm", "default") => ExtOp::NativeGroupNorm {
            groups: positive("group")?,
            eps: a.f64_or("eps", 1e-5)?,
        },
        _ => return Ok(None),
    };
    Ok(Some(op))
}
