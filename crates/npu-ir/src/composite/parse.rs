//! Typing of the composite ops and view aliases from their torch_ir attributes.

use super::{Composite, Moment, Padding1d, SplitAt, StackKind};
use crate::attrs::{Attrs, Scalar};
use crate::op::Op;
use crate::IrError;
use serde_json::Value as Json;

fn norm_dim(d: i64, rank: usize) -> Option<usize> {
    let r = rank.max(1) as i64;
    let d = if d < 0 { d + r } else { d };
    (0..r).contains(&d).then_some(d as usize)
}

fn non_negative(a: &Attrs, key: &str, v: Vec<i64>) -> Result<Vec<usize>, IrError> {
    v.iter()
        .map(|&x| usize::try_from(x).ok())
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| a.err(key, format!("expected non-negative integers, got {v:?}")))
}

/// `dim` as an optional int list (`None`/absent = all dims; a single int is accepted).
fn opt_dims(a: &Attrs, key: &str) -> Result<Option<Vec<i64>>, IrError> {
    if !a.has(key) {
        return Ok(None);
    }
    Ok(Some(a.ints_or(key, 1, &[])?))
}

/// `movedim(source, destination)` as a permutation, with ATen's rule: the moved dims land at
/// their destinations, the others keep their relative order in the remaining positions.
fn movedim_perm(a: &Attrs, rank: usize) -> Result<Vec<i64>, IrError> {
    let src = a.ints_or("source", 1, &[])?;
    let dst = a.ints_or("destination", 1, &[])?;
    let bad = |m: &str| a.err("source", m.to_string());
    if src.len() != dst.len() {
        return Err(bad("source and destination differ in length"));
    }
    let norm = |v: &[i64]| {
        v.iter()
            .map(|&d| norm_dim(d, rank))
            .collect::<Option<Vec<_>>>()
    };
    let (src, dst) = (
        norm(&src).ok_or_else(|| bad("dim out of range"))?,
        norm(&dst).ok_or_else(|| bad("dim out of range"))?,
    );
    let mut perm: Vec<Option<usize>> = vec![None; rank];
    for (&s, &d) in src.iter().zip(&dst) {
        if perm[d].is_some() {
            return Err(bad("repeated destination dim"));
        }
        perm[d] = Some(s);
    }
    let mut rest = (0..rank).filter(|d| !src.contains(d));
    for p in perm.iter_mut() {
        if p.is_none() {
            *p = rest.next();
        }
    }
    perm.into_iter()
        .map(|p| p.map(|d| d as i64))
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| bad("repeated source dim"))
}

/// For a norm taking `(x, weight?, bias?)` with `n_inputs` tensors: true when the one
/// affine tensor given is the bias. One affine tensor whose slot nothing records is refused
/// rather than guessed (see [`Attrs::optional_tensors`]).
pub(crate) fn bias_only(a: &Attrs, n_inputs: usize) -> Result<bool, IrError> {
    let n = n_inputs.saturating_sub(1);
    match a.optional_tensors(&["weight", "bias"], n)? {
        Some(mask) => Ok(mask == [false, true]),
        None => Err(a.err(
            crate::ABSENT_TENSORS,
            "one affine tensor is given and the IR does not say whether it is the weight or \
             the bias (torch_ir drops absent optional tensors; export with npu's exporter, \
             which records them, or name the parameter ..weight/..bias)",
        )),
    }
}

fn ambiguous(a: &Attrs, slots: &str) -> IrError {
    a.err(
        crate::ABSENT_TENSORS,
        format!(
            "some of the optional tensors ({slots}) are given and the IR does not say which \
             (torch_ir drops absent optional tensors; export with npu's exporter, which \
             records them)"
        ),
    )
}

