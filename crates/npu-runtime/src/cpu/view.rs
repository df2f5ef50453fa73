//! Strided views over backend buffers: raw pointer + dtype + shape + element strides.
//!
//! Every binding was checked against its buffer's size at prepare time (the program's
//! `validate` plus the buffer sizes the executable allocated), so element offsets computed
//! from a view's shape and strides stay inside the buffer.

use half::{bf16, f16};
use npu_ir::DType;
use std::cell::RefCell;

/// Highest rank a kernel handles (checked at prepare time).
pub const MAX_RANK: usize = 8;

#[derive(Clone, Copy, Debug)]
pub struct View<'a> {
    pub ptr: *mut u8,
    pub dtype: DType,
    pub shape: &'a [usize],
    pub strides: &'a [usize],
}

// SAFETY: views are only created by the executor for buffers it owns for the duration of
// one step; kernels write disjoint elements from different threads.
unsafe impl Send for View<'_> {}
unsafe impl Sync for View<'_> {}

impl npu_program::contract::Operand for View<'_> {
    fn shape(&self) -> &[usize] {
        self.shape
    }
    fn dtype(&self) -> DType {
        self.dtype
    }
}

impl<'a> View<'a> {
    pub fn rank(&self) -> usize {
        self.shape.len()
    }
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
    pub fn dim(&self, d: usize) -> usize {
        self.shape[d]
    }
    pub fn stride(&self, d: usize) -> usize {
        self.strides[d]
    }

    /// Element at `off` (in elements), widened to f32.
    #[inline(always)]
    pub fn ld(&self, off: usize) -> f32 {
        // SAFETY: see the module doc: offsets derived from the view stay in bounds.
        unsafe {
            match self.dtype {
                DType::F32 => (self.ptr as *const f32).add(off).read_unaligned(),
                DType::F16 => {
                    f16::from_bits((self.ptr as *const u16).add(off).read_unaligned()).to_f32()
                }
                DType::BF16 => f32::from_bits(
                    u32::from((self.ptr as *const u16).add(off).read_unaligned()) << 16,
                ),
                DType::F64 => (self.ptr as *const f64).add(off).read_unaligned() as f32,
                _ => self.ld_i64(off) as f32,
            }
        }
    }

    /// Stores `v` at `off`, rounding to the view's dtype.
    #[inline(always)]
    pub fn st(&self, off: usize, v: f32) {
        // SAFETY: as `ld`.
        unsafe {
            match self.dtype {
                DType::F32 => (self.ptr as *mut f32).add(off).write_unaligned(v),
                DType::F16 => (self.ptr as *mut u16)
                    .add(off)
                    .write_unaligned(f16::from_f32(v).to_bits()),
                DType::BF16 => (self.ptr as *mut u16)
                    .add(off)
                    .write_unaligned(bf16::from_f32(v).to_bits()),
                DType::F64 => (self.ptr as *mut f64)
                    .add(off)
                    .write_unaligned(f64::from(v)),
                DType::Bool => *self.ptr.add(off) = u8::from(v != 0.0),
                _ => self.st_i64(off, v as i64),
            }
        }
    }

    #[inline(always)]
    pub fn ld_i64(&self, off: usize) -> i64 {
        // SAFETY: as `ld`.
        unsafe {
            match self.dtype {
                DType::I64 => (self.ptr as *const i64).add(off).read_unaligned(),
                DType::I32 => i64::from((self.ptr as *const i32).add(off).read_unaligned()),
                DType::I16 => i64::from((self.ptr as *const i16).add(off).read_unaligned()),
                DType::I8 => i64::from(*(self.ptr as *const i8).add(off)),
                DType::U8 | DType::Bool => i64::from(*self.ptr.add(off)),
                _ => self.ld(off) as i64,
            }
        }
    }

    #[inline(always)]
    pub fn st_i64(&self, off: usize, v: i64) {
        // SAFETY: as `ld`.
        unsafe {
            match self.dtype {
                DType::I64 => (self.ptr as *mut i64).add(off).write_unaligned(v),
                DType::I32 => (self.ptr as *mut i32).add(off).write_unaligned(v as i32),
                DType::I16 => (self.ptr as *mut i16).add(off).write_unaligned(v as i16),
                DType::I8 | DType::U8 => *self.ptr.add(off) = v as u8,
                DType::Bool => *self.ptr.add(off) = u8::from(v != 0),
                _ => self.st(off, v as f32),
            }
        }
    }

    /// Reads `dst.len()` elements starting at `off`, `stride` apart, as f32.
    #[inline]
    pub fn gather(&self, off: usize, stride: usize, dst: &mut [f32]) {
        // SAFETY: as `ld`.
        unsafe {
            match self.dtype {
                DType::F32 => {
                    let p = (self.ptr as *const f32).add(off);
                    if stride == 1 {
                        std::ptr::copy_nonoverlapping(
                            p as *const u8,
                            dst.as_mut_ptr() as *mut u8,
                            dst.len() * 4,
                        );
                    } else if stride == 2 && p.is_aligned() && !dst.is_empty() {
                        // every other element of an aligned run (stride-2 im2col rows): as
                        // pairs, so the loop vectorizes (the strided loop below does not)
                        let n = dst.len();
                        let src = std::slice::from_raw_parts(p, 2 * n - 1);
                        let (head, last) = dst.split_at_mut(n - 1);
                        for (d, pair) in head.iter_mut().zip(src.chunks_exact(2)) {
                            *d = pair[0];
                        }
                        last[0] = src[2 * n - 2];
                    } else {
                        for (i, d) in dst.iter_mut().enumerate() {
                            *d = p.add(i * stride).read_unaligned();
                        }
                    }
                }
                DType::BF16 => {
                    let p = (self.ptr as *const u16).add(off);
                    for (i, d) in dst.iter_mut().enumerate() {
                        *d = f32::from_bits(u32::from(p.add(i * stride).read_unaligned()) << 16);
                    }
                }
                DType::F16 => {
                    let p = (self.ptr as *const u16).add(off);
                    for (i, d) in dst.iter_mut().enumerate() {
                        *d = f16::from_bits(p.add(i * stride).read_unaligned()).to_f32();
                    }
                }
                _ => {
                    for (i, d) in dst.iter_mut().enumerate() {
                        *d = self.ld(off + i * stride);
                    }
                }
            }
        }
    }

