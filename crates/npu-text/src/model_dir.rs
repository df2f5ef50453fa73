//! A model directory as the export tool writes it: `prefill.ir.json`, `decode.ir.json`,
//! `weights.safetensors`, and the tokenizer files. The graphs are compiled on first use into
//! `.npu-cache/` beside them and the compiled `.npubin` is reused while the IR, the compile
//! options and the compiler (the caller's `salt`) stay the same. A directory with only
//! `prefill.npubin` / `decode.npubin` (compiled by hand) is used as it is.

use crate::error::{Result, TextError};
use npu_compiler::{npubin, CompileOptions, Program};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The cache folder inside a model directory.
pub const CACHE_DIR: &str = ".npu-cache";

/// Where one graph comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum GraphFile {
    /// IR JSON, compiled (and cached) on use.
    Ir(PathBuf),
    /// An already compiled program.
    Program(PathBuf),
}

impl GraphFile {
    pub fn path(&self) -> &Path {
        match self {
            GraphFile::Ir(p) | GraphFile::Program(p) => p,
        }
    }
}

/// What loading reports, for a progress display.
#[derive(Debug)]
pub enum LoadEvent<'a> {
    /// Compiling this IR file (no usable cached program).
    Compiling(&'a Path),
    /// Compiled in `seconds`; written to `cache` (None when it could not be written: `why`).
    Compiled {
        ir: &'a Path,
        seconds: f64,
        cache: Option<&'a Path>,
        why: Option<String>,
    },
    /// Reused this cached program.
    Cached(&'a Path),
}

/// The files of a model directory.
#[derive(Debug, Clone)]
pub struct ModelDir {
    pub dir: PathBuf,
    pub prefill: GraphFile,
    pub decode: GraphFile,
    pub weights: PathBuf,
}

fn graph_file(dir: &Path, name: &str) -> Result<GraphFile> {
    let ir = dir.join(format!("{name}.ir.json"));
    let bin = dir.join(format!("{name}.npubin"));
    if ir.is_file() {
        Ok(GraphFile::Ir(ir))
    } else if bin.is_file() {
        Ok(GraphFile::Program(bin))
    } else {
        Err(TextError::ModelDir {
            dir: dir.to_path_buf(),
            message: format!("no {name}.ir.json (nor {name}.npubin): not a model directory"),
        })
    }
}

impl ModelDir {
    /// Finds the graphs and the weights in `dir`.
    pub fn open(dir: &Path) -> Result<ModelDir> {
        if !dir.is_dir() {
            return Err(TextError::ModelDir {
                dir: dir.to_path_buf(),
                message: "is not a directory".into(),
            });
        }
        let weights = dir.join("weights.safetensors");
        if !weights.is_file() {
            return Err(TextError::ModelDir {
                dir: dir.to_path_buf(),
                message: "no weights.safetensors (an --ir-only export cannot generate)".into(),
            });
        }
        Ok(ModelDir {
            dir: dir.to_path_buf(),
            prefill: graph_file(dir, "prefill")?,
            decode: graph_file(dir, "decode")?,
            weights,
        })
    }
}

/// FNV-1a, 64 bits: a stable hash for cache keys (not for security).
fn fnv1a(h: u64, bytes: &[u8]) -> u64 {
    bytes.iter().fold(h, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The program of `graph`: loaded when compiled already; else compiled with `opts`, reusing
/// and filling the cache in `cache_dir`. `salt` names the compiler build, so that a
/// different compiler never reuses another's output.
pub fn load_program(
    graph: &GraphFile,
    opts: &CompileOptions,
    cache_dir: &Path,
    salt: &str,
    events: &mut dyn FnMut(LoadEvent<'_>),
) -> Result<Program> {
    let ir = match graph {
        GraphFile::Program(p) => {
            return npubin::load(p).map_err(|e| TextError::Compile {
                path: p.clone(),
                source: Box::new(e),
            })
        }
        GraphFile::Ir(p) => p,
    };
    let bytes = std::fs::read(ir).map_err(|e| TextError::io(ir, e))?;
    let dtype = opts.dtype.map_or("auto", |d| d.name());
    let mut key = fnv1a(0xcbf2_9ce4_8422_2325, &bytes);
    key = fnv1a(key, opts.target.name.as_bytes());
    key = fnv1a(key, dtype.as_bytes());
    key = fnv1a(key, &npubin::FORMAT_VERSION.to_le_bytes());
    key = fnv1a(key, salt.as_bytes());
    let stem = ir
        .file_name()
        .and_then(|n| n.to_str())
        .map_or("graph", |n| {
            n.trim_end_matches(".json").trim_end_matches(".ir")
        });
    let prefix = format!("{stem}.{}.{dtype}.", opts.target.name);
    let cached = cache_dir.join(format!("{prefix}{key:016x}.npubin"));
    if cached.is_file() {
        // A damaged cache file is compiled again (and replaced), never an error.
        if let Ok(p) = npubin::load(&cached) {
            events(LoadEvent::Cached(&cached));
            return Ok(p);
        }
    }
    events(LoadEvent::Compiling(ir));
    let t = Instant::now();
    let text = String::from_utf8(bytes).map_err(|e| TextError::Compile {
        path: ir.clone(),
        source: Box::new(e),
    })?;
    let compile_err = |e: Box<dyn std::error::Error + Send + Sync>| TextError::Compile {
        path: ir.clone(),
        source: e,
    };
    let graph = npu_ir::parse_str(&text).map_err(|e| compile_err(Box::new(e)))?;
    npu_runtime::limits::check_graph(&graph).map_err(|e| compile_err(Box::new(e)))?;
    let (program, _) = npu_compiler::compile(graph, opts).map_err(|e| compile_err(Box::new(e)))?;
    let seconds = t.elapsed().as_secs_f64();
    let written = write_cache(cache_dir, &cached, &prefix, &npubin::to_bytes(&program));
    events(LoadEvent::Compiled {
        ir,
        seconds,
        cache: written.is_ok().then_some(cached.as_path()),
        why: written.err().map(|e| e.to_string()),
    });
    Ok(program)
}

/// Writes `bytes` to `path` atomically (a temporary file, then a rename), then removes the
/// older programs of the same graph and options (`prefix*`).
fn write_cache(dir: &Path, path: &Path, prefix: &str, bytes: &[u8]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(".tmp.{}.{}", std::process::id(), prefix));
    std::fs::write(&tmp, bytes)
        .and_then(|_| std::fs::rename(&tmp, path))
        .inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })?;
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            let name = e.file_name();
            let name = name.to_string_lossy();
            if p != path && name.starts_with(prefix) && name.ends_with(".npubin") {
                let _ = std::fs::remove_file(&p);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_without_graphs_or_weights_is_named() {
        let d = std::env::temp_dir().join(format!("npu-text-md-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let e = ModelDir::open(&d).unwrap_err().to_string();
        assert!(e.contains("weights.safetensors"), "{e}");
        std::fs::write(d.join("weights.safetensors"), b"").unwrap();
        let e = ModelDir::open(&d).unwrap_err().to_string();
        assert!(e.contains("prefill.ir.json"), "{e}");
        let e = ModelDir::open(&d.join("nope")).unwrap_err().to_string();
        assert!(e.contains("not a directory"), "{e}");
        std::fs::remove_dir_all(&d).ok();
    }
}
