//! Everything the `npu` command writes: standard output that behaves like a Unix tool when
//! the reader goes away (`npu describe | head`), and output files that never lose data.
//!
//! Output files are written atomically (a temporary file in the same directory, then a
//! rename), so a failed write leaves the previous file intact; and an output that names one
//! of the command's inputs (same canonical path or same inode, hard links and symlinks
//! included) is refused before anything runs.

use anyhow::{bail, Context, Result};
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

pub fn write(args: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(args).and_then(|_| out.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("error: cannot write to stdout: {e}");
        std::process::exit(2);
    }
}

/// `println!` that survives a closed pipe.
macro_rules! say {
    () => { $crate::out::write(format_args!("\n")) };
    ($($t:tt)*) => { $crate::out::write(format_args!("{}\n", format_args!($($t)*))) };
}

/// The identity of an existing file: (device, inode) on Unix, its canonical path elsewhere.
fn identity(path: &Path) -> Option<(PathBuf, u64, u64)> {
    let canon = fs::canonicalize(path).ok()?;
    let meta = fs::metadata(&canon).ok()?;
    #[cfg(unix)]
    let (dev, ino) = {
        use std::os::unix::fs::MetadataExt;
        (meta.dev(), meta.ino())
    };
    #[cfg(not(unix))]
    let (dev, ino) = {
        let _ = meta;
        (0, 0)
    };
    Some((canon, dev, ino))
}

fn same_file(a: &(PathBuf, u64, u64), b: &(PathBuf, u64, u64)) -> bool {
    a.0 == b.0 || (cfg!(unix) && a.1 == b.1 && a.2 == b.2)
}

/// Refuses an `output` that is one of `inputs` (what the command reads: model, program,
/// weights, inputs). Call before any work, so a refused command has no effect at all.
pub fn refuse_alias(output: &Path, what: &str, inputs: &[(&str, &Path)]) -> Result<()> {
    let Some(out) = identity(output) else {
        return Ok(()); // not there yet: cannot be an existing input
    };
    for (role, input) in inputs {
        if identity(input).is_some_and(|i| same_file(&out, &i)) {
            bail!(
                "{what} {} is the {role} {}: refusing to overwrite an input",
                output.display(),
                input.display()
            );
        }
    }
    Ok(())
}

/// Writes `bytes` to `path` atomically: a temporary file next to it, flushed to disk, then
/// renamed over it. On failure the old file (if any) is intact, the temporary file is
/// removed, and the error names `path` ("cannot write PATH: cause"), never the temporary.
pub fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    write_atomic(path, bytes).with_context(|| format!("cannot write {}", path.display()))
}

fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    // Write through a symlink to the file it names, so the link survives.
    let target = match fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => fs::canonicalize(path)?,
        _ => path.to_path_buf(),
    };
    let dir = match target.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = target
        .file_name()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a file name"))?;
    if target.is_dir() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::IsADirectory,
            "is a directory",
        ));
    }
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".{}.tmp", std::process::id()));
    let tmp = dir.join(tmp_name);
    let result = (|| {
        let mut f = File::create_new(&tmp)?;
        f.write_all(bytes)?;
        if let Ok(old) = fs::metadata(&target) {
            f.set_permissions(old.permissions())?;
        }
        f.sync_all()?;
        drop(f);
        fs::rename(&tmp, &target)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("npu-out-{name}-{}", std::process::id()));
        fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn replaces_atomically_and_leaves_no_temporary() {
        let d = dir("atomic");
        let p = d.join("a.bin");
        fs::write(&p, b"old").unwrap();
        write_file(&p, b"new").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"new");
        assert_eq!(fs::read_dir(&d).unwrap().count(), 1);
        fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn a_failed_write_names_the_real_path_and_keeps_the_old_file() {
        let d = dir("fail");
        // The output's directory does not exist: nothing can be created.
        let p = d.join("missing").join("x.npubin");
        let e = format!("{:#}", write_file(&p, b"x").unwrap_err());
        assert!(
            e.starts_with(&format!("cannot write {}:", p.display())),
            "{e}"
        );
        assert!(!e.contains(".tmp"), "{e}");
        // A directory in the way.
        let e = format!("{:#}", write_file(&d, b"x").unwrap_err());
        assert!(e.contains("cannot write"), "{e}");
        fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn aliases_are_refused_by_path_link_and_inode() {
        let d = dir("alias");
        let input = d.join("model.ir.json");
        fs::write(&input, b"{}").unwrap();
        let inputs = [("model", input.as_path())];
        assert!(refuse_alias(&input, "output", &inputs).is_err());
        let dotted = d.join(".").join("model.ir.json");
        assert!(refuse_alias(&dotted, "output", &inputs).is_err());
        #[cfg(unix)]
        {
            let hard = d.join("hard.json");
            fs::hard_link(&input, &hard).unwrap();
            assert!(refuse_alias(&hard, "output", &inputs).is_err());
            let soft = d.join("soft.json");
            std::os::unix::fs::symlink(&input, &soft).unwrap();
            assert!(refuse_alias(&soft, "output", &inputs).is_err());
        }
        assert!(refuse_alias(&d.join("new.npubin"), "output", &inputs).is_ok());
        fs::remove_dir_all(&d).ok();
    }
}
