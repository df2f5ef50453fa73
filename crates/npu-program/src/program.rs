//! The compiled program: the contract between the compiler and every backend.
//!
//! Invariants a backend may rely on:
//! - steps run in order; each step reads only slots written by earlier steps or loaded
//!   before the run (inputs, weights, constants);
//! - every [`Binding`] lies inside its slot: `byte_offset + dtype size * (1 + sum((shape[i]
//!   - 1) * strides[i]))` is at most the slot's size; strides are in elements, 0 = broadcast;
//! - an output binding never overlaps an input binding of the same step, except for the
//!   in-place kernels ([`Kernel::IndexCopy`]) that say so;
//! - an input slot is written only by [`Kernel::IndexCopy`], and only when a program output
//!   declares `donates_input` for it: that input is device-resident state (the KV cache) the
//!   runtime keeps between runs and binds to the output, so the update never copies it;
//! - values are computed in f32 whatever the storage dtype; a store rounds to the binding's
//!   dtype (round-to-nearest-even), a load widens; integer bindings keep their integer type;
//! - invalid data (an embedding id or index_copy index out of range) is a run error, never
//!   an out-of-bounds access.
//! - arena buffers of values with disjoint lifetimes may share bytes: nothing survives a run
//!   in the arena.

use crate::expr::{Expr, Instr};
use npu_ir::{DType, UnaryOp};
use serde::{Deserialize, Serialize};

/// Where a binding's bytes live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Slot {
    Input(u32),
    Output(u32),
    Weight(u32),
    Const(u32),
    Arena,
}

/// A strided view of a slot, as a kernel sees one operand.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Binding {
    pub slot: Slot,
    pub byte_offset: u64,
    pub shape: Vec<usize>,
    pub strides: Vec<usize>,
    pub dtype: DType,
}

impl Binding {
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// One past the last byte this binding can touch, relative to its slot.
    /// Saturates at `u64::MAX` (a corrupt program's sizes never wrap into range).
    pub fn end_byte(&self) -> u64 {
        if self.shape.contains(&0) {
            return self.byte_offset;
        }
        let last: u128 = self
            .shape
            .iter()
            .zip(&self.strides)
            .map(|(&d, &s)| (d as u128 - 1).saturating_mul(s as u128))
            .fold(0, u128::saturating_add);
        let end = (last + 1)
            .saturating_mul(self.dtype.size_bytes() as u128)
            .saturating_add(u128::from(self.byte_offset));
        u64::try_from(end).unwrap_or(u64::MAX)
    }

    /// Row-major and gap-free.
    pub fn is_contiguous(&self) -> bool {
        self.strides == dense_strides(&self.shape)
            || self
                .shape
                .iter()
                .zip(&self.strides)
                .zip(dense_strides(&self.shape))
                .all(|((&d, &s), e)| d == 1 || s == e)
    }
}

