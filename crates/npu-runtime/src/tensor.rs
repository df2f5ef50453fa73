//! Host tensors (dtype + shape + little-endian bytes) and element conversions.

use crate::error::{Result, RuntimeError};
use half::{bf16, f16};
use npu_ir::DType;

mod f16_slices;

/// A tensor in host memory, stored as its dtype's little-endian bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct HostTensor {
    dtype: DType,
    shape: Vec<usize>,
    data: Vec<u8>,
}

impl HostTensor {
    /// Checks that `data` holds exactly `shape`'s elements of `dtype`.
    pub fn new(dtype: DType, shape: Vec<usize>, data: Vec<u8>) -> Result<HostTensor> {
        // Checked in order, as `numel` multiplies: a shape whose running product overflows
        // is refused even when a later zero dim would make it empty.
        let want = shape
            .iter()
            .try_fold(dtype.size_bytes(), |n, &d| n.checked_mul(d));
        if want != Some(data.len()) {
            let want = crate::limits::tensor_bytes(&shape, dtype);
            return Err(RuntimeError::Tensor {
                name: String::new(),
                message: format!("{dtype}{shape:?} needs {want} bytes, got {}", data.len()),
            });
        }
        Ok(HostTensor { dtype, shape, data })
    }

    pub fn zeros(dtype: DType, shape: Vec<usize>) -> HostTensor {
        let n = shape.iter().product::<usize>() * dtype.size_bytes();
        // calloc'd: untouched until written, so the advice holds from the first touch
        let data = vec![0; n];
        crate::limits::advise_huge_pages(data.as_ptr(), n);
        HostTensor { dtype, shape, data }
    }

    pub fn from_f32(shape: Vec<usize>, values: &[f32]) -> HostTensor {
        Self::from_f32_as(DType::F32, shape, values)
    }

    /// Stores f32 values as `dtype` (round-to-nearest-even for floats, truncation for ints).
    pub fn from_f32_as(dtype: DType, shape: Vec<usize>, values: &[f32]) -> HostTensor {
        let mut t = HostTensor::zeros(dtype, shape);
        for (i, &v) in values.iter().enumerate().take(t.numel()) {
            store_f32(&mut t.data, dtype, i, v);
        }
        t
    }

    pub fn from_i64(shape: Vec<usize>, values: &[i64]) -> HostTensor {
        let data = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        HostTensor {
            dtype: DType::I64,
            shape,
            data,
        }
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
    pub fn bytes(&self) -> &[u8] {
        &self.data
    }
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.data
    }
    pub fn into_bytes(self) -> Vec<u8> {
        self.data
    }

    /// Every element widened to f32 (integers converted by value).
    pub fn to_f32_vec(&self) -> Vec<f32> {
        let n = self.numel();
        if cfg!(target_endian = "little") {
            // Whole slices through `cast_bytes` (F16C / bulk paths): ~10x the per-element
            // loop on a vocabulary's logits (152k bf16 values: 24 against 251 us, AMD EPYC),
            // which a generation pays every token. Same values: its per-element fallbacks
            // are the same loads.
            let mut out = vec![0f32; n];
            // SAFETY: the byte view covers exactly `out`'s initialized elements, and every
            // bit pattern is a valid f32; little-endian, as `cast_bytes` stores.
            let bytes =
                unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr().cast::<u8>(), 4 * n) };
            if cast_bytes(&self.data, self.dtype, bytes, DType::F32).is_ok() {
                return out;
            }
        }
        (0..n)
            .map(|i| load_f32(&self.data, self.dtype, i))
            .collect()
    }

    /// Every element as i64 (floats truncated).
    pub fn to_i64_vec(&self) -> Vec<i64> {
        (0..self.numel())
            .map(|i| load_i64(&self.data, self.dtype, i))
            .collect()
    }

    /// Converts to `dtype`: floats round to nearest even, ints convert by value; a float
    /// with a fractional part never silently becomes an integer.
    pub fn cast(&self, dtype: DType) -> Result<HostTensor> {
        if dtype == self.dtype {
            return Ok(self.clone());
        }
        let mut out = HostTensor::zeros(dtype, self.shape.clone());
        cast_bytes(&self.data, self.dtype, &mut out.data, dtype)?;
        Ok(out)
    }
}

/// Converts `n` elements between dtypes; float -> int is refused.
pub fn cast_bytes(src: &[u8], from: DType, dst: &mut [u8], to: DType) -> Result<()> {
    let n = dst.len() / to.size_bytes().max(1);
    if from == to {
        dst.copy_from_slice(&src[..dst.len()]);
        return Ok(());
    }
    if cast_floats_fast(
        &src[..(n * from.size_bytes()).min(src.len())],
        from,
        dst,
        to,
    ) {
        return Ok(());
    }
    match (from.is_float(), to.is_float()) {
        (false, false) => {
            for i in 0..n {
                store_i64(dst, to, i, load_i64(src, from, i));
            }
        }
        (_, true) => {
            if from == DType::F64 && to == DType::F32 {
                for i in 0..n {
                    store_f32(dst, to, i, load_f64(src, from, i) as f32);
                }
            } else if from == DType::F64 {
                for i in 0..n {
                    store_f64(dst, to, i, load_f64(src, from, i));
                }
            } else {
                for i in 0..n {
                    store_f32(dst, to, i, load_f32(src, from, i));
                }
            }
        }
        (true, false) => return Err(RuntimeError::Conversion { from, to }),
    }
    Ok(())
}

