//! numpy arrays <-> host tensors.
//!
//! In: a C-contiguous array plus the dtype name it stands for (a bfloat16 tensor arrives as
//! its 16-bit view, since numpy has no bfloat16); its bytes are copied once into the
//! `HostTensor` the runtime API takes. Out: the tensor's byte vector becomes the numpy
//! array's memory without a copy (`PyArray1::from_vec`), viewed with the element type and
//! shape; bfloat16 comes back as a `uint16` view with the dtype name `bfloat16`.

use crate::error::{Fail, Res};
use npu_ir::DType;
use npu_runtime::HostTensor;
use numpy::{PyArray1, PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

/// A named array as Python passes it: `(name, dtype name, array)`.
pub type NamedArray<'py> = (String, String, Bound<'py, PyUntypedArray>);

pub fn parse_dtype(name: &str) -> Res<DType> {
    DType::parse(name).ok_or_else(|| Fail::input(format!("unsupported dtype '{name}'")))
}

/// Copies a C-contiguous array into a host tensor of `dtype`.
pub fn to_host(what: &str, dtype: &str, arr: &Bound<'_, PyUntypedArray>) -> Res<HostTensor> {
    let dt = parse_dtype(dtype)?;
    if !arr.is_c_contiguous() {
        return Err(Fail::input(format!(
            "{what}: the array is not C-contiguous"
        )));
    }
    let itemsize = arr.dtype().itemsize();
    if itemsize != dt.size_bytes() {
        return Err(Fail::input(format!(
            "{what}: an array of {itemsize}-byte elements cannot hold {dt}"
        )));
    }
    let shape = arr.shape().to_vec();
    let n = shape.iter().product::<usize>() * itemsize;
    let bytes = if n == 0 {
        Vec::new()
    } else {
        // SAFETY: the array is C-contiguous with `n` bytes of elements starting at `data`,
        // and it stays alive (borrowed) while we copy under the GIL.
        unsafe {
            let data = (*arr.as_array_ptr()).data as *const u8;
            std::slice::from_raw_parts(data, n).to_vec()
        }
    };
    HostTensor::new(dt, shape, bytes).map_err(|e| Fail::input(format!("{what}: {e}")))
}

pub fn to_host_all(items: &[NamedArray<'_>]) -> Res<Vec<(String, HostTensor)>> {
    items
        .iter()
        .map(|(name, dt, a)| Ok((name.clone(), to_host(&format!("input '{name}'"), dt, a)?)))
        .collect()
}

/// The numpy element type that holds `dt` (bfloat16 as its bits).
fn numpy_name(dt: DType) -> &'static str {
    match dt {
        DType::BF16 => "uint16",
        other => other.name(),
    }
}

/// Moves a host tensor into a numpy array without copying: `(dtype name, array)`.
pub fn to_numpy(py: Python<'_>, t: HostTensor) -> PyResult<(&'static str, Bound<'_, PyAny>)> {
    let dt = t.dtype();
    let shape = t.shape().to_vec();
    let flat = PyArray1::from_vec(py, t.into_bytes());
    let arr = flat
        .call_method1("view", (numpy_name(dt),))?
        .call_method1("reshape", (PyTuple::new(py, shape)?,))?;
    Ok((dt.name(), arr))
}

/// Named outputs as `[(name, dtype name, array)]`.
pub fn outputs_to_py(
    py: Python<'_>,
    outs: Vec<(String, HostTensor)>,
) -> PyResult<Vec<(String, &'static str, Bound<'_, PyAny>)>> {
    outs.into_iter()
        .map(|(n, t)| {
            let (dt, a) = to_numpy(py, t)?;
            Ok((n, dt, a))
        })
        .collect()
}
