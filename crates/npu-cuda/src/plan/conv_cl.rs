//! Channels-last convolutions (one group) as one GEMM over output pixels:
//! D[P, O] = A[P, K] · W[O, K]ᵀ with P = N·OH·OW and K = C·kh·kw in the weight's own
//! [C, kh, kw] order, so the dense weight is the B operand as it lies and cuBLASLt writes
//! the NHWC output in its dtype with the bias epilogue (no f32 round trip, no epilogue kernel).
//!
//! A is the input itself for a 1x1, stride-1, unpadded convolution over evenly spaced pixels;
//! else the rows `k_im2col_nhwc` gathers from 16-byte channel runs; else (a channels-first
//! input, such as the graph's image) the NCHW im2col's columns, read transposed. ReLU runs in
//! cuBLASLt's epilogue (`RELU_BIAS`; NaN kept, checked by the conformance suite on the GPU),
//! ReLU6 commutes with rounding and follows in place (`k_act_rows16`); other activations take
//! the GEMM's f32 epilogue, which keeps one rounding.

use super::conv::{ConvIo, ConvP};
use super::gemm::{gemv_path, GemmPaths, GemvPath};
use super::{align, channel_runs16, kl, Planner, StepPlan, SCRATCH0};
use crate::launch::{dtype_code, grid_for, Arg, TdArg};
use crate::loc::Loc;
use npu_ir::{DType, UnaryOp};
use npu_program::program::{Binding, ConvDims};

/// A 16-bit GEMM with K not a multiple of 8 gets K padded from this many A elements on (the
/// batch-64 stem; batch 1's stem, 1.8M, keeps its three launches fewer).
const PAD_K_MIN: usize = 1 << 22;

/// Shared memory `k_im2col_nhwc` may take per block (the default limit, no opt-in).
const IM2COL_SMEM: usize = 48 * 1024;

/// The stride between neighbouring pixels of a channels-last [N, C, H, W] binding whose
/// pixels are evenly spaced (rows of a [N·H·W, C] matrix), or `None`.
fn pixel_rows(b: &Binding) -> Option<usize> {
    let [n, _, h, w] = b.shape[..] else {
        return None;
    };
    let ps = b.strides[3];
    let even = b.strides[1] == 1
        && (w == 1 || ps > 0)
        && (h == 1 || b.strides[2] == w * ps)
        && (n == 1 || b.strides[0] == h * w * ps);
    even.then_some(ps)
}