/// As [`cast_bytes`], for a large destination the CPU does not read back (a GPU upload's
/// staging): f32 -> f16 stores bypass the caches (`f16_slices::f32_to_f16_streaming`); other
/// pairs, and unaligned buffers, convert as `cast_bytes` does.
pub fn cast_bytes_streaming(src: &[u8], from: DType, dst: &mut [u8], to: DType) -> Result<()> {
    if (from, to) == (DType::F32, DType::F16) {
        let n = dst.len() / 2;
        if convert(
            &src[..(n * 4).min(src.len())],
            dst,
            f16_slices::f32_to_f16_streaming,
        ) {
            return Ok(());
        }
    }
    cast_bytes(src, from, dst, to)
}

/// f32 <-> f16/bf16 over whole aligned slices (f16: F16C eight lanes an instruction where the
/// CPU has it, `f16_slices`; bf16: `half`'s slice conversions): the host side of every upload
/// and download of 16-bit tensors. False when the pair or the alignment does not fit; the
/// caller converts per element.
fn cast_floats_fast(src: &[u8], from: DType, dst: &mut [u8], to: DType) -> bool {
    use half::slice::HalfFloatSliceExt;
    match (from, to) {
        (DType::F32, DType::F16) => convert(src, dst, f16_slices::f32_to_f16),
        (DType::F32, DType::BF16) => convert(src, dst, |s: &[f32], d: &mut [bf16]| {
            d.convert_from_f32_slice(s)
        }),
        (DType::F16, DType::F32) => convert(src, dst, f16_slices::f16_to_f32),
        (DType::BF16, DType::F32) => convert(src, dst, |s: &[bf16], d: &mut [f32]| {
            s.convert_to_f32_slice(d)
        }),
        _ => false,
    }
}

/// Views `src` and `dst` as slices of `A` and `B` of one length and applies `f`; false when
/// either is misaligned or the lengths differ.
fn convert<A: Plain, B: Plain>(src: &[u8], dst: &mut [u8], f: impl FnOnce(&[A], &mut [B])) -> bool {
    // SAFETY: `Plain` types are plain old data (every bit pattern valid), and `align_to` only
    // yields correctly aligned middle parts.
    let ((p, s, q), (dp, d, dq)) = unsafe { (src.align_to::<A>(), dst.align_to_mut::<B>()) };
    if !p.is_empty() || !q.is_empty() || !dp.is_empty() || !dq.is_empty() || s.len() != d.len() {
        return false;
    }
    f(s, d);
    true
}

/// Element types every bit pattern of which is a valid value.
trait Plain {}
impl Plain for f32 {}
impl Plain for half::f16 {}
impl Plain for half::bf16 {}

fn arr<const N: usize>(b: &[u8], i: usize) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&b[i * N..i * N + N]);
    a
}

/// Element `i` of a byte buffer of `dt`, widened to f32.
pub fn load_f32(b: &[u8], dt: DType, i: usize) -> f32 {
    match dt {
        DType::F32 => f32::from_le_bytes(arr(b, i)),
        DType::F64 => f64::from_le_bytes(arr(b, i)) as f32,
        DType::F16 => f16::from_le_bytes(arr(b, i)).to_f32(),
        DType::BF16 => bf16::from_le_bytes(arr(b, i)).to_f32(),
        _ => load_i64(b, dt, i) as f32,
    }
}

pub fn load_f64(b: &[u8], dt: DType, i: usize) -> f64 {
    match dt {
        DType::F64 => f64::from_le_bytes(arr(b, i)),
        DType::I64 | DType::I32 | DType::I16 | DType::I8 | DType::U8 | DType::Bool => {
            load_i64(b, dt, i) as f64
        }
        _ => f64::from(load_f32(b, dt, i)),
    }
}

pub fn load_i64(b: &[u8], dt: DType, i: usize) -> i64 {
    match dt {
        DType::I64 => i64::from_le_bytes(arr(b, i)),
        DType::I32 => i64::from(i32::from_le_bytes(arr(b, i))),
        DType::I16 => i64::from(i16::from_le_bytes(arr(b, i))),
        DType::I8 => i64::from(b[i] as i8),
        DType::U8 => i64::from(b[i]),
        DType::Bool => i64::from(b[i] != 0),
        _ => load_f64(b, dt, i) as i64,
    }
}

