//! NVRTC compilation to CUBIN (machine code for the device's architecture, so the driver
//! loads it without a JIT at every start) with an on-disk cache keyed by source,
//! architecture and this crate's version (`$NPU_CUDA_CACHE`, else
//! `$XDG_CACHE_HOME/npu-cuda`, else `~/.cache/npu-cuda`; caching is skipped when no
//! directory can be made). A cache hit neither loads nor needs libnvrtc.

use crate::error::{CudaError, CudaResult};
use std::path::PathBuf;

/// FNV-1a, 64 bits: a stable hash for cache keys.
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn cache_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("NPU_CUDA_CACHE") {
        return Some(PathBuf::from(d));
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return Some(PathBuf::from(d).join("npu-cuda"));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache").join("npu-cuda"))
}

/// CUBIN for `src` on compute capability `arch`.
pub(crate) fn compile_cached(src: &str, arch: (i32, i32), what: &str) -> CudaResult<Vec<u8>> {
    let key = format!(
        "{src}\n// sm_{}{} npu-cuda {}",
        arch.0,
        arch.1,
        env!("CARGO_PKG_VERSION")
    );
    let file = cache_dir().map(|d| d.join(format!("{:016x}.cubin", fnv1a(key.as_bytes()))));
    if let Some(f) = &file {
        if let Ok(bin) = std::fs::read(f) {
            // An ELF header at least: a truncated or foreign file is compiled again.
            if bin.len() > 64 && bin.starts_with(b"\x7fELF") {
                return Ok(bin);
            }
        }
    }
    let bin = compile(src, arch, what)?;
    if let Some(f) = &file {
        if let Some(dir) = f.parent() {
            if std::fs::create_dir_all(dir).is_ok() {
                // Write then rename, so a concurrent reader never sees half a file.
                let tmp = f.with_extension(format!("tmp{}", std::process::id()));
                if std::fs::write(&tmp, &bin).is_ok() {
                    let _ = std::fs::rename(&tmp, f);
                }
            }
        }
    }
    Ok(bin)
}

fn compile(src: &str, arch: (i32, i32), what: &str) -> CudaResult<Vec<u8>> {
    compile_with(src, arch, what, &[]).map(|(bin, _)| bin)
}

