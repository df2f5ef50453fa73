//! The iteration space of a pointwise step, simplified once for every backend.
//!
//! A pointwise kernel visits every output element once and may do so in any order, so its
//! dims can be reordered and merged freely. Ordering them by the output's strides (largest
//! first) and merging neighbours that every operand walks as one dim turns a channels-last
//! activation (`[N, C, H, W]` with strides `[HWC, 1, WC, C]`) into one dense run, and a
//! per-channel bias over it into `[NHW, C]` with strides `[0, 1]`: backends keep their
//! dense fast paths whatever layout the compiler chose.

use crate::program::Binding;

/// `shape` with each operand's `strides` (the output's first), dims reordered by the
/// output's strides (largest first, ties in their original order), size-1 dims dropped, and
/// neighbouring dims merged where every operand's outer stride is the inner one times the
/// inner size. Returns the new shape and one stride vector per operand (rank >= 1).
///
/// Invariant: element `i` of the new space maps, for every operand, to the same offset as
/// some element of the old space, and the map is a bijection.
pub fn coalesce(shape: &[usize], strides: &[&[usize]]) -> (Vec<usize>, Vec<Vec<usize>>) {
    let Some(out) = strides.first() else {
        return (shape.to_vec(), Vec::new());
    };
    if shape.contains(&0) {
        return (shape.to_vec(), strides.iter().map(|s| s.to_vec()).collect());
    }
    let mut dims: Vec<usize> = (0..shape.len()).filter(|&d| shape[d] != 1).collect();
    // Stable: equal output strides (a broadcast output never happens; size-1 dims are
    // gone) keep their order.
    dims.sort_by(|&a, &b| out[b].cmp(&out[a]));
    let mut sh: Vec<usize> = Vec::with_capacity(dims.len());
    let mut st: Vec<Vec<usize>> = vec![Vec::with_capacity(dims.len()); strides.len()];
    for &d in &dims {
        let mergeable = !sh.is_empty()
            && strides
                .iter()
                .zip(&st)
                .all(|(s, kept)| kept[kept.len() - 1] == s[d] * shape[d]);
        if mergeable {
            let last = sh.len() - 1;
            sh[last] *= shape[d];
            for (s, kept) in strides.iter().zip(st.iter_mut()) {
                let l = kept.len() - 1;
                kept[l] = s[d];
            }
        } else {
            sh.push(shape[d]);
            for (s, kept) in strides.iter().zip(st.iter_mut()) {
                kept.push(s[d]);
            }
        }
    }
    if sh.is_empty() {
        sh.push(1);
        for kept in &mut st {
            kept.push(0);
        }
    }
    (sh, st)
}

/// [`coalesce`] over bindings: the output's and the inputs' bindings re-shaped to the
/// simplified space (same slots, offsets and dtypes).
pub fn coalesce_bindings(out: &Binding, ins: &[Binding]) -> (Binding, Vec<Binding>) {
    let all: Vec<&[usize]> = std::iter::once(out.strides.as_slice())
        .chain(ins.iter().map(|b| b.strides.as_slice()))
        .collect();
    let (shape, st) = coalesce(&out.shape, &all);
    let with = |b: &Binding, s: &Vec<usize>| Binding {
        shape: shape.clone(),
        strides: s.clone(),
        ..b.clone()
    };
    let o = with(out, &st[0]);
    let i = ins.iter().zip(&st[1..]).map(|(b, s)| with(b, s)).collect();
    (o, i)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every element's offsets, per operand, in a space (row-major over the shape).
    fn offsets(shape: &[usize], strides: &[Vec<usize>]) -> Vec<Vec<usize>> {
        let n: usize = shape.iter().product();
        (0..n)
            .map(|mut e| {
                let mut idx = vec![0; shape.len()];
                for d in (0..shape.len()).rev() {
                    idx[d] = e % shape[d];
                    e /= shape[d];
                }
                strides
                    .iter()
                    .map(|s| idx.iter().zip(s).map(|(i, s)| i * s).sum())
                    .collect()
            })
            .collect()
    }

    fn same_elements(shape: &[usize], strides: &[&[usize]]) -> (Vec<usize>, Vec<Vec<usize>>) {
        let (sh, st) = coalesce(shape, strides);
        let owned: Vec<Vec<usize>> = strides.iter().map(|s| s.to_vec()).collect();
        let mut before = offsets(shape, &owned);
        let mut after = offsets(&sh, &st);
        before.sort();
        after.sort();
        assert_eq!(before, after, "{shape:?} {strides:?} -> {sh:?} {st:?}");
        (sh, st)
    }

    #[test]
    fn channels_last_activation_is_one_dense_run() {
        let (n, c, h, w) = (2, 8, 3, 5);
        let nhwc = [h * w * c, 1, w * c, c];
        let (sh, st) = same_elements(&[n, c, h, w], &[&nhwc, &nhwc]);
        assert_eq!(sh, vec![n * c * h * w]);
        assert_eq!(st, vec![vec![1], vec![1]]);
        // a per-channel bias broadcast over it
        let (sh, st) = same_elements(&[n, c, h, w], &[&nhwc, &[0, 1, 0, 0]]);
        assert_eq!(sh, vec![n * h * w, c]);
        assert_eq!(st, vec![vec![c, 1], vec![0, 1]]);
    }

    #[test]
    fn padded_channels_keep_their_pitch() {
        let (n, c, cp, h, w) = (1, 6, 8, 4, 4);
        let out = [h * w * cp, 1, w * cp, cp];
        let (sh, st) = same_elements(&[n, c, h, w], &[&out, &out]);
        assert_eq!(sh, vec![h * w, c]);
        assert_eq!(st[0], vec![cp, 1]);
    }

    #[test]
    fn mixed_layouts_and_size_one_dims() {
        // NCHW input read into an NHWC output: nothing merges across the transposition.
        let (c, h, w) = (3, 4, 5);
        same_elements(
            &[1, c, h, w],
            &[&[h * w * c, 1, w * c, c], &[c * h * w, h * w, w, 1]],
        );
        let (sh, st) = same_elements(&[1, 1, 1], &[&[1, 1, 1], &[0, 0, 0]]);
        assert_eq!((sh, st), (vec![1], vec![vec![0], vec![0]]));
        let (sh, _) = same_elements(&[4, 0, 3], &[&[3, 3, 1]]);
        assert_eq!(sh, vec![4, 0, 3]);
    }
}
