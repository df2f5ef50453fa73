//! Composite ATen ops: ops PyTorch defines in terms of others (`diff`, `var`, `einsum`,
//! `rms_norm`, `conv1d`, ...). They are typed here with their ATen defaults so that the
//! compiler's decomposition pass (`npu_compiler::passes::decompose`) can rewrite them into
//! primitives before anything else sees the graph. Pure view aliases (`unflatten`, `ravel`,
//! `movedim`, `mT`, `numpy_T`, `swapaxes`, `broadcast_to`) become the primitive view ops
//! directly at parse time.
//!
//! Optional tensor arguments: torch_ir records only the tensors that are present, in schema
//! order, so a present tensor fills the first optional slot (this is also how torch_ir's own
//! executor reads them): `diff(x, t)` is read as `prepend = t`.

use serde::{Deserialize, Serialize};

/// Which statistic a `var`/`std` family op returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Moment {
    Var,
    Std,
    /// Two outputs: (var, mean).
    VarMean,
    /// Two outputs: (std, mean).
    StdMean,
}

/// `conv1d` padding: explicit, or the string forms of `conv1d.padding`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Padding1d {
    Explicit(usize),
    Valid,
    Same,
}

/// A composite op. Inputs are the node's tensor inputs in schema order (absent optional
/// tensors are skipped, see the module doc); outputs as in ATen.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Composite {
    /// `diff(x, n, dim, prepend?, append?)`.
    Diff {
        n: usize,
        dim: i64,
        prepend: bool,
        append: bool,
    },
    /// `other - alpha * x`; `other` is input 1, or `scalar` when given.
    Rsub {
        alpha: f64,
        scalar: Option<f64>,
    },
    Square,
    /// `x + value * t1 * t2`.
    Addcmul {
        value: f64,
    },
    /// `x + value * t1 / t2`.
    Addcdiv {
        value: f64,
    },
    /// `x + w * (end - x)`; `w` is `weight` or input 2.
    Lerp {
        weight: Option<f64>,
    },
    Glu {
        dim: i64,
    },
    Softplus {
        beta: f64,
        threshold: f64,
    },
    Mish,
    /// `scale * (x > 0 ? x : alpha * (exp(x * input_scale) - 1))` (elu, selu, celu).
    Elu {
        alpha: f64,
        scale: f64,
        input_scale: f64,
    },
    /// Empty `dims` = all dims.
    Logsumexp {
        dims: Vec<i64>,
        keepdim: bool,
    },
    /// var/std/var_mean/std_mean; `dims` None or empty = all dims.
    Moments {
        kind: Moment,
        dims: Option<Vec<i64>>,
        correction: f64,
        keepdim: bool,
    },
    /// `linalg_vector_norm`/`norm`: `(sum |x|^ord)^(1/ord)`, max/min |x| for +-inf, count
    /// of non-zeros for 0. Empty `dims` = all dims.
    VectorNorm {
        ord: f64,
        dims: Vec<i64>,
        keepdim: bool,
    },
    CosineSimilarity {
        dim: i64,
        eps: f64,
    },
    /// Three outputs (out, mean, rstd), or one (`layer_norm` with a bias and no weight).
    /// Inputs: x, weight?, bias?; `bias_only`: x, bias.
    NativeLayerNorm {
        normalized_shape: Vec<usize>,
        eps: f64,
        bias_only: bool,
    },
    /// Inputs: x, weight?. `eps` None = the opmath dtype's machine epsilon.
    RmsNorm {
        normalized_shape: Vec<usize>,
        eps: Option<f64>,
    },
    /// Three outputs (out, mean [N, G], rstd [N, G]), or one (`group_norm` with a bias and
    /// no weight). Inputs: x, weight?, bias?; `bias_only`: x, bias.
    NativeGroupNorm {
        groups: usize,
        eps: f64,
        bias_only: bool,
    },
    /// Inputs: x, then (weight, bias)?, then (running_mean, running_var)? — running stats
    /// are required when `use_input_stats` is false.
    InstanceNorm {
        use_input_stats: bool,
        eps: f64,
    },
    /// `beta * x + alpha * (mat @ vec)`.
    Addmv {
        beta: f64,
        alpha: f64,
    },
    /// `beta * x + alpha * outer(v1, v2)`.
    Addr {
        beta: f64,
        alpha: f64,
    },
    Einsum {
        equation: String,
    },
    Conv1d {
        stride: usize,
        padding: Padding1d,
        dilation: usize,
        groups: usize,
    },
    Mv,
    Dot,
    Outer,
    /// `expand_as(x, other)`: the result shape is the output's.
    ExpandAs,
    /// `reshape_as`/`view_as(x, other)`.
    ReshapeAs,
    /// `select.int`: index `index` of `dim` (negative counts from the end).
    Select {
        dim: i64,
        index: i64,
    },
    /// One output per size.
    SplitWithSizes {
        sizes: Vec<usize>,
        dim: i64,
    },
    /// One output per index of `dim`.
    Unbind {
        dim: i64,
    },
    /// `repeat` (and `tile`, whose dims are padded to the input rank): `repeats.len()` is at
    /// least the input rank.
    Repeat {
        repeats: Vec<usize>,
    },
    /// `constant_pad_nd` / `pad(mode="constant")`: pairs (before, after) from the last dim;
    /// negative amounts crop.
    ConstantPad {
        pad: Vec<i64>,
        value: f64,
    },
    /// Output i is input i viewed with output i's shape: reshaped (`atleast_Nd` of a
    /// sequence) or broadcast (`broadcast_tensors`).
    ViewEach {
        expand: bool,
    },
    /// `hstack`/`vstack`/`dstack`/`column_stack`: each input viewed with the kind's minimum
    /// rank, then concatenated.
    Stack {
        kind: StackKind,
    },
    /// `narrow(dim, start, length)`: a slice (negative `start` counts from the end).
    Narrow {
        dim: i64,
        start: i64,
        length: usize,
    },
    /// `tensor_split` at `indices`, or into `sections` nearly equal parts (the first
    /// `size % sections` one longer).
    TensorSplit {
        dim: i64,
        split: SplitAt,
    },
    /// Two outputs: min and max over `dim` (all dims when None).
    Aminmax {
        dim: Option<i64>,
        keepdim: bool,
    },
    /// `[N, C, *]` -> channels regrouped `[N, g, C/g, *]` -> `[N, C/g, g, *]`.
    ChannelShuffle {
        groups: usize,
    },
    /// `tensordot(a, b, dims_a, dims_b)` (and `inner` of higher rank, over the last dims).
    Tensordot {
        dims_a: Vec<i64>,
        dims_b: Vec<i64>,
    },
    /// `x > 0 ? x : w * x`, `w` per channel (dim 1) or one value.
    Prelu,
    /// Sum with NaN read as zero; empty `dims` = all.
    Nansum {
        dims: Vec<i64>,
        keepdim: bool,
    },
    /// `pow` computed in float64; a Python-scalar operand is `scalar` (`scalar_lhs` when it
    /// is the base).
    FloatPower {
        scalar: Option<f64>,
        scalar_lhs: bool,
    },
    /// `one_hot(x, num_classes)` as int64.
    OneHot {
        num_classes: usize,
    },
    /// `repeat_interleave(x, repeats: int, dim?)`: each element `repeats` times along `dim`
    /// (of the flattened input when None).
    RepeatInterleave {
        repeats: usize,
        dim: Option<i64>,
    },
    /// `beta * x + alpha * sum_b b1[b] @ b2[b]`.
    Addbmm {
        beta: f64,
        alpha: f64,
    },
    /// `index_reduce(self, dim, index, source, reduce, include_self)`: a `scatter_reduce`
    /// with the 1-D index broadcast over `source`.
    IndexReduce {
        dim: i64,
        reduce: crate::Reduction,
        include_self: bool,
    },
    /// `batch_norm`/`native_batch_norm`/`_native_batch_norm_legit` in training mode:
    /// normalized with the batch's statistics (biased variance). Inputs: x, then the
    /// present ones of weight, bias, running_mean, running_var (`present`); outputs: y, and
    /// for the native forms the batch mean and rstd [C]. The running statistics' update,
    /// a training side effect on buffers, is not part of any output and is not done.
    BatchNormTrain {
        eps: f64,
        present: [bool; 4],
    },
    /// `conv2d.padding`/`conv3d.padding` with `padding="same"` (or `"valid"`): the padding
    /// follows from the weight's kernel; "same" pads the extra element of an odd total at
    /// the end, as ATen does.
    ConvStringPadding {
        same: bool,
        stride: Vec<usize>,
        dilation: Vec<usize>,
        groups: usize,
    },
}

