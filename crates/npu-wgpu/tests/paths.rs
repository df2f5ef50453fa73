//! Which body the generated shaders take: decode-shaped GEMMs read their weights 16 bytes a
//! load, decode attention splits over the key axis (its keys read 16 bytes a load), and shapes that break the fast paths'
//! conditions keep the general bodies (the conformance suite checks all of them for values).

use npu_conformance::{cases, Case, Family, SEED};
use npu_wgpu::wgsl::{self, Caps, Layout};

fn shader(case: &Case) -> wgsl::Shader {
    let program = case.program();
    let step = &program.steps[0];
    let mut slots = Vec::new();
    let (ops, buffers) = wgsl::operands(step, |b| {
        let key = format!("{:?}", b.slot);
        slots.iter().position(|s| *s == key).unwrap_or_else(|| {
            slots.push(key);
            slots.len() - 1
        })
    });
    let caps = Caps {
        workgroup_bytes: 32 << 10,
    };
    wgsl::shader(step, &ops, &buffers, &|_| Layout::WHOLE, caps).expect("a shader")
}

fn find(family: Family, name: &str) -> Case {
    cases(family, SEED, false)
        .into_iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no case '{name}'"))
}

#[test]
fn decode_gemms_read_16_bytes_a_load() {
    for name in [
        "gemv bfloat16 1x1536x1000 bias+silu",
        "gemv float16 1x256x9001 bias+silu",
        "gemm bf16 1x1536x1536 wT + residual",
        "gemm bfloat16 1x1536x2048 rms_norm prologue + bias",
    ] {
        let s = shader(&find(Family::Gemm, name));
        assert!(s.source.contains("wv1("), "{name}");
        assert_eq!(s.passes[0].lanes, 256, "{name}");
    }
    // Odd K, a weight along N, many rows: the general body.
    for name in [
        "gemv bfloat16 1x1533x77 bias+silu",
        "gemm bf16 128x1536x960 wT bias",
    ] {
        let s = shader(&find(Family::Gemm, name));
        assert!(!s.source.contains("wv1("), "{name}");
    }
}

#[test]
fn decode_attention_splits_over_keys() {
    let s = shader(&find(
        Family::Attention,
        "attention bfloat16 b1 h12/2 s1 t8500 d128 mask, NaN/Inf in masked slots",
    ));
    assert_eq!(s.passes.len(), 2);
    // Keys 16 bytes a load.
    assert!(s.source.contains("wv1("));
    // 12 rows, 67 blocks of 128 keys each, then one merge per row.
    assert_eq!(s.passes[0].items, 12 * 67);
    assert_eq!(s.passes[1].items, 12);
    assert_eq!(s.scratch_bytes, 4 * 12 * 67 * 130);
}