impl Planner<'_> {
    /// The channels-last GEMM plan, or `None` when the operands do not fit it (the caller
    /// takes the channels-first path).
    pub(super) fn conv_channels_last(
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
        let Some(os) = pixel_rows(out) else {
            return Ok(None);
        };
        if d.groups != 1
            || !matches!(dt, DType::F16 | DType::BF16 | DType::F32)
            || x.dtype != dt
            || out.dtype != dt
            || !w.is_contiguous()
        {
            return Ok(None);
        }
        let (m, o, k) = (d.n * d.oh * d.ow, d.o, d.c * d.kh * d.kw);
        let d_bytes = align((m * o * 4) as u64);
        let col_off = SCRATCH0 + d_bytes;
        let xa = TdArg::of(x);
        let x16 = dt.size_bytes() == 2 && channel_runs16(x);
        let pointwise = d.kh == 1 && d.kw == 1 && p.stride == [1, 1] && p.padding == [0, 0];
        // Where the GEMM would gather an im2col matrix first, cuDNN reads the input in place.
        if !(pointwise && pixel_rows(x).is_some()) {
            if let Some(plan) = self.conv_dnn(p, d, io)? {
                return Ok(Some(plan));
            }
        }
        let mut launches = Vec::new();
        // K as the GEMM sees it: a large 16-bit GEMM whose K is not a multiple of 8 (the 7x7
        // stem over 3 channels: 147) is given K rounded up, with zero columns and a weight copy
        // of that pitch, since cuBLASLt otherwise runs it on an sm75 kernel (289 us of ResNet-50
        // b64's run under ncu; an aligned weight pitch alone did not change that).
        let pad_k = dt.size_bytes() == 2 && !k.is_multiple_of(8) && m * k >= PAD_K_MIN;
        let (a, col_bytes, kp) = match pixel_rows(x) {
            Some(xs) if pointwise => (xa.laid_out(&[m as i64, k as i64], &[xs as i64, 1]), 0, k),
            _ if x16 && d.kh * d.kw * (d.c * 2 + 12) <= IM2COL_SMEM => {
                // A pixel's row, and its taps' source offsets (8 bytes) and row positions (4).
                let per_pixel = d.kh * d.kw * (d.c * 2 + 12);
                // Pixels per block: about 16 KB of taps, at least one.
                let pp = (16 * 1024 / per_pixel).max(1);
                let blocks = m.div_ceil(pp).min(1 << 20);
                let i = |v: usize| Arg::I32(v as i32);
                launches.push(kl(
                    self.f("k_im2col_nhwc"),
                    (blocks as u32, 1, 1),
                    256,
                    (pp * per_pixel) as u32,
                    [Arg::Td(xa), i(d.kh), i(d.kw)]
                        .into_iter()
                        .chain(p.window_args())
                        .chain([i(d.oh), i(d.ow), i(pp), Arg::Ptr(0, Loc::Scratch(col_off))])
                        .collect(),
                ));
                let col = TdArg::scratch(col_off, dt, &[m, k]);
                (col, (m * k * 2) as u64, k)
            }
            _ => {
                launches.push(self.im2col(p, d, x, dt, 0, col_off));
                let kp = if pad_k { k.next_multiple_of(8) } else { k };
                if kp != k {
                    let tail = (k * m * 2) as u64;
                    let pad = TdArg::scratch(col_off + tail, dt, &[kp - k, m]);
                    launches.push(self.fill_launch(0.0, pad, (kp - k) * m));
                }
                let col = TdArg::scratch(col_off, dt, &[kp, m])
                    .laid_out(&[m as i64, kp as i64], &[1, m as i64]);
                (col, (m * kp * dt.size_bytes()) as u64, kp)
            }
        };
        let w_off = col_off + align(col_bytes);
        let bn = if kp != k {
            let staged = TdArg::scratch(w_off, dt, &[o, kp]);
            launches.push(self.fill_launch(0.0, staged, o * kp));
            launches.push(self.copy_launch(
                TdArg::of(w).laid_out(&[o as i64, k as i64], &[k as i64, 1]),
                staged.laid_out(&[o as i64, k as i64], &[kp as i64, 1]),
                o * k,
            ));
            staged.laid_out(&[kp as i64, o as i64], &[1, kp as i64])
        } else {
            TdArg::of(w).laid_out(&[k as i64, o as i64], &[1, k as i64])
        };
        let w_bytes = if kp != k { (o * kp * 2) as u64 } else { 0 };
        // ReLU in cuBLASLt's epilogue; ReLU6, which commutes with rounding as well, in place
        // after cuBLASLt's rounding store.
        let in_place = p.act_op == Some(UnaryOp::Relu6)
            && dt.size_bytes() == 2
            && o.is_multiple_of(8)
            && os.is_multiple_of(8)
            && TdArg::of(out).aligned16();
        let gemm_act = if in_place { -1 } else { p.act };
        let bias_arg = bias.map(|b| {
            TdArg::of(b).laid_out(
                &[m as i64, o as i64],
                &[0, b.strides[b.shape.len() - 1] as i64],
            )
        });
        // A single output pixel (squeeze-excitation's 1x1 convolutions): the GEMV kernels.
        let GemvPath { gemv, vec, raw16 } = gemv_path(&bn, dt, dt, m, kp, 1);
        let g = GemmPaths {
            alpha: 1.0,
            beta: 1.0,
            act: gemm_act,
            bias_mode: i32::from(bias.is_some()),
            a_dtype: dt,
            b_dtype: dt,
            an: a,
            bn,
            biasn: bias_arg,
            o: TdArg::of(out).laid_out(&[m as i64, o as i64], &[os as i64, 1]),
            norm: (TdArg::null(), 0, 0.0),
            m,
            n: o,
            k: kp,
            batches: 1,
            gemv,
            vec,
            raw16,
            out_numel: m * o,
            out_dtype: dt,
            lt_relu: true,
            // the weight as it lies (not the zero-padded copy a kernel of this step writes)
            b_constant: kp == k
                && matches!(
                    w.slot,
                    npu_program::program::Slot::Weight(_) | npu_program::program::Slot::Const(_)
                ),
        };
        let scratch = d_bytes + align(col_bytes) + align(w_bytes);
        if let Some(r) = residual {
            // The residual as cuBLASLt's C operand (lying as the output does, so C and D
            // share a layout), ReLU after the sum in its epilogue; any other activation, or a
            // GEMM that cuBLASLt does not write directly, leaves it to the caller's split.
            let fits = !in_place
                && !gemv
                && matches!(p.act_op, None | Some(UnaryOp::Relu))
                && r.dtype == dt
                && pixel_rows(r) == Some(os);
            let c = TdArg::of(r).laid_out(&[m as i64, o as i64], &[os as i64, 1]);
            return Ok(match fits.then(|| self.lt_direct(&g, Some((c, 1.0)))) {
                Some(Ok(Some(call))) => {
                    launches.push(call);
                    Some(StepPlan { launches, scratch })
                }
                Some(Err(e)) => return Err(e),
                _ => None,
            });
        }
        let plan = self.gemm_paths(g)?;
        launches.extend(plan.launches);
        if in_place {
            let rows8 = m * o / 8;
            launches.push(kl(
                self.f("k_act_rows16"),
                (grid_for(rows8), 1, 1),
                256,
                0,
                vec![
                    Arg::Ptr(0, TdArg::of(out).loc),
                    Arg::I64(m as i64),
                    Arg::I32(o as i32),
                    Arg::I64(os as i64),
                    Arg::I32(dtype_code(dt)),
                    Arg::I32(p.act),
                ],
            ));
        }
        Ok(Some(StepPlan {
            launches,
            scratch: scratch.max(plan.scratch),
        }))
    }
}