/// Row-major strides of `shape`.
pub fn dense_strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1].max(1);
    }
    s
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReduceOp {
    Mean,
    Sum,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PoolKind {
    Max,
    /// Average; `count_include_pad` and an optional divisor override as in ATen.
    Avg {
        count_include_pad: bool,
        divisor: Option<u32>,
    },
}

/// The shared kernel vocabulary. Shapes come from the bindings; kernels carry only what the
/// bindings cannot say. Operand order is documented per kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Kernel {
    /// out[.., m, n] = act(alpha * sum_k a[.., m, k] * b[.., k, n] + beta * bias[.., m, n]).
    /// Inputs: a, b (any strides: a transposed weight is a stride swap), optional bias
    /// (bound as [.., m, n] with broadcast strides). Batch dims of a/b are pre-broadcast.
    /// `beta` has no effect when no bias is bound. `residual`: the bias is a residual
    /// stream, added after the product is rounded to the output dtype (PyTorch's
    /// `r + linear(x)` rounds twice; a linear's own bias is added before the one rounding);
    /// it needs a bias and no act. (One rounding after the sum, as cuBLASLt's C operand
    /// gives, moved Qwen2.5-1.5B bf16's top-5 agreement with PyTorch from 4/5 to 3/5: the
    /// residual stream carries the difference through every layer.) `norm`: each row of `a` is first RMS-normalized over K
    /// with this eps, with the RmsNorm kernel's arithmetic (`round(a * rsqrt(mean(a^2) +
    /// eps)) * w`, rounded to a's dtype), `w` [K] being the last input.
    /// Inputs: a, b, bias?, norm weight? (see [`Kernel::gemm_operands`]).
    Gemm {
        alpha: f32,
        beta: f32,
        act: Option<UnaryOp>,
        residual: bool,
        norm: Option<f32>,
    },
    /// NCHW convolution. Inputs: x [N,C,H,W], w [O,C/g,kh,kw], optional bias [O], and with
    /// `residual` last a tensor r of the output's shape and dtype: out = act(r +
    /// round(conv + bias)), rounded (PyTorch's `relu(conv(x) + r)` rounds the convolution
    /// first), or, where a backend's GEMM library adds r itself (cuBLASLt's C operand), with
    /// the one rounding after the sum: the two differ by at most one rounding of the
    /// convolution, and the vision models keep r 1.000000 and top-5 5/5 against PyTorch with
    /// it (unlike a decoder's residual stream: see [`Kernel::Gemm`]). Without `residual`,
    /// out = act(conv + bias), rounded.
    Conv2d {
        stride: [usize; 2],
        padding: [usize; 2],
        dilation: [usize; 2],
        groups: usize,
        act: Option<UnaryOp>,
        residual: bool,
    },
    /// NCHW pooling. Input x; output [N,C,OH,OW].
    Pool2d {
        kind: PoolKind,
        kernel: [usize; 2],
        stride: [usize; 2],
        padding: [usize; 2],
        dilation: [usize; 2],
    },
    /// Adaptive average pooling with ATen's floor/ceil window bounds. Input x [N,C,H,W].
    AdaptiveAvgPool2d,
    /// out = expr(inputs...), every input bound with the output's shape (broadcast strides).
    Elementwise { expr: Expr },
    /// Softmax over the last dim of x * scale (+ mask), in f32. Inputs: x, optional additive
    /// mask bound as x. Output bound as x (any strides).
    Softmax { scale: f32 },
    /// out = round(x * rsqrt(mean(x^2) + eps)) * w over the last dim, where round is to the
    /// output dtype (as transformers' Qwen2RMSNorm casts before the weight). Inputs: x, w [D].
    RmsNorm { eps: f32 },
    /// Normalizes over the last dim. Inputs: x, optional weight [D], optional bias [D].
    LayerNorm {
        eps: f32,
        has_weight: bool,
        has_bias: bool,
    },
    /// Reduces the trailing `reduced` dims of the input; the output has the leading dims.
    Reduce { op: ReduceOp, reduced: usize },
    /// out[.., :] = table[ids[..], :]. Inputs: table [V, D], ids (integer).
    Embedding,
    /// In place: dest[.., index[i], ..] = src[.., i, ..] along `axis`.
    /// Inputs: index (integer), src. Output: dest, which already holds the old content.
    IndexCopy { axis: usize },
    /// out = x * cos + rotate_half(x) * sin over the last dim D, where
    /// rotate_half(x)[d] = -x[d + D/2] for d < D/2 and x[d - D/2] otherwise.
    /// Inputs: x, cos, sin, all bound with x's shape.
    Rope,
    /// Scaled dot-product attention with grouped K/V heads, f32 softmax:
    /// out[b,h,s] = softmax_t(q[b,h,s] . k[b,h/(H/KVH),t] * scale + mask[b,h,s,t]) @ v.
    /// `causal` additionally masks t > s (top-left aligned, as PyTorch's
    /// `scaled_dot_product_attention(is_causal=True)`). Inputs: q [B,H,S,D], k [B,KVH,T,D],
    /// v [B,KVH,T,D], optional additive mask bound as [B,H,S,T]. Output [B,H,S,D].
    Attention { scale: f32, causal: bool },
    /// out = in (any strides, any dtypes: converts).
    Copy,
    /// out = value.
    Fill { value: f64 },
}

