//! Convolutions: one direct kernel for small groups (depthwise), else per group im2col or,
//! for dense 1x1 planes, none, then a cuBLASLt or SIMT GEMM and the bias/activation epilogue.

use super::{align, grid2d, kl, Planner, StepPlan, SCRATCH0};
use crate::gemm::{plan_lt, LtDest};
use crate::launch::unary_code;
use crate::launch::{dtype_code, grid_for, Arg, Launch, TdArg};
use crate::loc::Loc;
use crate::lt_call::LtCall;
use npu_ir::{DType, UnaryOp};
use npu_program::program::{Binding, ConvDims, Kernel};

/// Grouped convolutions whose group reduces over at most this many taps (cg x kh x kw) run as
/// one direct kernel; larger groups amortize im2col + a tensor-core GEMM per group.
const DIRECT_CONV_MAX_TAPS: usize = 1024;

impl ConvP {
    /// The convolution's dimensions, its operand shapes checked against the contract.
    pub fn dims(
        &self,
        x: &Binding,
        w: &Binding,
        bias: Option<&Binding>,
        out: &Binding,
    ) -> Result<ConvDims, String> {
        ConvDims::check(
            &x.shape,
            &w.shape,
            bias.map(|b| b.shape.as_slice()),
            &out.shape,
            self.stride,
            self.padding,
            self.dilation,
            self.groups,
        )
    }

    /// The window arguments every convolution kernel takes in this order: stride, padding,
    /// dilation, each (h, w).
    pub fn window_args(&self) -> [Arg; 6] {
        let ([sh, sw], [ph, pw], [dh, dw]) = (self.stride, self.padding, self.dilation);
        [sh, sw, ph, pw, dh, dw].map(|v| Arg::I32(v as i32))
    }
}

/// A convolution's bound operands: input, dense weight, optional bias, optional residual
/// (added before the activation) and output.
#[derive(Clone, Copy)]
pub(crate) struct ConvIo<'a> {
    pub x: &'a Binding,
    pub w: &'a Binding,
    pub bias: Option<&'a Binding>,
    pub residual: Option<&'a Binding>,
    pub out: &'a Binding,
}

#[derive(Clone, Copy)]
pub(crate) struct ConvP {
    pub stride: [usize; 2],
    pub padding: [usize; 2],
    pub dilation: [usize; 2],
    pub groups: usize,
    /// The activation's kernel code (`unary_code`), and the op itself.
    pub act: i32,
    pub act_op: Option<UnaryOp>,
}

