//! The fuzz targets. Each takes raw bytes and returns an outcome signature (which error
//! class, or success) that the driver uses as cheap feedback; a panic is a crash. Beyond
//! "no panic", targets assert the invariants the project promises: anything `check`
//! accepts compiles, a compiled program survives an `.npubin` round trip, a loaded program
//! runs or refuses cleanly.

use crate::mutate::Unstructured;
use npu_compiler::npubin::{self, MAGIC};
use npu_compiler::target::NPU;
use npu_compiler::{CompileOptions, Program};
use npu_ir::DType;
use npu_runtime::{Backend, CpuBackend, HostTensor, MemoryWeights};
use std::sync::OnceLock;

/// A fuzz target: its name, the function, an optional fix-up applied to half the mutated
/// inputs (recomputing lengths and checksums so mutations reach deeper than the header),
/// and the biggest input worth trying.
pub struct Target {
    pub name: &'static str,
    pub run: fn(&[u8]) -> String,
    pub fixup: Option<fn(&mut [u8])>,
    pub max_len: usize,
}

pub const TARGETS: [Target; 4] = [
    Target {
        name: "ir",
        run: ir,
        fixup: None,
        max_len: 256 << 10,
    },
    Target {
        name: "npubin",
        run: npubin_load,
        fixup: Some(fix_npubin),
        max_len: 256 << 10,
    },
    Target {
        name: "safetensors",
        run: safetensors,
        fixup: Some(fix_safetensors),
        max_len: 64 << 10,
    },
    Target {
        name: "input",
        run: input,
        fixup: None,
        max_len: 4 << 10,
    },
];

pub fn by_name(name: &str) -> Option<&'static Target> {
    TARGETS.iter().find(|t| t.name == name)
}

/// Tensors, arenas and weights above this are refused by the size policy (keeps every
/// execution small; the policy itself is what is under test).
pub const MEMORY_LIMIT: u64 = 64 << 20;

/// An error's class: its message with numbers and quoted names blanked, shortened.
fn class(stage: &str, e: &dyn std::error::Error) -> String {
    let msg = npu_ir::error_chain(e);
    let mut out = String::from(stage);
    out.push(':');
    let mut quoted = false;
    for c in msg.chars().take(80) {
        match c {
            '\'' | '`' => quoted = !quoted,
            _ if quoted => {}
            '0'..='9' => {
                if !out.ends_with('#') {
                    out.push('#');
                }
            }
            _ => out.push(c),
        }
    }
    out
}

/// IR JSON: parse, size policy, `check` and `compile` (which must agree), `.npubin` round trip.
pub fn ir(data: &[u8]) -> String {
    npu_runtime::limits::set_memory_limit(Some(MEMORY_LIMIT));
    let Ok(text) = std::str::from_utf8(data) else {
        return "not utf-8".into();
    };
    let g = match npu_ir::parse_str(text) {
        Ok(g) => g,
        Err(e) => return class("parse", &e),
    };
    if let Err(e) = npu_runtime::limits::check_graph(&g) {
        return class("size", &e);
    }
    let violations = match npu_compiler::check(g.clone(), &NPU) {
        Ok(v) => v,
        Err(e) => return class("check", &e),
    };
    let compiled = npu_compiler::compile(g, &CompileOptions::default());
    match (violations.is_empty(), compiled) {
        (true, Err(e)) => panic!(
            "check accepts what compile refuses: {}",
            npu_ir::error_chain(&e)
        ),
        (false, Ok(_)) => panic!("compile accepts what check refuses: {}", violations[0]),
        (false, Err(e)) => class("compile", &e),
        (true, Ok((p, _))) => {
            let back = npubin::from_bytes(&npubin::to_bytes(&p))
                .unwrap_or_else(|e| panic!("a compiled program does not reload: {e}"));
            assert_eq!(back, p, "npubin round trip changed the program");
            format!("ok:{}", p.steps.len().min(16))
        }
    }
}

/// Zero-filled weights for every source a program declares, `None` when they would not
/// fit the memory limit (a weight file that large would be refused the same way).
fn zero_weights(p: &Program) -> Option<MemoryWeights> {
    let total = p.sources.iter().fold(0u128, |n, s| {
        n.saturating_add(npu_runtime::limits::tensor_bytes(&s.shape, s.dtype))
    });
    if total > u128::from(MEMORY_LIMIT) {
        return None;
    }
    let mut w = MemoryWeights::default();
    for s in &p.sources {
        w.0.insert(s.key.clone(), HostTensor::zeros(s.dtype, s.shape.clone()));
    }
    Some(w)
}

/// `.npubin` bytes: load (header, checksum, decode, validate); a program that loads is
/// prepared and run on the CPU backend with zero weights and inputs (validation promises
/// every kernel stays in bounds).
pub fn npubin_load(data: &[u8]) -> String {
    npu_runtime::limits::set_memory_limit(Some(MEMORY_LIMIT));
    let p = match npubin::from_bytes(data) {
        Ok(p) => p,
        Err(e) => return class("load", &e),
    };
    if let Err(e) = npu_runtime::limits::check_program(&p) {
        return class("size", &e);
    }
    if p.steps.len() > 2000 {
        return "ok:long".into();
    }
    let Some(w) = zero_weights(&p) else {
        return "size:sources".into();
    };
    let mut exe = match CpuBackend::new().prepare(&p, &w) {
        Ok(x) => x,
        Err(e) => return class("prepare", &e),
    };
    let inputs: Vec<(String, HostTensor)> = p
        .inputs
        .iter()
        .map(|i| (i.name.clone(), HostTensor::zeros(i.dtype, i.shape.clone())))
        .collect();
    let refs: Vec<(&str, &HostTensor)> = inputs.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let mut state = exe.new_state();
    match exe.run(&refs, state.as_mut()) {
        Ok(_) => "ok:ran".into(),
        Err(e) => class("run", &e),
    }
}

