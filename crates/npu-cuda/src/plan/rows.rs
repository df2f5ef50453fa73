//! Row kernels over the last dim (one block per row): softmax, RMSNorm, LayerNorm, and the
//! reduction of trailing dims.

use super::{kl, rows_last, td, Planner};
use crate::launch::{dtype_code, Arg, Launch, TdArg};
use npu_program::program::{Binding, ReduceOp};

fn opt(b: Option<&Binding>) -> Arg {
    b.map_or(Arg::Td(TdArg::null()), td)
}

impl Planner<'_> {
    pub(super) fn softmax(
        &self,
        scale: f32,
        x: &Binding,
        mask: Option<&Binding>,
        o: &Binding,
    ) -> Vec<Launch> {
        let (rows, _) = rows_last(x);
        vec![kl(
            self.f("k_softmax"),
            (rows as u32, 1, 1),
            256,
            0,
            vec![
                td(x),
                opt(mask),
                Arg::I32(i32::from(mask.is_some())),
                Arg::F32(scale),
                td(o),
            ],
        )]
    }

    pub(super) fn rms_norm(&self, eps: f32, x: &Binding, w: &Binding, o: &Binding) -> Vec<Launch> {
        let (rows, _) = rows_last(x);
        vec![kl(
            self.f_dt("k_rms_norm", &[x, w, o].map(|b| dtype_code(b.dtype))),
            (rows as u32, 1, 1),
            256,
            0,
            vec![td(x), td(w), Arg::F32(eps), td(o)],
        )]
    }

    pub(super) fn layer_norm(
        &self,
        eps: f32,
        x: &Binding,
        w: Option<&Binding>,
        b: Option<&Binding>,
        o: &Binding,
    ) -> Vec<Launch> {
        let (rows, _) = rows_last(x);
        vec![kl(
            self.f("k_layer_norm"),
            (rows as u32, 1, 1),
            256,
            0,
            vec![
                td(x),
                opt(w),
                opt(b),
                Arg::I32(i32::from(w.is_some())),
                Arg::I32(i32::from(b.is_some())),
                Arg::F32(eps),
                td(o),
            ],
        )]
    }

    pub(super) fn reduce(
        &self,
        op: ReduceOp,
        reduced: usize,
        x: &Binding,
        o: &Binding,
    ) -> Vec<Launch> {
        let rows: usize = x.shape[..x.shape.len() - reduced].iter().product();
        vec![kl(
            self.f("k_reduce"),
            (rows.max(1) as u32, 1, 1),
            256,
            0,
            vec![
                td(x),
                Arg::I32(reduced as i32),
                Arg::I32(i32::from(op == ReduceOp::Mean)),
                td(o),
            ],
        )]
    }
}
