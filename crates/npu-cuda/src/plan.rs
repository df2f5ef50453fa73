//! Turns every program step into planned launches (see `launch.rs`): which kernel, grid,
//! arguments and scratch. All decisions (GEMV vs cuBLASLt vs SIMT GEMM, split counts) are
//! made here, once, at prepare time.

use crate::device::{Device, Func};
use crate::gemm::{epilogue, plan_lt};
use crate::launch::{dtype_code, grid_for, unary_code, Arg, KernelLaunch, Launch, TdArg};
use crate::loc::Loc;
use crate::lt_call::{LtCall, LT_WORKSPACE};
use npu_compiler::program::{Binding, ConvDims, Kernel, PoolKind, Step};
use npu_ir::DType;
use std::collections::HashMap;

/// What one step needs: its launches and the scratch bytes past the cuBLASLt workspace.
pub(crate) struct StepPlan {
    pub launches: Vec<Launch>,
    pub scratch: u64,
}

pub(crate) struct Planner<'a> {
    pub dev: &'a Device,
    pub ew: &'a HashMap<String, Func>,
    pub step: usize,
}

const SCRATCH0: u64 = LT_WORKSPACE;
/// The longest context `k_attn_dec` takes (see `attention`): measured faster at 2048 keys,
/// slower at 32768; where they cross is not measured.
const DECODE_MAX_T: usize = 8192;

fn align(x: u64) -> u64 {
    x.div_ceil(256) * 256
}

fn need(
    ins: &[Binding],
    outs: &[Binding],
    lo: usize,
    hi: usize,
    n_out: usize,
) -> Result<(), String> {
    if ins.len() < lo || ins.len() > hi || outs.len() != n_out {
        return Err(format!(
            "expects {lo}..={hi} inputs and {n_out} outputs, got {} and {}",
            ins.len(),
            outs.len()
        ));
    }
    Ok(())
}

/// Grouped convolutions whose group reduces over at most this many taps (cg x kh x kw) run as
/// one direct kernel; larger groups amortize im2col + a tensor-core GEMM per group.
const DIRECT_CONV_MAX_TAPS: usize = 1024;

fn kl(func: Func, grid: (u32, u32, u32), block: u32, smem: u32, args: Vec<Arg>) -> Launch {
    Launch::Kernel(KernelLaunch {
        func,
        grid,
        block: (block, 1, 1),
        smem,
        args,
    })
}

fn rows_last(b: &Binding) -> Result<(usize, usize), String> {
    let d = *b.shape.last().ok_or("rank 0 operand")?;
    Ok((b.numel() / d.max(1), d))
}