impl Kernel {
    /// A gemm's operands `(a, b, bias, norm weight)` from its inputs (the norm weight is last
    /// when the kernel has `norm`), or `None` for another kernel or a wrong count.
    pub fn gemm_operands<'b, B>(
        &self,
        ins: &'b [B],
    ) -> Option<(&'b B, &'b B, Option<&'b B>, Option<&'b B>)> {
        let Kernel::Gemm { norm, .. } = self else {
            return None;
        };
        let n_norm = usize::from(norm.is_some());
        if ins.len() < 2 + n_norm || ins.len() > 3 + n_norm {
            return None;
        }
        let nw = norm.map(|_| &ins[ins.len() - 1]);
        let bias = (ins.len() - n_norm == 3).then(|| &ins[2]);
        Some((&ins[0], &ins[1], bias, nw))
    }

    /// A convolution's operands `(x, w, bias, residual)` from its inputs (the residual is
    /// last when the kernel has `residual`), or `None` for another kernel or a wrong count.
    pub fn conv_operands<'b, B>(
        &self,
        ins: &'b [B],
    ) -> Option<(&'b B, &'b B, Option<&'b B>, Option<&'b B>)> {
        let Kernel::Conv2d { residual, .. } = self else {
            return None;
        };
        let n_res = usize::from(*residual);
        if ins.len() < 2 + n_res || ins.len() > 3 + n_res {
            return None;
        }
        let r = residual.then(|| &ins[ins.len() - 1]);
        let bias = (ins.len() - n_res == 3).then(|| &ins[2]);
        Some((&ins[0], &ins[1], bias, r))
    }

    /// A residual convolution as the two steps it stands for, for a backend without a fused
    /// path: the convolution alone (no residual, no activation), then `act(out + r)` in
    /// place, as an elementwise step whose inputs are (the output, r) and whose output is the
    /// output. Rounds as the contract's first form. `None` for any other kernel.
    pub fn split_residual_conv(&self) -> Option<(Kernel, Kernel)> {
        let Kernel::Conv2d {
            stride,
            padding,
            dilation,
            groups,
            act,
            residual: true,
        } = *self
        else {
            return None;
        };
        let conv = Kernel::Conv2d {
            stride,
            padding,
            dilation,
            groups,
            act: None,
            residual: false,
        };
        let mut code = vec![
            Instr::Load(0),
            Instr::Load(1),
            Instr::Binary(npu_ir::BinaryOp::Add),
        ];
        code.extend(act.map(Instr::Unary));
        Some((
            conv,
            Kernel::Elementwise {
                expr: Expr { code },
            },
        ))
    }

    /// Kind name used by `describe` totals.
    pub fn kind(&self) -> &'static str {
        match self {
            Kernel::Gemm { .. } => "gemm",
            Kernel::Conv2d { .. } => "conv2d",
            Kernel::Pool2d {
                kind: PoolKind::Max,
                ..
            } => "max_pool2d",
            Kernel::Pool2d { .. } => "avg_pool2d",
            Kernel::AdaptiveAvgPool2d => "adaptive_avg_pool2d",
            Kernel::Elementwise { .. } => "elementwise",
            Kernel::Softmax { .. } => "softmax",
            Kernel::RmsNorm { .. } => "rms_norm",
            Kernel::LayerNorm { .. } => "layer_norm",
            Kernel::Reduce { .. } => "reduce",
            Kernel::Embedding => "embedding",
            Kernel::IndexCopy { .. } => "index_copy",
            Kernel::Rope => "rope",
            Kernel::Attention { .. } => "attention",
            Kernel::Copy => "copy",
            Kernel::Fill { .. } => "fill",
        }
    }
}

/// One kernel launch with its operands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Step {
    pub kernel: Kernel,
    pub inputs: Vec<Binding>,
    pub outputs: Vec<Binding>,
    /// The IR node(s) this step comes from, for messages and `describe`.
    pub origin: String,
}

/// A program input or output as the user sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IoTensor {
    pub name: String,
    pub shape: Vec<usize>,
    /// The dtype the user passes or receives (the IR's).
    pub dtype: DType,
    /// The dtype the program stores it in (integers never change).
    pub storage: DType,
    /// For outputs: the input whose buffer this output updates in place (the KV cache).
    /// The runtime binds both to one device buffer and never copies it.
    pub donates_input: Option<u32>,
}

/// A checkpoint tensor the program reads at load time, by its key in the weight file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SourceTensor {
    pub key: String,
    pub shape: Vec<usize>,
    pub dtype: DType,
}

