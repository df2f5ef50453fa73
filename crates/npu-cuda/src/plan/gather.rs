//! Indexed reads and writes: embedding lookup and index_copy. The ids are data, so their range
//! is checked on the device; a bad id sets the error word with this step's index.

use super::{kl, td, Planner};
use crate::launch::{grid_for, Arg, Launch};
use crate::loc::Loc;
use npu_program::program::Binding;

impl Planner<'_> {
    pub(super) fn embedding(&self, table: &Binding, ids: &Binding, o: &Binding) -> Vec<Launch> {
        vec![kl(
            self.f("k_embedding"),
            (grid_for(o.numel()), 1, 1),
            256,
            0,
            vec![
                td(table),
                td(ids),
                td(o),
                Arg::I64(ids.numel() as i64),
                Arg::Ptr(0, Loc::Err),
                Arg::I32(self.step as i32),
            ],
        )]
    }

    pub(super) fn index_copy(
        &self,
        axis: usize,
        idx: &Binding,
        src: &Binding,
        dst: &Binding,
    ) -> Vec<Launch> {
        vec![kl(
            self.f("k_index_copy"),
            (grid_for(src.numel()), 1, 1),
            256,
            0,
            vec![
                td(idx),
                td(src),
                td(dst),
                Arg::I32(axis as i32),
                Arg::I64(src.numel() as i64),
                Arg::Ptr(0, Loc::Err),
                Arg::I32(self.step as i32),
            ],
        )]
    }
}
