//! In-place index_copy: dest[.., index[i], ..] = src[.., i, ..] along an axis.

use super::view::{offset_in, with_scratch, View, MAX_RANK};

pub fn index_copy(axis: usize, index: &View, src: &View, dest: &View) -> Result<(), String> {
    let r = dest.rank();
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
    if n == 0 {
        return Ok(());
    }
    // Rows along the last dim (the whole tensor when the copy axis is the last one).
    let (last, row_len) = if axis + 1 < r {
        (r - 1, src.shape[r - 1])
    } else {
        (r, 1)
    };
    let (s_last, d_last) = if last < r {
        (src.strides[last], dest.strides[last])
    } else {
        (0, 0)
    };
    let raw = src.dtype == dest.dtype && s_last == 1 && d_last == 1;
    let mut idx = [0usize; MAX_RANK];
    with_scratch(0, row_len, |buf| {
        for row in 0..n / row_len {
            let mut rem = row;
            for dd in (0..last).rev() {
                idx[dd] = rem % src.shape[dd];
                rem /= src.shape[dd];
            }
            let mut so = 0;
            let mut dof = 0;
            for (dd, &ix) in idx.iter().enumerate().take(last) {
                so += ix * src.strides[dd];
                let di = if dd == axis {
                    index.ld_i64(offset_in(index.shape, index.strides, ix)) as usize
                } else {
                    ix
                };
                dof += di * dest.strides[dd];
            }
            if raw {
                let size = src.dtype.size_bytes();
                // SAFETY: both rows lie inside their bindings (module invariants) and the
                // program guarantees src and dest do not overlap.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        src.ptr.add(so * size),
                        dest.ptr.add(dof * size),
                        row_len * size,
                    );
                }
            } else if ints {
                for j in 0..row_len {
                    dest.st_i64(dof + j * d_last, src.ld_i64(so + j * s_last));
                }
            } else {
                src.gather(so, s_last, buf);
                dest.scatter(dof, d_last, buf);
            }
        }
    });
    Ok(())
}
