//! In-place index_copy: dest[.., index[i], ..] = src[.., i, ..] along an axis.

use super::view::{offset_in, View, MAX_RANK};

pub fn index_copy(axis: usize, index: &View, src: &View, dest: &View) -> Result<(), String> {
    let r = dest.rank();
    if axis >= r || src.rank() != r || index.numel() != src.shape[axis] {
        return Err(format!(
            "axis {axis}: dest {:?}, src {:?} and index {:?} do not agree",
            dest.shape, src.shape, index.shape
        ));
    }
    if (0..r).any(|d| d != axis && src.shape[d] != dest.shape[d]) {
        return Err(format!(
            "src {:?} and dest {:?} differ outside axis {axis}",
            src.shape, dest.shape
        ));
    }
    if index.dtype.is_float() {
        return Err(format!("index must be integers, got {}", index.dtype));
    }
    let lim = dest.shape[axis];
    let l = index.numel();
    for i in 0..l {
        let v = index.ld_i64(offset_in(index.shape, index.strides, i));
        if v < 0 || v as usize >= lim {
            return Err(format!(
                "index {v} at position {i} is outside 0..{lim} along axis {axis}"
            ));
        }
    }
    let ints = !src.dtype.is_float() && !dest.dtype.is_float();
    let n = src.numel();
    let mut idx = [0usize; MAX_RANK];
    for lin in 0..n {
        let mut rem = lin;
        for dd in (0..r).rev() {
            idx[dd] = rem % src.shape[dd];
            rem /= src.shape[dd];
        }
        let mut so = 0;
        let mut dof = 0;
        for (dd, &ix) in idx.iter().enumerate().take(r) {
            so += ix * src.strides[dd];
            let di = if dd == axis {
                index.ld_i64(offset_in(index.shape, index.strides, ix)) as usize
            } else {
                ix
            };
            dof += di * dest.strides[dd];
        }
        if ints {
            dest.st_i64(dof, src.ld_i64(so));
        } else {
            dest.st(dof, src.ld(so));
        }
    }
    Ok(())
}
