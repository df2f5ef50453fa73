//! 16-bit convolutions planned on cuDNN (`dnn.rs`) where the channels-last GEMM would first
//! gather a large im2col matrix (the 3x3 and strided convolutions of large batches). The
//! bias, the residual and a ReLU ride in the same call, with one rounding, as the GEMM's
//! epilogue did.
//!
//! The weight lies [O, C, kh, kw]; cuDNN's fast NHWC kernels take the filter channels-last,
//! so the step first copies it to [O, kh, kw, C] in scratch (a few microseconds; the copy
//! is redone each run because a weight slot may be rewritten between runs).

use super::conv::{ConvIo, ConvP};
use super::{align, Planner, StepPlan, SCRATCH0};
use crate::device::CudnnUse;
use crate::dnn::{DnnConv, DnnConvSpec, Nchw};
use crate::error::CudaError;
use crate::launch::{Launch, TdArg};
use crate::loc::Loc;
use npu_ir::{DType, UnaryOp};
use npu_program::program::{Binding, ConvDims};

/// A densely packed channels-last [N, C, H, W] binding as cuDNN's sizes and strides: the
/// only layout cuDNN 9 ran here (H100; a channel pitch above C, or a channels-first input,
/// got "none of its algorithms" from every candidate).
fn packed_nhwc(b: &Binding) -> Option<Nchw> {
    let [n, c, h, w] = b.shape[..] else {
        return None;
    };
    let strides = [h * w * c, 1, w * c, c];
    let dense = b
        .shape
        .iter()
        .zip(&b.strides)
        .zip(strides)
        .all(|((&d, &s), e)| d == 1 || s == e);
    dense.then_some(Nchw {
        dims: [n, c, h, w],
        strides,
    })
}

/// cuDNN takes a convolution (unless `NPU_CUDA_CUDNN=require`) whose im2col matrix would
/// outgrow this many L2 caches. Measured on ResNet-50 (H100, f16; step-group events of eager
/// profiled runs): at batch 64 the 56x56 and 28x28 stages' convolutions (3x3: 231 and 116 MB
/// of im2col matrix) took 2.4x and 1.6x less time on cuDNN, the 14x14 and 7x7 stages' (58
/// and 29 MB, which L2 largely holds) more; at batch 1 the graph replay went 0.35 -> 0.55 ms
/// with every convolution on cuDNN.
const DNN_MIN_L2S: u64 = 2;

impl Planner<'_> {
    /// The cuDNN plan, or `None` where the convolution is not one cuDNN takes here or
    /// cuDNN is absent or runs none of its algorithms for it (unless `NPU_CUDA_CUDNN=require`).
    pub(super) fn conv_dnn(
        &self,
        p: &ConvP,
        d: &ConvDims,
        io: ConvIo,
    ) -> Result<Option<StepPlan>, String> {
        let ConvIo {
            x,
            w,
            bias,
            residual,
            out,
        } = io;
        let dt = w.dtype;
        let bias_ok = |b: &Binding| {
            b.dtype == dt
                && b.shape.iter().product::<usize>() == d.o
                && b.strides.last() == Some(&1)
        };
        let (Some(xn), Some(yn)) = (packed_nhwc(x), packed_nhwc(out)) else {
            return Ok(None);
        };
        let zn = residual.map(packed_nhwc);
        let el = dt.size_bytes();
        let cols_bytes = (d.n * d.oh * d.ow * d.c * d.kh * d.kw * el) as u64;
        if self.dev.cudnn == CudnnUse::Off
            || (self.dev.cudnn == CudnnUse::Auto && cols_bytes < DNN_MIN_L2S * self.dev.l2_bytes)
            || !matches!(dt, DType::F16 | DType::BF16)
            || x.dtype != dt
            || out.dtype != dt
            || !w.is_contiguous()
            || !matches!(p.act_op, None | Some(UnaryOp::Relu))
            || !bias.is_none_or(bias_ok)
            || residual.is_some_and(|r| r.dtype != dt)
            || matches!(zn, Some(None))
        {
            return Ok(None);
        }
        let (o, cg, kh, kw) = (d.o, d.cg, d.kh, d.kw);
        let w_bytes = align((o * cg * kh * kw * el) as u64);
        let w_off = SCRATCH0;
        let zero_bias_off = w_off + w_bytes;
        let ws_off = zero_bias_off
            + if bias.is_none() {
                align((o * el) as u64)
            } else {
                0
            };
        let staged = TdArg::scratch(w_off, dt, &[o, cg, kh, kw]);
        let krsc = staged.laid_out(
            &[o as i64, cg as i64, kh as i64, kw as i64],
            &[(kh * kw * cg) as i64, 1, (kw * cg) as i64, cg as i64],
        );
        let mut launches = vec![self.copy_launch(TdArg::of(w), krsc, o * cg * kh * kw)];
        let bias_loc = match bias {
            Some(b) => TdArg::of(b).loc,
            None => {
                launches.push(self.fill_launch(0.0, TdArg::scratch(zero_bias_off, dt, &[o]), o));
                Loc::Scratch(zero_bias_off)
            }
        };
        let spec = DnnConvSpec {
            dtype: dt,
            x: xn,
            y: yn,
            z: zn.flatten(),
            w: [o, cg, kh, kw],
            stride: p.stride,
            padding: p.padding,
            dilation: p.dilation,
            groups: d.groups,
            relu: p.act_op == Some(UnaryOp::Relu),
            locs: [
                TdArg::of(x).loc,
                Loc::Scratch(w_off),
                // without a residual cuDNN reads y as z (alpha2 0)
                TdArg::of(residual.unwrap_or(out)).loc,
                bias_loc,
                TdArg::of(out).loc,
                Loc::Scratch(ws_off),
            ],
        };
        let require = self.dev.cudnn == CudnnUse::Require;
        let call = match DnnConv::plan(self.dev, &spec) {
            Ok(Some(call)) => call,
            Ok(None) if !require => return Ok(None),
            Ok(None) => return Err("cuDNN runs none of its algorithms for this convolution".into()),
            Err(CudaError::MissingLibrary(_)) if !require => return Ok(None),
            Err(e) => return Err(e.to_string()),
        };
        let scratch = ws_off - SCRATCH0 + align(call.workspace);
        launches.push(Launch::Dnn(Box::new(call)));
        Ok(Some(StepPlan { launches, scratch }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use npu_program::program::Slot;

    fn binding(shape: [usize; 4], strides: [usize; 4]) -> Binding {
        Binding {
            slot: Slot::Arena,
            byte_offset: 0,
            dtype: DType::F16,
            shape: shape.to_vec(),
            strides: strides.to_vec(),
        }
    }

    #[test]
    fn only_densely_packed_channels_last_goes_to_cudnn() {
        // [2, 16, 5, 7] channels-last, packed: cuDNN's NHWC strides
        let t = packed_nhwc(&binding([2, 16, 5, 7], [560, 1, 112, 16])).expect("packed NHWC");
        assert_eq!(t.dims, [2, 16, 5, 7]);
        assert_eq!(t.strides, [560, 1, 112, 16]);
        // a channel pitch of 24 for 16 channels, and channels-first: refused
        assert!(packed_nhwc(&binding([2, 16, 5, 7], [840, 1, 168, 24])).is_none());
        assert!(packed_nhwc(&binding([2, 16, 5, 7], [560, 35, 7, 1])).is_none());
        // a unit dimension's stride does not matter
        assert!(packed_nhwc(&binding([1, 16, 1, 7], [0, 1, 0, 16])).is_some());
    }
}