/// Which `*stack` op a [`Composite::Stack`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum StackKind {
    /// atleast_1d, cat along dim 0 for 1-D inputs, else dim 1.
    H,
    /// atleast_2d, dim 0.
    V,
    /// atleast_3d, dim 2.
    D,
    /// 0-d/1-D inputs as columns `[n, 1]`, dim 1.
    Column,
}

/// Where [`Composite::TensorSplit`] cuts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SplitAt {
    Indices(Vec<i64>),
    Sections(usize),
}

impl Composite {
    pub fn name(&self) -> &'static str {
        match self {
            Composite::Diff { .. } => "diff",
            Composite::Rsub { .. } => "rsub",
            Composite::Square => "square",
            Composite::Addcmul { .. } => "addcmul",
            Composite::Addcdiv { .. } => "addcdiv",
            Composite::Lerp { .. } => "lerp",
            Composite::Glu { .. } => "glu",
            Composite::Softplus { .. } => "softplus",
            Composite::Mish => "mish",
            Composite::Elu { .. } => "elu",
            Composite::Logsumexp { .. } => "logsumexp",
            Composite::Moments { kind, .. } => match kind {
                Moment::Var => "var",
                Moment::Std => "std",
                Moment::VarMean => "var_mean",
                Moment::StdMean => "std_mean",
            },
            Composite::VectorNorm { .. } => "vector_norm",
            Composite::CosineSimilarity { .. } => "cosine_similarity",
            Composite::NativeLayerNorm { .. } => "native_layer_norm",
            Composite::RmsNorm { .. } => "rms_norm",
            Composite::NativeGroupNorm { .. } => "native_group_norm",
            Composite::InstanceNorm { .. } => "instance_norm",
            Composite::Addmv { .. } => "addmv",
            Composite::Addr { .. } => "addr",
            Composite::Einsum { .. } => "einsum",
            Composite::Conv1d { .. } => "conv1d",
            Composite::Mv => "mv",
            Composite::Dot => "dot",
            Composite::Outer => "outer",
            Composite::ExpandAs => "expand_as",
            Composite::ReshapeAs => "reshape_as",
            Composite::Select { .. } => "select",
            Composite::SplitWithSizes { .. } => "split_with_sizes",
            Composite::Unbind { .. } => "unbind",
            Composite::Repeat { .. } => "repeat",
            Composite::ConstantPad { .. } => "constant_pad",
            Composite::ViewEach { expand: true } => "broadcast_tensors",
            Composite::ViewEach { expand: false } => "atleast_nd",
            Composite::Stack { kind } => match kind {
                StackKind::H => "hstack",
                StackKind::V => "vstack",
                StackKind::D => "dstack",
                StackKind::Column => "column_stack",
            },
            Composite::Narrow { .. } => "narrow",
            Composite::TensorSplit { .. } => "tensor_split",
            Composite::Aminmax { .. } => "aminmax",
            Composite::ChannelShuffle { .. } => "channel_shuffle",
            Composite::Tensordot { .. } => "tensordot",
            Composite::Prelu => "prelu",
            Composite::Nansum { .. } => "nansum",
            Composite::FloatPower { .. } => "float_power",
            Composite::OneHot { .. } => "one_hot",
            Composite::RepeatInterleave { .. } => "repeat_interleave",
            Composite::Addbmm { .. } => "addbmm",
            Composite::IndexReduce { .. } => "index_reduce",
            Composite::BatchNormTrain { .. } => "batch_norm_train",
            Composite::ConvStringPadding { .. } => "conv_padding",
        }
    }
}

mod parse;
pub(crate) use parse::{bias_only, parse};

#[cfg(test)]
mod tests;
