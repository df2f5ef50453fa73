//! What the conformance suite (`npu-conformance`, run on every backend) cannot say about the
//! CPU kernels: their refusals of out-of-range indices, and integer copies beyond f32's
//! precision. Every kernel's numbers are checked there.

use npu_compiler::program::{dense_strides, Kernel};
use npu_ir::DType;
use npu_runtime::cpu::exec_step;
use npu_runtime::cpu::view::View;
use npu_runtime::tensor::store_f32;

/// A dense tensor over its own buffer.
struct T {
    dtype: DType,
    shape: Vec<usize>,
    strides: Vec<usize>,
    data: Vec<u8>,
}

impl T {
    fn zeros(dtype: DType, shape: &[usize]) -> T {
        let n: usize = shape.iter().product();
        T {
            dtype,
            shape: shape.to_vec(),
            strides: dense_strides(shape),
            data: vec![0u8; n * dtype.size_bytes()],
        }
    }
    fn ints(values: &[i64]) -> T {
        let mut t = T::zeros(DType::I64, &[values.len()]);
        for (i, v) in values.iter().enumerate() {
            npu_runtime::tensor::store_i64(&mut t.data, DType::I64, i, *v);
        }
        t
    }
    fn view(&mut self) -> View<'_> {
        View {
            ptr: self.data.as_mut_ptr(),
            dtype: self.dtype,
            shape: &self.shape,
            strides: &self.strides,
        }
    }
}

fn exec(k: &Kernel, ins: &mut [&mut T], out: &mut T) -> Result<(), String> {
    let views: Vec<View> = ins.iter_mut().map(|t| t.view()).collect();
    exec_step(k, &views, &[out.view()])
}

#[test]
fn embedding_and_index_copy_refuse_out_of_range_indices() {
    let mut table = T::zeros(DType::BF16, &[11, 6]);
    for i in 0..66 {
        store_f32(&mut table.data, DType::BF16, i, i as f32);
    }
    let mut out = T::zeros(DType::F32, &[3, 6]);
    let mut ids = T::ints(&[3, 11, 0]);
    let e = exec(&Kernel::Embedding, &mut [&mut table, &mut ids], &mut out).unwrap_err();
    assert!(e.contains("11"), "{e}");
    let mut ids = T::ints(&[3, -1, 0]);
    let e = exec(&Kernel::Embedding, &mut [&mut table, &mut ids], &mut out).unwrap_err();
    assert!(e.contains("-1"), "{e}");

    let mut dest = T::zeros(DType::F32, &[1, 2, 9, 4]);
    let mut src = T::zeros(DType::F32, &[1, 2, 3, 4]);
    let mut index = T::ints(&[5, 9, 8]);
    let e = exec(
        &Kernel::IndexCopy { axis: 2 },
        &mut [&mut index, &mut src],
        &mut dest,
    )
    .unwrap_err();
    assert!(e.contains('9'), "{e}");
}

#[test]
fn integers_copy_exactly_beyond_f32_precision() {
    let big = (1i64 << 53) + 1;
    let mut src = T::ints(&[big, -big]);
    let mut dst = T::zeros(DType::I64, &[2]);
    exec(&Kernel::Copy, &mut [&mut src], &mut dst).unwrap();
    let got: Vec<i64> = (0..2)
        .map(|i| i64::from_le_bytes(dst.data[i * 8..i * 8 + 8].try_into().unwrap()))
        .collect();
    assert_eq!(got, vec![big, -big]);
}