impl Planner<'_> {
    /// A convolution adding a residual `r` before its activation: the channels-last GEMM
    /// with `r` as cuBLASLt's C operand where that fits (see `conv_channels_last`), else
    /// the convolution alone and then `act(out + r)` in place (`Kernel::split_residual_conv`:
    /// the generated elementwise kernel that `executable.rs` compiles for every residual
    /// convolution).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn conv_residual(
        &self,
        kernel: &Kernel,
        p: &ConvP,
        x: &Binding,
        w: &Binding,
        bias: Option<&Binding>,
        r: &Binding,
        out: &Binding,
    ) -> Result<StepPlan, String> {
        let dims = p.dims(x, w, bias, out)?;
        if let Some(plan) = self.conv_channels_last(
            p,
            &dims,
            ConvIo {
                x,
                w,
                bias,
                residual: Some(r),
                out,
            },
        )? {
            return Ok(plan);
        }
        let Some((_, Kernel::Elementwise { expr })) = kernel.split_residual_conv() else {
            return Err("not a residual convolution".into());
        };
        let alone = ConvP {
            act: unary_code(None),
            act_op: None,
            ..*p
        };
        let mut plan = self.conv(&alone, x, w, bias, out)?;
        plan.launches
            .extend(self.elementwise(&expr, &[out.clone(), r.clone()], out)?);
        Ok(plan)
    }

    pub(super) fn conv(
        &self,
        p: &ConvP,
        x: &Binding,
        w: &Binding,
        bias: Option<&Binding>,
        out: &Binding,
    ) -> Result<StepPlan, String> {
        let dims = p.dims(x, w, bias, out)?;
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
        } = dims;
        let og = o / g;
        let kc = cg * kh * kw;
        if g > 1 && kc <= DIRECT_CONV_MAX_TAPS {
            return Ok(self.conv_direct(p, x, w, bias, out, n * o * oh * ow));
        }
        if let Some(plan) = self.conv_channels_last(
            p,
            &dims,
            ConvIo {
                x,
                w,
                bias,
                residual: None,
                out,
            },
        )? {
            return Ok(plan);
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
            launches.push(self.im2col(p, &dims, x, wdt, gi, col_off));
            // W_g as [og, kc] (from the 4-D weight's strides when it is dense).
            let w_st = if w_dense {
                [kc as i64, 1]
            } else {
                [w.strides[0] as i64, w.strides[1] as i64]
            };
            let wa = TdArg::of(w)
                .skip((gi * og * w.strides[0] * w.dtype.size_bytes()) as u64)
                .laid_out(&[og as i64, kc as i64], &w_st);
            let colb = TdArg::scratch(col_off, wdt, &[kc, cols]);
            let dt = TdArg::scratch(d_off, DType::F32, &[og, cols]);
            let lt = if w_dense {
                plan_lt(
                    self.dev,
                    self.lt_cold,
                    &wa,
                    &colb,
                    wdt,
                    wdt,
                    og as i64,
                    cols as i64,
                    kc as i64,
                    1,
                    1.0,
                    LtDest::Scratch {
                        off: d_off,
                        ld: cols as i64,
                        batch: (og * cols) as i64,
                    },
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

    /// Group `gi`'s columns [cg·kh·kw, N·OH·OW] in `wdt` at scratch `col_off` (pixels
    /// n-major, taps in the weight's [cg, kh, kw] order).
    pub(super) fn im2col(
        &self,
        p: &ConvP,
        d: &ConvDims,
        x: &Binding,
        wdt: DType,
        gi: usize,
        col_off: u64,
    ) -> Launch {
        let (cg, kh, kw) = (d.cg, d.kh, d.kw);
        let (kc, cols) = (cg * kh * kw, d.n * d.oh * d.ow);
        let i = |v: usize| Arg::I32(v as i32);
        // 32-bit index kernels (2-D grids) when the sizes fit, else the 64-bit ones.
        let small = cols < i32::MAX as usize && d.h * d.w < i32::MAX as usize;
        let (im2col, im_grid) = if wdt.size_bytes() == 2 && cols % 8 == 0 {
            ("k_im2col8", (grid_for(kc * cols / 8), 1, 1))
        } else if small {
            ("k_im2col2", grid2d(cols, kc))
        } else {
            ("k_im2col", (grid_for(kc * cols), 1, 1))
        };
        kl(
            self.f(im2col),
            im_grid,
            256,
            0,
            [Arg::Td(TdArg::of(x)), i(gi * cg), i(cg), i(kh), i(kw)]
                .into_iter()
                .chain(p.window_args())
                .chain([
                    i(d.oh),
                    i(d.ow),
                    Arg::Ptr(0, Loc::Scratch(col_off)),
                    Arg::I32(dtype_code(wdt)),
                ])
                .collect(),
        )
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
        let b = TdArg::of(x)
            .skip((gi * cg * x.strides[1] * x.dtype.size_bytes()) as u64)
            .laid_out(
                &[n as i64, cg as i64, pix as i64],
                &[x.strides[0] as i64, x.strides[1] as i64, 1],
            );
        let a = TdArg::of(w)
            .skip((gi * og * w.strides[0] * w.dtype.size_bytes()) as u64)
            .laid_out(&[n as i64, og as i64, cg as i64], &[0, cg as i64, 1]);
        plan_lt(
            self.dev,
            self.lt_cold,
            &a,
            &b,
            w.dtype,
            x.dtype,
            og as i64,
            pix as i64,
            cg as i64,
            n as i64,
            1.0,
            LtDest::Scratch {
                off: d_off,
                ld: (n * pix) as i64,
                batch: pix as i64,
            },
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
            ("k_conv_epilogue2", grid2d(cols, og))
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
        StepPlan {
            launches: vec![kl(
                self.f("k_conv_direct"),
                (grid_for(total), 1, 1),
                256,
                0,
                [
                    Arg::Td(TdArg::of(x)),
                    Arg::Td(TdArg::of(w)),
                    Arg::Td(bias.map_or(TdArg::null(), TdArg::of)),
                    Arg::I32(i32::from(bias.is_some())),
                    Arg::I32(p.act),
                    Arg::Td(TdArg::of(out)),
                    Arg::I32(p.groups as i32),
                ]
                .into_iter()
                .chain(p.window_args())
                .chain([super::channels_last(out)])
                .collect(),
            )],
            scratch: 0,
        }
    }
}
