//! Weight loading: memory-mapped safetensors, validation of every source tensor the program
//! names, and the load-time recipes (load/cast, BN folding, channel padding).

use crate::error::{Result, RuntimeError};
use crate::safetensors_file::{index_safetensors, SafetensorIndex};
use crate::tensor::{cast_bytes, load_f64, store_f64, HostTensor};
use npu_ir::DType;
use npu_program::program::{Recipe, SourceTensor, WeightSlot};
use npu_program::Program;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

/// A borrowed tensor in a weight source.
#[derive(Debug, Clone, Copy)]
pub struct TensorRef<'a> {
    pub dtype: DType,
    pub shape: &'a [usize],
    pub bytes: &'a [u8],
}

/// Where weights come from: anything that can look a tensor up by its key.
pub trait WeightSource {
    /// A name for messages (the file path).
    fn describe(&self) -> String;
    fn get(&self, key: &str) -> Option<TensorRef<'_>>;
    /// The tensor's bytes as a handle that outlives this borrow (a range of a mapped file),
    /// where the source can give one: a backend then uses them in place instead of copying.
    fn shared(&self, _key: &str) -> Option<SharedBytes> {
        None
    }
    /// A hint that the tensor's bytes will not be read again soon (a built slot copied them):
    /// a mapped file drops its pages from this process's resident memory.
    fn release(&self, _key: &str) {}
}

/// Bytes that stay valid while the handle lives: a range of a memory-mapped file.
#[derive(Clone)]
pub struct SharedBytes {
    map: Arc<memmap2::Mmap>,
    start: usize,
    end: usize,
}

impl SharedBytes {
    pub fn bytes(&self) -> &[u8] {
        &self.map[self.start..self.end]
    }
    /// Drops the range's pages from this process's resident memory (a copy holds them now);
    /// they are read back from the file if touched again.
    pub fn release(&self) {
        release_pages(&self.map, self.start, self.end);
    }
}

/// madvise(DONTNEED) on the whole pages of `start..end` of a read-only file map.
fn release_pages(map: &memmap2::Mmap, start: usize, end: usize) {
    const PAGE: usize = 4096;
    // Whole pages inside the range only (its neighbours may be in use). The map starts on a
    // page boundary; with larger pages madvise refuses the range, which is harmless.
    let (start, end) = (start.next_multiple_of(PAGE), end / PAGE * PAGE);
    if end > start {
        // SAFETY: a read-only shared file mapping: dropped pages are read back from the file
        // on the next access, with the same bytes, so no reference sees a change.
        let _ = unsafe {
            map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, start, end - start)
        };
    }
}

impl std::fmt::Debug for SharedBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SharedBytes({}..{})", self.start, self.end)
    }
}

/// A built weight slot: its bytes, owned (cast, folded, padded, concatenated) or the source
/// file's own (a plain load whose dtype and shape already fit).
#[derive(Debug)]
pub enum WeightBytes {
    Owned(HostTensor),
    Mapped(SharedBytes),
}

impl WeightBytes {
    pub fn bytes(&self) -> &[u8] {
        match self {
            WeightBytes::Owned(t) => t.bytes(),
            WeightBytes::Mapped(m) => m.bytes(),
        }
    }
    /// The bytes as an owned vector (a copy only for mapped ones).
    pub fn into_vec(self) -> Vec<u8> {
        match self {
            WeightBytes::Owned(t) => t.into_bytes(),
            WeightBytes::Mapped(m) => m.bytes().to_vec(),
        }
    }
}

/// A memory-mapped safetensors file.
pub struct SafetensorsFile {
    path: String,
    mmap: Arc<memmap2::Mmap>,
    tensors: SafetensorIndex,
}

impl SafetensorsFile {
    pub fn open(path: &Path) -> Result<SafetensorsFile> {
        let p = path.display().to_string();
        let io = |source| RuntimeError::Io {
            path: p.clone(),
            source,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        // SAFETY: the file is mapped read-only; a concurrent truncation by another process
        // is outside what this program can defend against, as with every mmap reader.
        let mmap = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        let tensors = index_safetensors(&mmap, &p)?;
        Ok(SafetensorsFile {
            path: p,
            mmap: Arc::new(mmap),
            tensors,
        })
    }

    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.tensors.keys().map(String::as_str)
    }
}

