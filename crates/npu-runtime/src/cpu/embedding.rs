//! Embedding lookup: out[.., :] = table[ids[..], :], ids checked against the table.

use super::view::{offset_in, with_scratch, View};
use rayon::prelude::*;

pub fn embedding(table: &View, ids: &View, out: &View) -> Result<(), String> {
    let (v, d) = (table.shape[0], table.shape[1]);
    let n = ids.numel();
    for i in 0..n {
        let id = ids.ld_i64(offset_in(ids.shape, ids.strides, i));
        if id < 0 || id as usize >= v {
            return Err(format!(
                "token id {id} at position {i} is outside the table of {v} rows"
            ));
        }
    }
    let r = out.rank();
    (0..n).into_par_iter().for_each(|i| {
        let id = ids.ld_i64(offset_in(ids.shape, ids.strides, i)) as usize;
        with_scratch(0, d, |row| {
            table.gather(id * table.strides[0], table.strides[1], row);
            out.scatter(
                offset_in(&out.shape[..r - 1], &out.strides[..r - 1], i),
                out.strides[r - 1],
                row,
            );
        })
    });
    Ok(())
}
