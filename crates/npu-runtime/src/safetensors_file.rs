//! safetensors files: checked indexing (every tensor's byte range against its shape), reading
//! into host tensors, and writing them.

use crate::error::{Result, RuntimeError};
use crate::tensor::HostTensor;
use npu_ir::DType;
use safetensors::Dtype as StDtype;
use std::collections::HashMap;
use std::path::Path;

/// Where each tensor of a safetensors file lies: name -> (dtype, shape, start, end) in
/// `bytes`. Every shape's byte size is computed with checked arithmetic and must equal its
/// data range inside the file; `path` names the file in errors.
pub fn index_safetensors(bytes: &[u8], path: &str) -> Result<SafetensorIndex> {
    let bad = |message: String| RuntimeError::BadSafetensors {
        path: path.to_string(),
        message,
    };
    let (n, meta) =
        safetensors::SafeTensors::read_metadata(bytes).map_err(|e| bad(e.to_string()))?;
    let base = n
        .checked_add(8)
        .ok_or_else(|| bad("header length overflows".into()))?;
    let mut tensors = HashMap::new();
    for (name, info) in meta.tensors() {
        let dtype = dtype_from_safetensors(info.dtype).ok_or_else(|| {
            RuntimeError::UnsupportedFileDType {
                path: path.to_string(),
                name: name.clone(),
                dtype: format!("{:?}", info.dtype),
            }
        })?;
        let (s, e) = info.data_offsets;
        // Checked in order, as `numel` multiplies (see `HostTensor::new`).
        let want = info
            .shape
            .iter()
            .try_fold(dtype.size_bytes(), |n, &d| n.checked_mul(d));
        let range = base
            .checked_add(s)
            .zip(base.checked_add(e))
            .filter(|&(a, b)| a <= b && b <= bytes.len());
        match (want, range) {
            (Some(w), Some((a, b))) if b - a == w => {
                tensors.insert(name, (dtype, info.shape.clone(), a, b));
            }
            _ => {
                return Err(bad(format!(
                    "tensor '{name}' {dtype}{:?} has bad data offsets {s}..{e}",
                    info.shape
                )))
            }
        }
    }
    Ok(tensors)
}

/// name -> (dtype, shape, start, end) of a safetensors file's tensors.
pub type SafetensorIndex = HashMap<String, (DType, Vec<usize>, usize, usize)>;

pub fn dtype_from_safetensors(d: StDtype) -> Option<DType> {
    Some(match d {
        StDtype::BOOL => DType::Bool,
        StDtype::U8 => DType::U8,
        StDtype::I8 => DType::I8,
        StDtype::I16 => DType::I16,
        StDtype::I32 => DType::I32,
        StDtype::I64 => DType::I64,
        StDtype::F16 => DType::F16,
        StDtype::BF16 => DType::BF16,
        StDtype::F32 => DType::F32,
        StDtype::F64 => DType::F64,
        _ => return None,
    })
}

pub fn dtype_to_safetensors(d: DType) -> StDtype {
    match d {
        DType::Bool => StDtype::BOOL,
        DType::U8 => StDtype::U8,
        DType::I8 => StDtype::I8,
        DType::I16 => StDtype::I16,
        DType::I32 => StDtype::I32,
        DType::I64 => StDtype::I64,
        DType::F16 => StDtype::F16,
        DType::BF16 => StDtype::BF16,
        DType::F32 => StDtype::F32,
        DType::F64 => StDtype::F64,
    }
}

/// Reads every tensor of a safetensors file (in file order).
pub fn read_safetensors(path: &Path) -> Result<Vec<(String, HostTensor)>> {
    let p = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|source| RuntimeError::Io {
        path: p.clone(),
        source,
    })?;
    parse_safetensors(&bytes, &p)
}

/// Every tensor of safetensors file bytes (in file order); `path` names it in errors.
pub fn parse_safetensors(bytes: &[u8], path: &str) -> Result<Vec<(String, HostTensor)>> {
    let index = index_safetensors(bytes, path)?;
    let mut entries: Vec<_> = index.into_iter().collect();
    entries.sort_by(|(a, (_, _, sa, ea)), (b, (_, _, sb, eb))| (sa, ea, a).cmp(&(sb, eb, b)));
    entries
        .into_iter()
        .map(|(name, (dtype, shape, s, e))| {
            let t = HostTensor::new(dtype, shape, bytes[s..e].to_vec())?;
            Ok((name, t))
        })
        .collect()
}

/// Writes named tensors to a safetensors file (see [`safetensors_bytes`] to write them
/// elsewhere, e.g. atomically).
pub fn write_safetensors(path: &Path, tensors: &[(String, HostTensor)]) -> Result<()> {
    let bytes = safetensors_bytes(tensors)?;
    std::fs::write(path, bytes).map_err(|source| RuntimeError::Write {
        path: path.display().to_string(),
        source,
    })
}

/// Named tensors as the bytes of a safetensors file.
pub fn safetensors_bytes(tensors: &[(String, HostTensor)]) -> Result<Vec<u8>> {
    let views = tensors
        .iter()
        .map(|(n, t)| {
            safetensors::tensor::TensorView::new(
                dtype_to_safetensors(t.dtype()),
                t.shape().to_vec(),
                t.bytes(),
            )
            .map(|v| (n.clone(), v))
            .map_err(|e| RuntimeError::Tensor {
                name: n.clone(),
                message: e.to_string(),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    safetensors::serialize(views, None).map_err(|e| RuntimeError::Tensor {
        name: "outputs".into(),
        message: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn safetensors_round_trip() {
        let dir = std::env::temp_dir().join(format!("npu-rt-st-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.safetensors");
        let a = HostTensor::from_f32(vec![2, 3], &[1., 2., 3., 4., 5., 6.]);
        let b = HostTensor::from_i64(vec![3], &[1, 2, 3]);
        write_safetensors(&path, &[("a".into(), a.clone()), ("b".into(), b.clone())]).unwrap();
        let r = read_safetensors(&path).unwrap();
        let get = |n: &str| r.iter().find(|(k, _)| k == n).unwrap().1.clone();
        assert_eq!(get("a"), a);
        assert_eq!(get("b"), b);
        std::fs::remove_dir_all(&dir).ok();
    }
}