impl WeightSource for SafetensorsFile {
    fn describe(&self) -> String {
        self.path.clone()
    }
    fn get(&self, key: &str) -> Option<TensorRef<'_>> {
        let (dtype, shape, s, e) = self.tensors.get(key)?;
        Some(TensorRef {
            dtype: *dtype,
            shape,
            bytes: &self.mmap[*s..*e],
        })
    }
    fn shared(&self, key: &str) -> Option<SharedBytes> {
        let (_, _, s, e) = self.tensors.get(key)?;
        Some(SharedBytes {
            map: self.mmap.clone(),
            start: *s,
            end: *e,
        })
    }
    fn release(&self, key: &str) {
        if let Some((_, _, s, e)) = self.tensors.get(key) {
            release_pages(&self.mmap, *s, *e);
        }
    }
}

/// In-memory weights (tests, programmatic use).
#[derive(Default)]
pub struct MemoryWeights(pub HashMap<String, HostTensor>);

impl WeightSource for MemoryWeights {
    fn describe(&self) -> String {
        "in-memory weights".into()
    }
    fn get(&self, key: &str) -> Option<TensorRef<'_>> {
        let t = self.0.get(key)?;
        Some(TensorRef {
            dtype: t.dtype(),
            shape: t.shape(),
            bytes: t.bytes(),
        })
    }
}

/// Looks up and validates one source tensor.
fn source<'a>(src: &'a dyn WeightSource, decl: &SourceTensor) -> Result<TensorRef<'a>> {
    let t = src
        .get(&decl.key)
        .ok_or_else(|| RuntimeError::MissingWeight {
            key: decl.key.clone(),
            file: src.describe(),
            extra: format!(" as {}{:?}", decl.dtype, decl.shape),
        })?;
    let dtype_ok = t.dtype == decl.dtype || (t.dtype.is_float() && decl.dtype.is_float());
    if t.shape != decl.shape.as_slice() || !dtype_ok {
        return Err(RuntimeError::WeightMismatch {
            key: decl.key.clone(),
            file: src.describe(),
            expected_shape: decl.shape.clone(),
            expected_dtype: decl.dtype,
            found_shape: t.shape.to_vec(),
            found_dtype: t.dtype,
        });
    }
    Ok(t)
}

/// Checks every source the program reads, reporting all missing keys at once.
pub fn check_sources(program: &Program, src: &dyn WeightSource) -> Result<()> {
    let missing: Vec<&str> = program
        .sources
        .iter()
        .filter(|s| src.get(&s.key).is_none())
        .map(|s| s.key.as_str())
        .collect();
    if missing.len() > 1 {
        return Err(RuntimeError::MissingWeight {
            key: missing.join("', '"),
            file: src.describe(),
            extra: format!("; {} tensors missing", missing.len()),
        });
    }
    for s in &program.sources {
        source(src, s)?;
    }
    Ok(())
}

/// Builds every weight slot of the program, in slot order, in the slot's dtype.
pub fn build_weights(program: &Program, src: &dyn WeightSource) -> Result<Vec<HostTensor>> {
    check_sources(program, src)?;
    program
        .weights
        .iter()
        .map(|w| build_slot(program, w, src))
        .collect()
}

/// Builds weight slot `index` (call [`check_sources`] first for one error listing every
/// missing key); lets a backend upload slot by slot without holding a second copy of all
/// weights on the host.
pub fn build_weight(program: &Program, index: usize, src: &dyn WeightSource) -> Result<HostTensor> {
    let w = program
        .weights
        .get(index)
        .ok_or_else(|| RuntimeError::InvalidProgram(format!("no weight slot {index}")))?;
    build_slot(program, w, src)
}

