//! `.npubin` round trip and every way a file can be bad.

use npu_compiler::npubin::{from_bytes, to_bytes, FORMAT_VERSION, MAGIC};
use npu_compiler::target::NPU;
use npu_compiler::{compile, CompileOptions, NpubinError};
use std::path::PathBuf;

fn bytes() -> Vec<u8> {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/small-cnn/model.ir.json");
    let (p, _) = compile(
        npu_ir::load(&path).unwrap(),
        &CompileOptions {
            target: &NPU,
            dtype: None,
        },
    )
    .unwrap();
    to_bytes(&p)
}

#[test]
fn round_trip_through_a_file() {
    let b = bytes();
    let p = from_bytes(&b).unwrap();
    let dir = std::env::temp_dir().join(format!("npubin-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("m.npubin");
    npu_compiler::npubin::save(&p, &f).unwrap();
    assert_eq!(npu_compiler::npubin::load(&f).unwrap(), p);
    let err = npu_compiler::npubin::load(&dir.join("missing.npubin"))
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("cannot read") && err.contains("missing.npubin"),
        "{err}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn truncated_files_name_the_offset() {
    let b = bytes();
    for cut in [0, 4, 9, 14, 30, b.len() / 2, b.len() - 1] {
        let err = from_bytes(&b[..cut]).unwrap_err();
        let msg = err.to_string();
        match cut {
            0 | 4 => assert!(matches!(err, NpubinError::NotNpubin), "{cut}: {msg}"),
            _ => assert!(msg.starts_with("truncated .npubin: needed"), "{cut}: {msg}"),
        }
    }
}

#[test]
fn corrupt_foreign_and_newer_files_are_rejected() {
    let b = bytes();
    let mut flipped = b.clone();
    let mid = b.len() / 2;
    flipped[mid] ^= 0x40;
    assert_eq!(
        from_bytes(&flipped).unwrap_err().to_string(),
        "corrupt .npubin: payload checksum mismatch"
    );

    let mut foreign = b.clone();
    foreign[..4].copy_from_slice(b"\x7fELF");
    assert_eq!(
        from_bytes(&foreign).unwrap_err().to_string(),
        "not an .npubin file (bad magic at offset 0)"
    );
    assert!(from_bytes(b"{\"format\": \"npubin\"}").is_err());

    let mut newer = b.clone();
    newer[MAGIC.len()..MAGIC.len() + 4].copy_from_slice(&(FORMAT_VERSION + 1).to_le_bytes());
    let msg = from_bytes(&newer).unwrap_err().to_string();
    assert!(
        msg.contains(&format!("version {} is newer", FORMAT_VERSION + 1)),
        "{msg}"
    );

    let mut old = b.clone();
    old[MAGIC.len()..MAGIC.len() + 4].copy_from_slice(&0u32.to_le_bytes());
    assert_eq!(
        from_bytes(&old).unwrap_err().to_string(),
        ".npubin format version 0 is not supported"
    );

    let mut trailing = b.clone();
    trailing.extend_from_slice(b"junk");
    assert!(from_bytes(&trailing)
        .unwrap_err()
        .to_string()
        .contains("unexpected bytes after the checksum"));
}

/// Found by the `.npubin` fuzzer: a stride-0 binding whose logical size overflows a usize fits
/// a one-element slot by its end byte; validation refuses it before a kernel counts elements.
#[test]
fn a_binding_whose_element_count_overflows_is_refused() {
    let mut p = from_bytes(&bytes()).unwrap();
    let b = &mut p.steps[0].inputs[0];
    b.shape = vec![1 << 40, 1 << 40, 1, 1];
    b.strides = vec![0, 0, 0, 0];
    let e = p.validate().unwrap_err();
    assert!(e.contains("more elements than fit"), "{e}");
}