/// Types the composite ops and the view aliases; `None` when `name.overload` is not one.
/// Called for ops the main table in `op.rs` does not know.
pub(crate) fn parse(
    a: &Attrs,
    name: &str,
    overload: &str,
    n_inputs: usize,
    in_rank: usize,
) -> Result<Option<Op>, IrError> {
    let c = |c: Composite| Ok(Some(Op::Composite(c)));
    let moments = |kind: Moment| -> Result<Option<Op>, IrError> {
        // `.correction` carries `correction`; `.dim`/`.default` carry `unbiased`.
        let correction = match a.scalar("correction")? {
            Some(s) => s.as_f64(),
            None => f64::from(u8::from(a.bool_or("unbiased", true)?)),
        };
        c(Composite::Moments {
            kind,
            dims: opt_dims(a, "dim")?,
            correction,
            keepdim: a.bool_or("keepdim", false)?,
        })
    };
    match (name, overload) {
        ("diff", "default") => {
            // one extra tensor is the prepend unless the exporter says otherwise (torch_ir's
            // own executor reads it so)
            let extra = n_inputs.saturating_sub(1);
            let mask = a
                .optional_tensors(&["prepend", "append"], extra)?
                .unwrap_or_else(|| vec![extra >= 1, extra >= 2]);
            c(Composite::Diff {
                n: usize::try_from(a.i64_or("n", 1)?)
                    .map_err(|_| a.err("n", "must be non-negative"))?,
                dim: a.i64_or("dim", -1)?,
                prepend: mask[0],
                append: mask[1],
            })
        }
        ("rsub", "Tensor") => c(Composite::Rsub {
            alpha: a.f64_or("alpha", 1.0)?,
            scalar: if n_inputs >= 2 {
                None
            } else {
                Some(
                    a.scalar("other")?
                        .ok_or_else(|| a.err("other", "required attribute is missing"))?
                        .as_f64(),
                )
            },
        }),
        ("square", "default") => c(Composite::Square),
        ("addcmul", "default") => c(Composite::Addcmul {
            value: a.f64_or("value", 1.0)?,
        }),
        ("addcdiv", "default") => c(Composite::Addcdiv {
            value: a.f64_or("value", 1.0)?,
        }),
        ("lerp", "Scalar") => c(Composite::Lerp {
            weight: Some(
                a.scalar("weight")?
                    .ok_or_else(|| a.err("weight", "required attribute is missing"))?
                    .as_f64(),
            ),
        }),
        ("lerp", "Tensor") => c(Composite::Lerp { weight: None }),
        ("glu", "default") => c(Composite::Glu {
            dim: a.i64_or("dim", -1)?,
        }),
        ("softplus", "default") => c(Composite::Softplus {
            beta: a.f64_or("beta", 1.0)?,
            threshold: a.f64_or("threshold", 20.0)?,
        }),
        ("mish", "default") => c(Composite::Mish),
        ("elu", "default") => c(Composite::Elu {
            alpha: a.f64_or("alpha", 1.0)?,
            scale: a.f64_or("scale", 1.0)?,
            input_scale: a.f64_or("input_scale", 1.0)?,
        }),
        ("selu", "default") => c(Composite::Elu {
            alpha: 1.673_263_242_354_377_3,
            scale: 1.050_700_987_355_480_5,
            input_scale: 1.0,
        }),
        ("celu", "default") => {
            let alpha = a.f64_or("alpha", 1.0)?;
            if alpha == 0.0 {
                return Err(a.err("alpha", "celu alpha must not be 0"));
            }
            c(Composite::Elu {
                alpha,
                scale: 1.0,
                input_scale: 1.0 / alpha,
            })
        }
        ("logsumexp", "default") => c(Composite::Logsumexp {
            dims: a.ints_or("dim", 1, &[])?,
            keepdim: a.bool_or("keepdim", false)?,
        }),
        ("var", "default" | "dim" | "correction") => moments(Moment::Var),
        ("std", "default" | "dim" | "correction") => moments(Moment::Std),
        ("var_mean", "default" | "dim" | "correction") => moments(Moment::VarMean),
        ("std_mean", "default" | "dim" | "correction") => moments(Moment::StdMean),
        ("linalg_vector_norm", "default") => c(Composite::VectorNorm {
            ord: a.f64_or("ord", 2.0)?,
            dims: a.ints_or("dim", 1, &[])?,
            keepdim: a.bool_or("keepdim", false)?,
        }),
        ("norm", "Scalar" | "ScalarOpt_dim" | "ScalarOpt_dtype" | "ScalarOpt_dim_dtype") => {
            c(Composite::VectorNorm {
                ord: a.f64_or("p", 2.0)?,
                dims: a.ints_or("dim", 1, &[])?,
                keepdim: a.bool_or("keepdim", false)?,
            })
        }
        ("cosine_similarity", "default") => c(Composite::CosineSimilarity {
            dim: a.i64_or("dim", 1)?,
            eps: a.f64_or("eps", 1e-8)?,
        }),
        ("native_layer_norm", "default") => c(Composite::NativeLayerNorm {
            normalized_shape: non_negative(a, "normalized_shape", a.ints("normalized_shape")?)?,
            eps: a.f64_or("eps", 1e-5)?,
            bias_only: bias_only(a, n_inputs)?,
        }),
        ("rms_norm", "default") => c(Composite::RmsNorm {
            normalized_shape: non_negative(a, "normalized_shape", a.ints("normalized_shape")?)?,
            eps: a.scalar("eps")?.map(Scalar::as_f64),
        }),
        ("native_group_norm", "default") => {
            let g = a.i64_or("group", 0)?;
            if g < 1 {
                return Err(a.err("group", "must be at least 1"));
            }
            c(Composite::NativeGroupNorm {
                groups: g as usize,
                eps: a.f64_or("eps", 1e-5)?,
                bias_only: bias_only(a, n_inputs)?,
            })
        }
        ("instance_norm", "default") => c(Composite::InstanceNorm {
            use_input_stats: a.bool_or("use_input_stats", true)?,
            eps: a.f64_or("eps", 1e-5)?,
        }),
        ("addmv", "default") => c(Composite::Addmv {
            beta: a.f64_or("beta", 1.0)?,
            alpha: a.f64_or("alpha", 1.0)?,
        }),
        ("addr", "default") => c(Composite::Addr {
            beta: a.f64_or("beta", 1.0)?,
            alpha: a.f64_or("alpha", 1.0)?,
        }),
        ("einsum", "default") => c(Composite::Einsum {
            equation: a
                .string("equation")?
                .ok_or_else(|| a.err("equation", "required attribute is missing"))?,
        }),
        ("conv1d", "default" | "padding") => {
            let one = |key: &str, default: i64| -> Result<usize, IrError> {
                match a.ints_or(key, 1, &[default])?.as_slice() {
                    [x] if *x >= 0 => Ok(*x as usize),
                    v => Err(a.err(key, format!("expected one non-negative integer, got {v:?}"))),
                }
            };
            let padding = match a.map.get("padding") {
                Some(Json::String(s)) if s == "same" => Padding1d::Same,
                Some(Json::String(s)) if s == "valid" => Padding1d::Valid,
                Some(Json::String(s)) => {
                    return Err(a.err("padding", format!("unknown padding mode '{s}'")))
                }
                _ => Padding1d::Explicit(one("padding", 0)?),
            };
            let groups = a.i64_or("groups", 1)?;
            if groups < 1 {
                return Err(a.err("groups", "must be at least 1"));
            }
            c(Composite::Conv1d {
                stride: one("stride", 1)?,
                padding,
                dilation: one("dilation", 1)?,
                groups: groups as usize,
            })
        }
        ("mv", "default") => c(Composite::Mv),
        ("inner", "default") => c(Composite::Tensordot {
            dims_a: vec![-1],
            dims_b: vec![-1],
        }),
        ("dot" | "vdot", "default") if in_rank == 1 => c(Composite::Dot),
        ("outer" | "ger", "default") => c(Composite::Outer),
        ("expand_as", "default") => c(Composite::ExpandAs),
        ("reshape_as" | "view_as", "default") => c(Composite::ReshapeAs),
        ("select", "int") => c(Composite::Select {
            dim: a.i64_or("dim", 0)?,
            index: a.i64_or("index", 0)?,
        }),
        ("split_with_sizes" | "split", "default" | "sizes") => {
            let key = if a.has("split_sizes") {
                "split_sizes"
            } else {
                "split_size"
            };
            c(Composite::SplitWithSizes {
                sizes: non_negative(a, key, a.ints(key)?)?,
                dim: a.i64_or("dim", 0)?,
            })
        }
        ("unbind", "int") => c(Composite::Unbind {
            dim: a.i64_or("dim", 0)?,
        }),
        ("repeat", "default") => {
            let repeats = non_negative(a, "repeats", a.ints("repeats")?)?;
            if repeats.len() < in_rank {
                return Err(a.err(
                    "repeats",
                    format!("{} repeats for a rank-{in_rank} input", repeats.len()),
                ));
            }
            c(Composite::Repeat { repeats })
        }
        ("tile", "default") => {
            let mut repeats = non_negative(a, "dims", a.ints("dims")?)?;
            while repeats.len() < in_rank {
                repeats.insert(0, 1);
            }
            c(Composite::Repeat { repeats })
        }
        ("constant_pad_nd", "default") => c(Composite::ConstantPad {
            pad: a.ints("pad")?,
            value: a.f64_or("value", 0.0)?,
        }),
        ("pad", "default") => match a.string("mode")?.as_deref() {
            None | Some("constant") => c(Composite::ConstantPad {
                pad: a.ints("pad")?,
                value: a.f64_or("value", 0.0)?,
            }),
            // reflect/replicate/circular are not composites of these primitives
            Some(_) => Ok(None),
        },
        ("atleast_1d" | "atleast_2d" | "atleast_3d", "default") => Ok(Some(Op::Reshape)),
        ("atleast_1d" | "atleast_2d" | "atleast_3d", "Sequence") => {
            c(Composite::ViewEach { expand: false })
        }
        ("broadcast_tensors", "default") => c(Composite::ViewEach { expand: true }),
        ("hstack", "default") => c(Composite::Stack { kind: StackKind::H }),
        ("vstack" | "row_stack", "default") => c(Composite::Stack { kind: StackKind::V }),
        ("dstack", "default") => c(Composite::Stack { kind: StackKind::D }),
        ("column_stack", "default") => c(Composite::Stack {
            kind: StackKind::Column,
        }),
        ("narrow", "default") => c(Composite::Narrow {
            dim: a.i64_or("dim", 0)?,
            start: a.i64_or("start", 0)?,
            length: usize::try_from(a.i64_or("length", 0)?)
                .map_err(|_| a.err("length", "must be non-negative"))?,
        }),
        ("tensor_split", "indices") => c(Composite::TensorSplit {
            dim: a.i64_or("dim", 0)?,
            split: SplitAt::Indices(a.ints("indices")?),
        }),
        ("tensor_split", "sections") => {
            let n = a.i64_or("sections", 0)?;
            if n < 1 {
                return Err(a.err("sections", "must be at least 1"));
            }
            c(Composite::TensorSplit {
                dim: a.i64_or("dim", 0)?,
                split: SplitAt::Sections(n as usize),
            })
        }
        ("aminmax", "default") => c(Composite::Aminmax {
            dim: a.has("dim").then(|| a.i64_or("dim", 0)).transpose()?,
            keepdim: a.bool_or("keepdim", false)?,
        }),
        ("channel_shuffle" | "native_channel_shuffle", "default") => {
            let g = a.i64_or("groups", 0)?;
            if g < 1 {
                return Err(a.err("groups", "must be at least 1"));
            }
            c(Composite::ChannelShuffle { groups: g as usize })
        }
        ("tensordot", "default") => c(Composite::Tensordot {
            dims_a: a.ints_or("dims_self", 1, &[])?,
            dims_b: a.ints_or("dims_other", 1, &[])?,
        }),
        ("prelu" | "_prelu_kernel", "default") => c(Composite::Prelu),
        ("nansum", "default") => c(Composite::Nansum {
            dims: a.ints_or("dim", 1, &[])?,
            keepdim: a.bool_or("keepdim", false)?,
        }),
        ("float_power", "Tensor_Tensor") => c(Composite::FloatPower {
            scalar: None,
            scalar_lhs: false,
        }),
        ("float_power", "Tensor_Scalar") => c(Composite::FloatPower {
            scalar: Some(a.f64_or("exponent", 1.0)?),
            scalar_lhs: false,
        }),
        ("float_power", "Scalar") => c(Composite::FloatPower {
            scalar: Some(a.f64_or("self", 1.0)?),
            scalar_lhs: true,
        }),
        ("scalar_tensor", "default") => Ok(Some(Op::Full {
            value: a.f64_or("s", 0.0)?,
        })),
        ("one_hot", "default") => {
            let n = a.i64_or("num_classes", -1)?;
            if n < 1 {
                return Err(a.err(
                    "num_classes",
                    "num_classes = -1 takes the class count from the data (a dynamic shape)",
                ));
            }
            c(Composite::OneHot {
                num_classes: n as usize,
            })
        }
        ("repeat_interleave", "self_int") => c(Composite::RepeatInterleave {
            repeats: usize::try_from(a.i64_or("repeats", 1)?)
                .map_err(|_| a.err("repeats", "must be non-negative"))?,
            dim: a.has("dim").then(|| a.i64_or("dim", 0)).transpose()?,
        }),
        ("addbmm", "default") => c(Composite::Addbmm {
            beta: a.f64_or("beta", 1.0)?,
            alpha: a.f64_or("alpha", 1.0)?,
        }),
        ("index_reduce", "default") => c(Composite::IndexReduce {
            dim: a.i64_or("dim", 0)?,
            reduce: crate::ext::reduction(a, "reduce")?,
            include_self: a.bool_or("include_self", true)?,
        }),
        ("batch_norm" | "native_batch_norm", "default") if a.bool_or("training", false)? => {
            let mask = a
                .optional_tensors(
                    &["weight", "bias", "running_mean", "running_var"],
                    n_inputs.saturating_sub(1),
                )?
                .ok_or_else(|| ambiguous(a, "weight, bias, running_mean, running_var"))?;
            c(Composite::BatchNormTrain {
                eps: a.f64_or("eps", 1e-5)?,
                present: [mask[0], mask[1], mask[2], mask[3]],
            })
        }
        ("_native_batch_norm_legit", "default" | "no_stats") if a.bool_or("training", true)? => {
            let stats = usize::from(overload == "default") * 2;
            let mask = a
                .optional_tensors(&["weight", "bias"], n_inputs.saturating_sub(1 + stats))?
                .ok_or_else(|| ambiguous(a, "weight, bias"))?;
            c(Composite::BatchNormTrain {
                eps: a.f64_or("eps", 1e-5)?,
                present: [mask[0], mask[1], stats > 0, stats > 0],
            })
        }
        ("conv2d" | "conv3d", "padding") => {
            let n = if name == "conv2d" { 2 } else { 3 };
            let list = |key: &str| -> Result<Vec<usize>, IrError> {
                let v = non_negative(a, key, a.ints_or(key, n, &vec![1; n])?)?;
                if v.len() != n || v.contains(&0) {
                    return Err(a.err(key, format!("expected {n} positive values, got {v:?}")));
                }
                Ok(v)
            };
            let same = match a.string("padding")?.as_deref() {
                Some("same") => true,
                None | Some("valid") => false,
                Some(m) => return Err(a.err("padding", format!("unknown padding mode '{m}'"))),
            };
            let groups = a.i64_or("groups", 1)?;
            if groups < 1 {
                return Err(a.err("groups", "must be at least 1"));
            }
            c(Composite::ConvStringPadding {
                same,
                stride: list("stride")?,
                dilation: list("dilation")?,
                groups: groups as usize,
            })
        }
        // view aliases: the result shape is the output's
        ("unflatten", "int") | ("ravel", "default") => Ok(Some(Op::Reshape)),
        ("movedim", "int" | "intlist") => Ok(Some(Op::Permute {
            dims: movedim_perm(a, in_rank)?,
        })),
        ("mT" | "mH" | "adjoint", "default") if in_rank >= 2 => {
            Ok(Some(Op::Transpose { dim0: -2, dim1: -1 }))
        }
        ("numpy_T", "default") => Ok(Some(if in_rank < 2 {
            Op::Identity
        } else {
            Op::Permute {
                dims: (0..in_rank as i64).rev().collect(),
            }
        })),
        ("swapaxes", "default") => Ok(Some(Op::Transpose {
            dim0: a.i64_or("axis0", 0)?,
            dim1: a.i64_or("axis1", 1)?,
        })),
        ("swapdims", "default") => Ok(Some(Op::Transpose {
            dim0: a.i64_or("dim0", 0)?,
            dim1: a.i64_or("dim1", 1)?,
        })),
        ("broadcast_to", "default") => Ok(Some(Op::Expand {
            size: a.ints("size")?,
        })),
        _ => Ok(None),
    }
}
