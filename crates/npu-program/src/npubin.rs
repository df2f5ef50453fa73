//! The `.npubin` file: a versioned, checksummed binary container for a [`Program`].
//!
//! Layout (little-endian):
//! `magic "NPUBIN\0\0"` | `format version u32` | `target: u16 length + UTF-8` |
//! `compute dtype: u8 length + UTF-8` | `payload length u64` | `payload (bincode Program)` |
//! `CRC-32 of the payload u32`.
//! The header repeats target and dtype so tools can read them without decoding the payload.

use crate::program::Program;
use bincode::Options;
use npu_ir::DType;
use std::path::Path;

pub const MAGIC: &[u8; 8] = b"NPUBIN\0\0";
/// 2: `Kernel::Gemm` gained `residual`, `Recipe::Concat` was added.
/// 3: `Kernel::Conv2d` gained `residual`.
pub const FORMAT_VERSION: u32 = 3;

#[derive(Debug, thiserror::Error)]
pub enum NpubinError {
    #[error("cannot read {path}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write {path}")]
    Write {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("not an .npubin file (bad magic at offset 0)")]
    NotNpubin,
    #[error("truncated .npubin: needed {needed} bytes at offset {offset}, the file has {len}")]
    Truncated {
        offset: usize,
        needed: usize,
        len: usize,
    },
    #[error(".npubin format version {found} is newer than this build supports ({supported}); upgrade npu")]
    NewerVersion { found: u32, supported: u32 },
    #[error(".npubin format version {0} is not supported")]
    BadVersion(u32),
    #[error("corrupt .npubin: {0}")]
    Corrupt(String),
    #[error("{path}")]
    InFile {
        path: String,
        #[source]
        source: Box<NpubinError>,
    },
}

fn codec() -> impl Options {
    bincode::DefaultOptions::new()
        .with_fixint_encoding()
        .with_little_endian()
}

pub fn to_bytes(p: &Program) -> Vec<u8> {
    let payload = codec().serialize(p).expect("a Program always serializes");
    let mut out = Vec::with_capacity(payload.len() + 64);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&(p.target.len() as u16).to_le_bytes());
    out.extend_from_slice(p.target.as_bytes());
    let dt = p.compute_dtype.name();
    out.push(dt.len() as u8);
    out.extend_from_slice(dt.as_bytes());
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(&payload);
    out.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
    out
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], NpubinError> {
        if self.b.len() - self.at < n {
            return Err(NpubinError::Truncated {
                offset: self.at,
                needed: n,
                len: self.b.len(),
            });
        }
        let s = &self.b[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }
    fn u32(&mut self) -> Result<u32, NpubinError> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
}

pub fn from_bytes(b: &[u8]) -> Result<Program, NpubinError> {
    let mut r = Reader { b, at: 0 };
    let magic = r.take(MAGIC.len()).map_err(|_| NpubinError::NotNpubin)?;
    if magic != MAGIC {
        return Err(NpubinError::NotNpubin);
    }
    match r.u32()? {
        FORMAT_VERSION => {}
        v if v > FORMAT_VERSION => {
            return Err(NpubinError::NewerVersion {
                found: v,
                supported: FORMAT_VERSION,
            })
        }
        v => return Err(NpubinError::BadVersion(v)),
    }
    let tlen = u16::from_le_bytes(r.take(2)?.try_into().expect("2 bytes")) as usize;
    let raw = r.take(tlen)?;
    let target = std::str::from_utf8(raw)
        .ok()
        .filter(|t| !t.is_empty() && t.len() <= 64 && t.bytes().all(|b| b.is_ascii_graphic()))
        .ok_or_else(|| NpubinError::Corrupt(format!("bad target name {}", printable(raw))))?
        .to_string();
    let dlen = r.take(1)?[0] as usize;
    let raw = r.take(dlen)?;
    let dtype = std::str::from_utf8(raw)
        .ok()
        .and_then(DType::parse)
        .ok_or_else(|| NpubinError::Corrupt(format!("unknown compute dtype {}", printable(raw))))?;
    let plen = u64::from_le_bytes(r.take(8)?.try_into().expect("8 bytes"));
    let plen = usize::try_from(plen)
        .map_err(|_| NpubinError::Corrupt("payload length overflows".into()))?;
    let payload = r.take(plen)?;
    let crc = r.u32()?;
    if r.at != b.len() {
        return Err(NpubinError::Corrupt(format!(
            "{} unexpected bytes after the checksum at offset {}",
            b.len() - r.at,
            r.at
        )));
    }
    if crc32fast::hash(payload) != crc {
        return Err(NpubinError::Corrupt("payload checksum mismatch".into()));
    }
    let p: Program = codec()
        .with_limit(plen as u64)
        .deserialize(payload)
        .map_err(|e| NpubinError::Corrupt(sanitize(&format!("payload does not decode: {e}"))))?;
    if p.target != target || p.compute_dtype != dtype {
        return Err(NpubinError::Corrupt(
            "header and payload disagree on target or dtype".into(),
        ));
    }
    p.validate()
        .map_err(|e| NpubinError::Corrupt(sanitize(&e)))?;
    Ok(p)
}

/// Header bytes for a message: a short printable ASCII string quoted, anything else as
/// hex of at most 16 bytes (a corrupt file never puts raw bytes on the terminal).
fn printable(raw: &[u8]) -> String {
    const MAX: usize = 16;
    if !raw.is_empty() && raw.len() <= MAX && raw.iter().all(|b| b.is_ascii_graphic() || *b == b' ')
    {
        return format!("'{}'", String::from_utf8_lossy(raw));
    }
    let hex: String = raw.iter().take(MAX).map(|b| format!("{b:02x}")).collect();
    let more = if raw.len() > MAX { "..." } else { "" };
    format!("(hex {hex}{more}, {} bytes)", raw.len())
}

/// A message that may quote payload strings, with control characters escaped and its
/// length bounded.
fn sanitize(msg: &str) -> String {
    let mut out = String::new();
    for c in msg.chars() {
        if out.len() >= 300 {
            out.push_str("...");
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

pub fn save(p: &Program, path: &Path) -> Result<(), NpubinError> {
    std::fs::write(path, to_bytes(p)).map_err(|e| NpubinError::Write {
        path: path.display().to_string(),
        source: e,
    })
}

pub fn load(path: &Path) -> Result<Program, NpubinError> {
    let b = std::fs::read(path).map_err(|e| NpubinError::Io {
        path: path.display().to_string(),
        source: e,
    })?;
    from_bytes(&b).map_err(|e| NpubinError::InFile {
        path: path.display().to_string(),
        source: Box::new(e),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_corrupt_header_never_puts_raw_bytes_in_the_message() {
        let mut b = MAGIC.to_vec();
        b.extend(FORMAT_VERSION.to_le_bytes());
        b.extend(3u16.to_le_bytes());
        b.extend(b"npu");
        b.push(255);
        b.extend((0..255u8).map(|i| i.wrapping_mul(7)));
        b.extend([0u8; 12]);
        let e = from_bytes(&b).unwrap_err().to_string();
        assert!(e.contains("unknown compute dtype (hex 00070e151c"), "{e}");
        assert!(e.contains("..., 255 bytes)"), "{e}");
        assert!(e.chars().all(|c| !c.is_control()) && e.len() < 120, "{e}");
        assert_eq!(printable(b"f9"), "'f9'");
        assert_eq!(sanitize("a\u{1b}[2Jb"), "a\\u{1b}[2Jb");
    }
}