/// Stores an f32 into element `i`, rounding to `dt` (RNE for floats).
pub fn store_f32(b: &mut [u8], dt: DType, i: usize, v: f32) {
    match dt {
        DType::F32 => b[i * 4..i * 4 + 4].copy_from_slice(&v.to_le_bytes()),
        DType::F64 => b[i * 8..i * 8 + 8].copy_from_slice(&f64::from(v).to_le_bytes()),
        DType::F16 => b[i * 2..i * 2 + 2].copy_from_slice(&f16::from_f32(v).to_le_bytes()),
        DType::BF16 => b[i * 2..i * 2 + 2].copy_from_slice(&bf16::from_f32(v).to_le_bytes()),
        DType::Bool => b[i] = u8::from(v != 0.0),
        _ => store_i64(b, dt, i, v as i64),
    }
}

pub fn store_f64(b: &mut [u8], dt: DType, i: usize, v: f64) {
    match dt {
        DType::F64 => b[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes()),
        DType::F16 => b[i * 2..i * 2 + 2].copy_from_slice(&f16::from_f64(v).to_le_bytes()),
        DType::BF16 => b[i * 2..i * 2 + 2].copy_from_slice(&bf16::from_f64(v).to_le_bytes()),
        _ => store_f32(b, dt, i, v as f32),
    }
}

pub fn store_i64(b: &mut [u8], dt: DType, i: usize, v: i64) {
    match dt {
        DType::I64 => b[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes()),
        DType::I32 => b[i * 4..i * 4 + 4].copy_from_slice(&(v as i32).to_le_bytes()),
        DType::I16 => b[i * 2..i * 2 + 2].copy_from_slice(&(v as i16).to_le_bytes()),
        DType::I8 => b[i] = v as i8 as u8,
        DType::U8 => b[i] = v as u8,
        DType::Bool => b[i] = u8::from(v != 0),
        _ => store_f64(b, dt, i, v as f64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn to_f32_vec_gives_every_dtype_s_values_as_the_element_loads_do() {
        // raw bytes cover NaN, inf, subnormals and every integer width's sign; an odd length
        // leaves a tail past the bulk paths' lanes
        let n = 37;
        for dt in DType::ALL {
            let data: Vec<u8> = (0..n * dt.size_bytes())
                .map(|i| (i as u32).wrapping_mul(2_654_435_761).rotate_left(7) as u8)
                .collect();
            let t = HostTensor::new(dt, vec![n], data).unwrap();
            let want: Vec<f32> = (0..n).map(|i| load_f32(t.bytes(), dt, i)).collect();
            let got = t.to_f32_vec();
            let same = |a: f32, b: f32| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(same(*g, *w), "{dt:?} element {i}: {g} against {w}");
            }
        }
    }

    #[test]
    fn casts_round_to_nearest_even_and_refuse_float_to_int() {
        let t = HostTensor::from_f32(vec![2], &[1.0 + 1.0 / 256.0, 1.0 + 3.0 / 256.0]);
        let b = t.cast(DType::BF16).unwrap();
        assert_eq!(b.to_f32_vec(), vec![1.0, 1.0 + 4.0 / 256.0]);
        assert!(t.cast(DType::I64).is_err());
        let i = HostTensor::from_i64(vec![2], &[7, -3]);
        assert_eq!(i.cast(DType::I32).unwrap().to_i64_vec(), vec![7, -3]);
    }

    /// The slice fast path and the per-element path agree bit for bit, aligned or not.
    #[test]
    fn fast_float_casts_match_the_element_path() {
        let mut v: Vec<f32> = (0..1000)
            .map(|i| ((i * 7919) % 2003) as f32 * 0.37 - 300.0)
            .collect();
        v.extend([
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            -0.0,
            65504.0,
            65520.0,
            1e-8,
            6e-5,
            f32::MAX,
            f32::MIN_POSITIVE,
        ]);
        let src: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        for to in [DType::F16, DType::BF16] {
            let mut slow = vec![0u8; v.len() * 2];
            for (i, &x) in v.iter().enumerate() {
                store_f32(&mut slow, to, i, x);
            }
            // aligned source and destination (the fast path), then a source one byte off
            let mut fast = vec![0u8; v.len() * 2];
            cast_bytes(&src, DType::F32, &mut fast, to).unwrap();
            assert_eq!(fast, slow, "{to}");
            let mut shifted = vec![0u8; src.len() + 1];
            shifted[1..].copy_from_slice(&src);
            let mut off = vec![0u8; v.len() * 2];
            cast_bytes(&shifted[1..], DType::F32, &mut off, to).unwrap();
            assert_eq!(off, slow, "{to} unaligned");
            // the streaming form (non-temporal stores for f32 -> f16), aligned or not
            for from in [&src[..], &shifted[1..]] {
                let mut streamed = vec![0u8; v.len() * 2];
                cast_bytes_streaming(from, DType::F32, &mut streamed, to).unwrap();
                assert_eq!(streamed, slow, "{to} streamed");
            }
            let mut back = vec![0u8; v.len() * 4];
            cast_bytes(&slow, to, &mut back, DType::F32).unwrap();
            for i in 0..v.len() {
                let want = load_f32(&slow, to, i);
                let got = f32::from_le_bytes(back[i * 4..i * 4 + 4].try_into().unwrap());
                assert!(want.to_bits() == got.to_bits() || (want.is_nan() && got.is_nan()));
            }
        }
    }
}