    /// Writes `src` starting at `off`, `stride` apart, rounding to the view's dtype.
    #[inline]
    pub fn scatter(&self, off: usize, stride: usize, src: &[f32]) {
        // SAFETY: as `ld`.
        unsafe {
            match self.dtype {
                DType::F32 => {
                    let p = (self.ptr as *mut f32).add(off);
                    for (i, &s) in src.iter().enumerate() {
                        p.add(i * stride).write_unaligned(s);
                    }
                }
                DType::BF16 => {
                    let p = (self.ptr as *mut u16).add(off);
                    for (i, &s) in src.iter().enumerate() {
                        p.add(i * stride)
                            .write_unaligned(bf16::from_f32(s).to_bits());
                    }
                }
                DType::F16 => {
                    let p = (self.ptr as *mut u16).add(off);
                    for (i, &s) in src.iter().enumerate() {
                        p.add(i * stride)
                            .write_unaligned(f16::from_f32(s).to_bits());
                    }
                }
                _ => {
                    for (i, &s) in src.iter().enumerate() {
                        self.st(off + i * stride, s);
                    }
                }
            }
        }
    }

    /// Element offset of the row-major linear index `lin` over the leading `dims` dims.
    #[inline]
    pub fn offset_of(&self, mut lin: usize, dims: usize) -> usize {
        let mut off = 0;
        for d in (0..dims).rev() {
            let n = self.shape[d].max(1);
            off += (lin % n) * self.strides[d];
            lin /= n;
        }
        off
    }

    /// The leading dims of `shape` (all but the last `trailing`) as a row count.
    pub fn rows(&self, trailing: usize) -> usize {
        self.shape[..self.rank().saturating_sub(trailing)]
            .iter()
            .product()
    }

    /// The view as an f32 pointer, when it is f32 and aligned for f32.
    pub fn f32_ptr(&self) -> Option<*mut f32> {
        (self.dtype == DType::F32 && (self.ptr as usize) & 3 == 0).then_some(self.ptr as *mut f32)
    }

    /// Same buffer, other dims (same rank or less; used for sub-views).
    pub fn with(&self, ptr_elem_off: usize, shape: &'a [usize], strides: &'a [usize]) -> View<'a> {
        View {
            // SAFETY: the caller passes an offset inside the view.
            ptr: unsafe { self.ptr.add(ptr_elem_off * self.dtype.size_bytes()) },
            dtype: self.dtype,
            shape,
            strides,
        }
    }
}

/// Offset of a linear index over `shape` with `strides` (row-major).
#[inline]
pub fn offset_in(shape: &[usize], strides: &[usize], mut lin: usize) -> usize {
    let mut off = 0;
    for d in (0..shape.len()).rev() {
        let n = shape[d].max(1);
        off += (lin % n) * strides[d];
        lin /= n;
    }
    off
}

thread_local! {
    static SCRATCH: [RefCell<Vec<f32>>; 4] = Default::default();
}

/// Runs `f` with this thread's scratch buffer `which` (0..4) of at least `n` f32s. The
/// buffer grows on first use and is reused afterwards, so steady-state runs allocate nothing.
/// A pool worker waiting inside a parallel loop may run another task (work stealing), from
/// another run going on at the same time, that asks for the buffer it holds: that task gets
/// a buffer of its own for the call.
pub fn with_scratch<R>(which: usize, n: usize, f: impl FnOnce(&mut [f32]) -> R) -> R {
    SCRATCH.with(|s| match s[which].try_borrow_mut() {
        Ok(mut v) => {
            if v.len() < n {
                v.resize(n, 0.0);
            }
            f(&mut v[..n])
        }
        Err(_) => f(&mut vec![0.0; n]),
    })
}

/// A raw pointer that may cross threads (kernels write disjoint parts).
#[derive(Clone, Copy)]
pub struct SendPtr<T>(pub *mut T);
// SAFETY: used only for disjoint writes coordinated by the kernel.
unsafe impl<T> Send for SendPtr<T> {}
unsafe impl<T> Sync for SendPtr<T> {}

impl<T> SendPtr<T> {
    /// The pointer (a method, so closures capture the whole Send wrapper).
    #[inline(always)]
    pub fn get(&self) -> *mut T {
        self.0
    }
}

/// Number of parallel chunks to split `n` items in.
pub fn chunks_for(n: usize, min_per_chunk: usize) -> usize {
    let threads = rayon::current_num_threads().max(1);
    (n / min_per_chunk.max(1)).clamp(1, threads * 4)
}

#[cfg(test)]
mod tests {
    use super::with_scratch;

    #[test]
    fn a_nested_request_for_a_held_scratch_buffer_gets_its_own() {
        let sum = with_scratch(2, 4, |outer| {
            outer.fill(1.0);
            let inner = with_scratch(2, 3, |inner| {
                inner.fill(5.0);
                inner.iter().sum::<f32>()
            });
            inner + outer.iter().sum::<f32>()
        });
        assert_eq!(sum, 19.0);
    }
}
