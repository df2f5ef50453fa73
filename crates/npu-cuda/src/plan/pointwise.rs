//! One thread per element: fused elementwise expressions (generated and compiled at prepare
//! time), RoPE, strided copies and fills.

use super::{kl, td, Planner};
use crate::launch::{grid_for, Arg, Launch, TdArg};
use npu_program::expr::Expr;
use npu_program::iteration::coalesce_bindings;
use npu_program::program::Binding;

impl Planner<'_> {
    pub(super) fn elementwise(
        &self,
        expr: &Expr,
        ins: &[Binding],
        o: &Binding,
    ) -> Result<Vec<Launch>, String> {
        let (_, name) = crate::elementwise::generate(expr, ins, o);
        let func = *self
            .ew
            .get(&name)
            .ok_or("elementwise kernel was not compiled")?;
        let (o, ins) = coalesce_bindings(o, ins);
        let threads = o.numel() / crate::elementwise::per_thread(&ins, &o);
        let mut args: Vec<Arg> = ins.iter().map(td).collect();
        args.push(td(&o));
        args.push(Arg::I64(o.numel() as i64));
        Ok(vec![kl(func, (grid_for(threads), 1, 1), 256, 0, args)])
    }

    pub(super) fn rope(
        &self,
        x: &Binding,
        cos: &Binding,
        sin: &Binding,
        o: &Binding,
    ) -> Vec<Launch> {
        vec![kl(
            self.f("k_rope"),
            (grid_for(x.numel()), 1, 1),
            256,
            0,
            vec![td(x), td(cos), td(sin), td(o), Arg::I64(x.numel() as i64)],
        )]
    }

    pub(super) fn copy(&self, x: &Binding, o: &Binding) -> Vec<Launch> {
        vec![self.copy_launch(TdArg::of(x), TdArg::of(o), o.numel())]
    }

    /// `n` elements from `x` to `o`, both walked in their own row-major order.
    pub(super) fn copy_launch(&self, x: TdArg, o: TdArg, n: usize) -> Launch {
        kl(
            self.f("k_copy"),
            (grid_for(n), 1, 1),
            256,
            0,
            vec![Arg::Td(x), Arg::Td(o), Arg::I64(n as i64)],
        )
    }

    pub(super) fn fill(&self, value: f64, o: &Binding) -> Vec<Launch> {
        vec![self.fill_launch(value, TdArg::of(o), o.numel())]
    }

    /// `value` into the `n` elements of `o`.
    pub(super) fn fill_launch(&self, value: f64, o: TdArg, n: usize) -> Launch {
        kl(
            self.f("k_fill"),
            (grid_for(n), 1, 1),
            256,
            0,
            vec![Arg::Td(o), Arg::F64(value), Arg::I64(n as i64)],
        )
    }
}