/// How a program weight is made from source tensors (`S` = an index into
/// `Program::sources` in a program; the weight's value id inside the compiler), computed in
/// f64 on the host, then stored in the weight's dtype.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Recipe<S = u32> {
    /// The source tensor as is (cast to the storage dtype).
    Load { source: S },
    /// conv weight * gamma / sqrt(var + eps), per output channel (dim 0).
    BnFoldWeight {
        weight: S,
        gamma: Option<S>,
        var: S,
        eps: f64,
    },
    /// (bias - mean) * gamma / sqrt(var + eps) + beta; bias 0 when the conv had none.
    BnFoldBias {
        bias: Option<S>,
        gamma: Option<S>,
        beta: Option<S>,
        mean: S,
        var: S,
        eps: f64,
    },
    /// A standalone batch norm's multiplier, gamma / sqrt(var + eps), shaped [1, C, 1, ..].
    BnScale { gamma: Option<S>, var: S, eps: f64 },
    /// A standalone batch norm's shift, beta - mean * gamma / sqrt(var + eps), shaped [1, C, 1, ..].
    BnShift {
        gamma: Option<S>,
        beta: Option<S>,
        mean: S,
        var: S,
        eps: f64,
    },
    /// The sources concatenated along dim 0 (their other dims equal): the weights (and
    /// biases) of linears that read one input, made one GEMM (`passes::concat_linear`).
    Concat { sources: Vec<S> },
}

impl<S: Copy> Recipe<S> {
    /// The same recipe over other source references.
    pub fn map<T, E>(&self, mut f: impl FnMut(S) -> Result<T, E>) -> Result<Recipe<T>, E> {
        fn opt<S, T, E>(
            x: Option<S>,
            f: &mut impl FnMut(S) -> Result<T, E>,
        ) -> Result<Option<T>, E> {
            x.map(f).transpose()
        }
        let f = &mut f;
        Ok(match *self {
            Recipe::Concat { ref sources } => Recipe::Concat {
                sources: sources.iter().map(|&s| f(s)).collect::<Result<_, E>>()?,
            },
            Recipe::Load { source } => Recipe::Load { source: f(source)? },
            Recipe::BnFoldWeight {
                weight,
                gamma,
                var,
                eps,
            } => Recipe::BnFoldWeight {
                weight: f(weight)?,
                gamma: opt(gamma, f)?,
                var: f(var)?,
                eps,
            },
            Recipe::BnFoldBias {
                bias,
                gamma,
                beta,
                mean,
                var,
                eps,
            } => Recipe::BnFoldBias {
                bias: opt(bias, f)?,
                gamma: opt(gamma, f)?,
                beta: opt(beta, f)?,
                mean: f(mean)?,
                var: f(var)?,
                eps,
            },
            Recipe::BnScale { gamma, var, eps } => Recipe::BnScale {
                gamma: opt(gamma, f)?,
                var: f(var)?,
                eps,
            },
            Recipe::BnShift {
                gamma,
                beta,
                mean,
                var,
                eps,
            } => Recipe::BnShift {
                gamma: opt(gamma, f)?,
                beta: opt(beta, f)?,
                mean: f(mean)?,
                var: f(var)?,
                eps,
            },
        })
    }