/// `compile` with `extra` NVRTC options; also returns the program log (ptxas's report where
/// `extra` asks for it: `--ptxas-options=-v`).
fn compile_with(
    src: &str,
    arch: (i32, i32),
    what: &str,
    extra: &[&str],
) -> CudaResult<(Vec<u8>, String)> {
    use cudarc::nvrtc::{result, sys};
    let err = |message: String| CudaError::Compile {
        what: what.into(),
        message,
    };
    // SAFETY: only probes whether the shared library can be opened; cudarc's loader panics
    // on a missing library, so nothing below runs without it.
    if !unsafe { sys::is_culib_present() } {
        return Err(CudaError::MissingLibrary(format!(
            "the NVRTC library (libnvrtc.so), needed to compile {what} (the kernel cache has no build of it),"
        )));
    }
    let c_src = std::ffi::CString::new(src).map_err(|_| err("source holds a NUL byte".into()))?;
    let prog = result::create_program(&c_src, Some(c"npu_kernels.cu"))
        .map_err(|e| err(format!("creating the program: {e:?}")))?;
    let mut opts = vec![
        format!("--gpu-architecture=sm_{}{}", arch.0, arch.1),
        "--std=c++17".to_string(),
    ];
    opts.extend(extra.iter().map(|o| o.to_string()));
    // SAFETY: `prog` was created above and is destroyed once, below; `c_src` outlives it.
    let out = unsafe {
        let compiled = result::compile_program(prog, &opts);
        let log = result::get_program_log(prog)
            .map(|l| {
                let bytes: Vec<u8> = l.iter().map(|&c| c as u8).collect();
                String::from_utf8_lossy(&bytes)
                    .trim_end_matches('\0')
                    .trim()
                    .to_string()
            })
            .unwrap_or_default();
        let out = match compiled {
            Ok(()) => {
                let mut size = 0usize;
                let mut bin = Vec::new();
                let r = sys::nvrtcGetCUBINSize(prog, &mut size).result();
                let r = r.and_then(|()| {
                    bin.resize(size, 0u8);
                    sys::nvrtcGetCUBIN(prog, bin.as_mut_ptr().cast()).result()
                });
                r.map(|()| (bin, log))
                    .map_err(|e| err(format!("reading the CUBIN: {e:?}")))
            }
            Err(e) => Err(err(format!("{e:?}: {log}"))),
        };
        let _ = result::destroy_program(prog);
        out
    };
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use npu_ir::{BinaryOp, DType, UnaryOp};
    use npu_program::expr::{Expr, Instr};
    use npu_program::program::{Binding, Slot};

    fn nvrtc_present() -> bool {
        // SAFETY: only probes whether the library can be opened.
        unsafe { cudarc::nvrtc::sys::is_culib_present() }
    }

    /// Compiles the kernel library and a generated kernel with NVRTC alone (no GPU
    /// needed); skipped where libnvrtc is absent.
    #[test]
    fn kernels_compile_with_nvrtc() {
        if !nvrtc_present() {
            // scripts/test.sh counts this line as a skip, not a pass.
            println!("SKIP: kernels_compile_with_nvrtc: libnvrtc is not installed");
            return;
        }
        // NPU_CUDA_DUMP_DIR (scripts/kernel-sass.sh): the library's sm_90 CUBIN and ptxas's
        // register and spill report, for reading the machine code without a GPU
        let dump = std::env::var_os("NPU_CUDA_DUMP_DIR").map(std::path::PathBuf::from);
        let extra: &[&str] = if dump.is_some() {
            &["--ptxas-options=-v"]
        } else {
            &[]
        };
        let (bin, log) = compile_with(
            &crate::device::library_source(),
            (9, 0),
            "the kernel library",
            extra,
        )
        .unwrap();
        if let Some(dir) = dump {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("library.cubin"), bin).unwrap();
            std::fs::write(dir.join("ptxas.log"), log).unwrap();
        }
        let b = |shape: Vec<usize>, strides: Vec<usize>, dtype| Binding {
            slot: Slot::Arena,
            byte_offset: 0,
            shape,
            strides,
            dtype,
        };
        let expr = Expr {
            code: vec![
                Instr::Load(0),
                Instr::Unary(UnaryOp::Silu),
                Instr::Load(1),
                Instr::Binary(BinaryOp::Mul),
                Instr::Const(0.5),
                Instr::Binary(BinaryOp::Pow),
                Instr::Clamp {
                    min: Some(-1.0),
                    max: None,
                },
                Instr::Cast(DType::BF16),
            ],
        };
        let ins = [
            b(vec![2, 3], vec![3, 1], DType::BF16),
            b(vec![2, 3], vec![0, 1], DType::F32),
        ];
        let out = b(vec![2, 3], vec![3, 1], DType::F16);
        let (code, name) = crate::elementwise::generate(&expr, &ins, &out);
        assert!(code.contains(&name));
        let src = format!("{}\n{code}", crate::elementwise::common_source());
        compile(&src, (9, 0), "a generated kernel").unwrap();
        // the 8-wide form: dense operands of 16-bit and f32 dtypes, a count divisible by 8
        let ins = [
            b(vec![4, 8], vec![8, 1], DType::BF16),
            b(vec![4, 8], vec![8, 1], DType::F32),
        ];
        let out = b(vec![4, 8], vec![8, 1], DType::F16);
        assert_eq!(crate::elementwise::per_thread(&ins, &out), 8);
        let (code, _) = crate::elementwise::generate(&expr, &ins, &out);
        assert!(code.contains("ld8(") && code.contains("st8("));
        let src = format!("{}\n{code}", crate::elementwise::common_source());
        compile(&src, (9, 0), "an 8-wide generated kernel").unwrap();
        // every row of the pointwise table, as the code generator emits it, in one module
        let mut exprs: Vec<Vec<Instr>> = Vec::new();
        for u in UnaryOp::all() {
            exprs.push(vec![Instr::Load(0), Instr::Unary(u)]);
        }
        for op in BinaryOp::all() {
            exprs.push(vec![Instr::Load(0), Instr::Load(1), Instr::Binary(op)]);
        }
        for op in npu_ir::TernaryOp::all() {
            exprs.push(vec![
                Instr::Load(0),
                Instr::Load(1),
                Instr::Load(0),
                Instr::Ternary(op),
            ]);
        }
        let f32s = |strides: Vec<usize>| b(vec![2, 3], strides, DType::F32);
        let ins = [f32s(vec![3, 1]), f32s(vec![0, 1])];
        let mut all = crate::elementwise::common_source();
        let mut names = std::collections::HashSet::new();
        for code in exprs {
            let (k, name) = crate::elementwise::generate(&Expr { code }, &ins, &f32s(vec![3, 1]));
            if names.insert(name) {
                all.push('\n');
                all.push_str(&k);
            }
        }
        compile(&all, (9, 0), "every pointwise table row").unwrap();
    }
}