/// Recomputes an `.npubin`'s payload length and CRC so a mutated payload gets decoded.
pub fn fix_npubin(b: &mut [u8]) {
    let Some(rest) = b.strip_prefix(&MAGIC[..]) else {
        return;
    };
    let header = || -> Option<usize> {
        let tlen = u16::from_le_bytes(rest.get(4..6)?.try_into().ok()?) as usize;
        let dlen = *rest.get(6 + tlen)? as usize;
        Some(MAGIC.len() + 6 + tlen + 1 + dlen)
    };
    let Some(h) = header() else { return };
    if b.len() < h + 8 + 4 {
        return;
    }
    let plen = b.len() - h - 8 - 4;
    b[h..h + 8].copy_from_slice(&(plen as u64).to_le_bytes());
    let crc = crc32(&b[h + 8..h + 8 + plen]);
    let n = b.len();
    b[n - 4..].copy_from_slice(&crc.to_le_bytes());
}

/// CRC-32 (IEEE), bitwise: the fuzzer needs no dependency for it.
fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = (crc >> 1) ^ (0xedb8_8320 & (crc & 1).wrapping_neg());
        }
    }
    !crc
}

/// Safetensors bytes: the index (checked offsets and sizes) and every tensor read.
pub fn safetensors(data: &[u8]) -> String {
    match npu_runtime::safetensors_file::parse_safetensors(data, "fuzz.safetensors") {
        Ok(ts) => {
            for (_, t) in &ts {
                if t.numel() <= 1 << 16 {
                    let _ = t.to_f32_vec();
                    let _ = t.cast(DType::F32);
                }
            }
            format!("ok:{}", ts.len().min(8))
        }
        Err(e) => class("parse", &e),
    }
}

/// Makes the 8-byte header length match the JSON header that follows (up to the last
/// `}` in the first 4 KiB), so mutations of the header JSON are parsed.
pub fn fix_safetensors(b: &mut [u8]) {
    if b.len() < 10 {
        return;
    }
    let end = b.len().min(8 + 4096);
    if let Some(close) = b[8..end].iter().rposition(|&c| c == b'}') {
        let n = (close + 1) as u64;
        b[..8].copy_from_slice(&n.to_le_bytes());
    }
}

struct Mlp {
    program: Program,
    weights: MemoryWeights,
}

/// The MLP fixture compiled for the CPU, with its real weights.
fn mlp() -> &'static Mlp {
    static M: OnceLock<Mlp> = OnceLock::new();
    M.get_or_init(|| {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/mlp");
        let g = npu_ir::load(&dir.join("model.ir.json")).expect("the mlp fixture parses");
        let opts = CompileOptions {
            target: &npu_compiler::target::CPU,
            dtype: Some(DType::F32),
        };
        let (program, _) = npu_compiler::compile(g, &opts).expect("the mlp fixture compiles");
        let mut weights = MemoryWeights::default();
        let file = npu_runtime::read_safetensors(&dir.join("weights.safetensors"))
            .expect("the mlp weights load");
        weights.0.extend(file);
        Mlp { program, weights }
    })
}

/// Input matching: arbitrary named tensors (names, dtypes, shapes, values, NaN included)
/// given to the MLP program; the run either succeeds or refuses, naming the input.
pub fn input(data: &[u8]) -> String {
    npu_runtime::limits::set_memory_limit(Some(MEMORY_LIMIT));
    let m = mlp();
    let mut u = Unstructured::new(data);
    let names: Vec<&str> = m.program.inputs.iter().map(|i| i.name.as_str()).collect();
    let mut tensors: Vec<(String, HostTensor)> = Vec::new();
    for _ in 0..(u.byte() % 4) {
        let name = match u.byte() % 4 {
            0 | 1 => names[u.byte() as usize % names.len().max(1)].to_string(),
            2 => format!("input.{}", names.first().unwrap_or(&"x")),
            _ => {
                let n = u.byte() as usize % 12;
                String::from_utf8_lossy(u.bytes(n)).into_owned()
            }
        };
        let like = m.program.inputs.first();
        let dtype = DType::ALL[u.byte() as usize % DType::ALL.len()];
        let shape: Vec<usize> = match (u.byte() % 3, like) {
            (0 | 1, Some(io)) => io.shape.clone(),
            _ => (0..u.byte() % 10).map(|_| u.dim()).collect(),
        };
        let bytes = npu_runtime::limits::tensor_bytes(&shape, dtype);
        if bytes > 1 << 20 {
            continue; // cannot be built in memory: nothing to match
        }
        let mut data = vec![0u8; bytes as usize];
        let fill = u.bytes(data.len());
        data[..fill.len()].copy_from_slice(fill);
        // Shapes whose element count overflows are refused here already.
        if let Ok(t) = HostTensor::new(dtype, shape, data) {
            tensors.push((name, t));
        }
    }
    for (name, t) in &tensors {
        let _ = npu_runtime::match_input(&m.program, name, t);
    }
    let mut exe = CpuBackend::new()
        .prepare(&m.program, &m.weights)
        .expect("the mlp prepares");
    let refs: Vec<(&str, &HostTensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let mut state = exe.new_state();
    match exe.run(&refs, state.as_mut()) {
        Ok(_) => "ok".into(),
        Err(e) => class("run", &e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc_matches_the_reference() {
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
    }
}