    /// Every source the recipe reads.
    pub fn sources(&self) -> Vec<S> {
        let mut v = Vec::new();
        let _ = self.map(|s| {
            v.push(s);
            Ok::<S, ()>(s)
        });
        v
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WeightSlot {
    pub name: String,
    pub shape: Vec<usize>,
    pub dtype: DType,
    pub recipe: Recipe,
}

/// Values the IR carries inline (lifted tensor constants), embedded in the program.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ConstValues {
    Float(Vec<f32>),
    Int(Vec<i64>),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConstSlot {
    pub name: String,
    pub shape: Vec<usize>,
    pub dtype: DType,
    pub values: ConstValues,
}

/// One spatial axis of 2-D pooling: the window (`k` taps, stride `s`, padding `p`, dilation
/// `d`) fits the padded input of `n`, the padding is at most half the window (as ATen
/// requires), and `o` is the floor or ceil-mode output length. Shared by the IR check and the
/// program check, so what `check` accepts lowers.
pub fn pool_axis_agrees(
    n: usize,
    o: usize,
    k: usize,
    s: usize,
    p: usize,
    d: usize,
) -> Result<(), String> {
    let (n, o) = (n as u128, o as u128);
    let (k, s, p, d) = (k as u128, s as u128, p as u128, d as u128);
    let window = d * k.saturating_sub(1) + 1;
    if k == 0 || s == 0 || d == 0 || 2 * p > window || window > n + 2 * p {
        return Err(format!(
            "kernel {k}, stride {s}, padding {p}, dilation {d} over {n} elements"
        ));
    }
    let span = n + 2 * p - window;
    if o != span / s + 1 && o != span.div_ceil(s) + 1 {
        return Err(format!("an output of {o} does not follow from the window"));
    }
    Ok(())
}

/// ATen's pooling output length (`pooling_output_shape`): floor or ceil mode, a last window
/// that would start in the right padding dropped. `None` when the window does not fit.
pub fn pool_out_len(n: usize, k: usize, s: usize, p: usize, d: usize, ceil: bool) -> Option<usize> {
    if k == 0 || s == 0 || d == 0 {
        return None;
    }
    let (n, k, s, p, d) = (n as i128, k as i128, s as i128, p as i128, d as i128);
    let span = d * (k - 1) + 1;
    let num = n + 2 * p - span + if ceil { s - 1 } else { 0 };
    if num < 0 {
        return None;
    }
    let mut o = num / s + 1;
    if ceil && (o - 1) * s >= n + p {
        o -= 1;
    }
    usize::try_from(o).ok()
}

/// A convolution's output length along one axis (input `i`, `k` taps, stride `s`, padding
/// `p`, dilation `d`), or `None` when the window does not fit or the sizes overflow.
pub fn conv_out_len(i: usize, k: usize, s: usize, p: usize, d: usize) -> Option<usize> {
    let padded = i.checked_add(p.checked_mul(2)?)?;
    let span = d.checked_mul(k.max(1) - 1)?.checked_add(1)?;
    Some(padded.checked_sub(span)? / s.max(1) + 1)
}

/// The dimensions of a [`Kernel::Conv2d`] step, after checking its operand shapes against
/// the contract: x [N,C,H,W], w [O,C/groups,kh,kw], optional bias [O], out [N,O,OH,OW] with
/// OH/OW given by the stride/padding/dilation arithmetic. Every backend derives its loop
/// bounds from this one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConvDims {
    pub n: usize,
    pub c: usize,
    pub h: usize,
    pub w: usize,
    pub o: usize,
    /// Input channels per group.
    pub cg: usize,
    pub kh: usize,
    pub kw: usize,
    pub oh: usize,
    pub ow: usize,
    pub groups: usize,
}

impl ConvDims {
    /// Checks the shapes of x, w, the bias (if bound) and out.
    #[allow(clippy::too_many_arguments)]
    pub fn check(
        x: &[usize],
        w: &[usize],
        bias: Option<&[usize]>,
        out: &[usize],
        stride: [usize; 2],
        padding: [usize; 2],
        dilation: [usize; 2],
        groups: usize,
    ) -> Result<ConvDims, String> {
        let (&[n, c, h, wd], &[o, cg, kh, kw], &[on, oc, oh, ow]) = (x, w, out) else {
            return Err(format!(
                "expects x [N,C,H,W], w [O,C/g,kh,kw], out [N,O,OH,OW]; got {x:?}, {w:?}, {out:?}"
            ));
        };
        let g = groups.max(1);
        if Some(c) != cg.checked_mul(g) || o % g != 0 || on != n || oc != o || stride.contains(&0) {
            return Err(format!(
                "x {x:?}, w {w:?}, groups {g}, out {out:?} do not agree"
            ));
        }
        // Checked: a program file may hold any sizes (a wrapped sum could pass the check).
        if conv_out_len(h, kh, stride[0], padding[0], dilation[0]) != Some(oh)
            || conv_out_len(wd, kw, stride[1], padding[1], dilation[1]) != Some(ow)
        {
            return Err(format!("output {out:?} does not match the conv arithmetic"));
        }
        if let Some(b) = bias {
            if b.iter().try_fold(1usize, |a, &d| a.checked_mul(d)) != Some(o) {
                return Err(format!("bias {b:?} is not [{o}]"));
            }
        }
        Ok(ConvDims {
            n,
            c,
            h,
            w: wd,
            o,
            cg,
            kh,
            kw,
            oh,
            ow,
            groups: g,
        })
    }
}

/// A compiled program.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Program {
    pub model_name: String,
    pub target: String,
    pub compute_dtype: DType,
    pub inputs: Vec<IoTensor>,
    pub outputs: Vec<IoTensor>,
    pub sources: Vec<SourceTensor>,
    pub weights: Vec<WeightSlot>,
    pub constants: Vec<ConstSlot>,
    /// Bytes of the intermediate arena (inputs, outputs, weights, constants excluded).
    pub arena_bytes: u64,
    pub steps: Vec<Step>,
}

