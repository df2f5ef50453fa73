//! Views as metadata: a value is a strided window (offset, shape, strides) over a base buffer.
//! reshape, transpose, permute, slice, expand and chunk only compute new metadata; a copy is
//! needed only when a reshape cannot be expressed over the existing strides.

use crate::program::{dense_strides, Slot};
use npu_ir::DType;

/// Where a view's bytes live before memory planning assigns arena offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Base {
    /// An intermediate buffer, by index in the lowering's buffer table.
    Buf(usize),
    /// A program slot (input, output, weight, constant).
    Slot(Slot),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct View {
    pub base: Base,
    /// In elements.
    pub offset: usize,
    pub shape: Vec<usize>,
    pub strides: Vec<usize>,
    pub dtype: DType,
}

impl View {
    pub fn dense(base: Base, shape: &[usize], dtype: DType) -> View {
        View {
            base,
            offset: 0,
            shape: shape.to_vec(),
            strides: dense_strides(shape),
            dtype,
        }
    }

    pub fn is_dense(&self) -> bool {
        self.shape
            .iter()
            .zip(&self.strides)
            .zip(dense_strides(&self.shape))
            .all(|((&d, &s), e)| d == 1 || s == e)
    }

    /// `out[i] = in[perm[i]]`.
    pub fn permute(&self, perm: &[usize]) -> View {
        View {
            shape: perm.iter().map(|&p| self.shape[p]).collect(),
            strides: perm.iter().map(|&p| self.strides[p]).collect(),
            ..self.clone()
        }
    }

    /// Elements `start, start+step, ..` (`len` of them) along `dim`.
    pub fn slice(&self, dim: usize, start: usize, len: usize, step: usize) -> View {
        let mut v = self.clone();
        v.offset += start * self.strides[dim];
        v.shape[dim] = len;
        v.strides[dim] *= step;
        v
    }

    /// Numpy-style broadcast to `shape` (right-aligned; size-1 and new dims get stride 0).
    pub fn broadcast_to(&self, shape: &[usize]) -> Option<View> {
        if self.shape.len() > shape.len() {
            return None;
        }
        let lead = shape.len() - self.shape.len();
        let mut strides = vec![0; shape.len()];
        for (i, &d) in shape.iter().enumerate() {
            if i < lead {
                continue;
            }
            let (s, st) = (self.shape[i - lead], self.strides[i - lead]);
            strides[i] = if s == d {
                st
            } else if s == 1 {
                0
            } else {
                return None;
            };
        }
        Some(View {
            shape: shape.to_vec(),
            strides,
            ..self.clone()
        })
    }

    /// The same elements under `shape`, if expressible without a copy.
    pub fn reshape(&self, shape: &[usize]) -> Option<View> {
        let strides = reshape_strides(&self.shape, &self.strides, shape)?;
        Some(View {
            shape: shape.to_vec(),
            strides,
            ..self.clone()
        })
    }
}

/// Strides that present `old` (with `old_strides`) as `new`, or `None` when some merged dims
/// are not laid out contiguously with respect to each other (torch's `computeStride`).
pub fn reshape_strides(old: &[usize], old_strides: &[usize], new: &[usize]) -> Option<Vec<usize>> {
    let numel: usize = old.iter().product();
    if numel != new.iter().product::<usize>() {
        return None;
    }
    if numel == 0 || old.is_empty() {
        return Some(dense_strides(new));
    }
    let mut out = vec![0; new.len()];
    let mut view_d = new.len() as isize - 1;
    let mut chunk_base = *old_strides.last().unwrap_or(&1);
    let mut tensor_numel = 1;
    let mut view_numel = 1;
    for d in (0..old.len()).rev() {
        tensor_numel *= old[d];
        if d == 0 || (old[d - 1] != 1 && old_strides[d - 1] != tensor_numel * chunk_base) {
            while view_d >= 0 && (view_numel < tensor_numel || new[view_d as usize] == 1) {
                out[view_d as usize] = view_numel * chunk_base;
                view_numel *= new[view_d as usize];
                view_d -= 1;
            }
            if view_numel != tensor_numel {
                return None;
            }
            if d > 0 {
                chunk_base = old_strides[d - 1];
                tensor_numel = 1;
                view_numel = 1;
            }
        }
    }
    (view_d == -1).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(shape: &[usize]) -> View {
        View::dense(Base::Buf(0), shape, DType::F32)
    }

    #[test]
    fn reshape_of_dense_is_free() {
        let r = v(&[2, 3, 4]).reshape(&[6, 4]).unwrap();
        assert_eq!(r.strides, vec![4, 1]);
        let r = v(&[2, 3, 4]).reshape(&[2, 1, 12]).unwrap();
        assert_eq!(r.strides, vec![12, 12, 1]);
    }

    #[test]
    fn reshape_of_transposed_needs_copy_unless_dims_stay_apart() {
        let t = v(&[2, 3, 4]).permute(&[0, 2, 1]); // [2,4,3] strides [12,1,4]
        assert!(t.reshape(&[2, 12]).is_none());
        let u = t.reshape(&[2, 4, 3, 1]).unwrap();
        assert_eq!(u.strides[..3], [12, 1, 4]);
        // [1,H,S,D] -> transpose(1,2) -> [1,S,H,D] allocated so the transpose is dense.
        let s = v(&[1, 5, 2, 8]).permute(&[0, 2, 1, 3]);
        let merged = s.permute(&[0, 2, 1, 3]).reshape(&[1, 5, 16]).unwrap();
        assert_eq!(merged.strides, vec![80, 16, 1]);
    }

    #[test]
    fn slice_and_broadcast() {
        let s = v(&[4, 6]).slice(1, 3, 3, 1);
        assert_eq!((s.offset, s.strides.clone()), (3, vec![6, 1]));
        let b = v(&[1, 6]).broadcast_to(&[2, 4, 6]).unwrap();
        assert_eq!(b.strides, vec![0, 0, 1]);
        assert!(v(&[3]).broadcast_to(&[4]).is_none());
    }
}
