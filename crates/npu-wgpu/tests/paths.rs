//! Which body the generated shaders take: decode-shaped GEMMs read their weights 16 bytes a
//! load, decode attention splits over the key axis (its keys and values read 16 bytes a
//! load), a decoder layer's RoPE and cache writes are one dispatch, and shapes that break
//! the fast paths' conditions keep the general bodies (the conformance suite checks all of
//! them for values).

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
    // Keys and values 16 bytes a load.
    assert!(s.source.contains("wv1("));
    assert!(s.source.contains("wv2("));
    // 12 rows, 67 blocks of 128 keys each, then one merge per row.
    assert_eq!(s.passes[0].items, 12 * 67);
    assert_eq!(s.passes[1].items, 12);
    assert_eq!(s.scratch_bytes, 4 * 12 * 67 * 130);
}

#[test]
fn a_decoder_layers_rope_and_cache_writes_are_one_dispatch() {
    use npu_program::groups::{fixtures::decoder_layer, rope_cache};
    let steps = decoder_layer();
    let g = rope_cache(&steps).expect("a group");
    let step = wgsl::rope_cache::combined(&g);
    let (ops, buffers) = wgsl::operands(&step, |b| match b.slot {
        npu_program::program::Slot::Input(i) => 1 + i as usize,
        _ => 0,
    });
    let s = wgsl::rope_cache_shader(&g, &ops, &buffers, &|_| Layout::WHOLE).expect("a shader");
    assert_eq!(s.passes.len(), 1);
    // One thread per element of q (12 heads), k and v (2 heads each) of 128 dims.
    assert_eq!(s.passes[0].items, (12 + 2 + 2) * 128);
}