/// Weight slot `index` as bytes: the source file's own where the slot is a plain load of a
/// tensor already in the slot's dtype and shape (no build step, no host copy: a GPU backend
/// uploads from them, the CPU backend copies them once and releases them), else built as
/// [`build_weight`] builds it, after which its sources' pages are released.
pub fn weight_bytes(
    program: &Program,
    index: usize,
    src: &dyn WeightSource,
) -> Result<WeightBytes> {
    if let Some(w) = program.weights.get(index) {
        if let Recipe::Load { source } = w.recipe {
            if let Some(decl) = program.sources.get(source as usize) {
                let t = self::source(src, decl)?;
                if t.dtype == w.dtype && t.shape == w.shape.as_slice() {
                    if let Some(m) = src.shared(&decl.key) {
                        return Ok(WeightBytes::Mapped(m));
                    }
                }
            }
        }
    }
    let built = build_weight(program, index, src)?;
    // The slot holds its own copy now: the source pages need not stay resident (the fused
    // gate/up and QKV weights of the 1.5B model would otherwise count twice).
    if let Some(w) = program.weights.get(index) {
        let _ = w.recipe.map(|s| {
            if let Some(decl) = program.sources.get(s as usize) {
                src.release(&decl.key);
            }
            Ok::<_, ()>(s)
        });
    }
    Ok(WeightBytes::Owned(built))
}

fn f64s(t: TensorRef<'_>) -> Vec<f64> {
    (0..t.shape.iter().product::<usize>())
        .map(|i| load_f64(t.bytes, t.dtype, i))
        .collect()
}

fn build_slot(program: &Program, w: &WeightSlot, src: &dyn WeightSource) -> Result<HostTensor> {
    let err = |message: String| RuntimeError::Recipe {
        slot: w.name.clone(),
        message,
    };
    let get = |i: u32| -> Result<TensorRef<'_>> {
        let decl = program
            .sources
            .get(i as usize)
            .ok_or_else(|| err(format!("source index {i} out of range")))?;
        source(src, decl)
    };
    // A per-channel source of `n` values (a program's recipe names them; a corrupt one may
    // name a source of another length, which must be an error, not an index panic).
    let channels = |i: u32, n: usize, what: &str| -> Result<Vec<f64>> {
        let v = f64s(get(i)?);
        if v.len() != n {
            return Err(err(format!("{what} has {} values, expected {n}", v.len())));
        }
        Ok(v)
    };
    let opt = |i: Option<u32>, n: usize, what: &str| -> Result<Option<Vec<f64>>> {
        i.map(|i| channels(i, n, what)).transpose()
    };
    // Concat along dim 0: each source converted directly into its rows of the slot.
    if let Recipe::Concat { sources } = &w.recipe {
        let mut out = HostTensor::zeros(w.dtype, w.shape.clone());
        let es = w.dtype.size_bytes();
        let mut at = 0;
        let mut rows = 0;
        for &s in sources {
            let t = get(s)?;
            if t.shape.is_empty() || t.shape[1..] != w.shape.get(1..).unwrap_or(&[])[..] {
                return Err(err(format!(
                    "concat source {:?} does not stack into {:?}",
                    t.shape, w.shape
                )));
            }
            rows += t.shape[0];
            let n = t.shape.iter().product::<usize>() * es;
            let dst = out
                .bytes_mut()
                .get_mut(at..at + n)
                .ok_or_else(|| err(format!("concat sources exceed the slot {:?}", w.shape)))?;
            cast_bytes(t.bytes, t.dtype, dst, w.dtype).map_err(|e| err(e.to_string()))?;
            at += n;
        }
        if Some(&rows) != w.shape.first() {
            return Err(err(format!(
                "concat sources give {rows} rows, the slot {:?}",
                w.shape
            )));
        }
        return Ok(out);
    }
    // Load: convert directly (no f64 round trip, no whole-model temporaries).
    if let Recipe::Load { source: s } = w.recipe {
        let t = get(s)?;
        if t.shape == w.shape.as_slice() {
            let mut out = HostTensor::zeros(w.dtype, w.shape.clone());
            cast_bytes(t.bytes, t.dtype, out.bytes_mut(), w.dtype)
                .map_err(|e| err(e.to_string()))?;
            return Ok(out);
        }
        let vals = f64s(t);
        return pad_into(w, &vals, t.shape).map_err(err);
    }
    let (vals, shape): (Vec<f64>, Vec<usize>) = match w.recipe {
        Recipe::Load { .. } | Recipe::Concat { .. } => unreachable!("handled above"),
        Recipe::BnFoldWeight {
            weight,
            gamma,
            var,
            eps,
        } => {
            let wt = get(weight)?;
            let shape = wt.shape.to_vec();
            let mut v = f64s(wt);
            let o = shape.first().copied().unwrap_or(1).max(1);
            let var = channels(var, o, "running_var")?;
            let gamma = opt(gamma, o, "weight")?;
            let per = v.len() / o;
            for c in 0..o {
                let g = gamma.as_ref().map_or(1.0, |g| g[c]);
                let s = g / (var[c] + eps).sqrt();
                for x in &mut v[c * per..(c + 1) * per] {
                    *x *= s;
                }
            }
            (v, shape)
        }
        Recipe::BnFoldBias {
            bias,
            gamma,
            beta,
            mean,
            var,
            eps,
        } => {
            let mean = f64s(get(mean)?);
            let c = mean.len();
            let var = channels(var, c, "running_var")?;
            let (bias, gamma, beta) = (
                opt(bias, c, "conv bias")?,
                opt(gamma, c, "weight")?,
                opt(beta, c, "bias")?,
            );
            let v = (0..c)
                .map(|i| {
                    let b = bias.as_ref().map_or(0.0, |b| b[i]);
                    let g = gamma.as_ref().map_or(1.0, |g| g[i]);
                    let be = beta.as_ref().map_or(0.0, |b| b[i]);
                    (b - mean[i]) * g / (var[i] + eps).sqrt() + be
                })
                .collect();
            (v, vec![c])
        }
        Recipe::BnScale { gamma, var, eps } => {
            let var = f64s(get(var)?);
            let gamma = opt(gamma, var.len(), "weight")?;
            let v = (0..var.len())
                .map(|i| gamma.as_ref().map_or(1.0, |g| g[i]) / (var[i] + eps).sqrt())
                .collect();
            (v, vec![var.len()])
        }
        Recipe::BnShift {
            gamma,
            beta,
            mean,
            var,
            eps,
        } => {
            let var = f64s(get(var)?);
            let c = var.len();
            let mean = channels(mean, c, "running_mean")?;
            let (gamma, beta) = (opt(gamma, c, "weight")?, opt(beta, c, "bias")?);
            let v = (0..var.len())
                .map(|i| {
                    let g = gamma.as_ref().map_or(1.0, |g| g[i]);
                    beta.as_ref().map_or(0.0, |b| b[i]) - mean[i] * g / (var[i] + eps).sqrt()
                })
                .collect();
            (v, vec![var.len()])
        }
    };
    pad_into(w, &vals, &shape).map_err(err)
}