impl Planner<'_> {
    fn f(&self, name: &str) -> Func {
        self.dev.func(name)
    }

    pub fn plan(&self, step: &Step) -> Result<StepPlan, String> {
        let (ins, outs) = (&step.inputs, &step.outputs);
        let td = |b: &Binding| Arg::Td(TdArg::of(b));
        let mut scratch = 0u64;
        let launches = match &step.kernel {
            Kernel::Gemm {
                alpha,
                beta,
                act,
                residual,
                norm,
            } => {
                need(ins, outs, 2, 4, 1)?;
                let (a, b, bias, nw) = step
                    .kernel
                    .gemm_operands(ins)
                    .ok_or_else(|| format!("a gemm with {} inputs", ins.len()))?;
                return self.gemm(
                    *alpha,
                    *beta,
                    unary_code(*act),
                    *residual,
                    a,
                    b,
                    bias,
                    norm.zip(nw),
                    &outs[0],
                );
            }
            Kernel::Conv2d {
                stride,
                padding,
                dilation,
                groups,
                act,
            } => {
                need(ins, outs, 2, 3, 1)?;
                let p = ConvP {
                    stride: *stride,
                    padding: *padding,
                    dilation: *dilation,
                    groups: *groups,
                    act: unary_code(*act),
                };
                return self.conv(&p, &ins[0], &ins[1], ins.get(2), &outs[0]);
            }
            Kernel::Pool2d {
                kind,
                kernel,
                stride,
                padding,
                dilation,
            } => {
                need(ins, outs, 1, 1, 1)?;
                let (x, o) = (&ins[0], &outs[0]);
                if x.shape.len() != 4 || o.shape.len() != 4 || x.shape[..2] != o.shape[..2] {
                    return Err(format!(
                        "expects x [N,C,H,W] and out [N,C,OH,OW], got {:?} and {:?}",
                        x.shape, o.shape
                    ));
                }
                if kernel.contains(&0) || stride.contains(&0) {
                    return Err(format!(
                        "kernel {kernel:?} and stride {stride:?} must be positive"
                    ));
                }
                let (k, cip, div) = match kind {
                    PoolKind::Max => (0, 0, 0),
                    PoolKind::Avg {
                        count_include_pad,
                        divisor,
                    } => (
                        1,
                        i32::from(*count_include_pad),
                        divisor.unwrap_or(0) as i32,
                    ),
                };
                let i = |v: usize| Arg::I32(v as i32);
                vec![kl(
                    self.f("k_pool2d"),
                    (grid_for(o.numel()), 1, 1),
                    256,
                    0,
                    vec![
                        td(x),
                        td(o),
                        Arg::I32(k),
                        i(kernel[0]),
                        i(kernel[1]),
                        i(stride[0]),
                        i(stride[1]),
                        i(padding[0]),
                        i(padding[1]),
                        i(dilation[0]),
                        i(dilation[1]),
                        Arg::I32(cip),
                        Arg::I32(div),
                    ],
                )]
            }
            Kernel::AdaptiveAvgPool2d => {
                need(ins, outs, 1, 1, 1)?;
                let (x, o) = (&ins[0], &outs[0]);
                if x.shape.len() != 4 || o.shape.len() != 4 || x.shape[..2] != o.shape[..2] {
                    return Err(format!(
                        "expects x [N,C,H,W] and out [N,C,OH,OW], got {:?} and {:?}",
                        x.shape, o.shape
                    ));
                }
                // Largest window: ceil(H / OH) x ceil(W / OW).
                let window =
                    x.shape[2].div_ceil(o.shape[2].max(1)) * x.shape[3].div_ceil(o.shape[3].max(1));
                let (name, grid) = if window >= 32 {
                    ("k_adaptive_avg_pool2d_warp", grid_for(o.numel() * 32))
                } else {
                    ("k_adaptive_avg_pool2d", grid_for(o.numel()))
                };
                vec![kl(self.f(name), (grid, 1, 1), 256, 0, vec![td(x), td(o)])]
            }
            Kernel::Elementwise { expr } => {
                need(ins, outs, 0, usize::MAX, 1)?;
                expr.validate(ins.len())?;
                let o = &outs[0];
                for (i, b) in ins.iter().enumerate() {
                    if b.shape != o.shape {
                        return Err(format!(
                            "input {i} is bound as {:?}, the output as {:?}",
                            b.shape, o.shape
                        ));
                    }
                }
                let (_, name) = crate::elementwise::generate(expr, ins, o);
                let func = *self
                    .ew
                    .get(&name)
                    .ok_or("elementwise kernel was not compiled")?;
                let mut args: Vec<Arg> = ins.iter().map(td).collect();
                args.push(td(o));
                args.push(Arg::I64(o.numel() as i64));
                vec![kl(func, (grid_for(o.numel()), 1, 1), 256, 0, args)]
            }
            Kernel::Softmax { scale } => {
                need(ins, outs, 1, 2, 1)?;
                let (x, o) = (&ins[0], &outs[0]);
                if x.shape.is_empty()
                    || o.shape != x.shape
                    || ins.get(1).is_some_and(|m| m.shape != x.shape)
                {
                    return Err(format!(
                        "x {:?}, mask and output {:?} must share one shape of rank >= 1",
                        x.shape, o.shape
                    ));
                }
                let (rows, _) = rows_last(x)?;
                let mask = ins.get(1).map_or(Arg::Td(TdArg::null()), td);
                vec![kl(
                    self.f("k_softmax"),
                    (rows as u32, 1, 1),
                    256,
                    0,
                    vec![
                        td(x),
                        mask,
                        Arg::I32(i32::from(ins.len() == 2)),
                        Arg::F32(*scale),
                        td(o),
                    ],
                )]
            }
            Kernel::RmsNorm { eps } => {
                need(ins, outs, 2, 2, 1)?;
                let (x, w, o) = (&ins[0], &ins[1], &outs[0]);
                let (rows, d) = rows_last(x)?;
                if o.shape != x.shape || w.numel() != d {
                    return Err(format!(
                        "rms_norm: x {:?}, w {:?}, out {:?} do not agree",
                        x.shape, w.shape, o.shape
                    ));
                }
                vec![kl(
                    self.f("k_rms_norm"),
                    (rows as u32, 1, 1),
                    256,
                    0,
                    vec![td(x), td(w), Arg::F32(*eps), td(o)],
                )]
            }
            Kernel::LayerNorm {
                eps,
                has_weight,
                has_bias,
            } => {
                let n = 1 + usize::from(*has_weight) + usize::from(*has_bias);
                need(ins, outs, n, n, 1)?;
                let (x, o) = (&ins[0], &outs[0]);
                let (rows, d) = rows_last(x)?;
                let w = has_weight.then(|| &ins[1]);
                let b = has_bias.then(|| &ins[n - 1]);
                if o.shape != x.shape
                    || w.is_some_and(|w| w.numel() != d)
                    || b.is_some_and(|b| b.numel() != d)
                {
                    return Err(format!(
                        "layer_norm: x {:?} and out {:?} or weight/bias do not agree",
                        x.shape, o.shape
                    ));
                }
                let opt = |v: Option<&Binding>| v.map_or(Arg::Td(TdArg::null()), td);
                vec![kl(
                    self.f("k_layer_norm"),
                    (rows as u32, 1, 1),
                    256,
                    0,
                    vec![
                        td(x),
                        opt(w),
                        opt(b),
                        Arg::I32(i32::from(*has_weight)),
                        Arg::I32(i32::from(*has_bias)),
                        Arg::F32(*eps),
                        td(o),
                    ],
                )]
            }
            Kernel::Reduce { op, reduced } => {
                need(ins, outs, 1, 1, 1)?;
                let (x, o) = (&ins[0], &outs[0]);
                if *reduced > x.shape.len() {
                    return Err(format!(
                        "reduces {reduced} dims of a rank-{} input",
                        x.shape.len()
                    ));
                }
                let rows: usize = x.shape[..x.shape.len() - reduced].iter().product();
                if o.numel() != rows {
                    return Err(format!(
                        "output {:?} does not hold the {rows} leading elements of {:?}",
                        o.shape, x.shape
                    ));
                }
                let mean = i32::from(*op == npu_compiler::program::ReduceOp::Mean);
                vec![kl(
                    self.f("k_reduce"),
                    (rows.max(1) as u32, 1, 1),
                    256,
                    0,
                    vec![td(x), Arg::I32(*reduced as i32), Arg::I32(mean), td(o)],
                )]
            }
            Kernel::Embedding => {
                need(ins, outs, 2, 2, 1)?;
                let (t, ids, o) = (&ins[0], &ins[1], &outs[0]);
                if t.shape.len() != 2
                    || o.shape.len() != ids.shape.len() + 1
                    || o.numel() != ids.numel() * t.shape[1]
                {
                    return Err(format!(
                        "expects table [V,D], ids [..] and out [.., D]; got {:?}, {:?}, {:?}",
                        t.shape, ids.shape, o.shape
                    ));
                }
                if ids.dtype.is_float() {
                    return Err(format!("ids must be integers, got {}", ids.dtype));
                }
                vec![kl(
                    self.f("k_embedding"),
                    (grid_for(o.numel()), 1, 1),
                    256,
                    0,
                    vec![
                        td(t),
                        td(ids),
                        td(o),
                        Arg::I64(ids.numel() as i64),
                        Arg::Ptr(0, Loc::Err),
                        Arg::I32(self.step as i32),
                    ],
                )]
            }
            Kernel::IndexCopy { axis } => {
                need(ins, outs, 2, 2, 1)?;
                let (idx, src, dst) = (&ins[0], &ins[1], &outs[0]);
                let r = src.shape.len();
                if *axis >= r
                    || dst.shape.len() != r
                    || idx.numel() != src.shape[*axis]
                    || (0..r).any(|d| d != *axis && src.shape[d] != dst.shape[d])
                {
                    return Err(format!(
                        "index {:?}, src {:?} and dest {:?} do not agree along axis {axis}",
                        idx.shape, src.shape, dst.shape
                    ));
                }
                if idx.dtype.is_float() {
                    return Err(format!("index must be integers, got {}", idx.dtype));
                }
                vec![kl(
                    self.f("k_index_copy"),
                    (grid_for(src.numel()), 1, 1),
                    256,
                    0,
                    vec![
                        td(idx),
                        td(src),
                        td(dst),
                        Arg::I32(*axis as i32),
                        Arg::I64(src.numel() as i64),
                        Arg::Ptr(0, Loc::Err),
                        Arg::I32(self.step as i32),
                    ],
                )]
            }
            Kernel::Rope => {
                need(ins, outs, 3, 3, 1)?;
                let x = &ins[0];
                if x.shape.is_empty()
                    || ins[1].shape != x.shape
                    || ins[2].shape != x.shape
                    || outs[0].shape != x.shape
                {
                    return Err("x, cos, sin and out must share one shape".into());
                }
                if x.shape[x.shape.len() - 1] % 2 == 1 {
                    return Err("last dim is odd".into());
                }
                vec![kl(
                    self.f("k_rope"),
                    (grid_for(x.numel()), 1, 1),
                    256,
                    0,
                    vec![
                        td(x),
                        td(&ins[1]),
                        td(&ins[2]),
                        td(&outs[0]),
                        Arg::I64(x.numel() as i64),
                    ],
                )]
            }
            Kernel::Attention { scale, causal } => {
                need(ins, outs, 3, 4, 1)?;
                let (l, s) = self.attention(*scale, *causal, ins, &outs[0])?;
                scratch = s;
                l
            }
            Kernel::Copy => {
                need(ins, outs, 1, 1, 1)?;
                if ins[0].numel() != outs[0].numel() {
                    return Err(format!(
                        "input {:?} and output {:?} differ in size",
                        ins[0].shape, outs[0].shape
                    ));
                }
                let n = outs[0].numel();
                vec![kl(
                    self.f("k_copy"),
                    (grid_for(n), 1, 1),
                    256,
                    0,
                    vec![td(&ins[0]), td(&outs[0]), Arg::I64(n as i64)],
                )]
            }
            Kernel::Fill { value } => {
                need(ins, outs, 0, 0, 1)?;
                let n = outs[0].numel();
                vec![kl(
                    self.f("k_fill"),
                    (grid_for(n), 1, 1),
                    256,
                    0,
                    vec![td(&outs[0]), Arg::F64(*value), Arg::I64(n as i64)],
                )]
            }
        };
        Ok(StepPlan { launches, scratch })
    }

    #[allow(clippy::too_many_arguments)]
    fn gemm(
        &self,
        alpha: f32,
        beta: f32,
        act: i32,
        residual: bool,
        a: &Binding,
        b: &Binding,
        bias: Option<&Binding>,
        norm: Option<(f32, &Binding)>,
        out: &Binding,
    ) -> Result<StepPlan, String> {
        let (ra, rb, r) = (a.shape.len(), b.shape.len(), out.shape.len());
        if ra < 2 || rb < 2 || r < 2 || ra > r || rb > r {
            return Err(format!(
                "operands a {:?}, b {:?}, out {:?} have unusable ranks",
                a.shape, b.shape, out.shape
            ));
        }
        let (m, n, k) = (out.shape[r - 2], out.shape[r - 1], a.shape[ra - 1]);
        if a.shape[ra - 2] != m || b.shape[rb - 2] != k || b.shape[rb - 1] != n {
            return Err(format!(
                "shapes do not chain: a {:?} @ b {:?} -> out {:?}",
                a.shape, b.shape, out.shape
            ));
        }
        let ob = &out.shape[..r - 2];
        let batches: usize = ob.iter().product();
        let with = |last: [usize; 2]| -> Vec<usize> { ob.iter().copied().chain(last).collect() };
        let mut an = TdArg::of(a).aligned_to(&with([m, k]));
        let bn = TdArg::of(b).aligned_to(&with([k, n]));
        let biasn = bias.map(|x| TdArg::of(x).aligned_to(&out.shape));
        let bias_mode = match (bias.is_some(), residual) {
            (false, _) => 0,
            (true, false) => 1,
            (true, true) => 2,
        };
        let o = TdArg::of(out);
        let (b_sk, b_sn) = (bn.td.st[r - 2], bn.td.st[r - 1]);
        let gemv = m == 1
            && b_sk == 1
            && (1..=12288).contains(&k)
            && batches <= 65535
            && b.dtype.is_float();
        let esz = b.dtype.size_bytes() as u64;
        let off_ok = matches!(bn.loc, Loc::Slot(_, off) if off % 16 == 0);
        let bs_ok = (0..r - 2).all(|d| bn.td.st[d] % 8 == 0);
        let vec = esz == 2 && k % 8 == 0 && b_sn % 8 == 0 && off_ok && bs_ok;
        // Same 16-bit dtype on both sides: a is staged raw (half the shared memory).
        let raw16 = gemv && vec && a.dtype == b.dtype;
        // The RMSNorm prologue: in k_gemv16's staging of a, or else one k_rms_norm launch
        // into scratch (after the cuBLASLt result) that the GEMM reads as its a.
        let mut pre = Vec::new();
        let mut norm_end = 0;
        let norm_arg = match norm {
            Some((eps, nw)) if raw16 => (TdArg::of(nw), 1, eps),
            Some((eps, nw)) => {
                if ra != 2 {
                    return Err(format!(
                        "a normalized gemm needs a 2-D a, got {:?}",
                        a.shape
                    ));
                }
                let off = SCRATCH0 + align((batches * m * n * 4) as u64);
                norm_end = off + align((m * k * a.dtype.size_bytes()) as u64) - SCRATCH0;
                let normed = TdArg::scratch(off, a.dtype, &[m, k]);
                pre.push(kl(
                    self.f("k_rms_norm"),
                    (m as u32, 1, 1),
                    256,
                    0,
                    vec![
                        Arg::Td(TdArg::of(a)),
                        Arg::Td(TdArg::of(nw)),
                        Arg::F32(eps),
                        Arg::Td(normed),
                    ],
                ));
                an = normed.aligned_to(&with([m, k]));
                (TdArg::null(), 0, 0.0)
            }
            None => (TdArg::null(), 0, 0.0),
        };
        let plan = self.gemm_paths(GemmPaths {
            alpha,
            beta,
            act,
            bias_mode,
            a_dtype: a.dtype,
            b_dtype: b.dtype,
            an,
            bn,
            biasn,
            o,
            norm: norm_arg,
            m,
            n,
            k,
            batches,
            gemv,
            vec,
            raw16,
            out_numel: out.numel(),
        })?;
        pre.extend(plan.launches);
        Ok(StepPlan {
            launches: pre,
            scratch: plan.scratch.max(norm_end),
        })
    }

    /// The GEMM's launches once its operands are bound (see `gemm`).
    fn gemm_paths(&self, g: GemmPaths) -> Result<StepPlan, String> {
        let GemmPaths {
            alpha,
            beta,
            act,
            bias_mode,
            a_dtype,
            b_dtype,
            an,
            bn,
            biasn,
            o,
            norm,
            m,
            n,
            k,
            batches,
            gemv,
            vec,
            raw16,
            out_numel,
        } = g;
        let null = TdArg::null();
        if gemv {
            let (name, smem) = if raw16 {
                ("k_gemv16", k * 2)
            } else {
                ("k_gemv", k * 4)
            };
            // One warp per output column, 8 per block (4 per block, for more blocks at
            // N = 1536, measured slower on the H100: each block stages all of `a`).
            let launch = kl(
                self.f(name),
                (n.div_ceil(8) as u32, batches.max(1) as u32, 1),
                256,
                smem as u32,
                vec![
                    Arg::Td(an),
                    Arg::Td(bn),
                    Arg::Td(biasn.unwrap_or(null)),
                    Arg::I32(bias_mode),
                    Arg::F32(alpha),
                    Arg::F32(beta),
                    Arg::I32(act),
                    Arg::Td(o),
                    Arg::I32(i32::from(vec)),
                ],
            );
            let launch = match launch {
                Launch::Kernel(mut kern) if raw16 => {
                    // k_gemv16 has no `vec` flag; it takes the norm prologue's operands
                    kern.args.pop();
                    kern.args.push(Arg::Td(norm.0));
                    kern.args.push(Arg::I32(norm.1));
                    kern.args.push(Arg::F32(norm.2));
                    Launch::Kernel(kern)
                }
                other => other,
            };
            return Ok(StepPlan {
                launches: vec![launch],
                scratch: 0,
            });
        }
        if m * n * k >= 32 * 32 * 32 {
            let d_off = SCRATCH0;
            let lt = plan_lt(
                self.dev,
                &an,
                &bn,
                a_dtype,
                b_dtype,
                m as i64,
                n as i64,
                k as i64,
                batches as i64,
                alpha,
                d_off,
                (n as i64, (m * n) as i64),
            )
            .map_err(|e| e.to_string())?;
            if let Some(call) = lt {
                let total = out_numel;
                let epi = epilogue(
                    self.dev,
                    d_off,
                    (m * n) as i64,
                    biasn.map(|b| (b, bias_mode)),
                    beta,
                    act,
                    o,
                    total,
                );
                return Ok(StepPlan {
                    launches: vec![Launch::Lt(Box::new(call)), epi],
                    scratch: align((batches * m * n * 4) as u64),
                });
            }
        }
        Ok(StepPlan {
            launches: vec![self.simt_gemm(
                an,
                bn,
                biasn.map(|b| (b, bias_mode)),
                alpha,
                beta,
                act,
                o,
                m,
                n,
                batches,
            )],
            scratch: 0,
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn simt_gemm(
        &self,
        a: TdArg,
        b: TdArg,
        bias: Option<(TdArg, i32)>,
        alpha: f32,
        beta: f32,
        act: i32,
        out: TdArg,
        m: usize,
        n: usize,
        batches: usize,
    ) -> Launch {
        let (bias, mode) = bias.map_or((TdArg::null(), 0), |(b, m)| (b, m));
        kl(
            self.f("k_gemm"),
            (
                n.div_ceil(64) as u32,
                m.div_ceil(64) as u32,
                batches.max(1) as u32,
            ),
            256,
            0,
            vec![
                Arg::Td(a),
                Arg::Td(b),
                Arg::Td(bias),
                Arg::I32(mode),
                Arg::F32(alpha),
                Arg::F32(beta),
                Arg::I32(act),
                Arg::Td(out),
            ],
        )
    }

    fn conv(
        &self,
        p: &ConvP,
        x: &Binding,
        w: &Binding,
        bias: Option<&Binding>,
        out: &Binding,
    ) -> Result<StepPlan, String> {
        let ConvDims {
            n,
            h,
            w: wd,
            o,
            cg,
            kh,
            kw,
            oh,
            ow,
            groups: g,
            ..
        } = ConvDims::check(
            &x.shape,
            &w.shape,
            bias.map(|b| b.shape.as_slice()),
            &out.shape,
            p.stride,
            p.padding,
            p.dilation,
            p.groups,
        )?;
        let og = o / g;
        let kc = cg * kh * kw;
        if g > 1 && kc <= DIRECT_CONV_MAX_TAPS {
            return Ok(self.conv_direct(p, x, w, bias, out, n * o * oh * ow));
        }
        let cols = n * oh * ow;
        let wdt = if w.dtype.is_float() && w.dtype != DType::F64 {
            w.dtype
        } else {
            DType::F32
        };
        let col_bytes = align((kc * cols * wdt.size_bytes()) as u64);
        let d_bytes = align((og * cols * 4) as u64);
        let (col_off, d_off) = (SCRATCH0, SCRATCH0 + col_bytes);
        let w_dense = w.is_contiguous() && w.dtype == wdt;
        // 1x1, stride 1, no padding, over dense planes: the input already is each image's
        // [cg, pix] B matrix, so one GEMM batched over images replaces im2col.
        let pointwise = kh == 1
            && kw == 1
            && p.stride == [1, 1]
            && p.padding == [0, 0]
            && x.dtype == wdt
            && w_dense
            && x.strides[3] == 1
            && (h == 1 || x.strides[2] == wd);
        let mut launches = Vec::new();
        for gi in 0..g {
            let i = |v: usize| Arg::I32(v as i32);
            let lt = if pointwise {
                self.conv_1x1_lt(x, w, gi, [n, cg, og, oh * ow], d_off)?
            } else {
                None
            };
            if let Some(call) = lt {
                launches.push(Launch::Lt(Box::new(call)));
                launches.push(self.conv_epilogue(p, bias, out, gi, og, cols, d_off));
                continue;
            }
            // 32-bit index kernels (2-D grids) when the sizes fit, else the 64-bit ones.
            let small = cols < i32::MAX as usize && h * wd < i32::MAX as usize;
            let (im2col, im_grid) = if wdt.size_bytes() == 2 && cols % 8 == 0 {
                ("k_im2col8", (grid_for(kc * cols / 8), 1, 1))
            } else if small {
                (
                    "k_im2col2",
                    (cols.div_ceil(256).min(4096) as u32, kc.min(65535) as u32, 1),
                )
            } else {
                ("k_im2col", (grid_for(kc * cols), 1, 1))
            };
            launches.push(kl(
                self.f(im2col),
                im_grid,
                256,
                0,
                vec![
                    Arg::Td(TdArg::of(x)),
                    i(gi * cg),
                    i(cg),
                    i(kh),
                    i(kw),
                    i(p.stride[0]),
                    i(p.stride[1]),
                    i(p.padding[0]),
                    i(p.padding[1]),
                    i(p.dilation[0]),
                    i(p.dilation[1]),
                    i(oh),
                    i(ow),
                    Arg::Ptr(0, Loc::Scratch(col_off)),
                    Arg::I32(dtype_code(wdt)),
                ],
            ));
            // W_g as [og, kc] (from the 4-D weight's strides when it is dense).
            let mut wa = TdArg::of(w);
            if let Loc::Slot(s, off) = wa.loc {
                wa.loc = Loc::Slot(
                    s,
                    off + (gi * og * w.strides[0] * w.dtype.size_bytes()) as u64,
                );
            }
            wa.td.rank = 2;
            wa.td.sh[0] = og as i64;
            wa.td.sh[1] = kc as i64;
            if w_dense {
                wa.td.st[0] = kc as i64;
                wa.td.st[1] = 1;
            }
            let colb = TdArg::scratch(col_off, wdt, &[kc, cols]);
            let dt = TdArg::scratch(d_off, DType::F32, &[og, cols]);
            let lt = if w_dense {
                plan_lt(
                    self.dev,
                    &wa,
                    &colb,
                    wdt,
                    wdt,
                    og as i64,
                    cols as i64,
                    kc as i64,
                    1,
                    1.0,
                    d_off,
                    (cols as i64, (og * cols) as i64),
                )
                .map_err(|e| e.to_string())?
            } else {
                None
            };
            match lt {
                Some(call) => launches.push(Launch::Lt(Box::new(call))),
                None if w_dense => {
                    launches.push(self.simt_gemm(wa, colb, None, 1.0, 0.0, -1, dt, og, cols, 1))
                }
                None => {
                    // Strided weight: gather it through a [og, cg, kh, kw] view per element.
                    return Err(format!(
                        "conv weight {:?} with strides {:?} is not dense",
                        w.shape, w.strides
                    ));
                }
            }
            launches.push(self.conv_epilogue(p, bias, out, gi, og, cols, d_off));
        }
        Ok(StepPlan {
            launches,
            scratch: col_bytes + d_bytes,
        })
    }

    /// Group `gi` of a 1x1 convolution over dense planes as one cuBLASLt GEMM batched over the
    /// images: D[o, img * pix + q] = sum_c W[gi * og + o, c] x[img, gi * cg + c, q], i.e. D
    /// rows `cols` apart and images `pix` apart, the layout the conv epilogue reads.
    fn conv_1x1_lt(
        &self,
        x: &Binding,
        w: &Binding,
        gi: usize,
        [n, cg, og, pix]: [usize; 4],
        d_off: u64,
    ) -> Result<Option<LtCall>, String> {
        let esz = x.dtype.size_bytes();
        let mut b = TdArg::of(x);
        if let Loc::Slot(s, off) = b.loc {
            b.loc = Loc::Slot(s, off + (gi * cg * x.strides[1] * esz) as u64);
        }
        b.td.rank = 3;
        b.td.sh[..3].copy_from_slice(&[n as i64, cg as i64, pix as i64]);
        b.td.st[..3].copy_from_slice(&[x.strides[0] as i64, x.strides[1] as i64, 1]);
        let mut a = TdArg::of(w);
        if let Loc::Slot(s, off) = a.loc {
            a.loc = Loc::Slot(
                s,
                off + (gi * og * w.strides[0] * w.dtype.size_bytes()) as u64,
            );
        }
        a.td.rank = 3;
        a.td.sh[..3].copy_from_slice(&[n as i64, og as i64, cg as i64]);
        a.td.st[..3].copy_from_slice(&[0, cg as i64, 1]);
        plan_lt(
            self.dev,
            &a,
            &b,
            w.dtype,
            x.dtype,
            og as i64,
            pix as i64,
            cg as i64,
            n as i64,
            1.0,
            d_off,
            ((n * pix) as i64, pix as i64),
        )
        .map_err(|e| e.to_string())
    }

    /// out[:, gi * og + o] = act(D[o, :] + bias) for one group, from D laid out [og, cols].
    #[allow(clippy::too_many_arguments)]
    fn conv_epilogue(
        &self,
        p: &ConvP,
        bias: Option<&Binding>,
        out: &Binding,
        gi: usize,
        og: usize,
        cols: usize,
        d_off: u64,
    ) -> Launch {
        let (epi, epi_grid) = if cols < i32::MAX as usize {
            (
                "k_conv_epilogue2",
                (cols.div_ceil(256).min(4096) as u32, og.min(65535) as u32, 1),
            )
        } else {
            ("k_conv_epilogue", (grid_for(og * cols), 1, 1))
        };
        kl(
            self.f(epi),
            epi_grid,
            256,
            0,
            vec![
                Arg::Ptr(0, Loc::Scratch(d_off)),
                Arg::I64(cols as i64),
                Arg::I64((gi * og) as i64),
                Arg::Td(bias.map_or(TdArg::null(), TdArg::of)),
                Arg::I32(i32::from(bias.is_some())),
                Arg::I32(p.act),
                Arg::Td(TdArg::of(out)),
                Arg::I64(og as i64),
            ],
        )
    }

    /// Grouped and depthwise convolutions in one launch (kernels/conv.cu).
    fn conv_direct(
        &self,
        p: &ConvP,
        x: &Binding,
        w: &Binding,
        bias: Option<&Binding>,
        out: &Binding,
        total: usize,
    ) -> StepPlan {
        let i = |v: usize| Arg::I32(v as i32);
        StepPlan {
            launches: vec![kl(
                self.f("k_conv_direct"),
                (grid_for(total), 1, 1),
                256,
                0,
                vec![
                    Arg::Td(TdArg::of(x)),
                    Arg::Td(TdArg::of(w)),
                    Arg::Td(bias.map_or(TdArg::null(), TdArg::of)),
                    Arg::I32(i32::from(bias.is_some())),
                    Arg::I32(p.act),
                    Arg::Td(TdArg::of(out)),
                    i(p.groups),
                    i(p.stride[0]),
                    i(p.stride[1]),
                    i(p.padding[0]),
                    i(p.padding[1]),
                    i(p.dilation[0]),
                    i(p.dilation[1]),
                ],
            )],
            scratch: 0,
        }
    }

    fn attention(
        &self,
        scale: f32,
        causal: bool,
        ins: &[Binding],
        out: &Binding,
    ) -> Result<(Vec<Launch>, u64), String> {
        let (q, k, v) = (&ins[0], &ins[1], &ins[2]);
        if q.shape.len() != 4 || k.shape.len() != 4 || v.shape.len() != 4 || out.shape != q.shape {
            return Err(format!("expects q [B,H,S,D], k/v [B,KVH,T,D], out as q; got q {:?}, k {:?}, v {:?}, out {:?}", q.shape, k.shape, v.shape, out.shape));
        }
        let (b, h, s, d) = (q.shape[0], q.shape[1], q.shape[2], q.shape[3]);
        let (kvh, t) = (k.shape[1], k.shape[2]);
        if k.shape[0] != b || v.shape != k.shape || k.shape[3] != d || kvh == 0 || h % kvh != 0 {
            return Err(format!(
                "k {:?} / v {:?} do not fit q {:?}",
                k.shape, v.shape, q.shape
            ));
        }
        if d > 256 || d == 0 {
            return Err(format!("head dim {d} is outside 1..=256"));
        }
        if let Some(m) = ins.get(3) {
            if m.shape != [b, h, s, t] {
                return Err(format!(
                    "mask {:?} is not [B,H,S,T] = {:?}",
                    m.shape,
                    [b, h, s, t]
                ));
            }
        }
        if s > 65535 || b * kvh > 65535 {
            return Err(format!(
                "{s} query rows or {} batch x kv heads exceed the grid",
                b * kvh
            ));
        }
        let group = h / kvh;
        let mask = ins.get(3);
        // One query row, the heads of a KV group sharing one mask row: the decode kernel,
        // up to DECODE_MAX_T keys (H100: 1.40 vs 1.69 ms of attention per step at 2048
        // keys, but 6.0 vs ~4.2 ms at 32768, where k_attn's longer splits win).
        let shared_mask = mask.is_none_or(|m| m.strides[1] == 0 || group == 1);
        if s == 1 && !causal && group <= 8 && d <= 128 && t <= DECODE_MAX_T && shared_mask {
            return Ok(self.attention_decode(scale, ins, out, b, h, kvh, t, d));
        }
        let nw = group.min(8);
        let base_blocks = b * kvh * s * group.div_ceil(nw);
        let want = (2 * self.dev.sms.max(1) as usize).div_ceil(base_blocks.max(1));
        let max_splits = t.div_ceil(128).max(1);
        let nsplit0 = want.clamp(1, max_splits);
        let split_len = t.div_ceil(nsplit0).div_ceil(32) * 32;
        let nsplit = t.div_ceil(split_len.max(1)).max(1);
        let part_bytes = align((b * h * s * nsplit * (d + 2) * 4) as u64);
        let smem = ((32 * (d + 1) + 32 * d + nw * d) * 4) as u32;
        let mask = ins.get(3).map_or(TdArg::null(), TdArg::of);
        let mut launches = Vec::new();
        for hbase in (0..group).step_by(nw) {
            launches.push(kl(
                self.f("k_attn"),
                (nsplit as u32, s as u32, (b * kvh) as u32),
                (32 * nw) as u32,
                smem,
                vec![
                    Arg::Td(TdArg::of(q)),
                    Arg::Td(TdArg::of(k)),
                    Arg::Td(TdArg::of(v)),
                    Arg::Td(mask),
                    Arg::I32(i32::from(ins.len() == 4)),
                    Arg::I32(i32::from(causal)),
                    Arg::F32(scale),
                    Arg::I32(group as i32),
                    Arg::I32(hbase as i32),
                    Arg::I64(split_len as i64),
                    Arg::I32(nsplit as i32),
                    Arg::Ptr(0, Loc::Scratch(SCRATCH0)),
                ],
            ));
        }
        launches.push(kl(
            self.f("k_attn_combine"),
            ((b * h * s) as u32, 1, 1),
            128,
            0,
            vec![
                Arg::Ptr(0, Loc::Scratch(SCRATCH0)),
                Arg::I32(nsplit as i32),
                Arg::Td(TdArg::of(out)),
            ],
        ));
        Ok((launches, part_bytes))
    }
}

impl Planner<'_> {
    /// `k_attn_dec` over splits of at least 32 keys, about two blocks per SM in all, then
    /// `k_attn_combine`.
    #[allow(clippy::too_many_arguments)]
    fn attention_decode(
        &self,
        scale: f32,
        ins: &[Binding],
        out: &Binding,
        b: usize,
        h: usize,
        kvh: usize,
        t: usize,
        d: usize,
    ) -> (Vec<Launch>, u64) {
        let want = (2 * self.dev.sms.max(1) as usize).div_ceil(b * kvh).max(1);
        let split_len = t.div_ceil(want).div_ceil(32).max(1) * 32;
        let nsplit = t.div_ceil(split_len).max(1);
        let part_bytes = align((b * h * nsplit * (d + 2) * 4) as u64);
        let mask = ins.get(3).map_or(TdArg::null(), TdArg::of);
        let launches = vec![
            kl(
                self.f("k_attn_dec"),
                (nsplit as u32, (b * kvh) as u32, 1),
                128,
                0,
                vec![
                    Arg::Td(TdArg::of(&ins[0])),
                    Arg::Td(TdArg::of(&ins[1])),
                    Arg::Td(TdArg::of(&ins[2])),
                    Arg::Td(mask),
                    Arg::I32(i32::from(ins.len() == 4)),
                    Arg::F32(scale),
                    Arg::I32((h / kvh) as i32),
                    Arg::I64(split_len as i64),
                    Arg::I32(nsplit as i32),
                    Arg::Ptr(0, Loc::Scratch(SCRATCH0)),
                ],
            ),
            kl(
                self.f("k_attn_combine"),
                ((b * h) as u32, 1, 1),
                128,
                0,
                vec![
                    Arg::Ptr(0, Loc::Scratch(SCRATCH0)),
                    Arg::I32(nsplit as i32),
                    Arg::Td(TdArg::of(out)),
                ],
            ),
        ];
        (launches, part_bytes)
    }
}

/// A GEMM's bound operands and the path facts `gemm` decided (see `gemm_paths`).
struct GemmPaths {
    alpha: f32,
    beta: f32,
    act: i32,
    bias_mode: i32,
    a_dtype: npu_ir::DType,
    b_dtype: npu_ir::DType,
    an: TdArg,
    bn: TdArg,
    biasn: Option<TdArg>,
    o: TdArg,
    /// k_gemv16's norm prologue operands: weight, on, eps.
    norm: (TdArg, i32, f32),
    m: usize,
    n: usize,
    k: usize,
    batches: usize,
    gemv: bool,
    vec: bool,
    raw16: bool,
    out_numel: usize,
}

pub(crate) struct ConvP {
    pub stride: [usize; 2],
    pub padding: [usize; 2],
    pub dilation: [usize; 2],
    pub groups: usize,
    pub act: i32,
}
