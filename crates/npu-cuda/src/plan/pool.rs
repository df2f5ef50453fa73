//! Max/average pooling over NCHW windows and adaptive average pooling.

use super::{channel_runs16, channels_last, is_channels_last, kl, Planner};
use crate::launch::{grid_for, Arg, Launch, TdArg};
use npu_program::program::{Binding, PoolKind};

impl Planner<'_> {
    /// `window` is [kernel, stride, padding, dilation], each [h, w].
    pub(super) fn pool2d(
        &self,
        kind: PoolKind,
        window: [[usize; 2]; 4],
        x: &Binding,
        o: &Binding,
    ) -> Vec<Launch> {
        let [[kh, kw], [sh, sw], [ph, pw], [dh, dw]] = window;
        let fast = matches!(kind, PoolKind::Max)
            && (kh, kw, dh, dw) == (3, 3, 1, 1)
            && x.dtype == o.dtype
            && x.dtype.size_bytes() == 2
            && x.dtype.is_float()
            && o.numel() < (1 << 31);
        if fast {
            // Eight channels per thread where the channel runs allow 16-byte accesses.
            let (name, threads, cl) = if channel_runs16(x) && channel_runs16(o) {
                ("k_max_pool3_nhwc8", o.numel() / 8, None)
            } else {
                ("k_max_pool3_16", o.numel(), Some(channels_last(o)))
            };
            let mut args = vec![Arg::Td(TdArg::of(x)), Arg::Td(TdArg::of(o))];
            args.extend([sh, sw, ph, pw].map(|v| Arg::I32(v as i32)));
            args.extend(cl);
            return vec![kl(self.f(name), (grid_for(threads), 1, 1), 256, 0, args)];
        }
        let (k, cip, div) = match kind {
            PoolKind::Max => (0, 0, 0),
            PoolKind::Avg {
                count_include_pad,
                divisor,
            } => (1, i32::from(count_include_pad), divisor.unwrap_or(0) as i32),
        };
        let mut args = vec![Arg::Td(TdArg::of(x)), Arg::Td(TdArg::of(o)), Arg::I32(k)];
        args.extend(window.iter().flatten().map(|&v| Arg::I32(v as i32)));
        args.extend([Arg::I32(cip), Arg::I32(div), channels_last(o)]);
        vec![kl(
            self.f("k_pool2d"),
            (grid_for(o.numel()), 1, 1),
            256,
            0,
            args,
        )]
    }

    pub(super) fn adaptive_avg_pool2d(&self, x: &Binding, o: &Binding) -> Vec<Launch> {
        // Largest window: ceil(H / OH) x ceil(W / OW); from 32 taps a warp shares each.
        let window =
            x.shape[2].div_ceil(o.shape[2].max(1)) * x.shape[3].div_ceil(o.shape[3].max(1));
        // Channels-last with many outputs: a thread per output, neighbours on neighbouring
        // channels (a warp per output strides over pixels C apart: ResNet-50 b64's global
        // pooling took 140 us for 13 MB).
        let cl_threads = is_channels_last(o) && o.numel() >= 8192;
        let (name, grid) = if window >= 32 && !cl_threads {
            ("k_adaptive_avg_pool2d_warp", grid_for(o.numel() * 32))
        } else {
            ("k_adaptive_avg_pool2d", grid_for(o.numel()))
        };
        vec![kl(
            self.f(name),
            (grid, 1, 1),
            256,
            0,
            vec![
                Arg::Td(TdArg::of(x)),
                Arg::Td(TdArg::of(o)),
                channels_last(o),
            ],
        )]
    }
}
