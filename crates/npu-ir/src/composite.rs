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

use crate::attrs::{Attrs, Scalar};
use crate::op::Op;
use crate::IrError;
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;

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
    /// Three outputs (out, mean, rstd). Inputs: x, weight?, bias?.
    NativeLayerNorm {
        normalized_shape: Vec<usize>,
        eps: f64,
    },
    /// Inputs: x, weight?. `eps` None = the opmath dtype's machine epsilon.
    RmsNorm {
        normalized_shape: Vec<usize>,
        eps: Option<f64>,
    },
    /// Three outputs (out, mean [N, G], rstd [N, G]). Inputs: x, weight?, bias?.
    NativeGroupNorm {
        groups: usize,
        eps: f64,
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
        }
    }
}

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
        ("diff", "default") => c(Composite::Diff {
            n: usize::try_from(a.i64_or("n", 1)?)
                .map_err(|_| a.err("n", "must be non-negative"))?,
            dim: a.i64_or("dim", -1)?,
            prepend: n_inputs >= 2,
            append: n_inputs >= 3,
        }),
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
        ("dot" | "inner" | "vdot", "default") if in_rank == 1 => c(Composite::Dot),
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Map;

    fn p(op_type: &str, attrs: &str, n: usize, rank: usize) -> Op {
        let m: Map<String, Json> = serde_json::from_str(attrs).unwrap();
        Op::parse("n", op_type, &m, n, rank).unwrap().0
    }

    #[test]
    fn composites_are_typed_with_aten_defaults() {
        assert_eq!(
            p("aten.diff.default", r#"{"n": 1, "dim": -1}"#, 2, 2),
            Op::Composite(Composite::Diff {
                n: 1,
                dim: -1,
                prepend: true,
                append: false
            })
        );
        assert_eq!(
            p("aten.var.dim", r#"{"dim": [1]}"#, 1, 2),
            Op::Composite(Composite::Moments {
                kind: Moment::Var,
                dims: Some(vec![1]),
                correction: 1.0,
                keepdim: false
            })
        );
        assert_eq!(
            p("aten.var_mean.correction", r#"{"correction": 0}"#, 1, 2),
            Op::Composite(Composite::Moments {
                kind: Moment::VarMean,
                dims: None,
                correction: 0.0,
                keepdim: false
            })
        );
        assert_eq!(
            p("aten.celu.default", r#"{"alpha": 0.5}"#, 1, 2),
            // a pointwise table op now (one kernel on the NPU), not a composite
            Op::Unary(crate::UnaryOp::Elu {
                alpha: 0.5,
                scale: 1.0,
                input_scale: 2.0
            })
        );
        assert_eq!(
            p("aten.conv1d.padding", r#"{"padding": "same"}"#, 2, 3),
            Op::Composite(Composite::Conv1d {
                stride: 1,
                padding: Padding1d::Same,
                dilation: 1,
                groups: 1
            })
        );
        assert_eq!(
            p("aten.tile.default", r#"{"dims": [2]}"#, 1, 3),
            Op::Composite(Composite::Repeat {
                repeats: vec![1, 1, 2]
            })
        );
        assert_eq!(
            p("aten.rsub.Scalar", r#"{"other": 2.0, "alpha": 3}"#, 1, 2),
            Op::Composite(Composite::Rsub {
                alpha: 3.0,
                scalar: Some(2.0)
            })
        );
        assert!(matches!(
            p(
                "aten.pad.default",
                r#"{"pad": [1, 1], "mode": "reflect"}"#,
                1,
                2
            ),
            Op::Ext(_)
        ));
    }

    #[test]
    fn view_aliases_become_primitive_views() {
        assert_eq!(
            p(
                "aten.movedim.int",
                r#"{"source": 0, "destination": 2}"#,
                1,
                4
            ),
            Op::Permute {
                dims: vec![1, 2, 0, 3]
            }
        );
        assert_eq!(
            p(
                "aten.movedim.intlist",
                r#"{"source": [0, 1], "destination": [-1, 0]}"#,
                1,
                3
            ),
            Op::Permute {
                dims: vec![1, 2, 0]
            }
        );
        assert_eq!(
            p("aten.numpy_T.default", "{}", 1, 3),
            Op::Permute {
                dims: vec![2, 1, 0]
            }
        );
        assert_eq!(
            p("aten.mT.default", "{}", 1, 3),
            Op::Transpose { dim0: -2, dim1: -1 }
        );
        assert_eq!(p("aten.unflatten.int", r#"{"dim": 1}"#, 1, 2), Op::Reshape);
    }
}