/// Places `vals` (of `shape`) into a zero tensor of the slot's shape: identical shapes,
/// a per-channel vector into a [1, C, 1, ..] slot, or zero padding of any dim.
fn pad_into(
    w: &WeightSlot,
    vals: &[f64],
    shape: &[usize],
) -> std::result::Result<HostTensor, String> {
    let mut out = HostTensor::zeros(w.dtype, w.shape.clone());
    let numel = |s: &[usize]| s.iter().product::<usize>();
    // Drop size-1 dims to compare a [C] vector with a [1, C, 1, 1] slot.
    let squeeze = |s: &[usize]| s.iter().copied().filter(|&d| d != 1).collect::<Vec<_>>();
    let (src_shape, dst_shape): (Vec<usize>, Vec<usize>) = if shape.len() == w.shape.len() {
        (shape.to_vec(), w.shape.clone())
    } else if numel(shape) == numel(&w.shape) && squeeze(shape) == squeeze(&w.shape) {
        (vec![numel(shape)], vec![numel(shape)])
    } else if squeeze(shape).len() <= 1 && squeeze(&w.shape).len() <= 1 {
        (vec![numel(shape)], vec![numel(&w.shape)])
    } else {
        return Err(format!(
            "recipe result {shape:?} does not fit the slot shape {:?}",
            w.shape
        ));
    };
    if src_shape.iter().zip(&dst_shape).any(|(s, d)| s > d) {
        return Err(format!(
            "recipe result {shape:?} is larger than the slot shape {:?}",
            w.shape
        ));
    }
    let dst_strides = npu_program::program::dense_strides(&dst_shape);
    let mut idx = vec![0usize; src_shape.len()];
    for (i, &v) in vals.iter().enumerate().take(numel(&src_shape)) {
        let mut rem = i;
        for d in (0..src_shape.len()).rev() {
            idx[d] = rem % src_shape[d];
            rem /= src_shape[d];
        }
        let off: usize = idx.iter().zip(&dst_strides).map(|(a, b)| a * b).sum();
        store_f64(out.bytes_mut(), w.dtype, off, v);
    }
    Ok(out)
}