impl Program {
    /// Size in bytes of a slot, for bounds checks.
    pub fn slot_bytes(&self, slot: Slot) -> Option<u64> {
        // Saturating: a size that overflows is u64::MAX, which no binding fits under
        // unchecked and no memory limit admits.
        let bytes = |shape: &[usize], dt: DType| {
            let n = shape
                .iter()
                .fold(dt.size_bytes() as u128, |n, &d| n.saturating_mul(d as u128));
            u64::try_from(n).unwrap_or(u64::MAX)
        };
        Some(match slot {
            Slot::Input(i) => {
                let t = self.inputs.get(i as usize)?;
                bytes(&t.shape, t.storage)
            }
            Slot::Output(i) => {
                let t = self.outputs.get(i as usize)?;
                bytes(&t.shape, t.storage)
            }
            Slot::Weight(i) => {
                let t = self.weights.get(i as usize)?;
                bytes(&t.shape, t.dtype)
            }
            Slot::Const(i) => {
                let t = self.constants.get(i as usize)?;
                bytes(&t.shape, t.dtype)
            }
            Slot::Arena => self.arena_bytes,
        })
    }

    /// Checks the binding invariants of the module doc; returns the first violation.
    pub fn validate(&self) -> Result<(), String> {
        for (i, step) in self.steps.iter().enumerate() {
            for b in step.inputs.iter().chain(&step.outputs) {
                let size = self.slot_bytes(b.slot).ok_or_else(|| {
                    format!(
                        "step {i} ({}): slot {:?} does not exist",
                        step.origin, b.slot
                    )
                })?;
                if b.byte_offset % b.dtype.size_bytes() as u64 != 0 {
                    return Err(format!(
                        "step {i} ({}): byte offset {} is not aligned to {}",
                        step.origin, b.byte_offset, b.dtype
                    ));
                }
                if b.shape.len() != b.strides.len() {
                    return Err(format!(
                        "step {i} ({}): shape and strides differ in rank",
                        step.origin
                    ));
                }
                // Kernels count elements with plain products: they must not overflow (a
                // broadcast binding's logical size is not bounded by its slot's).
                if b.shape
                    .iter()
                    .try_fold(1usize, |a, &d| a.checked_mul(d))
                    .is_none()
                {
                    return Err(format!(
                        "step {i} ({}): binding shape {:?} has more elements than fit a usize",
                        step.origin, b.shape
                    ));
                }
                if b.end_byte() > size {
                    return Err(format!(
                        "step {i} ({}): binding {:?}+{} {:?} ends at byte {} past the slot's {size}",
                        step.origin,
                        b.slot,
                        b.byte_offset,
                        b.shape,
                        b.end_byte()
                    ));
                }
            }
            step.kernel
                .check(&step.inputs, &step.outputs)
                .map_err(|e| format!("step {i} ({}): {e}", step.origin))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the `.npubin` fuzzer: sizes whose arithmetic overflows are refused, not a
    /// panic (debug) or a wrapped value that passes the check (release).
    #[test]
    fn conv_dims_refuse_sizes_that_overflow() {
        let huge = usize::MAX / 2 + 7;
        // (x, w, padding, dilation, groups)
        type Case = ([usize; 4], [usize; 4], [usize; 2], [usize; 2], usize);
        let cases: [Case; 3] = [
            ([1, 4, 8, 8], [4, 2, 3, 3], [0, 0], [1, 1], huge),
            ([1, 4, 8, 8], [4, 4, 3, 3], [huge, 0], [1, 1], 1),
            ([1, 4, 8, 8], [4, 4, huge, 3], [0, 0], [huge, 1], 1),
        ];
        for (x, w, pad, dil, groups) in cases {
            let r = ConvDims::check(&x, &w, None, &[1, 4, 6, 6], [1, 1], pad, dil, groups);
            assert!(r.is_err(), "{x:?} {w:?} {pad:?} {dil:?} {groups}");
        }
        let ok = ConvDims::check(
            &[1, 4, 8, 8],
            &[4, 4, 3, 3],
            None,
            &[1, 4, 6, 6],
            [1, 1],
            [0, 0],
            [1, 1],
            1,
        );
        assert!(ok.is_ok());
    }
}
